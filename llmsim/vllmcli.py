"""vLLM's own command lines as a scenario: ``vllm serve MODEL ...`` (``Serve``) and ``vllm bench
serve ...`` (``Bench``) turned into the scenario docs/scenario.md's table describes ("From a `vllm
serve` command to a scenario"), with a real run's recorded settings (``vllmresult``) where the
command line leaves them out. ``llmsim bench`` (commands/bench.py) is the command;
``benchmarks/vllm_gpu/bench_runs.py`` builds its 43 real passes' scenarios here too.

A flag is either translated, accepted as one that does not change timing (``--port``,
``--trust-remote-code``, ``--save-result``: listed back as ignored), or refused with what to do
instead (``--speculative-config``: the ``speculative`` section); a flag llmsim does not know, even a
prefix of one, is an error, never dropped. vLLM's own refusals are refused.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from llmsim.engine import MAX_GRAPH_TOKENS
from llmsim.errors import UserError, cut, json_text
from llmsim.vllmresult import LATENCIES, SETTINGS, Result, ramp_up_of, settings_of
from llmsim.workload.generators import bench_content_ids

if TYPE_CHECKING:
    from llmsim.models import ModelSpec
    from llmsim.quantconfig import CheckpointQuant

# --- the two command lines ------------------------------------------------------------------------

# `vllm serve` flags that do not change what a step costs or how requests are scheduled (the API
# server, logging, loading, tokenizer and chat formatting): False a switch, 1 one value, "+" several
SERVE_IGNORED: dict[str, bool | int | str] = {
    **dict.fromkeys(("--host", "--port", "--api-key", "--download-dir"), 1),
    **dict.fromkeys(("--tokenizer", "--revision", "--tokenizer-mode", "--seed", "--chat-template"), 1),
    **dict.fromkeys(("--tool-call-parser", "--reasoning-parser", "--uvicorn-log-level", "--swap-space"), 1),
    **dict.fromkeys(("--max-logprobs", "--generation-config", "--override-generation-config"), 1),
    **dict.fromkeys(("--prefix-caching-hash-algo", "--safetensors-load-strategy", "--model-loader-extra-config"), 1),
    **dict.fromkeys(("--structured-outputs-config",), 1),  # (used only by requests that ask; bench's do not)
    **dict.fromkeys(("--trust-remote-code", "--disable-log-requests", "--disable-log-stats"), False),
    **dict.fromkeys(("--enable-sleep-mode", "--enable-prompt-tokens-details", "--calculate-kv-scales"), False),
    **dict.fromkeys(("--no-enable-sleep-mode", "--no-enable-prompt-tokens-details", "--no-calculate-kv-scales"), False),
    **dict.fromkeys(("--enable-log-requests", "--enable-auto-tool-choice", "--disable-uvicorn-access-log"), False),
    **dict.fromkeys(("--disable-fastapi-docs", "--enable-chunked-prefill"), False),
}
# `vllm bench serve` flags that do not change the requests it sends or when (the endpoint, where
# results go, sampling settings of requests that run to their output length; the tokenizer's flags
# are read for the sharegpt dataset, DatasetFlags)
BENCH_IGNORED: dict[str, bool | int | str] = {
    **dict.fromkeys(("--backend", "--base-url", "--host", "--port", "--endpoint"), 1),
    **dict.fromkeys(("--label", "--result-dir", "--result-filename"), 1),
    **dict.fromkeys(("--num-warmups", "--temperature", "--top-p", "--top-k", "--min-p"), 1),
    **dict.fromkeys(("--ready-check-timeout-sec", "--request-id-prefix"), 1),
    **dict.fromkeys(("--served-model-name", "--metadata", "--header"), "+"),
    **dict.fromkeys(("--save-result", "--save-detailed", "--append-result", "--disable-tqdm"), False),
    **dict.fromkeys(("--trust-remote-code", "--ignore-eos", "--insecure"), False),
}
# `vllm serve` flags that change what a client sees in ways llmsim does not model, accepted and said so
# (docs/scenario.md, "Not modelled"): the frontend is one constant delay (engine.output_delay_s), and
# vllm bench's requests carry no priority, so vLLM's priority policy admits them as FCFS does
SERVE_UNMODELLED: dict[str, str] = {
    "--stream-interval": "tokens streamed every n steps: the client sees them in bursts, so its ITL reads "
    "about n times the step where llmsim prints one step",
    "--api-server-count": "the frontend is one constant delay, not its processes' load",
    "--scheduling-policy": "vllm bench's requests carry no priority: admitted in arrival order as under fcfs; "
    "short of KV blocks, priority preempts the latest to arrive where fcfs preempts the latest admitted",
}
# flags llmsim does not read from a command line, and what to do instead
REFUSED = {
    "--speculative-config": "write a `speculative` section in a scenario (--scenario-out writes the rest of it)",
    "--enable-lora": "write a `lora` section in a scenario (--scenario-out writes the rest of it)",
    "--kv-transfer-config": "write policy.kind: disaggregated with cluster.prefill_pool / decode_pool in a scenario",
    "--kv-offloading-size": "write kv_cache.offload in a scenario (--scenario-out writes the rest of it)",
    "--no-enable-chunked-prefill": "not modelled: llmsim's vllm policy always chunks prompts, as vLLM v1 does by default",
}
HF_OVERRIDES_REFUSAL = "serve a folder holding the config.json as overridden (llmsim reads the model from it)"
# vllm serve's --block-size choices: vllm/config/cache.py `BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]`
# (256 added after 0.10; the choices 1-128 before)
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
# a --quantization flag on a catalog model -> the checkpoint format (``model.checkpoint``) it asks
# about: vLLM's fp8 quantises a 16-bit checkpoint online into what an FP8 checkpoint holds (W8A8
# with dynamic activation scales where the GPU has FP8 units, else weight-only: Marlin); AWQ / GPTQ
# read a 4-bit checkpoint (weight-only). Resolved on each device, as a named checkpoint is.
QUANTIZATION: dict[str, str] = {
    "fp8": "fp8",
    **dict.fromkeys(("awq", "awq_marlin"), "awq"),
    **dict.fromkeys(("gptq", "gptq_marlin"), "gptq-int4"),
}
# the --quantization values that only name a checkpoint's own format (its quantization_config says
# the precision, quantconfig.py): accepted with such a checkpoint
CHECKPOINT_QUANTIZATION = ("compressed-tensors", "modelopt", "modelopt_fp4")
# the --quantization values that fit a hub id whose name says its format (quantconfig.NAME_SUFFIXES):
# the methods whose checkpoints carry such names (RedHatAI / neuralmagic: compressed-tensors; NVIDIA:
# ModelOpt; Qwen, TheBloke: fp8, AWQ, GPTQ)
NAMED_FLAGS: dict[str, tuple[str, ...]] = {
    "fp8": ("fp8", "compressed-tensors", "modelopt"),
    "nvfp4": ("modelopt_fp4", "modelopt", "compressed-tensors"),
    "awq": ("awq", "awq_marlin"),
    "gptq": ("gptq", "gptq_marlin"),
    **dict.fromkeys(("w8a8", "w4a16", "w8a16"), ("compressed-tensors",)),
}
# vllm serve's --dtype choices (vllm/config/model.py ModelDType: auto, half, float16, bfloat16, float,
# float32); fp32 serving on a GPU (no FlashAttention, no tensor-core GEMMs) is not modelled
DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float": "fp32", "float32": "fp32"}
KV_DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


# vLLM's spelling of large counts (vllm/engine/arg_utils.py: --max-model-len, --max-num-batched-tokens):
# a decimal suffix multiplies by a power of 1,000 and takes a decimal number ("25.6k" is 25,600),
# a binary one by a power of 1,024 and takes a whole one ("32K" is 32,768)
_DECIMAL_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
MAX_MODEL_LEN_AUTO = -1  # --max-model-len auto (or -1): vLLM fits it to the KV cache at start-up


def readable_int(text: str) -> int:
    """A count as vLLM reads it: ``4096``, ``32k`` (32,000), ``25.6k``, ``32K`` (32,768): digits, an
    optional decimal part, one suffix (vLLM's ``human_readable_int``), else a plain integer."""
    text = text.strip()
    m = re.fullmatch(r"(\d+)(\.\d+)?([kmgtKMGT])", text)
    if m and m[3] in _BINARY_SUFFIX and m[2]:
        raise argparse.ArgumentTypeError(
            f"decimals are not allowed with a binary suffix ({text!r}: use {m[3].lower()})"
        )
    if m:
        digits, suffix = m[1] + (m[2] or ""), m[3]
        if suffix in _BINARY_SUFFIX:
            return int(digits) * _BINARY_SUFFIX[suffix]
        try:  # (in floats, as vLLM computes it: "4.1k" is 4,099 there too)
            return int(float(digits) * _DECIMAL_SUFFIX[suffix])
        except OverflowError:
            raise argparse.ArgumentTypeError(f"{cut(text, 30)!r} is too large a count") from None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number, with k/m/g/t (x1000) or K/M/G/T (x1024, whole numbers only), got {cut(text, 30)!r}"
        ) from None


def readable_int_or_auto(text: str) -> int:
    """``readable_int``, or ``auto`` / ``-1`` (MAX_MODEL_LEN_AUTO)."""
    if text.strip() == "-1" or text.strip().lower() == "auto":
        return MAX_MODEL_LEN_AUTO
    return readable_int(text)


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are UserErrors naming the command they came from, and that takes no
    prefix of a flag for the flag (``--enable-lo`` is not ``--enable-log-requests``)."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        super().__init__(prog=prog, add_help=False, allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{self.prog}: {message}")


def _joined_lines(text: str) -> str:
    """A line pasted from a script as the shell joins it: an unescaped backslash before a line break
    removes both, outside single quotes (inside them, and after an escaped backslash, they stay)."""
    out, i, quote = [], 0, None
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = None if c == "'" else quote
        elif c == "\\":
            nxt = text[i + 1 : i + 3]
            if nxt[:1] == "\n" or nxt == "\r\n":
                i += 2 if nxt[:1] == "\n" else 3
                continue
            out.append(text[i : i + 2])  # (an escaped character, kept for shlex to read)
            i += 2
            continue
        elif c in "'\"":
            quote = None if quote == c else (quote or c)
        out.append(c)
        i += 1
    return "".join(out)


API_SERVER = "vllm.entrypoints.openai.api_server"  # `python -m` it: vllm serve before the CLI
SHELL_WORDS = ("&", "&&", "|", "||", ";")  # where a shell line's command ends


def _words(text: str, command: tuple[str, ...], what: str) -> tuple[list[str], dict[str, str]]:
    """The arguments of one command line, and the environment it sets before the command (``VAR=1
    vllm serve ...``): shell words less the command's own (``vllm serve``), with vLLM's underscore
    spellings (``--max_num_seqs``) read as dashes."""
    try:
        words = shlex.split(_joined_lines(text))
    except ValueError as exc:
        raise UserError(f"{what} {cut(text)!r}: {exc}") from None
    shell = next((i for i, w in enumerate(words) if w in SHELL_WORDS or re.match(r"\d?>>?|&>|<", w)), None)
    words = words[:shell]  # (`... > serve.log 2>&1 &`: the shell's redirections and job control)
    env = {}
    while words:
        if words[0] in ("env", "nohup", "exec"):  # (`env VAR=1 vllm serve ...`, `VAR=1 nohup vllm serve ...`)
            words.pop(0)
        elif not words[0].startswith("-") and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        else:
            break
    if command == ("vllm", "serve") and len(words) >= 3 and words[1:3] == ["-m", API_SERVER]:
        words = ["vllm", "serve", *words[3:]]  # (the OpenAI server's module takes vllm serve's flags, --model)
    if words[:1] in (["docker"], ["podman"]):
        raise UserError(
            f"{what} {cut(text)!r}: a container's command line; give {' '.join(command)}'s own (the words after the image)"
        )
    for start in range(len(command)):  # the whole command, or its last words (`serve MODEL`, `bench serve`)
        if words[: len(command) - start] == list(command[start:]):
            words = words[len(command) - start :]
            break
    other = ("vllm", "bench", "serve") if command == ("vllm", "serve") else ("vllm", "serve")
    if words[: len(other)] == list(other) or (len(other) == 3 and words[:2] == list(other[1:])):
        # (the two command lines swapped: `vllm serve` goes to --serve, `vllm bench serve` to --bench)
        flag = "--bench" if what == "--serve" else "--serve"
        raise UserError(f"{what} {cut(text)!r}: this is {' '.join(other)}'s command line; give it to {flag}")
    out = []
    for w in words:
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            flag, dot, key = name.partition(".")  # (a JSON flag's `--hf-overrides.key`: the key as written)
            w = flag.replace("_", "-") + dot + key + eq + value
        out.append(w)
    return out, env


def _add_ignored(p: argparse.ArgumentParser, flags: dict[str, bool | int | str]) -> None:
    for name, takes in flags.items():
        dest = "ignored_" + name.lstrip("-").replace("-", "_")
        if takes is False:
            p.add_argument(name, dest=dest, action="store_true", default=argparse.SUPPRESS)
        else:
            p.add_argument(name, dest=dest, nargs="+" if takes == "+" else None, default=argparse.SUPPRESS)


def _parse(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The parsed flags, and the ignored ones the line gave (as flags)."""
    for word in words:
        name = word.partition("=")[0].split(".", 1)[0]  # (`--hf-overrides.key v` is --hf-overrides)
        if name == "--hf-overrides" and parser.prog == "vllm serve" and any(w.startswith(name + ".") for w in words):
            raise UserError(f"{parser.prog}: {name}: {HF_OVERRIDES_REFUSAL}")
        if name in REFUSED:
            raise UserError(f"{parser.prog}: {name}: {REFUSED[name]}")
    ns, unknown = parser.parse_known_args(words)
    stray = [w for w in unknown if not w.startswith("-")]
    if stray and len(stray) == len(unknown):  # (words that are no flag's: a second model, a value without its flag)
        raise UserError(
            f"{parser.prog}: {cut(' '.join(stray))}: a word that belongs to no flag ({parser.prog} takes "
            f"{'one positional argument, the model' if parser.prog == 'vllm serve' else 'none: the model is --model'}; "
            "give the rest as --flag value)"
        )
    if unknown:
        raise UserError(
            f"{parser.prog}: {cut(' '.join(unknown))}: not a flag llmsim reads (docs/scenario.md lists the ones it "
            "translates; write a scenario for the rest)"
        )
    ignored = sorted("--" + k[len("ignored_") :].replace("_", "-") for k in vars(ns) if k.startswith("ignored_"))
    return ns, ignored


def _whole(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _json_arg(text: str, name: str) -> dict:
    """A flag's JSON object (errors.json_text: malformed, nested too deep or a number too long named)."""
    value = json_text(text, f"vllm serve: {name} {cut(text)!r}")
    if not isinstance(value, dict):
        raise UserError(f"vllm serve: {name} {cut(text)!r}: expected a JSON object")
    return value


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
    long_prefill_token_threshold_adaptive: bool | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None  # --kv-cache-memory-bytes: the cache's size per GPU
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    prefix_caching: bool | None = None
    enforce_eager: bool = False
    cuda_graph_sizes: list[int] | None = None
    async_scheduling: bool | None = None
    executor_backend: str | None = None  # --distributed-executor-backend
    ray_v1: bool = False  # ray with VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0: no async scheduling (_ray_v1)
    moe_skip_padding: bool | None = None  # (the environment's VLLM_MOE_SKIP_PADDING)
    allow_long_max_model_len: bool = False  # (the environment's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)
    all2all_backend: str | None = None  # --all2all-backend (or the older VLLM_ALL2ALL_BACKEND)
    dbo: bool = False  # --enable-dbo, with its two thresholds (None: vLLM's defaults)
    dbo_decode_tokens: int | None = None
    dbo_prefill_tokens: int | None = None
    served_names: list[str] = field(default_factory=list)
    load_format: str | None = None  # --load-format: "dummy" serves random weights (DUMMY_WEIGHTS_NOTE)
    ignored: list[str] = field(default_factory=list)


def _serve_parser() -> argparse.ArgumentParser:
    p = _Parser("vllm serve")
    p.add_argument("model", nargs="?")
    p.add_argument("--model", dest="model_flag")
    p.add_argument("--dtype", choices=sorted(DTYPES))
    p.add_argument("--quantization", "-q")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--enable-expert-parallel", "-ep", action="store_true")
    p.add_argument("--enable-eplb", action="store_true")
    p.add_argument("--num-redundant-experts", type=int)
    p.add_argument("--eplb-config")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=readable_int)
    p.add_argument("--long-prefill-token-threshold", type=int)
    p.add_argument("--long-prefill-token-threshold-adaptive", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--max-model-len", type=readable_int_or_auto)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--num-gpu-blocks-override", type=int)
    p.add_argument("--kv-cache-memory-bytes", type=readable_int)
    p.add_argument("--kv-cache-dtype", choices=sorted(KV_DTYPES))
    p.add_argument("--block-size", type=int)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--cuda-graph-sizes", "--cudagraph-capture-sizes", type=int, nargs="+")
    p.add_argument("--max-cudagraph-capture-size", type=int)
    p.add_argument("--compilation-config", "-cc")
    p.add_argument("--optimization-level", "-O")  # (vLLM 0.11+: O0 compiles nothing and captures no graphs)
    p.add_argument("--served-model-name", nargs="+", default=[])
    p.add_argument("--load-format")
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--distributed-executor-backend", choices=("ray", "mp", "uni", "external_launcher"))
    p.add_argument("--cpu-offload-gb", type=float)
    p.add_argument("--hf-overrides")
    p.add_argument("--all2all-backend")
    p.add_argument("--enable-dbo", action="store_true")
    p.add_argument("--dbo-decode-token-threshold", type=int)
    p.add_argument("--dbo-prefill-token-threshold", type=int)
    _add_ignored(p, {**SERVE_IGNORED, **dict.fromkeys(SERVE_UNMODELLED, 1)})
    return p


def capture_sizes(compilation: dict) -> tuple[list[int] | None, bool, list[str]]:
    """What a --compilation-config JSON says of CUDA graphs: the capture sizes it sets
    (``cudagraph_capture_sizes``, or vLLM's default list up to ``max_cudagraph_capture_size``), whether
    ``cudagraph_mode`` NONE turns them off, and the keys it sets that llmsim does not read."""
    from llmsim.engine import vllm_capture_sizes

    name, sizes = "--compilation-config", None
    if "cudagraph_capture_sizes" in compilation:
        v = compilation["cudagraph_capture_sizes"]
        if not isinstance(v, list) or not v or not all(_whole(x, 1, MAX_GRAPH_TOKENS) for x in v):
            raise UserError(
                f"vllm serve: {name} cudagraph_capture_sizes: expected a list of batch sizes, got {cut(repr(v))}"
            )
        sizes = list(v)
    elif "max_cudagraph_capture_size" in compilation:
        v = compilation["max_cudagraph_capture_size"]
        if not _whole(v, 1, MAX_GRAPH_TOKENS):
            raise UserError(f"vllm serve: {name} max_cudagraph_capture_size: expected a batch size, got {cut(repr(v))}")
        sizes = list(vllm_capture_sizes(v))
    mode = compilation.get("cudagraph_mode")
    off = (isinstance(mode, str) and mode.upper() == "NONE") or (type(mode) is int and mode == 0)  # (NONE = 0)
    read = {"cudagraph_capture_sizes", "max_cudagraph_capture_size"} | ({"cudagraph_mode"} if off else set())
    return sizes, off, sorted(f"{name} {k}" for k in compilation if k not in read)


def _graphs(ns: argparse.Namespace) -> tuple[list[int] | None, bool, list[str]]:
    """(capture sizes, graphs off, ignored settings). The sizes come from --compilation-config, else
    --max-cudagraph-capture-size, else --cuda-graph-sizes, whatever their order on the line; -O0 or
    cudagraph_mode NONE turns graphs off."""
    from llmsim.engine import vllm_capture_sizes

    sizes, off, ignored = ns.cuda_graph_sizes, False, []
    if sizes is not None and not all(1 <= s <= MAX_GRAPH_TOKENS for s in sizes):
        raise UserError(f"vllm serve: --cuda-graph-sizes {cut(' '.join(map(str, sizes)))}: expected batch sizes >= 1")
    if ns.max_cudagraph_capture_size is not None:
        if not 1 <= ns.max_cudagraph_capture_size <= MAX_GRAPH_TOKENS:
            raise UserError(
                f"vllm serve: --max-cudagraph-capture-size {ns.max_cudagraph_capture_size}: "
                f"expected 1 to {MAX_GRAPH_TOKENS:,}"
            )
        sizes = list(vllm_capture_sizes(ns.max_cudagraph_capture_size))
    if ns.compilation_config is not None:
        given, off, ignored = capture_sizes(_json_arg(ns.compilation_config, "--compilation-config"))
        sizes = given if given is not None else sizes
    level = None if ns.optimization_level is None else ns.optimization_level.strip()
    if level is not None:
        if level not in ("0", "1", "2", "3"):
            raise UserError(f"vllm serve: -O {cut(level, 40)}: expected an optimisation level, 0 to 3")
        off = off or level == "0"
        ignored = ignored if level == "0" else [*ignored, f"-O{level}"]
    return sizes, off, ignored


def _redundant_experts(ns: argparse.Namespace) -> tuple[int, list[str]]:
    """The redundant experts (--num-redundant-experts, which vLLM copies over --eplb-config's), and the
    --eplb-config keys llmsim does not read."""
    value, unread = ns.num_redundant_experts, []
    if ns.eplb_config is not None:
        cfg = _json_arg(ns.eplb_config, "--eplb-config")
        if value is None:
            value = cfg.get("num_redundant_experts")
        unread = sorted(f"--eplb-config {k}" for k in cfg if k != "num_redundant_experts")
    if value is not None and not _whole(value, 0, 4096):
        raise UserError(f"vllm serve: redundant experts: expected 0 to 4096, got {cut(repr(value), 40)}")
    if value and not ns.enable_eplb:
        raise UserError("vllm serve: redundant experts without --enable-eplb (vLLM places them only under EPLB)")
    return value or 0, unread


def _check_serve(ns: argparse.Namespace) -> None:
    """The bounds vLLM's own argument checks hold the numbers to."""
    for flag in ("--stream-interval", "--api-server-count"):  # (SERVE_UNMODELLED: read only to be checked)
        value = getattr(ns, "ignored_" + flag[2:].replace("-", "_"), None)
        if value is not None and not (value.isdigit() and int(value) >= 1):
            headless = " (0 runs vLLM headless, with no API server a benchmark can reach)" if "api" in flag else ""
            raise UserError(f"vllm serve: {flag} {cut(value, 20)}: expected a whole number, 1 or more{headless}")
    policy = getattr(ns, "ignored_scheduling_policy", None)
    if policy is not None and policy not in ("fcfs", "priority"):
        raise UserError(f"vllm serve: --scheduling-policy {cut(policy, 20)}: vLLM takes fcfs or priority")
    if ns.cpu_offload_gb is not None and not (math.isfinite(ns.cpu_offload_gb) and ns.cpu_offload_gb >= 0):
        raise UserError(f"vllm serve: --cpu-offload-gb {ns.cpu_offload_gb:g}: expected GiB, 0 or more")
    if ns.cpu_offload_gb:  # (0, vLLM's default, offloads nothing)
        raise UserError(
            "vllm serve: --cpu-offload-gb: not modelled: weights kept in CPU memory cross PCIe on every forward pass"
        )
    if ns.hf_overrides is not None and ns.hf_overrides.strip():
        try:
            overrides = json.loads(ns.hf_overrides)
        except ValueError as exc:
            raise UserError(f"vllm serve: --hf-overrides {cut(ns.hf_overrides, 40)!r}: not JSON ({exc})") from None
        if overrides != {}:
            raise UserError(f"vllm serve: --hf-overrides: {HF_OVERRIDES_REFUSAL}")
    bounds = (
        ("-tp", ns.tensor_parallel_size, 1),
        ("-pp", ns.pipeline_parallel_size, 1),
        ("-dp", ns.data_parallel_size, 1),
        ("--max-num-seqs", ns.max_num_seqs, 1),
        ("--max-num-batched-tokens", ns.max_num_batched_tokens, 1),
        ("--max-model-len", None if ns.max_model_len == MAX_MODEL_LEN_AUTO else ns.max_model_len, 1),
        ("--long-prefill-token-threshold", ns.long_prefill_token_threshold, 0),
        ("--num-gpu-blocks-override", ns.num_gpu_blocks_override, 2),  # (one is vLLM's null block)
        ("--kv-cache-memory-bytes", ns.kv_cache_memory_bytes, 0),  # (0: not set, as vLLM reads it)
        ("--block-size", ns.block_size, 1),
        ("--dbo-decode-token-threshold", ns.dbo_decode_token_threshold, 0),
        ("--dbo-prefill-token-threshold", ns.dbo_prefill_token_threshold, 0),
    )
    for name, value, low in bounds:
        if value is not None and not value >= low:
            raise UserError(f"vllm serve: {name} {value}: expected {low} or more")
    if ns.block_size is not None and ns.block_size not in VLLM_BLOCK_SIZES:
        raise UserError(
            f"vllm serve: --block-size {ns.block_size}: vLLM takes one of "
            f"{', '.join(map(str, VLLM_BLOCK_SIZES))} (its CacheConfig's BlockSize)"
        )
    util = ns.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise UserError(
            f"vllm serve: --gpu-memory-utilization {util}: expected a share of the GPU's memory, above 0 and at most 1"
        )
    if DTYPES.get(ns.dtype) == "fp32":
        raise UserError(
            f"vllm serve: --dtype {ns.dtype}: vLLM takes it, but fp32 serving on a GPU is not modelled "
            "(llmsim prices bf16 / fp16 GEMMs and attention there); serve in bfloat16 or float16"
        )
    if ns.quantization is not None and ns.quantization not in (*QUANTIZATION, *CHECKPOINT_QUANTIZATION):
        known = sorted((*QUANTIZATION, *CHECKPOINT_QUANTIZATION))
        raise UserError(
            f"vllm serve: --quantization {cut(ns.quantization)!r}: llmsim reads {', '.join(known)}; for "
            "another checkpoint format set model.weight_dtype / act_dtype in a scenario"
        )
    if ns.model_flag and ns.model and ns.model_flag != ns.model:
        raise UserError(f"vllm serve: the model is given twice ({ns.model} and --model {ns.model_flag})")
    if not (ns.model_flag or ns.model):
        raise UserError("vllm serve: no model (vllm serve MODEL ...)")


def _ray_v1(ns: argparse.Namespace, env: str | None) -> bool:
    """vLLM's first ray executor, which cannot schedule asynchronously: vLLM turns async scheduling
    off for it and refuses --async-scheduling (vllm/config/vllm.py: executor_supports_async_sched).
    Its ray executor v2, built on the multiprocessing one, schedules asynchronously and is the
    default in recent releases (vllm/envs.py VLLM_USE_RAY_V2_EXECUTOR_BACKEND "1"), so ray counts as
    v1 only where the command line sets VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0."""
    if env is not None and env not in ("0", "1"):
        raise UserError(f"vllm serve: VLLM_USE_RAY_V2_EXECUTOR_BACKEND={cut(env, 20)}: expected 0 or 1")
    v1 = ns.distributed_executor_backend == "ray" and env == "0"
    if v1 and ns.async_scheduling:
        raise UserError(
            "vllm serve: --async-scheduling with vLLM's first ray executor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0): "
            "vLLM refuses it (that executor cannot schedule asynchronously; without the flag it turns it off)"
        )
    return v1


def _all2all_backend(flag: str | None, env: str | None) -> str | None:
    """--all2all-backend (vLLM's ParallelConfig.all2all_backend), or the VLLM_ALL2ALL_BACKEND the
    releases before the flag read; one of the backends llmsim prices (ops.ALL2ALL_BACKENDS)."""
    from llmsim.costmodel.ops import ALL2ALL_BACKENDS

    if flag is not None and env is not None and flag != env:
        raise UserError(
            f"vllm serve: --all2all-backend {cut(flag, 40)} and VLLM_ALL2ALL_BACKEND={cut(env, 40)} disagree"
        )
    value = flag if flag is not None else env
    source = "--all2all-backend" if flag is not None else "VLLM_ALL2ALL_BACKEND"
    if value is not None and value not in ALL2ALL_BACKENDS:
        raise UserError(
            f"vllm serve: {source} {cut(value, 40)!r}: llmsim prices {', '.join(ALL2ALL_BACKENDS)} "
            "(vLLM's default and DeepEP's two kernels; pplx, flashinfer and the others are not modelled)"
        )
    return value


def parse_serve(text: str) -> Serve:
    """A ``vllm serve MODEL [flags]`` command line (``vllm serve`` itself may be left out)."""
    words, env = _words(text, ("vllm", "serve"), "--serve")
    ns, ignored = _parse(_serve_parser(), words)
    _check_serve(ns)
    sizes, graphs_off, unread = _graphs(ns)
    redundant, unread_eplb = _redundant_experts(ns)
    skip = env.pop("VLLM_MOE_SKIP_PADDING", None)
    if skip is not None and skip.lower() not in ("0", "1", "true", "false"):
        raise UserError(f"vllm serve: VLLM_MOE_SKIP_PADDING={cut(skip, 20)}: expected 0 or 1")
    long_len = env.pop("VLLM_ALLOW_LONG_MAX_MODEL_LEN", None)
    if long_len is not None and long_len.lower() not in ("0", "1", "true", "false"):
        raise UserError(f"vllm serve: VLLM_ALLOW_LONG_MAX_MODEL_LEN={cut(long_len, 20)}: expected 0 or 1")
    backend = _all2all_backend(ns.all2all_backend, env.pop("VLLM_ALL2ALL_BACKEND", None))
    ray_env = env.pop("VLLM_USE_RAY_V2_EXECUTOR_BACKEND", None)
    ray_v1 = _ray_v1(ns, ray_env)
    if ray_env is not None and ns.distributed_executor_backend != "ray":
        unread.append("VLLM_USE_RAY_V2_EXECUTOR_BACKEND=... (environment; no ray executor)")
    unread += unread_eplb + [f"{k}=... (environment)" for k in env]
    return Serve(
        model=ns.model_flag or ns.model,
        dtype=DTYPES[ns.dtype] if ns.dtype else None,
        quantization=ns.quantization,
        tp=ns.tensor_parallel_size,
        pp=ns.pipeline_parallel_size,
        dp=ns.data_parallel_size,
        expert_parallel=ns.enable_expert_parallel,
        eplb=ns.enable_eplb,
        redundant_experts=redundant,
        max_num_seqs=ns.max_num_seqs,
        max_num_batched_tokens=ns.max_num_batched_tokens,
        long_prefill_token_threshold=ns.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=ns.long_prefill_token_threshold_adaptive,
        max_model_len=ns.max_model_len,
        gpu_memory_utilization=ns.gpu_memory_utilization,
        num_gpu_blocks_override=ns.num_gpu_blocks_override,
        kv_cache_memory_bytes=ns.kv_cache_memory_bytes or None,
        kv_cache_dtype=KV_DTYPES[ns.kv_cache_dtype] if ns.kv_cache_dtype else None,
        block_size=ns.block_size,
        prefix_caching=ns.enable_prefix_caching,
        enforce_eager=ns.enforce_eager or graphs_off,
        cuda_graph_sizes=sizes,
        async_scheduling=ns.async_scheduling,
        executor_backend=ns.distributed_executor_backend,
        ray_v1=ray_v1,
        moe_skip_padding=None if skip is None else skip.lower() in ("1", "true"),
        allow_long_max_model_len=long_len is not None and long_len.lower() in ("1", "true"),
        all2all_backend=backend,
        dbo=ns.enable_dbo,
        dbo_decode_tokens=ns.dbo_decode_token_threshold,
        dbo_prefill_tokens=ns.dbo_prefill_token_threshold,
        served_names=ns.served_model_name,
        load_format=ns.load_format,
        ignored=ignored + unread,
    )


@dataclass
class Bench:
    """What a ``vllm bench serve`` run was given, under its own Namespace names, with the benchmark's
    defaults (vLLM 0.30: the random dataset, 1,024 tokens in, 128 out, 1,000 prompts, all at once,
    seed 0, P99 of TTFT, TPOT and ITL). ``given``: the settings the run named itself."""

    dataset_name: str = "random"
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    num_prompts: int = 1000
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    metric_percentiles: list[float] = field(default_factory=lambda: [99.0])
    percentile_metrics: list[str] = field(default_factory=lambda: ["ttft", "tpot", "itl"])
    given: frozenset[str] = frozenset()
    ignored: list[str] = field(default_factory=list)
    # the flags of the datasets beyond random (sharegpt's file, prefix_repetition's lengths)
    dataset: DatasetFlags = field(default_factory=lambda: DatasetFlags())
    # --ramp-up-strategy, --ramp-up-start-rps, --ramp-up-end-rps (ramp_up_flags): each request's rate
    ramp_up: tuple[str, int, int] | None = None
    # --goodput KEY:VALUE ... (goodput_flags): the SLOs in ms a request must meet to count as good
    goodput: dict[str, float] = field(default_factory=dict)


# vllm bench serve's prefix_repetition dataset, its flags' defaults (vllm/benchmarks/datasets/
# prefix_repetition.py, PrefixRepetitionRandomDataset's DEFAULT_*): --prefix-repetition-<key>
PREFIX_REPETITION = {"prefix_len": 256, "suffix_len": 256, "num_prefixes": 10, "output_len": 128}


@dataclass(frozen=True)
class DatasetFlags:
    """vllm bench serve's flags of the datasets beyond random: sharegpt's --dataset-path,
    --tokenizer (default: the model), --tokenizer-mode, --sharegpt-output-len, --disable-shuffle
    (prefix_repetition's too), --no-oversample; prefix_repetition's --prefix-repetition-* (those
    given); and the general --output-len, which vLLM maps onto every dataset's output length."""

    path: str | None = None
    tokenizer: str | None = None
    tokenizer_mode: str | None = None
    sharegpt_output_len: int | None = None
    custom_output_len: int | None = None
    skip_chat_template: bool = False  # (--skip-chat-template, or the older --custom-skip-chat-template)
    output_len: int | None = None  # --output-len
    input_len: int | None = None  # --input-len (vLLM maps it onto the random dataset's only)
    shuffle: bool = True
    oversample: bool = True
    prefix_repetition: dict[str, int] = field(default_factory=dict)

    def answers(self, own: int | None) -> int | None:
        """A dataset's output length: --output-len where given (vLLM's override), else its own flag's."""
        return self.output_len if self.output_len is not None else own

    def unread(self, dataset: str | None) -> list[str]:
        """The flags given that the run does not read, with why: ``dataset`` is the dataset drawn
        (None: a result file's requests replayed)."""
        files = {
            "--dataset-path": self.path is not None,
            "--tokenizer": self.tokenizer is not None,
            "--tokenizer-mode": self.tokenizer_mode is not None,
            "--no-oversample": not self.oversample,
        }
        given = {  # (the datasets that read them: flags typed)
            ("sharegpt", "custom"): files,
            ("sharegpt",): {"--sharegpt-output-len": self.sharegpt_output_len is not None},
            ("custom",): {
                "--custom-output-len": self.custom_output_len is not None,
                "--skip-chat-template": self.skip_chat_template,
            },
            ("sharegpt", "custom", "prefix_repetition"): {"--disable-shuffle": not self.shuffle},
            ("prefix_repetition",): {"--prefix-repetition-*": bool(self.prefix_repetition)},
        }
        why = "the result file's requests" if dataset is None else f"not read for the {dataset} dataset"
        return [
            f"{flag} ({why})"
            for readers, flags in given.items()
            for flag, typed in flags.items()
            if typed and dataset not in readers
        ]


# each setting's type, range and what a bad one is told (the flag is --<name with dashes>)
CHECKS: dict[str, tuple[type, Callable[[Any], bool], str]] = {
    "dataset_name": (str, lambda v: bool(v), "expected a dataset name"),
    "random_input_len": (int, lambda v: v >= 1, "expected a whole number, 1 or more"),
    "random_output_len": (int, lambda v: v >= 1, "expected a whole number, 1 or more"),
    "random_range_ratio": (float, lambda v: 0 <= v < 1, "expected a ratio from 0 to below 1"),
    "random_prefix_len": (int, lambda v: v >= 0, "expected 0 or more tokens"),
    "num_prompts": (int, lambda v: v >= 1, "expected a whole number, 1 or more"),
    "request_rate": (float, lambda v: v > 0, "expected requests per second above 0, or inf"),
    # (gaps of gamma shape B have a CV of 1 / sqrt(B); llmsim's gamma arrivals take CVs from 0.001 to 10)
    "burstiness": (
        float,
        lambda v: 0.01 <= v <= 1e6,
        "expected a number from 0.01 to 1,000,000 (a CV between arrivals from 10 to 0.001)",
    ),
    "max_concurrency": (int, lambda v: v >= 1, "expected a whole number, 1 or more"),
    "seed": (int, lambda v: 0 <= v < 2**32, "expected a whole number from 0 to 2**32 - 1"),  # (numpy's seeds)
    "metric_percentiles": (
        list,
        lambda v: 0 < len(v) <= 100 and all(type(p) is float and 0 <= p <= 100 for p in v),
        "expected up to 100 percentiles from 0 to 100, e.g. 50,90,99",
    ),
    "percentile_metrics": (
        list,
        lambda v: len(v) > 0 and set(v) <= set(LATENCIES),
        f"expected some of {','.join(LATENCIES)}",
    ),
}


def flag_of(name: str) -> str:
    """A Bench setting's flag: random_input_len -> --random-input-len."""
    return "--" + name.replace("_", "-")


def _bench_parser(prog: str = "vllm bench serve") -> argparse.ArgumentParser:
    p = _Parser(prog, argument_default=argparse.SUPPRESS)
    for name, (kind, _, _) in CHECKS.items():
        p.add_argument(flag_of(name), dest=name, type=kind if kind in (int, float) else str)
    p.add_argument("--input-len", type=int, dest="input_len")  # (vllm bench serve: these two win over the random ones)
    p.add_argument("--output-len", type=int, dest="output_len")
    p.add_argument("--model", dest="model")
    p.add_argument("--dataset-path", dest="dataset_path")
    p.add_argument("--tokenizer", dest="tokenizer")
    p.add_argument("--sharegpt-output-len", type=int, dest="sharegpt_output_len")
    p.add_argument("--custom-output-len", type=int, dest="custom_output_len")
    p.add_argument(
        "--skip-chat-template", "--custom-skip-chat-template", action="store_true", dest="skip_chat_template"
    )
    p.add_argument("--disable-shuffle", action="store_true", dest="disable_shuffle")
    p.add_argument("--no-oversample", action="store_true", dest="no_oversample")
    for key in PREFIX_REPETITION:
        p.add_argument(f"--prefix-repetition-{key.replace('_', '-')}", type=int, dest=f"prefix_repetition_{key}")
    p.add_argument("--ramp-up-strategy", choices=("linear", "exponential"), dest="ramp_up_strategy")
    p.add_argument("--ramp-up-start-rps", type=int, dest="ramp_up_start_rps")  # (vLLM's are whole numbers)
    p.add_argument("--ramp-up-end-rps", type=int, dest="ramp_up_end_rps")
    p.add_argument("--goodput", nargs="+", dest="goodput")
    _add_ignored(p, BENCH_IGNORED)
    return p


# --goodput's metrics and their scenario SLO keys (vllm/benchmarks/serve.py check_goodput_args:
# ttft, tpot, e2el; a request is good when each is at most its value, a TPOT of one output token 0)
GOODPUT_SLOS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}


def goodput_flags(pairs: list[str], prog: str) -> dict[str, float]:
    """``--goodput ttft:45 e2el:1800`` as vllm bench serve reads it (parse_goodput,
    check_goodput_args): KEY:VALUE pairs in ms, a key given twice the last; each key one of ttft,
    tpot, e2el. A value of 0, which vLLM takes (no request is that fast), is refused: llmsim's SLOs
    are above 0."""
    out: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition(":")
        try:
            if not sep or ":" in value:
                raise ValueError
            out[key] = float(value)
        except ValueError:
            raise UserError(
                f"{prog}: --goodput {cut(pair, 40)!r}: expected KEY:VALUE pairs, a metric name and a number of "
                "milliseconds (ttft:45)"
            ) from None
    for key, value in out.items():
        if key not in GOODPUT_SLOS:
            raise UserError(f"{prog}: --goodput {cut(key, 30)}: the metric is one of {', '.join(GOODPUT_SLOS)}")
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"{prog}: --goodput {key}:{value:g}: expected milliseconds above 0")
    return out


def ramp_up_flags(ns: argparse.Namespace, bench: Bench, prog: str) -> tuple[str, int, int] | None:
    """vllm bench serve's ramp-up, checked as its main_async checks it (vllm/benchmarks/serve.py);
    None without --ramp-up-strategy (the rates alone are not read, as in vLLM)."""
    if getattr(ns, "ramp_up_strategy", None) is None:
        return None
    return check_ramp_up(ramp_up_of(vars(ns)), bench, prog)


def check_ramp_up(ramp: tuple, bench: Bench, prog: str) -> tuple[str, int, int]:
    """A ramp-up (strategy, start, end) as vLLM's main_async accepts one."""
    strategy, start, end = ramp
    if strategy not in ("linear", "exponential"):
        raise UserError(f"{prog}: --ramp-up-strategy {cut(repr(strategy), 30)}: vLLM takes linear or exponential")
    if not math.isinf(bench.request_rate):
        raise UserError(f"{prog}: --ramp-up-strategy with --request-rate: vLLM refuses both (the ramp sets the rate)")
    if start is None or end is None:
        raise UserError(f"{prog}: --ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
        raise UserError(f"{prog}: --ramp-up-start-rps / --ramp-up-end-rps: expected whole requests per second")
    if start > end:
        raise UserError(f"{prog}: --ramp-up-start-rps {start} above --ramp-up-end-rps {end}: vLLM refuses it")
    if start <= 0:  # (vLLM refuses 0 for exponential; linear fails its assertion on the first request)
        raise UserError(f"{prog}: --ramp-up-start-rps {start}: expected 1 or more (vLLM fails on a first rate of 0)")
    return strategy, start, end


def dataset_flags(ns: argparse.Namespace, prog: str) -> DatasetFlags:
    """The flags of the datasets beyond random a command line gave, each checked."""
    for key in ("dataset_path", "tokenizer"):
        if getattr(ns, key, None) == "":
            raise UserError(f"{prog}: {flag_of(key)} '': expected a path")
    custom_len = getattr(ns, "custom_output_len", None)
    if custom_len == -1:  # (newer vLLM: each row's own output length, where the file gives one)
        raise UserError(f"{prog}: --custom-output-len -1: each row's own output length is not read by llmsim; give one")
    counts = {"sharegpt_output_len": getattr(ns, "sharegpt_output_len", None), "custom_output_len": custom_len}
    counts |= {"output_len": getattr(ns, "output_len", None)}
    counts |= {f"prefix_repetition_{k}": getattr(ns, f"prefix_repetition_{k}", None) for k in PREFIX_REPETITION}
    for key, value in counts.items():
        least = 0 if key == "prefix_repetition_prefix_len" else 1  # (no prefix: vLLM's no-sharing baseline)
        if value is not None and value < least:
            raise UserError(f"{prog}: {flag_of(key)} {value}: expected a whole number, {least} or more")
    return DatasetFlags(
        path=getattr(ns, "dataset_path", None),
        tokenizer=getattr(ns, "tokenizer", None),
        tokenizer_mode=getattr(ns, "ignored_tokenizer_mode", None),
        sharegpt_output_len=counts["sharegpt_output_len"],
        custom_output_len=counts["custom_output_len"],
        skip_chat_template=getattr(ns, "skip_chat_template", False),
        output_len=counts["output_len"],
        input_len=getattr(ns, "input_len", None),
        shuffle=not getattr(ns, "disable_shuffle", False),
        oversample=not getattr(ns, "no_oversample", False),
        prefix_repetition={k: v for k in PREFIX_REPETITION if (v := counts[f"prefix_repetition_{k}"]) is not None},
    )


def parse_bench(text: str, what: str = "--bench") -> tuple[Bench, str | None]:
    """A ``vllm bench serve [flags]`` command line (``vllm bench serve`` itself may be left out),
    given as the option ``what``: the run's settings, and the model it names (``--model``), if any."""
    words, env = _words(text, ("vllm", "bench", "serve"), what)
    prog = "vllm bench serve" if what == "--bench" else what
    ns, ignored = _parse(_bench_parser(prog), words)
    ignored += [f"{k}=... (environment)" for k in env]
    given = settings_of(vars(ns))
    if "goodput" in given:
        given["goodput"] = goodput_flags(given["goodput"], prog)
    bench = replace(Bench(), **given, given=frozenset(given), ignored=ignored, dataset=dataset_flags(ns, prog))
    check_bench(bench, prog)
    bench = replace(bench, ramp_up=ramp_up_flags(ns, bench, prog))
    if bench.ramp_up is None:  # (read only with the strategy, as vLLM reads them)
        bench.ignored += [
            f for f in ("--ramp-up-start-rps", "--ramp-up-end-rps") if hasattr(ns, f[2:].replace("-", "_"))
        ]
    return bench, getattr(ns, "model", None)


def with_settings(bench: Bench, settings: dict[str, Any], where: str) -> Bench:
    """``bench`` with ``settings`` (a real run's record of them) where the command line did not
    name them; each checked as the command line's are."""
    out = replace(bench, **{k: v for k, v in settings.items() if k not in bench.given})
    if "goodput" not in bench.given and "goodput" in settings:  # (a printout's Namespace records it)
        out = replace(out, goodput=goodput_flags(settings["goodput"], where))
    check_bench(out, where)
    if out.ramp_up is not None and "ramp_up" not in bench.given:
        out = replace(out, ramp_up=check_ramp_up(out.ramp_up, out, where))
    return out


def check_bench(bench: Bench, where: str) -> None:
    """Each setting of the type and in the range vllm bench serve takes (a UserError naming the flag)."""
    assert set(CHECKS) == set(SETTINGS)
    for name, (kind, ok, expected) in CHECKS.items():
        value = getattr(bench, name)
        if value is None and name == "max_concurrency":
            continue
        typed = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if isinstance(value, bool) or not typed or not ok(value):
            raise UserError(f"{where}: {flag_of(name)} {cut(repr(value), 40)}: {expected}")


def replays_own_send_times(result: Result, bench: Bench) -> bool:
    """A detailed result's requests go at its own send times where it has them, no concurrency cap
    held them back (those times are the cap's), and the command line names no other rate."""
    sent = result.sent
    other_rate = "request_rate" in bench.given and bench.request_rate != result.settings.get("request_rate")
    return sent is not None and sent.start_times is not None and not bench.max_concurrency and not other_rate


def sent_requests(result: Result, bench: Bench) -> list[tuple[float, int, int]]:
    """(send time s, prompt tokens, output tokens) of each request a detailed result file sent, in
    the order they were sent: the file's own send times from the first (``replays_own_send_times``),
    else those vllm bench drew for every request of the file at the rate, burstiness and seed (the
    failed requests' times left out, not closed up), or 0 for all at once."""
    from llmsim.workload.generators import vllm_bench_arrivals
    from llmsim.workload.limits import MAX_ARRIVAL_S

    sent = result.sent
    assert sent is not None
    # the times go to a temporary requests.csv, whose rows the workload's own check would name: a
    # span past the simulator's bound is named here by the field it comes from
    if replays_own_send_times(result, bench):
        assert sent.start_times is not None
        first = min(sent.start_times)
        times = [t - first for t in sent.start_times]
        if max(times, default=0.0) > MAX_ARRIVAL_S:
            raise UserError(
                f"{result.path}: start_times: the requests are sent over {max(times):.3g} s, past "
                f"{MAX_ARRIVAL_S:.0e} s (~32 years); are they in seconds?"
            )
    elif math.isinf(bench.request_rate):
        times = [0.0] * len(sent.index)
    else:
        rate = bench.request_rate
        if sent.count / rate > MAX_ARRIVAL_S:  # (vllm bench sends the last at n / rate: checked before drawing)
            where = (
                f"--bench --request-rate {rate:g}" if "request_rate" in bench.given else f"{result.path}: request_rate"
            )
            span = sent.count / rate  # (inf for a rate so small the division overflows)
            over = f"~{span:.3g} s" if math.isfinite(span) else "an unbounded time"
            raise UserError(
                f"{where}: {sent.count:,} requests at {rate:g} req/s are sent over {over}, past "
                f"{MAX_ARRIVAL_S:.0e} s (~32 years); is the rate's unit off?"
            )
        drawn = vllm_bench_arrivals(bench.seed, rate, bench.burstiness, sent.count)
        times = [float(drawn[i]) for i in sent.index]
    rows = zip(times, sent.input_lens, sent.output_lens, strict=True)
    return sorted(rows, key=lambda r: r[0])  # (stable: the file's order among equal times)


def check_lengths(result: Result, bench: Bench) -> None:
    """A result without its requests says nothing of the dataset's lengths unless its printout's
    Namespace does: the command line must give them then; and where the result has its token
    totals, they must be those lengths' (else the replay would be of another run)."""
    if result.sent is not None:
        if "num_prompts" in bench.given and bench.num_prompts != result.sent.count:
            raise UserError(
                f"--bench --num-prompts {bench.num_prompts}: {result.path} holds the {result.sent.count:,} requests "
                "the run sent"
            )
        return
    recorded = result.settings.get("num_prompts")
    if "num_prompts" in bench.given and recorded is not None and bench.num_prompts != recorded:
        raise UserError(f"--bench --num-prompts {bench.num_prompts}: {result.path} is of a run of {recorded:,} prompts")
    if bench.dataset_name in ("sharegpt", "custom"):
        return  # (their prompts are the file's: drawn as vLLM draws them, the totals side by side)
    if bench.dataset_name == "prefix_repetition":  # (a printout's Namespace keeps no --prefix-repetition-*)
        p = {**PREFIX_REPETITION, **bench.dataset.prefix_repetition}
        _check_totals(result, p["prefix_len"] + p["suffix_len"], "--prefix-repetition-prefix-len + -suffix-len", 0)
        _check_totals(result, bench.dataset.answers(p["output_len"]) or 0, "--prefix-repetition-output-len", 1)
        return
    if not {"random_input_len", "random_output_len"} <= bench.given | set(result.settings):
        raise UserError(
            f"{result.path}: records no prompt and output lengths: give the run's --bench line "
            "(its --random-input-len and --random-output-len)"
        )
    prefix = f" + --random-prefix-len {bench.random_prefix_len}" if bench.random_prefix_len else ""
    _check_totals(result, bench.random_input_len + bench.random_prefix_len, f"--random-input-len{prefix}", 0)
    _check_totals(result, bench.random_output_len, "--random-output-len", 1)


def _check_totals(result: Result, expected: int, name: str, which: int) -> None:
    """The result's mean prompt (``which`` 0) or output (1) tokens a request are ``expected``, within
    5 % (vLLM's prompts are short or long by the tokenizer's special tokens), else the lengths
    llmsim would draw are another run's."""
    total = ("total_input_tokens", "total_output_tokens")[which]
    done = result.figures.get("completed")
    if done and total in result.figures and expected > 0:
        mean = result.figures[total] / done
        if abs(mean / expected - 1) > 0.05:
            raise UserError(
                f"{result.path}: {total} / completed = {mean:,.1f} tokens a request, where {name} gives "
                f"{expected:,}: give the run's own --bench line"
            )


# --- the scenario ---------------------------------------------------------------------------------


def model_entry(model: str) -> tuple[str | dict, str]:
    """The scenario's ``model`` for what ``vllm serve`` was given, and a note on how it was found: a
    folder holding config.json or a config.json path (the checkpoint's own config), a catalog name, or
    a HuggingFace id the catalog knows (models.served_model)."""
    from llmsim.models import CATALOG, served_model

    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(
                f"vllm serve: {model}: a folder without a config.json (the checkpoint's HuggingFace config)"
            )
        return {"hf_config": str((path / "config.json").resolve())}, f"{model}: its config.json"
    if model.endswith(".json"):
        if not path.is_file():
            raise UserError(f"vllm serve: {model}: file not found")
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


def has_experts(entry: str | dict) -> bool:
    """A model_entry's model has routed experts."""
    return model_spec(entry).is_moe


def checkpoint_quantization(entry: str | dict) -> CheckpointQuant | None:
    """The precision a served config.json's quantization_config gives (quantconfig.py), which vLLM
    applies without a --quantization flag (None: unquantised, or a catalog model)."""
    if not isinstance(entry, dict):
        return None
    from llmsim.errors import load_json_object
    from llmsim.quantconfig import read_quant

    # (a key given twice: the last, as transformers and vLLM read a config)
    cfg = load_json_object(Path(entry["hf_config"]), "vllm serve", unique_keys=False)
    return read_quant(cfg, f"vllm serve: {entry['hf_config']}", Path(entry["hf_config"]).parent)


def _family(method: str) -> str:
    """A quantisation method's checkpoint format (vLLM upgrades awq to awq_marlin, gptq to
    gptq_marlin, and its ModelOpt configs claim each other's checkpoints)."""
    return method.removesuffix("_marlin").removesuffix("_fp4")


def _online_fp8(serve: Serve, hardware: str) -> dict:
    """``--quantization fp8`` on a served folder's 16-bit checkpoint: its config.json names no
    format to resolve on each device (``model.checkpoint`` is a catalog model's), so this GPU's
    FP8 units decide here: W8A8, or weight-only (Marlin) in the 16-bit compute --dtype gives."""
    from llmsim.hardware import load_profile

    act = "fp8" if load_profile(hardware).computes_in("fp8") else serve.dtype
    return {"weight_dtype": "fp8"} | ({"act_dtype": act} if act else {})


def _precision(serve: Serve, entry: str | dict, hardware: str) -> dict:
    """The scenario's model keys for --dtype and --quantization or the checkpoint's own
    quantization_config (vLLM refuses the two disagreeing): a quantised format as
    ``model.checkpoint`` (or the config itself), which the scenario resolves on each device:
    quantised compute (W8A8, W4A4) only on a GPU with those matrix units; elsewhere vLLM runs the
    weights through its weight-only kernels (Marlin), and the activations stay 16-bit."""
    from llmsim.quantconfig import CHECKPOINT_FORMATS, format_name, split_quant_suffix

    own = checkpoint_quantization(entry)
    flag = serve.quantization
    if flag and own and _family(flag) != _family(own.method):
        raise UserError(f"vllm serve: --quantization {flag}, but the checkpoint is {own.method}-quantised")
    # no config read: a hub id's name may say its format (a guess), and a flag must be of its family
    named = (
        None if own or isinstance(entry, dict) else split_quant_suffix(serve.model.rstrip("/").rsplit("/", 1)[-1])[1]
    )
    if flag and named is not None and flag not in NAMED_FLAGS[named.method]:
        raise UserError(
            f"vllm serve: --quantization {flag}, but {serve.model}'s name says its checkpoint is "
            f"{named.method}-quantised, which vLLM serves with {' or '.join(NAMED_FLAGS[named.method])} (it "
            "refuses a --quantization its checkpoint's config does not name); drop the flag or give the matching one"
        )
    if flag and not (own or named):  # the flag alone names a format: the checkpoint says none
        checkpoint = isinstance(entry, dict) or "/" in serve.model  # (a config read, or a hub id of the catalog's)
        if flag not in QUANTIZATION or (flag != "fp8" and checkpoint):
            # AWQ, GPTQ, compressed-tensors and ModelOpt read weights quantised ahead of time, with
            # the scales their config names (vLLM: "Cannot find the config file for awq"); fp8 alone
            # quantises a 16-bit checkpoint online. (A catalog name, no checkpoint, asks what an
            # AWQ/GPTQ checkpoint of it would do: priced.)
            raise UserError(
                f"vllm serve: --quantization {flag} reads a checkpoint quantised with it (a "
                f"quantization_config in its config.json), and {serve.model} has none; name such a "
                "checkpoint, or quantise this one online with --quantization fp8"
            )
        if isinstance(entry, dict):  # a 16-bit folder quantised online (fp8)
            return _online_fp8(serve, hardware)
        named = CHECKPOINT_FORMATS[QUANTIZATION[flag]]  # (a catalog model: the format the flag asks about)
    q = own or named
    if q is None:
        return {"weight_dtype": serve.dtype, "act_dtype": serve.dtype} if serve.dtype else {}
    # the checkpoint's format, from its config (build_model reads its weights) or by name
    # (model.checkpoint): scenario.apply_checkpoint resolves its compute and KV dtypes on each
    # device a plan or sweep tries (a flag of a named format's family names no other bits:
    # GPTQ-Int8 stays int8); --dtype is the 16-bit compute a weight-only format runs in
    return ({"checkpoint": format_name(q)} if named else {}) | (
        {"act_dtype": serve.dtype} if serve.dtype and not q.act_dtype else {}
    )


def dense_ignored(serve: Serve) -> list[str]:
    """The expert-parallel flags vLLM ignores because the model has no experts."""
    if has_experts(model_entry(serve.model)[0]):
        return []
    return [f for f, on in (("-ep", serve.expert_parallel), ("--enable-eplb", serve.eplb)) if on]


def _dbo_thresholds(serve: Serve) -> dict[str, int]:
    """The --dbo-*-token-threshold values the command line gives, by their cluster key."""
    given = {
        "dbo_decode_token_threshold": serve.dbo_decode_tokens,
        "dbo_prefill_token_threshold": serve.dbo_prefill_tokens,
    }
    return {key: value for key, value in given.items() if value is not None}


def all2all_ignored(serve: Serve) -> list[str]:
    """--all2all-backend / --enable-dbo (and its thresholds) where nothing reads them: vLLM's all2all
    moves tokens between the data-parallel ranks of an expert-parallel group, so without one (-dp
    above 1 with -ep on a MoE model) it goes unused; the thresholds go unused without --enable-dbo."""
    thresholds = [KEY_FLAGS[f"cluster.{key}"] for key in _dbo_thresholds(serve)]
    if serve.dp > 1 and serve.expert_parallel and has_experts(model_entry(serve.model)[0]):
        return [] if serve.dbo else thresholds  # (the thresholds without --enable-dbo: unread)
    flags = [f for f, on in (("--all2all-backend", serve.all2all_backend), ("--enable-dbo", serve.dbo)) if on]
    return flags + thresholds


def _lengths(value: int, ratio: float) -> dict:
    """vllm bench's random lengths: uniform over [floor(L(1-r)), ceil(L(1+r))], fixed at r = 0
    (vllm/benchmarks/datasets, RandomDataset.get_sampling_params)."""
    if ratio == 0:
        return {"dist": "fixed", "value": value}
    return {"dist": "uniform", "min": max(1, math.floor(value * (1 - ratio))), "max": math.ceil(value * (1 + ratio))}


# the scenario keys scenario_dict writes from a flag (to name the flag in an error about the key)
KEY_FLAGS = {
    "cluster.replicas": "-dp",
    "cluster.tp": "-tp",
    "cluster.pp": "-pp",
    "cluster.expert_parallel": "-ep",
    "cluster.eplb": "--enable-eplb",
    "cluster.redundant_experts": "--num-redundant-experts",
    "cluster.all2all_backend": "--all2all-backend",
    "cluster.dual_batch_overlap": "--enable-dbo",
    "cluster.dbo_decode_token_threshold": "--dbo-decode-token-threshold",
    "cluster.dbo_prefill_token_threshold": "--dbo-prefill-token-threshold",
    "policy.max_num_seqs": "--max-num-seqs",
    "policy.chunk_tokens": "--max-num-batched-tokens",
    "policy.max_model_len": "--max-model-len",
    "policy.long_prefill_token_threshold": "--long-prefill-token-threshold",
    "policy.long_prefill_token_threshold_adaptive": "--long-prefill-token-threshold-adaptive",
    "kv_cache.num_blocks": "--num-gpu-blocks-override",
    "kv_cache.memory_fraction": "--gpu-memory-utilization",
    "kv_cache.memory_bytes": "--kv-cache-memory-bytes",
    "kv_cache.block_tokens": "--block-size",
    "workload.prompt_tokens": "--random-input-len",
    "workload.output_tokens": "--random-output-len",
    "workload.cv": "--burstiness",
    "workload.rate_rps": "--request-rate",
    "workload.num_requests": "--num-prompts",
    "workload.max_concurrency": "--max-concurrency",
    "workload.prompts": "--num-prompts",
    "workload.system_prompts": "--random-prefix-len",
    "seed": "--seed",
}


# How many experts a decode step reaches when the prompts are vllm bench's random dataset
# (synthetic token ids, not text): its B sequences reach what B^this independent tokens would. Fitted by
# benchmarks/moe_routing.py to vLLM 0.30's graphed decode steps of granite-3.1-3b-a800m (40 experts,
# top-8) on an L4 with random-vocabulary tokens (data/validation/moe_kernels/routing_steps.csv);
# checked on the Qwen3 A3B passes (64 and 128 experts), docs/validation.md "vLLM 0.30 GPU runs". Real
# text is not measured: other datasets keep independent routing (1)
RANDOM_TOKEN_ROUTING_EXPONENT = 0.79


# The most content ids (one per 16 prompt tokens) `llmsim bench` gives drawn prompts: a run with
# content takes the prefix-cache path, which benchmarks/bench_prompt_content.py measures on this
# project's 2-core VM at 1.2x the whole command's time of one without for 1,000 x 1,024-token
# prompts, 2.6x for 5,000 x 2,048 (640k ids) and 3.9x (0.96 -> 3.7 s, 157 -> 379 MB) for 30,000 x
# 1,024 (1.9M ids); past this a run is priced without (and says so)
BENCH_CONTENT_IDS = 2_000_000


def _mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int:
    """A count as --set may have left it (text, a list, NaN, 1e400): 0 where it is none, which the
    scenario's own validation then refuses by name."""
    try:
        return max(int(value), 0) if isinstance(value, int | float | str) and not isinstance(value, bool) else 0
    except (ValueError, OverflowError):
        return 0


def _file_dataset(bench: Bench, model: str) -> dict:
    """A ``workload.dataset`` section of vllm bench's sharegpt or custom sample (llmsim/workload/
    sharegpt.py, custom.py): the file as an absolute path (a scenario written elsewhere still finds
    it), the tokenizer --tokenizer names, else the model's (vllm bench serve's default)."""
    flags, name = bench.dataset, bench.dataset_name
    kind = "ShareGPT JSON file" if name == "sharegpt" else "JSONL file of prompts"
    if flags.path is None:
        raise UserError(f"--dataset-name {name}: needs --dataset-path, the {kind} the benchmark reads")
    if not Path(flags.path).is_file():
        raise UserError(f"--dataset-path {cut(flags.path)}: no such file (the {kind} the benchmark reads)")
    if name == "custom" and not flags.path.endswith(".jsonl"):  # (vLLM: "Only JSONL format is supported")
        raise UserError(
            f"--dataset-path {cut(flags.path)}: vllm bench serve reads a custom dataset from a .jsonl file only"
        )
    if flags.tokenizer_mode not in (None, "auto", "hf"):
        raise UserError(
            f"--tokenizer-mode {cut(flags.tokenizer_mode, 20)} with the {name} dataset: llmsim counts tokens with "
            "the model's tokenizer.json (the fast tokenizer vLLM's auto mode loads); other modes may count otherwise"
        )
    out: dict = {"name": name, "path": os.path.abspath(flags.path), "tokenizer": flags.tokenizer or model}
    if Path(out["tokenizer"]).exists():
        out["tokenizer"] = os.path.abspath(out["tokenizer"])
    answers = flags.answers(flags.sharegpt_output_len if name == "sharegpt" else flags.custom_output_len)
    if answers is not None:
        out["output_tokens"] = answers
    if not flags.shuffle:
        out["shuffle"] = False
    if not flags.oversample:
        out["oversample"] = False
    if name == "custom" and flags.skip_chat_template:
        out["chat_template"] = False
    return out


def _prefix_repetition(bench: Bench) -> dict:
    """vllm bench serve's prefix_repetition dataset as a ``shared_prefix`` workload: num_prefixes
    random prefixes of prefix_len tokens, each followed by num_prompts // num_prefixes random
    suffixes of suffix_len tokens (so that many requests, no more: vLLM does not oversample it),
    shuffled with Python's random seeded with --seed (``order: vllm_bench``; ``fixed`` under
    --disable-shuffle: prefix by prefix), each answer output_len tokens."""
    p = {**PREFIX_REPETITION, **bench.dataset.prefix_repetition}
    per = bench.num_prompts // p["num_prefixes"]
    if per == 0:  # (vLLM raises the same)
        raise UserError(
            f"--num-prompts {bench.num_prompts}: the prefix_repetition dataset needs at least "
            f"--prefix-repetition-num-prefixes ({p['num_prefixes']}) prompts"
        )
    return {
        "num_requests": per * p["num_prefixes"],
        "shared_prefix": {
            "num_groups": p["num_prefixes"],
            "num_prompts_per_group": per,
            "system_prompt_len": p["prefix_len"],
            "question_len": p["suffix_len"],
            "output_len": bench.dataset.answers(p["output_len"]),
            "order": "vllm_bench" if bench.dataset.shuffle else "fixed",
        },
    }


def settle_prompts(data: dict, set_keys: frozenset[str] = frozenset()) -> str | None:
    """Give a translated scenario's drawn prompts their content as the seed draws it
    (workload.prompts vllm_bench: a preempted request finds its own blocks again, and a later run on
    the server an earlier one's, `llmsim bench --after`), decided on the scenario as --set left it
    (``set_keys``: the keys it set). Returns why llmsim withholds it, or None (nothing to say: the
    prompts carry it, --set chose for them, or a replayed file's requests, which carry none): with
    the prefix cache off it could match nothing, and past BENCH_CONTENT_IDS content ids the run
    would be slow and large."""
    w = data.get("workload")
    drawn = isinstance(w, dict) and ("dataset" in w or "shared_prefix" in w)  # (their own content)
    if not isinstance(w, dict) or w.get("kind") == "trace" or drawn or "workload.prompts" in set_keys:
        return None  # (a --set that made it no mapping: the scenario's validation says so; a dataset's own)
    why = None
    kv = data.get("kv_cache")
    if isinstance(kv, dict) and kv.get("prefix_caching") is False:
        why = "the prefix cache is off"
    else:
        spec, system = _mapping(w.get("prompt_tokens")), _mapping(w.get("system_prompts"))
        longest = _count(spec.get("value") or spec.get("max")) + _count(system.get("tokens"))
        n = _count(w.get("num_requests"))
        ids = bench_content_ids(n, longest)
        if ids > BENCH_CONTENT_IDS:
            why = (
                f"{n:,} prompts of up to {longest:,} tokens are {ids:,} 16-token blocks, past the "
                f"{BENCH_CONTENT_IDS:,} llmsim tracks for them: no prefix-cache hits (a preempted request "
                "recomputes its whole prompt)"
            )
    if why is None:
        w["prompts"] = "vllm_bench"
    else:
        w.pop("prompts", None)
    return why


# `vllm serve --load-format dummy` fills every weight with random values uniform in +-1e-3
# (initialize_dummy_weights, vllm/model_executor/model_loader/weight_utils.py). A router that adds a
# learned bias to its scores before it picks (ModelSpec.router_bias: DeepSeek-V3's noaux_tc) then
# picks by the bias alone, which outweighs scores that differ by ~1e-5: every token reaches the same
# experts, and a decode step streams only those (cluster.expert_routing_exponent 0). The same collapse
# is reported of SGLang's dummy loader (sgl-project/sglang PR #25571, "random gate weights cause severe
# expert imbalance") and ROCm ATOM's (ROCm/ATOM PR #2010, "every token selects the same few experts").
# A router without a bias (Qwen3-MoE, Mixtral) keeps llmsim's routing: what random weights do to it is
# not measured
DUMMY_WEIGHTS_NOTE = (
    "--load-format dummy: the router's correction bias alone picks a token's experts, the same ones for "
    "every token (vLLM's dummy weights are uniform in +-1e-3, the bias included); real weights spread them"
)


def dummy_routing(load_format: str | None, expert_parallel: bool, model: ModelSpec) -> bool:
    """Every token reaches the same experts (DUMMY_WEIGHTS_NOTE): dummy weights behind a biased router,
    where llmsim prices it (not under expert parallelism, whose load it would put on a few GPUs)."""
    return load_format == "dummy" and model.router_bias and not expert_parallel


def model_spec(entry: str | dict) -> ModelSpec:
    """The ModelSpec of a model_entry."""
    from llmsim.models import CATALOG, from_hf_config

    return CATALOG[entry] if isinstance(entry, str) else from_hf_config(Path(entry["hf_config"]))


def random_token_prompts(bench: Bench, replay: bool) -> bool:
    """The requests are vllm bench's random dataset: drawn by it, or a replayed result file's whose
    command line says so (a result file does not record its dataset: the default is not taken)."""
    return bench.dataset_name == "random" and (not replay or "dataset_name" in bench.given)


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
    entry, _ = model_entry(serve.model)
    precision = _precision(serve, entry, hardware)
    model = {**({"name": entry} if isinstance(entry, str) else entry), **precision} if precision else entry
    policy: dict = {"kind": "vllm"}
    for key, value in (
        ("max_num_seqs", serve.max_num_seqs),
        ("chunk_tokens", serve.max_num_batched_tokens),  # one budget: under kind vllm it is max_batch_tokens too
        ("long_prefill_token_threshold", serve.long_prefill_token_threshold),
        ("long_prefill_token_threshold_adaptive", serve.long_prefill_token_threshold_adaptive),
        ("allow_long_max_model_len", serve.allow_long_max_model_len or None),
        ("max_model_len", None if serve.max_model_len == MAX_MODEL_LEN_AUTO else serve.max_model_len),
    ):
        if value is not None:
            policy[key] = value
    kv: dict = {}
    blocks = kv_blocks if kv_blocks is not None else serve.num_gpu_blocks_override
    if blocks is not None:
        kv["num_blocks"] = blocks - 1  # block 0 is vLLM's null block
    for key, value in (
        ("memory_fraction", serve.gpu_memory_utilization),
        ("memory_bytes", serve.kv_cache_memory_bytes),
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
    moe = has_experts(entry)  # (vLLM ignores expert parallelism on a dense model)
    if serve.expert_parallel and moe:
        cluster["expert_parallel"] = True
    if moe and dummy_routing(serve.load_format, serve.expert_parallel and serve.dp * serve.tp > 1, model_spec(entry)):
        cluster["expert_routing_exponent"] = 0.0
    elif moe and random_token_prompts(bench, trace_csv is not None):
        cluster["expert_routing_exponent"] = RANDOM_TOKEN_ROUTING_EXPONENT
    if serve.eplb and moe:
        cluster |= {"eplb": True, "redundant_experts": serve.redundant_experts}
    unread = all2all_ignored(serve)
    if serve.all2all_backend is not None and "--all2all-backend" not in unread:
        cluster["all2all_backend"] = serve.all2all_backend
    if serve.dbo and "--enable-dbo" not in unread:
        cluster |= {"dual_batch_overlap": True, **_dbo_thresholds(serve)}
    if serve.enforce_eager:
        cluster["cuda_graphs"] = False
    engine: dict = {"preset": "vllm-v1"}
    if serve.cuda_graph_sizes is not None:
        engine["cuda_graph_sizes"] = sorted(set(serve.cuda_graph_sizes))
    async_scheduling = False if serve.ray_v1 else serve.async_scheduling  # (_ray_v1)
    for key, value in (("async_scheduling", async_scheduling), ("moe_skip_padding", serve.moe_skip_padding)):
        if value is not None:
            engine[key] = value
    out = {
        "name": name,
        "seed": bench.seed,
        "model": model,
        "hardware": hardware,
        "engine": engine if len(engine) > 1 else "vllm-v1",
        "cluster": cluster,
        "policy": policy,
        "kv_cache": kv,
        "workload": _workload(bench, trace_csv, serve.model),
        "output": {"steps": "none", "percentiles": bench.metric_percentiles},
    }
    if bench.goodput:  # (the summary's request_goodput counts the requests meeting them, as vLLM's)
        out["slo"] = {GOODPUT_SLOS[k]: v / 1000 for k, v in bench.goodput.items()}
    settle_prompts(out)
    return out


def _workload(bench: Bench, trace_csv: str | None, model: str) -> dict:
    if trace_csv is not None:
        workload: dict = {"kind": "trace", "trace": {"path": trace_csv, "format": "generic"}}
    else:
        paced = not math.isinf(bench.request_rate) or bench.ramp_up is not None
        workload = {"kind": "poisson" if paced else "all_at_once", "num_requests": bench.num_prompts}
        if bench.dataset_name in ("random", "prefix_repetition") and bench.dataset.path is not None:
            raise UserError(  # (vllm/benchmarks/serve.py refuses a path beside its generated datasets)
                f'--dataset-path with the {bench.dataset_name} dataset: vllm bench serve refuses it ("Cannot use '
                f"'{bench.dataset_name}' dataset with --dataset-path\"); name the file's dataset, e.g. --dataset-name sharegpt"
            )
        if bench.dataset_name in ("sharegpt", "custom"):
            workload["dataset"] = _file_dataset(bench, model)
        elif bench.dataset_name == "prefix_repetition":
            workload |= _prefix_repetition(bench)
        elif bench.dataset_name != "random":
            raise UserError(
                f"--dataset-name {cut(bench.dataset_name)}: llmsim draws the random, sharegpt, custom and "
                "prefix_repetition datasets' requests itself; another dataset's come from the run's result file saved "
                "with --save-result --save-detailed (--result), which carries their lengths"
            )
        else:
            workload["prompt_tokens"] = _lengths(bench.random_input_len, bench.random_range_ratio)
            workload["output_tokens"] = _lengths(bench.random_output_len, bench.random_range_ratio)  # ignore_eos
        if bench.random_prefix_len and bench.dataset_name == "random":  # (llmsim rounds it to whole 16-token ids)
            workload["system_prompts"] = {"count": 1, "tokens": bench.random_prefix_len}
        if paced:
            if bench.ramp_up is not None:
                strategy, start, end = bench.ramp_up
                workload["ramp_up"] = {"strategy": strategy, "start_rps": start, "end_rps": end}
            else:
                workload["rate_rps"] = bench.request_rate
            if bench.burstiness != 1.0:  # vllm bench's gamma gaps of shape B: cv = 1 / sqrt(B)
                workload |= {"kind": "gamma", "cv": bench.burstiness**-0.5}
            # the very send times the client drew with the seed; not after prefix_repetition's tokens, which
            # vLLM draws from the same global generator first (as many as its tokenizer's re-encoding takes)
            if bench.dataset_name != "prefix_repetition":
                workload["arrivals"] = "vllm_bench"
    if bench.max_concurrency:
        workload["max_concurrency"] = bench.max_concurrency
    return workload
