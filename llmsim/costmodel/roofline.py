"""Roofline pricing: each op's time is max(FLOPs / achievable FLOP/s, bytes / achievable bytes/s).

Achievable rates are the profile's dense peaks times measured efficiencies; GEMM efficiency
depends on the shape (small-m GEMMs under-fill tiles and waves, TPUs pad dims to the systolic
array). Every overhead is a named term in the step breakdown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmsim.costmodel.comm import all_reduce_s, send_s, tp_link
from llmsim.costmodel.ops import BatchShape, Op, OpConfig, step_ops
from llmsim.hardware import HardwareProfile
from llmsim.models import DTYPE_BYTES, ModelSpec


@dataclass(frozen=True, slots=True)
class OpTime:
    """An op priced on a device: per-call compute and memory times, and its total per step."""

    op: Op
    compute_s: float
    memory_s: float
    launch_s: float

    @property
    def per_call_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.launch_s

    @property
    def total_s(self) -> float:
        return self.per_call_s * self.op.count

    @property
    def bound(self) -> str:
        if self.op.kind == "comm":
            return "network"
        return "compute" if self.compute_s >= self.memory_s else "memory"


@dataclass(frozen=True)
class CostConfig(OpConfig):
    """OpConfig plus how kernels are launched and placed."""

    cuda_graphs: bool = False  # decode-only steps replay a captured graph: no launch gaps
    numa_aware: bool = True  # CPU: each socket reads its own memory (else half the reads cross)


@dataclass
class CostModel:
    """Prices batch steps of ``model`` on ``hw`` under ``cfg``. Knows nothing of time or queues."""

    model: ModelSpec
    hw: HardwareProfile
    cfg: CostConfig = field(default_factory=CostConfig)

    def __post_init__(self) -> None:
        self._cache: dict[BatchShape, float] = {}
        eff = self.hw.efficiency
        self._bw = self.hw.bandwidth * eff.memory_fraction.value * self._numa_factor()
        self._elem_bw = self.hw.bandwidth * eff.elementwise_memory_fraction.value * self._numa_factor()
        self._gemm_frac = eff.gemm_max_fraction.value
        self._half_m = eff.gemm_half_m.value
        self._attn_frac = eff.gemm_max_fraction.value * eff.attention_fraction.value
        self._launch = self.hw.overheads.kernel_launch_s.value
        self._step_overhead = self.hw.overheads.step_overhead_s.value
        self._link = tp_link(self.hw, self.cfg.tp)
        self._mxu = self.hw.tpu.mxu_dim if self.hw.tpu else 0

    def _numa_factor(self) -> float:
        cpu = self.hw.cpu
        if cpu is None or cpu.sockets == 1 or self.cfg.numa_aware:
            return 1.0
        # Interleaved pages: a fraction (s-1)/s of reads cross sockets at the remote rate.
        remote = (cpu.sockets - 1) / cpu.sockets
        r = cpu.numa_remote_bandwidth_fraction.value
        return 1.0 / ((1 - remote) + remote / r)

    # ---- pricing one op ----------------------------------------------------------------
    def gemm_efficiency(self, m: int) -> float:
        """Fraction of dense peak a GEMM with m rows reaches (compute side)."""
        return self._gemm_frac * m / (m + self._half_m)

    def _pad(self, d: int) -> int:
        return int(math.ceil(d / self._mxu) * self._mxu) if self._mxu and d else d

    def price(self, op: Op, decode_only: bool = False) -> OpTime:
        launch = 0.0 if (decode_only and self.cfg.cuda_graphs) else self._launch
        if op.kind == "comm":
            t = all_reduce_s(op.bytes_read, self.cfg.tp, self._link, self.hw.efficiency.allreduce_bus_fraction.value)
            return OpTime(op, 0.0, t, 0.0)
        peak = self.hw.peak(op.dtype)
        if op.kind == "gemm":
            flops = op.flops
            if self._mxu:
                flops = 2.0 * self._pad(op.m) * self._pad(op.n) * self._pad(op.k)
            compute = flops / (peak * self.gemm_efficiency(op.m)) if op.m else 0.0
            memory = op.bytes / self._bw
        elif op.kind == "attention":
            compute = op.flops / (peak * self._attn_frac)
            memory = op.bytes / self._bw
        else:
            compute = op.flops / peak
            memory = op.bytes / self._elem_bw
        return OpTime(op, compute, memory, launch)

    # ---- pricing a step ----------------------------------------------------------------
    def ops(self, shape: BatchShape) -> list[Op]:
        return step_ops(self.model, shape, self.cfg)

    def priced(self, shape: BatchShape) -> list[OpTime]:
        decode_only = shape.prefill_tokens == 0
        return [self.price(op, decode_only) for op in self.ops(shape)]

    def stage_time(self, shape: BatchShape) -> float:
        """Device time of one pipeline stage's part of the step (no per-step CPU overhead)."""
        return sum(t.total_s for t in self.priced(shape))

    def step_time(self, shape: BatchShape) -> float:
        """Seconds for one whole step (all stages back to back, plus CPU overhead); cached."""
        t = self._cache.get(shape)
        if t is None:
            if shape.is_empty:
                return 0.0
            t = self.stage_time(shape) * self.cfg.pp + self.pp_send_time(shape) * (self.cfg.pp - 1)
            t += self._step_overhead
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[shape] = t
        return t

    def pp_send_time(self, shape: BatchShape) -> float:
        """Activations sent from one pipeline stage to the next."""
        if self.cfg.pp <= 1:
            return 0.0
        nbytes = shape.tokens * self.model.hidden_size * DTYPE_BYTES[self.cfg.act_dtype]
        return send_s(nbytes, self._link)

    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        """Seconds per named term of a step: each op name, kernel launches, step overhead."""
        out: dict[str, float] = {}
        launches = 0.0
        for t in self.priced(shape):
            out[t.op.name] = out.get(t.op.name, 0.0) + max(t.compute_s, t.memory_s) * t.op.count * self.cfg.pp
            launches += t.launch_s * t.op.count * self.cfg.pp
        out["kernel_launch_overhead"] = launches
        out["pp_send"] = self.pp_send_time(shape) * (self.cfg.pp - 1)
        out["step_overhead"] = self._step_overhead if not shape.is_empty else 0.0
        return out

    # ---- convenience ------------------------------------------------------------------
    def prefill_time(self, prompt_tokens: int) -> float:
        """One whole prompt prefilled alone in one step."""
        from llmsim.costmodel.ops import batch_shape

        return self.step_time(batch_shape([(prompt_tokens, 0)], [], self.model.sliding_window))

    def decode_time(self, contexts: list[int]) -> float:
        from llmsim.costmodel.ops import batch_shape

        return self.step_time(batch_shape([], contexts, self.model.sliding_window))
