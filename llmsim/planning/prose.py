"""The plan in plain language, built only from the plan's own numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.results import IN_SYSTEM_MIN_REQUESTS

if TYPE_CHECKING:
    import pandas as pd

    from llmsim.planning.result import Plan


def recommend(plan: Plan) -> str:
    """What to deploy, its runner-up, headroom and robustness; or, with no winner, why every candidate failed."""
    if plan.winners.empty:
        return _no_winner(plan)
    w = plan.winners.iloc[0]
    meets = (
        f"it meets the SLOs for {w['slo_attainment']:.1%} of requests"
        if plan.latency_slos
        else "with no latency SLO set (slo.ttft_s, tpot_s, tbt_s, e2e_s), it is the cheapest that keeps up, not overloaded,"
    )
    lines = [
        f"Deploy {w['config']} ({_devices(int(w['devices']))}): {meets} at {_rps(plan.target_rps)} req/s, for ${w['usd_per_hour']:.2f}/hour, "
        f"${w['usd_per_mtok']:.3f} per million tokens (prompt + output) and {w['j_per_token']:.3f} J per token at TDP."
    ]
    if len(plan.winners) > 1:
        r = plan.winners.iloc[1]
        lines.append(f"Runner-up: {r['config']} at ${r['usd_per_hour']:.2f}/hour.")
    if plan.slo_capacity is not None:
        lines += _headroom(plan)
    if not plan.sensitivity.empty:
        lines.append(_robustness(plan.sensitivity[plan.sensitivity["config"] == w["config"]], plan.latency_slos))
    n_bad = len(plan.infeasible)
    if n_bad:
        kinds = plan.infeasible["reason"].str.split(":").str[0].value_counts()
        lines.append(
            f"{n_bad} candidate(s) never met the SLOs: " + ", ".join(f"{n} {k}" for k, n in kinds.items()) + "."
        )
    return " ".join(lines)


def _no_winner(plan: Plan) -> str:
    reasons = plan.infeasible["reason"].str.split(":").str[0].value_counts()
    if not plan.latency_slos:
        head = f"No candidate keeps up with {_rps(plan.target_rps)} req/s (no latency SLO is set: each did not keep up or could not run)"
    else:
        head = f"No candidate meets the SLOs at {_rps(plan.target_rps)} req/s (target attainment {plan.target_attainment:.0%})"
    why = ", ".join(f"{n} failed on {k}" for k, n in reasons.items())
    advice = " ".join(dict.fromkeys(_ADVICE.get(k, _ADVICE["overload"]) for k in reasons.index))
    return f"{head}. Why: {why}. {advice}"


# what to change, by the kind of failure (a row's reason's first word, planning/rows.py)
_ADVICE = {
    "memory": "The model does not fit: a larger tp, devices with more memory or a quantised checkpoint.",
    "invalid": "Some candidates cannot run as set (each row's reason says why).",
    "unserved": "No request finished: where they were turned away (rejected_by), raise policy.max_model_len or "
    "shorten the prompts; where the horizon cut them, lengthen workload.horizon_s.",
    "overload": "Widen the search (more replicas, larger tp, other hardware) or relax the SLOs.",
    "unsettled": "Widen the search (more replicas, other hardware), or lengthen the workload so a run can settle.",
    "latency": "Widen the search (more replicas, larger tp, other hardware) or relax the SLOs.",
}


def _headroom(plan: Plan) -> list[str]:
    """The winner's SLO capacity over the target (never a rate it did not keep up with: goodput_search)."""
    assert plan.slo_capacity is not None
    g = plan.slo_capacity
    head = g.rate_rps / plan.target_rps - 1 if plan.target_rps else 0.0
    what = (
        "SLO capacity (the highest arrival rate at which it still meets the SLOs and keeps up)"
        if plan.latency_slos
        else "capacity (the highest arrival rate it keeps up with)"
    )
    at_least = "at least " if g.fail_rps is None else ""  # (every rate up to the search's last doubling held)
    lines = [
        f"Its {what} is {at_least}{_rps(g.rate_rps)} req/s ({head:+.0%} headroom over the target; verdict there: "
        f"{g.verdict})."
    ]
    requests = next((e.get("requests") or 0 for e in g.evaluations if e["rate_rps"] == g.rate_rps), 0)
    if 0 < requests < IN_SYSTEM_MIN_REQUESTS:
        lines.append(
            f"(Each rate ran {requests} requests: too few to show a steady state, so the capacity may be far "
            f"above what a deployment sustains; give the workload {IN_SYSTEM_MIN_REQUESTS} or more.)"
        )
    return lines


def _robustness(winner_rows: pd.DataFrame, latency_slos: bool = True) -> str:
    """Whether the winner still meets the SLOs (without any: still keeps up) with every efficiency
    lower (its sensitivity rows)."""
    low = winner_rows[winner_rows["efficiency_factor"] < 1]
    holds = bool(low["meets_slos"].all())
    lower = 1.0 - float(low["efficiency_factor"].iloc[0])  # plan.sensitivity: 0.15 unless set
    verdict = str(low["verdict"].iloc[0])
    if not latency_slos:
        return f"With every efficiency {lower:.0%} lower it " + (
            "still keeps up; the choice holds." if holds else f"does NOT keep up ({verdict}); budget one more replica."
        )
    # (a met attainment that does not hold is a run that did not keep up: say so, not "misses at 100 %")
    why = f"attainment {low['slo_attainment'].iloc[0]:.1%}" + ("" if holds else f", verdict {verdict}")
    return (
        f"With every efficiency {lower:.0%} lower it "
        + ("still meets the SLOs" if holds else "MISSES the SLOs")
        + f" ({why})"
        + ("; the choice holds." if holds else "; budget one more replica or re-check the efficiencies.")
    )


def _rps(rate: float) -> str:
    """A rate for the text: two decimals, or three significant figures below 1 req/s (0.00 says nothing)."""
    return f"{rate:.2f}" if rate >= 1 else f"{rate:.3g}"


def _devices(n: int) -> str:
    return f"{n} device" if n == 1 else f"{n} devices"
