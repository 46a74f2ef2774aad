"""Sensitivity: the winners re-run with every efficiency of their hardware profile scaled by 1 ± a fraction.

The scaled profiles are temporary files on this machine, so these few runs stay on local processes
even when the plan itself runs on Dask."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from llmsim.planning.base import Base
from llmsim.planning.space import Point
from llmsim.results import slos_held
from llmsim.sweep import run_points

EFFICIENCIES = (
    "gemm_max_fraction",
    "memory_fraction",
    "attention_fraction",
    "elementwise_memory_fraction",
    "moe_memory_fraction",  # (the optional ones are scaled where a profile sets them)
    "attention_memory_fraction",
)


def scaled_profile(name: str, base_dir: str, factor: float, out_dir: Path) -> str:
    """Write a copy of a hardware profile with every efficiency fraction scaled (capped at 1)."""
    from llmsim.hardware import dump_profile, load_profile

    hw = load_profile(name, Path(base_dir))
    update = {}
    for key in EFFICIENCIES:
        fig = getattr(hw.efficiency, key)
        if fig is not None:
            value = min(1.0, fig.value * factor)
            update[key] = fig.model_copy(update={"value": value, "source": f"{fig.source} (x{factor:.2f})"})
    if hw.efficiency.gemm_dtype_fraction:  # the narrow dtypes' own GEMM fractions move with the rest
        update["gemm_dtype_fraction"] = {
            d: f.model_copy(update={"value": min(1.0, f.value * factor), "source": f"{f.source} (x{factor:.2f})"})
            for d, f in hw.efficiency.gemm_dtype_fraction.items()
        }
    hw2 = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update=update)})
    path = out_dir / f"{hw.name}_eff{factor:.2f}.yaml"
    dump_profile(hw2, path)
    return str(path)


def sensitivity(
    base: Base,
    winners: pd.DataFrame,
    points: list[Point],
    rate: dict,
    frac: float,
    workers: int | None,
    progress: bool,
) -> pd.DataFrame:
    """Re-run each winner with every efficiency at (1 - frac) and (1 + frac); ``points[k]`` is ``winners`` row k."""
    with tempfile.TemporaryDirectory(prefix="llmsim_sens_") as tmp:
        runs = [
            (w, factor, _scaled_overrides(base, p, rate, factor, Path(tmp)))
            for (_, w), p in zip(winners.iterrows(), points, strict=True)
            for factor in (1 - frac, 1 + frac)
        ]
        results = run_points(
            base.data, base.base_dir, base.origin, [ov for *_, ov in runs], workers, None, progress, "sensitivity"
        )
    return pd.DataFrame(
        [
            {
                "config": w["config"],
                "efficiency_factor": factor,
                "slo_attainment_nominal": w["slo_attainment"],
                "slo_attainment": r["slo_attainment"],
                "request_goodput": r["request_goodput"],
                "p99_ttft_ms": r["p99_ttft_ms"],
                "p99_tbt_max_ms": r["p99_tbt_max_ms"],
                "verdict": r["verdict"],
                "meets_slos": slos_held(r["slo_met"], r["verdict"], r.get("keeps_up")),
            }
            for (w, factor, _), r in zip(runs, results, strict=True)
        ]
    )


def _scaled_overrides(base: Base, p: Point, rate: dict, factor: float, out_dir: Path) -> dict[str, object]:
    """``p`` at ``rate`` on its hardware with every efficiency scaled by ``factor`` (every pool too)."""
    hw_path = scaled_profile(p.candidate.hardware, base.base_dir, factor, out_dir)
    ov = {**p.overrides(), **rate, "hardware": hw_path}
    for pool in ("cluster.prefill_pool", "cluster.decode_pool"):
        if ov.get(pool):  # (a colocated candidate's pools are None)
            ov[pool] = {**ov[pool], "hardware": hw_path}  # type: ignore[dict-item]
    return ov
