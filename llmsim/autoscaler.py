"""Autoscaling: the replica count as a policy in the loop, run the way Kubernetes' Horizontal Pod
Autoscaler (HPA) runs it over a vLLM deployment's metrics.

Every ``interval_s`` (the HPA's sync period, 15 s by default) the autoscaler reads one metric of
the replicas that serve (``METRICS``), recommends a count with the HPA's formula (``recommend``),
smooths it over its stabilization windows and rate limits (``stabilize``), and acts:

- **up**: a new replica is requested now and serves ``start_s`` later: the pod's provisioning,
  its weights read from storage, the engine's start (profiling, torch.compile, CUDA-graph
  capture; ``ScalingSpec.start_s``). It is billed from the request.
- **down**: replicas still starting are cancelled first, then the newest serving ones drain, as a
  ReplicaSet removes pods (not ready before ready, newest first): a draining replica gets no new
  requests and is billed until its last one finishes (a graceful drain; an engine killed at a
  termination grace period would abort them instead, which is not modelled).

``Autoscaler`` owns that state: the replicas that serve (the list the router picks from, mutated
in place), each replica's life (``Life``) and one row per decision (``decisions``). The
simulation builds a replica when one is requested (``make``), so a run scales past its initial
count without building replicas it never uses. The decision logic (``recommend``, ``stabilize``)
is pure and tested on its own against the HPA's documented algorithm.

Sources: the HPA algorithm, its 0.1 tolerance, its treatment of pods without metrics, its
default behaviour (scale up by at most max(100 %, 4 pods) per 15 s, no scale-up window, a 300 s
scale-down window) are Kubernetes' (kubernetes.io/docs/tasks/run-application/
horizontal-pod-autoscale, "Algorithm details" and "Default Behavior"; pkg/controller/podautoscaler/
replica_calculator.go). The metrics are vLLM's Prometheus gauges (vllm/v1/metrics/loggers.py,
v0.19): ``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``,
and the time to first token that SLO-driven planners (Dynamo's) scale on.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import simpy

from llmsim.request import REJECTED, Request

# metric -> how it is read: per replica and averaged (an HPA AverageValue target) or one value for
# the deployment (an Object metric, Value target)
METRICS = {
    "waiting": "per replica",  # vllm:num_requests_waiting
    "concurrency": "per replica",  # vllm:num_requests_running + vllm:num_requests_waiting
    "kv_usage": "per replica",  # vllm:kv_cache_usage_perc, 0..1
    "ttft_p90_ms": "deployment",  # p90 TTFT of the requests sent in the last ttft_window_s
}
SCALE_UP_PODS = 4  # the HPA's default scale-up policies: +100 % or +4 pods per 15 s, the larger
SCALE_UP_PERCENT = 100
SCALE_UP_PERIOD_S = 15.0
MAX_RATIO = 1e9  # value / target past this (a target of 1e-300) is capped: the count is clamped to max_replicas anyway


@dataclass(frozen=True)
class ScalingSpec:
    """One autoscaler's settings (``scenario.AutoscalingConfig``, resolved by ``api``)."""

    metric: str
    target: float
    initial: int  # replicas serving at t = 0
    min_replicas: int
    max_replicas: int
    start_s: float  # from a replica's request to its first request served
    interval_s: float = 15.0
    tolerance: float = 0.1
    up_window_s: float = 0.0
    down_window_s: float = 300.0
    ttft_window_s: float = 60.0
    output_delay_s: float = 0.0  # the engine's delay from a token to its output (TTFT as the client sees it)


def recommend(spec: ScalingSpec, values: list[float], serving: int, starting: int) -> int:
    """The HPA's desired count from the metric's ``values`` (one per serving replica, or one for
    the deployment) with ``starting`` more replicas requested but not serving yet.

    desired = ceil(current x value / target), unchanged within the tolerance. For a per-replica
    metric, replicas without metrics yet (starting) count as using nothing when the metric says
    scale up and as exactly at target when it says down, and the decision stands only if it still
    points the same way; a deployment metric scales the serving (ready) count
    (replica_calculator.go: GetObjectMetricReplicas uses the ready pods)."""
    current = serving + starting
    if not values:
        return current
    if METRICS[spec.metric] == "deployment":
        ratio = min(values[0] / spec.target, MAX_RATIO)
        return current if abs(ratio - 1.0) <= spec.tolerance else math.ceil(ratio * serving)
    ratio = min(sum(values) / len(values) / spec.target, MAX_RATIO)
    if abs(ratio - 1.0) <= spec.tolerance:
        return current
    if starting == 0:
        return math.ceil(ratio * current)
    missing = 0.0 if ratio > 1.0 else spec.target
    ratio2 = min((sum(values) + missing * starting) / (spec.target * current), MAX_RATIO)
    if abs(ratio2 - 1.0) <= spec.tolerance or (ratio2 - 1.0) * (ratio - 1.0) < 0:
        return current
    return math.ceil(ratio2 * current)


def stabilize(
    spec: ScalingSpec,
    history: deque[tuple[float, int]],
    now_s: float,
    current: int,
    rec: int,
    ups: deque[tuple[float, int]] | None = None,
) -> int:
    """The count to act on: ``rec`` clamped to [min, max], held between the lowest recommendation
    of the scale-up window and the highest of the scale-down window (``history``: the earlier
    ones, oldest first, those after the window's start counting, as the HPA's ``After(cutoff)``;
    this one is added), and a scale-up limited to max(+100 %, +4) over the replicas there were
    15 s ago (``ups``: the scale-ups of the last period, (time, replicas added); this one is added)."""
    rec = min(max(rec, spec.min_replicas), spec.max_replicas)
    keep_s = max(spec.up_window_s, spec.down_window_s)
    while history and history[0][0] <= now_s - keep_s:
        history.popleft()
    up, down = rec, rec
    for t, r in history:
        if t > now_s - spec.up_window_s:
            up = min(up, r)
        if t > now_s - spec.down_window_s:
            down = max(down, r)
    history.append((now_s, rec))
    new = current
    if new < up:
        new = up
    if new > down:
        new = down
    if new > current:
        ups = deque() if ups is None else ups
        while ups and ups[0][0] <= now_s - SCALE_UP_PERIOD_S:
            ups.popleft()
        start = current - sum(n for _, n in ups)  # the count at the period's start
        limit = max(start * (100 + SCALE_UP_PERCENT) // 100, start + SCALE_UP_PODS)
        new = max(min(new, limit), current)
        if new > current:
            ups.append((now_s, new - current))
    return new


@dataclass
class Life:
    """One replica's life: requested, serving, draining, released (NaN: not reached)."""

    replica: int
    requested_s: float
    ready_s: float = math.nan
    drain_s: float = math.nan
    cancelled_s: float = math.nan


class Autoscaler:
    """Requests, starts, drains and cancels replicas as the HPA decides, every ``interval_s``."""

    def __init__(
        self,
        env: simpy.Environment,
        spec: ScalingSpec,
        replicas: list[Any],
        make: Callable[[int], Any],
        sent: list[Request],
        on_change: Callable[[], None],
    ) -> None:
        self.env = env
        self.spec = spec
        self.replicas = replicas  # every replica built so far (the simulation's list, grown here)
        self.serving = list(replicas[: spec.initial])  # the ones the router picks from
        self.make = make  # builds replica i (a new SimPy process, idle)
        self.sent = sent  # the requests sent so far, in sending order (for ttft_p90_ms)
        self._first_recent = 0  # sent[:_first_recent] were sent before the TTFT window
        self.on_change = on_change  # the serving list changed (a stale router resizes its view)
        self.lives = [Life(i, 0.0, 0.0) for i in range(spec.initial)]
        self.starting: list[int] = []  # replicas requested, not serving yet, oldest first
        self.draining: list[int] = []
        self.history: deque[tuple[float, int]] = deque()
        self.ups: deque[tuple[float, int]] = deque()  # scale-ups of the last 15 s (the rate limit)
        self.next_tick_s = math.inf  # the next instant it reads the replicas (bounds their run-ahead)
        self.rows: list[tuple[float, float, int, int, int, int, int]] = []

    def next_tick_at_s(self) -> float:
        """The next instant it reads the replicas (fastpath.Inputs asks)."""
        return self.next_tick_s

    def run(self, busy: Callable[[], bool]) -> Generator[simpy.Event, Any, None]:
        """The control loop, while ``busy()`` (requests still to come or in flight). Idle at its
        floor (no work anywhere, nothing starting, the metric at 0), every decision until the
        next event would be the same "min_replicas, nothing to do": those are skipped, one of
        them kept in the history (the windows read only its value and time), so a night without
        traffic is one step, not thousands."""
        interval = self.spec.interval_s
        wait = interval
        while busy():
            self.next_tick_s = self.env.now + wait
            yield self.env.timeout(wait)
            idle = self.tick()
            wait = interval
            nxt = self.env.peek()  # the next thing scheduled besides this loop
            if idle and math.isfinite(nxt):
                skip = max(0, math.ceil((nxt - self.env.now) / interval) - 1)
                if skip:
                    self.history.append((self.env.now + skip * interval, self.spec.min_replicas))
                    wait = (skip + 1) * interval
        self.next_tick_s = math.inf

    def tick(self) -> bool:
        """One decision; True if it found everything idle at the floor (``run`` may skip ahead)."""
        now = self.env.now
        for rep in self.serving:
            rep.sync()
        for i in self.draining:
            self.replicas[i].sync()
        self.draining = [i for i in self.draining if self.replicas[i].outstanding_tokens > 0]
        value = self.read()
        rec = recommend(self.spec, value, len(self.serving), len(self.starting))
        current = len(self.serving) + len(self.starting)
        new = stabilize(self.spec, self.history, now, current, rec, self.ups)
        for _ in range(new - current):
            self.request()
        if new < current:
            self.remove(current - new)
        shown = float(np.mean(value)) if value else math.nan
        self.rows.append((now, shown, rec, new, len(self.serving), len(self.starting), len(self.draining)))
        quiet = not any(value) and not self.starting and not self.draining
        return quiet and new == self.spec.min_replicas and all(r.outstanding_tokens == 0 for r in self.serving)

    def read(self) -> list[float]:
        """The metric: one value per serving replica, or one for the deployment."""
        m = self.spec.metric
        if m == "waiting":
            return [float(r.num_waiting) for r in self.serving]
        if m == "concurrency":
            return [float(r.num_waiting + r.num_running) for r in self.serving]
        if m == "kv_usage":
            return [r.kv.utilization for r in self.serving]
        return self._ttft_p90_ms()

    def _ttft_p90_ms(self) -> list[float]:
        """p90 TTFT of the requests sent in the last ``ttft_window_s``, those still waiting for
        their first token counted at their age (a lower bound that grows while they wait: an
        overload shows at once, not when its victims are finally served); 0 with no traffic."""
        now = self.env.now
        sent = self.sent
        lo = self._first_recent
        while lo < len(sent) and sent[lo].arrival_s < now - self.spec.ttft_window_s:
            lo += 1
        self._first_recent = lo
        ttft = []
        for r in sent[lo:]:
            if r.status == REJECTED:
                continue
            first = r.first_token_s + self.spec.output_delay_s
            ttft.append((first if first <= now else now) - r.arrival_s)
        return [float(np.percentile(ttft, 90)) * 1e3 if ttft else 0.0]

    def request(self) -> None:
        i = len(self.replicas)
        self.replicas.append(self.make(i))
        self.lives.append(Life(i, self.env.now))
        self.starting.append(i)
        self.env.process(self._start(i))

    def _start(self, i: int) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(self.spec.start_s)
        life = self.lives[i]
        if math.isnan(life.cancelled_s):
            life.ready_s = self.env.now
            self.starting.remove(i)
            self.serving.append(self.replicas[i])
            self.on_change()

    def remove(self, count: int) -> None:
        """``count`` fewer replicas: the newest starting ones cancelled, then the newest serving
        ones drained."""
        while count and self.starting:
            i = self.starting.pop()
            self.lives[i].cancelled_s = self.env.now
            count -= 1
        while count and len(self.serving) > 0:
            rep = max(self.serving, key=lambda r: r.index)
            self.serving.remove(rep)
            self.lives[rep.index].drain_s = self.env.now
            if rep.outstanding_tokens > 0:
                self.draining.append(rep.index)
            count -= 1
        self.on_change()

    def decisions(self) -> pd.DataFrame:
        """One row per decision: the metric read (the mean over replicas), the count recommended
        and acted on, and the replicas serving, starting and draining after it."""
        cols = ["time_s", "metric", "recommended", "desired", "serving", "starting", "draining"]
        return pd.DataFrame(self.rows, columns=cols)

    def lifetimes(self, reqs: list[Request], end_s: float) -> pd.DataFrame:
        """Each replica's billed span: from its request to its cancellation, to its last request's
        finish once it drained (``end_s`` if one is unfinished), or to ``end_s``."""
        last = [-math.inf] * len(self.lives)
        for r in reqs:
            if 0 <= r.replica < len(last) and r.status != REJECTED:
                f = r.finish_s
                last[r.replica] = max(last[r.replica], f if f == f else math.inf)
        rows = []
        for life in self.lives:
            if not math.isnan(life.cancelled_s):
                released = life.cancelled_s
            elif not math.isnan(life.drain_s):
                released = min(end_s, max(life.drain_s, last[life.replica]))
            else:
                released = end_s
            rows.append((life.replica, life.requested_s, life.ready_s, life.drain_s, life.cancelled_s, released))
        cols = ["replica", "requested_s", "ready_s", "drain_s", "cancelled_s", "released_s"]
        return pd.DataFrame(rows, columns=cols)


def billed_s(lives: pd.DataFrame, start_s: float, end_s: float) -> float:
    """Replica-seconds billed within [start_s, end_s] (the span the run's cost is taken over)."""
    lo = np.maximum(lives["requested_s"].to_numpy(), start_s)
    hi = np.minimum(lives["released_s"].to_numpy(), end_s)
    return float(np.clip(hi - lo, 0.0, None).sum())
