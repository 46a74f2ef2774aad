"""Routing skew across expert-parallel GPUs and vLLM's EPLB (cluster.expert_skew, cluster.eplb,
cluster.redundant_experts; eplb.py), by hand and end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

import llmsim
from llmsim.costmodel.ops import experts_touched
from llmsim.eplb import eplb_rank_loads, expert_imbalance, expert_loads, imbalance, linear_rank_loads
from llmsim.errors import UserError
from llmsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
LOADS = [0.4, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.1]  # one hot expert of eight


def test_linear_placement_by_hand() -> None:
    # vLLM's default: rank r holds experts 2r and 2r + 1
    ranks = linear_rank_loads(LOADS, 4)
    assert ranks == pytest.approx([0.5, 0.2, 0.15, 0.15])
    assert imbalance(ranks) == pytest.approx(0.5 / 0.25)


def test_eplb_packing_and_redundant_copies_by_hand() -> None:
    # without copies EPLB can only pack: 0.4 alone, then the 0.1s and 0.05s onto the lightest
    # ranks with a slot left: [0.4 + 0.05, 0.1 + 0.1, 0.1 + 0.1, 0.1 + 0.05]
    assert eplb_rank_loads(LOADS, 4, 0) == pytest.approx([0.45, 0.2, 0.2, 0.15])
    # four copies all go to the hot expert (0.4 / 2, / 3, / 4 still top the 0.1s; at 0.1 the tie
    # goes to the lowest id): five copies of 0.08. Packed three a rank, heaviest first:
    # [0.1 + 0.1 + 0.05, 0.1 + 0.08 + 0.08, 0.1 + 0.08 + 0.08, 0.1 + 0.08 + 0.05]
    ranks = eplb_rank_loads(LOADS, 4, 4)
    assert ranks == pytest.approx([0.25, 0.26, 0.26, 0.23])
    assert imbalance(ranks) == pytest.approx(0.26 / 0.25)


def test_skew_and_seeded_placement() -> None:
    loads = expert_loads(256, 1.0, seed=7)
    assert sum(loads) == pytest.approx(1.0) and max(loads) == pytest.approx(1 / sum(1 / i for i in range(1, 257)))
    # k picks a token: no expert takes more than 1/k of the rows, the rest scaled to still sum to 1
    capped = expert_loads(256, 1.0, seed=7, k=8)
    assert sum(capped) == pytest.approx(1.0) and max(capped) == pytest.approx(1 / 8) and max(loads) > 1 / 8
    assert loads == expert_loads(256, 1.0, seed=7) and loads != expert_loads(256, 1.0, seed=8)
    assert expert_imbalance(256, 8, 0.0, 7, eplb=False) == pytest.approx(1.0)
    skewed = expert_imbalance(256, 8, 1.0, 7, eplb=False)
    balanced = expert_imbalance(256, 8, 1.0, 7, eplb=True)
    copies = expert_imbalance(256, 8, 1.0, 7, eplb=True, redundant=32)
    assert skewed > balanced > copies >= 1.0 and copies < 1.05


def _data(**cluster: object) -> dict:
    return {
        "name": "eplb",
        "seed": 5,
        "model": "qwen3-30b-a3b-instruct-2507",
        "hardware": "H100-SXM",
        "cluster": {"replicas": 4, "expert_parallel": True, "router": "vllm_dp", **cluster},
        "policy": {"kind": "vllm"},
        "workload": {
            "kind": "poisson",
            "rate_rps": 30,
            "num_requests": 400,
            "prompt_tokens": {"dist": "lognormal", "median": 1500, "sigma": 0.5, "min": 64, "max": 8000},
            "output_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.5, "min": 1, "max": 400},
        },
    }


def _run(**cluster: object) -> dict:
    return llmsim.run(scenario_from_dict(_data(**cluster), "test", ROOT)).summary


def test_skew_slows_the_moe_layers_and_eplb_wins_it_back() -> None:
    even, skew = _run(), _run(expert_skew=1.2)
    packed = _run(expert_skew=1.2, eplb=True)
    copies = _run(expert_skew=1.2, eplb=True, redundant_experts=32)
    imb = [s["pools"][0]["expert_imbalance"] for s in (even, skew, packed, copies)]
    # (top-8 routing: no expert takes more than 1/8 of the rows, so packing alone nearly evens it)
    assert imb[0] == 1.0 and imb[1] > 1.3 and imb[3] <= imb[2] < imb[1] and imb[2] < 1.05
    # the GPU with the most routed tokens sets every MoE layer's pace: prefill-heavy steps slow
    assert skew["mean_ttft_ms"] > 1.05 * even["mean_ttft_ms"]
    # EPLB's packing wins it back (and the skew's fewer experts reached make decode lighter)
    assert packed["mean_ttft_ms"] < skew["mean_ttft_ms"] and packed["mean_tpot_ms"] < even["mean_tpot_ms"]
    # the 32 copies even the compute out but cost memory (8 more experts of weights per GPU,
    # fewer KV blocks) and weight reads: every copy a decode step touches is read
    assert copies["pools"][0]["kv_blocks_per_replica"] < skew["pools"][0]["kv_blocks_per_replica"]
    assert copies["mean_tpot_ms"] > packed["mean_tpot_ms"]


def test_redundant_copies_are_read_at_decode() -> None:
    """With 32 copies over 4 GPUs each holds 40 physical experts, not 32: a decode step touches
    (and reads the weights of) more of them."""
    from llmsim.costmodel.ops import batch_shape, experts_touched, step_ops
    from llmsim.costmodel.roofline import CostConfig
    from llmsim.models import CATALOG

    qwen = CATALOG["qwen3-30b-a3b-instruct-2507"]
    shape = batch_shape([], [500] * 16)
    plain = {o.name: o for o in step_ops(qwen, shape, CostConfig(ep=4))}["mlp_up_proj"]
    copies = {o.name: o for o in step_ops(qwen, shape, CostConfig(ep=4, redundant_experts=32))}["mlp_up_proj"]
    gathered = 16 * 4  # every rank's 16 decodes
    ratio = experts_touched(160, 8, 40, gathered) / experts_touched(128, 8, 32, gathered)
    assert copies.weight_bytes / plain.weight_bytes == pytest.approx(ratio) and ratio > 1
    assert copies.flops == plain.flops  # the same rows, spread over more experts


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"redundant_experts": 8}, "redundant_experts: extra expert copies are EPLB's; set eplb: true"),
        ({"eplb": True, "redundant_experts": 6}, r"128 experts \+ 6 copies must divide over the 4"),
        ({"expert_parallel": False, "eplb": True}, "places experts across expert-parallel GPUs"),
        ({"expert_skew": -1}, "greater than or equal to 0"),
    ],
)
def test_bad_eplb_refused(cluster: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        llmsim.run(scenario_from_dict(_data(**cluster), "test", ROOT))


def test_skewed_routing_reaches_fewer_experts() -> None:
    """Without skew the formula is the uniform one exactly; with it a token still picks k experts,
    and a step's tokens reach fewer distinct ones the more skewed the popularity."""
    for tokens in (1, 3, 12, 100):
        assert experts_touched(128, 8, 128, tokens, 0.0) == 128 * (1 - (1 - 8 / 128) ** tokens)
    for skew in (0.3, 1.0, 2.0):
        assert experts_touched(128, 8, 128, 1, skew) == pytest.approx(8.0)
        assert experts_touched(128, 8, 16, 1, skew) == pytest.approx(1.0)  # an average share of 16 held here
    curve = [experts_touched(128, 8, 128, 12, skew) for skew in (0.0, 0.5, 1.0, 1.5, 3.0)]
    assert curve == sorted(curve, reverse=True) and curve[-1] > 8
    assert experts_touched(8, 2, 8, 1, 10.0) == pytest.approx(2.0)  # the two most popular, always


def test_skew_without_expert_parallelism_prices_decode_lighter() -> None:
    """Tensor-parallel experts: skew changes no GPU's share of the work, only how many experts a
    step's tokens reach, so small decode batches read fewer expert weights."""
    base = {"replicas": 1, "expert_parallel": False, "router": "round_robin"}
    even = llmsim.run(scenario_from_dict(_data(**base), "test", ROOT)).summary
    skewed = llmsim.run(scenario_from_dict(_data(**base, expert_skew=1.0), "test", ROOT)).summary
    assert skewed["mean_tpot_ms"] < even["mean_tpot_ms"]


def test_tokens_that_route_alike_reach_fewer_experts() -> None:
    """cluster.expert_routing_exponent a: a step's T tokens reach what T^a independent ones would
    (one token still its k experts), with or without skew; 1 is the independent formula exactly."""
    for tokens in (1, 3, 12, 100):
        assert experts_touched(128, 8, 128, tokens, 0.0, 1.0) == experts_touched(128, 8, 128, tokens)
        assert experts_touched(128, 8, 128, tokens, 0.0, 0.79) == pytest.approx(
            128 * (1 - (1 - 8 / 128) ** (tokens**0.79))
        )
    assert experts_touched(128, 8, 128, 1, 0.0, 0.5) == pytest.approx(8.0)
    assert experts_touched(128, 8, 128, 1, 1.0, 0.5) == pytest.approx(8.0)
    curve = [experts_touched(128, 8, 128, 16, 0.0, a) for a in (1.0, 0.9, 0.79, 0.6, 0.3)]
    assert curve == sorted(curve, reverse=True) and curve[-1] > 8
    assert experts_touched(128, 8, 128, 16, 1.0, 0.79) < experts_touched(128, 8, 128, 16, 1.0)


def test_the_routing_exponent_prices_moe_decode_lighter_and_is_refused_on_a_dense_model() -> None:
    base = {"replicas": 1, "expert_parallel": False, "router": "round_robin"}
    even = llmsim.run(scenario_from_dict(_data(**base), "test", ROOT)).summary
    alike = llmsim.run(scenario_from_dict(_data(**base, expert_routing_exponent=0.79), "test", ROOT)).summary
    assert alike["mean_tpot_ms"] < even["mean_tpot_ms"]
    dense = {**_data(**base, expert_routing_exponent=0.79), "model": "qwen3-8b"}
    with pytest.raises(UserError, match="cluster.expert_routing_exponent: qwen3-8b is a dense model"):
        llmsim.run(scenario_from_dict(dense, "test", ROOT))
    for bad in (-0.5, 1.5):  # (0 is every token the same experts: dummy weights behind a biased router)
        with pytest.raises(UserError, match="expert_routing_exponent"):
            scenario_from_dict(_data(**base, expert_routing_exponent=bad), "test", ROOT)


def test_a_moe_run_s_printout_says_how_its_tokens_route(tmp_path, capsys) -> None:
    """`llmsim run` on a MoE model prints its routing, and where the default is independent, the
    measured alternative for vllm bench's random dataset; a dense model prints none."""
    import yaml

    from llmsim.cli import main

    base = {"replicas": 1, "expert_parallel": False, "router": "round_robin"}
    small = {"num_requests": 20, "rate_rps": 10}
    for name, cluster, expect in (
        ("even", base, "routing  MoE tokens route independently (cluster.expert_routing_exponent 1); vllm bench"),
        ("alike", {**base, "expert_routing_exponent": 0.79}, "routing  MoE tokens route alike: cluster.expert"),
    ):
        data = _data(**cluster)
        data["workload"].update(small)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        assert main(["run", str(path), "--out", str(tmp_path / name)]) == 0
        assert expect in capsys.readouterr().out
    dense = {**_data(**base), "model": "qwen3-8b"}
    dense["workload"].update(small)
    (tmp_path / "dense.yaml").write_text(yaml.safe_dump(dense))
    assert main(["run", str(tmp_path / "dense.yaml"), "--out", str(tmp_path / "dense")]) == 0
    assert "routing  " not in capsys.readouterr().out
