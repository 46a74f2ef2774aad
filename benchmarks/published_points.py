"""Published serving figures (data/validation/published/points.yaml), each simulated as a user would
set it up in llmsim, and the simulated figure against the published one.

    .venv/bin/python benchmarks/published_points.py                    # every point: table + summary
    .venv/bin/python benchmarks/published_points.py --ids ID[,ID...]   # some points
    .venv/bin/python benchmarks/published_points.py --limit 10 --notes --write results/published.csv

Each point is mapped by small functions below: the model (Hugging Face id -> catalog name), the
hardware profile, the parallelism, the precision, the engine's scheduler limits (trtllm-bench's
heuristic, vLLM's flags), the workload of its mode, and the metric that is read back. A point llmsim
cannot express (no profile, model not in the catalog, a dtype validation refuses, closed-loop
clients, ShareGPT lengths, expert parallelism ...) gets status ``not expressible`` with the reason;
nothing is skipped silently. No llmsim parameter is tuned to these figures.

error = simulated / published - 1; ``ok`` within +-20 %, else ``miss``; ``error`` is an exception.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

import llmsim
from llmsim.build import build_model, build_pools
from llmsim.engine import TRTLLM_MAX_BATCH, TRTLLM_MAX_TOKENS
from llmsim.errors import UserError
from llmsim.hardware import available_profiles, load_profile
from llmsim.models import CATALOG, served_model
from llmsim.scenario import Scenario, scenario_from_dict
from llmsim.tables import table

ROOT = Path(__file__).resolve().parent.parent
POINTS = ROOT / "data" / "validation" / "published" / "points.yaml"
REQUEST_CAP = 3000  # max-throughput points: at most this many requests ...
WAVES = 4  # ... unless the batch limit admits more at once: then this many batches' worth
OK_BAND = 0.20
# a decode-only figure at a stated context (SGLang's decode nodes): this many tokens decoded after it,
# enough for every rank's whole batch to decode together once its prompts are in (``decode_throughput``
# reads those steps alone)
DECODE_STEPS = 64
HORIZON_S = 1e7  # simulated seconds: never the limit (the default, 2 x last arrival + 600 s, cuts offline runs)
GIB = 2**30

# models llmsim could not price even from a config.json (llmsim/models.py hf_family refuses them)
UNPRICEABLE: dict[str, str] = {}

# published metric -> the summary key compared with it
METRICS = {
    "total_output_tokens_per_s": "output_throughput",
    "output_tokens_per_s": "output_throughput",
    "output_tokens_per_s_per_gpu": "output_throughput",
    "throughput_tokens_per_s": "output_throughput",
    "first_token_latency_ms": "mean_ttft_ms",
    "ttft_ms": "mean_ttft_ms",
    "ttft_ms_mean": "mean_ttft_ms",
    "next_token_latency_ms": "mean_tpot_ms",
    "tpot_ms": "mean_tpot_ms",
    "itl_ms_mean": "mean_itl_ms",
    "e2e_latency_s": "duration",
    "request_throughput_req_per_s": "request_throughput",
    "input_tokens_per_s_per_node": "input_throughput",
    "output_tokens_per_s_per_node": "output_throughput",
}

# The CUDA-graph batch sizes of the v1.0 page's llm_options.yml (cuda_graph_config: enable_padding
# true, batch_sizes 1, 2, 4, ... 8192): a decode batch pads up to the next of them (TensorRT-LLM
# captures min(max_batch_size, max_num_tokens) in place of the larger ones: build.graph_sizes)
TRTLLM_PAGE_GRAPH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)

# bytes per weight / KV element in trtllm-bench's heuristic (tensorrt_llm/bench/build/tuning.py BYTES_PER_ELEM)
TRTLLM_BYTES = {"fp8": 1.0, "fp4": 0.5}


@dataclass
class Mapping:
    """One point as llmsim sees it: a scenario (None when it cannot be expressed) and how to read it."""

    point: dict
    scenario: dict | None = None
    figure: str = ""  # the summary key compared with the published value
    per_gpus: int = 1  # the published figure is per device: divide by this
    reasons: list[str] = field(default_factory=list)  # why it is not expressible
    notes: list[str] = field(default_factory=list)  # the assumptions made
    # TensorRT-LLM's dynamic batch tuner (the TensorRT flow of trtllm-bench): the batch limit
    # follows the requests whose whole length fits the KV cache, bucketed (trtllm_runtime_batch)
    dynamic_batch: bool = False
    lengths: tuple[int, int] = (0, 0)  # ISL, OSL


@dataclass
class Row:
    id: str
    hardware: str
    model: str
    mode: str
    metric: str
    published: float
    simulated: float | None
    error: float | None
    status: str
    notes: list[str] = field(default_factory=list)  # assumptions made (or, not expressible: the reasons)


# ---- reading the points ---------------------------------------------------------------------------


def load_points(path: Path = POINTS) -> list[dict]:
    with open(path) as f:
        return yaml.safe_load(f)


def _lead(text: object) -> str:
    """The first word of a free-text field, lower case: ``fp8 (FP8 E4M3, ...)`` -> ``fp8``."""
    m = re.match(r"[a-z0-9]+", str(text).strip().lower())
    return m.group(0) if m else ""


def metric_key(point: dict) -> str:
    """The published metric's name without its comment: ``throughput_tokens_per_s (total vs ...)``."""
    return str(point["metric"]).split()[0]


def engine_flow(point: dict) -> str:
    """How the figure was measured: which benchmark of which engine."""
    engine, version, mode = point["engine"], str(point["engine_version"]), point["mode"]
    if engine == "tensorrt-llm":
        if "PyTorch" in version:
            return "trtllm-pytorch"  # v1.0 trtllm-bench throughput, PyTorch backend
        if mode == "online":
            return "trtllm-triton"  # v0.14 Triton tensorrtllm_backend
        if mode == "max_throughput":
            return "trtllm-engine"  # v0.17 trtllm-bench build + throughput (C++ runtime, IFB)
        return "trtllm-session"  # v0.5-v0.9 gptSessionBenchmark: static batches
    return engine if engine in ("vllm", "sglang", "jetstream") else "other"


# ---- model, hardware, parallelism, precision ----------------------------------------------------------


def catalog_model(hf_id: str) -> tuple[str | None, str]:
    """(catalog name, note) or (None, reason)."""
    if hf_id in UNPRICEABLE:
        return None, f"model not priceable: {hf_id}, {UNPRICEABLE[hf_id]}"
    return served_model(hf_id)


def hardware_profile(point: dict) -> tuple[str | None, str]:
    """(profile name, note) or (None, reason), from the point's nearest profile."""
    hw = point["hardware"]
    name = str(hw["llmsim_profile"]).split()[0]
    if name == "none" or name not in available_profiles():
        return None, f"no hardware profile: {hw['device']}"
    sockets = _sockets_used(hw["device"])
    prof = load_profile(name)
    if sockets and prof.cpu is not None and prof.cpu.sockets < sockets:
        return None, f"hardware mismatch: {sockets} socket(s) used, the {name} profile has {prof.cpu.sockets}"
    note = ""
    if "(" in str(hw["llmsim_profile"]):
        note = f"{name}: {str(hw['llmsim_profile']).split('(', 1)[1].rstrip(')')}"
    return name, note


def cpu_cluster(point: dict) -> dict:
    """``cluster.sockets`` / ``cluster.cores`` of a CPU point that ran on part of the node
    (``(1 socket, 56 cores; 32 cores used)`` -> 1 socket, 32 cores), else {}."""
    device = str(point["hardware"]["device"])
    out: dict = {}
    sockets = _sockets_used(device)
    if sockets:
        out["sockets"] = sockets
    m = re.search(r"(\d+) cores used", device)
    if m:
        out["cores"] = int(m.group(1))
    return out


def _sockets_used(device: str) -> int:
    """Sockets a CPU point ran on, from the device text: ``(1 socket, 56 cores; ...)`` -> 1; 0 if unsaid."""
    m = re.search(r"(\d+) socket", device)
    return int(m.group(1)) if m else 0


def parallelism(point: dict) -> tuple[tuple[int, int, int] | None, str]:
    """((tp, pp, replicas), "") or (None, reason)."""
    par = point["parallelism"]
    tp, pp, dp = par.get("tp", 1), par.get("pp", 1), par.get("dp", 1)
    if "ep" in par:
        return _wide_ep(par)
    if isinstance(tp, str) and tp.startswith("multi-NUMA TP: --tp"):
        # SGLang's CPU backend: a TP rank per sub-NUMA cluster, each reading its own memory, is
        # llmsim's NUMA-aware node (cluster.numa_aware, the default) at tp 1; the ranks'
        # shared-memory all-reduce (3 % of end-to-end time per the source) is not priced
        return (1, pp, dp), (
            f"{tp.split(',')[0]} over sub-NUMA clusters = one NUMA-aware node (tp 1; its all-reduce not priced)"
        )
    if not all(isinstance(x, int) for x in (tp, pp, dp)):
        bad = next(str(x) for x in (tp, pp, dp) if not isinstance(x, int))
        return None, f"parallel degree not stated: {bad}"
    return (tp, pp, dp), ""


def _wide_ep(par: dict) -> tuple[tuple[int, int, int] | None, str]:
    """SGLang's large-scale expert parallelism: attention data-parallel over the EP ranks, one GPU
    each, is llmsim's replicas = EP with cluster.expert_parallel (lock-stepped DP ranks, dpgroup.py)."""
    ep, tp = par["ep"], par.get("tp", 1)
    m = re.match(r"DP attention over (\d+) ranks", str(par.get("dp", "")))
    if not m or int(m.group(1)) != ep or tp != 1:
        return None, f"expert parallelism not mapped: EP{ep} with dp {par.get('dp')!r}, tp {tp}"
    return (1, par.get("pp", 1), ep), f"DP attention over {ep} ranks: replicas {ep}, expert_parallel (EP{ep})"


def wide_ep_cluster(point: dict) -> dict:
    """The cluster keys of a large-scale EP point (SGLang's DeepSeek deployment): DeepEP's normal
    kernels where the prefill is measured, its low-latency ones for decode (the point's notes), two-batch
    overlap as dual batch overlap, EPLB with the source's 32 redundant experts (its "pool of 288
    experts", which EP72 needs)."""
    notes = str(point.get("notes", ""))
    decode = metric_key(point).startswith("output")
    out: dict = {
        "expert_parallel": True,
        "all2all_backend": "deepep_low_latency" if decode else "deepep_high_throughput",
        "dual_batch_overlap": "two-batch overlap" in notes,
    }
    if "EPLB" in notes:
        out |= {"eplb": True, "redundant_experts": 32}
    return out


def precision(point: dict) -> tuple[dict | None, str]:
    """({weight_dtype, act_dtype}, "") or (None, reason). Weight-only quantisation keeps 16-bit
    activations; FP8 with FP8 activations is W8A8 on FP8 tensor cores; INT8/FP4 activations are
    passed through as stated (llmsim's validation decides)."""
    w, a = _lead(point["weights"]), _lead(point["activations"])
    if w not in ("fp32", "bf16", "fp16", "fp8", "fp4", "int8", "int4"):
        return None, f"precision ambiguous: weights {point['weights']!r}"
    if a not in ("fp32", "bf16", "fp16", "fp8", "fp4", "int8"):
        return None, f"precision ambiguous: activations {point['activations']!r}"
    return {"weight_dtype": w, "act_dtype": a}, ""


def weight_groups(point: dict) -> tuple[dict, str]:
    """The weights' quantisation groups where the source states a group size ({} elsewhere: the
    dtype's usual format, models.WEIGHT_GROUPS), and the note saying whose scales they carry."""
    m = re.search(r"group size (\d+)", str(point["weights"]))
    if not m:
        return {}, ""
    if "ggml" in str(point.get("engine_name")):
        # ITREX's --use_ggml writes llama.cpp's Q4_0: 32 weights and one fp16 scale in 18 bytes
        # (ggml-common.h block_q4_0), whatever group the table's column says
        return {"weight_group_size": 32, "weight_scale_bits": 16}, "weights as GGML Q4_0: an fp16 scale per 32"
    # ITREX LLM Runtime's scripts/quantize.py defaults: --scale_dtype fp32, --alg sym (no zero
    # point) (intel_extension_for_transformers/llm/runtime/graph/README.md, 03fab02)
    group = int(m.group(1))
    return {
        "weight_group_size": group,
        "weight_scale_bits": 32,
    }, f"an fp32 scale per {group} weights (quantize.py's default)"


def kv_dtype(point: dict, prec: dict) -> tuple[str, str]:
    """The KV-cache dtype and, when the source leaves it unstated, why this one."""
    text = str(point["kv_cache_dtype"])
    lead = _lead(text)
    act16 = "fp16" if prec["act_dtype"] == "fp16" or "--dtype float16" in str(point.get("notes")) else "bf16"
    if lead in ("fp8", "int8", "bf16", "fp16", "fp32"):
        return lead, ""
    if lead == "auto":
        return act16, f"KV auto = the model dtype ({act16})"
    if point["engine"] == "tensorrt-llm" and prec["weight_dtype"] in ("fp8", "fp4"):
        return "fp8", "KV dtype not stated: fp8 (TensorRT-LLM gives FP8/NVFP4 quantisation an FP8 KV cache)"
    if point["engine"] == "vllm":
        return act16, f"KV dtype not stated: vLLM's --kv-cache-dtype auto = the model dtype ({act16})"
    return act16, f"KV dtype not stated: {act16}"


def lengths(point: dict) -> tuple[tuple[int, int] | None, str]:
    """(ISL, OSL) or (None, reason). A first-token latency without an output length is one token."""
    s = point["settings"]
    if "sharegpt" in str(s.get("dataset", "")).lower():
        return None, (
            "ShareGPT lengths not available: the benchmark's ShareGPT sample is not in the repository (the one "
            "ShareGPT-derived file, LLMServingSim's multi-turn workload, has prompts ~4x longer than a first-turn sample)"
        )
    isl = s.get("input_len")
    if isinstance(isl, str) and re.fullmatch(r"\dK \(as written\)", isl):  # SGLang's "1K, 2K and 4K": 4K is 4,096
        isl = int(isl[0]) * 1024
    prefill = metric_key(point) in ("first_token_latency_ms", "ttft_ms", "input_tokens_per_s_per_node")
    osl = s.get("output_len", 1 if prefill else None)
    if osl is None and "kv_cache_len" in s:  # a decode step measured at a context: a short decode past it
        osl = DECODE_STEPS
    if not isinstance(isl, int) or not isinstance(osl, int):
        return None, f"lengths not stated: input {isl!r}, output {osl!r}"
    return (isl, osl), ""


def past_context(model: str, isl: int, osl: int) -> str:
    """What passes the model's context, when prompt + output do ("" when they fit)."""
    ctx = CATALOG[model].max_position_embeddings
    if isl + osl > ctx:
        return f"past the model's context: prompt + output = {isl + osl} tokens > {ctx} of {model}"
    return ""


# ---- engine limits ------------------------------------------------------------------------------------


def trtllm_bench_limits(
    model: str, hardware: str, tp: int, pp: int, isl: int, osl: int, weight: str, kv: str, kv_fraction: float
) -> tuple[int, int]:
    """trtllm-bench's (max_batch_size, max_num_tokens) when neither is given: KV requests that fit
    ``kv_fraction`` of the memory left by the weights, rounded up optimistically
    (tensorrt_llm/bench/build/tuning.py calc_engine_setting / finetune_setting)."""
    m, hw = CATALOG[model], load_profile(hardware)
    weight_b, kv_b = TRTLLM_BYTES.get(weight, 2.0), TRTLLM_BYTES.get(kv, 2.0)
    kv_heads = max(tp, m.num_kv_heads)  # every TP rank holds at least one KV head
    gib_per_token = 2 * m.num_layers * kv_heads * m.head_dim * kv_b / GIB
    available = hw.memory_bytes / GIB * tp * pp - m.total_params() * weight_b / GIB
    requests = available * kv_fraction / (gib_per_token * (isl + osl))
    raw_bs = min(requests, 4096) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    return bs, tokens


# vLLM schedules one step ahead by default from v0.14.0 ("Async scheduling is now enabled by default",
# its release notes; vllm-project/vllm PR #27614); before, only with --async-scheduling (an
# experimental flag from PR #19970, mid-2025), which none of the points' commands pass
VLLM_ASYNC_DEFAULT = (0, 14)


def _version(text: object) -> tuple[int, ...]:
    """The leading dotted version of an engine_version field ('0.10.0 (ROCm build)' -> (0, 10, 0))."""
    m = re.match(r"\s*(\d+(?:\.\d+)*)", str(text))
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def _flag(notes: str, flag: str) -> str | None:
    m = re.search(rf"{re.escape(flag)}[ =]([0-9.]+)", notes)
    return m.group(1) if m else None


def engine_section(mp: Mapping, flow: str, cat: str, hw: str, tp: int, pp: int, prec: dict, kv: str) -> dict:
    """The policy, kv_cache, engine and CUDA-graph switch of the point's engine."""
    p, (isl, osl) = mp.point, mp.lengths
    s, notes = p["settings"], str(p.get("notes", ""))
    mode = p["mode"]
    out: dict = {"kv_cache": {"dtype": kv}, "engine": "ideal", "cluster": {}}
    if flow.startswith("trtllm"):
        out["kv_cache"].update(memory_fraction_of="free", watermark=0.0)
    if flow in ("trtllm-pytorch", "trtllm-engine"):
        frac = 0.95
        bs, tokens = trtllm_bench_limits(cat, hw, tp, pp, isl, osl, prec["weight_dtype"], kv, frac)
        if flow == "trtllm-pytorch":  # chunked prefill off: max_num_tokens >= max ISL + max batch
            tokens = max(tokens, isl + bs)
            # TensorRT-LLM's engine (the PyTorch backend: overlap scheduler, decode-only CUDA
            # graphs) with the page's llm_options.yml graphs: padding on, its batch sizes
            out["engine"] = {
                "preset": "trtllm",
                "cuda_graph_padding": True,
                "cuda_graph_sizes": list(TRTLLM_PAGE_GRAPH_SIZES),
            }
            mp.notes.append("engine trtllm; CUDA graphs as the page's cuda_graph_config: padding on, 1 to 8192")
        mp.notes.append(f"trtllm-bench heuristic: max_batch_size {bs}, max_num_tokens {tokens}")
        mp.notes.append("KV: 0.95 of free memory ('in many cases' per the page)")
        out["kv_cache"]["memory_fraction"] = frac
        seqs = bs
        if flow == "trtllm-pytorch" and pp > 1:
            # max_batch_size bounds one micro-batch, and pp of them are in flight: the executor
            # holds max_batch_size x pp sequences (tensorrt_llm/_torch/pyexecutor/
            # py_executor_creator.py, max_num_sequences = max_batch_size * mapping.pp_size), as
            # the heuristic's batch (requests / pp) assumes
            seqs = bs * pp
            mp.notes.append(f"PP{pp}: {pp} micro-batches of max_batch_size in flight, max_num_seqs {seqs}")
        # trtllm-bench 1.0 (PyTorch flow): --scheduler_policy guaranteed_no_evict and
        # --enable_chunked_context off by default (tensorrt_llm/bench/benchmark/throughput.py)
        out["policy"] = {"kind": "trtllm", "max_num_seqs": seqs, "max_batch_tokens": tokens}
        if flow == "trtllm-engine":
            # the C++ executor in process (no Triton between it and the timer)
            out["engine"] = {"preset": "trtllm-engine", "output_delay_s": 0.0}
            mp.notes.append("engine trtllm-engine, output_delay_s 0 (the C++ executor in process, no Triton)")
            # trtllm-bench throughput on the TensorRT engines (v0.17): its throughput command sets
            # IFBSchedulingPolicy.NO_EVICT and dynamic_max_batch_size=True over the
            # ExecutorSettingsConfig, whose chunking=True (FIRST_COME_FIRST_SERVED) it keeps
            # (tensorrt_llm/bench/benchmark/throughput.py and bench/dataclasses/configuration.py of
            # that era; a v0.17.0.post1 user sees "Guaranteed_no_evict", NVIDIA/TensorRT-LLM issue
            # #3122; chunked context on for the TensorRT backend, PR #6956): chunked context under
            # the dynamic batch tuner's limit (validate)
            out["policy"]["enable_chunked_context"] = True
            mp.dynamic_batch = True
            mp.notes.append(
                "GUARANTEED_NO_EVICT, chunked context, dynamic batch size (trtllm-bench throughput's TensorRT-flow settings)"
            )
    elif flow == "trtllm-triton":
        # the C++ executor behind Triton: no overlap, no CUDA graphs, its step and frontend times
        # (fitted to the 8B rows of the page's online table: benchmarks/trtllm_online.py)
        out["engine"] = "trtllm-engine"
        out["kv_cache"]["memory_fraction"] = 0.9
        # the backend's in-flight batching: GUARANTEED_NO_EVICT, chunked context off (its
        # config.pbtxt defaults), as llmsim's trtllm policy schedules
        out["policy"] = {
            "kind": "trtllm",
            # (trtllm-build's BuildConfig defaults, tensorrt_llm/builder.py: llmsim.engine's)
            "max_num_seqs": TRTLLM_MAX_BATCH,
            "max_batch_tokens": TRTLLM_MAX_TOKENS,
        }
        mp.notes.append(
            "engine trtllm-engine; limits not stated: trtllm-build defaults 2048 seqs / 8192 tokens; KV 0.9 of free"
        )
        mp.notes.append("policy trtllm: GUARANTEED_NO_EVICT, whole prompts (chunked context off by default)")
    elif flow == "trtllm-session" or flow == "other":
        b = int(s.get("batch_size", 1)) if isinstance(s.get("batch_size", 1), int) else 1
        out["kv_cache"]["memory_fraction"] = 0.9
        out["policy"] = {"kind": "static", "max_num_seqs": b, "max_batch_tokens": max(b * isl, 1)}
        if flow == "trtllm-session":
            mp.notes.append("static batch (gptSessionBenchmark); KV: TensorRT-LLM's default 0.9 of free")
    elif flow in ("vllm", "sglang"):
        # offline benchmarks (benchmark_throughput / _latency, bench_one_batch) run the engine in
        # process: no API server between it and the timer (engine.output_delay_s)
        engine: dict = {"preset": "vllm-v1"} if mode == "online" else {"preset": "vllm-v1", "output_delay_s": 0.0}
        if flow == "vllm":
            version = _version(p["engine_version"])
            if not version:
                raise ValueError(f"{p['id']}: engine_version {p['engine_version']!r}: a vLLM point needs its version")
            if version < VLLM_ASYNC_DEFAULT:
                engine["async_scheduling"] = False
                mp.notes.append("vLLM < 0.14: async scheduling off (its default until v0.14.0, vLLM PR #27614)")
        out["engine"] = engine
        util = _flag(notes, "--gpu-memory-utilization")
        out["kv_cache"]["memory_fraction"] = float(util) if util else 0.9
        policy: dict = {"kind": "vllm"}
        if mode == "max_throughput":
            if "max_num_seqs" in s:
                policy["max_num_seqs"] = int(s["max_num_seqs"])
            if "max_num_batched_tokens" in s:
                policy["chunk_tokens"] = policy["max_batch_tokens"] = int(s["max_num_batched_tokens"])
        model_len = _flag(notes, "--max-model-len")
        if model_len and mode == "max_throughput":
            policy["max_model_len"] = int(model_len)
        out["policy"] = policy
        if mode == "static_batch":
            mp.notes.append("benchmark_latency: the batch goes through vLLM's own scheduler (policy vllm)")
    else:  # jetstream (today every point is ShareGPT): whole prompts prefilled into a fixed set of slots
        out["policy"] = {"kind": "traditional", "max_num_seqs": int(s.get("max_batch_size", 256))}
        mp.notes.append("JetStream: no preset; ideal engine, prefill-first batching into max_batch_size slots")
    return out


# ---- workload and metric ------------------------------------------------------------------------------


def _fixed(n: int) -> dict:
    return {"dist": "fixed", "value": n}


def workload(mp: Mapping, concurrency: int) -> dict:
    """The workload of the point's mode."""
    p, (isl, osl) = mp.point, mp.lengths
    s = p["settings"]
    lengths_ = {"prompt_tokens": _fixed(isl), "output_tokens": _fixed(osl), "horizon_s": HORIZON_S}
    mode = p["mode"]
    if mode in ("static_batch", "batch1_latency"):
        b = s.get("batch_size", 1)
        return {"kind": "all_at_once", "num_requests": b if isinstance(b, int) else 1, **lengths_}
    n = int(s.get("num_requests") or REQUEST_CAP)
    rate = s.get("request_rate")
    if mode == "online" and isinstance(rate, int | float):
        mp.notes.append(f"Poisson arrivals at {rate} req/s (arrival process not stated)")
        return {"kind": "poisson", "rate_rps": float(rate), "num_requests": n, **lengths_}
    cap = max(REQUEST_CAP, WAVES * concurrency)
    if n > cap:
        mp.notes.append(f"{cap} of the published {n} requests simulated (steady state long before)")
        n = cap
    return {"kind": "all_at_once", "num_requests": n, **lengths_}


def figure(mp: Mapping, tp: int, pp: int, replicas: int) -> None:
    """Which summary key is compared, and by how many devices it is divided."""
    key = metric_key(mp.point)
    mp.figure = METRICS[key]
    if key.endswith("_per_gpu"):
        mp.per_gpus = tp * pp * replicas
    if key.endswith("_per_node"):  # (the source's "N per node": SGLang's 8-GPU nodes)
        m = re.search(r"(\d+) per node", str(mp.point["hardware"]["device"]))
        mp.per_gpus = tp * pp * replicas / int(m.group(1)) if m else 1
    if mp.point["mode"] == "static_batch" and "kv_cache_len" in mp.point["settings"]:
        mp.figure = "decode_throughput"  # the decode steps at the stated batch alone (``simulate``)
    if key == "throughput_tokens_per_s":
        mp.notes.append("read as output tokens/s (the table does not say total or output)")


# ---- mapping, validation, simulation --------------------------------------------------------------------


def map_point(point: dict) -> Mapping:
    """A point -> the scenario a user would write for it, or the reasons it cannot be written."""
    mp = Mapping(point)
    cat, note_m = catalog_model(point["model"])
    hw, note_h = hardware_profile(point)
    par, why_par = parallelism(point)
    prec, why_prec = precision(point)
    lens, why_len = lengths(point)
    for ok, msg in ((cat, note_m), (hw, note_h), (par, why_par), (prec, why_prec), (lens, why_len)):
        if msg:
            (mp.notes if ok else mp.reasons).append(msg)
    flow = engine_flow(point)
    if point["mode"] == "online" and "concurrency" in point["settings"]:
        mp.reasons.append("closed-loop concurrency not modelled: a fixed number of clients")
    extra = [k for k in ("num_scheduler_steps",) if k in point["settings"]]
    if extra:
        mp.reasons.append(f"multi-step scheduling not modelled: vLLM V0 {extra[0]}={point['settings'][extra[0]]}")
    long_len = 0
    if cat and lens:
        why_ctx = past_context(cat, *lens)
        if why_ctx and flow.startswith("trtllm") and not CATALOG[cat].learned_positions:
            # a TensorRT-LLM engine is built for any max_seq_len (RoPE positions past the trained
            # ones are computed, not looked up): vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN in llmsim
            long_len = sum(lens)
            mp.notes.append(f"{why_ctx}: TensorRT-LLM builds max_seq_len {long_len} (policy.allow_long_max_model_len)")
        elif why_ctx:
            mp.reasons.append(f"{why_ctx} (llmsim refuses a longer max_model_len)")
    if mp.reasons:
        return mp
    assert cat and hw and par and prec and lens
    tp, pp, replicas = par
    mp.lengths = lens
    kv, note_kv = kv_dtype(point, prec)
    groups, note_groups = weight_groups(point)
    for note in (note_kv, note_groups):
        if note:
            mp.notes.append(note)
    part = cpu_cluster(point) if load_profile(hw).cpu is not None else {}
    if part:
        mp.notes.append(f"part of the node: cluster {part}")
    sec = engine_section(mp, flow, cat, hw, tp, pp, prec, kv)
    if long_len:
        sec["policy"].update(max_model_len=long_len, allow_long_max_model_len=True)
    model = {"name": cat, **prec, **groups}
    window = CATALOG[cat].sliding_window
    if flow == "trtllm-engine" and window:
        # a TensorRT engine attends over the whole context unless max_attention_window_size is
        # given at run time (NVIDIA's Mistral test scripts pass 4096; the page's commands pass
        # none), and the 0.17 table's Mistral figures equal Llama 3.1 8B's at 20000/2000
        model["sliding_window"] = 0
        mp.notes.append(f"full attention: TensorRT-LLM runs {cat}'s {window}-token window only when told to")
    concurrency = sec["policy"].get("max_num_seqs", 1024)
    ep = wide_ep_cluster(point) if "ep" in point["parallelism"] else {}
    if ep:
        mp.notes.append(
            f"{ep['all2all_backend']}, dual batch overlap {'on' if ep['dual_batch_overlap'] else 'off'}, "
            "EPLB with 32 redundant experts (288 slots); expert load balanced (the source's default distribution not stated)"
        )
        tokens = point["settings"].get("tokens_per_device_per_batch")
        if tokens:
            sec["policy"].update(chunk_tokens=int(tokens), max_batch_tokens=int(tokens))
    mp.scenario = {
        "name": point["id"],
        "model": model,
        "hardware": hw,
        "cluster": {"tp": tp, "pp": pp, "replicas": replicas, **part, **sec["cluster"], **ep},
        "policy": sec["policy"],
        "kv_cache": sec["kv_cache"],
        "workload": workload(mp, concurrency),
        "engine": sec["engine"],
        "output": {"steps": "none", "trace": "none"},
    }
    figure(mp, tp, pp, replicas)
    if ep:
        wide_ep_workload(mp, replicas)
    return mp


def leading_int(value: object) -> int:
    """A setting's number where the source's text follows it: ``256 ('Batch Size' row; ...)`` -> 256."""
    m = re.match(r"\d+", str(value))
    if not m:
        raise ValueError(f"no number in {value!r}")
    return int(m.group())


def wide_ep_workload(mp: Mapping, ranks: int) -> None:
    """A large-scale EP point's batch is per GPU (DeepSeek's convention, the point's settings): a
    static batch of that many requests a rank, their decode steps logged; the prefill the 16,384
    tokens a GPU of the source's profile test (SGLang's --max-prefill-tokens default too)."""
    assert mp.scenario is not None
    s = mp.point["settings"]
    if mp.point["mode"] == "static_batch":
        b = leading_int(s["batch_size"])
        mp.scenario["workload"]["num_requests"] = b * ranks
        mp.scenario["policy"]["max_num_seqs"] = b
        mp.scenario["output"]["steps"] = "all"
        mp.notes.append(f"{b} requests a rank, {b * ranks:,} in all; {DECODE_STEPS} tokens decoded past the context")
    if "tokens_per_device_per_batch" not in s:
        mp.scenario["policy"].update(chunk_tokens=16384, max_batch_tokens=16384)
        mp.notes.append("16,384 prompt tokens a GPU a step (the source's prefill profile test; not stated here)")


# TensorRT-LLM's DynamicBatchConfig::kDefaultBatchSizeTable (cpp/tensorrt_llm/executor/
# dynamicBatchConfig.cpp): a capacity below the first number runs at the second
TRTLLM_BATCH_TABLE = ((144, 128), (336, 256), (672, 512), (832, 768), (1280, 1024), (1664, 1536))


def trtllm_runtime_batch(capacity: int) -> int:
    """The batch limit TensorRT-LLM's dynamic batch tuner sets for ``capacity`` requests of the
    average length in KV (DynamicBatchTuner::getRuntimeBatchSize, dynamicBatchTuner.cpp): the
    table's bucket, else the capacity rounded down to a multiple of 512 when within 128 above it."""
    for limit, batch in TRTLLM_BATCH_TABLE:
        if capacity < limit:
            return batch
    floor = capacity // 512 * 512
    return floor if capacity < floor + 128 else capacity


def validate(mp: Mapping) -> Scenario | None:
    """The scenario validated (and, under TensorRT-LLM's dynamic batch tuner, its batch limit set
    as the tuner sets it); a refusal becomes a reason."""
    assert mp.scenario is not None
    try:
        sc = scenario_from_dict(mp.scenario, mp.point["id"], ROOT)
        if not mp.dynamic_batch:
            return sc
        # the tuner's capacity: requests of the average ISL + OSL in the KV blocks
        # (KVCacheManager::getMaxCapacityBatchSize), with lengths fixed their own
        pool = build_pools(sc, build_model(sc))[0]
        isl, osl = mp.lengths
        capacity = pool.kv_blocks // math.ceil((isl + osl) / sc.kv_cache.block_tokens)
        seqs = mp.scenario["policy"]["max_num_seqs"]
        runtime = min(seqs, trtllm_runtime_batch(capacity))
        if runtime != seqs:
            mp.scenario["policy"]["max_num_seqs"] = runtime
            mp.notes.append(
                f"dynamic batch tuner: {capacity} requests fit the KV cache whole, max_num_seqs {seqs} -> {runtime}"
            )
            if mp.point["mode"] == "max_throughput":  # the request count follows the new batch limit
                mp.notes[:] = [n for n in mp.notes if "requests simulated" not in n]
                mp.scenario["workload"] = workload(mp, runtime)
            sc = scenario_from_dict(mp.scenario, mp.point["id"], ROOT)
        return sc
    except UserError as exc:
        msg = _one_line(str(exc)).removeprefix(f"{mp.point['id']}: ")
        mp.reasons.append(f"llmsim refuses: {msg}")
        mp.scenario = None
        return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def simulate(mp: Mapping, sc: Scenario) -> float:
    """Run the scenario and read the compared figure (divided per device where the point is)."""
    res = llmsim.run(sc)
    s = res.summary
    if s["completed"] < len(res.requests):
        mp.notes.append(f"{len(res.requests) - s['completed']} requests not completed")
    pre = s["requests"]["preemptions"]
    if pre:
        mp.notes.append(f"{pre} preemptions")
    if mp.point["mode"] == "static_batch":
        req = res.requests
        late = int((req["first_token_s"] > req["finish_s"].min()).sum())
        if late:
            mp.notes.append(
                f"{late} of the batch's {len(req)} requests started only after others finished "
                "(llmsim's KV cache does not hold the whole batch)"
            )
    if metric_key(mp.point) == "throughput_tokens_per_s":
        alt = s["total_token_throughput"] / float(mp.point["value"]) - 1
        mp.notes.append(
            f"read as total tokens/s instead: simulated {s['total_token_throughput']:,.0f}, error {alt:+.1%}"
        )
    value = decode_throughput(res.steps, mp) if mp.figure == "decode_throughput" else s[mp.figure]
    if value is None or not math.isfinite(value):
        raise ValueError(f"{mp.figure} is {value}")
    return float(value) / mp.per_gpus


def decode_throughput(steps: pd.DataFrame, mp: Mapping) -> float:
    """Output tokens/s of the whole cluster in its decode-only steps at the full batch (a decode
    figure measured with the prefill elsewhere, SGLang's "unlimited resources for the non-tested
    phase"): each rank's batch over its median such step. Where llmsim's KV cache holds fewer than
    the stated batch, the largest batch it decodes stands in (noted)."""
    batch = leading_int(mp.point["settings"]["batch_size"])
    decode = steps[steps["prefill_tokens"] == 0]
    if decode.empty:
        raise ValueError("no decode-only step")
    held = int(decode["decode_tokens"].max())
    full = decode[decode["decode_tokens"] >= min(batch, held)]
    ranks = steps["replica"].nunique()
    rows = float(full["decode_tokens"].mean())
    median_s = float(full["duration_s"].median())
    mp.notes.append(f"decode-only steps at {rows:.0f} sequences a rank read alone: median {median_s * 1e3:.1f} ms")
    if held < batch:
        mp.notes.append(f"llmsim's KV cache holds {held} of the {batch} sequences a rank: read at {held}")
    return rows * ranks / median_s


def run_point(point: dict) -> Row:
    """One point, mapped, validated, simulated and scored."""
    mp = map_point(point)
    sc = validate(mp) if mp.scenario is not None else None
    row = Row(
        id=point["id"],
        hardware=point["hardware"]["class"],
        model=point["model"].split("/")[-1],
        mode=point["mode"],
        metric=metric_key(point),
        published=float(point["value"]),
        simulated=None,
        error=None,
        status="not expressible",
    )
    if sc is not None:
        try:
            row.simulated = simulate(mp, sc)
            row.error = row.simulated / row.published - 1
            row.status = "ok" if abs(row.error) <= OK_BAND else "miss"
        except Exception as exc:  # any failure is a row of the table, never a crash of it
            row.status = "error"
            mp.notes.append(_one_line(f"{type(exc).__name__}: {exc}"))
    row.notes = list(mp.reasons if row.status == "not expressible" else mp.notes)
    return row


# ---- output --------------------------------------------------------------------------------------------


def summary_line(rows: list[Row]) -> str:
    scored = [r for r in rows if r.error is not None]
    expressible = [r for r in rows if r.status != "not expressible"]
    within = sum(abs(r.error) <= OK_BAND for r in scored)  # type: ignore[arg-type]
    med = statistics.median(abs(r.error) for r in scored) if scored else float("nan")  # type: ignore[arg-type]
    share = within / len(expressible) if expressible else float("nan")
    return (
        f"expressible points: {len(expressible)} of {len(rows)}; within +-20%: {within} of {len(expressible)} "
        f"({share:.0%}); median |error|: {med:.1%}"
    )


def reason_counts(rows: list[Row]) -> Counter:
    """Not-expressible reasons, one count per reason (a point may have several), numbers stripped."""
    out: Counter = Counter()
    for r in rows:
        if r.status == "not expressible":
            for reason in r.notes:
                out[_reason_kind(reason)] += 1
    return out


def _reason_kind(reason: str) -> str:
    """A reason without its details: the text before the first ': ', or a refusal's message
    without the value it refused."""
    if reason.startswith("llmsim refuses: "):
        return reason.split(" (got")[0]
    return reason.split(": ")[0]


def _num(v: float | None) -> str:
    """Three significant figures or more, thousands separated: 29,853 / 17.2 / 6.30."""
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def print_report(rows: list[Row], notes: bool) -> None:
    body = [
        [
            r.id,
            r.hardware,
            r.model,
            r.mode,
            r.metric,
            _num(r.published),
            _num(r.simulated),
            "-" if r.error is None else f"{r.error:+.1%}",
            r.status,
        ]
        for r in rows
    ]
    headers = ["id", "hardware", "model", "mode", "metric", "published", "simulated", "error", "status"]
    print(table(body, headers, align="lllllrrrl"))
    print()
    print(
        f"notes: max-throughput points simulate at most max({REQUEST_CAP}, {WAVES} x the batch limit) requests "
        "(fewer only where published); errors are simulated / published - 1; ok within +-20%"
    )
    counts = Counter(r.status for r in rows)
    print("status: " + ", ".join(f"{k} {counts[k]}" for k in ("ok", "miss", "not expressible", "error")))
    reasons = reason_counts(rows).most_common()
    if reasons:
        print("not expressible, by reason (a point may have several):")
        width = max(len(k) for k, _ in reasons)
        for k, n in reasons:
            print(f"  {k:<{width}}  {n:>3}")
    print(summary_line(rows))
    if notes:
        print()
        for r in rows:
            print(f"{r.id}: {'; '.join(r.notes)}")


def write_csv(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(list(Row.__dataclass_fields__))
        for r in rows:
            w.writerow(["; ".join(r.notes) if k == "notes" else getattr(r, k) for k in Row.__dataclass_fields__])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ids", help="comma-separated point ids (default: every point)")
    ap.add_argument("--limit", type=int, help="only the first N points (after --ids)")
    ap.add_argument("--write", type=Path, help="write the rows (with notes) to this CSV")
    ap.add_argument("--notes", action="store_true", help="print each point's assumptions or reasons")
    args = ap.parse_args(argv)
    points = load_points()
    if args.ids:
        wanted = [i.strip() for i in args.ids.split(",") if i.strip()]
        unknown = sorted(set(wanted) - {p["id"] for p in points})
        if unknown:
            ap.error(f"unknown point id(s): {', '.join(unknown)}")
        points = [p for p in points if p["id"] in wanted]
    if args.limit is not None:
        points = points[: args.limit]
    warnings.simplefilter("ignore", UserWarning)  # "runs its pure-Python modules" while others edit llmsim
    t0 = time.perf_counter()
    rows = [run_point(p) for p in points]
    print_report(rows, args.notes)
    sys.stdout.flush()
    print(f"({len(rows)} points in {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if args.write:
        write_csv(rows, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
