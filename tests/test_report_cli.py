"""The report's numbers are the CLI's: run, sweep and plan each through `llmsim`, their printed tables and
summary lines parsed, and the same strings found in report.md and report.html (same rows, same cells)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from llmsim.cli import main
from llmsim.report import column_label

SCENARIO = """
name: report_cli
seed: 5
model: llama-3.1-8b
hardware: H100-SXM
policy: {kind: chunked, chunk_tokens: 512, max_num_seqs: 64}
workload:
  kind: poisson
  rate_rps: 6
  num_requests: 30
  prompt_tokens: {dist: lognormal, median: 800, sigma: 0.6, min: 16, max: 4096}
  output_tokens: {dist: uniform, min: 8, max: 48}
slo: {ttft_s: 0.5, tbt_s: 0.06, attainment: 0.9}
plan:
  hardware: [H100-SXM, L4]
  policies: [chunked, traditional]
  replicas: [1, 2]
  top: 2
  goodput_search: false
"""


class _Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts (header row included)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def html_tables(page: str) -> list[list[list[str]]]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def md_tables(md: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of cells (the |---| line left out, \\| unescaped)."""
    tables: list[list[list[str]]] = []
    inside = False
    for line in md.splitlines():
        if not line.startswith("|"):
            inside = False
            continue
        if not inside:
            tables.append([])
            inside = True
        if not re.fullmatch(r"\|(-+:?\|)+", line):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            tables[-1].append([c.strip().replace("\\|", "|") for c in cells])
    return tables


def cli_table(text: str, first_header: str) -> tuple[list[str], list[list[str]]]:
    """A printed table (header, dashes, rows) cut at the dash line's columns, so that cells with
    spaces ("1x H100-SXM tp1 chunked chunk512") stay whole. The rows end at a blank line or at a
    line wider than the table (the run's SLO line follows its latency table directly)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(first_header))
    dashes = lines[start + 1]
    starts = [m.start() for m in re.finditer(r"-+", dashes)]

    def cut(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(dashes)], strict=True)]

    rows = []
    for line in lines[start + 2 :]:
        if not line.strip() or len(line) > len(dashes):
            break
        rows.append(cut(line))
    return cut(lines[start]), rows


def reports(out) -> tuple[list[list[list[str]]], list[list[list[str]]]]:
    return md_tables((out / "report.md").read_text()), html_tables((out / "report.html").read_text())


def table_with(tables: list[list[list[str]]], header: str) -> list[list[str]]:
    """The first table whose header row holds ``header``."""
    return next(t for t in tables if t and header in t[0])


def pair_rows(tables: list[list[list[str]]]) -> list[list[str]]:
    return [row for t in tables for row in t if len(row) == 2]


@pytest.fixture
def scenario(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO)
    return p


def test_run_report_shows_the_cli_summary_and_latency_table(scenario, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    headers, rows = cli_table(text, "latency (ms)")
    assert [r[0] for r in rows] == ["TTFT", "TPOT", "ITL", "E2EL", "TBT max"]
    thr = re.search(
        r"throughput (\S+) req/s, (\S+) input tok/s, (\S+) output tok/s, (\S+) total tok/s over (\S+) s", text
    )
    slo = re.search(r"attainment (\S+ \(target \d+%\)), goodput (\S+) req/s", text)
    cost = re.search(r"cost +(\$\S+/h, \$\S+ per million output tokens)", text)
    req = re.search(r"requests (\d+ total, .* preemptions)", text)
    assert thr and slo and cost and req
    expected = [
        ["requests", req.group(1)],
        ["request throughput (req/s)", thr.group(1)],
        ["input throughput (tok/s)", thr.group(2)],
        ["output throughput (tok/s)", thr.group(3)],
        ["total token throughput (tok/s)", thr.group(4)],
        ["duration (s)", thr.group(5)],
        ["SLO attainment", slo.group(1)],
        ["request goodput (req/s)", slo.group(2)],
        ["cost", cost.group(1)],
    ]
    for tables in reports(out):
        latency = table_with(tables, "latency (ms)")
        assert latency[0] == headers and latency[1:] == rows  # the same table, cell for cell
        for pair in expected:
            assert pair in pair_rows(tables), pair


def test_sweep_report_table_is_the_printed_table(scenario, tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", str(scenario), "--set", "cluster.replicas=1,2", "--set", "policy.kind=chunked,traditional"]
    assert main([*args, "--workers", "1", "--out", str(out)]) == 0
    headers, rows = cli_table(capsys.readouterr().out, "cluster.replicas")
    assert len(rows) == 4 and "request_goodput" in headers and "p99_ttft_ms" in headers
    for tables in reports(out):
        points = table_with(tables, "request throughput (req/s)")
        at = [points[0].index(column_label(h)) for h in headers]  # each printed column in the report's table
        assert [[row[i] for i in at] for row in points[1:]] == rows


def test_plan_report_lists_what_the_cli_printed(scenario, tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["plan", str(scenario), "--out", str(out), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    headers, winners = cli_table(text, "config")
    never = re.findall(r"^  (\dx .+?): ((?:memory|invalid|overload|latency): .*)$", text, re.M)
    count = re.search(r"candidates that never met the SLOs \((\d+)\)", text)
    recommendation = re.search(r"^recommendation: (.*)$", text, re.M)
    assert winners and never and count and recommendation
    assert int(count.group(1)) == len(never)
    for tables in reports(out):
        table = table_with(tables, "price ($/hour)")
        at = [table[0].index(column_label(h)) for h in headers]
        assert [[row[i] for i in at] for row in table[1:]] == winners
        listed = table_with(tables, "why")[1:]
        assert [tuple(r) for r in listed] == never  # the same candidates, the same reasons, as many
        overview = dict(r for r in pair_rows(tables))
        assert overview["candidates that never met the SLOs"] == count.group(1)
    page = (out / "report.html").read_text()
    assert recommendation.group(1).replace("'", "&#39;") in page


def test_a_plan_folder_is_complete_or_untouched(scenario, tmp_path, capsys):
    # as a run's: written beside the folder and swapped in whole; a folder holding someone
    # else's file is refused before planning, and left as it was
    out = tmp_path / "plan"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["plan", str(scenario), "--out", str(out), "--workers", "1", "--quiet"]) == 2
    assert "notes.txt" in capsys.readouterr().err and [p.name for p in out.iterdir()] == ["notes.txt"]
    (out / "notes.txt").unlink()
    assert main(["plan", str(scenario), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    first = sorted(p.name for p in out.iterdir())
    assert "plan.json" in first and not [n for n in first if n.startswith(".")]
    assert main(["plan", str(scenario), "--out", str(out), "--workers", "1", "--quiet"]) == 0  # replaced whole
    assert sorted(p.name for p in out.iterdir()) == first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".plan")]  # no temp folder left


def test_report_refuses_a_broken_sweep_folder_before_copying_it(scenario, tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", str(scenario), "--set", "cluster.replicas=1", "--workers", "1", "--no-report", "--quiet"]
    assert main([*args, "--out", str(out)]) == 0
    table = out / "sweep.parquet"
    table.write_bytes(table.read_bytes()[:200])  # a copy cut short
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(["report", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"llmsim: error: {table}: not the table sweep.json records (edited, or from another sweep); run `llmsim sweep` "
        "again to rewrite the folder"
    ]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the folder was never copied
