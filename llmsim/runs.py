"""Runs of steps the scheduler would plan alike, priced lazily and applied in one go, with exact results.

Between events that change a batch (an arrival, a prompt chunk, a request finishing, a KV
block that cannot be had), a replica repeats the same decode step with every context one token
longer. Only the attention kernels depend on the context, so the whole run's step times come
from one pricing call (``CostModel.decode_run_s``): one SimPy event for the run instead
of one per step. The run's
outcome is applied per request in one go, or up to any instant inside the run when something
outside needs the replica's exact state (``FastPath.sync``). A ``ChunkRun`` is the same for a
prompt's chunks riding on an unchanged decode batch (each of its steps priced on its own).

Why the jump is exact: during a decode-only run no request finishes (this run stops one step
short of the first finish; a ``DecodeSet`` run, ``ColumnRun``, ends with it), no block
allocation can fail (the run is as long as the free blocks allow, and blocks someone else
reserves during it shorten it: ``steps_that_fit``, ``FastPath.note_external_blocks``), and a waiting request that
could not be admitted at the start cannot be admitted later (free blocks only shrink and the
batch keeps its size). Arrivals interrupt the run at the next step boundary, as the step-by-step
loop would see them.

``DecodeRun`` serves replicas whose requests are Python objects each step (sliding windows,
prefix caching, parallel sampling); columnar replicas (``decodeset.DecodeSet``) use ``ColumnRun``
and ``ChunkRun``. ``fastpath.FastPath`` decides when a replica takes a run and waits it out.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsim.decodeset import DecodeSet, blocks_for_ticks, blocks_over
from llmsim.kvcache import BlockManager
from llmsim.request import Request, blocks_for

if TYPE_CHECKING:
    from llmsim.costmodel.roofline import StepTimes
    from llmsim.gaps import GapHistogram

MIN_RUN = 4  # shorter runs are cheaper to step one by one
MIN_CHUNK_RUN = 2  # (a chunk run prices each step; what it saves is each step's plan and outcome)


def run_length(members: list[Request], kv: BlockManager, window: int | None, limit: int) -> int:
    """Decode steps that can run with no request finishing, no KV shortage and (with a sliding
    window) no context reaching the window; 0 if shorter than ``MIN_RUN``."""
    k = limit
    for r in members:
        k = min(k, r.remaining_output - 1)  # the finishing step goes through the normal path
        if window is not None:
            k = min(k, window - r.kv_tokens - 1)  # contexts grow linearly only below the window
        if k < MIN_RUN:
            return 0
    bt = kv.block_tokens
    kv_tokens = np.fromiter((r.kv_tokens for r in members), dtype=np.int64, count=len(members))
    held = int(sum(r.blocks for r in members))
    while k >= MIN_RUN:
        need = int((-(-(kv_tokens + k) // bt)).sum()) - held
        if need <= kv.free_blocks:
            return k
        k //= 2
    return 0


class Run:
    """A run of ``steps`` steps started at ``start_s`` (decode-only, or a ``ChunkRun``'s): what every
    kind of run shares.

    The run's first step is the plan the scheduler just made, so its KV slots are already
    allocated (``allocated`` starts at 1). Its step times come as ``StepTimes`` (each computed
    where it is read: ``duration``) or as a list; ``ends`` holds the end times of the steps
    priced so far: a run is priced as far as someone reads it (the step in progress when an arrival
    cuts it, its end), not to its last step. ``size`` is its decoding requests, ``chunk`` the
    prompt tokens each step also prefills (a ``ChunkRun``'s; 0 in a decode run).
    """

    def __init__(
        self, members: Any, kv: BlockManager, start_s: float, times: list[float] | StepTimes, steps: int
    ) -> None:
        self.members = members  # list[Request] (DecodeRun) or the DecodeSet (ColumnRun, ChunkRun)
        self.chunk = 0  # prompt tokens each step prefills besides its decodes (ChunkRun)
        self.kv = kv
        self.start_s = start_s
        self.steps = steps
        # step times: computed where read (``duration``), else the list priced whole
        self._lazy: StepTimes | None = None
        self._durations: list[float] = []
        if isinstance(times, list):
            self._durations = times
        else:
            self._lazy = times
        # end time of every step priced so far; Python floats, not arrays: runs are ~10-50 steps,
        # where a compiled loop beats numpy's per-call overhead. Each end is the one before plus the
        # step's time, as the replica's clock adds them step by step: where the times are the step
        # loop's own (a chunk run's), so are the ends, and no same-instant order flips on an ulp
        # (summing the times first and adding the start put ends up to 1e-9 apart, relative)
        self.ends: list[float] = []
        self._acc = start_s  # the end of the last step priced
        self.applied = 0  # steps whose tokens have been emitted
        self.allocated = 1  # steps whose KV slots have been allocated (a step allocates when it starts)
        self.external: list[tuple[int, int]] = []  # (step, blocks) held by others
        self.finished: list[Request] = []  # requests done at its last step
        self.waiting0 = 0  # requests waiting when it started (steps.csv)
        self._used0 = kv.used  # state at the start, for steps.csv rows
        self._held0 = kv.tokens_held

    def price_through(self, steps: int, until_s: float = math.inf) -> None:
        """Price the steps up to ``steps`` (at most), stopping after the first that ends past ``until_s``."""
        ends, durations, lazy = self.ends, self._durations, self._lazy
        i, m = len(ends), min(steps, self.steps)
        acc: float = self._acc
        while i < m and (not i or ends[i - 1] <= until_s):
            acc += lazy.step_s(i) if lazy is not None else durations[i]
            ends.append(acc)
            i += 1
        self._acc = acc

    def duration(self, i: int) -> float:
        """Seconds step ``i`` takes (the float ``price_through`` added for it)."""
        lazy = self._lazy
        return lazy.step_s(i) if lazy is not None else self._durations[i]

    def end_s(self) -> float:
        """When the run's last step ends (summed as ``price_through`` sums, without keeping the steps)."""
        i, lazy = len(self.ends), self._lazy
        if i == self.steps:
            return self.ends[-1]
        if lazy is None:
            self.price_through(self.steps)
            return self.ends[-1]
        acc: float = self._acc
        while i < self.steps:
            acc += lazy.step_s(i)
            i += 1
        return acc

    def ends_before(self, t: float) -> bool:
        """Does the whole run end before ``t``? (Prices it as far as ``t``.)"""
        self.price_through(self.steps, t)
        return len(self.ends) == self.steps and self.ends[-1] < t

    def note_external_blocks(self, now: float, blocks: int) -> None:
        """Blocks taken from this cache by someone else during the run (a KV transfer's reservation)."""
        self.external.append((self.steps_done_by(now), blocks))

    def extra_blocks(self, steps: int) -> int:  # pragma: no cover (each kind of run has its own)
        """Blocks its members need beyond those allocated to run through step ``steps``."""
        raise NotImplementedError

    def steps_that_fit(self, free_blocks: int) -> int:
        """The most steps (at least those allocated) whose blocks the cache's ``free_blocks`` hold:
        after someone else took blocks during the run, the rest may no longer fit."""
        lo, hi = self.allocated, self.steps
        if self.extra_blocks(hi) <= free_blocks:
            return hi
        while hi - lo > 1:  # extra_blocks(lo) == 0 fits; extra_blocks(hi) does not
            mid = (lo + hi) // 2
            if self.extra_blocks(mid) <= free_blocks:
                lo = mid
            else:
                hi = mid
        return lo

    def shorten(self, steps: int) -> None:
        """End the run after ``steps`` (at least those allocated); steps priced past it are
        priced again from the start, in the same order (the same floats)."""
        assert self.allocated <= steps <= self.steps
        self.steps = steps
        if len(self.ends) > steps:
            self.ends.clear()
            self._acc = self.start_s
            self.price_through(steps)

    def busy_s(self, steps: int) -> float:
        """Seconds the first ``steps`` steps took."""
        self.price_through(steps)
        return self.ends[steps - 1] - self.start_s

    def steps_done_by(self, now: float) -> int:
        self.price_through(self.steps, now)  # through the step in progress at ``now``
        return bisect.bisect_right(self.ends, now)

    def steps_through(self, t: float) -> int:
        """Steps done once the step in progress at ``t`` completes: where the run ends when
        something reaches the replica at ``t`` (a step boundary is the earliest it can react)."""
        return min(self.steps_done_by(t) + 1, self.steps)


class DecodeRun(Run):
    """A run of the same ``members`` (Request objects), stopping short of the first finish."""

    def __init__(
        self, members: list[Request], kv: BlockManager, start_s: float, times: list[float] | StepTimes, steps: int
    ) -> None:
        super().__init__(members, kv, start_s, times, steps)
        self._kv0 = np.fromiter((r.kv_tokens for r in members), dtype=np.int64, count=len(members))
        self._blocks0 = np.fromiter((r.blocks for r in members), dtype=np.int64, count=len(members))

    @property
    def size(self) -> int:
        return len(self.members)

    def allocate_through(self, steps: int) -> None:
        steps = min(steps, self.steps)
        if steps > self.allocated:
            ahead, new = steps - self.applied, steps - self.allocated  # tokens not yet applied / slots
            for r in self.members:
                self.kv.grow(r, ahead, new)
            self.allocated = steps

    def extra_blocks(self, steps: int) -> int:
        bt = self.kv.block_tokens
        now = -(-(self._kv0 + self.allocated) // bt)  # each member holds its context's blocks
        return int((-(-(self._kv0 + steps) // bt) - now).sum())

    def apply_through(self, steps: int, gaps: GapHistogram | None) -> tuple[int, int]:
        """Emit the tokens of steps [applied, steps); returns that range."""
        lo, hi = self.applied, min(steps, self.steps)
        if hi <= lo:
            return lo, lo
        self.allocate_through(hi)
        self.price_through(hi)
        rest = [self.duration(i) for i in range(lo + 1, hi)]
        rest_max = max(rest) if rest else 0.0
        first_end, end = self.ends[lo], self.ends[hi - 1]
        n = hi - lo
        for r in self.members:
            first_gap = first_end - r.last_token_s  # includes any stall before the run
            worst = first_gap if first_gap > rest_max else rest_max
            if worst > r.max_tbt_s:
                r.max_tbt_s = worst
            if gaps is not None:
                gaps.add(first_gap)
            r.kv_tokens += n
            r.generated += n
            r.last_token_s = end
        if gaps is not None:
            for g in rest:
                gaps.add(g, len(self.members))
        self.applied = hi
        return lo, hi

    def kv_after_steps(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Blocks in use and token slots held after each step in [lo, hi) (steps.csv columns)."""
        bt = self.kv.block_tokens
        i = np.arange(lo + 1, hi + 1, dtype=np.int64)[:, None]  # steps allocated after step lo+1..hi
        grown = np.maximum(0, -(-(self._kv0[None, :] + i) // bt) - self._blocks0[None, :]).sum(axis=1)
        used = self._used0 + grown
        for step, blocks in self.external:  # seen from the end of the step it happened in
            used[max(0, step - lo) :] += blocks
        held = self._held0 + len(self.members) * (i[:, 0] - 1)
        return used, held


class ColumnRun(Run):
    """A run of decode-only steps of a ``DecodeSet`` (the interface of ``DecodeRun``);
    it ends at the first finish at the latest."""

    def __init__(
        self, members: DecodeSet, kv: BlockManager, start_s: float, times: list[float] | StepTimes, steps: int
    ) -> None:
        super().__init__(members, kv, start_s, times, steps)
        self.size = self._n = members.n
        self._tick0 = members.tick
        self._residue0 = members.residue()  # members leave at the run's end; keep who ran

    def allocate_through(self, steps: int) -> None:
        steps = min(steps, self.steps)
        if steps > self.allocated:
            blocks = blocks_over(self._residue0, self._n, self._tick0 + self.allocated, steps - self.allocated)
            self.members.allocate(blocks, steps - self.allocated)
            self.allocated = steps

    def extra_blocks(self, steps: int) -> int:
        return blocks_over(self._residue0, self._n, self._tick0 + self.allocated, steps - self.allocated)

    def apply_through(self, steps: int, gaps: GapHistogram | None = None) -> tuple[int, int]:
        lo, hi = self.applied, min(steps, self.steps)
        if hi <= lo:
            return lo, lo
        self.allocate_through(hi)
        self.price_through(hi)
        if self._n:  # (an empty set takes no ticks: the step-by-step loop plans no decodes then)
            self.finished += self.members.advance(self.ends, lo, hi)
        self.applied = hi
        return lo, hi

    def kv_after_steps(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Blocks in use and token slots held after each step in [lo, hi) (steps.csv columns)."""
        need = blocks_for_ticks(self._residue0, self._tick0, hi)
        need[0] = 0  # the first step's blocks were held when the run started
        used = self._used0 + need.cumsum()[lo:hi]
        for step, blocks in self.external:
            used[max(0, step - lo) :] += blocks
        held = self._held0 + self._n * np.arange(lo, hi, dtype=np.int64)
        return used, held


def column_run_length(members: DecodeSet, free_blocks: int, limit: int, min_run: int) -> int:
    """Decode steps that can run before the first finish (included) with the free blocks; 0 if
    fewer than ``min_run``. Step 0 is the plan just made: its blocks are held already."""
    k = min(limit, members.next_finish - members.tick)
    if k < min_run:
        return 0
    if members.blocks_over(members.tick + 1, k - 1) > free_blocks:
        cum = members.blocks_for_ticks(members.tick + 1, k - 1).cumsum()
        k = 1 + int(cum.searchsorted(free_blocks, side="right"))  # steps whose blocks all fit
    return k if k >= min_run else 0


class ChunkRun(ColumnRun):
    """A prompt's chunks riding on an unchanged columnar decode batch: every step the same
    ``DecodeSet`` members decode a token each and ``prompt`` prefills ``chunk`` more of its tokens.

    Why the jump is exact, besides what holds for a ``ColumnRun`` (no finish before its last step,
    no waiting request admitted: one that could not start in its first step cannot start later,
    with the same budget left and fewer free blocks): the replica's only prompt in progress gets
    the same chunk every step (the fixed budget less the unchanged decodes, or
    ``long_prefill_token_threshold``) until the chunk that finishes it, which the run stops short
    of (that step samples the prompt's first token and the request joins the decoders); the run
    is as long as the free blocks hold both the decoders' and the prompt's growth, so no step is
    short of a block (the step-by-step loop would preempt or plan no chunk there).
    ``chunk_run_length`` says how far that is."""

    def __init__(
        self,
        members: DecodeSet,
        kv: BlockManager,
        start_s: float,
        times: StepTimes,
        steps: int,
        prompt: Request,
        chunk: int,
    ) -> None:
        super().__init__(members, kv, start_s, times, steps)
        self.prompt = prompt
        self.chunk = chunk
        self._past0 = prompt.kv_tokens  # its cached tokens when the run's first step was planned

    def allocate_through(self, steps: int) -> None:
        steps = min(steps, self.steps)
        if steps > self.allocated:
            ahead, new = (steps - self.applied) * self.chunk, (steps - self.allocated) * self.chunk
            super().allocate_through(steps)
            self.kv.grow(self.prompt, ahead, new)

    def extra_blocks(self, steps: int) -> int:
        bt, c, past = self.kv.block_tokens, self.chunk, self._past0
        prompt = blocks_for(past + steps * c, bt) - blocks_for(past + self.allocated * c, bt)
        return super().extra_blocks(steps) + prompt

    def apply_through(self, steps: int, gaps: GapHistogram | None = None) -> tuple[int, int]:
        lo, hi = super().apply_through(steps, gaps)
        prompt, c, ends = self.prompt, self.chunk, self.ends
        for i in range(lo, hi):
            prompt.prefill_chunk(c, ends[i])
        return lo, hi

    def kv_after_steps(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        used, held = super().kv_after_steps(lo, hi)
        bt, c, past = self.kv.block_tokens, self.chunk, self._past0
        i = np.arange(lo, hi, dtype=np.int64)
        after = -(-(past + (i + 1) * c) // bt)  # the prompt's blocks after step i (blocks_for, on arrays)
        return used + after - blocks_for(past + c, bt), held + c * i


def chunk_run_length(
    members: DecodeSet, prompt: Request, chunk: int, free_blocks: int, limit: int, min_run: int
) -> int:
    """Steps of a chunk run from a plan that gives ``prompt`` a ``chunk`` not finishing it, beside
    ``members`` decoding: short of the prompt's last chunk, through the decoders' first finish at
    the latest, while the free blocks hold every step's; 0 if fewer than ``min_run``. Step 0 is
    the plan just made: its blocks are held already."""
    k = min(limit, -(-prompt.prompt_remaining // chunk) - 1)  # the chunks before its last
    if members.n:
        k = min(k, members.next_finish - members.tick)
    if k < min_run:
        return 0
    bt, past = members.bt, prompt.kv_tokens
    prompt_blocks = blocks_for(past + k * chunk, bt) - blocks_for(past + chunk, bt)
    if members.blocks_over(members.tick + 1, k - 1) + prompt_blocks > free_blocks:
        held = -(-(past + np.arange(1, k + 1, dtype=np.int64) * chunk) // bt)  # the prompt's, after steps 0..k-1
        cum = (members.blocks_for_ticks(members.tick + 1, k - 1) + np.diff(held)).cumsum()
        k = 1 + int(cum.searchsorted(free_blocks, side="right"))  # steps whose blocks all fit
    return k if k >= min_run else 0
