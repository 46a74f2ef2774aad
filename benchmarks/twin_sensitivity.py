"""How much of a step-time error reaches the twin's per-request E2E error, by load.

    python benchmarks/twin_sensitivity.py                      # scenarios/twin_small.yaml
    python benchmarks/twin_sensitivity.py --rates 2,3,4,5,6 --profile results/local-cpu.yaml

The twin (``llmsim twin``) compares per-request E2E latency of the NumPy engine and the
simulator. Its error has two parts: the cost model's error on single steps, and how the
scenario's queueing turns a step-time error into an E2E error. This script measures the second
part with the simulator alone: it runs the twin's scenario on the calibrated profile and on the
same profile made uniformly ``1 + delta`` slower (every peak and bandwidth divided by it, every
latency and overhead multiplied, checked below to scale every step time exactly), and prints the
median per-request E2E change. ``amplification`` = that change / delta: near 1, E2E error is
the step error; well above 1, the load sits near the knee, where any step error (including
machine noise the drift probe cannot remove) grows on its way to E2E.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def slower_profile(profile: dict, factor: float) -> dict:
    """The profile with every rate divided by ``factor`` and every time multiplied by it."""
    p = {**profile}
    p["peak_flops"] = {k: {**v, "value": v["value"] / factor} for k, v in profile["peak_flops"].items()}
    p["memory_bandwidth_bytes_per_s"] = {
        **profile["memory_bandwidth_bytes_per_s"],
        "value": profile["memory_bandwidth_bytes_per_s"]["value"] / factor,
    }
    for link in ("host_link", "scale_up", "scale_out"):
        if profile.get(link):
            lk = profile[link]
            p[link] = {
                **lk,
                "bandwidth_bytes_per_s": {
                    **lk["bandwidth_bytes_per_s"],
                    "value": lk["bandwidth_bytes_per_s"]["value"] / factor,
                },
                "latency_s": {**lk["latency_s"], "value": lk["latency_s"]["value"] * factor},
            }
    p["overheads"] = {
        k: ({**v, "value": v["value"] * factor} if isinstance(v, dict) else v)
        for k, v in profile.get("overheads", {}).items()
    }
    return p


def check_scaling(scenario: Path, base: Path, slow: Path, factor: float) -> float:
    """Worst relative deviation of slow/base step-time ratios from ``factor`` over sample steps."""
    from llmsim.build import build_model, build_pools
    from llmsim.costmodel import batch_shape
    from llmsim.scenario import load_scenario

    worst = 0.0
    shapes = [batch_shape([(n, 0)], []) for n in (16, 256, 2048)]
    shapes += [batch_shape([], [c] * b) for b in (1, 8, 64) for c in (128, 1024, 4096)]
    shapes += [batch_shape([(200, 100)], [300] * 12)]
    costs = []
    for prof in (base, slow):
        sc = load_scenario(scenario, {"hardware": str(prof)})
        costs.append(build_pools(sc, build_model(sc))[0].cost)
    for s in shapes:
        worst = max(worst, abs(costs[1].step_time(s) / costs[0].step_time(s) / factor - 1))
    return worst


def e2e(scenario: Path, profile: Path, policy: str, rate: float):  # noqa: ANN201
    import llmsim
    from llmsim.scenario import load_scenario

    sc = load_scenario(
        scenario, {"hardware": str(profile), "policy.kind": policy, "workload.rate_rps": rate, "output.steps": "none"}
    )
    res = llmsim.run(sc)
    return res.requests.set_index("id")["e2e_s"], res.summary


def main(argv: list[str] | None = None) -> int:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "twin_small.yaml")
    ap.add_argument("--profile", type=Path, default=Path("results/local-cpu.yaml"), help="calibrated local-cpu profile")
    ap.add_argument("--rates", default="2,3,4,5,6", help="arrival rates (req/s) to try")
    ap.add_argument("--delta", type=float, default=0.05, help="uniform step-time change")
    args = ap.parse_args(argv)
    if not args.profile.exists():
        print(f"{args.profile}: no profile; run `llmsim twin {args.scenario}` (it calibrates) first", file=sys.stderr)
        return 2
    base = args.profile.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        slow = Path(tmp) / f"slower-{base.stem}.yaml"
        slow.write_text(yaml.safe_dump(slower_profile(yaml.safe_load(base.read_text()), 1 + args.delta)))
        worst = check_scaling(args.scenario, base, slow, 1 + args.delta)
        print(f"step-time scaling check: worst deviation {worst:.1e}")
        print(f"{'policy':<12}{'rate':>6}{'E2E p50 s':>11}{'busy':>7}{'E2E change':>12}{'amplification':>15}")
        for policy in ("chunked", "traditional"):
            for rate in [float(r) for r in args.rates.split(",")]:
                b, summary = e2e(args.scenario, base, policy, rate)
                s, _ = e2e(args.scenario, slow, policy, rate)
                change = float(np.median(np.abs((s - b) / b)))
                busy = summary["utilization"]["replica_busy_fraction"]
                print(
                    f"{policy:<12}{rate:>6.1f}{float(b.median()):>11.3f}{busy:>7.2f}{change:>11.1%}"
                    f"{change / args.delta:>15.2f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
