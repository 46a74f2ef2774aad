"""User-facing errors: one clear message, no traceback, nothing half-written.

Anything a user can get wrong (a YAML key, a trace row, a path) raises ``UserError`` with a
message naming the file, key path or row. The CLI prints it and exits with code 2.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import glob
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml


class UserError(Exception):
    """A mistake in the user's input; the message is shown as-is, without a traceback."""


class InvariantError(RuntimeError):
    """The simulation broke one of its own invariants: a bug, reported loudly, never hidden."""


class Terminated(BaseException):
    """SIGTERM, raised where the signal lands (like KeyboardInterrupt for SIGINT), so cleanup
    (``finally``, context managers) runs. A BaseException: ``except Exception`` must not eat it."""

    signum = signal.SIGTERM


# the unit suffixes of llmsim's keys, and what each reads as in a hint
UNITS = {
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "rps": "requests/s",
    "tokens": "tokens",
    "bytes": "bytes",
    "gb": "GB",
    "gbps": "GB/s",
    "w": "watts",
    "usd": "USD",
}


def _unit(key: str) -> str:
    return key.rpartition("_")[2] if "_" in key and key.rpartition("_")[2] in UNITS else ""


def _with_unit(name: str, key: str) -> bool:
    """``key`` is ``name`` with a unit added ('rate' -> 'rate_rps'), one suffix, no more."""
    return key.startswith(f"{name}_") and bool(_unit(key)) and key.count("_") == name.count("_") + 1


FLAG_FOR_NUMBER = "expected a number, got true/false"  # (YAML true read as 1: scenarios and profiles alike)


def did_you_mean(name: str, choices: list[str], cutoff: float = 0.5) -> str:
    """' (did you mean ...?)' for the choice ``name`` likely means, or ''. A key named without its
    unit ('rate' for 'rate_rps') is pointed to the one key with it (difflib would rank a shorter
    look-alike first, 'trace'); a suggestion in another unit than the key typed says its unit
    ('ttft_ms' -> 'ttft_s' (seconds)), since the value must change with it."""
    unit = [c for c in choices if _with_unit(name, c)]
    close = unit[:1] if len(unit) == 1 else difflib.get_close_matches(name, choices, n=1, cutoff=cutoff)
    if not close:
        lower = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=1, cutoff=cutoff)
        close = [c for c in choices if lower and c.lower() == lower[0]]
    if not close:
        return ""
    typed, meant = _unit(name), _unit(close[0])
    note = f" ({UNITS[meant]})" if typed and meant and typed != meant else ""
    return f" (did you mean {close[0]!r}{note}?)"


MAX_YAML_BYTES = 64 * 2**20  # a scenario or profile is kilobytes; a trace goes in its own file
MAX_YAML_NODES = 1_000_000  # values after aliases are expanded (a "billion laughs" stays small on disk)


class _BadKey(yaml.YAMLError):
    def __init__(self, problem: str, mark: object) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _UniqueKeys:
    """A safe loader's mixin refusing a key given twice in one mapping: YAML lets the last win
    silently, so a typo'd second ``rate_rps`` would quietly rule."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden
                    continue
                if not isinstance(key_node, yaml.ScalarNode):  # `? [a, b]`: unhashable, never a key of ours
                    raise _BadKey(
                        "a key must be a plain value (a name or a number), not a list or mapping", key_node.start_mark
                    )
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, str | int | float | bool) and key in first:
                    line = first[key] + 1
                    raise _BadKey(f"key {key!r} given twice (first on line {line})", key_node.start_mark)
                first.setdefault(key, key_node.start_mark.line)
        return super().construct_mapping(node, deep)  # type: ignore[misc]


class _FastLoader(_UniqueKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader (plain data only, 8x faster than PyYAML's)."""


class _ExactLoader(_UniqueKeys, yaml.SafeLoader):
    """PyYAML's own: slower, but its messages name the character and column where libyaml's don't."""


_OCTAL_1_1 = re.compile(r"[-+]?0[0-7_]+$")  # YAML 1.1's octal: 010 is 8


def _yaml_1_2_numbers(loader: type) -> None:
    """Two YAML 1.1 readings YAML 1.2 dropped: ``1:30`` as the base-60 number 90 (``1:30.5`` as
    90.5) and ``010`` as the octal 8. A typo'd time or ratio, or a zero-padded count
    (``replicas: 010`` ran 8 replicas), would become a plausible number. Such a value stays the
    text it is: a number field then reads ``010`` as 10 and refuses ``1:30`` by name."""
    for tag, number in (
        ("tag:yaml.org,2002:int", "construct_yaml_int"),
        ("tag:yaml.org,2002:float", "construct_yaml_float"),
    ):
        as_number = getattr(yaml.SafeLoader, number)

        def construct(self, node, as_number=as_number):  # type: ignore[no-untyped-def]
            text = node.value
            if ":" in text or _OCTAL_1_1.match(text):
                return self.construct_scalar(node)
            return as_number(self, node)

        loader.add_constructor(tag, construct)


_yaml_1_2_numbers(_FastLoader)
_yaml_1_2_numbers(_ExactLoader)


def _expanded_nodes(data: object, limit: int) -> int:
    """How many values ``data`` holds with every alias expanded, counting up to ``limit``."""
    n, todo = 0, [data]
    while todo and n <= limit:
        x = todo.pop()
        n += 1
        if isinstance(x, dict):
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return n


class YAMLTooLarge(yaml.YAMLError):
    """Data past MAX_YAML_NODES values, aliases followed (``problem`` says so; there is no position)."""

    problem = f"holds more than {MAX_YAML_NODES:,} values (each alias counted as what it repeats)"


class YAMLTooDeep(YAMLTooLarge):
    """Lists or mappings nested past what the parser can follow (Python's recursion limit)."""

    problem = "nested too deeply (lists or mappings inside each other hundreds of levels down)"


# Python reads an integer of at most this many digits (sys.get_int_max_str_digits(), 3.11+); past it
# int() raises ValueError wherever text becomes a number (YAML and JSON readers alike)
INT_MAX_DIGITS = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
NUMBER_TOO_LONG = f"a number of more than {INT_MAX_DIGITS:,} digits, which no setting takes"


class YAMLNumberTooLong(YAMLTooLarge):
    """An integer literal past Python's digit limit for reading integers."""

    problem = NUMBER_TOO_LONG


class YAMLBadValue(_BadKey):
    """A scalar its type cannot hold (``2024-02-30`` read as a date, ``!!int x``): told as its
    problem, as a key given twice is (the constructor gives no position)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem, None)


def safe_yaml(text: str) -> object:
    """``text`` as plain YAML data: the safe loader, a key given twice refused (``_BadKey``),
    an alias expansion past ``MAX_YAML_NODES`` refused (``YAMLTooLarge``). Raises yaml.YAMLError."""
    try:
        data = yaml.load(text, Loader=_FastLoader)
    except yaml.YAMLError:
        try:
            yaml.load(text, Loader=_ExactLoader)  # raises the same error, better told
        except RecursionError:  # (libyaml stops nesting at a flow depth; PyYAML recurses)
            raise YAMLTooDeep() from None
        raise
    except RecursionError:  # the constructors recurse once per level of nesting
        raise YAMLTooDeep() from None
    except ValueError as exc:  # a constructor's: an integer past the digit limit, a date like 2024-02-30
        if "Exceeds the limit" in str(exc):
            raise YAMLNumberTooLong() from None
        raise YAMLBadValue(f"not a valid value: {exc}") from None
    if _expanded_nodes(data, MAX_YAML_NODES) > MAX_YAML_NODES:
        raise YAMLTooLarge()
    return data


GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of gzip data
# the byte-order marks of UTF-16 text (little- and big-endian), what a spreadsheet's "Unicode text" export starts with
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
UTF16_TEXT = "UTF-16 text (a spreadsheet's 'Unicode text' export); save it as CSV in UTF-8"
# the first bytes of the other compressed formats pandas would open by a file's extension
COMPRESSED_MAGIC = {b"\xfd7zXZ\x00": "xz", b"BZh": "bzip2", b"PK\x03\x04": "zip", b"\x28\xb5\x2f\xfd": "zstd"}


def check_input_file(path: Path, expected: str, max_bytes: int, holder: str, hint: str = "") -> bytes:
    """Refuse an input path that is missing, a folder, not a regular file (``/dev/zero``), larger
    than ``max_bytes`` or unreadable, naming ``expected`` ("a trace file") and ``holder`` ("a
    trace"); ``hint`` follows the size limit. Returns the file's first six bytes, for the caller's
    format checks (gzip and other compression, UTF-16)."""
    if not path.exists():
        raise UserError(f"{path}: file not found")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected {expected}")
    if not path.is_file():
        raise UserError(f"{path}: not a regular file, expected {expected}")
    size = path.stat().st_size
    if size > max_bytes:
        raise UserError(f"{path}: {size:,} bytes, more than {holder} may hold ({max_bytes:,}{hint})")
    try:
        with path.open("rb") as fh:
            return fh.read(6)
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def load_yaml_file(path: Path) -> object:
    """Read a YAML file safely (no object construction), naming the file in any error: malformed
    YAML, a key given twice, a file or alias expansion past ``MAX_YAML_BYTES`` / ``MAX_YAML_NODES``."""
    path = Path(path)
    check_input_file(path, "a YAML file", MAX_YAML_BYTES, "a YAML file here")
    try:
        return safe_yaml(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UserError(yaml_problem(exc, str(path), where, "malformed YAML")) from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file") from None


def value_text(v: object) -> str:
    """``repr(v)`` for a message, cut to its start and length; an integer past Python's digit limit
    (whose repr raises) by its size alone."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 3.3 * INT_MAX_DIGITS:
        return f"an integer of about {int(v.bit_length() * 0.30103):,} digits"
    return cut(repr(v))


def reason(exc: BaseException, origin: str) -> str:
    """``exc``'s first line without the ``origin`` it starts with, to be named again under another
    (a plan candidate, a sweep point, a flag); an ``origin`` inside a path it names is kept."""
    return str(exc).splitlines()[0].removeprefix(f"{origin}: ") if str(exc) else ""


def cut(text: str, limit: int = 80) -> str:
    """``text`` for a message: as it is up to ``limit`` characters, else its start and its length
    (a pasted 5,000-digit number names itself without filling the screen)."""
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} characters)"


def yaml_value(origin: str, text: str) -> object:
    """A value typed on the command line (``--set KEY=VALUE``, a sweep axis) as plain YAML data,
    read as files are (``safe_yaml``), a mistake named by ``origin``."""
    try:
        return safe_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (column {mark.column + 1})" if mark else ""
        raise UserError(yaml_problem(exc, origin, where, "the value is not valid YAML")) from None


def yaml_problem(exc: yaml.YAMLError, origin: str, where: str, malformed: str) -> str:
    """One line for a YAML error of ``safe_yaml``: ``origin where: problem``, the problem named as
    a refused tag, a duplicate key or too large an expansion, else ``malformed``."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if isinstance(exc, _BadKey | YAMLTooLarge):
        return f"{origin}{where}: {problem}"
    if isinstance(exc, yaml.constructor.ConstructorError):
        return f"{origin}{where}: refused YAML tag: {problem}; only plain YAML data is read"
    return f"{origin}: {malformed}{where}: {problem}"


def load_json_object(path: Path, hint: str = "", unique_keys: bool = True) -> dict:
    """Read a JSON file that must hold one object, naming the file (and ``hint``, the key that
    named it) in any error; ``unique_keys``: refuse a key given twice (``json_text``)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found" + (f" ({hint})" if hint else ""))
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a JSON file" + (f" ({hint})" if hint else ""))
    check_input_file(path, "a JSON file", MAX_YAML_BYTES, "a JSON file here")
    data = json_text(path.read_bytes(), str(path), unique_keys)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


class KeyTwice(Exception):
    pass


def no_twice(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are all different: json keeps the last of two silently, as YAML
    would (which the scenario's loader refuses too)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise KeyTwice(cut(key, 60))
            seen.add(key)
    return out


def json_text(raw: bytes | str, origin: str, unique_keys: bool = True) -> object:
    """JSON data, a mistake named by ``origin``: malformed, not UTF-8 text, or nested past what the
    parser can follow."""
    try:  # (bytes: json would guess UTF-16)
        hook = no_twice if unique_keys else None
        return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw, object_pairs_hook=hook)
    except KeyTwice as exc:
        raise UserError(f"{origin}: key {exc.args[0]!r} appears twice in one object; which is meant?") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{origin}: not valid JSON (line {exc.lineno}): {exc.msg}") from None
    except UnicodeDecodeError:
        raise UserError(f"{origin}: not a text file") from None
    except RecursionError:
        raise UserError(
            f"{origin}: nested too deeply (lists or objects inside each other hundreds of levels down)"
        ) from None
    except ValueError:  # (after JSONDecodeError, a ValueError too): the integer reader's digit limit
        raise UserError(f"{origin}: {NUMBER_TOO_LONG}") from None


def elsewhere_hint(key: str, suggestions: dict[str, list[str]]) -> str:
    """Where a key set in the wrong section belongs (a cluster key at the top level): the top level
    and the first-level sections that have it (case aside), the pools' pair said once; '' when none
    does. Deeper sections (a length distribution, a workload generator) are left out: a key of the
    same name there means something else."""

    def same(k: str) -> bool:  # the key, case aside, or the key with its unit ('rate' -> 'rate_rps')
        return k.lower() == key.lower() or _with_unit(key.lower(), k.lower())

    places = [
        (s, next(k for k in keys if same(k)))
        for s, keys in suggestions.items()
        if s.count(".") <= (1 if s.endswith(("prefill_pool", "decode_pool")) else 0) and any(same(k) for k in keys)
    ]
    pools = [(s, k) for s, k in places if s.endswith(("prefill_pool", "decode_pool"))]
    shown = [f"{s}.{k}" if s else f"{k} at the top level" for s, k in places if (s, k) not in pools][:2]
    if pools:
        s, k = pools[0]
        shown.append(f"a pool's {s.rpartition('.')[0]}.prefill_pool/decode_pool.{k}")
    return " or ".join(shown[:2])


def _unknown_key(loc: tuple, suggestions: dict[str, list[str]], moved: dict[str, str]) -> str:
    """The message for a key no section of this kind has: where it belongs, or what it may mean.
    A close sibling first (the section the user chose is the likelier one), then the key's place
    in another section, then a looser sibling; a dotted key is --set's syntax, not YAML's."""
    key = str(loc[-1])
    parent = ".".join(str(p) for p in loc[:-1])
    siblings = suggestions.get(parent, [])
    shown = cut(key, 60)
    hint = moved.get(".".join(str(p) for p in loc))
    if hint:
        return f"unknown key {shown!r} (set {hint} instead)"
    head = key.split(".")[0]
    if "." in key and head in suggestions.get("", []):
        return f"unknown key {shown!r} (write it nested, {head}: {{{key.partition('.')[2]}: ...}}; dotted keys are for --set)"
    close = did_you_mean(key, siblings, cutoff=0.8)
    if close:
        return f"unknown key {shown!r}{close}"
    hint = elsewhere_hint(key, suggestions)
    return f"unknown key {shown!r}" + (f" (set {hint} instead)" if hint else did_you_mean(key, siblings, cutoff=0.6))


# a tagged union's branch name in an error's key path ("question_len.~spec.min"): not a key
# the user wrote, so the message leaves it out (scenario.TokensOrSpec)
UNION_TAG = "~branch:"


def pydantic_message(
    exc: Exception, origin: str, suggestions: dict[str, list[str]] | None = None, moved: dict[str, str] | None = None
) -> str:
    """Turn a pydantic ValidationError into one line per problem: ``file: key.path: message``.
    ``moved``: keys that live in another section (``key.path`` -> where to set it instead)."""
    lines = []
    for err in exc.errors():  # type: ignore[attr-defined]
        path = tuple(p for p in err["loc"] if not str(p).startswith(UNION_TAG))
        loc = ".".join(str(p) for p in path) or "(top level)"
        loc = cut(loc, 120)  # (a hostile key echoed whole made a 10,000-character line)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = _unknown_key(path, suggestions or {}, moved or {})
        elif err["type"] == "missing":
            msg = "required key is missing"
        else:
            msg = msg.removeprefix("Value error, ")  # (a validator's own sentence, said as the others)
            got = err.get("input")
            if got is not None and not isinstance(got, dict | list):
                msg = f"{msg} (got {value_text(got)})"
        lines.append(f"{loc}: {msg}")
    # one line, as every error: the first few problems, then how many more
    more = f"; and {len(lines) - 4} more" if len(lines) > 4 else ""
    return f"{origin}: " + "; ".join(lines[:4]) + more


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary name in the same folder, then rename: readers never see half a file."""
    atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` a temporary file in the same folder, then rename it to ``path``. The file gets
    the mode a plain ``open(path, "w")`` would (mkstemp's 0600 ignores the umask)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~current_umask())  # after writing: a writer may have recreated it
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process umask. Python can only read it by setting it, so set it back at once."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- whole folders, all or nothing

# output folders being made now: what an interrupt message names as unchanged
_PENDING: list[Path] = []
# set once a folder was swapped into place, so a signal landing afterwards is not "unchanged"
_SWAPPED: list[Path] = []


def temp_sibling(out: Path, kind: str = "tmp") -> Path:
    """``.NAME.tmp-PID`` next to ``out``: same file system (renames are atomic), hidden, and named
    by the process so a leftover of a killed (SIGKILL) run can be told from a live one's."""
    return out.parent / f".{out.name}.{kind}-{os.getpid()}"


@contextlib.contextmanager
def atomic_folder(
    out_dir: Path,
    keep: bool = False,
    owned: Callable[[Path], bool] | None = None,
    carry: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Yield a temporary sibling folder to write into; on success it replaces ``out_dir`` as a
    whole, on any exception (signal, full disk, a bug) it is removed and ``out_dir`` is untouched.

    ``keep``: start from a copy of ``out_dir`` (hard links, so cheap), for commands that add to a
    folder (``llmsim report``). Otherwise the new folder starts empty and the old one is deleted,
    so ``owned(entry)`` must hold for every entry of a non-empty ``out_dir``: refusing to replace
    a folder holding files llmsim did not write beats deleting them (UserError, exit 2). Entries
    for which ``carry(entry)`` holds (another command's folder inside this one, as a sweep's
    ``sweep/`` inside its run's) start the new folder as they were (hard links).

    An OSError (ENOSPC, EFBIG, EACCES, ...) becomes a one-line UserError naming the folder.
    """
    out = Path(out_dir)
    if out.is_symlink():  # replace the folder the link points to, not the link
        out = out.resolve()
    _refuse_the_current_folder(out)
    if owned is not None:
        refuse_foreign_files(out, owned)
    tmp = temp_sibling(out)
    try:
        _PENDING.append(out)
        _make_temp_folder(out, tmp, keep)
        if carry is not None and not keep and out.is_dir():
            for entry in sorted(out.iterdir()):
                if carry(entry):
                    shutil.copytree(entry, tmp / entry.name, symlinks=True, copy_function=_link_or_copy)
        yield tmp
        test_pause("swap")
        if owned is not None:  # a file may have appeared there while we simulated
            refuse_foreign_files(out, owned)
        with signals_deferred():
            _swap_into_place(tmp, out)
            _PENDING.remove(out)  # (left there on failure: the interrupt message names it)
            _SWAPPED.append(out)
    except OSError as exc:
        raise UserError(f"{out}: could not write the results ({os_reason(exc)}); {out} is unchanged") from None
    finally:
        with signals_deferred():  # a second Ctrl-C must not interrupt the cleanup
            shutil.rmtree(tmp, ignore_errors=True)


def _refuse_the_current_folder(out: Path) -> None:
    """The folder is replaced as a whole: from inside it the rename fails (EBUSY) or leaves the
    shell in the old, deleted folder."""
    try:
        here = Path.cwd().resolve()
    except OSError:  # the current folder itself was deleted
        return
    target = out.resolve()
    if here == target or target in here.parents:
        raise UserError(f"{out}: the current folder is inside it, and it is replaced as a whole; run from outside it")


def _make_temp_folder(out: Path, tmp: Path, keep: bool) -> None:
    shutil.rmtree(tmp, ignore_errors=True)  # a leftover of an earlier process with our pid
    _remove_stale_siblings(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if keep and out.is_dir():
        shutil.copytree(out, tmp, symlinks=True, copy_function=_link_or_copy)
    else:
        tmp.mkdir()  # mode 0777 & ~umask, as a plain mkdir (tempfile.mkdtemp would be 0700)


def _remove_stale_siblings(out: Path) -> None:
    """Delete the ``temp_sibling`` folders of runs killed outright (SIGKILL, power loss: no
    cleanup ran), told by a process id that no longer runs. An ``old`` one is a previous result
    set aside during a swap: deleted only where ``out`` itself is there (else it is all that is left)."""
    if not out.parent.is_dir():
        return
    for entry in out.parent.glob(f".{glob.escape(out.name)}.*-*"):
        kind, _, pid = entry.name.rpartition("-")
        if not pid.isdigit() or kind not in (f".{out.name}.tmp", f".{out.name}.old") or _alive(int(pid)):
            continue
        if kind.endswith(".old") and not out.exists():
            continue
        shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Does process ``pid`` run (one of another user counts as running)?"""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link: the file is never rewritten, only the new folder's entries change."""
    try:
        os.link(src, dst)
    except OSError:  # a file system without hard links
        shutil.copy2(src, dst)


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Rename the old folder aside, the new one in, then delete the old one. Runs with signals
    deferred, so ``out`` is never missing when the process is told to stop."""
    if not out.exists():
        os.rename(tmp, out)
        return
    old = temp_sibling(out, "old")
    shutil.rmtree(old, ignore_errors=True)
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)  # put the old results back
        raise
    shutil.rmtree(old, ignore_errors=True)


def results_in(out: Path) -> tuple[str, str] | None:
    """(command, file) of the results ``out`` holds, None for none: a plan (plan.json, beside its
    winner's summary.json), else a run (summary.json), else a sweep (sweep.json). The commands that
    write a folder refuse another's, each naming it."""
    for name, command in (("plan.json", "plan"), ("summary.json", "run"), ("sweep.json", "sweep")):
        if (out / name).is_file():
            return command, name
    return None


def refuse_foreign_files(out: Path, owned: Callable[[Path], bool]) -> None:
    """UserError if ``out`` holds an entry ``owned`` does not claim (or is not a folder)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"output directory {out}: not writable (Not a directory)")
    foreign = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir() if not owned(p))
    plots = out / "report_plots"  # owned when the report wrote it: its figures NN.png and nothing else
    if plots.is_dir() and owned(plots):
        foreign += sorted(f"report_plots/{p.name}" for p in plots.iterdir() if not re.fullmatch(r"\d{2,}\.png", p.name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise UserError(
            f"output directory {out} holds files this command does not write ({shown}); it replaces the whole "
            "folder, so pick a new or empty --out, or move them"
        )


def os_reason(exc: OSError) -> str:
    """``File too large (EFBIG)``: the errno's message and name, or the exception's own text."""
    code = exc.errno
    if not code:  # pyarrow's OSError has no errno, only "... Detail: [errno 27] File too large"
        found = re.search(r"\[errno (\d+)\]", str(exc))
        code = int(found.group(1)) if found else None
    if code:
        return f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block is done (their handlers then run at once)."""
    block = {signal.SIGINT, signal.SIGTERM}
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, block)
    except (AttributeError, OSError, ValueError):  # no POSIX signal masks here
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def output_pending(out: Path) -> Iterator[None]:
    """Mark ``out`` as about to be replaced (while simulating, before ``atomic_folder``), so an
    interrupt says it was left unchanged."""
    _PENDING.append(Path(out))
    yield  # no ``finally``: after an exception the message still needs it (``forget_outputs``)
    _PENDING.remove(Path(out))


def forget_outputs() -> None:
    """Start a command with no pending folders (``main`` may run several commands in-process)."""
    _PENDING.clear()
    _SWAPPED.clear()


def interrupted_message() -> str:
    """What ``llmsim`` says when a signal stops it: which output folders were left unchanged."""
    if _PENDING:
        folders = ", ".join(str(p) for p in dict.fromkeys(_PENDING))
        return f"interrupted: results not written; {folders} unchanged"
    if _SWAPPED:
        return f"interrupted after the results were written: {', '.join(str(p) for p in _SWAPPED)} complete"
    return "interrupted"


def test_pause(point: str, seconds: float = 60.0) -> None:
    """Test hook: with ``LLMSIM_TEST_PAUSE_AT=point``, say so on stderr and sleep ``seconds`` (or
    until a signal's exception cuts it short), so a test can signal the process exactly there
    (tests/test_atomic_results.py). Costs one dict lookup."""
    if os.environ.get("LLMSIM_TEST_PAUSE_AT") == point:
        print(f"llmsim: test pause at {point}", file=sys.stderr, flush=True)
        # in short sleeps: a process-directed signal may land on another thread (pyarrow's, BLAS's),
        # which does not cut the main thread's sleep short, so its handler would wait for the end
        # of one long sleep (the test's 60 s timeout, once, under load); the interpreter runs it
        # between two short ones
        for _ in range(round(seconds / 0.05)):
            time.sleep(0.05)
