"""What do the invariant checks cost? Runs scenarios through ``llmsim.run`` and
times the ``check_run`` call inside each run. ``python benchmarks/bench_invariants.py [--repeat N]``

The checks stay on (no ``--no-checks`` flag) as long as the overhead is a few percent.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import llmsim
from llmsim import api, invariants
from llmsim.scenario import load_scenario
from llmsim.tables import table

ROOT = Path(__file__).resolve().parents[1]


def scenarios() -> dict[str, llmsim.Scenario]:
    path = ROOT / "scenarios/quickstart.yaml"
    return {
        "quickstart (600 req, 2 replicas)": load_scenario(path),
        "50x overload (2500 req, horizon 5 s)": load_scenario(
            path,
            {"workload.rate_rps": 500, "workload.num_requests": 2500, "workload.horizon_s": 5.0, "cluster.replicas": 1},
        ),
    }


def timed_run(sc: llmsim.Scenario) -> tuple[float, float]:
    """Seconds of the whole ``llmsim.run`` and of its ``check_run`` call alone."""
    spent: list[float] = []

    def check(*args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        invariants.check_run(*args, **kwargs)
        spent.append(time.perf_counter() - t0)

    api.check_run = check
    try:
        t0 = time.perf_counter()
        llmsim.run(sc, checks=True)
        return time.perf_counter() - t0, spent[0]
    finally:
        api.check_run = invariants.check_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for name, sc in scenarios().items():
        runs = [timed_run(sc) for _ in range(args.repeat)]
        total = statistics.median(r[0] for r in runs)
        checks = statistics.median(r[1] for r in runs)
        rows.append([name, total, checks * 1e3, 100.0 * checks / total])
    print(table(rows, ["scenario", "run (s)", "checks (ms)", "overhead %"]))
    print(f"median of {args.repeat} runs each; checks timed inside the run, so CPU contention cancels out")


if __name__ == "__main__":
    main()
