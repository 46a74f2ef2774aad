"""A real ``vllm bench serve`` run as llmsim reads it, and llmsim's run printed as the benchmark
prints its own: the result file ``--save-result`` writes (with ``--save-detailed``, every request
it sent), or the console printout (its ``Namespace(...)`` line and "Serving Benchmark Result"
block, vllm/benchmarks/serve.py); ``result_block`` and ``comparison_rows`` are what ``llmsim
bench`` prints. The settings read here are the names of ``vllmcli.Bench``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmsim.errors import UserError, cut

if TYPE_CHECKING:
    from llmsim.scenario import Scenario

# the settings of a run that decide what it sent and reports (vllm bench serve's Namespace names,
# vllmcli.Bench's fields)
SETTINGS = (
    *("dataset_name", "random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len"),
    *("num_prompts", "request_rate", "burstiness", "max_concurrency", "seed", "metric_percentiles"),
    "percentile_metrics",
)
# the figures a result holds that llmsim's summary has under the same key (vllm bench serve's)
FIGURES = (
    *("duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput"),
    *("output_throughput", "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests"),
)
WHOLE = ("completed", "total_input_tokens", "total_output_tokens")  # counts, not rates
MAX_RESULT_BYTES = 256 << 20  # every request's token gaps and texts: tens of MB for thousands of requests
MAX_PRINTOUT_BYTES = 64 << 20  # a console log of one benchmark run
SHORT = {"TTFT": "ttft", "TPOT": "tpot", "ITL": "itl", "E2EL": "e2el"}
HEADERS = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}
# the printed block's labels -> the result file's keys
PRINTED = {
    "Successful requests": "completed",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput",
    "Output token throughput (tok/s)": "output_throughput",
    "Peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "Peak concurrent requests": "max_concurrent_requests",
    "Total token throughput (tok/s)": "total_token_throughput",
}


@dataclass
class Result:
    """A real run: the benchmark settings it records (``settings``, named as Bench's fields), its
    figures (the result file's keys) and, from a ``--save-detailed`` file, the requests it sent
    that completed (``kept``: their places among the ``sent``) with their tokens and, from vLLM
    0.11 on, their send times."""

    path: Path
    model_id: str | None
    settings: dict[str, object]
    figures: dict[str, float]
    input_lens: list[int] | None = None
    output_lens: list[int] | None = None
    start_times: list[float] | None = None
    kept: list[int] | None = None
    sent: int = 0
    empty: int = 0  # requests that succeeded with no prompt or no output token: not replayable, left out

    def percentiles(self) -> list[float]:
        """The percentiles the result reports (p99_ttft_ms, p99.9_itl_ms, ...)."""
        found = (re.fullmatch(r"p([\d.]+)_\w+_ms", k) for k in self.figures)
        return sorted({float(m.group(1)) for m in found if m})


def load_result(path: str | Path) -> Result:
    """Read a real run's result file or printout; a problem is a UserError naming the file and the
    key or line."""
    from llmsim.errors import check_input_file

    path = Path(path)
    head = check_input_file(path, "a vllm bench serve result (JSON) or printout", MAX_RESULT_BYTES, "a result here")
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"["):
        return _result_file(path)
    if path.stat().st_size > MAX_PRINTOUT_BYTES:
        raise UserError(
            f"{path}: {path.stat().st_size:,} bytes, more than a printout here may hold ({MAX_PRINTOUT_BYTES:,})"
        )
    return _printout(path)


def _number(path: Path, key: str, value: object, whole: bool = False) -> float | None:
    if value is None:
        return None
    if key == "request_rate" and value == "inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise UserError(f"{path}: {key}: expected a finite number >= 0, got {cut(repr(value), 40)}")
    if whole and value != int(value):
        raise UserError(f"{path}: {key}: expected a whole number, got {cut(repr(value), 40)}")
    return int(value) if whole else float(value)


def _column(path: Path, key: str, value: object, n: int | None, whole: bool, high: float = math.inf) -> list:
    if not isinstance(value, list) or (n is not None and len(value) != n):
        raise UserError(f"{path}: {key}: expected a list of {n if n is not None else 'per-request'} numbers")
    for i, v in enumerate(value):
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= high
        if not ok or (whole and v != int(v)):
            kind = "whole number" if whole else "number"
            raise UserError(f"{path}: {key}[{i}]: expected a {kind} from 0 to {high:,}, got {cut(repr(v))}")
    return [int(v) for v in value] if whole else [float(v) for v in value]


def _result_file(path: Path) -> Result:
    from llmsim.errors import json_text
    from llmsim.workload.limits import MAX_REQUESTS, MAX_TOKENS_PER_REQUEST

    data = json_text(path.read_bytes().removeprefix(b"\xef\xbb\xbf"), str(path))
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object (vllm bench serve --save-result), got {type(data).__name__}")
    figures = {k: _number(path, k, data.get(k), whole=k in WHOLE) for k in FIGURES}
    for key, value in data.items():
        if _is_latency_key(key):
            figures[key] = _number(path, key, value)
    settings = {
        "num_prompts": _number(path, "num_prompts", data.get("num_prompts"), whole=True),
        "request_rate": _number(path, "request_rate", data.get("request_rate")),
        "burstiness": _number(path, "burstiness", data.get("burstiness")),
        "max_concurrency": _number(path, "max_concurrency", data.get("max_concurrency"), whole=True),
    }
    model_id = data.get("model_id")
    if model_id is not None and not isinstance(model_id, str):
        raise UserError(f"{path}: model_id: expected the served model's name, got {cut(repr(model_id), 40)}")
    res = Result(
        path=path,
        model_id=model_id,
        settings={k: v for k, v in settings.items() if v is not None},
        figures={k: v for k, v in figures.items() if v is not None},
    )
    if "input_lens" in data or "output_lens" in data:
        lens = data.get("input_lens")
        if isinstance(lens, list) and len(lens) > MAX_REQUESTS:
            raise UserError(f"{path}: input_lens: {len(lens):,} requests, more than a run may hold ({MAX_REQUESTS:,})")
        ins = _column(path, "input_lens", lens, None, whole=True, high=MAX_TOKENS_PER_REQUEST)
        outs = _column(path, "output_lens", data.get("output_lens"), len(ins), whole=True, high=MAX_TOKENS_PER_REQUEST)
        starts = None
        if data.get("start_times") is not None:
            starts = _column(path, "start_times", data["start_times"], len(ins), whole=False)
        failed = _failed(path, data.get("errors"), len(ins))
        res.sent = len(ins)
        res.kept = [i for i in range(len(ins)) if not failed[i] and ins[i] > 0 and outs[i] > 0]
        res.empty = sum(1 for i in range(len(ins)) if not failed[i] and (ins[i] == 0 or outs[i] == 0))
        res.input_lens = [ins[i] for i in res.kept]
        res.output_lens = [outs[i] for i in res.kept]
        res.start_times = [starts[i] for i in res.kept] if starts is not None else None
        if not res.kept:
            raise UserError(f"{path}: input_lens: no request completed")
    if not res.figures and res.input_lens is None:
        raise UserError(f"{path}: no figures and no requests: not a vllm bench serve result file")
    return res


def _failed(path: Path, errors: object, n: int) -> list[bool]:
    """Which requests failed: a non-empty error text (vllm bench serve counts only successes)."""
    if errors is None:
        return [False] * n
    if not isinstance(errors, list) or len(errors) != n or not all(e is None or isinstance(e, str) for e in errors):
        raise UserError(f"{path}: errors: expected a list of {n} error texts (empty where a request succeeded)")
    return [bool(e) for e in errors]


def _latency_order(key: str) -> tuple:
    """ttft, tpot, itl, e2el; within each mean, median, then percentiles up."""
    m = re.fullmatch(r"(mean|median|p([\d.]+))_(\w+)_ms", key)
    if not m:
        return (99,)
    rank = {"ttft": 0, "tpot": 1, "itl": 2, "e2el": 3}.get(m.group(3), 9)
    return (rank, 0 if m.group(1) == "mean" else 1 if m.group(1) == "median" else 2, float(m.group(2) or 0))


def _is_latency_key(key: str) -> bool:
    """mean_ttft_ms, median_itl_ms, p99.9_e2el_ms, ... (not std_, nor the client-queue ones)."""
    return re.fullmatch(r"(mean|median|p[\d.]+)_(ttft|tpot|itl|e2el)_ms", key) is not None


_LINE = re.compile(r"^\s*([A-Za-z][^:]*?):\s+(\S+)\s*$")
BLOCK = "Serving Benchmark Result"


def _printout(path: Path) -> Result:
    """A console log of ``vllm bench serve``: the settings from the one ``Namespace(...)`` line before
    its one result block, the figures from the block's lines (labels read case-blind: older vLLM
    printed "Total Token throughput")."""
    text = path.read_text(errors="replace")
    blocks = text.count(BLOCK)
    if blocks != 1:
        what = "no" if blocks == 0 else f"{blocks}"
        raise UserError(
            f"{path}: {what} '{BLOCK}' blocks; expected a result file (JSON, vllm bench serve --save-result) or "
            "the printout of one run"
        )
    start = text.index(BLOCK)
    figures, printed = _block(path, text, start)
    namespaces = re.findall(r"Namespace\((.*)\)\s*$", text[:start], re.M)
    if len(namespaces) > 1:
        raise UserError(f"{path}: {len(namespaces)} Namespace(...) lines before its result block; keep the run's own")
    sent = int(figures.get("completed", 0)) + int(printed.pop("failed", 0))
    if namespaces:
        values = namespace_values(namespaces[0])
        settings = {k: listed(k, values[k]) for k in SETTINGS if k in values and values[k] is not None}
        for general, name in (("input_len", "random_input_len"), ("output_len", "random_output_len")):
            if values.get(general) is not None:  # (newer vLLM: --input-len sets the random one)
                settings[name] = values[general]
        _agree(path, settings, printed, sent)
        model = values.get("model") if isinstance(values.get("model"), str) else None
    else:  # the block alone: the rate it printed, and every request it sent
        if "completed" not in figures:
            raise UserError(f"{path}: its result block has no 'Successful requests' line (and no Namespace line)")
        settings = {**printed, "num_prompts": sent}
        model = None
    return Result(path=path, model_id=model, settings=settings, figures=figures)


def _block(path: Path, text: str, start: int) -> tuple[dict[str, float], dict[str, object]]:
    """The result block's figures, and what it printed of the settings (rate, concurrency, failures):
    its lines from the title to the closing ``=====`` (or the first line that is not one of them)."""
    labels = {k.lower(): v for k, v in PRINTED.items()}
    settings_labels = {
        "request rate configured (rps)": "request_rate",
        "maximum request concurrency": "max_concurrency",
    }
    settings_labels["failed requests"] = "failed"
    figures: dict[str, float] = {}
    printed: dict[str, object] = {}
    first = text[:start].count("\n") + 2
    for n, line in enumerate(text[start:].splitlines()[1:], first):
        if line.startswith("=" * 10):
            break
        if line.startswith("-" * 3):
            continue  # a section title: ---Time to First Token---
        m = _LINE.match(line)
        if not m:
            break  # (a block cut off: the log goes on with something else)
        label, word = m.group(1).strip(), m.group(2)
        key = labels.get(label.lower()) or _latency_key(label)
        if key is None and label.lower() not in settings_labels:
            continue
        try:
            value = float(word)
        except ValueError:
            raise UserError(f"{path}: line {n}: {label}: expected a number, got {cut(word, 40)!r}") from None
        if not math.isfinite(value) or value < 0:
            raise UserError(f"{path}: line {n}: {label}: expected a finite number >= 0, got {cut(word, 40)}")
        whole = key in WHOLE or label.lower() in ("failed requests", "maximum request concurrency")
        if whole and value != int(value):
            raise UserError(f"{path}: line {n}: {label}: expected a whole number, got {word}")
        if key is not None:
            figures[key] = value
        else:
            name = settings_labels[label.lower()]
            printed[name] = int(value) if name != "request_rate" else value
    if not figures:
        raise UserError(f"{path}: its '{BLOCK}' block has no figures")
    return figures, printed


def _agree(path: Path, settings: dict[str, object], printed: dict[str, object], sent: int) -> None:
    """The Namespace line is the block's run: its prompts are the requests the block counts, its rate
    and concurrency the ones the block printed (to 2 decimals)."""
    n = settings.get("num_prompts")
    if sent and isinstance(n, int) and n != sent:
        raise UserError(
            f"{path}: its Namespace line says num_prompts={n}, its result block {sent} requests (successful + "
            "failed): not the same run"
        )
    for key, value in printed.items():
        mine = settings.get(key)
        if isinstance(mine, int | float) and isinstance(value, int | float) and abs(mine - value) > 0.0051:
            raise UserError(f"{path}: its Namespace line says {key}={mine}, its result block {value}: not the same run")


def namespace_values(text: str) -> dict[str, object]:
    """The top-level ``key=value`` pairs of a printed argparse Namespace: split at the commas outside
    quotes and brackets (a value may be a list or a string holding "=" and ","), each value read as
    a Python literal where it is one."""
    parts, depth, quote, cur = [], 0, "", []
    escaped = False
    for ch in text:
        if quote:
            cur.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    out = {}
    for part in parts:
        key, eq, value = part.strip().partition("=")
        if eq and key.isidentifier():
            out[key] = _literal(value)
    return out


def listed(name: str, value: object) -> object:
    """A setting as vLLM's command line writes it, read: "50,99" percentiles, "ttft,itl" metrics (each
    once, in the order given)."""
    if name == "metric_percentiles" and isinstance(value, str):
        try:
            return list(dict.fromkeys(float(p) for p in value.split(",")))
        except ValueError:
            return value
    if name == "percentile_metrics" and isinstance(value, str):
        return list(dict.fromkeys(m.strip() for m in value.split(",")))
    return value


def _latency_key(label: str) -> str | None:
    """'Mean TTFT (ms)' -> mean_ttft_ms, 'P99.9 ITL (ms)' -> p99.9_itl_ms."""
    m = re.fullmatch(r"(Mean|Median|P[\d.]+) (TTFT|TPOT|ITL|E2EL) \(ms\)", label, re.I)
    return f"{m.group(1).lower()}_{SHORT[m.group(2).upper()]}_ms" if m else None


def _literal(text: str) -> object:
    """One value of a printed Namespace: a quoted string, a number, inf, None, True or False."""
    import ast

    text = text.strip()
    if text == "inf":
        return math.inf
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def result_block(s: dict, sc: Scenario, metrics: list[str], percentiles: list[float], rate: float | None) -> str:
    """llmsim's run printed as ``vllm bench serve`` prints its result (vllm/benchmarks/serve.py: the
    same lines, labels and number formats; the latency sections ``metrics`` names, at
    ``percentiles``; ``rate`` the configured request rate, None or inf for all at once)."""
    from llmsim.metrics import p_word

    def line(label: str, value: object, fmt: str = "") -> str:
        return f"{label:<40} {(math.nan if value is None else value):<10{fmt}}"

    out = ["{s:{c}^{n}}".format(s=f" {BLOCK} ", n=50, c="=")]
    out.append(line("Successful requests:", s["completed"]))
    out.append(line("Failed requests:", s.get("failed", 0)))
    if sc.workload.max_concurrency is not None:
        out.append(line("Maximum request concurrency:", sc.workload.max_concurrency))
    if rate is not None and not math.isinf(rate) and sc.workload.kind != "all_at_once":
        out.append(line("Request rate configured (RPS):", rate, ".2f"))
    out.append(line("Benchmark duration (s):", s["duration"], ".2f"))
    out.append(line("Total input tokens:", s["total_input_tokens"]))
    out.append(line("Total generated tokens:", s["total_output_tokens"]))
    for label, key in list(PRINTED.items())[4:]:
        out.append(line(f"{label}:", s[key], ".2f"))
    for key in metrics:
        short, header = HEADERS[key]
        out.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        out.append(line(f"Mean {short} (ms):", s[f"mean_{key}_ms"], ".2f"))
        out.append(line(f"Median {short} (ms):", s[f"median_{key}_ms"], ".2f"))
        for p in percentiles:
            out.append(line(f"{p_word(p).upper()} {short} (ms):", s.get(f"{p_word(p)}_{key}_ms"), ".2f"))
    out.append("=" * 50)
    return "\n".join(out)


def comparison_rows(s: dict, figures: dict[str, float]) -> list[dict]:
    """One row per figure the result and llmsim's summary both have: real, llmsim, error (None
    where the real figure is 0)."""
    rows = []
    order = {k: i for i, k in enumerate(FIGURES)}
    for key, real in sorted(figures.items(), key=lambda kv: (order.get(kv[0], len(order)), _latency_order(kv[0]))):
        sim = s.get(key)
        if isinstance(sim, int | float) and not isinstance(sim, bool):
            err = sim / real - 1 if real else None
            rows.append({"figure": key, "real": real, "llmsim": float(sim), "error": err})
    return rows
