"""The digital twin: the same workload through the reference engine (real NumPy model, wall
clock) and through the simulator (cost model with this machine's calibrated ``local-cpu``
profile), compared request by request and step by step.

Both sides build their scheduler, KV block count and workload from the same scenario, so every
difference in the numbers comes from the cost model's step times (and the schedule decisions
those times change).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from llmsim.build import build_model, build_pools, build_workload
from llmsim.costmodel import CostConfig, CostModel
from llmsim.costmodel.ops import batch_shape
from llmsim.errors import UserError, atomic_write_text
from llmsim.hardware import load_profile
from llmsim.models import ModelSpec
from llmsim.reference.cpubench import BLAS_THREADS, PROBE, TWIN_SPEC, time_steps
from llmsim.reference.engine import ReferenceEngine
from llmsim.reference.model import Model, PagedKVCache, init_weights
from llmsim.results import requests_frame
from llmsim.scenario import load_scenario

# fp32 everywhere, and the naive attention kernel: NumPy materialises the score matrix
FP32 = CostConfig(weight_dtype="fp32", kv_dtype="fp32", act_dtype="fp32", attention_kernel="naive")
PREFILL_GRID = [16, 64, 256, 1024, 2048]
DECODE_GRID = [(b, c) for b in (1, 4, 16, 64) for c in (128, 512, 1024, 4096) if b * c <= 65536]
METRICS = ["ttft_s", "tbt_mean_s", "e2e_s"]


# ---- step grid ------------------------------------------------------------------------------
def measure_steps(spec: ModelSpec, profile_path: Path, reps: int = 3, quick: bool = False) -> pd.DataFrame:
    """Predicted vs measured time of single steps: prefills of n tokens, decode batches at a context.
    Measured: the median of ``reps`` passes after a warm-up, in 3 rounds over the grid (1 if quick)."""
    cost = CostModel(spec, load_profile(profile_path), FP32)
    model = Model(init_weights(spec, 0, np.float32), PagedKVCache(spec, 16, np.float32))
    prefill = PREFILL_GRID[:3] if quick else PREFILL_GRID
    decode = [(b, c) for b, c in DECODE_GRID if b * c <= 8192] if quick else DECODE_GRID
    cases = [([n], []) for n in prefill] + [([], [(b, c)]) for b, c in decode]
    with threadpool_limits(BLAS_THREADS, "blas"):
        measured = time_steps(model, cases, reps, 1 if quick else 3)
    rows = [("prefill", n, 0, cost.step_time(batch_shape([(n, 0)], []))) for n in prefill]
    rows += [("decode", b, c, cost.step_time(batch_shape([], [c] * b))) for b, c in decode]
    rows = [(*r, m) for r, m in zip(rows, measured, strict=True)]
    df = pd.DataFrame(rows, columns=["kind", "tokens_or_batch", "context", "predicted_s", "measured_s"])
    df.insert(0, "step", [f"prefill {n}" if k == "prefill" else f"decode b={n} ctx={c}" for k, n, c, *_ in rows])
    df["error"] = df["predicted_s"] / df["measured_s"] - 1
    return df


# ---- whole scenario -------------------------------------------------------------------------
@dataclass
class TwinResult:
    requests: pd.DataFrame  # per request: predicted and measured TTFT, TBT, E2E and their errors
    steps: pd.DataFrame  # measured engine steps
    summary: dict


def run_twin(scenario: Path, profile_path: Path, clock: str = "cpu") -> TwinResult:
    """Run the scenario through the reference engine and the simulator; compare per request."""
    import llmsim.api

    sc = load_scenario(scenario, {"hardware": str(Path(profile_path).resolve())})
    if sc.policy.kind not in ("traditional", "chunked"):
        raise UserError(f"{scenario}: policy.kind: the twin supports traditional and chunked, not {sc.policy.kind!r}")
    if sc.cluster.replicas != 1 or sc.cluster.tp != 1 or sc.cluster.pp != 1:
        raise UserError(f"{scenario}: cluster: the twin runs one replica with tp=1, pp=1")
    model = build_model(sc)
    pool = build_pools(sc, model)[0]
    sim = llmsim.api.run(sc)
    wl = build_workload(sc)
    engine = ReferenceEngine(
        init_weights(model, sc.seed, np.float32),
        sc.policy.kind,
        pool.sched,
        pool.kv_blocks,
        sc.kv_cache.block_tokens,
        sc.kv_cache.watermark,
        seed=sc.seed,
        clock=clock,
    )
    reqs = [
        engine.new_request(i, float(wl.arrival_s[i]), int(wl.prompt_tokens[i]), int(wl.output_tokens[i]))
        for i in range(len(wl))
    ]
    probe_model = Model(init_weights(TWIN_SPEC, 0, np.float32), PagedKVCache(TWIN_SPEC, 16, np.float32))
    with threadpool_limits(BLAS_THREADS, "blas"):
        probe_before = time_steps(probe_model, [PROBE], 5, 1)[0]
        out = engine.run(reqs)
        probe_after = time_steps(probe_model, [PROBE], 5, 1)[0]
    probe_cal = (load_profile(profile_path).calibration or {}).get("probe_step", {}).get("measured_s")
    measured = requests_frame(out.requests)
    steps = out.steps.assign(predicted_s=[pool.cost.step_time(shape) for shape in out.shapes])
    step_err = steps["predicted_s"] / steps["duration_s"] - 1
    frame = compare_requests(sim.requests, measured)
    summary = {
        "scenario": sc.name,
        "model": model.name,
        "policy": sc.policy.kind,
        "profile": str(profile_path),
        "clock": clock,
        "requests": len(frame),
        "engine_steps": len(out.steps),
        "simulated_steps": len(sim.steps),
        "measured_makespan_s": float(measured["finish_s"].max()),
        "predicted_makespan_s": float(sim.requests["finish_s"].max()),
        "error": error_summary(frame),
        # the calibration's probe step timed again just before and after the engine run: a ratio
        # far from 1 means this machine ran at another speed than when it was calibrated
        "probe_vs_calibration": {
            "before": probe_before / probe_cal if probe_cal else None,
            "after": probe_after / probe_cal if probe_cal else None,
        },
        # the cost model on the engine's own steps (same shapes), apart from any schedule divergence
        "engine_step_error": {
            "median_abs": float(step_err.abs().median()),
            "median_signed": float(step_err.median()),
            "total_predicted_over_measured": float(steps["predicted_s"].sum() / steps["duration_s"].sum()),
        },
    }
    return TwinResult(frame, steps, summary)


def compare_requests(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    cols = ["id", "prompt_tokens", "output_tokens", *METRICS]
    df = predicted[cols].merge(measured[cols], on=["id", "prompt_tokens", "output_tokens"], suffixes=("_pred", "_meas"))
    for m in METRICS:
        df[f"{m}_err"] = df[f"{m}_pred"] / df[f"{m}_meas"] - 1
    return df


def error_summary(frame: pd.DataFrame) -> dict:
    """Median and p90 absolute relative error per metric, and the median signed error."""
    out = {}
    for m in METRICS:
        e = frame[f"{m}_err"].dropna()
        if len(e):
            out[m] = {
                "median_abs": float(e.abs().median()),
                "p90_abs": float(e.abs().quantile(0.9)),
                "median_signed": float(e.median()),
            }
    return out


# ---- writing --------------------------------------------------------------------------------
def plot(result: TwinResult, steps: pd.DataFrame | None, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = 3 if steps is not None else 2
    fig, axes = plt.subplots(1, n, figsize=(5 * n, 4.2))
    f = result.requests
    ax = axes[0]
    for m, mark in zip(METRICS, "o^s", strict=True):
        ax.scatter(f[f"{m}_meas"], f[f"{m}_pred"], s=14, marker=mark, label=m.removesuffix("_s"))
    lo = max(1e-4, float(np.nanmin(f[[f"{m}_meas" for m in METRICS]].to_numpy())))
    hi = float(np.nanmax(f[[f"{m}_meas" for m in METRICS]].to_numpy()))
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="measured (s)", ylabel="predicted (s)", title="per request")
    ax.legend()
    ax = axes[1]
    for m in METRICS:
        e = np.sort(f[f"{m}_err"].dropna().to_numpy() * 100)
        ax.plot(e, np.linspace(0, 1, len(e)), label=m.removesuffix("_s"))
    ax.axvline(0, color="k", lw=1)
    ax.set(xlabel="predicted / measured - 1 (%)", ylabel="fraction of requests", title="error distribution")
    ax.legend()
    if steps is not None:
        ax = axes[2]
        ax.scatter(steps["measured_s"], steps["predicted_s"], s=16)
        lo, hi = steps["measured_s"].min(), steps["measured_s"].max()
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set(xscale="log", yscale="log", xlabel="measured (s)", ylabel="predicted (s)", title="single steps (grid)")
    fig.suptitle(f"digital twin: {result.summary['scenario']} ({result.summary['policy']})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(out_dir: Path, result: TwinResult | None, steps: pd.DataFrame | None) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    summary: dict = {}
    if result is not None:
        atomic_write_text(out_dir / "twin_requests.csv", result.requests.to_csv(index=False))
        atomic_write_text(out_dir / "engine_steps.csv", result.steps.to_csv(index=False))
        summary.update(result.summary)
        paths += [out_dir / "twin_requests.csv", out_dir / "engine_steps.csv"]
    if steps is not None:
        atomic_write_text(out_dir / "twin_steps.csv", steps.to_csv(index=False))
        summary["steps"] = {
            "median_abs_error": float(steps["error"].abs().median()),
            "p90_abs_error": float(steps["error"].abs().quantile(0.9)),
            "cases": len(steps),
        }
        paths.append(out_dir / "twin_steps.csv")
    atomic_write_text(out_dir / "twin_summary.json", json.dumps(summary, indent=2))
    paths.append(out_dir / "twin_summary.json")
    if result is not None:
        paths.append(plot(result, steps, out_dir / "twin.png"))
    return paths


__all__ = ["TWIN_SPEC", "TwinResult", "measure_steps", "run_twin", "write"]
