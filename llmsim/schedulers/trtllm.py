"""TensorRT-LLM's in-flight batching under its default capacity policy, GUARANTEED_NO_EVICT.

TensorRT-LLM schedules a step in two passes (cpp/tensorrt_llm/batch_manager/, read at
NVIDIA/TensorRT-LLM@02a10fe and @0a949d3):

1. The capacity scheduler (``capacityScheduler.cpp``, ``GuaranteedNoEvictScheduler``) keeps every
   request already generating and sets aside the KV blocks each still needs to reach its full
   length (prompt + ``max_new_tokens``). Waiting requests then start in arrival order while their
   whole lifetime fits what is left; the first that does not fit stops the pass (no request
   overtakes it), and at most ``max_batch_size`` requests are scheduled. A started request is
   therefore never evicted: there is no preemption.
2. The micro-batch scheduler (``microBatchScheduler.cpp``) walks those requests in order and
   packs the step up to ``max_num_tokens``: a generating request costs one token, a new context
   its whole prompt (chunked context is off by default); the first request that does not fit
   ends the step. Contexts and generations share the step (in-flight batching).

Here ``policy.max_num_seqs`` is ``max_batch_size`` and ``policy.max_batch_tokens`` is
``max_num_tokens``. Not modelled: chunked context (``enable_chunked_context``), the
MAX_UTILIZATION and STATIC_BATCH capacity policies, and the capacity pass's skipping of a context
whose first new block another scheduled context is about to write (``beneficialToSkip``, with
block reuse on): a waiting request whose prefix is cached reserves its whole lifetime, cached
blocks included.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from llmsim.request import Request
from llmsim.schedulers.plan import BatchPlan
from llmsim.schedulers.traditional import TraditionalScheduler


# (traditional's admission rule: whole prompts, a prompt past max_batch_tokens refused, as
# TensorRT-LLM refuses one past max_num_tokens without chunked context: "The number of context
# tokens (%d) exceeds the limit value")
@mypyc_attr(allow_interpreted_subclasses=True)
class TrtllmScheduler(TraditionalScheduler):
    name = "trtllm"
    _spare: int = 0  # blocks no started request may still take (this step's capacity pass)

    def _lifetime_blocks(self, r: Request) -> int:
        """Blocks ``r`` holds at its full length (``lifetime_tokens``)."""
        return self.kv.blocks_for_request(r, self.lifetime_tokens(r))

    def schedule(self) -> BatchPlan:
        plan = BatchPlan()
        # capacity: what stays free once every started request is driven to completion
        # (with pipeline parallelism, the requests of micro-batches in flight too)
        started = [*self.running, *self._flight]
        self._spare = self.kv.free_blocks - sum(self._lifetime_blocks(r) - r.blocks for r in started)
        self._schedule_decodes(plan)  # (their blocks come out of the reservation: spare is unchanged)
        # then whole prompts in arrival order; the first whose lifetime does not fit stops
        # admission (nobody overtakes it); a multi-LoRA request is passed over as the capacity
        # pass passes over one whose adapter's pages do not fit (TensorRT-LLM's PEFT cache)
        self._admit_whole_prompts(plan, len(plan.decode))
        return plan

    def _may_start(self, r: Request) -> bool:
        return self._lifetime_blocks(r) <= self._spare

    def _started(self, r: Request) -> None:
        self._spare -= self._lifetime_blocks(r)
