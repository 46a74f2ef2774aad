"""The measured small-m GEMM regime (``Efficiency.gemm_small_m``): it prices GEMMs with m rows up to
the table's length and nothing else, profiles without it price by the curve as before, and the
calibration turns GEMM timings into a well-formed table. (No timing here: synthetic timings.)"""

from pathlib import Path

import numpy as np
import pytest
import yaml

from llmsim.calibration import enginefit, microbench
from llmsim.calibration.enginefit import FP32
from llmsim.costmodel import CostModel
from llmsim.costmodel.gemm import GemmCurve
from llmsim.costmodel.ops import batch_shape
from llmsim.errors import UserError
from llmsim.hardware import dump_profile, load_profile
from llmsim.reference.timing import TWIN_SPEC

TABLE = [0.07, 0.06, 0.05, 0.09]  # m = 1..4, deliberately not monotone (as OpenBLAS's is not)


def _profile(tmp_path: Path, **efficiency: object):
    data = yaml.safe_load(Path("hardware_profiles/EPYC-9654.yaml").read_text())
    for k, v in efficiency.items():
        data["efficiency"][k] = v
    path = tmp_path / f"p{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_profile(path)


def _table(values: list[float]) -> dict:
    return {"value": values, "source": "synthetic test table"}


SHAPES = [
    batch_shape([], [300]),  # m = 1
    batch_shape([], [300, 40]),  # m = 2
    batch_shape([], [300] * 4),  # m = 4
    batch_shape([], [300] * 5),  # m = 5: beyond the table
    batch_shape([(64, 0)], [200, 500]),  # m = 66, lm_head m = 3
]


def test_table_prices_only_gemms_with_m_within_it(tmp_path):
    plain = CostModel(TWIN_SPEC, _profile(tmp_path), FP32)
    small = CostModel(TWIN_SPEC, _profile(tmp_path, gemm_small_m=_table(TABLE)), FP32)
    peak = plain.hw.peak("fp32")
    seen = set()
    for shape in SHAPES:
        for a, b in zip(plain.priced(shape), small.priced(shape), strict=True):
            if a.op.kind == "gemm" and 0 < a.op.m <= len(TABLE):
                seen.add(a.op.m)
                assert b.compute_s == pytest.approx(a.op.flops / (peak * TABLE[a.op.m - 1]))
                assert b.memory_s == 0.0  # the measured rate includes streaming the weights
            else:
                assert (a.compute_s, a.memory_s, a.launch_s) == (b.compute_s, b.memory_s, b.launch_s)
    assert seen == {1, 2, 3, 4}
    assert small.step_time(SHAPES[3]) == plain.step_time(SHAPES[3])  # m = 5 decode: untouched


def test_without_a_table_the_curve_prices_every_m(tmp_path):
    hw = _profile(tmp_path)
    assert hw.efficiency.gemm_small_m is None
    cost = CostModel(TWIN_SPEC, hw, FP32)
    curve = GemmCurve.from_profile(hw)
    for m in (1, 2, 3, 16, 17, 512):
        assert cost.gemm_efficiency(m, 2048) == pytest.approx(float(curve.efficiency(m, 2048)), rel=1e-12)
    small = CostModel(TWIN_SPEC, _profile(tmp_path, gemm_small_m=_table(TABLE)), FP32)
    assert [small.gemm_efficiency(m, 2048) for m in (1, 2, 3, 4)] == TABLE
    assert small.gemm_efficiency(5, 2048) == cost.gemm_efficiency(5, 2048)


def test_table_takes_over_the_gemv_regime_at_m_1(tmp_path):
    gemv = {"value": 0.8, "source": "test"}
    both = CostModel(TWIN_SPEC, _profile(tmp_path, gemv_memory_fraction=gemv, gemm_small_m=_table(TABLE)),
                     FP32)  # fmt: skip
    table_only = CostModel(TWIN_SPEC, _profile(tmp_path, gemm_small_m=_table(TABLE)), FP32)
    shape = batch_shape([], [300])
    assert both.step_time(shape) == table_only.step_time(shape)


def test_fastpath_stays_exact_with_the_table(tmp_path):

    cost = CostModel(TWIN_SPEC, _profile(tmp_path, gemm_small_m=_table(TABLE)), FP32)
    for ctxs in ([100], [100, 700, 2000], [50] * 6):
        got = cost.decode_steps_s(batch_shape([], ctxs), 30)
        want = [cost.step_time(batch_shape([], [c + i for c in ctxs])) for i in range(30)]
        assert np.allclose(got, want, rtol=1e-9)


def test_bad_table_is_a_user_error_naming_the_key(tmp_path):
    with pytest.raises(UserError, match="gemm_small_m"):
        _profile(tmp_path, gemm_small_m=_table([0.1, -0.2]))
    with pytest.raises(UserError, match="gemm_small_m"):
        _profile(tmp_path, gemm_small_m=_table([]))


def test_table_survives_a_profile_round_trip(tmp_path):
    hw = _profile(tmp_path, gemm_small_m=_table(TABLE))
    dump_profile(hw, tmp_path / "out.yaml")
    assert load_profile(tmp_path / "out.yaml").efficiency.gemm_small_m.value == TABLE


def test_small_m_table_is_each_steps_gemm_rate():
    peak = 1e11
    rows = [{"m": m, "gemm_flops": 4e7 * m, "gemm_s": 4e7 * m / (peak * (0.05 + 0.01 * m))} for m in range(1, 17)]
    table = microbench.small_m_table(rows[::-1], peak, 16)  # any order
    assert table == pytest.approx([0.05 + 0.01 * m for m in range(1, 17)])
    with pytest.raises(ValueError, match=r"m = \[17\]"):
        microbench.small_m_table(rows, peak, 17)


def test_engine_gemm_table_counts_every_gemm_of_a_decode_step():
    """Each row holds one decode step's GEMM FLOPs (every GEMM at m rows, LM head included) and a
    positive time; the FLOPs equal the cost model's op list for that step."""
    from llmsim.costmodel.ops import step_ops
    from llmsim.models import ModelSpec

    tiny = ModelSpec("tiny", 32, 64, 2, 4, 2, 8, 61, weight_dtype="fp32")
    rows = microbench.engine_gemm_table(tiny, [1, 2, 3], reps=1, ctx=5)
    assert [r["m"] for r in rows] == [1, 2, 3]
    for r in rows:
        ops = step_ops(tiny, batch_shape([], [5] * r["m"]), FP32)
        assert r["gemm_flops"] == sum(op.flops * op.count for op in ops if op.kind == "gemm")
        assert r["gemm_s"] > 0


def test_curve_fit_leaves_the_table_rows_out():
    """Rows below min_m (the table's) do not pull the curve: a wild small-m regime leaves the fit
    on the m >= 17 rows where it was."""
    peak, bw, half, frac = 1e11, 1e10, 24.0, 0.5

    def roofline(m, n, k):
        return max(2 * m * n * k / (peak * m / (m + half)), 4 * (m * k + k * n + m * n) / (bw * frac))

    rows = [{"m": m, "n": n, "k": k, "s": roofline(m, n, k)} for m in (32, 64, 128, 1024) for n, k in ((512, 512),)]
    rows.append({"m": 4096, "n": 4096, "k": 4096, "s": 2 * 4096**3 / peak})
    wild = [{"m": m, "n": 512, "k": 512, "s": roofline(m, 512, 512) * (3.0 if m % 2 else 0.4)} for m in range(1, 17)]
    got = microbench.fit_gemm(rows + wild, bw, min_m=17)
    assert got == microbench.fit_gemm(rows, bw, min_m=17)
    assert got[1] == pytest.approx(half, rel=0.1)


def test_engine_fit_scales_the_table_as_a_whole():
    """The engine-step fit refines the table's level with one factor and keeps its measured shape."""
    prof = {"efficiency": {"gemm_small_m": {"value": TABLE, "source": "s"}}, "overheads": {}}
    out = enginefit.with_values(prof, {"gemm_small_m": 1.5})
    assert out["efficiency"]["gemm_small_m"] == {"value": [1.5 * v for v in TABLE], "source": "s"}
    assert prof["efficiency"]["gemm_small_m"]["value"] == TABLE  # the input is not mutated
    assert "gemm_small_m" in enginefit.FIT_KEYS and "gemv_memory_fraction" not in enginefit.FIT_KEYS
