"""vLLM v1's scheduler (``vllm/v1/core/sched/scheduler.py``, vLLM 0.19-0.32), on llmsim's seams.

One token budget per step (``max_num_batched_tokens``, here ``chunk_tokens``) is spent on the
running requests first, in the order they were admitted (decodes take one token, a prompt in
progress the rest of its prompt up to the budget and ``long_prefill_token_threshold``), then on
waiting requests in queue order, each admitted with as many prompt tokens as the budget leaves.
Differences from llmsim's ``chunked`` policy, each from the code:

* admission reserves the whole prompt (``scheduler_reserve_full_isl``, on by default): a waiting
  request starts only if the blocks for all of its uncached prompt are free, not just its chunk;
* ``long_prefill_token_threshold`` (0 = off) caps the tokens one prompt takes per step, unless it
  is the only request;
* no admission watermark (the engine preset sets ``kv_cache.watermark: 0``);
* prefix hits are whole cached blocks and leave the prompt's last token to compute (``kvcache``);
* a running request short of a block, decoding or mid-prompt, preempts the newest running request
  by recompute (itself last), and then no waiting request starts in that step
  (``if not preempted_reqs``, scheduler.py:900 in 0.32).

vLLM walks the running requests in one loop, in admission order, each taking its tokens from the
budget in turn. llmsim plans decodes first and prompts in progress after (``ChunkedScheduler``),
which decides the same wherever no prompt in progress is older than a decoding request (only a
request admitted behind a prompt capped by ``long_prefill_token_threshold`` can overtake it), or
where every running request gets all it asks. Elsewhere the step is planned with vLLM's loop itself
(``_plan_in_order``), and a decode the budget does not reach waits for the next step as it does in
vLLM; except with speculative decoding (vLLM then cuts a late decode's proposals to the budget left,
which a plan's one ``spec_k`` cannot say), swap or pipelined micro-batches, which keep decodes first.

A prompt's full blocks are cached when the step that computes them is planned, as vLLM caches a
block when it allocates it: a request admitted later in the same step shares them. Blocks of
generated tokens are cached for later hits where the workload names what a later prompt repeats
(``Workload.output_hashes``), at the request's finish (``base.complete``); and a request preempted
by recompute keeps every block it computed cached (vLLM caches a request's blocks as they fill,
its answer's too), so its recompute skips those not evicted before it is admitted again.
``benchmarks/vllm_scheduler_check.py`` compares these decisions with vLLM's own scheduler.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from llmsim.request import RUNNING, Request, admit_order
from llmsim.schedulers.base import Scheduler
from llmsim.schedulers.chunked import ChunkedScheduler
from llmsim.schedulers.plan import BatchPlan


# open to interpreted subclasses as its base is: else mypyc's freed instance keeps its KV manager
# and decode set (a replica's ~37 KB a run; tests/test_schedulers.py)
@mypyc_attr(allow_interpreted_subclasses=True)
class VllmScheduler(ChunkedScheduler):
    name = "vllm"

    def _plan(self, swap_in: bool) -> BatchPlan:
        cfg = self.cfg
        # Pipelined micro-batches, swap, speculative decoding and a dynamic budget keep chunked's
        # plan: vLLM v1 has no swap, and it cuts a late decode's proposals to the budget left,
        # which a plan's one spec_k cannot say
        if (
            cfg.long_prefill_token_threshold <= 0  # (no prompt is overtaken without one)
            or self._held
            or cfg.preemption == "swap"
            or cfg.speculative is not None
            or cfg.chunk_budget == "dynamic"
            or self._decodes_first_agrees()
        ):
            return super()._plan(swap_in)
        return self._plan_in_order()

    def _decodes_first_agrees(self) -> bool:
        """Would decodes first plan this step as vLLM's one loop does? Yes where no prompt in
        progress is older than a decoding request, or where those that are and every decode get
        all they ask within the budget and every running request's blocks are free: then both
        give them all of it, and the newer prompts the same rest in the same order."""
        cols, kv, budget = self.columns, self.kv, self.cfg.chunk_tokens
        newest, decodes = (cols.newest(), cols.n) if cols is not None else (-1, 0)
        blocks = cols.blocks_next() if cols is not None else 0
        for r in self.running:
            if not r.in_prefill:
                newest = max(newest, r.admit_seq)
                decodes += 1
                blocks += kv.blocks_needed(r, 1)
        tokens, overtaken = decodes, False
        for r in self.running:
            if r.in_prefill:
                c = self.prefill_cap(r, budget)
                blocks += kv.blocks_needed(r, c)
                if r.admit_seq < newest:
                    overtaken = True
                    tokens += c
        return not overtaken or (tokens <= budget and kv.can_allocate(blocks))

    def _plan_in_order(self) -> BatchPlan:
        """vLLM's loop over the running requests in admission order (scheduler.py ``schedule``,
        "First, schedule the RUNNING requests", vLLM 0.32.0): each takes its tokens in turn, a
        decode one, a prompt in progress its capped chunk; one short of blocks preempts the newest
        until it fits or is the newest itself; the loop ends where the budget does. Then waiting
        requests start with what is left."""
        plan = BatchPlan()
        running, kv = self.running, self.kv
        if self.columns is not None:
            running[:] = sorted([*running, *self.columns.flush()], key=admit_order)
        budget = self.cfg.chunk_tokens
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            c = self.prefill_cap(r, budget) if r.in_prefill else 1
            need = kv.blocks_needed(r, c)
            while not kv.can_allocate(need):
                victim = running.pop()
                self._preempt(victim, plan)
                if victim is r:
                    break
            if r.status != RUNNING:
                break
            kv.allocate(r, c)
            if r.in_prefill:
                plan.prefill.append((r, c))
                self._chunk_planned(r, c)
            else:
                plan.decode.append(r)
            budget -= c
            i += 1
        self._start_prompts(plan, budget)
        return plan

    def _room_for(self, r: Request, blocks: int, plan: BatchPlan) -> bool:
        # vLLM preempts for a prompt in progress as for a decode: the newest running request
        # first, ``r`` itself last. Planned in admission order, the newest is a prompt in progress
        # no older than ``r``, or ``r``; where chunked's plan is kept (_plan) a decode planned
        # already can be newer: nobody is preempted then, as chunked would not
        if self.cfg.preemption == "swap" or self._held:
            return False
        running = self.running
        while not self.kv.can_allocate(blocks):
            if running[-1] is not r and not running[-1].in_prefill:
                return False
            victim = running.pop()
            self._preempt(victim, plan)
            if victim is r:
                return False
        return True

    def prefill_cap(self, r: Request, budget: int) -> int:
        """Prompt tokens ``r`` may take this step (vLLM: ``num_new_tokens`` after the threshold)."""
        c = min(r.prompt_remaining, budget)
        limit = self.cfg.long_prefill_token_threshold
        # none to starve: vLLM lifts the cap where this is its only request, running or waiting
        # (scheduler.py, ``num_eligible_reqs > 1``, vLLM 0.32.0; the queues only move requests
        # between them while a step is planned, so their sum is the step's count)
        eligible = self.num_running() + len(self.waiting)
        if limit <= 0 or eligible <= 1:
            return c
        if self.cfg.long_prefill_adaptive:  # floored at a fair share of the budget (vLLM 0.32)
            limit = max(limit, self.cfg.chunk_tokens // eligible)
        return min(c, limit)

    def admission_tokens(self, req: Request, chunk: int) -> int:
        # scheduler_reserve_full_isl: the whole uncached prompt must fit, not only this chunk
        return req.prompt_remaining if self.cfg.reserve_full_prompt else chunk

    def may_admit(self, plan: BatchPlan) -> bool:
        return not plan.preempted

    def _preempt(self, victim: Request, plan: BatchPlan) -> None:
        # its computed blocks stay cached after it is freed (vLLM caches them as they fill): the
        # recompute finds what was not evicted before it is admitted again
        if self.cfg.preemption != "swap":
            self.kv.cache_computed(victim)
        Scheduler._preempt(self, victim, plan)

    def _chunk_planned(self, r: Request, chunk: int) -> None:
        # vLLM caches a full block when it allocates it (kv_cache_manager.py, allocate_slots ->
        # cache_blocks, vLLM 0.32.0): a request admitted later in this step hits it at once
        if self.kv.prefix_caching:
            self.kv.commit(r, chunk)

    def final_step_reserve(self) -> int:
        # the base policy's, not chunked's: the whole recomputed prompt must fit, and never in a
        # step that preempted
        return Scheduler.final_step_reserve(self)
