"""``llmsim validate``: the cost model's per-op predictions against a measured profile."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmsim.errors import UserError
from llmsim.progress import Bar, bar, printer, to_json
from llmsim.tables import table

if TYPE_CHECKING:
    from llmsim.calibration.readers import Measurement
    from llmsim.calibration.validate import Report

WORST = 5  # worst cases shown


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="compare per-op predictions with measured timings (MAPE)")
    p.add_argument("--hardware", required=True, help="profile name or YAML path (e.g. a calibrated one)")
    p.add_argument("--model", required=True, help="catalog name or HuggingFace config.json")
    p.add_argument(
        "--profile", required=True, nargs="+", metavar="FILE", help="Vidur mlp.csv/all_reduce.csv or generic CSV"
    )
    p.add_argument("--json", action="store_true", help="print JSON: every figure of the text (errors as fractions)")
    p.add_argument("--quiet", action="store_true", help="no progress bar; print nothing but errors")
    p.set_defaults(func=cmd_validate)


def read_profiles(files: list[str], progress: Bar, label: str) -> list[Measurement]:
    """Every measured row of ``files``, one step of ``progress`` per file (a calibration may read
    dozens); ``label`` names the command on the bar."""
    from llmsim.calibration.readers import read_profile

    rows: list[Measurement] = []
    for f in files:
        progress.set_description(f"{label}: reading {Path(f).name}")
        rows += read_profile(f)
        progress.update()
    return rows


def cmd_validate(args: argparse.Namespace) -> int:
    from llmsim.calibration.readers import check_dtypes
    from llmsim.calibration.validate import validate
    from llmsim.commands.models import model_arg
    from llmsim.hardware import load_profile

    hw, model = load_profile(args.hardware), model_arg(args.model)
    with bar(len(args.profile) + 1, "validate", not args.quiet, unit="step") as b:
        rows = read_profiles(args.profile, b, "validate")
        # multi-node all-reduces run over the network; the profile's scale-up link does not describe them
        rows = [r for r in rows if r.op != "all_reduce_multinode"]
        if not rows:
            raise UserError(
                f"{', '.join(args.profile)}: only multi-node all-reduce rows, which go over the network "
                "and are not validated: nothing to compare"
            )
        check_dtypes(rows, hw)
        b.set_description("validate: pricing")
        rep = validate(hw, model, rows)
        b.update()
    say = printer(args.quiet)
    if args.json:
        say(to_json(report_json(rep, hw.name, model.name)))
        return 0
    print_report(rep, hw.name, model.name, say)
    return 0


def report_json(rep: Report, hardware: str, model: str) -> dict:
    """The text report's figures, unrounded: fractions for errors, seconds for times, bytes for
    all-reduce sizes; a TP degree an op was not measured at is ``null``."""
    by_tp = rep.per_op_tp()
    return {
        "hardware": hardware,
        "model": model,
        "measured_kernels": len(rep.frame),
        "ops": {
            op: {"mape": r.mape, "p90": r.p90, "worst": r.worst, "n": int(r.n)} for op, r in rep.per_op().iterrows()
        },
        "mape_per_tp": {op: {f"tp{c}": v for c, v in zip(by_tp.columns, r, strict=True)} for op, r in by_tp.iterrows()},
        "worst_cases": [worst_json(r) for r in rep.frame.nlargest(WORST, "ape").itertuples()],
        "overall_mape": rep.overall_mape,
    }


def worst_json(r: Any) -> dict:  # noqa: ANN401 - a pandas itertuples row
    """One worst case: a GEMM's TP degree and shape, or an all-reduce's ranks and bytes."""
    gemm = r.kind == "gemm"
    shape = {"tp": r.tp, "m": r.m, "n": r.n, "k": r.k} if gemm else {"ranks": r.ranks, "bytes": r.bytes}
    return {"op": r.op, **shape, "measured_s": r.seconds, "predicted_s": r.predicted_s, "error": r.ape}


def print_report(rep: Report, hardware: str, model: str, out: Callable[..., None]) -> None:
    """The text report: per-op MAPE, MAPE per op and TP degree, the worst cases, overall."""
    per_op = rep.per_op()
    out(f"{hardware} vs {len(rep.frame)} measured kernels ({model}); MAPE = mean |predicted - measured| / measured")
    out(
        table(
            [[op, f"{r.mape:.1%}", f"{r.p90:.1%}", f"{r.worst:.1%}", int(r.n)] for op, r in per_op.iterrows()],
            ["op", "MAPE", "p90", "worst", "rows"],
        )
    )
    by_tp = rep.per_op_tp()
    out("\nMAPE per op and TP degree (ranks for all-reduce)")
    out(
        table(
            [[op, *(f"{v:.1%}" if v == v else "-" for v in r)] for op, r in by_tp.iterrows()],
            ["op", *[f"tp{c}" for c in by_tp.columns]],
        )
    )
    out("\nworst cases")
    worst = [
        [
            r.op,
            r.tp if r.kind == "gemm" else r.ranks,
            f"{r.m}x{r.n}x{r.k}" if r.kind == "gemm" else f"{r.bytes:.0f} B",
            f"{r.seconds * 1e6:.1f}",
            f"{r.predicted_s * 1e6:.1f}",
            f"{r.ape:.1%}",
        ]
        for r in rep.frame.nlargest(WORST, "ape").itertuples()
    ]
    out(table(worst, ["op", "tp/ranks", "shape m x n x k", "measured us", "predicted us", "error"]))
    out(f"\noverall MAPE {rep.overall_mape:.1%}")
