"""The twin's files: per-request and engine-step tables, the summary JSON and the plot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.errors import atomic_write_text
from llmsim.reference.twin import TwinResult
from llmsim.reference.twin_compare import METRICS


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
