"""``llmsim twin SCENARIO``: the reference engine on this CPU vs the simulator with the calibrated
``local-cpu`` profile, request by request (and ``--steps-only``: single steps across a grid)."""

from __future__ import annotations

import argparse
from pathlib import Path

from llmsim.tables import table

DEFAULT_PROFILE = Path("results/local-cpu.yaml")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("twin", help="digital twin: NumPy reference engine on this CPU vs the simulator")
    p.add_argument("scenario", type=Path, help="scenario YAML (one replica, traditional or chunked policy)")
    p.add_argument("--steps-only", action="store_true", help="only compare single steps across a grid")
    p.add_argument(
        "--profile", type=Path, default=DEFAULT_PROFILE, help=f"local-cpu profile (default {DEFAULT_PROFILE})"
    )
    p.add_argument("--recalibrate", action="store_true", help="measure the local-cpu profile again first")
    p.add_argument("--quick", action="store_true", help="shorter benchmarks and a smaller step grid")
    p.add_argument("--out", type=Path, default=None, help="output folder (default <scenario output.dir>/twin)")
    p.set_defaults(func=cmd_twin)


def cmd_twin(args: argparse.Namespace) -> int:
    from llmsim.build import build_model
    from llmsim.reference import twin
    from llmsim.reference.cpubench import measure_and_write
    from llmsim.scenario import load_scenario

    if args.recalibrate or not args.profile.exists():
        print(f"measuring this CPU -> {args.profile} ...", flush=True)
        measure_and_write(args.profile, args.quick)
    sc = load_scenario(args.scenario, {"hardware": str(args.profile.resolve())})
    out_dir = args.out or sc.path(sc.output.dir) / "twin"
    steps = twin.measure_steps(build_model(sc), args.profile, quick=args.quick)
    print(
        table(
            [[r.step, r.predicted_s * 1e3, r.measured_s * 1e3, f"{r.error:+.1%}"] for r in steps.itertuples()],
            ["step", "predicted ms", "measured ms", "error"],
        )
    )
    print(f"median |error| over {len(steps)} steps: {steps['error'].abs().median():.1%}")
    result = None
    if not args.steps_only:
        result = twin.run_twin(args.scenario, args.profile)
        rows = [
            [m.removesuffix("_s"), f"{e['median_abs']:.1%}", f"{e['p90_abs']:.1%}", f"{e['median_signed']:+.1%}"]
            for m, e in result.summary["error"].items()
        ]
        print()
        print(table(rows, ["per request", "median |err|", "p90 |err|", "median signed"]))
        s = result.summary
        print(f"makespan: measured {s['measured_makespan_s']:.2f} s, predicted {s['predicted_makespan_s']:.2f} s")
        st, pr = s["engine_step_error"], s["probe_vs_calibration"]
        print(
            f"the engine's own steps priced: median |err| {st['median_abs']:.1%}, median signed {st['median_signed']:+.1%}"
        )
        if pr["before"]:
            print(f"probe step vs calibration: {pr['before']:.2f}x before, {pr['after']:.2f}x after the run")
    for p in twin.write(out_dir, result, steps):
        print(f"wrote {p}")
    return 0
