"""Plots for reports and notebooks: each is a function of the results frames and returns a Figure.

matplotlib runs with the Agg backend (no display needed); ``png_bytes`` renders a figure.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

PREFILL, DECODE, MIXED = "#d95f02", "#1b9e77", "#7570b3"


def png_bytes(fig: Figure, dpi: int = 90) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _ecdf(ax, values: pd.Series, label: str, slo: float | None) -> None:
    v = np.sort(values.dropna().to_numpy())
    if len(v):
        ax.step(v * 1e3, np.arange(1, len(v) + 1) / len(v), where="post")
    if slo:
        ax.axvline(slo * 1e3, color="red", ls="--", lw=1, label=f"SLO {slo * 1e3:g} ms")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel(f"{label} (ms)")
    ax.set_ylabel("fraction of requests")
    ax.grid(alpha=0.3)


def latency_cdfs(requests: pd.DataFrame, slo: dict | None = None) -> Figure:
    """CDFs of TTFT, TBT (worst gap per request) and end-to-end latency over finished requests."""
    slo = slo or {}
    fin = requests[requests["status"] == "finished"]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    _ecdf(axes[0], fin["ttft_s"], "TTFT", slo.get("ttft_s"))
    _ecdf(axes[1], fin["tbt_max_s"], "TBT, worst gap per request", slo.get("tbt_s"))
    _ecdf(axes[2], fin["e2e_s"], "end-to-end", slo.get("e2e_s"))
    fig.suptitle("Latency CDFs")
    return fig


def load_curves(load: pd.DataFrame, slo: dict | None = None, knee_rps: float | None = None) -> Figure:
    """TTFT/TBT p99 and throughput vs offered load, with the SLO knee (the goodput rate)."""
    slo = slo or {}
    d = load.sort_values("rate_rps")
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    axes[0].plot(d["rate_rps"], d["ttft_p99_s"] * 1e3, "o-", label="TTFT p99")
    axes[0].plot(d["rate_rps"], d["ttft_p50_s"] * 1e3, "s--", label="TTFT p50")
    axes[1].plot(d["rate_rps"], d["tbt_p99_s"] * 1e3, "o-", label="TBT p99 (per token)")
    axes[1].plot(d["rate_rps"], d["tbt_max_p90_s"] * 1e3, "s--", label="worst gap p90")
    for ax, key in ((axes[0], "ttft_s"), (axes[1], "tbt_s")):
        if slo.get(key):
            ax.axhline(slo[key] * 1e3, color="red", ls="--", lw=1, label="SLO")
        ax.set_ylabel("ms")
    axes[2].plot(d["rate_rps"], d["throughput_rps"], "o-", label="throughput")
    axes[2].plot(d["rate_rps"], d["goodput_rps"], "s--", label="goodput (meets SLOs)")
    lim = float(d["rate_rps"].max())
    axes[2].plot([0, lim], [0, lim], color="grey", lw=0.8, label="offered")
    axes[2].set_ylabel("req/s")
    for ax in axes:
        if knee_rps:
            ax.axvline(knee_rps, color="black", ls=":", lw=1, label=f"knee {knee_rps:.2f} req/s")
        ax.set_xlabel("offered load (req/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Latency and throughput vs load")
    return fig


def timelines(steps: pd.DataFrame, kv_capacity_blocks: int | None) -> Figure:
    """Batch size and KV-cache utilisation over time, one line per replica."""
    fig, axes = plt.subplots(2, 1, figsize=(12, 4.5), sharex=True)
    for (pool, rep), g in steps.groupby(["pool", "replica"], sort=True):
        label = f"{pool}/{rep}"
        axes[0].plot(g["start_s"], g["batch_size"], lw=0.7, label=label)
        if kv_capacity_blocks:
            axes[1].plot(g["start_s"], 100.0 * g["kv_blocks_used"] / kv_capacity_blocks, lw=0.7, label=label)
    axes[0].set_ylabel("batch size (seqs)")
    axes[1].set_ylabel("KV cache used (%)")
    axes[1].set_xlabel("time (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
    if steps["replica"].nunique() <= 8:
        axes[0].legend(fontsize=7, ncol=4)
    fig.suptitle("Batch size and KV utilisation")
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
    ax.legend(handles, ["prefill only", "decode only", "mixed"], fontsize=7, loc="upper right")
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
    bad = table[~table["feasible"].astype(bool)].dropna(subset=["ttft_p99_s"])
    ax.scatter(bad["usd_per_hour"], bad["ttft_p99_s"] * 1e3, marker="x", color="grey", label="misses SLOs")
    ax.scatter(ok["usd_per_hour"], ok["ttft_p99_s"] * 1e3, color="#1b9e77", label="meets SLOs")
    if not front.empty:
        ax.plot(front["usd_per_hour"], front["ttft_p99_s"] * 1e3, "o-", color="#d95f02", label="Pareto front")
        for _, r in front.iterrows():
            ax.annotate(r["config"], (r["usd_per_hour"], r["ttft_p99_s"] * 1e3), fontsize=6, alpha=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("cluster price ($/hour)")
    ax.set_ylabel("TTFT p99 (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("Cost vs latency")
    return fig
