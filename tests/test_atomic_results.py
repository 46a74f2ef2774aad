"""Results folders are complete or untouched (docs/reliability.md): a signal, a full disk or a
refused folder leave the previous run's bytes and no temporary folder; every file of a run carries
the same run id, and ``llmsim report`` refuses a folder that mixes two runs."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from llmsim.cli import main

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = {
    "name": "atomic",
    "seed": 3,
    "model": "gpt2",
    "hardware": "H100-SXM",
    "workload": {
        "kind": "poisson",
        "rate_rps": 20,
        "num_requests": 30,
        "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 16},
    },
}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(folder: Path) -> list[str]:
    """Temporary siblings (``.NAME.tmp-PID``, ``.old-``) and temporary files inside."""
    beside = [p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]
    inside = [p.name for p in folder.rglob(".*")] if folder.exists() else []
    return beside + inside


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sc") / "atomic.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


@pytest.fixture(scope="module")
def first_run(scenario, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("first") / "out"
    assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture
def old(first_run, tmp_path) -> Path:
    """A private copy of a complete run's folder, for a second run to (try to) replace."""
    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    return out


def llmsim(*argv: str, env: dict | None = None, **kw) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "LLMSIM_PROGRESS": "0", **(env or {})}
    own = kw.pop("preexec_fn", None)

    def preexec() -> None:
        # a shell without job control starts background jobs with SIGINT ignored, and Python keeps
        # an ignored SIGINT ignored: the child takes Ctrl-C as a terminal's user sends it, however
        # the tests were started (`make test &` in a script)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if own is not None:
            own()

    return subprocess.Popen(
        [sys.executable, "-m", "llmsim.cli", *argv],
        cwd=ROOT,
        env=full_env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
        **kw,
    )


# ---------------------------------------------------------------- signals


@pytest.mark.parametrize(
    ("signum", "point"),
    [
        (signal.SIGINT, "simulated"),  # before the new folder exists
        (signal.SIGINT, "write:steps"),  # half the tables in the new folder
        (signal.SIGTERM, "write:summary"),
        (signal.SIGTERM, "write:report"),  # everything written, not yet swapped in
        (signal.SIGTERM, "swap"),
    ],
)
def test_signal_leaves_the_old_folder_exactly(old, scenario, signum, point):
    before = snapshot(old)
    proc = llmsim(
        "run", str(scenario), "--out", str(old), "--set", "seed=4", "--quiet", env={"LLMSIM_TEST_PAUSE_AT": point}
    )
    assert proc.stderr.readline().strip() == f"llmsim: test pause at {point}"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum  # 130 (SIGINT), 143 (SIGTERM)
    assert err.splitlines() == [f"llmsim: interrupted: results not written; {old} unchanged"]
    assert snapshot(old) == before
    assert leftovers(old) == []


def test_a_signal_into_a_new_folder_leaves_nothing(tmp_path, scenario):
    out = tmp_path / "new"
    proc = llmsim("run", str(scenario), "--out", str(out), "--quiet", env={"LLMSIM_TEST_PAUSE_AT": "write:requests"})
    proc.stderr.readline()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert not out.exists() and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- full disk


def _small_file_limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (8_000, 8_000))  # the tables are bigger


def test_full_disk_gives_one_line_and_leaves_the_old_folder(old, scenario):
    before = snapshot(old)
    proc = llmsim("run", str(scenario), "--out", str(old), "--set", "seed=4", "--quiet", preexec_fn=_small_file_limit)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.splitlines() == [
        f"llmsim: error: {old}: could not write the results (File too large (EFBIG)); {old} is unchanged"
    ]
    assert snapshot(old) == before
    assert leftovers(old) == []


# ---------------------------------------------------------------- one run per folder


def test_every_file_carries_the_same_run_id(first_run):
    run_id = json.loads((first_run / "summary.json").read_text())["run_id"]
    assert json.loads((first_run / "scenario.json").read_text())["run_id"] == run_id
    for table in ("requests", "steps", "chunks"):
        assert pq.read_schema(first_run / f"{table}.parquet").metadata[b"llmsim.run_id"].decode() == run_id
    for report in ("report.md", "report.html"):
        assert f"<!-- llmsim run_id: {run_id} -->" in (first_run / report).read_text()


def test_report_refuses_a_folder_mixing_two_runs(old, scenario, tmp_path, capsys):
    other = tmp_path / "other"
    assert main(["run", str(scenario), "--out", str(other), "--set", "seed=4", "--quiet", "--no-report"]) == 0
    shutil.copy(other / "requests.parquet", old / "requests.parquet")
    before = snapshot(old)
    capsys.readouterr()
    assert main(["report", str(old), "--quiet"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "files from different runs: requests.parquet (run " in err[0], err
    assert snapshot(old) == before and leftovers(old) == []


def test_report_refuses_a_changed_csv_table(scenario, tmp_path, capsys):
    out = tmp_path / "csv"
    assert main(["run", str(scenario), "--out", str(out), "--set", "output.format=csv", "--quiet"]) == 0
    steps = out / "steps.csv"
    steps.write_text(steps.read_text().replace("\n", "\n", 1) + "")  # same bytes: still accepted
    assert main(["report", str(out), "--quiet"]) == 0
    steps.write_text(steps.read_text()[:-40])  # a truncated copy: not the table the run wrote
    capsys.readouterr()
    assert main(["report", str(out), "--quiet"]) == 2
    assert "steps.csv: not the bytes llmsim wrote (edited, cut short or replaced" in capsys.readouterr().err


def test_report_rewrites_the_folder_as_a_whole(old):
    before = snapshot(old)
    (old / "trace.json").unlink()
    assert main(["report", str(old), "--quiet"]) == 0
    assert snapshot(old) == before and leftovers(old) == []


def test_run_refuses_to_replace_a_folder_with_other_files(old, scenario, capsys):
    (old / "notes.txt").write_text("mine")
    before = snapshot(old)
    assert main(["run", str(scenario), "--out", str(old), "--quiet", "--no-report"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"llmsim: error: output directory {old} holds files this command does not write (notes.txt); it replaces "
        "the whole folder, so pick a new or empty --out, or move them"
    ]
    assert snapshot(old) == before


def test_a_second_run_replaces_every_file(old, scenario):
    """--no-report into a folder with a report: the old report must not survive next to new tables."""
    assert main(["run", str(scenario), "--out", str(old), "--set", "seed=4", "--quiet", "--no-report"]) == 0
    assert not (old / "report.html").exists() and not (old / "report_plots").exists()
    assert json.loads((old / "summary.json").read_text())["seed"] == 4


def test_a_file_of_the_user_s_in_report_plots_is_not_replaced(old, scenario, capsys):
    """report_plots/ is the report's (NN.png figures): a file of someone else's inside it is theirs,
    and a run that replaces the folder whole refuses it as it refuses one beside it (it was deleted)."""
    (old / "report_plots").mkdir(exist_ok=True)
    (old / "report_plots" / "notes.txt").write_text("mine")
    before = snapshot(old)
    assert main(["run", str(scenario), "--out", str(old), "--quiet", "--no-report"]) == 2
    assert "holds files this command does not write (report_plots/notes.txt)" in capsys.readouterr().err
    assert snapshot(old) == before


def test_a_new_run_keeps_the_sweep_and_twin_folders_inside_it(old, scenario, capsys):
    """`llmsim run S`, `llmsim sweep S` (into <run folder>/sweep by default), `llmsim run S`: the
    second run keeps sweep/ and twin/ as they were; a folder that only shares the name does not pass."""
    for name, marker in (("sweep", "sweep.json"), ("twin", "twin_runs.csv")):
        (old / name).mkdir()
        (old / name / marker).write_text("{}")
    kept = {name: snapshot(old / name) for name in ("sweep", "twin")}
    assert main(["run", str(scenario), "--out", str(old), "--set", "seed=5", "--quiet", "--no-report"]) == 0
    assert {name: snapshot(old / name) for name in ("sweep", "twin")} == kept
    assert json.loads((old / "summary.json").read_text())["seed"] == 5
    (old / "sweep" / "sweep.json").unlink()  # now just a folder named sweep: someone else's
    assert main(["run", str(scenario), "--out", str(old), "--quiet", "--no-report"]) == 2
    assert "holds files this command does not write (sweep/)" in capsys.readouterr().err


# ---------------------------------------------------------------- file modes


@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_modes_follow_the_umask(tmp_path, scenario, umask, file_mode, dir_mode):
    out = tmp_path / "out"
    proc = llmsim("run", str(scenario), "--out", str(out), "--quiet", preexec_fn=lambda: os.umask(umask))
    assert proc.wait(timeout=60) == 0
    modes = {str(p.relative_to(tmp_path)): p.stat().st_mode & 0o777 for p in [out, *out.rglob("*")]}
    want = {name: dir_mode if (tmp_path / name).is_dir() else file_mode for name in modes}
    assert modes == want and "out/report_plots/00.png" in modes


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_the_command_is_done_changes_nothing(tmp_path, scenario, signum):
    """A Ctrl-C landing after the results were written and said (in the interpreter's teardown)
    ended the command with 130 and no word: a script read complete results as failed (hostile round 5)."""
    out = tmp_path / "done"
    proc = llmsim("run", str(scenario), "--out", str(out), "--quiet", env={"LLMSIM_TEST_PAUSE_AT": "exit"})
    assert proc.stderr.readline().strip() == "llmsim: test pause at exit"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == ""
    assert (out / "summary.json").exists()
