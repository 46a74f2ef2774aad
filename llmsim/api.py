"""The Python entry point: ``llmsim.run(scenario) -> Results``."""

from __future__ import annotations

from pathlib import Path

from llmsim.build import build_model, build_pools, build_workload
from llmsim.results import Results, requests_frame, summarize
from llmsim.scenario import Scenario, load_scenario
from llmsim.sim import simulate


def run(scenario: Scenario | str | Path, overrides: dict[str, object] | None = None) -> Results:
    """Simulate a scenario (a ``Scenario`` or a path to its YAML) and return its frames and summary."""
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario, overrides)
    model = build_model(sc)
    pools = build_pools(sc, model)
    workload = build_workload(sc)
    last = float(workload.arrival_s[-1])
    horizon = sc.workload.horizon_s or 2.0 * last + 600.0
    every = {"all": 1, "sample": sc.output.sample_every, "none": 0}[sc.output.steps]
    out = simulate(
        pools,
        workload,
        sc.policy.kind,
        sc.cluster.router,
        sc.kv_cache.block_tokens,
        sc.kv_cache.watermark,
        horizon,
        every,
        sc.policy.max_queue,
    )
    req = requests_frame(out.requests)
    slo = sc.slo.model_dump(exclude={"classes"})
    slo["attainment_target"] = slo.pop("attainment")
    classes = {k: v.model_dump(exclude={"classes", "attainment"}) for k, v in sc.slo.classes.items()}
    meta = {
        "scenario": sc.name,
        "seed": sc.seed,
        "model": model.name,
        "policy": sc.policy.kind,
        "pools": [
            {
                "name": p.name,
                "hardware": p.hw.name,
                "replicas": p.replicas,
                "tp": p.tp,
                "pp": p.pp,
                "kv_blocks_per_replica": p.kv_blocks,
                "memory_per_device": p.memory,
                "price_per_hour_usd": p.hw.price_per_hour_usd.value * p.replicas * p.tp * p.pp,
            }
            for p in pools
        ],
        "horizon_s": horizon,
        "workload": workload.stats(),
    }
    summary = summarize(req, out.steps, out.queue, slo, classes, pools[0].kv_blocks, meta)
    summary["latency_s"]["tbt_token"] = {
        "p50": out.gaps.percentile(50),
        "p90": out.gaps.percentile(90),
        "p99": out.gaps.percentile(99),
    }
    busy = sum(r.busy_s for r in out.replicas)
    summary["utilization"] = {"replica_busy_fraction": busy / (len(out.replicas) * max(out.horizon_s, 1e-12))}
    if summary["throughput"]["makespan_s"] > 0:
        span = summary["throughput"]["makespan_s"]
        summary["utilization"]["replica_busy_fraction"] = min(1.0, busy / (len(out.replicas) * span))
        cost_per_s = sum(p["price_per_hour_usd"] for p in meta["pools"]) / 3600.0
        toks = summary["tokens"]["output"] + summary["tokens"]["prompt"]
        summary["cost"] = {
            "cluster_usd_per_hour": cost_per_s * 3600.0,
            "usd_per_million_tokens": cost_per_s * span / toks * 1e6 if toks else None,
            "usd_per_million_output_tokens": (
                cost_per_s * span / summary["tokens"]["output"] * 1e6 if summary["tokens"]["output"] else None
            ),
        }
    return Results(requests=req, steps=out.steps, summary=summary, queue=out.queue)
