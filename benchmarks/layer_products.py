"""One layer's bf16 products, measured (data/calibration/layer-products/), against llmsim's linear ops.

    python benchmarks/layer_products.py          # every row: measured, priced, error; per GPU and model
    python benchmarks/layer_products.py --fit    # the fit only: the GH200's gemm_max_fraction

Each row is one transformer layer's four products in a prompt's order (q/k/v merged, o, gate/up
merged, down), bf16 cuBLAS through PyTorch, for a prompt of ``tokens`` tokens (README there: eight
copies a pass, a pass timed whole, the median of five). llmsim prices the same four GEMMs as its
prefill ops (``attn_pre_proj``, ``attn_post_proj``, ``mlp_up_proj``, ``mlp_down_proj``) for one
layer on the row's profile. The GH200 has no other measurement of its own: its
``efficiency.gemm_max_fraction`` is fitted to its rows marked ``fit`` (Qwen3-8B, the first session)
by the least squared log error, as benchmarks/forward_passes.py fits the power-capped cards;
Qwen3-32B and the second session are held out. The A100 and H100 rows (``check``) test those
profiles' curves, which are fitted to Vidur's kernels, against this second source; nothing of them
is fitted here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import fitting
import numpy as np
import pandas as pd
from fitting import print_fit, print_scored

from llmsim.costmodel.ops import model_batch_shape, step_ops
from llmsim.costmodel.roofline import CostConfig, CostModel
from llmsim.hardware import HardwareProfile, load_profile
from llmsim.models import get_model

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data/calibration/layer-products/layer_products.csv"
LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
FITTED = "GH200"


def layer_products_ms(model_name: str, hw: HardwareProfile, tokens: int) -> float:
    """llmsim's milliseconds for one layer's four linear products of a ``tokens``-token prompt."""
    model = get_model(model_name)
    cfg = CostConfig(weight_dtype=model.weight_dtype)
    cost = CostModel(model, hw, cfg)
    ops = [op for op in step_ops(model, model_batch_shape(model, [(tokens, 0)], []), cfg) if op.name in LINEAR_OPS]
    return sum(cost.price(op).kernel_s for op in ops) * 1e3  # an op's price is one layer's call


def _row_ms(row: tuple, hw: HardwareProfile) -> float:
    return layer_products_ms(row.model, hw, int(row.tokens))


def priced_ms(rows: pd.DataFrame, hw: HardwareProfile | None = None) -> np.ndarray:
    """Every row priced on ``hw``, or (None) on its own GPU's shipped profile."""
    return fitting.priced(rows, _row_ms, hw)


def load_rows() -> pd.DataFrame:
    return pd.read_csv(DATA)


def fit_fraction(rows: pd.DataFrame, hw: HardwareProfile) -> float:
    """The gemm_max_fraction with the least squared log error on ``rows``."""
    return fitting.fit_gemm_fraction(rows, hw, _row_ms, "bf16_layer_ms", "benchmarks/layer_products.py fit")


def fit_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return fitting.fit_rows(rows, FITTED)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="print the GH200 fit only")
    args = ap.parse_args(argv)
    rows = load_rows()
    if not args.fit:
        print_scored(
            rows,
            "bf16_layer_ms",
            priced_ms(rows),
            ["gpu", "session", "model", "split", "tokens"],
            ["gpu", "model", "split"],
            ".3f",
        )
    hw, mine = load_profile(FITTED), fit_rows(rows)
    print_fit(FITTED, len(mine), fit_fraction(mine, hw), hw.efficiency.gemm_max_fraction.value)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
