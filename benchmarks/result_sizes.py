"""How big a run's results folder gets: bench_sim's case c1m (1M requests) or c100k, written as
``llmsim run`` writes it, in Parquet and in CSV, with the timeline sampled. Prints a table.

    .venv/bin/python benchmarks/result_sizes.py [c100k|c1m] [sample|all]   # steps: every 100th (default) or all
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sim import ROOT, cases  # noqa: E402

import llmsim  # noqa: E402
from llmsim.report import write_report, write_scenario  # noqa: E402
from llmsim.scenario import scenario_from_dict  # noqa: E402
from llmsim.tables import table  # noqa: E402


def main(case: str = "c1m", steps: str = "sample") -> None:
    spec = cases()[case]
    spec["output"] = {"steps": steps, "trace": "sample"}
    sc = scenario_from_dict(spec, f"bench case {case}", ROOT)
    res = llmsim.run(sc)
    rows = []
    for fmt in ("parquet", "csv"):
        with tempfile.TemporaryDirectory(prefix="llmsim-sizes-") as tmp:
            out = Path(tmp)
            t0 = time.perf_counter()
            res.write(out, fmt)
            write_s = time.perf_counter() - t0
            write_scenario(sc, out)
            t0 = time.perf_counter()
            write_report(out)
            report_s = time.perf_counter() - t0
            for p in sorted(out.rglob("*")):
                if p.is_file() and not p.name.endswith(".png"):
                    rows.append([fmt, p.name, p.stat().st_size / 1e6])
            rows.append([fmt, "(writing tables + summary, s)", write_s])
            rows.append([fmt, "(report + trace, s)", report_s])
    print(f"case {case}: {len(res.requests):,} requests, {len(res.steps):,} steps")
    print(table(rows, ["format", "file", "MB"]))


if __name__ == "__main__":
    main(*sys.argv[1:])
