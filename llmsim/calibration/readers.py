"""Readers for measured-profile files, all turned into one table of ``Measurement`` rows.

Two formats (docs/profile_format.md): Vidur's published ``mlp.csv`` / ``attention.csv`` /
``all_reduce.csv`` (times in milliseconds) and llmsim's generic CSV (times in seconds, one kernel
per row). A row carries the layer shape it was measured at, so a file validates without knowing
the model. Either may be gzip-compressed under a name ending in ``.gz``.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from llmsim.errors import GZIP_MAGIC, UTF16_BOMS, UTF16_TEXT, UserError, check_input_file, did_you_mean
from llmsim.models import DTYPE_BYTES

if TYPE_CHECKING:
    from llmsim.hardware import HardwareProfile

LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# the elementwise ops a Vidur mlp.csv row times, by the cost model's own names (ops.ELEMENTWISE_OPS)
MLP_ELEMENTWISE_OPS = ("emb", "input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
# the cost model's GEMM ops (llmsim/costmodel/ops.py): the names a generic `gemm` row may carry
GEMM_OPS = (*LINEAR_OPS, "moe_router", "lm_head")
# the generic CSV's kinds and the collectives of a `comm` row (docs/profile_format.md); only
# gemm rows and all_reduce comm rows are fitted and validated, the rest are read past
KINDS = ("gemm", "attention", "elementwise", "copy", "comm", "layer")
COMM_OPS = ("all_reduce", "all_gather", "send_recv")
_MLP_SHAPE_COLS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "num_tokens", "num_tensor_parallel_workers")
# the cost model's attention ops a Vidur attention.csv row measures (llmsim/costmodel/ops.py)
ATTENTION_OPS = ("attention_prefill", "attention_decode")
_ATTN_TIME = {
    "attention_prefill": "time_stats.attn_prefill.median",
    "attention_decode": "time_stats.attn_decode.median",
}
_ATTN_SHAPE_COLS = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size")
_ATTN_COLS = (*_ATTN_SHAPE_COLS, "prefill_chunk_size", "kv_cache_size", "is_prefill")
_GENERIC_COLS = ("op", "kind", "seconds")
# every column the generic CSV names (docs/profile_format.md, section 2): another is a misspelling
# (``dtpye``) whose rows would be read with the column's default, silently (bf16 for an fp8 GEMM)
_GENERIC_ALL = (
    *_GENERIC_COLS,
    *("dtype", "source", "m", "n", "k", "tp", "batch", "q_len", "kv_len", "n_q_heads", "n_kv_heads"),
    *("head_dim", "tokens", "hidden", "bytes", "num_workers", "model"),
)

MAX_PROFILE_BYTES = 256 * 2**20  # Vidur's largest mlp.csv is 1.2 MB; every row is held in memory
MAX_DIM = 2**24  # a GEMM dimension, token count or head count: the bound on a step's tokens
MAX_RANKS = 2**16  # TP degree or all-reduce ranks
MAX_MESSAGE_BYTES = 2.0**40  # one all-reduce's bytes per rank (1 TiB)
# one kernel's median time: 1 ns (below any launch) to an hour; outside it the unit is wrong
SECONDS = (1e-9, 3600.0)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured kernel: ``[m, k] @ [k, n]`` GEMM, a collective of ``bytes`` over ``ranks``, or
    an attention kernel over ``batch`` sequences of ``m`` new tokens each after ``kv`` cached ones
    (prefill: ``m`` = the chunk; decode: ``m`` = 1), with the model's ``heads`` / ``kv_heads`` of
    ``head_dim`` split over ``tp`` GPUs."""

    op: str
    kind: str  # "gemm", "comm" or "attention"
    seconds: float
    tp: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    bytes: float = 0.0
    ranks: int = 0
    dtype: str = "bf16"
    source: str = ""
    line: int = 0  # the file's line (header = 1), for messages about the row
    batch: int = 0
    kv: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    gated: bool = True  # an elementwise row's model: a gated (SwiGLU) MLP


def read_profile(path: str | Path) -> list[Measurement]:
    """Read any supported file, detecting its format from the header."""
    path = Path(path)
    _check_file(path)
    header, _ = _read_cells(path, header_only=True)
    cols = set(header)
    if "time_stats.all_reduce.median" in cols:
        return read_vidur_all_reduce(path)
    if cols & set(_ATTN_TIME.values()):
        return read_vidur_attention(path)
    if any(c.startswith("time_stats.") for c in cols):
        return read_vidur_mlp(path)
    if cols & set(_GENERIC_COLS):  # meant as the generic CSV: say which of its columns is missing
        missing = [c for c in _GENERIC_COLS if c not in cols]
        if missing:
            hints = "".join(did_you_mean(c, header) for c in missing)
            raise UserError(
                f"{path}: generic profile CSV lacks column(s) {missing}{hints}; it needs op, kind and "
                f"seconds (docs/profile_format.md), found {_shown(header)}"
            )
        unknown = [c for c in header if c and c not in _GENERIC_ALL]  # (a blank one: an index, a trailing comma)
        if unknown:
            hints = "".join(did_you_mean(c, list(_GENERIC_ALL)) for c in unknown)
            raise UserError(
                f"{path}: generic profile CSV: column(s) {unknown} are not ones the format names{hints}; "
                f"its columns are {', '.join(_GENERIC_ALL)} (docs/profile_format.md)"
            )
        return read_generic(path)
    sep = next((s for s in (";", "\t") if len(header) == 1 and s in header[0]), None)
    if sep is not None:  # a spreadsheet's export in a locale whose list separator is not a comma
        raise UserError(f"{path}: columns separated by {sep!r}; llmsim reads comma-separated CSV")
    raise UserError(
        f"{path}: unknown profile format: expected Vidur columns (time_stats.<op>.median) or the generic "
        "columns op, kind, seconds (docs/profile_format.md)"
    )


def _check_file(path: Path) -> None:
    """A profile must be a readable, not absurdly large regular file, gzip-compressed only under a
    ``.gz`` name: anything else would end in a traceback (IsADirectoryError, UnicodeDecodeError)
    or exhaust memory."""
    head = check_input_file(path, "a profile CSV file", MAX_PROFILE_BYTES, "a profile CSV")
    if not head:
        raise UserError(f"{path}: empty file, expected a CSV header row (docs/profile_format.md)")
    gz = path.suffix == ".gz"
    if head.startswith(GZIP_MAGIC) and not gz:
        raise UserError(
            f"{path}: gzip-compressed data under a plain name; decompress it first (gunzip) or name it .csv.gz"
        )
    if gz and not head.startswith(GZIP_MAGIC):
        raise UserError(f"{path}: named .gz but not gzip-compressed data; rename it .csv")
    if gz:
        with _open_text(path, binary=True) as f:
            head = f.read(2)
        if not head:
            raise UserError(f"{path}: empty once decompressed, expected a CSV header row (docs/profile_format.md)")
    if head[:2] in UTF16_BOMS:
        raise UserError(f"{path}: {UTF16_TEXT}")


class _Bounded(io.RawIOBase):
    """A gzip stream cut off at ``MAX_PROFILE_BYTES`` decompressed bytes (a small file can inflate
    to far more than memory holds); past it, reading raises a UserError naming the file."""

    def __init__(self, path: Path) -> None:
        self._path, self._left = path, MAX_PROFILE_BYTES
        self._gz = gzip.open(path, "rb")  # noqa: SIM115 - closed by close(), with the stream it feeds

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[no-untyped-def]  # (a memoryview from the io machinery)
        try:
            data = self._gz.read(min(len(buf), self._left + 1))
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise UserError(f"{self._path}: not readable gzip data ({exc or 'cut short'})") from None
        if len(data) > self._left:
            raise UserError(
                f"{self._path}: more than {MAX_PROFILE_BYTES:,} bytes once decompressed, more than a profile CSV may hold"
            )
        self._left -= len(data)
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._gz.close()
        super().close()


def _open_text(path: Path, binary: bool = False):  # type: ignore[no-untyped-def]
    """The file's text as CSV reads it (``-sig``: Excel's "CSV UTF-8" starts with a BOM), through
    gzip under a ``.gz`` name; ``binary``: its bytes instead."""
    if path.suffix != ".gz":
        return path.open("rb") if binary else path.open(newline="", encoding="utf-8-sig")
    raw = io.BufferedReader(_Bounded(path))
    return raw if binary else io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


def _shown(header: list[str]) -> str:
    """A header for a message: its first columns, quoted."""
    return ", ".join(repr(c) for c in header[:8]) + (f" and {len(header) - 8} more" if len(header) > 8 else "")


def read_vidur_mlp(path: Path) -> list[Measurement]:
    """Vidur ``mlp.csv``: per row one token count and TP degree; four linear ops per row, and the
    elementwise ops (embedding, norms, RoPE, activation, residual add) where the file times them."""
    header, rows = _read_cells(path)
    if not any(f"time_stats.{op}.median" in header for op in LINEAR_OPS):
        # e.g. Vidur's cpu_overheads.csv or send_recv.csv: not kernels calibration fits
        raise UserError(
            f"{path}: a Vidur profile with none of the linear-op columns "
            f"{[f'time_stats.{op}.median' for op in LINEAR_OPS]} nor the attention ones "
            f"{list(_ATTN_TIME.values())}; only mlp.csv, attention.csv and all_reduce.csv are read"
        )
    missing = [c for c in _MLP_SHAPE_COLS if c not in header]
    if missing:
        raise UserError(f"{path}: Vidur mlp.csv lacks column(s) {missing}")
    out: list[Measurement] = []
    for line, row in rows:
        where = f"{path}: row {line}"
        shape = {c: int(_number(row, c, where, whole=True, positive=True, at_most=MAX_DIM)) for c in _MLP_SHAPE_COLS}
        tp, heads, kv_heads = shape["num_tensor_parallel_workers"], shape["n_head"], shape["n_kv_head"]
        hidden, inter, m = shape["n_embd"], shape["n_expanded_embd"], shape["num_tokens"]
        if heads % tp or hidden % heads or inter < tp:  # (each GPU holds a whole share of the MLP)
            raise UserError(
                f"{where}: bad shape (tp={tp}, n_head={heads}, n_embd={hidden}, n_expanded_embd={inter}, tokens={m})"
            )
        head_dim = hidden // heads
        q, kv = heads * head_dim // tp, max(1, kv_heads // tp) * head_dim
        gated = _flag(row, "use_gated_mlp", where, default=True)
        up_n = (2 if gated else 1) * inter // tp
        shapes = {
            "attn_pre_proj": (q + 2 * kv, hidden),
            "attn_post_proj": (hidden, q),
            "mlp_up_proj": (up_n, hidden),
            "mlp_down_proj": (hidden, inter // tp),
        }
        for op, (n, k) in shapes.items():
            col = f"time_stats.{op}.median"
            ms = _seconds(row, col, where, scale=1e-3, optional=True)  # an op left unmeasured is blank
            if ms is not None:
                out.append(Measurement(op, "gemm", ms, tp=tp, m=m, n=n, k=k, source=str(path), line=line))
        for op in MLP_ELEMENTWISE_OPS:  # n: the MLP's intermediate size, k: the hidden size
            ms = _seconds(row, f"time_stats.{op}.median", where, scale=1e-3, optional=True)
            if ms is not None:
                out.append(
                    Measurement(
                        op,
                        "elementwise",
                        ms,
                        tp=tp,
                        m=m,
                        n=inter,
                        k=hidden,
                        heads=heads,
                        kv_heads=kv_heads,
                        head_dim=head_dim,
                        gated=gated,
                        source=str(path),
                        line=line,
                    )
                )
    if not out:
        raise UserError(
            f"{path}: every time_stats.<op>.median of the linear and elementwise ops is blank: nothing measured"
        )
    return out


def read_vidur_attention(path: Path) -> list[Measurement]:
    """Vidur ``attention.csv``: per row one attention kernel of the model shape ``n_q_head,
    n_kv_head, n_embd`` at TP ``num_tensor_parallel_workers``. A prefill row (``is_prefill`` True)
    is ``batch_size`` prompts each attending a chunk of ``prefill_chunk_size`` new tokens after
    ``kv_cache_size`` cached ones (chunked prefill when that is > 0), timed as
    ``time_stats.attn_prefill.median``; a decode row is ``batch_size`` sequences of one new token
    after ``kv_cache_size`` cached ones each (paged KV), ``time_stats.attn_decode.median``.
    Vidur's profiler (vidur/profiling/attention/attention_wrapper.py) builds exactly these shapes."""
    header, rows = _read_cells(path)
    missing = [c for c in _ATTN_COLS if c not in header]
    if missing:
        raise UserError(f"{path}: Vidur attention.csv lacks column(s) {missing}")
    out: list[Measurement] = []
    for line, row in rows:
        where = f"{path}: row {line}"
        shape = {c: int(_number(row, c, where, whole=True, positive=True, at_most=MAX_DIM)) for c in _ATTN_SHAPE_COLS}
        tp, heads, kv_heads = shape["num_tensor_parallel_workers"], shape["n_q_head"], shape["n_kv_head"]
        hidden, batch = shape["n_embd"], shape["batch_size"]
        if heads % tp or hidden % heads or heads % kv_heads:
            raise UserError(
                f"{where}: bad shape (tp={tp}, n_q_head={heads}, n_kv_head={kv_heads}, n_embd={hidden}): "
                "the query heads must split evenly over the TP ranks and the KV heads, and n_embd over the heads"
            )
        prefill = _flag(row, "is_prefill", where, default=None)
        chunk = int(_number(row, "prefill_chunk_size", where, whole=True, at_most=MAX_DIM))
        kv = int(_number(row, "kv_cache_size", where, whole=True, at_most=MAX_DIM))
        if prefill and not chunk:
            raise UserError(f"{where}: column 'prefill_chunk_size': a prefill row needs new tokens (> 0), got 0")
        if not prefill and chunk:
            raise UserError(
                f"{where}: column 'prefill_chunk_size': a decode row (is_prefill False) has no prefill chunk, got {chunk}"
            )
        op = "attention_prefill" if prefill else "attention_decode"
        secs = _seconds(row, _ATTN_TIME[op], where, scale=1e-3)  # the other regime's cells are blank
        out.append(
            Measurement(
                op,
                "attention",
                secs,
                tp=tp,
                m=chunk if prefill else 1,
                batch=batch,
                kv=kv,
                heads=heads,
                kv_heads=kv_heads,
                head_dim=hidden // heads,
                source=str(path),
                line=line,
            )
        )
    if not out:
        raise UserError(f"{path}: a Vidur attention.csv with a header and no rows: nothing measured")
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
        w = _ranks(row, "num_workers", where)
        dpn = int(_number(row, per_node_col, where, whole=True, positive=True, at_most=MAX_RANKS))
        size = _number(row, "size", where, positive=True, at_most=MAX_MESSAGE_BYTES)
        secs = _seconds(row, "time_stats.all_reduce.median", where, scale=1e-3)
        op = "all_reduce" if w <= dpn else "all_reduce_multinode"
        out.append(Measurement(op, "comm", secs, bytes=size, ranks=w, source=str(path), line=line))
    if not out:
        raise UserError(f"{path}: no rank-0 rows: nothing measured")
    return out


def read_generic(path: Path) -> list[Measurement]:
    """The generic CSV: ``gemm`` rows (m, n, k) and ``all_reduce`` ``comm`` rows (num_workers,
    bytes) are used; every row's kind, op and dtype must be ones the format names."""
    header, rows = _read_cells(path)
    out = []
    for line, row in rows:
        where = f"{path}: row {line}"
        kind, op = row["kind"].strip(), row["op"].strip()
        _choice(kind, KINDS, where, "kind")
        if kind == "gemm":
            _choice(op, GEMM_OPS, where, "op", f"a {kind} row's op")
        elif kind == "comm":
            _choice(op, COMM_OPS, where, "op", f"a {kind} row's op")
        secs = _seconds(row, "seconds", where)
        dtype = row.get("dtype", "").strip() or "bf16"
        _choice(dtype, tuple(DTYPE_BYTES), where, "dtype")
        if kind == "gemm":
            m, n, k = (int(_number(row, c, where, whole=True, positive=True, at_most=MAX_DIM)) for c in ("m", "n", "k"))
            tp = _number(row, "tp", where, whole=True, positive=True, optional=True, at_most=MAX_RANKS) or 1
            gemm = Measurement(op, "gemm", secs, tp=int(tp), m=m, n=n, k=k, dtype=dtype, source=str(path), line=line)
            out.append(gemm)
        elif kind == "comm" and op == "all_reduce":
            ranks = _ranks(row, "num_workers", where)
            nbytes = _number(row, "bytes", where, whole=True, positive=True, at_most=MAX_MESSAGE_BYTES)
            comm = Measurement(op, "comm", secs, bytes=nbytes, ranks=ranks, dtype=dtype, source=str(path), line=line)
            out.append(comm)
        # other kinds (attention, elementwise, copy, layer) and collectives are documented but not fitted
        # yet from this format (attention is, from Vidur's attention.csv: read_vidur_attention)
    if not out:
        kinds = sorted({row["kind"].strip() for _, row in rows})
        read_past = (
            f" (rows of kind {', '.join(kinds)} are read past: not fitted yet from this format)" if kinds else ""
        )
        raise UserError(f"{path}: no gemm or all_reduce comm rows to use{read_past}")
    return out


def check_dtypes(rows: list[Measurement], hw: HardwareProfile) -> None:
    """A GEMM measured in fp8, int8, int4 or fp4 needs the device's own peak for that dtype:
    without one the row would be priced at a wider type's rate, silently."""
    for r in rows:
        if r.kind == "gemm" and not hw.computes_in(r.dtype):
            raise UserError(
                f"{r.source}: row {r.line}: column 'dtype': {r.dtype} GEMMs need {r.dtype} matmul units and "
                f"hardware {hw.name!r} has none (peaks for {', '.join(hw.peak_flops)}); is it the device you measured?"
            )


# ------------------------------------------------------------------ every cell is checked here


def _read_cells(path: Path, header_only: bool = False) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and ``(file line, {column: raw text})`` per row; the header is line 1.

    Cells stay text (the csv module, no NA or dtype guessing), so ``_number`` sees exactly what
    the file says: pandas turns ``inf`` into a float and a blank into NaN, and reads a row with
    one cell too many as if its first cell were an index, shifting every column."""
    try:
        with _open_text(path) as f:
            reader = csv.reader(f)
            header = [c.strip() for c in next(reader, [])]
            if header_only:
                return header, []
            rows = [(reader.line_num, cells) for cells in reader if any(c.strip() for c in cells)]
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); is it a binary or compressed file?") from None
    except csv.Error as exc:
        raise UserError(f"{path}: not a readable CSV ({exc})") from None
    if not any(header):
        raise UserError(f"{path}: the first line is blank, expected a CSV header row (docs/profile_format.md)")
    if len(set(header)) < len(header):
        twice = sorted({c for c in header if header.count(c) > 1})
        raise UserError(f"{path}: column(s) {twice} appear more than once in the header")
    for line, cells in rows:
        if [c.strip() for c in cells] == header:  # two files pasted together, each with its header
            raise UserError(f"{path}: row {line} repeats the header; a file holds one header, on line 1")
        if len(cells) != len(header):
            raise UserError(f"{path}: row {line}: {len(cells)} cells, but the header has {len(header)} columns")
    return header, [(line, dict(zip(header, cells, strict=True))) for line, cells in rows]


def _choice(text: str, choices: tuple[str, ...], where: str, col: str, what: str = "") -> None:
    """``text`` must be one of ``choices``: a misspelt kind or op would be read past silently."""
    if text not in choices:
        shown = repr(text) if text else "blank"
        raise UserError(
            f"{where}: column {col!r}: {shown} is not {what or f'a {col}'} llmsim knows"
            f"{did_you_mean(text, list(choices)) if text else ''}; expected one of {', '.join(choices)}"
        )


def _seconds(row: dict[str, str], col: str, where: str, scale: float = 1.0, optional: bool = False) -> float:
    """A kernel's median time in seconds (the cell times ``scale``: Vidur writes milliseconds)."""
    value = _number(row, col, where, positive=True, optional=optional)
    if value is None:
        return None  # type: ignore[return-value]
    lo, hi = SECONDS
    if not lo <= value * scale <= hi:
        unit = "milliseconds" if scale == 1e-3 else "seconds"
        raise UserError(
            f"{where}: column {col!r}: {row[col].strip()} {unit} is outside one kernel's "
            f"{lo / scale:g}..{hi / scale:g}; is the time in {unit}?"
        )
    return value * scale


def _ranks(row: dict[str, str], col: str, where: str) -> int:
    """An all-reduce's rank count: at least 2 (over one rank it moves nothing and takes no time)."""
    ranks = int(_number(row, col, where, whole=True, positive=True, at_most=MAX_RANKS))
    if ranks < 2:
        raise UserError(f"{where}: column {col!r}: an all-reduce needs at least 2 ranks, got {ranks}")
    return ranks


def _number(
    row: dict[str, str],
    col: str,
    where: str,
    *,
    whole: bool = False,
    positive: bool = False,
    optional: bool = False,
    at_most: float | None = None,
) -> float:
    """The cell ``row[col]`` as a finite number >= 0 (> 0 with ``positive``, integral with
    ``whole``, at most ``at_most``), else a UserError naming ``where`` (file and row) and the
    column. A blank cell is an error unless ``optional``; then it gives None (typed float for the
    callers' sake)."""
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
    if at_most is not None and value > at_most:
        raise UserError(f"{where}: column {col!r}: must be at most {at_most:,.0f}, got {text}")
    return value


def _flag(row: dict[str, str], col: str, where: str, default: bool | None) -> bool:
    """A true/false cell (Vidur writes ``True`` / ``False``); blank or absent gives ``default``
    (None: a blank is an error)."""
    text = str(row.get(col, "")).strip().lower()
    if not text:
        if default is None:
            raise UserError(f"{where}: column {col!r}: blank, expected True or False")
        return default
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise UserError(f"{where}: column {col!r}: expected True or False, got {row[col]!r}")


def to_frame(rows: list[Measurement]) -> pd.DataFrame:
    return pd.DataFrame([{f: getattr(r, f) for f in Measurement.__slots__} for r in rows])
