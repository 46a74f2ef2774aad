"""Hostile inputs to `llmsim report`, `llmsim twin --engine vllm` and `llmsim sweep` (a hostile
tester's findings): one error naming the file or flag, exit 2, nothing outside the folder touched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_hostile_cli import one_error

from llmsim.cli import main

ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "scenarios" / "quickstart.yaml"
VLLM = ROOT / "data" / "validation" / "vllm-cpu"


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile_report") / "run"
    assert main(["run", str(QUICK), "--set", "workload.num_requests=30", "--out", str(out), "--quiet"]) == 0
    return out


def copy(run_folder: Path, tmp_path: Path) -> Path:
    out = tmp_path / "x"
    shutil.copytree(run_folder, out, symlinks=True)
    return out


def test_a_plots_link_to_another_folder_is_not_written_through(run_folder, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "00.png").write_text("keep")
    x = copy(run_folder, tmp_path)
    shutil.rmtree(x / "report_plots")
    (x / "report_plots").symlink_to(outside)
    assert main(["report", str(x), "--quiet"]) == 0
    assert (outside / "00.png").read_text() == "keep"
    assert (x / "report_plots").is_dir() and not (x / "report_plots").is_symlink()


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (
            lambda d: d.update(saturation="overloaded"),
            "summary.json: saturation: 'overloaded', where llmsim writes a number",
        ),
        (lambda d: d.update(mean_ttft_ms="fast"), "summary.json: mean_ttft_ms: 'fast', where llmsim writes a number"),
        (lambda d: d["slo"].update(ttft_s="abc"), "a figure in its files is not of the kind llmsim writes"),
        (
            lambda d: d["requests"].update(total=31),
            "requests.parquet: 30 rows, where its summary's requests.total says 31",
        ),
        (lambda d: d.pop("saturation"), "summary.json: not an llmsim run summary (missing saturation)"),
    ],
)
def test_an_edited_summary_is_one_error(run_folder, tmp_path, capsys, edit, fragment) -> None:
    x = copy(run_folder, tmp_path)
    data = json.loads((x / "summary.json").read_text())
    edit(data)
    (x / "summary.json").write_text(json.dumps(data))
    one_error(["report", str(x), "--quiet"], capsys, fragment)


def test_a_csv_row_with_extra_fields_is_refused(tmp_path, capsys) -> None:
    out = tmp_path / "sw"
    argv = ["sweep", str(QUICK), "--fix", "workload.num_requests=20", "--set", "cluster.replicas=1,2"]
    assert main([*argv, "--out", str(out), "--quiet", "--workers", "1", "--no-report"]) == 0
    (out / "sweep.parquet").unlink()
    meta = json.loads((out / "sweep.json").read_text())
    del meta["tables"]  # (a sweep written before sweep.json recorded its tables' hashes: the CSV is read)
    (out / "sweep.json").write_text(json.dumps(meta))
    lines = (out / "sweep.csv").read_text().splitlines()
    lines[1] += ",9,9,9"
    (out / "sweep.csv").write_text("\n".join(lines) + "\n")
    one_error(["report", str(out), "--quiet"], capsys, "sweep.csv: a row has more fields than the header")


@pytest.mark.parametrize(
    ("axis", "fragment"),
    [
        ("cluster.replicas=1,1.0", "the value 1.0 is given twice"),
        ("cluster.replicas=1,01", "the value '01' is given twice"),  # (YAML keeps 01 as text; the field reads 1)
        ("output.dir=/tmp/a,/tmp/b", "output.dir changes no figure of a sweep point"),
        ("seed=1..99999999999999999999999", "99,999,999,999,999,999,999,999 values; a sweep runs at most 10,000"),
    ],
)
def test_sweep_axes_that_repeat_or_explode_are_refused(tmp_path, capsys, axis, fragment) -> None:
    one_error(["sweep", str(QUICK), "--set", axis, "--out", str(tmp_path / "o"), "--quiet"], capsys, fragment)


def test_twin_takes_each_run_once_and_writes_outside_them(tmp_path, capsys) -> None:
    run = tmp_path / "r"
    shutil.copytree(VLLM / "poisson-light", run)
    one_error(["twin", "--engine", "vllm", str(run), str(run), "--quiet"], capsys, "given twice")
    one_error(
        ["twin", "--engine", "vllm", str(run), "--out", str(run / "o"), "--quiet"], capsys, "inside the measured run"
    )


@pytest.mark.parametrize(
    ("section", "key", "value", "fragment"),
    [
        ("cache", "enable_prefix_caching", "false", "resolved.cache.enable_prefix_caching: expected true or false"),
        ("scheduler", "watermark", "abc", "resolved.scheduler.watermark: expected a fraction from 0 to 1"),
        ("model", "max_model_len", "abc", "resolved.model.max_model_len: expected a whole number of tokens"),
        ("model", "max_model_len", 1, "the replay finished none of its requests"),
    ],
)
def test_a_twin_runs_meta_json_is_read_as_typed(tmp_path, capsys, section, key, value, fragment) -> None:
    run = tmp_path / "r"
    shutil.copytree(VLLM / "poisson-light", run)
    meta = json.loads((run / "meta.json").read_text())
    meta["resolved"].setdefault(section, {})[key] = value
    (run / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "o"
    one_error(["twin", "--engine", "vllm", str(run), "--out", str(out), "--quiet"], capsys, fragment)
    assert not out.exists()


def test_a_twin_run_scores_only_its_own_workloads_requests(tmp_path, capsys) -> None:
    import pandas as pd

    run = tmp_path / "r"
    shutil.copytree(VLLM / "poisson-light", run)
    shutil.copy(VLLM / "poisson-mid" / "workload.jsonl.gz", run / "workload.jsonl.gz")
    one_error(
        ["twin", "--engine", "vllm", str(run), "--quiet"], capsys, "requests.csv: 24 requests, where the workload"
    )
    shutil.copy(VLLM / "poisson-light" / "workload.jsonl.gz", run / "workload.jsonl.gz")
    req = pd.read_csv(run / "requests.csv")
    req.loc[2, "prompt_tokens"] *= 3
    req.to_csv(run / "requests.csv", index=False)
    one_error(
        ["twin", "--engine", "vllm", str(run), "--quiet"], capsys, "requests.csv: row 4: r2 has", "where the workload"
    )


def test_a_plan_folder_missing_a_table_it_wrote_is_refused(tmp_path, capsys) -> None:
    plan = tmp_path / "plan"
    scenario = ROOT / "tests" / "bad_inputs" / "commands" / "plan" / "base.yaml"
    assert main(["plan", str(scenario), "--out", str(plan), "--quiet", "--workers", "1"]) == 0
    (plan / "pareto.csv").unlink()
    one_error(["report", str(plan), "--quiet"], capsys, "pareto.csv missing, which this plan wrote")


def test_a_table_from_another_sweep_is_refused(tmp_path, capsys) -> None:
    argv = ["sweep", str(QUICK), "--fix", "workload.num_requests=20", "--quiet", "--workers", "1", "--no-report"]
    assert main([*argv, "--set", "cluster.replicas=1,2", "--out", str(tmp_path / "a")]) == 0
    assert main([*argv, "--set", "cluster.replicas=3,4", "--out", str(tmp_path / "b")]) == 0
    shutil.copy(tmp_path / "b" / "sweep.parquet", tmp_path / "a" / "sweep.parquet")
    one_error(["report", str(tmp_path / "a"), "--quiet"], capsys, "sweep.parquet: not the table sweep.json records")


@pytest.mark.parametrize(
    ("column", "value", "fragment"),
    [
        ("ttft_s", -1.0, "row 3, column 'ttft_s': -1.0, where llmsim writes a number >= 0"),
        ("status", "zzz", "row 3, column 'status': 'zzz', where llmsim writes one of finished"),
        ("id", 0, "row 3, column 'id': 0 is given twice"),
    ],
)
def test_an_edited_requests_table_is_refused(run_folder, tmp_path, capsys, column, value, fragment) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = copy(run_folder, tmp_path)
    path = x / "requests.parquet"
    meta = pq.read_schema(path).metadata  # (the run id kept: the edit, not a mix of runs, is what is caught)
    frame = pq.read_table(path).to_pandas()
    frame.loc[1, column] = value
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(meta), path)
    one_error(["report", str(x), "--quiet"], capsys, "requests.parquet", fragment)


def test_a_scenario_json_that_cannot_be_built_is_named(run_folder, tmp_path, capsys) -> None:
    x = copy(run_folder, tmp_path)
    data = json.loads((x / "scenario.json").read_text())
    data["model"] = "gpt-9"
    (x / "scenario.json").write_text(json.dumps(data))
    one_error(["report", str(x), "--quiet"], capsys, "scenario.json: unknown model 'gpt-9'")


def test_a_run_folder_that_lost_a_table_it_wrote_or_its_scenario_is_refused(tmp_path, capsys):
    """(A review, 2026-12-07: the report was rewritten without the prefill-chunk tracks, or without
    its hardware section, and said nothing.)"""
    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
    out = tmp_path / "run"
    argv = [
        "run",
        str(scenario),
        "--out",
        str(out),
        "--set",
        "output.trace=sample",
        "--set",
        "workload.num_requests=20",
    ]
    assert main([*argv, "--quiet"]) == 0
    assert json.loads((out / "summary.json").read_text())["tables"] == ["requests", "steps", "chunks"]
    for lost, message in (
        ("chunks.parquet", "chunks.parquet is missing, which this run wrote"),
        ("scenario.json", "scenario.json missing"),
    ):
        copy = tmp_path / lost
        shutil.copytree(out, copy)
        (copy / lost).unlink()
        capsys.readouterr()
        assert main(["report", str(copy), "--quiet"]) == 2
        assert message in capsys.readouterr().err
