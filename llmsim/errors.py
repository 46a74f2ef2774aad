"""User-facing errors: one clear message, no traceback, nothing half-written.

Anything a user can get wrong (a YAML key, a trace row, a path) raises ``UserError`` with a
message naming the file, key path or row. The CLI prints it and exits with code 2.
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml


class UserError(Exception):
    """A mistake in the user's input; the message is shown as-is, without a traceback."""


class InvariantError(RuntimeError):
    """The simulation broke one of its own invariants: a bug, reported loudly, never hidden."""


def did_you_mean(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    if not close:
        close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=1, cutoff=0.5)
        close = [c for c in choices if close and c.lower() == close[0]]
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_yaml_file(path: Path) -> object:
    """Read a YAML file safely (no object construction), naming the file in any error."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a YAML file")
    try:
        # the safe loader builds only plain data (never Python objects); libyaml's is 8x faster
        return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, yaml.constructor.ConstructorError):
            raise UserError(f"{path}{where}: refused YAML tag: {problem}; only plain YAML data is read") from None
        raise UserError(f"{path}: malformed YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file") from None


def load_json_object(path: Path, hint: str = "") -> dict:
    """Read a JSON file that must hold one object, naming the file (and ``hint``, the key that
    named it) in any error."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found" + (f" ({hint})" if hint else ""))
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}): {exc.msg}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def pydantic_message(exc: Exception, origin: str, suggestions: dict[str, list[str]] | None = None) -> str:
    """Turn a pydantic ValidationError into one line per problem: ``file: key.path: message``."""
    lines = []
    for err in exc.errors():  # type: ignore[attr-defined]
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            key = str(err["loc"][-1])
            siblings = (suggestions or {}).get(".".join(str(p) for p in err["loc"][:-1]), [])
            msg = f"unknown key {key!r}{did_you_mean(key, siblings)}"
        elif err["type"] == "missing":
            msg = "required key is missing"
        else:
            got = err.get("input")
            if got is not None and not isinstance(got, dict | list):
                msg = f"{msg} (got {got!r})"
        lines.append(f"{origin}: {loc}: {msg}")
    return "\n".join(lines[:8]) + (f"\n... and {len(lines) - 8} more" if len(lines) > 8 else "")


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary name in the same folder, then rename: readers never see half a file."""
    atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` a temporary file in the same folder, then rename it to ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
