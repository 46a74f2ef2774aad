"""Speculative decoding: tokens per verify step, pricing, and the reported speedup."""

from __future__ import annotations

from pathlib import Path

import pytest

import llmsim
from llmsim.kvcache import BlockManager
from llmsim.request import Request
from llmsim.scenario import scenario_from_dict
from llmsim.schedulers import SchedulerConfig, make_scheduler
from llmsim.schedulers.base import SpecConfig


def decode_steps(acceptance: float, k: int, output: int) -> tuple[int, Request, list]:
    kv = BlockManager(100, 16)
    cfg = SchedulerConfig(speculative=SpecConfig(k=k, acceptance=[acceptance] * k))
    sched = make_scheduler("chunked", cfg, kv)
    r = Request(0, 0.0, 20, output)
    sched.add(r)
    plans, t = [], 0.0
    while sched.has_work():
        plan = sched.schedule()
        t += 1.0
        sched.complete(plan, t)
        plans.append(plan)
    assert kv.used == 0 and r.generated == output
    return sum(1 for p in plans if p.decode), r, plans


@pytest.mark.parametrize("k", [1, 3, 5])
def test_full_acceptance_emits_k_plus_one_tokens_per_step(k: int) -> None:
    steps, r, _ = decode_steps(1.0, k, output=1 + 4 * (k + 1))  # first token comes from the prefill
    assert steps == 4 and r.spec_accepted == 4 * k


def test_zero_acceptance_emits_one_token_per_step() -> None:
    steps, r, _ = decode_steps(0.0, 4, output=13)
    assert steps == 12 and r.spec_accepted == 0


def test_verify_step_is_priced_as_k_plus_one_tokens() -> None:
    _, _, plans = decode_steps(1.0, 3, output=9)
    shape = next(p for p in plans if p.decode).shape()
    assert shape.prefill_tokens == 4 and shape.decode_seqs == 0


def scenario(spec: dict, model: str = "llama-3.1-70b") -> llmsim.Scenario:
    return scenario_from_dict(
        {
            "name": "spec",
            "model": model,
            "hardware": "H100-SXM",
            "cluster": {"tp": 4},
            "policy": {"kind": "chunked"},
            "workload": {
                "kind": "all_at_once",
                "num_requests": 4,
                "prompt_tokens": {"dist": "fixed", "value": 200},
                "output_tokens": {"dist": "fixed", "value": 60},
            },
            "speculative": spec,
            "output": {"steps": "none"},
        },
        "spec.yaml",
        Path("."),
    )


def test_speedup_reported_and_ordered_by_acceptance() -> None:
    good = llmsim.run(scenario({"draft_model": "llama-3.1-8b", "k": 4, "acceptance": 0.9})).summary["speculative"]
    bad = llmsim.run(scenario({"draft_model": "llama-3.1-8b", "k": 4, "acceptance": 0.0})).summary["speculative"]
    mtp = llmsim.run(scenario({"method": "mtp", "k": 2, "acceptance": [0.9, 0.7]})).summary["speculative"]
    assert bad["tokens_per_step"] == 1.0 and bad["speedup"] < 1.0  # drafting is pure overhead
    # ~3.9 tokens per (4 x 8B draft + 70B verify) step: about 1.4x by the roofline
    assert good["tokens_per_step"] > 3.0 and good["speedup"] > 1.2
    assert good["draft_s"] > 0 and good["verify_s"] > 0
    assert mtp["speedup"] > 1.0 and mtp["tokens_per_step"] <= 3.0


def test_draft_weights_shrink_the_kv_cache() -> None:
    from llmsim.build import build_model, build_pools

    sc = scenario({"draft_model": "llama-3.1-8b"})
    plain = scenario_from_dict(sc.model_dump(exclude={"speculative", "base_dir"}), "p.yaml", Path("."))
    with_draft = build_pools(sc, build_model(sc))[0].kv_blocks
    without = build_pools(plain, build_model(plain))[0].kv_blocks
    assert with_draft < without


def test_a_request_whose_lookahead_cannot_fit_is_rejected_not_stalled() -> None:
    # 100 blocks of 16 tokens: a 20-token prompt with 9 outputs fits without speculation, but each
    # verify step also reserves k = 2,000 proposed tokens, which no step can hold. vLLM's policy
    # (and the traditional one) re-admit a preempted request only when its whole recomputed prompt
    # fits, in a step that preempted nobody: it cycled for ever (no_stall) and is rejected instead.
    kv = BlockManager(100, 16)
    cfg = SchedulerConfig(speculative=SpecConfig(k=2000, acceptance=[0.5] * 2000))
    for kind in ("vllm", "traditional"):
        reason = make_scheduler(kind, cfg, BlockManager(100, 16)).rejection_reason(Request(0, 0.0, 20, 10))
        assert reason.startswith("needs 2029 tokens of KV cache (127 blocks, 2000 of them the last verify"), kind
    # the chunked policy's recompute samples a token each time, so it finishes: not rejected
    assert make_scheduler("chunked", cfg, kv).rejection_reason(Request(0, 0.0, 20, 10)) == ""
    plain = make_scheduler("vllm", SchedulerConfig(), BlockManager(100, 16))
    assert plain.rejection_reason(Request(0, 0.0, 20, 10)) == ""


@pytest.mark.parametrize(("policy", "finished"), [("chunked", 5), ("vllm", 0), ("traditional", 0)])
def test_a_lookahead_no_step_can_hold_finishes_or_is_rejected_end_to_end(policy: str, finished: int) -> None:
    """k = 1e5 (inside the model's 131,072-token context: a larger k is refused up front) on a
    100-block cache, invariants checked: the chunked policy serves every request (by preempting
    and recomputing), the others reject them; none stalls."""
    sc = {
        "name": "huge-k",
        "seed": 3,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "policy": {"kind": policy, "chunk_tokens": 512, "max_num_seqs": 64},
        "kv_cache": {"block_tokens": 16, "num_blocks": 100},
        "speculative": {"method": "mtp", "k": 100_000, "acceptance": 1.0},
        "workload": {
            "kind": "poisson",
            "rate_rps": 2,
            "num_requests": 5,
            "prompt_tokens": {"dist": "fixed", "value": 20},
            "output_tokens": {"dist": "fixed", "value": 10},
        },
    }
    req = llmsim.run(sc).requests
    assert int((req["status"] == "finished").sum()) == finished
    assert int((req["status"] == "rejected").sum()) == 5 - finished


def test_a_draft_model_is_priced_with_its_own_attention_windows() -> None:
    """The draft's step over the verify step's rows uses the draft's windows (a sliding-window
    draft of a full-attention target reads at most its window), and the speedup's baseline is the
    same step without speculation, its prompt chunk included."""
    from llmsim.build import build_model, build_pools
    from llmsim.costmodel.ops import batch_shape
    from llmsim.schedulers.plan import BatchPlan
    from llmsim.stepcost import StepCost

    # (a target of the draft's vocabulary size, 32,000, as vLLM requires)
    sc = scenario({"draft_model": "mistral-7b", "k": 3}, model="llama-2-70b")
    pool = build_pools(sc, build_model(sc))[0]
    price = StepCost(pool, 0)
    plan = BatchPlan()
    rows = [Request(i, 0.0, 30000, 10) for i in range(4)]
    for r in rows:
        r.kv_tokens = r.prefilled = 30000
    chunk = Request(9, 0.0, 800, 10)
    plan.decode, plan.prefill, plan.spec_k = rows, [(chunk, 400)], 3
    _, _, draft_s = price.price(plan, plan.shape())
    window = pool.draft_cost.model.sliding_window
    assert window == 4096
    assert draft_s == pytest.approx(3 * pool.draft_cost.step_time(batch_shape([], [30000] * 4, window)))
    plain = pool.cost.step_time(batch_shape([(400, 0)], [30000] * 4))
    assert price.spec_base_s == pytest.approx(plain)
