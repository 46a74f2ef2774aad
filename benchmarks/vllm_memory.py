"""vLLM's own memory next to the weights and the KV cache: fit the engine's terms, test them held out.

vLLM sizes its KV cache from a start-up profile run: ``gpu_memory_utilization`` x the device's
memory, less the weights, the profile's torch peak and the memory outside torch that grew during
it (vllm/v1/worker/gpu_worker.py, ``determine_available_memory``). In vLLM 0.19 the torch peak of
the dense models is set by the dummy sampler run (vllm PR #13594: max_num_seqs rows over the whole
vocabulary, top-k and top-p on), not by the forward pass: it is flat across TP degrees and
max_model_len and grows with the vocabulary. This script reads the public vLLM 0.19 H100 start-up
logs in ``data/validation/vllm-memory/v0.19-h100.csv``, fits the bytes the sampler holds per logit
and the non-torch memory (TP 1, TP > 1) on the rows marked ``fit`` (three models, one at TP 2),
prints every other row's prediction, and checks the one real run with a recorded block count on
another GPU and other limits (the RTX 4090 run, max_num_seqs 256, 2,048 batched tokens). From
vLLM 0.21 an estimate of the CUDA graphs' memory is subtracted too: the script then reads vLLM
0.30's start-ups (``v0.30-glyd.csv``), the terms of its ``fit`` rows (Qwen3-8B, warm compile cache)
and every row as ``engine: vllm-v1`` prices it:

    .venv/bin/python benchmarks/vllm_memory.py

The fitted numbers are ``llmsim/engine.py``'s ``VLLM_019_MEMORY`` (0.19) and ``VLLM_*`` constants
and the Hopper profiles' ``overheads`` (0.30); tests/test_vllm_memory.py refits them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmsim.build import forward_body_bytes, logits_bytes, moe_workspace_bytes  # noqa: E402
from llmsim.engine import PRESETS, VLLM_019_MEMORY  # noqa: E402
from llmsim.models import CATALOG  # noqa: E402

DATA = ROOT / "data" / "validation" / "vllm-memory" / "v0.19-h100.csv"
GIB = 2**30


def load() -> pd.DataFrame:
    return pd.read_csv(DATA)


def fit(rows: pd.DataFrame) -> dict[str, float]:
    """Sampler bytes per logit (least squares through 0 on the TP-1 fitting rows, whose torch peak
    is the sampler's: their forward pass needs less, checked below), non-torch bytes at TP 1 (mean)
    and at TP > 1 (mean)."""
    f = rows[rows.split == "fit"]
    tp1 = f[f.tp == 1]
    logits = tp1.max_num_seqs * tp1.vocab_size
    peak = tp1.activation_memory_gib * GIB
    per_logit = float((peak * logits).sum() / (logits**2).sum())
    return {
        "sampler_profile_bytes_per_logit": per_logit,
        "non_torch_bytes": float(tp1.non_torch_forward_gib.mean() * GIB),
        "non_torch_bytes_tp": float(f[f.tp > 1].non_torch_forward_gib.mean() * GIB),
    }


def forward_bytes(row: pd.Series) -> tuple[float, float, float] | None:
    """llmsim's forward-pass activation estimate, the sampled rows' fp32 logits and the fused-MoE
    scratch for the row's model, where the catalog has its architecture."""
    if not isinstance(row.llmsim_model, str):
        return None
    model = CATALOG[row.llmsim_model]
    tokens, tp = int(row.max_num_batched_tokens), int(row.tp)
    body = forward_body_bytes(model, tokens, tp, "bf16")
    logits = logits_bytes(model, min(int(row.max_num_seqs), tokens), tp)
    return body, logits, moe_workspace_bytes(model, tokens, tp, 1, "bf16")


def predict(rows: pd.DataFrame, terms: dict[str, float]) -> pd.DataFrame:
    """Every row priced by the engine's own formula (``EngineSpec.reserved_bytes``) with vLLM 0.19's
    memory terms and ``terms``."""
    engine = replace(PRESETS["vllm-v1"], **{**VLLM_019_MEMORY, **terms})
    out = []
    for _, r in rows.iterrows():
        known = forward_bytes(r)
        body, logits, moe = known if known is not None else (0.0, 0.0, 0.0)
        fwd = body + logits  # (vLLM 0.19's forward peak holds the logits: logits_after_forward false)
        peak, sampler, _, non_torch = engine.reserved_bytes(
            body, logits, int(r.max_num_seqs), int(r.max_num_batched_tokens), int(r.vocab_size), int(r.tp), moe
        )
        measured = (r.activation_memory_gib + r.non_torch_forward_gib) * GIB
        out.append(
            {
                "split": r.split,
                "model": r.model.split("/")[-1],
                "tp": int(r.tp),
                "vocab": int(r.vocab_size),
                "moe": bool(r.moe),
                "peak_gib": r.activation_memory_gib,
                "pred_peak_gib": peak / GIB,
                "peak_err_pct": 100 * (peak / GIB / r.activation_memory_gib - 1),
                "by": "forward" if fwd > sampler else "sampler",
                "moe_ws_gib": moe / GIB,
                "non_torch_gib": r.non_torch_forward_gib,
                "pred_non_torch_gib": non_torch / GIB,
                "kv_err_pct": 100 * (measured - peak - non_torch) / (r.kv_cache_memory_gib * GIB),
            }
        )
    return pd.DataFrame(out)


V030 = ROOT / "data" / "validation" / "vllm-memory" / "v0.30-glyd.csv"
# the fit rows' GPUs whose readings set vllm-v1's own terms (GPUs without a measurement take them),
# and the one whose readings set the Hopper profiles' overheads (GH200, H100, H200: the same SM90
# kernels, FlashAttention-3 among them)
DEFAULT_GPUS = ("NVIDIA L4", "NVIDIA A100-SXM4-40GB")
HOPPER_GPU = "NVIDIA GH200 480GB"


def load_030() -> pd.DataFrame:
    """vLLM 0.30's start-ups, with the settings each ran under (vLLM's defaults for the GPU where the
    log says ``default``), its captured CUDA graphs, and the terms vLLM printed, per device (GiB)."""
    from llmsim.build import graph_sizes
    from llmsim.engine import graph_plan, vllm_capture_sizes, vllm_defaults
    from llmsim.hardware import load_profile

    sys.path.insert(0, str(ROOT / "benchmarks" / "vllm_gpu"))
    from bench_runs import HARDWARE

    rows = pd.read_csv(V030)
    out = []
    for _, r in rows.iterrows():
        hw = load_profile(HARDWARE[r.gpu])
        policy, _ = vllm_defaults(hw)
        seqs = policy["max_num_seqs"] if str(r.max_num_seqs) == "default" else int(r.max_num_seqs)
        tokens = (
            policy["max_batch_tokens"]
            if str(r.max_num_batched_tokens).startswith("default")
            else int(r.max_num_batched_tokens)
        )
        engine = replace(PRESETS["vllm-v1"], cuda_graph_sizes=vllm_capture_sizes(int(r.max_cudagraph_capture_size)))
        sizes = graph_sizes(engine, seqs, tokens)
        assert len(sizes) == int(r.num_capture_sizes), r.path  # vLLM's capture list, as its config printed it
        model = CATALOG[r.llmsim_model]
        plan = graph_plan(sizes, seqs)  # (the capture vLLM logged: fit_030 reads its parts)
        assert int(r.profile_full_graphs) == min(plan.full, 2), r.path  # vLLM profiled two FULL graphs
        out.append(
            {
                "split": r.split,
                "gpu": r.gpu,
                "profile": HARDWARE[r.gpu],
                "model": r.model.split("/")[-1],
                "tp": int(r.tp),
                "cache": r.compile_cache,
                "seqs": seqs,
                "tokens": tokens,
                "sizes": sizes,
                "piecewise": plan.piecewise,
                "full": plan.full,
                "second_full": plan.second_full_size,
                "layers": model.num_layers,
                "heads": model.num_heads // int(r.tp),
                "llmsim_model": r.llmsim_model,
                "util_gib": r.total_gib * r.gpu_memory_utilization,
                "weights_gib": r.model_loading_gib,
                # vLLM prints weights + non-torch as "consumed", and its torch peak with the applied
                # graph estimate added (peak_activation_memory): the identity util x total =
                # consumed + peak + KV holds on every row
                "non_torch_gib": r.consumed_gib - r.model_loading_gib,
                "graph_estimate_gib": r.cudagraph_estimated_gib,
                "profile_capture_gib": r.profile_capture_gib,  # every PIECEWISE graph and two FULL ones
                "torch_peak_gib": r.peak_activation_gib - r.cudagraph_estimated_gib,
                "kv_gib": r.available_kv_gib,
            }
        )
    return pd.DataFrame(out)


def fit_030(rows: pd.DataFrame) -> dict[str, dict[str, float]]:
    """vLLM 0.30's non-torch memory and graph-estimate terms, read off the fit rows (Qwen3-8B, warm
    compile cache): the mean over the L4 and A100 (vllm-v1's own terms) and the GH200's (the Hopper
    profiles'). The PIECEWISE term is the profiling capture (every PIECEWISE graph and two FULL
    ones) per graph per layer; the FULL term is the rest of the estimate, the extrapolated FULL
    graphs, per layer x head x batch row of the second FULL size."""
    f = rows[rows.split == "fit"].assign(
        non_torch=lambda t: t.non_torch_gib * GIB,
        piecewise=lambda t: t.profile_capture_gib * GIB / (t.layers * t.piecewise),
        full=lambda t: (
            (t.graph_estimate_gib - t.profile_capture_gib) * GIB / ((t.full - 2) * t.layers * t.heads * t.second_full)
        ),
    )
    groups = {"default": f[f.gpu.isin(DEFAULT_GPUS)], "hopper": f[f.gpu == HOPPER_GPU]}
    return {
        k: {
            "non_torch_bytes": float(g.non_torch.mean()),
            "cuda_graph_bytes_per_layer": float(g.piecewise.mean()),
            "cuda_graph_full_bytes_per_head_row": float(g.full.mean()),
        }
        for k, g in groups.items()
    }


def predict_030(rows: pd.DataFrame) -> pd.DataFrame:
    """Every vLLM 0.30 start-up's terms as ``engine: vllm-v1`` prices them on the row's GPU profile
    (``for_hardware``), and the KV cache they leave from the logged weights and device total."""
    from llmsim.build import engine_memory
    from llmsim.engine import for_hardware
    from llmsim.hardware import load_profile

    out = []
    for _, r in rows.iterrows():
        spec = for_hardware(PRESETS["vllm-v1"], load_profile(r.profile))
        mem = engine_memory(spec, CATALOG[r.llmsim_model], r.tokens, r.seqs, r.tp, 1, 1, "bf16", r.sizes)
        peak, non_torch, graphs = mem.peak, mem.non_torch, mem.graphs
        kv = r.util_gib - r.weights_gib - (peak + non_torch + graphs) / GIB
        out.append(
            {
                "split": r.split,
                "gpu": r.profile,
                "model": r.model,
                "tp": r.tp,
                "cache": r.cache,
                "graphs": r.piecewise + r.full,
                "peak_gib": r.torch_peak_gib,
                "pred_peak_gib": peak / GIB,
                "non_torch_gib": r.non_torch_gib,
                "pred_non_torch_gib": non_torch / GIB,
                "graphs_gib": r.graph_estimate_gib,
                "pred_graphs_gib": graphs / GIB,
                "kv_gib": r.kv_gib,
                "kv_err_pct": 100 * (kv / r.kv_gib - 1),
            }
        )
    return pd.DataFrame(out)


def rtx4090_blocks() -> dict[str, int]:
    """KV blocks llmsim sizes for the real RTX 4090 run (data/validation/vllm-gpu/RTX4090/, its
    engine arguments), under vllm-v1 and under the ideal engine, next to vLLM's recorded count."""
    from llmsim.build import build_pools
    from llmsim.scenario import scenario_from_dict

    meta = json.loads((ROOT / "data/validation/vllm-gpu/RTX4090/Llama-3.1-8B/meta.json").read_text())
    kw = meta["engine_kwargs"]
    out = {"vLLM 0.19 (recorded)": int(meta["kv_cache"]["num_gpu_blocks"])}
    for engine in ("vllm-v1", "ideal"):
        spec = {
            "name": "rtx4090",
            "model": {"name": "llama-3.1-8b"},
            "hardware": "RTX-4090",
            # the run is vLLM 0.19: its memory terms
            "engine": {"preset": engine, **(VLLM_019_MEMORY if engine == "vllm-v1" else {})},
            "policy": {
                "kind": "vllm",
                "max_num_seqs": kw["max_num_seqs"],
                "chunk_tokens": kw["max_num_batched_tokens"],
                "max_batch_tokens": kw["max_num_batched_tokens"],
            },
            "kv_cache": {"memory_fraction": meta["kv_cache"]["gpu_memory_utilization"], "block_tokens": 16},
            "workload": {
                "kind": "poisson",
                "num_requests": 1,
                "rate_rps": 1.0,
                "prompt_tokens": {"dist": "fixed", "value": 16},
                "output_tokens": {"dist": "fixed", "value": 16},
            },
        }
        sc = scenario_from_dict(spec, "rtx4090", ROOT)
        model = CATALOG["llama-3.1-8b"]
        out[f"llmsim, engine {engine}"] = build_pools(sc, model)[0].kv_blocks
    return out


def main() -> int:
    rows = load()
    terms = fit(rows)
    print("fitted on the 'fit' rows:")
    print(f"  sampler_profile_bytes_per_logit  {terms['sampler_profile_bytes_per_logit']:.2f}")
    print(f"  non_torch_bytes (TP 1)           {terms['non_torch_bytes'] / GIB:.4f} GiB")
    print(f"  non_torch_bytes_tp (TP > 1)      {terms['non_torch_bytes_tp'] / GIB:.4f} GiB\n")
    table = predict(rows, terms)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(2).to_string(index=False))
    held = table[table.split == "held-out"]
    for name, part in (("held-out dense", held[~held.moe]), ("held-out MoE", held[held.moe])):
        err = part.peak_err_pct.abs()
        print(
            f"\n{name} ({len(part)} rows): torch peak |error| median {err.median():.1f} %, max {err.max():.1f} %; "
            f"KV cache error median {part.kv_err_pct.abs().median():.2f} %, max {part.kv_err_pct.abs().max():.2f} %"
        )
    print("\nRTX 4090 run (max_num_seqs 256, max_num_batched_tokens 2048, gpu_memory_utilization 0.9):")
    for k, v in rtx4090_blocks().items():
        print(f"  {k:<28} {v:,} blocks")
    main_030()
    return 0


def main_030() -> None:
    """vLLM 0.30 (>= 0.21): the terms read off the fit rows, and every start-up priced by vllm-v1."""
    rows = load_030()
    print("\nvLLM 0.30 start-ups (v0.30-glyd.csv), read off the fit rows (Qwen3-8B, warm compile cache):")
    for group, t in fit_030(rows).items():
        print(
            f"  {group:<8} non_torch {t['non_torch_bytes'] / GIB:.3f} GiB, "
            f"CUDA graphs {t['cuda_graph_bytes_per_layer'] / 2**20:.3f} MiB per PIECEWISE graph per layer, "
            f"{t['cuda_graph_full_bytes_per_head_row']:.2f} B per FULL graph per layer x head x row"
        )
    table = predict_030(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(2).to_string(index=False))
    for name, part in (
        ("held-out, warm cache", table[(table.split == "held-out") & (table.cache == "warm")]),
        ("held-out, cold cache", table[(table.split == "held-out") & (table.cache == "cold")]),
    ):
        err = part.kv_err_pct
        print(
            f"\n{name} ({len(part)} rows): KV cache error median {err.abs().median():.1f} %, range {err.min():+.1f}..{err.max():+.1f} %"
        )


if __name__ == "__main__":
    raise SystemExit(main())
