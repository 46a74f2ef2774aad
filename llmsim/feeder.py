"""Arrivals that wait on answers: dependent requests (closed-loop conversations, agents' sub-calls)
and a client-side concurrency cap (``vllm bench serve --max-concurrency``).

A workload without either is replayed by ``sim.simulate``'s own arrival loop, at the times it
gives. With them, when a request is sent depends on the simulation: a request that waits on
others (``Workload.after``) is sent ``Workload.delay_s`` after the last of them is answered, and
with ``max_concurrency`` a request is sent only while fewer than that many are in flight (sent and
neither answered nor rejected), the others waiting first come, first served, as vLLM's benchmark
client holds them on a semaphore. A request's ``arrival_s`` is when it was sent, which is what the
benchmark measures TTFT from. An answer counts when the client has it: ``answer_delay_s`` (the
engine's ``output_delay_s``) after the engine's last step, as its ``finish_s`` says.

``Feeder`` owns that state: the in-flight slots (a SimPy ``Resource``), how many answers each
dependent request still waits for, and the sends. The replicas tell it when a request is answered
(``Replica.on_answered``); a rejection is an answer (the client gets its error at once).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from llmsim.request import REJECTED, Request
from llmsim.workload.base import Workload


class Feeder:
    """Sends the workload's requests as their dependencies and the concurrency cap allow."""

    def __init__(
        self,
        env: simpy.Environment,
        workload: Workload,
        max_concurrency: int | None,
        send: Callable[[int, float], Request],
        drop: Callable[[int, float, str], Request],
        answer_delay_s: float = 0.0,
    ) -> None:
        self.env = env
        self.answer_delay_s = answer_delay_s
        self.send = send  # builds, routes and submits request i, sent now (sim.py)
        self.drop = drop  # builds request i as rejected now, with a reason, never sent
        n = len(workload)
        self.arrival_s = workload.arrival_s.tolist()
        self.slots = simpy.Resource(env, capacity=max_concurrency) if max_concurrency else None
        self._held: dict[int, simpy.resource.Request] = {}  # request id -> its slot
        self.waits = [0] * n  # answers request i still waits for
        self.children: list[list[int]] = [[] for _ in range(n)]  # who waits on request i
        self.delay_s = [0.0] * n
        if workload.after_ptr is not None:
            ptr, idx = workload.after_ptr.tolist(), workload.after_idx.tolist()
            self.delay_s = workload.delay_s.tolist()
            for i in range(n):
                for j in idx[ptr[i] : ptr[i + 1]]:
                    self.children[j].append(i)
                    self.waits[i] += 1
        self.roots = [i for i in range(n) if self.waits[i] == 0]
        self.unsent = n  # neither sent nor dropped yet

    def start(self) -> None:
        self.env.process(self._roots())

    def _roots(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for i in self.roots:
            t = self.arrival_s[i]
            if t > env.now:
                yield env.timeout(t - env.now)
            yield from self._send(i)

    def _send(self, i: int) -> Generator[simpy.Event, Any, None]:
        if self.slots is not None:
            slot = self.slots.request()
            yield slot
            self._held[i] = slot
        self.unsent -= 1
        r = self.send(i, self.env.now)
        if r.status == REJECTED:
            self.answered(r)

    def answered(self, r: Request) -> None:
        """``r`` was answered (finished) or rejected: its slot frees, and who waited on it may go,
        once the client has the answer (``answer_delay_s`` after its last step; a rejection at
        once). After a rejection its session ends: who waited on it is rejected too, never sent (a
        client does not go on with a conversation whose call failed)."""
        if r.status != REJECTED and self.answer_delay_s > 0:
            self.env.process(self._delivered(r))
            return
        self._received(r)

    def _delivered(self, r: Request) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(self.answer_delay_s)
        self._received(r)

    def _received(self, r: Request) -> None:
        slot = self._held.pop(r.id, None)
        if slot is not None and self.slots is not None:
            self.slots.release(slot)
        if r.status == REJECTED:
            self._end_session(r.id)
            return
        for c in self.children[r.id]:
            self.waits[c] -= 1
            if self.waits[c] == 0:
                self.env.process(self._after(c, self.delay_s[c]))

    def _end_session(self, rejected: int) -> None:
        todo = list(self.children[rejected])
        while todo:
            c = todo.pop()
            if self.waits[c] < 0:  # already ended
                continue
            self.waits[c] = -1
            self.unsent -= 1
            self.drop(c, self.env.now, f"session ended: request {rejected} was rejected")
            todo.extend(self.children[c])

    def _after(self, i: int, delay_s: float) -> Generator[simpy.Event, Any, None]:
        if delay_s > 0:
            yield self.env.timeout(delay_s)
        yield from self._send(i)
