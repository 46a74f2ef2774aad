"""Loaders for real request traces: Azure LLM 2023, Mooncake FAST'25, BurstGPT, and a generic format.

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

FORMATS = ("azure", "mooncake", "burstgpt", "generic")


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


def load_generic(path: Path) -> Workload:
    """Generic CSV or JSONL with ``arrival_s, prompt_tokens, output_tokens`` and optional ``class``."""
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
    return Workload(
        t, _ints(df, "prompt_tokens", path), _ints(df, "output_tokens", path), klass=klass, source=str(path)
    )


def load_trace(path: Path, fmt: str) -> Workload:
    loaders = {"azure": load_azure, "mooncake": load_mooncake, "burstgpt": load_burstgpt, "generic": load_generic}
    if fmt not in loaders:
        raise UserError(f"unknown trace format {fmt!r}; expected one of {list(loaders)}")
    w = loaders[fmt](Path(path))
    prompt0 = np.flatnonzero(w.prompt_tokens < 1)
    if len(prompt0):
        raise UserError(f"{path}: request {int(prompt0[0])}: prompt tokens must be >= 1")
    return w
