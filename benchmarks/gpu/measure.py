#!/usr/bin/env python3
"""Measure the kernels llmsim models, on one CUDA GPU, in one prepared run (under 8 minutes).

What it times (all bf16 unless said; medians of repeated timings):

* ``gemm``: the GEMMs of llmsim's op lists for Llama-3.1-8B and Llama-3.1-70B at TP 1/2/4/8 (``attn_pre_proj``
  fused QKV, ``attn_post_proj``, ``mlp_up_proj`` gate+up fused, ``mlp_down_proj``, ``lm_head``) for
  m = 1..8192 tokens; again in fp8 (e4m3, ``torch._scaled_mm``, bf16 out) where the GPU has fp8 (sm_89+).
* ``attention``: ``torch.nn.functional.scaled_dot_product_attention`` with GQA, per-device heads at each TP:
  prefill (batch 1, causal, q_len = kv_len up to 8192) and decode (q_len 1, batch 1..256, context 128..8192).
* ``elementwise``: RMSNorm (``input_layernorm``), SiLU-mul (``mlp_act``), residual add (``add``) over
  [tokens, hidden].
* ``copy``: device-to-device copies (``memcpy``), 1 MiB .. 1 GiB: the achievable memory bandwidth.
* ``layer``: a whole Llama-3.1-8B decoder layer forward (random weights, TP 1): RMSNorm, QKV, RoPE, KV-cache
  write, SDPA, O proj, residual, RMSNorm, SwiGLU MLP, residual; prefill chunks and decode batches.

Method (see benchmarks/gpu/README.md): random inputs (``torch.randn``, never zeros); warm-up calls; then
per-call CUDA events, median over repeats; a GPU-side ``torch.cuda._sleep`` queued first so that the host
launches run ahead of the GPU and launch gaps stay out of the numbers (what CUDA-graph replay would give);
rotating input/weight sets whenever one set is under 2x the L2 cache, so repeated calls don't run from cache.
A time budget (``--budget-s``, default 450 s) is split over the kinds; each kind's grid is ordered
coarse-to-fine and trimmed at its deadline, so a slow GPU loses fill-in points, not whole kinds.

Writes, into ``--out`` (default ``$OUT``, else ./gpu_measurements): gemm.csv, attention.csv, elementwise.csv,
copy.csv, layer.csv in llmsim's generic profile format (docs/profile_format.md), and device.json.
Shape generation and CSV writing are pure functions; torch is imported only inside the measuring code.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# ---------------------------------------------------------------------------------------------------------
# Model constants. Source: the models' Hugging Face config.json (meta-llama/Llama-3.1-8B and
# meta-llama/Llama-3.1-70B), as tabulated in docs/reference/hardware_models.md, section B.1.
# head_dim is not in those configs: it is hidden_size / num_attention_heads = 128.
# ---------------------------------------------------------------------------------------------------------
MODELS: dict[str, dict[str, int]] = {
    "llama-3.1-8b": {
        "hidden": 4096,
        "intermediate": 14336,
        "layers": 32,
        "heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "vocab": 128256,
    },
    "llama-3.1-70b": {
        "hidden": 8192,
        "intermediate": 28672,
        "layers": 80,
        "heads": 64,
        "kv_heads": 8,
        "head_dim": 128,
        "vocab": 128256,
    },
}
# Not a real model: the --tiny grid (smoke test on CPU).
TINY_MODEL = {
    "tiny": {
        "hidden": 256,
        "intermediate": 512,
        "layers": 2,
        "heads": 4,
        "kv_heads": 2,
        "head_dim": 64,
        "vocab": 1024,
    }
}

TPS = (1, 2, 4, 8)
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "lm_head")
LAYER_MODEL = "llama-3.1-8b"

# The generic profile CSV header (docs/profile_format.md), in the order of its example.
COLUMNS = (
    "op",
    "kind",
    "dtype",
    "m",
    "n",
    "k",
    "batch",
    "q_len",
    "kv_len",
    "n_q_heads",
    "n_kv_heads",
    "head_dim",
    "tokens",
    "hidden",
    "bytes",
    "num_workers",
    "model",
    "tp",
    "seconds",
    "source",
)
KINDS = ("copy", "gemm", "attention", "elementwise", "layer")
# Phase order and each phase's share of the budget. Deadlines are cumulative, so time a phase leaves unused
# goes to the later ones.
PHASES = (
    ("copy", "bf16", 0.03),
    ("gemm", "bf16", 0.30),
    ("attention", "bf16", 0.20),
    ("elementwise", "bf16", 0.07),
    ("layer", "bf16", 0.20),
    ("gemm", "fp8", 0.20),
)
DEFAULT_L2_BYTES = 50 * 2**20  # H100/H200 datasheet; the device's own value is read when torch reports it


# ---------------------------------------------------------------------------------------------------------
# Grids and shapes (pure, no torch)
# ---------------------------------------------------------------------------------------------------------
def log_grid(lo: int, hi: int, dense_from: int = 64) -> list[int]:
    """Powers of two from lo to hi, plus 1.5x points between them from `dense_from` up."""
    out: set[int] = set()
    p = 1
    while p <= hi:
        if p >= lo:
            out.add(p)
        if p >= dense_from and lo <= p * 3 // 2 <= hi:
            out.add(p * 3 // 2)
        p *= 2
    out.add(lo)
    out.add(hi)
    return sorted(out)


M_GRID = log_grid(1, 8192)  # 1, 2, 4, ..., 64, 96, 128, 192, ..., 6144, 8192
PREFILL_LENS = log_grid(128, 8192, dense_from=10**9)  # 128 .. 8192, powers of two
DECODE_BATCHES = log_grid(1, 256, dense_from=10**9)  # 1 .. 256
DECODE_CTXS = log_grid(128, 8192, dense_from=10**9)  # 128 .. 8192
LAYER_DECODE_CTXS = log_grid(512, 8192, dense_from=10**9)  # 512 .. 8192
COPY_BYTES = [2**20 * 4**i for i in range(6)]  # 1 MiB, 4, 16, 64, 256 MiB, 1 GiB
TINY = {
    "ms": [1, 16, 64],
    "tps": (1, 2),
    "prefill": [16, 64],
    "batches": [1, 4],
    "ctxs": [32, 128],
    "copy": [2**16, 2**20],
}


def check_tp(cfg: dict[str, int], tp: int, name: str = "model") -> None:
    """Raise ValueError unless every tensor-parallel shard of `cfg` divides evenly at `tp`."""
    for key in ("heads", "kv_heads", "intermediate", "vocab"):
        if cfg[key] % tp:
            raise ValueError(f"{name}: {key}={cfg[key]} is not divisible by tp={tp}")


def gemm_nk(cfg: dict[str, int], tp: int) -> dict[str, tuple[int, int]]:
    """(n, k) per GEMM op for one device at tensor parallelism `tp` (Megatron sharding)."""
    check_tp(cfg, tp)
    h, d = cfg["hidden"], cfg["head_dim"]
    return {
        "attn_pre_proj": ((cfg["heads"] + 2 * cfg["kv_heads"]) * d // tp, h),
        "attn_post_proj": (h, cfg["heads"] * d // tp),
        "mlp_up_proj": (2 * cfg["intermediate"] // tp, h),
        "mlp_down_proj": (h, cfg["intermediate"] // tp),
        "lm_head": (cfg["vocab"] // tp, h),
    }


def gemm_shapes(model_cfgs: dict[str, dict[str, int]], tps, ms, dtypes=("bf16",)) -> list[dict[str, object]]:
    """One row per distinct (op, dtype, m, n, k); `source` names every model/TP that produces it."""
    rows: dict[tuple, dict[str, object]] = {}
    for dtype in dtypes:
        for name, cfg in model_cfgs.items():
            for tp in tps:
                for op, (n, k) in gemm_nk(cfg, tp).items():
                    for m in ms:
                        key = (op, dtype, m, n, k)
                        tag = f"{name}/tp{tp}"
                        if key in rows:
                            rows[key]["_models"].append(tag)
                        else:
                            rows[key] = {
                                "op": op,
                                "kind": "gemm",
                                "dtype": dtype,
                                "m": m,
                                "n": n,
                                "k": k,
                                "_models": [tag],
                            }
    return list(rows.values())


def attention_shapes(
    model_cfgs: dict[str, dict[str, int]], tps, prefill_lens, decode_batches, decode_ctxs
) -> list[dict[str, object]]:
    """Prefill (batch 1, q_len = kv_len, causal) and decode (q_len 1) shapes, heads per device, deduped."""
    rows: dict[tuple, dict[str, object]] = {}

    def add(row, tag):
        key = tuple(row[c] for c in ("op", "batch", "q_len", "kv_len", "n_q_heads", "n_kv_heads", "head_dim"))
        if key in rows:
            rows[key]["_models"].append(tag)
        else:
            rows[key] = {**row, "_models": [tag]}

    for name, cfg in model_cfgs.items():
        for tp in tps:
            check_tp(cfg, tp, name)
            heads = {"n_q_heads": cfg["heads"] // tp, "n_kv_heads": cfg["kv_heads"] // tp}
            common = {"kind": "attention", "dtype": "bf16", "head_dim": cfg["head_dim"], **heads}
            tag = f"{name}/tp{tp}"
            for q in prefill_lens:
                add({"op": "attention_prefill", "batch": 1, "q_len": q, "kv_len": q, **common}, tag)
            for b in decode_batches:
                for c in decode_ctxs:
                    add({"op": "attention_decode", "batch": b, "q_len": 1, "kv_len": c, **common}, tag)
    return list(rows.values())


def elementwise_shapes(model_cfgs: dict[str, dict[str, int]], tps, tokens) -> list[dict[str, object]]:
    """input_layernorm and add over [tokens, hidden]; mlp_act over [tokens, intermediate/tp] (its output;
    it reads a [tokens, 2*intermediate/tp] gate+up tensor)."""
    rows: dict[tuple, dict[str, object]] = {}
    for name, cfg in model_cfgs.items():
        widths = [("input_layernorm", cfg["hidden"]), ("add", cfg["hidden"])]
        for tp in tps:
            check_tp(cfg, tp, name)
            widths.append(("mlp_act", cfg["intermediate"] // tp))
        for op, hidden in widths:
            for t in tokens:
                key = (op, t, hidden)
                if key not in rows:
                    rows[key] = {
                        "op": op,
                        "kind": "elementwise",
                        "dtype": "bf16",
                        "tokens": t,
                        "hidden": hidden,
                    }
    return list(rows.values())


def copy_shapes(sizes) -> list[dict[str, object]]:
    return [{"op": "memcpy", "kind": "copy", "dtype": "bf16", "bytes": int(b)} for b in sizes]


def layer_shapes(model: str, prefill_lens, decode_batches, decode_ctxs, tp: int = 1) -> list[dict[str, object]]:
    rows = [
        {
            "op": "layer_prefill",
            "kind": "layer",
            "model": model,
            "tp": tp,
            "batch": 1,
            "q_len": q,
            "kv_len": q,
        }
        for q in prefill_lens
    ]
    rows += [
        {"op": "layer_decode", "kind": "layer", "model": model, "tp": tp, "batch": b, "q_len": 1, "kv_len": c}
        for b in decode_batches
        for c in decode_ctxs
    ]
    for r in rows:
        r["dtype"] = "bf16"
    return rows


def refinement_levels(values) -> dict[int, int]:
    """Level of each grid value in a coarse-to-fine order: the two ends are level 0, then each level
    adds the midpoints (by index) of the gaps left by the levels before."""
    vals = sorted(set(values))
    level = {vals[0]: 0, vals[-1]: 0}
    gaps = [(0, len(vals) - 1)]
    lv = 0
    while gaps:
        lv += 1
        nxt = []
        for a, b in gaps:
            if b - a < 2:
                continue
            mid = (a + b) // 2
            level[vals[mid]] = lv
            nxt += [(a, mid), (mid, b)]
        gaps = nxt
    return level


def coarse_to_fine(rows: list[dict[str, object]], grid_keys) -> list[dict[str, object]]:
    """Stable-sort rows so that trimming the tail drops fill-in grid points first (per key, within each
    op: a row's level is the finest of its keys' levels)."""
    levels: dict[tuple, dict[int, int]] = {}
    for key in grid_keys:
        for op in {r["op"] for r in rows}:
            vals = [r[key] for r in rows if r["op"] == op and r.get(key) not in (None, "")]
            if vals:
                levels[(op, key)] = refinement_levels(vals)

    def level(r):
        return max((levels[(r["op"], k)][r[k]] for k in grid_keys if (r["op"], k) in levels), default=0)

    return sorted(rows, key=level)


# ---------------------------------------------------------------------------------------------------------
# Work counts, for the summary (pure)
# ---------------------------------------------------------------------------------------------------------
def row_flops(r: dict[str, object]) -> float:
    kind = r["kind"]
    if kind == "gemm":
        return 2.0 * r["m"] * r["n"] * r["k"]
    if kind == "attention":
        pairs = r["q_len"] * r["kv_len"]
        if r["q_len"] > 1 and r["q_len"] == r["kv_len"]:  # causal: about half the score matrix
            pairs = r["q_len"] * (r["q_len"] + 1) / 2
        return 4.0 * r["batch"] * r["n_q_heads"] * r["head_dim"] * pairs
    if kind == "layer":
        cfg = MODELS.get(r["model"]) or TINY_MODEL[r["model"]]
        d, tp = cfg["head_dim"], r["tp"]
        n_k = [nk for op, nk in gemm_nk(cfg, tp).items() if op != "lm_head"]
        tokens = r["batch"] * r["q_len"]
        proj = sum(2.0 * tokens * n * k for n, k in n_k)
        att = {
            "kind": "attention",
            "batch": r["batch"],
            "q_len": r["q_len"],
            "kv_len": r["kv_len"],
            "n_q_heads": cfg["heads"] // tp,
            "head_dim": d,
        }
        return proj + row_flops(att)
    return 0.0


def row_bytes(r: dict[str, object]) -> float:
    """Fewest bytes the op must move through device memory (bf16 = 2 bytes, fp8 = 1)."""
    kind = r["kind"]
    if kind == "copy":
        return 2.0 * r["bytes"]  # read + write
    if kind == "elementwise":
        t, h = r["tokens"], r["hidden"]
        return {"input_layernorm": 2, "add": 3, "mlp_act": 3}[r["op"]] * 2.0 * t * h
    if kind == "attention":
        kv = 2.0 * r["batch"] * r["n_kv_heads"] * r["kv_len"] * r["head_dim"] * 2
        q_o = 2.0 * r["batch"] * r["n_q_heads"] * r["q_len"] * r["head_dim"] * 2
        return kv + q_o
    if kind == "gemm":
        e = 1 if r["dtype"] == "fp8" else 2
        return e * (r["m"] * r["k"] + r["k"] * r["n"]) + 2.0 * r["m"] * r["n"]
    return 0.0


# ---------------------------------------------------------------------------------------------------------
# CSV / JSON output (pure)
# ---------------------------------------------------------------------------------------------------------
def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if v != 0 and abs(v) < 1e-3 else repr(v)
    return str(v)


def write_rows(path: str | os.PathLike, rows: list[dict[str, object]]) -> Path:
    """Write rows in the generic profile format: header COLUMNS, blank where a column doesn't apply.
    Keys not in COLUMNS (internal ones start with '_') are dropped."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: _fmt(r.get(c)) for c in COLUMNS})
    return path


def summarize(rows_by_kind: dict[str, list[dict[str, object]]], skipped: dict[str, int]) -> str:
    lines = [f"{'kind':<12}{'dtype':<6}{'rows':>6}{'trimmed':>9}  best achieved"]
    for kind in KINDS:
        rows = rows_by_kind.get(kind, [])
        for dtype in sorted({r["dtype"] for r in rows}) or ["bf16"]:
            rs = [r for r in rows if r["dtype"] == dtype and r.get("seconds")]
            best = ""
            if rs:
                if kind in ("gemm", "layer"):
                    best = f"{max(row_flops(r) / r['seconds'] for r in rs) / 1e12:.1f} TFLOP/s"
                elif kind == "attention":
                    pre = [r for r in rs if r["op"] == "attention_prefill"]
                    dec = [r for r in rs if r["op"] == "attention_decode"]
                    parts = []
                    if pre:
                        parts.append(f"prefill {max(row_flops(r) / r['seconds'] for r in pre) / 1e12:.1f} TFLOP/s")
                    if dec:
                        parts.append(f"decode {max(row_bytes(r) / r['seconds'] for r in dec) / 1e9:.0f} GB/s")
                    best = ", ".join(parts)
                else:
                    best = f"{max(row_bytes(r) / r['seconds'] for r in rs) / 1e9:.0f} GB/s"
            lines.append(f"{kind:<12}{dtype:<6}{len(rs):>6}{skipped.get(f'{kind}/{dtype}', 0):>9}  {best}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Device identity (no torch needed for nvidia-smi)
# ---------------------------------------------------------------------------------------------------------
def nvidia_smi(query: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv"],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def device_info(torch, device: str) -> dict[str, object]:
    info: dict[str, object] = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host_python": platform.python_version(),
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
        "device": device,
    }
    try:
        import triton

        info["triton_version"] = triton.__version__
    except ImportError:
        info["triton_version"] = None
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(
            name=torch.cuda.get_device_name(0),
            compute_capability=f"{p.major}.{p.minor}",
            multiprocessors=p.multi_processor_count,
            total_memory_bytes=p.total_memory,
            l2_cache_bytes=getattr(p, "L2_cache_size", None),
        )
        info["driver_version"] = nvidia_smi("driver_version")
        info["nvidia_smi_name_memory"] = nvidia_smi("name,memory.total")
        info["clocks_before"] = nvidia_smi("clocks.sm,clocks.max.sm,clocks.mem")
    else:
        info["name"] = platform.processor() or platform.machine()
    return info


# ---------------------------------------------------------------------------------------------------------
# Timing (torch, lazily)
# ---------------------------------------------------------------------------------------------------------
class Timer:
    """Median per-call time of fn(i) (i = rotation index). CUDA: CUDA events around each call, after a
    GPU-side sleep long enough for the host to queue all calls (no launch gaps in the numbers); CPU:
    perf_counter around each call."""

    def __init__(self, torch, device: str, target_s: float = 0.02, min_reps: int = 5, max_reps: int = 100):
        self.torch, self.device = torch, device
        self.target_s, self.min_reps, self.max_reps = target_s, min_reps, max_reps
        self.cycles_per_s = 1.5e9
        self.can_sleep = device == "cuda" and hasattr(torch.cuda, "_sleep")
        if self.can_sleep:
            self._calibrate_sleep()

    def _calibrate_sleep(self):
        torch = self.torch
        cycles = 20_000_000
        torch.cuda._sleep(1000)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(cycles)
        e.record()
        torch.cuda.synchronize()
        ms = s.elapsed_time(e)
        if ms > 0:
            self.cycles_per_s = cycles / (ms / 1e3)

    def __call__(self, fn, n_rot: int = 1) -> float:
        torch = self.torch
        if self.device != "cuda":
            fn(0)
            times = []
            reps = self.min_reps
            for i in range(reps):
                t = time.perf_counter()
                fn((i + 1) % n_rot)
                times.append(time.perf_counter() - t)
            return statistics.median(times)
        # warm-up (module load, cuBLAS heuristics, allocator), then a one-call estimate
        fn(0)
        fn(1 % n_rot)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        h = time.perf_counter()
        s.record()
        fn(2 % n_rot)
        e.record()
        host_s = time.perf_counter() - h
        torch.cuda.synchronize()
        est = max(s.elapsed_time(e) / 1e3, 1e-7)
        reps = int(min(self.max_reps, max(self.min_reps, self.target_s / est)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        if self.can_sleep:
            sleep_s = min(0.25, 1.3 * reps * host_s + 1e-4)
            torch.cuda._sleep(int(sleep_s * self.cycles_per_s))
        for i in range(reps):
            starts[i].record()
            fn((i + 3) % n_rot)
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends, strict=True)) / 1e3


def n_rotations(bytes_per_set: float, l2_bytes: int, cap: int = 256) -> int:
    """Input sets to rotate through so that one pass over them is at least 2x the L2 cache."""
    if bytes_per_set <= 0:
        return 1
    return int(min(cap, max(1, math.ceil(2 * l2_bytes / bytes_per_set))))


# ---------------------------------------------------------------------------------------------------------
# The measurements (torch, lazily)
# ---------------------------------------------------------------------------------------------------------
class Runner:
    def __init__(self, torch, device: str, l2_bytes: int, timer: Timer, source: str):
        self.torch, self.device, self.l2, self.time, self.source = torch, device, l2_bytes, timer, source
        self.bf16 = torch.bfloat16
        self.checks: dict[str, object] = {}
        self.use_graphs = device == "cuda"

    def randn(self, *shape, dtype=None):
        return self.torch.randn(*shape, device=self.device, dtype=dtype or self.bf16)

    # -- copy --------------------------------------------------------------------------------------------
    def copy(self, r):
        n = r["bytes"] // 2
        rot = n_rotations(2 * r["bytes"], self.l2)
        src = [self.randn(n) for _ in range(rot)]
        dst = [self.torch.empty_like(x) for x in src]
        return self.time(lambda i: dst[i].copy_(src[i]), rot)

    # -- gemm --------------------------------------------------------------------------------------------
    def gemm_bf16(self, r):
        F = self.torch.nn.functional
        m, n, k = r["m"], r["n"], r["k"]
        rot = n_rotations(row_bytes(r), self.l2)
        xs = [self.randn(m, k) for _ in range(rot)]
        ws = [self.randn(n, k) * 0.02 for _ in range(rot)]  # nn.Linear layout [out, in]
        return self.time(lambda i: F.linear(xs[i], ws[i]), rot)

    def fp8_supported(self) -> str | None:
        """None when fp8 GEMMs can run here, else why not."""
        torch = self.torch
        if self.device != "cuda":
            return "fp8 needs CUDA"
        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return "torch has no _scaled_mm / float8_e4m3fn"
        if torch.cuda.get_device_capability(0) < (8, 9):
            return "fp8 needs compute capability 8.9+"
        try:
            err = self._fp8_check()
        except Exception as exc:  # noqa: BLE001
            return f"_scaled_mm failed: {type(exc).__name__}: {exc}"[:300]
        self.checks["fp8_gemm_rel_err"] = err
        if not err < 0.1:
            return f"_scaled_mm rel. error {err:.3g}"
        return None

    def _fp8_mm(self, a8, w8):
        one = self.torch.ones((), device=self.device, dtype=self.torch.float32)
        return self.torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=self.bf16)

    def _fp8_check(self) -> float:
        torch = self.torch
        a8 = self.randn(64, 256).to(torch.float8_e4m3fn)
        w8 = self.randn(128, 256).to(torch.float8_e4m3fn)
        out = self._fp8_mm(a8, w8).float()
        ref = a8.float() @ w8.float().t()  # fp32 reference on the same (fp8-rounded) inputs
        return float((out - ref).norm() / ref.norm())

    def bf16_check(self) -> None:
        """Relative error of one bf16 GEMM against an fp32 reference (bf16 operands: expect 1e-3..1e-2)."""
        F = self.torch.nn.functional
        x, w = self.randn(64, 512), self.randn(256, 512)
        out = F.linear(x, w).float()
        ref = x.float() @ w.float().t()
        self.checks["bf16_gemm_rel_err"] = float((out - ref).norm() / ref.norm())

    def gemm_fp8(self, r):
        torch = self.torch
        m, n, k = r["m"], r["n"], r["k"]
        rot = n_rotations(row_bytes(r), self.l2)
        xs = [self.randn(m, k).to(torch.float8_e4m3fn) for _ in range(rot)]
        ws = [self.randn(n, k).to(torch.float8_e4m3fn) for _ in range(rot)]
        return self.time(lambda i: self._fp8_mm(xs[i], ws[i]), rot)

    # -- attention ---------------------------------------------------------------------------------------
    def sdpa(self, q, k, v, causal):
        F = self.torch.nn.functional
        if q.shape[1] != k.shape[1]:
            try:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            except TypeError:  # torch < 2.5: no GQA flag
                g = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def attention(self, r):
        b, ql, kl, hq, hk, d = (r[c] for c in ("batch", "q_len", "kv_len", "n_q_heads", "n_kv_heads", "head_dim"))
        causal = ql > 1
        rot = n_rotations(row_bytes(r), self.l2)
        qs = [self.randn(b, hq, ql, d) for _ in range(rot)]
        ks = [self.randn(b, hk, kl, d) for _ in range(rot)]
        vs = [self.randn(b, hk, kl, d) for _ in range(rot)]
        out = self.sdpa(qs[0], ks[0], vs[0], causal)
        if not bool(self.torch.isfinite(out).all()):
            raise RuntimeError("SDPA output not finite")
        return self.time(lambda i: self.sdpa(qs[i], ks[i], vs[i], causal), rot)

    # -- elementwise -------------------------------------------------------------------------------------
    def rms_norm(self, x, w, eps=1e-5):
        F = self.torch.nn.functional
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), w, eps)
        xf = x.float()
        return (xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    def silu_mul(self, gu):
        g, u = gu.chunk(2, dim=-1)
        return self.torch.nn.functional.silu(g) * u

    def elementwise(self, r):
        t, h, op = r["tokens"], r["hidden"], r["op"]
        rot = n_rotations(row_bytes(r), self.l2)
        if op == "input_layernorm":
            xs = [self.randn(t, h) for _ in range(rot)]
            w = self.randn(h)
            return self.time(lambda i: self.rms_norm(xs[i], w), rot)
        if op == "add":
            xs = [self.randn(t, h) for _ in range(rot)]
            ys = [self.randn(t, h) for _ in range(rot)]
            return self.time(lambda i: self.torch.add(xs[i], ys[i]), rot)
        if op == "mlp_act":
            gus = [self.randn(t, 2 * h) for _ in range(rot)]
            return self.time(lambda i: self.silu_mul(gus[i]), rot)
        raise ValueError(op)

    # -- decoder layer -----------------------------------------------------------------------------------
    def layer_weights(self, cfg):
        h, d, inter = cfg["hidden"], cfg["head_dim"], cfg["intermediate"]
        qkv_n = (cfg["heads"] + 2 * cfg["kv_heads"]) * d
        s = 0.02
        return {
            "ln1": 1 + 0.1 * self.randn(h),
            "ln2": 1 + 0.1 * self.randn(h),
            "qkv": self.randn(qkv_n, h) * s,
            "o": self.randn(h, cfg["heads"] * d) * s,
            "gate_up": self.randn(2 * inter, h) * s,
            "down": self.randn(h, inter) * s,
        }

    def rope_tables(self, positions, d, theta=500000.0):
        torch = self.torch
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=self.device, dtype=torch.float32) / d))
        ang = positions.float()[..., None] * inv  # [..., d/2]
        ang = torch.cat([ang, ang], dim=-1)
        return ang.cos().to(self.bf16), ang.sin().to(self.bf16)

    @staticmethod
    def apply_rope(x, cos, sin):
        # x [B, L, H, D]; cos/sin [B, L, 1, D]
        half = x.shape[-1] // 2
        rot = x.new_empty(x.shape)
        rot[..., :half] = -x[..., half:]
        rot[..., half:] = x[..., :half]
        return x * cos + rot * sin

    def layer_forward(self, cfg, w, x, kc, vc, cos, sin, b, ql, kl):
        hq, hk, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
        F = self.torch.nn.functional
        h = self.rms_norm(x, w["ln1"])
        qkv = F.linear(h, w["qkv"])
        q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
        q = self.apply_rope(q.view(b, ql, hq, d), cos, sin)
        k = self.apply_rope(k.view(b, ql, hk, d), cos, sin)
        kc[:, :, kl - ql : kl] = k.transpose(1, 2)
        vc[:, :, kl - ql : kl] = v.view(b, ql, hk, d).transpose(1, 2)
        a = self.sdpa(q.transpose(1, 2), kc, vc, causal=ql > 1)
        x = x + F.linear(a.transpose(1, 2).reshape(b * ql, hq * d), w["o"])
        h = self.rms_norm(x, w["ln2"])
        x = x + F.linear(self.silu_mul(F.linear(h, w["gate_up"])), w["down"])
        return x

    def layer(self, r, cfg, w):
        torch = self.torch
        b, ql, kl = r["batch"], r["q_len"], r["kv_len"]
        hk, d = cfg["kv_heads"], cfg["head_dim"]
        # The weights (436 MB for Llama-3.1-8B) pass through L2 once per call: no rotation needed. The input
        # activation stays one buffer, as in a model, where the previous layer has just written it.
        kc, vc = self.randn(b, hk, kl, d), self.randn(b, hk, kl, d)
        pos = torch.arange(kl - ql, kl, device=self.device).expand(b, ql)
        cos, sin = self.rope_tables(pos, d)
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        x = self.randn(b * ql, cfg["hidden"])

        def fwd():
            return self.layer_forward(cfg, w, x, kc, vc, cos, sin, b, ql, kl)

        out = fwd()
        if not bool(torch.isfinite(out).all()):
            raise RuntimeError("layer output not finite")
        del out
        if self.device == "cuda" and self.use_graphs:
            # ~25 kernels a call: replay a CUDA graph (as serving engines do) so that host launch cost and
            # the launch-queue depth stay out of the numbers. Eager if capture fails.
            try:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    fwd()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fwd()
                r["_impl"] = "cuda-graph"
                return self.time(lambda i: graph.replay())
            except Exception as exc:  # noqa: BLE001
                torch.cuda.synchronize()
                self.checks.setdefault("layer_graph_error", f"{type(exc).__name__}: {str(exc)[:300]}")
                self.use_graphs = False
        r["_impl"] = "eager"
        return self.time(lambda i: fwd())


# ---------------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------------
def plan(tiny: bool) -> dict[str, list[dict[str, object]]]:
    """All shapes per phase key ('kind/dtype'), each ordered coarse-to-fine."""
    if tiny:
        models, tps, ms = TINY_MODEL, TINY["tps"], TINY["ms"]
        pre, bat, ctx, lctx, cp, lmodel = (
            TINY["prefill"],
            TINY["batches"],
            TINY["ctxs"],
            TINY["ctxs"],
            TINY["copy"],
            "tiny",
        )
    else:
        models, tps, ms = MODELS, TPS, M_GRID
        pre, bat, ctx, lctx, cp, lmodel = (
            PREFILL_LENS,
            DECODE_BATCHES,
            DECODE_CTXS,
            LAYER_DECODE_CTXS,
            COPY_BYTES,
            LAYER_MODEL,
        )
    return {
        "copy/bf16": copy_shapes(cp),
        "gemm/bf16": coarse_to_fine(gemm_shapes(models, tps, ms, ("bf16",)), ["m"]),
        "gemm/fp8": coarse_to_fine(gemm_shapes(models, tps, ms, ("fp8",)), ["m"]),
        "attention/bf16": coarse_to_fine(attention_shapes(models, tps, pre, bat, ctx), ["q_len", "batch", "kv_len"]),
        "elementwise/bf16": coarse_to_fine(elementwise_shapes(models, tps, ms), ["tokens"]),
        "layer/bf16": coarse_to_fine(layer_shapes(lmodel, pre, bat, lctx), ["q_len", "batch", "kv_len"]),
    }


def over_budget(now: float, phase_deadline: float, run_deadline: float, done_in_phase: int) -> bool:
    """The budget guard: stop a phase at its deadline, except that each phase gets its first (coarsest)
    shape while the whole run is still inside its budget."""
    if now > run_deadline:
        return True
    return now > phase_deadline and done_in_phase > 0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu_measurements", help="output folder")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget for measuring (s)")
    p.add_argument("--tiny", action="store_true", help="tiny shape grid (smoke test; runs on CPU)")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    p.add_argument("--no-fp8", action="store_true", help="skip the fp8 GEMMs")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.monotonic()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = set(kinds) - set(KINDS)
    if bad:
        print(f"unknown kinds: {sorted(bad)}", file=sys.stderr)
        return 2
    import torch  # lazily: the shape code above works without it

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available (use --device cpu for a smoke run)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    info = device_info(torch, device)
    l2 = info.get("l2_cache_bytes") or DEFAULT_L2_BYTES
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        timer = Timer(torch, device)
    else:
        timer = Timer(torch, device, min_reps=3)
    stamp = info["date_utc"]
    source = f"llmsim benchmarks/gpu/measure.py {info.get('name', device)} torch {torch.__version__} {stamp}"
    run = Runner(torch, device, int(l2), timer, source)
    shapes = plan(args.tiny)

    run.bf16_check()
    fp8_why = "skipped (--no-fp8)" if args.no_fp8 else run.fp8_supported()
    info["fp8"] = fp8_why or "measured with torch._scaled_mm (e4m3 x e4m3 -> bf16, unit scales)"

    layer_cfg = (TINY_MODEL["tiny"] if args.tiny else MODELS[LAYER_MODEL]) if "layer" in kinds else None
    rows_by_kind: dict[str, list[dict[str, object]]] = {k: [] for k in KINDS}
    skipped: dict[str, int] = {}
    failures: list[str] = []
    budget = args.budget_s
    cum = 0.0
    for kind, dtype, share in PHASES:
        cum += share
        key = f"{kind}/{dtype}"
        if kind not in kinds or (key == "gemm/fp8" and fp8_why):
            continue
        deadline = t0 + budget * cum
        todo = shapes[key]
        measure = {
            "copy": run.copy,
            "gemm": run.gemm_fp8 if dtype == "fp8" else run.gemm_bf16,
            "attention": run.attention,
            "elementwise": run.elementwise,
        }.get(kind)
        weights = run.layer_weights(layer_cfg) if kind == "layer" else None
        phase_t = time.monotonic()
        done = 0
        for r in todo:
            if over_budget(time.monotonic(), deadline, t0 + budget, done):
                break
            done += 1
            try:
                s = run.layer(r, layer_cfg, weights) if kind == "layer" else measure(r)
            except Exception as exc:  # noqa: BLE001 -- record, go on with the next shape
                if device == "cuda" and "out of memory" in str(exc).lower():
                    torch.cuda.empty_cache()
                failures.append(f"{key} {_shape_str(r)}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            models = r.get("_models")
            src = source + (f" [{' '.join(models)}]" if models else "") + (f" {r['_impl']}" if "_impl" in r else "")
            rows_by_kind[kind].append({**r, "seconds": float(s), "source": src})
        skipped[key] = len(todo) - done
        weights = None
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        print(
            f"[{time.monotonic() - t0:6.1f}s] {key:<17} {done}/{len(todo)} shapes in {time.monotonic() - phase_t:.1f}s",
            flush=True,
        )

    for kind in KINDS:
        if kind in kinds:
            write_rows(out / f"{kind}.csv", rows_by_kind[kind])
    if device == "cuda":
        info["clocks_after"] = nvidia_smi("clocks.sm,clocks.max.sm,clocks.mem")
    info.update(
        l2_bytes_used_for_rotation=int(l2),
        timer=(
            "CUDA events per call, median; host queued ahead behind torch.cuda._sleep"
            if timer.can_sleep
            else ("CUDA events per call, median" if device == "cuda" else "perf_counter per call, median")
        ),
        budget_s=budget,
        elapsed_s=round(time.monotonic() - t0, 1),
        tiny=args.tiny,
        rows={k: len(v) for k, v in rows_by_kind.items() if k in kinds},
        trimmed_by_budget=skipped,
        failures=failures[:50],
        n_failures=len(failures),
        checks=run.checks,
        argv=list(argv) if argv is not None else sys.argv[1:],
    )
    (out / "device.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    if failures:
        print(f"{len(failures)} shapes failed; first: {failures[0]}", flush=True)
    print(f"wrote {out}/ in {time.monotonic() - t0:.0f}s; fp8: {info['fp8']}")
    print(summarize({k: v for k, v in rows_by_kind.items() if k in kinds}, skipped), flush=True)
    return 0


def _shape_str(r: dict[str, object]) -> str:
    return " ".join(f"{c}={r[c]}" for c in COLUMNS if c in r and c not in ("op", "kind", "dtype", "source"))


if __name__ == "__main__":
    sys.exit(main())
