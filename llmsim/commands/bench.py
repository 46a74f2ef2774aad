"""``llmsim bench``: a ``vllm serve`` deployment under a ``vllm bench serve`` run, given as the two
command lines, printed as the benchmark prints its result; with ``--result`` (the file the real run
saved) llmsim replays the requests that run sent and sets its figures beside llmsim's."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim.vllmcli import Bench, Result, Serve


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="simulate `vllm serve` under `vllm bench serve`, given as their command lines; print its result",
        description=(
            "Translate a `vllm serve` command and a `vllm bench serve` command into a scenario "
            "(docs/scenario.md, 'From a vllm serve command'), simulate it and print the result as "
            "vllm bench serve prints its own. With --result, the file a real run saved "
            "(vllm bench serve --save-result; with --save-detailed, its very requests) is replayed "
            "and compared."
        ),
    )
    p.add_argument("--hardware", required=True, help="the GPU's hardware profile (`llmsim hardware` lists them)")
    p.add_argument("--serve", required=True, metavar="'vllm serve MODEL ...'", help="the server's command line")
    p.add_argument(
        "--bench", metavar="'vllm bench serve ...'", help="the benchmark's command line (default: its defaults)"
    )
    p.add_argument(
        "--result", metavar="FILE.json", help="a result file of vllm bench serve --save-result to compare with"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the translated scenario, e.g. --set cluster.expert_skew=0.8 (repeatable)",
    )
    p.add_argument("--scenario-out", metavar="FILE.yaml", help="also write the translated scenario (for `llmsim run`)")
    p.add_argument("--json", action="store_true", help="print summary.json (with a `compared` list) and nothing else")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    import tempfile

    from llmsim import vllmcli
    from llmsim.commands.run import parse_overrides
    from llmsim.hardware import load_profile

    load_profile(args.hardware)  # an unknown GPU is named before anything is read
    if args.scenario_out:
        check_scenario_out(Path(args.scenario_out))
    serve = vllmcli.parse_serve(args.serve)
    bench = vllmcli.parse_bench(args.bench or "")
    overrides = parse_overrides(args.set)
    result = vllmcli.load_result(args.result) if args.result else None
    if result is not None:
        bench = vllmcli.bench_from_result(result, bench, vllmcli.given_flags(args.bench))
    with tempfile.TemporaryDirectory(prefix="llmsim-bench-") as tmp:
        trace = None
        if result is not None and result.input_lens is not None:
            trace = Path(tmp) / "requests.csv"
            write_trace(trace, vllmcli.sent_requests(result, bench))
        data = vllmcli.scenario_dict(args.hardware, serve, bench, trace_csv=str(trace) if trace else None)
        summary = simulate(data, overrides)
        if args.scenario_out:
            write_scenario_files(Path(args.scenario_out), data, overrides, trace)
    compared = vllmcli.comparison_rows(summary, result.figures) if result is not None else []
    if args.json:
        from llmsim.progress import to_json

        print(to_json({**summary, "compared": compared}))
        return 0
    if args.quiet:
        return 0
    print(notes(serve, bench, result))
    print(vllmcli.result_block(summary, bench))
    if compared:
        assert result is not None
        print("\n" + comparison_table(compared, result.path))
    from llmsim.accuracy import interval_line

    print(f"\naccuracy {interval_line(summary.get('accuracy'), summary.get('accuracy_like'))}")
    print(f"verdict  {summary['saturation']['verdict'].upper()}: {summary['saturation']['explanation']}")
    return 0


def check_scenario_out(path: Path) -> None:
    """--scenario-out names a YAML file whose folder can be made (checked before simulating)."""
    from llmsim.commands.calibrate import check_out_parent
    from llmsim.errors import UserError

    if path.is_dir():
        raise UserError(f"--scenario-out {path}: is a directory, expected a scenario YAML file path")
    if path.suffix not in (".yaml", ".yml"):
        raise UserError(f"--scenario-out {path}: expected a path ending in .yaml or .yml (what `llmsim run` reads)")
    check_out_parent(path, "--scenario-out")


def simulate(data: dict, overrides: dict[str, object]) -> dict:
    """Run the translated scenario (with the ``--set`` overrides) and return its summary."""
    import copy

    from llmsim.api import run
    from llmsim.scenario import scenario_from_dict, set_path

    data = copy.deepcopy(data)
    for key, value in overrides.items():
        set_path(data, key, value)
    return run(scenario_from_dict(data, "llmsim bench", Path.cwd())).summary


def write_trace(path: Path, rows: list[tuple[float, int, int]]) -> None:
    """The requests a detailed result file sent, as llmsim's generic trace."""
    lines = ["arrival_s,prompt_tokens,output_tokens"] + [f"{t!r},{p},{o}" for t, p, o in rows]
    path.write_text("\n".join(lines) + "\n")


def write_scenario_files(path: Path, data: dict, overrides: dict[str, object], trace: Path | None) -> None:
    """The scenario as YAML (overrides applied) and, for a replayed result, its requests beside it
    (``<stem>.requests.csv``, named relative to the scenario); each file whole or not at all."""
    import copy

    import yaml

    from llmsim.errors import atomic_write_text
    from llmsim.scenario import set_path

    data = copy.deepcopy(data)
    for key, value in overrides.items():
        set_path(data, key, value)
    path.parent.mkdir(parents=True, exist_ok=True)
    if trace is not None:
        requests = path.with_name(path.stem + ".requests.csv")
        atomic_write_text(requests, trace.read_text())
        data["workload"]["trace"]["path"] = requests.name
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))


def notes(serve: Serve, bench: Bench, result: Result | None) -> str:
    """What the translation read: the model, the flags it ignored, where the requests came from."""
    from llmsim.vllmcli import model_entry

    lines = [f"model    {model_entry(serve.model)[1]}"]
    if serve.ignored or bench.ignored:
        lines.append(f"ignored  {', '.join(serve.ignored + bench.ignored)} (no effect on timing)")
    if result is not None and result.input_lens is not None:
        if result.start_times is not None and not bench.max_concurrency:
            source = "their send times"
        else:
            source = "all at once" if math.isinf(bench.request_rate) else "vllm bench's draws at the rate and seed"
        lines.append(f"requests {len(result.input_lens):,} from {result.path} (their lengths; arrivals: {source})")
    return "\n".join(lines) + "\n"


def comparison_table(rows: list[dict], path: Path) -> str:
    from llmsim.tables import fmt, table

    body = [[r["figure"], fmt(r["real"]), fmt(r["llmsim"]), f"{r['error']:+.1%}"] for r in rows]
    return f"compared with {path}\n" + table(body, ["figure", "real", "llmsim", "error"])
