"""Workloads: synthetic generators and real-trace loaders, all producing a columnar Workload."""

from llmsim.workload.base import Workload, slice_and_scale
from llmsim.workload.traces import FORMATS, load_trace

__all__ = ["FORMATS", "Workload", "load_trace", "slice_and_scale"]
