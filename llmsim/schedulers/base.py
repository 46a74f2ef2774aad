"""The scheduler seam: pure decisions about which tokens run in the next step.

``schedule(waiting, running)`` picks the step's prefill chunks and decodes (moving admitted
requests from ``waiting`` to ``running``, allocating KV blocks, preempting when blocks run
out) and returns a ``BatchPlan``. ``complete(plan, now)`` applies the step's outcome: tokens
prefilled and sampled, timestamps, finished requests freed. Neither knows how long a step takes:
the simulator asks the cost model, the NumPy reference engine runs the model and reads a clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from llmsim.costmodel.ops import BatchShape, chunk_pairs
from llmsim.kvcache import BlockManager
from llmsim.request import FINISHED, RUNNING, Request


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 256  # sequences in a batch (running set)
    max_batch_tokens: int = 8192  # tokens processed in one step
    chunk_tokens: int = 512  # chunked prefill: per-step token budget (decodes count against it)
    preemption: str = "recompute"  # "recompute" | "swap"


@dataclass
class BatchPlan:
    prefill: list[tuple[Request, int]] = field(default_factory=list)  # (request, new prompt tokens)
    decode: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    padding: list[Request] = field(default_factory=list)  # static batching: finished slots still computed

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode

    @property
    def prefill_tokens(self) -> int:
        return sum(c for _, c in self.prefill)

    @property
    def size(self) -> int:
        return len(self.prefill) + len(self.decode) + len(self.padding)

    def shape(self, window: int | None = None) -> BatchShape:
        """The step's aggregates for the cost model (context = tokens already cached)."""
        pairs = kv = score = 0
        p_tokens = 0
        for r, c in self.prefill:
            p = r.kv_tokens
            pairs += chunk_pairs(c, p, window)
            seen = p + c if window is None else min(p + c, window + c)
            kv += seen
            score += c * seen
            p_tokens += c
        d_ctx = 0
        for r in self.decode:
            d_ctx += r.kv_tokens + 1
        for r in self.padding:
            d_ctx += r.kv_tokens + 1
        if window is not None:
            d_ctx = sum(min(r.kv_tokens + 1, window) for r in (*self.decode, *self.padding))
        n_dec = len(self.decode) + len(self.padding)
        return BatchShape(
            prefill_tokens=p_tokens,
            prefill_seqs=len(self.prefill),
            prefill_attn_pairs=pairs,
            prefill_kv_tokens=kv,
            prefill_score_elems=score,
            decode_seqs=n_dec,
            decode_tokens=n_dec,
            decode_ctx_tokens=d_ctx,
            # only prompts that finish in this step are sampled
            logits_rows=sum(1 for r, c in self.prefill if r.prefilled + c == r.prefill_target) + n_dec,
        )


class Scheduler:
    """Base class: admission checks, token bookkeeping and preemption shared by all policies."""

    name = "base"

    def __init__(self, cfg: SchedulerConfig, kv: BlockManager) -> None:
        self.cfg = cfg
        self.kv = kv
        self.gaps = None  # optional GapHistogram fed with every inter-token gap

    # ---- admission ---------------------------------------------------------------------
    def rejection_reason(self, req: Request) -> str:
        """Why a request can never be served here ('' if it can)."""
        total = req.prompt_tokens + max(req.output_tokens - 1, 0)
        if not self.kv.fits_ever(total):
            return (
                f"needs {total} tokens of KV cache ({-(-total // self.kv.block_tokens)} blocks), "
                f"capacity is {self.kv.num_blocks} blocks"
            )
        return ""

    def schedule(self, waiting: deque[Request], running: list[Request]) -> BatchPlan:  # pragma: no cover
        raise NotImplementedError

    # ---- shared pieces -----------------------------------------------------------------
    def _schedule_decodes(self, waiting: deque[Request], running: list[Request], plan: BatchPlan) -> None:
        """Give every running, fully prefilled request one decode slot, preempting the newest
        running requests (vLLM's policy) when the cache has no block for the next token."""
        i = 0
        while i < len(running):
            r = running[i]
            if r.in_prefill:
                i += 1
                continue
            need = self.kv.blocks_needed(r, 1)
            while need > 0 and not self.kv.can_allocate(need):
                victim = running.pop()
                self._preempt(victim, waiting, plan)
                if victim is r:
                    break
            if r.status != RUNNING:
                break
            self.kv.allocate(r, 1)
            plan.decode.append(r)
            i += 1

    def _preempt(self, victim: Request, waiting: deque[Request], plan: BatchPlan) -> None:
        self.kv.free(victim)
        victim.preempt_for_recompute()
        victim.status = "waiting"
        waiting.appendleft(victim)
        plan.preempted.append(victim)
        # a victim already planned for prefill in this step must not run
        plan.prefill = [(r, c) for r, c in plan.prefill if r is not victim]

    def _admit(self, req: Request, tokens: int, waiting: deque[Request], running: list[Request]) -> bool:
        """Try to start prefilling ``tokens`` of the head of ``waiting``; False if KV is short."""
        if not self.kv.can_allocate(self.kv.blocks_needed(req, tokens), admission=True):
            return False
        waiting.popleft()
        self.kv.allocate(req, tokens)
        req.status = RUNNING
        running.append(req)
        return True

    def complete(self, plan: BatchPlan, now: float, running: list[Request]) -> list[Request]:
        """Apply a finished step: advance tokens, stamp times, free finished requests."""
        finished: list[Request] = []
        for r, c in plan.prefill:
            if r.queued_s != r.queued_s:  # NaN: first time scheduled
                r.queued_s = now
            r.prefilled += c
            r.kv_tokens += c
            if r.prefilled == r.prefill_target:
                self._emit(r, now, finished)
        for r in plan.decode:
            r.kv_tokens += 1
            self._emit(r, now, finished)
        if finished:
            running[:] = [r for r in running if r.status == RUNNING]
        return finished

    def _emit(self, r: Request, now: float, finished: list[Request]) -> None:
        if r.output_tokens > r.generated:
            if r.generated == 0:
                r.first_token_s = now
            else:
                gap = now - r.last_token_s
                if gap > r.max_tbt_s:
                    r.max_tbt_s = gap
                if self.gaps is not None:
                    self.gaps.add(gap)
            r.generated += 1
            r.last_token_s = now
        if r.generated >= r.output_tokens:
            r.finish_s = now
            r.status = FINISHED
            self.kv.free(r)
            finished.append(r)
