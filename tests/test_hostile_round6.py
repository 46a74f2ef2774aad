"""Findings of the sixth hostile round (2026-12-07): combinations accepted and priced as no real
deployment runs them."""

from __future__ import annotations

import pytest

import llmsim
from llmsim.errors import UserError

BASE = {
    "name": "r6",
    "seed": 1,
    "model": "llama-3.1-8b",
    "hardware": "H100-SXM",
    "workload": {
        "kind": "poisson",
        "rate_rps": 1,
        "num_requests": 10,
        "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 8},
    },
}
SPEC = {"method": "draft", "draft_model": "llama-3.2-1b", "k": 4, "acceptance": 0.8}


def _with(**changes) -> dict:
    out = {**BASE, **changes}
    if "workload" in changes:
        out["workload"] = {**BASE["workload"], **changes["workload"]}
    return out


@pytest.mark.parametrize(
    "changes, fragment",
    [
        # the drafting went unpriced in a pipeline's steps (TPOT 2.0 ms against 4.0 ms at pp 1)
        ({"speculative": SPEC, "cluster": {"pp": 2}}, r"pipeline parallelism \(pp > 1\) is not modelled"),
        # one sequence's draft and verify were priced for 64 sequences
        ({"speculative": SPEC, "workload": {"parallel_samples": 64}}, "several sequences"),
        # vllm/config/lora.py MaxLoRARanks
        ({"lora": {"max_lora_rank": 1000}}, "lora.max_lora_rank: Input should be 1, 8, 16"),
        # a second KV cache in the DRAM that holds the first
        (
            {
                "hardware": "EPYC-9654",
                "kv_cache": {"prefix_caching": True, "offload": [{"tier": "cpu", "capacity_gb": 10}]},
            },
            "a cpu tier on EPYC-9654, a CPU",
        ),
        # no NVLink between a TPU and an A100 (the link was priced at the TPU's ICI rate)
        (
            {
                "policy": {"kind": "disaggregated"},
                "cluster": {
                    "prefill_pool": {"hardware": "TPU-v6e", "replicas": 1, "tp": 1},
                    "decode_pool": {"hardware": "A100-SXM-80GB", "replicas": 1, "tp": 1},
                    "kv_link": {"kind": "nvlink"},
                },
            },
            "nvlink joins GPUs of one NVLink domain",
        ),
    ],
)
def test_an_unmodelled_or_impossible_combination_is_refused(changes, fragment) -> None:
    with pytest.raises(UserError, match=fragment):
        llmsim.run(_with(**changes))


def test_a_decode_pool_takes_prompts_past_its_step_budget() -> None:
    """Every 12,000-token prompt was rejected by the decode pool's max_batch_tokens (8,192), though
    it never prefills: vLLM's P/D connectors count the transferred KV as computed."""
    res = llmsim.run(
        _with(
            policy={"kind": "disaggregated", "prefill_pool_policy": "chunked", "chunk_tokens": 2048},
            cluster={
                "prefill_pool": {"hardware": "H100-SXM", "replicas": 1, "tp": 1},
                "decode_pool": {"hardware": "H100-SXM", "replicas": 1, "tp": 1},
                "kv_link": {"kind": "rdma"},
            },
            workload={"prompt_tokens": {"dist": "fixed", "value": 12000}},
        )
    )
    assert (res.requests["status"] == "finished").all()
