"""Hostile inputs found by a second round of trying to break the CLI (2026-12-02): each ended in a
traceback, unbounded memory, or a silently wrong result. Each now ends in exit 2 and one
``llmsim: error:`` line naming the culprit, or (base-60 numbers, the sweep's workers) behaves."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
import warnings
from pathlib import Path

import pytest
import yaml
from test_hostile_cli import QUICK, one_error, run_argv

from llmsim.errors import UserError, safe_yaml, temp_sibling

ROOT = Path(__file__).resolve().parent.parent
BUDGET = ROOT / "data" / "validation" / "vllm-cpu" / "budget-512"


def _trace_scenario(tmp_path: Path, trace: Path, fmt: str = "generic") -> str:
    data = yaml.safe_load(Path(QUICK).read_text())
    data["workload"] = {"kind": "trace", "trace": {"path": str(trace), "format": fmt}}
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("suffix", "compress", "kind"),
    [(".csv.xz", lzma.compress, "xz"), (".csv.bz2", bz2.compress, "bzip2"), (".csv.gz", gzip.compress, "gzip")],
)
def test_a_compressed_trace_is_refused_before_it_is_inflated(tmp_path, capsys, suffix, compress, kind) -> None:
    trace = tmp_path / f"t{suffix}"
    trace.write_bytes(compress(b"arrival_s,prompt_tokens,output_tokens\n" + b"0,1,1\n" * 1000))
    one_error(
        ["run", _trace_scenario(tmp_path, trace), "--out", str(tmp_path / "o"), "--quiet"], capsys, str(trace), kind
    )
    assert not (tmp_path / "o").exists()


def test_a_plain_trace_under_a_compressed_name_is_read_as_text(tmp_path, capsys) -> None:
    trace = tmp_path / "t.csv.xz"  # not xz data: the extension must not make pandas decompress it
    trace.write_text("garbage\n")
    one_error(
        ["run", _trace_scenario(tmp_path, trace), "--out", str(tmp_path / "o"), "--quiet"], capsys, "missing column"
    )


def test_a_model_config_that_is_not_a_regular_file_is_refused(tmp_path, capsys) -> None:
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    one_error(["models", str(link)], capsys, str(link), "not a regular file")


@pytest.mark.parametrize("where", ["scenario", "set", "json"])
def test_deep_nesting_is_one_message(tmp_path, capsys, where) -> None:
    deep = "[" * 3000 + "]" * 3000
    if where == "scenario":
        path = tmp_path / "deep.yaml"
        path.write_text("name: " + deep + "\n")
        one_error(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"], capsys, "nested too deeply")
    elif where == "set":
        one_error(run_argv(tmp_path / "o", "name=" + deep), capsys, "nested too deeply")
    else:
        path = tmp_path / "deep.json"
        path.write_text('{"a": ' + deep + "}")
        one_error(["models", str(path)], capsys, str(path), "nested too deeply")


def test_a_list_as_a_yaml_key_is_refused(tmp_path, capsys) -> None:
    path = tmp_path / "listkey.yaml"
    path.write_text(Path(QUICK).read_text() + "? [a, b]\n: x\n")
    one_error(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"], capsys, "a key must be a plain value")


def test_base_60_numbers_stay_text() -> None:
    # YAML 1.1 reads 1:30 as 90; llmsim keeps the text, so a number field refuses it by name
    assert safe_yaml("a: 1:30\nb: 1:30.5\nc: 12\nd: 1.5e+3\ne: 1e-3") == {
        "a": "1:30",
        "b": "1:30.5",
        "c": 12,
        "d": 1500.0,
        "e": "1e-3",
    }


def test_a_base_60_rate_is_refused(tmp_path, capsys) -> None:
    one_error(run_argv(tmp_path / "o", "workload.rate_rps=1:30"), capsys, "workload.rate_rps", "'1:30'")


@pytest.mark.parametrize("item", ["cluster.replicas=true", "seed=true", "workload.rate_rps=false"])
def test_true_or_false_is_not_a_number(tmp_path, capsys, item) -> None:
    one_error(run_argv(tmp_path / "o", item), capsys, item.split("=")[0], "expected a number, got true/false")


@pytest.mark.parametrize("cv", ["1e+160", "20.0", "1.0e-170"])
def test_gamma_cv_is_bounded(tmp_path, capsys, cv) -> None:
    one_error(run_argv(tmp_path / "o", "workload.kind=gamma", f"workload.cv={cv}"), capsys, "workload.cv")


@pytest.mark.parametrize("item", ["workload.rate_rps=1.0e-300", "workload.trace.speedup=1.0e-300"])
def test_arrivals_past_a_billion_seconds_are_refused(tmp_path, capsys, item) -> None:
    argv = run_argv(tmp_path / "o", item)
    if "speedup" in item:
        trace = tmp_path / "t.csv"
        trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,3\n1,10,3\n")
        argv = ["run", _trace_scenario(tmp_path, trace), "--out", str(tmp_path / "o"), "--quiet", "--set", item]
    one_error(argv, capsys, "past 1e+09 s")


def test_arrivals_1e_200_s_apart_give_a_verdict(tmp_path) -> None:
    """The queue's growth is fitted over arrival times too close to fit: a slope of 0, not a
    LinAlgError from the fit."""
    import pandas as pd

    from llmsim.results import saturation_verdict

    queue = pd.DataFrame({"time_s": [0.0, 1e-200, 2e-200, 3e-200], "waiting": [0, 1, 2, 3]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (nothing may print past --quiet)
        out = saturation_verdict(queue, 4, 0, 3e-200, finished=4)
    assert out["queue_growth_rps"] == pytest.approx(1e200) and out["growth_share"] == pytest.approx(0.75)


def test_sweep_starts_no_more_processes_than_points(tmp_path, monkeypatch) -> None:
    from llmsim import sweep

    seen = []

    class Pool:
        def __init__(self, max_workers: int, **_: object) -> None:
            seen.append(max_workers)
            raise RuntimeError("stop here")

    monkeypatch.setattr(sweep, "ProcessPoolExecutor", Pool)
    with pytest.raises(RuntimeError, match="stop here"):
        sweep._run_local([(i, None) for i in range(3)], 1000, False, "x")
    assert seen == [min(3, 4 * (os.cpu_count() or 1))]


def _workload_copy(tmp_path: Path, lines: bytes) -> Path:
    run = tmp_path / "budget-512"
    run.mkdir()
    for name in ("meta.json", "requests.csv", "steps.csv.gz"):
        (run / name).write_bytes((BUDGET / name).read_bytes())
    (run / "workload.jsonl.gz").write_bytes(lines)
    return run


@pytest.mark.parametrize(
    ("text", "cut", "fragment"),
    [
        (b"notjson\n", None, "line 1: not valid JSON"),
        (b"[1, 2]\n", None, "line 1: expected an object"),
        (b'{"arrival_s": 0, "output_tokens": 4}\n', None, "missing key 'prompt_token_ids'"),
        (
            b"".join(
                b'{"arrival_s": %d, "output_tokens": 4, "prompt_token_ids": [%d]}\n' % (i, i * 7919) for i in range(500)
            ),
            -100,
            "gzip",
        ),
    ],
    ids=["not-json", "not-an-object", "missing-key", "cut-short"],
)
def test_a_bad_twin_workload_names_its_line(tmp_path, capsys, text, cut, fragment) -> None:
    content = gzip.compress(text, mtime=0)
    run = _workload_copy(tmp_path, content[:cut] if cut else content)
    one_error(["twin", "--engine", "vllm", str(run), "--quiet", "--out", str(tmp_path / "o")], capsys, fragment)


@pytest.mark.parametrize(
    ("column", "value", "fragment"),
    [
        ("arrival_s", "-1.0", "an arrival before the run's start"),
        ("finish_s", "0.0", "a finish before its first token"),
    ],
)
def test_measured_requests_in_an_impossible_order_are_refused(tmp_path, capsys, column, value, fragment) -> None:
    import pandas as pd

    from llmsim.calibration.serving import read_run

    run = _workload_copy(tmp_path, (BUDGET / "workload.jsonl.gz").read_bytes())
    req = pd.read_csv(run / "requests.csv")
    req.loc[3, column] = float(value)
    req.to_csv(run / "requests.csv", index=False)
    with pytest.raises(UserError, match=re.escape(f"row 5, column '{column}': {fragment}")):
        read_run(run)


def test_a_gemm_faster_than_the_peak_is_refused(tmp_path, capsys) -> None:
    rows = tmp_path / "fast.csv"
    rows.write_text("op,kind,m,n,k,seconds\nmlp_up_proj,gemm,512,28672,4096,1e-9\n")
    one_error(
        ["calibrate", "--hardware", "H100-SXM", "--profile", str(rows), "--out", str(tmp_path / "x.yaml")],
        capsys,
        f"{rows}: line 2",
        "faster than",
    )


@pytest.mark.parametrize(
    ("ids", "fragment"),
    [
        ("[1.5, 2]", "integer block ids from 0"),
        ("[-1]", "integer block ids from 0"),
        ("[1, 2, 3]", "3 ids for a 1000-token"),
        ("[1180591620717411303424]", "to 2**63 - 1"),
    ],
)
def test_mooncake_hash_ids_are_checked(tmp_path, capsys, ids, fragment) -> None:
    trace = tmp_path / "mc.jsonl"  # 1000 tokens: two 512-token blocks
    trace.write_text(f'{{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": {ids}}}\n')
    argv = ["run", _trace_scenario(tmp_path, trace, "mooncake"), "--out", str(tmp_path / "o"), "--quiet"]
    one_error(argv, capsys, f"{trace}: line 1", "hash_ids", fragment)


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        ({"prompt_tokens": True}, "column 'prompt_tokens': expected a whole number"),
        ({"prompt_tokens": "10"}, "column 'prompt_tokens': expected a whole number"),
        ({"class": {"a": 1}}, "class must be a name or a number"),
        ({"prompt_id": [1]}, "prompt_id must be a name or a number"),
    ],
)
def test_generic_jsonl_cells_must_be_json_numbers_or_names(tmp_path, capsys, row, fragment) -> None:
    trace = tmp_path / "g.jsonl"
    base = {"arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 3}
    trace.write_text(json.dumps(base) + "\n" + json.dumps({**base, **row}) + "\n")
    argv = ["run", _trace_scenario(tmp_path, trace), "--out", str(tmp_path / "o"), "--quiet"]
    one_error(argv, capsys, f"{trace}: line 2", fragment)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"model_type": "mixtral", "num_local_experts": 0}, "num_local_experts: a mixtral config needs"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings: expected true or false"),
        ({"torch_dtype": "complex128"}, "torch_dtype: expected one of"),
        ({"num_hidden_layers": True}, "num_hidden_layers: expected a positive integer"),
    ],
)
def test_hf_config_fields_are_not_misread(tmp_path, capsys, change, fragment) -> None:
    cfg = {
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, **change}))
    one_error(["models", str(path)], capsys, str(path), fragment)


@pytest.mark.parametrize("item", ["plan.hardware=[]", "plan.policies=[]", "plan.hardware=[H100-SXM, H100-SXM]"])
def test_plan_lists_are_not_empty_nor_repeated(tmp_path, capsys, item) -> None:
    plan = str(ROOT / "scenarios" / "plan_azure_conv.yaml")
    key = item.split("=")[0].removeprefix("plan.")
    one_error(["plan", plan, "--out", str(tmp_path / "o"), "--quiet", "--set", item], capsys, f"plan: {key}:")


def test_a_killed_runs_temporary_folder_is_removed_by_the_next_run(tmp_path, capsys) -> None:
    out = tmp_path / "res"
    stale = temp_sibling(out).with_name(f".{out.name}.tmp-999999")  # a pid no process has
    stale.mkdir()
    (stale / "half.csv").write_text("x")
    from llmsim.cli import main

    assert main(run_argv(out)) == 0
    assert out.is_dir() and not stale.exists()


def test_azure_timestamps_in_two_forms_both_parse(tmp_path) -> None:
    from llmsim.workload.traces import load_azure

    trace = tmp_path / "az.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16T18:15:46Z,374,44\n2023-11-16 18:15:47.5,10,2\n"
    )
    assert load_azure(trace).arrival_s.tolist() == [0.0, 1.5]


def test_an_empty_prompt_is_named_by_its_row(tmp_path, capsys) -> None:
    trace = tmp_path / "g.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,3\n1,0,3\n")
    argv = ["run", _trace_scenario(tmp_path, trace), "--out", str(tmp_path / "o"), "--quiet"]
    one_error(argv, capsys, f"{trace}: row 3: column 'prompt_tokens': must be >= 1")


# ---- a third round: valid scenarios whose results a planner would have trusted wrongly


def _small(**workload: object) -> dict:
    data = yaml.safe_load(Path(QUICK).read_text())
    data["workload"].update({"num_requests": 60, "rate_rps": 4.0, **workload})
    data["output"] = {"steps": "none"}
    return data


def test_requests_after_the_horizon_do_not_make_a_light_load_overloaded() -> None:
    import llmsim

    sat = llmsim.run(_small(horizon_s=5.0)).summary["saturation"]
    # most requests arrive after 5 s: never offered, they say nothing of the system
    assert sat["not_offered"] > 30 and sat["verdict"] in ("stable", "backlogged"), sat


def test_a_burst_that_queues_is_not_a_steady_state() -> None:
    import llmsim

    data = _small(kind="all_at_once", batch_size=60)
    data["policy"] = {"max_num_seqs": 8}
    sat = llmsim.run(data).summary["saturation"]
    assert sat["verdict"] == "backlogged" and "arrived at once" in sat["explanation"], sat


def test_prefill_only_requests_emit_no_output_tokens(tmp_path) -> None:
    import llmsim

    trace = tmp_path / "p.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.1},100,0\n" for i in range(20)))
    data = _small()
    data["workload"] = {"kind": "trace", "trace": {"path": str(trace), "format": "generic"}}
    assert llmsim.run(data).summary["max_output_tokens_per_s"] == 0.0


def test_the_api_applies_overrides_to_a_dict_and_refuses_them_for_a_scenario() -> None:
    import llmsim
    from llmsim.scenario import load_scenario

    assert len(llmsim.run(_small(), {"workload.num_requests": 7}).requests) == 7
    with pytest.raises(UserError, match="overrides apply to a scenario path or dict"):
        llmsim.run(load_scenario(QUICK), {"seed": 7})
    with pytest.raises(UserError, match="got YAML text, not a path"):
        llmsim.run(Path(QUICK).read_text())
    for bad in (["seed=7"], "seed=7", {7: 1}):  # (an AttributeError or a TypeError once)
        with pytest.raises(UserError, match="overrides must be a dict of dotted keys"):
            llmsim.run(QUICK, bad)  # type: ignore[arg-type]


def test_an_overloaded_rate_is_not_an_slo_capacity(tmp_path) -> None:
    from llmsim.planning.goodput import goodput_search

    path = tmp_path / "few.yaml"  # so few requests that every rate meets the SLOs before the queue shows
    path.write_text(yaml.safe_dump(_small(num_requests=40)))
    g = goodput_search(str(path))
    assert g.verdict in ("stable", "backlogged")
    assert all(e["verdict"] != "overloaded" for e in g.evaluations if e["rate_rps"] <= g.rate_rps)


# ---- a fourth round: the other commands


def test_calibrate_writes_under_the_current_folder_by_default(tmp_path, monkeypatch, capsys) -> None:
    from llmsim.cli import main

    rows = "op,kind,m,n,k,seconds\n" + "".join(
        f"mlp_up_proj,gemm,{m},28672,4096,{m * 2e-6 + 5e-5}\n" for m in (1, 8, 64, 256, 512, 1024, 4096)
    )
    (tmp_path / "g.csv").write_text(rows)
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "--hardware", "H100-SXM", "--profile", "g.csv", "--quiet"]) == 0
    assert (tmp_path / "hardware_profiles" / "calibrated" / "H100-SXM.yaml").is_file()


def test_calibrate_refuses_fewer_gemm_shapes_than_terms(tmp_path, capsys) -> None:
    rows = tmp_path / "one.csv"
    rows.write_text("op,kind,m,n,k,seconds\n" + "mlp_up_proj,gemm,512,28672,4096,0.0004\n" * 3)  # one shape, thrice
    argv = ["calibrate", "--hardware", "H100-SXM", "--profile", str(rows), "--out", str(tmp_path / "x.yaml")]
    one_error(argv, capsys, "1 distinct GEMM measurement(s) cannot determine the fit's 5 terms")


def test_calibrate_serving_refuses_another_model_than_the_runs(tmp_path, capsys) -> None:
    run = ROOT / "data" / "validation" / "vllm-cpu" / "poisson-light-b"
    host = ROOT / "data" / "validation" / "vllm-cpu" / "host-cpu.yaml"
    argv = ["calibrate", "--serving", str(run), "--hardware", str(host), "--model", "llama-3.1-8b"]
    one_error([*argv, "--out", str(tmp_path / "s"), "--quiet"], capsys, "is --model the model they served")


def test_a_results_folder_is_not_rewritten_from_inside(tmp_path, monkeypatch, capsys) -> None:
    from llmsim.cli import main

    out = tmp_path / "res"
    assert main(run_argv(out)) == 0
    monkeypatch.chdir(out)
    one_error(["report", "."], capsys, "the current folder is inside it")
    assert (out / "summary.json").is_file()


@pytest.mark.parametrize("flag", [["--repeats", "3"], ["--probe-interval", "5"], ["--profile", "x.yaml"]])
def test_twin_vllm_refuses_the_reference_engines_flags(capsys, flag) -> None:
    one_error(["twin", "--engine", "vllm", *flag, "--quiet"], capsys, f"{flag[0]} is taken only with the reference")


def test_a_zero_padded_count_is_decimal(tmp_path) -> None:
    # YAML 1.1 reads 010 as the octal 8
    assert safe_yaml("replicas: 010") == {"replicas": "010"}
    from llmsim.scenario import load_scenario

    assert load_scenario(QUICK, {"cluster.replicas": safe_yaml("010")}).cluster.replicas == 10


def test_an_unknown_command_is_named_once(capsys) -> None:
    line = one_error(["frobnicate"], capsys, "invalid choice: 'frobnicate'")
    assert line.count("llmsim:") == 1


def test_sweep_values_may_be_yaml_lists_and_mappings() -> None:
    from llmsim.sweep import parse_values

    assert parse_values("[50, 90],[99]") == [[50, 90], [99]]
    assert parse_values("{dist: fixed, value: 100},{dist: fixed, value: 200}") == [
        {"dist": "fixed", "value": 100},
        {"dist": "fixed", "value": 200},
    ]
    with pytest.raises(UserError, match="an empty value between commas"):
        parse_values("1,,2")


def test_a_mapping_override_stays_the_callers() -> None:
    from llmsim.scenario import set_path

    value = {"replicas": 3}
    data: dict = {}
    set_path(data, "cluster", value)
    set_path(data, "cluster.replicas", 1)
    assert value == {"replicas": 3} and data == {"cluster": {"replicas": 1}}


def test_a_key_set_twice_is_refused(tmp_path, capsys) -> None:
    one_error(run_argv(tmp_path / "o", "seed=1", "seed=2"), capsys, "the key seed is given twice")


@pytest.mark.parametrize("command", [["run", QUICK], ["roofline", "--model", "llama-3.1-8b", "--hardware", "H100-SXM"]])
def test_an_empty_out_is_refused(capsys, command) -> None:
    one_error([*command, "--out", ""], capsys, "--out '': expected a path")


def _finished_of_trace(tmp_path: Path, text: str) -> int:
    """Requests finished by a generic CSV trace of ``text`` run on the quickstart's deployment."""
    import llmsim

    trace = tmp_path / "trace.csv"
    trace.write_text(text)
    data = _small()
    data["workload"] = {"kind": "trace", "trace": {"path": str(trace), "format": "generic"}}
    return llmsim.run(data).summary["requests"]["finished"]


def test_a_trace_in_unix_seconds_runs(tmp_path) -> None:
    text = "arrival_s,prompt_tokens,output_tokens\n1764660000.0,100,5\n1764660000.5,100,5\n"
    assert _finished_of_trace(tmp_path, text) == 2


def test_twin_refuses_an_empty_out_too(capsys) -> None:
    one_error(["twin", "--engine", "vllm", "--out", "", "--quiet"], capsys, "--out '': expected a path")


def test_a_burst_admitted_at_once_is_not_backlogged() -> None:
    import llmsim

    fixed = {"dist": "fixed", "value": 64}
    data = _small(kind="all_at_once", batch_size=2, num_requests=2, prompt_tokens=fixed, output_tokens=fixed)
    sat = llmsim.run(data).summary["saturation"]
    assert sat["verdict"] == "stable" and "none waited" in sat["explanation"], sat


def test_a_csv_class_named_true_is_a_name(tmp_path) -> None:
    text = "arrival_s,prompt_tokens,output_tokens,class\n0,10,3,true\n1,10,3,false\n"
    assert _finished_of_trace(tmp_path, text) == 2
