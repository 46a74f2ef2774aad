"""Goodput search: the highest arrival rate at which SLO attainment stays at or above the target
and the system keeps up (``llmsim.results.slos_held``: at an overloaded rate, or one the run is too
short to show settling, a finite workload can meet the SLOs only because it ends before the queue
shows: 60 requests met them at 4,096 req/s on a GPU that serves 19).

Bracket (doubling or halving from the scenario's own rate), then bisect. Every evaluation is one
``llmsim.run`` through ``llmsim.sweep.run_point``, kept as the load curve the report plots.

Two figures, two names. The search's answer, ``GoodputResult.rate_rps``, is the configuration's
**SLO capacity**: the offered arrival rate it can take while the attainment target holds
(DistServe calls this "goodput"). ``request_goodput`` is vLLM's: in one run, the requests per
second that met every SLO (each evaluation row carries it). At the SLO capacity the second is
about ``attainment x rate``; the plan's text and tables say "SLO capacity" for the first and
"goodput" only for the second."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from llmsim.errors import UserError
from llmsim.planning.base import Base, as_base
from llmsim.planning.rate import offered_rate, rate_knob, rate_overrides
from llmsim.results import slos_held
from llmsim.scenario import Scenario
from llmsim.sweep import run_point


@dataclass
class GoodputResult:
    """The highest rate found meeting the attainment target (the SLO capacity), and the lowest found missing it."""

    rate_rps: float  # SLO capacity: highest offered rate that met the target (0 if none did)
    fail_rps: float | None  # lowest rate that missed it (None: never missed up to the last doubling)
    target: float
    attainment: float | None  # at rate_rps
    verdict: str | None  # saturation verdict at rate_rps
    evaluations: list[dict] = field(default_factory=list)  # one sweep row per run, with its rate

    @property
    def step_rps(self) -> float | None:
        return None if self.fail_rps is None else self.fail_rps - self.rate_rps

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.evaluations).sort_values("rate_rps").reset_index(drop=True)


def goodput_search(
    base: Base | Scenario | str | Path,
    overrides: dict[str, object] | None = None,
    target: float | None = None,
    start_rps: float | None = None,
    rel_tol: float = 0.05,
    max_runs: int = 24,
) -> GoodputResult:
    """Bracket then bisect the arrival rate until the bracket is within ``rel_tol`` of its top."""
    base = as_base(base)
    overrides = dict(overrides or {})
    knob = rate_knob(base)
    sc = base.scenario(overrides)
    target = sc.slo.attainment if target is None else target
    rate = start_rps or offered_rate(base, knob)
    evals: list[dict] = []

    def ok(r: float) -> bool:
        row = run_point(base.data, base.base_dir, base.origin, {**overrides, **rate_overrides(base, r, knob)})
        if row["error"]:
            raise UserError(str(row["error"]))
        evals.append({"rate_rps": r, **row})
        met = row["slo_attainment"] is not None and row["slo_attainment"] >= target
        return slos_held(met, row["verdict"], row.get("keeps_up"))

    lo, hi = 0.0, None
    if ok(rate):
        lo = rate
        for _ in range(10):
            if not ok(lo * 2):
                hi = lo * 2
                break
            lo *= 2
    else:
        hi = rate
        for _ in range(10):
            if ok(hi / 2):
                lo = hi / 2
                break
            hi /= 2
    while hi is not None and lo > 0 and hi - lo > rel_tol * hi and len(evals) < max_runs:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    at = next((e for e in evals if e["rate_rps"] == lo), None)
    return GoodputResult(
        rate_rps=lo,
        fail_rps=hi,
        target=target,
        attainment=None if at is None else at["slo_attainment"],
        verdict=None if at is None else at["verdict"],
        evaluations=evals,
    )
