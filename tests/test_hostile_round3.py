"""A third round of trying to break llmsim as a user would (2026-12-07): a verdict that said STABLE
through an overload, tables left empty, memory a single input could blow up. Each now behaves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from test_sweep import SCENARIO as TINY
from test_sweep_errors import sweep

import llmsim
from llmsim.cli import main
from llmsim.sweep import point_scenario
from llmsim.workload import tokenizer as tok_mod

ROOT = Path(__file__).resolve().parent.parent


def test_a_saturated_kv_link_is_an_overload() -> None:
    """Prompts waiting for their KV to move to the decode pool are a queue too: a link that cannot
    keep up reads overloaded, where the replicas' queues alone stayed flat (it read STABLE)."""
    over = {
        "workload.rate_rps": 12,
        "workload.num_requests": 300,
        "cluster.kv_link": {"kind": "custom", "bandwidth_gbps": 0.05},
    }
    res = llmsim.run(ROOT / "scenarios" / "colocated_vs_disaggregated.yaml", over)
    assert res.summary["saturation"]["verdict"] == "overloaded"
    ok = llmsim.run(ROOT / "scenarios" / "colocated_vs_disaggregated.yaml")
    assert ok.summary["saturation"]["verdict"] == "stable"


def test_a_burst_the_system_drained_is_not_a_steady_state() -> None:
    """A rate profile's burst piles a queue up and drains it: the slope over the whole run is flat,
    but the latencies are not a steady state's."""
    sc = {
        "name": "burst",
        "seed": 1,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "policy": {"kind": "vllm", "max_num_seqs": 32},
        "workload": {
            "kind": "poisson",
            "rate_rps": 4,
            "duration_s": 300,
            "rate_profile": [[0, 1], [40, 10], [60, 1]],
            "prompt_tokens": {"dist": "fixed", "value": 1024},
            "output_tokens": {"dist": "fixed", "value": 128},
        },
    }
    sat = llmsim.run(sc).summary["saturation"]
    assert sat["verdict"] == "backlogged" and "then drained" in sat["explanation"], sat
    sc["workload"]["rate_profile"] = [[0, 1], [40, 1.2], [60, 1]]  # (a bump it absorbs)
    assert llmsim.run(sc).summary["saturation"]["verdict"] == "stable"


def test_a_long_peak_the_system_drained_is_not_a_steady_state() -> None:
    """A peak past capacity that holds the queue for much of the run: every latency is mostly a
    wait, so no single wait stands out against the median latency, and the queue's slope over the
    run (up, then down) is not three standard errors clear of zero. It read STABLE at TTFT p90
    163 s (scenarios/autoscaling.yaml with one replica): the median wait of the requests that
    arrived in the peak against the quietest time's now says so."""
    res = llmsim.run(ROOT / "scenarios" / "autoscaling.yaml", {"cluster.autoscaling": None})
    sat = res.summary["saturation"]
    assert sat["verdict"] == "backlogged" and "waited a median" in sat["explanation"], sat
    assert "the queue drained" in sat["explanation"]


def test_a_sweep_where_every_point_failed_still_gets_a_report(tmp_path, capsys) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(TINY)
    out = tmp_path / "sw"
    code = sweep(scenario, out, "--set", "policy.kind=vllm,chunked", "--fix", "model=llama-3.1-405b", "--workers", "1")
    assert code == 1 and not (out / "report.md").exists()  # (the sweep itself writes none: nothing ran)
    assert main(["report", str(out)]) == 0  # (a text axis made it fail on the empty plot)
    assert "2 could not run" in (out / "report.md").read_text()


def test_sweep_and_plan_points_compute_the_percentiles_their_tables_show(tmp_path) -> None:
    data = {"name": "p", "model": "llama-3.1-8b", "hardware": "H100-SXM", "output": {"percentiles": [95.0]}}
    fixed = {"dist": "fixed", "value": 8}
    data["workload"] = {"kind": "all_at_once", "num_requests": 1, "prompt_tokens": fixed, "output_tokens": fixed}
    sc = point_scenario(data, str(tmp_path), "p.yaml", {})
    assert sc.output.percentiles == [90.0, 95.0, 99.0]


def test_a_long_text_is_tokenised_in_pieces_to_the_same_ids(monkeypatch) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(ROOT / "tests" / "data" / "vllm_bench_stream" / "tokenizer_bos.json"))
    rng = np.random.default_rng(0)
    words = np.array(["the", "of", "and", "to", "  in", "is\n", "you", "你好", "🚀", "that"])
    text = " ".join(rng.choice(words, 20_000))
    whole = tok_mod.token_ids(tokenizer, [text, "short"])
    monkeypatch.setattr(tok_mod, "PIECE_CHARS", 4096)  # (26 pieces, and the short text in a batch of its own)
    pieces = tok_mod.token_ids(tokenizer, [text, "short"])
    assert whole[0][0] == pieces[0][0] == tokenizer.token_to_id("<|begin_of_text|>")
    assert all(np.array_equal(a, b) for a, b in zip(whole, pieces, strict=True))


def test_many_system_prompts_cost_only_the_ones_requests_pick() -> None:
    """10,000,000 system prompts for 20 requests: only the picked ones are made (it was 3.2 GB)."""
    sc = {
        "name": "sp",
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "workload": {
            "kind": "poisson",
            "rate_rps": 4,
            "num_requests": 20,
            "prompt_tokens": {"dist": "fixed", "value": 100},
            "output_tokens": {"dist": "fixed", "value": 10},
            "system_prompts": {"count": 10_000_000, "tokens": 64},
        },
    }
    req = llmsim.run(sc).requests
    assert isinstance(req, pd.DataFrame) and (req["prompt_tokens"] == 164).sum() >= 1


def test_a_preempted_request_with_parallel_samples_keeps_no_answer_blocks() -> None:
    """Past the shared prompt a request of n samples holds each sequence's blocks in turn, so a
    recompute preemption registers none of its answers' blocks (they were filed under the wrong
    chain positions, and the resumed request skipped tokens no cached block held); a single
    sequence keeps them, under ids of its own."""
    from llmsim.kvcache import BlockManager, chain_hashes
    from llmsim.request import Request

    for n_seqs, kept in ((4, 3), (1, 5)):
        kv = BlockManager(100, 16, watermark=0.0, prefix_caching=True)
        req = Request(7, 0.0, 48, 64, block_hashes=list(range(3)))
        req.n_seqs = n_seqs
        req.prefix_chain = chain_hashes(req.block_hashes, 16, 16, 48)  # (3 prompt blocks)
        kv.allocate(req, 48 + 32)
        req.kv_tokens = 48 + 32  # (the prompt and two blocks of answer computed)
        kv.commit(req)  # (the prompt's blocks, as its prefill registered them)
        kv.cache_computed(req)
        kv.free(req)
        assert len(req.prefix_chain) == kept and kv.cached_blocks == kept


def test_slo_classes_are_judged_against_the_declared_or_traced_classes(tmp_path) -> None:
    """A declared class that no request happened to draw is still a class; a trace's blank class
    cell is no class (it failed on sorting a NaN beside the names)."""
    fixed = {"dist": "fixed", "value": 32}
    sc = {"name": "c", "seed": 0, "model": "llama-3.1-8b", "hardware": "H100-SXM", "slo": {"classes": {}}}
    sc["workload"] = {"kind": "poisson", "rate_rps": 2, "num_requests": 10, "prompt_tokens": fixed,
                      "output_tokens": fixed, "classes": {"chat": {"share": 0.999}, "batch": {"share": 0.001}}}  # fmt: skip
    sc["slo"]["classes"] = {"batch": {"ttft_s": 30}}
    assert (llmsim.run(sc).requests["class"] == "chat").all()
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,class\n0,100,10,chat\n0.5,100,10,\n1,100,10,chat\n")
    sc["workload"] = {"kind": "trace", "trace": {"path": str(trace), "format": "generic"}}
    sc["slo"]["classes"] = {"chat": {"ttft_s": 30}}
    assert len(llmsim.run(sc).requests) == 3


def test_a_long_text_cut_inside_a_run_of_spaces_keeps_its_ids(monkeypatch) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(ROOT / "tests" / "data" / "vllm_bench_stream" / "tokenizer.json"))
    text = "".join(f"def f{i}():\n        return {i}    # x\n" for i in range(3000))
    whole = tok_mod.token_ids(tokenizer, [text])[0]
    for piece in (997, 1024, 4093):  # (cuts landing at several places in the indentation)
        monkeypatch.setattr(tok_mod, "PIECE_CHARS", piece)
        assert np.array_equal(tok_mod.token_ids(tokenizer, [text])[0], whole), piece


def test_a_burst_at_the_start_is_not_a_steady_state() -> None:
    fixed = {"dist": "fixed", "value": 1024}
    sc = {"name": "b", "seed": 1, "model": "llama-3.1-8b", "hardware": "H100-SXM", "policy": {"max_num_seqs": 32}}
    sc["workload"] = {"kind": "poisson", "rate_rps": 4, "duration_s": 300, "rate_profile": [[0, 10], [20, 1]],
                      "prompt_tokens": fixed, "output_tokens": {"dist": "fixed", "value": 128}}  # fmt: skip
    assert llmsim.run(sc).summary["saturation"]["verdict"] == "backlogged"


_LENGTHS = {
    "prompt_tokens": {"dist": "lognormal", "median": 1020, "sigma": 0.8, "min": 16, "max": 8192},
    "output_tokens": {"dist": "lognormal", "median": 129, "sigma": 0.9, "min": 1, "max": 1000},
}


def _verdict(seed: int, workload: dict) -> dict:
    sc = {"name": "sat", "seed": seed, "model": "llama-3.1-8b", "hardware": "H100-SXM",
          "policy": {"kind": "vllm", "chunk_tokens": 2048, "max_num_seqs": 256},
          "workload": {**workload, **_LENGTHS}}  # fmt: skip
    return llmsim.run(sc).summary["saturation"]


def test_a_light_bursty_or_short_run_is_not_called_backlogged_by_chance() -> None:
    """The waiting queue's slope counts only three standard errors (batch means) clear of zero: a
    light gamma run's bursts (8 req/s at CV 3 on one H100 that serves ~21) and 20 Poisson arrivals
    wandered past 1 % of the offered rate and read BACKLOGGED (seeds chosen where they did)."""
    for seed in (0, 8):
        sat = _verdict(seed, {"kind": "gamma", "rate_rps": 8, "num_requests": 400, "cv": 3.0})
        assert sat["growth_share"] > 0.01 and sat["verdict"] == "stable", sat
    for seed in (1, 6):
        sat = _verdict(seed, {"kind": "poisson", "rate_rps": 10, "num_requests": 20})
        assert sat["growth_share"] > 0.01 and sat["verdict"] == "stable", sat
    over = _verdict(0, {"kind": "poisson", "rate_rps": 40, "num_requests": 1000})
    assert over["verdict"] == "overloaded" and over["growth_share"] > 3 * over["growth_share_se"], over


def test_tp_must_divide_the_experts_unless_they_are_placed_whole() -> None:
    """Without expert parallelism each expert is split over the TP ranks; vLLM asserts the split is
    even (FusedMoEConfig), so llmsim refuses an uneven one as it does a dense MLP's."""
    from dataclasses import replace

    import pytest

    from llmsim.build import check_parallelism
    from llmsim.errors import UserError
    from llmsim.models import CATALOG

    model = replace(CATALOG["qwen3-30b-a3b-instruct-2507"], intermediate_size=770)  # 770 = 2 x 5 x 7 x 11
    check_parallelism(model, 2, 1, "cluster")
    with pytest.raises(UserError, match="does not divide the 770-wide experts"):
        check_parallelism(model, 4, 1, "cluster")
    check_parallelism(model, 4, 1, "cluster", expert_parallel=True)


def test_a_csv_trace_s_class_names_are_read_as_written(tmp_path) -> None:
    """A class column of numbers was read as numbers: "01" became "1", and a blank cell beside
    them made every name a float ("2.0") and the blank one "nan"."""
    from llmsim.workload.traces import load_trace

    trace = tmp_path / "t.csv"
    trace.write_text(
        "arrival_s,prompt_tokens,output_tokens,class\n0,100,10,01\n0.5,100,10,\n1,100,10,2\n1.5,100,10,NA\n"
    )
    w = load_trace(trace, "generic")
    assert w.klass.tolist() == ["01", "", "2", "NA"]
    jsonl = tmp_path / "t.jsonl"  # (a JSONL null is no class either, where it read "None")
    rows = ['{"arrival_s": 0, "prompt_tokens": 9, "output_tokens": 1, "class": "chat"}',
            '{"arrival_s": 1, "prompt_tokens": 9, "output_tokens": 1, "class": null}']  # fmt: skip
    jsonl.write_text("\n".join(rows) + "\n")
    assert load_trace(jsonl, "generic").klass.tolist() == ["chat", ""]


def test_report_refuses_a_folder_of_a_run_and_a_sweep(tmp_path, capsys) -> None:
    """A run's summary beside a sweep's table (copied in by hand): no command writes both, and
    reporting either would overwrite the other's report (it chose by modification time)."""
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "sweep.csv").write_text("a\n1\n")
    assert main(["report", str(tmp_path)]) == 2
    assert "holds both a run's summary.json and a sweep's sweep.csv" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json", "sweep.csv"]


def test_report_refuses_a_summary_whose_figures_contradict_each_other(tmp_path, capsys) -> None:
    """A run's summary.json edited by hand (a throughput its requests and duration do not give, a
    p99 below its p90) was drawn as it stood."""
    import json
    import shutil

    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                str(ROOT / "scenarios" / "quickstart.yaml"),
                "--set",
                "workload.num_requests=40",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    for key, value, fragment in (
        ("request_throughput", 99.0, "request_throughput: 99.0, where completed / duration is"),
        ("p99_ttft_ms", 0.5, "p99_ttft_ms: 0.5 is below p90_ttft_ms"),
    ):
        edited = tmp_path / key
        shutil.copytree(out, edited)
        (edited / "summary.json").write_text(json.dumps({**summary, key: value}))
        assert main(["report", str(edited)]) == 2
        assert fragment in capsys.readouterr().err
    assert main(["report", str(out), "--quiet"]) == 0
