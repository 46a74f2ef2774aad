"""Hostile inputs to `llmsim calibrate --serving` (a measured run's meta.json and steps.csv.gz)
and to `llmsim bench --result` (a result file whose counts disagree): each one error naming the
file, key or row, exit code 2, and no fit written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_hostile_cli import one_error

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "data" / "validation" / "vllm-cpu" / "poisson-light-b"
HOST = ROOT / "data" / "validation" / "vllm-cpu" / "host-cpu.yaml"
MODEL = ROOT / "benchmarks" / "vllm_cpu" / "model" / "config.json"


def copy_run(tmp_path: Path, name: str = "run") -> Path:
    run = tmp_path / name
    shutil.copytree(RUN, run)
    return run


def edit_meta(run: Path, edit) -> None:  # noqa: ANN001 - a function of the meta dict
    meta = json.loads((run / "meta.json").read_text())
    edit(meta)
    (run / "meta.json").write_text(json.dumps(meta))


def edit_steps(run: Path, edit) -> None:  # noqa: ANN001 - a function of the steps table
    steps = pd.read_csv(run / "steps.csv.gz")
    steps = edit(steps)
    steps.to_csv(run / "steps.csv.gz", index=False)


def calibrate(tmp_path: Path, *runs: Path) -> list[str]:
    out = tmp_path / "fit"
    return [
        "calibrate",
        "--serving",
        *map(str, runs),
        "--hardware",
        str(HOST),
        "--model",
        str(MODEL),
        "--out",
        str(out),
    ]


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda m: m.update(engine_args=[1]), "meta.json: engine_args: expected an object, got list"),
        (lambda m: m.update(resolved=[1]), "meta.json: resolved: expected an object, got list"),
        (lambda m: m["resolved"].update(scheduler="x"), "resolved.scheduler: expected an object, got str"),
        (
            lambda m: m["resolved"].setdefault("scheduler", {}).update(async_scheduling="false"),
            "resolved.scheduler.async_scheduling: expected true or false, got 'false'",
        ),
        (
            lambda m: m["resolved"].update(cudagraph_capture_sizes=[-5, 0]),
            "resolved.cudagraph_capture_sizes: expected a list of batch sizes from 1 to 16,777,216",
        ),
        (lambda m: m["resolved"].update(cudagraph_capture_sizes=5), "resolved.cudagraph_capture_sizes"),
    ],
)
def test_a_malformed_meta_json_is_named(tmp_path, capsys, edit, fragment) -> None:
    run = copy_run(tmp_path)
    edit_meta(run, edit)
    one_error(calibrate(tmp_path, run), capsys, fragment)
    assert not (tmp_path / "fit").exists()


def _set(col: str, value: object, row: int = 5):  # noqa: ANN202 - a steps edit
    def edit(s: pd.DataFrame) -> pd.DataFrame:
        s[col] = s[col].astype(object)
        s.loc[row, col] = value
        return s

    return edit


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_set("batch", "abc@def"), "steps.csv.gz: row 7, column 'batch': 'abc@def': expected tokens@computed"),
        (_set("batch", float("nan")), "row 7, column 'batch': 0 sequences of 0 tokens, where the step says"),
        (_set("batch", "-500@0"), "'-500@0': expected tokens@computed"),
        (_set("step_start_s", "x"), "row 7, column 'step_start_s': expected a finite number, got 'x'"),
        (_set("num_scheduled_reqs", float("nan")), "row 7, column 'num_scheduled_reqs': expected a finite number"),
        (_set("num_scheduled_reqs", 10**15), "column 'num_scheduled_reqs': expected a whole count from 0 to"),
        (_set("num_scheduled_reqs", -3), "column 'num_scheduled_reqs': expected a whole count from 0 to"),
        (_set("batch", "1000000000000@0"), "token counts from 1"),
        (
            lambda s: s.assign(num_scheduled_tokens=s["num_scheduled_tokens"] * 1000),
            "row 2, column 'batch': 1 sequences of 404 tokens, where the step says 1 sequences (num_scheduled_reqs) of 404000",
        ),
        (
            lambda s: s.assign(**{c: s[c] * 1000 for c in s.columns if c.endswith("_s")}),
            "s, outside the run's requests",
        ),
        (  # (its phases would be negative: the step was dropped from the fit without a word)
            lambda s: s.assign(update_start_s=s["step_start_s"] - 1e-6),
            "row 2, column 'update_start_s'",
        ),
        (_set("step", 3), "row 7, column 'step': step 3 again"),
        (lambda s: pd.concat([s, s.iloc[[3]]], ignore_index=True), "column 'step_start_s'"),  # (it overlaps)
        (_set("step", float("nan")), "row 7, column 'step': a blank step id"),
    ],
)
def test_a_malformed_step_is_named_by_its_row(tmp_path, capsys, edit, fragment) -> None:
    run = copy_run(tmp_path)
    edit_steps(run, edit)
    one_error(calibrate(tmp_path, run), capsys, fragment)
    assert not (tmp_path / "fit").exists()


def test_runs_are_each_given_once_and_of_one_model(tmp_path, capsys) -> None:
    run = copy_run(tmp_path)
    one_error(calibrate(tmp_path, run, run), capsys, "is given twice")
    other = copy_run(tmp_path, "other")
    edit_meta(other, lambda m: m["engine_args"].update(model="meta-llama/Llama-3.1-70B"))
    one_error(calibrate(tmp_path, run, other), capsys, "the runs served different models", "Llama-3.1-70B")


def test_too_few_steps_for_the_terms_are_refused(tmp_path, capsys) -> None:
    run = copy_run(tmp_path)
    edit_steps(run, lambda s: s.iloc[:1])
    argv = [*calibrate(tmp_path, run), "--fit-hardware", "--fit-batch-change"]
    one_error(argv, capsys, "usable steps in run; fitting", "terms of the execution time needs at least")


def test_a_fit_is_not_mixed_into_another_commands_folder(tmp_path, capsys) -> None:
    out = tmp_path / "fit"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    one_error(
        calibrate(tmp_path, copy_run(tmp_path)), capsys, "holds files this command does not write", "summary.json"
    )
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def _result(tmp_path: Path, **changes) -> Path:
    data = {
        "num_prompts": 4,
        "request_rate": 2.0,
        "duration": 3.0,
        "completed": 4,
        "total_input_tokens": 1000,
        "total_output_tokens": 100,
        "input_lens": [250] * 4,
        "output_lens": [25] * 4,
        **changes,
    }
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    return path


def test_a_result_file_without_num_prompts_sent_what_it_completed_and_failed(tmp_path) -> None:
    """vllm bench serve sends every prompt, each succeeding or failing: a file without num_prompts
    sent their sum (it was compared with a 1,000-prompt default run)."""
    from llmsim.vllmresult import load_result

    path = _result(tmp_path, failed=1, completed=3)
    data = {
        k: v for k, v in json.loads(path.read_text()).items() if k not in ("num_prompts", "input_lens", "output_lens")
    }
    path.write_text(json.dumps(data))
    assert load_result(path).settings["num_prompts"] == 4


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        (
            {"input_lens": [250] * 2, "output_lens": [25] * 2, "total_input_tokens": 500, "total_output_tokens": 50},
            "input_lens: 2 requests, where num_prompts says 4",
        ),
        ({"input_lens": [10] * 4}, "input_lens: the succeeded requests' lengths sum to 40, where total_input_tokens"),
        (
            {"failed": 1},
            "completed 4 and failed 1 requests, where num_prompts says 4 were sent",
        ),  # (fewer: --no-oversample)
        ({"p101_ttft_ms": 1.0}, "p101_ttft_ms: p101 is not a percentile"),
        ({"total_output_tokens": 10**400}, "total_output_tokens: expected a finite number >= 0"),
        ({"completed": 3}, "errors: 4 requests succeeded, where completed says 3"),
        ({"completed": 0, "input_lens": None, "output_lens": None}, "completed 0 requests, yet counts their tokens"),
        ({"duration": 0}, "duration: 0 s for 4 completed requests"),
    ],
)
def test_a_result_file_whose_counts_disagree_is_refused(tmp_path, capsys, changes, fragment) -> None:
    path = _result(tmp_path, **changes)
    data = {k: v for k, v in json.loads(path.read_text()).items() if v is not None}
    path.write_text(json.dumps(data))
    argv = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve Qwen/Qwen3-8B", "--result", str(path), "--quiet"]
    one_error(argv, capsys, "result.json", fragment)


def test_bench_keeps_the_served_model_and_blames_the_flag_given(capsys) -> None:
    serve = "vllm serve Qwen/Qwen3-8B"
    argv = ["bench", "--hardware", "H100-SXM", "--serve", serve, "--set", "model=llama-3.1-8b", "--quiet"]
    one_error(argv, capsys, "--set model: the served model is --serve's")
    argv = ["bench", "--hardware", "H100-SXM", "--serve", f"{serve} --max-num-seqs 1000000", "--quiet"]
    one_error(argv, capsys, "vLLM refuses a token budget below its sequences (from --max-num-seqs)")


def test_bench_reads_command_lines_without_vllm_and_every_percentile(capsys) -> None:
    from llmsim.cli import main

    bench = "bench serve --num-prompts 5 --metric-percentiles 0,100 --percentile-metrics ttft"
    assert main(["bench", "--hardware", "H100-SXM", "--serve", "serve Qwen/Qwen3-8B", "--bench", bench]) == 0
    out = capsys.readouterr().out
    assert "catalog qwen3-8b" in out and "P0 TTFT (ms):" in out and "P100 TTFT (ms):" in out


def test_a_blank_request_id_is_named(tmp_path, capsys) -> None:
    run = copy_run(tmp_path)
    req = pd.read_csv(run / "requests.csv")
    req["id"] = req["id"].astype(object)
    req.loc[4, "id"] = None
    req.to_csv(run / "requests.csv", index=False)
    one_error(calibrate(tmp_path, run), capsys, "requests.csv: row 6, column 'id': a blank cell")


def test_a_stray_word_is_named_as_one(capsys) -> None:
    argv = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve Qwen/Qwen3-8B Qwen/Qwen3-8B", "--quiet"]
    one_error(argv, capsys, "vllm serve: Qwen/Qwen3-8B: a word that belongs to no flag", "the model")


@pytest.mark.parametrize("value", ["1e-300", "1e7"])
def test_burstiness_is_bounded_in_its_own_terms(capsys, value) -> None:
    argv = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve Qwen/Qwen3-8B"]
    argv += ["--bench", f"vllm bench serve --burstiness {value}", "--quiet"]
    one_error(argv, capsys, "--burstiness", "expected a number from 0.01 to 1,000,000")


def test_burstiness_bounds_are_the_gamma_cv_bounds() -> None:
    """--burstiness B becomes workload.cv = 1 / sqrt(B): its bounds are the scenario's cv bounds."""
    from llmsim.scenario import WorkloadConfig
    from llmsim.vllmcli import CHECKS

    meta = WorkloadConfig.model_fields["cv"].metadata
    low = next(m.ge for m in meta if getattr(m, "ge", None) is not None)
    high = next(m.le for m in meta if getattr(m, "le", None) is not None)
    _, ok, _ = CHECKS["burstiness"]
    assert ok(high**-2) and ok(low**-2)
    assert not ok(high**-2 * 0.99) and not ok(low**-2 * 1.01)
