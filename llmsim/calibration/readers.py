"""Readers for measured-profile files, all turned into one table of ``Measurement`` rows.

Two formats (docs/profile_format.md): Vidur's published ``mlp.csv`` / ``all_reduce.csv``
(times in milliseconds) and llmsim's generic CSV (times in seconds, one kernel per row).
A row carries the layer shape it was measured at, so a file validates without knowing the model.
"""

from __future__ import annotations

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
    df = pd.read_csv(path)
    missing = [c for c in _MLP_SHAPE_COLS if c not in df.columns]
    if missing:
        raise UserError(f"{path}: Vidur mlp.csv lacks column(s) {missing}")
    out: list[Measurement] = []
    for i, row in enumerate(df.to_dict("records")):
        tp = int(row["num_tensor_parallel_workers"])
        heads, kv_heads, hidden = int(row["n_head"]), int(row["n_kv_head"]), int(row["n_embd"])
        inter, m = int(row["n_expanded_embd"]), int(row["num_tokens"])
        if tp < 1 or heads % tp or hidden % heads or m < 1:
            raise UserError(f"{path}: row {i + 2}: bad shape (tp={tp}, n_head={heads}, n_embd={hidden}, tokens={m})")
        head_dim = hidden // heads
        q, kv = heads * head_dim // tp, max(1, kv_heads // tp) * head_dim
        gated = bool(row.get("use_gated_mlp", True))
        up_n = (2 if gated else 1) * inter // tp
        shapes = {
            "attn_pre_proj": (q + 2 * kv, hidden),
            "attn_post_proj": (hidden, q),
            "mlp_up_proj": (up_n, hidden),
            "mlp_down_proj": (hidden, inter // tp),
        }
        for op, (n, k) in shapes.items():
            ms = row.get(f"time_stats.{op}.median")
            if ms is None or pd.isna(ms):
                continue
            if ms <= 0:
                raise UserError(f"{path}: row {i + 2}: time_stats.{op}.median must be > 0 (got {ms})")
            out.append(Measurement(op, "gemm", ms * 1e-3, tp=tp, m=m, n=n, k=k, source=str(path)))
    return out


def read_vidur_all_reduce(path: Path) -> list[Measurement]:
    """Vidur ``all_reduce.csv``: ``size`` bytes per rank over ``num_workers``; rank 0 rows only.

    Rows spanning several nodes (``num_workers > devices_per_node``) go over the network, not
    NVLink; they are kept with ``op = all_reduce_multinode`` so NVLink fits can leave them out.
    """
    df = pd.read_csv(path)
    for c in ("num_workers", "size", "time_stats.all_reduce.median"):
        if c not in df.columns:
            raise UserError(f"{path}: Vidur all_reduce.csv lacks column {c!r}")
    if "rank" in df.columns:
        df = df[df["rank"] == 0]
    per_node = df["devices_per_node"] if "devices_per_node" in df.columns else df["num_workers"]
    out = []
    for w, size, ms, dpn in zip(
        df["num_workers"], df["size"], df["time_stats.all_reduce.median"], per_node, strict=True
    ):
        op = "all_reduce" if int(w) <= int(dpn) else "all_reduce_multinode"
        out.append(Measurement(op, "comm", float(ms) * 1e-3, bytes=float(size), ranks=int(w), source=str(path)))
    return out


def read_generic(path: Path) -> list[Measurement]:
    """The generic CSV: ``gemm`` rows (m, n, k) and ``comm`` rows (num_workers, bytes) are used."""
    df = pd.read_csv(path)
    out = []
    for i, row in enumerate(df.to_dict("records")):
        where = f"{path}: row {i + 2}"
        kind, op = str(row["kind"]).strip(), str(row["op"]).strip()
        secs = row["seconds"]
        if pd.isna(secs) or float(secs) <= 0:
            raise UserError(f"{where}: seconds must be a number > 0 (got {secs!r})")
        dtype = str(row.get("dtype") or "bf16")
        dtype = "bf16" if dtype == "nan" else dtype
        if kind == "gemm":
            m, n, k = (_int(row, c, where) for c in ("m", "n", "k"))
            tp = int(row["tp"]) if "tp" in row and not pd.isna(row["tp"]) else 1
            out.append(Measurement(op, "gemm", float(secs), tp=tp, m=m, n=n, k=k, dtype=dtype, source=str(path)))
        elif kind == "comm":
            ranks, nbytes = _int(row, "num_workers", where), _int(row, "bytes", where)
            out.append(Measurement(op, "comm", float(secs), bytes=nbytes, ranks=ranks, dtype=dtype, source=str(path)))
        # other kinds (attention, elementwise, copy, layer) are documented but not fitted yet
    if not out:
        raise UserError(f"{path}: no gemm or comm rows to use")
    return out


def _int(row: dict, col: str, where: str) -> int:
    v = row.get(col)
    if v is None or pd.isna(v) or int(v) < 1:
        raise UserError(f"{where}: column {col!r} must be a positive integer (got {v!r})")
    return int(v)


def to_frame(rows: list[Measurement]) -> pd.DataFrame:
    return pd.DataFrame([{f: getattr(r, f) for f in Measurement.__slots__} for r in rows])
