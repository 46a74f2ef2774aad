"""``llmsim calibrate``: fit a hardware profile's efficiencies and overheads to measured kernels."""

from __future__ import annotations

import argparse
from pathlib import Path

from llmsim.errors import UserError
from llmsim.progress import bar, printer
from llmsim.tables import table

# where calibrated profiles go without --out: relative to the current folder (in a checkout, the
# repository's own hardware_profiles/calibrated/, which docs/validation.md's commands refit)
CALIBRATED_DIR = Path("hardware_profiles") / "calibrated"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit a hardware profile to measured operator timings")
    p.add_argument("--hardware", help="profile to start from (name or YAML path)")
    p.add_argument(
        "--profile",
        nargs="+",
        metavar="FILE",
        help="measured timings: Vidur mlp.csv/attention.csv/all_reduce.csv or generic CSV (or the same gzipped, .gz)",
    )
    p.add_argument(
        "--out",
        help="calibrated profile YAML (default hardware_profiles/calibrated/<name>.yaml under the current folder)",
    )
    p.add_argument("--local-cpu", action="store_true", help="measure this machine's CPU and write a profile")
    p.add_argument("--quick", action="store_true", help="with --local-cpu: fewer, smaller measurements")
    p.add_argument(
        "--serving", nargs="+", metavar="RUN", help="fit the engine's host terms to measured serving runs (folders)"
    )
    p.add_argument("--model", help="with --serving: the served model (catalog name or config.json)")
    p.add_argument("--fit-hardware", action="store_true", help="with --serving: refine the profile's efficiencies too")
    p.add_argument(
        "--fit-batch-change",
        action="store_true",
        help="with --serving: fit the engine's batch_change term too (a step after its batch changed)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar; print nothing but errors")
    p.set_defaults(func=cmd_calibrate)


# The three ways to calibrate and the flags each takes (besides --out and --quiet): a flag of
# another mode would be ignored silently, so it is refused by name.
MODES = {
    "--local-cpu": ("--quick",),
    "--serving": ("--hardware", "--model", "--fit-hardware", "--fit-batch-change"),
    "--profile": ("--hardware",),
}
_FLAGS = (
    "--local-cpu",
    "--serving",
    "--profile",
    "--hardware",
    "--model",
    "--quick",
    "--fit-hardware",
    "--fit-batch-change",
)


def check_flags(args: argparse.Namespace) -> str:
    """The mode the flags ask for (a key of ``MODES``); a flag of another mode is an error."""
    mode = "--local-cpu" if args.local_cpu else "--serving" if args.serving else "--profile"
    given = [f for f in _FLAGS if getattr(args, f[2:].replace("-", "_"))]
    for flag in given:
        if flag != mode and flag not in MODES[mode]:
            takes = ", ".join(MODES[mode]) or "no other flag"
            raise UserError(f"calibrate {mode}: {flag} does not apply (it takes {takes}, --out and --quiet)")
    return mode


def check_profile_out(out: Path) -> Path:
    """``--out`` for a calibrated profile, checked before any measuring or fitting (``--local-cpu``
    measures for minutes): a YAML path, since ``--hardware`` reads back only ``.yaml``/``.yml``,
    that is not a folder and whose nearest existing parent is one."""
    if out.is_dir():
        raise UserError(f"--out {out}: is a directory, expected a profile YAML file path")
    if out.suffix not in (".yaml", ".yml"):
        raise UserError(f"--out {out}: expected a profile path ending in .yaml or .yml (what --hardware reads back)")
    check_out_parent(out)
    return out


def check_out_parent(out: Path, flag: str = "--out") -> None:
    """``out``'s folder can be made: its nearest existing parent is a folder, not a file (else
    ``mkdir`` fails late, with a traceback). Named as given: a relative ``out``'s parent is
    relative too (``somefile``, not the absolute path the user never typed)."""
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise UserError(f"{flag} {out}: {parent} is a file, not a directory")


def cmd_calibrate(args: argparse.Namespace) -> int:
    mode = check_flags(args)
    if mode == "--local-cpu":
        return _local_cpu(args)
    if mode == "--serving":
        return _serving(args)
    if not args.hardware or not args.profile:
        raise UserError("calibrate needs --hardware and --profile FILE... (or --local-cpu)")
    from llmsim.calibration.fit import calibrate
    from llmsim.calibration.readers import check_dtypes
    from llmsim.commands.validate import read_profiles
    from llmsim.hardware import dump_profile, load_profile

    hw = load_profile(args.hardware)
    if args.out is None and Path(hw.name).name != hw.name:  # the default path is built from the profile's name
        raise UserError(f"{args.hardware}: name {hw.name!r} is not a file name; give --out for the calibrated profile")
    # default: under the current folder, as --local-cpu's (never inside an installed llmsim)
    out = check_profile_out(Path(args.out) if args.out is not None else CALIBRATED_DIR / f"{hw.name}.yaml")
    with bar(len(args.profile) + 1, "calibrate", not args.quiet, unit="step") as b:
        rows = read_profiles(args.profile, b, "calibrate")
        check_dtypes(rows, hw)
        b.set_description("calibrate: fitting")
        new, res = calibrate(hw, rows, args.profile)
        b.update()
    dump_profile(new, out)
    say = printer(args.quiet)
    attn, elem = sum(res.attention_rows.values()), sum(res.elementwise_rows.values())
    kinds = f"{res.gemm_rows} GEMM rows"
    kinds += f", {attn} attention rows" if attn else ""
    kinds += f", {elem} elementwise rows" if elem else ""
    say(f"fitted {kinds} and {res.comm_rows} all-reduce rows from {len(args.profile)} file(s)")
    per_op = {**res.attention_mape, **res.elementwise_mape}
    w = max(24, *(len(k) for k in res.params), *(len(op) + 9 for op in per_op))  # 9: " fit MAPE"
    for key, value in res.params.items():
        say(f"  {key:{w}s} {value:.4g}")
    if res.gemm_rows:
        say(f"  {'GEMM fit MAPE':{w}s} {res.gemm_mape:.1%}")
    rows = {**res.attention_rows, **res.elementwise_rows}
    for op, mape in per_op.items():
        say(f"  {op + ' fit MAPE':{w}s} {mape:.1%} ({rows[op]} rows)")
    if res.comm_rows:
        say(f"  {'all-reduce fit MAPE':{w}s} {res.comm_mape:.1%}")
    say(f"wrote {out}")
    return 0


def _local_cpu(args: argparse.Namespace) -> int:
    from llmsim.calibration.localcpu import measure_and_write

    out = check_profile_out(Path(args.out) if args.out is not None else CALIBRATED_DIR / "local-cpu.yaml")
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
    from llmsim.commands.models import model_arg
    from llmsim.hardware import load_profile

    hw = load_profile(args.hardware)
    with bar(len(args.serving) + 1, "calibrate", not args.quiet, unit="step") as b:
        runs = []
        for f in args.serving:
            b.set_description(f"calibrate: reading {Path(f).name}")
            runs.append(read_run(Path(f)))
            b.update()
        model = model_arg(args.model).with_(weight_dtype=run_dtype(runs[0]))
        hw_data = hw.model_dump(mode="json", exclude_none=True)
        b.set_description("calibrate: fitting")
        engine, fitted_hw, report = fit_serving(runs, model, hw_data, args.fit_hardware, args.fit_batch_change)
        b.update()
    return runs, engine, fitted_hw, report


FIT_FILES = ("engine.yaml", "hardware.yaml", "report.json")  # what calibrate --serving writes in --out


def _serving(args: argparse.Namespace) -> int:
    """Engine profile (and with --fit-hardware a refined hardware profile) from serving runs."""
    import json

    import yaml

    from llmsim.errors import atomic_folder

    if not args.hardware or not args.model:
        raise UserError("calibrate --serving needs --hardware (the device's profile) and --model (the served model)")
    out = Path(args.out) if args.out else Path("results/engine-fit")
    if (out.exists() and not out.is_dir()) or (not out.exists() and out.suffix in (".yaml", ".yml", ".json")):
        what = "is a file" if out.exists() else "names a file"
        raise UserError(f"--out {out}: {what}; with --serving --out is a folder (engine.yaml, report.json go in it)")
    check_out_parent(out)
    runs, engine, fitted_hw, report = _fit_runs(args)
    resolved = runs[0].meta.get("resolved") or {}
    sched = resolved.get("scheduler") or {}
    sizes = resolved.get("cudagraph_capture_sizes") or []
    engine["defaults"] = "vllm"  # a vLLM deployment's unset keys get vLLM's defaults
    engine["async_scheduling"] = sched.get("async_scheduling", False)  # (a bool: read_run checked it)
    engine["cuda_graphs"] = bool(sizes)
    if sizes:
        engine["cuda_graph_sizes"] = sorted(int(x) for x in sizes)
    engine["fit"] = report
    texts = {"engine.yaml": yaml.safe_dump(engine, sort_keys=False)}
    if fitted_hw is not None:
        texts["hardware.yaml"] = yaml.safe_dump(fitted_hw, sort_keys=False)
    texts["report.json"] = json.dumps(report, indent=1) + "\n"
    written = [out / name for name in texts if name != "report.json"]
    # an earlier --fit-hardware fit's: twin would read it beside this engine.yaml (the folder is replaced whole)
    stale = out / "hardware.yaml" if fitted_hw is None and (out / "hardware.yaml").is_file() else None
    # the folder whole or untouched (a full disk, a read-only folder, an interrupt); one holding
    # other files (a run's results) is refused, not mixed into
    with atomic_folder(out, owned=lambda entry: entry.is_file() and entry.name in FIT_FILES) as tmp:
        for name, text in texts.items():
            (tmp / name).write_text(text)
    say = printer(args.quiet)
    if stale is not None:
        say(f"removed {stale}: an earlier fit's hardware profile (this fit keeps --hardware's kernel model)")
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
