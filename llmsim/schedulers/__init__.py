"""Serving policies as pure decision logic (no time, no SimPy): see base.py for the seam."""

from llmsim.kvcache import BlockManager
from llmsim.schedulers.base import TRANSFERRING, BatchPlan, Scheduler, SchedulerConfig, SpecConfig
from llmsim.schedulers.chunked import ChunkedScheduler
from llmsim.schedulers.traditional import StaticScheduler, TraditionalScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    "traditional": TraditionalScheduler,
    "static": StaticScheduler,
    "chunked": ChunkedScheduler,
}


def make_scheduler(policy: str, cfg: SchedulerConfig, kv: BlockManager) -> Scheduler:
    return SCHEDULERS[policy](cfg, kv)


__all__ = [
    "SCHEDULERS",
    "TRANSFERRING",
    "BatchPlan",
    "Scheduler",
    "SchedulerConfig",
    "SpecConfig",
    "make_scheduler",
]
