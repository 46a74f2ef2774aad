"""``llmsim report RESULTS_DIR``: the HTML + Markdown report (and Perfetto trace) of a run or plan."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write report.html, report.md and trace.json for a results folder")
    p.add_argument("results_dir", help="output folder of `llmsim run`, `llmsim sweep` or `llmsim plan`")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from llmsim.report import write_report

    written = write_report(args.results_dir)
    if not args.quiet:
        print("wrote: " + ", ".join(str(p) for p in written))
    return 0
