"""Capacity planning: goodput search and the cheapest configurations that meet the SLOs.

* ``goodput_search`` finds the highest arrival rate at which SLO attainment stays at or above
  the target (the configuration's SLO capacity; "goodput" alone means vLLM's ``request_goodput``,
  the requests per second meeting the SLOs in one run), by bracketing (doubling/halving) and then bisection on the rate. The workload's
  shape is kept: a trace is replayed faster or slower (``workload.trace.speedup``), a synthetic
  workload changes only ``workload.rate_rps``.
* ``capacity_plan`` walks the candidates of a scenario's ``plan:`` section (hardware, tp,
  replicas, policies, chunk sizes, prefill:decode ratios) at a target rate, keeps the
  configurations that meet the SLOs, ranks them by price, draws the cost-latency Pareto front,
  says why the others fail (memory, latency, overload), and re-runs the winners with every
  efficiency ±15% to show whether the choice holds.

Every point is one ``llmsim.run``; the points of a round run in parallel through
``llmsim.sweep.run_points`` (local processes or Dask).

One module per idea, in the order a plan uses them:

``base``          the scenario as plain data (``Base``) and its ``plan:`` section (``PlanConfig``)
``rate``          the arrival rate as one knob, the workload's shape kept
``goodput``       the goodput search (a configuration's SLO capacity)
``space``         the search space: ``Candidate``, and ``Point`` (a candidate at a replica count)
``rows``          one plan-table row per point: cost, energy, feasible and why not
``ranking``       cheapest first, the Pareto front, the candidates that never met the SLOs
``robustness``    the sensitivity runs: the winners re-run with scaled efficiencies
``capacity``      ``capacity_plan``, which runs the rounds and fills a ``Plan``
``result``        ``Plan``: the evaluated points, winners, Pareto front and conclusions
``prose``         the plain-language recommendation
``output``        ``write_plan``: the tables, ``plan.json`` and the winner's run

The names below stay importable from ``llmsim.planning`` for notebooks and scripts; code inside
llmsim imports them from the module that owns them.
"""

from llmsim.planning.base import Base, PlanConfig
from llmsim.planning.capacity import capacity_plan
from llmsim.planning.goodput import GoodputResult, goodput_search
from llmsim.planning.output import write_plan
from llmsim.planning.prose import recommend
from llmsim.planning.ranking import pareto_front
from llmsim.planning.rate import offered_rate, rate_knob, rate_overrides
from llmsim.planning.result import Plan
from llmsim.planning.robustness import scaled_profile, sensitivity
from llmsim.planning.rows import PLAN_COLUMNS
from llmsim.planning.space import Candidate, Point, candidates

__all__ = [
    "PLAN_COLUMNS",
    "Base",
    "Candidate",
    "GoodputResult",
    "Plan",
    "PlanConfig",
    "Point",
    "candidates",
    "capacity_plan",
    "goodput_search",
    "offered_rate",
    "pareto_front",
    "rate_knob",
    "rate_overrides",
    "recommend",
    "scaled_profile",
    "sensitivity",
    "write_plan",
]
