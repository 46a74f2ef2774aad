"""``llmsim twin SCENARIO``: the reference engine on this CPU vs the simulator with the calibrated
``local-cpu`` profile, request by request (and ``--steps-only``: single steps across a grid)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from llmsim.errors import UserError, results_in
from llmsim.progress import bar, finite, printer
from llmsim.tables import table

if TYPE_CHECKING:
    import pandas as pd

    from llmsim.scenario import Scenario

DEFAULT_PROFILE = Path("results/local-cpu.yaml")
POLICIES = ("traditional", "chunked")


DEFAULT_REPEATS = 1  # twin runs per policy
DEFAULT_PROBE_S = 0.1  # engine seconds between speed probes (the reference engine's drift probe)


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
    p.add_argument(
        "--repeats", type=int, default=DEFAULT_REPEATS, help="twin runs per policy; policies alternate run by run"
    )
    p.add_argument("--raw-clock", action="store_true", help="drive the engine by the raw clock (no drift probe)")
    p.add_argument("--probe-interval", type=float, default=DEFAULT_PROBE_S, help="engine seconds between speed probes")
    p.add_argument("--out", type=Path, default=None, help="output folder (default <scenario output.dir>/twin)")
    p.add_argument("--quiet", action="store_true", help="no progress bar; print nothing but errors")
    p.set_defaults(func=cmd_twin)


# The flags each engine takes (argparse defaults: None or False): a flag of the other engine would
# be silently ignored, so the user would believe it was applied.
VLLM_ONLY = ("engine_profile", "hardware", "record")
REFERENCE_ONLY = ("steps_only", "skip_grid", "recalibrate", "quick", "policies", "raw_clock")
# The NumPy reference engine holds the model's fp32 weights in memory and runs every matmul on this
# CPU: twin_small (20 M parameters) takes a minute, an 8 B model would need 32 GB and days.
MAX_TWIN_PARAMS = 1_000_000_000
# The scenario is validated before this CPU is measured (minutes, when the profile is missing); its
# keys do not depend on the hardware's figures, so a shipped CPU profile stands in until then.
STAND_IN_PROFILE = "Xeon-8480+"


def _reference_defaults() -> dict[str, object]:
    return {"repeats": DEFAULT_REPEATS, "probe_interval": DEFAULT_PROBE_S, "profile": DEFAULT_PROFILE}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_flags(args: argparse.Namespace) -> None:
    """Flags that contradict each other or belong to the other engine, before any work."""
    other = VLLM_ONLY if args.engine == "reference" else REFERENCE_ONLY
    given = [name for name in other if getattr(args, name) not in (None, False)]
    if args.engine == "vllm":  # the reference engine's flags with defaults: given when not at them
        given += [name for name, default in _reference_defaults().items() if getattr(args, name) != default]
    if given:
        needs = "--engine vllm" if args.engine == "reference" else "the reference engine (no --engine vllm)"
        raise UserError(f"twin: {_flag(given[0])} is taken only with {needs}; drop it or change the engine")
    if args.policies is not None and not [p for p in args.policies.split(",") if p.strip()]:
        raise UserError(f"--policies {args.policies!r}: expected policy names, e.g. traditional,chunked")
    if args.steps_only and args.skip_grid:
        raise UserError("twin: --steps-only runs only the step grid and --skip-grid skips it: nothing would run")
    if args.repeats < 1:
        raise UserError(f"--repeats {args.repeats}: expected at least 1 twin run per policy")
    if not (math.isfinite(args.probe_interval) and args.probe_interval > 0):
        raise UserError(f"--probe-interval {args.probe_interval:g}: expected a positive number of engine seconds")


def checked_scenario(args: argparse.Namespace, profile: str) -> Scenario:
    """The scenario as the twin runs it (on ``profile``, the ideal engine), refused when the
    reference engine cannot run it: a policy other than traditional or chunked, more than one
    replica or device (as ``llmsim.reference.twin.twin_scenario``), a model too large for NumPy."""
    from llmsim.build import build_model
    from llmsim.scenario import load_scenario

    sc = load_scenario(args.scenario, {"hardware": profile, "engine": "ideal"})
    if not args.policies and sc.policy.kind not in POLICIES:
        raise UserError(
            f"{args.scenario}: policy.kind: the twin runs {' and '.join(POLICIES)}, not {sc.policy.kind!r} "
            "(or pick them with --policies)"
        )
    if sc.cluster.replicas != 1 or sc.cluster.tp != 1 or sc.cluster.pp != 1:
        raise UserError(
            f"{args.scenario}: cluster: the twin runs one replica with tp=1, pp=1 (got {sc.cluster.replicas} "
            f"replica(s), tp={sc.cluster.tp}, pp={sc.cluster.pp})"
        )
    model = build_model(sc)
    if model.total_params() > MAX_TWIN_PARAMS:
        raise UserError(
            f"{args.scenario}: model: {model.name} has {model.total_params() / 1e9:.1f} B parameters; the NumPy "
            f"reference engine runs models up to {MAX_TWIN_PARAMS / 1e9:g} B on this CPU (e.g. scenarios/twin_small.yaml)"
        )
    return sc


def checked_profile(path: Path, replacing: bool) -> None:
    """``--profile``, when it exists, is a hardware profile (not a scenario or a folder), also when
    it is about to be measured again (``replacing``): a scenario given there would be overwritten.
    A profile that no longer parses may be replaced: that is what --recalibrate is for."""
    from llmsim.errors import load_yaml_file
    from llmsim.filekinds import refuse_kind

    if path.is_dir():
        raise UserError(f"--profile {path}: a folder; expected the local-cpu profile YAML (default {DEFAULT_PROFILE})")
    try:
        data = load_yaml_file(path)
    except UserError:
        if replacing:
            return
        raise
    hint = "give the profile `llmsim calibrate --local-cpu` wrote (or a missing path: the twin measures this CPU there)"
    refuse_kind(data, f"--profile {path}", "a hardware profile", hint)


def check_out(out: Path) -> None:
    """The output folder can be written, before minutes of measuring (the twin writes it in place)."""
    from llmsim.commands.run import check_writable_parent

    if out.exists() and not out.is_dir():
        raise UserError(f"output directory {out}: not writable (Not a directory)")
    other = results_in(out)
    if other is not None:  # the twin writes its files in place: they would mix with another command's
        raise UserError(
            f"output directory {out} holds the results of `llmsim {other[0]}` ({other[1]}); the twin writes "
            "its files into --out beside what is there, so pick another (the default is <output.dir>/twin)"
        )
    check_writable_parent(out)


def cmd_twin(args: argparse.Namespace) -> int:
    check_flags(args)
    if args.engine == "vllm":
        return _vllm(args)
    if len(args.scenario) != 1:
        raise UserError("twin: give one scenario YAML (or --engine vllm with run folders)")
    args.scenario = args.scenario[0]
    from llmsim.build import build_model
    from llmsim.calibration.localcpu import measure_and_write
    from llmsim.calibration.stepgrid import measure_steps
    from llmsim.hardware import PROFILES_DIR
    from llmsim.reference import twin_report, twin_runs

    say = printer(args.quiet)
    measure = args.recalibrate or not args.profile.exists()
    if args.profile.exists():
        checked_profile(args.profile, replacing=measure)
    profile = str(PROFILES_DIR / f"{STAND_IN_PROFILE}.yaml") if measure else str(args.profile.resolve())
    sc = checked_scenario(args, profile)
    out_dir = args.out or Path(sc.output.dir) / "twin"  # relative to the working directory, as `llmsim run`
    policies = args.policies.split(",") if args.policies else [sc.policy.kind]
    if bad := [p for p in policies if p not in POLICIES]:
        raise UserError(f"--policies {args.policies}: {', '.join(bad)} not run by the twin (use {', '.join(POLICIES)})")
    check_out(out_dir)
    if measure:
        say(f"measuring this CPU -> {args.profile} ...", flush=True)
        measure_and_write(args.profile, args.quick)
        sc = checked_scenario(args, str(args.profile.resolve()))
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

    folders = [Path(f) for f in args.scenario] or [replay.DATA / n for n in replay.split()["validation"]]
    # absolute: the replay's scenario lives in a temporary folder, which a relative path would name
    hardware = _existing(args.hardware, "--hardware", "a hardware profile")
    engine = _existing(args.engine_profile, "--engine-profile", "an engine profile")
    fits, roles = [], []
    for folder in folders:  # every folder is a run before the first replays (each takes seconds)
        if not folder.is_dir():
            raise UserError(
                f"{folder}: {'no such folder' if not folder.exists() else 'a file'}; expected a "
                "measured run folder (meta.json, requests.csv; data/validation/vllm-cpu/README.md)"
            )
        replay.read_run(folder)
        roles.append(replay.split_of(folder))
        fits.append(replay.campaign_fit(folder))
    _check_vllm_folders(folders, args.out)
    labels = run_labels(folders)
    default = (replay.HOST_PROFILE, replay.ENGINE_PROFILE)  # the first campaign's fit
    rows, scores, used, sides = [], [], [], []
    with bar(len(folders), "twin", not args.quiet, unit="run") as b:
        for folder, label, role, own in zip(folders, labels, roles, fits, strict=True):
            b.set_description(f"twin: {label}")
            hw, eng = hardware or (own or default)[0], engine or (own or default)[1]
            used.append((hw, eng, own is None and not (hardware and engine)))
            s, measured, simulated = replay.replay(folder, hw, eng)
            if "err_mean_ttft_ms" not in s:  # (no simulated request finished: nothing to score)
                raise UserError(
                    f"{folder}: the replay finished none of its requests (every one refused by its meta.json "
                    "limits, e.g. resolved.model.max_model_len or the KV block count), so there is nothing to score"
                )
            s["run"] = f"{folder.resolve().parent.name}/{folder.resolve().name}"  # (campaigns share run names)
            b.update()
            scores.append(s)
            sides.append((label.replace("/", "--"), measured, simulated))
            cells = [
                f"{s[k]:+.1%}" for k in ("err_mean_ttft_ms", "err_p99_ttft_ms", "err_mean_e2el_ms", "err_p99_e2el_ms")
            ]
            cells += [f"{s['err_mean_itl_ms']:+.1%}", f"{s['e2el_request_median_abs_err']:.1%}"]
            rows.append([label, role, *cells])
    say = printer(args.quiet)
    say(table(rows, VLLM_HEADERS))
    say("errors are (simulated - measured) / measured; ITL is the mean gap between tokens over all tokens")
    for line in fit_lines(folders, used):
        say(line)
    if args.record:
        from llmsim.accuracy import record

        campaigns = _by_campaign(folders, scores, used)
        for campaign, picked in campaigns.items():
            hw_set, eng_set = {_shown(h) for _, h, _ in picked}, {_shown(e) for _, _, e in picked}
            src = (
                f"llmsim twin --engine vllm on {len(picked)} runs of {campaign}, hardware "
                f"{', '.join(sorted(hw_set))}, engine {', '.join(sorted(eng_set))}"
            )
            where = record(campaign, [s for s, _, _ in picked], src)
        say(f"wrote {where} ({', '.join(campaigns)})")
    if args.out:  # the folder whole or untouched, and only this twin's runs in it
        from llmsim.errors import atomic_folder

        with atomic_folder(args.out, owned=_vllm_twin_owns) as tmp:
            for label, measured, simulated in sides:
                bench_files(tmp / "bench", label, measured, simulated)
            # strict JSON: a figure a run cannot have (no failed requests: err_failed) is null, not NaN
            (tmp / "vllm_twin.json").write_text(json.dumps(finite(scores), indent=1, allow_nan=False) + "\n")
        say(f"wrote {args.out / 'vllm_twin.json'} and {args.out / 'bench'}/<run>.{{measured,simulated}}.json")
    return 0


def _vllm_twin_owns(entry: Path) -> bool:
    """An entry ``twin --engine vllm`` writes into its --out (it replaces the folder whole)."""
    return entry.name in ("vllm_twin.json", "bench")


def _check_vllm_folders(folders: list[Path], out: Path | None) -> None:
    """Each measured run once, and --out outside them (the twin's files do not go into the
    measurements) and one the twin may replace, checked before minutes of replaying."""
    from llmsim.calibration.serving import each_once
    from llmsim.commands.run import check_writable_parent
    from llmsim.errors import refuse_foreign_files

    each_once(folders, "")
    if out is None:
        return
    target = out.resolve()
    for folder in folders:
        if target == folder.resolve() or folder.resolve() in target.parents:
            raise UserError(f"--out {out}: inside the measured run {folder}; write the twin's files elsewhere")
    refuse_foreign_files(out, _vllm_twin_owns)
    check_writable_parent(out)


def run_labels(folders: list[Path]) -> list[str]:
    """Each run's name, with its campaign's where runs of two campaigns share a name (the resolved
    folder: ``.`` or a link names the run it is)."""
    real = [f.resolve() for f in folders]
    names = [r.name for r in real]
    clash = {n for n in names if len({r.parent for r in real if r.name == n}) > 1}
    return [f"{r.parent.name}/{r.name}" if r.name in clash else r.name for r in real]


def fit_lines(folders: list[Path], used: list[tuple[Path, Path, bool]]) -> list[str]:
    """Which profiles priced the runs, so that a run priced with another machine's fit shows."""
    own = [
        h.parent == f.resolve().parent / "engine-fit" and e.parent == h.parent
        for f, (h, e, _) in zip(folders, used, strict=True)
    ]
    if all(own):
        campaigns = dict.fromkeys(f.resolve().parent.name for f in folders)
        return [f"priced with each run's campaign fit: {', '.join(c + '/engine-fit' for c in campaigns)}"]
    groups = dict.fromkeys((_shown(h), _shown(e)) for h, e, _ in used)
    lines = [f"priced with hardware {h}, engine {e}" for h, e in groups]
    foreign = [f for f, (_, _, fell_back) in zip(folders, used, strict=True) if fell_back]
    if foreign:
        lines.append(
            f"note: no engine-fit/ beside {foreign[0]}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}: "
            "priced with the first campaign's fit, another machine's; give --hardware and --engine-profile "
            "fitted to the machine that measured it (calibrate --serving --fit-hardware)"
        )
    return lines


def _shown(path: Path) -> str:
    """A profile path as printed and recorded: relative to the checkout where it is inside it."""
    from llmsim.calibration.replay import ROOT

    p = path.resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def _by_campaign(folders: list[Path], scores: list[dict], used: list[tuple[Path, Path, bool]]) -> dict:
    """The scores of each campaign (the runs' parent folder) with the profiles that priced them."""
    out: dict[str, list] = {}
    for folder, s, (hw, eng, _) in zip(folders, scores, used, strict=True):
        out.setdefault(folder.resolve().parent.name, []).append((s, hw, eng))
    return out


def _existing(path: Path | None, flag: str, kind: str) -> Path | None:
    """``path`` made absolute, refused when there is no such file or it is another kind of file
    (``llmsim.filekinds.FILE_KINDS``: a scenario given as a profile)."""
    from llmsim.errors import load_yaml_file
    from llmsim.filekinds import refuse_kind

    if path is None:
        return None
    if not path.is_file():
        raise UserError(f"{flag} {path}: {'no such file' if not path.exists() else 'not a file'}; expected {kind} YAML")
    refuse_kind(load_yaml_file(path), f"{flag} {path}", kind, f"give {kind} YAML")
    return path.resolve()


def bench_files(folder: Path, run: str, measured: pd.DataFrame, simulated: pd.DataFrame) -> None:
    """Both sides of a replayed run as ``vllm bench serve`` result JSON (llmsim/metrics.py keys),
    to diff key by key with ``vllm bench serve --save-result`` files or with each other."""
    from llmsim.accuracy import summary
    from llmsim.progress import to_json

    folder.mkdir(parents=True, exist_ok=True)
    for side, frame in (("measured", measured), ("simulated", simulated)):
        (folder / f"{run}.{side}.json").write_text(to_json(summary(frame)) + "\n")
