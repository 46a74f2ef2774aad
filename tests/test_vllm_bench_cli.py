"""`llmsim bench`: vLLM's own command lines (and a saved `vllm bench serve` result) as a scenario
(llmsim/vllmcli.py), the run printed as vllm bench serve prints its own, and the translation is the
one the 43 real vLLM 0.30 passes are scored through (benchmarks/vllm_gpu/bench_runs.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from script_module import load_script

from llmsim.build import build_model
from llmsim.cli import main
from llmsim.commands.bench import check_same_model
from llmsim.errors import UserError
from llmsim.scenario import scenario_from_dict
from llmsim.vllmcli import (
    RANDOM_TOKEN_ROUTING_EXPONENT,
    Bench,
    check_lengths,
    model_entry,
    parse_bench,
    parse_serve,
    scenario_dict,
    sent_requests,
    with_settings,
)
from llmsim.vllmresult import Result, load_result

ROOT = Path(__file__).resolve().parents[1]
SERVE = "vllm serve Qwen/Qwen3-8B --max-num-seqs 64 --port 8000"
BENCH = "vllm bench serve --random-input-len 256 --random-output-len 32 --num-prompts 40 --request-rate 8 --seed 3"


def bench_of(line: str) -> Bench:
    return parse_bench(line)[0]


def from_result(result: Result, bench: Bench) -> Bench:
    """What `llmsim bench` makes of a --bench line and a real run's result."""
    bench = with_settings(bench, result.settings, str(result.path))
    check_lengths(result, bench)
    return bench


def test_serve_flags_translate_as_the_docs_table_says():
    s = parse_serve(
        "vllm serve Qwen/Qwen3-30B-A3B -tp 2 --data-parallel-size 2 --enable-expert-parallel --enable-eplb "
        "--eplb-config '{\"num_redundant_experts\": 32}' --max_num_seqs 128 --max-num-batched-tokens=4096 "
        "--long-prefill-token-threshold 512 --long-prefill-token-threshold-adaptive --max-model-len 8192 "
        "--gpu-memory-utilization 0.85 "
        "--kv-cache-dtype fp8 --block-size 32 --no-enable-prefix-caching --max-cudagraph-capture-size 64 "
        "--no-async-scheduling --trust-remote-code --host 0.0.0.0"
    )
    d = scenario_dict("H100-SXM", s, Bench())
    assert d["model"] == "qwen3-30b-a3b"
    assert d["cluster"] == {
        "tp": 2,
        "replicas": 2,
        "router": "vllm_dp",
        "expert_parallel": True,
        "eplb": True,
        "redundant_experts": 32,
        "expert_routing_exponent": RANDOM_TOKEN_ROUTING_EXPONENT,  # (the random dataset's prompts)
    }
    assert d["policy"] == {
        "kind": "vllm",
        "max_num_seqs": 128,
        "chunk_tokens": 4096,
        "long_prefill_token_threshold": 512,
        "long_prefill_token_threshold_adaptive": True,
        "max_model_len": 8192,
    }
    assert d["kv_cache"] == {"memory_fraction": 0.85, "dtype": "fp8", "block_tokens": 32, "prefix_caching": False}
    assert d["engine"] == {
        "preset": "vllm-v1",
        "cuda_graph_sizes": [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64],
        "async_scheduling": False,
    }
    assert s.ignored == ["--host", "--trust-remote-code"]
    scenario_from_dict(d, "t", ROOT)  # a valid scenario


def test_precision_flags():
    fp8 = scenario_dict(
        "H100-SXM", parse_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct --quantization fp8"), Bench()
    )
    # a flag on a catalog model names the checkpoint format it asks about, resolved per device
    assert fp8["model"] == {"name": "llama-3.1-8b", "checkpoint": "fp8"}
    h100 = scenario_from_dict(fp8, "t", ROOT)
    assert (build_model(h100).weight_dtype, h100.model.act_dtype) == ("fp8", "fp8")
    awq = scenario_dict("H100-SXM", parse_serve("llama-3.1-8b -q awq_marlin"), Bench())
    assert awq["model"] == {"name": "llama-3.1-8b", "checkpoint": "awq"}
    assert build_model(scenario_from_dict(awq, "t", ROOT)).weight_dtype == "int4"
    gptq = scenario_dict("H100-SXM", parse_serve("llama-3.1-8b -q gptq"), Bench())
    assert gptq["model"] == {"name": "llama-3.1-8b", "checkpoint": "gptq-int4"}
    awq16 = scenario_dict("H100-SXM", parse_serve("llama-3.1-8b -q awq --dtype float16"), Bench())
    assert awq16["model"] == {"name": "llama-3.1-8b", "checkpoint": "awq", "act_dtype": "fp16"}
    # FP8 weights on a GPU without FP8 units: vLLM's Marlin kernel, weight-only; the H100's file
    # swept onto an A100 resolves there the same (it was refused: fp8 compute written in)
    a100 = scenario_dict("A100-SXM-80GB", parse_serve("llama-3.1-8b --quantization fp8"), Bench())
    assert a100["model"] == fp8["model"]
    for d in (a100, {**fp8, "hardware": "A100-SXM-80GB"}):
        sc = scenario_from_dict(d, "t", ROOT)
        assert (build_model(sc).weight_dtype, sc.model.act_dtype) == ("fp8", "bf16")
    half = scenario_dict("H100-SXM", parse_serve("llama-3.1-8b --dtype half --enforce-eager"), Bench())
    assert half["model"] == {"name": "llama-3.1-8b", "weight_dtype": "fp16", "act_dtype": "fp16"}
    assert half["cluster"]["cuda_graphs"] is False
    off = parse_serve('llama-3.1-8b --compilation-config \'{"cudagraph_mode": "NONE"}\'')
    assert off.enforce_eager


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("vllm serve llama-3.1-8b --speculative-config '{}'", "write a `speculative` section in a scenario"),
        ("vllm serve llama-3.1-8b --no-enable-chunked-prefill", "always chunks"),
        ("vllm serve llama-3.1-8b --frobnicate 3", "--frobnicate 3: not a flag llmsim reads"),
        (
            "vllm serve llama-3.1-8b --quantization bitsandbytes",
            "llmsim reads awq, awq_marlin, compressed-tensors, fp8",
        ),
        ("vllm serve llama-3.1-8b -tp 0", "-tp 0: expected 1 or more"),
        # vLLM's own --dtype choices: fp16 is not one; float32 is, but not modelled on a GPU
        ("vllm serve llama-3.1-8b --dtype fp16", "invalid choice: 'fp16'"),
        ("vllm serve llama-3.1-8b --dtype float32", "--dtype float32: vLLM takes it, but fp32 serving"),
        ("vllm serve llama-3.1-8b -pp 0", "-pp 0: expected 1 or more"),
        ("vllm serve llama-3.1-8b --gpu-memory-utilization 0", "above 0 and at most 1"),
        ("vllm serve llama-3.1-8b --num-gpu-blocks-override 1", "--num-gpu-blocks-override 1: expected 2 or more"),
        ("vllm serve llama-3.1-8b --num-redundant-experts 8", "without --enable-eplb"),
        ("vllm serve llama-3.1-8b --max-cudagraph-capture-size 1000000000", "expected 1 to 16,777,216"),
        (
            'vllm serve llama-3.1-8b -cc \'{"cudagraph_capture_sizes": ["a"]}\'',
            "cudagraph_capture_sizes: expected a list",
        ),
        (
            'vllm serve llama-3.1-8b --enable-eplb --eplb-config \'{"num_redundant_experts": "x"}\'',
            "expected 0 to 4096",
        ),
        ("vllm serve a --model b", "the model is given twice"),
        ("vllm serve llama-3.1-8b -tp two", "invalid int value: 'two'"),
        ("vllm serve", "no model"),
        (
            "vllm serve llama-3.1-8b --compilation-config '{nope'",
            "--compilation-config '{nope': not valid JSON (line 1)",
        ),
        ('vllm serve llama-3.1-8b -cc \'{"max_cudagraph_capture_size": ' + "9" * 5000 + "}'", "a number of more than"),
        ("vllm serve llama-3.1-8b -cc '" + "[" * 3000 + "]" * 3000 + "'", "nested too deeply"),
        ("vllm serve 'unclosed", "No closing quotation"),
    ],
)
def test_serve_refuses_what_it_cannot_read(line, fragment):
    with pytest.raises(UserError, match=None) as exc:
        parse_serve(line)
    assert fragment in str(exc.value)


def test_bench_defaults_and_random_lengths():
    b = bench_of("")
    assert (b.dataset_name, b.random_input_len, b.random_output_len, b.num_prompts, b.seed) == (
        "random",
        1024,
        128,
        1000,
        0,
    )
    assert math.isinf(b.request_rate) and b.metric_percentiles == [99.0] and b.given == frozenset()
    w = scenario_dict("H100-SXM", parse_serve(SERVE), bench_of(BENCH))["workload"]
    assert w == {
        "kind": "poisson",
        "prompts": "vllm_bench",  # (their content, as the seed draws it: tests/test_server_history.py)
        "num_requests": 40,
        "prompt_tokens": {"dist": "fixed", "value": 256},
        "output_tokens": {"dist": "fixed", "value": 32},
        "rate_rps": 8.0,
        "arrivals": "vllm_bench",
    }
    ratio = bench_of("--input-len 1000 --output-len 100 --random-range-ratio 0.5 --burstiness 4 --request-rate 2")
    w = scenario_dict("H100-SXM", parse_serve(SERVE), ratio)["workload"]
    assert w["prompt_tokens"] == {"dist": "uniform", "min": 500, "max": 1500}
    assert w["kind"] == "gamma" and w["cv"] == 0.5
    with pytest.raises(
        UserError,
        match="--dataset-name sonnet: llmsim draws the random, sharegpt, custom and prefix_repetition datasets'",
    ):
        scenario_dict("H100-SXM", parse_serve(SERVE), bench_of("--dataset-name sonnet"))
    with pytest.raises(UserError, match="--dataset-name sharegpt: needs --dataset-path"):
        scenario_dict("H100-SXM", parse_serve(SERVE), bench_of("--dataset-name sharegpt"))
    with pytest.raises(UserError, match="--random-range-ratio 1.0: expected a ratio from 0 to below 1"):
        bench_of("--random-range-ratio 1")


def test_random_token_prompts_route_alike_on_a_moe_model_only(tmp_path, capsys):
    """vllm bench's random dataset draws token ids at random, and sequences of those reach fewer
    experts a step (fitted, benchmarks/moe_routing.py): set for a MoE model's random-dataset run and
    said; a dense model, another dataset's requests, or a result file replayed without its dataset
    named keep 1; a --set value is shown as the user's."""
    moe = parse_serve("vllm serve Qwen/Qwen3-30B-A3B")
    assert (
        scenario_dict("H100-SXM", moe, Bench())["cluster"]["expert_routing_exponent"] == RANDOM_TOKEN_ROUTING_EXPONENT
    )
    assert "expert_routing_exponent" not in scenario_dict("H100-SXM", parse_serve(SERVE), Bench())["cluster"]
    replay = scenario_dict("H100-SXM", moe, bench_of("--dataset-name sharegpt"), trace_csv="sent.csv")
    assert "expert_routing_exponent" not in replay["cluster"]
    unnamed = scenario_dict("H100-SXM", moe, Bench(), trace_csv="sent.csv")  # (a JSON result names no dataset)
    assert "expert_routing_exponent" not in unnamed["cluster"]
    named = scenario_dict("H100-SXM", moe, bench_of("--dataset-name random"), trace_csv="sent.csv")
    assert named["cluster"]["expert_routing_exponent"] == RANDOM_TOKEN_ROUTING_EXPONENT
    args = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve Qwen/Qwen3-30B-A3B", "--bench", BENCH]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "routing  cluster.expert_routing_exponent 0.79: vllm bench's random-token prompts route alike\n" in out
    assert main([*args, "--set", "cluster.expert_routing_exponent=0.9"]) == 0
    assert "routing  cluster.expert_routing_exponent 0.9 (--set)\n" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pools"][0]["expert_routing_exponent"] == RANDOM_TOKEN_ROUTING_EXPONENT
    # a detailed result replayed: unnamed, independent and said so; named, set and not "ignored"
    path = _result(
        tmp_path,
        model_id="Qwen/Qwen3-30B-A3B",
        input_lens=[100, 200],
        output_lens=[10, 20],
        start_times=[0.0, 0.5],
        num_prompts=2,
        completed=2,
    )
    replayed = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve Qwen/Qwen3-30B-A3B", "--result", str(path)]
    assert main(replayed) == 0
    assert "exponent 1, independent: " in capsys.readouterr().out
    assert main([*replayed, "--bench", "--dataset-name random"]) == 0
    out = capsys.readouterr().out
    assert "exponent 0.79: vllm bench's random-token prompts" in out and "--dataset-name (the file's" not in out


def test_a_checkpoint_s_quantization_config_is_read_as_vllm_reads_it(tmp_path):
    cfg = json.loads((ROOT / "data" / "validation" / "vllm-gpu-bench" / "qwen3-16b-a3b.config.json").read_text())
    (tmp_path / "fp8").mkdir()
    (tmp_path / "fp8" / "config.json").write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "fp8"}}))
    d = scenario_dict("H100-SXM", parse_serve(f"vllm serve {tmp_path / 'fp8'}"), Bench())
    sc = scenario_from_dict({**d, "name": "q"}, "q", ROOT)  # (the checkpoint's precision, read as it loads)
    assert sc.model.act_dtype == "fp8" and build_model(sc).weight_dtype == "fp8"
    (tmp_path / "bnb").mkdir()
    (tmp_path / "bnb" / "config.json").write_text(
        json.dumps({**cfg, "quantization_config": {"quant_method": "bitsandbytes"}})
    )
    with pytest.raises(UserError, match="quantization_config.quant_method 'bitsandbytes': llmsim reads"):
        scenario_dict("H100-SXM", parse_serve(f"vllm serve {tmp_path / 'bnb'}"), Bench())
    # a 16-bit folder quantised online: its config names no format, so the GPU decides here
    (tmp_path / "bf16").mkdir()
    (tmp_path / "bf16" / "config.json").write_text(json.dumps(cfg))
    for gpu, model in [
        ("H100-SXM", {"weight_dtype": "fp8", "act_dtype": "fp8"}),
        ("A100-SXM-80GB", {"weight_dtype": "fp8"}),
    ]:
        d = scenario_dict(gpu, parse_serve(f"vllm serve {tmp_path / 'bf16'} --quantization fp8"), Bench())
        assert {k: v for k, v in d["model"].items() if k != "hf_config"} == model
        scenario_from_dict({**d, "name": "q"}, "q", ROOT)


def test_model_entry(tmp_path):
    assert model_entry("Qwen/Qwen3-8B")[0] == "qwen3-8b"
    assert model_entry("meta-llama/Llama-3.3-70B-Instruct") == (
        "llama-3.1-70b",
        "meta-llama/Llama-3.3-70B-Instruct -> catalog llama-3.1-70b (Llama 3.3 70B has Llama 3.1 70B's architecture)",
    )
    config = ROOT / "data" / "validation" / "vllm-gpu-bench" / "qwen3-16b-a3b.config.json"
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(config.read_text())
    assert model_entry(str(tmp_path / "ckpt"))[0] == {"hf_config": str((tmp_path / "ckpt" / "config.json").resolve())}
    with pytest.raises(UserError, match="model not in llmsim's catalog: acme/secret-7b; serve a folder"):
        model_entry("acme/secret-7b")
    with pytest.raises(UserError, match="a folder without a config.json"):
        model_entry(str(tmp_path))
    with pytest.raises(UserError, match="nope/config.json: file not found"):
        model_entry("nope/config.json")


def _result(tmp_path: Path, **extra) -> Path:
    """A result file in vllm bench serve's format (vllm/benchmarks/serve.py, `result_json`): the
    traffic settings, the figures, and with --save-detailed each request's lengths and send time."""
    data = {
        "date": "20261206-110000",
        "backend": "vllm",
        "model_id": "Qwen/Qwen3-8B",
        "num_prompts": 4,
        "request_rate": 2.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": 3.0,
        "completed": 3,
        "request_throughput": 1.0,
        "output_throughput": 40.0,
        "mean_ttft_ms": 30.0,
        "p99_ttft_ms": 60.0,
        "mean_tpot_ms": 8.0,
        **extra,
    }
    lens = extra.get("input_lens")
    if isinstance(lens, list):  # a detailed file lists every request sent, and completed counts the successes
        if "num_prompts" not in extra:
            data["num_prompts"] = len(lens)
        if "completed" not in extra:
            errors = extra.get("errors")
            ok = isinstance(errors, list) and len(errors) == len(lens)
            data["completed"] = sum(1 for e in errors if not e) if ok else len(lens)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    return path


def test_a_detailed_result_is_replayed_request_by_request(tmp_path):
    path = _result(
        tmp_path,
        input_lens=[100, 200, 300, 400],
        output_lens=[10, 0, 30, 40],
        start_times=[10.5, 11.0, 10.0, 12.0],
        errors=["", "timeout", "", ""],
    )
    res = load_result(path)
    assert res.sent.input_lens == [100, 300, 400] and res.sent.output_lens == [10, 30, 40]  # the failed one left out
    assert (res.sent.index, res.sent.count, res.sent.empty) == ([0, 2, 3], 4, 0)
    bench = from_result(res, bench_of("--seed 1"))
    assert bench.num_prompts == 4 and bench.request_rate == 2.0
    assert sent_requests(res, bench) == [(0.0, 300, 30), (0.5, 100, 10), (2.0, 400, 40)]
    # no send times (vLLM before 0.11), or a concurrency cap that held requests back: the client's
    # draws for all four requests, the failed one's left out (not closed up)
    res.sent.start_times = None
    times = [t for t, _, _ in sent_requests(res, bench)]
    from llmsim.workload.generators import vllm_bench_arrivals

    drawn = vllm_bench_arrivals(1, 2.0, 1.0, 4)
    assert times == [drawn[0], drawn[2], drawn[3]]
    # a rate the command line names wins over the file's (and over its send times)
    assert from_result(res, bench_of("--request-rate 5")).request_rate == 5
    # all at once: the file's order, not the prompts' lengths
    res.sent.input_lens = [300, 100, 200]
    at_once = from_result(res, bench_of("--request-rate inf"))
    assert [p for _, p, _ in sent_requests(res, at_once)] == [300, 100, 200]
    with pytest.raises(UserError, match=r"result.json: the run is of Qwen/Qwen3-8B, where --serve serves llama"):
        check_same_model(str(res.path), res.model_id, parse_serve("llama-3.1-8b"))
    check_same_model(str(res.path), res.model_id, parse_serve("qwen3-8b"))  # (the same catalog model, named otherwise)
    # the file's requests are its count: another --num-prompts is refused, the file's own taken
    with pytest.raises(UserError, match="--bench --num-prompts 9: .*result.json holds the 4 requests"):
        from_result(load_result(path), bench_of("--num-prompts 9"))
    assert from_result(load_result(path), bench_of("--num-prompts 4 --request-rate 2")).num_prompts == 4


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ({"request_rate": "fast"}, "request_rate: expected a finite number >= 0, got 'fast'"),
        ({"num_prompts": 2.5}, "num_prompts: expected a whole number"),
        ({"input_lens": [1, 2], "output_lens": [1]}, "output_lens: expected a list of 2 numbers"),
        ({"input_lens": [1, -2], "output_lens": [1, 1]}, "input_lens[1]: expected a whole number from 0 to 10,000,000"),
        ({"input_lens": [1, 2], "output_lens": [1, 1], "errors": ["", ""] * 2}, "errors: expected a list of 2"),
        ({"duration": -3.0}, "duration: expected a finite number >= 0"),
        ({"input_lens": [1], "output_lens": [0]}, "input_lens: no request completed"),
        ({"mean_ttft_ms": True}, "mean_ttft_ms: expected a finite number"),
        ({"request_rate": float("inf")}, "request_rate: expected a finite number >= 0, got inf"),
        ({"completed": 64.5}, "completed: expected a whole number"),
        ({"model_id": 7}, "model_id: expected the served model's name"),
    ],
)
def test_a_bad_result_file_is_named(tmp_path, extra, fragment):
    with pytest.raises(UserError) as exc:
        load_result(_result(tmp_path, **extra))
    assert fragment in str(exc.value) and "result.json" in str(exc.value)


def test_the_command_prints_vllm_bench_s_result_block(capsys):
    line = BENCH + " --metric-percentiles 50,99.9 --percentile-metrics ttft,tpot,itl,e2el"
    assert main(["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--bench", line]) == 0
    out = capsys.readouterr().out
    assert (
        "hardware H100-SXM x1\nmodel    Qwen/Qwen3-8B -> catalog qwen3-8b\nignored  --port (no effect on timing)" in out
    )
    assert "============ Serving Benchmark Result ============" in out
    assert "Successful requests:                     40        \n" in out
    assert "Request rate configured (RPS):           8.00      \n" in out
    for label in ("Mean TTFT (ms):", "P50 TPOT (ms):", "P99.9 ITL (ms):", "Median E2EL (ms):"):
        assert label in out, label
    assert "-----Time per Output Token (excl. 1st token)------" in out
    assert "accuracy validated against real vLLM on GPU runs of dense models" in out


def test_the_command_compares_and_writes_a_scenario_that_runs_the_same(tmp_path, capsys):
    result = _result(tmp_path, input_lens=[300, 200, 100], output_lens=[20, 30, 40], start_times=[0.0, 0.2, 0.9])
    out_yaml = tmp_path / "s.yaml"
    args = ["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--result", str(result), "--json"]
    assert main([*args, "--scenario-out", str(out_yaml), "--set", "seed=5"]) == 0
    summary = json.loads(capsys.readouterr().out)
    compared = {r["figure"]: r for r in summary["compared"]}
    assert set(compared) == {"duration", "completed", "request_throughput", "output_throughput"} | {
        "mean_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
    }
    assert compared["completed"]["llmsim"] == 3 and compared["completed"]["error"] == 0
    assert summary["total_input_tokens"] == 600 and summary["seed"] == 5
    # the scenario written beside its requests runs to the same figures with `llmsim run`
    data = yaml.safe_load(out_yaml.read_text())
    assert data["workload"]["trace"] == {"path": "s.requests.csv", "format": "generic"} and data["seed"] == 5
    assert (tmp_path / "s.requests.csv").read_text().splitlines()[1:] == ["0.0,300,20", "0.2,200,30", "0.9,100,40"]
    assert main(["run", str(out_yaml), "--out", str(tmp_path / "run"), "--json", "--no-report"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["mean_ttft_ms"] == summary["mean_ttft_ms"] and again["duration"] == summary["duration"]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--hardware", "H999"], "unknown hardware"),
        (["--serve", "vllm serve acme/x"], "model not in llmsim's catalog: acme/x"),
        (["--bench", "--num-prompts 0"], "--num-prompts 0: expected a whole number, 1 or more"),
        (["--result", ""], "--result '': expected a path"),
        (["--result", "/nonexistent.json"], "/nonexistent.json"),
        (["--set", "cluster.tp"], "expected KEY=VALUE"),
    ],
)
def test_the_command_refuses_bad_input_with_one_message(args, fragment, capsys):
    base = {"--hardware": "H100-SXM", "--serve": SERVE}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    assert main(["bench", *[x for kv in base.items() for x in kv]]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err and err.count("\n") == 1


def test_the_real_passes_are_scored_through_this_translation():
    """bench_runs.py builds each of the vLLM 0.30 passes' scenarios with scenario_dict, so the
    command lines of a pass given to `llmsim bench` make the scenario docs/validation.md scores."""
    runs = load_script("vllm_gpu_bench_runs_cli", ROOT / "benchmarks" / "vllm_gpu" / "bench_runs.py")
    checked = 0
    for run in runs.load_runs():
        if run["model"] in runs.DERIVED:  # (a derived config, named by the folder)
            continue
        server, b = run.get("server") or {}, run["bench"]
        serve = f"vllm serve {run['model']} -tp {run.get('tensor_parallel_size') or 1}"
        for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "gpu_memory_utilization"):
            if server.get(key):
                serve += f" --{key} {str(server[key]).split()[0]}"
        if server.get("compilation_config"):
            serve += f" --compilation-config '{server['compilation_config']}'"
        line = (
            f"--random-input-len {b['random_input_len']} --random-output-len {b['random_output_len']} "
            f"--num-prompts {b['num_prompts']} --request-rate {b['request_rate']} --seed {b.get('seed') or 0} "
            f"--burstiness {b.get('burstiness') or 1.0} --metric-percentiles 90,99"
        )
        if b.get("max_concurrency"):
            line += f" --max-concurrency {b['max_concurrency']}"
        mine = scenario_dict(runs.hardware(run), parse_serve(serve), bench_of(line), name="x")
        theirs = runs.scenario_dict(run, logged_kv=False)
        theirs["name"] = "x"
        assert scenario_from_dict(mine, "a", ROOT).model_dump() == scenario_from_dict(theirs, "b", ROOT).model_dump()
        checked += 1
    assert checked >= 35


def test_the_docs_example_result_is_the_real_pass_s_figures():
    """docs/examples/vllm-bench-h100-qwen3-8b-rate1.json holds the figures the real pass printed
    (data/validation/vllm-gpu-bench/runs.yaml), in the result file's layout, and nothing else."""
    runs = yaml.safe_load((ROOT / "data" / "validation" / "vllm-gpu-bench" / "runs.yaml").read_text())["runs"]
    (run,) = [r for r in runs if r["id"] == "h100-vllm-kv/kvs1h/bf16/rate1"]
    res = load_result(ROOT / "docs" / "examples" / "vllm-bench-h100-qwen3-8b-rate1.json")
    printed = run["results"]
    renamed = {
        "duration": "duration_s",
        "completed": "successful_requests",
        "total_output_tokens": "total_generated_tokens",
    }
    renamed |= {
        "max_output_tokens_per_s": "peak_output_throughput",
        "max_concurrent_requests": "peak_concurrent_requests",
    }
    for key, value in res.figures.items():
        assert value == printed[renamed.get(key, key)], key
    assert len(res.figures) == 9 + sum(k.endswith("_ms") for k in printed)
    assert (res.settings["num_prompts"], res.settings["request_rate"], res.model_id) == (64, 1.0, "Qwen/Qwen3-8B")
    assert run["source"]["commit"] in json.loads(res.path.read_text())["label"]


PRINTOUT = """INFO 12-06 11:00:00 [__init__.py:216] Automatically detected platform cuda.
Namespace(subparser='bench', bench_type='serve', dispatch_function=<function BenchmarkServingSubcommand.cmd at 0x7f>, \
seed=3, num_prompts=40, dataset_name='random', no_stream=False, dataset_path=None, random_input_len=256, \
random_output_len=32, random_range_ratio=0.0, random_prefix_len=0, input_len=None, output_len=None, \
model='Qwen/Qwen3-8B', request_rate=8.0, burstiness=1.0, max_concurrency=None, \
percentile_metrics='ttft,tpot,itl', metric_percentiles='50,99', ignore_eos=True, header=None)
Starting initial single prompt test run...
100%|##########| 40/40 [00:05<00:00,  7.9it/s]
============ Serving Benchmark Result ============
Successful requests:                     40
Failed requests:                         0
Request rate configured (RPS):           8.00
Benchmark duration (s):                  5.10
Total input tokens:                      10240
Total generated tokens:                  1280
Request throughput (req/s):              7.84
Output token throughput (tok/s):         250.98
Peak output token throughput (tok/s):    420.00
Peak concurrent requests:                6.00
Total token throughput (tok/s):          2258.82
---------------Time to First Token----------------
Mean TTFT (ms):                          21.50
Median TTFT (ms):                        20.90
P50 TTFT (ms):                           20.90
P99 TTFT (ms):                           35.10
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          7.10
Median TPOT (ms):                        7.05
P50 TPOT (ms):                           7.05
P99 TPOT (ms):                           8.20
==================================================
"""


def test_a_printout_gives_the_benchmark_s_settings_and_figures(tmp_path, capsys):
    """The console output of vllm bench serve (its Namespace line and its result block: the layout of
    vllm/benchmarks/serve.py; these numbers are made up) is a result too: no --bench line needed."""
    log = tmp_path / "bench.log"
    log.write_text(PRINTOUT)
    res = load_result(log)
    assert res.model_id == "Qwen/Qwen3-8B" and res.sent is None
    assert res.settings == {
        "dataset_name": "random",
        "random_input_len": 256,
        "random_output_len": 32,
        "random_range_ratio": 0.0,
        "random_prefix_len": 0,
        "num_prompts": 40,
        "request_rate": 8.0,
        "burstiness": 1.0,
        "seed": 3,
        "metric_percentiles": [50.0, 99.0],
        "percentile_metrics": ["ttft", "tpot", "itl"],
    }
    assert res.figures["p99_ttft_ms"] == 35.1 and res.figures["completed"] == 40 and "mean_itl_ms" not in res.figures
    bench = from_result(res, bench_of(""))
    assert (
        scenario_dict("H100-SXM", parse_serve(SERVE), bench)["workload"]
        == scenario_dict("H100-SXM", parse_serve(SERVE), bench_of(BENCH))["workload"]
    )
    assert main(["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--result", str(log), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {r["figure"] for r in summary["compared"]} >= {"p50_ttft_ms", "p99_tpot_ms", "total_token_throughput"}
    bad = tmp_path / "other.log"
    bad.write_text("INFO starting\nnothing here\n")
    with pytest.raises(UserError, match="no 'Serving Benchmark Result' blocks"):
        load_result(bad)
    rate = tmp_path / "rate.log"
    rate.write_text(PRINTOUT.replace("request_rate=8.0", "request_rate='fast'").replace("Request rate configured", "X"))
    with pytest.raises(UserError, match="--request-rate 'fast': expected requests per second above 0, or inf"):
        from_result(load_result(rate), bench_of(""))
    # the Namespace's exact rate wins over the block's rounded one
    exact = tmp_path / "exact.log"
    exact.write_text(
        PRINTOUT.replace("request_rate=8.0", "request_rate=0.125").replace(
            "(RPS):           8.00", "(RPS):           0.12"
        )
    )
    assert load_result(exact).settings["request_rate"] == 0.125
    other = tmp_path / "other_run.log"
    other.write_text(PRINTOUT.replace("num_prompts=40", "num_prompts=64"))
    with pytest.raises(UserError, match="Namespace line says num_prompts=64, its result block 40 requests"):
        load_result(other)
    nested = tmp_path / "nested.log"
    nested.write_text(PRINTOUT.replace("header=None", "metadata=['seed=7, num_prompts=5'], header=None"))
    assert load_result(nested).settings["seed"] == 3
    older = tmp_path / "older.log"  # (vLLM before 0.10 printed "Total Token throughput")
    older.write_text(PRINTOUT.replace("Total token throughput", "Total Token throughput"))
    assert load_result(older).figures["total_token_throughput"] == 2258.82
    cut_off = tmp_path / "cut.log"
    cut_off.write_text(PRINTOUT.replace("=" * 50 + "\n", "INFO shutting down\nP99 TPOT (ms): 1\n"))
    assert load_result(cut_off).figures["p99_tpot_ms"] == 8.2
    twice = tmp_path / "twice.log"
    twice.write_text(PRINTOUT + PRINTOUT)
    with pytest.raises(UserError, match="2 'Serving Benchmark Result' blocks"):
        load_result(twice)
    # the block alone: the rate it printed, every request it sent; the lengths must come from --bench
    alone = tmp_path / "alone.log"
    alone.write_text(PRINTOUT.split("Starting")[1])
    res = load_result(alone)
    assert res.settings == {
        "request_rate": 8.0,
        "num_prompts": 40,
        "percentile_metrics": ["ttft", "tpot"],
        "metric_percentiles": [50.0, 99.0],
    }
    with pytest.raises(UserError, match="records no prompt and output lengths: give the run's --bench line"):
        from_result(res, bench_of(""))
    with pytest.raises(
        UserError,
        match=r"total_input_tokens / completed = 256.0 tokens a request, where --random-input-len gives 1,000",
    ):
        from_result(res, bench_of("--random-input-len 1000 --random-output-len 32"))
    assert from_result(res, bench_of("--random-input-len 256 --random-output-len 32")).num_prompts == 40


def test_the_settings_a_result_records_are_bench_s_fields():
    from dataclasses import fields

    from llmsim.vllmresult import SETTINGS

    # (ramp_up: three Namespace names read as one, settings_of; goodput: a result file does not record it)
    own = ("given", "ignored", "dataset", "ramp_up", "goodput")
    assert list(SETTINGS) == [f.name for f in fields(Bench) if f.name not in own]


def test_the_header_and_block_follow_set(capsys):
    assert main(["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--bench", BENCH, "--set", "cluster.tp=2"]) == 0
    assert "hardware H100-SXM x2" in capsys.readouterr().out
    line = ["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--bench", BENCH]
    assert main([*line, "--set", "output.percentiles=[50]", "--set", "workload.rate_rps=4"]) == 0
    out = capsys.readouterr().out
    assert "P50 TTFT (ms):" in out and "P99 TTFT" not in out and "Request rate configured (RPS):           4.00" in out


def test_vllm_s_own_readings_of_its_flags():
    """-O0 captures no graphs; --input-len wins over --random-input-len; EP flags on a dense model are
    ignored (and said to be); a leading VAR=value is the environment; no prefix stands for a flag."""
    from llmsim.vllmcli import dense_ignored

    assert parse_serve("llama-3.1-8b -O0").enforce_eager and not parse_serve("llama-3.1-8b -O3").enforce_eager
    assert parse_serve("llama-3.1-8b -O3").ignored == ["-O3"]
    assert bench_of("--input-len 100 --random-input-len 200").random_input_len == 100
    serve = parse_serve("llama-3.1-8b -dp 2 -ep --enable-eplb")
    dense = scenario_dict("H100-SXM", serve, Bench())
    assert "expert_parallel" not in dense["cluster"] and "eplb" not in dense["cluster"]
    assert dense_ignored(serve) == ["-ep", "--enable-eplb"]
    assert parse_serve("VLLM_USE_V1=1 vllm serve llama-3.1-8b -tp 2").tp == 2
    with pytest.raises(UserError, match="--enable-lo: not a flag llmsim reads"):
        parse_serve("llama-3.1-8b --enable-lo")
    assert parse_bench("--model Qwen/Qwen3-8B")[1] == "Qwen/Qwen3-8B"


def test_the_served_model_and_the_run_s_model(tmp_path, capsys):
    path = _result(tmp_path, model_id="my-llama", input_lens=[10, 20], output_lens=[3, 4])
    check_same_model(str(path), "my-llama", parse_serve("llama-3.1-8b --served-model-name my-llama other"))
    line = ["bench", "--hardware", "H100-SXM", "--serve", "llama-3.1-8b", "--bench", "--model Qwen/Qwen3-8B"]
    assert main(line) == 2
    assert "--bench --model: the run is of Qwen/Qwen3-8B, where --serve serves llama-3.1-8b" in capsys.readouterr().err


def test_what_the_command_refuses_before_simulating(tmp_path, capsys):
    path = _result(tmp_path, input_lens=[10, 20], output_lens=[3, 4])
    assert main(["bench", "--hardware", "Xeon-8480+", "--serve", "llama-3.1-8b"]) == 2
    assert "not a GPU" in capsys.readouterr().err
    args = ["bench", "--hardware", "H100-SXM", "--serve", "Qwen/Qwen3-8B", "--result", str(path)]
    assert main([*args, "--scenario-out", str(tmp_path / "result.yaml")]) == 0  # (another file: fine)
    capsys.readouterr()
    twin = tmp_path / "t.yaml"
    twin.write_text("x")
    assert main([*args[:-1], str(twin), "--scenario-out", str(twin)]) == 2
    assert "would overwrite the --result file" in capsys.readouterr().err
    assert main(["bench", "--hardware", "H100-SXM", "--serve", "llama-3.1-8b --max-num-batched-tokens 100"]) == 2
    assert "policy.chunk_tokens 100 is below policy.max_num_seqs" in capsys.readouterr().err
    assert main(["bench", "--hardware", "H100-SXM", "--serve", "llama-3.1-8b -dp 100000"]) == 2
    assert "(from -dp)" in capsys.readouterr().err
    assert main(["bench", "--hardware", "H100-SXM", "--serve", "llama-3.1-8b -tp 3"]) == 2
    assert "(from -tp)" in capsys.readouterr().err


def test_the_environment_and_the_printout_s_own_consistency(tmp_path):
    """VLLM_MOE_SKIP_PADDING before `vllm serve` is the engine's moe_skip_padding; another variable is
    listed as ignored; a printout whose Namespace and block disagree on the concurrency is refused."""
    serve = parse_serve("VLLM_MOE_SKIP_PADDING=0 CUDA_VISIBLE_DEVICES=0,1 vllm serve qwen3-30b-a3b-instruct-2507")
    assert serve.moe_skip_padding is False and serve.ignored == ["CUDA_VISIBLE_DEVICES=... (environment)"]
    assert scenario_dict("H100-SXM", serve, Bench())["engine"] == {"preset": "vllm-v1", "moe_skip_padding": False}
    log = tmp_path / "capped.log"
    log.write_text(PRINTOUT.replace("Failed requests:", "Maximum request concurrency:     4\nFailed requests:"))
    with pytest.raises(UserError, match="Namespace line says max_concurrency=None, its result block 4"):
        load_result(log)
    older = tmp_path / "older.log"  # (vLLM before 0.10 printed no configured rate)
    older.write_text("\n".join(x for x in PRINTOUT.splitlines() if "Request rate configured" not in x))
    assert load_result(older).settings["request_rate"] == 8.0
    with pytest.raises(UserError, match="awq with bits 8: vLLM reads 4-bit weights"):
        cfg = json.loads((ROOT / "data" / "validation" / "vllm-gpu-bench" / "qwen3-16b-a3b.config.json").read_text())
        (tmp_path / "awq8").mkdir()
        q = {"quant_method": "awq", "bits": 8}
        (tmp_path / "awq8" / "config.json").write_text(json.dumps({**cfg, "quantization_config": q}))
        scenario_dict("H100-SXM", parse_serve(f"vllm serve {tmp_path / 'awq8'}"), Bench())
    eplb = parse_serve(
        "qwen3-30b-a3b-instruct-2507 --enable-eplb --num-redundant-experts 4 "
        '--eplb-config \'{"num_redundant_experts": 8, "window_size": 1000}\''
    )
    assert eplb.redundant_experts == 4 and eplb.ignored == ["--eplb-config window_size"]


def test_launch_wrappers_around_vllm_serve():
    """nohup / exec before the command, and the OpenAI server's module (`python -m ...api_server`,
    vllm serve's flags with --model), read as vllm serve; a container's line is refused by name."""
    for line in (
        "nohup vllm serve llama-3.1-8b -tp 2",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 nohup vllm serve llama-3.1-8b -tp 2 > serve.log 2>&1 &",
        "VLLM_USE_V1=1 python3 -m vllm.entrypoints.openai.api_server --model llama-3.1-8b --tensor-parallel-size 2",
    ):
        serve = parse_serve(line)
        assert (serve.model, serve.tp) == ("llama-3.1-8b", 2), line
    with pytest.raises(UserError, match="a container's command line; give vllm serve's own"):
        parse_serve("docker run --gpus all vllm/vllm-openai --model llama-3.1-8b")


def test_the_environment_s_long_context_switch_is_read():
    serve = parse_serve("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve llama-3.1-8b --max-model-len 200000")
    assert scenario_dict("H100-SXM", serve, Bench())["policy"]["allow_long_max_model_len"] is True
    assert "allow_long_max_model_len" not in scenario_dict("H100-SXM", parse_serve("llama-3.1-8b"), Bench())["policy"]
    with pytest.raises(UserError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN=yes: expected 0 or 1"):
        parse_serve("VLLM_ALLOW_LONG_MAX_MODEL_LEN=yes vllm serve llama-3.1-8b")


def test_counts_are_read_as_vllm_reads_them():
    """--max-model-len and --max-num-batched-tokens take vLLM's human-readable counts (k = 1,000,
    K = 1,024, decimals with the decimal suffixes only); --max-model-len also takes auto / -1."""
    assert parse_serve("llama-3.1-8b --max-model-len 32k").max_model_len == 32_000
    assert parse_serve("llama-3.1-8b --max-model-len 32K").max_model_len == 32_768
    assert parse_serve("llama-3.1-8b --max-model-len 25.6k").max_model_len == 25_600
    assert parse_serve("llama-3.1-8b --max-num-batched-tokens 8k").max_num_batched_tokens == 8_000
    for auto in ("auto", "AUTO", "-1"):
        serve = parse_serve(f"llama-3.1-8b --max-model-len {auto}")
        assert serve.max_model_len == -1 and "max_model_len" not in scenario_dict("H100-SXM", serve, Bench())["policy"]
    for bad in ("2.5K", "12x", "-2"):
        with pytest.raises(UserError, match="--max-model-len"):
            parse_serve(f"llama-3.1-8b --max-model-len {bad}")


def test_a_kv_cache_short_of_one_request_stops_the_server(tmp_path, capsys):
    """vLLM refuses to start where its KV cache cannot hold one request of max_model_len tokens
    (check_enough_kv_cache_memory, on its profiled memory: --num-gpu-blocks-override applies later);
    with --max-model-len auto it fits the length to the cache. llmsim's cache is an estimate: short
    by less than its error, it is said, not refused."""
    serve = "Qwen/Qwen3-8B --gpu-memory-utilization 0.75"
    line = ["bench", "--hardware", "L4", "--bench", "--random-input-len 256 --random-output-len 16 --num-prompts 4"]
    assert main([*line, "--serve", serve]) == 2
    err = capsys.readouterr().err
    assert "vllm serve would not start: one request of max_model_len 40,960 tokens (the model's context" in err
    fitted = int(err.split("pass --max-model-len ")[1].split()[0])
    assert 0 < fitted < 40_960 and fitted % 16 == 0
    out = tmp_path / "auto.yaml"
    assert main([*line, "--serve", f"{serve} --max-model-len auto", "--scenario-out", str(out)]) == 0
    assert f"context  --max-model-len auto: {fitted:,} tokens, the longest request" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["policy"]["max_model_len"] == fitted
    assert main([*line, "--serve", f"{serve} --max-model-len {fitted}"]) == 0
    assert "\nkv " not in capsys.readouterr().out
    assert main([*line, "--serve", f"{serve} --max-model-len {fitted + 16}"]) == 0  # (within the estimate's error)
    assert f"--max-model-len {fitted} or less starts either way" in capsys.readouterr().out
    assert main([*line, "--serve", f"{serve} --max-model-len {int(fitted * 1.2)}"]) == 2
    assert "(--max-model-len) needs" in capsys.readouterr().err
    h100 = ["bench", "--hardware", "H100-SXM", "--bench", "--num-prompts 4", "--quiet"]
    assert main([*h100, "--serve", "Qwen/Qwen3-8B --num-gpu-blocks-override 200"]) == 0


def test_dummy_weights_behind_a_biased_router_send_every_token_to_the_same_experts(capsys):
    """--load-format dummy fills the weights uniform in +-1e-3: a router that adds its correction bias
    before it picks (DeepSeek-V3's noaux_tc) then picks by the bias alone, the same experts for
    every token (expert_routing_exponent 0); a router without one keeps llmsim's routing, and under
    expert parallelism (whose load would fall on a few GPUs) it is not priced."""
    from llmsim.costmodel.ops import experts_touched
    from llmsim.models import CATALOG, from_hf_config

    assert CATALOG["deepseek-r1"].router_bias and CATALOG["deepseek-v3.2"].router_bias
    assert not CATALOG["qwen3-30b-a3b"].router_bias and not CATALOG["mixtral-8x7b"].router_bias
    derived = Path(__file__).parents[1] / "data/validation/vllm-gpu/RTXPRO6000/DeepSeek-V3.2-Exp-16L64E"
    assert from_hf_config(derived / "model-config.derived.json").router_bias
    assert experts_touched(256, 8, 256, 4096, exponent=0.0) == pytest.approx(8.0)

    def routing(line: str) -> float:
        return scenario_dict("H200", parse_serve(line), Bench())["cluster"].get("expert_routing_exponent", 1.0)

    assert routing("deepseek-ai/DeepSeek-R1 -tp 8 --load-format dummy") == 0.0
    assert routing("deepseek-ai/DeepSeek-R1 -tp 8") == RANDOM_TOKEN_ROUTING_EXPONENT
    assert routing("Qwen/Qwen3-30B-A3B --load-format dummy") == RANDOM_TOKEN_ROUTING_EXPONENT
    assert routing("deepseek-ai/DeepSeek-R1 -tp 8 -dp 2 -ep --load-format dummy") == RANDOM_TOKEN_ROUTING_EXPONENT
    data = scenario_dict("H200", parse_serve("deepseek-ai/DeepSeek-R1 -tp 8 -dp 2 -ep"), Bench())
    data["cluster"]["expert_routing_exponent"] = 0.0
    from llmsim.build import build_model, build_pools

    sc = scenario_from_dict(data, "dummy", Path.cwd())
    with pytest.raises(UserError, match="under expert parallelism puts every token on the GPUs"):
        build_pools(sc, build_model(sc))
    serve = "deepseek-ai/DeepSeek-R1 -tp 8 --max-model-len 4096 --load-format dummy"
    assert (
        main(["bench", "--hardware", "H200", "--serve", serve, "--bench", "--num-prompts 4 --random-output-len 8"]) == 0
    )
    out = capsys.readouterr().out
    assert "routing  cluster.expert_routing_exponent 0: --load-format dummy: the router's correction bias alone" in out
    short = ["--bench", "--num-prompts 4 --random-output-len 8"]
    ep = "deepseek-ai/DeepSeek-R1 -tp 4 -dp 2 -ep --max-model-len 4096 --load-format dummy"
    assert main(["bench", "--hardware", "H200", "--serve", ep, *short]) == 0
    assert "under expert parallelism: not priced, so the run reads fast" in capsys.readouterr().out
    for serve, why in (
        ("Qwen/Qwen3-30B-A3B --load-format dummy", "--load-format dummy (the weights' values: random weights'"),
        ("Qwen/Qwen3-8B --load-format safetensors", "--load-format safetensors (the weights' values: real ones"),
    ):
        assert main(["bench", "--hardware", "H100-SXM", "--serve", serve, *short]) == 0
        assert why in capsys.readouterr().out


def test_kv_cache_memory_bytes_sizes_the_cache_as_vllm_s_flag_does(capsys):
    """--kv-cache-memory-bytes (vLLM's counts: 8G = 8 GiB) is the cache's size per GPU, the memory
    profile unread; the start-up check is then exact, and a size past the device is refused."""
    assert parse_serve("Qwen/Qwen3-8B --kv-cache-memory-bytes 8G").kv_cache_memory_bytes == 8 * 2**30
    line = ["bench", "--hardware", "H100-SXM", "--bench", "--num-prompts 4", "--json"]
    assert main([*line, "--serve", "Qwen/Qwen3-8B --kv-cache-memory-bytes 8G"]) == 0
    pool = json.loads(capsys.readouterr().out)["pools"][0]
    assert pool["memory_per_device"]["kv_bytes"] == pytest.approx(8 * 2**30, rel=1e-3)
    assert main([*line, "--serve", "Qwen/Qwen3-8B --kv-cache-memory-bytes 5.5G"]) == 2  # (whole numbers only)
    assert main([*line, "--serve", "Qwen/Qwen3-8B --kv-cache-memory-bytes 5G"]) == 2  # (5.62 GiB needed: no band)
    assert "as --kv-cache-memory-bytes sizes it" in capsys.readouterr().err
    assert main([*line, "--serve", "Qwen/Qwen3-8B --kv-cache-memory-bytes 90G"]) == 2
    assert "kv_cache.memory_bytes 90.00 GiB does not fit on H100-SXM" in capsys.readouterr().err
    assert main([*line, "--serve", "Qwen/Qwen3-8B --kv-cache-memory-bytes 1K"]) == 2
    assert "kv_cache.memory_bytes 1,024 holds no KV block: one block of 16 tokens takes" in capsys.readouterr().err


def test_serve_flags_of_no_timing_unpriced_or_refused(capsys):
    """Loader, API and logging flags are ignored and listed; the stream interval, the API server
    count and the scheduling policy change what a client sees in ways llmsim does not price, and are
    said so (their values checked as vLLM checks them); vLLM's first ray executor
    (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0) turns async scheduling off and refuses --async-scheduling,
    its default v2 executor keeps it; CPU weight offload and config overrides are refused where their
    value does something."""

    def engine(line: str) -> dict:
        return scenario_dict("H100-SXM", parse_serve(line), Bench())["engine"]

    v1 = "VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0 vllm serve Qwen/Qwen3-8B --distributed-executor-backend ray"
    assert engine(v1)["async_scheduling"] is False
    assert "async_scheduling" not in engine("Qwen/Qwen3-8B --distributed-executor-backend ray")
    with pytest.raises(UserError, match="vLLM refuses it"):
        parse_serve(f"{v1} --async-scheduling")
    for flag, why in (
        ("--cpu-offload-gb 4", "not modelled: weights kept in CPU memory"),
        ("--hf-overrides '{\"num_hidden_layers\": 2}'", "folder"),
        ("--hf-overrides.num_hidden_layers 2", "folder"),
        ("--hf-overrides '{bad'", "--hf-overrides '{bad': not JSON"),
        ("--cpu-offload-gb nan", "--cpu-offload-gb nan: expected GiB, 0 or more"),
        ("--api-server-count 0", "--api-server-count 0: expected a whole number, 1 or more"),
        ("--stream-interval 0", "1 or more"),
        ("--scheduling-policy lifo", "fcfs or priority"),
        ("--distributed-executor-backend gloo", "invalid choice"),
    ):
        with pytest.raises(UserError, match=why):
            parse_serve(f"Qwen/Qwen3-8B {flag}")
    assert parse_serve("Qwen/Qwen3-8B --cpu-offload-gb 0 --hf-overrides '{ }' --kv-cache-memory-bytes 0").model
    serve = (
        "Qwen/Qwen3-8B --max-model-len 8192 --stream-interval 4 --enable-sleep-mode --distributed-executor-backend ray"
    )
    assert main(["bench", "--hardware", "H100-SXM", "--serve", serve, "--bench", "--num-prompts 2"]) == 0
    out = capsys.readouterr().out
    assert "--enable-sleep-mode" in out and "--distributed-executor-backend ray (async scheduling kept" in out
    assert "unpriced --stream-interval (tokens streamed every n steps" in out
    assert (
        main(["bench", "--hardware", "H100-SXM", "--serve", f"{v1} --max-model-len 8192", "--bench", "--num-prompts 2"])
        == 0
    )
    assert "engine   vLLM's first ray executor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0): no async scheduling" in (
        capsys.readouterr().out
    )


def test_the_hostile_review_s_command_lines(capsys):
    """A review's findings (2026-12-07): each is read as vLLM or the shell reads it, or refused by name."""
    assert parse_serve("vllm serve Qwen/Qwen3-8B \\\n  --max-model-len 4096").max_model_len == 4096  # (a pasted script)
    v1 = "env VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0 vllm serve Qwen/Qwen3-8B --distributed-executor-backend ray"
    assert parse_serve(v1).ray_v1
    assert (
        "VLLM_USE_RAY_V2_EXECUTOR_BACKEND=... (environment; no ray executor)"
        in parse_serve("VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0 vllm serve Qwen/Qwen3-8B").ignored
    )
    argv = ["bench", "--hardware", "H100-SXM", "--quiet"]
    for serve, bench, extra, message in [
        ("vllm serve Qwen/Qwen3-8B", " ", [], "--bench ' ': an empty command line"),
        (v1, "--num-prompts 2", ["--set", "engine.async_scheduling=true"], "first ray executor"),
        ("vllm serve openai/gpt-oss-20b --max-model-len auto", "--num-prompts 2", [], "sliding-window layers"),
        (
            "vllm serve Qwen/Qwen3-8B --max-model-len auto --gpu-memory-utilization 0.25",
            "--num-prompts 2",
            ["--set", "policy.max_model_len=30000"],
            "(--set policy.max_model_len) needs",
        ),
    ]:
        assert main([*argv, "--serve", serve, "--bench", bench, *extra]) == 2
        assert message in capsys.readouterr().err
    # --set cluster.expert_parallel=true is --enable-expert-parallel: dummy weights' routing rule sees it
    dummy = "vllm serve deepseek-ai/DeepSeek-V3 -tp 8 --load-format dummy"
    line = ["bench", "--hardware", "H200", "--serve", dummy, "--bench", "--num-prompts 2"]
    assert main([*line, "--set", "cluster.expert_parallel=true"]) == 0
    assert "cluster.expert_routing_exponent 0.79" in capsys.readouterr().out


def test_vllm_bench_s_ramp_up_is_read_and_checked_as_vllm_checks_it():
    bench, _ = parse_bench("--ramp-up-strategy=linear --ramp-up-start-rps 1 --ramp-up-end-rps 4 --num-prompts 30")
    assert bench.ramp_up == ("linear", 1, 4)
    w = scenario_dict("H100-SXM", parse_serve("vllm serve Qwen/Qwen3-8B"), bench)["workload"]
    assert w["kind"] == "poisson" and "rate_rps" not in w and w["arrivals"] == "vllm_bench"
    assert w["ramp_up"] == {"strategy": "linear", "start_rps": 1, "end_rps": 4}
    for line, message in [
        ("--ramp-up-strategy foo", "invalid choice: 'foo'"),
        ("--ramp-up-strategy linear --ramp-up-start-rps 1", "needs both --ramp-up-start-rps and --ramp-up-end-rps"),
        ("--ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 4 --request-rate 2", "vLLM refuses both"),
        ("--ramp-up-strategy linear --ramp-up-start-rps 5 --ramp-up-end-rps 4", "above --ramp-up-end-rps 4"),
        ("--ramp-up-strategy exponential --ramp-up-start-rps 0 --ramp-up-end-rps 4", "expected 1 or more"),
    ]:
        with pytest.raises(UserError, match=re.escape(message)):
            parse_bench(line)
    # without the strategy vLLM reads neither rate: listed as ignored, the rate left as it was
    bench, _ = parse_bench("--ramp-up-start-rps 1 --ramp-up-end-rps 4")
    assert bench.ramp_up is None and bench.ignored == ["--ramp-up-start-rps", "--ramp-up-end-rps"]


def test_a_ramp_up_scenario_is_checked_and_drawn() -> None:
    import llmsim
    from llmsim.scenario import scenario_from_dict

    fixed = {"dist": "fixed", "value": 64}
    base = {"name": "r", "model": "llama-3.1-8b", "hardware": "H100-SXM"}
    ramp = {"strategy": "exponential", "start_rps": 2, "end_rps": 16}
    w = {
        "kind": "gamma",
        "cv": 0.5,
        "num_requests": 40,
        "ramp_up": ramp,
        "prompt_tokens": fixed,
        "output_tokens": fixed,
    }
    for change, message in [
        ({"rate_rps": 4}, "ramp_up: sets each request's rate itself"),
        ({"kind": "all_at_once"}, "kind 'all_at_once' has none"),
        ({"num_requests": None, "duration_s": 10}, "ramp_up: sets each request's rate itself"),
        ({"ramp_up": {**ramp, "start_rps": 20}}, "start_rps (20) above end_rps (16)"),
    ]:
        with pytest.raises(UserError, match=re.escape(message)):
            scenario_from_dict({**base, "workload": {**w, **change}}, "r.yaml", ROOT)
    t = llmsim.run({**base, "workload": w}).requests["arrival_s"].to_numpy()
    assert t[0] == 0.0 and len(t) == 40  # (llmsim's own draw: the first at 0 s, the gaps shrinking)
    assert np.diff(t)[:20].mean() > 1.5 * np.diff(t)[20:].mean()


def test_a_result_file_s_ramp_up_is_read(tmp_path) -> None:
    """vllm bench serve --save-result writes the ramp's three settings beside request_rate 'inf'."""
    data = {"num_prompts": 30, "request_rate": "inf", "burstiness": 1.0, "completed": 30, "duration": 20.0}
    path = tmp_path / "r.json"
    path.write_text(
        json.dumps(data | {"ramp_up_strategy": "exponential", "ramp_up_start_rps": 2, "ramp_up_end_rps": 8})
    )
    bench = with_settings(bench_of("--random-input-len 64 --random-output-len 8"), load_result(path).settings, "r")
    assert bench.ramp_up == ("exponential", 2, 8)
    path.write_text(json.dumps(data | {"ramp_up_strategy": "linear", "ramp_up_start_rps": 9, "ramp_up_end_rps": 8}))
    with pytest.raises(UserError, match="--ramp-up-start-rps 9 above --ramp-up-end-rps 8"):
        with_settings(bench_of("--num-prompts 30"), load_result(path).settings, "r")


def test_goodput_slos_are_read_printed_and_compared(tmp_path, capsys):
    """--goodput was ignored: no "Request goodput" line, and a real run's request_goodput was left
    out of the comparison (hostile round 5). Read as vllm bench serve reads it (ms, ttft / tpot /
    e2el), it becomes the scenario's SLOs, whose good requests the summary counts."""
    bench, _ = parse_bench(BENCH + " --goodput ttft:45 e2el:1800 ttft:50")
    assert bench.goodput == {"ttft": 50.0, "e2el": 1800.0}  # (a key twice: the last, as a dict keeps it)
    assert "--goodput" not in " ".join(bench.ignored)
    d = scenario_dict("H100-SXM", parse_serve(SERVE), bench)
    assert d["slo"] == {"ttft_s": 0.05, "e2e_s": 1.8}
    assert "slo" not in scenario_dict("H100-SXM", parse_serve(SERVE), parse_bench(BENCH)[0])
    assert main(["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--bench", BENCH + " --goodput tpot:1000"]) == 0
    out = capsys.readouterr().out
    # every request meets a 1 s TPOT: the goodput is the request throughput, printed below it
    assert re.search(r"Request throughput \(req/s\): +(\S+) +\nRequest goodput \(req/s\): +\1 ", out)
    # a printout recorded with --goodput: its Namespace gives the SLOs, its block the real goodput,
    # compared with llmsim's (an SLO some requests miss: a TTFT of the real run's median)
    log = tmp_path / "goodput.log"
    log.write_text(
        PRINTOUT.replace("header=None)", "header=None, goodput=['ttft:20.9'])").replace(
            "Request throughput (req/s):              7.84\n",
            "Request throughput (req/s):              7.84\nRequest goodput (req/s):                 3.92\n",
        )
    )
    assert load_result(log).figures["request_goodput"] == 3.92
    assert main(["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--result", str(log), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    row = next(r for r in summary["compared"] if r["figure"] == "request_goodput")
    assert row["real"] == 3.92 and 0 <= row["llmsim"] < summary["request_throughput"]
    # the same figure without its SLOs (a JSON result records none): not compared, and said so
    log.write_text(log.read_text().replace(", goodput=['ttft:20.9']", ""))
    assert main(["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--result", str(log)]) == 0
    assert "request_goodput not compared: its SLOs are not recorded" in capsys.readouterr().out
    # --set's SLOs beside --goodput: the printout's goodput line would be --set's (hostile round 6)
    line = BENCH + " --goodput ttft:1"
    assert main(["bench", "--hardware", "H100-SXM", "--serve", SERVE, "--bench", line, "--set", "slo.ttft_s=10"]) == 2
    assert "--set slo.ttft_s: the run's --goodput sets the SLOs" in capsys.readouterr().err
    for pairs, fragment in [
        ("ttft=45", "expected KEY:VALUE pairs"),
        ("itl:5", "--goodput itl: the metric is one of ttft, tpot, e2el"),
        ("ttft:0", "--goodput ttft:0: expected milliseconds above 0"),
        ("ttft:fast", "expected KEY:VALUE pairs"),
    ]:
        with pytest.raises(UserError, match=fragment):
            parse_bench(BENCH + f" --goodput {pairs}")
