"""The SimPy event loop: arrivals, a router, and one process per replica.

Each replica process is a plain generator: ask the scheduler for a plan, ask the cost model how
long it takes, ``yield env.timeout(that)``, apply the outcome. All decisions live in the
schedulers; all timing lives in the cost model.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from llmsim.build import PoolSpec
from llmsim.kvcache import BlockManager
from llmsim.request import REJECTED, Request
from llmsim.results import GapHistogram
from llmsim.schedulers import make_scheduler


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
        return pd.DataFrame(self.cols, columns=STEP_COLUMNS)


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
    "waiting",
]


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
    ) -> None:
        self.env = env
        self.index = index
        self.pool = pool
        self.kv = BlockManager(pool.kv_blocks, block_tokens, watermark)
        self.sched = make_scheduler(policy, pool.sched, self.kv)
        self.sched.gaps = GapHistogram()
        self.cost = pool.cost
        self.window = pool.cost.model.sliding_window
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.steps = steps
        self.max_queue = max_queue
        self.outstanding_tokens = 0  # prompt + output tokens of unfinished requests (for routing)
        self.busy_s = 0.0
        self._idle = True
        self._wake = env.event()
        env.process(self.loop())

    def submit(self, req: Request) -> None:
        req.replica = self.index
        reason = self.sched.rejection_reason(req)
        if not reason and self.max_queue is not None and len(self.waiting) >= self.max_queue:
            reason = f"queue full (max_queue={self.max_queue})"
        if reason:
            req.status = REJECTED
            req.reject_reason = reason
            return
        self.waiting.append(req)
        self.outstanding_tokens += req.prompt_tokens + req.output_tokens
        if self._idle:
            self._idle = False
            self._wake.succeed()

    def loop(self):  # simpy process
        env = self.env
        while True:
            if not self.waiting and not self.running:
                yield from self._sleep()
                continue
            plan = self.sched.schedule(self.waiting, self.running)
            if plan.empty:  # nothing can run until something arrives
                yield from self._sleep()
                continue
            start = env.now
            dt = self.cost.step_time(plan.shape(self.window))
            yield env.timeout(dt)
            self.busy_s += dt
            finished = self.sched.complete(plan, env.now, self.running)
            for r in finished:
                self.outstanding_tokens -= r.prompt_tokens + r.output_tokens
            self.steps.add(
                (
                    self.pool.name,
                    self.index,
                    start,
                    dt,
                    plan.prefill_tokens,
                    len(plan.decode),
                    plan.size,
                    len(plan.preempted),
                    self.kv.used,
                    len(self.waiting),
                )
            )

    def _sleep(self):
        self._idle = True
        self._wake = self.env.event()
        yield self._wake


def route(replicas: list[Replica], policy: str, counter: int) -> Replica:
    if policy == "least_outstanding":
        return min(replicas, key=lambda r: (r.outstanding_tokens, r.index))
    if policy == "kv_aware":
        return min(replicas, key=lambda r: (r.kv.utilization + len(r.waiting) / 1e6, r.index))
    return replicas[counter % len(replicas)]


@dataclass
class SimOutput:
    requests: list[Request]
    steps: pd.DataFrame
    queue: pd.DataFrame
    replicas: list[Replica]
    gaps: GapHistogram
    horizon_s: float


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
) -> SimOutput:
    """Replay ``workload`` through the pools until every request is done or ``horizon_s``."""
    env = simpy.Environment()
    steps = StepLog(every=step_sample_every)
    pool = pools[0]
    replicas = [Replica(env, i, pool, policy, block_tokens, watermark, steps, max_queue) for i in range(pool.replicas)]
    n = len(workload)
    reqs: list[Request] = []
    q_time = np.zeros(n)
    q_wait = np.zeros(n, dtype=np.int64)
    klass = workload.klass
    hashes = workload.block_hashes

    def arrivals():
        for i in range(n):
            t = float(workload.arrival_s[i])
            if t > env.now:
                yield env.timeout(t - env.now)
            r = Request(
                i,
                t,
                int(workload.prompt_tokens[i]),
                int(workload.output_tokens[i]),
                "" if klass is None else str(klass[i]),
                None if hashes is None else hashes[i],
            )
            reqs.append(r)
            route(replicas, router, i).submit(r)
            q_time[i] = t
            q_wait[i] = sum(len(rep.waiting) for rep in replicas)

    env.process(arrivals())
    env.run(until=horizon_s)
    gaps = GapHistogram()
    for rep in replicas:
        gaps.merge(rep.sched.gaps)
    m = len(reqs)
    queue = pd.DataFrame({"time_s": q_time[:m], "waiting": q_wait[:m]})
    return SimOutput(reqs, steps.frame(), queue, replicas, gaps, horizon_s)
