"""End-to-end behaviour of the foundation: scenario -> simulation -> results."""

from __future__ import annotations

import math

import numpy as np
import pytest

import llmsim
from llmsim.build import build_model, build_pools
from llmsim.costmodel import BatchShape, CostModel, batch_shape
from llmsim.hardware import load_profile
from llmsim.models import CATALOG, PUBLISHED_PARAMS
from llmsim.scenario import scenario_from_dict


def scenario(**over: object) -> llmsim.Scenario:
    base: dict = {
        "name": "t",
        "seed": 1,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "cluster": {"replicas": 1},
        "policy": {"kind": "traditional"},
        "workload": {
            "kind": "poisson",
            "rate_rps": 2.0,
            "num_requests": 60,
            "prompt_tokens": {"dist": "uniform", "min": 64, "max": 1024},
            "output_tokens": {"dist": "uniform", "min": 1, "max": 128},
        },
        "slo": {"ttft_s": 1.0, "tbt_s": 0.2},
    }
    for key, value in over.items():
        node = base
        parts = key.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return scenario_from_dict(base, "test.yaml", __import__("pathlib").Path("."))


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_counts_match_published(name: str) -> None:
    published, _source = PUBLISHED_PARAMS[name]
    assert CATALOG[name].total_params() == pytest.approx(published, rel=0.01)


def test_mixtral_active_params_match_published() -> None:
    # Mistral's blog: 12.9B active parameters per token [MIXTRAL-COUNTS]
    assert CATALOG["mixtral-8x7b"].active_params() == pytest.approx(12.9e9, rel=0.01)


def test_kv_bytes_per_token_follow_gqa() -> None:
    # 2 (K,V) x layers x kv_heads x head_dim x 2 bytes
    assert CATALOG["llama-2-7b"].kv_bytes_per_token() == 2 * 32 * 32 * 128 * 2
    assert CATALOG["llama-3.1-70b"].kv_bytes_per_token() == 2 * 80 * 8 * 128 * 2
    assert CATALOG["llama-3.1-70b"].kv_bytes_per_token("fp8") == 2 * 80 * 8 * 128


def test_single_request_ttft_is_prefill_time() -> None:
    sc = scenario(
        workload={
            "kind": "all_at_once",
            "num_requests": 1,
            "prompt_tokens": {"dist": "fixed", "value": 2000},
            "output_tokens": {"dist": "fixed", "value": 50},
        }
    )
    res = llmsim.run(sc)
    cost = build_pools(sc, build_model(sc))[0].cost
    row = res.requests.iloc[0]
    # one prompt alone: TTFT is exactly the cost model's prefill step (no queueing), plus the
    # engine's delay to the client (vllm-v1: its API server and stream, engine.output_delay_s)
    delay = sc.engine_spec.output_delay_s
    assert delay == 0.010
    assert row["ttft_s"] == pytest.approx(cost.prefill_time(2000) + delay, rel=1e-9)
    # and E2E adds exactly 49 decode steps at growing context
    decode = sum(cost.decode_time([2000 + i]) for i in range(49))
    assert row["e2e_s"] == pytest.approx(cost.prefill_time(2000) + decode + delay, rel=1e-9)


@pytest.mark.parametrize("policy", ["traditional", "chunked", "static"])
def test_tokens_conserved_and_kv_within_capacity(policy: str) -> None:
    sc = scenario(policy={"kind": policy, "max_num_seqs": 32}, kv_cache={"memory_fraction": 0.25})
    res = llmsim.run(sc)
    req = res.requests
    fin = req[req["status"] == "finished"]
    assert len(fin) == len(req)
    assert (fin["generated_tokens"] == fin["output_tokens"]).all()
    assert res.summary["tokens"]["output"] == int(req["output_tokens"].sum())
    cap = res.summary["pools"][0]["kv_blocks_per_replica"]
    assert res.steps["kv_blocks_used"].max() <= cap
    # timestamps ordered
    assert (fin["first_token_s"] >= fin["arrival_s"]).all()
    assert (fin["finish_s"] >= fin["first_token_s"]).all()


def test_tight_kv_forces_preemption_but_keeps_tokens() -> None:
    # Llama-2-7B has 512 KiB of KV per token: at 20% of an A100-40GB's memory only a few thousand
    # tokens fit, so long decodes must preempt and recompute.
    sc = scenario(
        model="llama-2-7b",
        hardware="A100-40GB",
        kv_cache={"memory_fraction": 0.45},
        workload={
            "kind": "all_at_once",
            "num_requests": 40,
            "prompt_tokens": {"dist": "fixed", "value": 512},
            "output_tokens": {"dist": "fixed", "value": 400},
        },
    )
    res = llmsim.run(sc)
    req = res.requests
    assert req["preemptions"].sum() > 0
    assert (req["generated_tokens"] == req["output_tokens"]).all()


def test_overload_flips_verdict() -> None:
    light = llmsim.run(scenario(workload__rate_rps=0.5))
    heavy = llmsim.run(scenario(workload__rate_rps=200.0, workload__num_requests=400))
    assert light.summary["saturation"]["verdict"] == "stable"
    assert heavy.summary["saturation"]["verdict"] == "overloaded"


def test_same_seed_identical_requests_csv(tmp_path) -> None:
    a = llmsim.run(scenario()).requests.to_csv(index=False)
    b = llmsim.run(scenario()).requests.to_csv(index=False)
    c = llmsim.run(scenario(seed=2)).requests.to_csv(index=False)
    assert a == b
    assert a != c


def test_decode_is_bandwidth_bound_and_grows_with_context() -> None:
    cm = CostModel(CATALOG["llama-3.1-8b"], load_profile("H100-SXM"))
    short = cm.decode_time([512] * 32)
    long = cm.decode_time([4096] * 32)
    assert long > short
    # the extra time is the extra KV bytes over the achievable bandwidth (+ negligible FLOPs)
    extra_bytes = 32 * (4096 - 512) * CATALOG["llama-3.1-8b"].kv_bytes_per_token()
    eff = cm.hw.bandwidth * cm.hw.efficiency.memory_fraction.value
    assert long - short == pytest.approx(extra_bytes / eff, rel=0.05)


def test_prefill_attention_grows_with_tokens_squared_times_layers() -> None:
    model = CATALOG["llama-3.1-8b"]
    cm = CostModel(model, load_profile("H100-SXM"))

    def attn_s(n: int, layers: int) -> float:
        m = model.with_(num_layers=layers)
        c = CostModel(m, cm.hw)
        return c.breakdown(batch_shape([(n, 0)], []))["attention_prefill"]

    # attention FLOPs ~ n^2/2: doubling n at fixed layers ~4x; doubling layers 2x
    assert attn_s(8192, 32) / attn_s(4096, 32) == pytest.approx(4.0, rel=0.02)
    assert attn_s(4096, 64) / attn_s(4096, 32) == pytest.approx(2.0, rel=1e-9)
    # and prefill is compute-bound: the GEMMs' time ~ FLOPs / achievable peak
    t = cm.priced(batch_shape([(4096, 0)], []))
    gemms = [p for p in t if p.op.kind == "gemm" and p.op.m == 4096]  # LM head samples 1 row
    assert len(gemms) == 4
    assert all(p.bound == "compute" for p in gemms)


def test_empty_batch_costs_nothing() -> None:
    cm = CostModel(CATALOG["gpt2"], load_profile("L4"))
    assert cm.step_time(BatchShape()) == 0.0
    assert math.isfinite(cm.prefill_time(100))


def test_trace_replay_slices_and_scales() -> None:
    sc = scenario(
        workload={
            "kind": "trace",
            "trace": {
                "path": str(__import__("pathlib").Path(__file__).parent / "data" / "azure_sample.csv"),
                "format": "azure",
                "speedup": 2.0,
                "max_requests": 20,
            },
        }
    )
    res = llmsim.run(sc)
    arr = res.requests["arrival_s"].to_numpy()
    assert len(arr) == 20
    assert arr[0] == 0.0
    assert np.all(np.diff(arr) >= 0)


def test_empirical_lengths_read_the_token_columns_only(tmp_path) -> None:  # noqa: ANN001
    """An Azure trace drawn on for empirical lengths gives the counts the full loader gives, and
    its date-time column is not read: a bad one does not stop a scenario that never uses it."""
    from llmsim.errors import UserError
    from llmsim.workload.traces import load_trace, trace_lengths

    sample = __import__("pathlib").Path(__file__).parent / "data" / "azure_sample.csv"
    prompt, output = trace_lengths(sample, "azure")
    whole = load_trace(sample, "azure")
    assert np.array_equal(prompt, whole.prompt_tokens) and np.array_equal(output, whole.output_tokens)
    bad = tmp_path / "t.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nnot a time,5,6\n2023-11-16 18:15:46,7,8\n")
    assert trace_lengths(bad, "azure")[0].tolist() == [5, 7]
    with pytest.raises(UserError, match="TIMESTAMP"):
        load_trace(bad, "azure")  # a trace replayed for its arrivals still checks them
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nx,0,6\n")
    with pytest.raises(UserError, match="prompt tokens must be >= 1"):
        trace_lengths(bad, "azure")
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nx,5,6,7\n")
    with pytest.raises(UserError, match="more fields than the header"):
        trace_lengths(bad, "azure")


def test_static_batching_waits_for_whole_batch() -> None:
    sc = scenario(
        policy={"kind": "static", "max_num_seqs": 4},
        workload={
            "kind": "all_at_once",
            "num_requests": 8,
            "prompt_tokens": {"dist": "fixed", "value": 128},
            "output_tokens": {"dist": "uniform", "min": 5, "max": 60},
        },
    )
    req = llmsim.run(sc).requests
    first, second = req.iloc[:4], req.iloc[4:]
    # the second batch starts only after the longest request of the first has finished
    assert second["first_token_s"].min() > first["finish_s"].max()


def test_a_bad_csv_row_is_named_by_its_file_line_past_blank_lines(tmp_path) -> None:
    """pandas skips blank lines, so row index + 2 named line 3 for a bad value on line 5."""
    from llmsim.errors import UserError
    from llmsim.workload.traces import load_trace

    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n\n\n1,100,x\n")
    with pytest.raises(UserError, match=r"t\.csv: row 5: column 'output_tokens'"):
        load_trace(path, "generic", 16)


def test_a_row_with_a_field_too_many_is_named_in_llmsims_words(tmp_path) -> None:
    from llmsim.errors import UserError
    from llmsim.workload.traces import load_trace

    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,100,10,5\n")
    with pytest.raises(UserError, match=r"t\.csv: line 3: 4 fields where the header names 3") as err:
        load_trace(path, "generic", 16)
    assert "C error" not in str(err.value)


def test_a_jsonl_trace_may_start_with_a_byte_order_mark(tmp_path) -> None:
    """As the CSV formats and vllm bench serve's result file take it (it was 'not valid JSON')."""
    from llmsim.workload.traces import load_trace

    path = tmp_path / "t.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"input_toks": 3, "output_toks": 2, "arrival_time_ns": 0}\n')
    assert load_trace(path, "llmservingsim", 16).prompt_tokens.tolist() == [3]
