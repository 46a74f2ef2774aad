"""A replica's exact shortcuts, behind one interface: the replica asks, this module decides.

Three shortcuts, each giving the same results as one SimPy event per step with every request
touched every step (``llmsim.run(..., exact_steps=True)`` turns them all off;
``tests/test_fastpath.py`` holds the two equal, docs/performance.md measures them):

- **Columnar decoders**: requests past their prompt are held as columns (``decodeset.DecodeSet``)
  where each decodes one token per step and holds ``ceil(tokens / block)`` blocks of its own
  (``shortcuts``): a step costs O(1) in the batch size.
- **Closed-form runs** (``runs.py``): a plan that starts a run of identical decode-only steps is
  priced in one call and waited out with one event (``start_run``, ``wait``); so is a run of a
  prompt's chunks riding on an unchanged columnar decode batch (each of its steps priced, none
  planned or applied one by one); an arrival that reaches the replica during a run ends it with
  the step in progress (``cut``).
- **Steps without events** (``Clock``): while nothing from outside can reach the replica before a
  step ends (the next arrival is later), the step completes without a SimPy event; the replica's
  clock runs ahead of SimPy's and SimPy's catches up before the replica waits on anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from heapq import heappush
from typing import TYPE_CHECKING, Any, cast, final

import simpy
from simpy.events import NORMAL, Initialize, Timeout  # (not env.timeout: a descriptor call, a bound method)

from llmsim.costmodel.ops import BatchShape
from llmsim.costmodel.roofline import ChunkSteps
from llmsim.decodeset import DecodeSet
from llmsim.runs import (
    MIN_CHUNK_RUN,
    MIN_RUN,
    ChunkRun,
    ColumnRun,
    DecodeRun,
    chunk_run_length,
    column_run_length,
    run_length,
)
from llmsim.schedulers import CHUNK_RUN_POLICIES, FAST_PATH_POLICIES, SCHEDULERS
from llmsim.schedulers.plan import BatchPlan

if TYPE_CHECKING:
    from llmsim.build import PoolSpec
    from llmsim.costmodel.roofline import CostModel
    from llmsim.kvcache import BlockManager
    from llmsim.options import SimOptions
    from llmsim.schedulers.base import Scheduler
    from llmsim.steplog import StepLog

MAX_RUN = 1 << 20  # longest run priced in one go


class Inputs:
    """The next instant anything from outside reaches the replicas (``sim.simulate`` moves it on):
    the next arrival (any replica may get it, and routing reads their state), the next time a
    stale router reads them (router.StaleRouter), the autoscaler's next tick, or the horizon.
    Read before every step a replica completes without an event: typed floats, not a closure."""

    def __init__(self, arrival_s: float, horizon_s: float) -> None:
        self.arrival_s = arrival_s
        self.look_s = math.inf
        self.horizon_s = horizon_s
        self.tick_source: Callable[[], float] | None = None  # the autoscaler's next tick (s), with one

    def next_s(self) -> float:
        t = self.arrival_s if self.arrival_s < self.look_s else self.look_s
        if self.tick_source is not None:
            tick = self.tick_source()
            t = tick if tick < t else t
        return t if t < self.horizon_s else self.horizon_s


def simpy_internals(env: simpy.Environment) -> bool:
    """Does ``env`` hold SimPy 4's queue as ``Later`` and ``sim.run_events`` use it: ``_queue`` a
    heap list of (time, priority, event id, event), ``_now`` the time, ``_eid`` the id counter?"""
    return (
        isinstance(getattr(env, "_queue", None), list)
        and isinstance(getattr(env, "_now", None), (int, float))
        and hasattr(env, "_eid")
    )


@final
class Later:
    """SimPy's ``Timeout`` as a compiled object: a valueless event that succeeds at the time it is
    queued for (``Timer.after``, ``Timer.call``), or, made by ``Timer.hold``, once it is queued
    (``Timer.fire``, SimPy's ``succeed``). SimPy's own loop processes it as any event (it reads
    ``callbacks``, ``_ok`` and ``_value``); ``sim.run_events`` and ``Driven`` read its fields
    directly. It has SimPy's read-only state (``triggered``, ``processed``, ``ok``, ``value``) but
    is not an Event: it cannot join a condition (``&``, ``|``, ``AnyOf``), and a process's timer
    queues it again once processed, so only the process waiting on it may keep it."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.callbacks: list[Callable[[Any], None]] | None = None  # (None: processed, or not queued yet)
        self._ok = True
        self._value: object = None
        self.queued = True  # (False while held: ``Timer.hold``, an Event not triggered yet)

    @property
    def triggered(self) -> bool:
        return self.queued  # (a timeout is queued as it is made, as SimPy's Timeout)

    @property
    def processed(self) -> bool:
        return self.callbacks is None

    @property
    def ok(self) -> bool:
        return True

    @property
    def value(self) -> object:
        return None


class Timer:
    """One process's timeouts: ``after(delay)`` is ``Timeout(env, delay)`` queued exactly as SimPy
    queues it (``Environment.schedule``: ``(now + delay, NORMAL, next event id, event)``), as a
    ``Later`` where ``simpy_internals`` holds (else SimPy's Timeout). Timeout's constructor and
    ``schedule`` are interpreted, and in step-exact runs (one event per step) they took a fifth of
    the time. A process waits on one event at a time, so its last Later, once processed (nobody
    waits on it), is queued again rather than a new one made. ``hold``/``fire`` are SimPy's
    ``env.event()``/``succeed()`` for the same process, ``call`` a timeout with a callback."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.native = simpy_internals(env)
        e = cast(Any, env)
        self._queue: list[Any] = e._queue if self.native else []
        self._last: Later | None = None
        # (fields, not module globals or builtins: read per event without a dictionary lookup; the
        # ids and the priority as the objects they are, not unboxed and boxed again)
        self._next_id: Callable[[], object] = e._eid.__next__ if self.native else iter(()).__next__
        self._push: Callable[[list[Any], object], None] = heappush
        self._normal: object = NORMAL

    def after(self, delay: float) -> Later | simpy.Timeout:
        if not self.native:
            return Timeout(self.env, delay)
        event = self._reused()
        self._queue_in(delay, event)
        return event

    def now_s(self) -> float:
        """``env.now``, read without SimPy's interpreted property (several times an arrival)."""
        return cast(Any, self.env)._now if self.native else self.env.now

    def at(self, t_s: float) -> Later | simpy.Timeout:
        """``after`` the delay from now to the instant ``t_s``."""
        return self.after(t_s - self.now_s())

    def hold(self) -> Later | simpy.Event:
        """``env.event()``: an event the process waits on until someone ``fire``s it (a wake-up).
        SimPy makes an Event object and later queues it, both interpreted, at every wake-up of an
        idle replica (one or two per request)."""
        if not self.native:
            return simpy.Event(self.env)
        event = self._reused()
        event.queued = False
        return event

    def fire(self, event: Later | simpy.Event) -> None:
        """``event.succeed()`` for a ``hold``'s event: queued now, as SimPy queues it
        (``Environment.schedule``: now, NORMAL, the next event id)."""
        if not isinstance(event, Later):
            event.succeed()
            return
        later = cast(Later, event)
        later.queued = True
        self._queue_in(0.0, later)

    def call(self, delay: float, callback: Callable[[Any], None]) -> None:
        """``callback(event)`` in ``delay`` seconds, queued as ``after`` queues a timeout: one event
        where a process started for it would take three (its start, the timeout, its end)."""
        if not self.native:
            cast(Any, Timeout(self.env, delay)).callbacks.append(callback)
            return
        event = Later(self.env)  # (not reused: several may be queued at once)
        event.callbacks = [callback]
        self._queue_in(delay, event)

    def _queue_in(self, delay: float, event: Later) -> None:
        """Queue ``event`` as ``Environment.schedule`` does: (now + delay, NORMAL, next event id)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")  # (Timeout's check and message)
        now: float = cast(Any, self.env)._now
        self._push(self._queue, (now + delay, self._normal, self._next_id(), event))

    def _reused(self) -> Later:
        """The process's last Later once processed (nobody waits on it), else a new one; pending."""
        event = self._last
        if event is None or event.callbacks is not None:  # (the first, or the last still queued or held)
            event = self._last = Later(self.env)
        event.callbacks = []
        return event


class Clock:
    """A replica's clock: ahead of SimPy's while its steps complete without an event."""

    def __init__(self, env: simpy.Environment, ahead: bool, inputs: Inputs) -> None:
        self.env = env
        self.ahead = ahead  # may steps complete without an event at all (the replica's kind allows it)
        self.inputs = inputs  # when something from outside can next reach the replica
        self.now = env.now
        self.timer = Timer(env)  # (the events the replica's process waits on)

    def advance(self, dt: float) -> Later | simpy.Timeout | None:
        """Move on by one step of ``dt`` seconds; the event to wait for, or None if no other
        process can read or change the replica's state before the step ends."""
        start = self.now
        self.now = start + dt
        if self.ahead and self.now < self.inputs.next_s():
            return None
        timer = self.timer
        now = timer.now_s()
        return timer.after(dt if now == start else self.now - now)


def retarget(old: Later | simpy.Event, new: Later | simpy.Event) -> None:
    """Whoever waits on ``old`` (a pending timeout) resumes on ``new`` instead; ``old`` still fires,
    with nobody waiting. Cheaper than SimPy's ``Process.interrupt`` (no exception thrown into the
    generator: ~1 µs against ~10 µs), and a run is cut short at about every arrival of a busy
    multi-replica cluster. Uses only ``Event.callbacks``, SimPy's public list of waiters."""
    cast(Any, new).callbacks.extend(old.callbacks)
    cast(Any, old).callbacks.clear()


class Driven:
    """A generator run as a SimPy process, as ``simpy.Process`` runs it (started by an urgent
    event now, resumed by each event it yields, at once if that one is processed already, an
    event scheduled when it returns) but compiled and without what the simulation's own
    processes never use: interrupts, failed events to handle, ``env.active_process``, a process
    as an event to wait on (Process._resume is interpreted, and ran at every event). An
    exception in the generator propagates out of the event loop at once (SimPy raises a copy when
    the failed process's event comes up). tests/test_run_events.py holds it to SimPy's order and
    queue."""

    def __init__(self, env: simpy.Environment, gen: Generator[Any, Any, Any]) -> None:  # (yields Event or Later)
        self._send: Callable[[None], Any] = gen.send  # (bound once: no method lookup per event)
        self.env = env
        self._again: Callable[[Any], None] = self._resume  # (one bound method, not one per event)
        Initialize(env, self)  # type: ignore[arg-type]  # (it reads only ._resume)

    def _resume(self, event: Any) -> None:
        send = self._send
        while True:
            try:
                event = send(None)  # (every event these processes wait on succeeds, valueless)
            except StopIteration:
                simpy.Event(self.env).succeed()  # (as Process's own event: the queue stays SimPy's)
                return
            if isinstance(event, Later):  # (its fields read directly, through a typed name)
                later = cast(Later, event).callbacks
                if later is not None:
                    later.append(self._again)
                    return
                continue
            callbacks = cast(Any, event).callbacks  # (None once processed: read untyped, no list check)
            if callbacks is not None:
                callbacks.append(self._again)
                return


def shortcuts(policy: str, pool: PoolSpec, opts: SimOptions) -> tuple[bool, bool, bool]:
    """(closed-form decode runs, chunk runs, columnar decoders) for a replica of ``pool`` under
    ``policy``."""
    # runs: every decode step of a run is the same one-token step
    runs = (
        not opts.exact_steps
        and pool.pp == 1
        and policy in FAST_PATH_POLICIES
        and pool.sched.speculative is None
        and pool.sched.chunk_budget == "fixed"
        and opts.n_seqs == 1
        # KV offload tiers: a waiting request that does not fit reads blocks back at every plan
        # and gives them up again, which moves blocks between the tiers at each step a run would skip
        and not opts.offload
        # multi-LoRA: a step's price depends on its batch's adapters, not only on its shape
        and opts.lora is None
    )
    # columns: besides, each decoder holds ceil(tokens / block) blocks of its own
    window, local = pool.cost.model.attention_windows()
    policy_cls = SCHEDULERS.get(policy)
    columnar = policy_cls is not None and policy_cls.columnar
    columns = runs and columnar and not opts.prefix_caching and window is None and local is None
    # chunk runs: besides, the policy gives the only prompt in progress the same chunk every step
    return runs, columns and policy in CHUNK_RUN_POLICIES, columns


class FastPath:
    """A replica's closed-form runs: which plans start one, waiting one out, and its steps' rows.

    It holds the replica's collaborators it needs (KV cache, scheduler, cost model, step log), not
    the replica: the replica applies a run's outcome to its own counters (``Replica._apply_run``)."""

    def __init__(
        self,
        env: simpy.Environment,
        kv: BlockManager,
        sched: Scheduler,
        cost: CostModel,
        steps: StepLog,
        where: tuple[str, int],
        runs: bool,
        clock: Clock,
        sole: bool,
        chunk_runs: bool = False,
    ) -> None:
        self.env = env
        self.kv = kv
        self.sched = sched
        self.cost = cost
        self.steps = steps
        self.pool_name, self.index = where  # the replica's steps.csv identity
        self.runs = runs
        self.chunks = chunk_runs
        window, local = cost.model.attention_windows()
        self.window = local or window  # contexts grow linearly only below the (local) window
        self.clock = clock
        self.sole = sole  # every arrival comes to this replica (one replica, nothing routed past it)
        # the run in progress (a ChunkRun is a ColumnRun), while readers from outside may see it
        self.run: DecodeRun | ColumnRun | None = None
        self._cuttable = False  # the replica waits out ``run`` on ``_pending``, and cut() may end it early
        self._pending: Later | simpy.Event | None = None
        self._cut_at = 0  # steps of that run done when it ends

    def start_run(self, plan: BatchPlan, shape: BatchShape) -> DecodeRun | ColumnRun | None:
        """A closed-form run if this plan starts a run of identical decode-only steps, or of one
        prompt's chunks beside unchanged decodes (no swap copies or drafting in the step either:
        they would make its time differ from the next's)."""
        if (
            not self.runs
            or plan.preempted
            or plan.padding
            or plan.spec_k
            or plan.swap_in_tokens
            or plan.swap_out_tokens
        ):
            return None
        if plan.prefill:
            return self._chunk_run(plan, shape) if self.chunks else None
        if plan.changed and self.cost.prices_batch_change:  # (its first step costs more: priced alone)
            return None
        kv, start = self.kv, self.clock.now
        if plan.decode_set is not None:
            if plan.decode:
                return None
            cols = cast(DecodeSet, plan.decode_set)
            k = column_run_length(cols, kv.free_blocks, MAX_RUN, MIN_RUN)
            return ColumnRun(cols, kv, start, self.cost.decode_run_s(shape, k), k) if k else None
        if not plan.decode:
            return None
        k = run_length(plan.decode, kv, self.window, MAX_RUN)
        if k < MIN_RUN:
            return None
        return DecodeRun(list(plan.decode), kv, start, self.cost.decode_run_s(shape, k), k)

    def _chunk_run(self, plan: BatchPlan, shape: BatchShape) -> ChunkRun | None:
        """A chunk run if ``plan`` gives the replica's only prompt in progress a chunk that does not
        finish it (then the policy plans the same chunk again: runs.ChunkRun)."""
        sched = self.sched
        if len(plan.prefill) != 1 or plan.decode or len(sched.running) != 1:
            return None
        prompt, chunk = plan.prefill[0]
        cols = cast(DecodeSet, sched.columns)  # (chunk runs only on columnar replicas: shortcuts)
        k = chunk_run_length(cols, prompt, chunk, self.kv.free_blocks, MAX_RUN, MIN_CHUNK_RUN)
        if not k:
            return None
        times = ChunkSteps(self.cost, shape, plan.changed, chunk, prompt.kv_tokens)
        return ChunkRun(cols, self.kv, self.clock.now, times, k, prompt, chunk)

    def wait(self, run: DecodeRun | ColumnRun) -> Generator[Later | simpy.Event, Any, int]:
        """Wait out a run (an arrival may end it after the step in progress) and emit its tokens and
        prompt chunks; returns the steps done (the replica counts and logs them)."""
        clock = self.clock
        run.waiting0 = len(self.sched.waiting)
        nxt = clock.inputs.next_s()
        if clock.ahead and run.ends_before(nxt):
            done = run.steps  # nothing can interrupt it: no event needed
        elif clock.ahead and self.sole:
            # the next arrival comes here: the run ends with the step in progress at that instant,
            # where cut() would end it, without a second timeout
            done = run.steps_through(nxt)
            self.run = run  # (for the end of the simulation, if the horizon comes first)
            yield clock.timer.at(run.ends[done - 1])
            self.run = None
        else:
            self.run, self._cuttable, self._cut_at = run, True, run.steps
            self._pending = clock.timer.at(run.end_s())
            yield self._pending  # or earlier: cut() moves the replica onto an earlier timeout
            done = self._cut_at
            self.run, self._cuttable, self._pending = None, False, None
        run.apply_through(done, self.sched.gaps)
        clock.now = run.ends[done - 1]
        return done

    def cut(self) -> None:
        """Something reached the replica during a run: end it with the step in progress."""
        if not self._cuttable:
            return
        self._cuttable = False
        run = self.run
        assert run is not None and self._pending is not None  # (set with _cuttable)
        done = run.steps_through(self.clock.timer.now_s())
        run.allocate_through(done)  # the step in progress holds its KV slots (readers see them)
        self._end_after(done)

    def _end_after(self, steps: int) -> None:
        """The run waited on ``_pending`` ends after ``steps`` steps: the replica waits on that
        step's end instead (``_pending`` becomes it, for a later change)."""
        run = self.run
        assert run is not None and self._pending is not None  # (set with _cuttable)
        run.price_through(steps)
        self._cut_at = steps
        timer = self.clock.timer
        later = timer.after(max(0.0, run.ends[steps - 1] - timer.now_s()))
        retarget(self._pending, later)
        self._pending = later

    def sync(self) -> None:
        """Bring KV blocks and tokens up to now inside a run, for readers and writers from outside
        (KV-aware routing, KV transfers and their back-pressure, the end of the run)."""
        run = self.run
        if run is not None:
            done = min(run.steps_done_by(self.clock.timer.now_s()), run.steps - 1)  # the run's end settles itself
            run.apply_through(done, self.sched.gaps)
            run.allocate_through(done + 1)

    def note_external_blocks(self, blocks: int) -> None:
        """Blocks of this replica's cache taken by someone else now (a KV transfer's reservation,
        already taken). The run was as long as the free blocks allowed when it began: if the rest
        of it no longer fits, it ends at the last step that does, where the step-by-step loop
        would find a step without blocks (and preempt)."""
        run = self.run
        if run is None:
            return
        run.note_external_blocks(self.clock.timer.now_s(), blocks)
        if not self._cuttable:  # (cut already: it ends with the step in progress, whose blocks it holds)
            return
        fit = run.steps_that_fit(self.kv.free_blocks)
        if fit >= self._cut_at:
            return
        run.shorten(fit)
        self._end_after(fit)

    def finish(self) -> DecodeRun | ColumnRun | None:
        """At the end of the simulation: a run cut by the horizon with the steps that did complete
        applied (``run.applied``; the caller counts and logs them), and the columnar members'
        counters up to date."""
        run = self.run
        if run is not None:
            self.sync()
        if self.sched.columns is not None:
            self.sched.columns.flush()
        return run

    def log(self, run: DecodeRun | ColumnRun, steps: int, live_last: bool = True) -> None:
        """steps.csv rows of a run, as the step-by-step loop would have written them. The last row
        of a run that ended normally is the live state (finished requests freed)."""
        if self.steps.skip(steps):
            return
        used, held = run.kv_after_steps(0, steps)
        starts = [run.start_s, *run.ends[: steps - 1]]
        n, chunk, kv = run.size, run.chunk, self.kv
        bt = kv.block_tokens
        for i in range(steps):
            if i < steps - 1 or not live_last:
                u, waiting = int(used[i]), run.waiting0
                frag = max(0.0, 1.0 - held[i] / (u * bt)) if u else 0.0
            else:  # the run ends now: what the step-by-step loop logs here is the live state
                u, waiting, frag = kv.used, len(self.sched.waiting), kv.fragmentation
            self.steps.add(
                self.pool_name,
                self.index,
                starts[i],
                run.duration(i),
                chunk,
                n,
                n + 1 if chunk else n,
                0,
                u,
                kv.num_blocks,
                frag,
                waiting,
                0.0,
                0.0,
                0,
            )
