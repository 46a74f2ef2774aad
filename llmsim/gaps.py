"""Inter-token gaps (TBT) of every token of a run, in a log-binned histogram of O(1) memory.

Its own module so that it is compiled with the simulator (llmsim/native.py): the step loop adds
to it for every step.
"""

from __future__ import annotations

import math

import numpy as np


class GapHistogram:
    """Log-binned histogram of inter-token gaps (TBT) across every token, O(1) memory.

    Bins are 0.5% wide in log space from 1 µs to 1000 s, so percentiles are exact to 0.5%.
    """

    LO = 1e-6  # s
    HI = 1e3  # s
    BINS = 4200

    def __init__(self) -> None:
        self.counts = np.zeros(self.BINS + 2, dtype=np.int64)
        self._scale = self.BINS / math.log(self.HI / self.LO)
        # gaps are buffered and binned in bulk with numpy: a list append per token is cheap
        self._gaps: list[float] = []
        self._weighted: list[tuple[float, int]] = []
        self._many: list[float] = []  # add_ends' step end times, back to back
        self._many_runs: list[tuple[int, int]] = []  # (end times, count) of each add_ends

    def add(self, gap_s: float, count: int = 1) -> None:
        if count == 1:
            self._gaps.append(gap_s)
            if len(self._gaps) >= 65536:
                self._flush()
        else:
            self._weighted.append((gap_s, count))
            if len(self._weighted) >= 65536:
                self._flush()

    def add_ends(self, ends_s: list[float], lo: int, hi: int, count: int) -> None:
        """The gaps between the successive step ends ``ends_s[lo:hi]``, each seen ``count`` times (a
        run of decode steps of a whole batch). The differences are taken when the buffer is binned:
        the same subtraction, on arrays."""
        self._many += ends_s[lo:hi]
        self._many_runs.append((hi - lo, count))
        if len(self._many_runs) >= 4096:
            self._flush()

    def _bin(self, gaps: np.ndarray) -> np.ndarray:
        """Bin index of every gap: 1 + floor(log(gap / LO) * scale), 0 at or below LO, BINS + 1 at
        or above HI (in place on one temporary: this runs over every token of a run)."""
        x = np.maximum(gaps, 1e-300)
        x /= self.LO
        with np.errstate(divide="ignore"):
            np.log(x, out=x)
        x *= self._scale
        np.floor(x, out=x)
        x += 1
        x[gaps <= self.LO] = 0
        x[gaps >= self.HI] = self.BINS + 1
        return x.astype(np.int64)

    def _flush(self) -> None:
        if self._gaps:
            self.counts += np.bincount(self._bin(_floats(self._gaps)), minlength=self.BINS + 2)
            self._gaps = []
        if self._weighted:
            g = np.asarray([w[0] for w in self._weighted])
            c = np.asarray([w[1] for w in self._weighted], dtype=np.int64)
            self.counts += np.bincount(self._bin(g), weights=c, minlength=self.BINS + 2).astype(np.int64)
            self._weighted = []
        if self._many_runs:
            ends = _floats(self._many)
            lengths = np.fromiter((k for k, _ in self._many_runs), dtype=np.int64, count=len(self._many_runs))
            c = np.repeat(np.fromiter((c for _, c in self._many_runs), dtype=np.int64), lengths)
            c[lengths.cumsum() - 1] = 0  # a segment's last end and the next one's first make no gap
            g = ends[1:] - ends[:-1]
            self.counts += np.bincount(self._bin(g), weights=c[:-1], minlength=self.BINS + 2).astype(np.int64)
            self._many, self._many_runs = [], []

    def merge(self, other: GapHistogram) -> None:
        self._flush()
        other._flush()
        self.counts += other.counts

    @property
    def total(self) -> int:
        self._flush()
        return int(self.counts.sum())

    def centres(self) -> np.ndarray:
        """The gap each bin stands for: the geometric middle of its bounds; LO and HI for the two
        end bins (at or below LO, at or above HI)."""
        c = self.LO * np.exp((np.arange(self.BINS + 2) - 0.5) / self._scale)
        c[0], c[-1] = self.LO, self.HI
        return c

    def percentile(self, q: float) -> float:
        total = self.total
        if total == 0:
            return math.nan
        idx = int(np.searchsorted(np.cumsum(self.counts), q / 100.0 * total, side="left"))
        return float(self.centres()[min(idx, self.BINS + 1)])


def _floats(values: list[float]) -> np.ndarray:
    return np.fromiter(values, dtype=np.float64, count=len(values))  # (faster than asarray on lists)
