"""GEMM efficiency as a function of shape: the one curve that calibration fits.

A dense ``[m, k] @ [k, n]`` kernel reaches ``max_fraction`` of the tensor-core peak only when
it has many rows and fills every SM. Two explainable losses:

* **row under-fill** ``m / (m + half_m)``: a thin activation matrix leaves the tensor cores
  waiting on operand loads (half the best rate at ``m = half_m``);
* **wave quantisation** ``(tiles / (waves * units)) ** wave_exponent``: the output is cut into
  ``tile x tile`` blocks spread over ``units`` SMs; the last wave is partly empty. cuBLAS picks
  among several tile shapes to soften this, so the measured loss is a power < 1 of the ideal one.

Works on floats and on NumPy arrays alike (the fitter evaluates thousands of shapes at once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmsim.hardware import HardwareProfile

DEFAULT_TILE = 128  # CUTLASS/cuBLAS default 128x128 output tile on Ampere/Hopper


@dataclass(frozen=True)
class GemmCurve:
    max_fraction: float
    half_m: float
    wave_units: float = 0.0  # 0 = no wave term
    tile: float = DEFAULT_TILE
    wave_exponent: float = 0.0

    @classmethod
    def from_profile(cls, hw: HardwareProfile, dtype: str = "bf16") -> GemmCurve:
        """The curve of GEMMs computing in ``dtype`` (its own best-shape fraction, same shape terms)."""
        e = hw.efficiency
        return cls(
            max_fraction=e.gemm_fraction(dtype),
            half_m=e.gemm_half_m.value,
            wave_units=e.gemm_wave_units.value if e.gemm_wave_units else 0.0,
            tile=e.gemm_tile.value if e.gemm_tile else DEFAULT_TILE,
            wave_exponent=e.gemm_wave_exponent.value if e.gemm_wave_exponent else 0.0,
        )

    def efficiency(self, m, n, weight_scale: float = 1.0):  # noqa: ANN001, ANN201 - float or ndarray in, same out
        """Fraction of dense peak reached by a GEMM with ``m`` rows and ``n`` output columns.

        ``weight_scale`` = weight bytes / activation bytes per element: the small-m loss is the
        time to stream the weight operand into the tensor cores, so 4-bit weights (scale 0.25)
        shrink it 4x (Marlin-style kernels stay memory-bound up to m ~ 16-32).

        With a wave term, a GEMM is never priced faster than the one with the whole row tiles below
        it: one row past a tile boundary adds a row of tiles, which the wave term reads as the launch
        filling more SMs while the FLOPs grow by one row (129 rows read up to 9 % under 128's time).
        The kernel computes the padded tile row in the time it takes, so the time stays at least
        that of ``m_whole`` rows: efficiency at most ``eff(m_whole) * m / m_whole``."""
        n_tiles = np.ceil(n / self.tile)
        eff = self.efficiency_at(m, np.ceil(m / self.tile) * n_tiles, weight_scale)
        if not (self.wave_units and self.wave_exponent):
            return eff
        m_whole = np.floor(m / self.tile) * self.tile  # rows in whole tiles (0 under one tile)
        rows = np.maximum(m_whole, 1.0)
        floor = self.efficiency_at(rows, (rows / self.tile) * n_tiles, weight_scale) * m / rows
        return np.where(m_whole > 0, np.minimum(eff, floor), eff)

    def efficiency_at(self, m, tiles, weight_scale: float = 1.0):  # noqa: ANN001, ANN201 - float or ndarray
        """``efficiency`` with the launch's ``tiles`` (of ``tile`` x ``tile``) given: a grouped GEMM
        counts them as the work its groups hold, a fraction where its rows per group are a mean."""
        eff = self.max_fraction * m / (m + self.half_m * weight_scale)
        if self.wave_units and self.wave_exponent:
            waves = np.ceil(tiles / self.wave_units)
            eff = eff * (tiles / (waves * self.wave_units)) ** self.wave_exponent
        return eff
