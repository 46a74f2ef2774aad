"""Multi-LoRA serving (scenario ``lora``, ``workload.lora``; lora.py): the adapters' size and GPU
buffers, the Punica kernels' FLOPs and bytes, the max_loras rule of vLLM's scheduler, the GPU
slot and host caches, and the effects of max_loras and LoRA-affinity routing, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmsim
from llmsim.costmodel.ops import BatchShape, batch_shape, lora_ops
from llmsim.costmodel.roofline import CostConfig, CostModel
from llmsim.errors import UserError
from llmsim.hardware import load_profile
from llmsim.kvcache import BlockManager
from llmsim.lora import LoraCache, adapter_params, affinity_score, slots_bytes
from llmsim.models import get_model
from llmsim.options import LoraSpec
from llmsim.request import Request
from llmsim.scenario import scenario_from_dict
from llmsim.schedulers import make_scheduler
from llmsim.schedulers.base import SchedulerConfig

ROOT = Path(__file__).resolve().parents[1]
LLAMA = get_model("llama-3.1-8b")  # H 4096, 32 heads / 8 KV heads of 128, intermediate 14336, 32 layers


def test_an_adapter_has_the_published_size() -> None:
    # rank r over q, k, v, o, gate, up, down: r x (in + out) each, 32 layers
    H, kv, inter, r = 4096, 1024, 14336, 16
    per_layer = r * (H + H) + 2 * r * (H + kv) + r * (H + H) + 2 * r * (H + inter) + r * (inter + H)
    assert adapter_params(LLAMA, r) == per_layer * 32 == 41_943_040
    # 84 MB in bf16: the size of a rank-16 Llama-3-8B adapter on every projection
    assert adapter_params(LLAMA, r) * 2 == pytest.approx(83.9e6, rel=1e-3)
    # tp 2: q/k/v and gate/up keep A whole and split B; o and down split A and keep B whole
    per_device = r * (3 * H + (4096 + 2 * kv) // 2) + r * (4096 // 2 + H) + r * (2 * H + 2 * inter // 2)
    per_device += r * (inter // 2 + H)
    assert adapter_params(LLAMA, r, tp=2) == per_device * 32
    # the GPU buffers: max_loras slots at max_lora_rank, per device
    assert slots_bytes(LLAMA, 4, 16, 1, 1, 2) == 4 * 41_943_040 * 2


def test_lora_kernels_flops_and_bytes_by_hand() -> None:
    cfg = CostConfig(lora_rank=16)
    T, A, r, H, q, kv, inter = 100, 3, 16, 4096, 4096, 1024, 14336
    ops = lora_ops(LLAMA, T, A, cfg)
    assert [o.name for o in ops] == ["lora_shrink", "lora_expand"] * 4 and all(o.count == 32 for o in ops)
    shrink_in = 3 * H + q + 2 * H + inter  # each slice reads the layer's input
    expand_out = (q + 2 * kv) + H + 2 * inter + H
    assert sum(o.flops for o in ops) == 2 * T * r * (shrink_in + expand_out)
    # every adapter in the batch is read once per kernel, at the buffers' rank
    weights = sum(o.weight_bytes for o in ops)
    assert weights == A * 2 * adapter_params(LLAMA, r) / 32
    # shrink: x per slice (bf16) in, fp32 [T, r] per slice out; expand: that back in, the output read and written
    shrink = [o for o in ops if o.name == "lora_shrink"]
    assert sum(o.bytes_read - o.weight_bytes for o in shrink) == T * 2 * shrink_in
    assert sum(o.bytes_written for o in shrink) == T * r * 4 * (3 + 1 + 2 + 1)


def test_step_time_adds_the_lora_kernels_and_breakdown_names_them() -> None:
    hw = load_profile("H100-SXM", ROOT)
    cost = CostModel(LLAMA, hw, CostConfig(lora_rank=16))
    base = batch_shape([(512, 0)], [1000] * 32)
    lora = batch_shape([(512, 0)], [1000] * 32)
    lora.lora_tokens, lora.lora_adapters = base.tokens, 4
    extra = cost.step_time(lora) - cost.step_time(base)
    assert extra == pytest.approx(cost.lora_s(lora), rel=1e-9) and extra > 0
    terms = cost.breakdown(lora)
    assert terms["lora_shrink"] > 0 and terms["lora_expand"] > 0
    assert "lora_shrink" not in cost.breakdown(base)
    # the kernels cost a fraction of the step, growing with the adapters read (decode: memory-bound)
    dec = BatchShape(decode_seqs=32, decode_tokens=32, decode_ctx_tokens=32_000, lora_tokens=32, lora_adapters=1)
    dec4 = BatchShape(decode_seqs=32, decode_tokens=32, decode_ctx_tokens=32_000, lora_tokens=32, lora_adapters=4)
    assert 0 < cost.lora_s(dec) < cost.lora_s(dec4) < cost.step_time(dec4)


def _sched(max_loras: int):  # type: ignore[no-untyped-def]
    kv = BlockManager(1000, 16, watermark=0.0)
    return make_scheduler("vllm", SchedulerConfig(chunk_tokens=4096, max_loras=max_loras), kv)


def test_the_scheduler_passes_over_requests_past_max_loras() -> None:
    """vLLM v1: a waiting request whose adapter would be one too many is skipped, the next ones
    are still tried, and the skipped go back to the head of the queue in order."""
    s = _sched(max_loras=1)
    reqs = []
    for i, adapter in enumerate([0, 1, 0, 2, -1]):
        r = Request(i, 0.0, 100, 10)
        r.lora_id = adapter
        reqs.append(r)
        s.add(r)
    plan = s.schedule()
    assert [r.id for r, _ in plan.prefill] == [0, 2, 4]  # adapter 0 twice, and the base model
    assert [r.id for r in s.waiting] == [1, 3]
    # with two slots adapter 1 joins, 2 still waits
    s2 = _sched(max_loras=2)
    for r in (Request(i, 0.0, 100, 10) for i in range(4)):
        r.lora_id = [0, 1, 0, 2][r.id]
        s2.add(r)
    assert [r.id for r, _ in s2.schedule().prefill] == [0, 1, 2] and [r.id for r in s2.waiting] == [3]


def _spec(max_loras: int = 2, max_cpu: int = 3) -> LoraSpec:
    return LoraSpec(max_loras, max_cpu, 100e6, 25e9, 10e-6, 1e9, 0.02)


def test_slots_and_host_cache_by_hand() -> None:
    c = LoraCache(_spec())
    host = 10e-6 + 100e6 / 25e9
    disk = 0.02 + 100e6 / 1e9
    assert c.activate({1}) == pytest.approx(disk + host)  # from the store, then into a slot
    assert c.activate({1}) == 0.0  # active
    assert c.activate({1, 2}) == pytest.approx(disk + host)
    # a third adapter evicts the least recently used slot not in the step (1, used before 2)
    assert c.activate({2, 3}) == pytest.approx(disk + host)
    assert list(c.gpu) == [2, 3]
    # adapter 1 is still in host memory: a copy only
    assert c.activate({1}) == pytest.approx(host)
    assert (c.gpu_loads, c.disk_loads) == (4, 3)
    # four adapters through a three-adapter host cache: the oldest (2) was dropped and is read again
    c.activate({4})
    assert c.activate({2}) == pytest.approx(disk + host)
    assert c.load_s == pytest.approx(5 * disk + 6 * host)


def test_affinity_score_as_the_gateway_scores_pods() -> None:
    # running adapters {1, 2}, waiting {3}, two slots: 1.0 running, 0.6 only waiting, 0 otherwise
    assert affinity_score({1, 2}, {3}, 2, 1) == 1.0
    assert affinity_score({1, 2}, {3}, 2, 3) == 0.6
    assert affinity_score({1, 2}, {3}, 2, 4) == 0.0
    # room for another adapter: 0.8 for any adapter not running
    assert affinity_score({1}, set(), 4, 4) == 0.8 and affinity_score({1}, {3}, 4, 3) == 0.8
    assert affinity_score({1}, set(), 4, -1) == 0.0  # the base model


def test_a_step_over_max_loras_is_an_invariant_error() -> None:
    from llmsim.errors import InvariantError

    c = LoraCache(_spec(max_loras=2))
    with pytest.raises(InvariantError, match="over max_loras=2"):
        c.activate({1, 2, 3})


def _data(**over: object) -> dict:
    data = {
        "name": "lora",
        "seed": 3,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "cluster": {"replicas": 4, "router": "round_robin"},
        "policy": {"kind": "vllm"},
        "lora": {"max_loras": 4, "max_cpu_loras": 16},
        "workload": {
            "kind": "poisson",
            "rate_rps": 20,
            "num_requests": 1200,
            "prompt_tokens": {"dist": "lognormal", "median": 300, "sigma": 0.6, "min": 16, "max": 2000},
            "output_tokens": {"dist": "lognormal", "median": 120, "sigma": 0.6, "min": 1, "max": 500},
            "lora": {"adapters": 40, "zipf": 1.0},
        },
    }
    for key, value in over.items():
        section, _, field = key.partition("__")
        data[section][field] = value  # type: ignore[index]
    return data


def _run(**over: object) -> dict:
    return llmsim.run(scenario_from_dict(_data(**over), "test", ROOT)).summary


@pytest.fixture(scope="module")
def runs() -> dict:
    return {
        "rr": _run(),
        "affinity": _run(cluster__router="lora_affinity"),
        "wide": _run(lora__max_loras=16),
    }


def test_more_slots_batch_more_adapters(runs) -> None:
    rr, wide = runs["rr"], runs["wide"]
    # four slots hold a batch to four of 40 adapters: requests wait for their adapter's turn
    assert wide["mean_ttft_ms"] < 0.5 * rr["mean_ttft_ms"]
    assert rr["lora"]["adapters_used"] == wide["lora"]["adapters_used"] > 30
    # and with 16 slots fewer adapters are evicted to be loaded again
    assert wide["lora"]["gpu_loads"] < rr["lora"]["gpu_loads"]


def test_lora_affinity_routing_loads_fewer_adapters(runs) -> None:
    """Round robin spreads all 40 adapters over the four replicas, so each keeps swapping its four
    slots; the affinity router sends an adapter where it is active, so each replica serves fewer
    adapters: fewer loads, fewer reads from the store, and batches that fill their slots."""
    rr, aff = runs["rr"], runs["affinity"]
    assert aff["lora"]["gpu_loads"] < 0.9 * rr["lora"]["gpu_loads"]
    assert aff["lora"]["store_loads"] < 0.8 * rr["lora"]["store_loads"]
    assert aff["lora"]["load_s"] < rr["lora"]["load_s"]
    assert aff["mean_ttft_ms"] < 0.5 * rr["mean_ttft_ms"]


def test_the_lora_kernels_and_loads_are_in_the_steps(runs) -> None:
    s = runs["rr"]["lora"]
    assert s["requests_with_adapter"] == 1200 and s["kernel_s"] > 0 and s["store_loads"] >= s["adapters_used"]
    assert s["kernel_s"] < 0.3 * s["busy_s"]
    # no adapters: the kernels never run, nothing is loaded (the buffers are still reserved)
    none = _run(workload__lora={"adapters": 1, "share": 0.0})["lora"]
    assert (none["kernel_s"], none["gpu_loads"], none["requests_with_adapter"]) == (0.0, 0, 0)


def test_fast_equals_exact_and_deterministic() -> None:
    sc = scenario_from_dict(_data(workload__num_requests=120), "test", ROOT)
    a, b, exact = llmsim.run(sc), llmsim.run(sc), llmsim.run(sc, exact_steps=True)
    assert a.requests.equals(b.requests)
    assert a.requests["finish_s"].to_numpy() == pytest.approx(exact.requests["finish_s"].to_numpy(), rel=1e-9)
    assert (a.requests["lora_id"] >= 0).all()
    assert set(a.requests["lora_id"]) <= set(range(40))


def test_an_adapter_keys_its_own_prefix_cache_blocks() -> None:
    """vLLM hashes a block with the request's LoRA id: the same system prompt under two adapters
    is two cache entries."""
    sys_prompt = {"count": 1, "tokens": 1024, "share": 1.0}
    # (the vllm-v1 engine caches prefixes by default)
    one = _run(workload__system_prompts=sys_prompt, workload__lora={"adapters": 1})
    many = _run(workload__system_prompts=sys_prompt, workload__lora={"adapters": 40})
    assert one["prefix_cache"]["hit_rate"] > many["prefix_cache"]["hit_rate"] + 0.05


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"lora": None}, "workload.lora: adapters need LoRA serving on"),
        ({"lora": {"max_loras": 4, "max_cpu_loras": 2}}, r"max_cpu_loras \(2\) must be >= max_loras \(4\)"),
        ({"lora": {"max_lora_rank": 8}, "rank": 16}, "workload.lora.rank: 16 is above lora.max_lora_rank"),
        ({"lora": {"max_loras": 0}}, "greater than or equal to 1"),
        ({"lora": {"load_gbps": 0}}, "greater than or equal to 0.001"),
        ({"policy": {"kind": "disaggregated"}}, "not modelled"),
        ({"cluster": {"replicas": 1, "pp": 2}}, "pipeline parallelism"),
        (
            {"cluster": {"replicas": 2, "router": "lora_affinity", "router_view_s": 1.0}},
            "lora_affinity reads them live",
        ),
    ],
)
def test_bad_lora_refused(over: dict, message: str) -> None:
    data = _data()
    rank = over.pop("rank", None)
    if rank:
        data["workload"]["lora"]["rank"] = rank
    for k, v in over.items():
        if v is None:
            del data[k]
        else:
            data[k] = v
    if data["policy"]["kind"] == "disaggregated":
        data["cluster"] = {"prefill_pool": {"replicas": 1}, "decode_pool": {"replicas": 1}}
    with pytest.raises(UserError, match=message):
        scenario_from_dict(data, "test", ROOT)


def test_a_generic_trace_names_each_requests_adapter(tmp_path: Path) -> None:
    rows = ["arrival_s,prompt_tokens,output_tokens,lora"]
    rows += [f"{i * 0.1},{200 + i},{20},{['sql', '', 'chat', 'sql'][i % 4]}" for i in range(40)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    data = {
        "name": "trace-lora",
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "policy": {"kind": "vllm"},
        "lora": {"max_loras": 1},
        "workload": {"kind": "trace", "trace": {"path": "t.csv", "format": "generic"}},
    }
    res = llmsim.run(scenario_from_dict(data, "test", tmp_path))
    # adapters numbered by first appearance: sql 0, chat 1; an empty cell runs the base model
    assert res.requests["lora_id"].tolist()[:4] == [0, -1, 1, 0]
    assert res.summary["lora"]["adapters_used"] == 2 and res.summary["lora"]["requests_with_adapter"] == 30
    del data["lora"]
    with pytest.raises(UserError, match="'lora' names LoRA adapters"):
        llmsim.run(scenario_from_dict(data, "test", tmp_path))


def test_trace_adapter_names_are_text(tmp_path: Path) -> None:
    from llmsim.workload.traces import load_generic

    (tmp_path / "t.csv").write_text(
        "arrival_s,prompt_tokens,output_tokens,lora\n0,9,1,NA\n1,9,1,007\n2,9,1,7\n3,9,1,\n"
    )
    # "NA" is an adapter's name here, "007" and "7" are two adapters, an empty cell the base model
    assert load_generic(tmp_path / "t.csv").lora.tolist() == [0, 1, 2, -1]
    rows = [
        {"arrival_s": 0, "prompt_tokens": 9, "output_tokens": 1, "lora": 3},
        {"arrival_s": 1, "prompt_tokens": 9, "output_tokens": 1},
    ]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert load_generic(tmp_path / "t.jsonl").lora.tolist() == [0, -1]
    rows[1]["lora"] = ["a"]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(UserError, match=r"line 2: lora must be a name or a number, got \['a'\]"):
        load_generic(tmp_path / "t.jsonl")


def test_moe_models_refused() -> None:
    data = _data()
    data["model"] = "qwen3-30b-a3b-instruct-2507"
    with pytest.raises(UserError, match="MoE experts is not modelled"):
        llmsim.run(scenario_from_dict(data, "test", ROOT))
