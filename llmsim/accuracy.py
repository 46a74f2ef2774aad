"""Predicted vs measured serving runs, scored as the field scores them.

Both sides are per-request tables with ``id``, ``arrival_s``, ``first_token_s``, ``finish_s``
and ``output_tokens`` (seconds on one clock per side). Metrics follow vLLM's benchmark
(``vllm bench serve``): TTFT, TPOT (per request, (E2E − TTFT) / (output − 1)), ITL (mean gap
between successive tokens over all tokens) and E2EL, in ms; percentiles over requests. Errors
are signed relative errors of the prediction, ``(predicted − measured) / measured``, and the
per-request E2E error (median and mean of |error|, i.e. MAPE) over requests matched by id.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "p50", "p90", "p99")


def request_metrics(df: pd.DataFrame) -> pd.DataFrame:
    """Per request: ttft_ms, tpot_ms, e2el_ms (finished requests with a first token)."""
    d = df[np.isfinite(df["first_token_s"]) & np.isfinite(df["finish_s"])]
    out = pd.DataFrame({"id": d["id"].astype(str).to_numpy()})
    ttft = (d["first_token_s"] - d["arrival_s"]).to_numpy() * 1e3
    e2e = (d["finish_s"] - d["arrival_s"]).to_numpy() * 1e3
    gaps = d["output_tokens"].to_numpy() - 1
    out["ttft_ms"] = ttft
    out["e2el_ms"] = e2e
    out["tpot_ms"] = np.where(gaps > 0, (e2e - ttft) / np.maximum(gaps, 1), np.nan)
    out["gaps"] = np.maximum(gaps, 0)
    return out


def summary(df: pd.DataFrame) -> dict[str, float]:
    """``{metric}_{stat}`` in ms for TTFT, TPOT, E2EL; ``itl_mean`` token-weighted."""
    m = request_metrics(df)
    out: dict[str, float] = {}
    for k in ("ttft", "tpot", "e2el"):
        col = m[f"{k}_ms"].dropna().to_numpy()
        out[f"{k}_mean"] = float(col.mean()) if len(col) else float("nan")
        for q in (50, 90, 99):
            out[f"{k}_p{q}"] = float(np.percentile(col, q)) if len(col) else float("nan")
    g = m["gaps"].sum()
    out["itl_mean"] = float(((m["e2el_ms"] - m["ttft_ms"]) * (m["gaps"] > 0)).sum() / g) if g else float("nan")
    out["requests"] = float(len(m))
    return out


def compare(measured: pd.DataFrame, predicted: pd.DataFrame) -> dict[str, float]:
    """Signed relative error of every summary figure (``err_<metric>_<stat>``), both sides'
    figures (``real_...``, ``sim_...``), and per-request E2E errors over requests matched by id."""
    real, sim = summary(measured), summary(predicted)
    out: dict[str, float] = {}
    for k, v in real.items():
        out[f"real_{k}"] = v
        out[f"sim_{k}"] = sim[k]
        if k != "requests":
            out[f"err_{k}"] = (sim[k] - v) / v if v else float("nan")
    a, b = request_metrics(measured), request_metrics(predicted)
    both = a.merge(b, on="id", suffixes=("_real", "_sim"))
    rel = (both["e2el_ms_sim"] - both["e2el_ms_real"]) / both["e2el_ms_real"]
    out["e2el_request_median_abs_err"] = float(rel.abs().median()) if len(rel) else float("nan")
    out["e2el_request_mape"] = float(rel.abs().mean()) if len(rel) else float("nan")
    rel_t = (both["ttft_ms_sim"] - both["ttft_ms_real"]) / both["ttft_ms_real"]
    out["ttft_request_median_abs_err"] = float(rel_t.abs().median()) if len(rel_t) else float("nan")
    out["matched"] = float(len(both))
    return out


# ---- what the validation measured, as prediction intervals on a run's figures --------------------
RECORD = Path(__file__).resolve().parent.parent / "data" / "validation" / "accuracy.json"
RECORDED = ("ttft_mean", "ttft_p99", "e2el_mean", "e2el_p99", "itl_mean")


def error_spread(scores: list[dict]) -> dict:
    """Per figure: median and largest |error| over runs, and how many runs."""
    out: dict = {}
    for k in RECORDED:
        errs = [abs(s[f"err_{k}"]) for s in scores if np.isfinite(s.get(f"err_{k}", np.nan))]
        if errs:
            out[k] = {"median_abs_err": float(np.median(errs)), "max_abs_err": float(max(errs)), "runs": len(errs)}
    return out


def record(kind: str, scores: list[dict], source: str, path: Path = RECORD) -> Path:
    """Store the errors of one set of validation runs (``kind``: vllm-cpu, vllm-gpu) in ``path``."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data[kind] = {"source": source, "runs": [s.get("run") for s in scores], "errors": error_spread(scores)}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


VALIDATED_ENGINES = ("vllm-v1",)  # the presets the recorded runs validate (a fitted profile has its own report)


def validated(engine: str, path: Path = RECORD) -> dict | None:
    """The recorded errors that qualify a run under ``engine``, or None where nothing validated it
    (the ideal engine, a preset with changed terms, a calibrated profile: see its fit report)."""
    if engine not in VALIDATED_ENGINES or not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return {k: v for k, v in data.items() if isinstance(v, dict) and "errors" in v} or None


def interval_line(v: dict | None) -> str:
    """Lines for a run's printout: how far the validation says to trust its figures."""
    if not v:
        return "not validated for this engine (only the vllm-v1 preset is; docs/validation.md)"
    lines = ["validated against real vLLM: median |error| of the run means (worst), docs/validation.md"]
    for kind, rec in sorted(v.items()):
        e = rec["errors"]
        figs = ", ".join(
            f"{name} ±{e[k]['median_abs_err']:.0%} ({e[k]['max_abs_err']:.0%})"
            for k, name in (("ttft_mean", "TTFT"), ("e2el_mean", "E2E"), ("itl_mean", "ITL"))
            if k in e
        )
        lines.append(f"{kind}, {len(rec['runs'])} runs: {figs}")
    return "\n         ".join(lines)
