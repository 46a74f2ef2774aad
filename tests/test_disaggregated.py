"""Disaggregated prefill/decode: KV bytes, transfer time inside TTFT, back-pressure, link use."""

from __future__ import annotations

from pathlib import Path

import pytest

import llmsim
from llmsim.models import get_model
from llmsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parent.parent


def scenario(link: dict | None = None, decode: dict | None = None, n: int = 12, **kv: object) -> llmsim.Scenario:
    return scenario_from_dict(
        {
            "name": "disagg",
            "seed": 2,
            "model": "llama-3.1-8b",
            "hardware": "H100-SXM",
            "cluster": {
                "prefill_pool": {"replicas": 1},
                "decode_pool": {"replicas": 1, **(decode or {})},
                "kv_link": link or {"kind": "rdma"},
            },
            "policy": {"kind": "disaggregated"},
            "kv_cache": dict(kv),
            "workload": {
                "kind": "poisson",
                "rate_rps": 4,
                "num_requests": n,
                "prompt_tokens": {"dist": "fixed", "value": 1000},
                "output_tokens": {"dist": "fixed", "value": 20},
            },
            "output": {"steps": "none"},
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
    gap = slow.summary["latency_s"]["ttft"]["p50"] - fast.summary["latency_s"]["ttft"]["p50"]
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


def test_heterogeneous_pools_scenario_runs() -> None:
    res = llmsim.run(ROOT / "scenarios/heterogeneous_pools.yaml", {"workload.num_requests": 40, "output.steps": "none"})
    pools = {p["name"]: p["hardware"] for p in res.summary["pools"]}
    assert pools == {"prefill": "H100-SXM", "decode": "A100-SXM-80GB"}
    assert res.summary["requests"]["finished"] == 40
