"""One serving instance (tp × pp devices) as a SimPy process: schedule → price → advance → apply.

The replica owns its KV block manager and scheduler (built with ``make_scheduler``, as the
reference engine builds its own), prices each plan with the pool's cost model plus the host link
for swap copies and the drafting of speculative decoding, waits the step out and hands the
scheduler the outcome. The exact shortcuts (closed-form runs, steps completed without an
event) are ``fastpath.FastPath``'s; pipelining is ``pipeline.PipelineReplica``; the two sides of
disaggregated serving are in ``disagg.py``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from llmsim.costmodel.ops import BatchShape
from llmsim.decodeset import DecodeSet
from llmsim.fastpath import Clock, Driven, FastPath, Inputs, Later, shortcuts
from llmsim.gaps import GapHistogram
from llmsim.kvcache import BlockManager, OffloadTier, chain_hashes
from llmsim.request import REJECTED, Request
from llmsim.runs import ColumnRun, DecodeRun
from llmsim.schedulers import TRANSFERRING, make_scheduler
from llmsim.schedulers.plan import BatchPlan
from llmsim.stepcost import StepCost
from llmsim.steplog import StepLog

if TYPE_CHECKING:
    from collections.abc import Callable

    from llmsim.build import PoolSpec
    from llmsim.lora import LoraCache
    from llmsim.options import SimOptions


class Replica:
    """A replica running one scheduler; its counters are read once the run is over (``counters``)."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        pool: PoolSpec,
        policy: str,
        block_tokens: int,
        watermark: float,
        steps: StepLog,
        max_queue: int | None,
        opts: SimOptions,
        inputs: Inputs,
        sole: bool = False,
        handoff: Callable[[Replica, Request, float], None] | None = None,
        takes_prefilled: bool = False,
        group_wake: Callable[[], None] | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.pool = pool
        self.cost = pool.cost
        self.steps = steps
        self.max_queue = max_queue
        self.window, self.local_window = pool.cost.model.attention_windows()
        # vLLM's MLA backends run speculative verification in their decode kernel (plan.shape)
        self.spec_as_decode = pool.cost.model.spec_as_decode
        # disaggregated serving (disagg.py): a prefill replica hands finished prompts to ``handoff``;
        # a decode replica takes prefilled requests (``accept_prefilled``) instead of arrivals
        self.handoff = handoff
        self.takes_prefilled = takes_prefilled
        # a data-parallel rank of an expert-parallel group (dpgroup.py) steps when its group does:
        # the group runs the loop (``group_wake`` wakes it), and every step is an event (no
        # shortcut sees the other ranks)
        self.group_wake = group_wake
        grouped = group_wake is not None
        runs, chunk_runs, columnar = (False, False, False) if grouped else shortcuts(policy, pool, opts)
        # block ids only where prefix caching shares blocks: without it no result reads them
        self.kv = BlockManager(
            pool.kv_blocks,
            block_tokens,
            watermark,
            opts.prefix_caching,
            track_ids=False,
            partial_first=opts.reuse_partial_first,
        )
        gaps = GapHistogram()
        columns = DecodeSet(self.kv, gaps) if columnar else None
        self.sched = make_scheduler(policy, pool.sched, self.kv, gaps, self.cost.step_time, columns)
        ahead = not grouped and not opts.exact_steps and not opts.feedback and self.runs_ahead()
        self.clock = Clock(env, ahead, inputs)
        # answers reported to whoever sends requests that wait on them (feeder.Feeder)
        self.on_answered: Callable[[Request], None] | None = None
        where = (pool.name, index)
        self.fast = FastPath(env, self.kv, self.sched, self.cost, steps, where, runs, self.clock, sole, chunk_runs)
        # KV offload tiers below the device cache (kvcache.OffloadTier), where prompts are matched:
        # not on a disaggregated decode replica (its requests arrive prefilled)
        if opts.offload and not takes_prefilled:
            self.kv.tiers = [OffloadTier(t.name, t.capacity_blocks, t.bytes_per_s, t.latency_s) for t in opts.offload]
            self.kv.block_bytes = opts.kv_bytes_per_token * block_tokens
        if opts.prefix_caching and index < len(opts.free_queues):  # the cache an earlier run left here
            self.kv.restore(opts.free_queues[index])
        for prefix in opts.prewarm:  # (chained only as far as this cache could take it)
            room = self.kv.prewarm_room() * block_tokens
            self.kv.prewarm(chain_hashes(prefix, opts.prewarm_block_tokens, block_tokens, room))
        self.lora: LoraCache | None = None  # multi-LoRA: the replica's adapters
        if opts.lora is not None:
            from llmsim.lora import LoraCache

            self.lora = LoraCache(opts.lora)
        compiled = opts.moe_kernels[index] if index < len(opts.moe_kernels) else ()  # (an earlier run's)
        self.price = StepCost(pool, opts.kv_bytes_per_token, self.kv, self.lora, compiled)
        # async scheduling (engine.py): the step after the one running was planned when it started,
        # so an arrival during a step joins the plan after next; ``_late`` holds such arrivals
        self.async_scheduling = pool.cost.engine.async_scheduling  # (this pool's engine, engine.for_hardware)
        self._late: list[Request] = []
        # when the step in progress started; once it ends (at the loop's top), when the step that just
        # ended started: its successor was planned then, with the arrivals from before
        self._step_start_s = 0.0
        self.outstanding_tokens = 0  # prompt + output tokens of unfinished requests (for routing)
        self.busy_s = 0.0
        self.max_step_tokens = self.steps_taken = 0
        self._idle = True
        self._batch_changed = False  # (the step before the next one changed its batch: engine.batch_change)
        self._wake: Later | simpy.Event = env.event()  # (``_sleep`` holds a new one each time)
        self._freed = env.event()
        self.dp_wait_s = 0.0  # lock-step: seconds this rank's steps waited for the slowest rank
        self.dp_dummy_steps = 0  # lock-step: group steps this rank had nothing for (a dummy batch)
        self.setup()
        if not grouped:
            Driven(env, self.loop())

    def setup(self) -> None:
        """What a kind of replica adds before its process starts (``pipeline.PipelineReplica``)."""

    @property
    def waiting(self) -> deque[Request]:
        return self.sched.waiting

    def lora_adapters(self) -> tuple[set[int], set[int], int]:
        """Multi-LoRA, as vLLM's ``vllm:lora_requests_info`` reports it: the adapters of its running
        and of its waiting requests, and ``max_loras`` (router.py's ``lora_affinity`` reads it)."""
        running = self.sched.active_loras() or set()
        waiting = {r.lora_id for r in self.sched.waiting if r.lora_id >= 0}
        return running, waiting, self.sched.cfg.max_loras

    def runs_ahead(self) -> bool:
        """May steps complete without an event while no arrival can reach the replica? Not when
        KV transfers read or change its state at other instants (either side of disaggregation)."""
        return self.handoff is None and not self.takes_prefilled

    # ---- from outside ------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        req.replica = self.index
        reason = self.sched.rejection_reason(req)
        if reason and self.sched.cfg.prefill_only:  # (which pool refused it: the decode pool's say so too)
            reason = f"prefill pool: {reason}"
        if not reason and self.max_queue is not None and self.num_waiting >= self.max_queue:
            reason = f"queue full (max_queue={self.max_queue})"
        if reason:
            req.status, req.reject_reason = REJECTED, reason
            return
        if self.async_scheduling and not self._idle and self.clock.timer.now_s() > self._step_start_s:
            self._late.append(req)  # a step is running, and the next one is planned already
        else:
            self.sched.add(req)
        self.outstanding_tokens += req.prompt_tokens + req.output_tokens
        self.wake()

    def accept_prefilled(self, req: Request, reserved_blocks: int) -> None:
        """Decode side: a request arrives with its prompt's KV (into the blocks reserved for it)
        and its first token (already streamed, under ``first_token_at_prefill``)."""
        self.sync()  # (a run in progress holds its steps' blocks before the reservation leaves: the cache's peak)
        self.kv.unreserve(reserved_blocks)
        self.kv.swap_in(req)
        req.replica = self.index
        self.sched.resume_prefilled(req, self.env.now)
        self.outstanding_tokens += req.output_tokens
        self.wake()

    def release_transferred(self, req: Request) -> None:
        """Prefill side: ``req``'s KV has left for a decode replica; its blocks are free. An idle
        replica with nothing queued is not woken: the blocks could start nothing (it would plan
        nothing and sleep again, one event per request of a disaggregated run)."""
        self.sync()  # (a run in progress holds its steps' blocks before these leave: the cache's peak)
        self.kv.free(req)
        self.signal_freed()
        if self.sched.has_work() or not self._idle:
            self.wake()

    @property
    def num_waiting(self) -> int:
        """Requests queued here: in the scheduler's queue, or arrived for the plan after next."""
        return len(self.sched.waiting) + len(self._late)

    @property
    def num_running(self) -> int:
        """Requests in the batch (decoding or partway through their prompt)."""
        return self.sched.num_running()

    def wake(self) -> None:
        """Something changed (an arrival, a prefilled request): reconsider at the next step boundary."""
        if self.group_wake is not None:  # the group's next step plans every rank
            self.group_wake()
            return
        if self._idle:
            self._idle = False
            self._step_start_s = self.env.now  # the next step starts now: arrivals now join its plan
            self.clock.timer.fire(self._wake)
        else:
            self.fast.cut()  # a run in progress ends with the step in progress

    def sync(self) -> None:
        """Bring KV blocks and tokens up to now, for readers and writers from outside (routers, transfers)."""
        self.fast.sync()

    def blocks_freed(self) -> simpy.Event:
        """An event that fires after the next step that released KV blocks."""
        return self._freed

    # ---- the process -------------------------------------------------------------------
    def loop(self) -> Generator[Any, Any, None]:  # the SimPy process (typed: compiled to native calls)
        clock = self.clock
        while True:
            plan = self.next_plan()
            if plan is None:  # nothing can run until something arrives or blocks free up
                yield from self._sleep()
                continue
            shape = self.step_shape(plan)
            run = None if self._late or self.price.compiles(shape) else self.fast.start_run(plan, shape)
            self._step_start_s = clock.now
            if run is not None:  # a closed-form run (identical decode steps, or a prompt's chunks beside them)
                done = yield from self.fast.wait(run)
                self._step_start_s = run.ends[done - 2] if done > 1 else run.start_s  # the last step's
                self._apply_run(run, done)
                continue
            start = clock.now
            dt, swap, draft = self.price.price(plan, shape)
            wait = clock.advance(dt)  # None: nothing can reach the replica before the step ends
            if wait is not None:
                yield wait
            self._apply(plan, start, dt, swap, draft)

    def next_plan(self) -> BatchPlan | None:
        """The next step's plan, or None while nothing can run (until something arrives or
        blocks free up)."""
        if self._late:
            self._admit_late()
        plan = self.sched.schedule() if self.sched.has_work() else None
        if (plan is None or plan.empty) and self._late:  # an idle engine plans the new arrivals at once
            self._admit_late(everyone=True)
            plan = self.sched.schedule() if self.sched.has_work() else None
        if plan is None or plan.empty:
            return None
        plan.changed = self._batch_changed
        return plan

    def step_shape(self, plan: BatchPlan) -> BatchShape:
        """The aggregates the cost model prices ``plan`` by."""
        return plan.shape(self.window, self.local_window, self.spec_as_decode)

    def begin_step(
        self, plan: BatchPlan | None, shape: BatchShape | None, start_s: float
    ) -> tuple[float, float, float] | None:
        """Lock-step (dpgroup.py): this rank's part of a group step starting at ``start_s``, priced
        as the rank's own (seconds, of which swap, of which drafting) on ``shape`` (which carries
        the group's gathered tokens); None for a rank with nothing to run (it runs a dummy batch,
        and an arrival joins the group's next step)."""
        self._step_start_s = start_s
        self._idle = plan is None
        if plan is None or shape is None:
            return None
        return self.price.price(plan, shape)

    def rest(self) -> None:
        """Lock-step: the group sleeps (no rank has work); an arrival here joins the next step."""
        self._idle = True

    def end_step(self, plan: BatchPlan, start_s: float, step_s: float, own: tuple[float, float, float]) -> None:
        """Lock-step: the group step of ``step_s`` (the slowest rank's) is over; this rank's own
        step was ``own[0]``, and it waited the rest at the MoE layers' collectives."""
        self.dp_wait_s += step_s - own[0]
        self._apply(plan, start_s, step_s, own[1], own[2])

    def _admit_late(self, everyone: bool = False) -> None:
        """Async scheduling: arrivals from before the last step started reach the scheduler now
        (the plan being made is the one after next for later arrivals)."""
        cutoff = self._step_start_s
        keep = []
        for r in self._late:
            if everyone or r.arrival_s < cutoff:
                self.sched.add(r)
            else:
                keep.append(r)
        self._late = keep

    def _apply(self, plan: BatchPlan, start_s: float, dt: float, swap: float, draft: float) -> None:
        self.busy_s += dt
        self.outcome(plan, start_s, dt, start_s + dt, swap, draft)

    def outcome(self, plan: BatchPlan, start_s: float, dt: float, end_s: float, swap: float, draft: float) -> None:
        """A step's outcome at ``end_s`` (``dt`` after ``start_s``, as the step was priced or waited):
        tokens and timestamps (the scheduler's), counters, the step's row."""
        used_before = self.kv.used
        done = self.sched.complete(plan, end_s)
        # the next step's batch differs: requests left, or prompt tokens ran (engine.batch_change)
        self._batch_changed = bool(done) or bool(plan.prefill) or bool(plan.preempted)
        self.settle(done, dt)
        if self.kv.used < used_before or plan.preempted:
            self.signal_freed()
        self.max_step_tokens = max(self.max_step_tokens, plan.prefill_tokens + plan.num_decode)
        self.log_step(plan, start_s, dt, swap, draft)

    def _apply_run(self, run: DecodeRun | ColumnRun, steps: int, live_last: bool = True) -> None:
        """The outcome of a run's first ``steps`` steps (tokens already emitted): counters, rows."""
        self._batch_changed = bool(run.finished) or run.chunk > 0  # (requests left, or prompt tokens ran)
        if run.finished:
            self.settle(run.finished, run.duration(steps - 1))
            self.signal_freed()
        self.busy_s += run.busy_s(steps)
        self.max_step_tokens = max(self.max_step_tokens, run.size + run.chunk)
        self.steps_taken += steps
        self.fast.log(run, steps, live_last)

    def _sleep(self) -> Generator[Later | simpy.Event, Any, None]:
        self._idle = True
        self._wake = self.clock.timer.hold()
        yield self._wake
        self.clock.now = self.env.now

    # ---- pieces the loop and its variants share ----------------------------------------
    def settle(self, done: list[Request], step_s: float) -> None:
        """Finished requests leave the routing load; prompts done in a prefill pool move on."""
        for r in done:
            if r.status == TRANSFERRING:
                self.outstanding_tokens -= r.prompt_tokens + r.output_tokens
                self.handoff(self, r, step_s)  # type: ignore[misc]
                continue
            if self.takes_prefilled:
                self.outstanding_tokens -= r.output_tokens
            else:
                self.outstanding_tokens -= r.prompt_tokens + r.output_tokens
            if self.on_answered is not None:
                self.on_answered(r)

    def signal_freed(self) -> None:
        if self._freed.callbacks:  # someone waits for blocks (a KV transfer's back-pressure)
            ev, self._freed = self._freed, self.env.event()
            ev.succeed()

    def log_step(self, plan: BatchPlan, start_s: float, dt: float, swap: float, draft: float) -> None:
        self.steps_taken += 1
        if self.steps.skip(1):  # steps.csv turned off (counted, and nothing read for a row)
            return
        waiting = len(self.sched.waiting)  # the scheduler's queue (arrivals for the plan after next are not in it)
        self.steps.add_plan(self.pool.name, self.index, plan, start_s, dt, self.kv, waiting, swap, draft)

    def finish(self) -> None:
        """At the end of the simulation: every request's counters up to date, and the steps of a
        run cut by the horizon that did complete counted and logged."""
        run = self.fast.finish()
        if run is not None and run.applied:
            self._apply_run(run, run.applied, live_last=False)

    def counters(self) -> dict[str, object]:
        """What the summary reads of this replica once the run is over (one row of a frame)."""
        side = "prefill" if self.handoff is not None else "decode" if self.takes_prefilled else "colocated"
        mine = {"pool": self.pool.name, "replica": self.index, "side": side, "busy_s": self.busy_s}
        mine |= {"steps": self.steps_taken, "max_step_tokens": self.max_step_tokens}
        if self.group_wake is not None:
            mine |= {"dp_wait_s": self.dp_wait_s, "dp_dummy_steps": self.dp_dummy_steps}
        sched = {"spec_slots": self.sched.spec_slots, "spec_emitted": self.sched.spec_emitted}
        return mine | self.kv.counters() | self.kv.tier_counters() | self.price.counters() | sched
