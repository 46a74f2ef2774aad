"""Disaggregated prefill/decode: KV bytes, transfer time inside TTFT, back-pressure, link use."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import llmsim
from llmsim.models import get_model
from llmsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parent.parent


def scenario(
    link: dict | None = None,
    decode: dict | None = None,
    n: int = 12,
    policy: dict | None = None,
    engine: dict | str = "vllm-v1",
    **kv: object,
) -> llmsim.Scenario:
    return scenario_from_dict(
        {
            "name": "disagg",
            "engine": engine,
            "seed": 2,
            "model": "llama-3.1-8b",
            "hardware": "H100-SXM",
            "cluster": {
                "prefill_pool": {"replicas": 1},
                "decode_pool": {"replicas": 1, **(decode or {})},
                "kv_link": link or {"kind": "rdma"},
            },
            "policy": {"kind": "disaggregated", **(policy or {})},
            "kv_cache": dict(kv),
            "workload": {
                "kind": "poisson",
                "rate_rps": 4,
                "num_requests": n,
                "prompt_tokens": {"dist": "fixed", "value": 1000},
                "output_tokens": {"dist": "fixed", "value": 20},
            },
            "output": {"steps": "all"},
        },
        "disagg.yaml",
        ROOT,
    )


def test_kv_bytes_are_layers_times_tokens_times_bytes_per_token_per_layer() -> None:
    res = llmsim.run(scenario())
    m = get_model("llama-3.1-8b")
    per_layer = 2 * m.num_kv_heads * m.head_dim * 2  # K and V, bf16
    expected = m.num_layers * 1000 * per_layer * 12
    assert res.summary["kv_transfer"]["bytes"] == pytest.approx(expected)
    assert res.summary["kv_transfer"]["transfers"] == 12


def test_ttft_includes_the_transfer() -> None:
    slow = llmsim.run(scenario({"kind": "custom", "bandwidth_gbps": 1.0, "latency_us": 0}))
    fast = llmsim.run(scenario({"kind": "custom", "bandwidth_gbps": 1000.0, "latency_us": 0}))
    wire_s = 1000 * get_model("llama-3.1-8b").kv_bytes_per_token() / 1e9  # 131 ms at 1 GB/s
    r = slow.requests
    assert (r["transfer_s"] >= wire_s - 1e-9).all()
    assert (r["ttft_s"] >= r["transfer_s"]).all()
    gap = (slow.summary["median_ttft_ms"] - fast.summary["median_ttft_ms"]) / 1e3
    assert gap == pytest.approx(wire_s, rel=0.5)  # queueing behind other transfers adds a little
    assert slow.summary["kv_transfer"]["link_utilization"] > fast.summary["kv_transfer"]["link_utilization"]


def test_layerwise_overlap_hides_most_of_the_transfer() -> None:
    link = {"kind": "custom", "bandwidth_gbps": 10.0, "latency_us": 5}
    plain = llmsim.run(scenario(link)).summary["kv_transfer"]["transfer_s_mean"]
    overlap = llmsim.run(scenario({**link, "layerwise_overlap": True})).summary["kv_transfer"]["transfer_s_mean"]
    assert overlap < 0.5 * plain


def test_decode_back_pressure_holds_kv_in_the_prefill_pool() -> None:
    # a decode replica with room for few requests: transfers wait for its blocks, all still finish
    res = llmsim.run(scenario(n=16, decode={"max_num_seqs": 2}, memory_fraction=0.23))
    assert res.summary["requests"]["finished"] == 16
    assert res.summary["kv_transfer"]["wait_for_decode_blocks_s"] > 0
    assert (res.requests["generated_tokens"] == 20).all()


def test_chunked_prefill_pool_splits_prompts_into_chunks() -> None:
    # 1000-token prompts through a 256-token budget: no prefill step carries more than 256 prompt
    # tokens (so the 12 prompts need at least 12000 / 256 steps), and the same KV crosses the link
    whole = llmsim.run(scenario())
    chunked = llmsim.run(scenario(policy={"prefill_pool_policy": "chunked", "chunk_tokens": 256}))
    pre_whole = whole.steps[whole.steps["pool"] == "prefill"]
    pre = chunked.steps[chunked.steps["pool"] == "prefill"]
    assert pre_whole["prefill_tokens"].max() >= 1000
    assert pre["prefill_tokens"].max() <= 256
    assert pre["prefill_tokens"].sum() == 12 * 1000
    assert len(pre) >= -(-12 * 1000 // 256)
    assert chunked.summary["requests"]["finished"] == 12
    assert chunked.summary["kv_transfer"]["bytes"] == whole.summary["kv_transfer"]["bytes"]
    # each chunk reads the weights again and attends to the earlier chunks: more prefill time
    assert pre["duration_s"].sum() > pre_whole["duration_s"].sum()


def test_prefill_pool_policy_needs_disaggregation() -> None:
    from llmsim.errors import UserError

    d = {
        "name": "x",
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "policy": {"kind": "chunked", "prefill_pool_policy": "chunked"},
        "workload": {"kind": "poisson", "rate_rps": 1, "num_requests": 2},
    }
    with pytest.raises(UserError, match="policy: .*prefill_pool_policy applies to kind: disaggregated only"):
        scenario_from_dict(d, "x.yaml", ROOT)


def test_heterogeneous_pools_scenario_runs() -> None:
    res = llmsim.run(ROOT / "scenarios/heterogeneous_pools.yaml", {"workload.num_requests": 40, "output.steps": "none"})
    pools = {p["name"]: p["hardware"] for p in res.summary["pools"]}
    assert pools == {"prefill": "H100-SXM", "decode": "A100-SXM-80GB"}
    assert res.summary["requests"]["finished"] == 40


def test_each_pool_holds_its_own_reported_blocks_and_the_prefill_pool_only_prompts() -> None:
    """A pool's num_blocks wins over kv_cache.num_blocks; a prefill pool that holds a 1,000-token
    prompt (63 blocks) but not prompt + answer serves it (the answer grows on the decode side); one
    too small for the prompt refuses it as the prefill pool's; KV utilisation is each replica's own."""
    res = llmsim.run(scenario(decode={"num_blocks": 4000}, num_blocks=64))
    assert (res.requests["status"] == "finished").all()
    assert [p["kv_blocks_per_replica"] for p in res.summary["pools"]] == [64, 4000]
    steps = res.steps
    assert res.summary["kv_cache"]["utilization_peak"] == pytest.approx(steps["kv_utilization"].max())
    assert res.summary["kv_cache"]["utilization_peak"] <= 1.0
    small = llmsim.run(scenario(decode={"num_blocks": 4000}, num_blocks=40))
    assert (small.requests["reject_reason"].str.startswith("prefill pool: needs 1000 tokens")).all()
    assert small.summary["rejected_by"] == {"prefill_pool.kv_capacity": 12}


def test_first_token_at_prefill_moves_the_transfer_into_tpot() -> None:
    """The same run with the first token streamed by the prefill instance (DistServe) or by the
    decode instance (vLLM's P/D): every request finishes at the same time; its TTFT is shorter by
    its transfer, its TPOT longer."""
    link = {"kind": "custom", "bandwidth_gbps": 5.0}  # a 1,000-token prompt's KV: ~26 ms
    at_prefill = llmsim.run(scenario(link, engine={"preset": "vllm-v1", "first_token_at_prefill": True})).requests
    at_decode = llmsim.run(scenario(link)).requests
    pd.testing.assert_series_equal(at_prefill["finish_s"], at_decode["finish_s"])
    assert (at_prefill["transfer_s"] > 0.01).all()
    pd.testing.assert_series_equal(
        at_prefill["ttft_s"] + at_prefill["transfer_s"], at_decode["ttft_s"], check_names=False, rtol=1e-9
    )
    assert (at_prefill["tpot_s"] > at_decode["tpot_s"]).all()
