"""vLLM's fused MoE kernel, measured (data/validation/moe_kernels/) against llmsim's price of it.

    python benchmarks/moe_kernels.py            # every row: measured, priced, ratio; per-GPU fit
    python benchmarks/moe_kernels.py --fit      # the fits only: moe_gemm_fraction, moe_memory_fraction per GPU

Each row is one ``fused_experts`` call (both grouped GEMMs and the activation; vLLM's
``benchmark_moe.py`` and the PRs' microbenchmarks time that) for M tokens routed to ``topk`` of
``E`` experts of hidden size K and intermediate size N, in the row's dtype. llmsim prices the same call with
the ops the simulator builds for a MoE layer (``ops.step_ops``: ``mlp_up_proj``, ``mlp_act``,
``mlp_down_proj``) on the row's profile, as shipped and with ``efficiency.moe_gemm_fraction``
removed (the dense GEMM rate). The fit: per GPU, the ``moe_gemm_fraction`` that minimises the
squared log error over that GPU's BF16 rows with M >= 512 (compute-bound: rows per expert in the
hundreds); rows below are weight-streaming and do not depend on it. Those (16 <= M <= 256, every
expert touched and a few rows each) fit ``moe_memory_fraction`` the same way, the rate the grouped
kernel streams expert weights at; a profile carries it only where it differs from ``memory_fraction``
by more than the rows pin it (H100 SXM and GH200: 0.889 against the 0.955 fitted to graphed dense
decode steps; elsewhere the fit lands within 0.02 of ``memory_fraction`` on three to eight rows,
and the profile keeps the one figure). FP8 rows are never fitted:
they check the fraction (a BF16 measurement, or a prior) on another dtype. The tuned-config time is
used where a source gives it (vLLM ships those configs), else the default-config time.
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
EXPERT_OPS = ("mlp_up_proj", "mlp_act", "mlp_down_proj")
FIT_MIN_M = 512
STREAM_M = (16, 256)  # weight-streaming rows: the moe_memory_fraction fit


COMPUTE, STREAM = "moe_gemm_fraction", "moe_memory_fraction"  # the two terms these rows fit


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
    return rows["tuned_us"].where(rows["tuned_us"].notna(), rows["default_us"])


def priced_us(rows: pd.DataFrame, hw: HardwareProfile) -> np.ndarray:
    return np.array([fused_experts_s(hw, r.E, r.N, r.K, r.topk, r.M, r.dtype) * 1e6 for r in rows.itertuples()])


def fit_term(rows: pd.DataFrame, hw: HardwareProfile, term: str) -> float:
    """``term``'s value in (0.2, 1] with the least squared log error on ``rows``, on ``hw``."""
    return least_log_error(lambda v: priced_us(rows, with_term(hw, term, v)), measured_us(rows).to_numpy())


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
        big = rows[(rows["M"] >= FIT_MIN_M) & (rows["dtype"] == "bf16")]
        fitted = fit_term(big, dense, COMPUTE) if len(big) else math.nan
        mid = rows[rows["M"].between(*STREAM_M) & (rows["dtype"] == "bf16")]
        stream = fit_term(mid, shipped, STREAM) if len(mid) else math.nan
        own = shipped_value(shipped, COMPUTE), shipped_value(shipped, STREAM)
        fits.append(
            (profile, len(big), fitted, own[0], len(mid), stream, own[1], shipped.efficiency.memory_fraction.value)
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
    lo, hi = STREAM_M
    cols = [f"bf16 rows M>={FIT_MIN_M}", "fitted moe_gemm_fraction", "shipped moe_gemm"]
    cols += [f"rows {lo}-{hi}", "fitted moe_memory_fraction", "shipped moe_memory", "memory_fraction"]
    fit = pd.DataFrame(fits, columns=["profile", *cols])
    print(fit.to_string(index=False, float_format="%.3f"))
    if not args.fit:
        layers = layer_check()[["profile", "model", "M", "layer_us", "priced_us", "err"]]
        print("\nwhole fused-MoE layers in a CUDA graph (held out; data/validation/moe_kernels/layer_tables.csv):")
        print(layers.to_string(index=False, formatters={"err": "{:+.1%}".format}, float_format="%.1f"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
