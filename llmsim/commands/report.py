"""``llmsim report RESULTS_DIR``: the HTML + Markdown report (and Perfetto trace) of a run or plan."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write report.html, report.md and trace.json for a results folder")
    p.add_argument("results_dir", help="output folder of `llmsim run`, `llmsim sweep` or `llmsim plan`")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    import numpy as np

    from llmsim.errors import UserError, atomic_folder
    from llmsim.report import ResultsDir, write_report

    folder = Path(args.results_dir)
    # the new report files are written into a hard-linked copy of the folder that then replaces
    # it, so the folder never mixes an old report with a new trace (docs/reliability.md)
    try:
        results = ResultsDir.load(folder)  # not a results folder, or a broken one: said before copying anything
        with atomic_folder(folder, keep=True) as tmp, np.errstate(all="ignore"):  # (absurd figures: no numpy warnings)
            written = [folder / p.relative_to(tmp) for p in write_report(folder, into=tmp, results=results)]
    except UserError:
        raise
    except KeyError as exc:  # a file edited or swapped (steps.parquet copied over requests.parquet)
        raise UserError(
            f"{folder}: its results lack {exc.args[0]!r}, which every llmsim run writes (a file edited, cut "
            "short, or from another tool); rerun the command that wrote the folder"
        ) from None
    except (TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        # a figure of another kind than llmsim writes there (text for a number, a list for a section):
        # the folder's integrity checks passed, so a file was edited, not cut short or mixed
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(
            f"{folder}: a figure in its files is not of the kind llmsim writes ({type(exc).__name__}: {first[:160]}); "
            "a file was edited or comes from another tool: rerun the command that wrote the folder"
        ) from None
    if not args.quiet:
        print("wrote: " + ", ".join(str(p) for p in written))
    return 0
