"""Generate the notebooks in this folder (``python notebooks/_make_notebooks.py --execute [01 02 ...]``).

The notebooks are written from the cells below so they stay reviewable as plain Python; each
draws its key figure with matplotlib (``show(fig)`` embeds it as a PNG) and ends with a conclusion
printed from the numbers it computed (nothing is hard-coded). ``--execute`` runs them and keeps
their outputs, which are committed so a reader sees the results without running anything.
tests/test_notebooks.py executes every notebook top to bottom and checks each drew a figure.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = """\
from pathlib import Path
import tempfile

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Image, display

import llmsim
from llmsim import plots

ROOT = Path.cwd() if (Path.cwd() / "scenarios").exists() else Path.cwd().parent
pd.set_option("display.width", 160)


def show(fig):
    \"\"\"Render a matplotlib figure into the notebook as a PNG (llmsim's plots run on the Agg backend).\"\"\"
    display(Image(plots.png_bytes(fig)))
"""

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {}

# Summaries carry `vllm bench serve`'s keys (llmsim/metrics.py): latencies are `{mean,median,p90,p99}_{metric}_ms`
# with metric ttft, tpot, itl (every inter-token gap), e2el, and llmsim's tbt_max (each request's worst gap).

NOTEBOOKS["01_quickstart"] = [
    (
        "md",
        "# 01 Quickstart\nSimulate Llama-3.1-8B on two H100s under Poisson chat traffic, read the summary (vLLM-bench "
        "metric names, milliseconds), plot the latency CDFs against the SLOs. Same scenario as `make demo`.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
from llmsim.metrics import latency_table

sc = llmsim.load_scenario(ROOT / "scenarios/quickstart.yaml")
res = llmsim.run(sc)
s = res.summary
print(f"{s['completed']} of {s['requests']['total']} requests completed in {s['duration']:.1f} s; "
      f"{s['request_throughput']:.2f} req/s, {s['output_throughput']:.0f} output tok/s; verdict: {s['saturation']['verdict']}")
rows, header = latency_table(s)
pd.DataFrame(rows, columns=header).set_index(header[0]).astype(float).round(1)  # milliseconds
""",
    ),
    (
        "md",
        "## Key figure: latency CDFs\nShare of requests (y) whose TTFT, worst token gap and end-to-end latency are at "
        "most x ms; the red lines are the scenario's SLOs.",
    ),
    ("code", "show(plots.latency_cdfs(res.requests, s['slo']))"),
    ("code", "res.requests.head()"),
    ("md", "## Conclusion (computed)"),
    (
        "code",
        """\
print(
    f"At {s['workload']['mean_rate_rps']:.1f} req/s offered, {sc.cluster.replicas} x {sc.hardware} reach "
    f"{s['output_throughput']:.0f} output tok/s with p99 TTFT {s['p99_ttft_ms']:.0f} ms, median TPOT "
    f"{s['median_tpot_ms']:.1f} ms and p99 ITL {s['p99_itl_ms']:.1f} ms; {s['slo']['attainment']:.1%} of requests "
    f"meet the SLOs (target {sc.slo.attainment:.0%}, goodput {s['request_goodput']:.2f} req/s), so the SLO is "
    f"{'met' if s['slo']['met_target'] else 'MISSED'}; the run is {s['saturation']['verdict']}."
)
""",
    ),
]

NOTEBOOKS["02_chunked_prefill_what_if"] = [
    (
        "md",
        "# 02 Chunked prefill: what if?\nHow does the chunk size trade TTFT against the gaps between tokens (ITL)? "
        "And does chunking let a long request start decoding after its first chunk, cutting its time to about "
        "T/2 + α·T/2? We measure.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
path = ROOT / "scenarios/quickstart.yaml"
base = {"workload.num_requests": 300, "cluster.replicas": 1, "workload.rate_rps": 5}
KEYS = ["median_ttft_ms", "p99_ttft_ms", "p99_itl_ms", "p99_tbt_max_ms"]
rows = []
for kind, chunk in [("traditional", None), ("chunked", 128), ("chunked", 256), ("chunked", 512),
                    ("chunked", 1024), ("chunked", 2048)]:
    ov = {**base, "policy.kind": kind, **({"policy.chunk_tokens": chunk} if chunk else {})}
    s = llmsim.run(path, ov).summary
    rows.append({"policy": kind, "chunk": chunk, **{k: s[k] for k in KEYS}, "attainment": s["slo"]["attainment"]})
sweep = pd.DataFrame(rows)
sweep.round(2)
""",
    ),
    (
        "md",
        "## Key figure: TTFT and ITL p99 vs chunk size\nSmaller chunks keep decode steps short (low ITL) but spread "
        "each prompt over more steps (higher TTFT); the dashed lines are the same traffic without chunking.",
    ),
    (
        "code",
        """\
ch = sweep[sweep.policy == "chunked"]
trad = sweep[sweep.policy == "traditional"].iloc[0]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
panels = [(axes[0], [("p99_ttft_ms", "TTFT p99"), ("median_ttft_ms", "TTFT median")], "TTFT (ms)"),
          (axes[1], [("p99_itl_ms", "ITL p99"), ("p99_tbt_max_ms", "worst gap per request, p99")],
           "time between tokens (ms, log scale)")]
for ax, series, ylabel in panels:
    for (col, label), color in zip(series, ("#d95f02", "#1b9e77")):
        ax.plot(ch.chunk, ch[col], "o-", color=color, label=f"{label}, chunked")
        ax.axhline(trad[col], color=color, ls="--", lw=1, label=f"{label}, no chunking")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ch.chunk, [str(int(c)) for c in ch.chunk])
    ax.set_yscale("log" if ax is axes[1] else "linear")  # the unchunked worst gap is ~20x the chunked ones
    ax.set_xlabel("chunk size (prefill tokens per step)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right" if ax is axes[0] else "lower right")
fig.suptitle("Llama-3.1-8B on 1x H100, 5 req/s: chunk size trades TTFT against ITL")
show(fig)
""",
    ),
    (
        "md",
        "## The long-request claim\nOne 4096-token prompt arrives while 16 short requests are decoding. "
        "T is the time to prefill the 4096 tokens in one step (traditional).",
    ),
    (
        "code",
        """\
tmp = Path(tempfile.mkdtemp())
arrivals = [0.0] * 16 + [0.5]
prompts = [128] * 16 + [4096]
outputs = [400] * 16 + [32]
pd.DataFrame({"arrival_s": arrivals, "prompt_tokens": prompts, "output_tokens": outputs}).to_csv(
    tmp / "long.csv", index=False)
ov = {"workload": {"kind": "trace", "trace": {"path": str(tmp / "long.csv"), "format": "generic"}},
      "cluster.replicas": 1}
out = {}
for kind in ("traditional", "chunked"):
    r = llmsim.run(path, {**ov, "policy.kind": kind, "policy.chunk_tokens": 512})
    long = r.requests.iloc[-1]
    others = r.requests.iloc[:-1]
    # worst gap of the short requests while the long prompt was being prefilled
    out[kind] = {"long_ttft_ms": long["ttft_s"] * 1e3, "long_e2e_ms": long["e2e_s"] * 1e3,
                 "others_worst_gap_ms": others["tbt_max_s"].max() * 1e3}
claim = pd.DataFrame(out).T
claim.round(1)
""",
    ),
    (
        "code",
        """\
from llmsim.build import build_model, build_pools

sc = llmsim.load_scenario(path)
cost = build_pools(sc, build_model(sc))[0].cost
T = cost.prefill_time(4096)
chunk_steps = [cost.prefill_time(512)]  # the first chunk alone, for scale
print(f"T (4096-token prefill in one step, no other work) = {T * 1e3:.1f} ms; one 512-token chunk = "
      f"{chunk_steps[0] * 1e3:.1f} ms")
""",
    ),
    ("md", "## Conclusion (computed)"),
    (
        "code",
        """\
best = ch.sort_values("p99_itl_ms").iloc[0]
t, c = claim.loc["traditional"], claim.loc["chunked"]
print(f"Chunk size: ITL p99 goes from {ch.p99_itl_ms.min():.1f} ms (chunk {int(best.chunk)}) to "
      f"{ch.p99_itl_ms.max():.1f} ms across chunks 128-2048, vs {trad.p99_itl_ms:.1f} ms without chunking; "
      f"TTFT p99 moves from {ch.p99_ttft_ms.min():.1f} to {ch.p99_ttft_ms.max():.1f} ms "
      f"(median {ch.median_ttft_ms.min():.1f} to {ch.median_ttft_ms.max():.1f} ms).")
ratio = c.long_ttft_ms / t.long_ttft_ms
print(f"Long request: TTFT {t.long_ttft_ms:.1f} ms unchunked vs {c.long_ttft_ms:.1f} ms chunked "
      f"(ratio {ratio:.2f}; T = {T * 1e3:.1f} ms).")
if ratio >= 1:
    print(f"Measured: chunking made the long request's first token {ratio - 1:.0%} LATER, not ~T/2 sooner: it "
          "cannot decode before all 4096 prompt tokens are in its KV cache, so the 'T/2 + a*T/2' saving does "
          "not appear for that request.")
else:
    print(f"Measured: chunking made the long request's first token {1 - ratio:.0%} sooner (claim: ~T/2 + a*T/2).")
print(f"What chunking changed for the other requests: their worst token gap went {t.others_worst_gap_ms:.1f} ms "
      f"-> {c.others_worst_gap_ms:.1f} ms.")
""",
    ),
]

NOTEBOOKS["03_disaggregation_and_heterogeneous_pools"] = [
    (
        "md",
        "# 03 Disaggregation and heterogeneous pools\nPrefill and decode on separate pools (Splitwise / "
        "DistServe), including TPU prefill + GPU decode, against a colocated chunked baseline with the same "
        "number of devices.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
path = ROOT / "scenarios/quickstart.yaml"
base = {"workload.num_requests": 300, "workload.rate_rps": 6}
configs = {
    "colocated chunked 2x H100": {"policy.kind": "chunked", "cluster.replicas": 2},
    "disagg 1 H100 prefill + 1 H100 decode": {
        # the pools size a disaggregated cluster: the base's colocated replicas go back to 1
        "policy.kind": "disaggregated", "cluster.replicas": 1,
        "cluster.prefill_pool": {"hardware": "H100-SXM", "replicas": 1},
        "cluster.decode_pool": {"hardware": "H100-SXM", "replicas": 1}},
    # a 16 GB v5e chip cannot hold 16 GB of bf16 weights: the prefill replica shards over 2 chips
    "disagg TPU-v5e x2 (tp2) prefill + 1 H100 decode": {
        "policy.kind": "disaggregated", "cluster.replicas": 1,
        "cluster.prefill_pool": {"hardware": "TPU-v5e", "replicas": 1, "tp": 2},
        "cluster.decode_pool": {"hardware": "H100-SXM", "replicas": 1}},
}
KEYS = ["median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms"]
rows = []
for name, ov in configs.items():
    s = llmsim.run(path, {**base, **ov}).summary
    rows.append({"config": name, "usd_per_hour": s["cost"]["cluster_usd_per_hour"], **{k: s[k] for k in KEYS},
                 "attainment": s["slo"]["attainment"], "verdict": s["saturation"]["verdict"]})
table = pd.DataFrame(rows).set_index("config")
table.round(2)
""",
    ),
    (
        "md",
        "## Key figure: colocated vs disaggregated\nThe same traffic on each configuration: p99 TTFT, p99 ITL and the "
        "cluster's price.",
    ),
    (
        "code",
        """\
fig, axes = plt.subplots(1, 3, figsize=(12, 3.2), sharey=True)
colors = ["#7570b3" if n.startswith("colocated") else "#1b9e77" for n in table.index]
for ax, (col, xlabel) in zip(axes, [("p99_ttft_ms", "TTFT p99 (ms)"), ("p99_itl_ms", "ITL p99 (ms)"),
                                    ("usd_per_hour", "cluster price ($/hour)")]):
    ax.barh(range(len(table)), table[col], color=colors)
    for y, v in enumerate(table[col]):
        ax.annotate(f"{v:.1f}", (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    ax.set_xlabel(xlabel)
    ax.margins(x=0.2)
    ax.grid(alpha=0.3, axis="x")
axes[0].set_yticks(range(len(table)), table.index, fontsize=8)
axes[0].invert_yaxis()
fig.suptitle("Llama-3.1-8B, 6 req/s: colocated (purple) vs disaggregated prefill/decode (green)")
show(fig)
""",
    ),
    ("md", "## Conclusion (computed)"),
    (
        "code",
        """\
col = table.loc["colocated chunked 2x H100"]
for name, r in table.iterrows():
    if name.startswith("disagg"):
        print(f"{name}: ITL p99 {r.p99_itl_ms:.1f} ms vs {col.p99_itl_ms:.1f} ms colocated "
              f"({r.p99_itl_ms / col.p99_itl_ms - 1:+.0%}), TTFT p99 {r.p99_ttft_ms:.0f} vs {col.p99_ttft_ms:.0f} ms, "
              f"${r.usd_per_hour:.2f}/h vs ${col.usd_per_hour:.2f}/h, attainment {r.attainment:.1%} ({r.verdict}).")
cheapest = table[table.attainment >= 0.9].usd_per_hour.idxmin() if (table.attainment >= 0.9).any() else None
print(f"Cheapest configuration meeting the 90% SLO target here: {cheapest}.")
""",
    ),
]

NOTEBOOKS["04_hardware_what_if"] = [
    (
        "md",
        "# 04 Hardware what-if: the memory wall\nDecode reads every weight and the whole KV cache per step, so it "
        "is bandwidth-bound. What do 2x bandwidth, INT4 weights, INT8 KV and CPU serving (Xeon 8480+ with AMX) "
        "buy? A hypothetical device is just a modified `HardwareProfile`.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
from llmsim.hardware import Figure, dump_profile, load_profile

h100 = load_profile("H100-SXM")
bw = h100.memory_bandwidth_bytes_per_s
fast = h100.model_copy(update={
    "name": "H100-2xBW",
    "memory_bandwidth_bytes_per_s": Figure(value=2 * bw.value, source="HYPOTHETICAL: 2x " + bw.source)})
tmp = Path(tempfile.mkdtemp())
dump_profile(fast, tmp / "H100-2xBW.yaml")
path = ROOT / "scenarios/quickstart.yaml"
base = {"workload.num_requests": 200, "cluster.replicas": 1, "workload.rate_rps": 4}
variants = {
    "H100 bf16": {},
    "H100 2x bandwidth": {"hardware": str(tmp / "H100-2xBW.yaml")},
    "H100 INT4 weights": {"model": {"name": "llama-3.1-8b", "weight_dtype": "int4"}},
    "H100 INT8 KV": {"kv_cache.dtype": "int8"},
}
rows = []
for name, ov in variants.items():
    r = llmsim.run(path, {**base, **ov})
    s = r.summary
    rows.append({"variant": name, "median_tpot_ms": s["median_tpot_ms"], "median_ttft_ms": s["median_ttft_ms"],
                 "kv_blocks": s["pools"][0]["kv_blocks_per_replica"], "output_throughput": s["output_throughput"]})
gpu = pd.DataFrame(rows).set_index("variant")
gpu.round(2)
""",
    ),
    (
        "code",
        """\
# CPU serving: a light load (1 request every 4 s, short outputs) on one dual-socket Xeon 8480+ (AMX)
cpu = llmsim.run(path, {"hardware": "Xeon-8480+", "cluster.replicas": 1, "workload.num_requests": 12,
                        "workload.rate_rps": 0.25, "workload.output_tokens": {"dist": "fixed", "value": 32}}).summary
cpu_row = {"median_tpot_ms": cpu["median_tpot_ms"], "median_ttft_ms": cpu["median_ttft_ms"],
           "verdict": cpu["saturation"]["verdict"], "usd_per_hour": cpu["cost"]["cluster_usd_per_hour"]}
cpu_row
""",
    ),
    (
        "md",
        "## Key figure: hardware comparison\nLeft: median TPOT and TTFT of each variant (log scale; the Xeon serves a "
        "lighter load). Right: the change of each against the plain H100; a memory wall shows as TPOT falling much "
        "more than TTFT when bandwidth doubles.",
    ),
    (
        "code",
        """\
import numpy as np

allv = pd.concat([gpu[["median_tpot_ms", "median_ttft_ms"]],
                  pd.DataFrame([cpu_row], index=["Xeon 8480+ (0.25 req/s)"])[["median_tpot_ms", "median_ttft_ms"]]])
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [3, 2]})
x = np.arange(len(allv))
for off, (col, label, color) in zip((-0.2, 0.2), [("median_tpot_ms", "TPOT median", "#1b9e77"),
                                                   ("median_ttft_ms", "TTFT median", "#d95f02")]):
    axes[0].bar(x + off, allv[col], width=0.4, color=color, label=label)
axes[0].set_yscale("log")
axes[0].set_xticks(x, allv.index, rotation=15, fontsize=8)
axes[0].set_ylabel("latency (ms, log scale)")
axes[0].legend(fontsize=8)
axes[0].grid(alpha=0.3, axis="y", which="both")
rel = (gpu[["median_tpot_ms", "median_ttft_ms"]] / gpu.loc["H100 bf16", ["median_tpot_ms", "median_ttft_ms"]] - 1) * 100
rel = rel.drop("H100 bf16")
x = np.arange(len(rel))
axes[1].bar(x - 0.2, rel.median_tpot_ms, width=0.4, color="#1b9e77", label="TPOT median")
axes[1].bar(x + 0.2, rel.median_ttft_ms, width=0.4, color="#d95f02", label="TTFT median")
axes[1].axhline(0, color="black", lw=0.8)
axes[1].set_xticks(x, rel.index, rotation=15, fontsize=8)
axes[1].set_ylabel("change vs H100 bf16 (%)")
axes[1].legend(fontsize=8)
axes[1].grid(alpha=0.3, axis="y")
fig.tight_layout()
fig.suptitle("Llama-3.1-8B, 1 replica at 4 req/s: what bandwidth, quantisation and a CPU change", y=1.02)
show(fig)
""",
    ),
    ("md", "## Conclusion (computed)"),
    (
        "code",
        """\
b = gpu.loc["H100 bf16"]
for name in ["H100 2x bandwidth", "H100 INT4 weights", "H100 INT8 KV"]:
    r = gpu.loc[name]
    print(f"{name}: decode TPOT median {r.median_tpot_ms:.2f} ms vs {b.median_tpot_ms:.2f} ms "
          f"({r.median_tpot_ms / b.median_tpot_ms - 1:+.0%}), TTFT median {r.median_ttft_ms / b.median_ttft_ms - 1:+.0%}, "
          f"KV capacity {r.kv_blocks / b.kv_blocks:.2f}x blocks.")
tpot_cut = 1 - gpu.loc["H100 2x bandwidth"].median_tpot_ms / b.median_tpot_ms
ttft_cut = 1 - gpu.loc["H100 2x bandwidth"].median_ttft_ms / b.median_ttft_ms
wall = "decode sits on the memory wall, prefill much less" if tpot_cut > 2 * ttft_cut else "no clear memory wall"
print(f"2x bandwidth cuts TPOT by {tpot_cut:.0%} and TTFT by {ttft_cut:.0%}: {wall}.")
print(f"Xeon 8480+ (AMX): TPOT median {cpu_row['median_tpot_ms']:.0f} ms "
      f"({cpu_row['median_tpot_ms'] / b.median_tpot_ms:.0f}x the H100), TTFT median {cpu_row['median_ttft_ms']:.0f} ms "
      f"at 0.25 req/s ({cpu_row['verdict']}), ${cpu_row['usd_per_hour']:.2f}/h.")
""",
    ),
]

NOTEBOOKS["05_capacity_plan_azure_trace"] = [
    (
        "md",
        "# 05 Capacity plan on the Azure conversation trace\nThe real Azure LLM inference trace (Splitwise, ISCA "
        "2024), the scenario's two-minute slice over fewer candidates here to keep the notebook fast (a one-minute "
        "slice is too short for most configurations to settle, and a plan counts only those that keep up); "
        "`llmsim plan scenarios/plan_azure_conv.yaml` runs the full search and writes the HTML report.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
from llmsim.planning import Base, capacity_plan

base = Base.from_path(ROOT / "scenarios/plan_azure_conv.yaml", {
    "plan.hardware": ["H100-SXM", "MI300X", "A100-SXM-80GB"],
    "plan.tp": [4], "plan.replicas": [1, 2], "plan.goodput_search": False,
})
plan = capacity_plan(base, workers=2, progress=False)
cols = ["config", "usd_per_hour", "usd_per_mtok", "j_per_token", "slo_attainment", "p99_ttft_ms", "p99_itl_ms", "reason"]
plan.table[cols].round(3)
""",
    ),
    (
        "md",
        "## Key figure: the plan's cost vs latency\nEvery configuration evaluated, by cluster price and p99 TTFT; the "
        "Pareto front joins those no other configuration beats on both.",
    ),
    ("code", "show(plots.pareto(plan.table, plan.pareto))"),
    ("code", "plan.sensitivity.round(3)"),
    ("md", "## Conclusion (computed)"),
    (
        "code",
        """\
print(f"Target {plan.target_rps:.2f} req/s (the slice's own rate).")
print(plan.recommendation)
""",
    ),
]


NOTEBOOKS["06_moe_parallelism"] = [
    (
        "md",
        "# 06 MoE parallelism: TP vs DP vs expert parallelism on the same GPUs\nQwen3-30B-A3B (128 experts, "
        "top-8) on two H100s, three ways vLLM can serve it: one engine with tensor parallelism (`--tensor-parallel-size "
        "2`), two independent engines each holding the whole model (data parallelism), and two data-parallel "
        "attention ranks whose MoE layers form one expert-parallel group (`--data-parallel-size 2 "
        "--enable-expert-parallel`: each GPU holds 64 experts, tokens all-gathered around every MoE layer, the "
        "ranks stepping in lock-step). Same chat traffic at rising rates; SLOs TTFT 1 s, TPOT 50 ms.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
path = ROOT / "scenarios/moe_expert_parallel.yaml"
base = {"hardware": "H100-SXM", "workload.num_requests": 1500, "output.steps": "none",
        "slo": {"ttft_s": 1.0, "tpot_s": 0.05}}
layouts = {
    "TP2": {"cluster": {"replicas": 1, "tp": 2}},
    "TP2, 256 seqs": {"cluster": {"replicas": 1, "tp": 2}, "policy.max_num_seqs": 256},
    "DP2": {"cluster": {"replicas": 2, "tp": 1, "router": "least_outstanding"}},
    "EP2 (DP attention)": {"cluster": {"replicas": 2, "tp": 1, "expert_parallel": True, "router": "vllm_dp"}},
}
rows = []
for name, ov in layouts.items():
    for rate in (10, 20, 30, 40, 60):
        s = llmsim.run(path, {**base, **ov, "workload.rate_rps": rate}).summary
        rows.append({"layout": name, "rate_rps": rate, "mean_tpot_ms": s["mean_tpot_ms"],
                     "p99_ttft_ms": s["p99_ttft_ms"], "attainment": s["slo"]["attainment"],
                     "kv_blocks_per_gpu": s["pools"][0]["kv_blocks_per_replica"] / s["pools"][0]["tp"],
                     "verdict": s["saturation"]["verdict"]})
grid = pd.DataFrame(rows)
grid.round(2)
""",
    ),
    (
        "code",
        """\
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
for name, g in grid.groupby("layout", sort=False):
    a.plot(g["rate_rps"], g["mean_tpot_ms"], marker="o", label=name)
    b.plot(g["rate_rps"], g["p99_ttft_ms"], marker="o", label=name)
a.set(xlabel="arrival rate (req/s)", ylabel="mean TPOT (ms)", title="Time per output token")
b.set(xlabel="arrival rate (req/s)", ylabel="p99 TTFT (ms)", title="Time to first token", yscale="log")
b.axhline(1000, color="grey", ls="--", lw=1)
a.legend()
show(fig)
""",
    ),
    (
        "md",
        "Where a decode step's time goes: one step with 128 sequences at 1,000 tokens of context on each engine "
        "(TP2: one engine; DP2 and EP2: one per GPU, so twice the sequences per step on the two GPUs), from the "
        "cost model's named terms.",
    ),
    (
        "code",
        """\
from llmsim.build import build_model, build_pools
from llmsim.costmodel.ops import batch_shape

steps = []
for name in ("TP2", "DP2", "EP2 (DP attention)"):
    sc = llmsim.load_scenario(path, {**base, **layouts[name]})
    pool = build_pools(sc, build_model(sc))[0]
    shape = batch_shape([], [1000] * 128)
    if name.startswith("EP2"):
        shape.group_tokens = 2 * 128  # both ranks decoding 128
    bd = pool.cost.breakdown(shape)
    step_s = pool.cost.step_time(shape)
    comm = bd.get("tp_all_reduce", 0) + bd.get("moe_dispatch", 0) + bd.get("moe_combine", 0)
    experts = bd.get("mlp_up_proj", 0) + bd.get("mlp_down_proj", 0)
    steps.append({"layout": name, "step_ms": 1e3 * step_s, "experts_ms": 1e3 * experts,
                  "collectives_ms": 1e3 * comm, "attention_ms": 1e3 * bd.get("attention_decode", 0),
                  "tokens_per_s_two_gpus": 128 * pool.replicas / step_s})
per_step = pd.DataFrame(steps).set_index("layout")
per_step.round(2)
""",
    ),
    (
        "md",
        "Across nodes the all-gather stops paying: every rank receives every token over the NIC. Wide "
        "expert-parallel deployments exchange tokens with DeepEP instead (`cluster.all2all_backend`, vLLM "
        "`--all2all-backend`), sending each token only where its experts are, and overlap the transfers with "
        "compute by splitting the step into two micro-batches (`cluster.dual_batch_overlap`, vLLM `--enable-dbo`). "
        "One DeepSeek-V3 decode step per H200 (FP8, 128 sequences at 2,000 tokens of context on every rank) as "
        "the group grows from one node to eight, each way (priced from the cost model: no run).",
    ),
    (
        "code",
        """\
from dataclasses import replace

from llmsim.costmodel import CostConfig, CostModel
from llmsim.engine import PRESETS
from llmsim.hardware import load_profile

v3, h200 = llmsim.models.get_model("deepseek-v3"), load_profile("H200")
ways = {"all-gather (vLLM's default)": {}, "DeepEP low latency": {"all2all_backend": "deepep_low_latency"},
        "DeepEP low latency + overlap": {"all2all_backend": "deepep_low_latency", "dual_batch_overlap": True}}
wide = []
for ep in (8, 16, 32, 64):
    cfg = CostConfig(ep=ep, weight_dtype="fp8", act_dtype="fp8", cuda_graphs=True)
    shape = batch_shape([], [2000] * 128)
    shape.group_tokens = 128 * ep  # every rank decoding 128
    for way, keys in ways.items():
        step_s = CostModel(v3, h200, replace(cfg, **keys), PRESETS["vllm-v1"]).step_time(shape)
        wide.append({"ep": ep, "way": way, "step_ms": 1e3 * step_s, "tokens_per_s_per_gpu": 128 / step_s})
wide = pd.DataFrame(wide)
fig, ax = plt.subplots(figsize=(6, 4))
for way, g in wide.groupby("way", sort=False):
    ax.plot(g["ep"], g["step_ms"], marker="o", label=way)
ax.set(xlabel="expert-parallel GPUs (8 a node)", ylabel="decode step (ms)", xscale="log", yscale="log",
       title="DeepSeek-V3 decode step, 128 sequences a GPU")
ax.set_xticks([8, 16, 32, 64], ["8", "16", "32", "64"])
ax.legend()
show(fig)
wide.pivot(index="ep", columns="way", values="step_ms").round(1)
""",
    ),
    (
        "code",
        """\
ok = grid[(grid["verdict"] == "stable") & (grid["attainment"] >= 0.9)]
best_rate = ok.groupby("layout", sort=False)["rate_rps"].max().reindex(list(layouts), fill_value=0)
top = best_rate.max()
winners = [k for k, v in best_rate.items() if v == top]
at = grid[grid["rate_rps"] == top].set_index("layout")
kv = grid.groupby("layout")["kv_blocks_per_gpu"].first()
print("highest rate meeting the SLOs (stable, >= 90% attainment): "
      + ", ".join(f"{k} {v:g} req/s" for k, v in best_rate.items()))
print(f"Most served: {' and '.join(winners)} ({top:g} req/s; mean TPOT there "
      + ", ".join(f"{w} {at.loc[w, 'mean_tpot_ms']:.1f} ms" for w in winners) + ").")
ep, dp, tp = (per_step.loc[k] for k in ("EP2 (DP attention)", "DP2", "TP2"))
print(f"Per decode step the two GPUs emit {ep['tokens_per_s_two_gpus']:,.0f} tokens/s under EP2, "
      f"{tp['tokens_per_s_two_gpus']:,.0f} under TP2 and {dp['tokens_per_s_two_gpus']:,.0f} under DP2: EP2 and TP2 "
      f"each read half the experts per GPU ({ep['experts_ms']:.1f} and {tp['experts_ms']:.1f} ms of expert GEMMs "
      f"against {dp['experts_ms']:.1f} ms when every GPU holds all 128), and EP2 batches twice the sequences "
      f"for {ep['collectives_ms']:.1f} ms of all-gather and reduce-scatter over NVLink. Holding the whole model "
      f"twice leaves DP2 {kv['DP2']:,.0f} KV blocks per GPU against {kv['EP2 (DP attention)']:,.0f} (EP2) and "
      f"{kv['TP2']:,.0f} (TP2). One TP2 engine is capped by its batch: {best_rate['TP2']:g} req/s at 128 "
      f"sequences, {best_rate['TP2, 256 seqs']:g} at 256.")
at = wide.set_index(["ep", "way"])["step_ms"]
print(f"DeepSeek-V3 at EP64 across 8 nodes: a decode step of 128 sequences a GPU takes "
      + ", ".join(f"{at[64, k]:.0f} ms ({k})" for k in ways)
      + " (DeepEP priced from its own measurements; docs/costmodel.md, 'Expert parallelism across nodes'). "
      f"On one node the overlap loses ({at[8, 'DeepEP low latency + overlap']:.0f} against "
      f"{at[8, 'DeepEP low latency']:.0f} ms): the transfers stay on NVLink and are short, while each "
      "micro-batch streams the GPU's 32 experts' weights again.")
""",
    ),
]

NOTEBOOKS["07_agentic_autoscaling"] = [
    (
        "md",
        "# 07 Agentic sessions with autoscaling: what does an HPA buy, and what does a cold start cost?\n"
        "Agent runs on Llama-3.1-8B served by vLLM on H100s: each run is 3 calls, and after each call but the last "
        "the agent sends 2 tool / sub-agent calls in parallel, waits for both, thinks 2 s and sends its next call "
        "with the whole history (closed loop: a slow server also slows the arrivals). Runs start at 0.5/s, rise to "
        "3.5/s for three minutes and fall back (`workload.rate_profile`). A `prefix_affinity` router keeps a "
        "session's history cached where it is. Four ways to provision it: one replica, three replicas all the "
        "time, and a Kubernetes HPA on vLLM's running + waiting requests (target 24 per replica, 1..6 replicas, "
        "its default windows) with a new replica's start priced two ways: a cold start (pod 16 s, 16 GB of "
        "weights at 0.87 GB/s, the engine's 53 s: ~88 s) and a warm pool (weights in host memory at 8 GB/s, a "
        "cached engine start: ~7 s). SLO: TTFT under 1 s for 90% of calls.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
path = ROOT / "scenarios/agentic_sessions.yaml"
base = {"workload.rate_rps": 0.5, "workload.num_requests": None, "workload.duration_s": 480,
        "workload.rate_profile": [[0, 1], [60, 3], [120, 7], [300, 3], [360, 1]],
        "workload.conversations": {"turns": 3, "think_s": 2.0, "closed_loop": True, "fanout": 2},
        "cluster.router": "prefix_affinity", "slo.ttft_s": 1.0, "output.steps": "none"}
hpa = {"min_replicas": 1, "max_replicas": 6, "metric": "concurrency", "target": 24}
warm = {"provision_s": 0, "load_gbps": 8, "engine_init_s": 5}
setups = {
    "fixed 1": {"cluster.replicas": 1},
    "fixed 3": {"cluster.replicas": 3},
    "HPA, cold start": {"cluster.replicas": 1, "cluster.autoscaling": hpa},
    "HPA, warm pool": {"cluster.replicas": 1, "cluster.autoscaling": {**hpa, **warm}},
}
rows, runs = [], {}
for name, ov in setups.items():
    res = llmsim.run(path, {**base, **ov})
    runs[name] = res
    s = res.summary
    a = s.get("autoscaling")
    replicas = s["pools"][0]["replicas"]
    rows.append({"setup": name, "sessions": s["sessions"]["count"], "calls": s["sessions"]["requests"],
                 "session_p50_s": s["sessions"]["duration_p50_s"], "session_p99_s": s["sessions"]["duration_p99_s"],
                 "p90_ttft_ms": s["p90_ttft_ms"], "attainment": s["slo"]["attainment"],
                 "start_s": a["start_s"]["total_s"] if a else None,
                 "peak_replicas": a["peak_serving"] if a else replicas,
                 "gpu_hours": a["gpu_hours"] if a else replicas * s["duration"] / 3600,
                 "usd": s["cost"]["cluster_usd_per_hour"] * s["duration"] / 3600})
table = pd.DataFrame(rows).set_index("setup")
table.round(3)
""",
    ),
    (
        "code",
        """\
fig, (a, b) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
for name, color in (("HPA, cold start", "tab:blue"), ("HPA, warm pool", "tab:orange")):
    d = runs[name].scaling  # one row per decision (every 15 s)
    a.step(d["time_s"], d["serving"], where="post", color=color, label=f"{name}: serving")
    a.step(d["time_s"], d["serving"] + d["starting"], where="post", color=color, ls=":", label=f"{name}: asked for")
    b.plot(d["time_s"], d["metric"], color=color, label=name)
a.axhline(3, color="grey", ls="--", lw=1, label="fixed 3")
a.set(ylabel="replicas", title="Replicas over time")
b.axhline(hpa["target"], color="grey", ls="--", lw=1, label="target")
b.set(xlabel="time (s)", ylabel="running + waiting per replica", title="What the HPA reads")
a.legend(fontsize=8)
b.legend(fontsize=8)
show(fig)
""",
    ),
    (
        "code",
        """\
ok = table[table["attainment"] >= 0.9]
cheapest = ok["usd"].idxmin()
cold, warm_, peak = (table.loc[k] for k in ("HPA, cold start", "HPA, warm pool", "fixed 3"))
one = table.loc["fixed 1"]
kept = runs["HPA, cold start"].summary["autoscaling"]["final_serving"]
scaling = runs["HPA, cold start"].scaling
waited = scaling.loc[scaling["metric"] > hpa["target"] * (1 + 0.1), "time_s"]  # above target: wants more
verdict = "meets the SLO" if one["attainment"] >= 0.9 else "misses the SLO"
print(f"One replica is cheapest (${one['usd']:.3f}) and {verdict}: {one['attainment']:.1%} of calls within "
      f"1 s, p99 session {one['session_p99_s']:.0f} s. Cheapest setup meeting it: {cheapest} "
      f"(${table.loc[cheapest, 'usd']:.3f}, {table.loc[cheapest, 'gpu_hours']:.3f} GPU-h).")
print(f"With a {cold['start_s']:.0f} s cold start the HPA read more than its target from {waited.min():.0f} s to "
      f"{waited.max():.0f} s, asking for more replicas while the first ones were still starting, and peaked at "
      f"{cold['peak_replicas']:.0f}; its default 300 s scale-down window kept {kept} to the end of the run: "
      f"{cold['gpu_hours']:.3f} GPU-h, "
      f"{cold['gpu_hours'] / peak['gpu_hours'] - 1:+.0%} against three replicas all the time, and a p99 session "
      f"of {cold['session_p99_s']:.0f} s against {peak['session_p99_s']:.0f} s.")
print(f"A warm pool ({warm_['start_s']:.0f} s start) peaks at {warm_['peak_replicas']:.0f}, meets the SLO "
      f"({warm_['attainment']:.1%}) and costs {warm_['gpu_hours'] / peak['gpu_hours'] - 1:+.0%} against fixed 3: "
      "for bursts this short, how fast a replica starts decides whether autoscaling saves money.")
""",
    ),
]


def build(name: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def main(execute: bool, only: list[str]) -> None:
    """Write each notebook; with ``--execute`` run it too and keep its outputs, so readers see results."""
    for name, cells in NOTEBOOKS.items():
        if only and not any(name.startswith(o) for o in only):
            continue
        nb = build(name, cells)
        if execute:
            from nbclient import NotebookClient

            NotebookClient(
                nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
            ).execute()
        nbformat.write(nb, HERE / f"{name}.ipynb")
        print(f"wrote {HERE / name}.ipynb")


if __name__ == "__main__":
    import sys

    main("--execute" in sys.argv, [a for a in sys.argv[1:] if not a.startswith("--")])
