"""The SimPy event loop: arrivals, a router, and one process per replica.

``simulate`` builds the replicas of each pool (``replica.Replica``, ``pipeline.PipelineReplica``
when pp > 1, the two sides of ``disagg.py`` when disaggregated), replays the workload's arrivals
through the router, runs SimPy until every request is done or the horizon, and returns plain
data: the request objects, the steps and queue frames, and the replicas' counters as a frame.
All decisions live in the schedulers; all timing in the cost model (plus the host link for swaps
and the KV link between pools).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from array import array
from bisect import bisect_right
from collections.abc import Callable, Generator
from dataclasses import dataclass
from heapq import heappop
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd
import simpy
from simpy.core import URGENT, EventPriority, StopSimulation

from llmsim.autoscaler import Autoscaler, ScalingSpec
from llmsim.build import PoolSpec, longest_hashed
from llmsim.disagg import KVTransfer
from llmsim.dpgroup import DataParallelGroup
from llmsim.fastpath import Driven, Inputs, Later, Timer, simpy_internals
from llmsim.feeder import Feeder
from llmsim.gaps import GapHistogram
from llmsim.kvcache import chain_hashes
from llmsim.options import LinkSpec, SimOptions
from llmsim.pipeline import PipelineReplica
from llmsim.replica import Replica
from llmsim.request import REJECTED, Request
from llmsim.router import StaleRouter, route, view_s
from llmsim.schedulers.base import Scheduler
from llmsim.steplog import StepLog
from llmsim.workload.base import Workload

if TYPE_CHECKING:
    from llmsim.moejit import Key

__all__ = ["LinkSpec", "SimOptions", "SimOutput", "events_pending", "simulate"]


@dataclass
class SimOutput:
    requests: list[Request]
    steps: pd.DataFrame
    queue: pd.DataFrame
    replicas: pd.DataFrame  # one row per replica: ``Replica.counters()``
    gaps: GapHistogram
    horizon_s: float
    events_left: bool  # something was still scheduled at the horizon (work cut off, not stuck)
    transfer: dict[str, float | str] | None = None  # disaggregated: the KV link's totals
    unsent: int = -1  # arrivals that wait on answers (feeder.py): requests never sent by the horizon; -1: none wait
    # autoscaling (autoscaler.py): one row per decision, and each replica's life
    decisions: pd.DataFrame | None = None
    lifetimes: pd.DataFrame | None = None
    free_queues: list[list[int]] | None = None  # each replica's at the end (SimOptions.keep_free_queues)
    moe_kernels: list[tuple[Key, ...]] | None = None  # ... and its compiled MoE kernels
    steps_every: int = 1  # the steps table keeps every n-th step (StepLog.every: past MAX_ROWS, more than asked)


@dataclass
class _Cluster:
    """The replicas of a run, built for its policy."""

    front: list[Replica]  # where arrivals are routed
    replicas: list[Replica]
    transfer: KVTransfer | None
    grow: Callable[[int], Replica]  # builds one more replica of the front pool, with this index


def _build(env, pools, policy, block_tokens, watermark, steps, max_queue, opts, inputs, most) -> _Cluster:  # type: ignore[no-untyped-def]
    # ``most``: replicas the run may reach (an autoscaler's maximum), for the one-replica shortcuts
    sole = sum(p.replicas for p in pools) == 1 and most == 1

    def make(index: int, pool: PoolSpec, pol: str, queue: int | None, o: SimOptions = opts, **side) -> Replica:  # type: ignore[no-untyped-def]
        kind = PipelineReplica if pool.pp > 1 else Replica
        return kind(env, index, pool, pol, block_tokens, watermark, steps, queue, o, inputs, sole, **side)

    def pool_of(first: int, pool: PoolSpec, pol: str, queue: int | None, **side) -> list[Replica]:  # type: ignore[no-untyped-def]
        # the replicas of an expert-parallel pool are the DP ranks of one group: they step together
        group = DataParallelGroup(env) if lockstep(pool) else None
        wake = None if group is None else group.wake
        reps = [make(first + i, pool, pol, queue, group_wake=wake, **side) for i in range(pool.replicas)]
        if group is not None:
            group.start(reps)
        return reps

    # a replica started mid-run (autoscaler.py): an empty cache
    cold = dataclasses.replace(opts, prewarm=[], free_queues=[], moe_kernels=[])

    def grow(index: int) -> Replica:
        return make(index, pools[0], policy, max_queue, cold)

    if policy != "disaggregated":
        front = pool_of(0, pools[0], policy, max_queue)
        return _Cluster(front, front, None, grow)
    pre, dec = pools
    transfer = KVTransfer(env, opts)
    front = pool_of(0, pre, opts.prefill_policy, max_queue, handoff=transfer.start)
    back = pool_of(pre.replicas, dec, "traditional", None, takes_prefilled=True)
    transfer.connect(back)
    return _Cluster(front, front + back, transfer, grow)


# Views walked one by one past this many (a quiet gap of ~11 days of a 100 ms view): further, the
# last one's time is taken by multiplication, a rounding apart from the walk's
_MAX_WALKED_LOOKS = 10_000_000


def engine_reach_s(arrival_s: np.ndarray, prompt_tokens: np.ndarray, base_s: float, per_token_s: float) -> list[float]:
    """When each request reaches the engine through an API server that handles one request at a
    time, ``base_s + per_token_s x prompt tokens`` each, in arrival order: it starts on a request once
    the one before is done, so request i starts at ``max(arrival_i, start_{i-1} + service_{i-1})``
    (Lindley's recursion; in closed form, the running maximum of arrival less the work before it).
    The request reaches the engine when its handling starts: its own handling is the light-load
    delay the engine's output_delay_s holds (engine.frontend)."""
    service = base_s + per_token_s * prompt_tokens.astype(np.float64)
    before = np.concatenate(([0.0], np.cumsum(service)[:-1]))  # work handled ahead of request i
    slack = arrival_s - before
    latest = np.maximum.accumulate(slack)
    # a request the server was free for starts at its own arrival, exactly (not before + slack)
    start = np.where(latest == slack, arrival_s, before + latest)
    return start.tolist()


def last_look_before(look_s: float, arrival_s: float, every_s: float) -> float:
    """The last of the views ``look_s``, ``look_s + every_s``, ... strictly before ``arrival_s`` (a view
    at the arrival's instant comes after it: the arrival's timer was queued first), at the times
    successive timeouts of ``every_s`` reach, float rounding and all."""
    walked = 0
    while look_s + every_s < arrival_s and walked < _MAX_WALKED_LOOKS:
        look_s += every_s
        walked += 1
    if walked == _MAX_WALKED_LOOKS:
        look_s += max(math.ceil((arrival_s - look_s) / every_s) - 1, 0) * every_s
        if look_s >= arrival_s:  # (rounded onto the arrival or past it)
            look_s -= every_s
    return look_s


def delay_to(now_s: float, t_s: float) -> float:
    """A delay that SimPy adds to ``now_s`` to give exactly ``t_s`` (t_s - now_s may round off)."""
    d = t_s - now_s
    while now_s + d < t_s:
        d = math.nextafter(d, math.inf)
    while now_s + d > t_s:
        d = math.nextafter(d, -math.inf)
    return d


def lockstep(pool: PoolSpec) -> bool:
    """Do the pool's replicas step together: the data-parallel ranks of an expert-parallel group
    (EP degree = replicas x tp, so more than one rank when it exceeds tp; dpgroup.py)?"""
    return pool.cost.cfg.ep > pool.tp


def simulate(
    pools: list[PoolSpec],
    workload: Workload,
    policy: str,
    router: str,
    block_tokens: int,
    watermark: float,
    horizon_s: float,
    step_sample_every: int = 1,
    max_queue: int | None = None,
    opts: SimOptions | None = None,
    progress: Callable[[float, float], None] | None = None,
    scaling: ScalingSpec | None = None,
) -> SimOutput:
    """Replay ``workload`` through the pools until every request is done or ``horizon_s``;
    ``progress(now_s, last_arrival_s)`` follows the simulated time up to the last arrival (a bar);
    ``scaling``: an autoscaler changes the (colocated) pool's replica count as it goes."""
    opts = opts or SimOptions()
    # tokens per content id: the workload's for its requests; the prewarm's own, if it says so
    id_tokens = workload.tokens_per_id(block_tokens)
    # arrivals that wait on answers (feeder.py): no replica may run ahead of SimPy's clock
    feedback = workload.has_dependencies or opts.max_concurrency is not None
    opts = dataclasses.replace(
        opts, prewarm_block_tokens=opts.prewarm_block_tokens or id_tokens, feedback=opts.feedback or feedback
    )
    env = simpy.Environment()
    steps = StepLog(every=step_sample_every)
    n = len(workload)
    inputs = Inputs(float(workload.arrival_s[0]) if n else math.inf, horizon_s)  # what reaches the replicas next
    most = 1 if scaling is None else scaling.max_replicas
    cluster = _build(env, pools, policy, block_tokens, watermark, steps, max_queue, opts, inputs, most)
    front, replicas, transfer = cluster.front, cluster.replicas, cluster.transfer
    reqs: list[Request] = []
    scaler: Autoscaler | None = None
    if scaling is not None:  # the router picks from the replicas serving, a list the autoscaler keeps
        scaler = Autoscaler(env, scaling, replicas, lambda i: hooked(cluster.grow(i)), reqs, lambda: resized())
        front = scaler.serving
        inputs.tick_source = scaler.next_tick_at_s  # the autoscaler reads the replicas then
    # a router with a view of the replicas that lags (router.StaleRouter); else route() reads them live
    seen_every_s = view_s(router, opts.router_view_s)
    stale = StaleRouter(front, router, seen_every_s) if seen_every_s > 0 or router == "vllm_dp" else None

    def idle() -> bool:
        # no request anywhere: the views a quiet gap would take read the same idle replicas, and
        # cut no replica's closed-form run (inputs.look_s), so they change nothing
        return all(rep.num_running == 0 and rep.num_waiting == 0 for rep in replicas)

    def resized() -> None:
        if stale is not None:
            stale.resize()

    def hooked(rep: Replica) -> Replica:
        if feeder is not None:
            rep.on_answered = feeder.answered
        return rep

    def arrivals_left() -> bool:
        return inputs.arrival_s < math.inf if feeder is None else feeder.unsent > 0

    def watch():  # type: ignore[no-untyped-def]
        # the stale router's view, refreshed every seen_every_s while arrivals remain
        assert stale is not None
        while arrivals_left():
            look_s = env.now + seen_every_s  # (as a timeout of seen_every_s queues it)
            if feeder is None and scaler is None and transfer is None and idle():
                look_s = last_look_before(look_s, inputs.arrival_s, seen_every_s)
            inputs.look_s = look_s
            yield env.timeout(delay_to(env.now, look_s))
            stale.look()
        inputs.look_s = math.inf

    # arrival instants of the requests routed, and the queue then: machine numbers (8 bytes a
    # request; a list holds a boxed float of 24 more, 32 MB over a 1M-request run)
    q_time = array("d")
    q_wait = array("q")
    klass = workload.klass
    hashes = workload.block_hashes
    answers = workload.output_hashes  # multi-turn: where a later prompt repeats the answer
    want_chain = hashes is not None and (opts.prefix_caching or router == "prefix_affinity")
    hashed = longest_hashed(pools, router)  # (a longer request is rejected unhashed as it arrives)
    traced = opts.traced_ids
    loras = workload.lora.tolist() if workload.lora is not None else None
    # Python numbers once, not a numpy scalar per request
    arrival_s, prompts, outputs = (
        workload.arrival_s.tolist(),
        workload.prompt_tokens.tolist(),
        workload.output_tokens.tolist(),
    )

    def make(i: int, t: float) -> Request:
        r = Request(
            i,
            t,
            prompts[i],
            outputs[i],
            "" if klass is None else str(klass[i]),
            None if hashes is None else hashes[i],
        )
        r.n_seqs = opts.n_seqs
        if opts.trace_all or i in traced:
            r.chunks = []
        if loras is not None:
            r.lora_id = loras[i]
        if want_chain and r.block_hashes and r.prompt_tokens + r.output_tokens <= hashed:
            # vLLM keys cached blocks by adapter too (the LoRA id in every block's extra keys); a
            # tuple of ints hashes alike in every process (a str's hash is salted per process)
            seed = 0 if r.lora_id < 0 else hash((-1, r.lora_id))
            if answers is not None and answers[i]:  # the answer's full blocks are cached too (kvcache.commit)
                ids, tokens = r.block_hashes + answers[i], r.prompt_tokens + r.output_tokens
            else:
                ids, tokens = r.block_hashes, r.prompt_tokens
            r.prefix_chain = chain_hashes(ids, id_tokens, block_tokens, tokens, seed)
        reqs.append(r)
        return r

    def send(i: int, t: float, reach: float = -1.0) -> Request:
        """Request i, sent at ``t``, reaches the cluster now (at ``reach``, past ``t`` where the API
        server made it wait; -1: at ``t``): routed and submitted (or rejected)."""
        r = make(i, t)
        if transfer is not None:
            r.prefill_only = True
            # the decode pool's own checks (max_model_len, KV capacity), not its policy's step
            # budget: a prompt arrives there computed (vLLM's P/D connectors count it as cached)
            reason = Scheduler.rejection_reason(transfer.decode[0].sched, r)
            if reason:
                r.status, r.reject_reason = REJECTED, f"decode pool: {reason}"
                return r
        (stale.pick(r) if stale is not None else route(front, router, i, r)).submit(r)
        q_time.append(t if reach < 0 else reach)
        waiting = 0 if transfer is None else transfer.waiting  # (a prompt done, its KV not yet moved)
        if reach >= 0:  # the requests sent but still in the API server's queue wait too (engine.frontend)
            waiting += bisect_right(arrival_s, reach) - 1 - i
        for rep in replicas:
            waiting += rep.num_waiting
        q_wait.append(waiting)
        return r

    def drop(i: int, t: float, reason: str) -> Request:
        """Request i is never sent (feeder.py: its session ended): rejected at ``t``."""
        r = make(i, t)
        r.status, r.reject_reason = REJECTED, reason
        return r

    timer = Timer(env)
    # when each request reaches the engine: after the API server has handled the ones before it
    # (engine.frontend; at once where it has none)
    reach_s = arrival_s
    fronted = opts.frontend_base_s > 0 or opts.frontend_per_token_s > 0
    if fronted:
        reach_s = engine_reach_s(
            workload.arrival_s, workload.prompt_tokens, opts.frontend_base_s, opts.frontend_per_token_s
        )

    def arrivals() -> Generator[Any, Any, None]:
        for i in range(n):
            t = reach_s[i]
            inputs.arrival_s = t
            now = timer.now_s()
            if t > now:
                yield timer.after(t - now)
            send(i, arrival_s[i], t if fronted else -1.0)
        inputs.arrival_s = math.inf

    feeder = Feeder(env, workload, opts.max_concurrency, send, drop, opts.answer_delay_s) if feedback else None
    if feeder is None:
        Driven(env, arrivals())
    else:  # arrivals that wait on answers (feeder.py)
        for rep in replicas:
            rep.on_answered = feeder.answered
        feeder.start()
    if stale is not None and seen_every_s > 0:
        env.process(watch())
    if scaler is not None:

        def busy() -> bool:
            # requests still to come, or some replica still has work, and something else is
            # scheduled (with nothing else in SimPy's queue nothing can change: a run without a
            # horizon must end, not tick for ever)
            work = arrivals_left() or any(rep.outstanding_tokens > 0 for rep in replicas)
            return work and env.peek() < np.inf

        env.process(scaler.run(busy))
    run_until(env, horizon_s, workload.latest_send_s, progress)
    for rep in replicas:  # a decode run cut by the horizon: keep the steps that completed
        rep.finish()
    gaps = GapHistogram()
    for rep in replicas:
        if rep.sched.gaps is not None:
            gaps.merge(rep.sched.gaps)
    queue = pd.DataFrame({"time_s": np.frombuffer(q_time, np.float64), "waiting": np.frombuffer(q_wait, np.int64)})
    # requests arriving after the horizon are reported as unfinished, never dropped (with a feeder:
    # those not sent by then, with their session's start as arrival; summary requests.unsent counts them)
    # (without a feeder the requests were made in id order: the rest are the last ones)
    missing = range(len(reqs), n) if feeder is None else sorted(set(range(n)).difference(r.id for r in reqs))
    for i in missing:
        k = "" if klass is None else str(klass[i])
        h = None if hashes is None else hashes[i]
        reqs.append(Request(i, arrival_s[i], prompts[i], outputs[i], k, h))
        if loras is not None:
            reqs[-1].lora_id = loras[i]
    if feeder is not None:
        reqs.sort(key=lambda r: r.id)
    counters = pd.DataFrame([rep.counters() for rep in replicas])
    totals = None if transfer is None else _transfer_totals(transfer)
    unsent = -1 if feeder is None else feeder.unsent
    out = SimOutput(reqs, steps.frame(), queue, counters, gaps, horizon_s, events_pending(env), totals, unsent)
    out.steps_every = steps.every
    if scaler is not None:
        out.decisions, out.lifetimes = scaler.decisions(), scaler.lifetimes(reqs, env.now)
    if opts.keep_free_queues:
        out.free_queues = [rep.kv.free_queue_state() for rep in replicas]
        out.moe_kernels = [() if rep.price.kernels is None else rep.price.kernels.state() for rep in replicas]
    return out


PROGRESS_SLICES = 200


def run_until(
    env: simpy.Environment, horizon_s: float, last_arrival_s: float, progress: Callable[[float, float], None] | None
) -> None:
    """``env.run(until=horizon_s)``; with ``progress``, first in slices up to the last arrival.
    Each slice ends on one more urgent event, which changes no other event's order (SimPy orders
    by time, priority, then insertion), so the results are the same with or without a bar."""
    if progress is not None:
        for k in range(1, PROGRESS_SLICES + 1):
            t = min(horizon_s, last_arrival_s * k / PROGRESS_SLICES)
            if t > env.now:
                run_events(env, t)
            progress(env.now, last_arrival_s)
    if horizon_s == math.inf:  # no horizon: until every request is done (no event left)
        run_events(env, None)
    elif horizon_s > env.now:  # (a horizon before the last arrival was reached by the slices)
        run_events(env, horizon_s)


def run_events(env: simpy.Environment, until_s: float | None) -> None:
    """``env.run(until=until_s)`` with SimPy's event loop compiled: ``Environment.run`` and
    ``step`` of simpy 4.1 (core.py) over the same queue, so the same events in the same order, the
    horizon's stop event left in the queue as SimPy leaves it (most urgent, at the horizon);
    tests/test_run_events.py holds the two equal. SimPy's step is interpreted and runs at every
    event (~4 per request of a busy cluster). The internals read here (``_queue``, ``_now``, ``_eid``) are
    checked first: without them, ``env.run`` itself."""
    if not simpy_internals(env):
        env.run(until=until_s)
        return
    stop: simpy.Event | None = None
    if until_s is not None:
        if not until_s > env.now:
            raise ValueError(f"until ({until_s}) must be greater than the current simulation time")
        stop = simpy.Event(env)
        stop._ok = True
        stop._value = None
        env.schedule(stop, URGENT, until_s - env.now)
    queue = env._queue
    pop = heappop  # (a local: not a module-dict lookup per event)
    while queue:
        entry: tuple[Any, ...] = pop(queue)  # (time, priority, id, event)
        env._now = entry[0]
        event = entry[3]
        if isinstance(event, Later):  # (most events: its fields read directly; it always succeeds)
            timeout = cast(Later, event)  # (a typed name: native field access, not getattr)
            later = cast(list[Callable[[Any], None]], timeout.callbacks)
            timeout.callbacks = None
            for i in range(len(later)):
                later[i](timeout)
            continue
        if stop is not None and event is stop:  # (SimPy's stop callback raises StopSimulation; step puts it back)
            stop.callbacks = []
            env.schedule(stop, EventPriority(-1))
            return
        callbacks = event.callbacks
        event.callbacks = None  # type: ignore[assignment]  # (processed: SimPy's marker)
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):  # a failed event nobody handled
            err = event._value
            exc = type(err)(*err.args)
            exc.__cause__ = err
            raise exc


def _transfer_totals(tr: KVTransfer) -> dict[str, float | str]:
    return {"link": tr.link.kind, "bytes": tr.bytes, "busy_s": tr.busy_s, "waits_s": tr.waits_s}


def events_pending(env: simpy.Environment) -> bool:
    """True if something is still scheduled after ``env.run(until=...)`` returned. SimPy leaves
    its own stop marker (the most urgent event at the horizon) in the queue: step over it first."""
    if env.peek() == env.now:
        with contextlib.suppress(StopSimulation):
            env.step()
    return env.peek() != math.inf
