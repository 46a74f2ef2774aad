"""Loaders for real request traces: Azure LLM 2023, Mooncake FAST'25, BurstGPT, LLMServingSim /
vLLM-bench JSONL with token ids, and a generic format (with optional prompt identity columns).

Every loader names the file and row of any problem. Formats and licences: docs/workloads.md and
data/traces/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.errors import UserError
from llmsim.workload.base import Workload
from llmsim.workload.identity import DEFAULT_HASH_BLOCK_TOKENS, segment_block_ids, segment_key, token_block_ids


def _read_csv(path: Path, required: list[str]) -> pd.DataFrame:
    if not path.exists():
        raise UserError(f"{path}: trace file not found")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a readable CSV: {str(exc).splitlines()[0]}") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {missing}; found {list(df.columns)}")
    if df.empty:
        raise UserError(f"{path}: the trace has no rows")
    return df


def _ints(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    values = pd.to_numeric(df[col], errors="coerce")
    bad = values.isna() | (values != values.round())
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(f"{path}: row {row + 2}: column {col!r}: expected a whole number, got {df[col].iloc[row]!r}")
    out = values.to_numpy(dtype=np.int64)
    neg = np.flatnonzero(out < 0)
    if len(neg):
        raise UserError(f"{path}: row {int(neg[0]) + 2}: column {col!r}: must be >= 0, got {out[neg[0]]}")
    return out


def _check_sorted(t: np.ndarray, path: Path, line_offset: int) -> None:
    bad = np.flatnonzero(np.diff(t) < 0)
    if len(bad):
        i = int(bad[0]) + 1
        raise UserError(f"{path}: row {i + line_offset}: timestamps are not sorted ({t[i]} after {t[i - 1]})")


def load_azure(path: Path) -> Workload:
    """Azure LLM inference trace 2023: TIMESTAMP (text), ContextTokens, GeneratedTokens."""
    df = _read_csv(path, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    ts = pd.to_datetime(df["TIMESTAMP"], errors="coerce")
    if ts.isna().any():
        row = int(np.flatnonzero(ts.isna().to_numpy())[0])
        raise UserError(f"{path}: row {row + 2}: TIMESTAMP {df['TIMESTAMP'].iloc[row]!r} is not a date-time")
    t = (ts - ts.iloc[0]).dt.total_seconds().to_numpy()
    _check_sorted(t, path, 2)
    return Workload(t, _ints(df, "ContextTokens", path), _ints(df, "GeneratedTokens", path), source=str(path))


def load_burstgpt(path: Path, drop_failed: bool = True) -> Workload:
    """BurstGPT: Timestamp (s), Model, Request tokens, Response tokens, ... Failed rows (0 response) dropped."""
    df = _read_csv(path, ["Timestamp", "Request tokens", "Response tokens"])
    t = pd.to_numeric(df["Timestamp"], errors="coerce")
    if t.isna().any():
        row = int(np.flatnonzero(t.isna().to_numpy())[0])
        raise UserError(f"{path}: row {row + 2}: Timestamp must be a number of seconds")
    prompt, out = _ints(df, "Request tokens", path), _ints(df, "Response tokens", path)
    t = t.to_numpy(dtype=np.float64)
    _check_sorted(t, path, 2)
    keep = (out > 0) & (prompt > 0) if drop_failed else prompt > 0
    klass = df["Model"].astype(str).to_numpy(dtype=object)[keep] if "Model" in df.columns else None
    t = t[keep]
    return Workload(
        t - t[0], prompt[keep], out[keep], klass=klass, source=str(path), meta={"dropped_failed": int((~keep).sum())}
    )


def load_mooncake(path: Path) -> Workload:
    """Mooncake FAST'25 JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token blocks)."""
    if not path.exists():
        raise UserError(f"{path}: trace file not found")
    t, p, o, hashes = [], [], [], []
    with path.open() as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                t.append(float(row["timestamp"]) / 1000.0)
                p.append(int(row["input_length"]))
                o.append(int(row["output_length"]))
                hashes.append([int(h) for h in row.get("hash_ids", [])])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise UserError(f"{path}: line {line_no}: bad Mooncake record ({type(exc).__name__}: {exc})") from None
    if not t:
        raise UserError(f"{path}: the trace has no rows")
    arr = np.asarray(t)
    _check_sorted(arr, path, 1)
    return Workload(
        arr - arr[0], np.asarray(p), np.asarray(o), block_hashes=hashes, hash_block_tokens=512, source=str(path)
    )


def load_generic(path: Path, hash_block_tokens: int = DEFAULT_HASH_BLOCK_TOKENS) -> Workload:
    """Generic CSV or JSONL with ``arrival_s, prompt_tokens, output_tokens`` and optional ``class``,
    ``prompt_id``, ``prefix_group`` and ``prefix_tokens`` (prompt identity, see ``_identity``)."""
    if path.suffix == ".jsonl":
        if not path.exists():
            raise UserError(f"{path}: trace file not found")
        try:
            df = pd.read_json(path, lines=True)
        except ValueError as exc:
            raise UserError(f"{path}: not valid JSON lines: {exc}") from None
        missing = [c for c in ("arrival_s", "prompt_tokens", "output_tokens") if c not in df.columns]
        if missing or df.empty:
            raise UserError(f"{path}: missing field(s) {missing or ['(no rows)']}")
    else:
        df = _read_csv(path, ["arrival_s", "prompt_tokens", "output_tokens"])
    t = pd.to_numeric(df["arrival_s"], errors="coerce")
    if t.isna().any():
        row = int(np.flatnonzero(t.isna().to_numpy())[0])
        raise UserError(
            f"{path}: row {row + 2}: arrival_s must be a number of seconds, got {df['arrival_s'].iloc[row]!r}"
        )
    t = t.to_numpy(dtype=np.float64)
    if (t < 0).any():
        row = int(np.flatnonzero(t < 0)[0])
        raise UserError(f"{path}: row {row + 2}: arrival_s must be >= 0, got {t[row]}")
    _check_sorted(t, path, 2)
    klass = df["class"].astype(str).to_numpy(dtype=object) if "class" in df.columns else None
    prompt = _ints(df, "prompt_tokens", path)
    hashes = _identity(df, prompt, path, hash_block_tokens)
    return Workload(
        t,
        prompt,
        _ints(df, "output_tokens", path),
        klass=klass,
        block_hashes=hashes,
        hash_block_tokens=hash_block_tokens if hashes is not None else 0,
        source=str(path),
    )


def _labels(df: pd.DataFrame, col: str) -> list[str | None]:
    """A label column as text, empty cells as None (a float-looking id ``7.0`` reads as ``7``)."""
    out: list[str | None] = []
    for v in df[col].tolist():
        if v is None or (isinstance(v, float) and np.isnan(v)) or (isinstance(v, str) and not v.strip()):
            out.append(None)
        elif isinstance(v, float) and v.is_integer():
            out.append(str(int(v)))
        else:
            out.append(str(v).strip())
    return out


def _identity(df: pd.DataFrame, prompt: np.ndarray, path: Path, block_tokens: int) -> list[list[int]] | None:
    """Prefix ids from the optional identity columns, or None when the trace has neither.

    - ``prompt_id``: rows with the same id have the same prompt content (a prompt of n tokens is
      the first n tokens of that id's text, so a shorter prompt is a prefix of a longer one);
    - ``prefix_group`` with ``prefix_tokens``: rows of one group start with the same
      ``prefix_tokens`` tokens (a shared system prompt); the rest is the row's own, or its
      ``prompt_id``'s. An empty cell means "none" for that row."""
    has_prompt, has_group = "prompt_id" in df.columns, "prefix_group" in df.columns
    if not has_prompt and not has_group:
        if "prefix_tokens" in df.columns:
            raise UserError(f"{path}: column 'prefix_tokens' needs a 'prefix_group' column (which prefix)")
        return None
    n = len(prompt)
    prompt_ids = _labels(df, "prompt_id") if has_prompt else [None] * n
    groups = _labels(df, "prefix_group") if has_group else [None] * n
    if has_group and "prefix_tokens" not in df.columns:
        raise UserError(f"{path}: column 'prefix_group' needs a 'prefix_tokens' column (the shared length)")
    pre = np.zeros(n, dtype=np.int64)
    if has_group:
        given = np.array([g is not None for g in groups])
        col = df[["prefix_tokens"]].astype(object)
        col.loc[~given, "prefix_tokens"] = 0  # no group: no shared prefix, whatever the cell says
        pre = _ints(col, "prefix_tokens", path)
        over = np.flatnonzero(pre > prompt)
        if len(over):
            i = int(over[0])
            raise UserError(
                f"{path}: row {i + 2}: prefix_tokens ({pre[i]}) is longer than the prompt ({prompt[i]} tokens)"
            )
    out = []
    for i in range(n):
        segments = []
        if groups[i] is not None and pre[i] > 0:
            segments.append((segment_key("group", groups[i]), int(pre[i])))
        rest = segment_key("prompt", prompt_ids[i]) if prompt_ids[i] is not None else segment_key("row", i)
        segments.append((rest, int(prompt[i] - pre[i])))
        out.append(segment_block_ids(segments, block_tokens))
    return out


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def load_llmservingsim(path: Path, hash_block_tokens: int = DEFAULT_HASH_BLOCK_TOKENS) -> Workload:
    """LLMServingSim / vLLM-bench JSONL: ``input_toks``, ``output_toks``, ``arrival_time_ns`` and
    optional ``input_tok_ids`` (the prompt's token ids, hashed into chained full-block ids as vLLM's
    prefix cache does, then dropped). ``output_tok_ids`` is ignored. Agentic sessions
    (``sub_requests``, each call waiting for the previous one) are not an open-loop trace: refused."""
    if not path.exists():
        raise UserError(f"{path}: trace file not found")
    t: list[float] = []
    p: list[int] = []
    o: list[int] = []
    hashes: list[list[int]] = []
    with_ids = 0
    with path.open() as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}: line {line_no}"
            try:
                row = json.loads(line.strip())
            except json.JSONDecodeError as exc:
                raise UserError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
            if not isinstance(row, dict):
                raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
            if "sub_requests" in row:
                raise UserError(
                    f"{where}: agentic session records (sub_requests) are not supported: each call waits for "
                    "the previous one to finish, which an open-loop trace cannot express"
                )
            missing = [k for k in ("input_toks", "output_toks", "arrival_time_ns") if k not in row]
            if missing:
                raise UserError(f"{where}: missing field(s) {missing}; found {sorted(row)}")
            for key, lo in (("input_toks", 1), ("output_toks", 0)):
                if not _whole(row[key]) or row[key] < lo:
                    raise UserError(f"{where}: {key} must be a whole number >= {lo}, got {row[key]!r}")
            arr = row["arrival_time_ns"]
            if isinstance(arr, bool) or not isinstance(arr, int | float) or not np.isfinite(arr) or arr < 0:
                raise UserError(f"{where}: arrival_time_ns must be a number of nanoseconds >= 0, got {arr!r}")
            t.append(float(arr) / 1e9)
            p.append(row["input_toks"])
            o.append(row["output_toks"])
            ids = row.get("input_tok_ids")
            if ids is None:
                hashes.append([])
                continue
            hashes.append(token_block_ids(_token_ids(ids, row["input_toks"], where), hash_block_tokens))
            with_ids += 1
    if not t:
        raise UserError(f"{path}: the trace has no rows")
    arr_s = np.asarray(t)
    _check_sorted(arr_s, path, 1)
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
    arr = np.asarray(ids) if ids else np.zeros(0, dtype=np.int64)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or (len(arr) and arr.min() < 0):
        for k, v in enumerate(ids):
            if not _whole(v) or v < 0:
                raise UserError(f"{where}: input_tok_ids[{k}]: token ids are whole numbers >= 0, got {v!r}")
        raise UserError(f"{where}: input_tok_ids: token ids out of range")  # pragma: no cover - > int64
    if len(arr) != count:
        raise UserError(f"{where}: input_tok_ids has {len(arr)} ids but input_toks is {count}")
    return arr


def load_trace(path: Path, fmt: str, hash_block_tokens: int = DEFAULT_HASH_BLOCK_TOKENS) -> Workload:
    """Load a trace; formats that carry prompt content (token ids, prompt ids) are hashed into
    chained ids of ``hash_block_tokens``-token blocks (Mooncake's ids are 512-token, by the format)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown trace format {fmt!r}; expected one of {list(FORMATS)}")
    if fmt in _CONTENT_LOADERS:
        w = _CONTENT_LOADERS[fmt](Path(path), hash_block_tokens)
    else:
        w = _LOADERS[fmt](Path(path))
    prompt0 = np.flatnonzero(w.prompt_tokens < 1)
    if len(prompt0):
        raise UserError(f"{path}: request {int(prompt0[0])}: prompt tokens must be >= 1")
    return w


# the formats (scenario.TraceFormat names the same; tests/test_workload_identity.py holds them equal)
_LOADERS = {"azure": load_azure, "mooncake": load_mooncake, "burstgpt": load_burstgpt}
_CONTENT_LOADERS = {"generic": load_generic, "llmservingsim": load_llmservingsim}  # hash at a block size
FORMATS = (*_LOADERS, *_CONTENT_LOADERS)
