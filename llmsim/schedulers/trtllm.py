"""TensorRT-LLM's in-flight batching: GUARANTEED_NO_EVICT (its default), MAX_UTILIZATION or STATIC_BATCH.

TensorRT-LLM schedules a step in two passes (cpp/tensorrt_llm/batch_manager/, read at
NVIDIA/TensorRT-LLM@02a10fe and @0a949d3):

1. The capacity scheduler (``capacityScheduler.cpp``, ``GuaranteedNoEvictScheduler``) keeps every
   request already generating and sets aside the KV blocks each still needs to reach its full
   length (prompt + ``max_new_tokens``). Waiting requests then start in arrival order while their
   whole lifetime fits what is left; the first that does not fit stops the pass (no request
   overtakes it), and at most ``max_batch_size`` requests are scheduled. A started request is
   therefore never evicted: there is no preemption.
2. The micro-batch scheduler (``microBatchScheduler.cpp``) packs the step up to
   ``max_num_tokens``: every generating request one token, then the prompts in arrival order.
   Without chunked context (the default) a prompt runs whole, and the first that does not fit
   ends the step. With it (``enable_chunked_context``), the prompts share what the generating
   requests leave first come first served (``kFIRST_COME_FIRST_SERVED``, the default chunking
   policy): each takes all it has left, and a chunk cut short is rounded down to whole KV blocks
   (``chunkUnitSize`` = tokens per block), so a prompt can wait a step for room.

That is ``ChunkedScheduler``'s step (decodes, prompts in progress, then new prompts, in order)
with the lifetime reservation and TensorRT-LLM's chunk rule. Under the MAX_UTILIZATION capacity
policy (``policy.capacity_scheduler_policy: max_utilization``; ``MaxUtilizationScheduler``) no
lifetime is set aside: a prompt starts when the blocks its step needs are free, and when a step
is short of blocks the newest started requests are paused (their KV freed, recomputed later), as
``ChunkedScheduler`` preempts. Here ``policy.max_num_seqs`` is ``max_batch_size`` and
``policy.max_batch_tokens`` is ``max_num_tokens``. Under STATIC_BATCH
(``policy.capacity_scheduler_policy: static_batch``, ``StaticBatchScheduler``: GUARANTEED_NO_EVICT's
pass that considers waiting requests only while no started request generates) a batch starts whole
and the next waits for it to drain. Not modelled: STATIC_BATCH with chunked context (refused), the
EQUAL_PROGRESS chunking policy, and the capacity pass's deferral of a prompt whose first new
block another prompt in the step is about to write (``beneficialToSkip``, with block reuse on): a
waiting request whose prefix is cached reserves its whole lifetime, cached blocks included.
"""

from __future__ import annotations

from typing import ClassVar

from mypy_extensions import mypyc_attr

from llmsim.request import Request
from llmsim.schedulers.chunked import ChunkedScheduler
from llmsim.schedulers.plan import BatchPlan


@mypyc_attr(allow_interpreted_subclasses=True)
class TrtllmScheduler(ChunkedScheduler):
    name = "trtllm"
    columnar: ClassVar[bool] = False  # (the capacity pass reads every started request's lifetime: all stay in running)
    _spare: int = 0  # blocks no started request may still take (this step's capacity pass)

    def rejection_reason(self, req: Request) -> str:
        # without chunked context a prompt runs in one step, and one past max_num_tokens never
        # fits the micro-batch scheduler's token check: refused here rather than left waiting
        if not self.cfg.context_chunking and req.prompt_tokens > self.cfg.max_batch_tokens:
            return f"prompt of {req.prompt_tokens} tokens exceeds max_batch_tokens={self.cfg.max_batch_tokens}"
        return super().rejection_reason(req)

    @property
    def _no_evict(self) -> bool:
        """GUARANTEED_NO_EVICT's capacity rule (STATIC_BATCH's too): a started request's whole length set aside."""
        return self.cfg.capacity_policy != "max_utilization"

    def lifetime_tokens(self, req: Request) -> int:
        # TensorRT-LLM sets aside prompt + max_new_tokens (LlmRequest's, in
        # getRemainingBlocksToCompletion): one token more than the KV ever written; llmsim adds
        # the last verify step's proposals, which its speculative steps hold
        return req.prompt_tokens + req.output_tokens + self.final_step_reserve()

    def final_step_reserve(self) -> int:
        return self._lookahead() - 1  # (no preemption to fall back on: the base rule, not chunked's)

    def budget(self, plan: BatchPlan) -> int:
        return self.cfg.max_batch_tokens  # max_num_tokens, decodes included

    def prefill_cap(self, r: Request, budget: int) -> int:
        left = r.prompt_remaining
        if budget >= left:
            return left
        if not self.cfg.context_chunking:
            return 0  # a whole prompt or nothing
        return budget // self.kv.block_tokens * self.kv.block_tokens

    def _lifetime_blocks(self, r: Request) -> int:
        """Blocks ``r`` holds at its full length (``lifetime_tokens``)."""
        return self.kv.blocks_for_request(r, self.lifetime_tokens(r))

    def schedule(self) -> BatchPlan:
        assert self.columns is None  # (Scheduler.columnar: every started request stays in running)
        if not self._no_evict:  # MAX_UTILIZATION: chunked's admission on what the step needs
            return super().schedule()
        # capacity: what stays free once every started request is driven to completion (with
        # pipeline parallelism, the requests of micro-batches in flight too); the decodes' and
        # prompts-in-progress' blocks come out of this reservation, so it holds through the step
        started = [*self.running, *self._flight]
        # (a request never gives blocks back to the pool before it ends: what it holds past its
        # lifetime's count, speculative look-ahead slots, frees nothing for others)
        self._spare = self.kv.free_blocks - sum(max(self._lifetime_blocks(r) - r.blocks, 0) for r in started)
        return super().schedule()

    def may_admit(self, plan: BatchPlan) -> bool:
        # STATIC_BATCH: pending requests are considered only when no started request is generating
        # (GuaranteedNoEvictScheduler::impl<true>: "only when no requests are active"); then
        # every one that fits starts, as under GUARANTEED_NO_EVICT
        if self.cfg.capacity_policy != "static_batch":
            return True
        return all(r.in_prefill for r in (*self.running, *self._flight))

    def _may_start(self, r: Request) -> bool:
        return not self._no_evict or self._lifetime_blocks(r) <= self._spare

    def _started(self, r: Request) -> None:
        if self._no_evict:
            self._spare -= self._lifetime_blocks(r)

    def _passes_over(self, r: Request, budget: int) -> bool:
        # with chunked context a prompt the step has no whole block left for gets no chunk, and
        # the prompts after it still get theirs (setCtxRequestsChunkSize<kFIRST_COME_FIRST_SERVED>
        # goes on); its lifetime stays set aside, as the capacity pass that scheduled it set it
        if not self.cfg.context_chunking or self.prefill_cap(r, budget) > 0:
            return False
        self._started(r)  # (under GUARANTEED_NO_EVICT its lifetime stays set aside)
        return True
