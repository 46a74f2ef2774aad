"""``llmsim calibrate``: fit a hardware profile's efficiencies and overheads to measured kernels."""

from __future__ import annotations

import argparse
from pathlib import Path

from llmsim.errors import UserError
from llmsim.progress import bar, printer
from llmsim.tables import table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit a hardware profile to measured operator timings")
    p.add_argument("--hardware", help="profile to start from (name or YAML path)")
    p.add_argument(
        "--profile", nargs="+", metavar="FILE", help="measured timings: Vidur mlp.csv/all_reduce.csv or generic CSV"
    )
    p.add_argument("--out", help="calibrated profile YAML (default hardware_profiles/calibrated/<name>.yaml)")
    p.add_argument("--local-cpu", action="store_true", help="measure this machine's CPU and write a profile")
    p.add_argument("--quick", action="store_true", help="with --local-cpu: fewer, smaller measurements")
    p.add_argument(
        "--serving", nargs="+", metavar="RUN", help="fit the engine's host terms to measured serving runs (folders)"
    )
    p.add_argument("--model", help="with --serving: the served model (catalog name or config.json)")
    p.add_argument("--fit-hardware", action="store_true", help="with --serving: refine the profile's efficiencies too")
    p.add_argument("--quiet", action="store_true", help="no progress bar; print nothing but errors")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.local_cpu:
        return _local_cpu(args)
    if args.serving:
        return _serving(args)
    if not args.hardware or not args.profile:
        raise UserError("calibrate needs --hardware and --profile FILE... (or --local-cpu)")
    from llmsim.calibration.fit import calibrate
    from llmsim.commands.validate import read_profiles
    from llmsim.hardware import PROFILES_DIR, dump_profile, load_profile

    hw = load_profile(args.hardware)
    with bar(len(args.profile) + 1, "calibrate", not args.quiet, unit="step") as b:
        rows = read_profiles(args.profile, b, "calibrate")
        b.set_description("calibrate: fitting")
        new, res = calibrate(hw, rows, args.profile)
        b.update()
    out = Path(args.out) if args.out else PROFILES_DIR / "calibrated" / f"{hw.name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    dump_profile(new, out)
    say = printer(args.quiet)
    say(f"fitted {res.gemm_rows} GEMM rows and {res.comm_rows} all-reduce rows from {len(args.profile)} file(s)")
    for key, value in res.params.items():
        say(f"  {key:24s} {value:.4g}")
    if res.gemm_rows:
        say(f"  GEMM fit MAPE           {res.gemm_mape:.1%}")
    if res.comm_rows:
        say(f"  all-reduce fit MAPE     {res.comm_mape:.1%}")
    say(f"wrote {out}")
    return 0


def _local_cpu(args: argparse.Namespace) -> int:
    from llmsim.calibration.localcpu import measure_and_write

    out = Path(args.out) if args.out else Path("hardware_profiles/calibrated/local-cpu.yaml")
    out.parent.mkdir(parents=True, exist_ok=True)
    from llmsim.calibration.localcpu import STAGES
    from llmsim.commands.hardware import detail_rows

    with bar(len(STAGES), "calibrate --local-cpu", not args.quiet, unit="stage") as b:

        def stage(name: str) -> None:
            b.set_description(f"calibrate --local-cpu: {name} done")
            b.update()

        written, profile = measure_and_write(out, args.quick, stage)
    say = printer(args.quiet)
    say(f"{profile.name}: the fitted figures, each with how it was measured")
    say(table(detail_rows(profile), ["figure", "value", "source"], "lrl"))
    say(f"wrote {written}")
    return 0


def _fit_runs(args: argparse.Namespace) -> tuple[list, dict, dict | None, dict]:
    """Read the serving runs and fit them: one bar step per run read, one for the fit."""
    from llmsim.calibration.serving import fit_serving, read_run, run_dtype
    from llmsim.hardware import load_profile
    from llmsim.models import get_model

    hw = load_profile(args.hardware)
    with bar(len(args.serving) + 1, "calibrate", not args.quiet, unit="step") as b:
        runs = []
        for f in args.serving:
            b.set_description(f"calibrate: reading {Path(f).name}")
            runs.append(read_run(Path(f)))
            b.update()
        model = get_model(args.model).with_(weight_dtype=run_dtype(runs[0]))
        hw_data = hw.model_dump(mode="json", exclude_none=True)
        b.set_description("calibrate: fitting")
        engine, fitted_hw, report = fit_serving(runs, model, hw_data, args.fit_hardware)
        b.update()
    return runs, engine, fitted_hw, report


def _serving(args: argparse.Namespace) -> int:
    """Engine profile (and with --fit-hardware a refined hardware profile) from serving runs."""
    import json

    import yaml

    if not args.hardware or not args.model:
        raise UserError("calibrate --serving needs --hardware (the device's profile) and --model (the served model)")
    runs, engine, fitted_hw, report = _fit_runs(args)
    out = Path(args.out) if args.out else Path("results/engine-fit")
    out.mkdir(parents=True, exist_ok=True)
    resolved = runs[0].meta.get("resolved") or {}
    sched = resolved.get("scheduler") or {}
    sizes = resolved.get("cudagraph_capture_sizes") or []
    engine["defaults"] = "vllm"  # a vLLM deployment's unset keys get vLLM's defaults
    engine["async_scheduling"] = bool(sched.get("async_scheduling", False))
    engine["cuda_graphs"] = bool(sizes)
    if sizes:
        engine["cuda_graph_sizes"] = sorted(int(x) for x in sizes)
    engine["fit"] = report
    (out / "engine.yaml").write_text(yaml.safe_dump(engine, sort_keys=False))
    written = [out / "engine.yaml"]
    if fitted_hw is not None:
        (out / "hardware.yaml").write_text(yaml.safe_dump(fitted_hw, sort_keys=False))
        written.append(out / "hardware.yaml")
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    say = printer(args.quiet)
    say(f"fitted {report['steps']} steps of {len(runs)} run(s): {', '.join(report['runs'])}")
    for k in ("schedule", "prepare", "output"):
        t = engine[k]
        say(
            f"  {k:9s} {t['base_s'] * 1e3:7.3f} ms + {t['per_seq_s'] * 1e6:7.2f} us/seq + {t['per_token_s'] * 1e9:7.1f} ns/token"
        )
    for k, v in report["mape"].items():
        say(f"  {k:9s} fit MAPE {v:.1%}")
    say("wrote " + ", ".join(map(str, written)))
    return 0
