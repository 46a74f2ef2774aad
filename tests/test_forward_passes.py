"""Measured GEMM rates replace priors: the L4's sustained rate is the fit
benchmarks/forward_passes.py makes to measured whole prompt passes (data/calibration/forward-passes/),
the GH200's the fit benchmarks/layer_products.py makes to measured layer products
(data/calibration/layer-products/), the L40S's its measured burst at its measured sustained clock;
the terms derived from them follow their stated rules, and held-out rows stay within the
project's ±20 %."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from llmsim.costmodel.ops import model_batch_shape, step_ops
from llmsim.costmodel.roofline import CostConfig
from llmsim.hardware import load_profile
from llmsim.models import get_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import forward_passes  # noqa: E402  (the fits and the pricing, one source)
import layer_products  # noqa: E402


@pytest.fixture(scope="module")
def passes() -> pd.DataFrame:
    return forward_passes.load_rows()


@pytest.fixture(scope="module")
def layers() -> pd.DataFrame:
    return layer_products.load_rows()


def efficiency(gpu: str, term: str) -> float:
    return getattr(load_profile(gpu).efficiency, term).value


def test_every_pass_is_the_median_of_its_runs_and_the_split_is_the_stated_rule(passes) -> None:
    runs = passes[[f"run{i}_ms" for i in range(1, 6)]]
    assert (runs.median(axis=1, skipna=True) - passes["ms"]).abs().max() < 1e-9
    assert set(passes["split"]) == set(forward_passes.SPLITS)
    # README: fitted = the L4's first Qwen3-8B run from 512 tokens; held out = Qwen3-4B from 512
    rule = (passes["gpu"] == "L4") & (passes["model"] == "qwen3-8b") & (passes["run"] == "main")
    assert ((passes["split"] == "fit") == (rule & (passes["tokens"] >= 512))).all()
    assert ((passes["split"] == "streaming") == ((passes["gpu"] == "L4") & (passes["tokens"] < 512))).all()
    assert (passes.loc[passes["split"] == "held-out", "model"] == "qwen3-4b-instruct-2507").all()
    assert (passes.loc[passes["gpu"] == "L40S", "split"] == "check").all()


def test_l4_fraction_is_the_fit_and_unfitted_passes_stay_within_20pct(passes) -> None:
    hw = load_profile("L4")
    assert forward_passes.fit_fraction(forward_passes.fit_rows(passes), hw) == pytest.approx(
        hw.efficiency.gemm_max_fraction.value, abs=0.002
    )
    for split in ("held-out", "repeat"):
        mine = passes[(passes["gpu"] == "L4") & (passes["split"] == split)]
        err = forward_passes.priced_ms(mine) / mine["ms"].to_numpy() - 1
        assert len(mine) >= 15 and abs(err).max() < 0.20 and abs(err).mean() < 0.08, (split, err)


def test_l40s_fraction_is_its_burst_at_its_sustained_clock() -> None:
    """0.743 (a torch.matmul burst) x 1,905 / 2,040 MHz (its clock at the cap / uncapped)."""
    assert efficiency("L40S", "gemm_max_fraction") == round(0.743 * 1905 / 2040, 3)


@pytest.mark.parametrize(
    ("gpu", "ratio"),
    [
        ("L40S", 0.709 / 0.803),  # the H100 SXM's fp8/bf16 MAMF ratio (no L40S FP8 measurement)
        ("L4", 0.709 / 0.803),  # the same rule on the other Ada card
        ("GH200", (1535.0 / 1979) / (828.6 / 989)),  # the GH200's own MAMF fp8/bf16 ratio
    ],
)
def test_fp8_and_int8_keep_their_stated_ratio_to_bf16(gpu, ratio) -> None:
    hw = load_profile(gpu)
    for dtype in ("fp8", "int8"):
        assert hw.efficiency.gemm_dtype_fraction[dtype].value == round(hw.efficiency.gemm_max_fraction.value * ratio, 3)


def test_layer_products_are_priced_as_the_rows_shapes(layers) -> None:
    for (model, gpu), _ in layers.groupby(["model", "gpu"]):
        row = layers[(layers["model"] == model) & (layers["gpu"] == gpu)].iloc[0]
        m = get_model(model)
        ops = {
            op.name: f"{op.n}x{op.k}"
            for op in step_ops(m, model_batch_shape(m, [(1024, 0)], []), CostConfig(weight_dtype=m.weight_dtype))
        }
        shapes = [ops[name] for name in layer_products.LINEAR_OPS]
        assert shapes == [row["qkv"], row["o"], row["gate_up"], row["down"]], model


def test_gh200_fraction_is_the_fit_to_its_layer_products(layers) -> None:
    hw = load_profile("GH200")
    assert layer_products.fit_fraction(layer_products.fit_rows(layers), hw) == pytest.approx(
        hw.efficiency.gemm_max_fraction.value, abs=0.002
    )
    held_out = layers[(layers["gpu"] == "GH200") & (layers["split"] == "held-out")]
    err = layer_products.priced_ms(held_out) / held_out["bf16_layer_ms"].to_numpy() - 1
    assert len(held_out) >= 10 and abs(err).mean() < 0.08 and abs(err).max() < 0.20, err


@pytest.mark.parametrize("gpu", ["A100-40GB", "H100-SXM"])
def test_second_source_checks_the_vidur_fitted_curves(layers, gpu) -> None:
    """Nothing is fitted to these rows: the A100's and H100's curves (Vidur's kernels) price
    another source's layer products within the project's ±20 %."""
    mine = layers[(layers["gpu"] == gpu) & (layers["split"] == "check")]
    err = layer_products.priced_ms(mine) / mine["bf16_layer_ms"].to_numpy() - 1
    assert len(mine) >= 3 and abs(err).max() < 0.20, err
