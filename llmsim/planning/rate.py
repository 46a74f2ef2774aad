"""The arrival rate as one knob, keeping the workload's shape.

A synthetic workload changes only ``workload.rate_rps``; a trace is replayed faster or slower through
``workload.trace.speedup`` (arrival gaps divided by it, lengths and order unchanged)."""

from __future__ import annotations

import math

from llmsim.errors import UserError, reason
from llmsim.planning.base import Base


def rate_knob(base: Base) -> tuple[str, float]:
    """(key to override, rate in req/s per unit of that key). Trace: speedup; synthetic: rate_rps
    (``requests_per_rate_unit``)."""
    from llmsim.build import build_workload

    sc = base.scenario()
    w = sc.workload
    if w.kind in ("poisson", "gamma") and w.ramp_up is not None:
        raise UserError(
            f"{base.origin}: workload.ramp_up: the plan searches one arrival rate (workload.rate_rps), and a ramp "
            "sets each request's own; give rate_rps in its place"
        )
    if w.max_concurrency and w.kind in ("poisson", "gamma", "trace"):
        raise UserError(
            f"{base.origin}: workload.max_concurrency: the plan searches the rate requests arrive at, and a "
            "client's cap holds them back from it (each one's latency counts from its send), so a candidate "
            "could meet the SLOs at a rate it never serves; remove the cap (a deployment's traffic is open loop)"
        )
    if w.kind in ("poisson", "gamma"):
        return "workload.rate_rps", requests_per_rate_unit(base)
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


def requests_per_rate_unit(base: Base) -> float:
    """Requests a second that one unit of ``workload.rate_rps`` offers: every turn of a conversation
    is a request (and each sub-call of a closed loop's), and a rate profile scales the rate by its
    mean over the arrivals' window (``duration_s``: with ``num_requests`` the window, and so that
    mean, moves with the rate; refused). 1 for a plain workload."""
    from llmsim.workload.generators import profile_integral

    w = base.scenario().workload
    per = 1.0 if w.conversations is None else float(w.conversations.calls)
    if w.rate_profile is not None:
        if not w.duration_s:
            raise UserError(
                f"{base.origin}: workload.rate_profile with num_requests: the requests span more or less of the "
                "profile as the plan moves the rate, so no one rate describes them; give workload.duration_s"
            )
        per *= float(profile_integral(w.rate_profile, w.duration_s)) / w.duration_s
    return per


def rate_overrides(base: Base, rate_rps: float, knob: tuple[str, float] | None = None) -> dict[str, object]:
    """The scenario overrides that make the workload arrive at ``rate_rps``."""
    key, per_unit = knob or rate_knob(base)
    return {key: rate_rps / per_unit}


def offered_rate(base: Base, knob: tuple[str, float] | None = None) -> float:
    """The scenario's own arrival rate (nominal for synthetic, measured for a trace)."""
    key, per_unit = knob or rate_knob(base)
    sc = base.scenario()
    if key == "workload.rate_rps":
        return float(sc.workload.rate_rps or 0.0) * per_unit
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
    knob = rate_knob(base)  # (the workload's own mistakes name its file, not the flag)
    try:
        build_workload(base.scenario(rate_overrides(base, target_rps, knob)))
    except UserError as exc:
        raise UserError(f"{flag} {target_rps:g}: {reason(exc, base.origin)}") from None
