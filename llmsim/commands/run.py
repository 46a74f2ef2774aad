"""``llmsim run SCENARIO``: simulate, print a summary, write results (and a report if available)."""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path

from llmsim.errors import (
    UserError,
    atomic_folder,
    cut,
    output_pending,
    refuse_foreign_files,
    results_in,
    temp_sibling,
    test_pause,
    yaml_value,
)
from llmsim.tables import fmt, table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="simulate a scenario YAML and write results")
    p.add_argument("scenario", help="path to a scenario YAML")
    p.add_argument("--out", help="output directory (default: the scenario's output.dir)")
    add_set_option(p, "override a scenario key, e.g. --set policy.chunk_tokens=256 (repeatable)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors and what --json asks for")
    p.add_argument("--json", action="store_true", help="print summary.json (and nothing else) on stdout")
    p.add_argument("--no-report", action="store_true", help="skip report.html / report.md / trace.json")
    p.add_argument(
        "--exact-steps",
        action="store_true",
        help="one event per step, every request touched every step (no fast paths; the same results to rounding, at most 1e-9 s apart; slower)",
    )
    p.set_defaults(func=cmd_run)


def add_set_option(p: argparse.ArgumentParser, help_text: str) -> None:
    """``--set KEY=VALUE`` (repeatable), read by :func:`parse_overrides`."""
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help_text)


def parse_overrides(items: list[str], option: str = "--set") -> dict[str, object]:
    """``--set KEY=VALUE`` items (or a sweep's ``--fix`` ones, named so) as ``{dotted key: value}``,
    each value read as YAML (``256``, ``true``, ``[1, 2]``, ``{dist: fixed, value: 8}``); a
    malformed item is a UserError naming it."""
    from llmsim.scenario import key_parts

    out: dict[str, object] = {}
    for item in items:
        shown = f"{option} {cut(item)!r}"
        if "=" not in item:
            raise UserError(f"{shown}: expected KEY=VALUE, e.g. policy.chunk_tokens=256")
        key, value = item.split("=", 1)
        try:
            key_parts(key)
        except UserError as exc:
            raise UserError(f"{shown}: {exc}") from None
        if key.strip() in out:  # (the last would win without a word)
            raise UserError(f"{shown}: the key {key.strip()} is given twice")
        out[key.strip()] = yaml_value(shown, value)
    return out


# What `llmsim run` writes into its folder (and nothing else): it replaces the folder as a whole
RUN_FILES = {
    *(f"{stem}.{ext}" for stem in ("requests", "steps", "chunks", "scaling") for ext in ("parquet", "csv")),
    *("summary.json", "scenario.json", "csv_run_ids.json", "report.html", "report.md", "trace.json"),
    *("report_plots", ".llmsim_write_test"),
}


def run_owns(entry: Path) -> bool:
    """An entry a run writes (or an atomic write's temporary name, left by a killed older llmsim),
    or one a new run keeps (``run_keeps``)."""
    return entry.name in RUN_FILES or (entry.name.startswith(".") and entry.name.endswith(".tmp")) or run_keeps(entry)


# Other commands' default folders inside a run's (`llmsim sweep S` writes <output.dir>/sweep, `llmsim
# twin S` <output.dir>/twin): a new run of S keeps them as they were, so run, sweep, run works
NESTED_OUTPUTS = {"sweep": ("sweep.json",), "twin": ("twin_runs.csv", "twin_summary.json", "vllm_twin.json")}


def run_keeps(entry: Path) -> bool:
    markers = NESTED_OUTPUTS.get(entry.name, ())
    return entry.is_dir() and any((entry / m).is_file() for m in markers)


def check_run_output(out: Path) -> None:
    """Fail before simulating if the results can't replace ``out``: its parent must be writable
    (the new folder is built next to it) and ``out`` must hold only what a run writes. A sweep's or
    a plan's results are named as such (as `llmsim sweep` names a run's), not as foreign files."""
    other = results_in(out)
    if other is not None and other[0] != "run":
        raise UserError(
            f"output directory {out} holds the results of `llmsim {other[0]}` ({other[1]}); a run replaces "
            "its whole --out folder, so pick another"
        )
    refuse_foreign_files(out, run_owns)
    check_writable_parent(out)


def check_writable_parent(out: Path) -> None:
    """``out``'s parent can take the new folder built next to it (a probe folder, made and removed)."""
    from llmsim.commands.calibrate import check_out_parent

    check_out_parent(out, "output directory")  # (under a file, mkdir would say "File exists")
    probe = temp_sibling(out, "probe")
    try:
        if not out.parent.is_dir():
            out.parent.mkdir(parents=True)  # (under a regular file: NotADirectoryError, as it should)
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise UserError(f"output directory {out}: not writable ({exc.strerror})") from None


def cmd_run(args: argparse.Namespace) -> int:
    from llmsim.api import run
    from llmsim.scenario import load_scenario

    path = Path(args.scenario)
    overrides = parse_overrides(args.set)
    with sets_blamed(path, overrides):
        sc = load_scenario(path, overrides)
    out = Path(args.out or sc.output.dir)  # --out wins over the scenario's output.dir
    check_run_output(out)
    with output_pending(out):  # an interrupt from here on says `out` is unchanged
        with simulated_time_bar(sc, not args.quiet) as follow, sets_blamed(path, overrides):
            res = run(sc, exact_steps=args.exact_steps, progress=follow)
        test_pause("simulated")
        with atomic_folder(out, owned=run_owns, carry=run_keeps) as tmp:  # complete or untouched (docs/reliability.md)
            written = write_run(res, sc, tmp, args.exact_steps, report=not args.no_report)
    written = [out / p.relative_to(tmp) for p in written]
    if args.json:
        from llmsim.progress import to_json

        print(to_json(res.summary))
    elif not args.quiet:
        print(summary_text(res.summary))
        print("\nwrote: " + ", ".join(str(p) for p in written))
    return 0


@contextlib.contextmanager
def sets_blamed(path: Path, overrides: dict[str, object]) -> Iterator[None]:
    """A mistake in the scenario names the ``--set`` item it comes from, as ``llmsim sweep`` names
    its axis value (``file: --set KEY=VALUE: key: problem``): the file's name alone would blame it
    for a value it does not hold. Around building too, where the workload's bounds are checked."""
    try:
        yield
    except UserError as exc:
        if not overrides:
            raise
        from llmsim.sweep import blame_overrides

        raise blame_overrides(exc, path, overrides) from None


def write_run(res: object, sc: object, folder: Path, exact_steps: bool, report: bool) -> list[Path]:
    """Every file of the run into ``folder``, each stamped with the same run id."""
    from llmsim.report import scenario_json, write_report, write_scenario
    from llmsim.results import make_run_id

    run_id = make_run_id(scenario_json(sc), exact_steps)  # type: ignore[arg-type]
    written = res.write(folder, sc.output.format, run_id=run_id)  # type: ignore[attr-defined]
    written.append(write_scenario(sc, folder, run_id))  # type: ignore[arg-type]
    if report:
        written += write_report(folder)
    return written


@contextlib.contextmanager
def simulated_time_bar(sc: object, enabled: bool) -> Iterator[Callable[[float, float], None] | None]:
    """A bar over simulated seconds up to the last arrival (stderr, only where one is shown:
    llmsim/progress.py), as the ``progress`` callback of ``llmsim.run``; None when not shown."""
    from llmsim.progress import bar, shown

    if not shown(enabled):
        yield None
        return
    with bar(None, "simulating", unit="sim s") as b:
        done = [0]

        def follow(now_s: float, end_s: float) -> None:
            if b.total is None:  # type: ignore[attr-defined]
                b.total = math.ceil(end_s)  # type: ignore[attr-defined]  # whole simulated seconds
            b.update(int(now_s) - done[0])
            done[0] = int(now_s)

        yield follow


def summary_text(s: dict) -> str:
    """The human summary printed after a run."""
    from llmsim.metrics import latency_table  # pandas: imported when a run has finished, not at start-up
    from llmsim.results import (
        lora_line,
        offload_line,
        pools_line,
        prefix_line,
        requests_line,
        scaling_line,
        slo_targets,
    )

    sat = s["saturation"]
    pools = pools_line(s)
    head = [
        f"scenario {s['scenario']}  (model {s['model']}, policy {s['policy']}, engine {s.get('engine', {}).get('name')}, "
        f"seed {s['seed']})",
        f"cluster  {pools}",
        f"requests {requests_line(s)}",
        f"throughput {fmt(s['request_throughput'])} req/s, {fmt(s['input_throughput'])} input tok/s, "
        f"{fmt(s['output_throughput'])} output tok/s, "
        f"{fmt(s['total_token_throughput'])} total tok/s over {fmt(s['duration'])} s",
    ]
    body = table(*latency_table(s))
    slo = s["slo"]
    targets = slo_targets(slo)
    tail = [
        "\n",
        f"SLO      {targets or '(none set)'}: attainment {slo['attainment']:.1%} "
        f"(target {slo.get('attainment_target', 0.9):.0%}), goodput {fmt(s['request_goodput'])} req/s",
    ]
    if "kv_cache" in s:
        kv = s["kv_cache"]
        tail.append(f"KV cache utilisation mean {kv['utilization_mean']:.1%}, peak {kv['utilization_peak']:.1%}")
    if "sessions" in s:  # closed-loop sessions (feeder.py): how long one took, first call to last answer
        ses = s["sessions"]
        took = ""
        if ses["duration_mean_s"] is not None:
            took = (
                f"; first call to last answer mean {fmt(ses['duration_mean_s'])} s, p99 {fmt(ses['duration_p99_s'])} s"
            )
        tail.append(f"sessions {ses['count']:,} ({ses['requests']:,} calls), {ses['completed']:,} completed{took}")
    if "kv_offload" in s:  # kvcache.OffloadTier: where prefix hits came from
        tail.append(f"offload  {offload_line(s)}")
    elif s.get("prefix_cache", {}).get("queried_prompt_tokens"):  # (prompts with content to match)
        tail.append(f"prefix   {prefix_line(s)}")
    if "autoscaling" in s:  # autoscaler.py: what the replica count did and what it cost
        tail.append(f"scaling  {scaling_line(s)}")
    if "lora" in s:  # lora.py: adapters, their loads and kernels
        tail.append(f"lora     {lora_line(s)}")
    if "cost" in s and s["cost"]["usd_per_million_output_tokens"] is not None:
        c = s["cost"]
        tail.append(
            f"cost     ${fmt(c['cluster_usd_per_hour'])}/h, ${fmt(c['usd_per_million_output_tokens'])} "
            "per million output tokens (prices are editable assumptions)"
        )
    routing = [p["expert_routing_exponent"] for p in s.get("pools", []) if "expert_routing_exponent" in p]
    if routing:  # a MoE model: how its tokens reach its experts (the figure that moves MoE decode most)
        tail.append(f"routing  {routing_line(routing[0])}")
    jit = moe_jit_line(s)
    if jit:
        tail.append(f"kernels  {jit}")
    if any(p.get("all2all_backend") == "deepep_high_throughput" for p in s.get("pools", [])):
        tail.append(f"all2all  {DEEPEP_HT_NOTE}")
    if "steps_table" in s:  # (steplog.MAX_ROWS: a run's steps are not bounded by its requests)
        t = s["steps_table"]
        tail.append(
            f"steps    the steps table keeps one step in {t['kept_every']:,} ({t['rows']:,} of "
            f"{s['steps_total']:,}), not one in {t['asked_every']:,}: the rows held in memory are bounded, and the "
            "KV-cache figures are the kept steps' (output.steps: none keeps none)"
        )
    tail.append(f"verdict  {sat['verdict'].upper()}: {sat['explanation']}")
    from llmsim.accuracy import interval_line

    tail.append(f"accuracy {interval_line(s.get('accuracy'), s.get('accuracy_like'))}")
    return "\n".join(head) + "\n\n" + body + "\n".join(tail)


# what a run with DeepEP's normal kernels leaves out (docs/costmodel.md "Expert parallelism across nodes")
DEEPEP_HT_NOTE = (
    "DeepEP's normal kernels: their handshake before each call (notify_dispatch, ~1 ms in DeepSeek's "
    "prefill profile, DeepEP issue #94) is not priced, so small steps read fast; vLLM runs "
    "deepep_low_latency for decode"
)


def moe_jit_line(s: dict, served_before: bool = False) -> str | None:
    """What the server's first steps of a new kind waited for vLLM's fused-MoE kernels
    (moejit.py), or None where none was compiled. ``served_before``: the server had run earlier
    benchmarks (``llmsim bench --after``), whose kernels it kept."""
    j = s.get("moe_jit", {})
    n = j.get("kernels_compiled", 0)
    if not n:
        return None
    server = "a server that had served only the --after runs" if served_before else "a fresh vLLM server"
    return (
        f"{n} fused-MoE kernel variant{'s' * (n != 1)} compiled while serving, steps waited {fmt(j['wait_s'])} s "
        f"({server}; engine.moe_jit_compile_s: 0 for one that had compiled them)"
    )


def routing_line(exponent: float) -> str:
    """A MoE run's routing, and the measured alternative where it is the default (docs/scenario.md)."""
    from llmsim.vllmcli import RANDOM_TOKEN_ROUTING_EXPONENT

    if exponent == 0.0:
        return "every MoE token reaches the same experts (cluster.expert_routing_exponent 0: dummy weights behind a biased router)"
    if exponent != 1.0:
        return f"MoE tokens route alike: cluster.expert_routing_exponent {exponent:.10g}"
    return (
        "MoE tokens route independently (cluster.expert_routing_exponent 1); vllm bench's random-dataset "
        f"prompts route alike, {RANDOM_TOKEN_ROUTING_EXPONENT:g} (docs/scenario.md)"
    )
