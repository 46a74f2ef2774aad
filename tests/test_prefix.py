"""Prefix caching end to end: hits skip exactly the cached blocks' prefill; reuse from real and
synthetic prefixes shows up in the summary."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import llmsim
from llmsim.kvcache import BlockManager, chain_hashes
from llmsim.request import Request
from llmsim.scenario import scenario_from_dict
from llmsim.schedulers import SchedulerConfig, make_scheduler

ROOT = Path(__file__).resolve().parent.parent


def test_hit_skips_exactly_the_cached_blocks() -> None:
    kv = BlockManager(200, 16, prefix_caching=True)
    sched = make_scheduler("chunked", SchedulerConfig(chunk_tokens=4096), kv)
    shared = list(range(10))  # 10 ids x 16 tokens = 160 shared tokens
    a = Request(0, 0.0, 200, 2)
    b = Request(1, 0.0, 250, 2)
    a.prefix_chain = chain_hashes(shared + [100, 101, 102], 16, 16, a.prompt_tokens)
    b.prefix_chain = chain_hashes(shared + [200, 201, 202, 203, 204, 205], 16, 16, b.prompt_tokens)
    sched.add(a)
    plan = sched.schedule()
    assert plan.prefill == [(a, 200)]
    sched.complete(plan, 1.0)
    sched.add(b)
    plan = sched.schedule()
    chunk = dict((r.id, c) for r, c in plan.prefill)[1]
    assert b.cached_tokens == 160 and chunk == 250 - 160
    assert b.block_ids[:10] == a.block_ids[:10]
    assert plan.shape().prefill_kv_tokens >= 250  # the chunk still attends to the cached prefix


def test_system_prompts_are_reused_and_prewarm_helps_the_first_requests() -> None:
    def run(prewarm: bool) -> dict:
        sc = scenario_from_dict(
            {
                "name": "sys",
                "model": "llama-3.1-8b",
                "hardware": "H100-SXM",
                "policy": {"kind": "chunked", "chunk_tokens": 2048},
                "kv_cache": {"prefix_caching": True},
                "workload": {
                    "kind": "poisson",
                    "rate_rps": 4,
                    "num_requests": 40,
                    "prompt_tokens": {"dist": "uniform", "min": 50, "max": 300},
                    "output_tokens": {"dist": "fixed", "value": 8},
                    "system_prompts": {"count": 2, "tokens": 1024, "prewarm": prewarm},
                },
                "output": {"steps": "none"},
            },
            "sys.yaml",
            ROOT,
        )
        return llmsim.run(sc).summary

    cold, warm = run(False), run(True)
    # 40 requests, 2 prompts of 1024 tokens: at most 2 misses cold, none warm
    assert cold["prefix_cache"]["saved_prefill_tokens"] >= 38 * 1024
    assert warm["prefix_cache"]["saved_prefill_tokens"] == 40 * 1024
    assert warm["p99_ttft_ms"] <= cold["p99_ttft_ms"]


def _chat(requests: int, turns: int, output_tokens: int, **kv_cache: object):  # type: ignore[no-untyped-def]
    """A chat scenario on one H100: ``requests`` conversations of ``turns`` 200-token messages."""
    data = {
        "name": "chat",
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "kv_cache": {"prefix_caching": True, **kv_cache},
        "workload": {
            "kind": "poisson",
            "rate_rps": 1,
            "num_requests": requests,
            "prompt_tokens": {"dist": "fixed", "value": 200},
            "output_tokens": {"dist": "fixed", "value": output_tokens},
            "conversations": {"turns": turns, "think_s": 5},
        },
        "output": {"steps": "none"},
    }
    return scenario_from_dict(data, "chat.yaml", ROOT)


def test_multi_turn_conversations_reuse_their_history() -> None:
    s = llmsim.run(_chat(6, 3, 20)).summary
    assert s["requests"]["finished"] == 18
    assert s["prefix_cache"]["hit_rate"] > 0.3


def test_a_later_turn_hits_the_blocks_of_the_previous_answer() -> None:
    """vLLM caches the full blocks of generated tokens, so turn 2 of a chat hits turn 1's prompt
    and answer. By hand, one chat of 200-token messages and 40-token answers (content ids of 16
    tokens): turn 1 computes 200 + 40 - 1 tokens of KV (the last token's never), 14 full blocks;
    turn 2's prompt is turn 1's 13 message ids + 3 answer ids + its own message, so it hits 14
    blocks (224 tokens), where the prompt's own 12 full blocks (192) were all that was cached."""
    sc = _chat(1, 2, 40, block_tokens=16)
    fast, exact = llmsim.run(sc), llmsim.run(sc, exact_steps=True)
    assert fast.requests["cached_tokens"].tolist() == [0, 224]
    # the fast path (a closed-form decode run up to the finish) registers the same blocks as step by step
    pd.testing.assert_frame_equal(fast.requests, exact.requests, check_exact=False, rtol=1e-9)


def test_mooncake_trace_replays_with_its_real_reuse() -> None:
    over = {"workload.trace.max_requests": 40, "cluster.replicas": 1, "output.steps": "none"}
    on = llmsim.run(ROOT / "scenarios/mooncake_prefix.yaml", over).summary
    off = llmsim.run(ROOT / "scenarios/mooncake_prefix.yaml", {**over, "kv_cache.prefix_caching": False}).summary
    assert on["prefix_cache"]["saved_prefill_tokens"] > 0 and on["tokens"]["cached"] > 0
    assert off["tokens"]["cached"] == 0
    assert on["mean_ttft_ms"] < off["mean_ttft_ms"]


def test_prewarm_block_size_describes_the_prewarm_only():
    """`kv_cache.prewarm_block_tokens` is the size of the prewarmed ids; requests keep their
    workload's (regression: the requests' chains were built with the prewarm's size)."""

    def saved(**kv: object) -> int:
        spec = {
            "name": "prewarm-size",
            "model": "llama-3.1-8b",
            "hardware": "H100-SXM",
            "kv_cache": {"block_tokens": 16, "prefix_caching": True, **kv},
            "workload": {
                "kind": "poisson",
                "rate_rps": 2.0,
                "num_requests": 12,
                "shared_prefix": {"num_groups": 2, "num_prompts_per_group": 3, "system_prompt_len": 160,
                                  "question_len": 40, "output_len": 4},
            },
        }  # fmt: skip
        res = llmsim.run(scenario_from_dict(spec, "test", ROOT))
        return res.summary["prefix_cache"]["saved_prefill_tokens"]

    plain = saved()
    assert plain > 0
    assert saved(prewarm=[[7, 8, 9]], prewarm_block_tokens=64) == plain  # ids no request shares


def _mooncake(tmp_path: Path, rows: list[tuple[int, int]]) -> Path:
    """A Mooncake trace of (input_length, output_length) rows, each prompt its own 512-token ids."""
    import json

    lines, next_id = [], 0
    for k, (p, o) in enumerate(rows):
        ids = list(range(next_id, next_id + -(-p // 512)))
        next_id += len(ids)
        lines.append(json.dumps({"timestamp": 1000 * k, "input_length": p, "output_length": o, "hash_ids": ids}))
    path = tmp_path / "mc.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _mooncake_run(path: Path, router: str = "round_robin") -> llmsim.Results:
    data = {
        "name": "mc",
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "cluster": {"router": router},
        "kv_cache": {"prefix_caching": True},
        "policy": {"max_model_len": 8192},
        "workload": {"kind": "trace", "trace": {"path": str(path), "format": "mooncake"}},
        "output": {"steps": "none"},
    }
    return llmsim.run(scenario_from_dict(data, "mc.yaml", ROOT))


def test_a_trace_whose_ids_chain_past_the_bound_is_refused_before_any_is_made(tmp_path, monkeypatch) -> None:
    """A Mooncake id names 512 tokens, 32 KV blocks of 16: the hashes the simulation chains from a
    trace's ids are held to MAX_PREFIX_BLOCKS (a 27 MB trace took 5.5 GB), counted over the
    requests max_model_len admits (the others are rejected as they arrive, never hashed)."""
    import pytest

    from llmsim.errors import UserError
    from llmsim.workload import limits

    monkeypatch.setattr(limits, "MAX_PREFIX_BLOCKS", 1_000)
    fits = [(4096, 16)] * 4  # 4 x 256 blocks: 1,024
    with pytest.raises(UserError, match=r"mc.yaml: the trace's content ids name 1,024 KV blocks of 16 tokens"):
        _mooncake_run(_mooncake(tmp_path, fits))
    rejected = [(4096, 16)] * 3 + [(1_000_000, 16)] * 3  # 768 blocks served; the long ones rejected
    req = _mooncake_run(_mooncake(tmp_path, rejected)).requests
    assert (req["status"] == "rejected").sum() == 3 and (req["status"] == "finished").sum() == 3
    # prefix_affinity routes a request by its prefix before a replica turns it away: all are hashed
    with pytest.raises(UserError, match=r"name 188,268 KV blocks"):
        _mooncake_run(_mooncake(tmp_path, rejected), router="prefix_affinity")


def test_prewarm_hashes_past_the_bound_are_refused_and_a_cache_takes_what_it_holds(monkeypatch) -> None:
    """kv_cache.prewarm is chained on every replica serving at the start: prefixes whose hashes on
    all of them pass MAX_PREFIX_BLOCKS are refused before any is made (4 KB of ids asked 11 GB of
    four replicas), and a replica chains a prefix only as far as its cache could take it, with the
    same cache as a whole chain leaves (BlockManager.prewarm_room)."""
    import pytest

    from llmsim.errors import UserError
    from llmsim.workload import limits

    quick = ROOT / "scenarios/quickstart.yaml"
    base = {"kv_cache.prefix_caching": True, "kv_cache.prewarm_block_tokens": 512, "workload.num_requests": 5}
    monkeypatch.setattr(limits, "MAX_PREFIX_BLOCKS", 100)
    monkeypatch.setattr("llmsim.build.MAX_PREFIX_BLOCKS", 100)
    with pytest.raises(UserError, match=r"kv_cache.prewarm: 64 KV blocks of 16 tokens on each of 2 replicas, 128"):
        llmsim.run(quick, {**base, "kv_cache.prewarm": [[1, 2]]})
    for room_blocks in (3, 10, 40):
        whole, capped = (
            BlockManager(room_blocks, 16, prefix_caching=True),
            BlockManager(room_blocks, 16, prefix_caching=True),
        )
        for prefix in ([1, 2, 3], [1, 2, 9], [4]):  # (the second shares its first two ids)
            whole.prewarm(chain_hashes(prefix, 64, 16, 1 << 62))
            capped.prewarm(chain_hashes(prefix, 64, 16, capped.prewarm_room() * 16))
        assert whole.free_queue_state() == capped.free_queue_state()
