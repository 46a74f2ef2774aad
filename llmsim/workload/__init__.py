"""Workloads: synthetic generators and real-trace loaders, all producing a columnar Workload."""

from llmsim.workload.base import Workload, slice_and_scale

__all__ = ["FORMATS", "Workload", "load_trace", "slice_and_scale"]


def __getattr__(name: str) -> object:
    """The trace loaders (pandas) are imported when a trace is read, not with the package."""
    if name in ("FORMATS", "load_trace"):
        from llmsim.workload import traces

        return getattr(traces, name)
    raise AttributeError(f"module 'llmsim.workload' has no attribute {name!r}")
