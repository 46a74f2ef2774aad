"""Whole prompt passes measured on power-capped GPUs (data/calibration/forward-passes/) against llmsim.

    python benchmarks/forward_passes.py          # every row: measured, priced, error; per split
    python benchmarks/forward_passes.py --fit    # the fit only: gemm_max_fraction per GPU

Each row is one HuggingFace forward pass of a prompt of ``tokens`` tokens (bf16, eager, the logits
of the last token only: the work before a first token) on an L4 or an L40S, the median of three
timed passes. Both cards run at their power cap under such a pass and clock down to it (README
there), so their sustained GEMM rate is well below what a datasheet peak times a short-burst GEMM
efficiency gives. llmsim prices the same pass as a one-sequence prefill step on the row's profile
with the ``ideal`` engine (the hardware alone: no engine host terms, no CUDA graphs). The fit: per
GPU, the ``efficiency.gemm_max_fraction`` that minimises the squared log error over that GPU's rows
marked ``fit`` (prompts of 512 tokens and more, where the GEMMs bound the pass); every other term
of the profile stays as shipped. Rows marked ``held-out`` (another model) and ``repeat`` (the same
passes run again later) check it; ``streaming`` rows (128 and 256 tokens) are bound by reading the
weights and by eager launches, and are shown only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.commands.models import model_arg
from llmsim.costmodel.ops import model_batch_shape
from llmsim.costmodel.roofline import CostConfig, CostModel
from llmsim.hardware import HardwareProfile, load_profile
from llmsim.tables import table

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data/calibration/forward-passes"
SPLITS = ("fit", "held-out", "repeat", "streaming")


def model_for(name: str):
    """A catalog model, or the config file beside the data (a model the catalog lacks)."""
    path = DATA / f"{name}.config.json"
    return model_arg(str(path) if path.exists() else name)


def with_gemm_fraction(hw: HardwareProfile, fraction: float) -> HardwareProfile:
    data = hw.model_dump()
    data["efficiency"]["gemm_max_fraction"] = {"value": fraction, "source": "benchmarks/forward_passes.py fit"}
    return HardwareProfile.model_validate(data)


def prompt_pass_ms(model, hw: HardwareProfile, tokens: int) -> float:
    """llmsim's milliseconds for one prompt of ``tokens`` tokens, prefilled alone on ``hw``."""
    cost = CostModel(model, hw, CostConfig(weight_dtype=model.weight_dtype))
    return cost.step_time(model_batch_shape(model, [(tokens, 0)], [])) * 1e3


def priced_ms(rows: pd.DataFrame, hw: HardwareProfile) -> np.ndarray:
    return np.array([prompt_pass_ms(model_for(r.model), hw, int(r.tokens)) for r in rows.itertuples()])


def least_log_error(price: Callable[[float], np.ndarray], measured: np.ndarray) -> float:
    """The fraction in [0.2, 1] whose prices ``price(fraction)`` have the least squared log error
    against ``measured``: 0.01 steps, then 0.001 around the best."""

    def loss(fraction: float) -> float:
        return float(np.sum(np.log(price(fraction) / measured) ** 2))

    best = min(np.linspace(0.2, 1.0, 81), key=loss)
    return round(float(min(np.linspace(max(0.2, best - 0.01), min(1.0, best + 0.01), 21), key=loss)), 3)


def fit_fraction(rows: pd.DataFrame, hw: HardwareProfile) -> float:
    """The gemm_max_fraction with the least squared log error on ``rows``."""
    return least_log_error(lambda f: priced_ms(rows, with_gemm_fraction(hw, f)), rows["ms"].to_numpy())


def load_rows() -> pd.DataFrame:
    return pd.read_csv(DATA / "forward_passes.csv")


def fits(rows: pd.DataFrame) -> list[list]:
    out = []
    for gpu, group in rows[rows["split"] == "fit"].groupby("gpu", sort=False):
        hw = load_profile(gpu)
        out.append([gpu, len(group), fit_fraction(group, hw), hw.efficiency.gemm_max_fraction.value])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="print the per-GPU fit only")
    args = ap.parse_args(argv)
    rows = load_rows()
    if not args.fit:
        profiles = {gpu: load_profile(gpu) for gpu in rows["gpu"].unique()}
        rows["priced_ms"] = [
            prompt_pass_ms(model_for(r.model), profiles[r.gpu], int(r.tokens)) for r in rows.itertuples()
        ]
        rows["err"] = rows["priced_ms"] / rows["ms"] - 1
        cells = [
            [r.gpu, r.model, r.run, r.split, r.tokens, f"{r.ms:,.1f}", f"{r.priced_ms:,.1f}", f"{r.err:+.1%}"]
            for r in rows.itertuples()
        ]
        print(table(cells, ["gpu", "model", "run", "split", "tokens", "measured ms", "llmsim ms", "err"]))
        print()
        summary = []
        for (gpu, split), g in rows.groupby(["gpu", "split"], sort=False):
            summary.append([gpu, split, len(g), f"{g['err'].abs().mean():.1%}", f"{g['err'].abs().max():.1%}"])
        print(table(summary, ["gpu", "split", "rows", "MAPE", "worst"]))
        print()
    print(table(fits(rows), ["profile", "fit rows", "fitted gemm_max_fraction", "shipped"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
