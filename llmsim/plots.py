"""Plots for reports and notebooks: each is a function of the results frames and returns a Figure.

matplotlib runs with the Agg backend (no display needed); ``png_bytes`` renders a figure.
Latencies are drawn in ms under vLLM-bench names (TTFT, TPOT, ITL, E2EL; llmsim's TBT max is each
request's worst token gap); the scenario's SLOs, in seconds, are converted once by
``llmsim.planning.rows.slo_ms``.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from llmsim.planning.rows import slo_ms  # noqa: E402

PREFILL, DECODE, MIXED = "#d95f02", "#1b9e77", "#7570b3"


def png_bytes(fig: Figure, dpi: int = 90) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _ecdf(ax, values_s: pd.Series, label: str, slo_ms: float | None) -> None:
    v = np.sort(values_s.dropna().to_numpy()) * 1e3
    if len(v):
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post")
    if slo_ms:
        ax.axvline(slo_ms, color="red", ls="--", lw=1, label=f"SLO {slo_ms:g} ms")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel(f"{label} (ms)")
    ax.set_ylabel("fraction of requests")
    ax.grid(alpha=0.3)


def latency_cdfs(requests: pd.DataFrame, slo: dict | None = None) -> Figure:
    """CDFs of TTFT, TPOT, TBT max (worst gap per request) and E2EL over finished requests; ``slo`` in seconds."""
    bound = slo_ms(slo or {})
    fin = requests[requests["status"] == "finished"]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    _ecdf(axes[0], fin["ttft_s"], "TTFT", bound.get("ttft"))
    _ecdf(axes[1], fin["tpot_s"], "TPOT", bound.get("tpot"))
    _ecdf(axes[2], fin["tbt_max_s"], "TBT max, worst gap per request", bound.get("tbt_max"))
    _ecdf(axes[3], fin["e2e_s"], "E2EL", bound.get("e2el"))
    fig.suptitle("Latency CDFs")
    fig.tight_layout()
    return fig


def _col(d: pd.DataFrame, name: str) -> pd.Series:
    """A metric column as floats (None, a missing percentile, becomes NaN and is not drawn)."""
    return pd.to_numeric(d[name], errors="coerce") if name in d else pd.Series(np.nan, index=d.index)


def load_curves(load: pd.DataFrame, slo: dict | None = None, knee_rps: float | None = None) -> Figure:
    """TTFT and token gaps (ms), request throughput and goodput (req/s) vs offered load, with the SLO
    knee (the SLO capacity: the highest rate meeting the attainment target); ``slo`` in seconds."""
    bound = slo_ms(slo or {})
    d = load.sort_values("rate_rps")
    x = d["rate_rps"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    axes[0].plot(x, _col(d, "p99_ttft_ms"), "o-", label="TTFT p99")
    axes[0].plot(x, _col(d, "median_ttft_ms"), "s--", label="TTFT median")
    axes[0].set_ylabel("TTFT (ms)")
    if _col(d, "p99_ttft_ms").max() > 10 * max(bound.get("ttft", 0.0), _col(d, "median_ttft_ms").min()):
        axes[0].set_yscale("log")  # past the knee TTFT grows with the run length; keep the SLO line readable
    axes[1].plot(x, _col(d, "p99_tbt_max_ms"), "o-", label="TBT max p99 (worst gap)")
    axes[1].plot(x, _col(d, "p99_itl_ms"), "s--", label="ITL p99")
    axes[1].set_ylabel("token gap (ms)")
    for ax, metric in ((axes[0], "ttft"), (axes[1], "tbt_max")):
        if metric in bound:
            ax.axhline(bound[metric], color="red", ls="--", lw=1, label=f"SLO {bound[metric]:g} ms")
    axes[2].plot(x, _col(d, "request_throughput"), "o-", label="request throughput")
    axes[2].plot(x, _col(d, "request_goodput"), "s--", label="request goodput (meets SLOs)")
    lim = float(x.max())
    axes[2].plot([0, lim], [0, lim], color="grey", lw=0.8, label="offered")
    axes[2].set_ylabel("req/s")
    for ax in axes:
        if knee_rps:
            ax.axvline(knee_rps, color="black", ls=":", lw=1, label=f"SLO capacity {knee_rps:.2f} req/s")
        ax.set_xlabel("offered load (req/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Latency and throughput vs load")
    fig.tight_layout()
    return fig


# The panels of a sweep plot: (title, y label, [(column, line style)], SLO metric or None). Solid
# (filled markers) is p99, dashed (hollow) the mean; in the last panel throughput and goodput.
SWEEP_PANELS: list[tuple[str, str, list[tuple[str, str]], str | None]] = [
    ("TTFT", "TTFT (ms)", [("p99_ttft_ms", "-"), ("mean_ttft_ms", "--")], "ttft"),
    ("TPOT", "TPOT (ms)", [("p99_tpot_ms", "-"), ("mean_tpot_ms", "--")], "tpot"),
    ("ITL", "ITL (ms)", [("p99_itl_ms", "-"), ("mean_itl_ms", "--")], None),
    ("E2EL", "E2EL (ms)", [("p99_e2el_ms", "-"), ("mean_e2el_ms", "--")], "e2el"),
    ("TBT max, worst gap per request (p99)", "TBT max (ms)", [("p99_tbt_max_ms", "-")], "tbt_max"),
    ("Request throughput and goodput", "req/s", [("request_throughput", "-"), ("request_goodput", "--")], None),
]
MAX_LEGEND_GROUPS = 10


def sweep_curves(table: pd.DataFrame, key: str, others: list[str], slo: dict | None = None) -> Figure:
    """Each key metric of a sweep against the swept ``key``: one colour per combination of the
    ``others`` swept keys, solid p99 and dashed mean; ``slo`` in seconds. Text values of ``key``
    are categories in the table's order, drawn as points (nothing lies between two policies)."""
    bound = slo_ms(slo or {})
    d = table[table["error"].isna()] if "error" in table else table
    values = list(dict.fromkeys(table[key]))
    numeric = all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values)
    groups = list(d.groupby(others, sort=False)) if others else [((), d)]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.6))
    for ax, (title, ylabel, lines, metric) in zip(axes.flat, SWEEP_PANELS, strict=True):
        for gi, (_, g) in enumerate(groups):
            if numeric:
                g = g.sort_values(key)
                x = g[key].astype(float)
            else:  # categories side by side, each group nudged so their points do not hide each other
                x = g[key].map({v: i for i, v in enumerate(values)}) + 0.08 * (gi - (len(groups) - 1) / 2)
            for col, style in lines:
                fmt = ("o" if style == "-" else "s") + (style if numeric else "")
                ax.plot(
                    x, _col(g, col), fmt, color=colors[gi % len(colors)], ms=4, mfc="white" if style == "--" else None
                )
        if metric in bound:
            ax.axhline(bound[metric], color="red", ls=":", lw=1.2)
        _sweep_axis(ax, values, numeric)
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.set_xlabel(key)
    fig.legend(handles=_sweep_legend(others, groups, colors, bool(bound)), loc="lower center", ncol=6, fontsize=8)
    fig.suptitle(f"Key metrics vs {key}")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def _sweep_axis(ax, values: list, numeric: bool) -> None:
    """Whole-number axes get whole-number ticks (1, 2, 4 replicas, not 1.2); categories their names."""
    if not numeric:
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        ax.set_xlim(-0.5, len(values) - 0.5)
    elif all(float(v).is_integer() for v in values) and len(values) <= 12:
        ax.set_xticks(sorted(float(v) for v in values), [str(int(v)) for v in sorted(values)])
    ax.grid(alpha=0.3)


def _sweep_legend(others: list[str], groups: list, colors: list[str], slo: bool) -> list:
    handles = [
        plt.Line2D([], [], color="black", ls="-", marker="o", ms=4, label="p99; request throughput"),
        plt.Line2D(
            [], [], color="black", ls="--", marker="s", ms=4, mfc="white", label="mean; request goodput (meets SLOs)"
        ),
    ]
    if slo:
        handles.append(plt.Line2D([], [], color="red", ls=":", label="SLO"))
    if others and len(groups) <= MAX_LEGEND_GROUPS:
        handles += [
            plt.Line2D([], [], color=colors[i % len(colors)], lw=3, label=_group_label(others, k))
            for i, (k, _) in enumerate(groups)
        ]
    return handles


def _group_label(keys: list[str], values: object) -> str:
    vals = values if isinstance(values, tuple) else (values,)
    return ", ".join(f"{k}={v}" for k, v in zip(keys, vals, strict=False))


# points a timeline line keeps: a figure 12 inches wide at report resolution is ~1,100 pixels, and
# a long run's steps table holds millions of rows per replica (steplog.MAX_ROWS)
TIMELINE_POINTS = 4000


def envelope(t: np.ndarray, y: np.ndarray, points: int = TIMELINE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """``(t, y)`` cut to about ``points`` points that keep its extremes: the samples split into
    points / 2 runs in time order, each run drawn as its lowest and highest sample, in the order they
    came (a line through them touches every peak and trough the full line does); unchanged when short."""
    n = len(t)
    if n <= points:
        return t, y
    runs = np.array_split(np.arange(n), points // 2)
    keep = np.sort(np.unique(np.concatenate([[r[np.argmin(y[r])], r[np.argmax(y[r])]] for r in runs])))
    return t[keep], y[keep]


def timelines(steps: pd.DataFrame) -> Figure:
    """Batch size and KV-cache utilisation over time, one line per replica (``envelope``)."""
    fig, axes = plt.subplots(2, 1, figsize=(12, 4.5), sharex=True)
    for (pool, rep), g in steps.groupby(["pool", "replica"], sort=True):
        label = f"{pool}/{rep}"
        t = g["start_s"].to_numpy()
        axes[0].plot(*envelope(t, g["batch_size"].to_numpy()), lw=0.7, label=label)
        # (of its own replica's cache)
        axes[1].plot(*envelope(t, 100.0 * g["kv_utilization"].to_numpy()), lw=0.7, label=label)
    axes[0].set_ylabel("batch size (seqs)")
    axes[1].set_ylabel("KV cache used (%)")
    axes[1].set_xlabel("time (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
    if steps["replica"].nunique() <= 8:
        axes[0].legend(fontsize=7, ncol=4)
    fig.suptitle("Batch size and KV utilisation")
    return fig


def replicas(decisions: pd.DataFrame, metric: str, target: float | None) -> Figure:
    """The autoscaler's replicas over time (serving, starting, draining after each decision) and
    the metric it read, against its target."""
    fig, axes = plt.subplots(2, 1, figsize=(12, 4.5), sharex=True)
    t = decisions["time_s"]
    for col, color in (("serving", DECODE), ("starting", MIXED), ("draining", PREFILL)):
        axes[0].step(t, decisions[col], where="post", color=color, lw=1.2, label=col)
    axes[0].set_ylabel("replicas")
    axes[0].legend(fontsize=7, ncol=3)
    axes[1].plot(t, decisions["metric"], lw=0.9, color="black", label=metric)
    if target is not None:
        axes[1].axhline(target, ls="--", lw=0.8, color="grey", label="target")
    axes[1].set_ylabel(metric)
    axes[1].set_xlabel("time (s)")
    axes[1].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("Autoscaling")
    return fig


def gantt(steps: pd.DataFrame, window_s: float | None = None) -> Figure:
    """Per-replica step timeline: prefill-only, decode-only and mixed steps (first ``window_s``)."""
    s = steps
    if window_s is not None and not s.empty:
        s = s[s["start_s"] < s["start_s"].min() + window_s]
    rows = list(s.groupby(["pool", "replica"], sort=True))
    fig, ax = plt.subplots(figsize=(12, 0.5 + 0.45 * max(len(rows), 1)))
    for y, (_, g) in enumerate(rows):
        kind = np.where(g["decode_tokens"] == 0, PREFILL, np.where(g["prefill_tokens"] == 0, DECODE, MIXED))
        for color in (PREFILL, DECODE, MIXED):
            sel = kind == color
            spans = list(zip(g["start_s"][sel], g["duration_s"][sel], strict=True))
            ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=color)
    ax.set_yticks(range(len(rows)), [f"{p}/{r}" for (p, r), _ in rows])
    ax.set_xlabel("time (s)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (PREFILL, DECODE, MIXED)]
    # outside the axes: inside, it would hide the last steps of the top replica
    ax.legend(
        handles, ["prefill only", "decode only", "mixed"], fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0)
    )
    ax.set_title("Step timeline per replica")
    return fig


def roofline(points: pd.DataFrame, peak_flops: float, bandwidth_bytes_s: float, name: str) -> Figure:
    """Each step's arithmetic intensity vs achieved FLOP/s under the device's roofline."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    x = np.logspace(-1, 4, 200)
    ax.loglog(x, np.minimum(peak_flops, x * bandwidth_bytes_s) / 1e12, color="black", lw=1.2, label=f"{name} roofline")
    colors = np.where(points["decode_tokens"] == 0, PREFILL, np.where(points["prefill_tokens"] == 0, DECODE, MIXED))
    ax.scatter(points["intensity"], points["achieved_flops"] / 1e12, c=colors, s=8, alpha=0.6)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s per device")
    handles = [plt.Line2D([], [], marker="o", ls="", color=c) for c in (PREFILL, DECODE, MIXED)]
    ax.legend([ax.lines[0], *handles], [f"{name} roofline", "prefill only", "decode only", "mixed"], fontsize=7)
    ax.grid(alpha=0.3, which="both")
    ax.set_title("Roofline of the step mix")
    return fig


def pareto(table: pd.DataFrame, front: pd.DataFrame) -> Figure:
    """Price vs p99 TTFT of every evaluated configuration; the cost-latency Pareto front joined."""
    fig, ax = plt.subplots(figsize=(7, 4))
    ok = table[table["feasible"].astype(bool)]
    bad = table[~table["feasible"].astype(bool)].dropna(subset=["p99_ttft_ms"])
    ax.scatter(bad["usd_per_hour"], bad["p99_ttft_ms"], marker="x", color="grey", label="misses SLOs")
    ax.scatter(ok["usd_per_hour"], ok["p99_ttft_ms"], color="#1b9e77", label="meets SLOs")
    if not front.empty:
        ax.plot(front["usd_per_hour"], front["p99_ttft_ms"], "o-", color="#d95f02", label="Pareto front")
        for _, r in front.iterrows():
            ax.annotate(r["config"], (r["usd_per_hour"], r["p99_ttft_ms"]), fontsize=6, alpha=0.8)
    if (pd.to_numeric(table["p99_ttft_ms"], errors="coerce") > 0).any():  # nothing to log-scale otherwise
        ax.set_yscale("log")
    ax.set_xlabel("cluster price ($/hour)")
    ax.set_ylabel("TTFT p99 (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("Cost vs latency")
    return fig
