"""The grouped expert kernel's compute rate (efficiency.moe_gemm_fraction): the shipped values are
the fit benchmarks/moe_kernels.py makes to published vLLM fused_moe kernel times
(data/validation/moe_kernels/fused_moe.csv), and the profiles then price those kernels."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from llmsim.costmodel import CostConfig, CostModel
from llmsim.costmodel.ops import batch_shape, step_ops
from llmsim.hardware import HardwareProfile, load_profile
from llmsim.models import get_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import moe_kernels  # noqa: E402  (the fit and the pricing, one source)


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return pd.read_csv(moe_kernels.DATA)


@pytest.mark.parametrize("profile", ["A100-SXM-80GB", "H200"])
def test_shipped_fraction_is_the_fit_to_the_measured_kernels(rows, profile) -> None:
    hw = load_profile(profile)
    mine = moe_kernels.fraction_rows(rows[rows["profile"] == profile])
    assert len(mine) >= 2
    fitted = moe_kernels.fit_term(mine, moe_kernels.with_term(hw, moe_kernels.COMPUTE, None), moe_kernels.COMPUTE)
    assert hw.efficiency.moe_gemm_fraction.value == pytest.approx(fitted, abs=0.002)


def test_same_die_profiles_carry_the_default_config_fit(rows) -> None:
    """The H100 SXM's own rows are Mixtral's with vLLM's tuned config, which runs faster than the
    default one vLLM uses without a tuned file: the H100 SXM, GH200 and H200 (one die, one dense
    curve) ship the H200's default-config fit, the A100s the A100-SXM-80GB's; the H100 PCIe the
    H200's rows refitted over its best-shape curve."""
    for profile, source in moe_kernels.FRACTION_FROM.items():
        assert efficiency(profile) == efficiency(source), profile
    assert not len(moe_kernels.fraction_rows(rows[rows["profile"] == "H100-SXM"]))
    assert moe_kernels.tuned_fit(rows) > efficiency("H100-SXM") + 0.05
    assert efficiency("H100-PCIe") == pytest.approx(moe_kernels.pcie_fraction(rows), abs=0.002)


def test_gpus_without_rows_take_the_prior_of_their_curve_kind(rows) -> None:
    """docs/validation.md, "MoE expert kernels": the geometric mean of the default-config fits with
    no call cost, over fitted dense curves for a fitted rate such as the L4's, over best-shape
    (MAMF) curves for a burst-based one such as the L40S's."""
    priors = moe_kernels.prior_fractions(rows)
    for profile in ("L4", "A40", "RTX-3090", "RTX-A6000"):
        assert efficiency(profile) == priors["fitted"], profile
    for profile in ("B200", "GB200", "L40S", "RTX-4090", "RTX-PRO-6000"):
        assert efficiency(profile) == priors["mamf"], profile
    assert load_profile("hardware_profiles/calibrated/A40.yaml").efficiency.moe_gemm_fraction.value == priors["fitted"]


def efficiency(profile: str) -> float:
    return load_profile(profile).efficiency.moe_gemm_fraction.value


@pytest.mark.parametrize("profile", ["H100-SXM", "A100-40GB"])
def test_the_small_calls_fix_a_call_s_cost_and_the_streaming_rate(rows, profile) -> None:
    """Where vLLM's own harness times calls from one token up (H100 SXM, A100-40GB), the shipped
    overheads.moe_call_fixed_s and efficiency.moe_memory_fraction are fit_call's pair on the 1-96-token
    rows, which then price every such row within 6 % (a fraction alone, no fixed cost: 4-36 % fast
    at 1-4 tokens)."""
    hw = load_profile(profile)
    small = moe_kernels.call_rows(rows[rows["profile"] == profile])
    assert len(small) >= 8
    call_s, fraction, mape = moe_kernels.fit_call(small, hw)
    assert hw.overheads.moe_call_fixed_s.value == pytest.approx(call_s, abs=1e-6)
    assert hw.efficiency.moe_memory_fraction.value == pytest.approx(fraction, abs=0.002)
    priced = moe_kernels.priced_us(small, hw)
    assert mape < 0.02 and (abs(priced / moe_kernels.measured_us(small).to_numpy() - 1) < 0.065).all()


def test_only_the_harness_s_rows_from_one_token_up_fit_a_call_s_cost(rows) -> None:
    """B200's three rows are too few for two terms; H200's and A100-SXM-80GB's come from other
    harnesses (a ~185 us floor at 1-4 tokens on the H200's); L40S's are FP8."""
    fitted = {p for p, g in rows.groupby("profile") if len(moe_kernels.call_rows(g))}
    assert fitted == {"H100-SXM", "A100-40GB"}


def test_held_out_layer_tables_are_priced_within_bounds() -> None:
    """Qwen3-30B-A3B's whole MoE layer in a CUDA graph (data/validation/moe_kernels/layer_tables.csv,
    nothing fitted to it): the weight-streaming counts (16-512 tokens) within 5 % on the H100 and 10 %
    on the A100-40GB; the compute-bound ones, padded to the default config's 128-row tiles, within
    12.5 % (13-22 % fast at 2,048-8,192 tokens before the tiles were priced)."""
    check = moe_kernels.layer_check()
    assert set(check["profile"]) == {"H100-SXM", "A100-40GB"} and len(check) == 28
    streaming = check["M"].between(16, 512)
    bound = check["profile"].map({"H100-SXM": 0.05, "A100-40GB": 0.10})
    assert (check.loc[streaming, "err"].abs() <= bound[streaming]).all(), check[streaming]
    assert (check["err"].abs() <= 0.125).all(), check


def test_shipped_profiles_price_the_measured_kernels(rows) -> None:
    """Compute-bound BF16 rows (M >= 1024) with a default-config time within 12.5 % with the
    shipped fraction (up to 44 % short at the dense rate, unpadded); the H100 SXM's tuned-config
    rows price 5-20 % slow (the default config's time is priced); the weight-streaming rows
    (16 <= M <= 256), which the fraction does not touch, within 10 %."""
    bf16 = rows[rows["dtype"] == "bf16"]
    for profile, mine in bf16.groupby("profile"):
        hw = load_profile(profile)
        err = moe_kernels.priced_us(mine, hw) / moe_kernels.measured_us(mine).to_numpy() - 1
        big, mid = (mine["M"] >= 1024).to_numpy(), mine["M"].between(16, 256).to_numpy()
        default = mine["default_us"].notna().to_numpy()
        assert (abs(err[big & default]) <= 0.125).all(), (profile, err[big & default])
        assert ((err[big & ~default] > 0.05) & (err[big & ~default] < 0.20)).all(), (profile, err[big & ~default])
        assert (abs(err[mid]) <= 0.10).all(), (profile, err[mid])


def test_moe_gemm_fraction_slows_the_expert_gemms_compute_only() -> None:
    model = get_model("qwen3-30b-a3b-instruct-2507")
    shape = batch_shape([(4096, 0)], [])
    hw = load_profile("H200")
    plain = moe_kernels.with_term(hw, moe_kernels.COMPUTE, None)
    rate = hw.efficiency.moe_gemm_fraction.value
    slow, fast = CostModel(model, hw, CostConfig()), CostModel(model, plain, CostConfig())
    for op in step_ops(model, shape, CostConfig()):
        a, b = slow.price(op), fast.price(op)
        if op.name in ("mlp_up_proj", "mlp_down_proj"):
            assert a.compute_s == pytest.approx(b.compute_s / rate)
            assert a.memory_s == pytest.approx(b.memory_s)
        else:
            assert a == b, op.name


def test_a_fused_moe_calls_fixed_cost_is_paid_once_a_moe_layer() -> None:
    """overheads.moe_call_fixed_s adds to a MoE layer's up projection's floor, once a layer, and to
    nothing of a dense model."""
    hw = load_profile("H100-SXM")
    call_s = hw.overheads.moe_call_fixed_s.value
    data = hw.model_dump()
    data["overheads"]["moe_call_fixed_s"] = None
    without = HardwareProfile.model_validate(data)
    for name, layers in (("qwen3-30b-a3b-instruct-2507", 48), ("qwen3-8b", 0)):
        model = get_model(name)
        shape = batch_shape([], [1024] * 4)
        base, with_call = CostModel(model, without, CostConfig()), CostModel(model, hw, CostConfig())
        extra = sum(
            (with_call.price(op).fixed_s - base.price(op).fixed_s) * op.count
            for op in step_ops(model, shape, CostConfig())
        )
        assert extra == pytest.approx(layers * call_s)


def test_the_routing_exponent_is_the_fit_to_the_measured_steps() -> None:
    """vllmcli.RANDOM_TOKEN_ROUTING_EXPONENT (what llmsim bench sets for random-token prompts) is
    benchmarks/moe_routing.py's fit to granite's L4 decode steps, which it prices within 5 %."""
    import moe_routing  # (benchmarks/, on the path above)

    from llmsim.vllmcli import RANDOM_TOKEN_ROUTING_EXPONENT

    steps = pd.read_csv(moe_routing.STEPS)
    a, base, per_expert, errs = moe_routing.fit_exponent(steps[steps["sequences"] <= moe_routing.FIT_MAX_SEQUENCES])
    assert a == RANDOM_TOKEN_ROUTING_EXPONENT and (abs(errs) < 0.05).all()
    assert base > 0 and per_expert > 0


def test_a_call_fit_at_its_grid_s_edge_is_refused(rows) -> None:
    """Rows that want a negative fixed cost (the H100's, 30 us taken off each) end the fit at 0 us:
    refused, not shipped as a fit."""
    small = moe_kernels.call_rows(rows[rows["profile"] == "H100-SXM"]).copy()
    small["tuned_us"] = small["tuned_us"] - 30.0
    with pytest.raises(ValueError, match="H100-SXM: the fit ends at its grid's edge"):
        moe_kernels.fit_call(small, load_profile("H100-SXM"))


def _exact_padded_rows(tokens: int, experts: int, top_k: int, block_m: int) -> tuple[float, float]:
    """(expected touched experts, expected padded rows over them) with each expert's row count
    Binomial(tokens, top_k / experts), summed exactly."""
    import math

    p = top_k / experts
    pmf = [
        math.exp(
            math.lgamma(tokens + 1)
            - math.lgamma(c + 1)
            - math.lgamma(tokens - c + 1)
            + c * math.log(p)
            + (tokens - c) * math.log1p(-p)
        )
        for c in range(tokens + 1)
    ]
    touched = experts * (1 - pmf[0])
    padded = experts * sum(q * math.ceil(c / block_m) * block_m for c, q in enumerate(pmf))
    return touched, padded


@pytest.mark.parametrize("tokens", [16, 128, 768, 2048, 8192])
def test_padded_share_is_the_expected_whole_tiles(tokens) -> None:
    """fusedmoe.padded_share, the normal approximation of a Poisson row count, against the exact
    binomial sum for Qwen3-30B-A3B's routing (128 experts, top-8) at vLLM's tile heights: within
    0.5 %; far past a tile it is the share plus half a tile less half a row."""
    from llmsim.costmodel.fusedmoe import padded_share, tile_config

    block_m = tile_config(tokens, 128)[0]
    touched, exact = _exact_padded_rows(tokens, 128, 8, block_m)
    share = tokens * 8 / touched
    assert padded_share(share, block_m) * touched == pytest.approx(exact, rel=0.005)
    assert padded_share(1e6, 128) == pytest.approx(1e6 + 63.5, rel=1e-6)
    assert padded_share(0.5, 16) == 16 and padded_share(0.0, 16) == 0.0


def test_the_fused_kernel_s_tiles_are_a_gpu_s_and_16_bit_or_w8a8_only() -> None:
    """A GPU pads a 16-bit or FP8 expert's rows to the tile; weight-only quantised experts (Marlin's
    kernels) and a CPU's keep the mean share; a CPU's fused kernel sums the top-k itself (no
    moe_sum op), a GPU's in a kernel of its own."""
    model = get_model("qwen3-30b-a3b-instruct-2507")
    shape = batch_shape([(1024, 0)], [])
    for profile, cfg, padded in (
        ("H100-SXM", CostConfig(), True),
        ("H100-SXM", CostConfig(weight_dtype="fp8", act_dtype="fp8"), True),
        ("H100-SXM", CostConfig(weight_dtype="int4"), False),
        ("EPYC-9654", CostConfig(), False),
    ):
        cost = CostModel(model, load_profile(profile), cfg)
        ops = {op.name: op for op in cost.ops(shape)}
        up = ops["mlp_up_proj"]
        assert up.tokens == 1024 and up.rows == pytest.approx(64.0, rel=0.01)
        assert (cost.expert_tiles(up)[0] == 128.0) is padded, (profile, cfg)
        assert ("moe_sum" in ops) is (profile == "H100-SXM"), profile
