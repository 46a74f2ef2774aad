"""The scheduler seam: pure decisions about which tokens run in the next step.

``schedule(waiting, running)`` picks the step's prefill chunks and decodes (moving admitted
requests from ``waiting`` to ``running``, allocating KV blocks, preempting when blocks run
out) and returns a ``BatchPlan``. ``complete(plan, now)`` applies the step's outcome: tokens
prefilled and sampled, timestamps, finished requests freed. Neither knows how long a step takes:
the simulator asks the cost model, the NumPy reference engine runs the model and reads a clock.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmsim.costmodel.ops import BatchShape, chunk_pairs
from llmsim.decodeset import DecodeSet
from llmsim.kvcache import BlockManager
from llmsim.request import FINISHED, RUNNING, WAITING, Request

if TYPE_CHECKING:
    from llmsim.gaps import GapHistogram

TRANSFERRING = "transferring"  # disaggregated: prompt done, KV on its way to a decode replica


@dataclass
class SpecConfig:
    """Speculative decoding: ``k`` proposals per step, accepted left to right with ``acceptance[i]``
    the probability that proposal ``i`` is accepted given all earlier ones were."""

    k: int = 4
    acceptance: list[float] = field(default_factory=lambda: [0.7] * 4)
    seed: int = 0


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 256  # sequences in a batch (running set)
    max_batch_tokens: int = 8192  # tokens processed in one step
    chunk_tokens: int = 512  # chunked prefill: per-step token budget (decodes count against it)
    preemption: str = "recompute"  # "recompute" | "swap"
    chunk_budget: str = "fixed"  # "fixed" | "dynamic" (shrink the chunk when a step would exceed tbt_target_s)
    tbt_target_s: float = 0.0  # dynamic budget: predicted step time to stay under
    min_chunk_tokens: int = 64  # dynamic budget: never shrink below this
    prefill_only: bool = False  # disaggregated prefill pool: hand requests off after their prompt
    speculative: SpecConfig | None = None


@dataclass(init=False)
class BatchPlan:
    prefill: list[tuple[Request, int]]  # (request, new prompt tokens)
    decode: list[Request]
    preempted: list[Request]
    padding: list[Request]  # static batching: finished slots still computed
    swap_in_tokens: int  # KV tokens copied host -> device before this step
    swap_out_tokens: int  # KV tokens copied device -> host (swap preemption)
    spec_k: int  # speculative decoding: each decode verifies spec_k drafts (spec_k + 1 tokens)
    # columnar replicas: every member of this set decodes too; its size and Σ context when planned
    decode_set: DecodeSet | None
    set_n: int
    set_ctx: int

    def __init__(self) -> None:  # written out: compiled natively, one per step (see BatchShape)
        self.prefill = []
        self.decode = []
        self.preempted = []
        self.padding = []
        self.swap_in_tokens = self.swap_out_tokens = self.spec_k = 0
        self.decode_set = None
        self.set_n = self.set_ctx = 0

    @property
    def num_decode(self) -> int:
        return len(self.decode) + self.set_n

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.num_decode

    @property
    def prefill_tokens(self) -> int:
        return sum(c for _, c in self.prefill)

    @property
    def size(self) -> int:
        return len(self.prefill) + self.num_decode + len(self.padding)

    def shape(self, window: int | None = None, local_window: int | None = None) -> BatchShape:
        """The step's aggregates for the cost model (context = tokens already cached). Speculative
        verification of k drafts is priced as a (k+1)-token chunk per decoding sequence. Models that
        interleave local and global layers pass ``local_window`` too (``ModelSpec.attention_windows``)."""
        if local_window is not None:
            return dataclasses.replace(self.shape(window), local=self.shape(local_window))
        chunks = [(c, r.kv_tokens) for r, c in self.prefill]
        decodes = (*self.decode, *self.padding) if self.decode or self.padding else ()
        if self.spec_k:
            chunks += [(self.spec_k + 1, r.kv_tokens) for r in self.decode]
            decodes = tuple(self.padding)
        pairs = kv = score = p_tokens = 0
        for c, p in chunks:
            pairs += chunk_pairs(c, p, window)
            seen = p + c if window is None else min(p + c, window + c - 1)  # distinct keys the chunk sees
            kv += seen
            score += c * seen
            p_tokens += c
        d_ctx = n_dec = 0
        if decodes:  # parallel sampling: every sequence of a request decodes its own row
            if window is None:
                d_ctx = sum((r.kv_tokens + 1) * r.n_seqs for r in decodes)
            else:
                d_ctx = sum(min(r.kv_tokens + 1, window) * r.n_seqs for r in decodes)
            n_dec = sum(r.n_seqs for r in decodes)
        if self.set_n:  # each member's context plus its new token
            d_ctx += self.set_ctx + self.set_n
            n_dec += self.set_n
        sampled = 0
        for r, c in self.prefill:
            sampled += r.prefilled + c == r.prefill_target
        return BatchShape(
            prefill_tokens=p_tokens,
            prefill_seqs=len(chunks),
            prefill_attn_pairs=pairs,
            prefill_kv_tokens=kv,
            prefill_score_elems=score,
            decode_seqs=n_dec,
            decode_tokens=n_dec,
            decode_ctx_tokens=d_ctx,
            # only prompts that finish in this step are sampled; verification samples every position
            logits_rows=sampled + n_dec + len(self.decode) * (self.spec_k + 1 if self.spec_k else 0),
        )


class Scheduler:
    """Base class: admission checks, token bookkeeping and preemption shared by all policies."""

    name = "base"

    def __init__(self, cfg: SchedulerConfig, kv: BlockManager) -> None:
        self.cfg = cfg
        self.kv = kv
        self.gaps: GapHistogram | None = None  # fed with every inter-token gap, if set
        self.predict_s: Callable[[BatchShape], float] | None = None  # dynamic chunk budget only
        spec = cfg.speculative
        self._rng = random.Random(spec.seed) if spec else None
        self.spec_emitted = 0  # tokens emitted by verify steps
        self.spec_slots = 0  # (sequence, verify step) pairs
        # Columnar replicas (the simulator's fast path, decodeset.py): requests past their prompt
        # live in this set instead of ``running``, which then holds prompts in progress only.
        self.columns: DecodeSet | None = None
        self._admissions = 0

    def num_running(self, running: list[Request]) -> int:
        return len(running) + (self.columns.n if self.columns is not None else 0)

    def start_running(self, req: Request, running: list[Request]) -> None:
        """``req`` joins the running set (newest last: preemption takes the newest first)."""
        req.status = RUNNING
        req.admit_seq = self._admissions
        self._admissions += 1
        running.append(req)

    # ---- admission ---------------------------------------------------------------------
    def rejection_reason(self, req: Request) -> str:
        """Why a request can never be served here ('' if it can)."""
        total = req.prompt_tokens + max(req.output_tokens - 1, 0)
        blocks = self.kv.blocks_for_request(req, total)
        if blocks > self.kv.num_blocks:
            return f"needs {total} tokens of KV cache ({blocks} blocks), capacity is {self.kv.num_blocks} blocks"
        return ""

    def schedule(self, waiting: deque[Request], running: list[Request]) -> BatchPlan:  # pragma: no cover
        raise NotImplementedError

    # ---- shared pieces -----------------------------------------------------------------
    def _lookahead(self) -> int:
        spec = self.cfg.speculative
        return spec.k + 1 if spec else 1

    def _schedule_decodes(self, waiting: deque[Request], running: list[Request], plan: BatchPlan) -> None:
        """Give every running, fully prefilled request one decode slot, preempting the newest
        running requests (vLLM's policy) when the cache has no block for the next token."""
        ahead = self._lookahead()
        kv = self.kv
        cols = self.columns
        if cols is not None:
            self._join_columns(running)  # requests swapped back in
            need = cols.blocks_next()
            if need <= kv.free_blocks:
                if cols.n:
                    cols.allocate(need)
                    plan.decode_set, plan.set_n, plan.set_ctx = cols, cols.n, cols.ctx
                return
            # short of blocks: victims are chosen among all running requests, newest first
            running[:] = sorted([*running, *cols.flush()], key=_admit_seq)
        decoding = [r for r in running if r.prefilled >= r.prefill_target]
        # Fast path: the cache has room for every decode's next token(s), so nobody is preempted.
        bt = kv.block_tokens
        need = sum(
            (-(-(r.kv_tokens + ahead) // bt) - r.blocks) if r.n_seqs == 1 else kv.blocks_needed(r, ahead)
            for r in decoding
        )
        if need <= kv.free_blocks:
            for r in decoding:
                kv.allocate(r, ahead)
            plan.decode.extend(decoding)
            if plan.decode and self.cfg.speculative:
                plan.spec_k = self.cfg.speculative.k
            return
        i = 0
        while i < len(running):
            r = running[i]
            if r.in_prefill:
                i += 1
                continue
            need = self.kv.blocks_needed(r, ahead)
            while need > 0 and not self.kv.can_allocate(need):
                victim = running.pop()
                self._preempt(victim, waiting, plan)
                if victim is r:
                    break
            if r.status != RUNNING:
                break
            self.kv.allocate(r, ahead)
            plan.decode.append(r)
            i += 1
        if plan.decode and self.cfg.speculative:
            plan.spec_k = self.cfg.speculative.k

    def _preempt(self, victim: Request, waiting: deque[Request], plan: BatchPlan) -> None:
        if self.cfg.preemption == "swap" and victim.kv_tokens:
            plan.swap_out_tokens += victim.kv_tokens
            self.kv.free(victim)
            victim.preempt_for_swap()
        else:
            self.kv.free(victim)
            victim.preempt_for_recompute()
        victim.status = WAITING
        waiting.appendleft(victim)
        plan.preempted.append(victim)
        # a victim already planned for prefill in this step must not run
        plan.prefill = [(r, c) for r, c in plan.prefill if r is not victim]

    def _swap_in(self, waiting: deque[Request], running: list[Request], plan: BatchPlan) -> None:
        """Swapped-out requests come back first (vLLM's order), as blocks allow."""
        while waiting and waiting[0].swapped and self.num_running(running) < self.cfg.max_num_seqs:
            r = waiting[0]
            need = self.kv.blocks_for_request(r, r.kv_tokens + 1)
            # the watermark protects running requests' growth; an idle replica admits into it,
            # or a request needing more than capacity minus watermark would wait forever
            if not self.kv.can_allocate(need, admission=self.num_running(running) > 0):
                return
            waiting.popleft()
            plan.swap_in_tokens += self.kv.swap_in(r)
            self.start_running(r, running)

    def _try_admit(
        self, req: Request, budget: int, waiting: deque[Request], running: list[Request], whole: bool
    ) -> int:
        """Start prefilling the head of ``waiting`` with up to ``budget`` tokens (all of its prompt
        if ``whole``), after sharing any cached prefix. Returns the tokens to prefill, 0 if not admitted."""
        if req.swapped:
            return 0
        self.kv.match_prefix(req)
        c = min(req.prompt_remaining, budget)
        if c <= 0 or (whole and c < req.prompt_remaining):
            self.kv.unmatch(req)
            return 0
        if not self.kv.can_allocate(self.kv.blocks_needed(req, c), admission=self.num_running(running) > 0):
            self.kv.unmatch(req)  # (the watermark: see _swap_in)
            return 0
        waiting.popleft()
        self.kv.allocate(req, c)
        self.start_running(req, running)
        return c

    def _admit(self, req: Request, tokens: int, waiting: deque[Request], running: list[Request]) -> bool:
        """Try to start prefilling ``tokens`` of the head of ``waiting``; False if KV is short."""
        if not self.kv.can_allocate(self.kv.blocks_needed(req, tokens), admission=self.num_running(running) > 0):
            return False  # (the watermark: see _swap_in)
        waiting.popleft()
        self.kv.allocate(req, tokens)
        self.start_running(req, running)
        return True

    def complete(self, plan: BatchPlan, now: float, running: list[Request]) -> list[Request]:
        """Apply a finished step: advance tokens, stamp times, free finished requests. Requests
        handed off to a decode pool come back too, with status ``transferring``."""
        finished: list[Request] = []
        for r, c in plan.prefill:
            if r.queued_s != r.queued_s:  # NaN: first time scheduled
                r.queued_s = now
            r.prefilled += c
            r.kv_tokens += c
            if self.kv.prefix_caching:
                self.kv.commit(r)
            if r.prefilled == r.prefill_target:
                if self.cfg.prefill_only and r.generated == 0 and r.output_tokens > 1:
                    r.status = TRANSFERRING
                    finished.append(r)
                else:
                    self._emit(r, now, finished)
        if plan.spec_k:
            for r in plan.decode:
                self._emit_speculative(r, plan.spec_k, now, finished)
        else:
            for r in plan.decode:
                r.kv_tokens += 1
                self._emit(r, now, finished)
        if plan.decode_set is not None:
            finished += plan.decode_set.tick_once(now)
        if self.columns is not None:
            self._join_columns(running)
        elif finished:
            running[:] = [r for r in running if r.status == RUNNING]
        return finished

    def _join_columns(self, running: list[Request]) -> None:
        """Requests past their prompt move from ``running`` into the columnar set; others leave."""
        keep = []
        for r in running:
            if r.status != RUNNING:
                continue
            if r.prefilled < r.prefill_target:
                keep.append(r)
            else:
                self.columns.add(r)  # type: ignore[union-attr]
        running[:] = keep

    def _emit_speculative(self, r: Request, k: int, now: float, finished: list[Request]) -> None:
        acc = self.cfg.speculative.acceptance  # type: ignore[union-attr]
        accepted = 0
        while accepted < k and self._rng.random() < acc[accepted]:  # type: ignore[union-attr]
            accepted += 1
        n = min(accepted + 1, r.remaining_output)
        r.spec_steps += 1
        r.spec_accepted += accepted
        self.spec_emitted += n
        self.spec_slots += 1
        r.kv_tokens += n
        self.kv.tokens_held -= k + 1 - n  # look-ahead slots that hold rejected drafts
        # the n tokens of one verify step stream out together; spread the gap over them
        gap = (now - r.last_token_s) / n if r.generated else 0.0
        for _ in range(n):
            t = now if r.generated == 0 else r.last_token_s + gap
            self._emit(r, t, finished)
        r.last_token_s = now

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
        if r.generated >= r.output_tokens and r.status != FINISHED:
            r.finish_s = now
            r.status = FINISHED
            self.kv.free(r)
            finished.append(r)


def _admit_seq(r: Request) -> int:
    return r.admit_seq
