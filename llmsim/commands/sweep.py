"""``llmsim sweep SCENARIO --set key=a,b,c --set key=1..8``: run a grid, write one table and its report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from llmsim.tables import table

if TYPE_CHECKING:
    import pandas as pd

    from llmsim.scenario import Scenario

# The columns printed after a sweep (every column is in sweep.csv); the report's table holds them all.
PRINTED = ["request_throughput", "request_goodput", "p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "slo_attainment"]
PRINTED_TAIL = ["verdict", "usd_per_hour"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="run every combination of scenario overrides; write a Parquet + CSV table and a report"
    )
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
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local processes (default: all cores; 1 = in-process; at most one per point and four per core)",
    )
    p.add_argument("--dask", metavar="ADDRESS", help="run on an existing Dask scheduler, e.g. tcp://10.0.0.5:8786")
    p.add_argument("--no-report", action="store_true", help="skip report.html / report.md")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no table; print nothing but errors")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    """Exit 0: every point ran; 1: the table and report are written but some points failed at run
    time (their ``error`` cells say why); 2: bad input (an axis, a value, --dask), nothing ran."""
    from llmsim.commands.run import parse_overrides
    from llmsim.errors import UserError, atomic_folder, output_pending
    from llmsim.scenario import load_scenario
    from llmsim.sweep import (
        check_sweep,
        check_workers,
        dask_client,
        expand,
        fix_blamed,
        parse_grid,
        run_sweep,
        sweep_data,
    )

    grid = parse_grid(args.set)
    if not grid:
        raise UserError("sweep: give at least one axis, e.g. --set cluster.replicas=1..4")
    fixed = parse_overrides(args.fix, "--fix")
    check_workers(args.workers)
    # a scenario, not another llmsim file given by mistake; a --fix key path that cannot be set
    # (through a value: workload.rate_rps.x) named as the --fix item it is
    sweep_data(Path(args.scenario), fixed)
    try:
        try:  # the base scenario with the fixed values, validated before any work
            sc = load_scenario(args.scenario, fixed)
        except UserError:  # ... unless they need an axis (--fix policy.kind=vllm, --set cluster.prefill_pool=null)
            sc = load_scenario(args.scenario, {**fixed, **expand(grid)[0]})
        check_sweep(args.scenario, grid, fixed)  # ... and every point of the grid, without simulating
    except UserError as exc:  # a bad --fix value is named as its --fix item, not as the file's
        raise fix_blamed(exc, Path(args.scenario), fixed) from None
    out = Path(args.out) if args.out else Path(sc.output.dir) / "sweep"
    check_sweep_output(out)
    client = dask_client(args.dask) if args.dask else None  # a bad address fails before anything is written
    try:
        with output_pending(out):  # an interrupt from here on says `out` is unchanged
            df = run_sweep(
                args.scenario, grid, fixed, workers=args.workers, dask=client, progress=not args.quiet, validate=False
            )
    finally:
        if client is not None:
            client.close()  # type: ignore[attr-defined]
    failed = int(df["error"].notna().sum())
    # complete or untouched, as a run's folder (docs/planning.md): the table, sweep.json and the report
    # are written into a temporary sibling that replaces `out` only once all of them are
    with output_pending(out), atomic_folder(out, owned=sweep_owns) as tmp:
        written = write_sweep(df, tmp, sc, grid, fixed, report=not args.no_report and failed < len(df))
    written = [out / p.relative_to(tmp) for p in written]
    if not args.quiet:
        print(sweep_text(df, list(grid)))
        print("\nwrote: " + ", ".join(str(p) for p in written))
    if failed:
        # on stderr even with --quiet: a script must learn that the table has holes
        print(f"llmsim: {failed} of {len(df)} sweep points failed; their error column says why", file=sys.stderr)
        return 1
    return 0


def write_sweep(df: pd.DataFrame, folder: Path, sc: Scenario, grid: dict, fixed: dict, report: bool) -> list[Path]:
    """Every file of a sweep into ``folder``: the table, sweep.json and (with ``report``: with no
    point run there is nothing to plot) the report."""
    from llmsim.sweep import write_table

    written = write_table(df, folder)
    written.append(write_sweep_meta(folder, sc, grid, fixed))
    if report:
        from llmsim.report import write_report

        written += write_report(folder)
    return written


# What `llmsim sweep` writes into its folder (and nothing else): it replaces the folder as a whole
SWEEP_FILES = {"sweep.parquet", "sweep.csv", "sweep.json", "report.html", "report.md", "report_plots"}
SWEEP_FILES |= {".llmsim_write_test"}  # the probe of sweeps before they replaced their folder whole


def sweep_owns(entry: Path) -> bool:
    """An entry a sweep writes (or an atomic write's temporary name, left by a killed older llmsim)."""
    return entry.name in SWEEP_FILES or (entry.name.startswith(".") and entry.name.endswith(".tmp"))


def check_sweep_output(out: Path) -> None:
    """Fail before simulating if the sweep's folder can't replace ``out`` (as ``llmsim run`` checks);
    a run's or a plan's results are named as such: replacing them is never what a sweep means."""
    from llmsim.commands.run import check_writable_parent
    from llmsim.errors import UserError, refuse_foreign_files, results_in

    other = results_in(out)
    if other is not None and other[0] != "sweep":
        raise UserError(
            f"output directory {out} holds the results of `llmsim {other[0]}` ({other[1]}); a sweep replaces "
            "its whole --out folder, so pick another (the default is <output.dir>/sweep)"
        )
    refuse_foreign_files(out, sweep_owns)
    check_writable_parent(out)


def write_sweep_meta(out: Path, sc: Scenario, grid: dict, fixed: dict) -> Path:
    """sweep.json: what the report needs beyond the table (the axes, the fixed overrides, the SLOs in seconds)."""
    from llmsim.errors import atomic_write_text
    from llmsim.results import file_sha256

    slo = sc.slo.model_dump(exclude={"classes"})
    slo["attainment_target"] = slo.pop("attainment")  # summary.json's name for it
    meta = {"scenario": sc.name, "grid": grid, "fixed": fixed, "slo": slo}
    # the tables' SHA-256, so a report tells a table edited or copied from another sweep (the
    # sweep's files carry no run id of their own: a sweep is many runs)
    meta["tables"] = {
        name: file_sha256(Path(out) / name) for name in ("sweep.parquet", "sweep.csv") if (Path(out) / name).exists()
    }
    path = Path(out) / "sweep.json"
    atomic_write_text(path, json.dumps(meta, indent=2, default=str) + "\n")
    return path


def sweep_text(df: pd.DataFrame, keys: list[str]) -> str:
    """The printed table (its cells are the report's: ``llmsim.report.table_value``) and the error rows."""
    from llmsim.report import table_value

    cols = [*keys, *PRINTED, *PRINTED_TAIL]
    rows = [[table_value(r[c], c) for c in cols] for r in df.to_dict("records")]
    lines = [table(rows, cols)]
    for _, r in df[df["error"].notna()].iterrows():
        lines.append(f"  {dict((k, r[k]) for k in keys)}: {r['error']}")
    return "\n".join(lines)
