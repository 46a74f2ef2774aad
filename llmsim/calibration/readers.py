"""Readers for measured-profile files, all turned into one table of ``Measurement`` rows.

Two formats (docs/profile_format.md): Vidur's published ``mlp.csv`` / ``all_reduce.csv``
(times in milliseconds) and llmsim's generic CSV (times in seconds, one kernel per row).
A row carries the layer shape it was measured at, so a file validates without knowing the model.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from llmsim.errors import UserError

LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
_MLP_SHAPE_COLS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "num_tokens", "num_tensor_parallel_workers")


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured kernel: ``[m, k] @ [k, n]`` GEMM or a collective of ``bytes`` over ``ranks``."""

    op: str
    kind: str  # "gemm" or "comm"
    seconds: float
    tp: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    bytes: float = 0.0
    ranks: int = 0
    dtype: str = "bf16"
    source: str = ""


def read_profile(path: str | Path) -> list[Measurement]:
    """Read any supported file, detecting its format from the header."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: profile file not found")
    try:
        head = pd.read_csv(path, nrows=0)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise UserError(f"{path}: not a readable CSV ({exc})") from None
    cols = set(head.columns)
    if "time_stats.all_reduce.median" in cols:
        return read_vidur_all_reduce(path)
    if any(c.startswith("time_stats.") for c in cols):
        return read_vidur_mlp(path)
    if {"op", "kind", "seconds"} <= cols:
        return read_generic(path)
    raise UserError(
        f"{path}: unknown profile format: expected Vidur columns (time_stats.<op>.median) or the generic "
        "columns op, kind, seconds (docs/profile_format.md)"
    )


def read_vidur_mlp(path: Path) -> list[Measurement]:
    """Vidur ``mlp.csv``: per row one token count and TP degree; four linear ops per row."""
    header, rows = _read_cells(path)
    missing = [c for c in _MLP_SHAPE_COLS if c not in header]
    if missing:
        raise UserError(f"{path}: Vidur mlp.csv lacks column(s) {missing}")
    out: list[Measurement] = []
    for line, row in rows:
        where = f"{path}: row {line}"
        shape = {c: int(_number(row, c, where, whole=True, positive=True)) for c in _MLP_SHAPE_COLS}
        tp, heads, kv_heads = shape["num_tensor_parallel_workers"], shape["n_head"], shape["n_kv_head"]
        hidden, inter, m = shape["n_embd"], shape["n_expanded_embd"], shape["num_tokens"]
        if heads % tp or hidden % heads:
            raise UserError(f"{where}: bad shape (tp={tp}, n_head={heads}, n_embd={hidden}, tokens={m})")
        head_dim = hidden // heads
        q, kv = heads * head_dim // tp, max(1, kv_heads // tp) * head_dim
        up_n = (2 if _flag(row, "use_gated_mlp", where, default=True) else 1) * inter // tp
        shapes = {
            "attn_pre_proj": (q + 2 * kv, hidden),
            "attn_post_proj": (hidden, q),
            "mlp_up_proj": (up_n, hidden),
            "mlp_down_proj": (hidden, inter // tp),
        }
        for op, (n, k) in shapes.items():
            col = f"time_stats.{op}.median"
            ms = _number(row, col, where, positive=True, optional=True)  # an op left unmeasured is blank
            if ms is not None:
                out.append(Measurement(op, "gemm", ms * 1e-3, tp=tp, m=m, n=n, k=k, source=str(path)))
    return out


def read_vidur_all_reduce(path: Path) -> list[Measurement]:
    """Vidur ``all_reduce.csv``: ``size`` bytes per rank over ``num_workers``; rank 0 rows only.

    Rows spanning several nodes (``num_workers > devices_per_node``) go over the network, not
    NVLink; they are kept with ``op = all_reduce_multinode`` so NVLink fits can leave them out.
    """
    header, rows = _read_cells(path)
    for c in ("num_workers", "size", "time_stats.all_reduce.median"):
        if c not in header:
            raise UserError(f"{path}: Vidur all_reduce.csv lacks column {c!r}")
    per_node_col = "devices_per_node" if "devices_per_node" in header else "num_workers"
    out = []
    for line, row in rows:
        where = f"{path}: row {line}"
        if "rank" in header and _number(row, "rank", where, whole=True) != 0:
            continue
        w = int(_number(row, "num_workers", where, whole=True, positive=True))
        dpn = int(_number(row, per_node_col, where, whole=True, positive=True))
        size = _number(row, "size", where, positive=True)
        ms = _number(row, "time_stats.all_reduce.median", where, positive=True)
        op = "all_reduce" if w <= dpn else "all_reduce_multinode"
        out.append(Measurement(op, "comm", ms * 1e-3, bytes=size, ranks=w, source=str(path)))
    return out


def read_generic(path: Path) -> list[Measurement]:
    """The generic CSV: ``gemm`` rows (m, n, k) and ``comm`` rows (num_workers, bytes) are used."""
    header, rows = _read_cells(path)
    out = []
    for line, row in rows:
        where = f"{path}: row {line}"
        kind, op = row["kind"].strip(), row["op"].strip()
        secs = _number(row, "seconds", where, positive=True)
        dtype = row.get("dtype", "").strip() or "bf16"
        dtype = "bf16" if dtype == "nan" else dtype
        if kind == "gemm":
            m, n, k = (int(_number(row, c, where, whole=True, positive=True)) for c in ("m", "n", "k"))
            tp = _number(row, "tp", where, whole=True, positive=True, optional=True) or 1
            out.append(Measurement(op, "gemm", secs, tp=int(tp), m=m, n=n, k=k, dtype=dtype, source=str(path)))
        elif kind == "comm":
            ranks = int(_number(row, "num_workers", where, whole=True, positive=True))
            nbytes = _number(row, "bytes", where, whole=True, positive=True)
            out.append(Measurement(op, "comm", secs, bytes=nbytes, ranks=ranks, dtype=dtype, source=str(path)))
        # other kinds (attention, elementwise, copy, layer) are documented but not fitted yet
    if not out:
        raise UserError(f"{path}: no gemm or comm rows to use")
    return out


# ------------------------------------------------------------------ every cell is checked here


def _read_cells(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and ``(file line, {column: raw text})`` per row; the header is line 1.

    Cells stay text (the csv module, no NA or dtype guessing), so ``_number`` sees exactly what
    the file says: pandas turns ``inf`` into a float and a blank into NaN, and reads a row with
    one cell too many as if its first cell were an index, shifting every column."""
    try:
        with path.open(newline="") as f:
            reader = csv.reader(f)
            header = [c.strip() for c in next(reader, [])]
            rows = [(reader.line_num, cells) for cells in reader if any(c.strip() for c in cells)]
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file") from None
    except csv.Error as exc:
        raise UserError(f"{path}: not a readable CSV ({exc})") from None
    if len(set(header)) < len(header):
        twice = sorted({c for c in header if header.count(c) > 1})
        raise UserError(f"{path}: column(s) {twice} appear more than once in the header")
    for line, cells in rows:
        if len(cells) != len(header):
            raise UserError(f"{path}: row {line}: {len(cells)} cells, but the header has {len(header)} columns")
    return header, [(line, dict(zip(header, cells, strict=True))) for line, cells in rows]


def _number(
    row: dict[str, str],
    col: str,
    where: str,
    *,
    whole: bool = False,
    positive: bool = False,
    optional: bool = False,
) -> float:
    """The cell ``row[col]`` as a finite number >= 0 (> 0 with ``positive``, integral with
    ``whole``), else a UserError naming ``where`` (file and row) and the column. A blank cell is
    an error unless ``optional``; then it gives None (typed float for the callers' sake)."""
    text = str(row.get(col, "")).strip()
    if not text:
        if optional:
            return None  # type: ignore[return-value]
        raise UserError(f"{where}: column {col!r}: blank, expected a number")
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{where}: column {col!r}: expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise UserError(f"{where}: column {col!r}: must be a finite number, got {text!r}")
    if value < 0 or (positive and value == 0):
        raise UserError(f"{where}: column {col!r}: must be {'> 0' if positive else '>= 0'}, got {text}")
    if whole and value != int(value):
        raise UserError(f"{where}: column {col!r}: expected a whole number, got {text!r}")
    return value


def _flag(row: dict[str, str], col: str, where: str, default: bool) -> bool:
    """A true/false cell (Vidur writes ``True`` / ``False``); blank or absent gives ``default``."""
    text = str(row.get(col, "")).strip().lower()
    if not text:
        return default
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise UserError(f"{where}: column {col!r}: expected True or False, got {row[col]!r}")


def to_frame(rows: list[Measurement]) -> pd.DataFrame:
    return pd.DataFrame([{f: getattr(r, f) for f in Measurement.__slots__} for r in rows])
