"""Serving policies as pure decision logic (no time, no SimPy): see base.py for the seam."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llmsim.costmodel.ops import BatchShape
from llmsim.kvcache import BlockManager
from llmsim.schedulers.base import TRANSFERRING, Scheduler, SchedulerConfig, SpecConfig
from llmsim.schedulers.chunked import ChunkedScheduler
from llmsim.schedulers.plan import BatchPlan, DecodeColumns
from llmsim.schedulers.traditional import StaticScheduler, TraditionalScheduler
from llmsim.schedulers.trtllm import TrtllmScheduler
from llmsim.schedulers.vllm import VllmScheduler

if TYPE_CHECKING:
    from llmsim.gaps import GapHistogram

SCHEDULERS: dict[str, type[Scheduler]] = {
    "traditional": TraditionalScheduler,
    "static": StaticScheduler,
    "chunked": ChunkedScheduler,
    "vllm": VllmScheduler,
    "trtllm": TrtllmScheduler,
}
# Policies whose decisions the simulator's shortcuts reproduce exactly (fastpath.py: columnar
# decoders and closed-form decode runs assume that during a run of decode-only steps the policy
# decodes every running request and admits nobody new). tests/test_fastpath.py holds each equal
# to ``exact_steps``; a policy joins only with such a test. Others get neither (steps completing
# without an event still apply to every policy: they depend on no scheduling decision).
FAST_PATH_POLICIES = {"traditional", "chunked", "vllm", "trtllm"}
# Policies that give the only prompt in progress the same chunk every step (the token budget less
# the decodes, or a per-prompt cap) until its last, and admit no waiting request later that they
# could not admit at the first: chunk runs assume it (runs.ChunkRun; tests/test_fastpath.py holds
# them equal to ``exact_steps``).
CHUNK_RUN_POLICIES = {"chunked", "vllm"}


def register_policy(name: str, cls: type[Scheduler], fast_paths: bool = False) -> None:
    """Make a scheduler class available as ``policy.kind: <name>`` to the simulator and the
    reference engine (docs/architecture.md, "How to add a policy")."""
    if name in SCHEDULERS or name == "disaggregated":
        raise ValueError(f"policy {name!r} exists already")
    SCHEDULERS[name] = cls
    if fast_paths:
        FAST_PATH_POLICIES.add(name)


def make_scheduler(
    policy: str,
    cfg: SchedulerConfig,
    kv: BlockManager,
    gaps: GapHistogram | None = None,
    predict_s: Callable[[BatchShape], float] | None = None,
    columns: DecodeColumns | None = None,
) -> Scheduler:
    """The one way a scheduler is built, with its collaborators (the simulator's replicas and the
    reference engine both call it): the KV manager, a TBT histogram, a step-time predictor (the
    dynamic chunk budget asks it) and, on the simulator's fast path, a columnar decode set."""
    if cfg.chunk_budget == "dynamic" and predict_s is None:  # it would silently run a fixed budget
        raise ValueError("chunk_budget: dynamic needs a step-time predictor (predict_s)")
    return SCHEDULERS[policy](cfg, kv, gaps=gaps, predict_s=predict_s, columns=columns)


__all__ = [
    "CHUNK_RUN_POLICIES",
    "FAST_PATH_POLICIES",
    "SCHEDULERS",
    "TRANSFERRING",
    "BatchPlan",
    "DecodeColumns",
    "Scheduler",
    "SchedulerConfig",
    "SpecConfig",
    "make_scheduler",
    "register_policy",
]
