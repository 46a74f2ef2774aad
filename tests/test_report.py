"""Reports: a tiny capacity plan through the CLI writes a self-contained HTML report with every plot;
a run's report and `llmsim report` on run, sweep and plan folders (tests/test_report_cli.py holds the
report's numbers to the CLI's)."""

from __future__ import annotations

import html
import json
import re

import pandas as pd
import pytest

from llmsim.cli import main
from llmsim.results import read_table

PLAN = """
name: tiny <plan> & co
seed: 2
model: llama-3.1-8b
hardware: H100-SXM
kv_cache: {reserve_gb: 10}
policy: {kind: chunked, chunk_tokens: 512, max_num_seqs: 64}
workload:
  kind: poisson
  rate_rps: 6
  num_requests: 40
  prompt_tokens: {dist: lognormal, median: 900, sigma: 0.6, min: 16, max: 4096}
  output_tokens: {dist: uniform, min: 8, max: 48}
slo: {ttft_s: 0.5, tbt_s: 0.06, attainment: 0.9}
plan:
  hardware: [H100-SXM, A100-SXM-80GB, L4]
  policies: [chunked, traditional]
  replicas: [1, 2]
  top: 3
"""


def test_plan_cli_writes_tables_report_and_trace(tmp_path):
    """One tiny plan (a dozen short runs) checked three ways: its tables, its report, its trace."""
    (tmp_path / "tiny.yaml").write_text(PLAN)
    out = tmp_path / "out"
    assert main(["plan", str(tmp_path / "tiny.yaml"), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    check_plan_tables(out)
    check_report(out)
    check_trace(out)


def check_plan_tables(plan_dir):
    table = pd.read_parquet(plan_dir / "plan.parquet")
    winners = pd.read_csv(plan_dir / "winners.csv")
    assert {"H100-SXM", "A100-SXM-80GB", "L4"} <= set(table["hardware"])
    assert len(winners) >= 1 and winners["usd_per_hour"].is_monotonic_increasing
    assert winners["slo_attainment"].min() >= 0.9
    # 16 GB of weights + a 10 GB reserve cannot fit a 24 GB L4: said so, and not retried at 2 replicas
    l4 = table[table["hardware"] == "L4"]
    assert l4["reason"].str.startswith("memory").all() and (l4["replicas"] == 1).all()
    assert table[~table["feasible"]]["reason"].str.len().min() > 0
    # energy per token = power / tokens per second, so it follows the row's own numbers
    w = winners.iloc[0]
    assert w["j_per_token"] > 0 and w["power_w"] == w["devices"] * (700 if w["config"].count("H100") else 400)
    sens = pd.read_csv(plan_dir / "sensitivity.csv")
    assert set(sens["efficiency_factor"].round(2)) == {0.85, 1.15}
    plan = json.loads((plan_dir / "plan.json").read_text())
    assert plan["winner"] == w["config"] and w["config"] in plan["recommendation"]
    # the SLO capacity (an offered rate) is named so, and is not vLLM's request_goodput
    assert "goodput" not in plan and plan["slo_capacity"]["rate_rps"] > 0
    assert "SLO capacity" in plan["recommendation"] and "goodput is" not in plan["recommendation"]
    # one count of the candidates that never met the SLOs: the recommendation's, plan.json's, the list's
    never = pd.read_csv(plan_dir / "infeasible.csv")
    n = int(re.search(r"(\d+) candidate\(s\) never met the SLOs", plan["recommendation"]).group(1))
    assert n == len(never) == plan["candidates_never_met"] == 3  # L4 twice (memory), and one more


def check_report(plan_dir):
    page = (plan_dir / "report.html").read_text()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    # load curves, Pareto front, and the winner's latency CDFs, timelines, Gantt, roofline
    assert len(images) == 6 and all(len(b) > 1000 for b in images)
    assert page.count("<table>") >= 8
    for heading in ("Recommendation", "Assumptions", "Cheapest configurations", "Pareto", "Sensitivity", "TPOT"):
        assert heading in page
    assert "src='http" not in page and "<script" not in page  # nothing fetched from elsewhere
    assert "tiny &lt;plan&gt; &amp; co" in page and "tiny <plan>" not in page
    assert "TTFT p99 (ms)" in page and "request goodput (req/s)" in page and "SLO capacity" in page
    assert not re.search(r"\d\.\d+e[+-]\d\d", page.split("<h2>Assumptions")[0])  # no 1.015e+04 in the results
    # the list of candidates that never met the SLOs is the plan's (infeasible.csv), not every failed point
    never = pd.read_csv(plan_dir / "infeasible.csv")
    assert f"Candidates that never met the SLOs ({len(never)}), and why" in page
    assert all(f'<td class="l">{html.escape(c)}</td>' in page for c in never["config"])
    md = (plan_dir / "report.md").read_text()
    assert md.count("![") == 6 and all((plan_dir / "report_plots" / f"{i:02d}.png").exists() for i in range(6))


def check_trace(plan_dir):
    trace = json.loads((plan_dir / "trace.json").read_text())
    steps = read_table(plan_dir, "steps")  # Parquet by default
    # one slice per step (llmsim/timeline.py also draws request slices, category "request")
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e.get("cat") in ("prefill", "decode", "mixed")]
    assert len(spans) == len(steps)
    assert spans[0]["dur"] == pytest.approx(steps["duration_s"].iloc[0] * 1e6)


def test_run_writes_a_report_and_report_command_rewrites_it(tmp_path):
    (tmp_path / "s.yaml").write_text(PLAN.replace("num_requests: 40", "num_requests: 20"))
    out = tmp_path / "run"
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--quiet"]) == 0
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4  # no load sweep or plan in a single run
    assert "llmsim run report" in page and "TPOT" in page and "per million output tokens" in page
    (out / "report.html").unlink()
    assert main(["report", str(out), "--quiet"]) == 0
    assert (out / "report.html").exists()
    assert main(["report", str(tmp_path), "--quiet"]) == 2  # not a results folder: a user error


def test_report_command_tells_a_sweep_folder_from_a_run(tmp_path):
    from llmsim.report import folder_kind

    (tmp_path / "s.yaml").write_text(PLAN.replace("num_requests: 40", "num_requests: 12"))
    out = tmp_path / "sw"
    args = ["sweep", str(tmp_path / "s.yaml"), "--set", "cluster.replicas=1,2", "--workers", "1", "--out", str(out)]
    assert main([*args, "--quiet", "--no-report"]) == 0
    assert folder_kind(out) == "sweep" and not (out / "report.html").exists()
    assert main(["report", str(out), "--quiet"]) == 0
    page = (out / "report.html").read_text()
    assert "llmsim sweep report" in page and page.count("data:image/png;base64,") == 1  # one swept key
    assert "vs cluster.replicas" in page and "TTFT p99 (ms)" in page
    assert not (out / "trace.json").exists()  # a sweep has no steps of its own
