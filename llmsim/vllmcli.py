"""vLLM's own command lines as a scenario: ``vllm serve MODEL ...`` and ``vllm bench serve ...``
(and the result file ``vllm bench serve --save-result`` writes) turned into the scenario
docs/scenario.md's table describes ("From a `vllm serve` command to a scenario"), and llmsim's run
printed as the benchmark prints its own result. ``llmsim bench`` (commands/bench.py) is the
command; ``benchmarks/vllm_gpu/bench_runs.py`` builds its 43 real passes' scenarios here too.

A flag is either translated, accepted as one that does not change timing (``--port``,
``--trust-remote-code``, ``--save-result``: listed back as ignored), or refused with what to do
instead: a flag llmsim does not know, or one it models only through a scenario section
(``--speculative-config``: the ``speculative`` section), is never dropped silently.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from llmsim.errors import UserError, cut

# --- the two command lines ------------------------------------------------------------------------

# `vllm serve` flags that do not change what a step costs or how requests are scheduled (the API
# server, logging, loading, tokenizer and chat formatting), with whether each takes a value
SERVE_IGNORED = {
    **dict.fromkeys(("--host", "--port", "--api-key", "--served-model-name", "--download-dir", "--load-format"), True),
    **dict.fromkeys(("--tokenizer", "--revision", "--tokenizer-mode", "--seed", "--chat-template"), True),
    **dict.fromkeys(("--tool-call-parser", "--reasoning-parser", "--uvicorn-log-level", "--swap-space"), True),
    **dict.fromkeys(("--distributed-executor-backend", "--max-logprobs", "--generation-config"), True),
    **dict.fromkeys(("--trust-remote-code", "--disable-log-requests", "--disable-log-stats"), False),
    **dict.fromkeys(("--enable-log-requests", "--enable-auto-tool-choice", "--disable-uvicorn-access-log"), False),
    **dict.fromkeys(("--disable-fastapi-docs", "--enable-chunked-prefill"), False),
}
# `vllm bench serve` flags that do not change the requests it sends or when (the endpoint, the
# tokenizer, where results go, sampling settings of requests that run to their output length)
BENCH_IGNORED = {
    **dict.fromkeys(("--backend", "--base-url", "--host", "--port", "--endpoint", "--model"), True),
    **dict.fromkeys(("--served-model-name", "--tokenizer", "--tokenizer-mode", "--label"), True),
    **dict.fromkeys(("--result-dir", "--result-filename", "--num-warmups", "--goodput"), True),
    **dict.fromkeys(("--temperature", "--top-p", "--top-k", "--min-p", "--percentile-metrics"), True),
    **dict.fromkeys(("--dataset-path", "--ready-check-timeout-sec", "--request-id-prefix"), True),
    **dict.fromkeys(("--save-result", "--save-detailed", "--append-result", "--disable-tqdm"), False),
    **dict.fromkeys(("--trust-remote-code", "--ignore-eos", "--insecure"), False),
}
# flags llmsim reads only from a scenario, and what to write there instead (--scenario-out writes
# the rest of the translation to start from)
SECTION_FLAGS = {
    "--speculative-config": "a `speculative` section",
    "--enable-lora": "a `lora` section",
    "--kv-transfer-config": "policy.kind: disaggregated with cluster.prefill_pool / decode_pool",
    "--kv-offloading-size": "kv_cache.offload",
}
QUANTIZATION = {  # --quantization -> (weight dtype, compute dtype): vLLM's online FP8 is W8A8 dynamic
    "fp8": ("fp8", "fp8"),
    **dict.fromkeys(("awq", "awq_marlin", "gptq", "gptq_marlin"), ("int4", "bf16")),
}
DTYPES = {"auto": None, "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16"}
KV_DTYPES = {"auto": None, "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are UserErrors naming the command they came from."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message}")


def _words(text: str, command: tuple[str, ...], what: str) -> list[str]:
    """The arguments of one command line: shell words, less the command's own leading words
    (``vllm serve``), with vLLM's underscore spellings (``--max_num_seqs``) read as dashes."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UserError(f"{what} {cut(text)!r}: {exc}") from None
    n = len(command)
    if words[:n] == list(command):
        words = words[n:]
    out = []
    for w in words:
        if w.startswith("--"):
            flag, eq, value = w.partition("=")
            w = flag.replace("_", "-") + eq + value
        out.append(w)
    return out


def _refuse_section_flags(words: list[str], what: str) -> None:
    for w in words:
        flag = w.split("=", 1)[0]
        if flag in SECTION_FLAGS:
            raise UserError(
                f"{what}: {flag} is not read from a command line; write {SECTION_FLAGS[flag]} in a scenario "
                "(--scenario-out writes the rest of it)"
            )
        if flag == "--no-enable-chunked-prefill":
            raise UserError(
                f"{what}: {flag}: not modelled; llmsim's vllm policy always chunks prompts, as vLLM v1 does by default"
            )


def _add_ignored(p: argparse.ArgumentParser, flags: dict[str, bool]) -> None:
    for flag, takes_value in flags.items():
        dest = "ignored_" + flag.lstrip("-").replace("-", "_")
        if takes_value:
            p.add_argument(flag, dest=dest, default=None)
        else:
            p.add_argument(flag, dest=dest, action="store_true")


def _ignored(ns: argparse.Namespace) -> list[str]:
    """The ignored flags a command line gave, as flags."""
    return sorted(
        "--" + k[len("ignored_") :].replace("_", "-")
        for k, v in vars(ns).items()
        if k.startswith("ignored_") and v not in (None, False)
    )


@dataclass
class Serve:
    """What a ``vllm serve`` command line sets (None: vLLM's default, which the engine preset knows)."""

    model: str
    dtype: str | None = None
    quantization: str | None = None
    tp: int = 1
    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False
    eplb: bool = False
    redundant_experts: int = 0
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    long_prefill_token_threshold: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    num_gpu_blocks_override: int | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    prefix_caching: bool | None = None
    enforce_eager: bool = False
    cuda_graph_sizes: list[int] | None = None
    async_scheduling: bool | None = None
    ignored: list[str] = field(default_factory=list)


def _serve_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vllm serve", add_help=False)
    p.add_argument("model", nargs="?")
    p.add_argument("--model", dest="model_flag")
    p.add_argument("--dtype", choices=sorted(DTYPES))
    p.add_argument("--quantization", "-q")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--enable-expert-parallel", action="store_true")
    p.add_argument("--enable-eplb", action="store_true")
    p.add_argument("--num-redundant-experts", type=int)
    p.add_argument("--eplb-config")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--long-prefill-token-threshold", type=int)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--num-gpu-blocks-override", type=int)
    p.add_argument("--kv-cache-dtype", choices=sorted(KV_DTYPES))
    p.add_argument("--block-size", type=int)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--cuda-graph-sizes", type=int, nargs="+")
    p.add_argument("--max-cudagraph-capture-size", type=int)
    p.add_argument("--compilation-config", "-O")
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    _add_ignored(p, SERVE_IGNORED)
    return p


def _json_arg(text: str, flag: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"vllm serve: {flag} {cut(text)!r}: not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise UserError(f"vllm serve: {flag} {cut(text)!r}: expected a JSON object")
    return value


def _graph_sizes(ns: argparse.Namespace) -> tuple[list[int] | None, bool]:
    """(the CUDA-graph capture sizes the command sets, whether it turns graphs off) from
    --cuda-graph-sizes, --max-cudagraph-capture-size and --compilation-config's JSON
    (cudagraph_capture_sizes, max_cudagraph_capture_size, cudagraph_mode NONE)."""
    from llmsim.engine import vllm_capture_sizes

    sizes, off = ns.cuda_graph_sizes, False
    if ns.max_cudagraph_capture_size is not None:
        sizes = list(vllm_capture_sizes(ns.max_cudagraph_capture_size))
    text = ns.compilation_config
    if text is not None and not text.strip().isdigit():  # (-O3: an optimisation level, no graph setting)
        cfg = _json_arg(text, "--compilation-config")
        if "cudagraph_capture_sizes" in cfg:
            sizes = [int(s) for s in cfg["cudagraph_capture_sizes"]]
        elif "max_cudagraph_capture_size" in cfg:
            sizes = list(vllm_capture_sizes(int(cfg["max_cudagraph_capture_size"])))
        off = str(cfg.get("cudagraph_mode", "")).upper() == "NONE"
    return sizes, off


def parse_serve(text: str) -> Serve:
    """A ``vllm serve MODEL [flags]`` command line (``vllm serve`` itself may be left out)."""
    words = _words(text, ("vllm", "serve"), "--serve")
    _refuse_section_flags(words, "vllm serve")
    ns, unknown = _serve_parser().parse_known_args(words)
    if unknown:
        raise UserError(
            f"vllm serve: {cut(' '.join(unknown))}: not a flag llmsim reads (docs/scenario.md lists the ones it "
            "translates; write a scenario for the rest)"
        )
    model = ns.model_flag or ns.model
    if not model:
        raise UserError("vllm serve: no model (vllm serve MODEL ...)")
    for flag, value in (
        ("--tensor-parallel-size", ns.tensor_parallel_size),
        ("--data-parallel-size", ns.data_parallel_size),
    ):
        if value < 1:
            raise UserError(f"vllm serve: {flag} {value}: expected 1 or more")
    if ns.quantization is not None and ns.quantization not in QUANTIZATION:
        raise UserError(
            f"vllm serve: --quantization {cut(ns.quantization)!r}: llmsim reads {', '.join(sorted(QUANTIZATION))}; for "
            "another checkpoint format set model.weight_dtype / act_dtype in a scenario"
        )
    redundant = ns.num_redundant_experts
    if ns.eplb_config is not None:
        redundant = int(_json_arg(ns.eplb_config, "--eplb-config").get("num_redundant_experts", redundant or 0))
    sizes, graphs_off = _graph_sizes(ns)
    return Serve(
        model=model,
        dtype=DTYPES[ns.dtype] if ns.dtype else None,
        quantization=ns.quantization,
        tp=ns.tensor_parallel_size,
        pp=ns.pipeline_parallel_size,
        dp=ns.data_parallel_size,
        expert_parallel=ns.enable_expert_parallel,
        eplb=ns.enable_eplb,
        redundant_experts=redundant or 0,
        max_num_seqs=ns.max_num_seqs,
        max_num_batched_tokens=ns.max_num_batched_tokens,
        long_prefill_token_threshold=ns.long_prefill_token_threshold,
        max_model_len=ns.max_model_len,
        gpu_memory_utilization=ns.gpu_memory_utilization,
        num_gpu_blocks_override=ns.num_gpu_blocks_override,
        kv_cache_dtype=KV_DTYPES[ns.kv_cache_dtype] if ns.kv_cache_dtype else None,
        block_size=ns.block_size,
        prefix_caching=ns.enable_prefix_caching,
        enforce_eager=ns.enforce_eager or graphs_off,
        cuda_graph_sizes=sizes,
        async_scheduling=ns.async_scheduling,
        ignored=_ignored(ns),
    )


@dataclass
class Bench:
    """What a ``vllm bench serve`` command line sets, with the benchmark's own defaults (vLLM 0.30:
    the random dataset, 1,024 tokens in, 128 out, 1,000 prompts, all at once, seed 0, P99)."""

    dataset_name: str = "random"
    input_len: int = 1024
    output_len: int = 128
    range_ratio: float = 0.0
    prefix_len: int = 0
    num_prompts: int = 1000
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    percentiles: list[float] = field(default_factory=lambda: [99.0])
    ignored: list[str] = field(default_factory=list)


def _bench_parser() -> argparse.ArgumentParser:
    d = Bench()
    p = _Parser(prog="vllm bench serve", add_help=False)
    p.add_argument("--dataset-name", default=d.dataset_name)
    p.add_argument("--random-input-len", "--input-len", type=int, dest="input_len", default=d.input_len)
    p.add_argument("--random-output-len", "--output-len", type=int, dest="output_len", default=d.output_len)
    p.add_argument("--random-range-ratio", type=float, dest="range_ratio", default=d.range_ratio)
    p.add_argument("--random-prefix-len", type=int, dest="prefix_len", default=d.prefix_len)
    p.add_argument("--num-prompts", type=int, default=d.num_prompts)
    p.add_argument("--request-rate", type=float, default=d.request_rate)
    p.add_argument("--burstiness", type=float, default=d.burstiness)
    p.add_argument("--max-concurrency", type=int)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--metric-percentiles", default="99")
    _add_ignored(p, BENCH_IGNORED)
    return p


def parse_bench(text: str) -> Bench:
    """A ``vllm bench serve [flags]`` command line (``vllm bench serve`` itself may be left out)."""
    words = _words(text, ("vllm", "bench", "serve"), "--bench")
    ns, unknown = _bench_parser().parse_known_args(words)
    if unknown:
        raise UserError(f"vllm bench serve: {cut(' '.join(unknown))}: not a flag llmsim reads")
    try:
        percentiles = [float(p) for p in ns.metric_percentiles.split(",")]
    except ValueError:
        raise UserError(
            f"vllm bench serve: --metric-percentiles {cut(ns.metric_percentiles)!r}: expected e.g. 50,90,99"
        ) from None
    bench = Bench(
        dataset_name=ns.dataset_name,
        input_len=ns.input_len,
        output_len=ns.output_len,
        range_ratio=ns.range_ratio,
        prefix_len=ns.prefix_len,
        num_prompts=ns.num_prompts,
        request_rate=ns.request_rate,
        burstiness=ns.burstiness,
        max_concurrency=ns.max_concurrency,
        seed=ns.seed,
        percentiles=percentiles,
        ignored=_ignored(ns),
    )
    _check_bench(bench, "vllm bench serve")
    return bench


# Bench's fields: the flag that sets each, its type and its range
BENCH_CHECKS: dict[str, tuple[str, type, object]] = {
    "num_prompts": ("--num-prompts", int, lambda v: v >= 1),
    "input_len": ("--random-input-len", int, lambda v: v >= 1),
    "output_len": ("--random-output-len", int, lambda v: v >= 1),
    "range_ratio": ("--random-range-ratio", float, lambda v: 0 <= v < 1),
    "prefix_len": ("--random-prefix-len", int, lambda v: v >= 0),
    "request_rate": ("--request-rate", float, lambda v: v > 0),
    "burstiness": ("--burstiness", float, lambda v: 0 < v < math.inf),
    "max_concurrency": ("--max-concurrency", int, lambda v: v >= 1),
    "seed": ("--seed", int, lambda v: True),
    "dataset_name": ("--dataset-name", str, lambda v: True),
}


def _check_bench(bench: Bench, where: str) -> None:
    """Each setting of the type and in the range vllm bench serve takes (a UserError naming the flag)."""
    for name, (flag, kind, ok) in BENCH_CHECKS.items():
        value = getattr(bench, name)
        if value is None and name == "max_concurrency":
            continue
        typed = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if isinstance(value, bool) or not typed or not ok(value):  # type: ignore[operator]
            raise UserError(f"{where}: {flag} {cut(repr(value))}: out of range or not a {kind.__name__}")
    p = bench.percentiles
    if not isinstance(p, list) or not p or len(p) > 100 or not all(isinstance(x, float) and 0 < x < 100 for x in p):
        raise UserError(f"{where}: --metric-percentiles {cut(repr(p))}: expected up to 100 numbers between 0 and 100")


# --- a saved result: `vllm bench serve --save-result [--save-detailed]` ---------------------------

# the figures a result file holds that llmsim's summary has under the same key (vllm bench serve's)
RESULT_FIGURES = (
    *("duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput"),
    *("output_throughput", "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests"),
)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
MAX_RESULT_BYTES = 1 << 30  # a result file of every request's token gaps runs to MBs; past a GB it is not one


@dataclass
class Result:
    """A real ``vllm bench serve`` run as its result file or its printout gives it: the benchmark
    settings recorded there (``settings``, keyed as Bench's fields), its figures (the result file's
    keys), and, from a ``--save-detailed`` file, the requests it sent: each one's prompt and output
    tokens and, from vLLM 0.11 on, its send time."""

    path: Path
    model_id: str | None
    settings: dict[str, object]
    figures: dict[str, float]
    input_lens: list[int] | None = None
    output_lens: list[int] | None = None
    start_times: list[float] | None = None


def _number(path: Path, key: str, value: object, kind: type = float) -> float | None:
    if value is None:
        return None
    if key == "request_rate" and value == "inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UserError(f"{path}: {key}: expected a number, got {cut(repr(value))}")
    if kind is int and value != int(value):
        raise UserError(f"{path}: {key}: expected a whole number, got {value}")
    return kind(value)


def _column(path: Path, key: str, value: object, n: int | None, whole: bool) -> list:
    if not isinstance(value, list) or (n is not None and len(value) != n):
        raise UserError(f"{path}: {key}: expected a list of {n if n is not None else 'per-request'} numbers")
    for i, v in enumerate(value):
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        if not ok or (whole and v != int(v)):
            raise UserError(
                f"{path}: {key}[{i}]: expected a {'whole ' if whole else ''}number >= 0, got {cut(repr(v))}"
            )
    return [int(v) for v in value] if whole else [float(v) for v in value]


def load_result(path: str | Path) -> Result:
    """Read a result: the JSON file ``--save-result`` writes, or the text ``vllm bench serve``
    printed (its ``Namespace(...)`` line and its result block, as a console log keeps them); a
    problem is a UserError naming the file and the key or line."""
    from llmsim.errors import load_json_object

    path = Path(path)
    if path.is_file() and path.stat().st_size > MAX_RESULT_BYTES:
        raise UserError(f"{path}: {path.stat().st_size:,} bytes: a vllm bench serve result is far smaller")
    if path.is_file() and not _starts_with_brace(path):
        return _printed_result(path)
    data = load_json_object(path, "--result")
    figures = {k: _number(path, k, data.get(k)) for k in RESULT_FIGURES}
    for key, value in data.items():
        if key.endswith("_ms") and key.split("_", 1)[1].rsplit("_", 1)[0] in LATENCIES:
            figures[key] = _number(path, key, value)
    settings = {
        "num_prompts": _number(path, "num_prompts", data.get("num_prompts"), int),
        "request_rate": _number(path, "request_rate", data.get("request_rate")),
        "burstiness": _number(path, "burstiness", data.get("burstiness")),
        "max_concurrency": _number(path, "max_concurrency", data.get("max_concurrency"), int),
    }
    res = Result(
        path=path,
        model_id=data.get("model_id") if isinstance(data.get("model_id"), str) else None,
        settings={k: v for k, v in settings.items() if v is not None},
        figures={k: v for k, v in figures.items() if v is not None},
    )
    if "input_lens" in data or "output_lens" in data:
        res.input_lens = _column(path, "input_lens", data.get("input_lens"), None, whole=True)
        res.output_lens = _column(path, "output_lens", data.get("output_lens"), len(res.input_lens), whole=True)
        if data.get("start_times") is not None:
            res.start_times = _column(path, "start_times", data["start_times"], len(res.input_lens), whole=False)
        _drop_failed(res, data.get("errors"))
        if not res.input_lens:
            raise UserError(f"{path}: input_lens: no request completed")
    return res


def _starts_with_brace(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4096).lstrip()[:1] == b"{"


# the printed result block's labels (vllm/benchmarks/serve.py) -> the result file's keys
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
SHORT = {"TTFT": "ttft", "TPOT": "tpot", "ITL": "itl", "E2EL": "e2el"}
# the Namespace's names -> Bench's fields (what `vllm bench serve` was run with)
NAMESPACE = {
    "dataset_name": "dataset_name",
    "random_input_len": "input_len",
    "random_output_len": "output_len",
    "random_range_ratio": "range_ratio",
    "random_prefix_len": "prefix_len",
    "num_prompts": "num_prompts",
    "request_rate": "request_rate",
    "burstiness": "burstiness",
    "max_concurrency": "max_concurrency",
    "seed": "seed",
    "metric_percentiles": "percentiles",
}
_LINE = re.compile(r"^\s*([A-Za-z][^:]*?):\s+(-?[\d.]+(?:[eE][-+]?\d+)?|inf|nan)\s*$")
_PAIR = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,()\[\]{}]*)")


def _printed_result(path: Path) -> Result:
    """A console log of ``vllm bench serve``: the settings from its first ``Namespace(...)`` line,
    the figures from the lines of its "Serving Benchmark Result" block."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    start = text.find("Serving Benchmark Result")
    if start < 0:
        raise UserError(
            f"{path}: neither a result file (JSON, vllm bench serve --save-result) nor its printout "
            "(no 'Serving Benchmark Result' block)"
        )
    figures: dict[str, float] = {}
    settings: dict[str, object] = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("=" * 10):
            break
        m = _LINE.match(line)
        if not m:
            continue
        label, value = m.group(1).strip(), float(m.group(2))
        key = PRINTED.get(label) or _latency_key(label)
        if key is not None:
            figures[key] = value
        elif label == "Request rate configured (RPS)":
            settings["request_rate"] = value
        elif label == "Maximum request concurrency":
            settings["max_concurrency"] = int(value)
    if not figures:
        raise UserError(f"{path}: its 'Serving Benchmark Result' block has no figures")
    model = None
    namespace = re.search(r"Namespace\((.*)\)\s*$", text[:start], re.M)
    if namespace:
        values = {k: _literal(v) for k, v in _PAIR.findall(namespace.group(1))}
        model = values.get("model") if isinstance(values.get("model"), str) else None
        for name, fieldname in NAMESPACE.items():
            value = values.get(name)
            if fieldname == "percentiles" and isinstance(value, str):
                value = [float(p) for p in value.split(",") if p.strip()]
            if value is not None:
                settings.setdefault(fieldname, value)
        for general, fieldname in (("input_len", "input_len"), ("output_len", "output_len")):
            if isinstance(values.get(general), int):  # (newer vLLM: --input-len sets the random one)
                settings[fieldname] = values[general]
    return Result(path=path, model_id=model, settings=settings, figures=figures)


def _latency_key(label: str) -> str | None:
    """'Mean TTFT (ms)' -> mean_ttft_ms, 'P99.9 ITL (ms)' -> p99.9_itl_ms."""
    m = re.fullmatch(r"(Mean|Median|P[\d.]+) (TTFT|TPOT|ITL|E2EL) \(ms\)", label)
    if not m:
        return None
    return f"{m.group(1).lower()}_{SHORT[m.group(2)]}_ms"


def _literal(text: str) -> object:
    """One value of a printed Namespace: a quoted string, a number, inf, None, True or False."""
    import ast

    text = text.strip()
    if text == "inf":
        return math.inf
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _drop_failed(res: Result, errors: object) -> None:
    """Keep the requests that completed: a failed one has an error text and, often, 0 output tokens
    (vllm bench serve counts only successes in its figures)."""
    assert res.input_lens is not None and res.output_lens is not None
    n = len(res.input_lens)
    failed = [isinstance(errors, list) and i < len(errors) and bool(errors[i]) for i in range(n)]
    keep = [i for i in range(n) if not failed[i] and res.output_lens[i] > 0 and res.input_lens[i] > 0]
    res.input_lens = [res.input_lens[i] for i in keep]
    res.output_lens = [res.output_lens[i] for i in keep]
    if res.start_times is not None:
        res.start_times = [res.start_times[i] for i in keep]


# --- the scenario ---------------------------------------------------------------------------------


def model_entry(model: str) -> tuple[str | dict, str]:
    """The scenario's ``model`` for what ``vllm serve`` was given, and a note on how it was found: a
    folder holding config.json or a config.json path (the checkpoint's own config), a catalog name, or
    a HuggingFace id the catalog knows (models.served_model)."""
    from llmsim.models import CATALOG, served_model

    path = Path(model).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return {"hf_config": str((path / "config.json").resolve())}, f"{model}: its config.json"
    if model.endswith(".json") and path.is_file():
        return {"hf_config": str(path.resolve())}, f"{model}"
    if model.lower() in CATALOG:
        return model.lower(), f"catalog {model.lower()}"
    name, why = served_model(model)
    if name is None:
        raise UserError(
            f"vllm serve: {why}; serve a folder holding its config.json (vllm serve /path/to/checkpoint) "
            "or name a catalog model (`llmsim models`)"
        )
    return name, f"{model} -> catalog {name}" + (f" ({why})" if why else "")


def _lengths(value: int, ratio: float) -> dict:
    """vllm bench's random lengths: uniform over [floor(L(1-r)), ceil(L(1+r))], fixed at r = 0
    (vllm/benchmarks/datasets, RandomDataset.get_sampling_params)."""
    if ratio == 0:
        return {"dist": "fixed", "value": value}
    return {"dist": "uniform", "min": max(1, math.floor(value * (1 - ratio))), "max": math.ceil(value * (1 + ratio))}


def scenario_dict(
    hardware: str,
    serve: Serve,
    bench: Bench,
    name: str = "vllm-bench",
    trace_csv: str | None = None,
    kv_blocks: int | None = None,
) -> dict:
    """The scenario of ``serve`` on ``hardware`` under ``bench``'s traffic. ``trace_csv``: a generic
    trace of the requests a detailed result file sent (their lengths and send times) in place of
    the random dataset; ``kv_blocks``: the KV capacity the server logged, in vLLM's blocks (its
    null block included, as vLLM counts them)."""
    model, _ = model_entry(serve.model)
    if serve.dtype or serve.quantization:
        model = {"name": model} if isinstance(model, str) else dict(model)
        weight, act = QUANTIZATION.get(serve.quantization or "", (serve.dtype, serve.dtype))
        model["weight_dtype"] = weight
        if act is not None:
            model["act_dtype"] = act
    policy: dict = {"kind": "vllm"}
    for key, value in (
        ("max_num_seqs", serve.max_num_seqs),
        ("chunk_tokens", serve.max_num_batched_tokens),  # one budget: under kind vllm it is max_batch_tokens too
        ("long_prefill_token_threshold", serve.long_prefill_token_threshold),
        ("max_model_len", serve.max_model_len),
    ):
        if value is not None:
            policy[key] = value
    kv: dict = {"memory_fraction": serve.gpu_memory_utilization or 0.9}
    blocks = kv_blocks or serve.num_gpu_blocks_override
    if blocks:
        kv["num_blocks"] = blocks - 1  # block 0 is vLLM's null block
    for key, value in (
        ("dtype", serve.kv_cache_dtype),
        ("block_tokens", serve.block_size),
        ("prefix_caching", serve.prefix_caching),
    ):
        if value is not None:
            kv[key] = value
    cluster: dict = {"tp": serve.tp}
    if serve.pp > 1:
        cluster["pp"] = serve.pp
    if serve.dp > 1:
        cluster |= {"replicas": serve.dp, "router": "vllm_dp"}
    if serve.expert_parallel:
        cluster["expert_parallel"] = True
    if serve.eplb:
        cluster |= {"eplb": True, "redundant_experts": serve.redundant_experts}
    if serve.enforce_eager:
        cluster["cuda_graphs"] = False
    engine: str | dict = "vllm-v1"
    if serve.cuda_graph_sizes is not None or serve.async_scheduling is not None:
        engine = {"preset": "vllm-v1"}
        if serve.cuda_graph_sizes is not None:
            engine["cuda_graph_sizes"] = sorted(set(serve.cuda_graph_sizes))
        if serve.async_scheduling is not None:
            engine["async_scheduling"] = serve.async_scheduling
    return {
        "name": name,
        "seed": bench.seed,
        "model": model,
        "hardware": hardware,
        "engine": engine,
        "cluster": cluster,
        "policy": policy,
        "kv_cache": kv,
        "workload": _workload(bench, trace_csv),
        "output": {"steps": "none", "percentiles": bench.percentiles},
    }


def _workload(bench: Bench, trace_csv: str | None) -> dict:
    if trace_csv is not None:
        workload: dict = {"kind": "trace", "trace": {"path": trace_csv, "format": "generic"}}
    else:
        if bench.dataset_name != "random":
            raise UserError(
                f"vllm bench serve: --dataset-name {cut(bench.dataset_name)}: llmsim draws the random dataset's "
                "lengths itself; for another dataset give the result file of the run (--result, saved with "
                "--save-result --save-detailed), whose requests carry their lengths"
            )
        workload = {
            "kind": "all_at_once" if math.isinf(bench.request_rate) else "poisson",
            "num_requests": bench.num_prompts,
            "prompt_tokens": _lengths(bench.input_len, bench.range_ratio),
            "output_tokens": _lengths(bench.output_len, bench.range_ratio),  # ignore_eos: every one of them
        }
        if bench.prefix_len:
            workload["system_prompts"] = {"count": 1, "tokens": bench.prefix_len}
        if not math.isinf(bench.request_rate):
            workload["rate_rps"] = bench.request_rate
            if bench.burstiness != 1.0:  # vllm bench's gamma gaps of shape B: cv = 1 / sqrt(B)
                workload |= {"kind": "gamma", "cv": bench.burstiness**-0.5}
            workload["arrivals"] = "vllm_bench"  # the very send times the client drew with the seed
    if bench.max_concurrency:
        workload["max_concurrency"] = bench.max_concurrency
    return workload


def sent_requests(result: Result, bench: Bench) -> list[tuple[float, int, int]]:
    """(send time s, prompt tokens, output tokens) of each request a detailed result file sent. The
    times are the file's own start times (from the first) where it has them and no concurrency cap
    held requests back; else those vllm bench drew (the rate, burstiness and seed), or 0 for all
    at once."""
    from llmsim.workload.generators import vllm_bench_arrivals

    assert result.input_lens is not None and result.output_lens is not None
    n = len(result.input_lens)
    if result.start_times is not None and not bench.max_concurrency:
        first = min(result.start_times)
        times = [t - first for t in result.start_times]
    elif math.isinf(bench.request_rate):
        times = [0.0] * n
    else:
        times = [float(t) for t in vllm_bench_arrivals(bench.seed, bench.request_rate, bench.burstiness, n)]
    return sorted(zip(times, result.input_lens, result.output_lens, strict=True))


def bench_from_result(result: Result, bench: Bench, explicit: set[str]) -> Bench:
    """``bench`` with the settings the result records where the command line did not set them
    (``explicit``: the fields it did set), each checked as the command line's would be."""
    out = Bench(**vars(bench))
    for key, value in result.settings.items():
        if key not in explicit:
            setattr(out, key, value)
    _check_bench(out, f"{result.path}")
    return out


# `vllm bench serve` flags -> the Bench field each sets
FLAG_FIELDS = {
    "--dataset-name": "dataset_name",
    "--random-input-len": "input_len",
    "--input-len": "input_len",
    "--random-output-len": "output_len",
    "--output-len": "output_len",
    "--random-range-ratio": "range_ratio",
    "--random-prefix-len": "prefix_len",
    "--num-prompts": "num_prompts",
    "--request-rate": "request_rate",
    "--burstiness": "burstiness",
    "--max-concurrency": "max_concurrency",
    "--seed": "seed",
    "--metric-percentiles": "percentiles",
}


def given_flags(text: str | None) -> set[str]:
    """The Bench fields a ``vllm bench serve`` line set itself."""
    if not text:
        return set()
    flags = {w.split("=", 1)[0] for w in _words(text, ("vllm", "bench", "serve"), "--bench") if w.startswith("--")}
    return {FLAG_FIELDS[f] for f in flags if f in FLAG_FIELDS}


# --- printing ---------------------------------------------------------------------------------------


def result_block(s: dict, bench: Bench) -> str:
    """llmsim's run printed as ``vllm bench serve`` prints its result (vllm/benchmarks/serve.py: the
    same lines, labels and number formats), from the run's summary."""

    def line(label: str, value: object, fmt: str = "") -> str:
        return f"{label:<40} {value:<10{fmt}}"

    out = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    out.append(line("Successful requests:", s["completed"]))
    out.append(line("Failed requests:", s.get("failed", 0)))
    if bench.max_concurrency is not None:
        out.append(line("Maximum request concurrency:", bench.max_concurrency))
    if not math.isinf(bench.request_rate):
        out.append(line("Request rate configured (RPS):", bench.request_rate, ".2f"))
    out.append(line("Benchmark duration (s):", s["duration"], ".2f"))
    out.append(line("Total input tokens:", s["total_input_tokens"]))
    out.append(line("Total generated tokens:", s["total_output_tokens"]))
    out.append(line("Request throughput (req/s):", s["request_throughput"], ".2f"))
    out.append(line("Output token throughput (tok/s):", s["output_throughput"], ".2f"))
    out.append(line("Peak output token throughput (tok/s):", s["max_output_tokens_per_s"], ".2f"))
    out.append(line("Peak concurrent requests:", s["max_concurrent_requests"], ".2f"))
    out.append(line("Total token throughput (tok/s):", s["total_token_throughput"], ".2f"))
    headers = {
        "ttft": ("TTFT", "Time to First Token"),
        "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
        "itl": ("ITL", "Inter-token Latency"),
        "e2el": ("E2EL", "End-to-end Latency"),
    }
    for key, (short, header) in headers.items():
        out.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        out.append(line(f"Mean {short} (ms):", s[f"mean_{key}_ms"], ".2f"))
        out.append(line(f"Median {short} (ms):", s[f"median_{key}_ms"], ".2f"))
        for p in bench.percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            out.append(line(f"P{word} {short} (ms):", s.get(f"p{word}_{key}_ms", float("nan")), ".2f"))
    out.append("=" * 50)
    return "\n".join(out)


def comparison_rows(s: dict, figures: dict[str, float]) -> list[dict]:
    """One row per figure the result file and llmsim's summary both have: real, llmsim, error."""
    rows = []
    for key, real in figures.items():
        sim = s.get(key)
        if isinstance(sim, int | float) and not isinstance(sim, bool):
            err = sim / real - 1 if real else float("nan")
            rows.append({"figure": key, "real": real, "llmsim": float(sim), "error": err})
    return rows
