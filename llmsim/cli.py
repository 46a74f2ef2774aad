"""Command line: ``llmsim <command>``. Each command lives in ``llmsim/commands/<name>.py`` and
exposes ``add_parser(subparsers)``; a ``UserError`` anywhere becomes one message and exit 2."""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
from collections.abc import Iterator

from llmsim.errors import InvariantError, Terminated, UserError, forget_outputs, interrupted_message, test_pause

# Command modules, in the order `llmsim --help` lists them.
COMMANDS = [
    "run",
    "bench",
    "hardware",
    "models",
    "sweep",
    "roofline",
    "calibrate",
    "validate",
    "plan",
    "report",
    "twin",
]


def version() -> str:
    """The installed distribution's version; from a source tree that was never installed, the
    version pyproject.toml declares (the one place it is written)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("llmsim")
    except PackageNotFoundError:
        return _pyproject_version()


def _pyproject_version() -> str:
    import re
    from pathlib import Path

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    # a regex, not tomllib: tomllib is Python 3.11+ and the project supports 3.10
    found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M) if pyproject.exists() else None
    return found.group(1) if found else "unknown"


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked (argparse's own action needs the string up front,
    which would cost every start-up a metadata lookup)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"llmsim {version()}")
        parser.exit(0)


class _Parser(argparse.ArgumentParser):
    """argparse, with a command-line mistake (``--tp abc``, a missing argument) reported like any
    other user error: one ``llmsim: error:`` line and exit 2, not the usage block argparse prints.
    Subcommand parsers are of this class too (``add_subparsers`` builds them with the parent's)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        where = "" if self.prog == "llmsim" else f"{self.prog}: "  # (the message starts "llmsim: error:")
        hint = f"see `{self.prog} --help`"
        if message.endswith("expected one argument"):  # (argparse reads "--x '--seed'" as two flags)
            flag = message.split()[1].rstrip(":") if message.startswith("argument ") else "--flag"
            hint = f"a value that starts with '-' and has no space is read as a flag: write {flag}='...'; {hint}"
        raise UserError(f"{where}{message} ({hint})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="llmsim", description="Simulate LLM inference serving on real hardware.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"llmsim.commands.{name}").add_parser(sub)
    return parser


def _unusable_path(exc: BaseException) -> str | None:
    """The message for a path no command can use: a name past the file system's limits or a
    symbolic-link loop (OSError ENAMETOOLONG / ELOOP; pathlib's RuntimeError for a loop); None
    for anything else. Output folders are written whole or not at all, so nothing is left half done."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):
        name = str(exc.filename or "")
        shown = name if len(name) <= 80 else f"{name[:40]}...{name[-30:]} ({len(name):,} characters)"
        what = "file name too long" if exc.errno == errno.ENAMETOOLONG else "a loop of symbolic links"
        return f"{shown}: {what}; expected a path the system can open"
    if isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from "):
        path = str(exc).removeprefix("Symlink loop from ").strip("'")  # (pathlib quotes the path)
        return f"{path}: a loop of symbolic links; expected a path the system can open"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        raw = sys.argv[1:] if argv is None else argv
        if "--out=" in raw or any(a == "--out" and b == "" for a, b in zip(raw, raw[1:], strict=False)):
            raise UserError("--out '': expected a path")  # (else read as not given, or as '.': unasked)
        args = parser.parse_args(argv)
    except UserError as exc:
        print(f"llmsim: error: {exc}", file=sys.stderr)
        return 2
    forget_outputs()
    try:
        with sigterm_raises():
            code = int(args.func(args) or 0)
            if argv is None:  # (the command itself, not main() called in-process: a test, a notebook)
                _quiet_teardown()
                test_pause("exit", 2.0)  # (signals ignored: the pause runs its course)
            return code
    except UserError as exc:
        print(f"llmsim: error: {exc}", file=sys.stderr)
        return 2
    except InvariantError as exc:
        print(f"llmsim: INVARIANT VIOLATED (a bug in llmsim, please report it): {exc}", file=sys.stderr)
        return 3
    except MemoryError:  # (output folders being written are left as they were, as on an interrupt)
        print(
            "llmsim: error: ran out of memory; simulate fewer requests or a shorter window (a run takes "
            "about 1.6 KB a request), keep fewer step rows (output.steps: sample or none; a run logs tens of "
            "steps a request, ~300 bytes each at peak), or give the process more memory",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:  # `llmsim ... | head`: the reader left; not an error
        # (before OSError, its base class.) The process's own stdout is pointed at /dev/null so
        # that the interpreter's flush at exit does not fail on the closed pipe again; not where
        # main() runs inside another program (a notebook's stdout has no file descriptor)
        if sys.stdout is sys.__stdout__:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (OSError, RuntimeError) as exc:  # a path the system cannot even look at
        why = _unusable_path(exc)
        if why is None:
            raise
        print(f"llmsim: error: {why}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # SIGINT; output folders being written are left as they were
        print(f"llmsim: {interrupted_message()}", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated:  # SIGTERM (kill, a scheduler's timeout): the same clean stop
        print(f"llmsim: {interrupted_message()}", file=sys.stderr)
        return 128 + signal.SIGTERM


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def _quiet_teardown() -> None:
    """The command is done and has said what it wrote: a Ctrl-C or SIGTERM from here on would only
    cut the interpreter's teardown, which the default handlers it restores there ended with exit
    130 and no word, after complete results (hostile round 5). Ignored instead."""
    with contextlib.suppress(ValueError):  # (not the main thread)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` (as SIGINT raises KeyboardInterrupt), so temporary files and
    folders are cleaned up. Restored afterwards: ``main`` is also called in-process (tests, notebooks).
    Only the main thread may set handlers; elsewhere SIGTERM keeps its default."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise_terminated:  # (not one _quiet_teardown set since)
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
