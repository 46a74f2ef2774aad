"""``llmsim plan SCENARIO [--target-rps R]``: the cheapest configurations that meet the SLOs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from llmsim.errors import UserError
from llmsim.tables import table

if TYPE_CHECKING:
    import pandas as pd

    from llmsim.planning.base import Base
    from llmsim.planning.result import Plan
    from llmsim.planning.space import Candidate
    from llmsim.scenario import Scenario


def add_parser(sub: argparse._SubParsersAction) -> None:
    from llmsim.commands.run import add_set_option

    p = sub.add_parser(
        "plan", help="capacity plan: cheapest hardware/engine/tp/replicas/policy meeting the SLOs + report"
    )
    p.add_argument("scenario", help="path to a scenario YAML with a `plan:` section")
    p.add_argument(
        "--target-rps", type=float, help="arrival rate to plan for (default: plan.target_rps or the trace's)"
    )
    p.add_argument("--out", help="output directory (default: the scenario's output.dir)")
    add_set_option(p, "override a scenario key")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local processes (default: all cores; at most one per point and four per core)",
    )
    p.add_argument("--dask", metavar="ADDRESS", help="run the candidates on an existing Dask scheduler")
    p.add_argument("--no-report", action="store_true", help="write the tables only")
    p.add_argument("--quiet", action="store_true", help="no progress bars; print nothing but errors")
    p.set_defaults(func=cmd_plan)


def set_blamed(exc: UserError, path: Path, overrides: dict[str, object]) -> UserError:
    """``exc`` naming the ``--set`` item it comes from: a scenario key's as ``llmsim run`` names it
    (``blame_overrides``), a ``plan.`` key's where the message names that key ("plan: top: ...")."""
    from llmsim.sweep import blame_overrides, set_item

    blamed = blame_overrides(exc, path, overrides)
    text, origin = str(blamed), str(path)
    if blamed is not exc or not text.startswith(f"{origin}: "):
        return blamed
    rest = text.removeprefix(f"{origin}: ")
    for key, value in overrides.items():
        head, _, tail = key.partition(".")
        named = f"{key}:" in rest or rest.startswith((f"plan: {tail}:", f"plan: {tail}."))
        if head == "plan" and tail and named:
            return UserError(f"{origin}: {set_item('--set', key, value)}: {rest}")
    return exc


def cmd_plan(args: argparse.Namespace) -> int:
    """Exit 0: the plan ran (candidates that fail, even all of them, are its findings); 2: bad input
    (the scenario, its ``plan:`` section, --target-rps, --dask), nothing ran."""
    from llmsim.commands.run import parse_overrides
    from llmsim.errors import atomic_folder, output_pending
    from llmsim.planning.base import Base
    from llmsim.planning.capacity import capacity_plan
    from llmsim.planning.output import write_plan
    from llmsim.planning.rate import check_target
    from llmsim.planning.space import checked_space
    from llmsim.sweep import check_workers, dask_client

    check_workers(args.workers)
    overrides = parse_overrides(args.set)
    try:
        base = Base.from_path(args.scenario, overrides)
        sc = base.scenario()  # validates everything before any work: the scenario,
        check_engine_sets(base, overrides, args.scenario)
        _, cands, _ = checked_space(base)  # ... the plan: section and every candidate it names,
    except UserError as exc:  # a --set value named as the --set item, not as the file's
        raise set_blamed(exc, Path(args.scenario), overrides) from None
    check_target(base, args.target_rps)  # ... the rate to plan for,
    out = Path(args.out) if args.out else Path(sc.output.dir)
    client = dask_client(args.dask) if args.dask else None  # ... and the --dask address
    check_plan_output(out)
    try:
        with output_pending(out):  # an interrupt from here on says `out` is unchanged
            plan = capacity_plan(base, args.target_rps, workers=args.workers, dask=client, progress=not args.quiet)
    finally:
        if client is not None:
            client.close()  # type: ignore[attr-defined]
    with output_pending(out), atomic_folder(out, owned=plan_owns) as tmp:  # complete or untouched, as a run's
        written = write_plan(plan, base, tmp, progress=not args.quiet)
        if not args.no_report:
            from llmsim.report import write_report

            written += write_report(tmp)
    written = [out / p.relative_to(tmp) for p in written]
    if not args.quiet:
        print(plan_text(plan, engine_likes(base, sc, cands)))
        print("\nwrote: " + ", ".join(str(p) for p in written))
    return 0


def check_engine_sets(base: Base, overrides: dict[str, object], path: str) -> None:
    """A ``--set engine...`` under ``plan.engines`` would be replaced on every candidate: refused,
    naming the --set (the listed engines are what the plan compares)."""
    sets = [k for k in overrides if k == "engine" or k.startswith("engine.")]
    if sets and base.plan_config().engines:
        raise UserError(
            f"{path}: --set {sets[0]}: plan.engines lists the engines to compare and replaces the scenario's "
            "engine on every candidate; drop the --set, or set plan.engines"
        )


def plan_owns(entry: Path) -> bool:
    """An entry a plan writes: its tables, plan.json and the winner's run (with its report)."""
    from llmsim.commands.run import run_owns
    from llmsim.report import PLAN_TABLES

    tables = {f"{t}.{ext}" for t in PLAN_TABLES for ext in ("csv", "parquet")}
    return run_owns(entry) or entry.name in tables or entry.name == "plan.json"


def check_plan_output(out: Path) -> None:
    """Fail before planning if the plan's folder can't replace ``out`` (as ``llmsim run`` checks)."""
    from llmsim.commands.run import check_writable_parent
    from llmsim.errors import UserError, refuse_foreign_files, results_in

    # a run's results are not a plan's to replace, as they are not a sweep's (a plan folder holds its
    # winner's run beside plan.json: results_in names it a plan)
    if (other := results_in(out)) is not None and other[0] == "run":
        raise UserError(
            f"output directory {out} holds the results of `llmsim run` (summary.json); a plan replaces its whole "
            "--out folder, so pick another"
        )
    refuse_foreign_files(out, plan_owns)
    check_writable_parent(out)


# The printed columns (plan.csv has them all); TBT max is what slo.tbt_s bounds.
WINNER_COLUMNS = [
    "config",
    "usd_per_hour",
    "usd_per_mtok",
    "j_per_token",
    "slo_attainment",
    "request_goodput",
    "p99_ttft_ms",
    "p99_tbt_max_ms",
]
SENSITIVITY_COLUMNS = ["config", "efficiency_factor", "slo_attainment", "meets_slos"]


def _table(df: pd.DataFrame, cols: list[str]) -> str:
    """``cols`` of ``df`` with the report's cells (``llmsim.report.table_value``: shares as 95.8%)."""
    from llmsim.report import table_value

    return table([[table_value(r[c], c) for c in cols] for r in df.to_dict("records")], cols)


def plan_like(base: Base, sc: Scenario, hardware: list[str]) -> dict:
    """The kind of run the plan's candidates are, for their prediction intervals (accuracy.validated)."""
    from llmsim.accuracy import accuracy_family, runs_like
    from llmsim.build import build_model
    from llmsim.hardware import load_profile

    families = {accuracy_family(load_profile(h, Path(base.base_dir))) for h in hardware}
    return runs_like(families, build_model(sc).is_moe)


def engine_likes(base: Base, sc: Scenario, cands: list[Candidate]) -> dict[str, dict]:
    """Each engine of the plan's candidates and the kind of run its own candidates are (the devices
    it was paired with, not every device of the plan), for its accuracy line."""
    from llmsim.engine import load_engine

    # by the engine's name, as a run's accuracy line keys it (a profile file's `name:`, not its path)
    names = {e: load_engine(e, Path(base.base_dir), base.origin).name for e in {c.engine for c in cands if c.engine}}
    hardware: dict[str, list[str]] = {}
    for c in cands:
        hardware.setdefault(names[c.engine] if c.engine else sc.engine_spec.name, []).append(c.hardware)
    return {engine: plan_like(base, sc, hw) for engine, hw in sorted(hardware.items())}


def plan_text(plan: Plan, engines: dict[str, dict | None] | None = None) -> str:
    """The plan as the CLI prints it; ``engines``: each engine of its candidates and the kind of run
    they are (``engine_likes``), each engine with its accuracy line."""
    head = f"capacity plan at {plan.target_rps:.3f} req/s, SLO attainment target {plan.target_attainment:.0%}\n"
    out = [head + "\ncheapest configurations meeting the SLOs:"]
    out.append(_table(plan.winners, WINNER_COLUMNS) if not plan.winners.empty else "(none)")
    if not plan.infeasible.empty:
        out.append(f"\ncandidates that never met the SLOs ({len(plan.infeasible)}):")
        out += [f"  {r['config']}: {r['reason']}" for r in plan.infeasible.to_dict("records")]
    if plan.left_out:
        out.append(f"\nleft out of the search ({len(plan.left_out)}):")
        out += [f"  {why}" for why in plan.left_out]
    if not plan.sensitivity.empty:
        out.append("\nsensitivity (every efficiency scaled):")
        out.append(_table(plan.sensitivity, SENSITIVITY_COLUMNS))
    out.append("\nrecommendation: " + plan.recommendation)
    from llmsim.accuracy import interval_line, validated

    engines = engines or {"vllm-v1": None}
    for engine, like in engines.items():
        named = f" ({engine})" if len(engines) > 1 else ""
        out.append(f"accuracy{named} " + interval_line(validated(engine, **(like or {})), like))
    return "\n".join(out)
