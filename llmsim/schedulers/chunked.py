"""Chunked prefill (Sarathi-Serve's stall-free batching).

Every step first carries all running decodes, then fills the rest of a per-step token budget
(``chunk_tokens``) with prompt chunks: first the prompts already partly prefilled, then new
ones. A prompt's first token is sampled only after its last chunk, and each chunk attends to
all earlier chunks of its prompt through the cache.

With ``chunk_budget: dynamic`` the budget halves (down to ``min_chunk_tokens``) while the
predicted step time of the decodes plus the chunk exceeds ``tbt_target_s``: decodes keep their
TBT when the batch is large and long prompts finish faster when it is small.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from llmsim.costmodel.ops import batch_shape
from llmsim.request import Request
from llmsim.schedulers.base import Scheduler
from llmsim.schedulers.plan import BatchPlan


# open to interpreted subclasses as its base is: else mypyc's freed instance keeps its KV manager
# and decode set (a replica's ~37 KB a run; tests/test_schedulers.py)
@mypyc_attr(allow_interpreted_subclasses=True)
class ChunkedScheduler(Scheduler):
    name = "chunked"

    def budget(self, plan: BatchPlan) -> int:
        """Token budget of the next step, decodes included."""
        cfg = self.cfg
        b = cfg.chunk_tokens
        if cfg.chunk_budget != "dynamic" or self.predict_s is None or cfg.tbt_target_s <= 0:
            # (predict_s is never None with a dynamic budget: make_scheduler refuses that)
            return b
        past = next((r.kv_tokens for r in self.running if r.in_prefill), 0)
        contexts = [r.kv_tokens for r in plan.decode]
        lookahead = plan.spec_k + 1 if plan.spec_k else 1
        # speculative verification as the step will be priced (BatchPlan.shape): k+1 decode tokens
        # per request where the model verifies in its decode kernel, else a (k+1)-token chunk each
        # (the same rule as BatchPlan.shape's; tests/test_schedulers.py holds the two equal)
        as_chunks = bool(plan.spec_k) and not cfg.spec_as_decode
        verify = [(lookahead, c) for c in contexts] if as_chunks else []
        decodes, per_decode = ([], 1) if as_chunks else (contexts, lookahead)
        while b > cfg.min_chunk_tokens:
            chunk = max(b - len(plan.decode) * lookahead, 1)
            shape = batch_shape([(chunk, past), *verify], decodes, cfg.window, per_decode, cfg.local_window)
            # the chunk taken to finish its prompt, and every verified position sampled
            shape.logits_rows = 1 + len(contexts) * lookahead
            if self.predict_s(shape) <= cfg.tbt_target_s:
                break
            b //= 2
        return max(b, cfg.min_chunk_tokens)

    def may_admit(self, plan: BatchPlan) -> bool:
        """May waiting requests start in this step (after the running ones were planned)?"""
        return True

    def _may_start(self, r: Request) -> bool:
        """May the head of the queue start beside the started requests (its blocks aside)?"""
        return True

    def _started(self, r: Request) -> None:
        """``r`` has just started (a policy that sets blocks aside for it counts them here)."""

    def _chunk_planned(self, r: Request, chunk: int) -> None:
        """``r`` computes ``chunk`` prompt tokens in the step being planned (its blocks are held)."""

    def _passes_over(self, r: Request, budget: int) -> bool:
        """The head of the queue gets no tokens this step: may the next waiting request still
        start (True), or does the step end here (False, this policy's rule)?"""
        return False

    def final_step_reserve(self) -> int:
        # a request whose verify step cannot hold its k proposals is preempted and recomputed;
        # the recompute's prefill samples the next token, so it still finishes (slowly)
        return 0

    def schedule(self) -> BatchPlan:
        plan = self._plan(swap_in=True)
        running = self.running
        while plan.empty and len(running) > 1 and any(r.in_prefill for r in running):
            # partial prompts fill the cache and none can grow (pipelined micro-batches admit
            # several at once): preempt the newest so the others can finish, or they wait forever;
            # if a newer one is in flight, wait for it to land and preempt it then. The plan is
            # made again without swapping anyone in (vLLM v0 swaps in nothing in a step that
            # preempted: a victim swapped out would come straight back, for ever)
            if self._newer_in_flight(running[-1]):
                return plan
            self._preempt(running.pop(), plan)
            again = self._plan(swap_in=False)
            again.preempted[:0] = plan.preempted
            again.swap_out_tokens += plan.swap_out_tokens
            plan = again
        return plan

    def _plan(self, swap_in: bool) -> BatchPlan:
        plan = BatchPlan()
        if swap_in:
            self._swap_in(plan)
        self._schedule_decodes(plan)
        if not self.waiting and not any(r.in_prefill for r in self.running):
            return plan
        lookahead = plan.spec_k + 1 if plan.spec_k else 1
        budget = self.budget(plan) - plan.num_decode * lookahead
        budget = self._continue_prompts(plan, budget)
        self._start_prompts(plan, budget)
        return plan

    def _room_for(self, r: Request, blocks: int, plan: BatchPlan) -> bool:
        """May ``r``, a prompt in progress short of ``blocks`` free blocks, go on this step? This
        policy's rule: no, and no later prompt in progress either (a policy that preempts for
        it frees them here)."""
        return False

    def _continue_prompts(self, plan: BatchPlan, budget: int) -> int:
        """Give the prompts already being prefilled their chunks, in order. Returns the budget left."""
        for r in self.running:
            if budget <= 0:
                break
            if r.in_prefill:
                c = self.prefill_cap(r, budget)
                if c <= 0:  # (where a policy's chunks come in whole blocks, trtllm: the next may fit whole)
                    continue
                need = self.kv.blocks_needed(r, c)
                if not self.kv.can_allocate(need) and not self._room_for(r, need, plan):
                    break
                self.kv.allocate(r, c)
                plan.prefill.append((r, c))
                self._chunk_planned(r, c)
                budget -= c
        return budget

    def _start_prompts(self, plan: BatchPlan, budget: int) -> None:
        """Start waiting requests in queue order with what the budget leaves (multi-LoRA: one whose
        adapter would exceed max_loras is passed over; those passed over go back to the head of
        the queue, in order, as vLLM v1 puts them back)."""
        waiting, running = self.waiting, self.running
        loras = self.active_loras()
        skipped: list[Request] = []
        while budget > 0 and waiting and self.num_running() < self.cfg.max_num_seqs and self.may_admit(plan):
            if not self._may_start(waiting[0]):
                break
            if loras is not None and self.lora_blocked(waiting[0], loras):
                skipped.append(waiting.popleft())
                continue
            c = self._try_admit(waiting[0], budget, whole=False)
            if not c:
                if self._passes_over(waiting[0], budget):
                    skipped.append(waiting.popleft())
                    continue
                break
            r = running[-1]
            self._started(r)
            if loras is not None and r.lora_id >= 0:
                loras.add(r.lora_id)
            plan.prefill.append((r, c))
            self._chunk_planned(r, c)
            budget -= c
        if skipped:
            waiting.extendleft(reversed(skipped))
