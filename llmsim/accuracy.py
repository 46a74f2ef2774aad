"""Predicted vs measured serving runs, scored as the field scores them.

Both sides are per-request tables with ``id``, ``arrival_s``, ``first_token_s``, ``finish_s``,
``prompt_tokens`` and ``output_tokens`` (seconds on one clock per side). Their figures are
``vllm bench serve``'s (llmsim/metrics.py: ``mean_ttft_ms``, ``p99_e2el_ms``, ...), so both
sides carry the same keys. ITL is its mean alone here (token-weighted: every gap of every
request), as a request table has no per-token times: vLLM's mean over streamed chunks where a
chunk is one token, shorter under speculative decoding (a verify step's tokens are one chunk). Errors are signed relative errors of the
prediction, ``(predicted − measured) / measured``, and the per-request E2E error (median and
mean of |error|, i.e. MAPE) over requests matched by id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from llmsim.metrics import bench_metrics, dist_ms, latencies, mean_gap_s

if TYPE_CHECKING:
    from llmsim.hardware import HardwareProfile

PERCENTILES = (90.0, 99.0)


def request_metrics(df: pd.DataFrame) -> pd.DataFrame:
    """Per request: ttft_ms, tpot_ms, e2el_ms and its gaps (finished requests with a first token)."""
    d = df[np.isfinite(df["first_token_s"]) & np.isfinite(df["finish_s"])]
    lat = latencies(d)
    return pd.DataFrame(
        {
            "id": d["id"].astype(str).to_numpy(),
            "ttft_ms": lat["ttft_s"].to_numpy() * 1e3,
            "e2el_ms": lat["e2e_s"].to_numpy() * 1e3,
            "tpot_ms": lat["tpot_s"].to_numpy() * 1e3,
            "gaps": np.maximum(d["output_tokens"].to_numpy() - 1, 0),
        }
    )


def summary(df: pd.DataFrame) -> dict[str, float]:
    """The vLLM-bench figures of a request table (completed = a first token and a finish)."""
    done = np.isfinite(df["first_token_s"]) & np.isfinite(df["finish_s"])
    lat = latencies(df)
    frame = pd.DataFrame(
        {
            "status": np.where(done, "finished", "failed"),
            "arrival_s": df["arrival_s"],
            "first_token_s": df["first_token_s"],
            "finish_s": df["finish_s"],
            "prompt_tokens": df.get("prompt_tokens", 0),
            "generated_tokens": df["output_tokens"],
            **{c: lat[c] for c in lat.columns},
        }
    )
    itl = dist_ms("itl", np.empty(0), PERCENTILES)  # the keys, null: no per-token times here
    mean_s = mean_gap_s((df["finish_s"] - df["first_token_s"])[done], df["output_tokens"][done])
    itl["mean_itl_ms"] = None if mean_s is None else mean_s * 1e3
    return bench_metrics(frame, None, itl, PERCENTILES)


def compare(measured: pd.DataFrame, predicted: pd.DataFrame) -> dict[str, float]:
    """Signed relative error of every numeric figure (``err_<key>``), both sides' figures
    (``real_<key>``, ``sim_<key>``), and per-request E2E and TTFT errors over requests matched by id."""
    real, sim = summary(measured), summary(predicted)
    out: dict[str, float] = {}
    for k, v in real.items():
        if v is None or sim.get(k) is None:
            continue
        out[f"real_{k}"] = v
        out[f"sim_{k}"] = sim[k]
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
RECORDED = ("mean_ttft_ms", "p99_ttft_ms", "mean_e2el_ms", "p99_e2el_ms", "mean_itl_ms")


def error_spread(scores: list[dict]) -> dict:
    """Per figure: median and largest |error| over runs, and how many runs."""
    out: dict = {}
    for k in RECORDED:
        errs = [abs(s[f"err_{k}"]) for s in scores if np.isfinite(s.get(f"err_{k}", np.nan))]
        if errs:
            out[k] = {"median_abs_err": float(np.median(errs)), "max_abs_err": float(max(errs)), "runs": len(errs)}
    return out


DEFAULT_VALIDATED = "vllm-v1"  # the engine a record validates when it does not name one


def record(kind: str, scores: list[dict], source: str, path: Path = RECORD, engine: str = DEFAULT_VALIDATED) -> Path:
    """Store the errors of one set of validation runs (``kind``: vllm-cpu, vllm-gpu, ...) of the
    preset ``engine`` in ``path``: their spread, and each run's errors with what kind of run it was
    (each score's ``devices``, its hardware families, and ``moe``, whether the model routes to
    experts: a summary's ``accuracy_like``), so that a run is told the errors of the runs like it
    (``validated``). A score without them is refused: an untagged run would match no run."""
    untagged = [s.get("run") for s in scores if not s.get("devices") or not isinstance(s.get("moe"), bool)]
    if untagged:
        raise ValueError(f"{kind}: runs {untagged} carry no devices / moe tags (a summary's accuracy_like)")
    data = json.loads(path.read_text()) if path.exists() else {}
    per_run = [
        {
            "run": s.get("run"),
            "devices": sorted(s["devices"]),
            "moe": s["moe"],
            "errors": {k: s[f"err_{k}"] for k in RECORDED if np.isfinite(s.get(f"err_{k}", np.nan))},
        }
        for s in scores
    ]
    rec = {"source": source, "runs": [s.get("run") for s in scores], "errors": error_spread(scores), "per_run": per_run}
    if engine != DEFAULT_VALIDATED:
        rec["engine"] = engine
    data[kind] = rec
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def _records(path: Path = RECORD) -> dict[str, dict]:
    """Every stored set of validation runs by kind ({} where the file is missing or unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and "errors" in v}


def accuracy_family(hw: HardwareProfile) -> str:
    """The kind of hardware a validation run is tagged with: the profile's family ("gpu", "cpu",
    "tpu"), a GPU not NVIDIA's named by its vendor ("amd-gpu"): every GPU run replayed so far is on
    NVIDIA hardware and its software stack (CUDA kernels, CUDA graphs), which do not vouch for ROCm's."""
    if hw.family == "gpu" and hw.vendor.strip().lower() != "nvidia":
        return f"{hw.vendor.strip().lower()}-gpu"
    return hw.family


def runs_like(families: set[str], moe: bool) -> dict:
    """The kind of run a prediction interval is taken from: the hardware families of its pools (or
    a plan's candidates) and whether the model routes to experts (a summary's ``accuracy_like``)."""
    return {"devices": sorted(families), "moe": moe}


def _like(rec: dict, devices: list[str] | None, moe: bool | None) -> dict | None:
    """``rec`` narrowed to its runs on some of the hardware families ``devices`` and of MoE-ness
    ``moe`` (None: any), its spread recomputed over them and the families they ran on
    (``devices``); None where none is (or the record does not tag its runs)."""
    out = {k: v for k, v in rec.items() if k != "per_run"}
    if devices is None and moe is None:
        return out
    runs = [
        r
        for r in rec.get("per_run", [])
        if isinstance(r.get("devices"), list)  # (an untagged run, from an older file, matches nothing)
        and (devices is None or set(r["devices"]) <= set(devices))
        and (moe is None or r.get("moe") == moe)
    ]
    if not runs:
        return None
    scores = [{f"err_{k}": v for k, v in r["errors"].items()} for r in runs]
    found = sorted({d for r in runs for d in r["devices"]})
    return out | {"runs": [r["run"] for r in runs], "errors": error_spread(scores), "devices": found}


def validated(
    engine: str, devices: list[str] | None = None, moe: bool | None = None, path: Path = RECORD
) -> dict | None:
    """The recorded errors that qualify a run under the preset ``engine``, narrowed to the runs
    like it: on some of the hardware families ``devices`` ("gpu", "cpu", "tpu") and of a model with
    (``moe`` True) or without experts; None for either: any. None where nothing validated the engine
    (the ideal engine, a preset with changed terms, a calibrated profile: see its fit report); {}
    where runs validated it but none like this one (docs/validation.md, "Prediction intervals")."""
    mine = {k: v for k, v in _records(path).items() if v.get("engine", DEFAULT_VALIDATED) == engine}
    if not mine:
        return None
    narrowed = {k: _like(v, devices, moe) for k, v in mine.items()}
    return {k: v for k, v in narrowed.items() if v is not None}


def validated_engines(path: Path = RECORD) -> list[str]:
    """The presets some stored set of real runs validates."""
    return sorted({v.get("engine", DEFAULT_VALIDATED) for v in _records(path).values()})


def like_text(like: dict | None) -> str:
    """ "GPU runs of dense models" for ``{"devices": ["gpu"], "moe": False}`` (an absent key: any)."""
    like = like or {}
    devices, moe = like.get("devices"), like.get("moe")
    where = f"{' and '.join(d.upper() for d in devices)} runs" if devices else "runs"
    return where if moe is None else f"{where} of {'mixture-of-experts' if moe else 'dense'} models"


def interval_line(v: dict | None, like: dict | None = None) -> str:
    """Lines for a run's printout: how far the validation says to trust its figures (``v`` from
    ``validated``, narrowed to ``like``: the run's hardware families and moe)."""
    if v is None:
        presets = ", ".join(validated_engines()) or "none"
        return f"not validated for this engine (validated presets: {presets}; docs/validation.md)"
    if not v:
        return f"not validated on {like_text(like)}: no real run like this one was replayed (docs/validation.md)"
    engines = {rec.get("engine", DEFAULT_VALIDATED) for rec in v.values()}
    against = "real vLLM" if engines == {DEFAULT_VALIDATED} else f"real runs of {', '.join(sorted(engines))}"
    narrowed = like and (like.get("devices") or like.get("moe") is not None)
    on = f" on {like_text(like)}" if narrowed else ""
    lines = [f"validated against {against}{on}: median |error| of the run means (worst), docs/validation.md"]
    for kind, rec in sorted(v.items()):
        e = rec["errors"]
        figs = ", ".join(
            f"{name} ±{e[k]['median_abs_err']:.0%} ({e[k]['max_abs_err']:.0%})"
            for k, name in (("mean_ttft_ms", "TTFT"), ("mean_e2el_ms", "E2E"), ("mean_itl_ms", "ITL"))
            if k in e
        )
        lines.append(f"{kind}, {len(rec['runs'])} runs: {figs}")
    # a family of the run's that no matched run was on (a GPU pool and a TPU pool: the TPU's)
    seen = {d for rec in v.values() for d in rec.get("devices", [])}
    unseen = [d.upper() for d in (like or {}).get("devices") or [] if seen and d not in seen]
    if unseen:
        lines.append(f"(no run on {' or '.join(unseen)} hardware was replayed: its pools are not validated)")
    return "\n         ".join(lines)
