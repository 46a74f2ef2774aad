"""A capacity plan's result: every evaluated point, the winners, and what the plan concludes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from llmsim.planning.goodput import GoodputResult
from llmsim.planning.space import Point


@dataclass
class Plan:
    target_rps: float
    target_attainment: float
    table: pd.DataFrame  # every evaluated point (PLAN_COLUMNS)
    winners: pd.DataFrame  # feasible, cheapest first
    pareto: pd.DataFrame  # feasible, not dominated in (usd_per_hour, p99_ttft_ms)
    infeasible: pd.DataFrame  # one row per candidate that never met the SLOs, with its reason
    sensitivity: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the winner's goodput search: its SLO capacity (rate_rps) and load curve; not vLLM's request_goodput
    slo_capacity: GoodputResult | None = None
    recommendation: str = ""
    best: Point | None = None  # what winners' first row describes (None: no winner)
    left_out: list[str] = field(default_factory=list)  # plan.engines' pairs with hardware they do not run on
    latency_slos: bool = True  # False: the scenario sets none, so "meets the SLOs" means "not overloaded"
