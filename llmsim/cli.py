"""Command line: ``llmsim <command>``. Each command lives in ``llmsim/commands/<name>.py`` and
exposes ``add_parser(subparsers)``; a ``UserError`` anywhere becomes one message and exit 2."""

from __future__ import annotations

import argparse
import importlib
import sys

from llmsim.errors import InvariantError, UserError

# Command modules, in the order `llmsim --help` lists them.
COMMANDS = ["run", "hardware", "models", "sweep", "roofline", "calibrate", "validate", "plan", "report", "twin"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmsim", description="Simulate LLM inference serving on real hardware.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"llmsim.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"llmsim: error: {exc}", file=sys.stderr)
        return 2
    except InvariantError as exc:
        print(f"llmsim: INVARIANT VIOLATED (a bug in llmsim, please report it): {exc}", file=sys.stderr)
        return 3
    except BrokenPipeError:  # `llmsim ... | head`: the reader left; not an error
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("llmsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
