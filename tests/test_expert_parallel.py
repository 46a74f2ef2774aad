"""MoE expert parallelism (``cluster.expert_parallel``, vLLM's --data-parallel-size N
--enable-expert-parallel): per-GPU expert weights, the all-gather / reduce-scatter of every rank's
tokens, the KV room the split frees, and the inputs it refuses. Hand-computed figures are for
Qwen3-30B-A3B (catalog: hidden 2048, moe_intermediate 768, 48 layers, 128 experts, top-8, no shared
expert, 32 query / 4 KV heads of 128, vocabulary 151,936, untied embeddings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.build import build_model, build_pools
from llmsim.costmodel import CostConfig, CostModel
from llmsim.costmodel.comm import all_gather_s, tp_link
from llmsim.costmodel.ops import batch_shape, step_ops
from llmsim.errors import UserError
from llmsim.hardware import load_profile
from llmsim.models import CATALOG
from llmsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
QWEN = CATALOG["qwen3-30b-a3b-instruct-2507"]
H, INTER, LAYERS, E, K = 2048, 768, 48, 128, 8
BF16 = 2

# one expert: gate, up and down projections of 2048 x 768 = 4,718,592 parameters
EXPERT_PARAMS = 3 * H * INTER
# all routed experts, bf16: 48 layers x 128 experts x 4,718,592 x 2 B = 57,982,058,496 B
EXPERT_BYTES = LAYERS * E * EXPERT_PARAMS * BF16
# the rest, bf16: embeddings + LM head 2 x 151,936 x 2048; per layer attention 2048 x (4096 + 2 x 512)
# + 4096 x 2048, router 2048 x 128 and two norms of 2048; the final norm 2048
REST_PARAMS = 2 * 151_936 * H + LAYERS * (H * (4096 + 2 * 512) + 4096 * H + H * E + 2 * H) + H
REST_BYTES = REST_PARAMS * BF16  # 3,082,162,176 B


def _scenario(model: str = "qwen3-30b-a3b-instruct-2507", **cluster: object):
    data = {
        "name": "ep",
        "model": model,
        "hardware": "RTX-PRO-6000",
        "cluster": {"replicas": 2, **cluster},
        "workload": {
            "kind": "all_at_once",
            "num_requests": 2,
            "prompt_tokens": {"dist": "fixed", "value": 8},
            "output_tokens": {"dist": "fixed", "value": 2},
        },
    }
    return scenario_from_dict(data, "test", ROOT)


def _pool(model: str = "qwen3-30b-a3b-instruct-2507", **cluster: object):
    sc = _scenario(model, **cluster)
    return build_pools(sc, build_model(sc))[0]


def _ops(ep: int, shape, tp: int = 1) -> dict:
    return {op.name: op for op in step_ops(QWEN, shape, CostConfig(tp=tp, ep=ep))}


def test_expert_weight_bytes_by_hand() -> None:
    assert EXPERT_BYTES == 57_982_058_496 and REST_BYTES == 3_082_162_176
    assert QWEN.expert_weight_bytes() == EXPERT_BYTES
    assert QWEN.weight_bytes() == EXPERT_BYTES + REST_BYTES
    assert QWEN.weight_bytes_per_device(None, 1, 1, 1) == QWEN.weight_bytes()
    # ep 2: half the experts on each GPU, the rest whole (tp 1)
    assert QWEN.weight_bytes_per_device(None, 1, 1, 2) == REST_BYTES + EXPERT_BYTES / 2 == 32_073_191_424
    assert CATALOG["llama-3.1-8b"].expert_weight_bytes() == 0.0


def test_memory_budget_holds_half_the_experts_and_the_kv_cache_grows() -> None:
    off, on = _pool(), _pool(expert_parallel=True)
    assert off.memory["weights_bytes"] == EXPERT_BYTES + REST_BYTES
    assert on.memory["weights_bytes"] == REST_BYTES + EXPERT_BYTES / 2
    freed = EXPERT_BYTES / 2
    assert on.memory["kv_bytes"] == pytest.approx(off.memory["kv_bytes"] + freed)
    assert on.kv_blocks > off.kv_blocks
    block_bytes = on.memory["kv_bytes_per_token"] * 16
    assert on.kv_blocks - off.kv_blocks == pytest.approx(freed / block_bytes, abs=1)


def test_comm_bytes_by_hand() -> None:
    """Decode of 64 sequences on each of 2 ranks: the dispatch gathers 128 tokens' hidden state and
    router logits, the combine scatters 128 tokens' outputs, both in bf16, once per layer."""
    ops = _ops(2, batch_shape([], [100] * 64))
    dispatch, combine = ops["moe_dispatch"], ops["moe_combine"]
    assert dispatch.kind == combine.kind == "comm" and dispatch.count == combine.count == LAYERS
    assert (dispatch.collective, dispatch.ranks) == ("all_gather", 2)
    assert (combine.collective, combine.ranks) == ("reduce_scatter", 2)
    assert dispatch.bytes_read == 64 * (H + E) * BF16  # this rank's slice
    assert dispatch.bytes_written == 128 * (H + E) * BF16 == 557_056  # the gathered whole
    assert combine.bytes_read == 128 * H * BF16 == 524_288
    assert combine.bytes_written == 64 * H * BF16
    assert "moe_dispatch" not in _ops(1, batch_shape([], [100] * 64))


def test_comm_priced_as_ring_collectives_over_the_ep_link() -> None:
    hw = load_profile("RTX-PRO-6000")
    shape = batch_shape([], [100] * 64)
    cm = CostModel(QWEN, hw, CostConfig(ep=2))
    link, frac = tp_link(hw, 2), hw.efficiency.allreduce_bus_fraction.value
    bd = cm.breakdown(shape)
    assert bd["moe_dispatch"] == pytest.approx(LAYERS * all_gather_s(557_056, 2, link, frac))
    assert bd["moe_combine"] == pytest.approx(LAYERS * all_gather_s(524_288, 2, link, frac))
    # by hand: one hop of latency plus half the bytes at the derated link rate
    per_call = link.latency_s.value + 0.5 * 524_288 / (link.bandwidth_bytes_per_s.value * frac)
    assert bd["moe_combine"] == pytest.approx(LAYERS * per_call)


def test_a_group_past_one_nvswitch_node_talks_over_rdma() -> None:
    """H100 SXM: NVSwitch joins a node's 8 GPUs (scale_up.max_devices); an EP group of 16 spans two
    nodes, so its dispatch and combine go over the per-GPU InfiniBand NIC (scale_out)."""
    hw = load_profile("H100-SXM")
    assert tp_link(hw, 8) is hw.scale_up and tp_link(hw, 16) is hw.scale_out
    l40s = load_profile("L40S")
    assert tp_link(l40s, 16) is l40s.scale_up  # no domain given: as before
    frac = hw.efficiency.allreduce_bus_fraction.value
    shape = batch_shape([], [100] * 64)
    for ep, link in ((8, hw.scale_up), (16, hw.scale_out)):
        bd = CostModel(QWEN, hw, CostConfig(ep=ep)).breakdown(shape)
        gathered = 64 * ep * H * BF16  # every rank's 64 tokens' hidden states, combined back
        assert bd["moe_combine"] == pytest.approx(LAYERS * all_gather_s(gathered, ep, link, frac))
    eight = CostModel(QWEN, hw, CostConfig(ep=8)).breakdown(shape)["moe_combine"] / 8
    sixteen = CostModel(QWEN, hw, CostConfig(ep=16)).breakdown(shape)["moe_combine"] / 16
    assert sixteen > 3 * eight  # per rank: 50 GB/s of NIC against 450 of NVLink, latency alike


def test_pipeline_stages_past_one_node_send_over_rdma() -> None:
    """tp 8 x pp 2 on H100 SXM is two nodes: the stage-to-stage send leaves the node."""
    from llmsim.costmodel.comm import send_s
    from llmsim.costmodel.ops import DTYPE_BYTES

    hw = load_profile("H100-SXM")
    llama = CATALOG["llama-2-70b"]
    shape = batch_shape([], [100] * 64)
    nbytes = 64 * llama.hidden_size * DTYPE_BYTES["bf16"]
    one_node = CostModel(llama, hw, CostConfig(tp=4, pp=2)).pp_send_time(shape)
    two_nodes = CostModel(llama, hw, CostConfig(tp=8, pp=2)).pp_send_time(shape)
    assert one_node == pytest.approx(send_s(nbytes, hw.scale_up))
    assert two_nodes == pytest.approx(send_s(nbytes, hw.scale_out)) and two_nodes > one_node


def test_local_experts_see_every_ranks_tokens() -> None:
    T = 64
    shape = batch_shape([], [100] * T)
    one, two = _ops(1, shape), _ops(2, shape)
    up1, up2 = one["mlp_up_proj"], two["mlp_up_proj"]
    assert up1.flops == up2.flops == 2.0 * T * K * (2 * INTER) * H  # T*ep*k/ep = T*k routed rows either way
    touched1 = E * (1 - (1 - K / E) ** T)
    touched2 = (E // 2) * (1 - (1 - K / E) ** (2 * T))
    assert up1.weight_bytes == pytest.approx(touched1 * 2 * INTER * H * BF16)
    assert up2.weight_bytes == pytest.approx(touched2 * 2 * INTER * H * BF16)
    assert two["moe_router"].m == T  # the router stays local
    # experts are whole under EP: at tp 2 their intermediate is not split, the routed rows are
    tp2 = _ops(2, shape, tp=2)  # 1 replica x tp 2: nothing to dispatch, 64 experts per GPU
    assert "moe_dispatch" not in tp2 and tp2["mlp_up_proj"].n == 2 * INTER
    assert tp2["mlp_up_proj"].flops == 2.0 * (T * K // 2) * (2 * INTER) * H


def test_ep_cuts_expert_bytes_and_adds_comm_time() -> None:
    hw = load_profile("RTX-PRO-6000")
    prefill = batch_shape([(2048, 0)], [])  # every expert touched on both layouts
    one, two = _ops(1, prefill), _ops(2, prefill)
    for name in ("mlp_up_proj", "mlp_down_proj"):
        assert two[name].weight_bytes == pytest.approx(one[name].weight_bytes / 2, rel=1e-6)
    decode = batch_shape([], [1000] * 128)
    a = CostModel(QWEN, hw, CostConfig(cuda_graphs=True)).breakdown(decode)
    b = CostModel(QWEN, hw, CostConfig(cuda_graphs=True, ep=2)).breakdown(decode)
    assert "moe_dispatch" not in a and b["moe_dispatch"] > 0 and b["moe_combine"] > 0
    assert b["mlp_up_proj"] + b["mlp_down_proj"] < 0.6 * (a["mlp_up_proj"] + a["mlp_down_proj"])
    assert b["attention_decode"] == a["attention_decode"]  # attention is per replica, unchanged


def test_expert_parallel_false_changes_nothing() -> None:
    """Off (the default), the cost model and the memory budget are those of plain replicas."""
    off, plain = _pool(expert_parallel=False), _pool()
    assert off.cost.cfg == plain.cost.cfg and off.cost.cfg.ep == 1
    assert off.kv_blocks == plain.kv_blocks and off.memory == plain.memory
    shape = batch_shape([(300, 0)], [500] * 40)
    assert [vars_of(op) for op in off.cost.ops(shape)] == [vars_of(op) for op in plain.cost.ops(shape)]
    assert not any(op.name.startswith("moe_d") or op.name == "moe_combine" for op in off.cost.ops(shape))
    assert off.memory["weights_bytes"] == QWEN.weight_bytes()


def vars_of(op) -> tuple:
    return (op.name, op.kind, op.flops, op.bytes_read, op.bytes_written, op.m, op.n, op.k, op.groups)


def test_on_sets_the_degree_replicas_times_tp() -> None:
    assert _pool(expert_parallel=True).cost.cfg.ep == 2
    assert _pool(expert_parallel=True, tp=2).cost.cfg.ep == 4


def test_dense_model_refused() -> None:
    with pytest.raises(UserError, match=r"^cluster\.expert_parallel: llama-3\.1-8b is a dense model"):
        _pool("llama-3.1-8b", expert_parallel=True)


def test_degree_must_divide_the_experts() -> None:
    with pytest.raises(UserError, match=r"cluster\.expert_parallel: the expert-parallel degree 3 .* 128 experts"):
        _pool(replicas=3, expert_parallel=True)


def test_scenario_runs_faster_with_ep() -> None:
    import llmsim

    over = {"workload.num_requests": 60, "output.steps": "none"}
    on = llmsim.run(ROOT / "scenarios/moe_expert_parallel.yaml", over).summary
    off = llmsim.run(ROOT / "scenarios/moe_expert_parallel.yaml", {**over, "cluster.expert_parallel": False}).summary
    assert on["pools"][0]["kv_blocks_per_replica"] > off["pools"][0]["kv_blocks_per_replica"]
    assert on["mean_tpot_ms"] < off["mean_tpot_ms"]


def test_moe_memory_fraction_prices_the_expert_gemms_only() -> None:
    """RTX-PRO-6000's moe_memory_fraction (vLLM's fused_moe rate) slows the expert GEMMs' weight
    streams, not the router's or the attention projections'; a profile without it prices them at
    memory_fraction, even for an expert with one row and a GEMV rate set: on a GPU the fused
    kernel multiplies a whole 16-row tile (costmodel/fusedmoe.py), not a vector."""
    hw = load_profile("RTX-PRO-6000")
    shape = batch_shape([], [1000] * 4)
    cm = CostModel(QWEN, hw, CostConfig())
    bw, moe = hw.bandwidth, hw.efficiency.moe_memory_fraction.value
    for op in step_ops(QWEN, shape, CostConfig()):
        if op.kind != "gemm":
            continue
        frac = moe if op.name in ("mlp_up_proj", "mlp_down_proj") else hw.efficiency.memory_fraction.value
        assert cm.price(op).memory_s == pytest.approx(op.bytes / (bw * frac)), op.name
    data = hw.model_dump()
    data["efficiency"].pop("moe_memory_fraction")
    data["efficiency"]["gemv_memory_fraction"] = {"value": 1.2, "source": "test"}
    plain = CostModel(QWEN, type(hw).model_validate(data), CostConfig())
    up = next(op for op in step_ops(QWEN, batch_shape([], [1000]), CostConfig()) if op.name == "mlp_up_proj")
    frac = hw.efficiency.memory_fraction.value
    assert up.m == 1 and plain.price(up).memory_s == pytest.approx(up.bytes / (bw * frac))


def test_cluster_line_names_the_ep_degree() -> None:
    from llmsim.results import pools_line

    pool = {"name": "main", "replicas": 2, "hardware": "RTX-PRO-6000", "tp": 1, "pp": 1}
    assert pools_line({"pools": [{**pool, "ep": 2}]}) == "main: 2x RTX-PRO-6000 tp1 pp1 ep2"
    assert (
        pools_line({"pools": [{**pool, "ep": 1}]}) == pools_line({"pools": [pool]}) == "main: 2x RTX-PRO-6000 tp1 pp1"
    )
