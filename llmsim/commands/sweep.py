"""``llmsim sweep SCENARIO --set key=a,b,c --set key=1..8``: run a grid, write one table."""

from __future__ import annotations

import argparse
from pathlib import Path

from llmsim.tables import table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run every combination of scenario overrides; write a Parquet + CSV table")
    p.add_argument("scenario", help="path to a scenario YAML")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUES",
        help="a grid axis: comma list (policy.kind=chunked,traditional) or range (cluster.replicas=1..8[..STEP])",
    )
    p.add_argument("--fix", action="append", default=[], metavar="KEY=VALUE", help="a single override for every run")
    p.add_argument("--out", help="output directory (default: <scenario output.dir>/sweep)")
    p.add_argument("--workers", type=int, default=None, help="local processes (default: all cores; 1 = in-process)")
    p.add_argument("--dask", metavar="ADDRESS", help="run on an existing Dask scheduler, e.g. tcp://10.0.0.5:8786")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no table; print nothing but errors")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    from llmsim.commands.run import parse_overrides, prepare_output
    from llmsim.errors import UserError
    from llmsim.scenario import load_scenario
    from llmsim.sweep import parse_grid, run_sweep, write_table

    grid = parse_grid(args.set)
    if not grid:
        raise UserError("sweep: give at least one axis, e.g. --set cluster.replicas=1..4")
    fixed = parse_overrides(args.fix)
    sc = load_scenario(args.scenario, fixed)  # validates the base scenario before any work
    out = Path(args.out) if args.out else Path(sc.output.dir) / "sweep"
    prepare_output(out)
    df = run_sweep(args.scenario, grid, fixed, workers=args.workers, dask=args.dask, progress=not args.quiet)
    written = write_table(df, out)
    if not args.quiet:
        cols = [*grid, "throughput_rps", "ttft_p99_s", "tbt_p99_s", "slo_attainment", "verdict", "usd_per_hour"]
        rows = [[r[c] for c in cols] for r in df.to_dict("records")]
        print(table(rows, cols))
        errors = df[df["error"].notna()]
        for _, r in errors.iterrows():
            print(f"  {dict((k, r[k]) for k in grid)}: {r['error']}")
        print("\nwrote: " + ", ".join(str(p) for p in written))
    return 0
