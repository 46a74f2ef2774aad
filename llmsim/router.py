"""Routers: which replica of a pool gets a request (the names: ``scenario.ClusterConfig.router``;
docs/policies.md)."""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from llmsim.request import Request


class Routable(Protocol):
    """What a router reads of a replica (tests route over stand-ins with just these)."""

    index: int
    outstanding_tokens: int
    kv: Any

    @property
    def num_waiting(self) -> int: ...  # requests queued there

    @property
    def num_running(self) -> int: ...  # requests in its batch

    def sync(self) -> None: ...

    def lora_adapters(self) -> tuple[set[int], set[int], int]: ...  # (running, waiting, max_loras)


R = TypeVar("R", bound=Routable)


def route(replicas: list[R], policy: str, counter: int, req: Request | None = None) -> R:
    if policy == "least_outstanding":
        return _least_outstanding(replicas)
    if policy == "kv_aware":
        for r in replicas:
            r.sync()
        return min(replicas, key=lambda r: (r.kv.utilization + r.num_waiting / 1e6, r.index))
    if policy == "prefix_affinity" and req is not None:
        # least work left once the cached prefix is not prefilled again: affinity without piling
        # every request that shares a popular first block onto one replica. (Synced first: a
        # replica inside a decode run allocates its steps' blocks lazily, and an allocation may
        # evict cached blocks the router would otherwise still count)
        for r in replicas:
            r.sync()

        def work(r: R) -> tuple[int, int]:
            bt = r.kv.block_tokens
            cached = r.kv.cached_prefix_blocks(req.prefix_chain, (req.prompt_tokens - 1) // bt)  # of its prompt
            return r.outstanding_tokens - cached * bt, r.index

        return min(replicas, key=work)
    if policy == "lora_affinity" and req is not None:
        return _lora_affinity(replicas, req)
    return replicas[counter % len(replicas)]


def _least_outstanding(replicas: list[R]) -> R:
    """Fewest outstanding tokens, the lowest index on ties (a loop: min() with a key built a
    tuple per replica per arrival, ~5 % of a busy cluster's simulation)."""
    best = replicas[0]
    best_tokens, best_index = best.outstanding_tokens, best.index
    for r in replicas:
        tokens = r.outstanding_tokens
        if tokens < best_tokens or (tokens == best_tokens and r.index < best_index):
            best, best_tokens, best_index = r, tokens, r.index
    return best


def _lora_affinity(replicas: list[R], req: Request) -> R:
    """The Gateway API inference extension's scorers (used by llm-d) summed with equal weights: LoRA
    affinity (``lora.affinity_score``, from each replica's running and waiting adapters) plus queue
    depth (plugins/scorer/queue.go: (most waiting - waiting) / (most - fewest), 1 when all are
    equal); the highest score wins, the lowest index on ties. Without an adapter: by queue."""
    from llmsim.lora import affinity_score  # (only this router needs it)

    waits = [r.num_waiting for r in replicas]
    lo, hi = min(waits), max(waits)
    best, best_score = replicas[0], -1.0
    for r, w in zip(replicas, waits, strict=True):
        running, waiting, max_loras = r.lora_adapters()
        score = (1.0 if hi == lo else (hi - w) / (hi - lo)) + affinity_score(running, waiting, max_loras, req.lora_id)
        if score > best_score:
            best, best_score = r, score
    return best


# cluster.router_view_s when a scenario leaves it unset: llmsim's routers see the replicas live;
# vLLM's DP balancer sees them through the DP coordinator, which publishes every 100 ms
# (vllm/v1/engine/coordinator.py, as in v0.19)
DEFAULT_VIEW_S = {"vllm_dp": 0.1}
VLLM_DP_WAITING_WEIGHT = 4  # DPLBAsyncMPClient's score: 4 x waiting + running (vllm/v1/engine/core_client.py)


def view_s(policy: str, configured: float | None) -> float:
    """Seconds between a router's views of the replicas (0 = live)."""
    return configured if configured is not None else DEFAULT_VIEW_S.get(policy, 0.0)


class StaleRouter(Generic[R]):
    """A router that sees the replicas as they were when it last looked, as real ones do: llm-d's
    and Dynamo's routers read the load and KV events the replicas publish, vLLM's DP balancer the
    counts its coordinator publishes every 100 ms. The simulation refreshes the view every
    ``view_s`` seconds while arrivals remain (``look``; 0: at every arrival); in between only the
    router's own assignments move it (the tokens or the waiting request it just sent), so a stale
    ``kv_aware`` router herds an interval's arrivals onto one replica. Policies:
    ``least_outstanding`` and ``kv_aware`` (as ``route`` scores them) and ``vllm_dp``: vLLM's
    ``DPLBAsyncMPClient.get_core_engine_for_request`` (core_client.py, v0.19), the lowest
    4 x waiting + running, the first in scan order on ties, each assignment counted as one more
    waiting request there (``client_count``, 1 for one API server)."""

    POLICIES = ("least_outstanding", "kv_aware", "vllm_dp")

    def __init__(self, replicas: list[R], policy: str, view_s: float) -> None:
        assert policy in self.POLICIES, policy
        self.replicas = replicas
        self.policy = policy
        self.view_s = view_s
        n = len(replicas)
        self._outstanding = [0] * n
        self._waiting = [0] * n
        self._running = [0] * n
        self._kv = [0.0] * n
        self._seen = list(replicas)  # whom the view's entries describe, in order
        self.look()

    def look(self) -> None:
        """Refresh the view: every replica's load now."""
        for i, r in enumerate(self.replicas):
            r.sync()
            self._outstanding[i] = r.outstanding_tokens
            self._waiting[i] = r.num_waiting
            self._running[i] = r.num_running
            self._kv[i] = r.kv.utilization

    def resize(self) -> None:
        """The replicas changed (an autoscaler started or drained one): keep the view of those
        still there, and read a new one's load (idle: nothing to bring up to date)."""
        seen = {id(r): i for i, r in enumerate(self._seen)}
        old = (self._outstanding, self._waiting, self._running, self._kv)
        self._outstanding, self._waiting, self._running, self._kv = [], [], [], []
        for r in self.replicas:
            i = seen.get(id(r), -1)
            if i >= 0:
                self._outstanding.append(old[0][i])
                self._waiting.append(old[1][i])
                self._running.append(old[2][i])
                self._kv.append(old[3][i])
            else:
                self._outstanding.append(r.outstanding_tokens)
                self._waiting.append(r.num_waiting)
                self._running.append(r.num_running)
                self._kv.append(r.kv.utilization)
        self._seen = list(self.replicas)

    def pick(self, req: Request) -> R:
        if self.view_s <= 0:
            self.look()
        best = 0
        best_score = self._score(0)
        for i in range(1, len(self.replicas)):
            score = self._score(i)
            if score < best_score:  # ties: the lowest index, as every router here
                best, best_score = i, score
        self._waiting[best] += 1
        self._outstanding[best] += req.prompt_tokens + req.output_tokens
        return self.replicas[best]

    def _score(self, i: int) -> float:
        if self.policy == "least_outstanding":
            return float(self._outstanding[i])
        if self.policy == "kv_aware":
            return self._kv[i] + self._waiting[i] / 1e6
        return float(VLLM_DP_WAITING_WEIGHT * self._waiting[i] + self._running[i])
