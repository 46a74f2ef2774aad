"""Inter-token gaps (TBT) of a run, one per streamed chunk (a token; a speculative verify step's
accepted tokens together), in a log-binned histogram of O(1) memory.

Its own module so that it is compiled with the simulator (llmsim/native.py): the step loop adds
to it for every step.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

_LO_S: Final = 1e-6
_HI_S: Final = 1e3
_BINS: Final = 4200


class GapHistogram:
    """Log-binned histogram of inter-token gaps (TBT) across every chunk of every request, O(1) memory.

    Bins are 0.5% wide in log space from 1 µs to 1000 s, so percentiles are exact to 0.5%; the
    sum and the sum of squares are kept exactly beside them (the mean and std need no bins).
    Each gap is binned as it comes, in compiled arithmetic (``_bin_of``): a run of decode steps adds
    its gaps from its step end times with no list, box or array made per step.
    """

    LO = _LO_S  # s
    HI = _HI_S  # s
    BINS = _BINS

    def __init__(self) -> None:
        self._counts: list[int] = [0] * (self.BINS + 2)
        self._scale = self.BINS / math.log(self.HI / self.LO)
        self._last_gap_s = -1.0  # the gap ``add`` binned last, and its bin
        self._last_bin = 0
        self.sum_s = 0.0  # of every gap, and of their squares (s²)
        self.sum_sq = 0.0

    def add(self, gap_s: float, count: int = 1) -> None:
        if gap_s != self._last_gap_s:  # (a step's decodes mostly share one gap: its bin, once)
            self._last_gap_s = gap_s
            self._last_bin = _bin_of(gap_s, self._scale)
        self._counts[self._last_bin] += count
        self.sum_s += gap_s * count
        self.sum_sq += gap_s * gap_s * count

    def add_ends(self, ends_s: list[float], lo: int, hi: int, count: int) -> float:
        """The gaps between the successive step ends ``ends_s[lo:hi]``, each seen ``count`` times (a
        run of decode steps of a whole batch): each the difference of two ends, as a token's gap
        from the one before is when the steps are taken one by one. Returns the largest (-1: none).
        A run's steps change slowly, so most gaps fall in the bin of the one before: a gap strictly
        inside that bin's bounds, shrunk by a relative 1e-9 (far more than ``log``'s rounding),
        takes it without a log, and the bin's count grows once per stretch of such gaps (each
        update of a big count makes a new int)."""
        counts, scale = self._counts, self._scale
        prev = ends_s[lo]
        inside_lo = inside_hi = 0.0  # the current bin's bounds, shrunk (empty: no bin yet)
        k = 0
        pending = 0  # gaps seen in bin k, not yet counted
        largest = -1.0
        sq = 0.0
        for i in range(lo + 1, hi):
            end = ends_s[i]
            gap = end - prev
            prev = end
            sq += gap * gap
            if gap > largest:
                largest = gap
            if not inside_lo < gap < inside_hi:
                if pending:
                    counts[k] += pending
                    pending = 0
                k = _bin_of(gap, scale)
                if 0 < k <= _BINS:
                    inside_lo = _LO_S * math.exp((k - 1) / scale) * (1.0 + 1e-9)
                    inside_hi = _LO_S * math.exp(k / scale) * (1.0 - 1e-9)
                else:
                    inside_lo = inside_hi = 0.0
            pending += count
        if pending:
            counts[k] += pending
        if hi - lo > 1:
            self.sum_s += (ends_s[hi - 1] - ends_s[lo]) * count  # (the gaps' sum telescopes)
            self.sum_sq += sq * count
        return largest

    @property
    def counts(self) -> np.ndarray:
        """Gaps per bin: bin 0 at or below LO, bin BINS + 1 at or above HI."""
        return np.asarray(self._counts, dtype=np.int64)

    def merge(self, other: GapHistogram) -> None:
        mine = self._counts
        for i, c in enumerate(other._counts):
            if c:
                mine[i] += c
        self.sum_s += other.sum_s
        self.sum_sq += other.sum_sq

    @property
    def total(self) -> int:
        return sum(self._counts)

    def centres(self) -> np.ndarray:
        """The gap each bin stands for: the geometric middle of its bounds; LO and HI for the two
        end bins (at or below LO, at or above HI)."""
        c = self.LO * np.exp((np.arange(self.BINS + 2) - 0.5) / self._scale)
        c[0], c[-1] = self.LO, self.HI
        return c

    def mean_s(self) -> float:
        return self.sum_s / self.total if self.total else math.nan

    def std_s(self) -> float:
        """Population std (np.std's), from the exact sums (clipped at 0 against rounding)."""
        total = self.total
        if not total:
            return math.nan
        mean = self.sum_s / total
        return math.sqrt(max(self.sum_sq / total - mean * mean, 0.0))

    def percentile(self, q: float) -> float:
        """np.percentile's (linear) over the gaps, each standing at its bin's centre: the ranks
        below and above q % of (n - 1), interpolated, so two gaps in far bins give their middle."""
        total = self.total
        if total == 0:
            return math.nan
        rank = q / 100.0 * (total - 1)
        below = math.floor(rank)
        cum = np.cumsum(self.counts)
        # the bin holding each rank (0-based: rank r is in the first bin whose cumulative count > r)
        lo_bin, hi_bin = np.searchsorted(cum, [below, min(below + 1, total - 1)], side="right")
        centres = self.centres()
        lo, hi = float(centres[lo_bin]), float(centres[hi_bin])
        return lo + (hi - lo) * (rank - below)


def _bin_of(gap_s: float, scale: float) -> int:
    """Bin index of a gap: 1 + floor(log(gap / LO) * scale), 0 at or below LO, BINS + 1 at or above HI."""
    if gap_s <= _LO_S:
        return 0
    if gap_s >= _HI_S:
        return _BINS + 1
    return int(math.floor(math.log(gap_s / _LO_S) * scale)) + 1
