"""The report: one self-contained HTML file (plots embedded as base64 PNG) and a Markdown twin.

A report is a function of a results folder: ``requests.csv``, ``steps.csv``, ``summary.json``
and ``scenario.json`` from ``llmsim run``, plus ``plan.csv``, ``winners.csv``, ``pareto.csv``,
``sensitivity.csv``, ``load.csv`` and ``plan.json`` when ``llmsim plan`` wrote the folder.
It also exports the step timeline as a Chrome/Perfetto trace (``trace.json``).
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from llmsim.errors import UserError, atomic_write_text
from llmsim.scenario import Scenario

MAX_ROOFLINE_POINTS = 400
GANTT_WINDOW_S = 5.0


def write_scenario(sc: Scenario, out_dir: Path) -> Path:
    """The resolved scenario next to the results, so a report can rebuild model and hardware."""
    path = Path(out_dir) / "scenario.json"
    atomic_write_text(path, json.dumps(sc.model_dump(), indent=2) + "\n")
    return path


@dataclass
class ResultsDir:
    """Everything a report reads from one folder (absent files are empty frames / None)."""

    path: Path
    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    scenario: Scenario | None = None
    plan: dict | None = None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> ResultsDir:
        p = Path(path)
        if not (p / "summary.json").exists():
            raise UserError(f"{p}: no summary.json here; point `llmsim report` at the output folder of a run or plan")
        summary = json.loads((p / "summary.json").read_text())
        sc = None
        if (p / "scenario.json").exists():
            sc = Scenario.model_validate(json.loads((p / "scenario.json").read_text()))
        tables = {
            name: pd.read_csv(p / f"{name}.csv")
            for name in ("plan", "winners", "pareto", "sensitivity", "load")
            if (p / f"{name}.csv").exists() and (p / f"{name}.csv").stat().st_size > 1
        }
        plan = json.loads((p / "plan.json").read_text()) if (p / "plan.json").exists() else None
        return cls(p, summary, _csv(p / "requests.csv"), _csv(p / "steps.csv"), sc, plan, tables)


def _csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()


# ---------------------------------------------------------------- sections (data, not markup)


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[object]]
    note: str = ""


def _fmt(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


def assumption_tables(r: ResultsDir) -> list[Table]:
    out = []
    if r.scenario is not None:
        from llmsim.build import build_model, build_pools

        sc = r.scenario
        for pool in build_pools(sc, build_model(sc)):
            hw = pool.hw
            rows = [[f"peak {k} (dense)", f"{f.value / 1e12:.1f} TFLOP/s", f.source] for k, f in hw.peak_flops.items()]
            rows += [
                ["memory", f"{hw.memory_capacity_bytes.value / 1e9:.0f} GB", hw.memory_capacity_bytes.source],
                [
                    "bandwidth",
                    f"{hw.memory_bandwidth_bytes_per_s.value / 1e12:.2f} TB/s",
                    hw.memory_bandwidth_bytes_per_s.source,
                ],
                ["power", f"{hw.power_w.value:.0f} W", hw.power_w.source],
                ["price", f"${hw.price_per_hour_usd.value:.2f}/hour", hw.price_per_hour_usd.source],
            ]
            rows += [[f"efficiency {k}", _fmt(f.value), f.source] for k, f in hw.efficiency if f is not None]
            rows += [[f"overhead {k}", f"{f.value * 1e6:.1f} µs", f.source] for k, f in hw.overheads if f is not None]
            out.append(Table(f"Hardware: {hw.name} (pool {pool.name})", ["figure", "value", "source"], rows))
        m = build_model(sc)
        out.append(
            Table(
                f"Model: {m.name}",
                ["field", "value"],
                [
                    ["layers", m.num_layers],
                    ["hidden size", m.hidden_size],
                    ["attention heads / KV heads", f"{m.num_heads} / {m.num_kv_heads}"],
                    ["weights dtype", sc.model.weight_dtype or m.weight_dtype],
                    ["KV cache dtype", sc.kv_cache.dtype],
                    ["policy", f"{sc.policy.kind} (chunk {sc.policy.chunk_tokens}, max seqs {sc.policy.max_num_seqs})"],
                ],
            )
        )
    wl = r.summary.get("workload", {})
    if wl:
        out.append(Table("Workload", ["statistic", "value"], [[k, _fmt(v)] for k, v in wl.items()]))
    slo = r.summary.get("slo", {})
    out.append(Table("SLO", ["key", "value"], [[k, _fmt(v)] for k, v in slo.items()]))
    return out


def result_tables(r: ResultsDir) -> list[Table]:
    s = r.summary
    lat = s.get("latency_s", {})
    rows = []
    for label, key in (
        ("TTFT", "ttft"),
        ("TBT per token", "tbt_token"),
        ("TBT worst gap", "tbt_request_max"),
        ("E2E", "e2e"),
    ):
        d = lat.get(key) or {}
        rows.append([label, *[None if d.get(p) is None else d[p] * 1e3 for p in ("mean", "p50", "p90", "p99")]])
    pools = ", ".join(f"{p['replicas']}x {p['hardware']} tp{p['tp']}" for p in s.get("pools", []))
    thr = s.get("throughput", {})
    out = [
        Table(
            f"Run: {s.get('scenario')} ({pools}, policy {s.get('policy')})",
            ["metric", "value"],
            [
                ["requests finished / total", f"{s['requests']['finished']} / {s['requests']['total']}"],
                ["throughput (req/s)", _fmt(thr.get("requests_per_s"))],
                ["output tokens/s", _fmt(thr.get("output_tokens_per_s"))],
                ["SLO attainment", _fmt(s["slo"].get("attainment"))],
                ["goodput (req/s)", _fmt(s["slo"].get("goodput_rps"))],
                ["saturation verdict", s["saturation"]["verdict"]],
                ["price ($/hour)", _fmt(s.get("cost", {}).get("cluster_usd_per_hour"))],
                ["$ per million tokens", _fmt(s.get("cost", {}).get("usd_per_million_tokens"))],
            ],
        ),
        Table("Latency (ms)", ["", "mean", "p50", "p90", "p99"], rows),
    ]
    for name, title, cols in (
        ("winners", "Cheapest configurations meeting the SLOs", _PLAN_COLS),
        ("pareto", "Cost-latency Pareto front", _PLAN_COLS),
        ("sensitivity", "Sensitivity: winners with every efficiency scaled", None),
        ("load", "Load sweep of the winner (goodput search)", _LOAD_COLS),
    ):
        if name in r.tables:
            df = r.tables[name]
            cols = [c for c in (cols or list(df.columns)) if c in df.columns]
            out.append(Table(title, cols, df[cols].values.tolist()))
    if "plan" in r.tables:
        t = r.tables["plan"]
        bad = t[~t["feasible"].astype(bool)]
        out.append(
            Table(
                "Configurations that miss the SLOs, and why",
                ["config", "reason"],
                bad[["config", "reason"]].values.tolist(),
            )
        )
    return out


_PLAN_COLS = [
    "config",
    "devices",
    "usd_per_hour",
    "usd_per_mtok",
    "power_w",
    "j_per_token",
    "slo_attainment",
    "ttft_p99_s",
    "tbt_p99_s",
    "verdict",
]
_LOAD_COLS = ["rate_rps", "slo_attainment", "throughput_rps", "goodput_rps", "ttft_p99_s", "tbt_p99_s", "verdict"]


def recommendation(r: ResultsDir) -> str:
    if r.plan and r.plan.get("recommendation"):
        return r.plan["recommendation"]
    s = r.summary
    slo, sat = s["slo"], s["saturation"]
    target = slo.get("attainment_target", 0.9)
    thr = s["throughput"]["requests_per_s"]
    verdict = "meets" if slo.get("met_target") else "misses"
    text = (
        f"This configuration {verdict} the SLOs: {slo['attainment']:.1%} of requests met every latency target "
        f"(target {target:.0%}) at {s.get('workload', {}).get('mean_rate_rps', thr):.2f} req/s offered. "
        f"Saturation verdict: {sat['verdict']} ({sat['explanation']})."
    )
    if sat["verdict"] != "stable":
        text += " Add replicas or a faster device before trusting these latencies."
    elif slo.get("met_target"):
        text += " Run `llmsim plan` to see whether a cheaper configuration also meets them."
    return text


# ---------------------------------------------------------------- plots


def plot_pngs(r: ResultsDir) -> list[tuple[str, bytes]]:
    """(caption, PNG) for every plot the folder has data for."""
    from llmsim import plots

    out: list[tuple[str, bytes]] = []
    slo = r.summary.get("slo", {})
    if not r.requests.empty:
        out.append(("Latency CDFs (TTFT, TBT, E2E)", plots.png_bytes(plots.latency_cdfs(r.requests, slo))))
    if "load" in r.tables:
        knee = (r.plan or {}).get("goodput", {}) or {}
        fig = plots.load_curves(r.tables["load"], slo, knee.get("rate_rps"))
        out.append(("TTFT/TBT and throughput vs load, with the SLO knee", plots.png_bytes(fig)))
    if not r.steps.empty:
        kv = r.summary.get("kv_cache", {}).get("capacity_blocks_per_replica")
        out.append(("Batch size and KV-cache utilisation over time", plots.png_bytes(plots.timelines(r.steps, kv))))
        fig = plots.gantt(r.steps, GANTT_WINDOW_S)
        out.append((f"Per-replica step timeline (first {GANTT_WINDOW_S:g} s)", plots.png_bytes(fig)))
        roof = roofline_points(r)
        if roof is not None:
            pts, peak, bw, name = roof
            out.append(("Roofline of the step mix", plots.png_bytes(plots.roofline(pts, peak, bw, name))))
    if "plan" in r.tables:
        front = r.tables.get("pareto", pd.DataFrame())
        out.append(("Cost vs latency, Pareto front", plots.png_bytes(plots.pareto(r.tables["plan"], front))))
    return out


def roofline_points(r: ResultsDir) -> tuple[pd.DataFrame, float, float, str] | None:
    """FLOPs and bytes of (a sample of) the steps, from their token counts and the mean context.

    Steps record token counts, not per-sequence contexts, so each decode sequence is given the
    run's mean context (prompt + half the output) and each step's prefill is one chunk."""
    if r.scenario is None or r.requests.empty:
        return None
    from llmsim.build import build_model, build_pools
    from llmsim.costmodel.ops import batch_shape

    sc = r.scenario
    try:
        pools = build_pools(sc, build_model(sc))
    except UserError:
        return None
    cost = pools[-1].cost if len(pools) > 1 else pools[0].cost
    fin = r.requests[r.requests["status"] == "finished"]
    ctx = int(fin["prompt_tokens"].mean() + fin["output_tokens"].mean() / 2) if len(fin) else 1024
    steps = r.steps
    if len(steps) > MAX_ROOFLINE_POINTS:
        steps = steps.iloc[:: math.ceil(len(steps) / MAX_ROOFLINE_POINTS)]
    rows = []
    for st in steps.itertuples():
        chunks = [(int(st.prefill_tokens), 0)] if st.prefill_tokens else []
        shape = batch_shape(chunks, [ctx] * int(st.decode_tokens))
        ops = cost.ops(shape)
        flops = sum(o.flops * o.count for o in ops)
        nbytes = sum(o.bytes * o.count for o in ops)
        if nbytes > 0 and st.duration_s > 0:
            rows.append(
                {
                    "prefill_tokens": st.prefill_tokens,
                    "decode_tokens": st.decode_tokens,
                    "intensity": flops / nbytes,
                    "achieved_flops": flops / st.duration_s,
                }
            )
    if not rows:
        return None
    hw = cost.hw
    dtype = "fp8" if sc.model.act_dtype == "fp8" else "bf16"
    peak = hw.peak(dtype) if hw.supports(dtype) else hw.peak("fp32")
    return pd.DataFrame(rows), peak, hw.bandwidth, hw.name


# ---------------------------------------------------------------- Perfetto trace


def perfetto_trace(steps: pd.DataFrame) -> dict:
    """Chrome trace-event JSON (open in ui.perfetto.dev or chrome://tracing): one track per replica."""
    events: list[dict] = []
    pools = {p: i for i, p in enumerate(sorted(steps["pool"].unique()))} if not steps.empty else {}
    for pool, pid in pools.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"pool {pool}"}})
    for st in steps.itertuples():
        kind = "prefill" if st.decode_tokens == 0 else "decode" if st.prefill_tokens == 0 else "mixed"
        events.append(
            {
                "name": f"{kind} p{st.prefill_tokens}+d{st.decode_tokens}",
                "cat": kind,
                "ph": "X",
                "ts": st.start_s * 1e6,
                "dur": st.duration_s * 1e6,
                "pid": pools[st.pool],
                "tid": int(st.replica),
                "args": {
                    "batch_size": int(st.batch_size),
                    "kv_blocks_used": int(st.kv_blocks_used),
                    "waiting": int(st.waiting),
                },
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


# ---------------------------------------------------------------- rendering


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in row) + "</tr>" for row in t.rows)
    return f"<h3>{html.escape(t.title)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _md_table(t: Table) -> str:
    def cell(v: object) -> str:
        return _fmt(v).replace("|", "\\|").replace("\n", " ")

    lines = [f"### {t.title}", "", "| " + " | ".join(t.headers) + " |", "|" + "---|" * len(t.headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines) + "\n"


_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f3f3f3}"
    "img{max-width:100%;border:1px solid #eee}.rec{background:#eef7ee;padding:1em;border-left:4px solid #1b9e77}"
)


def build_report(r: ResultsDir) -> tuple[str, str, list[tuple[str, bytes]]]:
    """(html, markdown, plots). Markdown links the plots as files under ``report_plots/``."""
    title = f"llmsim report: {r.summary.get('scenario', r.path.name)}"
    rec = recommendation(r)
    assumptions, results, pngs = assumption_tables(r), result_tables(r), plot_pngs(r)
    h = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"]
    h.append(f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>")
    h.append(f"<h2>Recommendation</h2><p class='rec'>{html.escape(rec)}</p>")
    h.append("<h2>Results</h2>" + "".join(_html_table(t) for t in results))
    h.append("<h2>Plots</h2>")
    for cap, png in pngs:
        b64 = base64.b64encode(png).decode("ascii")
        h.append(
            f"<figure><img alt='{html.escape(cap)}' src='data:image/png;base64,{b64}'><figcaption>{html.escape(cap)}</figcaption></figure>"
        )
    h.append("<h2>Assumptions</h2>" + "".join(_html_table(t) for t in assumptions))
    h.append("<p>Every hardware figure carries its source; prices are editable assumptions.</p></body></html>")
    md = [f"# {title}", "", "## Recommendation", "", rec, "", "## Results", ""]
    md += [_md_table(t) for t in results]
    md += ["## Plots", ""]
    md += [f"![{cap}](report_plots/{i:02d}.png)\n\n*{cap}*\n" for i, (cap, _) in enumerate(pngs)]
    md += ["## Assumptions", ""] + [_md_table(t) for t in assumptions]
    return "".join(h), "\n".join(md), pngs


def write_report(path: str | Path) -> list[Path]:
    """report.html (self-contained), report.md (+ report_plots/*.png) and trace.json (Perfetto)."""
    r = ResultsDir.load(path)
    page, md, pngs = build_report(r)
    out = Path(path)
    plots_dir = out / "report_plots"
    plots_dir.mkdir(exist_ok=True)
    for i, (_, png) in enumerate(pngs):
        (plots_dir / f"{i:02d}.png").write_bytes(png)
    atomic_write_text(out / "report.html", page)
    atomic_write_text(out / "report.md", md)
    written = [out / "report.html", out / "report.md"]
    if not r.steps.empty:
        atomic_write_text(out / "trace.json", json.dumps(perfetto_trace(r.steps)))
        written.append(out / "trace.json")
    return written
