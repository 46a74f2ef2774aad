"""The capacity plan: walk the candidates at a target rate, keep those that meet the SLOs, rank them, explain the rest.

Each round runs every still-open candidate at the next replica count (in parallel through
``llmsim.sweep.run_points``: local processes or Dask); a candidate leaves the rounds once it meets
the SLOs or fails in a way more replicas cannot fix (memory, invalid)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from llmsim.planning.base import Base, as_base
from llmsim.planning.goodput import goodput_search
from llmsim.planning.prose import recommend
from llmsim.planning.ranking import cheapest_first, infeasible_candidates, pareto_front
from llmsim.planning.rate import check_target, offered_rate, rate_knob, rate_overrides
from llmsim.planning.result import Plan
from llmsim.planning.robustness import sensitivity
from llmsim.planning.rows import PLAN_COLUMNS, plan_row, worth_more_replicas
from llmsim.planning.space import Point, checked_space
from llmsim.results import has_latency_slo
from llmsim.scenario import Scenario
from llmsim.sweep import run_points

SENSITIVITY_WINNERS = 3  # the cheapest winners re-run with scaled efficiencies


def capacity_plan(
    base: Base | Scenario | str | Path,
    target_rps: float | None = None,
    workers: int | None = None,
    dask: str | object | None = None,
    progress: bool = True,
) -> Plan:
    """Search the ``plan:`` candidates at ``target_rps``; the cheapest SLO-meeting configs win."""

    base = as_base(base)
    check_target(base, target_rps)
    cfg, cands, left_out = checked_space(base)  # the whole space is validated before the first simulation
    if target_rps is None and cfg.target_rps is not None:  # (the flag's rate was checked above)
        check_target(base, cfg.target_rps, f"{base.origin}: plan.target_rps")
    sc = base.scenario()
    knob = rate_knob(base)
    target_rps = target_rps or cfg.target_rps or offered_rate(base, knob)
    rate = rate_overrides(base, target_rps, knob)
    slo = sc.slo.model_dump()  # seconds, as the scenario states them
    power_w = {c.hardware: _power_w(c.hardware, base, sc) for c in cands}
    rows: list[dict] = []
    points: list[Point] = []  # points[i] is what rows[i] (and so table.loc[i]) describes
    open_ = list(range(len(cands)))  # candidates still looking for a replica count that works
    for n in sorted(set(cfg.replicas)):
        batch = [Point(cands[i], n) for i in open_]
        overrides = [{**p.overrides(), **rate} for p in batch]
        results = run_points(base.data, base.base_dir, base.origin, overrides, workers, dask, progress, f"plan x{n}")
        still = []
        for i, p, res in zip(open_, batch, results, strict=True):
            row = plan_row(p, res, power_w[p.candidate.hardware], sc.slo.attainment, slo)
            rows.append(row)
            points.append(p)
            if worth_more_replicas(row, sc.cluster.expert_parallel):
                still.append(i)
        open_ = still
        if not open_:
            break
    table = pd.DataFrame(rows, columns=PLAN_COLUMNS)
    table["engine"] = table["engine"].fillna(sc.engine_spec.name)  # (a candidate without one runs the scenario's)
    feasible = cheapest_first(table)
    ranked = [points[i] for i in feasible.index]  # ranked[k] is what feasible.iloc[k] describes
    winners = feasible.head(cfg.top).reset_index(drop=True)
    owner = pd.Series([p.candidate for p in points], index=table.index, dtype=object)  # each row's candidate
    plan = Plan(
        target_rps=target_rps,
        target_attainment=sc.slo.attainment,
        table=table,
        winners=winners,
        pareto=pareto_front(feasible, "usd_per_hour", "p99_ttft_ms"),
        infeasible=infeasible_candidates(table, owner),
        best=ranked[0] if ranked else None,
        left_out=left_out,
        latency_slos=has_latency_slo(slo, slo.get("classes")),
    )
    if plan.best is not None and cfg.sensitivity > 0:
        top = winners.head(SENSITIVITY_WINNERS)
        plan.sensitivity = sensitivity(base, top, ranked[: len(top)], rate, cfg.sensitivity, workers, progress)
    if plan.best is not None and cfg.goodput_search:
        plan.slo_capacity = goodput_search(base, plan.best.overrides(), start_rps=target_rps)
    plan.recommendation = recommend(plan)
    return plan


def _power_w(hardware: str, base: Base, sc: Scenario) -> float:
    """The power of the devices a candidate uses: on a CPU, the sockets the scenario runs on."""
    from llmsim.hardware import cpu_subset, load_profile

    hw = load_profile(hardware, Path(base.base_dir))
    return cpu_subset(hw, sc.cluster.sockets, sc.cluster.cores).power_w.value if hw.cpu else hw.power_w.value
