"""Chunked prefill (Sarathi-Serve's stall-free batching).

Every step first carries all running decodes, then fills the rest of a per-step token budget
(``chunk_tokens``) with prompt chunks: first the prompts already partly prefilled, then new
ones. A prompt's first token is sampled only after its last chunk, and each chunk attends to
all earlier chunks of its prompt through the cache.
"""

from __future__ import annotations

from collections import deque

from llmsim.request import Request
from llmsim.schedulers.base import BatchPlan, Scheduler


class ChunkedScheduler(Scheduler):
    name = "chunked"

    def budget(self) -> int:
        """Token budget of the next step (a dynamic policy can override this)."""
        return self.cfg.chunk_tokens

    def schedule(self, waiting: deque[Request], running: list[Request]) -> BatchPlan:
        plan = BatchPlan()
        self._schedule_decodes(waiting, running, plan)
        budget = self.budget() - len(plan.decode)
        # 1. continue prompts already being prefilled
        for r in running:
            if budget <= 0:
                break
            if r.in_prefill:
                c = min(r.prompt_remaining, budget)
                if not self.kv.can_allocate(self.kv.blocks_needed(r, c)):
                    break
                self.kv.allocate(r, c)
                plan.prefill.append((r, c))
                budget -= c
        # 2. start new prompts
        while budget > 0 and waiting and len(running) < self.cfg.max_num_seqs:
            r = waiting[0]
            c = min(r.prompt_remaining, budget)
            if not self._admit(r, c, waiting, running):
                break
            plan.prefill.append((r, c))
            budget -= c
        return plan
