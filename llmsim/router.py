"""Routers: which replica of a pool gets a request (the names: ``scenario.ClusterConfig.router``;
docs/policies.md)."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from llmsim.request import Request


class Routable(Protocol):
    """What a router reads of a replica (tests route over stand-ins with just these)."""

    index: int
    outstanding_tokens: int
    kv: Any

    @property
    def num_waiting(self) -> int: ...  # requests queued there

    def sync(self) -> None: ...


R = TypeVar("R", bound=Routable)


def route(replicas: list[R], policy: str, counter: int, req: Request | None = None) -> R:
    if policy == "least_outstanding":
        return min(replicas, key=lambda r: (r.outstanding_tokens, r.index))
    if policy == "kv_aware":
        for r in replicas:
            r.sync()
        return min(replicas, key=lambda r: (r.kv.utilization + r.num_waiting / 1e6, r.index))
    if policy == "prefix_affinity" and req is not None:
        # least work left once the cached prefix is not prefilled again: affinity without piling
        # every request that shares a popular first block onto one replica
        def work(r: R) -> tuple[int, int]:
            return r.outstanding_tokens - r.kv.cached_prefix_blocks(req.prefix_chain) * r.kv.block_tokens, r.index

        return min(replicas, key=work)
    return replicas[counter % len(replicas)]
