"""Device profiles: datasheet peaks, memory, links, efficiencies and overheads, each with a source.

A profile is a YAML file in ``hardware_profiles/``. Every number is a ``Figure``: a value in SI
units (FLOP/s, bytes, bytes/s, seconds, watts, USD/hour) plus the ``source`` it came from. A
calibrated profile written by ``llmsim calibrate`` has the same format.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator, model_validator

from llmsim.errors import FLAG_FOR_NUMBER, UserError, load_yaml_file, pydantic_message

PROFILES_DIR = Path(__file__).resolve().parent.parent / "hardware_profiles"

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4")
# below 16 bits a device computes only with its own tensor-core path (no fallback to a wider peak)
NARROW_DTYPES = ("fp8", "int8", "int4", "fp4")


def _number_not_bool(v: object) -> object:
    """YAML's true/false would pass as 1 and 0 (a bool is an int in Python): a figure is a number."""
    if isinstance(v, bool):
        raise ValueError(FLAG_FOR_NUMBER)
    return v


class Figure(BaseModel):
    """One sourced number."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    value: float
    source: str = Field(min_length=3)

    @field_validator("value", mode="before")
    @classmethod
    def _not_a_yes_no(cls, v: object) -> object:
        return _number_not_bool(v)

    @field_validator("value")
    @classmethod
    def _finite_non_negative(cls, v: float) -> float:
        if not (v >= 0 and v < float("inf")):
            raise ValueError("must be a finite number >= 0")
        return v


class FigureTable(BaseModel):
    """A sourced list of numbers indexed from 1 (``value[0]`` is for 1, ``value[1]`` for 2, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    value: list[float] = Field(min_length=1)
    source: str = Field(min_length=3)

    @field_validator("value", mode="before")
    @classmethod
    def _not_yes_nos(cls, v: object) -> object:
        return [_number_not_bool(x) for x in v] if isinstance(v, list) else v

    @field_validator("value")
    @classmethod
    def _finite_positive(cls, v: list[float]) -> list[float]:
        if not all(0 < x < float("inf") for x in v):
            raise ValueError("every entry must be a finite number > 0")
        return v


def _check(
    fig: Figure | None,
    unit: str,
    *,
    positive: bool = False,
    at_least: float = 0.0,
    at_most: float = float("inf"),
) -> Figure | None:
    """A figure's value within what its key can mean, else a ValueError for the key's message.
    ``positive``: the cost model divides by it, so 0 is refused. ``at_least`` / ``at_most`` catch
    a value in the wrong unit, off by 10**3 or more: TFLOP/s, GB/s or microseconds where the key
    names FLOP/s, bytes/s or seconds, a percent where it is a fraction. ``unit`` says the key's."""
    if fig is None:
        return None
    v = fig.value
    if positive and v == 0:
        raise ValueError(f"must be > 0, got 0; values are in {unit}")
    if v < at_least or v > at_most:
        bound = f"below {at_least:g}" if v < at_least else f"above {at_most:g}"
        raise ValueError(f"{v:g} is {bound}: values are in {unit}, not another unit")
    return fig


def _per_op(v: dict[str, Figure] | None, unit: str, **bounds: float) -> dict[str, Figure] | None:
    """A figure per elementwise op: each name one the cost model builds (ops.ELEMENTWISE_OPS; a
    misspelt one would be read past), each value within its key's bounds (``_check``)."""
    from llmsim.costmodel.ops import ELEMENTWISE_OPS  # (here: costmodel imports this module)

    for name, figure in (v or {}).items():
        if name not in ELEMENTWISE_OPS:
            raise ValueError(
                f"{name!r} is not an elementwise op llmsim prices; expected some of {list(ELEMENTWISE_OPS)}"
            )
        try:
            _check(figure, unit, **bounds)  # type: ignore[arg-type]
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    return v


class Capability(BaseModel):
    """One sourced yes/no fact about a device's kernels: ``{value: true, source: ...}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    value: StrictBool  # (1, "yes", "off" would be read as a yes or a no: a typo, refused)
    source: str = Field(min_length=3)

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, v: object) -> object:
        if not isinstance(v, dict):
            raise ValueError("expected a mapping {value: true or false, source: ...}")
        return v


class CollectiveProtocol(BaseModel):
    """One way NCCL moves a collective's data over a link (its LL, LL128 and Simple protocols):
    a ring collective of ``steps`` hops over ``ranks`` ranks takes ``base_s + steps * hop_s +
    steps / ranks * bytes / (link bandwidth * bus_fraction)``. NCCL prices every protocol so and
    runs the fastest for each call (src/graph/tuning.cc, ncclTopoTuneModel / ncclTopoGetAlgoTime):
    the low-latency ones win small messages, the bulk one large (comm.ring_s)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    base_s: Figure
    hop_s: Figure
    bus_fraction: Figure

    @field_validator("base_s", "hop_s")
    @classmethod
    def _latency(cls, v: Figure) -> Figure | None:
        return _check(v, "seconds (3e-6 for 3 us)", at_most=1.0)

    @field_validator("bus_fraction")
    @classmethod
    def _fraction(cls, v: Figure) -> Figure | None:
        return _check(v, "a fraction of the link's bandwidth (0.5, not 50)", positive=True, at_most=1.5)


class Link(BaseModel):
    """A point-to-point or switched link, per device and per direction (unidirectional)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    bandwidth_bytes_per_s: Figure
    latency_s: Figure
    # the devices the link joins (one NVSwitch node: 8 on HGX / DGX; a bridged NVLink pair: 2); a
    # larger group talks over PCIe while the host link's max_devices (the server's GPUs) holds it,
    # else over scale_out (comm.tp_link). None: it joins as many as a group has
    max_devices: Figure | None = None
    # the collectives' protocols on this link, fitted to measured collectives (llmsim calibrate);
    # None: one protocol, latency_s per hop at the profile's allreduce_bus_fraction (the ring α–β)
    collective_protocols: list[CollectiveProtocol] | None = Field(default=None, min_length=1)

    @field_validator("bandwidth_bytes_per_s")
    @classmethod
    def _rate(cls, v: Figure) -> Figure | None:
        return _check(v, "bytes/s (25e9 for 25 GB/s)", positive=True, at_least=1e6)  # 1 MB/s: below any link

    @field_validator("latency_s")
    @classmethod
    def _latency(cls, v: Figure) -> Figure | None:
        return _check(v, "seconds (3e-6 for 3 us)", at_most=1.0)

    @field_validator("max_devices")
    @classmethod
    def _devices(cls, v: Figure | None) -> Figure | None:
        return None if v is None else _check(v, "devices (8 for an 8-GPU NVSwitch node)", at_least=2, at_most=1e6)


class Efficiency(BaseModel):
    """Achievable fractions of the datasheet peaks and the shape of the GEMM efficiency curve.

    GEMM efficiency for an (m, n, k) matmul is ``gemm_max_fraction * f(m) * w(m, n)`` where
    ``f(m) = m / (m + gemm_half_m)`` models under-filled tiles at small m and
    ``w = (tiles / (waves * units)) ** gemm_wave_exponent`` the last, partly empty wave of output
    tiles over the SMs (see docs/costmodel.md); the roofline then takes the max of compute and
    memory time, so small-m (decode) GEMMs end up bandwidth-bound as they are on real hardware.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    gemm_max_fraction: Figure  # best-shape dense GEMM / dense peak (MAMF-style)
    gemm_half_m: Figure  # tokens at which GEMM efficiency is half its max
    memory_fraction: Figure  # achievable / datasheet memory bandwidth for streaming reads
    attention_fraction: Figure  # attention kernel FLOP efficiency relative to gemm_max_fraction
    elementwise_memory_fraction: Figure  # small elementwise kernels vs datasheet bandwidth
    allreduce_bus_fraction: Figure  # NCCL-style bus bandwidth / link bandwidth
    # Optional shape terms (absent in older profiles: then no wave quantisation is modelled).
    gemm_wave_units: Figure | None = None  # SMs / CUs that output tiles are spread over, one tile each per wave
    gemm_tile: Figure | None = None  # output tile edge (rows and cols) of the GEMM kernels; default 128
    gemm_wave_exponent: Figure | None = None  # 1 = full wave-quantisation loss; <1 = softened by tile heuristics
    dequant_flops_per_weight: Figure | None = None  # vector FLOPs to unpack one int4/int8 weight (weight-only)
    # Optional CPU-BLAS regimes (absent: priced like any GEMM / attention, as before).
    gemv_memory_fraction: Figure | None = None  # m = 1 GEMMs take a GEMV path: no tiles, weights stream at this x bw
    decode_attention_fraction: Figure | None = None  # decode attention's FLOP efficiency, if unlike prefill's
    # MoE expert GEMMs (one grouped kernel over the experts touched, vLLM's fused_moe) stream their
    # weights at this x bw (absent: memory_fraction, as a dense GEMM does)
    moe_memory_fraction: Figure | None = None
    # ... and compute at this share of the rate a dense GEMM of the same rows per expert reaches
    # (relative, as attention_fraction is): vLLM's Triton fused_moe tiles every expert's rows in one
    # launch with the block sizes of its config, and reaches less than cuBLAS at large m
    # (data/validation/moe_kernels/). Absent: 1, the dense rate
    moe_gemm_fraction: Figure | None = None
    # Optional attention-kernel terms fitted to measured attention (absent: priced as before).
    # attention's K/V and q streams vs datasheet bandwidth (absent: memory_fraction)
    attention_memory_fraction: Figure | None = None
    # share of a prefill chunk's causally masked scores (its score rectangle minus the causal pairs)
    # the flash kernel pays for as if computed: 0 = masked tiles skipped (else), 1 = the whole rectangle
    attention_masked_fraction: Figure | None = None
    attention_row_keys: Figure | None = None  # a prefill query row's own work, in scores' worth of compute (else 0)
    # Measured GEMM rate / dense peak for m = 1, 2, ..., len rows (whole time, weight streaming
    # included): BLAS switches kernels at small m in steps no smooth curve follows. GEMMs with more
    # rows use the curve; where the table applies it replaces the curve and gemv_memory_fraction.
    gemm_small_m: FigureTable | None = None
    # Best-shape GEMM fraction of a narrower dtype's own dense peak, where it was measured apart
    # from gemm_max_fraction (a bf16 measurement): 8-bit GEMMs reach less of their doubled peak
    # (scale epilogues, an operand feed that has to double too): H100 SXM fp8 0.71 against bf16
    # 0.80 (MAMF). A dtype not listed uses gemm_max_fraction. ``gemm_fraction`` reads it.
    gemm_dtype_fraction: dict[str, Figure] | None = None
    # An elementwise op's own bandwidth fraction, by the cost model's op name (input_layernorm,
    # mlp_act, add, ...), where measured apart: an unfused implementation makes several passes over
    # the data (eager PyTorch RMSNorm: square, mean, rsqrt, two products), a fused one one. An op
    # not listed uses elementwise_memory_fraction. (Its floor: overheads.elementwise_op_fixed_s.)
    elementwise_op_fraction: dict[str, Figure] | None = None

    def gemm_fraction(self, dtype: str) -> float:
        """Best-shape GEMM fraction of ``dtype``'s dense peak."""
        own = (self.gemm_dtype_fraction or {}).get(dtype)
        return (own or self.gemm_max_fraction).value

    @field_validator("elementwise_op_fraction")
    @classmethod
    def _op_fractions(cls, v: dict[str, Figure] | None) -> dict[str, Figure] | None:
        return _per_op(v, "ratios (0.4, not 40%)", positive=True, at_most=10.0)

    @field_validator("gemm_dtype_fraction")
    @classmethod
    def _dtype_fractions(cls, v: dict[str, Figure] | None) -> dict[str, Figure] | None:
        for dtype, figure in (v or {}).items():
            if dtype not in DTYPES:
                raise ValueError(f"unknown dtype {dtype!r}; expected some of {list(DTYPES)}")
            _check(figure, "fractions of 1 (0.7 for 70%)", positive=True, at_most=1.0)
        return v

    # rates the cost model divides by. A fitted CPU profile may exceed 1 on the memory-side ones
    # (a cache-resident stream beats the measured DRAM copy rate), so only 0 is refused there;
    # the GEMM peak fraction and the all-reduce bus fraction are fractions by definition.
    @field_validator(
        "memory_fraction",
        "attention_fraction",
        "elementwise_memory_fraction",
        "gemv_memory_fraction",
        "decode_attention_fraction",
        "moe_memory_fraction",
        "attention_memory_fraction",
        "gemm_wave_units",
        "gemm_tile",
    )
    @classmethod
    def _divisor(cls, v: Figure | None) -> Figure | None:
        return _check(v, "ratios (0.8, not 80%)", positive=True)

    @field_validator("gemm_max_fraction", "allreduce_bus_fraction", "moe_gemm_fraction")
    @classmethod
    def _fraction(cls, v: Figure | None) -> Figure | None:
        return _check(v, "fractions of 1 (0.8 for 80%)", positive=True, at_most=1.0)

    @field_validator("attention_masked_fraction")
    @classmethod
    def _share(cls, v: Figure | None) -> Figure | None:
        return _check(v, "fractions of 1 (0.5 for half; 0 allowed)", at_most=1.0)

    @field_validator("attention_row_keys")
    @classmethod
    def _row_keys(cls, v: Figure | None) -> Figure | None:
        return _check(v, "keys (scores per query row; 600, not seconds)", at_most=1e6)

    @field_validator("gemm_tile", "gemm_wave_exponent")
    @classmethod
    def _wave_term(cls, v: Figure | None, info: ValidationInfo) -> Figure | None:
        # without the SM count the wave term is off: a tile or exponent alone would be ignored
        if v is not None and info.data.get("gemm_wave_units") is None:
            raise ValueError("given without gemm_wave_units (the SMs the tiles spread over), so it has no effect")
        return v


class Overheads(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kernel_launch_s: Figure  # per kernel, removed by CUDA graphs in decode
    step_overhead_s: Figure  # per step CPU/scheduler work (schedule, prepare inputs, sample)
    kernel_fixed_s: Figure | None = None  # device-side minimum per kernel (ramp-up, tail); CUDA graphs keep it
    # the same for attention kernels (prefill and decode), where measured apart (else kernel_fixed_s):
    # a FlashAttention kernel over a paged KV cache (split-KV, a combine pass) has a longer floor than a GEMM
    attention_fixed_s: Figure | None = None
    # the same for an elementwise kernel (a norm, RoPE, the activation, the residual add), by op
    # name, where measured apart: an unfused op launches several kernels, each with its floor
    elementwise_op_fixed_s: dict[str, Figure] | None = None
    # a fused-MoE layer call's own cost beyond its expert GEMMs' and top-k sum's streaming and kernel
    # floors (the routing's top-k, the token sort: vLLM's fused_experts), where measured; absent:
    # none. Every call pays it; a call of a few tokens is mostly it (docs/validation.md, "MoE expert kernels")
    moe_call_fixed_s: Figure | None = None
    # vLLM >= 0.21's start-up memory on this GPU, where its logs were read (engine.py, vllm-v1): the
    # memory outside torch that grows during the profile, and its CUDA-graph estimate in vLLM 0.30's two
    # parts (EngineSpec.cuda_graph_estimate_bytes); a GPU without them takes the engine's defaults
    engine_non_torch_bytes: Figure | None = None
    cuda_graph_bytes_per_layer: Figure | None = None  # per PIECEWISE graph per layer
    cuda_graph_full_bytes_per_head_row: Figure | None = None  # per FULL graph per layer x head x batch row

    @field_validator("engine_non_torch_bytes")
    @classmethod
    def _non_torch_bytes(cls, v: Figure | None) -> Figure | None:
        # (1 MiB to 64 GiB: 0.9 here is GiB written where bytes are meant)
        return _check(v, "bytes (9.7e8 for 0.9 GiB)", at_least=2.0**20, at_most=2.0**36)

    @field_validator("cuda_graph_bytes_per_layer")
    @classmethod
    def _graph_bytes(cls, v: Figure | None) -> Figure | None:
        # (1 KiB to 1 GiB per graph per layer: 0.35 here is MiB written where bytes are meant)
        return _check(v, "bytes per graph per layer (3.6e5 for 0.35 MiB)", at_least=2.0**10, at_most=2.0**30)

    @field_validator("cuda_graph_full_bytes_per_head_row")
    @classmethod
    def _full_graph_bytes(cls, v: Figure | None) -> Figure | None:
        # (0.01 to 4,096 bytes: 1.1e-5 here is MiB written where bytes are meant)
        return _check(v, "bytes per layer x attention head x batch row (6-18)", at_least=0.01, at_most=2.0**12)

    @field_validator("kernel_launch_s", "step_overhead_s", "kernel_fixed_s", "attention_fixed_s", "moe_call_fixed_s")
    @classmethod
    def _seconds(cls, v: Figure | None) -> Figure | None:
        return _check(v, "seconds (4e-6 for 4 us)", at_most=1.0)

    @field_validator("elementwise_op_fixed_s")
    @classmethod
    def _op_seconds(cls, v: dict[str, Figure] | None) -> dict[str, Figure] | None:
        return _per_op(v, "seconds (4e-6 for 4 us)", at_most=1.0)


class CpuTopology(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    sockets: int = Field(ge=1, strict=True)  # (strict: YAML true is not 1 socket)
    cores_per_socket: int = Field(ge=1, strict=True)
    numa_remote_bandwidth_fraction: Figure  # cross-socket access bandwidth / local

    @field_validator("numa_remote_bandwidth_fraction")
    @classmethod
    def _fraction(cls, v: Figure) -> Figure | None:
        return _check(v, "fractions of the local bandwidth (0.5 for half)", positive=True, at_most=1.0)


class TpuTopology(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    mxu_dim: int = Field(ge=1, strict=True)  # systolic array edge: matrix dims pad to a multiple of it


class HardwareProfile(BaseModel):
    """A device (one GPU, one TPU chip, or one CPU server node)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    family: Literal["gpu", "tpu", "cpu"]
    vendor: str
    description: str = ""
    peak_flops: dict[str, Figure]  # dense FLOP/s (or OP/s for int) per dtype
    memory_capacity_bytes: Figure
    memory_bandwidth_bytes_per_s: Figure
    scale_up: Link | None = None  # NVLink / Infinity Fabric / ICI / UPI
    scale_out: Link | None = None  # InfiniBand / RoCE / DCN
    host_link: Link  # PCIe to host memory (KV swap)
    power_w: Figure
    price_per_hour_usd: Figure  # an editable assumption, not a datasheet figure
    efficiency: Efficiency
    overheads: Overheads
    # attention kernels that take fp8 queries over an fp8 KV cache, as an engine that quantises
    # its queries (EngineSpec.fp8_query: vLLM) picks them: FlashAttention-3 on SM90, trtllm-gen on
    # SM100. True: attention runs on the fp8 tensor cores; false: 16-bit queries, the kernels
    # convert the cache as they load it; absent: the cost model's rule (costmodel/ops.py
    # attention_dtype: fp8 with fp8/fp4 compute)
    fp8_attention: Capability | None = None
    cpu: CpuTopology | None = None
    tpu: TpuTopology | None = Field(None, validate_default=True)  # validated when absent too
    calibration: dict | None = None  # provenance written by `llmsim calibrate`

    @field_validator("cpu", "tpu")
    @classmethod
    def _family_section(cls, v: CpuTopology | TpuTopology | None, info: ValidationInfo) -> object:
        """A ``cpu:`` / ``tpu:`` section belongs to a profile of that family (another family's is
        a copied profile half edited), and a TPU needs its ``tpu.mxu_dim``: without it the cost
        model prices it as a GPU, with no padding to the systolic array."""
        family, key = info.data.get("family"), info.field_name
        if v is not None and family is not None and family != key:
            raise ValueError(f"a {key} section on a profile of family {family!r}; remove it or fix the family")
        if v is None and key == "tpu" and family == "tpu":
            raise ValueError("required for family 'tpu' (mxu_dim: the systolic array edge matmuls pad to)")
        return v

    @field_validator("peak_flops")
    @classmethod
    def _known_dtypes(cls, v: dict[str, Figure]) -> dict[str, Figure]:
        unknown = sorted(set(v) - set(DTYPES))
        if unknown:
            raise ValueError(f"unknown dtype(s) {unknown}; expected some of {list(DTYPES)}")
        if "bf16" not in v and "fp16" not in v and "fp32" not in v:
            raise ValueError("needs at least one of bf16, fp16, fp32")
        for dtype, fig in v.items():
            try:  # 1 GFLOP/s: below one CPU core; 989.4 here is TFLOP/s meant as FLOP/s; 1e18 (an
                # exaFLOP/s) is 100x a B200's dense FP4
                _check(fig, "FLOP/s (989.4e12 for 989.4 TFLOP/s)", positive=True, at_least=1e9, at_most=1e18)
            except ValueError as exc:
                raise ValueError(f"{dtype}: {exc}") from None
        return v

    @field_validator("memory_capacity_bytes")
    @classmethod
    def _capacity(cls, v: Figure) -> Figure | None:
        # 1 PB: ~100x the largest CPU node's memory (block counts past it overflow int64 files)
        return _check(v, "bytes (80e9 for 80 GB)", positive=True, at_least=1e8, at_most=1e15)

    @field_validator("memory_bandwidth_bytes_per_s")
    @classmethod
    def _bandwidth(cls, v: Figure) -> Figure | None:
        # 1e17: past a wafer-scale part's on-chip SRAM (Cerebras WSE-3: 21 PB/s)
        return _check(v, "bytes/s (3.35e12 for 3.35 TB/s)", positive=True, at_least=1e8, at_most=1e17)

    @field_validator("price_per_hour_usd")
    @classmethod
    def _price(cls, v: Figure) -> Figure | None:  # a dollar figure past a million an hour prints as inf
        return _check(v, "US dollars per device-hour (2.5)", at_most=1e6)

    @field_validator("power_w")
    @classmethod
    def _power(cls, v: Figure) -> Figure | None:
        return _check(v, "watts (700 for 700 W)", at_most=1e6)

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype, falling back to the nearest wider type."""
        # profiles are frozen: safe to memoise, per peak_flops mapping (a model_copy shares __dict__
        # entries, so a copy with other peaks, as cpu_subset makes, must not read this one's)
        owner, cache = self.__dict__.get("_peak_cache", (None, {}))
        if owner is not self.peak_flops:
            owner, cache = self.peak_flops, {}
            self.__dict__["_peak_cache"] = (owner, cache)
        if dtype not in cache:
            cache[dtype] = self._peak(dtype)
        return cache[dtype]

    def _peak(self, dtype: str) -> float:
        for d in _fallback_chain(dtype):
            if d in self.peak_flops:
                return self.peak_flops[d].value
        raise UserError(f"hardware {self.name!r} has no peak for dtype {dtype!r}")

    def supports(self, dtype: str) -> bool:
        return dtype in self.peak_flops

    def computes_in(self, dtype: str) -> bool:
        """Whether the device runs matmuls in ``dtype``: a 16- or 32-bit type always (``peak``
        falls back to a wider one), a narrower one only with its own peak (fp8 on an A100: no)."""
        return dtype not in NARROW_DTYPES or self.supports(dtype)

    @property
    def memory_bytes(self) -> float:
        return self.memory_capacity_bytes.value

    @property
    def bandwidth(self) -> float:
        return self.memory_bandwidth_bytes_per_s.value


def _fallback_chain(dtype: str) -> list[str]:
    chains = {
        "fp4": ["fp4", "fp8", "bf16", "fp16", "fp32"],
        "int4": ["int4", "int8", "fp8", "bf16", "fp16", "fp32"],
        "int8": ["int8", "fp8", "bf16", "fp16", "fp32"],
        "fp8": ["fp8", "bf16", "fp16", "fp32"],
        "fp16": ["fp16", "bf16", "fp32"],
        "bf16": ["bf16", "fp16", "fp32"],
        "tf32": ["tf32", "fp32"],
        "fp32": ["fp32", "tf32", "bf16"],
    }
    return chains.get(dtype, [dtype])


def available_profiles() -> dict[str, Path]:
    """Name -> path of every shipped profile (file stem and `name:` both work)."""
    out: dict[str, Path] = {}
    for path in sorted(PROFILES_DIR.glob("*.yaml")):
        out[path.stem] = path
    return out


def cpu_subset(hw: HardwareProfile, sockets: int | None, cores: int | None, key: str = "cluster") -> HardwareProfile:
    """The part of a CPU node a run uses: ``sockets`` of its sockets, ``cores`` cores on each (the
    usual benchmark pins one socket: ``numactl -N 0``, ``OMP_NUM_THREADS``). Peak FLOP/s follow the
    cores used; memory bandwidth, capacity, the memcpy host link, power and price follow the
    sockets (each socket has its own memory channels; a core subset keeps its socket's channels,
    though few cores may not saturate them, which is not modelled); one socket has no NUMA traffic.
    The socket link (UPI, xGMI) joins the devices one node holds (two 1-socket devices of a 2-socket
    node: tensor parallelism over it, as vLLM's CPU backend runs a rank per socket); more go to
    scale_out, as whole-node devices do (``comm.tp_link``)."""
    if sockets is None and cores is None:
        return hw
    if hw.cpu is None:
        raise UserError(f"{key}.sockets / {key}.cores: {hw.name} is a {hw.family}, not a CPU node")
    total, per = hw.cpu.sockets, hw.cpu.cores_per_socket
    s, c = sockets or total, cores or per
    if s > total:
        raise UserError(f"{key}.sockets: {s} sockets asked of {hw.name}, which has {total}")
    if c > per:
        raise UserError(f"{key}.cores: {c} cores per socket asked of {hw.name}, which has {per} per socket")
    compute, memory = s * c / (total * per), s / total
    note = f" [scaled to {s} of {total} socket(s) x {c} of {per} cores]"

    def scaled(fig: Figure, by: float) -> Figure:
        return Figure(value=fig.value * by, source=fig.source + note)

    update: dict[str, object] = {
        "name": f"{hw.name}[{s}s{c}c]",
        "peak_flops": {d: scaled(f, compute) for d, f in hw.peak_flops.items()},
        "memory_capacity_bytes": scaled(hw.memory_capacity_bytes, memory),
        "memory_bandwidth_bytes_per_s": scaled(hw.memory_bandwidth_bytes_per_s, memory),
        "host_link": hw.host_link.model_copy(
            update={"bandwidth_bytes_per_s": scaled(hw.host_link.bandwidth_bytes_per_s, memory)}
        ),
        "power_w": scaled(hw.power_w, memory),
        "price_per_hour_usd": scaled(hw.price_per_hour_usd, memory),
        "cpu": hw.cpu.model_copy(update={"sockets": s, "cores_per_socket": c}),
    }
    per_node = total // s
    if hw.scale_up is not None and per_node > 1:  # the socket link joins the devices one node holds
        joins = Figure(value=per_node, source=f"the devices of {s} socket(s) one {total}-socket node holds")
        update["scale_up"] = hw.scale_up.model_copy(update={"max_devices": joins})
    return hw.model_copy(update=update)


def profile_file(name_or_path: str | Path, base_dir: Path | None = None) -> Path:
    """The YAML file a profile name (a shipped one, matched as ``load_profile`` matches it: any
    case) or path names; a relative path from ``base_dir``."""
    text = str(name_or_path)
    path = Path(text)
    if not path.is_absolute() and base_dir is not None and (base_dir / path).suffix in (".yaml", ".yml"):
        path = base_dir / path
    if path.suffix not in (".yaml", ".yml"):
        profiles = available_profiles()
        path = profiles[_match_name(text, list(profiles))]
    return path


def load_profile(name_or_path: str | Path, base_dir: Path | None = None) -> HardwareProfile:
    """Load a profile by shipped name (e.g. ``H100-SXM``) or by a path to a YAML file."""
    path = profile_file(name_or_path, base_dir)
    try:
        version = file_version(path)
    except (OSError, RuntimeError):  # (missing, unreadable, a symlink loop: load_yaml_file says which)
        return profile_from_dict(load_yaml_file(path), str(path))
    return _read_profile(str(path), version)


def file_version(path: Path) -> tuple[str, int, int, int, int, int]:
    """What tells one version of a file from another without reading it: its resolved path, inode
    and device, size, and modification and change times. A write, a rename onto it or a restored
    modification time (``cp -p``, ``touch -d``) changes the change time, which no tool sets back."""
    st = path.stat()
    return str(path.resolve()), st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns


@functools.lru_cache(maxsize=64)
def _read_profile(shown: str, version: tuple[str, int, int, int, int, int]) -> HardwareProfile:
    """A profile file (``shown``: as errors name it; ``version``: ``file_version``), read and
    validated once per version of the file in a process: a plan or a sweep builds every point's
    scenario, pools and report from the same few profiles (a plan over plan_azure_conv.yaml loaded
    them 340 times, ~1 ms each). Profiles are frozen, so sharing one is safe; a file changed since
    is read again. A failed read is not cached (the error propagates)."""
    return profile_from_dict(load_yaml_file(Path(shown)), shown)


def profile_from_dict(data: object, origin: str) -> HardwareProfile:
    from pydantic import ValidationError

    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        raise UserError(pydantic_message(exc, origin, _profile_keys(data))) from None


def _profile_keys(data: object) -> dict[str, list[str]]:
    """Valid keys per section of a profile, for 'did you mean' and 'set it under ...' hints: the
    links in the order a reader looks for them; a cpu or tpu section only on its family's profile
    (a GPU's is refused)."""
    link = list(Link.model_fields)
    family = data.get("family") if isinstance(data, dict) else None
    keys = {
        "": list(HardwareProfile.model_fields),
        "efficiency": list(Efficiency.model_fields),
        "overheads": list(Overheads.model_fields),
        "scale_up": link,
        "scale_out": link,
        "host_link": link,
    }
    if family == "cpu":
        keys["cpu"] = list(CpuTopology.model_fields)
    if family == "tpu":
        keys["tpu"] = list(TpuTopology.model_fields)
    return keys


def _match_name(name: str, names: list[str]) -> str:
    if not name.strip():
        raise UserError("hardware: an empty name; `llmsim hardware` lists the shipped profiles")
    lowered = {n.lower(): n for n in names}
    if name.lower() in lowered:
        return lowered[name.lower()]
    if Path(name).exists() or "/" in name:  # meant as a file: only a .yaml/.yml name is read as one
        raise UserError(
            f"{name}: a hardware profile file must end in .yaml or .yml (a bare name is a shipped "
            "profile; `llmsim hardware` lists them)"
        )
    from llmsim.errors import did_you_mean

    # "H100" names a family: its variants beat difflib's closest spelling ("H200")
    variants = [n for n in names if n.lower().startswith(name.lower())]
    hint = f" (did you mean one of {', '.join(map(repr, variants))}?)" if variants else did_you_mean(name, names)
    raise UserError(f"unknown hardware {name!r}{hint}; `llmsim hardware` lists them")


def dump_profile(profile: HardwareProfile, path: Path) -> None:
    """Write a profile YAML (used by calibration), creating its folder; written atomically, so a
    full disk or a read-only folder leaves no half a profile, and says so in one line."""
    from llmsim.errors import atomic_write_text, os_reason

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, yaml.safe_dump(profile.model_dump(exclude_none=True), sort_keys=False))
    except OSError as exc:
        raise UserError(f"{path}: could not write the profile ({os_reason(exc)})") from None
