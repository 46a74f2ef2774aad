"""Device memory as the engine sees it (issue #16 item 4): each GPU profile's capacity is the
total CUDA / ROCm / XLA reports, with its source, and KV capacity follows each engine's own rule
(vLLM: a fraction of the total; TensorRT-LLM: a fraction of what is free after the weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.build import build_model, build_pools
from llmsim.engine import vllm_defaults
from llmsim.hardware import load_profile
from llmsim.scenario import scenario_from_dict

GPUS = ["H100-SXM", "H200", "B200", "A100-SXM-80GB", "A100-40GB", "L4", "L40S", "RTX-4090", "RTX-PRO-6000", "MI300X"]


@pytest.mark.parametrize("name", GPUS)
def test_capacity_is_what_the_device_reports_and_says_where_it_was_read(name: str) -> None:
    hw = load_profile(name)
    src = hw.memory_capacity_bytes.source
    assert any(k in src for k in ("CUDA", "rocm-smi", "torch")), src
    assert "github.com" in src or "meta.json" in src  # a public record (or our own run), not a datasheet
    # the device reports less than its marketing size in decimal GB, more than in GiB minus 5%
    assert 0.9 < hw.memory_bytes / 2**30 / float(name_gib(name)) < 1.0


def name_gib(name: str) -> int:
    return {"H100-SXM": 80, "H200": 141, "B200": 180, "A100-SXM-80GB": 80, "A100-40GB": 40, "L4": 24, "L40S": 48}.get(
        name, {"RTX-4090": 24, "RTX-PRO-6000": 96, "MI300X": 192}.get(name, 0)
    )


def kv_tokens(d: dict) -> int:
    sc = scenario_from_dict(d, "test", Path("."))
    pool = build_pools(sc, build_model(sc))[0]
    return pool.kv_blocks * sc.kv_cache.block_tokens


def trtllm_h200_batch(**kv_cache) -> dict:
    """TensorRT-LLM's published H200 static batch: Llama-2-70B FP8 on one H200, batch 192, input
    128, output 2048 (2,941 tok/s: data/validation/published/points.yaml,
    trtllm07-blog-llama2-70b-h200-tp1-fp8-bs192-128-2048). TensorRT-LLM sizes its KV cache as
    free_gpu_memory_fraction (0.9) of the memory left after the weights and activation buffers,
    here with an FP8 cache."""
    return {
        "name": "trtllm-h200",
        "model": {"name": "llama-2-70b", "weight_dtype": "fp8", "act_dtype": "fp8"},
        "hardware": "H200",
        # in-flight batching with TensorRT-LLM's default max_num_tokens of 8192 (trtllm-build),
        # which sizes the activation buffers it reserves
        "policy": {"kind": "chunked", "max_num_seqs": 192, "chunk_tokens": 8192, "max_batch_tokens": 8192},
        "kv_cache": {"dtype": "fp8", **kv_cache},
        "workload": {
            "kind": "all_at_once",
            "num_requests": 192,
            "prompt_tokens": {"dist": "fixed", "value": 128},
            "output_tokens": {"dist": "fixed", "value": 2048},
        },
    }


def test_a_trtllm_sized_static_batch_that_fits_on_the_device_fits() -> None:
    needed = 192 * (128 + 2048)
    assert kv_tokens(trtllm_h200_batch(memory_fraction=0.9, memory_fraction_of="free")) >= needed
    # the engine's rule matters: 90% of the *total* leaves ~8 GB less for the cache
    total = kv_tokens(trtllm_h200_batch(memory_fraction=0.9))
    free = kv_tokens(trtllm_h200_batch(memory_fraction=0.9, memory_fraction_of="free"))
    assert total < free


def test_the_datasheet_capacity_would_not_have_held_it() -> None:
    """With H200's datasheet 141 GB (what llmsim used before) the batch did not fit (issue #16):
    the ~9 GB the device reports beyond it hold (9 GB x 0.9) / 160 KiB per token of FP8 KV."""
    needed = 192 * (128 + 2048)
    got = kv_tokens(trtllm_h200_batch(memory_fraction=0.9, memory_fraction_of="free"))
    kv_bytes_per_token = 80 * 8 * 128 * 2 * 1  # Llama-2-70B: layers x KV heads x head_dim x (K, V) x fp8
    extra = (load_profile("H200").memory_bytes - 141e9) * 0.9 / kv_bytes_per_token
    assert got - extra < needed


@pytest.mark.parametrize(
    ("name", "tokens", "seqs"),
    [
        ("H100-SXM", 8192, 1024),
        ("H200", 8192, 1024),
        ("B200", 16384, 1024),
        ("A100-SXM-80GB", 2048, 256),
        ("L40S", 2048, 256),
    ],
)
def test_vllm_defaults_follow_the_reported_gib(name: str, tokens: int, seqs: int) -> None:
    """vLLM picks max_num_batched_tokens / max_num_seqs from the GiB the device reports
    (vllm/engine/arg_utils.py): >= 160 GiB 16384, >= 70 GiB (not A100) 8192, else 2048."""
    policy, _ = vllm_defaults(load_profile(name))
    assert (policy["max_batch_tokens"], policy["max_num_seqs"]) == (tokens, seqs)
