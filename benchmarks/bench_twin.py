"""Digital-twin benchmark: calibrate this CPU, then compare the simulator with the NumPy
reference engine on single steps (grid) and on scenarios/twin_small.yaml under the chunked and
traditional policies. Prints markdown tables (pasted into docs/reference.md) and saves the plot.

    .venv/bin/python benchmarks/bench_twin.py [--quick] [--profile results/local-cpu.yaml]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import yaml

from llmsim.build import build_model
from llmsim.hardware import load_profile
from llmsim.reference import twin
from llmsim.reference.cpubench import measure_and_write
from llmsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def md_table(rows: list[list[object]], headers: list[str]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", type=Path, default=ROOT / "results/local-cpu.yaml")
    ap.add_argument("--keep-profile", action="store_true", help="reuse an existing profile")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench_twin")
    ap.add_argument("--repeats", type=int, default=3, help="twin runs per policy (this machine is shared: runs vary)")
    args = ap.parse_args()
    if not (args.keep_profile and args.profile.exists()):
        measure_and_write(args.profile, args.quick)
    prof = load_profile(args.profile)
    eff, ovh = prof.efficiency, prof.overheads
    print(f"## profile {args.profile.name}\n")
    figs = {"peak fp32 FLOP/s": prof.peak("fp32"), "bandwidth B/s": prof.bandwidth}
    for k in ("gemm_half_m", "memory_fraction", "gemv_memory_fraction", "attention_fraction"):
        figs[k] = getattr(eff, k).value if getattr(eff, k) else None
    for k in ("decode_attention_fraction", "elementwise_memory_fraction"):
        figs[k] = getattr(eff, k).value if getattr(eff, k) else None
    figs["kernel_fixed_s"] = ovh.kernel_fixed_s.value if ovh.kernel_fixed_s else None
    figs["step_overhead_s"] = ovh.step_overhead_s.value
    print(md_table([[k, f"{v:.4g}"] for k, v in figs.items() if v is not None], ["figure", "value"]) + "\n")
    scenario = ROOT / "scenarios/twin_small.yaml"
    sc = load_scenario(scenario, {"hardware": str(args.profile.resolve())})
    steps = twin.measure_steps(build_model(sc), args.profile, quick=args.quick)
    print("## single steps\n")
    print(
        md_table(
            [
                [r.step, f"{r.predicted_s * 1e3:.1f}", f"{r.measured_s * 1e3:.1f}", f"{r.error:+.1%}"]
                for r in steps.itertuples()
            ],
            ["step", "predicted ms", "measured ms", "error"],
        )
    )
    print(f"\nmedian |error| {steps['error'].abs().median():.1%} over {len(steps)} steps\n")
    # the policies' runs alternate, so a slow spell of this (virtual) machine hits both alike
    paths = {}
    tmp = tempfile.TemporaryDirectory()
    for policy in ("chunked", "traditional"):
        data = yaml.safe_load(scenario.read_text())
        data["policy"]["kind"] = policy
        data["model"]["hf_config"] = str((scenario.parent / data["model"]["hf_config"]).resolve())
        paths[policy] = Path(tmp.name) / f"twin_{policy}.yaml"
        paths[policy].write_text(yaml.safe_dump(data))
    runs: dict[str, list] = {p: [] for p in paths}
    for _ in range(args.repeats):
        for policy, path in paths.items():
            runs[policy].append(twin.run_twin(path, args.profile))
    tmp.cleanup()
    for policy, done in runs.items():
        report(policy, done, steps, args.out / policy)


def report(policy: str, runs: list, steps: object, out: Path) -> None:
    """Print the run with the median E2E error (written and plotted) and one line per run."""
    listed = list(runs)
    runs = sorted(runs, key=lambda r: r.summary["error"]["e2e_s"]["median_abs"])
    result = runs[len(runs) // 2]
    twin.write(out, result, steps)
    s = result.summary
    print(f"## scenario twin_small, {policy}: {s['requests']} requests, {s['engine_steps']} engine steps\n")
    rows = [
        [m.removesuffix("_s"), f"{e['median_abs']:.1%}", f"{e['p90_abs']:.1%}", f"{e['median_signed']:+.1%}"]
        for m, e in s["error"].items()
    ]
    print(md_table(rows, ["metric", "median abs error", "p90 abs error", "median signed error"]))
    print(f"\nmakespan measured {s['measured_makespan_s']:.2f} s, predicted {s['predicted_makespan_s']:.2f} s\n")
    rows = []
    for i, r in enumerate(listed, 1):
        e, st, pr = r.summary["error"]["e2e_s"], r.summary["engine_step_error"], r.summary["probe_vs_calibration"]
        probe = f"{pr['before']:.2f} / {pr['after']:.2f}" if pr["before"] else "-"
        rows.append([i, f"{e['median_abs']:.1%}", f"{e['median_signed']:+.1%}", f"{st['median_signed']:+.1%}", probe])
    print(
        md_table(
            rows,
            ["run", "median abs E2E error", "median signed E2E error", "engine steps: median signed", "probe / cal."],
        )
    )
    print()
    if policy == "chunked":
        shutil.copyfile(out / "twin.png", ROOT / "docs/img/twin_small.png")


if __name__ == "__main__":
    main()
