"""A server's history: `vllm bench serve` runs one after another against one server leave their
prompts in its prefix cache, and the random dataset repeats its prompts with the seed
(workload.prompts: vllm_bench, llmsim.run server_cache, `llmsim bench --after`)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

import llmsim
from llmsim.build import build_workload
from llmsim.cli import main
from llmsim.errors import UserError
from llmsim.kvcache import UNCACHED, BlockManager
from llmsim.scenario import scenario_from_dict

SERVE = "vllm serve Qwen/Qwen3-8B --max-model-len 4096"


def _scenario(n: int, seed: int = 0, prompt: dict | None = None, **workload: object) -> object:
    return scenario_from_dict(
        {
            "name": "history",
            "seed": seed,
            "model": "qwen3-8b",
            "hardware": "H100-SXM",
            "policy": {"kind": "vllm"},
            "workload": {
                "kind": "poisson",
                "rate_rps": 2.0,
                "num_requests": n,
                "arrivals": "vllm_bench",
                "prompts": "vllm_bench",
                "prompt_tokens": prompt or {"dist": "fixed", "value": 1024},
                "output_tokens": {"dist": "fixed", "value": 32},
                **workload,
            },
            "output": {"steps": "none"},
        },
        "history.yaml",
        None,
    )


def test_one_seed_draws_the_same_first_prompts_whatever_the_count():
    """Fixed lengths: numpy draws nothing for them, so prompt i is the seed's i-th whatever
    --num-prompts is; another seed shares nothing; random lengths tie the prompts to the count."""
    small, large = build_workload(_scenario(8)), build_workload(_scenario(16))
    assert large.block_hashes[:8] == small.block_hashes
    assert len(small.block_hashes[0]) == 1024 // 16
    other = build_workload(_scenario(8, seed=1))
    assert not {h for p in other.block_hashes for h in p} & {h for p in small.block_hashes for h in p}
    uniform = {"dist": "uniform", "min": 900, "max": 1100}
    a, b = build_workload(_scenario(8, prompt=uniform)), build_workload(_scenario(16, prompt=uniform))
    assert a.block_hashes[0][0] != b.block_hashes[0][0]
    assert build_workload(_scenario(8, prompt=uniform)).block_hashes == a.block_hashes  # (deterministic)


def test_a_shared_prefix_is_the_seed_s():
    prefixed = build_workload(_scenario(4, system_prompts={"count": 1, "tokens": 160}))
    firsts = {p[9] for p in prefixed.block_hashes}  # the prefix's last block: all the same
    assert len(firsts) == 1 and prefixed.prompt_tokens[0] == 1024 + 160
    other = build_workload(_scenario(4, seed=2, system_prompts={"count": 1, "tokens": 160}))
    assert other.block_hashes[0][0] != prefixed.block_hashes[0][0]


def test_a_run_alone_hits_nothing():
    """Distinct prompts (vLLM 0.30's vllm bench sends no test request unless told to) never hit."""
    assert llmsim.run(_scenario(16)).summary["prefix_cache"]["hit_rate"] == 0.0


def test_a_later_run_hits_what_an_earlier_one_left():
    first = llmsim.run(_scenario(8), keep_server_cache=True)
    cache = first.server_cache
    assert cache is not None and len(cache.queues) == 1
    assert (cache.deployment.model, cache.deployment.block_tokens, cache.deployment.pools) == (
        "qwen3-8b",
        16,
        (("main", "H100-SXM", 1, 1, 1),),
    )
    # every block the run freed, in order: prompts' cached, answers' not; each request's partly
    # filled last block went to the head of the queue and the next one to allocate took it (vLLM's
    # BlockPool.free_blocks, kv_cache.reuse_partial_first): one of the eight is left
    queue = cache.queues[0]
    assert len(queue) == 8 * (1024 + 32) // 16 - 7 and sum(h != UNCACHED for h in queue) == 8 * 1024 // 16
    later = llmsim.run(_scenario(16), server_cache=cache)
    assert later.summary["prefix_cache"]["hit_rate"] == pytest.approx(8 * 1008 / (16 * 1024))
    assert later.server_cache is None  # (kept only when asked)
    cold = llmsim.run(_scenario(16)).summary
    assert later.summary["mean_ttft_ms"] < cold["mean_ttft_ms"]
    again = llmsim.run(_scenario(16), server_cache=cache).summary
    assert again["mean_ttft_ms"] == later.summary["mean_ttft_ms"]  # deterministic
    assert llmsim.run(_scenario(8)).server_cache is None  # (kept only when asked)


def test_a_full_cache_evicts_the_oldest_prompts_first():
    """A cache that holds 12 of the 16 prompts keeps the most recent: a third run of the first
    run's 8 prompts (the oldest) finds fewer of them than a run of the second's would."""
    kv = {"num_blocks": 12 * 64 + 8}  # (room for the running requests' answers too)
    first = _scenario(8).model_dump() | {"kv_cache": kv}
    second = _scenario(8, seed=1).model_dump() | {"kv_cache": kv}
    cache = llmsim.run(first, keep_server_cache=True).server_cache
    cache = llmsim.run(second, server_cache=cache, keep_server_cache=True).server_cache
    assert cache is not None and len(cache.queues[0]) <= 12 * 64 + 8
    old = llmsim.run(first, server_cache=cache).summary["prefix_cache"]["hit_rate"]
    recent = llmsim.run(second, server_cache=cache).summary["prefix_cache"]["hit_rate"]
    assert old < 0.5 < recent


def test_a_cache_carries_over_only_to_the_same_deployment():
    cache = llmsim.run(_scenario(4), keep_server_cache=True).server_cache
    base = _scenario(4).model_dump()
    for change, fragment in [
        ({"model": "qwen3-14b"}, "its model 'qwen3-8b', this run's 'qwen3-14b'"),
        ({"kv_cache": {"block_tokens": 32}}, "its kv_cache.block_tokens 16, this run's 32"),
        ({"kv_cache": {"dtype": "fp8"}}, "its kv_cache.dtype 'bf16', this run's 'fp8'"),
        ({"cluster": {"replicas": 2}}, "its pools (name, hardware, replicas, tp, pp) (('main', 'H100-SXM', 1, 1, 1),)"),
        ({"cluster": {"tp": 2}}, "its pools"),
        ({"hardware": "H200"}, "its pools"),
    ]:
        with pytest.raises(UserError, match=re.escape(fragment)):
            llmsim.run(base | change, server_cache=cache)
    with pytest.raises(UserError, match="server_cache must be an earlier run's Results.server_cache, got list"):
        llmsim.run(_scenario(4), server_cache=[[1, 2]])
    forged = dataclasses.replace(cache, queues=(("a", "b"),))  # (a hand-made cache)
    with pytest.raises(UserError, match="server_cache.queues: expected the block hashes an earlier run left"):
        llmsim.run(_scenario(4), server_cache=forged)
    with pytest.raises(UserError, match="keep_server_cache must be true or false, got str"):
        llmsim.run(_scenario(4), keep_server_cache="no")


def test_a_run_without_content_leaves_an_empty_cache():
    """A run whose prompts carry no content tracks no blocks: what it evicted is not known, so the
    next run starts cold, not on the cache from before it."""
    cache = llmsim.run(_scenario(8), keep_server_cache=True).server_cache
    blind = _scenario(8).model_dump()
    blind["workload"]["prompts"] = "llmsim"
    after = llmsim.run(blind, server_cache=cache, keep_server_cache=True).server_cache
    assert after is not None and after.queues == ((),)
    assert llmsim.run(_scenario(8), server_cache=after).summary["prefix_cache"]["hit_rate"] == 0.0


def test_a_smaller_cache_keeps_the_most_recently_freed_blocks():
    kv = BlockManager(num_blocks=4, block_tokens=16, prefix_caching=True)
    kv.restore([11, UNCACHED, 12, 13, 14, 15])
    assert kv.free_queue_state() == [12, 13, 14, 15]
    assert kv.prewarm([21, 22]) == 2  # (a prewarm after a history takes the history's oldest blocks)
    assert kv.free_queue_state() == [14, 15, 21, 22]
    assert kv.prewarm([31, 32, 33]) == 2 and kv.free_queue_state() == [21, 22, 31, 32]
    assert kv.prewarm([41]) == 0  # (never another prewarm's blocks)


def test_a_prewarmed_shared_prefix_is_the_seed_s():
    system = {"count": 1, "tokens": 512, "prewarm": True}
    s = llmsim.run(_scenario(8, system_prompts=system)).summary["prefix_cache"]
    assert s["saved_prefill_tokens"] == 8 * 512


@pytest.mark.parametrize(
    "workload, fragment",
    [
        ({"conversations": {"turns": 2}}, "one prompt a request"),
        ({"system_prompts": {"count": 2, "tokens": 64}}, "count 1, share 1"),
        ({"classes": {"a": {"share": 1.0}}}, "one prompt a request"),
    ],
)
def test_the_scenario_refuses_what_vllm_bench_prompts_cannot_be(workload, fragment):
    with pytest.raises(UserError, match=fragment):
        _scenario(4, **workload)


def test_a_trace_refuses_the_key():
    with pytest.raises(UserError, match="a trace brings its own prompts"):
        scenario_from_dict(
            {
                "name": "t",
                "model": "qwen3-8b",
                "hardware": "H100-SXM",
                "workload": {"kind": "trace", "prompts": "vllm_bench", "trace": {"path": "x.csv"}},
            },
            "t.yaml",
            None,
        )


def _bench(capsys, *extra: str) -> tuple[int, str, str]:
    code = main(
        ["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--bench", "--num-prompts 32 --request-rate 4", *extra]
    )
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bench_after_carries_the_cache_and_says_so(capsys):
    code, out, _ = _bench(
        capsys, "--after", "--num-prompts 16 --request-rate 1", "--after", "--num-prompts 8 --save-result"
    )
    assert code == 0
    assert "history  2 earlier runs on the server (--after), simulated first: 49.2% of this run's prompt tokens" in out
    assert "         ignored there: --save-result" in out
    code, other, _ = _bench(capsys, "--after", "--num-prompts 16 --seed 3")
    assert code == 0 and "0.0% of this run's prompt tokens found cached" in other
    code, off, _ = _bench(capsys, "--after", "--num-prompts 16", "--set", "kv_cache.prefix_caching=false")
    assert code == 0 and "not simulated: the prefix cache is off, so it leaves nothing" in off
    code, seeds, _ = _bench(capsys, "--after", "--num-prompts 16 --seed 7", "--set", "seed=0")
    assert code == 0 and "--set seed: applied to them too" in seeds and "49.2%" in seeds


def test_bench_decides_prompt_content_after_set(capsys):
    """The content limit reads the run as --set leaves it, and an --after run past it leaves an
    empty cache and says so."""
    code, out, _ = _bench(capsys, "--set", "workload.num_requests=70000")  # (70,000 x 1,024 tokens: 4.5M blocks)
    assert code == 0 and "prompts  drawn without their content: 70,000 prompts of up to 1,024 tokens" in out
    code, out, _ = _bench(
        capsys, "--after", "--num-prompts 16", "--after", "--num-prompts 70000 --random-output-len 1 --seed 5"
    )
    assert code == 0 and "0.0% of this run's prompt tokens" in out
    assert "--after #2: no content, the cache after it taken as empty (70,000 prompts" in out


def test_bench_json_tells_the_history(capsys):
    code, out, _ = _bench(capsys, "--after", "--num-prompts 16 --random-input-len 8000", "--json")
    history = json.loads(out)["history"]
    assert code == 0 and history["not_simulated"] is None
    assert history["runs"][0]["run"] == "--after" and history["runs"][0]["completed"] == 0


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (
            ["--after", "--dataset-name prefix_repetition"],
            "--after --dataset-name prefix_repetition: a server's history is replayed for the random",
        ),
        (["--after", "--num-prompts 0"], "--after: --num-prompts 0"),
        (["--after", "--model Qwen/Qwen3-32B"], "--after --model: the run is of Qwen/Qwen3-32B"),
        (["--after", "--num-prompts 4", "--scenario-out", "x.yaml"], "a scenario cannot carry the server's history"),
        (["--after", "  "], "--after '  ': an empty command line"),
        (["--after", "--num-prompts 4", "--after", "--num-promts 4"], "--after #2: --num-promts 4: not a flag"),
        (["--after", "--num-prompts 4", "--after", "--request-rate 1e-9"], "--serve/--after #2/--set"),
    ],
)
def test_bench_after_refuses_with_one_message(extra, fragment, capsys):
    code, _, err = _bench(capsys, *extra)
    assert code == 2 and fragment in err and "Traceback" not in err and err.count("\n") == 1
