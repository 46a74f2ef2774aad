"""Pipeline parallelism (pp > 1): micro-batches flow through the stages of one replica.

When stage 0 is free the replica schedules a micro-batch from the requests not in flight and
pushes it through the stages, one SimPy resource per stage; up to ``pp`` micro-batches are in
flight at once. Uneven micro-batches (a long prefill chunk next to decodes) leave later stages
idle: pipeline bubbles, reported per stage in the summary.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from llmsim.fastpath import Driven
from llmsim.replica import Replica
from llmsim.request import Request
from llmsim.schedulers.plan import BatchPlan


class PipelineReplica(Replica):
    """A replica whose devices form ``pool.pp`` pipeline stages."""

    def setup(self) -> None:
        pp = self.pool.pp
        self.stages = [simpy.Resource(self.env, capacity=1) for _ in range(pp)]
        # each stage's layers as a share of the largest's, which the cost model prices (all 1.0
        # when pp divides the layers); the LM head is the last stage's alone
        split = self.cost.model.stage_split(pp)
        self.stage_shares = [layers / max(split) for layers in split]
        self.stage_busy_s = [0.0] * pp
        self.in_flight = 0
        self.first_start_s = -1.0
        self.last_end_s = 0.0
        self._landed = self.env.event()
        self.async_scheduling = False  # the micro-batch queue already plans ahead (vLLM: a batch queue of pp)

    def loop(self) -> Generator[Any, Any, None]:  # the SimPy process
        env = self.env
        stage0 = self.stages[0]
        while True:
            if not self.sched.has_work():
                yield from self._sleep()
                continue
            if self.in_flight >= len(self.stages):
                yield self._landed
                continue
            slot = stage0.request()
            yield slot
            plan = self.sched.schedule()
            if plan.empty:
                stage0.release(slot)
                if self.in_flight:
                    yield self._landed  # requests come back when a micro-batch lands
                else:
                    yield from self._sleep()
                continue
            members = self.sched.hold(plan)
            self.in_flight += 1
            if self.first_start_s < 0:
                self.first_start_s = env.now
            shape = plan.shape(self.window, self.local_window, self.spec_as_decode)
            head_s = self.cost.head_time(shape)
            stage_s = self.cost.stage_time(shape) - head_s  # (the largest stage's layers)
            send_s = self.cost.pp_send_time(shape)
            # the engine's host work is paid once, at stage 0
            first = self.cost.with_host(
                stage_s * self.stage_shares[0], shape.prefill_seqs + shape.decode_seqs, shape.tokens
            )
            first += self.price.swap_time(plan)
            yield env.timeout(first)
            self.stage_busy_s[0] += first
            self.busy_s += first
            stage0.release(slot)
            # (Driven: SimPy's Process, compiled)
            Driven(env, self._land(plan, members, env.now - first, stage_s, send_s, head_s))

    def _land(
        self, plan: BatchPlan, members: list[Request], start_s: float, stage_s: float, send_s: float, head_s: float
    ) -> Generator[simpy.Event, Any, None]:
        """The micro-batch's way through stages 1..pp-1 (the last with the LM head), then its outcome."""
        env = self.env
        last = len(self.stages) - 1
        for i in range(1, len(self.stages)):
            with self.stages[i].request() as slot:
                yield slot
                busy = send_s + stage_s * self.stage_shares[i] + (head_s if i == last else 0.0)
                yield env.timeout(busy)
                self.stage_busy_s[i] += busy
        self.in_flight -= 1
        dt = env.now - start_s
        self.last_end_s = env.now
        self.outcome(plan, start_s, dt, env.now, 0.0, 0.0)
        self.sched.release(members)
        ev, self._landed = self._landed, env.event()
        ev.succeed()
        self.wake()

    def counters(self) -> dict[str, object]:
        out = super().counters()
        out["active_s"] = max(self.last_end_s - self.first_start_s, 0.0)
        for i, busy in enumerate(self.stage_busy_s):
            out[f"stage{i}_busy_s"] = busy
        return out
