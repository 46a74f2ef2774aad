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
another GPU and other limits (the RTX 4090 run, max_num_seqs 256, 2,048 batched tokens):

    .venv/bin/python benchmarks/vllm_memory.py

The fitted numbers are ``llmsim/engine.py``'s ``_VLLM_*`` constants (tests/test_vllm_memory.py
refits them).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmsim.build import activation_bytes, moe_workspace_bytes  # noqa: E402
from llmsim.engine import PRESETS  # noqa: E402
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


def forward_bytes(row: pd.Series) -> tuple[float, float] | None:
    """llmsim's forward-pass activation estimate and fused-MoE scratch for the row's model, where
    the catalog has its architecture."""
    if not isinstance(row.llmsim_model, str):
        return None
    model = CATALOG[row.llmsim_model]
    tokens, tp = int(row.max_num_batched_tokens), int(row.tp)
    fwd = activation_bytes(model, tokens, int(row.max_num_seqs), tp, "bf16")
    return fwd, moe_workspace_bytes(model, tokens, tp, 1, "bf16")


def predict(rows: pd.DataFrame, terms: dict[str, float]) -> pd.DataFrame:
    """Every row priced by the engine's own formula (``EngineSpec.reserved_bytes``) with ``terms``."""
    engine = replace(PRESETS["vllm-v1"], **terms)
    out = []
    for _, r in rows.iterrows():
        known = forward_bytes(r)
        fwd, moe = known if known is not None else (0.0, 0.0)
        peak, sampler, _, non_torch = engine.reserved_bytes(
            fwd, int(r.max_num_seqs), int(r.max_num_batched_tokens), int(r.vocab_size), int(r.tp), moe
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
            "engine": engine,
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
