"""Elementwise kernels (embedding, norms, RoPE, activation, residual add) fitted to Vidur's A100
mlp.csv timings: a bandwidth fraction and a floor per op, fitted on Llama-2-7B and
Llama-2-70B, checked on Llama-3-8B and CodeLlama-34B (issue #16 item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.calibration.fit import calibrate, elementwise_op
from llmsim.calibration.readers import MLP_ELEMENTWISE_OPS, read_profile
from llmsim.calibration.validate import validate
from llmsim.costmodel.ops import OpConfig
from llmsim.costmodel.roofline import CostConfig, CostModel
from llmsim.hardware import load_profile
from llmsim.models import get_model

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "data" / "calibration" / "vidur" / "compute" / "a100"
TRAIN = [MLP / "meta-llama/Llama-2-7b-hf/mlp.csv", MLP / "meta-llama/Llama-2-70b-hf/mlp.csv"]
HELD_OUT = [MLP / "meta-llama/Meta-Llama-3-8B/mlp.csv", MLP / "codellama/CodeLlama-34b-Instruct-hf/mlp.csv"]
MODEL = get_model("llama-2-7b")  # elementwise rows carry their own layer shape


def _elementwise(files: list[Path]) -> list:
    return [r for f in files for r in read_profile(f) if r.kind == "elementwise"]


@pytest.fixture(scope="module")
def fitted():
    rows = _elementwise(TRAIN)
    return calibrate(load_profile("A100-SXM-80GB"), rows, [str(f) for f in TRAIN])


def test_vidur_mlp_rows_carry_every_elementwise_op() -> None:
    rows = _elementwise(TRAIN[:1])
    assert {r.op for r in rows} == set(MLP_ELEMENTWISE_OPS)
    assert len(rows) == 6 * 1044  # 261 token counts x TP 1, 2, 4, 8, six ops each
    r = next(r for r in rows if r.op == "mlp_act" and r.tp == 2 and r.m == 64)
    op = elementwise_op(r, OpConfig(tp=2))
    assert op.bytes == 64 * 11008 // 2 * 2 * 3  # gate and up read, the product written, bf16


def test_elementwise_within_15pct_on_held_out_models(fitted) -> None:
    hw, res = fitted
    assert set(res.elementwise_rows) == set(MLP_ELEMENTWISE_OPS)
    floors, fractions = hw.overheads.elementwise_op_fixed_s, hw.efficiency.elementwise_op_fraction
    assert all(0 < f.value < 1e-5 for f in floors.values()) and all(0 < f.value <= 1 for f in fractions.values())
    rows = _elementwise(HELD_OUT)
    rep = validate(hw, MODEL, rows)
    default = validate(load_profile("A100-SXM-80GB"), MODEL, rows)
    assert rep.overall_mape <= 0.15, rep.per_op()
    assert (rep.per_op()["mape"] <= 0.20).all(), rep.per_op()
    assert rep.overall_mape < 0.4 * default.overall_mape


def test_fit_and_cost_model_agree_on_elementwise_error(fitted) -> None:
    hw, res = fitted
    rows = _elementwise(TRAIN)
    per_op = validate(hw, MODEL, rows).per_op()["mape"]
    for op, mape in res.elementwise_mape.items():
        assert per_op[op] == pytest.approx(mape, rel=2e-3)  # (the profile rounds the fractions)


def test_a_profile_without_op_fractions_prices_elementwise_as_before() -> None:
    hw = load_profile("H100-SXM")
    assert hw.efficiency.elementwise_op_fraction is None and hw.overheads.elementwise_op_fixed_s is None
    cm = CostModel(get_model("llama-3.1-8b"), hw, CostConfig())
    r = next(r for r in _elementwise(TRAIN[:1]) if r.op == "input_layernorm" and r.tp == 1 and r.m == 4096)
    op = elementwise_op(r, cm.cfg)
    t = cm.price(op)
    bw = hw.bandwidth * hw.efficiency.elementwise_memory_fraction.value
    assert t.memory_s == pytest.approx(op.bytes / bw, rel=1e-12)
    assert t.fixed_s == hw.overheads.kernel_fixed_s.value


def test_shipped_calibrated_profile_holds_this_fit(fitted) -> None:
    shipped = load_profile(ROOT / "hardware_profiles" / "calibrated" / "A100-SXM-80GB.yaml")
    mine = fitted[0]
    for op, fig in mine.efficiency.elementwise_op_fraction.items():
        assert shipped.efficiency.elementwise_op_fraction[op].value == pytest.approx(fig.value, rel=1e-4)
        floor = mine.overheads.elementwise_op_fixed_s[op].value
        assert shipped.overheads.elementwise_op_fixed_s[op].value == pytest.approx(floor, rel=1e-3)


def test_every_elementwise_op_a_step_builds_has_a_name_profiles_may_use() -> None:
    """ops.ELEMENTWISE_OPS is what a profile's per-op terms are checked against."""
    from llmsim.costmodel.ops import ELEMENTWISE_OPS, model_batch_shape, step_ops
    from llmsim.models import CATALOG

    seen = {
        op.name
        for model in CATALOG.values()
        for op in step_ops(model, model_batch_shape(model, [(8, 0)], [16]), OpConfig())
        if op.kind == "elementwise"
    }
    assert seen <= set(ELEMENTWISE_OPS), seen - set(ELEMENTWISE_OPS)
