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

Next to this module: ``twin_compare`` (the per-request comparison and its error summaries),
``twin_runs`` (repeated runs, policies alternating) and ``twin_report`` (the files and plot). The
single-step grid is the calibration's check (``llmsim.calibration.stepgrid``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from llmsim.build import PoolSpec, build_model, build_pools, build_workload
from llmsim.errors import UserError
from llmsim.hardware import load_profile
from llmsim.reference.engine import CLOCKS, EngineOutput, ReferenceEngine, SpeedProbe
from llmsim.reference.model import Model
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.timing import BLAS_THREADS, PREFILL_PROBE, PROBE, TWIN_SPEC, cold_pass_s, probe_timer
from llmsim.reference.twin_compare import (
    METRICS,
    compare_requests,
    error_summary,
    retimed_frame,
    same_schedule_errors,
    step_error,
)
from llmsim.reference.weights import Weights, init_weights
from llmsim.request import Request
from llmsim.results import requests_frame
from llmsim.scenario import Scenario, load_scenario


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

    sc = twin_scenario(scenario, profile_path)
    model = build_model(sc)
    pool = build_pools(sc, model)[0]
    sim = llmsim.api.run(sc)
    wl = build_workload(sc)
    cal = load_profile(profile_path).calibration or {}
    probe_cal = cal.get("probe_step", {}).get("measured_s")
    weights = init_weights(model, sc.seed, np.float32)
    probe, prefill_probe = speed_probes(cal, clock, weights, probe_interval_s) if normalise else (None, None)
    engine = twin_engine(sc, pool, weights, clock, probe, prefill_probe)
    reqs = [
        engine.new_request(i, float(wl.arrival_s[i]), int(wl.prompt_tokens[i]), int(wl.output_tokens[i]))
        for i in range(len(wl))
    ]
    out, probe_before, probe_after = _run_between_probes(engine, reqs)
    measured = requests_frame(out.requests)
    steps = out.steps.assign(predicted_s=[pool.cost.step_time(shape) for shape in out.shapes])
    frame = compare_requests(sim.requests, measured, retimed_frame(measured, out, steps["raw_duration_s"].to_numpy()))
    replay = retimed_frame(measured, out, steps["predicted_s"].to_numpy())
    frame = frame.merge(replay[["id", *METRICS]].rename(columns={m: f"{m}_same_schedule" for m in METRICS}), on="id")
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
            **factor_stats(out.probes),
            "applied_min": float(steps["speed_factor"].min()) if len(steps) else None,
            "applied_max": float(steps["speed_factor"].max()) if len(steps) else None,
        },
        # the prefill probe's factor (applied to steps that prefill), when the profile has its reference
        "prefill_speed_factor": factor_stats(out.prefill_probes),
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


def twin_engine(
    sc: Scenario,
    pool: PoolSpec,
    weights: Weights,
    clock: str | Callable[[], float] = "cpu",
    probe: SpeedProbe | None = None,
    prefill_probe: SpeedProbe | None = None,
) -> ReferenceEngine:
    """The reference engine for the scenario's (one) pool, its scheduler built as the simulated
    replica builds its own: the same config, KV blocks and step-time predictor."""
    return ReferenceEngine(
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
        predict_s=pool.cost.step_time,  # chunk_budget: dynamic asks it, as in the simulator
    )


def twin_scenario(scenario: Path, profile_path: Path) -> Scenario:
    """The scenario on the local-cpu profile, if the twin can run it (one replica, tp = pp = 1,
    a policy the reference engine runs). The NumPy engine is the engine here, with its own measured
    per-step overhead in the profile: the simulator prices it as the ideal engine does."""
    sc = load_scenario(scenario, {"hardware": str(Path(profile_path).resolve()), "engine": "ideal"})
    if sc.policy.kind not in ("traditional", "chunked"):
        raise UserError(f"{scenario}: policy.kind: the twin supports traditional and chunked, not {sc.policy.kind!r}")
    if sc.cluster.replicas != 1 or sc.cluster.tp != 1 or sc.cluster.pp != 1:
        raise UserError(f"{scenario}: cluster: the twin runs one replica with tp=1, pp=1")
    return sc


def speed_probes(
    cal: dict, clock: str, weights: Weights, interval_s: float
) -> tuple[SpeedProbe | None, SpeedProbe | None]:
    """The engine's drift probes (decode, prefill) against the profile's references; none without
    ``calibration.probe_step``, no prefill probe for profiles calibrated before it had one."""
    probe_cal = cal.get("probe_step", {}).get("measured_s")
    prefill_cal = cal.get("probe_prefill_step", {}).get("measured_s")
    if not probe_cal:
        return None, None
    probe = SpeedProbe(probe_timer(CLOCKS[clock], weights=weights), probe_cal, interval_s)
    if not prefill_cal:
        return probe, None
    timer = probe_timer(CLOCKS[clock], weights=weights, step=PREFILL_PROBE)
    return probe, SpeedProbe(timer, prefill_cal, interval_s)


def _run_between_probes(engine: ReferenceEngine, reqs: list[Request]) -> tuple[EngineOutput, float, float]:
    """The engine's run, with the calibration's probe step timed (median of 5 cold passes of a
    separate model) just before and just after it."""
    probe_model = Model(init_weights(TWIN_SPEC, 0, np.float32), PagedKVCache(TWIN_SPEC, 16, np.float32))
    with threadpool_limits(BLAS_THREADS, "blas"):
        before = float(np.median([cold_pass_s(probe_model, *PROBE) for _ in range(5)]))
        out = engine.run(reqs)
        after = float(np.median([cold_pass_s(probe_model, *PROBE) for _ in range(5)]))
    return out, before, after


def factor_stats(samples: list[tuple[float, float]]) -> dict:
    """How many probe readings a run took and their min, median and max factor (None without any)."""
    factors = np.array([f for _, f in samples])
    return {
        "probes": len(factors),
        "min": float(factors.min()) if len(factors) else None,
        "median": float(np.median(factors)) if len(factors) else None,
        "max": float(factors.max()) if len(factors) else None,
    }
