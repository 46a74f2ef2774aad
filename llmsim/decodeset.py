"""The decoding requests of a replica held as columns: a step costs O(1) in their number.

Every request past its prompt gains one token per decode step ("tick") of its replica, so its
counters are a function of the tick count: ``kv_tokens = kv_at_join + (tick - tick_at_join)``.
``DecodeSet`` keeps only what a step needs in aggregate (members, Σ context, how many members
need a new KV block at the next tick, the next tick at which someone finishes) and the end times
of the ticks its members took part in. A request's own counters, last-token time and worst gap are brought up to date
(``materialize``) only when someone reads them: when it finishes, when the scheduler must pick
preemption victims, and at the end of the run.

What stays exact: block needs come from each member's position inside its last block (a
member at ``k`` tokens needs a block at the tick where ``k % block_tokens == 0``); inter-token
gaps are differences of tick end times, the same floats the step-by-step path subtracts; the
TBT histogram gets each tick's gap once with the count of members that had a token at the tick
before, and each new member's first gap on its own.

Used only where every member holds ``ceil(kv_tokens / block_tokens)`` blocks and decodes one
token per step (no prefix sharing, parallel sampling, speculation or sliding window): the
simulator checks this before giving a replica a ``DecodeSet`` (``fastpath.shortcuts``); its runs of
decode steps are ``runs.ColumnRun``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING

import numpy as np

from llmsim.kvcache import BlockManager
from llmsim.request import FINISHED, Request, admit_order

if TYPE_CHECKING:
    from llmsim.gaps import GapHistogram


TRIM_TICKS = 4096  # tick end times kept before the first trim of those no member needs


class DecodeSet:
    def __init__(self, kv: BlockManager, gaps: GapHistogram | None, trim_ticks: int = TRIM_TICKS) -> None:
        self.kv = kv
        self.bt = kv.block_tokens
        self.gaps = gaps  # GapHistogram or None
        self.tick = 0  # decode steps taken so far
        self.n = 0  # members
        self.ctx = 0  # Σ kv_tokens of the members (at a step boundary)
        # end times of ticks _base, _base + 1, ...: from the oldest tick a member still needs
        # (its first) on, so memory follows the members' lifetimes, not the run's length
        self._ends: list[float] = []
        self._base = 0
        # Worst gaps by segment: the ticks between two instants at which a member's ticks start
        # (it joins, or is materialized). A member's ticks are whole segments: its first, whose
        # largest inner gap is kept, and every later one, over which a stack of suffix maxima of
        # (the gap into a segment, its inner gaps) answers. Its worst gap is then two binary
        # searches, not a pass over each of its ticks. The last segment stays open (-1: none)
        # until a member's ticks start.
        self._seg_ticks: list[int] = []
        self._seg_inner: list[float] = []
        self._max_ticks: list[int] = []
        self._max_gaps: list[float] = []
        self._open, self._open_into, self._open_inner = -1, -1.0, -1.0
        self._trim_ticks = self._trim_at = trim_ticks
        self._residue = [0] * self.bt  # members by (kv_at_join - tick_at_join) % bt
        self._members: dict[int, Request] = {}
        self._newest = -1  # the members' latest admit_seq (-2: a member left, not known until asked)
        self._finish: list[tuple[int, int, Request]] = []  # (tick count when it is done, admit_seq, request)
        self._fresh: list[Request] = []  # members whose first tick is the next one

    # ---- membership --------------------------------------------------------------------
    def add(self, r: Request) -> None:
        """A request whose counters are current joins (its prompt is done, it has tokens to go)."""
        self._close()
        r.tick0 = self.tick
        self._members[r.admit_seq] = r
        if self._newest != -2 and r.admit_seq > self._newest:
            self._newest = r.admit_seq
        self.n += 1
        self.ctx += r.kv_tokens
        self._residue[(r.kv_tokens - self.tick) % self.bt] += 1
        heapq.heappush(self._finish, (self.tick + r.output_tokens - r.generated, r.admit_seq, r))
        self._fresh.append(r)

    def _remove(self, r: Request) -> None:
        del self._members[r.admit_seq]
        if r.admit_seq == self._newest:
            self._newest = -2
        self.n -= 1
        self.ctx -= r.kv_tokens
        self._residue[(r.kv_tokens - r.tick0) % self.bt] -= 1

    def materialize(self, r: Request) -> None:
        """Bring ``r``'s counters, last-token time and worst gap up to now."""
        tick = self.tick
        d = tick - r.tick0
        if d <= 0:
            return
        self._close()  # (its ticks start again at this tick)
        t0 = r.tick0  # its ticks: t0 .. tick - 1, segments from the one starting at t0
        worst = self._ends[t0 - self._base] - r.last_token_s
        if d > 1:
            inner = self._seg_inner[bisect_left(self._seg_ticks, t0)]
            if inner > worst:
                worst = inner
            k = bisect_right(self._max_ticks, t0)  # the segments after its first
            if k < len(self._max_gaps) and self._max_gaps[k] > worst:
                worst = self._max_gaps[k]
        if worst > r.max_tbt_s:
            r.max_tbt_s = worst
        r.kv_tokens += d
        r.generated += d
        r.last_token_s = self._ends[tick - 1 - self._base]
        r.blocks = -(-r.kv_tokens // self.bt)
        r.tick0 = tick

    def newest(self) -> int:
        """The latest admission (``Request.admit_seq``) among the members; -1 with none."""
        if self._newest == -2:
            self._newest = max(self._members) if self._members else -1
        return self._newest

    def member_ids(self) -> list[int]:
        """The members' request ids (each decodes in every tick)."""
        return [r.id for r in self._members.values()]

    def flush(self) -> list[Request]:
        """Every member with current counters, in admission order; the set is left empty."""
        members = sorted(self._members.values(), key=admit_order)
        for r in members:
            self.materialize(r)
        self._members.clear()
        self._newest = -1
        self._finish.clear()
        self._fresh.clear()
        self._residue = [0] * self.bt
        self.n = self.ctx = 0
        return members

    def residue(self) -> list[int]:
        """Members by (kv_at_join - tick_at_join) % block_tokens: who needs a block at which tick."""
        return list(self._residue)

    # ---- ticks -------------------------------------------------------------------------
    def blocks_for_ticks(self, first: int, count: int) -> np.ndarray:
        """New KV blocks the members need at each of ticks ``first .. first+count-1``."""
        return blocks_for_ticks(self._residue, first, count)

    def blocks_over(self, first: int, count: int) -> int:
        return blocks_over(self._residue, self.n, first, count)

    def blocks_next(self) -> int:
        return self._residue[(-self.tick) % self.bt]

    def allocate(self, blocks: int, ticks: int = 1) -> None:
        """Hold the blocks and token slots of ``ticks`` more ticks (already counted in ``blocks``)."""
        self.kv.grow_counts(blocks, self.n * ticks)

    @property
    def next_finish(self) -> int:
        """The tick count at which the first member is done (a big number if none)."""
        return self._finish[0][0] if self._finish else 1 << 62

    def tick_once(self, end_s: float) -> list[Request]:
        """``advance`` for one tick (the step-by-step path)."""
        self._first_tick_gaps(end_s)
        self._extend(end_s, -1.0)
        self._ends.append(end_s)
        self._ticked(1)
        return self._finished() if self._finish and self._finish[0][0] <= self.tick else []

    def advance(self, ends: list[float], lo: int, hi: int) -> list[Request]:
        """Apply ticks ending at ``ends[lo:hi]``: gaps into the histogram, members that finish freed.
        Returns the finished requests (in admission order among those finishing together)."""
        m = hi - lo
        if m <= 0:
            return []
        self._first_tick_gaps(ends[lo])
        if self.gaps is not None:  # later ticks: every member's gap is the same
            inner = self.gaps.add_ends(ends, lo, hi, self.n)  # (and the largest: -1 for one tick)
        else:
            inner = largest_gap(ends, lo, hi)
        self._extend(ends[lo], inner)
        self._ends.extend(ends[lo:hi])
        self._ticked(m)
        return self._finished()

    def _extend(self, first_end_s: float, inner: float) -> None:
        """Ticks join the open segment (or open one): ``first_end_s`` the first one's end,
        ``inner`` the largest gap between the new ticks (-1: one tick)."""
        own = self._ends
        into = first_end_s - own[len(own) - 1] if own else -1.0  # (the very first tick has none)
        if self._open < 0:
            self._open, self._open_into, self._open_inner = self.tick, into, inner
            return
        if into > inner:  # inside the open segment, the gap into the new ticks is an inner one
            inner = into
        if inner > self._open_inner:
            self._open_inner = inner

    def _close(self) -> None:
        """A member's ticks start at this tick: the open segment ends here."""
        start = self._open
        if start < 0:
            return
        self._open = -1
        inner = self._open_inner
        self._seg_ticks.append(start)
        self._seg_inner.append(inner)
        top = self._open_into if self._open_into > inner else inner
        ticks, gaps = self._max_ticks, self._max_gaps
        while gaps and gaps[len(gaps) - 1] <= top:
            gaps.pop()
            ticks.pop()
        ticks.append(start)
        gaps.append(top)

    def _ticked(self, m: int) -> None:
        self.tick += m
        self.ctx += self.n * m
        if len(self._ends) >= self._trim_at:
            self._trim()

    def _trim(self) -> None:
        """Drop the end times no member needs: before every member's first tick, and before the
        last tick (whose end the next gap needs)."""
        keep = min(min((r.tick0 for r in self._members.values()), default=self.tick), max(self.tick - 1, 0))
        del self._ends[: keep - self._base]
        self._base = keep
        k = bisect_left(self._seg_ticks, keep)  # segments before the oldest member's first
        del self._seg_ticks[:k]
        del self._seg_inner[:k]
        k = bisect_left(self._max_ticks, keep)
        del self._max_ticks[:k]
        del self._max_gaps[:k]
        self._trim_at = max(self._trim_ticks, 2 * len(self._ends))

    def _first_tick_gaps(self, end_s: float) -> None:
        """The gaps of the next tick: one shared by the members that had a token at the tick
        before, and each new member's own (from its first token)."""
        gaps = self.gaps
        if gaps is not None:
            fresh = len(self._fresh)
            if self.n > fresh:
                gaps.add(end_s - self._ends[self.tick - 1 - self._base], self.n - fresh)
            for r in self._fresh:
                gaps.add(end_s - r.last_token_s)
        self._fresh.clear()

    def _finished(self) -> list[Request]:
        finished: list[Request] = []
        while self._finish and self._finish[0][0] <= self.tick:
            _, _, r = heapq.heappop(self._finish)  # runs stop at the first finish: it is done now
            self.materialize(r)
            self._remove(r)
            r.finish_s = r.last_token_s
            r.status = FINISHED
            self.kv.free(r)
            finished.append(r)
        return finished


def largest_gap(ends: list[float], lo: int, hi: int) -> float:
    """The largest difference of successive ``ends[lo:hi]`` (-1: fewer than two)."""
    largest = -1.0
    prev = ends[lo]
    for i in range(lo + 1, hi):  # (a compiled loop over unboxed floats)
        e = ends[i]
        if e - prev > largest:
            largest = e - prev
        prev = e
    return largest


def blocks_for_ticks(residue: list[int], first: int, count: int) -> np.ndarray:
    return np.asarray(residue)[(-(first + np.arange(count))) % len(residue)]


def blocks_over(residue: list[int], members: int, first: int, count: int) -> int:
    """Σ ``blocks_for_ticks``: every member needs one block per ``len(residue)`` ticks."""
    bt = len(residue)
    cycles, part = divmod(count, bt)
    if not part:
        return cycles * members
    # ticks first .. first+part-1 read residue[(-first) % bt], then the entries before it (wrapping)
    s = (-first) % bt
    lo = s - part + 1
    tail = 0
    for i in range(max(lo, 0), s + 1):  # (compiled loops: no slices)
        tail += residue[i]
    for i in range(bt + lo if lo < 0 else bt, bt):
        tail += residue[i]
    return cycles * members + tail
