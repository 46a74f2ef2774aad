"""Repeated twin runs: several runs per policy, the policies alternating, and the table, verdict
and CSV of their errors (``llmsim twin --repeats``)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import yaml

from llmsim.errors import atomic_write_text
from llmsim.reference.twin import TwinResult, run_twin


def run_repeats(
    scenario: Path,
    profile_path: Path,
    policies: list[str],
    repeats: int,
    normalise: bool = True,
    probe_interval_s: float = 0.1,
    progress: Callable[[str], object] | None = None,
) -> dict[str, list[TwinResult]]:
    """``repeats`` twin runs per policy, the policies alternating run by run (a slow spell of this
    shared machine then hits every policy alike)."""
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
        known = [r.factor_min, r.applied_min, r.applied_max, r.factor_median]
        # --raw-clock applies no factor: its applied_* are None
        fac = (
            "-"
            if any(v is None or v != v for v in known)
            else f"{r.applied_min:.2f}..{r.applied_max:.2f} ({r.factor_median:.2f})"
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
