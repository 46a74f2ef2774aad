"""A real ``vllm bench serve`` run as llmsim reads it, and llmsim's run printed as the benchmark
prints its own. The real run is the result file ``--save-result`` writes (with ``--save-detailed``,
every request it sent) or its console printout (the ``Namespace(...)`` line and the "Serving
Benchmark Result" block of vllm/benchmarks/serve.py). ``result_block`` prints that block for a run's
summary; ``comparison_rows`` / ``comparison_table`` set a real run's figures beside llmsim's. The
settings read here are named as ``vllmcli.Bench``'s fields (vLLM's own Namespace names)."""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmsim.errors import UserError, cut

# the settings of a run that decide what it sent and what it reports: vllm bench serve's Namespace
# names, which vllmcli.Bench's fields are
SETTINGS = (
    *("dataset_name", "random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len"),
    *("num_prompts", "request_rate", "burstiness", "max_concurrency", "seed", "metric_percentiles"),
    "percentile_metrics",
)
# the latency metrics, their printed names and section titles (vllm/benchmarks/serve.py)
LATENCIES = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}
LATENCY_KEY = re.compile(r"(mean|median|p([\d.]+))_(ttft|tpot|itl|e2el)_ms")  # mean_ttft_ms, p99.9_itl_ms
# the block's lines above the latencies, in its order: label, result-file key, number format
ROWS = (
    ("Successful requests", "completed", ""),
    ("Benchmark duration (s)", "duration", ".2f"),
    ("Total input tokens", "total_input_tokens", ""),
    ("Total generated tokens", "total_output_tokens", ""),
    ("Request throughput (req/s)", "request_throughput", ".2f"),
    ("Request goodput (req/s)", "request_goodput", ".2f"),  # (printed with --goodput only)
    ("Output token throughput (tok/s)", "output_throughput", ".2f"),
    ("Peak output token throughput (tok/s)", "max_output_tokens_per_s", ".2f"),
    ("Peak concurrent requests", "max_concurrent_requests", ".2f"),
    ("Total token throughput (tok/s)", "total_token_throughput", ".2f"),
)
FIGURES = tuple(key for _, key, _ in ROWS)
WHOLE = ("completed", "total_input_tokens", "total_output_tokens")  # counts, not rates
# what else the block prints: the run's settings and its failures (label -> name)
BLOCK_SETTINGS = {"Request rate configured (RPS)": "request_rate", "Maximum request concurrency": "max_concurrency"}
FAILED = "Failed requests"
MAX_RESULT_BYTES = 256 << 20  # every request's token gaps and texts: tens of MB for thousands of requests
MAX_PRINTOUT_BYTES = 64 << 20  # a console log of one benchmark run
BLOCK = "Serving Benchmark Result"


@dataclass
class Sent:
    """The requests a ``--save-detailed`` result file records: those that completed, with their
    tokens and (vLLM 0.11 on) send times, at their places (``index``) among the ``count`` sent."""

    input_lens: list[int]
    output_lens: list[int]
    start_times: list[float] | None
    index: list[int]
    count: int
    empty: int  # requests that succeeded with no prompt or no output token: not replayable, left out


@dataclass
class Result:
    """A real run: the settings it records (named as Bench's fields), its figures (the result file's
    keys) and, from a detailed file, the requests it sent."""

    path: Path
    model_id: str | None
    settings: dict[str, Any]
    figures: dict[str, float]
    sent: Sent | None = None

    def percentiles(self) -> list[float]:
        """The percentiles the result reports (p99_ttft_ms, p99.9_itl_ms, ...)."""
        found = (LATENCY_KEY.fullmatch(k) for k in self.figures)
        return sorted({float(m.group(2)) for m in found if m and m.group(2)})


def load_result(path: str | Path) -> Result:
    """Read a real run's result file or printout; a problem is a UserError naming the file and the
    key or line."""
    from llmsim.errors import check_input_file

    path = Path(path)
    head = check_input_file(path, "a vllm bench serve result (JSON) or printout", MAX_RESULT_BYTES, "a result here")
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"["):
        return _consistent(_result_file(path))
    if path.stat().st_size > MAX_PRINTOUT_BYTES:
        raise UserError(
            f"{path}: {path.stat().st_size:,} bytes, more than a printout here may hold ({MAX_PRINTOUT_BYTES:,})"
        )
    return _consistent(_printout(path))


def _consistent(res: Result) -> Result:
    """A run's counts agree with each other: what it completed, the tokens it counted, how long it
    took, and (a detailed file) the requests it lists. One that does not is another run's figures
    beside these requests, or an edited file: refused, naming the keys."""
    f, path = res.figures, res.path
    for key in f:
        m = LATENCY_KEY.fullmatch(key)
        if m and m.group(2) and not _percentile(m.group(2)):
            raise UserError(f"{path}: {key}: p{m.group(2)} is not a percentile (vllm bench serve reports 0 to 100)")
    done = f.get("completed")
    tokens = f.get("total_input_tokens") or f.get("total_output_tokens")
    if done == 0 and tokens:
        raise UserError(f"{path}: completed 0 requests, yet counts their tokens ({tokens:,.0f}): not one run's figures")
    if done and f.get("duration") == 0:
        raise UserError(f"{path}: duration: 0 s for {done:,.0f} completed requests")
    sent = res.sent
    if sent is not None:
        asked = res.settings.get("num_prompts")
        if asked is not None and sent.count != asked:
            raise UserError(
                f"{path}: input_lens: {sent.count:,} requests, where num_prompts says {asked:,.0f} were sent"
            )
        succeeded = len(sent.index) + sent.empty
        if done is not None and succeeded != done:
            raise UserError(f"{path}: errors: {succeeded:,} requests succeeded, where completed says {done:,.0f}")
    return res


# --- the result file ------------------------------------------------------------------------------


def _percentile(text: str) -> bool:
    try:
        return 0 <= float(text) <= 100
    except ValueError:  # ("9.9.9")
        return False


def _finite(v: object) -> bool:
    """A JSON number that is a finite float (an integer of 400 digits is not: it overflows one)."""
    from llmsim.workload.limits import as_float

    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(as_float(v))


def _number(path: Path, key: str, value: object, whole: bool = False) -> float | None:
    if value is None:
        return None
    if key == "request_rate" and value == "inf":
        return math.inf
    if not _finite(value) or value < 0:  # type: ignore[operator]
        raise UserError(f"{path}: {key}: expected a finite number >= 0, got {cut(repr(value), 40)}")
    if whole and value != int(value):
        raise UserError(f"{path}: {key}: expected a whole number, got {cut(repr(value), 40)}")
    return int(value) if whole else float(value)


def _column(path: Path, key: str, value: object, n: int | None, whole: bool, high: float = math.inf) -> list:
    if not isinstance(value, list) or (n is not None and len(value) != n):
        raise UserError(f"{path}: {key}: expected a list of {n if n is not None else 'per-request'} numbers")
    for i, v in enumerate(value):
        ok = _finite(v) and 0 <= v <= high
        if not ok or (whole and v != int(v)):
            kind = "whole number" if whole else "number"
            raise UserError(f"{path}: {key}[{i}]: expected a {kind} from 0 to {high:,}, got {cut(repr(v), 40)}")
    return [int(v) for v in value] if whole else [float(v) for v in value]


def _result_file(path: Path) -> Result:
    from llmsim.errors import json_text

    data = json_text(path.read_bytes().removeprefix(b"\xef\xbb\xbf"), str(path))
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object (vllm bench serve --save-result), got {type(data).__name__}")
    figures = {k: _number(path, k, data.get(k), whole=k in WHOLE) for k in FIGURES}
    figures |= {k: _number(path, k, v) for k, v in data.items() if LATENCY_KEY.fullmatch(k)}
    settings = {
        "num_prompts": _number(path, "num_prompts", data.get("num_prompts"), whole=True),
        "request_rate": _number(path, "request_rate", data.get("request_rate")),
        "burstiness": _number(path, "burstiness", data.get("burstiness")),
        "max_concurrency": _number(path, "max_concurrency", data.get("max_concurrency"), whole=True),
    }
    if data.get("ramp_up_strategy") is not None:  # (vllm bench serve writes the three with a ramp-up)
        settings["ramp_up"] = ramp_up_of(data)
    model_id = data.get("model_id")
    if model_id is not None and not isinstance(model_id, str):
        raise UserError(f"{path}: model_id: expected the served model's name, got {cut(repr(model_id), 40)}")
    res = Result(
        path=path,
        model_id=model_id,
        settings={k: v for k, v in settings.items() if v is not None},
        figures={k: v for k, v in figures.items() if v is not None},
    )
    done, asked = res.figures.get("completed"), res.settings.get("num_prompts")
    failed = _number(path, "failed", data.get("failed"), whole=True)
    if done is not None and asked is not None and done > asked:
        raise UserError(f"{path}: completed {done:g} requests of num_prompts {asked:g}: more than were sent")
    if done is not None and failed is not None:  # (each request sent succeeds or fails)
        if asked is None:  # (vllm bench serve sent num_prompts, or fewer with --no-oversample)
            res.settings["num_prompts"] = int(done + failed)
        elif done + failed > asked:
            raise UserError(
                f"{path}: completed {done:,.0f} and failed {failed:,.0f} requests, where num_prompts says "
                f"{asked:,.0f} were sent: not one run's figures"
            )
    if "input_lens" in data or "output_lens" in data:
        res.sent = _sent(path, data)
    if not res.figures and res.sent is None:
        raise UserError(f"{path}: no figures and no requests: not a vllm bench serve result file")
    return res


def _sent(path: Path, data: dict) -> Sent:
    """A detailed file's requests, the completed ones kept (vllm bench serve counts only successes)."""
    from llmsim.workload.limits import MAX_REQUESTS, MAX_TOKENS_PER_REQUEST

    lens = data.get("input_lens")
    if isinstance(lens, list) and len(lens) > MAX_REQUESTS:
        raise UserError(f"{path}: input_lens: {len(lens):,} requests, more than a run may hold ({MAX_REQUESTS:,})")
    ins = _column(path, "input_lens", lens, None, whole=True, high=MAX_TOKENS_PER_REQUEST)
    n = len(ins)
    outs = _column(path, "output_lens", data.get("output_lens"), n, whole=True, high=MAX_TOKENS_PER_REQUEST)
    starts = _column(path, "start_times", data["start_times"], n, whole=False) if data.get("start_times") else None
    errors = data.get("errors")
    if errors is None:
        errors = [""] * n
    if not isinstance(errors, list) or len(errors) != n or not all(e is None or isinstance(e, str) for e in errors):
        raise UserError(f"{path}: errors: expected a list of {n} error texts (empty where a request succeeded)")
    succeeded = [i for i in range(n) if not errors[i]]
    for key, lens in (("input_lens", ins), ("output_lens", outs)):
        total_key = f"total_{key.removesuffix('_lens')}_tokens"
        total, summed = data.get(total_key), sum(lens[i] for i in succeeded)
        if _finite(total) and summed != total:  # (vLLM's totals sum the succeeded requests' lengths)
            raise UserError(
                f"{path}: {key}: the succeeded requests' lengths sum to {summed:,}, where {total_key} says "
                f"{total:,.0f}: not one run's figures"
            )
    index = [i for i in succeeded if ins[i] > 0 and outs[i] > 0]
    if not index:
        raise UserError(f"{path}: input_lens: no request completed")
    return Sent(
        input_lens=[ins[i] for i in index],
        output_lens=[outs[i] for i in index],
        start_times=[starts[i] for i in index] if starts is not None else None,
        index=index,
        count=n,
        empty=len(succeeded) - len(index),
    )


# --- the printout ---------------------------------------------------------------------------------

_LINE = re.compile(r"^\s*([A-Za-z][^:]*?):\s+(\S+)\s*$")
_LABEL = re.compile(r"(Mean|Median|P[\d.]+) (TTFT|TPOT|ITL|E2EL) \(ms\)", re.I)


def _printout(path: Path) -> Result:
    """A console log of ``vllm bench serve``: the settings from the one ``Namespace(...)`` line before
    its one result block, the figures from the block's lines."""
    text = path.read_text(errors="replace")
    blocks = text.count(BLOCK)
    if blocks != 1:
        what = "no" if blocks == 0 else f"{blocks}"
        raise UserError(
            f"{path}: {what} '{BLOCK}' blocks; expected a result file (JSON, vllm bench serve --save-result) or "
            "the printout of one run"
        )
    start = text.index(BLOCK)
    figures, printed, failed = _block(path, text, start)
    namespaces = re.findall(r"Namespace\((.*)\)\s*$", text[:start], re.M)
    if len(namespaces) > 1:
        raise UserError(f"{path}: {len(namespaces)} Namespace(...) lines before its result block; keep the run's own")
    sent = int(figures.get("completed", 0)) + failed
    if not namespaces:  # the block alone: what it printed, every request it sent, its sections and percentiles
        if "completed" not in figures:
            raise UserError(f"{path}: its result block has no 'Successful requests' line (and no Namespace line)")
        shown = [LATENCY_KEY.fullmatch(k) for k in figures]
        metrics = [m for m in LATENCIES if any(x and x.group(3) == m for x in shown)]
        ps = sorted({float(x.group(2)) for x in shown if x and x.group(2)})
        settings = {**printed, "num_prompts": sent} | ({"percentile_metrics": metrics} if metrics else {})
        settings |= {"metric_percentiles": ps} if ps else {}
        return Result(path=path, model_id=None, settings=settings, figures=figures)
    values = namespace_values(namespaces[0])
    settings = settings_of(values)
    _agree(path, settings, printed, sent)
    model = values.get("model") if isinstance(values.get("model"), str) else None
    return Result(path=path, model_id=model, settings=settings, figures=figures)


def _block(path: Path, text: str, start: int) -> tuple[dict[str, float], dict[str, Any], int]:
    """The result block's figures, the settings it printed (rate, concurrency) and its failed
    requests: its lines from the title to the closing ``=====`` (or the first line that is not one
    of them). Labels are read case-blind (vLLM before 0.10 printed "Total Token throughput")."""
    labels = {label.lower(): key for label, key, _ in ROWS}
    others = {label.lower(): name for label, name in BLOCK_SETTINGS.items()} | {FAILED.lower(): "failed"}
    figures: dict[str, float] = {}
    printed: dict[str, Any] = {}
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
        name = others.get(label.lower())
        if key is None and name is None:
            continue
        value = _printed_number(path, n, label, word, whole=key in WHOLE or name in ("failed", "max_concurrency"))
        if key is not None:
            figures[key] = value
        elif name is not None:
            printed[name] = value if name == "request_rate" else int(value)
    if not figures:
        raise UserError(f"{path}: its '{BLOCK}' block has no figures")
    return figures, {k: v for k, v in printed.items() if k != "failed"}, int(printed.get("failed", 0))


def _printed_number(path: Path, n: int, label: str, word: str, whole: bool) -> float:
    try:
        value = float(word)
    except ValueError:
        raise UserError(f"{path}: line {n}: {label}: expected a number, got {cut(word, 40)!r}") from None
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{path}: line {n}: {label}: expected a finite number >= 0, got {cut(word, 40)}")
    if whole and value != int(value):
        raise UserError(f"{path}: line {n}: {label}: expected a whole number, got {word}")
    return value


def _latency_key(label: str) -> str | None:
    """'Mean TTFT (ms)' -> mean_ttft_ms, 'P99.9 ITL (ms)' -> p99.9_itl_ms."""
    m = _LABEL.fullmatch(label)
    return f"{m.group(1).lower()}_{m.group(2).lower()}_ms" if m else None


def _agree(path: Path, settings: dict[str, Any], printed: dict[str, Any], sent: int) -> None:
    """The Namespace line is the block's run: its prompts are the requests the block counts, its rate
    and concurrency the ones the block printed (to 2 decimals)."""
    n = settings.get("num_prompts")
    if sent and isinstance(n, int) and n != sent:
        raise UserError(
            f"{path}: its Namespace line says num_prompts={n}, its result block {sent} requests (successful + "
            "failed): not the same run"
        )
    # (the block prints a finite rate and a set concurrency, and before vLLM 0.10 neither: a value it
    # shows must be the Namespace's, but a line it lacks says nothing)
    for key, shown in printed.items():
        mine = settings.get(key)
        if mine is not None and (isinstance(mine, bool) or not isinstance(mine, int | float)):
            continue  # (not a number: the settings' check names it)
        if mine is None or math.isinf(mine) or abs(mine - shown) > 0.0051:
            raise UserError(f"{path}: its Namespace line says {key}={mine}, its result block {shown}: not the same run")


def namespace_values(text: str) -> dict[str, object]:
    """The top-level ``key=value`` pairs of a printed argparse Namespace: split at the commas outside
    quotes and brackets (a value may be a list, or a string holding "=" and ","), each value read as
    a Python literal where it is one."""
    parts, cur, depth, quote, escaped = [], [], 0, "", False
    for ch in text:
        if quote:
            escaped, quote = (False, quote) if escaped else (ch == "\\", "" if ch == quote else quote)
        elif ch in "'\"":
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


def settings_of(values: dict[str, object]) -> dict[str, Any]:
    """The settings among a Namespace's (or a command line's) values, read as vLLM reads them: the
    general --input-len / --output-len win over the random dataset's, "50,99" is a list of
    percentiles and "ttft,itl" of metrics (each once, in the order given)."""
    out: dict[str, Any] = {k: values[k] for k in SETTINGS if values.get(k) is not None}
    for general, name in (("input_len", "random_input_len"), ("output_len", "random_output_len")):
        if values.get(general) is not None:
            out[name] = values[general]
    if isinstance(out.get("metric_percentiles"), str):
        with contextlib.suppress(ValueError):  # (else left as text: the check names it)
            out["metric_percentiles"] = list(dict.fromkeys(float(p) for p in out["metric_percentiles"].split(",")))
    if isinstance(out.get("percentile_metrics"), str):
        out["percentile_metrics"] = list(dict.fromkeys(m.strip() for m in out["percentile_metrics"].split(",")))
    if values.get("ramp_up_strategy") is not None:  # (three Namespace names, one setting: vllmcli.ramp_up_flags)
        out["ramp_up"] = ramp_up_of(values)
    if values.get("goodput"):  # (KEY:VALUE pairs as typed: vllmcli.goodput_flags reads them)
        out["goodput"] = values["goodput"]
    return out


def ramp_up_of(values: dict[str, Any]) -> tuple:
    """vllm bench serve's ramp-up as one setting, (strategy, start, end), from its three names in a
    Namespace, a result file or a command line's flags (unchecked: vllmcli.check_ramp_up)."""
    return tuple(values.get(f"ramp_up_{k}") for k in ("strategy", "start_rps", "end_rps"))


# --- printing -------------------------------------------------------------------------------------


def result_block(
    s: dict, metrics: list[str], percentiles: list[float], rate: float | None, max_concurrency: int | None
) -> str:
    """A run's summary printed as ``vllm bench serve`` prints its result (the same lines, labels and
    number formats; the latency sections ``metrics`` names, at ``percentiles``; ``rate`` the
    configured request rate, None or inf for all at once)."""
    from llmsim.metrics import p_word

    def line(label: str, value: object, fmt: str = "") -> str:
        return f"{label + ':':<40} {(0.0 if value is None else value):<10{fmt}}"  # (vLLM prints 0.00 for none)

    out = ["{s:{c}^{n}}".format(s=f" {BLOCK} ", n=50, c="=")]
    out.append(line(ROWS[0][0], s["completed"]))
    out.append(line(FAILED, s.get("failed", 0)))
    if max_concurrency is not None:
        out.append(line("Maximum request concurrency", max_concurrency))
    if rate is not None and not math.isinf(rate):
        out.append(line("Request rate configured (RPS)", rate, ".2f"))
    shown = [row for row in ROWS[1:] if row[1] != "request_goodput" or s.get("request_goodput") is not None]
    out += [line(label, s[key], fmt) for label, key, fmt in shown]
    for key in metrics:
        short, title = LATENCIES[key]
        out.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        out.append(line(f"Mean {short} (ms)", s[f"mean_{key}_ms"], ".2f"))
        out.append(line(f"Median {short} (ms)", s[f"median_{key}_ms"], ".2f"))
        for p in percentiles:
            out.append(line(f"{p_word(p).upper()} {short} (ms)", s.get(f"{p_word(p)}_{key}_ms"), ".2f"))
    out.append("=" * 50)
    return "\n".join(out)


def comparison_rows(s: dict, figures: dict[str, float]) -> list[dict]:
    """One row per figure the result and llmsim's summary both have, in the block's order: real,
    llmsim, error (None where the real figure is 0)."""

    def order(key: str) -> tuple:
        if key in FIGURES:
            return (FIGURES.index(key),)
        m = LATENCY_KEY.fullmatch(key)
        assert m is not None
        stat = 0 if m.group(1) == "mean" else 1 if m.group(1) == "median" else 2
        return (len(FIGURES) + list(LATENCIES).index(m.group(3)), stat, float(m.group(2) or 0))

    rows = []
    for key in sorted(figures, key=order):
        real, sim = figures[key], s.get(key)
        if isinstance(sim, int | float) and not isinstance(sim, bool):
            rows.append({"figure": key, "real": real, "llmsim": float(sim), "error": sim / real - 1 if real else None})
    return rows


def comparison_table(rows: list[dict], path: Path) -> str:
    """real, llmsim and error per figure, the numbers as vllm bench serve prints them (2 decimals)."""
    from llmsim.tables import table

    def shown(v: float) -> str:
        if abs(v) >= 1e12:
            return f"{v:.4g}"
        return str(int(v)) if v == int(v) else f"{v:.2f}"

    body = [
        [r["figure"], shown(r["real"]), shown(r["llmsim"]), "-" if r["error"] is None else f"{r['error']:+.1%}"]
        for r in rows
    ]
    return f"compared with {path}\n" + table(body, ["figure", "real", "llmsim", "error"], align="lrrr")
