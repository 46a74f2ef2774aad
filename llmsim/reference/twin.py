"""The digital twin: the same workload through the reference engine (real NumPy model, measured
step times, by default normalised for machine-speed drift) and through the simulator (cost model
with this machine's calibrated ``local-cpu`` profile), compared request by request and step by
step.

Both sides build their scheduler, KV block count and workload from the same scenario, so every
difference in the numbers comes from the cost model's step times (and the schedule decisions
those times change).

Measured request times come on two clocks of the same run: ``normalised`` (the engine's clock:
each step's measured time divided by the speed factor a probe step reads, i.e. rescaled to the
machine speed the profile was calibrated at) and ``raw`` (the measured times as they were). The
simulator's predictions are the same for both.
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
from llmsim.reference.cpubench import (
    BLAS_THREADS,
    PREFILL_PROBE,
    PROBE,
    TWIN_SPEC,
    cold_pass_s,
    column_medians,
    probe_timer,
    time_steps_cold_normalised,
    time_steps_probed,
)
from llmsim.reference.engine import CLOCKS, EngineOutput, ReferenceEngine, SpeedProbe
from llmsim.reference.model import Model, PagedKVCache, init_weights
from llmsim.results import requests_frame
from llmsim.scenario import load_scenario

# fp32 everywhere, and the naive attention kernel: NumPy materialises the score matrix
FP32 = CostConfig(weight_dtype="fp32", kv_dtype="fp32", act_dtype="fp32", attention_kernel="naive")
PREFILL_GRID = [16, 64, 256, 1024, 2048]
DECODE_GRID = [(b, c) for b in (1, 4, 16, 64) for c in (128, 512, 1024, 4096) if b * c <= 65536]
METRICS = ["ttft_s", "tbt_mean_s", "e2e_s"]


# ---- step grid ------------------------------------------------------------------------------
def measure_steps(
    spec: ModelSpec, profile_path: Path, rounds: int = 5, quick: bool = False, normalise: bool = True
) -> pd.DataFrame:
    """Predicted vs measured time of single steps: prefills of n tokens, decode batches at a context.
    Measured as the calibration measures its steps: one cold pass per case in each of ``rounds``
    rounds over the grid (5; 2 if quick), median per case. ``normalise`` (with the profile's probe
    references): the probes are timed just before each case and each sample divided by its speed
    factor, as the engine's clock is (``measured_raw_s``: as measured, ``speed_factor``: raw over
    normalised)."""
    prof = load_profile(profile_path)
    cost = CostModel(spec, prof, FP32)
    model = Model(init_weights(spec, 0, np.float32), PagedKVCache(spec, 16, np.float32))
    prefill = PREFILL_GRID[:3] if quick else PREFILL_GRID
    decode = [(b, c) for b, c in DECODE_GRID if b * c <= 8192] if quick else DECODE_GRID
    cases = [([n], []) for n in prefill] + [([], [(b, c)]) for b, c in decode]
    cal = prof.calibration or {}
    refs = {
        k: cal[key]["measured_s"]
        for k, key in (("decode", "probe_step"), ("prefill", "probe_prefill_step"))
        if key in cal
    }
    rounds = 2 if quick else rounds
    with threadpool_limits(BLAS_THREADS, "blas"):
        if normalise and "decode" in refs:
            measured, raw, factors, _ = time_steps_cold_normalised(model, cases, rounds, refs, weights=model.w)
        else:
            measured = raw = column_medians(time_steps_probed(model, cases, rounds, {})[0])
            factors = [1.0] * len(cases)
    rows = [("prefill", n, 0, cost.step_time(batch_shape([(n, 0)], []))) for n in prefill]
    rows += [("decode", b, c, cost.step_time(batch_shape([], [c] * b))) for b, c in decode]
    rows = [(*r, m, w, f) for r, m, w, f in zip(rows, measured, raw, factors, strict=True)]
    cols = ["kind", "tokens_or_batch", "context", "predicted_s", "measured_s", "measured_raw_s", "speed_factor"]
    df = pd.DataFrame(rows, columns=cols)
    df.insert(0, "step", [f"prefill {n}" if k == "prefill" else f"decode b={n} ctx={c}" for k, n, c, *_ in rows])
    df["error"] = df["predicted_s"] / df["measured_s"] - 1
    df["error_raw"] = df["predicted_s"] / df["measured_raw_s"] - 1
    return df


# ---- whole scenario -------------------------------------------------------------------------
@dataclass
class TwinResult:
    requests: pd.DataFrame  # per request: predicted and measured TTFT, TBT, E2E and their errors
    steps: pd.DataFrame  # measured engine steps
    summary: dict


def run_twin(
    scenario: Path, profile_path: Path, clock: str = "cpu", normalise: bool = True, probe_interval_s: float = 0.1
) -> TwinResult:
    """Run the scenario through the reference engine and the simulator; compare per request.

    ``normalise``: drive the engine with the drift-normalised clock (needs the profile's
    ``calibration.probe_step``; without it the engine runs on the raw clock and says so)."""
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
    cal = load_profile(profile_path).calibration or {}
    probe_cal = cal.get("probe_step", {}).get("measured_s")
    prefill_cal = cal.get("probe_prefill_step", {}).get("measured_s")  # profiles calibrated before it: none
    weights = init_weights(model, sc.seed, np.float32)
    probe = prefill_probe = None
    if normalise and probe_cal:
        probe = SpeedProbe(probe_timer(CLOCKS[clock], weights=weights), probe_cal, probe_interval_s)
        if prefill_cal:
            timer = probe_timer(CLOCKS[clock], weights=weights, step=PREFILL_PROBE)
            prefill_probe = SpeedProbe(timer, prefill_cal, probe_interval_s)
    engine = ReferenceEngine(
        weights,
        sc.policy.kind,
        pool.sched,
        pool.kv_blocks,
        sc.kv_cache.block_tokens,
        sc.kv_cache.watermark,
        seed=sc.seed,
        clock=clock,
        probe=probe,
        prefill_probe=prefill_probe,
    )
    reqs = [
        engine.new_request(i, float(wl.arrival_s[i]), int(wl.prompt_tokens[i]), int(wl.output_tokens[i]))
        for i in range(len(wl))
    ]
    probe_model = Model(init_weights(TWIN_SPEC, 0, np.float32), PagedKVCache(TWIN_SPEC, 16, np.float32))
    with threadpool_limits(BLAS_THREADS, "blas"):
        probe_before = float(np.median([cold_pass_s(probe_model, *PROBE) for _ in range(5)]))
        out = engine.run(reqs)
        probe_after = float(np.median([cold_pass_s(probe_model, *PROBE) for _ in range(5)]))
    measured = requests_frame(out.requests)
    steps = out.steps.assign(predicted_s=[pool.cost.step_time(shape) for shape in out.shapes])
    frame = compare_requests(sim.requests, measured, retimed_frame(measured, out, steps["raw_duration_s"].to_numpy()))
    replay = retimed_frame(measured, out, steps["predicted_s"].to_numpy())
    frame = frame.merge(replay[["id", *METRICS]].rename(columns={m: f"{m}_same_schedule" for m in METRICS}), on="id")
    factors = np.array([f for _, f in out.probes])
    pfactors = np.array([f for _, f in out.prefill_probes])
    summary = {
        "scenario": sc.name,
        "model": model.name,
        "policy": sc.policy.kind,
        "profile": str(profile_path),
        "clock": clock,
        "normalised": probe is not None,
        "probe_interval_s": probe_interval_s if probe else None,
        "requests": len(frame),
        "engine_steps": len(out.steps),
        "simulated_steps": len(sim.steps),
        "measured_makespan_s": float(measured["finish_s"].max()),
        "measured_makespan_raw_s": float(frame["finish_s_meas_raw"].max()),
        "predicted_makespan_s": float(sim.requests["finish_s"].max()),
        # per-request errors against the engine's clock (normalised when a probe ran) and the raw clock
        "error": error_summary(frame),
        "error_raw": error_summary(frame, "_raw"),
        # the cost model pricing the engine's own steps on the engine's own schedule: the error left
        # without schedule divergence (the simulator's schedule differs where step times differ)
        "error_same_schedule": same_schedule_errors(measured, replay),
        # the probe step's speed factor (measured / calibration) over the run; > 1: slower than calibrated
        "speed_factor": {
            "probes": len(factors),
            "min": float(factors.min()) if len(factors) else None,
            "median": float(np.median(factors)) if len(factors) else None,
            "max": float(factors.max()) if len(factors) else None,
            "applied_min": float(steps["speed_factor"].min()) if len(steps) else None,
            "applied_max": float(steps["speed_factor"].max()) if len(steps) else None,
        },
        # the prefill probe's factor (applied to steps that prefill), when the profile has its reference
        "prefill_speed_factor": {
            "probes": len(pfactors),
            "min": float(pfactors.min()) if len(pfactors) else None,
            "median": float(np.median(pfactors)) if len(pfactors) else None,
            "max": float(pfactors.max()) if len(pfactors) else None,
        },
        # the calibration's probe step timed again just before and after the engine run
        "probe_vs_calibration": {
            "before": probe_before / probe_cal if probe_cal else None,
            "after": probe_after / probe_cal if probe_cal else None,
        },
        # the cost model on the engine's own steps (same shapes), apart from any schedule divergence
        "engine_step_error": step_error(steps, "duration_s"),
        "engine_step_error_raw": step_error(steps, "raw_duration_s"),
    }
    return TwinResult(frame, steps, summary)


def retimed_frame(measured: pd.DataFrame, out: EngineOutput, durations_s: np.ndarray) -> pd.DataFrame:
    """The measured frame on the timeline of the engine's own steps taking ``durations_s``
    (``EngineOutput.retimed``): the raw clock, or the cost model pricing the engine's schedule."""
    by_id = {r.id: r for r in out.requests}
    df = measured.copy()
    for col in ("first_token_s", "last_token_s", "finish_s"):
        df[col] = out.retimed([getattr(by_id[i], col) for i in measured["id"]], durations_s)
    gaps = df["generated_tokens"] - 1
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["tbt_mean_s"] = np.where(gaps > 0, (df["last_token_s"] - df["first_token_s"]) / gaps.clip(lower=1), np.nan)
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    return df


def same_schedule_errors(measured: pd.DataFrame, replay: pd.DataFrame) -> dict:
    """Per-request errors when the cost model prices the engine's own steps (no schedule divergence)."""
    frame = measured[["id", *METRICS]].merge(replay[["id", *METRICS]], on="id", suffixes=("_meas", "_pred"))
    for m in METRICS:
        frame[f"{m}_err"] = frame[f"{m}_pred"] / frame[f"{m}_meas"] - 1
    return error_summary(frame)


def step_error(steps: pd.DataFrame, measured_col: str) -> dict:
    err = steps["predicted_s"] / steps[measured_col] - 1
    return {
        "median_abs": float(err.abs().median()),
        "median_signed": float(err.median()),
        "total_predicted_over_measured": float(steps["predicted_s"].sum() / steps[measured_col].sum()),
    }


def compare_requests(predicted: pd.DataFrame, measured: pd.DataFrame, raw: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per request: predicted, measured (engine clock) and, with ``raw``, raw-clock values and errors."""
    cols = ["id", "prompt_tokens", "output_tokens", *METRICS]
    keys = ["id", "prompt_tokens", "output_tokens"]
    df = predicted[cols].merge(measured[cols], on=keys, suffixes=("_pred", "_meas"))
    for m in METRICS:
        df[f"{m}_err"] = df[f"{m}_pred"] / df[f"{m}_meas"] - 1
    if raw is not None:
        r = raw[[*cols, "finish_s"]].rename(columns={c: f"{c}_meas_raw" for c in [*METRICS, "finish_s"]})
        df = df.merge(r, on=keys)
        for m in METRICS:
            df[f"{m}_err_raw"] = df[f"{m}_pred"] / df[f"{m}_meas_raw"] - 1
    return df


def error_summary(frame: pd.DataFrame, suffix: str = "") -> dict:
    """Median and p90 absolute relative error per metric, and the median signed error
    (``suffix="_raw"``: against the raw clock)."""
    out = {}
    for m in METRICS:
        e = frame[f"{m}_err{suffix}"].dropna() if f"{m}_err{suffix}" in frame else pd.Series(dtype=float)
        if len(e):
            out[m] = {
                "median_abs": float(e.abs().median()),
                "p90_abs": float(e.abs().quantile(0.9)),
                "median_signed": float(e.median()),
            }
    return out


# ---- repeated runs --------------------------------------------------------------------------
def run_repeats(
    scenario: Path,
    profile_path: Path,
    policies: list[str],
    repeats: int,
    normalise: bool = True,
    probe_interval_s: float = 0.1,
    progress=None,  # noqa: ANN001 (a print-like callable)
) -> dict[str, list[TwinResult]]:
    """``repeats`` twin runs per policy, the policies alternating run by run (a slow spell of this
    shared machine then hits every policy alike)."""
    import tempfile

    import yaml

    sc = yaml.safe_load(Path(scenario).read_text())
    base = Path(scenario).resolve().parent
    runs: dict[str, list[TwinResult]] = {p: [] for p in policies}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for policy in policies:
            data = {**sc, "policy": {**sc["policy"], "kind": policy}}
            if "hf_config" in data.get("model", {}):  # resolved against the scenario's folder, not tmp
                data["model"] = {**data["model"], "hf_config": str(base / data["model"]["hf_config"])}
            paths[policy] = Path(tmp) / f"{policy}_{Path(scenario).name}"
            paths[policy].write_text(yaml.safe_dump(data))
        for k in range(repeats):
            for policy in policies:
                r = run_twin(paths[policy], profile_path, normalise=normalise, probe_interval_s=probe_interval_s)
                r.summary["scenario_path"] = str(scenario)
                runs[policy].append(r)
                if progress:
                    e, raw = r.summary["error"]["e2e_s"], r.summary["error_raw"]["e2e_s"]
                    progress(
                        f"run {k + 1}/{repeats} {policy}: median |E2E err| {e['median_abs']:.1%} normalised, "
                        f"{raw['median_abs']:.1%} raw"
                    )
    return runs


def median_run(results: list[TwinResult]) -> TwinResult:
    """The run whose median |E2E error| (engine clock) is the median of the runs'."""
    ranked = sorted(results, key=lambda r: r.summary["error"]["e2e_s"]["median_abs"])
    return ranked[(len(ranked) - 1) // 2]


def runs_frame(runs: dict[str, list[TwinResult]]) -> pd.DataFrame:
    """One row per run: median |E2E error| on both clocks, signed errors, speed factors, step errors."""
    rows = []
    for policy, results in runs.items():
        for k, r in enumerate(results, 1):
            s = r.summary
            e, raw, sf = s["error"]["e2e_s"], s["error_raw"]["e2e_s"], s["speed_factor"]
            pv = s["probe_vs_calibration"]
            rows.append(
                {
                    "policy": policy,
                    "run": k,
                    "e2e_median_abs": e["median_abs"],
                    "e2e_median_abs_raw": raw["median_abs"],
                    "e2e_median_signed": e["median_signed"],
                    "e2e_median_signed_raw": raw["median_signed"],
                    "ttft_median_abs": s["error"]["ttft_s"]["median_abs"],
                    "e2e_median_abs_same_schedule": s["error_same_schedule"]["e2e_s"]["median_abs"],
                    "steps_median_signed": s["engine_step_error"]["median_signed"],
                    "steps_median_signed_raw": s["engine_step_error_raw"]["median_signed"],
                    "factor_min": sf["min"],
                    "factor_median": sf["median"],
                    "factor_max": sf["max"],
                    "applied_min": sf["applied_min"],
                    "applied_max": sf["applied_max"],
                    "probe_before": pv["before"],
                    "probe_after": pv["after"],
                }
            )
    return pd.DataFrame(rows)


RUNS_HEADERS = [
    "policy",
    "run",
    "E2E med |err| norm.",
    "E2E med |err| raw",
    "E2E signed norm. / raw",
    "steps signed norm. / raw",
    "E2E med |err| same schedule",
    "applied speed factor min..max (median probe)",
]


def runs_table(frame: pd.DataFrame) -> list[list[object]]:
    pct = lambda v: "-" if v != v or v is None else f"{v:.1%}"  # noqa: E731
    sgn = lambda a, b: f"{a:+.1%} / {b:+.1%}"  # noqa: E731
    rows = []
    for r in frame.itertuples():
        fac = (
            "-" if r.factor_min != r.factor_min else f"{r.applied_min:.2f}..{r.applied_max:.2f} ({r.factor_median:.2f})"
        )
        rows.append(
            [
                r.policy,
                r.run,
                pct(r.e2e_median_abs),
                pct(r.e2e_median_abs_raw),
                sgn(r.e2e_median_signed, r.e2e_median_signed_raw),
                sgn(r.steps_median_signed, r.steps_median_signed_raw),
                pct(r.e2e_median_abs_same_schedule),
                fac,
            ]
        )
    return rows


def runs_verdict(frame: pd.DataFrame, target: float = 0.10) -> list[str]:
    """Per policy: how many runs have median |E2E error| within ``target``, on each clock."""
    lines = []
    for policy, g in frame.groupby("policy", sort=False):
        n = len(g)
        norm, raw = int((g["e2e_median_abs"] <= target).sum()), int((g["e2e_median_abs_raw"] <= target).sum())
        lines.append(
            f"{policy}: {norm}/{n} runs within {target:.0%} normalised (median of runs "
            f"{g['e2e_median_abs'].median():.1%}, worst {g['e2e_median_abs'].max():.1%}); "
            f"{raw}/{n} raw (median {g['e2e_median_abs_raw'].median():.1%}, worst {g['e2e_median_abs_raw'].max():.1%})"
        )
    return lines


def write_runs(path: Path, frame: pd.DataFrame) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, frame.to_csv(index=False))
    return path


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
    if "e2e_s_err_raw" in f:  # the same run on the raw clock (no drift normalisation)
        e = np.sort(f["e2e_s_err_raw"].dropna().to_numpy() * 100)
        ax.plot(e, np.linspace(0, 1, len(e)), "k:", label="e2e, raw clock")
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


def write(out_dir: Path, result: TwinResult | None, steps: pd.DataFrame | None, plot_it: bool = True) -> list[Path]:
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
            "median_abs_error_raw": float(steps["error_raw"].abs().median()) if "error_raw" in steps else None,
            "p90_abs_error": float(steps["error"].abs().quantile(0.9)),
            "cases": len(steps),
        }
        paths.append(out_dir / "twin_steps.csv")
    atomic_write_text(out_dir / "twin_summary.json", json.dumps(summary, indent=2))
    paths.append(out_dir / "twin_summary.json")
    if result is not None and plot_it:
        paths.append(plot(result, steps, out_dir / "twin.png"))
    return paths


__all__ = ["TWIN_SPEC", "TwinResult", "measure_steps", "run_repeats", "run_twin", "write"]
