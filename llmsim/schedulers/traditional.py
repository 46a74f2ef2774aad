"""Traditional continuous batching (vLLM's original scheduler) and static batching.

Traditional: whenever prompts wait and fit, the step prefills whole prompts only (prefill has
priority, so running decodes stall for that step); otherwise every running request decodes.
Static: a batch is admitted only when the previous one has fully finished, and every slot keeps
being computed until the longest request in the batch is done (HF ``generate`` style padding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from llmsim.costmodel.ops import BatchShape
from llmsim.kvcache import BlockManager
from llmsim.request import Request
from llmsim.schedulers.base import Scheduler, SchedulerConfig
from llmsim.schedulers.plan import BatchPlan, DecodeColumns

if TYPE_CHECKING:
    from llmsim.gaps import GapHistogram


# open to interpreted subclasses as its base is: else mypyc's freed instance keeps its KV manager
# and decode set (a replica's ~37 KB a run; tests/test_schedulers.py)
@mypyc_attr(allow_interpreted_subclasses=True)
class TraditionalScheduler(Scheduler):
    name = "traditional"

    def rejection_reason(self, req: Request) -> str:
        if req.prompt_tokens > self.cfg.max_batch_tokens:
            return f"prompt of {req.prompt_tokens} tokens exceeds max_batch_tokens={self.cfg.max_batch_tokens}"
        return super().rejection_reason(req)

    def schedule(self) -> BatchPlan:
        plan = BatchPlan()
        self._swap_in(plan)
        waiting = self.waiting
        tokens = 0
        loras = self.active_loras()
        skipped: list[Request] = []  # multi-LoRA: passed over (see ChunkedScheduler.schedule)
        while waiting and self.num_running() < self.cfg.max_num_seqs:
            r = waiting[0]
            if loras is not None and self.lora_blocked(r, loras):
                skipped.append(waiting.popleft())
                continue
            # a recomputed request (prompt + generated) may exceed the budget: it then runs alone
            budget = self.cfg.max_batch_tokens - tokens if tokens else 1 << 62
            need = self._try_admit(r, budget, whole=True)
            if not need:
                break
            if loras is not None and r.lora_id >= 0:
                loras.add(r.lora_id)
            plan.prefill.append((r, need))
            tokens += need
        if skipped:
            waiting.extendleft(reversed(skipped))
        if plan.prefill:
            return plan
        self._schedule_decodes(plan)
        return plan


# open to interpreted subclasses as its base is: else mypyc's freed instance keeps its KV manager
# and decode set (a replica's ~37 KB a run; tests/test_schedulers.py)
@mypyc_attr(allow_interpreted_subclasses=True)
class StaticScheduler(TraditionalScheduler):
    """Shares traditional's admission rule (whole prompts within max_batch_tokens)."""

    name = "static"

    def __init__(
        self,
        cfg: SchedulerConfig,
        kv: BlockManager,
        gaps: GapHistogram | None = None,
        predict_s: Callable[[BatchShape], float] | None = None,
        columns: DecodeColumns | None = None,
    ) -> None:
        super().__init__(cfg, kv, gaps, predict_s, columns)
        self.batch: list[Request] = []

    def schedule(self) -> BatchPlan:
        plan = BatchPlan()
        waiting, running = self.waiting, self.running
        if not running:
            self.batch = []
            tokens = 0
            while waiting and len(running) < self.cfg.max_num_seqs:
                r = waiting[0]
                # reserve the request's whole lifetime up front: a static batch never preempts
                total = r.prompt_remaining + max(r.output_tokens - r.generated - 1, 0)
                if tokens + r.prompt_remaining > self.cfg.max_batch_tokens:
                    break
                if not self._admit(r, total):
                    break
                plan.prefill.append((r, r.prompt_remaining))
                tokens += r.prompt_remaining
                self.batch.append(r)
            return plan
        plan.decode = [r for r in running if not r.in_prefill]
        # finished members still occupy their slot and are computed as padding
        plan.padding = [r for r in self.batch if r.status != "running"]
        return plan
