"""Roofline pricing: each op's time is max(FLOPs / achievable FLOP/s, bytes / achievable bytes/s).

Achievable rates are the profile's dense peaks times measured efficiencies; GEMM efficiency
depends on the shape (small-m GEMMs under-fill tiles and waves, TPUs pad dims to the systolic
array). Every overhead is a named term in the step breakdown.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from llmsim.costmodel.comm import DEEPEP_HT_SMS, all_gather_s, all_reduce_s, deepep_s, send_s, tp_link
from llmsim.costmodel.fusedmoe import padded_share, tile_config
from llmsim.costmodel.gemm import GemmCurve
from llmsim.costmodel.ops import (
    HEAD_OPS,
    AttentionDims,
    BatchShape,
    Op,
    OpConfig,
    attention_dtype,
    attention_ops,
    chunk_aggregates,
    deepep_ranks,
    head_ops,
    lora_ops,
    mla_prefill_dtype,
    on_attention_side,
    param_bytes,
    step_ops,
    storage_dtype,
)
from llmsim.engine import PRESETS, EngineSpec
from llmsim.hardware import Figure, HardwareProfile
from llmsim.models import DTYPE_BYTES, ModelSpec

# Prior: unpacking an int4/int8 weight costs ~4 vector ops (shift/mask, convert, scale, and a
# zero-point subtract), as in the Marlin / AWQ GEMM kernels' inner loops (Frantar et al. 2024).
DEFAULT_DEQUANT_FLOPS = 4.0
_EXPERT_OPS = ("mlp_up_proj", "mlp_down_proj")
# _dense_stage_time's lists reach at most this many tokens (rows): past it a step's price is kept
# in a dict, so a scenario's huge step budget cannot make a list of that length
_LISTED: Final = 1 << 16


@dataclass(slots=True, init=False)  # init written out: compiled natively (see BatchShape)
class OpTime:
    """An op priced on a device: per-call compute and memory times, and its total per step."""

    op: Op
    compute_s: float
    memory_s: float
    launch_s: float
    fixed_s: float  # device-side minimum kernel duration (kept under CUDA graphs)
    dequant_s: float  # part of compute_s spent unpacking quantised weights

    def __init__(
        self, op: Op, compute_s: float, memory_s: float, launch_s: float, fixed_s: float = 0.0, dequant_s: float = 0.0
    ) -> None:
        self.op, self.compute_s, self.memory_s, self.launch_s = op, compute_s, memory_s, launch_s
        self.fixed_s, self.dequant_s = fixed_s, dequant_s

    @property
    def kernel_s(self) -> float:
        """What a GPU timer around the kernel measures (no host launch gap)."""
        return max(self.compute_s, self.memory_s) + self.fixed_s

    @property
    def per_call_s(self) -> float:
        return self.kernel_s + self.launch_s

    @property
    def total_s(self) -> float:
        return self.per_call_s * self.op.count

    @property
    def bound(self) -> str:
        if self.op.kind == "comm":
            return "network"
        return "compute" if self.compute_s >= self.memory_s else "memory"


class StepTimes:
    """The step times of a run, each computed where it is read (``step_s(i)``, step ``i``, from
    0): ``runs.Run`` prices only the steps it reaches."""

    def step_s(self, i: int) -> float:  # pragma: no cover (each kind of run has its own)
        raise NotImplementedError


class AffineSteps(StepTimes):
    """Step times ``max(first_s + slope_s * i, floor_s)`` of step ``i`` of a decode run (the floor:
    the host's time per step under async scheduling, which the device time may not undercut). A
    run prices only the steps it reaches (``runs.Run``): arrivals cut most runs well before their
    last step."""

    def __init__(self, first_s: float, slope_s: float, floor_s: float) -> None:
        self.first_s = first_s
        self.slope_s = slope_s
        self.floor_s = floor_s

    def step_s(self, i: int) -> float:
        d: float = i * self.slope_s + self.first_s
        return d if d >= self.floor_s else self.floor_s

    def expand(self, steps: int) -> list[float]:
        return [self.step_s(i) for i in range(steps)]


class ChunkSteps(StepTimes):
    """Step times of a chunk run (``runs.ChunkRun``): step ``i`` is the ``first`` step's plan with
    every decoding context ``i`` tokens longer and the prompt's chunk ``i`` chunks further on
    (after ``past + i * chunk`` cached tokens). Each step is priced as the step-by-step loop
    prices it, ``step_time`` of its shape (the chunk's attention grows with its prefix, and host
    terms and graph padding are not affine); the first as its plan was (``changed``), the others
    after a step with prompt tokens, which changes the next step's batch (engine.batch_change).
    Only for what a columnar replica plans: one prompt's chunk that does not finish it, without
    attention windows, speculation or adapters. Each step is priced once: a run reads its times
    again (its end, its steps.csv rows)."""

    def __init__(self, cost: CostModel, first: BatchShape, changed: bool, chunk: int, past: int) -> None:
        self.cost = cost
        self.first = first
        self.changed = changed
        self.chunk = chunk
        self.past = past
        self._priced: list[float] = []

    def step_s(self, i: int) -> float:
        priced = self._priced
        while len(priced) <= i:
            priced.append(self._price(len(priced)))
        return priced[i]

    def _price(self, i: int) -> float:
        first = self.first
        if not i:
            return self.cost.step_time(first, self.changed)
        c = self.chunk
        pairs, keys_seen, score = chunk_aggregates(c, self.past + i * c)
        shape = BatchShape(
            prefill_tokens=c,
            prefill_seqs=1,
            prefill_attn_pairs=pairs,
            prefill_kv_tokens=keys_seen,
            prefill_score_elems=score,
            decode_seqs=first.decode_seqs,
            decode_tokens=first.decode_tokens,
            decode_ctx_tokens=first.decode_ctx_tokens + i * first.decode_seqs,
            logits_rows=first.logits_rows,
        )
        return self.cost.step_time(shape, True)


@dataclass(frozen=True)
class CostConfig(OpConfig):
    """OpConfig plus how kernels are launched and placed."""

    cuda_graphs: bool = False  # decode-only steps replay a captured graph: no launch gaps
    # captured batch sizes (engine.EngineSpec): a step of up to the largest runs its non-attention
    # kernels in a graph padded to the next size (attention too when decode-only); bigger steps run
    # eager. Empty: every decode-only step is graphed at its own size (the engine-less model)
    cuda_graph_sizes: tuple[int, ...] = ()
    # TensorRT-LLM's graphs (engine.EngineSpec): without padding only a step of a captured size
    # replays one; decode-only, mixed steps run eager
    cuda_graph_padding: bool = True
    cuda_graph_decode_only: bool = False
    numa_aware: bool = True  # CPU: each socket reads its own memory (else half the reads cross)
    # MoE under expert parallelism: routed tokens of the busiest GPU / the mean (>= 1; eplb.py)
    moe_imbalance: float = 1.0
    # vLLM's dual batch overlap (--enable-dbo, with DeepEP): a step of at least its threshold's
    # tokens (decode-only, or with a prompt: --dbo-decode-token-threshold 32 and
    # --dbo-prefill-token-threshold 512 by default, vllm/config/parallel.py) runs as two micro-batches
    dual_batch_overlap: bool = False
    dbo_decode_tokens: int = 32
    dbo_prefill_tokens: int = 512


@dataclass
class CostModel:
    """Prices batch steps of ``model`` on ``hw`` under ``cfg``. Knows nothing of time or queues."""

    model: ModelSpec
    hw: HardwareProfile
    cfg: CostConfig = field(default_factory=CostConfig)
    engine: EngineSpec = PRESETS["ideal"]  # the host terms of a step (engine.py)

    def __post_init__(self) -> None:
        # _dense_stage_time's parts, priced once per input: lists indexed by the step's tokens (its
        # sampled rows for the LM head), one for decode-only steps and one for the rest (-1.0: not
        # priced yet), dicts for steps with a routed-token count (expert parallelism's DP group, or
        # a padded MoE step's real tokens: keyed on it too) and past the lists' reach (``_LISTED``)
        self._body_decode: list[float] = []
        self._body_mixed: list[float] = []
        self._head_decode: list[float] = []
        self._head_mixed: list[float] = []
        self._body_cache: dict[int, float] = {}
        self._head_cache: dict[int, float] = {}
        self._lora_cache: dict[tuple[int, int, bool], float] = {}
        self._parts_cache: dict[int, tuple[float, float, float, float]] = {}  # (_body_parts: dual batch overlap)
        # (only where DeepEP moves tokens between data-parallel ranks: vLLM splits nothing else)
        self._dbo = self.cfg.dual_batch_overlap and deepep_ranks(self.cfg.all2all_backend, self.cfg.ep, self.cfg.tp)
        sms = self.hw.efficiency.gemm_wave_units  # (a GPU's SMs, where its profile gives them)
        ht = self.cfg.all2all_backend == "deepep_high_throughput" and sms is not None and sms.value > DEEPEP_HT_SMS
        self._dbo_share = 1.0 - DEEPEP_HT_SMS / sms.value if ht and sms is not None else 1.0
        self._peaks: dict[str, float] = {}  # dtype -> hw.peak(dtype)
        eff = self.hw.efficiency
        self._bw = self._stream_bw(eff.memory_fraction)
        self._elem_bw = self._stream_bw(eff.elementwise_memory_fraction)
        # elementwise ops measured apart (calibrate on Vidur's mlp.csv): each its own rate and floor
        self._elem_op_bw = {n: self._stream_bw(f) for n, f in (eff.elementwise_op_fraction or {}).items()}
        self._elem_op_fixed = {n: f.value for n, f in (self.hw.overheads.elementwise_op_fixed_s or {}).items()}
        self._curve = GemmCurve.from_profile(self.hw, self.cfg.act_dtype)  # GEMMs compute in act_dtype
        self._curves: dict[str, GemmCurve] = {}  # other compute dtypes (a quantised model's LM head)
        self._fixed = self.hw.overheads.kernel_fixed_s.value if self.hw.overheads.kernel_fixed_s else 0.0
        dq = eff.dequant_flops_per_weight
        self._dequant_flops = dq.value if dq else DEFAULT_DEQUANT_FLOPS
        self._vector_peak = self.hw.peak("fp32")  # unpacking runs on the CUDA/vector cores, not tensor cores
        attn_best = eff.gemm_fraction(attention_dtype(self.cfg))  # attention's own compute dtype
        self._attn_frac = attn_best * eff.attention_fraction.value
        # MLA's prefill kernel runs 16-bit whatever the KV cache (ops.mla_prefill_dtype)
        self._prefill_attn_frac = (
            eff.gemm_fraction(mla_prefill_dtype(self.cfg)) * eff.attention_fraction.value
            if self.model.is_mla
            else self._attn_frac
        )
        # Optional regimes some CPU BLAS builds have (None on every shipped GPU/TPU profile):
        # single-row GEMMs run a GEMV kernel, and decode attention its own (gather + small matmuls).
        dec = eff.decode_attention_fraction
        self._decode_attn_frac = attn_best * dec.value if dec else self._attn_frac
        # attention kernels' own terms where the profile measured them apart (calibrate on an
        # attention profile); absent, attention streams and floors like any kernel and skips masked scores
        attn_mem = eff.attention_memory_fraction
        self._attn_bw = self._stream_bw(attn_mem) if attn_mem else self._bw
        masked, row_keys = eff.attention_masked_fraction, eff.attention_row_keys
        self._masked_frac = masked.value if masked else 0.0
        self._row_keys = row_keys.value if row_keys else 0.0
        attn_fixed = self.hw.overheads.attention_fixed_s
        self._attn_fixed = attn_fixed.value if attn_fixed else self._fixed
        moe = eff.moe_memory_fraction  # the grouped expert kernel's own weight-streaming rate
        self._moe_bw = self._stream_bw(moe) if moe else None
        moe_rate = eff.moe_gemm_fraction  # ... and its compute rate, relative to a dense GEMM's
        self._moe_rate = moe_rate.value if moe_rate else 1.0
        call = self.hw.overheads.moe_call_fixed_s  # ... and its own fixed cost a call (on the up GEMM's)
        self._moe_call = call.value if call else 0.0
        # a GPU's grouped expert kernels (vLLM's Triton fused_moe; TensorRT-LLM's CUTLASS one with
        # its finalize kernel) compute whole tiles (costmodel/fusedmoe.py) and sum each token's
        # top-k outputs in a kernel of their own (ops.topk_sum); a CPU's fused MoE kernel sums them
        # as it goes (vLLM's cpu_fused_moe returns TopKWeightAndReduceNoOP,
        # vllm/model_executor/layers/fused_moe/cpu_fused_moe.py), as XLA fuses a TPU's: ``ops``
        # leaves the sum out there
        self._gpu_experts = self.hw.family == "gpu"

        gemv = eff.gemv_memory_fraction
        self._gemv_bw = self._stream_bw(gemv) if gemv else None
        small = eff.gemm_small_m  # measured rate per m for m = 1..len (replaces the curve there)
        self._small_m: tuple[float, ...] = tuple(small.value) if small else ()
        # a GPU's launches are asynchronous (the host queues the next kernel while one runs); a
        # CPU's operators are not: the cores that compute also dispatch (eager PyTorch: Python,
        # ATen dispatch, the OpenMP fork/join), so there the launch adds to every call, and what
        # it costs is the engine's software as much as the chip's (EngineSpec.cpu_op_s); a
        # calibrated profile (`llmsim calibrate` timed that machine and stack) keeps its own
        self._serial_launch = self.hw.family == "cpu"
        cpu_op = self.engine.cpu_op_s
        if self._serial_launch and cpu_op is not None and self.hw.calibration is None:
            self._launch = cpu_op
        else:
            self._launch = self.hw.overheads.kernel_launch_s.value
        self._step_overhead = self.hw.overheads.step_overhead_s.value
        # host seconds per step: the profile's constant (the ideal engine) or the engine's terms
        self._host_const = self.engine.hardware_step_overhead
        self._async = self.engine.async_scheduling
        self._graph_sizes = self.cfg.cuda_graph_sizes
        # the engine routes a CUDA graph's padding rows to no expert (EngineSpec.moe_skip_padding):
        # where its router can (ops._mlp_ops: not the grouped routers of models with shared
        # experts or dense layers) and the experts are this GPU's alone (no expert parallelism)
        m = self.model
        self._skip_pad: bool = (
            self.engine.moe_skip_padding and m.is_moe and self.cfg.ep == 1 and not (m.dense_layers or m.shared_experts)
        )
        # the captured size each step of up to the largest pads to, by its tokens (graph_view); a
        # table only for capture sizes as vLLM's (up to thousands): any list is accepted, and one of
        # a billion tokens would make a billion-entry table, so those take the bisect instead
        sizes = self._graph_sizes
        table = bool(sizes) and sizes[-1] <= _PAD_TABLE_MAX
        self._padded_to: list[int] = (
            [sizes[bisect.bisect_left(sizes, t)] for t in range(sizes[-1] + 1)] if table else []
        )
        self._graph_size_set = frozenset(sizes)
        e = self.engine  # its host terms summed into one affine form, read per step
        self._host_base = e.schedule.base_s + e.prepare.base_s + e.output.base_s
        self._host_seq = e.schedule.per_seq_s + e.prepare.per_seq_s + e.output.per_seq_s
        self._host_tok = e.schedule.per_token_s + e.prepare.per_token_s + e.output.per_token_s
        ch = e.batch_change  # (paid by a step whose batch changed in the step before: ``changed``)
        self.prices_batch_change = not self._host_const and ch.priced
        self._link = tp_link(self.hw, self.cfg.tp)
        self._ep_link = tp_link(self.hw, self.cfg.ep)  # the MoE dispatch / combine's (expert parallelism)
        # a pipeline stage's activations to the next: over NVLink while all tp x pp GPUs share a node
        self._pp_link = tp_link(self.hw, self.cfg.tp * self.cfg.pp)
        self._bus_fraction = self.hw.efficiency.allreduce_bus_fraction.value
        self._mxu = self.hw.tpu.mxu_dim if self.hw.tpu else 0
        # attention kernels are priced from the step's aggregates directly (see _attention_s)
        self._layers = self.model.stage_layers(self.cfg.pp)
        # a pass through every stage in units of the largest: pp when the layers divide evenly,
        # fewer when some stages hold one layer less (ModelSpec.stage_split)
        self._stages = self.model.num_layers / self._layers
        self._globals = self.model.stage_global_layers(self.cfg.pp)  # (local+global models)
        self._attn = AttentionDims(self.model, self.cfg)
        self._act_peak = self.hw.peak(attention_dtype(self.cfg))  # the attention kernels' rate
        # MLA: its attention side (ops.on_attention_side) is priced from its ops
        self._mla = self.model.is_mla

    def _stream_bw(self, fraction: Figure) -> float:
        """Bytes/s a kernel streams at ``fraction`` of the datasheet bandwidth (NUMA derate included)."""
        return self.hw.bandwidth * fraction.value * self._numa_factor()

    def _numa_factor(self) -> float:
        cpu = self.hw.cpu
        if cpu is None or cpu.sockets == 1 or self.cfg.numa_aware:
            return 1.0
        # Interleaved pages: a fraction (s-1)/s of reads cross sockets at the remote rate.
        remote = (cpu.sockets - 1) / cpu.sockets
        r = cpu.numa_remote_bandwidth_fraction.value
        return 1.0 / ((1 - remote) + remote / r)

    # ---- pricing one op ----------------------------------------------------------------
    def gemm_efficiency(
        self, m: float, n: int = 0, dtype: str = "", weight_dtype: str = "", tiles: float = 0.0
    ) -> float:
        """Fraction of dense peak a GEMM with m rows (and n output columns) reaches, compute side,
        computing in ``dtype`` with weights in ``weight_dtype`` (default: the model's layout; the
        LM head of a quantised model passes its own 16-bit ones).

        ``n = 0`` leaves out wave quantisation (kept for callers that only know m); ``tiles`` > 0
        counts the launch's tiles as given (a grouped GEMM's, ``expert_tiles``) instead of from m and
        n. Where the profile has a measured ``gemm_small_m`` table the table's entry is returned instead."""
        if 0 < m <= len(self._small_m):
            return self._small_m_at(m)
        dtype, weight_dtype = dtype or self.cfg.act_dtype, weight_dtype or self.cfg.weight_dtype
        curve = self._curve if dtype == self.cfg.act_dtype else self._curve_for(dtype)
        a = DTYPE_BYTES[dtype]
        scale = min(1.0, DTYPE_BYTES[weight_dtype] / a)
        if a < 2:  # (8- and 4-bit compute streams a weight byte per 2 / a of the 16-bit rate's FLOPs only
            # where its peak is 2 / a times the 16-bit one: TPU v5p / v6e run fp8 at the bf16 rate)
            scale *= min(1.0, self.hw.peak(dtype) * a / (2.0 * self.hw.peak("bf16")))
        if tiles > 0:
            return float(curve.efficiency_at(m, tiles, scale))
        if not n:
            return curve.max_fraction * m / (m + curve.half_m * scale)
        return float(curve.efficiency(m, n, scale))

    def _small_m_at(self, m: float) -> float:
        """The measured small-m table at ``m`` rows: its entry at a whole m, linear between the two
        entries around a fractional one (a grouped GEMM's mean share), the first entry below 1."""
        lo = int(m)
        if lo < 1:
            return self._small_m[0]
        if lo == m or lo >= len(self._small_m):
            return self._small_m[lo - 1]
        a, b = self._small_m[lo - 1], self._small_m[lo]
        return a + (b - a) * (m - lo)

    def _curve_for(self, dtype: str) -> GemmCurve:
        curve = self._curves.get(dtype)
        if curve is None:
            curve = self._curves[dtype] = GemmCurve.from_profile(self.hw, dtype)
        return curve

    def _dequant_s(self, op: Op) -> float:
        """Weight-only quantisation: unpack each weight once per 128-row block of activations."""
        w, a = op.weight_dtype, op.dtype  # (the LM head stays 16-bit in a quantised model)
        if not op.weight_bytes or DTYPE_BYTES[w] >= DTYPE_BYTES[a]:
            return 0.0
        weights = op.weight_bytes / param_bytes(self.cfg, w)  # every matrix read (each MoE expert touched)
        return weights * math.ceil(op.m / self._curve.tile) * self._dequant_flops / self._vector_peak

    def _pad(self, d: int) -> int:
        return int(math.ceil(d / self._mxu) * self._mxu) if self._mxu and d else d

    def launch_latency(self, decode_only: bool) -> float:
        """Host launch latency per kernel; CUDA graphs remove it from decode-only steps."""
        return 0.0 if (decode_only and self.cfg.cuda_graphs) else self._launch

    def price(self, op: Op, decode_only: bool = False) -> OpTime:
        """Per-call times of one op: compute and memory sides, launch gap, fixed kernel latency."""
        launch = self.launch_latency(decode_only)
        if op.kind == "comm":
            return OpTime(op, 0.0, self.collective_s(op), 0.0)
        peak = self._peaks.get(op.dtype)
        if peak is None:
            peak = self._peaks[op.dtype] = self.hw.peak(op.dtype)
        dequant = 0.0
        fixed = self._fixed
        if op.kind == "gemm":
            flops = self.padded_flops(op)
            rows: float = op.rows if op.rows > 0 else op.m  # (a grouped GEMM's mean share of rows)
            expert = self.model.is_moe and op.name in _EXPERT_OPS
            tiles = 0.0
            if expert and rows > 0:
                padded, tiles = self.expert_tiles(op)
                flops *= padded / rows  # (whole tiles: each expert's rows padded, on a GPU)
                rows = padded
            small = 0 < rows <= len(self._small_m)
            gemv = rows == 1 and self._gemv_bw is not None and not small
            if gemv:  # GEMV: no tiles to fill, streams the weights
                compute = flops / (peak * self._curve.max_fraction)
            else:
                # (the wave term counts the tiles of every GEMM in the launch: n x groups columns)
                eff = self.gemm_efficiency(rows, op.n * op.groups, op.dtype, op.weight_dtype, tiles)
                compute = flops / (peak * eff) if op.m else 0.0
            if expert:
                # the grouped kernel's own rate; the step waits for the busiest expert-parallel GPU
                compute *= self.cfg.moe_imbalance / self._moe_rate
                if op.name == "mlp_up_proj":  # (one a layer: the routing, sort and sum around the GEMMs)
                    fixed += self._moe_call
            dequant = self._dequant_s(op)
            compute += dequant
            if expert and self._moe_bw is not None:
                bw = self._moe_bw
            else:
                bw = self._gemv_bw if rows == 1 and self._gemv_bw is not None else self._bw
            memory = op.bytes / bw
            if small:  # a measured whole-GEMM rate already includes streaming the weights
                memory = 0.0
        elif op.kind == "attention":
            if op.name.startswith("attention_decode"):
                compute = op.flops / (peak * self._decode_attn_frac)
            else:  # prefill: masked scores the kernel pays for and its per-row work, as scores computed
                work = op.flops + self._masked_frac * op.masked_flops + self._row_keys * op.query_flops
                compute = work / (peak * self._prefill_attn_frac)
            memory = op.bytes / self._attn_bw
            fixed = self._attn_fixed
        else:  # elementwise
            compute = op.flops / peak
            memory = op.bytes / self._elem_op_bw.get(op.name, self._elem_bw)
            fixed = self._elem_op_fixed.get(op.name, self._fixed)
        # On a GPU launches are asynchronous: the host queues the next kernel while this one
        # runs, so only the part of the launch latency longer than the kernel leaves the device
        # idle. On a CPU the whole of it is spent on the computing cores (_serial_launch).
        gap = launch if self._serial_launch else max(0.0, launch - (max(compute, memory) + fixed))
        return OpTime(op, compute, memory, gap, fixed, dequant)

    def collective_s(self, op: Op) -> float:
        """Seconds of a comm op: the TP all-reduce or the logits' all-gather over the tensor-
        parallel group, or an expert-parallel all-gather / reduce-scatter over the op's own ranks
        (comm.all_gather_s prices both: a ring reduce-scatter moves what the all-gather of its
        result moves)."""
        if op.collective == "all_reduce":
            return all_reduce_s(op.bytes_read, self.cfg.tp, self._link, self._bus_fraction)
        if op.collective.startswith("deepep_"):
            up = self.hw.scale_up or self._ep_link  # (build refuses DeepEP without NVLink peers)
            span = up.max_devices.value if up.max_devices is not None else op.ranks
            return deepep_s(
                op.m,
                op.n,
                op.k,
                op.ranks,
                int(span),
                self.cfg.all2all_backend == "deepep_low_latency",
                op.collective == "deepep_combine",
                up,
                self.hw.scale_out or self._ep_link,
                (self.model.expert_groups, self.model.expert_groups_per_token),
            )
        total = op.bytes_read if op.bytes_read > op.bytes_written else op.bytes_written
        link = self._link if op.collective == "tp_all_gather" else self._ep_link
        return all_gather_s(total, op.ranks, link, self._bus_fraction)

    @staticmethod
    def _weight_only(op: Op) -> bool:
        """Weight-only quantised (W4A16, W8A16, MXFP4 on 16-bit activations): vLLM runs such experts
        on other kernels (Marlin's MoE, with tile heights of its own from 8 rows), so their rows are
        not padded to the Triton kernel's tiles."""
        w = DTYPE_BYTES[op.weight_dtype]
        return w < 2 and w < DTYPE_BYTES[op.dtype]

    def expert_tiles(self, op: Op) -> tuple[float, float]:
        """(rows a touched expert's GEMM executes, tiles its launch holds) of a grouped expert GEMM.
        On a GPU (not weight-only) the fused kernel's: each expert's rows padded to its tile height
        (``fusedmoe.padded_share``), and the launch's grid, its tiles over the experts reached, a mean
        (so the wave count follows the work smoothly: a share just past one tile, counted as two,
        made one more token cheaper). Elsewhere the mean share itself, at least one of the curve's
        tiles an expert."""
        share = op.rows if op.rows > 0 else float(op.m)
        touched = op.flops / (2.0 * op.n * op.k * share)  # (exact: ``groups`` is rounded)
        if self._gpu_experts and not self._weight_only(op):
            block_m, block_n = self.expert_tile_shape(op)
            padded = padded_share(share, block_m)
            return padded, touched * padded / block_m * math.ceil(op.n / block_n)
        tile = self._curve.tile
        return share, touched * max(1.0, share / tile) * math.ceil(op.n / tile)

    def expert_tile_shape(self, op: Op) -> tuple[int, int]:
        """(BLOCK_SIZE_M, BLOCK_SIZE_N) vLLM's default config gives the fused kernel's call
        (``fusedmoe.tile_config``) by its tokens (``op.tokens``: the step's, padded to its CUDA
        graph, or those gathered from the expert-parallel ranks). They are vLLM's 16-bit ones for
        every dtype: its block-quantised FP8 branch (16 rows to 64 tokens, 64 beyond) is not told
        apart, llmsim not knowing a checkpoint's scale layout, and other engines' grouped GEMMs
        tile by shapes of their own."""
        tokens = op.tokens
        if tokens <= 0:  # (an op made by hand: the tokens its routed rows came from)
            routed = op.flops / (2.0 * op.n * op.k)
            tokens = max(1, round(routed * self.cfg.ep / self.model.experts_per_token))
        local = (self.model.num_experts + self.cfg.redundant_experts) // self.cfg.ep
        config = tile_config(tokens, local)
        return config[0], config[1]

    def padded_flops(self, op: Op) -> float:
        """GEMM FLOPs the device actually executes: a TPU's weight-stationary systolic array holds
        weight tiles of mxu_dim x mxu_dim, so k and n pad to multiples of it. The m activation rows
        stream through (m + mxu_dim cycles): that under-fill is the m/(m + gemm_half_m) curve, with
        gemm_half_m = mxu_dim in the TPU profiles, so m is not padded too."""
        if self._mxu and op.n and op.k:
            return op.flops * (self._pad(op.n) / op.n) * (self._pad(op.k) / op.k)
        return op.flops

    # ---- pricing a step ----------------------------------------------------------------
    def ops(self, shape: BatchShape) -> list[Op]:
        ops = step_ops(self.model, shape, self.cfg)
        if self.model.is_moe and not self._gpu_experts:  # (the fused MoE kernel sums the top-k itself)
            return [op for op in ops if op.name != "moe_sum"]
        return ops

    def priced(self, shape: BatchShape) -> list[OpTime]:
        """Every op of the step priced, launch gaps as the step's CUDA-graph view has them."""
        _, body_graphed, attn_graphed = self.graph_view(shape.tokens, shape.prefill_tokens == 0)
        return [self.price(op, attn_graphed if on_attention_side(op) else body_graphed) for op in self.ops(shape)]

    def stage_time(self, shape: BatchShape) -> float:
        """Device time of the largest pipeline stage's layers and the LM head (``head_time``, the
        last stage's alone under pipeline parallelism); no per-step CPU overhead. Without pipeline
        parallelism, the step's device time."""
        stage = sum(t.total_s for t in self.priced(shape))
        return stage + self.dbo_delta_s(shape, self._stage_s(shape)) if self._dbo else stage

    def step_time(self, shape: BatchShape, changed: bool = False) -> float:
        """Seconds for one whole step (all stages back to back, plus CPU overhead; ``changed``: the
        running batch changed in the step before, which the engine's ``batch_change`` term prices).

        Equal to ``(stage_time(shape) - head_time(shape)) * pp + head_time(shape) + sends +
        overhead`` (a test checks it), computed faster:
        every op but attention depends only on (tokens, sampled rows), so that part is cached on
        those two numbers, and the attention kernels are priced straight from the aggregates.
        """
        tokens = shape.tokens
        if not tokens:
            return 0.0
        stage = self._stage_s(shape)
        if self._dbo:
            stage += self.dbo_delta_s(shape, stage)
        if self.cfg.pp > 1:
            stage = float(self._layers_through_stages(stage, shape))
        return self.with_host(stage, shape.prefill_seqs + shape.decode_seqs, tokens, changed)

    def _stage_s(self, shape: BatchShape) -> float:
        """One stage's device time of a step as ``step_time`` prices it, a CUDA graph's padding rows
        included (dual batch overlap's split apart)."""
        body_tokens, body_graphed, attn_graphed = self.graph_view(shape.tokens, shape.prefill_tokens == 0)
        routed = self._routed_tokens(body_tokens, shape.tokens, shape.group_tokens)
        stage = self._dense_stage_time(body_tokens, shape.lm_rows, body_graphed, routed)
        stage += self._attention_s(shape, attn_graphed)
        if shape.lora_tokens and self.cfg.lora_rank:
            stage += self._lora_s(shape.lora_tokens, shape.lora_adapters, body_graphed)
        return stage

    def microbatched(self, tokens: int, decode_only: bool) -> bool:
        """Would dual batch overlap split a step of ``tokens`` alone (at least its threshold,
        vLLM's ``check_ubatch_thresholds``)? Data-parallel ranks split only together
        (``BatchShape.microbatch``, set by dpgroup.py)."""
        if not self._dbo:
            return False
        return tokens >= (self.cfg.dbo_decode_tokens if decode_only else self.cfg.dbo_prefill_tokens)

    def dbo_delta_s(self, shape: BatchShape, stage_s: float) -> float:
        """What dual batch overlap changes a stage of ``stage_s`` seconds by (0 where the step is
        not split). vLLM runs the step as two micro-batches of half its tokens, each the whole
        model, in the schedule of docs/design/dbo.md ("mlp_overlap"): each layer passes through four
        phases, in each one micro-batch computes while the other's transfer runs, so a phase lasts
        the longer of the two: attention (with the router and any shared expert) against a
        dispatch, the experts against a dispatch, the experts against a combine, attention against
        a combine (micro-batch 0's attention beside 1's dispatch, 1's experts beside 0's dispatch, 0's
        experts beside 1's combine, 1's attention beside 0's combine). Attention, the LM head and LoRA
        are taken as each micro-batch's share of the whole step's. DeepEP's
        normal kernels run on 20 of the GPU's SMs (vLLM's DeepEPHTAll2AllManager.num_sms, "the
        DeepEP default"; vllm/distributed/device_communicators/all2all.py), so the compute beside
        them runs on the rest (its low-latency kernels take none: their max_sms_used is 0)."""
        tokens = shape.tokens
        decode_only = shape.prefill_tokens == 0
        split = shape.microbatch == 1 if shape.microbatch >= 0 else self.microbatched(tokens, decode_only)
        if not (self._dbo and split):
            return 0.0
        body_tokens, graphed, _ = self.graph_view(tokens, decode_only)
        if body_tokens < 2:  # (vLLM gives up the split where a micro-batch would be empty)
            return 0.0
        group = self._routed_tokens(body_tokens, tokens, shape.group_tokens)
        rest = stage_s - sum(self._body_parts(body_tokens, graphed, group))  # attention, LM head, LoRA
        # (vLLM splits at tokens // 2, ubatch_utils.create_ubatch_slices: micro-batch 1 takes the odd token)
        first, second = body_tokens // 2, body_tokens - body_tokens // 2
        other0, experts0, dispatch0, combine0 = self._body_parts(first, graphed, group // 2)
        other1, experts1, dispatch1, combine1 = self._body_parts(second, graphed, group - group // 2)
        attention0 = other0 + rest * first / body_tokens
        attention1 = other1 + rest * second / body_tokens
        share = self._dbo_share
        phases = (
            _overlapped_s(attention0, dispatch1, share)
            + _overlapped_s(experts1, dispatch0, share)
            + _overlapped_s(experts0, combine1, share)
            + _overlapped_s(attention1, combine0, share)
        )
        return phases - stage_s

    def _body_parts(self, tokens: int, decode_only: bool, group_tokens: int) -> tuple[float, float, float, float]:
        """The layers' ops except attention, what ``_body_s`` sums, in the four parts dual batch
        overlap schedules apart: (the rest of the compute, a TP all-reduce included; the routed
        experts' GEMMs and activation; DeepEP's dispatches; its combines), seconds. Cached."""
        key = (tokens << 32 | group_tokens) << 1 | decode_only
        parts = self._parts_cache.get(key)
        if parts is None:
            other = experts = dispatch = combine = 0.0
            for op in self.ops(_body_shape(tokens, decode_only, group_tokens)):
                if on_attention_side(op):
                    continue
                t = self.price(op, decode_only).total_s
                if op.collective == "deepep_dispatch":
                    dispatch += t
                elif op.collective == "deepep_combine":
                    combine += t
                elif op.name in _EXPERT_OPS or op.name == "mlp_act":
                    experts += t
                else:
                    other += t
            parts = self._parts_cache[key] = (other, experts, dispatch, combine)
        return parts

    def _routed_tokens(self, body_tokens: int, tokens: int, group_tokens: int) -> int:
        """``BatchShape.group_tokens`` for pricing a step of ``tokens`` padded to ``body_tokens``:
        under expert parallelism the DP group's gathered tokens; without it, the real tokens where
        the engine routes the padding rows to no expert, else 0 (every row routed). (A shape can
        carry a group count without expert parallelism here: a draft model's, stepcost._grouped.)"""
        if self.cfg.ep > 1:
            return group_tokens
        return tokens if self._skip_pad and body_tokens != tokens else 0

    def group_tokens(self, tokens: list[int], decode_only: bool) -> int:
        """Expert parallelism over lock-stepped DP ranks (dpgroup.py) carrying ``tokens`` this step
        (a rank with nothing to run carries its one-token dummy batch): the tokens the group's MoE
        layers gather. vLLM agrees the counts across the group (``coordinate_batch_across_dp``,
        vllm/v1/worker/dp_utils.py): on a step every rank runs in CUDA graphs each pads to the
        largest rank's graph size; otherwise each gathers its own count."""
        most = max(tokens)
        padded, graphed, _ = self.graph_view(most, decode_only)
        if self.cfg.cuda_graphs and self._graph_sizes and graphed:
            return padded * len(tokens)
        return sum(tokens)

    def graph_view(self, tokens: int, decode_only: bool) -> tuple[int, bool, bool]:
        """How a step of ``tokens`` runs under CUDA graphs: (tokens its non-attention kernels
        process, padding included; are those graphed; is attention graphed). Without capture sizes
        decode-only steps are graphed whole at their own size; with them (vLLM's FULL_AND_PIECEWISE,
        vllm/config/compilation.py) any step up to the largest size pads to the next one, runs
        its GEMMs and norms in graphs, and its attention too when it is decode-only. An engine
        whose graphs take decode-only steps alone (``cuda_graph_decode_only``) runs mixed steps
        eager, and one without padding (``cuda_graph_padding`` false) replays a graph only for a
        step of a captured size (TensorRT-LLM's defaults)."""
        if not self.cfg.cuda_graphs:
            return tokens, decode_only, decode_only  # (the flags only matter with graphs)
        sizes = self._graph_sizes
        if not sizes:
            return tokens, decode_only, decode_only
        if tokens > sizes[-1] or (self.cfg.cuda_graph_decode_only and not decode_only):
            return tokens, False, False
        if not self.cfg.cuda_graph_padding:  # (TensorRT-LLM's default: a captured size, or eager)
            graphed = tokens in self._graph_size_set
            return tokens, graphed, graphed and decode_only
        if tokens < len(self._padded_to):
            return self._padded_to[tokens], True, decode_only
        return sizes[bisect.bisect_left(sizes, tokens)], True, decode_only

    def host_s(self, seqs: int, tokens: int) -> float:
        """Host seconds of a step: the profile's constant (ideal engine) or the engine's terms."""
        if self._host_const:
            return self._step_overhead
        # the engine's HostTerm.seconds summed, from floats read once (breakdown names the terms)
        return self._host_base + self._host_seq * seqs + self._host_tok * tokens

    def with_host(self, device_s: float, seqs: int, tokens: int, changed: bool = False) -> float:
        """A step's seconds from its device time: host work follows the device (sync), or
        overlaps the previous step's device time (async scheduling) so the longer one sets the pace."""
        host = self.host_s(seqs, tokens)
        if changed and self.prices_batch_change:
            host += self.engine.batch_change.seconds(seqs, tokens)
        if self._async:
            return device_s if device_s > host else host
        return device_s + host

    def decode_steps_s(self, shape: BatchShape, steps: int) -> list[float]:
        """``step_time`` of ``steps`` successive decode-only steps from ``shape``, each with every
        context one token longer (``decode_run_s``'s times, every step priced)."""
        times = self.decode_run_s(shape, steps)
        return times if isinstance(times, list) else times.expand(steps)

    def decode_run_s(self, shape: BatchShape, steps: int) -> list[float] | AffineSteps:
        """The step times of a run of ``steps`` decode-only steps from ``shape`` (every context one
        token longer each step; a run never crosses a sliding window, so the local view grows the
        same): an ``AffineSteps`` where they are affine in the step (most runs: a run reads only
        the steps it reaches), else every step priced, vectorised with the same arithmetic as
        ``_attention_s`` on an array of contexts."""
        n = shape.decode_tokens
        if self._mla or self._dbo:  # (priced from its ops; dual batch overlap's max: step by step)
            return [self.step_time(_grown(shape, n * i)) for i in range(steps)]
        body_tokens, body_graphed, graphed = self.graph_view(shape.tokens, True)
        routed = self._routed_tokens(body_tokens, shape.tokens, shape.group_tokens)
        stage = self._dense_stage_time(body_tokens, shape.lm_rows, body_graphed, routed)
        host = self.host_s(shape.decode_seqs, shape.tokens)  # the batch is the same every step
        if shape.local is None and self.cfg.pp == 1 and steps > 2:
            affine = self._affine_decode_steps_s(shape, steps, stage, host, graphed)
            if affine is not None:
                return affine
        grow = np.arange(0, n * steps, n, dtype=np.int64) if n else np.zeros(steps, dtype=np.int64)
        if shape.local is None:
            att = self._decode_attention_steps_s(
                shape.decode_ctx_tokens + grow, n, shape.decode_seqs, self._layers, graphed
            )
        else:
            glob = self._globals
            att = self._decode_attention_steps_s(shape.decode_ctx_tokens + grow, n, shape.decode_seqs, glob, graphed)
            local = shape.local
            att = att + self._decode_attention_steps_s(
                local.decode_ctx_tokens + grow, n, local.decode_seqs, self._layers - glob, graphed
            )
        if self.cfg.pp == 1 and isinstance(att, np.ndarray) and not self._async:
            att += stage + host  # in place (and in this order: the sums stay those of step_time's cache)
            return att.tolist()
        device = self._layers_through_stages(stage + att, shape) if self.cfg.pp > 1 else stage + att
        out = np.maximum(device, host) if self._async else device + host
        return out.tolist() if isinstance(out, np.ndarray) else [float(out)] * steps

    def _affine_decode_steps_s(
        self, shape: BatchShape, steps: int, stage_s: float, host_s: float, graphed: bool
    ) -> AffineSteps | None:
        """The run's step times as ``first + slope * i`` where that is exact to rounding, else None.

        Decode attention's time is convex and piecewise linear in the context (the max of compute
        and memory time, then of that and the launch latency), so it is linear over the run exactly
        when one inner step lies on the chord between the first and the last (a convex function
        that meets its chord inside an interval is that chord). Most runs sit in one regime."""
        n, seqs, ctx = shape.decode_tokens, shape.decode_seqs, shape.decode_ctx_tokens
        last, mid = steps - 1, (steps - 1) // 2
        a0: float = self._decode_attention_s(ctx, n, seqs, self._layers, graphed)
        am: float = self._decode_attention_s(ctx + n * mid, n, seqs, self._layers, graphed)
        a1: float = self._decode_attention_s(ctx + n * last, n, seqs, self._layers, graphed)
        if abs(a0 + (a1 - a0) * mid / last - am) > 1e-12 * a1:  # a kink inside the run
            return None
        slope: float = (a1 - a0) / last
        if self._async:  # max(device, host): the device time grows, so host may lead only at first
            return AffineSteps(stage_s + a0, slope, host_s)
        return AffineSteps(stage_s + a0 + host_s, slope, -math.inf)

    # ---- attention from aggregates ------------------------------------------------------
    def _attention_s(self, s: BatchShape, decode_only: bool) -> float:
        """Stage time of the step's attention kernels: what ``price`` gives for ``attention_ops``,
        without building the ops. The FLOPs and bytes come from ``ops.AttentionDims`` as the ops'
        do; the time arithmetic here is the speed copy of ``price``'s, held to it by
        ``tests/test_one_source.py::test_fast_attention_pricing_matches_priced_ops``. Local+global
        models price the global layers on ``s`` and the windowed ones on ``s.local``."""
        if self._mla:
            return sum(self.price(op, decode_only).total_s for op in attention_ops(self.model, s, self.cfg))
        if s.local is None:
            return self._attention_layers_s(s, self._layers, decode_only)
        glob = self._globals
        return self._attention_layers_s(s, glob, decode_only) + self._attention_layers_s(
            s.local, self._layers - glob, decode_only
        )

    def _attention_layers_s(self, s: BatchShape, layers: int, decode_only: bool) -> float:
        if layers <= 0:
            return 0.0
        t = 0.0
        if s.prefill_tokens:
            flops, read, written = self._attn.prefill(s)
            if self._masked_frac or self._row_keys:
                flops += self._masked_frac * self._attn.prefill_masked_flops(s)
                flops += self._row_keys * self._attn.prefill_query_flops(s)
            compute = flops / (self._act_peak * self._attn_frac)
            memory = (read + written) / self._attn_bw
            launch = self.launch_latency(decode_only)
            t += _kernel_total_s(compute, memory, self._attn_fixed, launch, self._serial_launch) * layers
        if s.decode_tokens:
            t += self._decode_attention_s(s.decode_ctx_tokens, s.decode_tokens, s.decode_seqs, layers, decode_only)
        return t

    def _decode_attention_terms(self, tokens: int, seqs: int) -> tuple[float, float, float]:
        """Decode attention's compute and memory seconds per context token and its q traffic, from
        ``AttentionDims``' per-context FLOPs and bytes: the scalars grouped before they meet the
        context (one operation per term on an array of contexts, not four)."""
        dims = self._attn
        compute_per_ctx: float = dims.decode_flops_per_ctx(tokens, seqs) / (self._act_peak * self._decode_attn_frac)
        memory_per_ctx: float = dims.kv_row_bytes / self._attn_bw
        q_memory: float = 2 * dims.q_bytes(tokens) / self._attn_bw  # q read once, written once
        return compute_per_ctx, memory_per_ctx, q_memory

    def _decode_attention_s(self, ctx: int, tokens: int, seqs: int, layers: int, decode_only: bool) -> float:
        """Decode attention over ``ctx`` total context: a speed copy of ``price`` held to it by
        ``tests/test_one_source.py::test_fast_attention_pricing_matches_priced_ops`` (typed: machine
        arithmetic when compiled; ``_decode_attention_steps_s`` is the same over an array of contexts)."""
        if layers <= 0:
            return 0.0
        compute_per_ctx, memory_per_ctx, q_memory = self._decode_attention_terms(tokens, seqs)
        compute: float = ctx * compute_per_ctx
        memory: float = ctx * memory_per_ctx + q_memory
        launch = self.launch_latency(decode_only)
        return _kernel_total_s(compute, memory, self._attn_fixed, launch, self._serial_launch) * layers

    def _decode_attention_steps_s(
        self, ctx: np.ndarray, tokens: int, seqs: int, layers: int, decode_only: bool
    ) -> np.ndarray | float:
        """``_decode_attention_s`` of every context in ``ctx`` (the arithmetic of ``_kernel_total_s``,
        in place)."""
        if layers <= 0:
            return 0.0
        compute_per_ctx, memory_per_ctx, q_memory = self._decode_attention_terms(tokens, seqs)
        compute = ctx * compute_per_ctx
        memory = ctx * memory_per_ctx + q_memory
        launch = self.launch_latency(decode_only)
        busy = np.maximum(compute, memory, out=compute)
        busy += self._attn_fixed
        if self._serial_launch:
            busy += launch
        elif launch > busy[0]:  # busy grows with the context: only the first steps may be shorter
            np.maximum(busy, launch, out=busy)
        busy *= layers
        return busy

    def _dense_stage_time(self, tokens: int, lm_rows: int, decode_only: bool, group_tokens: int = 0) -> float:
        """Stage time of every op except attention: the layers' GEMMs, norms and collectives
        depend on the step's tokens only (and, under expert parallelism, the tokens the DP group
        gathers, ``BatchShape.group_tokens``), the LM head on the sampled rows only; each part is
        priced once per value and cached."""
        if group_tokens == 0 and tokens < _LISTED:
            bodies = self._body_decode if decode_only else self._body_mixed
            body = bodies[tokens] if tokens < len(bodies) else -1.0
            if body < 0.0:
                body = self._body_s(tokens, decode_only, 0)
                _store(bodies, tokens, body)
        else:
            # one int per key (the three inputs packed, one-to-one while group_tokens < 2**32: a DP
            # group's tokens in one step): no tuple made per step
            key = (tokens << 32 | group_tokens) << 1 | decode_only
            body = self._body_cache.get(key, -1.0)
            if body < 0.0:
                body = self._body_s(tokens, decode_only, group_tokens)
                self._body_cache[key] = body
        return body + self._head_time(lm_rows, decode_only)

    def _head_time(self, lm_rows: int, graphed: bool) -> float:
        """Device time of the LM head's ops (``ops.head_ops``) for ``lm_rows`` sampled rows, in a
        CUDA graph or not (``graph_view``), priced once per value and cached."""
        if lm_rows < _LISTED:
            heads = self._head_decode if graphed else self._head_mixed
            head = heads[lm_rows] if lm_rows < len(heads) else -1.0
            if head < 0.0:
                head = self._head_s(lm_rows, graphed)
                _store(heads, lm_rows, head)
            return head
        head_key = lm_rows << 1 | graphed
        head = self._head_cache.get(head_key, -1.0)
        if head < 0.0:
            head = self._head_s(lm_rows, graphed)
            self._head_cache[head_key] = head
        return head

    def _head_s(self, rows: int, decode_only: bool) -> float:
        """Stage time of the LM head's ops for ``rows`` sampled rows, priced."""
        return sum(self.price(op, decode_only).total_s for op in head_ops(self.model, rows, self.cfg))

    def head_time(self, shape: BatchShape) -> float:
        """Device time of the step's LM head, final norm and sampling: part of ``stage_time``, and
        under pipeline parallelism the last stage's alone (vLLM builds them on the last PP rank,
        ``PPMissingLayer`` elsewhere)."""
        if not shape.tokens:
            return 0.0
        _, body_graphed, _ = self.graph_view(shape.tokens, shape.prefill_tokens == 0)
        return self._head_time(shape.lm_rows, body_graphed)

    def _layers_through_stages(self, stage_s: float | np.ndarray, shape: BatchShape) -> float | np.ndarray:
        """A pass through every pipeline stage: the layers of ``stage_s`` (the largest stage's,
        with the head; an array of them for a run of steps) on each stage, the head once, and the
        sends between stages."""
        head = self.head_time(shape)
        return (stage_s - head) * self._stages + head + self.pp_send_time(shape) * (self.cfg.pp - 1)

    def _body_s(self, tokens: int, decode_only: bool, group_tokens: int) -> float:
        """Stage time of the layers' ops except attention (``_dense_stage_time``), priced."""
        shape = _body_shape(tokens, decode_only, group_tokens)
        return sum(self.price(op, decode_only).total_s for op in self.ops(shape) if not on_attention_side(op))

    def lora_s(self, shape: BatchShape) -> float:
        """Seconds of a step's multi-LoRA kernels (part of ``step_time``; its ``lora_shrink`` and
        ``lora_expand`` terms in ``breakdown``)."""
        if not shape.lora_tokens or not self.cfg.lora_rank:
            return 0.0
        _, graphed, _ = self.graph_view(shape.tokens, shape.prefill_tokens == 0)
        return self._lora_s(shape.lora_tokens, shape.lora_adapters, graphed) * self._stages

    def _lora_s(self, tokens: int, adapters: int, graphed: bool) -> float:
        """Stage time of the multi-LoRA kernels (``ops.lora_ops``), cached on their two inputs."""
        key = (tokens, adapters, graphed)
        t = self._lora_cache.get(key)
        if t is None:
            t = sum(self.price(op, graphed).total_s for op in lora_ops(self.model, tokens, adapters, self.cfg))
            self._lora_cache[key] = t
        return t

    def pp_send_time(self, shape: BatchShape) -> float:
        """Activations sent from one pipeline stage to the next."""
        if self.cfg.pp <= 1:
            return 0.0
        nbytes = shape.tokens * self.model.hidden_size * DTYPE_BYTES[storage_dtype(self.cfg)]
        return send_s(nbytes, self._pp_link)

    def breakdown(self, shape: BatchShape, changed: bool = False) -> dict[str, float]:
        """Seconds per named term of a step: each op name, kernel launches, step overhead (the
        engine's ``batch_change`` too where ``changed``, as ``step_time``)."""
        out: dict[str, float] = {}
        launches = fixed = 0.0
        for t in self.priced(shape):
            times = t.op.count * (1.0 if t.op.name in HEAD_OPS else self._stages)  # (the head: the last stage's)
            out[t.op.name] = out.get(t.op.name, 0.0) + max(t.compute_s, t.memory_s) * times
            launches += t.launch_s * times
            fixed += t.fixed_s * times
        out["kernel_launch_overhead"] = launches
        out["kernel_fixed_latency"] = fixed
        out["pp_send"] = self.pp_send_time(shape) * (self.cfg.pp - 1)
        if shape.is_empty:
            out["step_overhead"] = 0.0
            return out
        decode_only = shape.prefill_tokens == 0
        body_tokens, body_graphed, _ = self.graph_view(shape.tokens, decode_only)
        if body_tokens != shape.tokens:  # rows a CUDA graph computes beyond the batch's
            g = shape.group_tokens
            pad = self._dense_stage_time(
                body_tokens, shape.lm_rows, body_graphed, self._routed_tokens(body_tokens, shape.tokens, g)
            )
            out["cuda_graph_padding"] = (
                pad
                - self._dense_stage_time(
                    shape.tokens, shape.lm_rows, body_graphed, self._routed_tokens(shape.tokens, shape.tokens, g)
                )
            ) * self._stages
        if self._dbo:  # (negative where the transfers hide under the other micro-batch's compute)
            out["dual_batch_overlap"] = self.dbo_delta_s(shape, self._stage_s(shape)) * self._stages
        seqs = shape.prefill_seqs + shape.decode_seqs
        device = sum(out.values())
        if self._host_const:
            out["step_overhead"] = self._step_overhead
        else:
            out.update(self.engine.host_breakdown(seqs, shape.tokens))
        host = self.host_s(seqs, shape.tokens)
        if changed and self.prices_batch_change:
            out["engine_batch_change"] = self.engine.batch_change.seconds(seqs, shape.tokens)
            host += out["engine_batch_change"]
        if self._async:  # host work hidden under the device's time (negative: the terms sum to the step)
            out["engine_async_overlap"] = -min(host, device)
        return out

    # ---- convenience ------------------------------------------------------------------
    def prefill_time(self, prompt_tokens: int) -> float:
        """One whole prompt prefilled alone in one step."""
        from llmsim.costmodel.ops import model_batch_shape

        return self.step_time(model_batch_shape(self.model, [(prompt_tokens, 0)], []))

    def decode_time(self, contexts: list[int]) -> float:
        from llmsim.costmodel.ops import model_batch_shape

        return self.step_time(model_batch_shape(self.model, [], contexts))


def _overlapped_s(compute_s: float, transfer_s: float, share: float) -> float:
    """One phase of dual batch overlap: a micro-batch's ``compute_s`` beside the other's
    ``transfer_s``, the compute running on ``share`` of the GPU while the transfer lasts (DeepEP's
    normal kernels hold SMs) and on all of it after."""
    if compute_s <= share * transfer_s:
        return transfer_s
    return compute_s + (1.0 - share) * transfer_s


def _body_shape(tokens: int, decode_only: bool, group_tokens: int) -> BatchShape:
    """The shape the layers' non-attention ops of a step see: its tokens alone."""
    return BatchShape(
        prefill_tokens=0 if decode_only else tokens,
        decode_tokens=tokens if decode_only else 0,
        decode_seqs=tokens if decode_only else 0,
        logits_rows=0,
        group_tokens=group_tokens,
    )


def _grown(shape: BatchShape, tokens: int) -> BatchShape:
    """A decode-only ``shape`` with ``tokens`` more context in all (its sequences one step on); its
    local view too, which grows the same while no context reaches the window (``runs.run_length``
    ends a run before that)."""
    grown = BatchShape(
        decode_seqs=shape.decode_seqs,
        decode_tokens=shape.decode_tokens,
        decode_ctx_tokens=shape.decode_ctx_tokens + tokens,
        logits_rows=shape.logits_rows,
    )
    if shape.local is not None:
        grown.local = _grown(shape.local, tokens)
    return grown


_PAD_TABLE_MAX = 65_536  # graph_view's table of padded sizes, at most this many tokens


def _kernel_total_s(compute_s: float, memory_s: float, fixed_s: float, launch_s: float, serial: bool) -> float:
    """One kernel's time per call as ``CostModel.price`` computes it: the launch latency counts
    only where it exceeds the kernel, or whole where launches are ``serial`` (a CPU's operators;
    ``_decode_attention_steps_s`` repeats this on arrays). A speed copy held to ``price`` by
    ``tests/test_one_source.py::test_fast_attention_pricing_matches_priced_ops``."""
    busy = max(compute_s, memory_s) + fixed_s
    if serial:
        return busy + launch_s
    return busy if busy >= launch_s else launch_s  # = busy + max(0, launch_s - busy)


def _store(cache: list[float], i: int, value: float) -> None:
    """``cache[i] = value``, the list grown with -1.0 (not priced yet) as far as ``i``."""
    if i >= len(cache):
        cache.extend([-1.0] * (i + 1 - len(cache)))
    cache[i] = value
