"""The power-capped cards' sustained GEMM rate (L4, L40S efficiency.gemm_max_fraction): the shipped
values are the fit benchmarks/forward_passes.py makes to measured whole prompt passes
(data/calibration/forward-passes/), and the held-out model and the later repeats stay close."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from llmsim.hardware import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import forward_passes  # noqa: E402  (the fit and the pricing, one source)


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
