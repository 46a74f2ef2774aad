"""Fit a device's GEMM efficiency curve, bandwidth fraction, kernel latency and all-reduce link
to measured timings, and write the result as a calibrated hardware profile.

The fitted model is exactly the cost model's: ``t = max(FLOPs / (peak * eff(m, n)),
bytes / (bandwidth * memory_fraction)) + kernel_fixed_s`` with ``eff`` from ``GemmCurve``; the
fit minimises squared *relative* error (so 10 us kernels count as much as 10 ms ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from llmsim.calibration.readers import Measurement
from llmsim.costmodel.gemm import GemmCurve
from llmsim.errors import UserError
from llmsim.hardware import Figure, HardwareProfile
from llmsim.models import DTYPE_BYTES

# Fitted parameters of the GEMM curve: name, lower bound, upper bound.
_GEMM_PARAMS = [
    ("gemm_max_fraction", 0.05, 1.0),
    ("gemm_half_m", 0.0, 4096.0),
    ("memory_fraction", 0.05, 1.0),
    ("kernel_fixed_s", 0.0, 1e-4),
    ("gemm_wave_exponent", 0.0, 1.0),
]


@dataclass
class FitResult:
    params: dict[str, float] = field(default_factory=dict)
    gemm_rows: int = 0
    comm_rows: int = 0
    gemm_mape: float = float("nan")
    comm_mape: float = float("nan")


def _gemm_arrays(hw: HardwareProfile, rows: list[Measurement]) -> dict[str, np.ndarray]:
    m = np.array([r.m for r in rows], float)
    n = np.array([r.n for r in rows], float)
    k = np.array([r.k for r in rows], float)
    a = np.array([DTYPE_BYTES[r.dtype] for r in rows])
    if hw.tpu:  # the same padding CostModel.padded_flops applies: n and k to the MXU edge, not m
        pad = hw.tpu.mxu_dim
        m_, n_, k_ = m, np.ceil(n / pad) * pad, np.ceil(k / pad) * pad
    else:
        m_, n_, k_ = m, n, k
    return {
        "m": m,
        "n": n,
        "flops": 2.0 * m_ * n_ * k_,
        "bytes": a * (m * k + k * n + m * n),  # ops.gemm: activations in, weights, activations out
        "peak": np.array([hw.peak(r.dtype) for r in rows]),
        "seconds": np.array([r.seconds for r in rows]),
    }


def _gemm_predict(
    p: np.ndarray, x: dict[str, np.ndarray], hw: HardwareProfile, units: float, tile: float
) -> np.ndarray:
    curve = GemmCurve(max_fraction=p[0], half_m=p[1], wave_units=units, tile=tile, wave_exponent=p[4])
    compute = x["flops"] / (x["peak"] * curve.efficiency(x["m"], x["n"]))
    memory = x["bytes"] / (hw.bandwidth * p[2])
    return np.maximum(compute, memory) + p[3]


def fit_gemm(hw: HardwareProfile, rows: list[Measurement]) -> tuple[dict[str, float], float]:
    """Least-squares fit of the GEMM curve; returns the parameters and the training MAPE."""
    e, o = hw.efficiency, hw.overheads
    units = e.gemm_wave_units.value if e.gemm_wave_units else 0.0
    tile = e.gemm_tile.value if e.gemm_tile else 128.0
    x = _gemm_arrays(hw, rows)
    p0 = np.array(
        [
            e.gemm_max_fraction.value,
            e.gemm_half_m.value,
            e.memory_fraction.value,
            o.kernel_fixed_s.value if o.kernel_fixed_s else 2e-6,
            e.gemm_wave_exponent.value if (units and e.gemm_wave_exponent) else 0.0,
        ]
    )
    lo = np.array([b[1] for b in _GEMM_PARAMS])
    hi = np.array([b[2] for b in _GEMM_PARAMS])
    if not units:  # no SM count: the wave term is off, pin its exponent at 0
        hi[4] = 1e-12
    p0 = np.clip(p0, lo, hi - 1e-15)

    def residual(p: np.ndarray) -> np.ndarray:
        return _gemm_predict(p, x, hw, units, tile) / x["seconds"] - 1.0

    fit = least_squares(residual, p0, bounds=(lo, hi), x_scale=np.maximum(np.abs(p0), [0.1, 10, 0.1, 1e-6, 0.1]))
    mape = float(np.mean(np.abs(residual(fit.x))))
    return {name: float(v) for (name, _, _), v in zip(_GEMM_PARAMS, fit.x, strict=True)}, mape


def fit_all_reduce(hw: HardwareProfile, rows: list[Measurement]) -> tuple[dict[str, float], float]:
    """Fit the scale-up link latency and the all-reduce bus-bandwidth fraction (ring α–β model)."""
    if hw.scale_up is None:
        files = ", ".join(dict.fromkeys(r.source for r in rows))
        raise UserError(
            f"{files}: all-reduce rows, but hardware {hw.name!r} has no scale_up link to fit them to; "
            "leave them out or start from a profile with a scale_up link"
        )
    p = np.array([r.ranks for r in rows], float)
    b = np.array([r.bytes for r in rows])
    t = np.array([r.seconds for r in rows])
    bw = hw.scale_up.bandwidth_bytes_per_s.value
    hops = 2 * (p - 1)

    def residual(q: np.ndarray) -> np.ndarray:
        return (hops * q[0] + (hops / p) * b / (bw * q[1])) / t - 1.0

    q0 = [hw.scale_up.latency_s.value, hw.efficiency.allreduce_bus_fraction.value]
    fit = least_squares(residual, q0, bounds=([0.0, 0.05], [1e-3, 1.0]), x_scale=[1e-6, 0.1])
    mape = float(np.mean(np.abs(residual(fit.x))))
    return {"scale_up_latency_s": float(fit.x[0]), "allreduce_bus_fraction": float(fit.x[1])}, mape


def calibrate(hw: HardwareProfile, rows: list[Measurement], files: list[str]) -> tuple[HardwareProfile, FitResult]:
    """Fit what the rows measure (GEMMs and/or single-node all-reduces) and return the new profile."""
    gemms = [r for r in rows if r.kind == "gemm"]
    comms = [r for r in rows if r.kind == "comm" and r.op == "all_reduce"]
    if not gemms and not comms:
        raise UserError(
            f"{', '.join(files)}: no GEMM or single-node all-reduce rows (multi-node all-reduces go over "
            "the network, not the scale_up link calibrate fits): nothing to fit"
        )
    res = FitResult(gemm_rows=len(gemms), comm_rows=len(comms))
    if gemms:
        params, res.gemm_mape = fit_gemm(hw, gemms)
        res.params.update(params)
    if comms:
        params, res.comm_mape = fit_all_reduce(hw, comms)
        res.params.update(params)
    return apply_fit(hw, res, files), res


def apply_fit(hw: HardwareProfile, res: FitResult, files: list[str]) -> HardwareProfile:
    data = hw.model_dump(exclude_none=True)
    names = ", ".join("/".join(Path(f).parts[-2:]) for f in files)
    where = f"fitted by llmsim calibrate on {names}"
    p = res.params
    if "gemm_max_fraction" in p:
        note = f"{where} ({res.gemm_rows} GEMM rows, MAPE {res.gemm_mape:.1%})"
        eff = data["efficiency"]
        for key in ("gemm_max_fraction", "gemm_half_m", "memory_fraction", "gemm_wave_exponent"):
            if key == "gemm_wave_exponent" and "gemm_wave_units" not in eff:
                continue
            eff[key] = {"value": round(p[key], 6), "source": note}
        data["overheads"]["kernel_fixed_s"] = {"value": float(f"{p['kernel_fixed_s']:.4g}"), "source": note}
    if "allreduce_bus_fraction" in p:
        note = f"{where} ({res.comm_rows} single-node all-reduce rows, MAPE {res.comm_mape:.1%})"
        data["efficiency"]["allreduce_bus_fraction"] = {"value": round(p["allreduce_bus_fraction"], 6), "source": note}
        data["scale_up"]["latency_s"] = {"value": float(f"{p['scale_up_latency_s']:.4g}"), "source": note}
    data["calibration"] = {
        "date": date.today().isoformat(),
        "base_profile": hw.name,
        "files": [str(f) for f in files],
        "gemm_rows": res.gemm_rows,
        "gemm_fit_mape": round(res.gemm_mape, 4) if res.gemm_rows else None,
        "all_reduce_rows": res.comm_rows,
        "all_reduce_fit_mape": round(res.comm_mape, 4) if res.comm_rows else None,
        "method": "least squares on relative error of the roofline GEMM curve and ring alpha-beta all-reduce",
    }
    data["description"] = (hw.description + " [calibrated]").strip()
    return HardwareProfile.model_validate(data)


__all__ = ["FitResult", "Figure", "apply_fit", "calibrate", "fit_all_reduce", "fit_gemm"]
