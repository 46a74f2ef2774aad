"""The SimPy event loop: arrivals, a router, and one process per replica.

Each replica process is a plain generator: ask the scheduler for a plan, ask the cost model how
long it takes, ``yield env.timeout(that)``, apply the outcome. All decisions live in the
schedulers; all timing lives in the cost model (plus the host link for swaps and the KV link
between pools when disaggregated, see ``KVTransfer``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
import pandas as pd
import simpy

from llmsim.build import PoolSpec
from llmsim.costmodel.ops import batch_shape
from llmsim.decodeset import ColumnRun, DecodeSet, column_run_length
from llmsim.fastpath import MIN_RUN, DecodeRun, run_length
from llmsim.gaps import GapHistogram
from llmsim.kvcache import BlockManager, chain_hashes
from llmsim.request import REJECTED, RUNNING, Request, blocks_for
from llmsim.schedulers import make_scheduler
from llmsim.schedulers.base import TRANSFERRING
from llmsim.schedulers.queue import enqueue

STEP_COLUMNS = [
    "pool",
    "replica",
    "start_s",
    "duration_s",
    "prefill_tokens",
    "decode_tokens",
    "batch_size",
    "preempted",
    "kv_blocks_used",
    "kv_utilization",
    "kv_fragmentation",
    "waiting",
    "swap_s",
    "draft_s",
    "spec_tokens",
]


@dataclass
class StepLog:
    """Columnar step records (one row per step), optionally sampled."""

    every: int = 1  # keep every n-th step (1 = all, 0 = none)
    cols: dict[str, list] = field(default_factory=lambda: {k: [] for k in STEP_COLUMNS})
    seen: int = 0

    def add(self, row: tuple) -> None:
        self.seen += 1
        if self.every and (self.seen - 1) % self.every == 0:
            for k, v in zip(STEP_COLUMNS, row, strict=True):
                self.cols[k].append(v)

    def frame(self) -> pd.DataFrame:
        """Rows in time order (decode runs log their steps when the run ends)."""
        df = pd.DataFrame(self.cols, columns=STEP_COLUMNS)
        return df.sort_values(["start_s", "replica"], kind="stable").reset_index(drop=True)


@dataclass
class LinkSpec:
    """The KV-transfer link between pools, per device and direction."""

    kind: str
    bandwidth_bytes_per_s: float
    latency_s: float
    layerwise_overlap: bool = False


@dataclass
class SimOptions:
    """Everything beyond the basic loop; defaults reproduce plain colocated serving."""

    queue_order: str = "fcfs"
    max_bypass: int = 16  # starvation protection for non-FCFS queue orders
    prefix_caching: bool = False
    prewarm: list[list[int]] = field(default_factory=list)  # hash-id prefixes cached at t=0
    hash_block_tokens: int = 0  # tokens per id in ``prewarm`` (default: the workload's)
    kv_link: LinkSpec | None = None  # disaggregated only
    decode_router: str = "least_outstanding"
    kv_bytes_per_token: float = 0.0  # whole model (all layers), for KV transfers
    num_layers: int = 1
    n_seqs: int = 1  # parallel samples / beams per request
    exact_steps: bool = False  # one event per step: no closed-form jumps over decode runs (fastpath.py)
    prefill_policy: str = "traditional"  # disaggregated: the prefill pool's scheduler


MAX_RUN = 1 << 20  # longest decode run priced in one go


class Replica:
    """One serving instance (tp × pp devices) running a scheduler in a SimPy process."""

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
        opts: SimOptions | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.pool = pool
        self.opts = opts or SimOptions()
        self.window, self.local_window = pool.cost.model.attention_windows()
        # Closed-form decode runs (fastpath.py): every decode step of a run is the same one-token step.
        self._can_jump = (
            not self.opts.exact_steps
            and pool.pp == 1
            and policy != "static"
            and pool.sched.speculative is None
            and pool.sched.chunk_budget == "fixed"
            and self.opts.n_seqs == 1
        )
        # Columnar decoding requests (decodeset.py): besides, each holds ceil(tokens / block) blocks of
        # its own and its context grows by one per step, so a step costs O(1) in the batch size.
        self._columnar = (
            self._can_jump
            and policy in ("traditional", "chunked")
            and not self.opts.prefix_caching
            and self.window is None
            and self.local_window is None
        )
        self.kv = BlockManager(
            pool.kv_blocks, block_tokens, watermark, self.opts.prefix_caching, track_ids=not self._columnar
        )
        self.sched = make_scheduler(policy, pool.sched, self.kv)
        self.sched.gaps = GapHistogram()
        if self._columnar:
            self.sched.columns = DecodeSet(self.kv, self.sched.gaps)
        self.cost = pool.cost
        self.sched.predict_s = self.cost.step_time
        self.next_input_s = lambda: np.inf  # when something from outside can next reach this replica
        self.sole = False  # every arrival comes to this replica (one replica, nothing routed past it)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.steps = steps
        self.max_queue = max_queue
        self.outstanding_tokens = 0  # prompt + output tokens of unfinished requests (for routing)
        self.busy_s = 0.0
        self.swap_s = 0.0
        self.draft_s = 0.0
        self.spec_base_s = 0.0  # what the verify steps would have cost as plain decodes
        self.spec_time_s = 0.0  # what draft + verify cost
        self.max_step_tokens = 0
        self.steps_taken = 0
        self.handoff: Callable[[Replica, Request, float], None] | None = None  # disaggregated prefill: KVTransfer.start
        self.decode_role = False  # disaggregated decode replicas: requests arrive prefilled
        self.incoming = 0  # disaggregated decode replicas: transfers in flight to this replica
        self.link_free_s = 0.0  # disaggregated prefill: when the outbound KV link is next free
        self._bypassed: dict[int, int] = {}
        self._idle = True
        self._wake = env.event()
        self._freed = env.event()
        host = pool.hw.host_link
        self._host_bw = host.bandwidth_bytes_per_s.value * pool.tp * pool.pp
        self._host_lat = host.latency_s.value
        self._kv_bytes_per_token = self.opts.kv_bytes_per_token
        for prefix in self.opts.prewarm:
            self.kv.prewarm(chain_hashes(prefix, self.opts.hash_block_tokens, block_tokens, 1 << 62))
        # pipeline parallelism: one resource per stage, micro-batches in flight up to the stage count
        self.stages = [simpy.Resource(env, capacity=1) for _ in range(pool.pp)] if pool.pp > 1 else []
        self.stage_busy_s = [0.0] * pool.pp
        self.in_flight = 0
        self.first_start_s = -1.0
        self.last_end_s = 0.0
        self._landed = env.event()
        self._run: DecodeRun | ColumnRun | None = None  # decode run in progress (fastpath.py)
        self._jumping = False  # the process is waiting out a decode run that wake() may cut short
        self._run_cut = 0  # steps of that run done when it ends
        self._proc = env.process(self.pipeline_loop() if self.stages else self.loop())

    def submit(self, req: Request) -> None:
        req.replica = self.index
        reason = self.sched.rejection_reason(req)
        if not reason and self.max_queue is not None and len(self.waiting) >= self.max_queue:
            reason = f"queue full (max_queue={self.max_queue})"
        if reason:
            req.status = REJECTED
            req.reject_reason = reason
            return
        enqueue(self.waiting, req, self.opts.queue_order, self._bypassed, self.opts.max_bypass)
        self.outstanding_tokens += req.prompt_tokens + req.output_tokens
        self.wake()

    def accept_prefilled(self, req: Request, reserved_blocks: int) -> None:
        """Disaggregated decode replica: a request arrives with its prompt's KV and first token."""
        self.kv.unreserve(reserved_blocks)
        self.kv.swap_in(req)
        req.replica = self.index
        req.prefill_only = False
        req.status = RUNNING
        self.sched._emit(req, self.env.now, [])  # the first token reaches the user now
        self.sched.start_running(req, self.running)
        self.outstanding_tokens += req.output_tokens
        self.wake()

    def wake(self) -> None:
        """Something changed (an arrival, a prefilled request): reconsider at the next step boundary."""
        if self._idle:
            self._idle = False
            self._wake.succeed()
        elif self._jumping:  # end the decode run with the step in progress
            self._jumping = False
            run = self._run
            assert run is not None  # (set with _jumping)
            done = run.steps_through(self.env.now)
            run.allocate_through(done)  # the step in progress holds its KV slots (readers see them)
            self._run_cut = done
            _retarget(self._proc, self.env.timeout(max(0.0, run.ends[done - 1] - self.env.now)))

    def sync(self) -> None:
        """Bring KV blocks and tokens up to now inside a decode run, for readers from outside
        (KV-aware routing, disaggregated back-pressure, the end of the run)."""
        run = self._run
        if run is not None:
            done = min(run.steps_done_by(self.env.now), run.steps - 1)  # the run's end settles itself
            run.apply_through(done, self.sched.gaps)
            run.allocate_through(done + 1)

    def finish(self) -> None:
        """At the end of the simulation: every request's counters up to date, and the steps of a
        decode run cut by the horizon that did complete counted and logged."""
        run = self._run
        if run is not None:
            self.sync()
            if run.applied:
                self.busy_s += run.busy_s(run.applied)
                self.max_step_tokens = max(self.max_step_tokens, run.size)
                self._log_run(run, run.applied, live_last=False)
        if self.sched.columns is not None:
            self.sched.columns.flush()

    def has_running(self) -> bool:
        return self.sched.num_running(self.running) > 0

    def slots_full(self) -> bool:
        return self.sched.num_running(self.running) + self.incoming >= self.pool.sched.max_num_seqs

    def _run_ahead(self) -> bool:
        """Steps can complete without a SimPy event while nothing from outside can reach this
        replica before they end: no other process reads or changes its state in between."""
        return not self.opts.exact_steps and self.handoff is None and not self.decode_role

    def blocks_freed(self) -> simpy.Event:
        """An event that fires after the next step that released KV blocks."""
        return self._freed

    def loop(self):  # simpy process
        """``now`` is this replica's clock: it runs ahead of SimPy's while steps complete without
        an event (``_run_ahead``), and SimPy's clock catches up before the replica waits."""
        env = self.env
        ahead = self._run_ahead()
        now = env.now
        while True:
            if not self.waiting and not self.has_running():
                yield from self._sleep()
                now = env.now
                continue
            plan = self.sched.schedule(self.waiting, self.running)
            if plan.empty:  # nothing can run until something arrives or blocks free up
                yield from self._sleep()
                now = env.now
                continue
            start = now
            shape = plan.shape(self.window, self.local_window)
            run = self._decode_run(plan, shape, start)
            if run is not None:
                now = yield from self._wait_run(run, ahead)
                continue
            dt, swap, draft = self._step_time(plan, shape)
            if ahead and start + dt < self.next_input_s():
                now = start + dt
            elif env.now == start:
                yield env.timeout(dt)
                now = env.now
            else:
                now = start + dt
                yield env.timeout(now - env.now)
            self.busy_s += dt
            used_before = self.kv.used
            self._settle(self.sched.complete(plan, now, self.running), dt)
            if self.kv.used < used_before or plan.preempted:
                self._signal_freed()
            self.max_step_tokens = max(self.max_step_tokens, plan.prefill_tokens + plan.num_decode)
            self._log(plan, start, dt, swap, draft)

    def _decode_run(self, plan, shape, start: float) -> DecodeRun | ColumnRun | None:  # type: ignore[no-untyped-def]
        """A closed-form run if this plan starts a run of identical decode-only steps (no swap
        copies or drafting in the step either: they would make its time differ from the next's)."""
        if (
            not self._can_jump
            or plan.prefill
            or plan.preempted
            or plan.padding
            or plan.spec_k
            or plan.swap_in_tokens
            or plan.swap_out_tokens
        ):
            return None
        cols = plan.decode_set
        if cols is not None and not plan.decode:
            k = column_run_length(cols, self.kv.free_blocks, MAX_RUN, MIN_RUN)
            if not k:
                return None
            return ColumnRun(cols, self.kv, start, self.cost.decode_steps_s(shape, k))
        if cols is not None or not plan.decode:
            return None
        k = run_length(plan.decode, self.kv, self.local_window or self.window, MAX_RUN)
        if k < MIN_RUN:
            return None
        durations = self.cost.decode_steps_s(shape, k)
        return DecodeRun(list(plan.decode), self.kv, start, durations)

    def _wait_run(self, run: DecodeRun | ColumnRun, ahead: bool):  # type: ignore[no-untyped-def]
        """Wait out a decode run; an interrupt ends it after the step in progress. Returns the
        time its last step ended."""
        env = self.env
        run.waiting0 = len(self.waiting)
        if ahead and run.ends[-1] < self.next_input_s():
            done = run.steps  # nothing can interrupt it: no event needed
        elif ahead and self.sole:
            # the next arrival comes here: the run ends with the step in progress at that instant,
            # where wake() would cut it, without the second timeout
            done = run.steps_through(self.next_input_s())
            self._run = run  # (for the end of the simulation, if the horizon comes first)
            yield env.timeout(run.ends[done - 1] - env.now)
            self._run = None
        else:
            self._run, self._jumping, self._run_cut = run, True, run.steps
            yield env.timeout(run.ends[-1] - env.now)  # or earlier: wake() cuts the run short
            done = self._run_cut
            self._jumping = False
            self._run = None
        run.apply_through(done, self.sched.gaps)
        if run.finished:
            self._settle(run.finished, run.durations[done - 1])
            self._signal_freed()
        self.busy_s += run.busy_s(done)
        self.max_step_tokens = max(self.max_step_tokens, run.size)
        self._log_run(run, done)
        return run.ends[done - 1]

    def _log_run(self, run: DecodeRun | ColumnRun, steps: int, live_last: bool = True) -> None:
        """steps.csv rows of a decode run, as the step-by-step loop would have written them. The
        last row of a run that ended normally is the live state (finished requests freed)."""
        self.steps_taken += steps
        if not self.steps.every:
            self.steps.seen += steps
            return
        used, held = run.kv_after_steps(0, steps)
        starts = [run.start_s, *run.ends[: steps - 1]]
        n, cap, bt = run.size, self.kv.num_blocks, self.kv.block_tokens
        for i in range(steps):
            if i < steps - 1 or not live_last:
                u, waiting = int(used[i]), run.waiting0
                frag = max(0.0, 1.0 - held[i] / (u * bt)) if u else 0.0
            else:  # the run ends now: what the step-by-step loop logs here is the live state
                u, waiting, frag = self.kv.used, len(self.waiting), self.kv.fragmentation
            self.steps.add(
                (
                    self.pool.name,
                    self.index,
                    starts[i],
                    run.durations[i],
                    0,
                    n,
                    n,
                    0,
                    u,
                    u / cap,
                    frag,
                    waiting,
                    0.0,
                    0.0,
                    0,
                )
            )

    def pipeline_loop(self):  # simpy process
        """PP > 1: when stage 0 is free, schedule a micro-batch from the requests not in flight
        and push it through the stages. Uneven micro-batches (a long prefill chunk next to
        decodes) leave later stages idle: pipeline bubbles."""
        env = self.env
        stage0 = self.stages[0]
        while True:
            if not self.waiting and not self.running:
                yield from self._sleep()
                continue
            if self.in_flight >= len(self.stages):
                yield self._landed
                continue
            slot = stage0.request()
            yield slot
            plan = self.sched.schedule(self.waiting, self.running)
            if plan.empty:
                stage0.release(slot)
                if self.in_flight:
                    yield self._landed  # requests come back when a micro-batch lands
                else:
                    yield from self._sleep()
                continue
            members = [r for r, _ in plan.prefill] + list(plan.decode)
            ids = {id(r) for r in members}
            self.running[:] = [r for r in self.running if id(r) not in ids]
            self.in_flight += 1
            if self.first_start_s < 0:
                self.first_start_s = env.now
            shape = plan.shape(self.window, self.local_window)
            stage_s = self.cost.stage_time(shape)
            send_s = self.cost.pp_send_time(shape)
            swap = self._swap_s(plan)
            first = stage_s + self.cost._step_overhead + swap
            yield env.timeout(first)
            self.stage_busy_s[0] += first
            self.busy_s += first
            stage0.release(slot)
            env.process(self._finish_micro_batch(plan, members, env.now - first, stage_s, send_s))

    def _finish_micro_batch(self, plan, members, start, stage_s, send_s):  # type: ignore[no-untyped-def]
        env = self.env
        for i in range(1, len(self.stages)):
            with self.stages[i].request() as slot:
                yield slot
                yield env.timeout(send_s + stage_s)
                self.stage_busy_s[i] += send_s + stage_s
        self.in_flight -= 1
        dt = env.now - start
        self.last_end_s = env.now
        used_before = self.kv.used
        self._settle(self.sched.complete(plan, env.now, members), dt)
        self.running.extend(r for r in members if r.status == RUNNING)
        if self.kv.used < used_before or plan.preempted:
            self._signal_freed()
        self.max_step_tokens = max(self.max_step_tokens, plan.prefill_tokens + len(plan.decode))
        self._log(plan, start, dt, 0.0, 0.0)
        ev, self._landed = self._landed, env.event()
        ev.succeed()
        self.wake()

    def _log(self, plan, start: float, dt: float, swap: float, draft: float) -> None:  # type: ignore[no-untyped-def]
        self.steps_taken += 1
        if not self.steps.every:  # steps.csv turned off
            self.steps.seen += 1
            return
        self.steps.add(
            (
                self.pool.name,
                self.index,
                start,
                dt,
                plan.prefill_tokens,
                plan.num_decode,
                plan.size,
                len(plan.preempted),
                self.kv.used,
                self.kv.utilization,
                self.kv.fragmentation,
                len(self.waiting),
                swap,
                draft,
                plan.spec_k,
            )
        )

    def _settle(self, done: list[Request], step_s: float) -> None:
        """Finished requests leave the routing load; prompts done in a prefill pool move on."""
        for r in done:
            if r.status == TRANSFERRING:
                self.outstanding_tokens -= r.prompt_tokens + r.output_tokens
                self.handoff(self, r, step_s)  # type: ignore[misc]
            else:
                self.outstanding_tokens -= r.output_tokens if self.decode_role else r.prompt_tokens + r.output_tokens

    def _step_time(self, plan, shape) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
        """Step seconds = model step + swap copies over the host link + speculative drafting."""
        dt = self.cost.step_time(shape)
        swap = self._swap_s(plan)
        draft = 0.0
        if plan.spec_k and plan.decode:
            contexts = [r.kv_tokens for r in plan.decode]
            plain = self.cost.step_time(batch_shape([], contexts))
            draft_cost = self.pool.draft_cost
            if draft_cost is None:  # self-speculation: each MTP head costs about one layer
                draft = plan.spec_k * plain / self.cost.model.num_layers
            else:
                draft = plan.spec_k * draft_cost.step_time(batch_shape([], contexts))
            self.draft_s += draft
            self.spec_base_s += plain
            self.spec_time_s += dt + draft
        return dt + swap + draft, swap, draft

    def _swap_s(self, plan) -> float:  # type: ignore[no-untyped-def]
        """Copying preempted KV to or from host memory before the step, over the host link."""
        moved = plan.swap_in_tokens + plan.swap_out_tokens
        if not moved:
            return 0.0
        swap = self._host_lat + moved * self._kv_bytes_per_token / self._host_bw
        self.swap_s += swap
        return swap

    def _signal_freed(self) -> None:
        if self._freed.callbacks:  # someone waits for blocks (a KV transfer's back-pressure)
            ev, self._freed = self._freed, self.env.event()
            ev.succeed()

    def _sleep(self):
        self._idle = True
        self._wake = self.env.event()
        yield self._wake


class KVTransfer:
    """Disaggregated serving: move a prompt's KV from a prefill replica to a decode replica.

    The decode replica must first have blocks for it (back-pressure: until then the KV stays in
    the prefill replica's memory and keeps its blocks). The transfer then occupies the prefill
    replica's outbound link: latency + bytes / (per-device bandwidth × devices sending in
    parallel). With layer-wise overlap all layers but the last are sent while the prompt's step
    computes, so only what the step did not hide is exposed.
    """

    def __init__(self, env: simpy.Environment, decode: list[Replica], opts: SimOptions) -> None:
        assert opts.kv_link is not None
        self.env = env
        self.decode = decode
        self.opts = opts
        self.link = opts.kv_link
        self.count = 0
        self.bytes = 0.0
        self.busy_s = 0.0
        self.waits_s = 0.0

    def start(self, src: Replica, req: Request, step_s: float) -> None:
        self.env.process(self._run(src, req, step_s))

    def kv_bytes(self, tokens: int) -> float:
        return tokens * self.opts.kv_bytes_per_token

    def wire_s(self, src: Replica, dst: Replica, tokens: int) -> float:
        """Seconds the link is busy: KV bytes over the devices sending in parallel."""
        devices = min(src.pool.tp * src.pool.pp, dst.pool.tp * dst.pool.pp)
        return self.kv_bytes(tokens) / (self.link.bandwidth_bytes_per_s * devices)

    def seconds(self, src: Replica, dst: Replica, tokens: int, step_s: float) -> float:
        """Exposed transfer time after the prompt's last step (what TTFT pays)."""
        wire = self.wire_s(src, dst, tokens)
        if self.link.layerwise_overlap:
            wire = max(wire / self.opts.num_layers, wire - step_s)
        return self.link.latency_s + wire

    def _run(self, src: Replica, req: Request, step_s: float):  # simpy process
        env = self.env
        t0 = env.now
        dst = route(self.decode, self.opts.decode_router, self.count, req)
        self.count += 1
        blocks = blocks_for(req.kv_tokens + 1, dst.kv.block_tokens)
        # back-pressure: wait for the decode replica's blocks and a batch slot
        dst.sync()
        # the watermark protects running requests' growth; an idle replica admits into it (as the
        # schedulers do), or a prompt needing more than capacity minus watermark would wait forever
        while not dst.kv.can_allocate(blocks, admission=dst.has_running()) or dst.slots_full():
            yield dst.blocks_freed()
            dst.sync()
        dst.kv.reserve(blocks)
        if dst._run is not None:
            dst._run.note_external_blocks(env.now, blocks)
        dst.incoming += 1
        # the link sends one prompt's KV at a time, in the order they got their blocks (FIFO)
        dt = self.seconds(src, dst, req.kv_tokens, step_s)
        start = max(env.now, src.link_free_s)
        src.link_free_s = start + dt
        yield env.timeout(start + dt - env.now)
        self.busy_s += self.wire_s(src, dst, req.kv_tokens)
        self.bytes += self.kv_bytes(req.kv_tokens)
        self.waits_s += env.now - t0 - dt
        req.transfer_s = env.now - t0
        src.kv.free(req)
        src._signal_freed()
        src.wake()
        dst.incoming -= 1
        dst.accept_prefilled(req, blocks)


def _retarget(proc: simpy.Process, ev: simpy.Event) -> None:
    """Make ``proc``, waiting on an event, resume on ``ev`` instead. This is what SimPy's own
    ``Process.interrupt`` does before it throws ``Interrupt`` into the generator; without the
    exception it costs a tenth (~1 µs against ~10 µs, measured on this machine), and a decode run
    is cut short at about every arrival of a busy multi-replica cluster. The event the process
    waited on still fires, with nobody waiting on it."""
    proc.target.callbacks.remove(proc._resume)  # type: ignore[union-attr]
    ev.callbacks.append(proc._resume)  # type: ignore[union-attr]
    proc._target = ev


class Routable(Protocol):
    """What a router reads of a replica (tests route over stand-ins with just these)."""

    index: int
    outstanding_tokens: int
    kv: Any
    waiting: Any

    def sync(self) -> None: ...


R = TypeVar("R", bound=Routable)


def route(replicas: list[R], policy: str, counter: int, req: Request | None = None) -> R:
    if policy == "least_outstanding":
        return min(replicas, key=lambda r: (r.outstanding_tokens, r.index))
    if policy == "kv_aware":
        for r in replicas:
            r.sync()
        return min(replicas, key=lambda r: (r.kv.utilization + len(r.waiting) / 1e6, r.index))
    if policy == "prefix_affinity" and req is not None:
        # least work left once the cached prefix is not prefilled again: affinity without piling
        # every request that shares a popular first block onto one replica
        def work(r: R) -> tuple[int, int]:
            return r.outstanding_tokens - r.kv.cached_prefix_blocks(req.prefix_chain) * r.kv.block_tokens, r.index

        return min(replicas, key=work)
    return replicas[counter % len(replicas)]


@dataclass
class SimOutput:
    requests: list[Request]
    steps: pd.DataFrame
    queue: pd.DataFrame
    replicas: list[Replica]
    gaps: GapHistogram
    horizon_s: float
    transfer: KVTransfer | None = None


def simulate(
    pools: list[PoolSpec],
    workload,
    policy: str,
    router: str,
    block_tokens: int,
    watermark: float,
    horizon_s: float,
    step_sample_every: int = 1,
    max_queue: int | None = None,
    opts: SimOptions | None = None,
) -> SimOutput:
    """Replay ``workload`` through the pools until every request is done or ``horizon_s``."""
    opts = opts or SimOptions()
    if not opts.hash_block_tokens:
        opts.hash_block_tokens = workload.hash_block_tokens or block_tokens
    env = simpy.Environment()
    steps = StepLog(every=step_sample_every)
    transfer = None
    if policy == "disaggregated":
        pre, dec = pools
        front = [
            Replica(env, i, pre, opts.prefill_policy, block_tokens, watermark, steps, max_queue, opts)
            for i in range(pre.replicas)
        ]
        back = [
            Replica(env, pre.replicas + i, dec, "traditional", block_tokens, watermark, steps, None, opts)
            for i in range(dec.replicas)
        ]
        for rep in back:
            rep.decode_role = True
        transfer = KVTransfer(env, back, opts)
        for rep in front:
            rep.handoff = transfer.start
        replicas = front + back
    else:
        front = [
            Replica(env, i, pools[0], policy, block_tokens, watermark, steps, max_queue, opts)
            for i in range(pools[0].replicas)
        ]
        replicas = front
    n = len(workload)
    reqs: list[Request] = []
    q_time: list[float] = []  # arrival instants of the requests routed, and the queue then
    q_wait: list[int] = []
    klass = workload.klass
    hashes = workload.block_hashes
    want_chain = hashes is not None and (opts.prefix_caching or router == "prefix_affinity")
    # the next instant anything from outside reaches a replica: the next arrival (any replica may
    # get it, and routing reads their state), or the horizon
    next_input = [float(workload.arrival_s[0]) if n else np.inf]

    def next_input_s() -> float:
        return min(next_input[0], horizon_s)

    for rep in replicas:
        rep.next_input_s = next_input_s
        rep.sole = len(replicas) == 1

    # Python numbers once, not a numpy scalar per request
    arrival_s, prompts, outputs = (
        workload.arrival_s.tolist(),
        workload.prompt_tokens.tolist(),
        workload.output_tokens.tolist(),
    )

    def arrivals():
        for i in range(n):
            t = arrival_s[i]
            next_input[0] = t
            if t > env.now:
                yield env.timeout(t - env.now)
            r = Request(
                i,
                t,
                prompts[i],
                outputs[i],
                "" if klass is None else str(klass[i]),
                None if hashes is None else hashes[i],
            )
            r.n_seqs = opts.n_seqs
            if want_chain and r.block_hashes:
                r.prefix_chain = chain_hashes(r.block_hashes, opts.hash_block_tokens, block_tokens, r.prompt_tokens)
            reqs.append(r)
            if transfer is not None:
                r.prefill_only = True
                reason = back[0].sched.rejection_reason(r)
                if reason:
                    r.status, r.reject_reason = REJECTED, f"decode pool: {reason}"
                    continue
            route(front, router, i, r).submit(r)
            q_time.append(t)
            waiting = 0
            for rep in replicas:
                waiting += len(rep.waiting)
            q_wait.append(waiting)
        next_input[0] = np.inf

    env.process(arrivals())
    env.run(until=horizon_s)
    for rep in replicas:  # a decode run cut by the horizon: keep the steps that completed
        rep.finish()
    gaps = GapHistogram()
    for rep in replicas:
        if rep.sched.gaps is not None:
            gaps.merge(rep.sched.gaps)
    m = len(reqs)
    queue = pd.DataFrame({"time_s": q_time, "waiting": q_wait})
    # requests arriving after the horizon are reported as unfinished, never dropped
    for i in range(m, n):
        k = "" if klass is None else str(klass[i])
        h = None if hashes is None else hashes[i]
        t = float(workload.arrival_s[i])
        reqs.append(Request(i, t, int(workload.prompt_tokens[i]), int(workload.output_tokens[i]), k, h))
    return SimOutput(reqs, steps.frame(), queue, replicas, gaps, horizon_s, transfer)
