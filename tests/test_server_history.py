"""A server's history: `vllm bench serve` runs one after another against one server leave their
prompts in its prefix cache, and the random dataset repeats its prompts with the seed
(workload.prompts: vllm_bench, api.run kv_state, `llmsim bench --after`)."""

from __future__ import annotations

import pytest

import llmsim
from llmsim.build import build_workload
from llmsim.cli import main
from llmsim.errors import UserError
from llmsim.kvcache import UNCACHED
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
    first = llmsim.run(_scenario(8), kv_state=[])
    assert first.kv_state is not None and len(first.kv_state) == 1
    queue = first.kv_state[0]  # every block the run freed, in order: prompts' cached, answers' not
    assert len(queue) == 8 * (1024 + 32) // 16 and sum(h != UNCACHED for h in queue) == 8 * 1024 // 16
    later = llmsim.run(_scenario(16), kv_state=first.kv_state).summary
    assert later["prefix_cache"]["hit_rate"] == pytest.approx(8 * 1008 / (16 * 1024))
    cold = llmsim.run(_scenario(16)).summary
    assert later["mean_ttft_ms"] < cold["mean_ttft_ms"]
    again = llmsim.run(_scenario(16), kv_state=first.kv_state).summary
    assert again["mean_ttft_ms"] == later["mean_ttft_ms"]  # deterministic
    assert llmsim.run(_scenario(8)).kv_state is None  # (kept only for a run given a history)


def test_a_full_cache_evicts_the_oldest_prompts_first():
    """A cache that holds 12 of the 16 prompts keeps the most recent: the first run's 8 (oldest) go
    before the second's; a third run of the first 8 prompts hits fewer of them than the second."""
    kv = {"num_blocks": 12 * 64 + 8}  # (room for the running requests' answers too)
    base = _scenario(8).model_dump()
    base["kv_cache"] = kv
    second = _scenario(16, seed=1).model_dump() | {"kv_cache": kv}
    state = llmsim.run(base, kv_state=[]).kv_state
    state = llmsim.run(second, kv_state=state).kv_state
    assert state is not None and len(state[0]) <= 12 * 64 + 8
    hit = llmsim.run(base, kv_state=state).summary["prefix_cache"]["hit_rate"]
    assert hit < 0.5


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
    code, out, _ = _bench(capsys, "--after", "--num-prompts 16 --request-rate 1", "--after", "--num-prompts 8")
    assert code == 0
    assert "history  2 earlier runs on the server (--after), its prefix cache carried: 49.2% of this run" in out
    code, other, _ = _bench(capsys, "--after", "--num-prompts 16 --seed 3")
    assert code == 0 and "0.0% of this run's prompt tokens hit" in other


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--after", "--dataset-name sharegpt"], "--after --dataset-name sharegpt: llmsim draws only the random"),
        (["--after", "--num-prompts 0"], "--after: --num-prompts 0"),
        (["--after", "--model Qwen/Qwen3-32B"], "--after --model: the run is of Qwen/Qwen3-32B"),
        (["--after", "--num-prompts 4", "--scenario-out", "x.yaml"], "a scenario cannot carry the server's history"),
    ],
)
def test_bench_after_refuses_with_one_message(extra, fragment, capsys):
    code, _, err = _bench(capsys, *extra)
    assert code == 2 and fragment in err and "Traceback" not in err and err.count("\n") == 1
