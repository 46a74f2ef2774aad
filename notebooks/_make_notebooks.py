"""Generate the notebooks in this folder (``python notebooks/_make_notebooks.py --execute [01 02 ...]``).

The notebooks are written from the cells below so they stay reviewable as plain Python; each
one ends with a conclusion printed from the numbers it computed (nothing is hard-coded).
tests/test_notebooks.py executes every notebook top to bottom.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = """\
from pathlib import Path
import tempfile

import pandas as pd
from IPython.display import Image, display

import llmsim
from llmsim import plots

ROOT = Path.cwd() if (Path.cwd() / "scenarios").exists() else Path.cwd().parent
pd.set_option("display.width", 160)


def show(fig):
    display(Image(plots.png_bytes(fig)))
"""

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {}

NOTEBOOKS["01_quickstart"] = [
    (
        "md",
        "# 01 Quickstart\nSimulate Llama-3.1-8B on two H100s under Poisson chat traffic, read the summary, plot "
        "the latency CDFs. Same scenario as `make demo`.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
sc = llmsim.load_scenario(ROOT / "scenarios/quickstart.yaml")
res = llmsim.run(sc)
s = res.summary
print(f"{s['requests']['finished']} of {s['requests']['total']} requests finished; verdict: {s['saturation']['verdict']}")
pd.DataFrame(s["latency_s"]).T.mul(1e3).round(1)  # milliseconds
""",
    ),
    ("code", "show(plots.latency_cdfs(res.requests, s['slo']))"),
    ("code", "res.requests.head()"),
    ("md", "## Conclusion (computed)"),
    (
        "code",
        """\
ttft99 = s["latency_s"]["ttft"]["p99"]
tpot50 = s["latency_s"]["tpot"]["p50"]
print(
    f"At {s['workload']['mean_rate_rps']:.1f} req/s offered, {sc.cluster.replicas} x {sc.hardware} reach "
    f"{s['throughput']['output_tokens_per_s']:.0f} output tok/s with p99 TTFT {ttft99 * 1e3:.0f} ms and median "
    f"TPOT {tpot50 * 1e3:.1f} ms; {s['slo']['attainment']:.1%} of requests meet the SLOs "
    f"(target {sc.slo.attainment:.0%}), so the SLO is {'met' if s['slo']['met_target'] else 'MISSED'}; "
    f"the run is {s['saturation']['verdict']}."
)
""",
    ),
]

NOTEBOOKS["02_chunked_prefill_what_if"] = [
    (
        "md",
        "# 02 Chunked prefill: what if?\nHow does the chunk size trade TTFT against TBT? And does chunking let a "
        "long request start decoding after its first chunk, cutting its time to about T/2 + α·T/2? We measure.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
path = ROOT / "scenarios/quickstart.yaml"
base = {"workload.num_requests": 300, "cluster.replicas": 1, "workload.rate_rps": 5}
rows = []
for kind, chunk in [("traditional", None), ("chunked", 128), ("chunked", 256), ("chunked", 512),
                    ("chunked", 1024), ("chunked", 2048)]:
    ov = {**base, "policy.kind": kind, **({"policy.chunk_tokens": chunk} if chunk else {})}
    s = llmsim.run(path, ov).summary
    rows.append({"policy": kind, "chunk": chunk, "ttft_p50_ms": s["latency_s"]["ttft"]["p50"] * 1e3,
                 "ttft_p99_ms": s["latency_s"]["ttft"]["p99"] * 1e3,
                 "tbt_p99_ms": s["latency_s"]["tbt_token"]["p99"] * 1e3,
                 "worst_gap_p99_ms": s["latency_s"]["tbt_request_max"]["p99"] * 1e3,
                 "attainment": s["slo"]["attainment"]})
sweep = pd.DataFrame(rows)
sweep.round(2)
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
best = sweep[sweep.policy == "chunked"].sort_values("tbt_p99_ms").iloc[0]
trad = sweep[sweep.policy == "traditional"].iloc[0]
t, c = claim.loc["traditional"], claim.loc["chunked"]
print(f"Chunk size: TBT p99 goes from {sweep.tbt_p99_ms.min():.1f} ms (chunk {int(best.chunk)}) to "
      f"{sweep[sweep.policy == 'chunked'].tbt_p99_ms.max():.1f} ms across chunks 128-2048, vs {trad.tbt_p99_ms:.1f} ms "
      f"without chunking; TTFT p50 moves from {sweep[sweep.policy == 'chunked'].ttft_p50_ms.min():.1f} to "
      f"{sweep[sweep.policy == 'chunked'].ttft_p50_ms.max():.1f} ms.")
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
        "policy.kind": "disaggregated",
        "cluster.prefill_pool": {"hardware": "H100-SXM", "replicas": 1},
        "cluster.decode_pool": {"hardware": "H100-SXM", "replicas": 1}},
    # a 16 GB v5e chip cannot hold 16 GB of bf16 weights: the prefill replica shards over 2 chips
    "disagg TPU-v5e x2 (tp2) prefill + 1 H100 decode": {
        "policy.kind": "disaggregated",
        "cluster.prefill_pool": {"hardware": "TPU-v5e", "replicas": 1, "tp": 2},
        "cluster.decode_pool": {"hardware": "H100-SXM", "replicas": 1}},
}
rows = []
for name, ov in configs.items():
    s = llmsim.run(path, {**base, **ov}).summary
    rows.append({"config": name, "usd_per_hour": s["cost"]["cluster_usd_per_hour"],
                 "ttft_p50_ms": s["latency_s"]["ttft"]["p50"] * 1e3, "ttft_p99_ms": s["latency_s"]["ttft"]["p99"] * 1e3,
                 "tbt_p99_ms": s["latency_s"]["tbt_token"]["p99"] * 1e3,
                 "attainment": s["slo"]["attainment"], "verdict": s["saturation"]["verdict"]})
table = pd.DataFrame(rows).set_index("config")
table.round(2)
""",
    ),
    ("md", "## Conclusion (computed)"),
    (
        "code",
        """\
col = table.loc["colocated chunked 2x H100"]
for name, r in table.iterrows():
    if name.startswith("disagg"):
        print(f"{name}: TBT p99 {r.tbt_p99_ms:.1f} ms vs {col.tbt_p99_ms:.1f} ms colocated "
              f"({r.tbt_p99_ms / col.tbt_p99_ms - 1:+.0%}), TTFT p99 {r.ttft_p99_ms:.0f} vs {col.ttft_p99_ms:.0f} ms, "
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
    rows.append({"variant": name, "tpot_p50_ms": s["latency_s"]["tpot"]["p50"] * 1e3,
                 "ttft_p50_ms": s["latency_s"]["ttft"]["p50"] * 1e3,
                 "kv_blocks": s["pools"][0]["kv_blocks_per_replica"],
                 "output_tok_s": s["throughput"]["output_tokens_per_s"]})
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
cpu_row = {"tpot_p50_ms": cpu["latency_s"]["tpot"]["p50"] * 1e3, "ttft_p50_ms": cpu["latency_s"]["ttft"]["p50"] * 1e3,
           "verdict": cpu["saturation"]["verdict"], "usd_per_hour": cpu["cost"]["cluster_usd_per_hour"]}
cpu_row
""",
    ),
    ("md", "## Conclusion (computed)"),
    (
        "code",
        """\
b = gpu.loc["H100 bf16"]
for name in ["H100 2x bandwidth", "H100 INT4 weights", "H100 INT8 KV"]:
    r = gpu.loc[name]
    print(f"{name}: decode TPOT p50 {r.tpot_p50_ms:.2f} ms vs {b.tpot_p50_ms:.2f} ms ({r.tpot_p50_ms / b.tpot_p50_ms - 1:+.0%}), "
          f"TTFT p50 {r.ttft_p50_ms / b.ttft_p50_ms - 1:+.0%}, KV capacity {r.kv_blocks / b.kv_blocks:.2f}x blocks.")
tpot_cut = 1 - gpu.loc["H100 2x bandwidth"].tpot_p50_ms / b.tpot_p50_ms
ttft_cut = 1 - gpu.loc["H100 2x bandwidth"].ttft_p50_ms / b.ttft_p50_ms
wall = "decode sits on the memory wall, prefill much less" if tpot_cut > 2 * ttft_cut else "no clear memory wall"
print(f"2x bandwidth cuts TPOT by {tpot_cut:.0%} and TTFT by {ttft_cut:.0%}: {wall}.")
print(f"Xeon 8480+ (AMX): TPOT p50 {cpu_row['tpot_p50_ms']:.0f} ms ({cpu_row['tpot_p50_ms'] / b.tpot_p50_ms:.0f}x the H100), "
      f"TTFT p50 {cpu_row['ttft_p50_ms']:.0f} ms at 0.25 req/s ({cpu_row['verdict']}), ${cpu_row['usd_per_hour']:.2f}/h.")
""",
    ),
]

NOTEBOOKS["05_capacity_plan_azure_trace"] = [
    (
        "md",
        "# 05 Capacity plan on the Azure conversation trace\nThe real Azure LLM inference trace (Splitwise, ISCA "
        "2024), a one-minute slice here to keep the notebook fast; `llmsim plan scenarios/plan_azure_conv.yaml` runs "
        "the full search and writes the HTML report.",
    ),
    ("code", SETUP),
    (
        "code",
        """\
from llmsim.planning import Base, capacity_plan

base = Base.from_path(ROOT / "scenarios/plan_azure_conv.yaml", {
    "workload.trace.duration_s": 60,
    "plan.hardware": ["H100-SXM", "MI300X", "A100-SXM-80GB"],
    "plan.tp": [4], "plan.replicas": [1, 2], "plan.goodput_search": False,
})
plan = capacity_plan(base, workers=2, progress=False)
cols = ["config", "usd_per_hour", "usd_per_mtok", "j_per_token", "slo_attainment", "ttft_p99_s", "tbt_p99_s", "reason"]
plan.table[cols].round(3)
""",
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
