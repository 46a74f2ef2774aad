"""The event loop around the schedulers: routing, steps.csv columns, swap pricing, activation
memory, request classes and determinism."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import llmsim
from llmsim.kvcache import chain_hashes
from llmsim.request import Request
from llmsim.scenario import scenario_from_dict
from llmsim.sim import route

ROOT = Path(__file__).resolve().parent.parent


def scenario(**over: object) -> llmsim.Scenario:
    base: dict = {
        "name": "core",
        "seed": 4,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "cluster": {"replicas": 1},
        "policy": {"kind": "chunked", "chunk_tokens": 512},
        "workload": {
            "kind": "poisson",
            "rate_rps": 6,
            "num_requests": 40,
            "prompt_tokens": {"dist": "uniform", "min": 100, "max": 3000},
            "output_tokens": {"dist": "uniform", "min": 10, "max": 120},
        },
        "output": {"steps": "all"},
    }
    for key, value in over.items():
        node = base
        *parts, last = key.split("__")
        for p in parts:
            node = node.setdefault(p, {})
        node[last] = value
    return scenario_from_dict(base, "core.yaml", ROOT)


def test_same_seed_same_results() -> None:
    a, b = llmsim.run(scenario()), llmsim.run(scenario())
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)


def test_steps_record_kv_utilisation_and_fragmentation() -> None:
    steps = llmsim.run(scenario()).steps
    assert {"kv_utilization", "kv_fragmentation", "swap_s"} <= set(steps.columns)
    assert steps["kv_utilization"].max() > 0
    assert ((steps["kv_fragmentation"] >= 0) & (steps["kv_fragmentation"] < 1)).all()


def test_swap_preemption_is_priced_by_the_host_link() -> None:
    # 16 GB of weights on a 17.6 GB budget: ~20k tokens of KV, so long decodes preempt
    tight = {
        "kv_cache": {"memory_fraction": 0.22, "preemption": "swap"},
        "workload__rate_rps": 20,
        "workload__output_tokens": {"dist": "uniform", "min": 300, "max": 600},
    }
    res = llmsim.run(scenario(**tight))
    assert res.summary["requests"]["preemptions"] > 0
    assert res.summary["requests"]["finished"] == 40
    assert (res.requests["generated_tokens"] == res.requests["output_tokens"]).all()
    swaps = res.steps[res.steps["swap_s"] > 0]
    assert len(swaps) > 0 and res.summary["preemption"]["swap_s"] > 0
    # a swap of t tokens costs at least t x KV bytes/token over PCIe Gen5 x16 (64 GB/s)
    assert swaps["swap_s"].min() > 16 * 131072 / 64e9


def test_chunking_bounds_the_activation_peak() -> None:
    long = {"workload__prompt_tokens": {"dist": "fixed", "value": 6000}, "workload__num_requests": 4}
    seqs = {"max_num_seqs": 256}  # the logits buffer grows with it (vLLM's default on an H100 is 1024)
    chunked = llmsim.run(scenario(policy={"kind": "chunked", "chunk_tokens": 512, **seqs}, **long)).summary["memory"]
    trad = llmsim.run(scenario(policy={"kind": "traditional", **seqs}, **long)).summary["memory"]
    assert chunked["max_step_tokens"] <= 512
    assert trad["max_step_tokens"] >= 6000
    assert chunked["activation_peak_bytes"] < trad["activation_peak_bytes"] / 4


def test_routers() -> None:
    res = llmsim.run(scenario(cluster={"replicas": 3, "router": "round_robin"}))
    assert sorted(res.requests["replica"].value_counts().tolist()) == [13, 13, 14]

    class Fake:
        def __init__(self, index: int, cached: int, outstanding: int) -> None:
            self.index, self.outstanding_tokens = index, outstanding
            kv = {
                "cached_prefix_blocks": lambda _s, chain, limit=-1: cached,
                "utilization": cached / 100,
                "block_tokens": 16,
            }
            self.kv = type("KV", (), kv)()
            self.waiting = []
            self.num_waiting = 0

        def sync(self) -> None:  # no decode run in flight
            pass

    reps = [Fake(0, 0, 10), Fake(1, 50, 700), Fake(2, 1, 5)]
    r = Request(0, 0.0, 100, 1)
    r.prefix_chain = chain_hashes([1, 2], 16, 16, 32)
    assert route(reps, "prefix_affinity", 0, r).index == 1  # 700 tokens queued, 800 of them cached
    assert route(reps, "least_outstanding", 0, r).index == 2
    assert route(reps, "kv_aware", 0, r).index == 0


def test_request_classes_get_their_own_slos() -> None:
    sc = scenario(
        workload__classes={
            "chat": {"share": 0.7, "output_tokens": {"dist": "fixed", "value": 50}},
            "batch": {"share": 0.3, "prompt_tokens": {"dist": "fixed", "value": 4000}},
        },
        slo={"ttft_s": 0.05, "classes": {"batch": {"ttft_s": 30.0}}},
    )
    res = llmsim.run(sc)
    classes = res.summary["classes"]
    assert set(classes) == {"chat", "batch"}
    assert classes["batch"]["attainment"] == 1.0  # a loose SLO for the batch class
    assert (res.requests[res.requests["class"] == "batch"]["prompt_tokens"] == 4000).all()


def test_pipeline_runs_micro_batches_and_reports_bubbles() -> None:
    sc = scenario(cluster={"replicas": 1, "pp": 4}, workload__rate_rps=12)
    res = llmsim.run(sc)
    pipe = res.summary["pipeline"]
    assert pipe["stages"] == 4 and len(pipe["stage_utilization"]) == 4
    assert all(0 < u <= 1 for u in pipe["stage_utilization"]) and pipe["bubble_s"] > 0
    assert (res.requests["generated_tokens"] == res.requests["output_tokens"]).all()
    # micro-batches overlap: some step starts before the previous one has landed
    st = res.steps.sort_values("start_s")
    ends = (st["start_s"] + st["duration_s"]).cummax().shift()
    assert (st["start_s"] < ends - 1e-12).any()
