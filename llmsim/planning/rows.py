"""One plan-table row per evaluated point: what it costs, what it draws, and whether it meets the SLOs and why not."""

from __future__ import annotations

import math

from llmsim.planning.space import Point

PLAN_COLUMNS = [
    "config",
    "hardware",
    "tp",
    "replicas",
    "policy",
    "chunk_tokens",
    "pd_ratio",
    "devices",
    "usd_per_hour",
    "usd_per_mtok",
    "power_w",
    "j_per_token",
    "slo_attainment",
    "ttft_p99_s",
    "tbt_p99_s",
    "e2e_p99_s",
    "throughput_rps",
    "verdict",
    "feasible",
    "reason",
]


def plan_row(point: Point, res: dict, power_w: float, target: float) -> dict:
    """The row of ``point`` from its sweep result ``res``; ``power_w`` is one device's TDP."""
    c = point.candidate
    devices = point.devices()
    tok_s = (res.get("input_tok_s") or 0.0) + (res.get("output_tok_s") or 0.0)
    row = {
        "config": point.label,
        "hardware": c.hardware,
        "tp": c.tp,
        "replicas": point.replicas,
        "policy": c.policy,
        "chunk_tokens": c.chunk_tokens,
        "pd_ratio": c.pd_ratio,
        "devices": devices,
        "power_w": power_w * devices,
        "j_per_token": power_w * devices / tok_s if tok_s else None,
        **{k: res.get(k) for k in PLAN_COLUMNS if k in res},
    }
    row.update(_verdict(res, target))
    return row


def _verdict(res: dict, target: float) -> dict[str, object]:
    """``feasible`` and ``reason``; the reason's first word (memory, invalid, overload, latency) is its kind."""
    err = res.get("error")
    if err:
        kind = "memory" if "does not fit" in err else "invalid"
        return {"feasible": False, "reason": f"{kind}: {err}"}
    if res.get("slo_met"):
        return {"feasible": True, "reason": "meets SLOs"}
    if res.get("verdict") == "overloaded":
        return {
            "feasible": False,
            "reason": f"overload: the queue grows by {res['queue_growth_share']:.0%} of the offered load; "
            f"attainment {res['slo_attainment']:.1%} < {target:.0%}",
        }
    return {
        "feasible": False,
        "reason": f"latency: not overloaded ({res['verdict']}) but too slow per step: attainment "
        f"{res['slo_attainment']:.1%} < {target:.0%} (TTFT p99 {_ms(res['ttft_p99_s'])}, "
        f"TBT p99 {_ms(res['tbt_p99_s'])})",
    }


def worth_more_replicas(row: dict) -> bool:
    """A point that failed for want of capacity; a memory or invalid error stays whatever the replica count."""
    return not row["feasible"] and not row["reason"].startswith(("memory", "invalid"))


def _ms(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1e3:.0f} ms"
