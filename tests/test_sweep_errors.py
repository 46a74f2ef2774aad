"""Sweeps and plans that go wrong: bad input exits 2 before anything runs, a failing point is a row.

Exit statuses (docs/planning.md, "Exit statuses"): 0 every point ran; 1 the table and report are
written but some points failed at run time; 2 bad input, nothing ran."""

from __future__ import annotations

import os
import time

import pandas as pd
import pytest
from test_sweep import SCENARIO as TINY

import llmsim.api
from llmsim.cli import main

# test_sweep's tiny scenario, with fewer requests: these tests are about errors, not figures
SCENARIO = TINY.replace("name: sweep_tiny", "name: sweep_errors").replace("num_requests: 40", "num_requests: 20")


@pytest.fixture
def scenario(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(SCENARIO)
    return p


def sweep(scenario, out, *args: str) -> int:
    return main(["sweep", str(scenario), "--out", str(out), "--quiet", *args])


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: "), err
    assert "Traceback" not in err
    return lines[0]


def inject(monkeypatch, fail_when, action) -> None:
    """Make ``llmsim.api.run`` (what ``run_point`` calls) misbehave for the points ``fail_when`` picks."""
    real = llmsim.api.run

    def run(sc, *args, **kwargs):
        if fail_when(sc):
            action()
        return real(sc, *args, **kwargs)

    monkeypatch.setattr(llmsim.api, "run", run)


def raise_runtime_error() -> None:
    raise RuntimeError("injected failure")


@pytest.mark.parametrize(
    ("axis", "named"),
    [
        ("polcy.kind=chunked,traditional", "--set polcy.kind=chunked: polcy: unknown key 'polcy'"),
        ("cluster.replicas=two", "--set cluster.replicas=two: cluster.replicas: Input should be a valid integer"),
        ("cluster.replicas=1,0", "--set cluster.replicas=0: cluster.replicas: Input should be greater than 0"),
        ("hardware=H100-SXM,H999", "--set hardware=H999: hardware: unknown hardware 'H999'"),
    ],
)
def test_a_bad_axis_or_value_exits_2_before_anything_runs(scenario, tmp_path, capsys, monkeypatch, axis, named):
    inject(monkeypatch, lambda sc: True, lambda: pytest.fail("a point was simulated"))
    out = tmp_path / "sw"
    assert sweep(scenario, out, "--set", axis, "--workers", "1") == 2
    line = one_error_line(capsys.readouterr().err)
    assert named in line and str(scenario) in line
    assert not out.exists()  # nothing written


def test_an_infeasible_point_is_a_row_and_the_others_run(scenario, tmp_path, capsys):
    out = tmp_path / "sw"
    # 16 GB of weights + a 12 GB reserve do not fit a 24 GB L4: a result of the grid, not an input error
    code = sweep(scenario, out, "--set", "hardware=H100-SXM,L4", "--fix", "kv_cache.reserve_gb=12", "--workers", "1")
    assert code == 1
    err = capsys.readouterr().err
    assert "1 of 2 sweep points failed" in err and "Traceback" not in err
    df = pd.read_parquet(out / "sweep.parquet")
    assert df.loc[1, "hardware"] == "L4" and "does not fit on L4" in df.loc[1, "error"]
    assert pd.isna(df.loc[0, "error"]) and df.loc[0, "completed"] == 20
    assert (out / "report.html").exists() and (out / "report.md").exists()


@pytest.mark.parametrize("workers", ["1", "2"])  # in this process, and on the local process pool (forked)
def test_an_unexpected_exception_fails_its_point_only(scenario, tmp_path, capfd, monkeypatch, workers):
    inject(monkeypatch, lambda sc: sc.policy.chunk_tokens == 128, raise_runtime_error)
    out = tmp_path / "sw"
    assert sweep(scenario, out, "--set", "policy.chunk_tokens=128,256", "--workers", workers) == 1
    captured = capfd.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "1 of 2 sweep points failed" in captured.err
    df = pd.read_csv(out / "sweep.csv")
    assert df.loc[0, "error"] == "RuntimeError: injected failure"
    assert pd.isna(df.loc[1, "error"]) and df.loc[1, "completed"] == 20
    assert (out / "report.md").exists()


def test_a_worker_process_that_dies_fails_its_point_not_the_sweep(scenario, tmp_path, capfd, monkeypatch):
    # the other point has finished and its worker waits for work when the pool SIGTERMs it: a
    # forked worker that kept the command's SIGTERM handler printed a traceback (a CI run caught it)
    inject(monkeypatch, lambda sc: sc.policy.chunk_tokens == 128, lambda: (time.sleep(2), os._exit(3)))
    out = tmp_path / "sw"
    assert sweep(scenario, out, "--set", "policy.chunk_tokens=128,256", "--workers", "2", "--no-report") == 1
    captured = capfd.readouterr()
    assert "Traceback" not in captured.out + captured.err
    df = pd.read_csv(out / "sweep.csv")
    assert df.loc[0, "error"].startswith("BrokenProcessPool: ")  # the pool breaks for the points in flight


def test_on_dask_a_failing_point_is_a_row_too(scenario, monkeypatch):
    from distributed import Client, LocalCluster

    from llmsim.sweep import run_sweep

    inject(monkeypatch, lambda sc: sc.cluster.replicas == 2, raise_runtime_error)
    # threads, not processes: the workers share this process, so they see the injected failure
    cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)
    with cluster, Client(cluster) as client:
        df = run_sweep(
            scenario, {"cluster.replicas": [1, 2]}, {"workload.num_requests": 10}, dask=client, progress=False
        )
    assert list(df["error"].isna()) == [True, False]
    assert df.loc[1, "error"] == "RuntimeError: injected failure"


def test_sweep_dask_address_that_is_not_one_exits_2(scenario, tmp_path, capsys):
    out = tmp_path / "sw"
    assert sweep(scenario, out, "--set", "cluster.replicas=1", "--dask", "notanaddress") == 2
    assert "--dask 'notanaddress': not a Dask address" in one_error_line(capsys.readouterr().err)
    assert not out.exists()


def plan_scenario(tmp_path, plan: str):
    p = tmp_path / "plan.yaml"
    p.write_text(SCENARIO + plan)
    return p


@pytest.mark.parametrize(
    ("plan", "named"),
    [
        ("plan: {replicas: []}", "plan: replicas: List should have at least 1 item"),
        ("plan: {replicas: [1, -2]}", "plan: replicas.1: Input should be greater than 0"),
        ("plan: {hardware: [H100-SXM, H999]}", "plan.hardware: unknown hardware 'H999'"),
        ("plan: {policies: [chunkd]}", "plan.policies: unknown policy 'chunkd'"),
        ("plan: {tp: [0]}", "plan: tp.0: Input should be greater than 0"),
    ],
)
def test_plan_section_errors_exit_2_before_searching(tmp_path, capsys, monkeypatch, plan, named):
    inject(monkeypatch, lambda sc: True, lambda: pytest.fail("a point was simulated"))
    out = tmp_path / "plan_out"
    assert main(["plan", str(plan_scenario(tmp_path, plan)), "--out", str(out), "--quiet", "--workers", "1"]) == 2
    assert named in one_error_line(capsys.readouterr().err)
    assert not out.exists()


def test_plan_dask_address_that_is_not_one_exits_2(tmp_path, capsys):
    p = plan_scenario(tmp_path, "plan: {replicas: [1]}")
    out = tmp_path / "plan_out"
    assert main(["plan", str(p), "--out", str(out), "--quiet", "--dask", "notanaddress"]) == 2
    assert "--dask 'notanaddress': not a Dask address" in one_error_line(capsys.readouterr().err)
    assert not out.exists()


def test_when_no_point_ran_the_table_is_written_and_the_report_skipped(scenario, tmp_path, capsys):
    out = tmp_path / "sw"
    assert sweep(scenario, out, "--set", "hardware=L4", "--fix", "kv_cache.reserve_gb=12", "--workers", "1") == 1
    assert "1 of 1 sweep points failed" in capsys.readouterr().err
    assert (out / "sweep.parquet").exists() and not (out / "report.html").exists()


# ---------------------------------------------------------------- the folder: complete or untouched


def snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def interrupt() -> None:
    raise KeyboardInterrupt  # what Ctrl-C raises where it lands


@pytest.fixture
def old_sweep(scenario, tmp_path, capsys):
    """A complete sweep folder, for a second sweep to (try to) replace."""
    out = tmp_path / "sw"
    assert sweep(scenario, out, "--set", "policy.chunk_tokens=128,256", "--workers", "1") == 0
    capsys.readouterr()
    return out


def test_a_sweep_interrupted_midway_leaves_the_previous_folder_untouched(old_sweep, scenario, capsys, monkeypatch):
    before = snapshot(old_sweep)
    inject(monkeypatch, lambda sc: sc.policy.chunk_tokens == 512, interrupt)  # the second of the new points
    assert sweep(scenario, old_sweep, "--set", "policy.chunk_tokens=256,512", "--workers", "1") == 130
    assert capsys.readouterr().err.splitlines() == [f"llmsim: interrupted: results not written; {old_sweep} unchanged"]
    assert snapshot(old_sweep) == before
    assert sorted(p.name for p in old_sweep.parent.iterdir()) == ["sw", "tiny.yaml"]  # no temporary sibling


def test_a_sweep_interrupted_while_writing_leaves_the_previous_folder_untouched(
    old_sweep, scenario, capsys, monkeypatch
):
    import llmsim.report

    before = snapshot(old_sweep)
    # the new table and sweep.json are written (into the temporary folder) when the report is interrupted
    monkeypatch.setattr(llmsim.report, "write_report", lambda *a, **k: interrupt())
    assert sweep(scenario, old_sweep, "--set", "policy.chunk_tokens=256,512", "--workers", "1") == 130
    assert "unchanged" in capsys.readouterr().err
    assert snapshot(old_sweep) == before
    assert sorted(p.name for p in old_sweep.parent.iterdir()) == ["sw", "tiny.yaml"]


def test_a_signal_during_the_report_leaves_the_previous_folder_untouched(old_sweep, scenario):
    """A real process, SIGTERM'd while it writes the new report (LLMSIM_TEST_PAUSE_AT, docs/reliability.md)."""
    import signal
    import subprocess
    import sys

    before = snapshot(old_sweep)
    argv = ["sweep", str(scenario), "--out", str(old_sweep), "--set", "policy.chunk_tokens=256", "--workers", "1"]
    # (no warnings: "pure-Python modules" after an edit would come before the pause line)
    env = {**os.environ, "LLMSIM_TEST_PAUSE_AT": "write:report", "LLMSIM_PROGRESS": "0", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "llmsim.cli", *argv, "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr.readline().strip() == "llmsim: test pause at write:report"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert err.splitlines() == [f"llmsim: interrupted: results not written; {old_sweep} unchanged"]
    assert snapshot(old_sweep) == before
    assert sorted(p.name for p in old_sweep.parent.iterdir()) == ["sw", "tiny.yaml"]


def test_a_second_sweep_replaces_every_file(old_sweep, scenario):
    """--no-report into a folder with a report: the old report must not sit beside the new table."""
    assert sweep(scenario, old_sweep, "--set", "cluster.replicas=1", "--workers", "1", "--no-report") == 0
    assert sorted(p.name for p in old_sweep.iterdir()) == ["sweep.csv", "sweep.json", "sweep.parquet"]
    assert list(pd.read_csv(old_sweep / "sweep.csv").columns[:1]) == ["cluster.replicas"]


def test_a_sweep_refuses_to_replace_a_folder_with_other_files(old_sweep, scenario, capsys):
    (old_sweep / "notes.txt").write_text("mine")
    before = snapshot(old_sweep)
    assert sweep(scenario, old_sweep, "--set", "cluster.replicas=1", "--workers", "1") == 2
    assert "holds files this command does not write (notes.txt)" in one_error_line(capsys.readouterr().err)
    assert snapshot(old_sweep) == before


def test_fixed_values_that_need_an_axis_are_validated_with_it(tmp_path, capsys):
    """--fix policy.kind=vllm on a disaggregated file is valid only with the axes that drop its
    pools: the base scenario was validated with the fixed values alone and refused the sweep."""
    from pathlib import Path

    dis = Path(__file__).resolve().parent.parent / "scenarios" / "colocated_vs_disaggregated.yaml"
    out = tmp_path / "sw"
    args = ["sweep", str(dis), "--fix", "policy.kind=vllm", "--fix", "workload.num_requests=8"]
    args += ["--set", "cluster.prefill_pool=null", "--set", "cluster.decode_pool=null"]
    assert main([*args, "--workers", "1", "--no-report", "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    assert pd.read_parquet(out / "sweep.parquet")["error"].isna().all()


def _slow_point(task: tuple) -> tuple[int, dict]:
    import time

    time.sleep(1.0)
    return task[0], {}


def test_an_interrupted_sweep_stops_its_workers_at_once(monkeypatch):
    """Ctrl-C or SIGTERM reaching the sweep's own process left the pool to finish every point
    still queued (the executor's `with` waits for them): a 2,000-point sweep ran on for 22 s, and
    a Ctrl-C to the process group could hang it for good (hostile round 5)."""
    import _thread
    import threading
    import time

    from llmsim import sweep as sweep_module

    monkeypatch.setattr(sweep_module, "_indexed", _slow_point)  # (the forked workers inherit it)
    tasks = [(i,) for i in range(40)]  # 20 s of points on two workers
    threading.Timer(1.5, _thread.interrupt_main).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sweep_module._run_local(tasks, 2, False, "points")
    assert time.monotonic() - start < 10
