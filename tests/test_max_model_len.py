"""Requests longer than the engine's context are rejected, one by one, as vLLM's server answers
them (400: ``max_tokens`` > ``max_model_len`` - prompt), never served (issue #19 item 3)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import llmsim
from llmsim.errors import UserError
from llmsim.results import rejection_kind, requests_line
from llmsim.scenario import scenario_from_dict

# gpt2's context is 1,024 tokens (n_positions in its config.json)
ROWS = [(0.0, 1000, 24), (0.1, 1000, 25), (0.2, 1030, 1), (0.3, 500, 13), (0.4, 8, 4)]


def run(tmp_path: Path, **policy) -> llmsim.Results:
    trace = tmp_path / "trace.csv"
    pd.DataFrame(ROWS, columns=["arrival_s", "prompt_tokens", "output_tokens"]).to_csv(trace, index=False)
    d = {
        "name": "ctx",
        "model": "gpt2",
        "hardware": "H100-SXM",
        "policy": {"kind": "chunked", **policy},
        "workload": {"kind": "trace", "trace": {"path": str(trace), "format": "generic"}},
    }
    return llmsim.run(scenario_from_dict(d, "test", tmp_path))


def test_prompt_plus_output_past_the_context_is_rejected(tmp_path: Path) -> None:
    res = run(tmp_path)
    req = res.requests.set_index("id")
    # exactly 1,024 fits (vLLM's check is max_tokens > max_model_len - prompt)
    assert list(req["status"]) == ["finished", "rejected", "rejected", "finished", "finished"]
    assert req.loc[1, "reject_reason"] == "prompt of 1000 tokens + 25 output tokens exceeds max_model_len=1024"
    assert res.summary["rejected_by"] == {"max_model_len": 2}
    assert "2 rejected (2 max_model_len)" in requests_line(res.summary)


def test_policy_max_model_len_lowers_the_limit(tmp_path: Path) -> None:
    res = run(tmp_path, max_model_len=512)
    assert list(res.requests["status"]) == ["rejected", "rejected", "rejected", "rejected", "finished"]
    assert "rejected_by" in res.summary and res.summary["requests"]["rejected"] == 4


def test_a_limit_past_the_models_context_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"policy.max_model_len: 2,048 tokens is longer than the context of gpt2"):
        run(tmp_path, max_model_len=2048)


def test_no_rejection_no_breakdown(tmp_path: Path) -> None:
    res_ok = llmsim.run(
        scenario_from_dict(
            {
                "name": "ok",
                "model": "gpt2",
                "hardware": "H100-SXM",
                "workload": {
                    "kind": "all_at_once",
                    "num_requests": 3,
                    "prompt_tokens": {"dist": "fixed", "value": 8},
                    "output_tokens": {"dist": "fixed", "value": 2},
                },
            },
            "ok",
            tmp_path,
        )
    )
    assert "rejected_by" not in res_ok.summary


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("prompt of 1000 tokens + 25 output tokens exceeds max_model_len=1024", "max_model_len"),
        ("needs 5000 tokens of KV cache (313 blocks), capacity is 100 blocks", "kv_capacity"),
        ("prompt of 9000 tokens exceeds max_batch_tokens=8192", "max_batch_tokens"),
        ("queue full (max_queue=64)", "queue_full"),
        ("decode pool: needs 5000 tokens of KV cache (313 blocks), capacity is 100 blocks", "decode_pool.kv_capacity"),
        ("something new", "other"),
    ],
)
def test_rejection_kinds(reason: str, kind: str) -> None:
    assert rejection_kind(reason) == kind


def test_an_offline_batch_runs_until_its_last_request_is_done(tmp_path: Path) -> None:
    """all_at_once is an offline batch: no default horizon (the arrival processes keep 2 x last
    arrival + 600 s), so a batch that takes an hour to serve is not cut at 600 s."""
    d = {
        "name": "offline",
        "model": "llama-3.1-8b",
        "hardware": "Xeon-8480+",
        "policy": {"kind": "chunked", "max_num_seqs": 4},
        "workload": {
            "kind": "all_at_once",
            "num_requests": 64,
            "prompt_tokens": {"dist": "fixed", "value": 64},
            "output_tokens": {"dist": "fixed", "value": 2000},
        },
        "output": {"steps": "none"},
    }
    res = llmsim.run(scenario_from_dict(d, "offline", tmp_path))
    assert res.summary["duration"] > 600
    assert res.summary["requests"]["finished"] == 64 and res.summary["horizon_s"] is None


@pytest.mark.parametrize(
    ("cfg", "length"),
    [
        ({"max_position_embeddings": 4096}, 4096),
        ({"n_positions": 1024}, 1024),  # GPT-2
        ({"max_position_embeddings": 8192, "seq_length": 4096}, 4096),  # the smallest key wins
        ({}, 2048),  # vLLM's fallback
        # Qwen2.5 with YaRN x4 (its model card's recipe): 4 x the original 32k
        (
            {
                "max_position_embeddings": 32768,
                "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
            },
            131072,
        ),
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}, 8192),
        # Llama 3.1: max_position_embeddings is already the stretched length
        ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 131072),
    ],
)
def test_the_context_is_derived_from_a_config_as_vllm_derives_it(cfg: dict, length: int) -> None:
    from llmsim.models import hf_context_len

    assert hf_context_len(cfg) == length


def test_allow_long_max_model_len_runs_past_a_rope_models_context(tmp_path: Path) -> None:
    """vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (and TensorRT-LLM's max_seq_len): a RoPE model runs
    past max_position_embeddings; a learned position table cannot."""
    trace = tmp_path / "long.csv"
    pd.DataFrame([(0.0, 4000, 200)], columns=["arrival_s", "prompt_tokens", "output_tokens"]).to_csv(trace, index=False)

    def go(model: str, **policy) -> llmsim.Results:
        d = {
            "name": "long",
            "model": model,
            "hardware": "H100-SXM",
            "policy": {"kind": "chunked", **policy},
            "workload": {"kind": "trace", "trace": {"path": str(trace), "format": "generic"}},
        }
        return llmsim.run(scenario_from_dict(d, "test", tmp_path))

    # llama-2-7b's context is 4,096: 4,200 tokens are rejected, then served once allowed
    assert list(go("llama-2-7b").requests["status"]) == ["rejected"]
    with pytest.raises(UserError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        go("llama-2-7b", max_model_len=4200)
    res = go("llama-2-7b", max_model_len=4200, allow_long_max_model_len=True)
    assert list(res.requests["status"]) == ["finished"]
    with pytest.raises(UserError, match="learns its positions \\(a table for 1,024 tokens\\)"):
        go("gpt2", max_model_len=2048, allow_long_max_model_len=True)
