"""The scheduler seam: pure decisions about which tokens run in the next step.

A scheduler owns its replica's queue and running set (nano-vllm's shape: state in one owner).
``add(req)`` queues an arrival; ``schedule()`` picks the step's prefill chunks and decodes
(moving admitted requests from ``waiting`` to ``running``, allocating KV blocks, preempting when
blocks run out) and returns a ``BatchPlan``; ``complete(plan, now)`` applies the step's outcome:
tokens prefilled and sampled, timestamps, finished requests freed. Neither knows how long a step
takes: the simulator prices the plan with the cost model, the NumPy reference engine runs it and
reads a clock.

Collaborators come in through the constructor, built by ``make_scheduler`` the same way for the
simulator and the reference engine: the KV block manager, a TBT histogram to feed (``gaps``), a
step-time predictor for the dynamic chunk budget (``predict_s``), and optionally a columnar set
for decoding requests (``columns``, the simulator's fast path; see ``plan.DecodeColumns``).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from mypy_extensions import mypyc_attr

from llmsim.costmodel.ops import BatchShape
from llmsim.kvcache import BlockManager
from llmsim.request import FINISHED, RUNNING, WAITING, Request, admit_order
from llmsim.schedulers.plan import BatchPlan, DecodeColumns
from llmsim.schedulers.queue import enqueue

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
    # ... and stream the prompt's first token from here, before the KV moves (DistServe), rather
    # than from the decode replica once it lands (vLLM's P/D: EngineSpec.first_token_at_prefill)
    first_token_at_prefill: bool = False
    speculative: SpecConfig | None = None
    queue_order: str = "fcfs"  # where an arrival joins the queue (schedulers/queue.py)
    max_bypass: int = 16  # starvation protection for non-FCFS queue orders
    # vLLM's scheduler (schedulers/vllm.py): admit only when the whole prompt fits; cap a prompt's tokens per step
    reserve_full_prompt: bool = True
    long_prefill_token_threshold: int = 0
    long_prefill_adaptive: bool = False  # ... floored at chunk_tokens / requests running or waiting
    # TensorRT-LLM's scheduler (schedulers/trtllm.py): split prompts over steps (enable_chunked_context)
    context_chunking: bool = False
    # ... and its capacity policy (policy.capacity_scheduler_policy): "guaranteed_no_evict" sets a
    # started request's whole length aside; "max_utilization" admits on what a step needs and pauses
    # the newest when short; "static_batch" is the first that starts new requests only while none generates
    capacity_policy: str = "guaranteed_no_evict"
    # the engine's context limit (vLLM's max_model_len; 0 = none): prompt + requested output must fit
    max_model_len: int = 0
    max_loras: int = 0  # multi-LoRA: distinct adapters the running set may use (0 = LoRA off)
    # the model's attention windows (ModelSpec.attention_windows), for the shapes the dynamic budget
    # predicts: a windowed or sparse-attention model priced without them would read its whole context
    window: int | None = None
    local_window: int | None = None
    spec_as_decode: bool = False  # ModelSpec.spec_as_decode: how the model's verification steps are priced


@mypyc_attr(allow_interpreted_subclasses=True)  # a policy may be plain Python (register_policy)
class Scheduler:
    """Base class: admission checks, token bookkeeping and preemption shared by all policies."""

    name = "base"
    # may the simulator keep this policy's decoding requests in a columnar set (plan.DecodeColumns,
    # fastpath.shortcuts) rather than in ``running``? Not where a step reads each one's own figures
    columnar: ClassVar[bool] = True

    def __init__(
        self,
        cfg: SchedulerConfig,
        kv: BlockManager,
        gaps: GapHistogram | None = None,
        predict_s: Callable[[BatchShape], float] | None = None,
        columns: DecodeColumns | None = None,
    ) -> None:
        self.cfg = cfg
        self.kv = kv
        self.gaps = gaps  # fed with every inter-token gap, if given
        self.predict_s = predict_s  # step seconds of a shape: the dynamic chunk budget asks it
        # Columnar decoders (the simulator's fast path): requests past their prompt live in this
        # set instead of ``running``, which then holds prompts in progress only.
        self.columns = columns
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # newest last: preemption takes the newest first
        self._bypassed: dict[int, int] = {}  # overtakes per request id (queue orders)
        spec = cfg.speculative
        self._rng = random.Random(spec.seed) if spec else None
        self.spec_emitted = 0  # tokens emitted by verify steps
        self.spec_slots = 0  # (sequence, verify step) pairs
        self._admissions = 0
        self._held = 0  # pipelining: requests of micro-batches in flight (out of ``running``, still running)
        self._flight: list[Request] = []  # those requests (a preemption looks at their admission order)

    # ---- the replica's view ------------------------------------------------------------
    def add(self, req: Request) -> None:
        """An arrival joins the queue, where the queue order puts it."""
        enqueue(self.waiting, req, self.cfg.queue_order, self._bypassed, self.cfg.max_bypass)

    def num_running(self) -> int:
        return len(self.running) + self._held + (self.columns.n if self.columns is not None else 0)

    def has_work(self) -> bool:
        return bool(self.waiting) or self.num_running() > 0

    def start_running(self, req: Request) -> None:
        """``req`` joins the running set (newest last: preemption takes the newest first)."""
        req.status = RUNNING
        req.admit_seq = self._admissions
        self._admissions += 1
        self.running.append(req)

    def resume_prefilled(self, req: Request, now: float) -> None:
        """Disaggregated decode side: a request arrives with its prompt's KV (already in ``kv``)
        and its first token, which reaches the user now unless the prefill replica streamed it
        (``first_token_at_prefill``); it decodes from the next step."""
        req.prefill_only = False
        req.status = RUNNING
        if req.generated == 0:
            self._emit(req, now, [])
        self.start_running(req)

    def hold(self, plan: BatchPlan) -> list[Request]:
        """Pipelining: the plan's requests leave the running set while their micro-batch is in
        flight (the next micro-batch must not schedule them again). Returns them."""
        members = [r for r, _ in plan.prefill] + list(plan.decode)
        ids = {id(r) for r in members}
        self.running[:] = [r for r in self.running if id(r) not in ids]
        self._held += len(members)
        self._flight.extend(members)
        return members

    def release(self, members: list[Request]) -> None:
        """Pipelining: a landed micro-batch's requests that still run rejoin the running set,
        in admission order (newest last), so a preemption still takes the newest first."""
        self._held -= len(members)
        ids = {id(r) for r in members}
        self._flight[:] = [r for r in self._flight if id(r) not in ids]
        self.running.extend(r for r in members if r.status == RUNNING)
        self.running.sort(key=admit_order)

    def _newer_in_flight(self, req: Request) -> bool:
        """Pipelining: is a request admitted after ``req`` in a micro-batch in flight? Then it,
        not ``req``, is the newest and the one to preempt once it lands: ``req`` preempting
        itself instead lets two requests evict each other for ever."""
        return any(r.admit_seq > req.admit_seq for r in self._flight)

    # ---- admission ---------------------------------------------------------------------
    def rejection_reason(self, req: Request) -> str:
        """Why a request can never be served here ('' if it can)."""
        limit = self.cfg.max_model_len
        if limit and req.prompt_tokens + req.output_tokens > limit:
            # vLLM's OpenAI server answers 400 (max_tokens > max_model_len - prompt): never scheduled
            return (
                f"prompt of {req.prompt_tokens} tokens + {req.output_tokens} output tokens "
                f"exceeds max_model_len={limit}"
            )
        extra = self.final_step_reserve()
        total = self.lifetime_tokens(req)
        blocks = self.kv.blocks_for_request(req, total)
        if blocks > self.kv.num_blocks:
            why = f", {extra} of them the last verify step's speculative.k proposals" if extra else ""
            cap = self.kv.num_blocks
            return f"needs {total} tokens of KV cache ({blocks} blocks{why}), capacity is {cap} block{'s' * (cap != 1)}"
        return ""

    def lifetime_tokens(self, req: Request) -> int:
        """KV tokens ``req`` holds here at its longest: its prompt, every output token but the last
        (whose KV is never written) and the last verify step's proposals."""
        # a disaggregated prefill pool holds the prompt's KV only (the answer grows on the decode side)
        answer = 0 if self.cfg.prefill_only else max(req.output_tokens - 1, 0)
        return req.prompt_tokens + answer + self.final_step_reserve()

    def schedule(self) -> BatchPlan:  # pragma: no cover
        raise NotImplementedError

    def final_step_reserve(self) -> int:
        """KV tokens beyond its last context a request must be able to hold to finish here.
        Speculation: each decode step reserves its k proposed tokens too; a request whose last
        steps cannot hold them is preempted, and here it comes back only when its whole
        recomputed prompt fits, in a step that preempted nobody, so it cycles without progress
        (a no_stall violation, mtp k=1e6): it is rejected instead. ``ChunkedScheduler``'s
        recompute makes progress and needs none of it."""
        return self._lookahead() - 1

    # ---- shared pieces -----------------------------------------------------------------
    def _lookahead(self) -> int:
        spec = self.cfg.speculative
        return spec.k + 1 if spec else 1

    def _schedule_decodes(self, plan: BatchPlan) -> None:
        """Give every running, fully prefilled request one decode slot, preempting the newest
        running requests (vLLM's policy) when the cache has no block for the next token."""
        running = self.running
        ahead = self._lookahead()
        kv = self.kv
        cols = self.columns
        if cols is not None:
            self._join_columns()  # requests swapped back in
            need = cols.blocks_next()
            if need <= kv.free_blocks:
                if cols.n:
                    cols.allocate(need)
                    plan.decode_set, plan.set_n, plan.set_ctx = cols, cols.n, cols.ctx
                return
            # short of blocks: victims are chosen among all running requests, newest first
            running[:] = sorted([*running, *cols.flush()], key=admit_order)
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
            waits = False
            while need > 0 and not self.kv.can_allocate(need):
                if running[-1] is r and self._newer_in_flight(r):
                    waits = True  # for the newer request to land (pipeline.py waits for it)
                    break
                victim = running.pop()
                self._preempt(victim, plan)
                if victim is r:
                    break
            if waits or r.status != RUNNING:
                break
            self.kv.allocate(r, ahead)
            plan.decode.append(r)
            i += 1
        if plan.decode and self.cfg.speculative:
            plan.spec_k = self.cfg.speculative.k

    def _preempt(self, victim: Request, plan: BatchPlan) -> None:
        if self.cfg.preemption == "swap" and victim.kv_tokens:
            plan.swap_out_tokens += victim.kv_tokens
            self.kv.free(victim)
            victim.preempt_for_swap()
        else:
            self.kv.free(victim)
            victim.preempt_for_recompute()
        victim.status = WAITING
        self.waiting.appendleft(victim)
        plan.preempted.append(victim)
        # a victim already planned for prefill in this step must not run
        plan.prefill = [(r, c) for r, c in plan.prefill if r is not victim]

    def _swap_in(self, plan: BatchPlan) -> None:
        """Swapped-out requests come back first (vLLM's order), as blocks allow."""
        waiting = self.waiting
        while waiting and waiting[0].swapped and self.num_running() < self.cfg.max_num_seqs:
            r = waiting[0]
            need = self.kv.blocks_for_request(r, r.kv_tokens + 1)
            # the watermark protects running requests' growth; an idle replica admits into it,
            # or a request needing more than capacity minus watermark would wait forever
            if not self.kv.can_allocate(need, admission=self.num_running() > 0):
                return
            waiting.popleft()
            plan.swap_in_tokens += self.kv.swap_in(r)
            self.start_running(r)

    def active_loras(self) -> set[int] | None:
        """Multi-LoRA: the adapters of the running requests (None with LoRA off)."""
        if not self.cfg.max_loras:
            return None
        return {r.lora_id for r in self.running if r.lora_id >= 0}

    def lora_blocked(self, req: Request, loras: set[int]) -> bool:
        """Would admitting ``req`` take the running set past ``max_loras`` adapters? vLLM v1 then
        passes it over and tries the next waiting request (scheduler.py: "Check that adding the
        request still respects the max_loras constraint", into skipped_waiting_requests)."""
        a = req.lora_id
        return a >= 0 and a not in loras and len(loras) >= self.cfg.max_loras

    def _try_admit(self, req: Request, budget: int, whole: bool) -> int:
        """Start prefilling the head of ``waiting`` with up to ``budget`` tokens (all of its prompt
        if ``whole``), after sharing any cached prefix. Returns the tokens to prefill, 0 if not admitted."""
        if req.swapped:
            return 0
        self.kv.match_prefix(req)
        c = self.prefill_cap(req, budget)
        if c <= 0 or (whole and c < req.prompt_remaining):
            self.kv.unmatch(req)
            return 0
        need = self.kv.blocks_needed(req, self.admission_tokens(req, c))
        if not self.kv.can_allocate(need, admission=self.num_running() > 0):
            self.kv.unmatch(req)  # (the watermark: see _swap_in)
            return 0
        self.waiting.popleft()
        self.kv.allocate(req, c)
        self.start_running(req)
        return c

    def prefill_cap(self, r: Request, budget: int) -> int:
        """Prompt tokens ``r`` may take this step: all it has left, up to the budget."""
        return min(r.prompt_remaining, budget)

    def admission_tokens(self, req: Request, chunk: int) -> int:
        """Tokens whose blocks must be free to admit ``req`` with a first chunk of ``chunk``."""
        return chunk

    def _admit(self, req: Request, tokens: int) -> bool:
        """Try to start prefilling ``tokens`` of the head of ``waiting``; False if KV is short."""
        if not self.kv.can_allocate(self.kv.blocks_needed(req, tokens), admission=self.num_running() > 0):
            return False  # (the watermark: see _swap_in)
        self.waiting.popleft()
        self.kv.allocate(req, tokens)
        self.start_running(req)
        return True

    def complete(self, plan: BatchPlan, now: float) -> list[Request]:
        """Apply a finished step: advance tokens, stamp times, free finished requests. Requests
        handed off to a decode pool come back too, with status ``transferring``."""
        finished: list[Request] = []
        for r, c in plan.prefill:
            r.prefill_chunk(c, now)
            if self.kv.prefix_caching:
                self.kv.commit(r)
            if r.prefilled == r.prefill_target:
                if self.cfg.prefill_only and r.generated == 0 and r.output_tokens > 1:
                    if self.cfg.first_token_at_prefill:
                        self._emit(r, now, finished)  # (not its last token: it has two or more)
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
            self._join_columns()
        elif finished:
            self.running[:] = [r for r in self.running if r.status == RUNNING]
        return finished

    def _join_columns(self) -> None:
        """Requests past their prompt move from ``running`` into the columnar set; others leave."""
        for r in self.running:  # (most steps: nobody moves, every request here is mid-prompt)
            if r.status != RUNNING or r.prefilled >= r.prefill_target:
                break
        else:
            return
        keep = []
        for r in self.running:
            if r.status != RUNNING:
                continue
            if r.prefilled < r.prefill_target:
                keep.append(r)
            else:
                self.columns.add(r)  # type: ignore[union-attr]
        self.running[:] = keep

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
        # the n tokens of one verify step stream out together, as one chunk: the client sees one gap
        # (vllm bench serve's ITL and a request's worst gap are per chunk:
        # vllm/benchmarks/lib/endpoint_request_func.py, 0.32), the chunk's other tokens none
        for i in range(n):
            self._emit(r, now, finished, i == 0)

    def _emit(self, r: Request, now: float, finished: list[Request], new_chunk: bool = True) -> None:
        if r.output_tokens > r.generated:
            if r.generated == 0:
                r.first_token_s = now
            elif new_chunk:
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
            if self.kv.prefix_caching:  # its answer's full blocks stay cached for the next turn (vLLM)
                self.kv.commit(r)
            self.kv.free(r)
            finished.append(r)
