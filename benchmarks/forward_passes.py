"""Whole prompt passes measured on an L4 and an L40S (data/calibration/forward-passes/) against llmsim.

    python benchmarks/forward_passes.py          # every row: measured, priced, error; per split
    python benchmarks/forward_passes.py --fit    # the fit only: the L4's gemm_max_fraction

Each row is one HuggingFace forward pass of a prompt of ``tokens`` tokens (bf16, not compiled, the
default SDPA attention, the logits of the last token only: the work before a first token), the
median of three or five timed passes. The L4 runs such passes at its 72 W cap from about 512 tokens
up and clocks down to about half its peak's clock (README there), so its sustained GEMM rate is far
below what a datasheet peak times a short-burst GEMM efficiency gives. llmsim prices the same pass
as a one-sequence prefill step on the row's profile with the ``ideal`` engine (no CUDA graphs, no
vLLM host terms; the profile's own step overhead, 1.9 ms, stays). The fit: the L4's
``efficiency.gemm_max_fraction`` that minimises the squared log error over its rows marked ``fit``
(Qwen3-8B, prompts of 512 tokens and more, where the GEMMs bound the pass); every other term stays
as shipped, and the attention rate follows (``attention_fraction`` is relative to it). Rows marked
``held-out`` (another model) and ``repeat`` (the same passes run again later) check it;
``streaming`` rows (128 and 256 tokens) are bound by reading the weights and by eager launches and
are shown only. The L40S rows (``check``) are not fitted: on a card this fast an eager pass spends a
share of its time outside the GEMMs that vLLM does not (docs/validation.md, "Power-capped GPUs").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import fitting
import numpy as np
import pandas as pd
from fitting import print_fit, print_scored

from llmsim.commands.models import model_arg
from llmsim.costmodel.ops import model_batch_shape
from llmsim.costmodel.roofline import CostConfig, CostModel
from llmsim.hardware import HardwareProfile, load_profile
from llmsim.models import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data/calibration/forward-passes"
SPLITS = ("fit", "held-out", "repeat", "streaming", "check")
FITTED = "L4"


def model_for(name: str) -> ModelSpec:
    """A catalog model, or the config file beside the data (a model the catalog lacks)."""
    path = DATA / f"{name}.config.json"
    return model_arg(str(path) if path.exists() else name)


def prompt_pass_ms(model: ModelSpec, hw: HardwareProfile, tokens: int) -> float:
    """llmsim's milliseconds for one prompt of ``tokens`` tokens, prefilled alone on ``hw``."""
    cost = CostModel(model, hw, CostConfig(weight_dtype=model.weight_dtype))
    return cost.step_time(model_batch_shape(model, [(tokens, 0)], [])) * 1e3


def _row_ms(row: tuple, hw: HardwareProfile) -> float:
    return prompt_pass_ms(model_for(row.model), hw, int(row.tokens))


def priced_ms(rows: pd.DataFrame, hw: HardwareProfile | None = None) -> np.ndarray:
    """Every row priced on ``hw``, or (None) on its own GPU's shipped profile."""
    return fitting.priced(rows, _row_ms, hw)


def fit_fraction(rows: pd.DataFrame, hw: HardwareProfile) -> float:
    """The gemm_max_fraction with the least squared log error on ``rows``."""
    return fitting.fit_gemm_fraction(rows, hw, _row_ms, "ms", "benchmarks/forward_passes.py fit")


def load_rows() -> pd.DataFrame:
    return pd.read_csv(DATA / "forward_passes.csv")


def fit_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return fitting.fit_rows(rows, FITTED)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="print the fit only")
    args = ap.parse_args(argv)
    rows = load_rows()
    if not args.fit:
        print_scored(rows, "ms", priced_ms(rows), ["gpu", "model", "run", "split", "tokens"], ["gpu", "split"], ",.1f")
    hw, mine = load_profile(FITTED), fit_rows(rows)
    print_fit(FITTED, len(mine), fit_fraction(mine, hw), hw.efficiency.gemm_max_fraction.value)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
