"""The twin's comparisons: per request, predicted (the simulator) vs measured (the reference
engine) TTFT, TBT and E2E with their relative errors, and the summaries of those errors.

An error is ``predicted / measured - 1`` (> 0: the simulator predicts too long). ``retimed_frame``
puts the engine's requests on another timeline of its own steps (the raw clock, or the cost
model pricing the engine's schedule), which separates step-time error from schedule divergence.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmsim.reference.engine import EngineOutput

METRICS = ["ttft_s", "tbt_mean_s", "e2e_s"]


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
