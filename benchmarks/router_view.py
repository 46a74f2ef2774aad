"""A stale router view against a live one: quickstart on 4 replicas with ``kv_aware`` routing,
at 24 req/s, ``cluster.router_view_s`` unset (live), 1 s and 3 s (docs/policies.md, "Stale views").

    .venv/bin/python benchmarks/router_view.py
"""

from __future__ import annotations

from pathlib import Path

import llmsim

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    over = {
        "cluster.replicas": 4,
        "cluster.router": "kv_aware",
        "workload.rate_rps": 24,
        "workload.num_requests": 400,
        "output.steps": "none",
    }
    print(f"{'router_view_s':>13}  {'TTFT mean':>9}  {'TTFT p99':>9}  {'TPOT mean':>9}  {'E2E mean':>9}  (ms)")
    for view in (None, 1.0, 3.0):
        o = over if view is None else {**over, "cluster.router_view_s": view}
        s = llmsim.run(ROOT / "scenarios/quickstart.yaml", o).summary
        name = "live" if view is None else f"{view:g} s"
        figures = (s["mean_ttft_ms"], s["p99_ttft_ms"], s["mean_tpot_ms"], s["mean_e2el_ms"])
        print(f"{name:>13}" + "".join(f"  {x:9.1f}" for x in figures))


if __name__ == "__main__":
    main()
