"""Markdown table of the committed vLLM-CPU runs (stdlib only; no vllm needed).

python benchmarks/vllm_cpu/summarize.py [data/validation/vllm-cpu]
"""

from __future__ import annotations

import csv
import gzip
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent / "data" / "validation" / "vllm-cpu"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def serving_row(d: Path, split: dict) -> str:
    meta = json.loads((d / "meta.json").read_text())
    s = meta["summary"]
    with open(d / "requests.csv") as fh:
        reqs = list(csv.DictReader(fh))
    ttft = [float(r["first_token_s"]) - float(r["arrival_s"]) for r in reqs]
    e2e = [float(r["finish_s"]) - float(r["arrival_s"]) for r in reqs]
    itl = []
    with gzip.open(d / "tokens.csv.gz", "rt") as fh:
        prev: dict[str, float] = {}
        for r in csv.DictReader(fh):
            t = float(r["time_s"])
            if r["id"] in prev:
                itl.append(t - prev[r["id"]])
            prev[r["id"]] = t
    role = next((k for k in ("calibration", "validation") if d.name in split[k]), "")
    if not role and d.name in split["validation_repeats"]["runs"]:
        role = "repeat"
    arr = meta["workload"]["spec"]["arrival"]
    rate = "all at t=0" if arr == "burst" else f"{meta['workload']['rate_rps']:.2f}"
    return (
        f"| {d.name} | {role} | {arr} | {rate} | {s['requests']} "
        f"| {s['last_arrival_s']:.1f} | {s['makespan_s']:.1f} | {s['steps']} "
        f"| {s['median_step_ms']:.1f} | {s['preemptions']} "
        f"| {s['prefix_cached_tokens']} "
        f"| {1000 * statistics.mean(ttft):.0f} | {1000 * pct(ttft, 0.99):.0f} "
        f"| {statistics.mean(e2e):.2f} | {1000 * statistics.mean(itl):.1f} "
        f"| {meta['load_avg_before'][0]:.2f}/{meta['load_avg_after'][0]:.2f} |"
    )


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else ROOT
    split = json.loads((root / "split.json").read_text())
    print(
        "| run | split | arrivals | rate req/s | requests | last arrival s "
        "| makespan s | steps | median step ms | preemptions | prefix-cached tokens "
        "| TTFT mean ms | TTFT p99 ms | E2E mean s | ITL mean ms | load 1-min before/after |"
    )
    print("|" + "---|" * 16)
    for d in sorted(p for p in root.iterdir() if (p / "requests.csv").exists()):
        print(serving_row(d, split))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
