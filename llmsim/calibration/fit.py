"""Fit a device's GEMM efficiency curve, bandwidth fraction, kernel latency, attention kernels
and all-reduce link to measured timings, and write the result as a calibrated hardware profile.

The fitted model is exactly the cost model's: ``t = max(FLOPs / (peak * eff(m, n)),
bytes / (bandwidth * memory_fraction)) + kernel_fixed_s`` with ``eff`` from ``GemmCurve``; the
fit minimises squared *relative* error (so 10 us kernels count as much as 10 ms ones). Attention
kernels are priced the same way from the op ``ops.attention_ops`` builds for the measured shape:
prefill ``max((FLOPs + attention_masked_fraction * masked FLOPs + attention_row_keys * query FLOPs)
/ (peak * GEMM fraction of the dtype * attention_fraction), bytes / (bandwidth * attention_memory_fraction))
+ attention_fixed_s``, decode ``max(FLOPs / (...), bytes / (...)) + attention_fixed_s``
(docs/profile_format.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.optimize import OptimizeResult, least_squares

from llmsim.calibration.readers import ATTENTION_OPS, MLP_ELEMENTWISE_OPS, Measurement
from llmsim.costmodel.comm import tp_link
from llmsim.costmodel.gemm import GemmCurve
from llmsim.costmodel.ops import BatchShape, Op, OpConfig, attention_ops, batch_shape, step_ops
from llmsim.errors import UserError
from llmsim.hardware import Figure, HardwareProfile
from llmsim.models import DTYPE_BYTES, ModelSpec, weight_param_bytes

# Fitted parameters of the GEMM curve: name, lower bound, upper bound.
_GEMM_PARAMS = [
    ("gemm_max_fraction", 0.05, 1.0),
    ("gemm_half_m", 0.0, 4096.0),
    ("memory_fraction", 0.05, 1.0),
    ("kernel_fixed_s", 0.0, 1e-4),
    ("gemm_wave_exponent", 0.0, 1.0),
]


@dataclass
class FitResult:
    params: dict[str, float] = field(default_factory=dict)
    gemm_rows: int = 0
    comm_rows: int = 0
    gemm_mape: float = float("nan")
    comm_mape: float = float("nan")
    attention_rows: dict[str, int] = field(default_factory=dict)  # per op: attention_prefill / _decode
    attention_mape: dict[str, float] = field(default_factory=dict)
    comm_one_count: list[str] = field(default_factory=list)  # links whose all-reduce rows have one rank count
    elementwise_rows: dict[str, int] = field(default_factory=dict)  # per op: input_layernorm, mlp_act, ...
    elementwise_mape: dict[str, float] = field(default_factory=dict)


def _gemm_arrays(hw: HardwareProfile, rows: list[Measurement]) -> dict[str, np.ndarray]:
    m = np.array([r.m for r in rows], float)
    n = np.array([r.n for r in rows], float)
    k = np.array([r.k for r in rows], float)
    a = np.array([DTYPE_BYTES[r.dtype] for r in rows])
    w = np.array([weight_param_bytes(r.dtype) for r in rows])  # (group scales: the dtype's format)
    if hw.tpu:  # the same padding CostModel.padded_flops applies: n and k to the MXU edge, not m
        pad = hw.tpu.mxu_dim
        m_, n_, k_ = m, np.ceil(n / pad) * pad, np.ceil(k / pad) * pad
    else:
        m_, n_, k_ = m, n, k
    return {
        "m": m,
        "n": n,
        "flops": 2.0 * m_ * n_ * k_,
        "bytes": a * (m * k + m * n) + w * k * n,  # ops.gemm: activations in and out, weights
        "peak": np.array([hw.peak(r.dtype) for r in rows]),
        "seconds": np.array([r.seconds for r in rows]),
    }


def _gemm_predict(
    p: np.ndarray, x: dict[str, np.ndarray], hw: HardwareProfile, units: float, tile: float
) -> np.ndarray:
    """Seconds of each row; ``p`` is the shared shape terms (``_GEMM_PARAMS`` from the second on)
    after one best-shape fraction per dtype, ``x["dtype_index"]`` picking each row's."""
    fractions, (half_m, memory_fraction, fixed_s, wave_exponent) = p[:-4], p[-4:]
    # the curve's shape at a best-shape fraction of 1, times each row's dtype's fraction (the curve
    # is compiled: its fraction is one float)
    shape = GemmCurve(max_fraction=1.0, half_m=half_m, wave_units=units, tile=tile, wave_exponent=wave_exponent)
    compute = x["flops"] / (x["peak"] * fractions[x["dtype_index"]] * shape.efficiency(x["m"], x["n"]))
    memory = x["bytes"] / (hw.bandwidth * memory_fraction)
    return np.maximum(compute, memory) + fixed_s


def fraction_names(hw: HardwareProfile, dtypes: list[str]) -> list[str]:
    """Where each measured dtype's best-shape GEMM fraction goes in the profile: a dtype the profile
    holds apart to its own ``gemm_dtype_fraction.<dtype>`` (Efficiency.gemm_fraction reads that
    first); of the others bf16 (what ``gemm_max_fraction`` is measured in on the shipped profiles),
    else fp16, else the only one, to ``gemm_max_fraction``, every other to its own entry. Two
    dtypes with neither bf16 nor fp16 among them leave ``gemm_max_fraction`` undetermined: refused,
    rather than a fp32 fraction (0.87 on an AMX CPU) pricing every 16-bit GEMM (0.34 there)."""
    own = set(hw.efficiency.gemm_dtype_fraction or {})
    free = [d for d in dtypes if d not in own]
    base = next((d for d in ("bf16", "fp16") if d in free), free[0] if len(free) == 1 else None)
    if free and base is None:
        raise UserError(
            f"GEMM rows in {', '.join(free)}: which of them {hw.name}'s gemm_max_fraction (the 16-bit one) "
            "stands for is not known; add bf16 rows, or give the profile a gemm_dtype_fraction for all but one"
        )
    return ["gemm_max_fraction" if d == base else f"gemm_dtype_fraction.{d}" for d in dtypes]


def check_enough_rows(rows: list[Measurement], terms: int, what: str) -> None:
    """A least-squares fit of ``terms`` parameters needs more distinct measurements than that: with
    fewer, it reproduces them exactly (MAPE 0%) with terms the rows do not determine (one GEMM row
    moved memory_fraction 0.84 -> 0.64), and the profile it writes prices other shapes on them."""
    shapes = {(r.op, r.m, r.n, r.k, r.bytes, r.ranks, r.batch, r.kv, r.dtype, r.tp) for r in rows}
    if len(shapes) <= terms:
        files = ", ".join(sorted({r.source for r in rows}))
        raise UserError(
            f"{files}: {len(shapes)} distinct {what} measurement(s) cannot determine the fit's {terms} terms; "
            f"give at least {terms + 1} (different shapes), or leave these rows out"
        )


# Starts of the GEMM curve's shape terms (gemm_half_m, memory_fraction, kernel_fixed_s,
# gemm_wave_exponent) beside the profile's own: small-m under-fill from a tile to a few waves'
# worth, a GPU's and a CPU's memory side, with and without the wave term.
_GEMM_SHAPE_STARTS = [[16.0, 0.8, 2e-6, 0.0], [64.0, 0.8, 4e-6, 0.2], [256.0, 0.9, 4e-6, 0.5]]


def fit_gemm(hw: HardwareProfile, rows: list[Measurement]) -> tuple[dict[str, float], float]:
    """Least-squares fit of the GEMM curve; returns the parameters and the training MAPE. Rows in
    several dtypes fit one best-shape fraction per dtype (``fraction_names``: its profile key) and
    share the shape terms (row under-fill, memory fraction, floor, wave exponent)."""
    dtypes = sorted({r.dtype for r in rows})
    names = fraction_names(hw, dtypes)
    check_enough_rows(rows, len(_GEMM_PARAMS) - 1 + len(dtypes), "GEMM")
    e, o = hw.efficiency, hw.overheads
    units = e.gemm_wave_units.value if e.gemm_wave_units else 0.0
    tile = e.gemm_tile.value if e.gemm_tile else 128.0
    x = _gemm_arrays(hw, rows)
    x["dtype_index"] = np.array([dtypes.index(r.dtype) for r in rows])
    shape0 = [
        e.gemm_half_m.value,
        e.memory_fraction.value,
        o.kernel_fixed_s.value if o.kernel_fixed_s else 2e-6,
        e.gemm_wave_exponent.value if (units and e.gemm_wave_exponent) else 0.0,
    ]
    fractions = [e.gemm_fraction(d) for d in dtypes]
    bounds = [_GEMM_PARAMS[0]] * len(dtypes) + _GEMM_PARAMS[1:]
    lo = np.array([b[1] for b in bounds])
    hi = np.array([b[2] for b in bounds])
    if not units:  # no SM count: the wave term is off, pin its exponent at 0
        hi[-1] = 1e-12

    def residual(p: np.ndarray) -> np.ndarray:
        return _gemm_predict(p, x, hw, units, tile) / x["seconds"] - 1.0

    def fit_from(shape: list[float]) -> OptimizeResult:
        p0 = np.clip(np.array(fractions + shape), lo, hi - 1e-15)
        scale = np.maximum(np.abs(p0), [0.1] * len(dtypes) + [10, 0.1, 1e-6, 0.1])
        return least_squares(residual, p0, bounds=(lo, hi), x_scale=scale, **_CONVERGED)

    # The wave term's whole waves make the cost stepped, with local minima: from the profile's own
    # terms alone the result hung on them (Vidur's H100 rows fitted half_m 111.2 from the profile
    # of 2026-12-06 and 112.1, at a lower cost, once its memory fraction had moved), so a profile
    # refitted from its own fit could differ. Fixed starts beside it, the lowest cost kept, make
    # the fit the rows' alone: the same from any profile.
    fit = min((fit_from(shape) for shape in [shape0, *_GEMM_SHAPE_STARTS]), key=lambda f: float(f.cost))
    mape = float(np.mean(np.abs(residual(fit.x))))
    keys = names + [name for name, _, _ in _GEMM_PARAMS[1:]]
    return {key: float(v) for key, v in zip(keys, fit.x, strict=True)}, mape


# The two protocols calibrate fits on a link (comm.ring_s prices each, takes the fastest): NCCL's
# low-latency ones (LL, LL128: fewer microseconds per step, part of the bandwidth) and its bulk one
# (Simple). Three starts, the best fit kept (the min makes the problem non-smooth): NCCL's own
# NVLink ring figures (src/graph/tuning.cc at 01afd20: LL base 3.6 us and 0.47 us per step, at
# LL128's 0.92 of the bandwidth; Simple 8.4 us and 3.4 us per step, all of it) at a bus fraction
# of a half; then a per-call floor of tens of microseconds, as tables timed around eager calls
# hold; then a slower link's.
_PROTOCOLS = ("low_latency", "bulk")
_TWO_PROTOCOL_ROWS = 24  # rows a link needs for two protocols (six terms) rather than one
_PROTOCOL_TERMS = ("base_s", "hop_s", "bus_fraction")
_CONVERGED = {"ftol": 1e-13, "xtol": 1e-13, "gtol": 1e-13, "max_nfev": 5000}
_COMM_STARTS = [
    [3.6e-6, 0.47e-6, 0.46, 8.4e-6, 3.4e-6, 0.5],
    [20e-6, 0.5e-6, 0.4, 40e-6, 3.4e-6, 0.7],
    [5e-6, 1.0e-6, 0.3, 10e-6, 5.0e-6, 0.8],
]


def _ring_lines(q: np.ndarray, steps: np.ndarray, moved: np.ndarray, bw: float) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of each row under the low-latency and the bulk protocol (comm.ring_s, vectorised)."""
    low = q[0] + steps * q[1] + moved / (bw * q[2])
    bulk = q[3] + steps * q[4] + moved / (bw * q[5])
    return low, bulk


_LINK_KEYS = ("scale_up", "host_link", "scale_out")


def fit_all_reduce(hw: HardwareProfile, rows: list[Measurement]) -> tuple[dict[str, float], float, list[str]]:
    """Fit the collective protocols of each link the rows' groups talk over (comm.tp_link: the
    scale-up link, or PCIe within a server past a bridged pair) to measured all-reduces: for a
    low-latency and a bulk protocol a base latency, a latency per ring step and a bus-bandwidth
    fraction each; a protocol the fit never picks for a measured row is left out. Parameters are
    named ``<link>.<protocol>.<term>`` (apply_fit writes them as the link's
    ``collective_protocols``); the error is over every row; last, the links measured at one rank
    count (their per-step latency is folded into the base: ``_fit_link``)."""
    if hw.scale_up is None:
        files = ", ".join(dict.fromkeys(r.source for r in rows))
        raise UserError(
            f"{files}: all-reduce rows, but hardware {hw.name!r} has no scale_up link to fit them to; "
            "leave them out or start from a profile with a scale_up link"
        )
    params: dict[str, float] = {}
    errors: list[np.ndarray] = []
    one_count: list[str] = []
    for key in _LINK_KEYS:
        link = getattr(hw, key)
        mine = [r for r in rows if link is not None and tp_link(hw, r.ranks) is link]
        if mine:
            fitted, err = _fit_link(key, link.bandwidth_bytes_per_s.value, mine)
            params.update({f"{key}.{name}": v for name, v in fitted.items()})
            errors.append(err)
            if len({r.ranks for r in mine}) == 1:
                one_count.append(key)
    return params, float(np.mean(np.concatenate(errors))), one_count


def _fit_link(key: str, bw: float, rows: list[Measurement]) -> tuple[dict[str, float], np.ndarray]:
    """One link's protocols and each row's relative error: two where there are rows enough
    (``_TWO_PROTOCOL_ROWS``), else one. With a single rank count measured, a protocol's latency
    per step cannot be told from its base (both only ever appear as ``base + steps x hop`` at one
    ``steps``): ``hop_s`` is then 0 and the base holds it all, so another rank count pays the
    measured latency unchanged."""
    if len(rows) < 3:
        files = ", ".join(dict.fromkeys(r.source for r in rows))
        raise UserError(
            f"{files}: {len(rows)} all-reduce row(s) over {key}; at least 3 are needed to fit its collectives"
        )
    p = np.array([r.ranks for r in rows], float)
    t = np.array([r.seconds for r in rows])
    steps = 2 * (p - 1)
    moved = steps / p * np.array([r.bytes for r in rows])
    count = 2 if len(rows) >= _TWO_PROTOCOL_ROWS else 1
    free = [3 * i + j for i in range(count) for j in range(3)]

    def full(v: np.ndarray) -> np.ndarray:  # the six terms of _ring_lines (an absent protocol never wins)
        q = np.array([0.0, 0.0, 1.0, 1e30, 0.0, 1.0])  # (protocol 2 absent: a base no row reaches)
        q[free] = v
        return q

    def residual(v: np.ndarray) -> np.ndarray:
        return np.minimum(*_ring_lines(full(v), steps, moved, bw)) / t - 1.0

    lo, hi = np.array([0.0, 0.0, 0.01] * 2)[free], np.array([1e-3, 1e-4, 1.5] * 2)[free]
    scale = np.array([1e-5, 1e-6, 0.1] * 2)[free]
    # Run to the least-squares optimum (tolerances far below the default 1e-8) and keep the start
    # that reached the lowest cost: with the defaults each start stopped wherever its last step
    # fell below 1e-8 of the cost, and two machines' fits of the pairwise-NVLink table came out 37%
    # apart in a base; converged, the three starts reach the same cost to seven digits.
    fits = [
        least_squares(residual, np.array(q0)[free], bounds=(lo, hi), x_scale=scale, **_CONVERGED) for q0 in _COMM_STARTS
    ]
    q = full(min(fits, key=lambda f: float(f.cost)).x)
    if len(set(p.tolist())) == 1:  # one step count: the per-step latency is only part of the base
        q[[0, 3]] += steps[0] * q[[1, 4]]
        q[[1, 4]] = 0.0
    low, bulk = _ring_lines(q, steps, moved, bw)
    small = int(np.argmin(moved))  # name them by what they are: the low-latency one wins the smallest row
    if count == 2 and bulk[small] < low[small]:
        q = np.concatenate([q[3:], q[:3]])
        low, bulk = bulk, low
    used = [bool((low <= bulk).any()), count == 2 and bool((bulk < low).any())]
    # a lone protocol is just the link's ring: no other to be low-latency or bulk against
    names = _PROTOCOLS if all(used) else ("ring", "ring")
    fitted = {
        f"{names[i]}.{term}": float(q[3 * i + j]) for i in range(2) if used[i] for j, term in enumerate(_PROTOCOL_TERMS)
    }
    return fitted, np.abs(residual(q[free]))


def _protocols(p: dict[str, float], link: str, note: str, one_count: bool) -> list[dict]:
    """A link's fitted protocols as the profile's ``collective_protocols`` entries."""
    out = []
    for proto in (*_PROTOCOLS, "ring"):
        if f"{link}.{proto}.base_s" in p:
            entry: dict = {"name": proto}
            for term in _PROTOCOL_TERMS:
                v = p[f"{link}.{proto}.{term}"]
                src = note
                if term == "hop_s" and one_count:
                    src = f"not identified (one rank count measured): its share is in base_s; {note}"
                entry[term] = {"value": round(v, 6) if term == "bus_fraction" else float(f"{v:.4g}"), "source": src}
            out.append(entry)
    return out


# ------------------------------------------------------------------ attention kernels

# Fitted attention terms (docs/profile_format.md): where the profile keeps them, bounds, x_scale.
# ``attention_fraction`` is relative to the GEMM peak fraction, as the cost model uses it.
_ATTN_PARAMS = [
    ("attention_fraction", 0.02, 2.0, 0.1),
    ("attention_masked_fraction", 0.0, 1.0, 0.1),
    ("attention_row_keys", 0.0, 1e5, 100.0),
    ("attention_memory_fraction", 0.05, 1.5, 0.1),
    ("attention_fixed_s", 0.0, 1e-4, 1e-6),
]
_PREFILL_PARAMS = ("attention_fraction", "attention_masked_fraction", "attention_row_keys", "attention_fixed_s")
_DECODE_PARAMS = ("attention_memory_fraction", "attention_fixed_s")


def attention_spec(r: Measurement) -> ModelSpec:
    """The one-layer model whose attention an attention row measured: its heads, KV heads and head
    size (the cost model needs nothing else of a model to build the attention op)."""
    return ModelSpec(
        name=f"measured attention {r.heads}q/{r.kv_heads}kv x {r.head_dim}",
        hidden_size=r.heads * r.head_dim,
        intermediate_size=1,
        num_layers=1,
        num_heads=r.heads,
        num_kv_heads=r.kv_heads,
        head_dim=r.head_dim,
        vocab_size=1,
    )


def attention_shape(r: Measurement) -> BatchShape:
    """The step an attention row measured: ``batch`` prompts each prefilling a chunk of ``m`` new
    tokens after ``kv`` cached ones, or ``batch`` sequences each decoding one after ``kv``."""
    if r.op == "attention_prefill":
        return batch_shape([(r.m, r.kv)] * r.batch, [])
    return batch_shape([], [r.kv] * r.batch)


def attention_op(r: Measurement, cfg: OpConfig) -> Op:
    """The cost model's own op for an attention row (``ops.attention_ops``, one layer)."""
    (op,) = attention_ops(attention_spec(r), attention_shape(r), cfg)
    return op


def _attention_arrays(hw: HardwareProfile, rows: list[Measurement]) -> dict[str, np.ndarray]:
    ops = [attention_op(r, OpConfig(tp=r.tp, weight_dtype=r.dtype, act_dtype=r.dtype, kv_dtype=r.dtype)) for r in rows]
    return {
        "prefill": np.array([r.op == "attention_prefill" for r in rows]),
        "flops": np.array([op.flops for op in ops]),
        "masked": np.array([op.masked_flops for op in ops]),
        "query": np.array([op.query_flops for op in ops]),
        "bytes": np.array([op.bytes for op in ops]),
        "peak": np.array([hw.peak(op.dtype) * hw.efficiency.gemm_fraction(op.dtype) for op in ops]),
        "seconds": np.array([r.seconds for r in rows]),
    }


def _attention_predict(
    p: dict[str, float], x: dict[str, np.ndarray], hw: HardwareProfile, decode_frac: float | None
) -> np.ndarray:
    """``CostModel.price``'s attention arithmetic (kernel time, no launch gap) on arrays."""
    pre = x["prefill"]
    frac = np.where(pre, p["attention_fraction"], decode_frac or p["attention_fraction"])
    extra = p["attention_masked_fraction"] * x["masked"] + p["attention_row_keys"] * x["query"]
    compute = (x["flops"] + np.where(pre, extra, 0.0)) / (x["peak"] * frac)
    memory = x["bytes"] / (hw.bandwidth * p["attention_memory_fraction"])
    return np.maximum(compute, memory) + p["attention_fixed_s"]


def attention_start(hw: HardwareProfile) -> dict[str, float]:
    """The attention terms as ``hw`` prices them now (what a term it lacks falls back to)."""
    e, o = hw.efficiency, hw.overheads
    fixed = o.attention_fixed_s or o.kernel_fixed_s
    return {
        "attention_fraction": e.attention_fraction.value,
        "attention_masked_fraction": e.attention_masked_fraction.value if e.attention_masked_fraction else 0.0,
        "attention_row_keys": e.attention_row_keys.value if e.attention_row_keys else 0.0,
        "attention_memory_fraction": (e.attention_memory_fraction or e.memory_fraction).value,
        "attention_fixed_s": fixed.value if fixed else 0.0,
    }


def fit_attention(hw: HardwareProfile, rows: list[Measurement]) -> tuple[dict[str, float], dict[str, float]]:
    """Least-squares fit (relative error) of the attention terms the rows identify: prefill rows
    the prefill compute fraction, the share of masked scores paid for and the per-row work;
    decode rows the K/V streaming fraction (decode attention is memory-bound, so its compute
    fraction is not identified and is left as the profile has it); either the kernel floor they
    share. Returns the fitted terms and the training MAPE per op."""
    x = _attention_arrays(hw, rows)
    start = attention_start(hw)
    dec = hw.efficiency.decode_attention_fraction
    free = [*(_PREFILL_PARAMS if x["prefill"].any() else ()), *(_DECODE_PARAMS if (~x["prefill"]).any() else ())]
    free = list(dict.fromkeys(free))  # (the floor once)
    check_enough_rows(rows, len(free), "attention")
    spec = {name: (lo, hi, scale) for name, lo, hi, scale in _ATTN_PARAMS}
    lo = np.array([spec[n][0] for n in free])
    hi = np.array([spec[n][1] for n in free])
    p0 = np.clip([start[n] for n in free], lo, hi - 1e-15)
    for name, inside in (("attention_masked_fraction", 0.5), ("attention_row_keys", 100.0)):
        if name in free:  # start inside the box: at a bound the gradient may be 0
            p0[free.index(name)] = inside

    def params(v: np.ndarray) -> dict[str, float]:
        return {**start, **dict(zip(free, (float(a) for a in v), strict=True))}

    def residual(v: np.ndarray) -> np.ndarray:
        return _attention_predict(params(v), x, hw, dec.value if dec else None) / x["seconds"] - 1.0

    fit = least_squares(residual, p0, bounds=(lo, hi), x_scale=[spec[n][2] for n in free])
    err = np.abs(residual(fit.x))
    mape = {}
    for op in ATTENTION_OPS:
        mine = x["prefill"] == (op == "attention_prefill")
        if mine.any():
            mape[op] = float(err[mine].mean())
    return {n: params(fit.x)[n] for n in free}, mape


# ------------------------------------------------------------------ elementwise kernels


def elementwise_spec(r: Measurement) -> ModelSpec:
    """The one-layer model whose elementwise op a Vidur mlp.csv row measured (hidden size ``k``,
    intermediate size ``n``, its heads and MLP kind)."""
    return ModelSpec(
        name=f"measured layer {r.k} x {r.n}",
        hidden_size=r.k,
        intermediate_size=r.n,
        num_layers=1,
        num_heads=r.heads,
        num_kv_heads=r.kv_heads,
        head_dim=r.head_dim,
        vocab_size=1,
        gated_mlp=r.gated,
    )


def elementwise_op(r: Measurement, cfg: OpConfig) -> Op:
    """The cost model's own op for an elementwise row: the op of that name in one prefill step of
    ``m`` tokens (``ops.step_ops``: the embedding, the layer's norms, RoPE, activation, adds)."""
    return _step_ops_by_name(elementwise_spec(r), r.m, cfg)[r.op]


@lru_cache(maxsize=4096)
def _step_ops_by_name(spec: ModelSpec, tokens: int, cfg: OpConfig) -> dict[str, Op]:
    """One prefill step's ops by name, built once per measured shape: a Vidur mlp.csv row times
    six elementwise ops of the same step. (The add runs twice per layer, the same op both times.)"""
    return {op.name: op for op in step_ops(spec, batch_shape([(tokens, 0)], []), cfg)}


def fit_elementwise(hw: HardwareProfile, rows: list[Measurement]) -> tuple[dict[str, float], dict[str, float]]:
    """Least-squares fit (relative error) of each elementwise op's bandwidth fraction (at most 1:
    a large pass cannot beat the memory) and floor: ``CostModel.price``'s ``max(FLOPs / peak,
    bytes / (bandwidth x fraction[op])) + fixed[op]``. Parameters
    ``elementwise_op_fraction.<op>`` and ``elementwise_op_fixed_s.<op>``; returns them and the
    training MAPE per op. Each op is fitted on its own rows (the ops share no term)."""
    params: dict[str, float] = {}
    mape: dict[str, float] = {}
    for name in [n for n in MLP_ELEMENTWISE_OPS if any(r.op == n for r in rows)]:
        fixed, fraction, mape[name] = _fit_elementwise_op(hw, [r for r in rows if r.op == name])
        params[f"elementwise_op_fixed_s.{name}"], params[f"elementwise_op_fraction.{name}"] = fixed, fraction
    return params, mape


def _fit_elementwise_op(hw: HardwareProfile, rows: list[Measurement]) -> tuple[float, float, float]:
    """One op's floor, bandwidth fraction and fit error."""
    check_enough_rows(rows, 2, f"{rows[0].op} elementwise")
    ops = [
        elementwise_op(r, OpConfig(tp=r.tp, weight_dtype=r.dtype, act_dtype=r.dtype, kv_dtype=r.dtype)) for r in rows
    ]
    compute = np.array([op.flops / hw.peak(op.dtype) for op in ops])
    stream = np.array([op.bytes for op in ops]) / hw.bandwidth
    t = np.array([r.seconds for r in rows])

    def residual(q: np.ndarray) -> np.ndarray:
        return (np.maximum(compute, stream / q[1]) + q[0]) / t - 1.0

    q0 = [3e-6, min(1.0, hw.efficiency.elementwise_memory_fraction.value)]
    q = least_squares(residual, q0, bounds=([0.0, 0.01], [1e-4, 1.0]), x_scale=[1e-6, 0.1]).x
    return float(q[0]), float(q[1]), float(np.mean(np.abs(residual(q))))


def calibrate(hw: HardwareProfile, rows: list[Measurement], files: list[str]) -> tuple[HardwareProfile, FitResult]:
    """Fit what the rows measure (GEMMs, attention and elementwise kernels, all-reduces) and
    return the new profile. Attention is fitted after the GEMMs, on the profile with their fit:
    its compute rate is a fraction of the fitted best-shape GEMM rate."""
    gemms = [r for r in rows if r.kind == "gemm"]
    comms = [r for r in rows if r.kind == "comm" and r.op == "all_reduce"]
    attns = [r for r in rows if r.kind == "attention"]
    elems = [r for r in rows if r.kind == "elementwise"]
    if not gemms and not comms and not attns and not elems:
        raise UserError(
            f"{', '.join(files)}: no GEMM, attention, elementwise or all-reduce rows (a Vidur all_reduce.csv's "
            "rows that span nodes are left out: the file does not say which link joins them): nothing to fit"
        )
    res = FitResult(gemm_rows=len(gemms), comm_rows=len(comms))
    check_possible(hw, gemms)
    if gemms:
        params, res.gemm_mape = fit_gemm(hw, gemms)
        res.params.update(params)
    if comms:
        params, res.comm_mape, res.comm_one_count = fit_all_reduce(hw, comms)
        res.params.update(params)
    # each term is sourced with the files whose rows identify it (a row's source is its file)
    by_kind = {
        kind: [f for f in files if any(r.source == f for r in rs)] or files
        for kind, rs in (("gemm", gemms), ("comm", comms), ("attention", attns), ("elementwise", elems))
    }
    if elems:
        params, res.elementwise_mape = fit_elementwise(hw, elems)
        res.elementwise_rows = {op: sum(r.op == op for r in elems) for op in res.elementwise_mape}
        res.params.update(params)
    if attns:
        base = apply_fit(hw, res, files, by_kind) if gemms else hw
        params, res.attention_mape = fit_attention(base, attns)
        res.attention_rows = {op: sum(r.op == op for r in attns) for op in res.attention_mape}
        res.params.update(params)
    return apply_fit(hw, res, files, by_kind), res


# a GEMM row timed at more than this multiple of the device's dense peak is a unit mistake (ms
# for s, FLOPs miscounted), not a measurement: fitted, it would drive the floor to ~1e-18 s
MAX_PEAK_MULTIPLE = 1.5


def check_possible(hw: HardwareProfile, gemms: list[Measurement]) -> None:
    """Refuse a GEMM row faster than the device's dense peak allows (by ``MAX_PEAK_MULTIPLE``: a
    datasheet peak may sit below the clock a short kernel runs at), naming the file and line."""
    for r in gemms:
        least_s = 2.0 * r.m * r.n * r.k / hw.peak(r.dtype)  # (the row's own shape: its GPU's part)
        if r.seconds * MAX_PEAK_MULTIPLE < least_s:
            raise UserError(
                f"{r.source}: line {r.line}: {r.seconds:.3g} s for a {r.m}x{r.k}x{r.n} {r.dtype} GEMM is "
                f"{least_s / r.seconds:,.1f}x faster than {hw.name}'s dense peak allows ({least_s:.3g} s at "
                f"{hw.peak(r.dtype) / 1e12:,.0f} TFLOP/s); are the times in the right unit?"
            )


def _fitted_on(files: list[str]) -> str:
    return "fitted by llmsim calibrate on " + ", ".join("/".join(Path(f).parts[-2:]) for f in files)


def apply_fit(
    hw: HardwareProfile, res: FitResult, files: list[str], by_kind: dict[str, list[str]] | None = None
) -> HardwareProfile:
    """The profile with the fitted terms written in, each sourced with the files its kind of rows
    came from (``by_kind``: gemm / comm / attention; default every file) and its fit error."""
    data = hw.model_dump(exclude_none=True)
    by_kind = by_kind or {}
    p = res.params
    if res.gemm_rows:
        note = f"{_fitted_on(by_kind.get('gemm', files))} ({res.gemm_rows} GEMM rows, MAPE {res.gemm_mape:.1%})"
        eff = data["efficiency"]
        for key in ("gemm_half_m", "memory_fraction", "gemm_wave_exponent"):
            if key == "gemm_wave_exponent" and "gemm_wave_units" not in eff:
                continue
            eff[key] = {"value": round(p[key], 6), "source": note}
        for key in (k for k in p if k == "gemm_max_fraction" or k.startswith("gemm_dtype_fraction.")):
            dtype = key.partition(".")[2]
            place = eff.setdefault("gemm_dtype_fraction", {}) if dtype else eff
            place[dtype or key] = {"value": round(p[key], 6), "source": note}
        data["overheads"]["kernel_fixed_s"] = {"value": float(f"{p['kernel_fixed_s']:.4g}"), "source": note}
    if res.comm_rows:
        where = _fitted_on(by_kind.get("comm", files))
        note = f"{where} ({res.comm_rows} all-reduce rows, MAPE {res.comm_mape:.1%})"
        for key in _LINK_KEYS:
            protocols = _protocols(p, key, note, key in res.comm_one_count)
            if protocols:
                data[key]["collective_protocols"] = protocols
                lat = data[key]["latency_s"]  # still the link's one-way latency, for its sends
                if "collective_protocols" not in lat["source"]:
                    lat["source"] = f"point-to-point sends (collectives use collective_protocols): {lat['source']}"
        bus = data["efficiency"]["allreduce_bus_fraction"]
        if "collective_protocols" not in bus["source"]:
            bus["source"] = f"links without collective_protocols: {bus['source']}"
    if res.attention_rows:
        _apply_attention(data, res, _fitted_on(by_kind.get("attention", files)))
    if res.elementwise_rows:
        _apply_elementwise(data, res, _fitted_on(by_kind.get("elementwise", files)))
    data["calibration"] = {
        "date": date.today().isoformat(),
        "base_profile": hw.name,
        "files": [str(f) for f in files],
        "gemm_rows": res.gemm_rows,
        "gemm_fit_mape": round(res.gemm_mape, 4) if res.gemm_rows else None,
        "all_reduce_rows": res.comm_rows,
        "all_reduce_fit_mape": round(res.comm_mape, 4) if res.comm_rows else None,
        "method": "least squares on relative error of the roofline GEMM curve and the ring all-reduce's "
        "fastest of two protocols (base + steps x hop + bytes / bandwidth each)",
    }
    if res.attention_rows:  # (absent otherwise: a GEMM-only calibration's block stays as it was)
        data["calibration"]["attention_rows"] = dict(res.attention_rows)
        data["calibration"]["attention_fit_mape"] = {op: round(v, 4) for op, v in res.attention_mape.items()}
        data["calibration"]["method"] += "; roofline attention kernels (prefill and paged decode)"
    if res.elementwise_rows:
        data["calibration"]["elementwise_rows"] = dict(res.elementwise_rows)
        data["calibration"]["elementwise_fit_mape"] = {op: round(v, 4) for op, v in res.elementwise_mape.items()}
        data["calibration"]["method"] += "; elementwise kernels (a bandwidth fraction and a floor per op)"
    data["description"] = (hw.description + " [calibrated]").strip()
    return HardwareProfile.model_validate(data)


def _apply_attention(data: dict, res: FitResult, where: str) -> None:
    """Write the fitted attention terms, each sourced with the rows that identify it and their fit
    error (the floor both regimes share: every attention row)."""
    p = res.params
    counts = {op: f"{res.attention_rows[op]} {op.removeprefix('attention_')}" for op in res.attention_rows}
    errors = {op: f"{res.attention_mape[op]:.1%}" for op in res.attention_rows}

    def note(*ops: str) -> str:
        return f"{where} ({' and '.join(counts[o] for o in ops)} attention rows, MAPE {' / '.join(errors[o] for o in ops)})"

    eff, ov = data["efficiency"], data["overheads"]
    if "attention_prefill" in counts:
        for key in ("attention_fraction", "attention_masked_fraction", "attention_row_keys"):
            eff[key] = {"value": round(p[key], 6), "source": note("attention_prefill")}
    if "attention_decode" in counts:
        eff["attention_memory_fraction"] = {
            "value": round(p["attention_memory_fraction"], 6),
            "source": note("attention_decode"),
        }
    ov["attention_fixed_s"] = {"value": float(f"{p['attention_fixed_s']:.4g}"), "source": note(*counts)}


def _apply_elementwise(data: dict, res: FitResult, where: str) -> None:
    """Write each elementwise op's fitted fraction and floor, sourced with its rows and error."""
    p = res.params
    fractions, floors = {}, {}
    for op, n in res.elementwise_rows.items():
        note = f"{where} ({n} {op} rows, MAPE {res.elementwise_mape[op]:.1%})"
        fractions[op] = {"value": round(p[f"elementwise_op_fraction.{op}"], 6), "source": note}
        floors[op] = {"value": float(f"{p[f'elementwise_op_fixed_s.{op}']:.4g}"), "source": note}
    data["efficiency"]["elementwise_op_fraction"] = fractions
    data["overheads"]["elementwise_op_fixed_s"] = floors


__all__ = [
    "FitResult",
    "Figure",
    "apply_fit",
    "attention_op",
    "attention_shape",
    "attention_spec",
    "calibrate",
    "elementwise_op",
    "elementwise_spec",
    "fit_all_reduce",
    "fit_attention",
    "fit_elementwise",
    "fit_gemm",
]
