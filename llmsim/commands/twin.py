"""``llmsim twin SCENARIO``: the reference engine on this CPU vs the simulator with the calibrated
``local-cpu`` profile, request by request (and ``--steps-only``: single steps across a grid)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from llmsim.errors import UserError
from llmsim.progress import bar, printer
from llmsim.tables import table

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_PROFILE = Path("results/local-cpu.yaml")
POLICIES = ("traditional", "chunked")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("twin", help="digital twin: NumPy reference engine on this CPU vs the simulator")
    p.add_argument(
        "scenario",
        type=Path,
        nargs="*",
        help="scenario YAML (one replica, traditional or chunked policy); with --engine vllm: measured run folders",
    )
    p.add_argument(
        "--engine",
        choices=("reference", "vllm"),
        default="reference",
        help="reference: the NumPy engine run now; vllm: replay measured real vLLM runs (default: the validation split)",
    )
    p.add_argument("--engine-profile", type=Path, default=None, help="with --engine vllm: engine profile YAML")
    p.add_argument("--hardware", type=Path, default=None, help="with --engine vllm: hardware profile YAML")
    p.add_argument(
        "--record", action="store_true", help="with --engine vllm: store the errors (data/validation/accuracy.json)"
    )
    p.add_argument("--steps-only", action="store_true", help="only compare single steps across a grid")
    p.add_argument("--skip-grid", action="store_true", help="skip the single-step grid, run the scenario only")
    p.add_argument(
        "--profile", type=Path, default=DEFAULT_PROFILE, help=f"local-cpu profile (default {DEFAULT_PROFILE})"
    )
    p.add_argument("--recalibrate", action="store_true", help="measure the local-cpu profile again first")
    p.add_argument("--quick", action="store_true", help="shorter benchmarks and a smaller step grid")
    p.add_argument("--policies", default=None, help="comma-separated policies to run (default: the scenario's)")
    p.add_argument("--repeats", type=int, default=1, help="twin runs per policy; policies alternate run by run")
    p.add_argument("--raw-clock", action="store_true", help="drive the engine by the raw clock (no drift probe)")
    p.add_argument("--probe-interval", type=float, default=0.1, help="engine seconds between speed probes")
    p.add_argument("--out", type=Path, default=None, help="output folder (default <scenario output.dir>/twin)")
    p.add_argument("--quiet", action="store_true", help="no progress bar; print nothing but errors")
    p.set_defaults(func=cmd_twin)


def cmd_twin(args: argparse.Namespace) -> int:
    if args.engine == "vllm":
        return _vllm(args)
    if len(args.scenario) != 1:
        raise UserError("twin: give one scenario YAML (or --engine vllm with run folders)")
    args.scenario = args.scenario[0]
    from llmsim.build import build_model
    from llmsim.calibration.localcpu import measure_and_write
    from llmsim.calibration.stepgrid import measure_steps
    from llmsim.reference import twin_report, twin_runs
    from llmsim.scenario import load_scenario

    say = printer(args.quiet)
    if args.recalibrate or not args.profile.exists():
        say(f"measuring this CPU -> {args.profile} ...", flush=True)
        measure_and_write(args.profile, args.quick)
    sc = load_scenario(args.scenario, {"hardware": str(args.profile.resolve()), "engine": "ideal"})
    out_dir = args.out or Path(sc.output.dir) / "twin"  # relative to the working directory, as `llmsim run`
    policies = args.policies.split(",") if args.policies else [sc.policy.kind]
    if bad := [p for p in policies if p not in POLICIES]:
        raise UserError(f"--policies: {bad} not supported by the twin (use {', '.join(POLICIES)})")
    if args.repeats < 1:
        raise UserError("--repeats: must be at least 1")
    steps = None
    if not args.skip_grid:
        steps = measure_steps(build_model(sc), args.profile, quick=args.quick, normalise=not args.raw_clock)
        rows = [
            [r.step, r.predicted_s * 1e3, r.measured_s * 1e3, f"{r.error:+.1%}", r.measured_raw_s * 1e3]
            + [f"{r.error_raw:+.1%}", f"{r.speed_factor:.2f}"]
            for r in steps.itertuples()
        ]
        heads = ["step", "predicted ms", "measured ms", "error", "raw ms", "raw error", "speed factor"]
        say(table(rows, heads))
        say(
            f"median |error| over {len(steps)} steps: {steps['error'].abs().median():.1%} normalised, "
            f"{steps['error_raw'].abs().median():.1%} raw"
        )
    if args.steps_only:
        for p in twin_report.write(out_dir, None, steps):
            say(f"wrote {p}")
        return 0
    runs = _twin_runs(args, policies)
    for policy, results in runs.items():
        sub = out_dir / policy if len(policies) > 1 else out_dir
        chosen = twin_runs.median_run(results)
        print_run(chosen, len(results), say)
        for p in twin_report.write(sub, chosen, steps):
            say(f"wrote {p}")
        if len(results) > 1:  # every run's tables (no plot), to look into the bad ones
            for k, r in enumerate(results, 1):
                twin_report.write(sub / f"run{k}", r, None, plot_it=False)
            say(f"wrote {sub}/run1..{len(results)}")
    frame = twin_runs.runs_frame(runs)
    say()
    say(table(twin_runs.runs_table(frame), twin_runs.RUNS_HEADERS))
    for line in twin_runs.runs_verdict(frame):
        say(line)
    twin_runs.write_runs(out_dir / "twin_runs.csv", frame)
    say(f"wrote {out_dir / 'twin_runs.csv'}")
    return 0


def _twin_runs(args: argparse.Namespace, policies: list[str]) -> dict:
    """The twin runs (``--repeats`` per policy), one bar step per run; each run's one-line result
    goes through the bar so it does not tear it (and not at all under --quiet)."""
    from llmsim.reference import twin_runs

    with bar(args.repeats * len(policies), "twin", not args.quiet, unit="run") as b:

        def done(line: str) -> None:
            if not args.quiet:
                b.write(line)
            b.update()

        return twin_runs.run_repeats(
            args.scenario, args.profile, policies, args.repeats, not args.raw_clock, args.probe_interval, progress=done
        )


def print_run(result, repeats: int, say: Callable[..., None] = print) -> None:  # noqa: ANN001
    s = result.summary
    which = f" (the run with the median E2E error of {repeats})" if repeats > 1 else ""
    say(f"\n{s['scenario']}, {s['policy']}{which}: {s['requests']} requests, {s['engine_steps']} engine steps")
    rows = []
    for clock_name, key in (("normalised", "error"), ("raw", "error_raw")):
        for m, e in s[key].items():
            row = [f"{m.removesuffix('_s')} ({clock_name})", f"{e['median_abs']:.1%}", f"{e['p90_abs']:.1%}"]
            rows.append([*row, f"{e['median_signed']:+.1%}"])
    say(table(rows, ["per request", "median |err|", "p90 |err|", "median signed"]))
    say(
        f"makespan: measured {s['measured_makespan_s']:.2f} s (raw clock {s['measured_makespan_raw_s']:.2f} s), "
        f"predicted {s['predicted_makespan_s']:.2f} s"
    )
    st, raw = s["engine_step_error"], s["engine_step_error_raw"]
    say(
        f"the engine's own steps priced: median signed {st['median_signed']:+.1%} normalised, "
        f"{raw['median_signed']:+.1%} raw"
    )
    sf = s["speed_factor"]
    if sf["probes"]:
        say(
            f"speed factor: {sf['probes']} probe readings {sf['min']:.2f}..{sf['max']:.2f} (median {sf['median']:.2f}), "
            f"applied (median of the last 3) {sf['applied_min']:.2f}..{sf['applied_max']:.2f}"
        )
    pf = s.get("prefill_speed_factor", {})
    if pf.get("probes"):
        say(
            f"prefill probe (applied to steps that prefill): {pf['probes']} readings {pf['min']:.2f}..{pf['max']:.2f} "
            f"(median {pf['median']:.2f})"
        )


VLLM_HEADERS = ["run", "split", "TTFT mean", "TTFT p99", "E2E mean", "E2E p99", "ITL mean", "E2E per-req median |err|"]


def _vllm(args: argparse.Namespace) -> int:
    """Replay measured vLLM runs (data/validation/vllm-cpu by default) and print the errors."""
    import json

    from llmsim.calibration import replay

    split = replay.split()
    folders = [Path(f) for f in args.scenario] or [replay.DATA / n for n in split["validation"]]
    kind = {n: "validation" for n in split["validation"]} | {n: "calibration" for n in split["calibration"]}
    hardware = args.hardware or replay.HOST_PROFILE
    engine = args.engine_profile or replay.ENGINE_PROFILE
    rows, scores = [], []
    with bar(len(folders), "twin", not args.quiet, unit="run") as b:
        for folder in folders:
            b.set_description(f"twin: {folder.name}")
            s, measured, simulated = replay.replay(folder, hardware, engine)
            b.update()
            scores.append(s)
            if args.out:
                bench_files(args.out / "bench", folder.name, measured, simulated)
            cells = [
                f"{s[k]:+.1%}" for k in ("err_mean_ttft_ms", "err_p99_ttft_ms", "err_mean_e2el_ms", "err_p99_e2el_ms")
            ]
            cells += [f"{s['err_mean_itl_ms']:+.1%}", f"{s['e2el_request_median_abs_err']:.1%}"]
            rows.append([folder.name, kind.get(folder.name, "repeat" if "-rep" in folder.name else "other"), *cells])
    say = printer(args.quiet)
    say(table(rows, VLLM_HEADERS))
    say("errors are (simulated - measured) / measured; ITL is the mean gap between tokens over all tokens")
    if args.record:
        from llmsim.accuracy import record

        where = record("vllm-cpu", scores, f"llmsim twin --engine vllm on {len(scores)} runs, engine {engine.name}")
        say(f"wrote {where}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "vllm_twin.json").write_text(json.dumps(scores, indent=1) + "\n")
        say(f"wrote {args.out / 'vllm_twin.json'} and {args.out / 'bench'}/<run>.{{measured,simulated}}.json")
    return 0


def bench_files(folder: Path, run: str, measured: pd.DataFrame, simulated: pd.DataFrame) -> None:
    """Both sides of a replayed run as ``vllm bench serve`` result JSON (llmsim/metrics.py keys),
    to diff key by key with ``vllm bench serve --save-result`` files or with each other."""
    from llmsim.accuracy import summary
    from llmsim.progress import to_json

    folder.mkdir(parents=True, exist_ok=True)
    for side, frame in (("measured", measured), ("simulated", simulated)):
        (folder / f"{run}.{side}.json").write_text(to_json(summary(frame)) + "\n")
