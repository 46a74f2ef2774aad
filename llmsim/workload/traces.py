"""Loaders for real request traces: Azure LLM 2023, Mooncake FAST'25, BurstGPT, LLMServingSim /
vLLM-bench JSONL with token ids, and a generic format (with optional prompt identity columns).

Every loader names the file and row of any problem. Formats and licences: docs/workloads.md and
data/traces/README.md.
"""

from __future__ import annotations

import codecs
import csv
import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.errors import (
    COMPRESSED_MAGIC,
    GZIP_MAGIC,
    NUMBER_TOO_LONG,
    UTF16_BOMS,
    UTF16_TEXT,
    KeyTwice,
    UserError,
    check_input_file,
    cut,
    no_twice,
)
from llmsim.workload.base import Workload, window_rows
from llmsim.workload.identity import DEFAULT_HASH_BLOCK_TOKENS, segment_block_ids, segment_key, token_block_ids
from llmsim.workload.limits import MAX_REQUESTS, MAX_TOKENS_PER_REQUEST, MAX_TRACE_BYTES, as_float, check_prefix_blocks

Window = tuple[float, float | None, int | None]  # a run's (start_s, duration_s, max_requests)


def check_trace_file(path: Path) -> None:
    """A trace path must be a readable, uncompressed file of bounded size: a folder or gzip data
    would otherwise end in a traceback (IsADirectoryError, UnicodeDecodeError) deep inside pandas
    or json, a huge file in exhausted memory."""
    hint = f": {MAX_REQUESTS:,} requests of the widest format; slice it first"
    head = check_input_file(path, "a trace file", MAX_TRACE_BYTES, "a trace", hint)
    if head.startswith(GZIP_MAGIC):
        raise UserError(f"{path}: gzip-compressed data; decompress it first (gunzip)")
    for magic, kind in COMPRESSED_MAGIC.items():  # read by extension, a small file could inflate past memory
        if head.startswith(magic):
            raise UserError(f"{path}: {kind}-compressed data; decompress it first")
    if head[:2] in UTF16_BOMS:  # (else "can't decode byte 0xff" from pandas, or a column name of NULs)
        raise UserError(f"{path}: {UTF16_TEXT if path.suffix != '.jsonl' else 'UTF-16 text; save it in UTF-8'}")
    with path.open("rb") as fh:
        start = fh.read(SNIFF_BYTES)
    if _binary(start):  # pandas would read it as one column named by kilobytes of garbage
        raise UserError(f"{path}: not a text file")


SNIFF_BYTES = 8192  # how much of a trace is looked at to tell binary data from text


def _binary(start: bytes) -> bool:
    """Binary data, not text: a NUL byte (which no text file holds), or a first line (a CSV
    header, a JSONL record: plain ASCII in every format) that is not UTF-8. Text in another
    encoding further down is ``_not_utf8``'s to name, by its line."""
    first = start.split(b"\n", 1)[0]
    try:  # (incremental: a character cut off at the end of the sniffed bytes is no error)
        codecs.getincrementaldecoder("utf-8")().decode(first, final=b"\n" in start)
    except UnicodeDecodeError:
        return True
    return b"\x00" in start


def _not_utf8(path: Path) -> UserError:
    """The error for a text trace with bytes that are not UTF-8 (Latin-1 text, say), naming the
    first such line (a decoder's byte offset counts from its buffer, not the file's start)."""
    with path.open("rb") as fh:
        for no, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return UserError(f"{path}: line {no}: not UTF-8 text (another encoding?); save the file as UTF-8")
    return UserError(f"{path}: not UTF-8 text; save the file as UTF-8")  # pragma: no cover - decoded whole above


def _json_lines(path: Path) -> list[tuple[int, str]]:
    """The non-blank lines of a JSONL file with their physical (1-based) line numbers."""
    check_trace_file(path)
    try:
        with path.open(encoding="utf-8-sig") as fh:  # (a byte-order mark, as the CSV formats take it)
            return [(no, line) for no, line in enumerate(fh, start=1) if line.strip()]
    except UnicodeDecodeError:
        raise _not_utf8(path) from None


def _json_row(line: str, where: str) -> object:
    """One JSONL line's value, or a UserError naming the line (bad JSON, or nested past the
    parser's recursion limit: a line of 50,000 brackets)."""
    try:
        return json.loads(line, object_pairs_hook=no_twice)
    except KeyTwice as exc:  # (json keeps the last of two silently)
        raise UserError(f"{where}: key {exc.args[0]!r} appears twice in one object; which is meant?") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply to read") from None
    except ValueError:  # (after JSONDecodeError, a ValueError too): the integer reader's digit limit
        raise UserError(f"{where}: {NUMBER_TOO_LONG}") from None


def _read_csv(path: Path, required: list[str], skip: str | None = None) -> pd.DataFrame:
    """A CSV trace with its ``required`` columns; ``skip`` names a column not to read (not parsed,
    not kept, not required)."""
    check_trace_file(path)
    usecols = None if skip is None else (lambda c: c != skip)
    try:
        df = pd.read_csv(path, compression=None, usecols=usecols)  # (never by the name's extension: checked above)
    except UnicodeDecodeError:
        raise _not_utf8(path) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        first = str(exc).splitlines()[0]
        fields = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", first)
        if fields:  # (pandas' own words: "Error tokenizing data. C error: Expected 3 fields ...")
            want, line, got = fields.groups()
            raise UserError(
                f"{path}: line {line}: {got} fields where the header names {want} (a stray comma, or a "
                "comma inside an unquoted value?)"
            ) from None
        raise UserError(f"{path}: not a readable CSV: {first}") from None
    if not isinstance(df.index, pd.RangeIndex):  # pandas made the surplus leading fields an index
        raise UserError(
            f"{path}: the rows have more fields than the header's {len(df.columns)} column names; "
            "the columns would shift (a trailing comma, or a column without a name?)"
        )
    header = _header(path)
    twice = sorted(c for c, n in Counter(header).items() if n > 1)  # (count() per column: quadratic)
    if twice:  # pandas would rename the second to "name.1" and the first would rule unannounced
        raise UserError(f"{path}: column(s) {cut(str(twice))} appear more than once in the header")
    missing = [c for c in required if c not in df.columns]
    if missing and header and header[0].lstrip().startswith("{"):  # (JSON lines read as a CSV)
        raise UserError(f"{path}: holds JSON lines, not CSV (the generic format reads JSON lines under a .jsonl name)")
    if missing:
        # (the header cut short: a file of another kind can make it kilobytes long)
        raise UserError(f"{path}: missing column(s) {missing}; found {cut(str(list(df.columns)))}")
    if df.empty:
        raise UserError(f"{path}: the trace has no rows")
    return df


def _header(path: Path) -> list[str]:
    """A CSV trace's column names as its first line gives them (pandas renames repeated ones)."""
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return [c.strip() for c in next(csv.reader([fh.readline(1 << 20)]), [])]


def _where(path: Path, row: int, lines: np.ndarray | None) -> str:
    """File and line of data row ``row``: CSV counts the header as line 1 (``lines`` None), JSONL
    gives each row's physical line."""
    return f"{path}: row {_csv_line(path, row)}" if lines is None else f"{path}: line {int(lines[row])}"


def _csv_line(path: Path, row: int) -> int:
    """The file line of CSV data row ``row`` (from 0): pandas skips blank lines, before the header
    too, so a blank line moves a row down. Read only to name a bad row (a quoted value spanning
    lines is counted as its lines)."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            seen = -2  # (the first line with text is the header)
            for number, line in enumerate(fh, 1):
                if line.strip():
                    seen += 1
                    if seen == row:
                        return number
    except (OSError, UnicodeDecodeError):
        pass
    return row + 2


def _ints(df: pd.DataFrame, col: str, path: Path, lines: np.ndarray | None = None) -> np.ndarray:
    """A token-count column as int64: whole (2.0 is fine, 2.5 is not), finite, within
    0..MAX_TOKENS_PER_REQUEST. Checked before the cast, which would wrap 1e30 to a negative."""
    values = _numbers(df[col], lines)
    bad = values.isna() | (values != values.round()) | ~np.isfinite(values.to_numpy(dtype=np.float64))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        got = _cell_text(df[col].iloc[row], lines)
        raise UserError(f"{_where(path, row, lines)}: column {col!r}: expected a whole number, got {got}")
    neg = np.flatnonzero((values < 0).to_numpy())
    if len(neg):
        row = int(neg[0])
        raise UserError(f"{_where(path, row, lines)}: column {col!r}: must be >= 0, got {df[col].iloc[row]}")
    over = np.flatnonzero((values > MAX_TOKENS_PER_REQUEST).to_numpy())
    if len(over):
        row = int(over[0])
        raise UserError(
            f"{_where(path, row, lines)}: column {col!r}: {df[col].iloc[row]} tokens is over the limit of "
            f"{MAX_TOKENS_PER_REQUEST:,} tokens per request"
        )
    return values.to_numpy(dtype=np.int64)


def _numbers(raw: pd.Series, lines: np.ndarray | None) -> pd.Series:
    """A column as numbers, NaN where a cell is none. In JSONL (``lines`` given) only JSON numbers
    count: ``true`` is not 1 and ``"10"`` not 10 (a CSV's cells are all text, read as numbers). Nor
    in a CSV is a true/false cell, which pandas reads as a boolean (1 or 0): in a column of them, or
    in one a caller has made generic objects (``_identity``'s prefix_tokens)."""
    if raw.dtype == bool or (lines is not None and raw.dtype == object):
        raw = raw.map(lambda v: v if isinstance(v, int | float) and not isinstance(v, bool) else np.nan)
    elif raw.dtype == object:
        raw = raw.map(lambda v: np.nan if isinstance(v, bool | np.bool_) else v)
    try:
        return pd.to_numeric(raw, errors="coerce")
    except OverflowError:  # an integer past int64 and float (10**400): pandas raises despite "coerce"
        return raw.map(_as_float).astype(np.float64)


def _cell_text(cell: object, lines: np.ndarray | None) -> str:
    """A bad cell as a message shows it: a CSV's missing one (blank, NA, a row short of columns:
    pandas reads each as NaN) in words, any other as its value."""
    if lines is None and not isinstance(cell, str) and pd.isna(cell):
        return "an empty or NA cell (or a row short of columns)"
    return repr(_plain(cell))


def _as_float(v: object) -> float:
    """A cell as a float: NaN where it is no number, +-inf past the float range (``as_float``)."""
    try:
        return as_float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _plain(v: object) -> object:
    """A cell as plain Python, so a message shows ``10.5``, not ``np.float64(10.5)``; a number of
    more than 30 digits as its first digits and length."""
    v = v.item() if isinstance(v, np.generic) else v
    text = str(v)
    if len(text) > 30 and text.lstrip("-").isdigit():
        return _Shown(f"{text[:12]}... ({len(text.lstrip('-'))} digits)")
    return v


class _Shown(str):
    """Text a message shows as it is (its repr is the text)."""

    def __repr__(self) -> str:
        return str(self)


def _check_times(t: np.ndarray, path: Path, lines: np.ndarray | None, what: str) -> None:
    """Timestamps finite (NaN would fall out of every time window, silently) and >= 0."""
    bad = np.flatnonzero(~np.isfinite(t) | (t < 0))
    if len(bad):
        row = int(bad[0])
        raise UserError(f"{_where(path, row, lines)}: {what} must be a finite number >= 0, got {t[row]}")


def _check_sorted(t: np.ndarray, path: Path, lines: np.ndarray | None) -> None:
    bad = np.flatnonzero(np.diff(t) < 0)
    if len(bad):
        i = int(bad[0]) + 1
        raise UserError(f"{_where(path, i, lines)}: timestamps are not sorted ({t[i]} after {t[i - 1]})")


def _count(v: object, key: str, lo: int, where: str) -> int:
    """One token count of a JSON record: a whole number (2.0 is fine), lo..MAX_TOKENS_PER_REQUEST."""
    whole = _whole(v) or (isinstance(v, float) and v.is_integer())
    if not whole or v < lo:  # type: ignore[operator]
        raise UserError(f"{where}: {key} must be a whole number >= {lo}, got {v!r}")
    if v > MAX_TOKENS_PER_REQUEST:  # type: ignore[operator]
        raise UserError(
            f"{where}: {key}: {v} tokens is over the limit of {MAX_TOKENS_PER_REQUEST:,} tokens per request"
        )
    return int(v)  # type: ignore[call-overload]


def _date_times(col: pd.Series) -> pd.Series:
    """Text date-times as UTC timestamps, NaT where a cell is none. The column's format is inferred
    from its first cell; cells in another form (ISO ``T...Z`` after plain ones) are parsed one by
    one. Naive times are taken as UTC: only their differences count. pandas' "could not infer
    format" warning is not printed (it would pass ``--quiet``): the values are checked after."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ts = pd.to_datetime(col, errors="coerce", utc=True)
        if ts.isna().any():
            ts = pd.to_datetime(col, errors="coerce", utc=True, format="mixed")
    return ts


def load_azure(path: Path) -> Workload:
    """Azure LLM inference trace 2023: TIMESTAMP (text), ContextTokens, GeneratedTokens."""
    df = _read_csv(path, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    if pd.api.types.is_numeric_dtype(df["TIMESTAMP"]):  # pandas would read the numbers as nanoseconds
        raise UserError(
            f"{path}: column 'TIMESTAMP': numbers ({df['TIMESTAMP'].iloc[0]}, ...) where the Azure trace gives "
            "date-times (2023-11-16 18:15:46.6805900); for seconds use format: generic (arrival_s)"
        )
    ts = _date_times(df["TIMESTAMP"])
    if ts.isna().any():
        row = int(np.flatnonzero(ts.isna().to_numpy())[0])
        value = df["TIMESTAMP"].iloc[row]
        shown = "empty" if pd.isna(value) else repr(str(value))
        raise UserError(f"{_where(path, row, None)}: TIMESTAMP {shown} is not a date-time")
    t = (ts - ts.iloc[0]).dt.total_seconds().to_numpy()
    _check_sorted(t, path, None)
    return Workload(t, _ints(df, "ContextTokens", path), _ints(df, "GeneratedTokens", path), source=str(path))


def load_burstgpt(path: Path, drop_failed: bool = True) -> Workload:
    """BurstGPT: Timestamp (s), Model, Request tokens, Response tokens, ... Failed rows (0 response
    tokens, BurstGPT's mark of a failed call) dropped, and rows with 0 request tokens (no prompt to
    serve); ``meta["dropped_failed"]`` counts both."""
    df = _read_csv(path, ["Timestamp", "Request tokens", "Response tokens"])
    t = pd.to_numeric(df["Timestamp"], errors="coerce")
    if t.isna().any():
        row = int(np.flatnonzero(t.isna().to_numpy())[0])
        raise UserError(f"{_where(path, row, None)}: Timestamp must be a number of seconds")
    prompt, out = _ints(df, "Request tokens", path), _ints(df, "Response tokens", path)
    t = t.to_numpy(dtype=np.float64)
    _check_times(t, path, None, "Timestamp")
    _check_sorted(t, path, None)
    keep = (out > 0) & (prompt > 0) if drop_failed else prompt > 0
    klass = df["Model"].astype(str).to_numpy(dtype=object)[keep] if "Model" in df.columns else None
    if not keep.any():
        raise UserError(
            f"{path}: no requests left: every row has 0 response tokens (a failed request) or 0 request tokens "
            "(no prompt), and those are dropped"
        )
    t = t[keep]
    return Workload(
        t - t[0], prompt[keep], out[keep], klass=klass, source=str(path), meta={"dropped_failed": int((~keep).sum())}
    )


def load_mooncake(path: Path) -> Workload:
    """Mooncake FAST'25 JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token blocks)."""
    t, p, o, hashes, lines = [], [], [], [], []
    for line_no, line in _json_lines(path):
        where = f"{path}: line {line_no}"
        row = _json_row(line, where)
        try:
            ts = float(row["timestamp"])  # type: ignore[index]
            p.append(_count(row["input_length"], "input_length", 0, where))
            o.append(_count(row["output_length"], "output_length", 0, where))
            hashes.append(_hash_ids(row.get("hash_ids", []), p[-1], where))
        except OverflowError:  # a timestamp past the float range
            raise UserError(f"{where}: timestamp {_plain(row['timestamp'])} is past any time in ms") from None  # type: ignore[index]
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{where}: bad Mooncake record ({type(exc).__name__}: {exc})") from None
        t.append(ts / 1000.0)
        lines.append(line_no)
    if not t:
        raise UserError(f"{path}: the trace has no rows")
    arr, at = np.asarray(t), np.asarray(lines)
    _check_times(arr, path, at, "timestamp")
    _check_sorted(arr, path, at)
    return Workload(
        arr - arr[0],
        np.asarray(p),
        np.asarray(o),
        block_hashes=hashes,
        hash_block_tokens=MOONCAKE_BLOCK_TOKENS,
        source=str(path),
    )


MOONCAKE_BLOCK_TOKENS = 512  # tokens per Mooncake hash id (its trace's block size)


def _hash_ids(ids: object, prompt_tokens: int, where: str) -> list[int]:
    """A Mooncake record's ``hash_ids``: one non-negative integer per 512-token block of its prompt
    (at most ceil(input_length / 512)); a float, a negative or a surplus id would name content
    that is not there."""
    if not isinstance(ids, list):
        raise UserError(f"{where}: hash_ids: expected a list of block ids, got {type(ids).__name__}")
    most = -(-prompt_tokens // MOONCAKE_BLOCK_TOKENS)
    if len(ids) > most:
        raise UserError(
            f"{where}: hash_ids: {len(ids):,} ids for a {prompt_tokens}-token prompt, which has {most} blocks "
            f"of {MOONCAKE_BLOCK_TOKENS} tokens"
        )
    for h in ids:
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < 2**63:  # (int64, as prewarm ids)
            raise UserError(f"{where}: hash_ids: expected integer block ids from 0 to 2**63 - 1, got {_plain(h)!r}")
    return ids


def _read_jsonl(path: Path, required: tuple[str, ...]) -> tuple[pd.DataFrame, np.ndarray]:
    """A generic JSONL trace as a frame, with each row's physical line number for messages."""
    records, lines = [], []
    for line_no, line in _json_lines(path):
        row = _json_row(line, f"{path}: line {line_no}")
        if not isinstance(row, dict):
            raise UserError(f"{path}: line {line_no}: expected a JSON object, got {type(row).__name__}")
        missing = [c for c in required if c not in row]
        if missing:
            raise UserError(f"{path}: line {line_no}: missing field(s) {missing}; found {cut(str(sorted(row)))}")
        records.append(row)
        lines.append(line_no)
    if not records:
        raise UserError(f"{path}: the trace has no rows")
    df = pd.DataFrame.from_records(records)
    for col in LABEL_COLUMNS:  # the values as JSON gave them: pandas turns ints beside a null into floats
        if col in df.columns:
            df[col] = pd.Series([r.get(col) for r in records], index=df.index, dtype=object)
    return df, np.asarray(lines)


GENERIC_OPTIONAL = ("class", "prompt_id", "prefix_group", "prefix_tokens", "lora")
LABEL_COLUMNS = ("class", "prompt_id", "prefix_group", "lora")  # names, read by ``_labels``


def _check_near_misses(df: pd.DataFrame, path: Path) -> None:
    """A column the generic format does not read is left alone (a request id, a user), but one a
    letter or two from an optional column it does read (``clas``, ``Prefix_Group``) is a misspelling
    whose identity or class would be lost without a word."""
    import difflib

    for col in df.columns:
        name = str(col)
        if name in GENERIC_OPTIONAL:
            continue
        close = difflib.get_close_matches(name.lower(), GENERIC_OPTIONAL, n=1, cutoff=0.8)
        if close and close[0] not in df.columns:
            raise UserError(f"{path}: column {cut(name, 40)!r} is not read (did you mean {close[0]!r}?)")


def load_generic(
    path: Path, hash_block_tokens: int = DEFAULT_HASH_BLOCK_TOKENS, window: Window | None = None
) -> Workload:
    """Generic CSV or JSONL with ``arrival_s, prompt_tokens, output_tokens`` and optional ``class``,
    ``prompt_id``, ``prefix_group`` and ``prefix_tokens`` (prompt identity, see ``_identity``) and
    ``lora`` (the LoRA adapter a request names, as vLLM's OpenAI server takes it in ``model``; an
    empty cell: the base model; adapters numbered in order of first appearance). ``window``: the
    (start_s, duration_s, max_requests) a run keeps (``slice_and_scale``): only its rows (and the
    first, the clock's origin) get prefix ids, so a slice of a long file is not refused for the
    content ids of rows it drops."""
    columns = ("arrival_s", "prompt_tokens", "output_tokens")
    lines: np.ndarray | None = None  # CSV rows count from the header; JSONL rows are their lines
    if path.suffix == ".jsonl":
        df, lines = _read_jsonl(path, columns)
    else:
        df = _with_text_labels(_read_csv(path, list(columns)), path)
    _check_near_misses(df, path)
    t = _numbers(df["arrival_s"], lines)
    if t.isna().any():
        row = int(np.flatnonzero(t.isna().to_numpy())[0])
        got = _cell_text(df["arrival_s"].iloc[row], lines)
        raise UserError(f"{_where(path, row, lines)}: arrival_s must be a number of seconds, got {got}")
    t = t.to_numpy(dtype=np.float64)
    _check_times(t, path, lines, "arrival_s")
    _check_sorted(t, path, lines)
    klass = None
    if "class" in df.columns:  # (a blank cell or null: no class)
        klass = np.array([v or "" for v in _labels(df, "class", path, lines)], dtype=object)
    prompt = _ints(df, "prompt_tokens", path, lines)
    empty = np.flatnonzero(prompt < 1)
    if len(empty):  # (named by its row here: the workload's own check counts requests from 0)
        raise UserError(f"{_where(path, int(empty[0]), lines)}: column 'prompt_tokens': must be >= 1, got 0")
    rows = None if window is None else np.union1d([0], window_rows(t, *window))
    hashes = _identity(df, prompt, path, hash_block_tokens, lines, rows)
    lora = _adapters(df, path, lines) if "lora" in df.columns else None
    return Workload(
        t,
        prompt,
        _ints(df, "output_tokens", path, lines),
        klass=klass,
        block_hashes=hashes,
        hash_block_tokens=hash_block_tokens if hashes is not None else 0,
        source=str(path),
        lora=lora,
    )


def names_prompts(path: Path) -> bool:
    """Whether a generic trace has prompt identity columns (``ID_COLUMNS``), from its header (a
    JSONL file's first record); True where the file cannot be read (its loader says why)."""
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as fh:
            first = next((line for line in iter(lambda: fh.readline(1 << 20), "") if line.strip()), "")
    except OSError:
        return True
    return any(f'"{c}"' in first if path.suffix == ".jsonl" else c in first for c in ID_COLUMNS)


def _with_text_labels(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """A CSV trace with its name columns (``LABEL_COLUMNS``) read again, in one pass, as the text
    their cells hold: pandas reads "007" as 7, "NA" as missing, and an id past 2**53 beside an empty
    cell as a float that other ids round to (``_read_jsonl`` keeps JSON's values so)."""
    present = [c for c in LABEL_COLUMNS if c in df.columns]
    if present:
        text = pd.read_csv(path, usecols=present, dtype=str, keep_default_na=False, compression=None)
        for col in present:
            df[col] = text[col].astype(object)
    return df


def _adapters(df: pd.DataFrame, path: Path, lines: np.ndarray | None) -> np.ndarray:
    """The ``lora`` column as adapter numbers (-1: the base model), in order of first appearance
    (names read by ``_labels``)."""
    ids: dict[str, int] = {}
    names = _labels(df, "lora", path, lines)
    return np.array([-1 if v is None else ids.setdefault(v, len(ids)) for v in names], dtype=np.int64)


_FLOAT_WRITTEN_INT = re.compile(r"-?\d+\.0+")  # "7.0": an integer id as a float column writes it
# what spreadsheet and R exports write for a missing cell: no id (two rows with an "NA" id would share
# a prompt, cache hits no real run has); a class or an adapter may be called so
MISSING_IDS = frozenset(("NA", "N/A", "n/a", "NaN", "nan", "NULL", "null", "None", "<NA>", "#N/A"))
ID_COLUMNS = ("prompt_id", "prefix_group")


def _labels(df: pd.DataFrame, col: str, path: Path | None = None, lines: np.ndarray | None = None) -> list[str | None]:
    """A name column (``LABEL_COLUMNS``, as the readers keep it: ``_with_text_labels``,
    ``_read_jsonl``) as text, one rule for CSV and JSONL: a CSV cell as written
    ("007" is not "7", an id of any length exact), a JSONL string as written and a JSONL number as
    its digits; surrounding spaces dropped; an integer written as a float ("7.0", JSON 7.0: a column
    with gaps, as pandas writes it) as the integer; a blank cell or null as None, and in the id
    columns a missing-value mark too (``MISSING_IDS``: "NA" is a class's or an adapter's name).
    A JSONL list, object or true/false is refused, naming the row (its text would be a made-up name)."""
    out: list[str | None] = []
    for i, v in enumerate(df[col].tolist()):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, str | int | float | np.integer | np.floating):
            where = _where(path, i, lines) if path is not None else f"row {i}"
            raise UserError(f"{where}: {col} must be a name or a number, got {_plain(v)!r}")
        if isinstance(v, float | np.floating) and not math.isfinite(v):
            where = _where(path, i, lines) if path is not None else f"row {i}"
            raise UserError(f"{where}: {col} must be a name or a finite number, got {v!r}")
        if isinstance(v, float | np.floating) and float(v).is_integer():
            v = int(v)
        text = str(v).strip()
        if _FLOAT_WRITTEN_INT.fullmatch(text):
            text = text.split(".")[0]
        out.append(None if not text or (col in ID_COLUMNS and text in MISSING_IDS) else text)
    return out


def _identity(
    df: pd.DataFrame,
    prompt: np.ndarray,
    path: Path,
    block_tokens: int,
    lines: np.ndarray | None = None,
    rows: np.ndarray | None = None,
) -> list[list[int]] | None:
    """Prefix ids from the optional identity columns, or None when the trace has neither.

    - ``prompt_id``: rows with the same id have the same prompt content (a prompt of n tokens is
      the first n tokens of that id's text, so a shorter prompt is a prefix of a longer one);
    - ``prefix_group`` with ``prefix_tokens``: rows of one group start with the same
      ``prefix_tokens`` tokens (a shared system prompt); the rest is the row's own, or its
      ``prompt_id``'s. An empty cell means "none" for that row.
    ``rows``: the rows a run keeps (None: all); the others get no ids (a run drops them)."""
    has_prompt, has_group = "prompt_id" in df.columns, "prefix_group" in df.columns
    if not has_prompt and not has_group:
        if "prefix_tokens" in df.columns:
            raise UserError(f"{path}: column 'prefix_tokens' needs a 'prefix_group' column (which prefix)")
        return None
    n = len(prompt)
    prompt_ids = _labels(df, "prompt_id", path, lines) if has_prompt else [None] * n
    groups = _labels(df, "prefix_group", path, lines) if has_group else [None] * n
    if has_group and "prefix_tokens" not in df.columns:
        raise UserError(f"{path}: column 'prefix_group' needs a 'prefix_tokens' column (the shared length)")
    pre = np.zeros(n, dtype=np.int64)
    if has_group:
        given = np.array([g is not None for g in groups])
        col = df[["prefix_tokens"]].astype(object)
        col.loc[~given, "prefix_tokens"] = 0  # no group: no shared prefix, whatever the cell says
        pre = _ints(col, "prefix_tokens", path, lines)
        over = np.flatnonzero(pre > prompt)
        if len(over):
            i = int(over[0])
            raise UserError(
                f"{_where(path, i, lines)}: prefix_tokens ({pre[i]}) is longer than the prompt ({prompt[i]} tokens)"
            )
    kept = np.arange(n) if rows is None else rows
    check_prefix_blocks(prompt[kept], block_tokens, str(path))
    out: list[list[int]] = [[] for _ in range(n)] if rows is not None else []
    for i in kept:
        segments = []
        if groups[i] is not None and pre[i] > 0:
            segments.append((segment_key("group", groups[i]), int(pre[i])))
        rest = segment_key("prompt", prompt_ids[i]) if prompt_ids[i] is not None else segment_key("row", i)
        segments.append((rest, int(prompt[i] - pre[i])))
        ids = segment_block_ids(segments, block_tokens)
        if rows is None:
            out.append(ids)
        else:
            out[i] = ids
    return out


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def load_llmservingsim(path: Path, hash_block_tokens: int = DEFAULT_HASH_BLOCK_TOKENS) -> Workload:
    """LLMServingSim / vLLM-bench JSONL: ``input_toks``, ``output_toks``, ``arrival_time_ns`` and
    optional ``input_tok_ids`` (the prompt's token ids, hashed into chained full-block ids as vLLM's
    prefix cache does, then dropped). ``output_tok_ids`` is ignored. Agentic sessions
    (``sub_requests``, each call waiting for the previous one) are not an open-loop trace: refused."""
    t: list[float] = []
    p: list[int] = []
    o: list[int] = []
    hashes: list[list[int]] = []
    lines: list[int] = []
    with_ids = 0
    fractional = False  # (an arrival_time_ns with a fraction: seconds, most likely)
    for line_no, line in _json_lines(path):
        where = f"{path}: line {line_no}"
        row = _json_row(line.strip(), where)
        if not isinstance(row, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
        if "sub_requests" in row:
            raise UserError(
                f"{where}: agentic session records (sub_requests) are not supported: each call waits for "
                "the previous one to finish, which an open-loop trace cannot express"
            )
        missing = [k for k in ("input_toks", "output_toks", "arrival_time_ns") if k not in row]
        if missing:
            raise UserError(f"{where}: missing field(s) {missing}; found {cut(str(sorted(row)))}")
        n_in = _count(row["input_toks"], "input_toks", 1, where)
        n_out = _count(row["output_toks"], "output_toks", 0, where)
        arr = row["arrival_time_ns"]
        if isinstance(arr, bool) or not isinstance(arr, int | float) or not math.isfinite(_as_float(arr)) or arr < 0:
            raise UserError(f"{where}: arrival_time_ns must be a number of nanoseconds >= 0, got {_plain(arr)!r}")
        t.append(float(arr) / 1e9)
        fractional = fractional or arr != int(arr)
        p.append(n_in)
        o.append(n_out)
        lines.append(line_no)
        ids = row.get("input_tok_ids")
        if ids is None:
            hashes.append([])
            continue
        hashes.append(token_block_ids(_token_ids(ids, n_in, where), hash_block_tokens))
        with_ids += 1
    if not t:
        raise UserError(f"{path}: the trace has no rows")
    arr_s = np.asarray(t)
    _check_sorted(arr_s, path, np.asarray(lines))
    span_ns = (arr_s[-1] - arr_s[0]) * 1e9
    # nanoseconds are whole, and no client sends a request a microsecond (all at once: no gap at all)
    if fractional or 0 < span_ns < 1e3 * (len(t) - 1):
        why = "a fraction of a nanosecond" if fractional else f"{span_ns / (len(t) - 1):.3g} ns apart on average"
        raise UserError(
            f"{path}: arrival_time_ns: requests arrive {why}; the field is nanoseconds: are the times seconds (x 1e9)?"
        )
    return Workload(
        arr_s,
        np.asarray(p),
        np.asarray(o),
        block_hashes=hashes if with_ids else None,
        hash_block_tokens=hash_block_tokens if with_ids else 0,
        source=str(path),
        meta={"requests_with_token_ids": with_ids},
    )


def _token_ids(ids: object, count: int, where: str) -> np.ndarray:
    """A prompt's token ids as int64, or a UserError naming the first bad one."""
    if not isinstance(ids, list):
        raise UserError(f"{where}: input_tok_ids must be a list of token ids, got {type(ids).__name__}")
    try:
        arr = np.asarray(ids) if ids else np.zeros(0, dtype=np.int64)
    except (ValueError, TypeError):  # a ragged nesting numpy cannot shape: the loop below names it
        arr = np.zeros((0, 0))
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or (len(arr) and arr.min() < 0):
        for k, v in enumerate(ids):
            if not _whole(v) or v < 0:
                raise UserError(f"{where}: input_tok_ids[{k}]: token ids are whole numbers >= 0, got {v!r}")
        raise UserError(f"{where}: input_tok_ids: token ids out of range")  # pragma: no cover - > int64
    if len(arr) != count:
        raise UserError(f"{where}: input_tok_ids has {len(arr)} ids but input_toks is {count}")
    return arr


def load_trace(
    path: Path, fmt: str, hash_block_tokens: int = DEFAULT_HASH_BLOCK_TOKENS, window: Window | None = None
) -> Workload:
    """Load a trace; formats that carry prompt content (token ids, prompt ids) are hashed into
    chained ids of ``hash_block_tokens``-token blocks (Mooncake's ids are 512-token, by the format);
    a generic trace's prompt ids only over the ``window`` a run keeps (``load_generic``)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown trace format {fmt!r}; expected one of {list(FORMATS)}")
    if fmt == "generic":
        w = load_generic(Path(path), hash_block_tokens, window)
    elif fmt in _CONTENT_LOADERS:
        w = _CONTENT_LOADERS[fmt](Path(path), hash_block_tokens)
    else:
        w = _LOADERS[fmt](Path(path))
    _check_lengths(path, w.prompt_tokens)
    return w


def trace_lengths(path: Path, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """A trace's prompt and output token counts, for an empirical length distribution. An Azure
    trace's date-time column is not read: it is not used, and parsing it was a third of the read."""
    if fmt != "azure":
        w = load_trace(path, fmt)
        return w.prompt_tokens, w.output_tokens
    path = Path(path)
    df = _read_csv(path, ["ContextTokens", "GeneratedTokens"], skip="TIMESTAMP")
    prompt, output = _ints(df, "ContextTokens", path), _ints(df, "GeneratedTokens", path)
    _check_lengths(path, prompt)
    return prompt, output


def _check_lengths(path: Path, prompt_tokens: np.ndarray) -> None:
    """Every trace's bounds: at most MAX_REQUESTS requests, each with a prompt."""
    if len(prompt_tokens) > MAX_REQUESTS:  # (a file under MAX_TRACE_BYTES of short rows)
        raise UserError(
            f"{path}: {len(prompt_tokens):,} requests, over the limit of {MAX_REQUESTS:,} per run; slice it first"
        )
    prompt0 = np.flatnonzero(prompt_tokens < 1)
    if len(prompt0):
        raise UserError(f"{path}: request {int(prompt0[0])}: prompt tokens must be >= 1")


# the formats (scenario.TraceFormat names the same; tests/test_workload_identity.py holds them equal)
_LOADERS = {"azure": load_azure, "mooncake": load_mooncake, "burstgpt": load_burstgpt}
_CONTENT_LOADERS = {"generic": load_generic, "llmservingsim": load_llmservingsim}  # hash at a block size
FORMATS = (*_LOADERS, *_CONTENT_LOADERS)
