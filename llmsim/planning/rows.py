"""One plan-table row per evaluated point: what it costs, what it draws, and whether it meets the SLOs and why not.

Metrics carry the sweep's vLLM-bench names (llmsim/sweep.py ``METRICS``): latencies in ms
(``p99_ttft_ms``), rates in req/s (``request_throughput``, ``request_goodput``: the requests per
second that met every SLO). The scenario's SLOs stay in seconds (``slo.ttft_s``); ``slo_ms``
turns them into the metrics' unit before anything compares or prints them side by side."""

from __future__ import annotations

import math

from llmsim.planning.space import Point
from llmsim.results import kept_up, slos_held

PLAN_COLUMNS = [
    "config",
    "hardware",
    "tp",
    "replicas",
    "policy",
    "engine",  # plan.engines' (empty: the scenario's own engine)
    "chunk_tokens",
    "pd_ratio",
    "devices",
    "usd_per_hour",
    "usd_per_mtok",
    "usd_per_m_output_tok",
    "power_w",
    "j_per_token",
    "slo_attainment",
    "request_throughput",
    "request_goodput",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "p99_itl_ms",
    "p99_tbt_max_ms",
    "p99_e2el_ms",
    "verdict",
    "keeps_up",
    "feasible",
    "reason",
]


# Each SLO key of a scenario (seconds) and the metric it constrains (llmsim/results.py
# ``slo_mask``): tbt_s bounds each request's worst token gap, which is TBT max, not ITL.
SLO_METRICS = {"ttft_s": "ttft", "tpot_s": "tpot", "tbt_s": "tbt_max", "e2e_s": "e2el"}


def slo_ms(slo: dict) -> dict[str, float]:
    """The scenario's latency SLOs (seconds) in ms, keyed by the metric they bound (``ttft``, ``tbt_max``, ...)."""
    return {m: float(slo[k]) * 1e3 for k, m in SLO_METRICS.items() if slo.get(k) is not None}


def plan_row(point: Point, res: dict, power_w: float, target: float, slo: dict | None = None) -> dict:
    """The row of ``point`` from its sweep result ``res``; ``power_w`` is one device's TDP, ``slo`` the
    scenario's SLOs (seconds), named in a failing row's reason."""
    c = point.candidate
    devices = point.devices()
    tok_s = res.get("total_token_throughput") or 0.0
    row = {
        "config": point.label,
        "hardware": c.hardware,
        "tp": c.tp,
        "replicas": point.replicas,
        "policy": c.policy,
        "engine": c.engine,
        "chunk_tokens": c.chunk_tokens,
        "pd_ratio": c.pd_ratio,
        "devices": devices,
        "power_w": power_w * devices,
        "j_per_token": power_w * devices / tok_s if tok_s else None,
        **{k: res.get(k) for k in PLAN_COLUMNS if k in res},
    }
    row.update(_verdict(res, target, slo or {}))
    return row


def _verdict(res: dict, target: float, slo: dict) -> dict[str, object]:
    """``feasible`` and ``reason``; the reason's first word (memory, invalid, unserved, overload,
    unsettled, latency) is its kind."""
    err = res.get("error")
    if err:
        kind = "memory" if "does not fit" in err else "invalid"
        return {"feasible": False, "reason": f"{kind}: {err}"}
    if slos_held(res.get("slo_met"), res.get("verdict"), res.get("keeps_up")):
        return {"feasible": True, "reason": "meets SLOs"}
    attained = f"attainment {res['slo_attainment']:.1%}" if res.get("slo_attainment") is not None else "no attainment"
    met = f"{attained} only because the workload ends" if res.get("slo_met") else f"{attained} < {target:.0%}"
    if res.get("verdict") == "unserved":
        rejected, total = res.get("rejected") or 0, res.get("requests") or 0
        why = (
            f"all {total:,} requests were rejected (too long for the model or the KV cache: summary rejected_by)"
            if total and rejected == total
            else "none finished before the horizon"
        )
        return {"feasible": False, "reason": f"unserved: no request finished: {why}"}
    if res.get("verdict") == "overloaded":
        return {
            "feasible": False,
            "reason": f"overload: the queue grows by {res['queue_growth_share']:.0%} of the offered load; {met}",
        }
    keeps_up = res.get("keeps_up")
    if not kept_up(keeps_up) or (keeps_up is None and res.get("verdict") == "backlogged"):
        return {
            "feasible": False,
            "reason": f"unsettled: backlogged, not shown to keep up with the load (the run's saturation.explanation "
            f"says why); {met}",
        }
    preempted = res.get("preemptions") or 0
    kv = f"; {preempted:,} preemptions (the KV cache filled)" if preempted else ""
    return {
        "feasible": False,
        "reason": f"latency: keeps up with the load but too slow: {attained} < {target:.0%} "
        f"({_against_slos(res, slo)}){kv}",
    }


_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "tbt_max": "TBT max", "e2el": "E2EL"}


def _against_slos(res: dict, slo: dict) -> str:
    """p99 of each metric that has an SLO, beside it (both in ms): says which target is missed."""
    bounds: dict[str, float | None] = {**slo_ms(slo)} or {"ttft": None, "tbt_max": None}
    return ", ".join(
        f"{_LABELS[m]} p99 {_ms(res.get(f'p99_{m}_ms'))}" + (f" vs SLO {b:g} ms" if b is not None else "")
        for m, b in bounds.items()
    )


def worth_more_replicas(row: dict, expert_parallel: bool = False) -> bool:
    """A point that failed for want of capacity. A memory or invalid error stays whatever the replica
    count, except under expert parallelism, where the replicas split the experts (each GPU holds
    fewer, and the degree must divide them); requests every replica rejects stay rejected."""
    if row["feasible"]:
        return False
    if row["reason"].startswith("unserved: no request finished: all"):  # (each replica rejects them alike)
        return False
    return expert_parallel or not row["reason"].startswith(("memory", "invalid"))


def _ms(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.0f} ms"
