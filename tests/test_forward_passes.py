"""Measured GEMM rates replace priors: the L4's and L40S's sustained rate is the fit
benchmarks/forward_passes.py makes to measured whole prompt passes (data/calibration/forward-passes/),
the GH200's the fit benchmarks/layer_products.py makes to measured layer products
(data/calibration/layer-products/); held-out models, later repeats and the second source's A100
and H100 rows stay close."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from llmsim.hardware import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import forward_passes  # noqa: E402  (the fit and the pricing, one source)
import layer_products  # noqa: E402


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return forward_passes.load_rows()


def test_every_row_is_the_median_of_its_passes(rows) -> None:
    passes = rows[[f"run{i}_ms" for i in range(1, 6)]]
    assert (passes.median(axis=1, skipna=True) - rows["ms"]).abs().max() < 1e-9
    assert set(rows["split"]) == set(forward_passes.SPLITS)


@pytest.mark.parametrize("gpu", ["L4", "L40S"])
def test_shipped_fraction_is_the_fit(rows, gpu) -> None:
    hw = load_profile(gpu)
    fit = forward_passes.fit_fraction(rows[(rows["gpu"] == gpu) & (rows["split"] == "fit")], hw)
    assert fit == pytest.approx(hw.efficiency.gemm_max_fraction.value, abs=0.002)


@pytest.mark.parametrize("split", ["held-out", "repeat"])
def test_unfitted_prompt_passes_within_15pct(rows, split) -> None:
    mine = rows[(rows["gpu"] == "L4") & (rows["split"] == split)]
    err = forward_passes.priced_ms(mine, load_profile("L4")) / mine["ms"].to_numpy() - 1
    assert len(mine) >= 15
    assert abs(err).max() < 0.15, err
    assert abs(err).mean() < 0.06, abs(err).mean()


def test_gh200_fraction_is_the_fit_to_its_layer_products() -> None:
    rows = layer_products.load_rows()
    hw = load_profile("GH200")
    fit = layer_products.fit_fraction(rows[(rows["gpu"] == "GH200") & (rows["split"] == "fit")], hw)
    assert fit == pytest.approx(hw.efficiency.gemm_max_fraction.value, abs=0.002)
    held_out = rows[(rows["gpu"] == "GH200") & (rows["split"] == "held-out")]
    err = layer_products.priced_ms(held_out, hw) / held_out["bf16_layer_ms"].to_numpy() - 1
    assert len(held_out) >= 10 and abs(err).mean() < 0.08 and abs(err).max() < 0.12, err


@pytest.mark.parametrize("gpu", ["A100-40GB", "H100-SXM"])
def test_second_source_checks_the_vidur_fitted_curves(gpu) -> None:
    """Nothing is fitted to these rows: the A100's and H100's curves (Vidur's kernels) price
    another source's layer products within 16 % per row."""
    rows = layer_products.load_rows()
    mine = rows[(rows["gpu"] == gpu) & (rows["split"] == "check")]
    err = layer_products.priced_ms(mine, load_profile(gpu)) / mine["bf16_layer_ms"].to_numpy() - 1
    assert len(mine) >= 3 and abs(err).max() < 0.16, err
