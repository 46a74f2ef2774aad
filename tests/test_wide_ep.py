"""Expert parallelism across nodes: DeepEP's all-to-all kernels (``cluster.all2all_backend``,
vLLM --all2all-backend) and dual batch overlap (``cluster.dual_batch_overlap``, vLLM --enable-dbo).
DeepEP's own published kernel timings (data/calibration/deepep/) are priced back; the op lists, the
overlap's arithmetic and the inputs refused are checked by hand."""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from pathlib import Path

import pytest

from llmsim.build import build_model, build_pools
from llmsim.costmodel import CostConfig, CostModel
from llmsim.costmodel.comm import deepep_s, nodes_reached
from llmsim.costmodel.ops import BatchShape, batch_shape, step_ops
from llmsim.engine import PRESETS
from llmsim.errors import UserError
from llmsim.hardware import Link, load_profile
from llmsim.models import CATALOG
from llmsim.scenario import scenario_from_dict
from llmsim.vllmcli import all2all_ignored, parse_serve, scenario_dict

ROOT = Path(__file__).resolve().parents[1]
V3 = CATALOG["deepseek-v3"]
H100 = load_profile("H100-SXM")


def _link(rate: float) -> Link:
    fig = {"value": rate, "source": "test link"}
    return Link(name="test", bandwidth_bytes_per_s=fig, latency_s={"value": 0.0, "source": "test link"})


def test_deepseek_v3_routes_within_groups():
    """config.json n_group 8 / topk_group 4: a token's experts lie in 4 of 8 groups."""
    assert (V3.expert_groups, V3.expert_groups_per_token) == (8, 4)
    assert (CATALOG["qwen3-30b-a3b-instruct-2507"].expert_groups, CATALOG["mixtral-8x7b"].expert_groups) == (0, 0)


def test_nodes_reached_by_hand():
    """Whole groups a node: 4 nodes of 2 groups each, a node missed when neither of its groups is
    among the 4 picked: C(6, 4) / C(8, 4) = 15 / 70. A group over two ranks: 4 groups x 2 ranks x
    (1 - 1/2^2). Without groups: 8 independent picks."""
    assert nodes_reached(4, 8, (8, 4)) == pytest.approx(4 * (1 - 15 / 70))
    assert nodes_reached(8, 8, (8, 4)) == pytest.approx(4.0)  # one group a node: exactly 4
    assert nodes_reached(16, 8, (8, 4)) == pytest.approx(4 * 2 * (1 - 0.25))
    assert nodes_reached(4, 8) == pytest.approx(4 * (1 - 0.75**8))
    assert nodes_reached(1, 8, (8, 4)) == pytest.approx(1.0)


def test_deepep_prices_its_authors_measurements():
    """Every row of DeepEP's V1 tables (H800: NVLink rated 200 GB/s a direction, a 50 GB/s NIC;
    under its tests' own routing) within 6 %, the two intranode low-latency rows within 12 % (in-sample:
    the constants come from these rows; benchmarks/deepep.py prints the table)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("deepep_bench", ROOT / "benchmarks" / "deepep.py")
    bench = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(bench)
    with bench.DATA.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 20
    for r in rows:
        real = bench.measured_s(r)
        ep = int(r["ep"])
        row = bench.row_bytes(int(r["hidden"]), r["dispatch_dtype"])
        low = r["kernels"] == "low_latency"
        combine = r["op"] == "combine"
        priced = deepep_s(int(r["tokens"]), row, 8, ep, 8, low, combine, bench.NVLINK, bench.RDMA, bench.test_groups(r))
        bound = 0.12 if low and ep == 8 else 0.06
        assert priced == pytest.approx(real, rel=bound), (r, priced, real)


def test_deepep_traffic_follows_the_links():
    """Low latency: every (token, expert) copy leaving the node crosses the NIC, so at EP 256 (31/32
    of copies remote) the time is latency + copies x row / (NIC x fraction); a faster NIC is faster.
    Normal kernels: within one node NVLink alone; more tokens, more time; no ranks, no time."""
    nvl, nic = _link(160e9), _link(50e9)
    t = deepep_s(128, 7392, 8, 256, 8, True, False, nvl, nic)
    assert t == pytest.approx(35e-6 + 128 * 8 * 248 / 256 * 7392 / (50e9 * 0.93))  # (the NIC side is the longer)
    assert deepep_s(128, 7392, 8, 256, 8, True, False, nvl, _link(100e9)) < t
    intranode = deepep_s(4096, 7392, 8, 8, 8, False, False, nvl, nic)
    assert intranode == deepep_s(4096, 7392, 8, 8, 8, False, False, nvl, _link(1e6))  # the NIC unused
    assert deepep_s(8192, 7392, 8, 32, 8, False, False, nvl, nic) > deepep_s(
        4096, 7392, 8, 32, 8, False, False, nvl, nic
    )
    assert deepep_s(0, 7392, 8, 32, 8, False, False, nvl, nic) == 0.0
    assert deepep_s(4096, 7392, 8, 1, 8, False, False, nvl, nic) == 0.0


def _cost(**cfg: object) -> CostModel:
    base = CostConfig(ep=64, act_dtype="fp8", weight_dtype="fp8", cuda_graphs=True)
    return CostModel(V3, H100, replace(base, **cfg), PRESETS["vllm-v1"])


def _decode(seqs: int, ctx: int = 2000) -> BatchShape:
    return batch_shape([], [ctx] * seqs)


def test_deepep_ops_replace_the_gathers():
    """DeepEP: a dispatch and a combine of this rank's tokens (FP8 rows with their per-128 scales
    where the experts compute in FP8; 16-bit back), no moe_sum (the combine reduces); the default
    backend all-gathers and reduce-scatters every rank's tokens and sums in a kernel of its own."""
    shape = _decode(64)
    cfg = CostConfig(ep=64, act_dtype="fp8", all2all_backend="deepep_low_latency")
    ops = {op.name: op for op in step_ops(V3, shape, cfg)}
    d, c = ops["moe_dispatch"], ops["moe_combine"]
    assert (d.collective, c.collective, d.ranks, d.m, d.k) == ("deepep_dispatch", "deepep_combine", 64, 64, 8)
    assert d.n == 7168 + 4 * 56 and c.n == 2 * 7168 and d.bytes_read == 64 * d.n
    assert "moe_sum" not in ops
    plain = {op.name: op for op in step_ops(V3, shape, replace(cfg, all2all_backend="allgather_reducescatter"))}
    assert plain["moe_dispatch"].collective == "all_gather" and "moe_sum" in plain
    bf16 = {op.name: op for op in step_ops(V3, shape, replace(cfg, act_dtype="bf16"))}
    assert bf16["moe_dispatch"].n == 2 * 7168


def test_deepep_beats_gathering_every_token_across_nodes():
    """Across 8 nodes the all-gather moves every rank's tokens to every rank; DeepEP only where the
    experts are: a much cheaper step."""
    shape = _decode(128)
    plain = _cost().step_time(shape)
    assert _cost(all2all_backend="deepep_low_latency").step_time(shape) < 0.5 * plain


def test_dual_batch_overlap_thresholds():
    """vLLM splits a step from its thresholds on (check_ubatch_thresholds: at least 32 tokens
    decode-only, 512 with a prompt); only where DeepEP moves tokens between data-parallel ranks;
    and a step a data-parallel group decided not to split stays whole."""
    cost = _cost(all2all_backend="deepep_low_latency", dual_batch_overlap=True)
    assert not cost.microbatched(31, True) and cost.microbatched(32, True)
    assert not cost.microbatched(511, False) and cost.microbatched(512, False)
    assert cost.dbo_delta_s(_decode(31), 1.0) == 0.0
    assert not _cost(all2all_backend="deepep_low_latency").microbatched(4096, False)
    assert not _cost(dual_batch_overlap=True).microbatched(4096, False)  # (the all-gather backend)
    assert not _cost(ep=4, tp=4, all2all_backend="deepep_low_latency", dual_batch_overlap=True).microbatched(
        4096, False
    )
    shape = _decode(256)
    assert cost.dbo_delta_s(shape, cost._stage_s(shape)) != 0.0
    shape.microbatch = 0  # (dpgroup: a peer rank voted no)
    assert cost.dbo_delta_s(shape, cost._stage_s(shape)) == 0.0


def test_dual_batch_overlap_prices_the_schedule():
    """The split step is the four phases of vLLM's schedule, each the longer of one micro-batch's
    compute and the other's transfer, so it lasts at least each stream alone and at most both in a
    row (each at half the tokens, twice); the breakdown names the change and sums to the step."""
    on = _cost(all2all_backend="deepep_low_latency", dual_batch_overlap=True)
    off = _cost(all2all_backend="deepep_low_latency")
    shape = _decode(256)
    plain = off.stage_time(shape)
    split = on.stage_time(shape)
    other, experts, dispatch, combine = on._body_parts(128, True, 0)
    compute = 2 * (other + experts) + (plain - sum(off._body_parts(256, True, 0)))
    assert split >= max(compute, 2 * (dispatch + combine)) - 1e-12
    assert split <= compute + 2 * (dispatch + combine) + 1e-12
    assert split < plain  # (here the transfers are long: the overlap pays)
    bd = on.breakdown(shape)
    assert bd["dual_batch_overlap"] == pytest.approx(split - plain)
    assert sum(bd.values()) == pytest.approx(on.step_time(shape))
    assert on.decode_steps_s(shape, 3)[0] == pytest.approx(on.step_time(shape))


def test_dual_batch_overlap_breakdown_sums_with_cuda_graph_padding():
    """With captured sizes a batch pads to the next one: the split is priced on the padded step,
    and the breakdown still sums to the step (ranks decoding 33-200 sequences)."""
    sizes = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 128, 256)
    for backend in ("deepep_low_latency", "deepep_high_throughput"):
        cost = _cost(all2all_backend=backend, dual_batch_overlap=True, cuda_graph_sizes=sizes)
        for seqs in (33, 41, 100, 121, 200):
            shape = _decode(seqs, 500)
            assert sum(cost.breakdown(shape).values()) == pytest.approx(cost.step_time(shape), rel=1e-9), (
                backend,
                seqs,
            )


def test_normal_kernels_slow_the_compute_only_while_they_run():
    """Beside DeepEP's normal kernels the compute has 112 of 132 SMs; once a transfer ends it has
    them all: a phase lasts the transfer, or the compute plus the share it lost meanwhile. So the
    split step never takes longer than its two micro-batches one after the other with their SMs."""
    from llmsim.costmodel.roofline import _overlapped_s

    s = 1 - 20 / 132
    assert _overlapped_s(1.0, 2.0, s) == 2.0
    assert _overlapped_s(3.0, 2.0, s) == pytest.approx(3.0 + 2.0 * (1 - s))
    assert _overlapped_s(3.0, 0.0, s) == 3.0
    cost = _cost(all2all_backend="deepep_high_throughput", dual_batch_overlap=True)
    for seqs in (40, 64, 200):
        shape = _decode(seqs)
        other, experts, dispatch, combine = cost._body_parts(-(-seqs // 2), True, 0)
        rest = cost._stage_s(shape) - sum(cost._body_parts(seqs, True, 0))
        serial = 2 * (other + experts + dispatch + combine) + rest
        assert cost.stage_time(shape) <= serial + 1e-12


def test_deepep_normal_kernels_take_sms_from_the_overlapped_compute():
    """DeepEP's normal kernels run on 20 of the 132 SMs (vLLM's num_sms): the compute beside them
    is slower than beside the low-latency kernels, which take none."""
    ht = _cost(all2all_backend="deepep_high_throughput", dual_batch_overlap=True)
    assert ht._dbo_share == pytest.approx(1 - 20 / 132)
    assert _cost(all2all_backend="deepep_low_latency", dual_batch_overlap=True)._dbo_share == 1.0


def _data(model: str = "deepseek-v3", **cluster: object) -> dict:
    return {
        "name": "wide-ep",
        "model": {"name": model, "act_dtype": "fp8"},
        "hardware": "H100-SXM",
        "cluster": {"replicas": 16, "expert_parallel": True, **cluster},
        "workload": {
            "kind": "all_at_once",
            "num_requests": 64,
            "prompt_tokens": {"dist": "fixed", "value": 600},
            "output_tokens": {"dist": "fixed", "value": 8},
        },
    }


def _scenario(model: str = "deepseek-v3", **cluster: object):
    return scenario_from_dict(_data(model, **cluster), "test", ROOT)


def test_scenario_keys_reach_the_cost_model():
    sc = _scenario(all2all_backend="deepep_high_throughput", dual_batch_overlap=True, dbo_prefill_token_threshold=256)
    cfg = build_pools(sc, build_model(sc))[0].cost.cfg
    assert (cfg.all2all_backend, cfg.dual_batch_overlap, cfg.dbo_prefill_tokens, cfg.dbo_decode_tokens) == (
        "deepep_high_throughput",
        True,
        256,
        32,
    )


@pytest.mark.parametrize(
    ("cluster", "says"),
    [
        ({"expert_parallel": False, "all2all_backend": "deepep_low_latency"}, "no pool has one"),
        ({"replicas": 1, "all2all_backend": "deepep_low_latency"}, "no pool has one"),
        ({"dual_batch_overlap": True}, "DeepEP only"),
        ({"replicas": 8, "tp": 2, "all2all_backend": "deepep_low_latency"}, "tp 2"),
        ({"all2all_backend": "deepep_low_latency", "dbo_decode_token_threshold": 8}, "read only with"),
    ],
)
def test_scenarios_deepep_cannot_run_are_refused(cluster, says):
    with pytest.raises(UserError, match=says):
        sc = _scenario("qwen3-30b-a3b-instruct-2507", **cluster)
        build_pools(sc, build_model(sc))


def test_deepep_needs_nvlink():
    data = {
        "name": "pcie",
        "model": "qwen3-30b-a3b-instruct-2507",
        "hardware": "L40S",
        "cluster": {"replicas": 2, "expert_parallel": True, "all2all_backend": "deepep_low_latency"},
        "workload": {
            "kind": "all_at_once",
            "num_requests": 2,
            "prompt_tokens": {"dist": "fixed", "value": 8},
            "output_tokens": {"dist": "fixed", "value": 2},
        },
    }
    sc = scenario_from_dict(data, "test", ROOT)
    with pytest.raises(UserError, match="NVLink"):
        build_pools(sc, build_model(sc))


def test_redundant_experts_make_a_degree_that_divides_them():
    """EP 72 does not divide 256 experts, but EPLB's 256 + 32 copies it does (SGLang's 288)."""
    data = _data(replicas=72)
    with pytest.raises(UserError, match="does not divide the 256 experts"):
        sc = scenario_from_dict(data, "test", ROOT)
        build_pools(sc, build_model(sc))
    data["cluster"] |= {"eplb": True, "redundant_experts": 32}
    sc = scenario_from_dict(data, "test", ROOT)
    assert build_pools(sc, build_model(sc))[0].cost.cfg.ep == 72


def test_vllm_serve_flags():
    """--all2all-backend (or VLLM_ALL2ALL_BACKEND), --enable-dbo and its thresholds become the
    cluster keys; a backend llmsim does not price is refused; without DP ranks of an EP group the
    flags are unread (vLLM does not use them) and listed as ignored."""
    serve = parse_serve(
        "vllm serve deepseek-ai/DeepSeek-V3 -dp 16 -ep --all2all-backend deepep_low_latency --enable-dbo "
        "--dbo-decode-token-threshold 64"
    )
    assert (serve.all2all_backend, serve.dbo, serve.dbo_decode_tokens) == ("deepep_low_latency", True, 64)
    assert not all2all_ignored(serve)
    from llmsim.vllmcli import Bench

    cluster = scenario_dict("H100-SXM", serve, Bench())["cluster"]
    assert cluster["all2all_backend"] == "deepep_low_latency" and cluster["dual_batch_overlap"]
    assert cluster["dbo_decode_token_threshold"] == 64 and "dbo_prefill_token_threshold" not in cluster
    env = parse_serve("VLLM_ALL2ALL_BACKEND=deepep_high_throughput vllm serve deepseek-ai/DeepSeek-V3 -dp 4 -ep")
    assert env.all2all_backend == "deepep_high_throughput"
    with pytest.raises(UserError, match="pplx"):
        parse_serve("vllm serve deepseek-ai/DeepSeek-V3 -dp 4 -ep --all2all-backend pplx")
    lone = parse_serve("vllm serve Qwen/Qwen3-30B-A3B --all2all-backend deepep_low_latency --enable-dbo")
    assert all2all_ignored(lone) == ["--all2all-backend", "--enable-dbo"]
    assert "all2all_backend" not in scenario_dict("H100-SXM", lone, Bench())["cluster"]
    bare = parse_serve("vllm serve deepseek-ai/DeepSeek-V3 -dp 16 -ep --dbo-prefill-token-threshold 128")
    assert all2all_ignored(bare) == ["--dbo-prefill-token-threshold"]
    assert "dbo_prefill_token_threshold" not in scenario_dict("H100-SXM", bare, Bench())["cluster"]


def test_a_wide_ep_run_is_deterministic_and_finite():
    sc = _scenario(all2all_backend="deepep_low_latency", dual_batch_overlap=True)
    import llmsim

    a, b = llmsim.run(sc).summary, llmsim.run(sc).summary
    assert a["completed"] == 64 and math.isfinite(a["mean_ttft_ms"]) and a == b


def test_nodes_reached_grows_with_the_nodes():
    """Where the groups and nodes do not divide (7 or 9 nodes of 8 groups) the reach follows the
    fractional share of groups a node holds: it never falls as nodes are added."""
    reach = [nodes_reached(n, 8, (8, 4)) for n in range(1, 40)]
    assert all(b >= a for a, b in zip(reach, reach[1:], strict=False))
    assert reach[6] < 4.0 < reach[8]  # 7 nodes, (8 nodes: exactly 4), 9 nodes


def test_a_step_of_one_token_is_not_split():
    """vLLM gives the split up where a micro-batch would be empty (thresholds of 0 allowed)."""
    cost = _cost(all2all_backend="deepep_low_latency", dual_batch_overlap=True, dbo_decode_tokens=0)
    shape = _decode(1)
    assert cost.microbatched(1, True) and cost.dbo_delta_s(shape, cost._stage_s(shape)) == 0.0


def test_a_deepseek_config_with_a_bad_group_count_is_refused(tmp_path):
    import json

    from test_mla import V3_CONFIG

    from llmsim.models import from_hf_config

    for bad in ("8", [8], -8, True):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**V3_CONFIG, "n_group": bad}))
        with pytest.raises(UserError, match="n_group"):
            from_hf_config(path)


def test_a_plan_keeps_adding_expert_parallel_replicas_past_memory_and_divisibility():
    """Under expert parallelism more replicas split the experts: a point that did not fit, or whose
    degree did not divide them, may work with more (llmsim plan keeps trying)."""
    from llmsim.planning.rows import worth_more_replicas

    for reason in ("memory: does not fit", "invalid: does not divide"):
        row = {"feasible": False, "reason": reason}
        assert not worth_more_replicas(row) and worth_more_replicas(row, expert_parallel=True)
    assert not worth_more_replicas({"feasible": True, "reason": ""}, expert_parallel=True)


def test_each_pool_of_a_disaggregated_deployment_names_its_own_backend():
    """scenarios/deepseek_v3_wide_ep.yaml: DeepEP's normal kernels for the prefill pool (CUDA graphs
    off, as vLLM turns them off), its low-latency ones for the decode pool (graphs kept); a pool that
    names DeepEP without expert-parallel data-parallel ranks is refused."""
    from llmsim.scenario import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "deepseek_v3_wide_ep.yaml")
    prefill, decode = build_pools(sc, build_model(sc))
    assert (prefill.cost.cfg.all2all_backend, prefill.cost.cfg.ep, prefill.cost.cfg.cuda_graphs) == (
        "deepep_high_throughput",
        16,
        False,
    )
    assert (decode.cost.cfg.all2all_backend, decode.cost.cfg.ep, decode.cost.cfg.cuda_graphs) == (
        "deepep_low_latency",
        32,
        True,
    )
    data = _data("qwen3-30b-a3b-instruct-2507")
    data["policy"] = {"kind": "disaggregated"}
    data["cluster"] = {
        "prefill_pool": {"replicas": 2, "all2all_backend": "deepep_high_throughput"},
        "decode_pool": {"replicas": 2, "expert_parallel": True, "all2all_backend": "deepep_low_latency"},
    }
    with pytest.raises(UserError, match="cluster.prefill_pool.all2all_backend"):
        bad = scenario_from_dict(data, "test", ROOT)
        build_pools(bad, build_model(bad))


def test_backend_names_agree_where_they_are_listed():
    """The backends are named in three places kept apart for start-up time (a scenario's Literal,
    the cost model's tuple, roofline's parser choices): they must list the same names."""
    import argparse
    from typing import get_args

    from llmsim.commands.roofline import add_parser
    from llmsim.costmodel.ops import ALL2ALL_BACKENDS
    from llmsim.scenario import All2All

    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    (action,) = [a for a in sub.choices["roofline"]._actions if a.dest == "all2all_backend"]
    assert get_args(All2All) == ALL2ALL_BACKENDS == tuple(action.choices)
