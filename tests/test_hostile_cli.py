"""Hostile command lines (issue #19; docs/scenario.md "Hostile command lines", docs/profile_format.md):
malformed ``--set`` items, sizes past the scenario's bounds, unwritable ``--out``, corrupt result
and profile files. Each ends in exit 2 and one ``llmsim: error:`` line naming the culprit, with
no traceback, and writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmsim.cli import main

ROOT = Path(__file__).resolve().parent.parent
QUICK = str(ROOT / "scenarios/quickstart.yaml")
VIDUR = ROOT / "data/calibration/vidur"
MLP = VIDUR / "compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
ALL_REDUCE = VIDUR / "network/a100_dgx/all_reduce.csv"
GENERIC_HEAD = "op,kind,m,n,k,seconds\nmlp_up_proj,gemm,512,28672,4096,0.0004\n"


def one_error(argv: list[str], capsys: pytest.CaptureFixture[str], *fragments: str) -> str:
    """Run ``llmsim argv`` in-process (an uncaught exception fails the test, as a traceback would):
    exit 2, exactly one stderr line, ``llmsim: error:`` and every fragment in it."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("llmsim: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def run_argv(out: Path, *sets: str) -> list[str]:
    argv = ["run", QUICK, "--out", str(out), "--quiet", "--no-report", "--set", "workload.num_requests=5"]
    for s in sets:
        argv += ["--set", s]
    return argv


# --set item -> fragments of its message
BAD_SETS = {
    "policy={": ["--set 'policy={'", "not valid YAML", "column 2"],
    "seed=[1, 2": ["--set 'seed=[1, 2'", "not valid YAML"],
    "seed=@x": ["--set 'seed=@x'", "not valid YAML", "'@'"],
    "seed=!!python/object/apply:os.system [ls]": ["refused YAML tag", "python/object/apply:os.system"],
    "=3": ["--set '=3'", "empty key"],
    "a..b=1": ["--set 'a..b=1'", "key 'a..b' has an empty name between dots"],
    "policy.=1": ["key 'policy.' has an empty name"],
    "noequals": ["--set 'noequals'", "expected KEY=VALUE"],
    # read as files are: a key given twice, an alias bomb
    "workload={a: 1, a: 2}": ["--set 'workload={a: 1, a: 2}'", "key 'a' given twice"],
    "workload=[&a [1,1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], "
    "&d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d], &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e], "
    "[*f,*f]]": ["more than 1,000,000 values"],
}


@pytest.mark.parametrize("item", list(BAD_SETS))
def test_malformed_set(item: str, tmp_path: Path, capsys) -> None:
    one_error(run_argv(tmp_path / "out", item), capsys, *BAD_SETS[item])
    assert not (tmp_path / "out").exists()


# --set key=value -> the key and the limit its message names (bounds in llmsim/scenario.py)
OUT_OF_BOUNDS = {
    "seed=-1": ["seed", "greater than or equal to 0", "-1"],
    f"seed={2**64}": ["seed", f"less than or equal to {2**64 - 1}"],
    "cluster.replicas=1000000": ["cluster.replicas", "less than or equal to 10000", "1000000"],
    "cluster.tp=100000": ["cluster.tp", "less than or equal to 1024"],
    "cluster.pp=100000": ["cluster.pp", "less than or equal to 1024"],
    "policy.max_num_seqs=1000000000000": ["policy.max_num_seqs", "less than or equal to 1000000"],
    "kv_cache.num_blocks=1000000000000000": ["kv_cache.num_blocks", "less than or equal to 100000000"],
    "kv_cache.block_tokens=1.0e+9": ["kv_cache.block_tokens", "less than or equal to 8192"],
    "kv_cache.block_tokens=1000000000": ["kv_cache.block_tokens", "less than or equal to 8192"],
    # YAML 1.1 reads 1e9 (no dot, no exponent sign) as a string: still the key, not "does not fit"
    "kv_cache.block_tokens=1e9": ["kv_cache.block_tokens", "valid integer", "'1e9'"],
    "policy.chunk_tokens=1000000000": ["policy.chunk_tokens", "less than or equal to 16777216"],
}


@pytest.mark.parametrize("item", list(OUT_OF_BOUNDS))
def test_sizes_out_of_bounds_name_key_and_limit(item: str, tmp_path: Path, capsys) -> None:
    one_error(run_argv(tmp_path / "out", item), capsys, "quickstart.yaml", *OUT_OF_BOUNDS[item])


def test_pool_replicas_bounded(tmp_path: Path, capsys) -> None:
    sets = ["policy.kind=disaggregated", "cluster.prefill_pool={replicas: 20000}", "cluster.decode_pool={replicas: 1}"]
    one_error(run_argv(tmp_path / "out", *sets), capsys, "cluster.prefill_pool.replicas", "10000")


def test_shipped_scenarios_stay_within_bounds() -> None:
    """The bounds are pydantic's: every shipped scenario passes them (names are checked elsewhere;
    twin_small's local-cpu profile exists only after `llmsim calibrate --local-cpu`)."""
    from llmsim.errors import load_yaml_file
    from llmsim.scenario import Scenario

    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        Scenario.model_validate(dict(load_yaml_file(path), base_dir=str(path.parent)))


@pytest.mark.parametrize(
    "out, fragment",
    [
        ("/proc/llmsim-out", "not writable"),
        ("/proc", "holds files this command does not write"),
        ("FILE", "Not a directory"),
    ],
)
def test_unwritable_out(out: str, fragment: str, tmp_path: Path, capsys) -> None:
    if out == "FILE":
        out = str(tmp_path / "a_file")
        Path(out).write_text("mine")
    one_error(run_argv(Path(out)), capsys, f"output directory {out}", fragment)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"requests": ', "not valid JSON (line 1)"),
        ("[1, 2]", "expected a JSON object, got list"),
        (b"\xff\xfe", "not a text file"),
        ("{}", "not an llmsim run summary (missing requests, slo, saturation, pools)"),
    ],
)
def test_report_on_corrupt_summary(text: str | bytes, fragment: str, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    summary = folder / "summary.json"
    summary.write_bytes(text if isinstance(text, bytes) else text.encode())
    one_error(["report", str(folder), "--quiet"], capsys, str(summary), fragment)
    assert sorted(p.name for p in folder.iterdir()) == ["summary.json"]  # nothing written


# generic-CSV body (after the header and one good row) -> fragments; the bad row is line 3
BAD_CELLS = {
    "inf": ("mlp_up_proj,gemm,512,28672,4096,inf\n", ["row 3", "column 'seconds'", "finite", "'inf'"]),
    "nan": ("mlp_up_proj,gemm,512,28672,4096,nan\n", ["row 3", "column 'seconds'", "finite", "'nan'"]),
    "blank": ("mlp_up_proj,gemm,512,28672,4096,\n", ["row 3", "column 'seconds'", "blank"]),
    "text": ("mlp_up_proj,gemm,many,28672,4096,0.0004\n", ["row 3", "column 'm'", "expected a number", "'many'"]),
    "negative": ("mlp_up_proj,gemm,512,28672,4096,-0.001\n", ["row 3", "column 'seconds'", "must be > 0", "-0.001"]),
    "fraction": ("mlp_up_proj,gemm,512.5,28672,4096,0.0004\n", ["row 3", "column 'm'", "whole number"]),
    "ragged": ("mlp_up_proj,gemm,512,28672,4096,0.0004,extra\n", ["row 3", "7 cells", "6 columns"]),
}


@pytest.mark.parametrize("command", ["calibrate", "validate"])
@pytest.mark.parametrize("case", list(BAD_CELLS))
def test_bad_generic_cells(command: str, case: str, tmp_path: Path, capsys) -> None:
    body, fragments = BAD_CELLS[case]
    csv = tmp_path / f"{case}.csv"
    csv.write_text(GENERIC_HEAD + body)
    one_error(profile_argv(command, csv, tmp_path), capsys, str(csv), *fragments)
    assert not (tmp_path / "cal.yaml").exists()


def profile_argv(command: str, csv: Path, tmp_path: Path) -> list[str]:
    if command == "calibrate":
        return [
            "calibrate",
            "--hardware",
            "H100-SXM",
            "--profile",
            str(csv),
            "--out",
            str(tmp_path / "cal.yaml"),
            "--quiet",
        ]
    return ["validate", "--hardware", "H100-SXM", "--model", "llama-3.1-8b", "--profile", str(csv), "--quiet"]


def with_cell(src: Path, dst: Path, data_row: int, column: str, value: str) -> Path:
    """``src``'s header and first ``data_row`` rows, the last one's ``column`` set to ``value``."""
    lines = src.read_text().splitlines()[: data_row + 1]
    col = lines[0].split(",").index(column)
    cells = lines[-1].split(",")
    cells[col] = value
    dst.write_text("\n".join([*lines[:-1], ",".join(cells)]) + "\n")
    return dst


def test_vidur_mlp_nan_median(tmp_path: Path, capsys) -> None:
    csv = with_cell(MLP, tmp_path / "mlp.csv", 2, "time_stats.mlp_up_proj.median", "nan")
    one_error(profile_argv("validate", csv, tmp_path), capsys, "row 3", "'time_stats.mlp_up_proj.median'", "finite")


def test_vidur_all_reduce_inf_and_negative(tmp_path: Path, capsys) -> None:
    csv = with_cell(ALL_REDUCE, tmp_path / "inf.csv", 1, "time_stats.all_reduce.median", "inf")
    one_error(profile_argv("calibrate", csv, tmp_path), capsys, "row 2", "'time_stats.all_reduce.median'", "'inf'")
    csv = with_cell(ALL_REDUCE, tmp_path / "neg.csv", 3, "size", "-2048")
    one_error(profile_argv("calibrate", csv, tmp_path), capsys, "row 4", "column 'size'", "must be > 0")


ROOFLINE = ["roofline", "--model", "llama-3.1-8b", "--hardware", "H100-SXM", "--out", "-", "--quiet"]


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--decode-batch", "-1"], ["--decode-batch -1", "must be >= 0"]),
        (["--decode-batch", "1000000000000"], ["--decode-batch 1000000000000", "at most 1,000,000"]),
        (["--decode-batch", "2", "--context", "-5"], ["--context -5", "must be >= 0"]),
        (["--decode-batch", "2", "--context", "10000000000"], ["--context 10000000000", "at most 16,777,216"]),
        (["--prefill-tokens", "10000000000"], ["--prefill-tokens 10000000000", "at most 16,777,216"]),
    ],
)
def test_roofline_sizes(flags: list[str], fragments: list[str], capsys) -> None:
    one_error([*ROOFLINE, *flags], capsys, *fragments)


def test_twin_vllm_on_a_folder_that_is_not_a_run(tmp_path: Path, capsys) -> None:
    one_error(["twin", "--engine", "vllm", str(tmp_path), "--quiet"], capsys, str(tmp_path), "not a serving run")


def test_real_process_prints_one_line(tmp_path: Path) -> None:
    """The installed entry point, end to end: exit 2, one line, no traceback, nothing written."""
    argv = [sys.executable, "-m", "llmsim.cli", *run_argv(tmp_path / "out", "seed=-1")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"llmsim: error: {QUICK}: --set seed=-1: seed: Input should be greater than or equal to 0 (got -1)"
    ]
    assert not (tmp_path / "out").exists()


def test_a_reader_that_leaves_early_is_not_an_error() -> None:
    """`llmsim roofline ... | head`: the pipe closes before the table is written. BrokenPipeError
    is an OSError, and the path handler used to catch it first and print a traceback."""
    argv = [sys.executable, "-m", "llmsim.cli", "roofline", "--model", "llama-3.1-8b", "--hardware", "H100-SXM"]
    proc = subprocess.Popen(
        [*argv, "--decode-batch", "8", "--out", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err, err


def test_report_on_a_scenario_json_that_is_not_a_scenario(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "run"
    assert main(["run", str(ROOT / "scenarios/quickstart.yaml"), "--out", str(folder), "--quiet", "--no-report",
                 "--set", "workload.num_requests=20"]) == 0  # fmt: skip
    import json

    data = json.loads((folder / "scenario.json").read_text())
    (folder / "scenario.json").write_text(json.dumps({**data, "polcy": {}}))  # one key misspelled
    one_error(["report", str(folder), "--quiet"], capsys, str(folder / "scenario.json"), "polcy")


def test_paths_the_system_cannot_open(tmp_path: Path, capsys) -> None:
    """A name past the file system's limit, a path past PATH_MAX and a loop of symbolic links are
    refused in one line, as --out and as inputs, and nothing is written."""
    long_name = tmp_path / ("a" * 300)
    one_error(run_argv(long_name), capsys, "characters): file name too long")
    one_error(["models", "m" * 300], capsys, "file name too long")
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    one_error(run_argv(tmp_path / "l1"), capsys, "l1: a loop of symbolic links")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l1", "l2"]


@pytest.mark.parametrize(
    "dist", ["dist: lognormal, median: 500, sigma: 0.8", "dist: uniform", "dist: fixed, value: 10"]
)
def test_crossed_length_bounds_are_refused_for_every_distribution(dist: str, tmp_path: Path, capsys) -> None:
    # (min and max clip a lognormal draw too: crossed, every prompt would silently be max tokens)
    spec = f"workload.prompt_tokens={{{dist}, min: 5000, max: 16}}"
    one_error(run_argv(tmp_path / "out", spec), capsys, "workload.prompt_tokens", "min (5000) must be <= max (16)")
    assert not (tmp_path / "out").exists()


# bytes of a trace file -> what its message says instead of pandas' or the codec's words
NOT_TEXT = {
    "binary": (b"DDDD\x00\x01" + bytes(range(256)) * 16, "not a text file"),
    "utf16": ("arrival_s,prompt_tokens,output_tokens\n0,10,10\n".encode("utf-16"), "UTF-16 text"),
}


@pytest.mark.parametrize(
    "fmt, suffix", [("generic", ".csv"), ("generic", ".jsonl"), ("azure", ".csv"), ("mooncake", ".jsonl")]
)
@pytest.mark.parametrize("kind", list(NOT_TEXT))
def test_a_trace_that_is_not_text(fmt: str, suffix: str, kind: str, tmp_path: Path, capsys) -> None:
    """Every trace reader says what the scenario reader and calibrate say of such a file, in a
    short line (a binary file became a column name kilobytes long)."""
    data, fragment = NOT_TEXT[kind]
    trace = tmp_path / f"trace{suffix}"
    trace.write_bytes(data)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"name: s\nmodel: gpt2\nhardware: H100-SXM\nworkload: {{kind: trace, trace: {{path: {trace.name}, format: {fmt}}}}}\n"
    )
    line = one_error(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"], capsys, str(trace), fragment)
    assert len(line) < 300, line
    assert not (tmp_path / "out").exists()


def test_report_on_a_file_names_its_folder_only_where_it_is_one(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("f").touch()
    line = one_error(["report", "f", "--quiet"], capsys, "f: a file, not a folder")
    assert line.endswith("the whole output folder of a run, a sweep or a plan"), line  # (was "...: .?")
    assert main(run_argv(tmp_path / "run")) == 0
    capsys.readouterr()
    one_error(["report", "run/summary.json", "--quiet"], capsys, "give the folder it is in: `llmsim report run`")


@pytest.mark.parametrize(
    "item, fragments",
    [
        ("workload.rate_rps=-1", ["quickstart.yaml: --set workload.rate_rps=-1: workload.rate_rps:", "(got -1)"]),
        # found while building the run, after the scenario was read
        ("workload.num_requests=100000000000", ["--set workload.num_requests=100000000000: workload.num_requests"]),
        ("workload={kind: poisson, rate_rps: -3}", ["--set workload={kind: poisson, rate_rps: -3}: workload.rate_rps"]),
    ],
)
def test_a_bad_value_from_set_names_the_set_item(item: str, fragments: list[str], tmp_path: Path, capsys) -> None:
    argv = ["run", QUICK, "--out", str(tmp_path / "out"), "--quiet", "--set", item]
    one_error(argv, capsys, *fragments)
    assert not (tmp_path / "out").exists()


def test_a_bad_value_of_the_file_stays_the_files(tmp_path: Path, capsys) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(Path(QUICK).read_text().replace("rate_rps: 8", "rate_rps: -8"))
    line = one_error(
        ["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet", "--set", "seed=3"],
        capsys,
        f"{scenario}: workload.rate_rps",
    )
    assert "--set" not in line, line


def test_out_under_a_file_says_so_for_every_folder_command(tmp_path: Path, capsys) -> None:
    afile = tmp_path / "afile"
    afile.write_text("mine")
    out = str(afile / "sub")
    one_error(run_argv(Path(out)), capsys, f"output directory {out}: {afile} is a file, not a directory")
    sweep = ["sweep", QUICK, "--set", "cluster.replicas=1,2", "--out", out, "--quiet"]
    one_error(sweep, capsys, f"output directory {out}: {afile} is a file, not a directory")
    assert afile.read_text() == "mine"


def test_report_refuses_a_run_folder_without_its_steps(tmp_path: Path, capsys) -> None:
    """(requests.parquet deleted: the catalogue's report/missing_requests)"""
    assert main(run_argv(tmp_path / "run")) == 0
    capsys.readouterr()
    (tmp_path / "run" / "steps.parquet").unlink()
    one_error(["report", str(tmp_path / "run"), "--quiet"], capsys, "steps.parquet is missing")
    assert not (tmp_path / "run" / "report.html").exists()


@pytest.mark.parametrize(
    "spec, unread",
    [
        ("{dist: fixed, value: 10, median: 300, sigma: 2}", "dist 'fixed' does not read ['median', 'sigma']"),
        ("{dist: uniform, min: 1, max: 9, value: 5}", "dist 'uniform' does not read ['value']"),
        ("{dist: lognormal, median: 300, sigma: 1, value: 5}", "dist 'lognormal' does not read ['value']"),
        ("{dist: lognormal, median: 300, sigma: 1, format: mooncake}", "dist 'lognormal' does not read ['format']"),
    ],
)
def test_a_length_key_its_dist_does_not_read_is_refused(spec: str, unread: str, tmp_path: Path, capsys) -> None:
    # (it was ignored: a fixed length with a median drew the fixed value and said nothing)
    one_error(run_argv(tmp_path / "out", f"workload.prompt_tokens={spec}"), capsys, "workload.prompt_tokens", unread)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("spec", ["{dist: fixed, value: 10}", "{dist: uniform, min: 1, max: 9}"])
def test_a_length_spec_read_back_with_every_key_stays_accepted(spec: str) -> None:
    """A scenario dumped and read again (a plan's points, a run's scenario.json) carries every key of
    a length spec: its None values and `format: azure` are not keys another dist reads."""
    import yaml

    from llmsim.scenario import load_scenario, scenario_from_dict

    sc = load_scenario(QUICK, {"workload.prompt_tokens": yaml.safe_load(spec)})
    dumped = sc.model_dump(exclude={"base_dir"})
    assert dumped["workload"]["prompt_tokens"]["format"] == "azure"
    scenario_from_dict(dumped, "again", ROOT / "scenarios")


def test_a_duration_beside_a_request_count(tmp_path: Path, capsys) -> None:
    """Alternatives (docs/scenario.md): with both, duration_s was ignored; all_at_once does not read
    duration_s at all, so there it stays allowed (a sweep over workload.kind carries it)."""
    from llmsim.scenario import load_scenario

    one_error(
        run_argv(tmp_path / "out", "workload.duration_s=10"), capsys, "--set workload.duration_s=10", "alternatives"
    )
    sc = load_scenario(QUICK, {"workload.num_requests": None, "workload.duration_s": 10})
    assert sc.workload.duration_s == 10
    assert (
        load_scenario(QUICK, {"workload.kind": "all_at_once", "workload.duration_s": 10}).workload.num_requests == 600
    )


@pytest.mark.parametrize(
    "sets, fixes, fragments",
    [
        # found by the points' check (the request limit), where the first axis value was blamed
        (["cluster.replicas=1,2"], ["workload.num_requests=100000000"], ["--fix workload.num_requests=100000000"]),
        # found reading the base scenario (the file was blamed)
        (["cluster.replicas=1,2"], ["workload.rate_rps=-1"], ["--fix workload.rate_rps=-1: workload.rate_rps"]),
        # a --fix the file refuses alone but every good point accepts: the bad axis value is named
        (["workload.num_requests=null,-5"], ["workload.duration_s=60"], ["--set workload.num_requests=-5"]),
    ],
)
def test_sweep_names_the_fix_item_of_a_bad_value(
    sets: list[str], fixes: list[str], fragments: list[str], tmp_path: Path, capsys
) -> None:
    argv = ["sweep", QUICK, "--out", str(tmp_path / "out"), "--quiet"]
    for s in sets:
        argv += ["--set", s]
    for f in fixes:
        argv += ["--fix", f]
    line = one_error(argv, capsys, "quickstart.yaml: ", *fragments)
    assert line.count("--fix") + line.count("--set") == 1, line
    assert not (tmp_path / "out").exists()


def test_sweep_refuses_an_axis_value_given_twice(tmp_path: Path, capsys) -> None:
    # (a mapping written in another key order is the same value)
    item = "workload.prompt_tokens={dist: fixed, value: 3},{value: 3, dist: fixed}"
    argv = ["sweep", QUICK, "--set", item, "--out", str(tmp_path / "out"), "--quiet"]
    one_error(argv, capsys, f"--set {item!r}", "the value {dist: fixed, value: 3} is given twice")
    argv = ["sweep", QUICK, "--set", "cluster.replicas=1,2,1", "--out", str(tmp_path / "out"), "--quiet"]
    one_error(argv, capsys, "--set 'cluster.replicas=1,2,1'", "the value 1 is given twice")


@pytest.mark.parametrize(
    "result, bench, fragments",
    [
        ({"request_rate": 1e-300}, "--num-prompts 3", ["r.json: request_rate: 3 requests at 1e-300 req/s"]),
        ({"request_rate": 2}, "--num-prompts 3 --request-rate 1e-300", ["--bench --request-rate 1e-300: 3 requests"]),
        ({"request_rate": 2, "start_times": [0, 1, 1e300]}, "--num-prompts 3", ["r.json: start_times: ", "1e+300 s"]),
    ],
)
def test_bench_names_the_field_of_send_times_past_the_bound(
    result: dict, bench: str, fragments: list[str], tmp_path: Path, capsys
) -> None:
    """Not the temporary requests.csv the result's requests are replayed from (deleted by then)."""
    import json

    path = tmp_path / "r.json"
    path.write_text(json.dumps({"num_prompts": 3, "input_lens": [10, 20, 30], "output_lens": [5, 5, 5], **result}))
    argv = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve meta-llama/Llama-3.1-8B-Instruct"]
    line = one_error([*argv, "--bench", bench, "--result", str(path), "--quiet"], capsys, *fragments)
    assert "requests.csv" not in line, line


def test_trtllm_chunked_context_needs_a_step_of_one_block(tmp_path: Path, capsys) -> None:
    # (a prompt cut short gets whole KV blocks: under one block a step, a long prompt never starts)
    sets = ("policy.kind=trtllm", "policy.enable_chunked_context=true", "policy.max_batch_tokens=8")
    one_error(run_argv(tmp_path / "out", *sets), capsys, "policy.max_batch_tokens: 8 tokens", "less than one KV block")
    assert not (tmp_path / "out").exists()


def test_a_malformed_fix_item_is_named_as_a_fix(tmp_path: Path, capsys) -> None:
    argv = ["sweep", QUICK, "--set", "policy.chunk_tokens=256,512", "--fix", "workload..rate_rps=1"]
    one_error([*argv, "--out", str(tmp_path / "out"), "--quiet"], capsys, "--fix 'workload..rate_rps=1'")


def test_vllm_serve_block_size_is_one_vllm_takes(capsys) -> None:
    serve = "vllm serve meta-llama/Llama-3.1-8B-Instruct --block-size 7"
    argv = ["bench", "--hardware", "H100-SXM", "--serve", serve, "--bench", "--num-prompts 3"]
    one_error(argv, capsys, "--block-size 7", "1, 8, 16, 32, 64, 128, 256")
