"""What a command shows while it works: progress bars on stderr, stdout under ``--quiet``, and
JSON output that is valid everywhere.

One way to make a bar, so every command behaves alike: shown on stderr only when a person is
watching (stderr is a terminal), never under ``--quiet``; ``LLMSIM_PROGRESS=1`` forces bars on
(a log you want them in), ``LLMSIM_PROGRESS=0`` forces them off. Tests and CI logs stay clean by
default because their stderr is not a terminal. tqdm is imported only when a bar is really shown:
``import llmsim`` stays fast.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

PROGRESS_ENV = "LLMSIM_PROGRESS"


class Bar(Protocol):
    """What commands may call on a bar: tqdm's own methods, so a real tqdm satisfies it."""

    def update(self, n: float = 1) -> object: ...

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None: ...

    def write(self, s: str, file: Any = None, end: str = "\n", nolock: bool = False) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Bar: ...

    def __exit__(self, *exc: object) -> None: ...


class NoBar:
    """A bar that draws nothing; ``write`` still prints, so callers need not ask which bar they hold."""

    def update(self, n: float = 1) -> None:
        return None

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        return None

    def write(self, s: str, file: Any = None, end: str = "\n", nolock: bool = False) -> None:
        print(s, file=file or sys.stdout, end=end, flush=True)

    def close(self) -> None:
        return None

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def shown(enabled: bool = True) -> bool:
    """Whether a bar would be drawn: ``enabled`` (i.e. not ``--quiet``), then the environment
    override, then whether stderr is a terminal."""
    if not enabled:
        return False
    forced = os.environ.get(PROGRESS_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def bar(total: int | None, desc: str, enabled: bool = True, unit: str = "it") -> Bar:
    """A progress bar on stderr over ``total`` steps (``None``: unknown), or a ``NoBar`` when it
    would not be shown (see ``shown``). Use it as a context manager and call ``update()`` per step;
    print per-step lines through ``.write(...)`` so they do not tear a drawn bar."""
    if not shown(enabled):
        return NoBar()
    from tqdm import tqdm  # lazily: tqdm costs start-up time that most runs never need

    # leave=False: a finished bar disappears, so the terminal keeps only the command's output
    return tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr, dynamic_ncols=True)


def printer(quiet: bool) -> Callable[..., None]:
    """``print`` for a command's normal output, or a function that prints nothing under ``--quiet``
    (errors are raised as ``UserError`` and printed by the CLI, so they still appear)."""
    return _silent if quiet else print


def _silent(*args: object, **kwargs: object) -> None:
    return None


def to_json(data: object) -> str:
    """``data`` as strict JSON: NaN and infinities become ``null`` (JSON has no NaN; Python's
    default would write a bare ``NaN`` that other parsers reject), numpy scalars plain numbers."""
    return json.dumps(finite(data), indent=1, allow_nan=False)


def finite(x: object) -> object:
    if isinstance(x, dict):
        return {str(k): finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str | int):
        return x
    if hasattr(x, "item") and callable(x.item):  # a numpy scalar: its Python value
        return finite(x.item())
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return x
