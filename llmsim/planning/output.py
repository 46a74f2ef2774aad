"""Writing a plan: its tables (Parquet + CSV), ``plan.json``, and the winner's full run for the report.

``plan.json``'s ``slo_capacity`` is the winner's SLO capacity from the goodput search (the highest
arrival rate still meeting the SLOs); the winner's ``request_goodput`` (req/s meeting the SLOs at
the target rate) is in its ``summary.json`` and the plan table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from llmsim.errors import atomic_write_text
from llmsim.planning.base import Base
from llmsim.planning.rate import rate_overrides

if TYPE_CHECKING:
    import pandas as pd

    from llmsim.planning.result import Plan


def write_plan(plan: Plan, base: Base, out_dir: Path, progress: bool = True) -> list[Path]:
    """Tables (Parquet + CSV), plan.json, and the winner's full run (requests/steps/summary) for the report."""
    from llmsim.sweep import write_table

    out_dir = Path(out_dir)
    written = write_table(plan.table, out_dir, "plan")
    for name, df in (("winners", plan.winners), ("pareto", plan.pareto), ("sensitivity", plan.sensitivity)):
        written.append(_write_csv(df, out_dir / f"{name}.csv"))
    # the candidates that never met the SLOs, as the CLI and the recommendation count them, so the
    # report lists the same ones (plan.csv also holds the failed smaller replica counts of winners)
    written.append(_write_csv(plan.infeasible, out_dir / "infeasible.csv"))
    if plan.slo_capacity is not None:
        written.append(_write_csv(plan.slo_capacity.frame(), out_dir / "load.csv"))
    atomic_write_text(out_dir / "plan.json", json.dumps(_meta(plan), indent=2, default=str) + "\n")
    written.append(out_dir / "plan.json")
    if plan.best is not None:
        written += _write_winner_run(plan, base, out_dir)
    return written


def _write_csv(df: pd.DataFrame, path: Path) -> Path:
    atomic_write_text(path, df.to_csv(index=False, float_format="%.9g"))
    return path


def _meta(plan: Plan) -> dict:
    g = plan.slo_capacity
    return {
        "target_rps": plan.target_rps,
        "target_attainment": plan.target_attainment,
        "recommendation": plan.recommendation,
        "winner": None if plan.winners.empty else plan.winners.iloc[0]["config"],
        "candidates_never_met": len(plan.infeasible),
        "left_out": plan.left_out,  # hardware-engine pairs not searched: the engine does not run there
        # the winner's SLO capacity (goodput_search), not vLLM's request_goodput (that is in summary.json)
        "slo_capacity": None
        if g is None
        else {"rate_rps": g.rate_rps, "fail_rps": g.fail_rps, "attainment": g.attainment, "verdict": g.verdict},
    }


def _write_winner_run(plan: Plan, base: Base, out_dir: Path) -> list[Path]:
    """Re-run the winner at the target rate and write its requests, steps, summary and scenario."""
    from llmsim.api import run
    from llmsim.report import scenario_json, write_scenario
    from llmsim.results import make_run_id

    assert plan.best is not None
    sc = base.scenario({**plan.best.overrides(), **rate_overrides(base, plan.target_rps)})
    run_id = make_run_id(scenario_json(sc))  # its files carry one id, as a run's (docs/reliability.md)
    return [*run(sc).write(out_dir, sc.output.format, run_id), write_scenario(sc, out_dir, run_id)]
