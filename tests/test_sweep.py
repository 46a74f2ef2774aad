"""Sweeps: grid parsing, and identical tables in-process, on local processes and on Dask."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from llmsim.errors import UserError
from llmsim.sweep import expand, parse_grid, parse_values, run_sweep, write_table

SCENARIO = """
name: sweep_tiny
seed: 3
model: llama-3.1-8b
hardware: H100-SXM
policy: {kind: chunked, chunk_tokens: 256, max_num_seqs: 32}
workload:
  kind: poisson
  rate_rps: 6
  num_requests: 40
  prompt_tokens: {dist: lognormal, median: 600, sigma: 0.6, min: 16, max: 2048}
  output_tokens: {dist: uniform, min: 4, max: 40}
slo: {ttft_s: 0.5, tbt_s: 0.05}
"""


@pytest.fixture
def scenario(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(SCENARIO)
    return p


def test_parse_values_lists_ranges_and_scalars():
    assert parse_values("256,512,1024") == [256, 512, 1024]
    assert parse_values("1..4") == [1, 2, 3, 4]
    assert parse_values("2..8..3") == [2, 5, 8]
    assert parse_values("chunked,traditional") == ["chunked", "traditional"]
    assert parse_values("0.5") == [0.5]


@pytest.mark.parametrize("bad", ["4..1", "1..x", "1..8..0"])
def test_bad_ranges_are_user_errors(bad):
    with pytest.raises(UserError, match="range"):
        parse_values(bad)


def test_grid_expands_in_order_last_key_fastest():
    grid = parse_grid(["cluster.replicas=1..2", "policy.kind=chunked,traditional"])
    assert expand(grid) == [
        {"cluster.replicas": 1, "policy.kind": "chunked"},
        {"cluster.replicas": 1, "policy.kind": "traditional"},
        {"cluster.replicas": 2, "policy.kind": "chunked"},
        {"cluster.replicas": 2, "policy.kind": "traditional"},
    ]
    with pytest.raises(UserError, match="KEY=VALUES"):
        parse_grid(["cluster.replicas"])


def test_sweep_rows_follow_the_grid_and_record_errors(scenario, tmp_path):
    grid = {"cluster.replicas": [1, 2], "hardware": ["H100-SXM", "L4"]}
    df = run_sweep(scenario, grid, {"kv_cache.reserve_gb": 12}, workers=1, progress=False)
    assert list(df["cluster.replicas"]) == [1, 1, 2, 2]
    assert list(df["hardware"]) == ["H100-SXM", "L4"] * 2
    # 16 GB of weights + a 12 GB reserve do not fit a 24 GB L4: an error row, not a crash
    l4 = df[df["hardware"] == "L4"]
    assert l4["error"].str.contains("does not fit").all()
    assert l4["request_throughput"].isna().all()
    h100 = df[df["hardware"] == "H100-SXM"]
    assert h100["error"].isna().all() and (h100["completed"] == 40).all()
    # twice the devices, twice the price
    assert math.isclose(h100["usd_per_hour"].iloc[1], 2 * h100["usd_per_hour"].iloc[0])
    paths = write_table(df, tmp_path / "out")
    back = pd.read_parquet(paths[0])
    pd.testing.assert_frame_equal(back, df)
    assert pd.read_csv(paths[1]).shape == df.shape


def test_same_table_in_process_on_local_processes_and_on_dask(scenario):
    from distributed import Client, LocalCluster

    grid = {"cluster.replicas": [1, 2], "policy.kind": ["chunked", "traditional"]}
    serial = run_sweep(scenario, grid, workers=1, progress=False)
    local = run_sweep(scenario, grid, workers=2, progress=False)  # a local process pool
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        on_dask = run_sweep(scenario, grid, dask=cluster.scheduler_address, progress=False)
        with Client(cluster) as client:  # a Client object works too
            on_client = run_sweep(scenario, grid, dask=client, progress=False)
    pd.testing.assert_frame_equal(serial, local)
    pd.testing.assert_frame_equal(serial, on_dask)
    pd.testing.assert_frame_equal(serial, on_client)
    assert serial["error"].isna().all()
    # the sweep measured something, in ms (vLLM-bench names): every token gap is positive
    assert (serial["p99_itl_ms"] > 0).all() and (serial["p99_tbt_max_ms"] >= serial["median_tbt_max_ms"]).all()


def test_cli_sweep_quiet_writes_the_table(scenario, tmp_path, capsys):
    from llmsim.cli import main

    out = tmp_path / "sw"
    code = main(
        ["sweep", str(scenario), "--set", "policy.chunk_tokens=128,256", "--workers", "1", "--out", str(out), "--quiet"]
    )
    assert code == 0
    assert capsys.readouterr().out == ""
    df = pd.read_parquet(out / "sweep.parquet")
    assert list(df["policy.chunk_tokens"]) == [128, 256]
    # the report is written unless --no-report, and sweep.json names the axes for `llmsim report`
    assert (out / "report.html").exists() and (out / "report.md").exists()
    assert json.loads((out / "sweep.json").read_text())["grid"] == {"policy.chunk_tokens": [128, 256]}


def test_a_sweep_over_lists_and_mappings_writes_its_report(scenario, tmp_path):
    """An axis whose values are lists (output.percentiles) or mappings (a length spec): the report
    groups and shows them as text (they came back from Parquet as arrays and dicts, no dict keys,
    and the whole sweep was lost to a TypeError while writing the report)."""
    from llmsim.cli import main

    out = tmp_path / "sw"
    lists = ["--set", "output.percentiles=[50, 90],[99]"]
    specs = ["--set", "workload.output_tokens={dist: fixed, value: 4},{dist: fixed, value: 8}"]
    assert main(["sweep", str(scenario), *lists, *specs, "--workers", "1", "--out", str(out), "--quiet"]) == 0
    md = (out / "report.md").read_text()
    assert "| swept: output.percentiles | [50, 90], [99] |" in md
    assert "{'dist': 'fixed', 'value': 4}, {'dist': 'fixed', 'value': 8}" in md


def test_cli_sweep_no_report_writes_the_table_only(scenario, tmp_path):
    from llmsim.cli import main

    out = tmp_path / "sw"
    args = ["sweep", str(scenario), "--set", "cluster.replicas=1", "--workers", "1", "--out", str(out)]
    assert main([*args, "--quiet", "--no-report"]) == 0
    assert (out / "sweep.parquet").exists() and not (out / "report.html").exists()
