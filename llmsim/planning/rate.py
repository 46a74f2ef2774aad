"""The arrival rate as one knob, keeping the workload's shape.

A synthetic workload changes only ``workload.rate_rps``; a trace is replayed faster or slower through
``workload.trace.speedup`` (arrival gaps divided by it, lengths and order unchanged)."""

from __future__ import annotations

import math

from llmsim.errors import UserError, reason
from llmsim.planning.base import Base


def rate_knob(base: Base) -> tuple[str, float]:
    """(key to override, rate in req/s per unit of that key). Trace: speedup; synthetic: rate_rps."""
    from llmsim.build import build_workload

    sc = base.scenario()
    w = sc.workload
    if w.kind in ("poisson", "gamma") and w.ramp_up is not None:
        raise UserError(
            f"{base.origin}: workload.ramp_up: the plan searches one arrival rate (workload.rate_rps), and a ramp "
            "sets each request's own; give rate_rps in its place"
        )
    if w.kind in ("poisson", "gamma"):
        return "workload.rate_rps", 1.0
    if w.kind == "trace":
        assert w.trace is not None
        unit = base.scenario({"workload.trace.speedup": 1.0})
        stats = build_workload(unit).stats()
        if not math.isfinite(stats["mean_rate_rps"]):
            raise UserError(f"{base.origin}: workload.trace: needs at least two arrivals at different times")
        return "workload.trace.speedup", stats["mean_rate_rps"]
    raise UserError(
        f"{base.origin}: workload.kind {w.kind!r} has no arrival rate to scale; use poisson, gamma or trace"
    )


def rate_overrides(base: Base, rate_rps: float, knob: tuple[str, float] | None = None) -> dict[str, object]:
    """The scenario overrides that make the workload arrive at ``rate_rps``."""
    key, per_unit = knob or rate_knob(base)
    return {key: rate_rps / per_unit}


def offered_rate(base: Base, knob: tuple[str, float] | None = None) -> float:
    """The scenario's own arrival rate (nominal for synthetic, measured for a trace)."""
    key, per_unit = knob or rate_knob(base)
    sc = base.scenario()
    if key == "workload.rate_rps":
        return float(sc.workload.rate_rps or 0.0)
    assert sc.workload.trace is not None
    return sc.workload.trace.speedup * per_unit


def check_target(base: Base, target_rps: float | None, flag: str = "--target-rps") -> None:
    """A target rate the plan can run at: positive, finite, and one the scenario's limits accept
    once applied (a trace's speedup; a synthetic workload's rate, and the request count rate x
    duration, which only drawing the workload checks: llmsim/workload/limits.py)."""
    from llmsim.build import build_workload

    if target_rps is None:
        return
    if not (math.isfinite(target_rps) and target_rps > 0):
        raise UserError(f"{flag} {target_rps:g}: expected a positive, finite arrival rate in req/s")
    try:
        build_workload(base.scenario(rate_overrides(base, target_rps)))
    except UserError as exc:
        raise UserError(f"{flag} {target_rps:g}: {reason(exc, base.origin)}") from None
