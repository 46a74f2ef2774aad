"""vLLM's fused MoE kernel, measured (data/validation/moe_kernels/) against llmsim's price of it.

    python benchmarks/moe_kernels.py            # every row: measured, priced, ratio; per-GPU fit
    python benchmarks/moe_kernels.py --fit      # the fits only: moe_gemm_fraction, moe_memory_fraction per GPU

Each row is one ``fused_experts`` call (both grouped GEMMs, the activation and the top-k sum;
vLLM's ``benchmark_moe.py`` and the PRs' microbenchmarks time that) for M tokens routed to
``topk`` of ``E`` experts of hidden size K and intermediate size N, in the row's dtype. llmsim
prices the same call with the ops the simulator builds for a MoE layer (``ops.step_ops``:
``mlp_up_proj``, ``mlp_act``, ``mlp_down_proj``, ``moe_sum``) on the row's profile, as shipped
and with ``efficiency.moe_gemm_fraction`` removed (the dense GEMM rate), each expert's rows padded
to the tile height of vLLM's default config (``costmodel/fusedmoe.py``).

The row's time is its default-config one where the source gives it: that is the config vLLM runs
where it ships no tuned file for the experts' shape (every MoE server of
data/validation/vllm-gpu-bench/ logs "Using default MoE config"), and the one whose tile heights
are priced; a tuned-config time only where the source has no other (the H100 SXM's Mixtral rows).
The fit: per GPU, the ``moe_gemm_fraction`` that minimises the squared log error over that GPU's
BF16 rows with M >= 512 (compute-bound: rows per expert in the hundreds), on default-config rows
(``FRACTION_FROM``: the H100 SXM, whose rows are tuned-config ones, and the GH200 carry the H200's,
the same die; the A100-40GB and PCIe the A100-SXM-80GB's); rows below are weight-streaming and do
not depend on it. Those (16 <= M <= 256, every expert touched and a few rows each) fit
``moe_memory_fraction`` the same way, the rate the grouped kernel streams expert weights at.
Where a GPU has vLLM's own harness's rows from one token up (``benchmark_moe.py``, which times
calls in a CUDA graph: H100 SXM and A100-40GB), the rows at 1-96 tokens fit that fraction
together with ``overheads.moe_call_fixed_s``, the call's own work beyond its expert GEMMs and
the top-k sum (routing top-k, token sort), which the small calls show (``fit_call``). The H100
SXM, GH200 and H200 (the same die and kernel) carry the H100's pair, the three A100 profiles
the A100-40GB's, the H100 PCIe the H100's call cost alone (no rows of its own). H200's own rows
come from another harness, with a ~185 us floor at 1-4 tokens: held out. FP8 rows are never
fitted: they check the fraction (a BF16 measurement, or a prior) on another dtype.

GPUs without rows take a prior (``prior_fractions``): the geometric mean of the A100-SXM-80GB's
and the H200's default-config fits with no fixed cost a call (the profiles that take it carry
none), over the kind of dense curve the profile has: a fitted one (L4, A40, RTX 3090, RTX A6000),
or a best-shape (MAMF) one with gemm_half_m 64 and wave exponent 0.2 (B200, GB200, L40S, RTX
4090, RTX PRO 6000), for which the two GPUs are priced on the MAMF curves their profiles had
until 2026-12-05/06 (``MAMF_FRACTION``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
from fitting import least_log_error, with_efficiency

from llmsim.costmodel import CostConfig, CostModel
from llmsim.costmodel.ops import batch_shape, step_ops
from llmsim.hardware import HardwareProfile, load_profile
from llmsim.models import get_model

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data/validation/moe_kernels/fused_moe.csv"
LAYERS = ROOT / "data/validation/moe_kernels/layer_tables.csv"  # whole layers in a CUDA graph, held out
EXPERT_OPS = ("mlp_up_proj", "mlp_act", "mlp_down_proj", "moe_sum")
FIT_MIN_M = 512
STREAM_M = (16, 256)  # weight-streaming rows: the moe_memory_fraction fit
SMALL_M = 96  # the small calls, where a call's fixed cost shows: the fit_call rows (M <= this)
CALL_HARNESS = "vLLM benchmark_moe.py"  # the rows fit_call reads: vLLM's own harness (a CUDA graph)
CALL_MIN_ROWS = 4  # ... at least this many of them, from one token up (two terms are fitted)


COMPUTE, STREAM = "moe_gemm_fraction", "moe_memory_fraction"  # the two terms these rows fit
# the profiles whose moe_gemm_fraction is another GPU's default-config fit (the same die)
FRACTION_FROM = {"H100-SXM": "H200", "GH200": "H200", "A100-40GB": "A100-SXM-80GB", "A100-PCIe-80GB": "A100-SXM-80GB"}
PRIOR_FROM = ("A100-SXM-80GB", "H200")  # the GPUs with default-config rows at M >= FIT_MIN_M
# the best-shape BF16 GEMM fraction their profiles had before the fitted curves (MAMF, [STAS-ACC]):
# A100 SXM 271.2 of 312 TFLOPS, H100 SXM (the H200 the same) 794.5 of 989
MAMF_FRACTION = {"A100-SXM-80GB": 0.869, "H200": 0.803}
MAMF_SHAPE = {"gemm_half_m": 64, "gemm_wave_exponent": 0.2}  # the prior shape terms of those curves


def with_term(hw: HardwareProfile, term: str, value: float | None) -> HardwareProfile:
    """``hw`` with ``efficiency.<term>`` set to ``value`` (None: removed)."""
    return with_efficiency(hw, term, value, "benchmarks/moe_kernels.py fit")


def fused_experts_s(hw: HardwareProfile, e: int, n: int, k: int, topk: int, m: int, dtype: str = "bf16") -> float:
    """llmsim's seconds for one fused_experts call of this geometry on ``hw`` (one GPU; weights and
    compute in ``dtype``: fp8 is W8A8)."""
    base = get_model("qwen3-30b-a3b-instruct-2507")  # a catalog MoE; its geometry replaced below
    model = dataclasses.replace(base, hidden_size=k, intermediate_size=n, num_experts=e, experts_per_token=topk)
    cfg = CostConfig(weight_dtype=dtype, act_dtype=dtype)
    cost = CostModel(model, hw, cfg)
    ops = [op for op in step_ops(model, batch_shape([(m, 0)], []), cfg) if op.name in EXPERT_OPS]
    return sum(cost.price(op).kernel_s for op in ops)


def measured_us(rows: pd.DataFrame) -> pd.Series:
    return rows["default_us"].where(rows["default_us"].notna(), rows["tuned_us"])


def priced_us(rows: pd.DataFrame, hw: HardwareProfile) -> np.ndarray:
    return np.array([fused_experts_s(hw, r.E, r.N, r.K, r.topk, r.M, r.dtype) * 1e6 for r in rows.itertuples()])


def fraction_rows(rows: pd.DataFrame, default_config: bool = True) -> pd.DataFrame:
    """One GPU's compute-bound BF16 rows (M >= FIT_MIN_M) with a default-config time, which the
    compute fraction is fitted to (``default_config=False``: those with a tuned-config time only)."""
    big = rows[(rows["M"] >= FIT_MIN_M) & (rows["dtype"] == "bf16")]
    return big[big["default_us"].notna() == default_config]


def without_call(hw: HardwareProfile) -> HardwareProfile:
    data = hw.model_dump()
    data["overheads"]["moe_call_fixed_s"] = None
    return HardwareProfile.model_validate(data)


def on_mamf_curve(hw: HardwareProfile, profile: str) -> HardwareProfile:
    """``hw`` with the best-shape (MAMF) dense curve its profile had before the fitted one."""
    hw = with_efficiency(hw, "gemm_max_fraction", MAMF_FRACTION[profile], "MAMF best-shape fraction")
    for term, value in MAMF_SHAPE.items():
        hw = with_efficiency(hw, term, value, "prior shape term")
    return hw


def prior_fractions(data: pd.DataFrame) -> dict[str, float]:
    """The moe_gemm_fraction priors for GPUs without rows, by the kind of dense curve they carry
    ("fitted", "mamf"): the geometric mean of ``PRIOR_FROM``'s default-config fits, no call cost."""
    fits: dict[str, list[float]] = {"fitted": [], "mamf": []}
    for profile in PRIOR_FROM:
        rows = fraction_rows(data[data["profile"] == profile])
        hw = without_call(load_profile(profile))
        fits["fitted"].append(fit_term(rows, hw, COMPUTE))
        fits["mamf"].append(fit_term(rows, on_mamf_curve(hw, profile), COMPUTE))
    return {kind: round(math.prod(v) ** (1 / len(v)), 3) for kind, v in fits.items()}


def pcie_fraction(data: pd.DataFrame) -> float:
    """The H100 PCIe's fraction: the H200's default-config rows (the same die) refitted over the
    best-shape curve kind that profile carries, the call cost paid as it pays it."""
    hw = on_mamf_curve(load_profile("H200"), "H200")
    return fit_term(fraction_rows(data[data["profile"] == "H200"]), hw, COMPUTE)


def tuned_fit(data: pd.DataFrame, profile: str = "H100-SXM") -> float:
    """The fraction ``profile``'s tuned-config rows would fit (M >= FIT_MIN_M): reported, not shipped."""
    tuned = fraction_rows(data[data["profile"] == profile], default_config=False)
    return fit_term(tuned, with_term(load_profile(profile), COMPUTE, None), COMPUTE)


def fit_term(rows: pd.DataFrame, hw: HardwareProfile, term: str) -> float:
    """``term``'s value in (0.2, 1] with the least squared log error on ``rows``, on ``hw``."""
    return least_log_error(lambda v: priced_us(rows, with_term(hw, term, v)), measured_us(rows).to_numpy())


def with_call(hw: HardwareProfile, call_s: float, fraction: float) -> HardwareProfile:
    """``hw`` with a fixed cost a fused-MoE call and its experts' streaming fraction."""
    data = with_term(hw, STREAM, fraction).model_dump()
    data["overheads"]["moe_call_fixed_s"] = {"value": round(call_s, 9), "source": "benchmarks/moe_kernels.py fit"}
    return HardwareProfile.model_validate(data)


def call_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One GPU's rows that ``fit_call`` reads: BF16, at most ``SMALL_M`` tokens, from vLLM's own
    harness; empty where fewer than ``CALL_MIN_ROWS`` or none at one token (nothing to fit)."""
    mine = rows[(rows["dtype"] == "bf16") & (rows["M"] <= SMALL_M) & rows["notes"].str.startswith(CALL_HARNESS)]
    return mine if len(mine) >= CALL_MIN_ROWS and (mine["M"] == 1).any() else mine.iloc[:0]


def fit_call(rows: pd.DataFrame, hw: HardwareProfile) -> tuple[float, float, float]:
    """(fixed seconds a call, streaming fraction, MAPE) with the least squared log error on ``rows``:
    a grid over the fraction (0.01 apart), and at each the fixed cost (2 us apart) that fits best."""
    measured = measured_us(rows).to_numpy() * 1e-6

    def loss(call_s: float, fraction: float) -> float:
        return float(np.sum(np.log(priced_us(rows, with_call(hw, call_s, fraction)) * 1e-6 / measured) ** 2))

    calls = np.arange(40) * 2e-6  # 0 to 78 us
    best = (float("inf"), 0.0, 0.0)
    for fraction in np.arange(0.60, 1.0001, 0.01):
        errs = [loss(c, fraction) for c in calls]
        i = int(np.argmin(errs))
        if errs[i] < best[0]:
            best = (errs[i], float(calls[i]), round(float(fraction), 3))
    call_s, fraction = best[1], best[2]
    if fraction in (0.6, 1.0) or call_s in (calls[0], calls[-1]):  # (0 us: a negative cost would fit)
        gpu = rows["profile"].iloc[0]
        raise ValueError(
            f"{gpu}: the fit ends at its grid's edge ({call_s * 1e6:.0f} us, {fraction:.2f}): the rows do not pin it"
        )
    priced = priced_us(rows, with_call(hw, call_s, fraction)) * 1e-6
    return call_s, fraction, float(np.mean(np.abs(priced / measured - 1)))


def shipped_value(hw: HardwareProfile, term: str) -> float:
    """``hw``'s own value of ``term`` (NaN where the profile carries none: the cost model then uses
    the dense rate for moe_gemm_fraction, memory_fraction for moe_memory_fraction)."""
    own = getattr(hw.efficiency, term)
    return own.value if own else math.nan


def layer_check(path: Path = LAYERS) -> pd.DataFrame:
    """The held-out layer tables (``LAYERS``) against llmsim's price of the same call on each row's
    shipped profile: one row per measurement, ``err`` = priced / measured - 1."""
    rows = pd.read_csv(path)
    parts = [pd.Series(priced_us(g, load_profile(p)), index=g.index) for p, g in rows.groupby("profile")]
    priced = pd.concat(parts).reindex(rows.index)  # (each row's own price, whatever the file's order)
    return rows.assign(priced_us=priced, err=priced / rows["layer_us"] - 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="print the per-GPU fit only")
    args = ap.parse_args(argv)
    data = pd.read_csv(DATA)
    table, fits = [], []
    for profile, rows in data.groupby("profile", sort=True):
        shipped = load_profile(profile)
        dense = with_term(shipped, COMPUTE, None)
        big = fraction_rows(rows)
        fitted = fit_term(big, dense, COMPUTE) if len(big) else math.nan
        mid = rows[rows["M"].between(*STREAM_M) & (rows["dtype"] == "bf16")]
        small = call_rows(rows)
        if len(small):  # the fixed cost a call and the streaming fraction, together
            call_s, stream, _ = fit_call(small, shipped)
            stream_rows = f"{len(small)} at 1-{SMALL_M}"
        else:
            call_s, stream = math.nan, fit_term(mid, shipped, STREAM) if len(mid) else math.nan
            stream_rows = f"{len(mid)} at {STREAM_M[0]}-{STREAM_M[1]}"
        own = shipped_value(shipped, COMPUTE), shipped_value(shipped, STREAM)
        own_call = shipped.overheads.moe_call_fixed_s
        fits.append(
            (profile, len(big), fitted, own[0], stream_rows, stream, own[1], shipped.efficiency.memory_fraction.value)
            + (call_s * 1e6, own_call.value * 1e6 if own_call else math.nan)
        )
        meas = measured_us(rows).to_numpy()
        before, after = priced_us(rows, dense), priced_us(rows, shipped)
        for r, m_us, b, a in zip(rows.itertuples(), meas, before, after, strict=True):
            shape = f"{r.E}/{r.N}/{r.K}/{r.topk} {r.dtype}"
            table.append((profile, shape, r.M, m_us, b, b / m_us - 1, a, a / m_us - 1))
    if not args.fit:
        cols = ["profile", "E/N/K/topk dtype", "M", "measured us", "dense us", "err", "shipped us", "err "]
        out = pd.DataFrame(table, columns=cols)
        print(
            out.to_string(index=False, formatters={c: "{:+.1%}".format for c in ("err", "err ")}, float_format="%.1f")
        )
        print()
    cols = [f"default-config bf16 rows M>={FIT_MIN_M}", "fitted moe_gemm_fraction", "shipped moe_gemm"]
    cols += ["streaming rows", "fitted moe_memory_fraction", "shipped moe_memory", "memory_fraction"]
    cols += ["fitted moe_call_fixed_s (us)", "shipped (us)"]
    fit = pd.DataFrame(fits, columns=["profile", *cols])
    print(fit.to_string(index=False, float_format="%.3f"))
    carried = ", ".join(f"{p} {FRACTION_FROM[p]}'s" for p in FRACTION_FROM)
    priors = prior_fractions(data)
    print(
        f"moe_gemm_fraction carried (same die): {carried}; H100-PCIe the H200's over its curve kind, {pcie_fraction(data):.3f}"
    )
    print(f"(the H100 SXM's own rows, tuned-config, would fit {tuned_fit(data):.3f})")
    print(
        f"priors ({' and '.join(PRIOR_FROM)} default-config fits, no call cost, geometric mean): "
        f"over fitted dense curves {priors['fitted']:.3f}, over best-shape (MAMF) curves {priors['mamf']:.3f}"
    )
    if not args.fit:
        layers = layer_check()[["profile", "model", "M", "layer_us", "priced_us", "err"]]
        print("\nwhole fused-MoE layers in a CUDA graph (held out; data/validation/moe_kernels/layer_tables.csv):")
        print(layers.to_string(index=False, formatters={"err": "{:+.1%}".format}, float_format="%.1f"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
