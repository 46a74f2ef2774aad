"""FLOPs and bytes counted as the reference model runs, to check the cost model's op list.

Every GEMM and attention call records what it actually did (from the array shapes and the
attention mask it really applied). Elementwise ops are recorded by the cost model's stated
convention (FLOPs per element) on the element counts the model really processed. The byte rule
(see docs/reference.md): a kernel reads each input array once and writes its output once; a
GEMM reads its weight matrix once per call; attention reads Q once, and every K/V row it attends
to once; the KV-cache write reads the new K/V activations and writes them in the cache dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmsim.costmodel.ops import BatchShape, OpConfig, step_ops
from llmsim.models import ModelSpec


@dataclass
class OpCount:
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0

    def add(self, flops: float, read: float, written: float) -> None:
        self.flops += flops
        self.bytes_read += read
        self.bytes_written += written


@dataclass
class Counter:
    """Totals per op name (summed over layers and repeated ops such as the two residual adds)."""

    ops: dict[str, OpCount] = field(default_factory=dict)

    def add(self, name: str, flops: float, read: float, written: float) -> None:
        self.ops.setdefault(name, OpCount()).add(flops, read, written)

    def gemm(self, name: str, m: int, n: int, k: int, act_bytes: float, weight_bytes: float) -> None:
        """[m, k] @ [k, n]: 2mnk FLOPs; reads the input and the weight once, writes the output."""
        self.add(name, 2.0 * m * n * k, m * k * act_bytes + k * n * weight_bytes, m * n * act_bytes)

    def elementwise(self, name: str, elems: int, flops_per_elem: float, reads: int, act_bytes: float) -> None:
        self.add(name, flops_per_elem * elems, reads * elems * act_bytes, elems * act_bytes)

    def clear(self) -> None:
        self.ops.clear()


def expected_counts(model: ModelSpec, shape: BatchShape, cfg: OpConfig) -> dict[str, OpCount]:
    """The cost model's op list for the same step, totalled per op name (count x per-call)."""
    out: dict[str, OpCount] = {}
    for op in step_ops(model, shape, cfg):
        out.setdefault(op.name, OpCount()).add(
            op.flops * op.count, op.bytes_read * op.count, op.bytes_written * op.count
        )
    return out
