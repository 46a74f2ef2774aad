"""The report of a results folder: one self-contained HTML file (plots embedded as base64 PNG)
and a Markdown twin, both rendered from the jinja2 templates in ``llmsim/templates/``.

``llmsim report DIR`` tells the three kinds of folder apart by what they hold:

* a **run** (``llmsim run``): ``summary.json``, ``requests`` and ``steps`` (Parquet or CSV), ``scenario.json``;
* a **plan** (``llmsim plan``): ``plan.json``, ``plan.csv``, ``winners.csv``, ``pareto.csv``,
  ``infeasible.csv``, ``sensitivity.csv``, ``load.csv``, and the winner's run as above;
* a **sweep** (``llmsim sweep``): ``sweep.parquet`` / ``sweep.csv`` and ``sweep.json``.

Python gathers the numbers into ``Table`` and ``Figure`` objects, already formatted as the CLI
prints them (``llmsim.tables.fmt``, percentages with one decimal, the latency table from
``llmsim.metrics.latency_table``), so the templates only lay them out. A run also exports its
step timeline as a Chrome/Perfetto trace (``trace.json``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from llmsim.errors import UserError, atomic_write_text, load_json_object, test_pause
from llmsim.filekinds import file_kind
from llmsim.results import (
    CSV_RUN_IDS,
    OPTIONAL_TABLES,
    TABLE_SUFFIX,
    lora_line,
    offload_line,
    pools_line,
    read_csv_table,
    read_table,
    requests_line,
    scaling_line,
    slo_targets,
    slos_held,
    table_path,
    table_run_id,
)
from llmsim.scenario import Scenario
from llmsim.tables import cells, fmt
from llmsim.timeline import write_trace

if TYPE_CHECKING:
    from llmsim.hardware import Figure, HardwareProfile

MAX_ROOFLINE_POINTS = 400
GANTT_WINDOW_S = 5.0
TEMPLATES = Path(__file__).resolve().parent / "templates"
PLAN_TABLES = ("plan", "winners", "pareto", "infeasible", "sensitivity", "load")


def write_scenario(sc: Scenario, out_dir: Path, run_id: str | None = None) -> Path:
    """The resolved scenario next to the results, so a report can rebuild model and hardware;
    ``run_id`` is a top-level key (``ResultsDir.load`` drops it before validating)."""
    path = Path(out_dir) / "scenario.json"
    data = sc.model_dump() if run_id is None else {**sc.model_dump(), "run_id": run_id}
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    return path


def scenario_json(sc: Scenario) -> str:
    """scenario.json's content without the run id: what ``make_run_id`` hashes."""
    return json.dumps(sc.model_dump(), indent=2) + "\n"


def check_one_run(p: Path, summary: dict, scenario: dict | None) -> None:
    """UserError naming the files whose run id differs from summary.json's: a folder mixing two
    runs' files (a copy, an interrupted older llmsim) must not be reported as one run. Folders
    written before run ids (no ``run_id`` in summary.json) are not checked."""
    expected = summary.get("run_id")
    if expected is None:
        return
    ids = {"scenario.json": (scenario or {}).get("run_id")} if scenario is not None else {}
    for name in ("requests", "steps", "chunks"):
        for path in (p / f"{name}.parquet", p / f"{name}.csv"):
            if path.exists():
                with readable(path):
                    ids[path.name] = table_run_id(path)
    changed = sorted(name for name, got in ids.items() if got == "(changed)")
    if changed:  # (a CSV whose bytes are not those recorded for it: edited, cut short, or replaced)
        raise UserError(
            f"{p}: {', '.join(changed)}: not the bytes llmsim wrote (edited, cut short or replaced: its SHA-256 "
            f"differs from {CSV_RUN_IDS}'s); run `llmsim run` again to rewrite the folder"
        )
    wrong = {name: got for name, got in ids.items() if got != expected}
    if wrong:
        listed = ", ".join(f"{name} (run {got or 'without id'})" for name, got in sorted(wrong.items()))
        raise UserError(
            f"{p}: files from different runs: {listed}, but summary.json is run {expected}; "
            "run `llmsim run` again to rewrite the folder"
        )


def check_run_tables(p: Path, sc: Scenario | None, summary_tables: object = None) -> None:
    """UserError naming the requests or steps table a run folder lacks: every run writes both
    beside summary.json, and without them the report would drop its figures (latency CDFs,
    timelines, roofline) without a word. Refused as a table cut short or from another run is; so
    is a chunks or scaling table the run wrote (``summary_tables``: summary.json's ``tables``)."""
    suffix = TABLE_SUFFIX[sc.output.format] if sc is not None else ".parquet"
    written = summary_tables if isinstance(summary_tables, list) else ["requests", "steps"]
    for name in ("requests", "steps", *(n for n in OPTIONAL_TABLES if n in written)):
        if table_path(p, name) is None:
            raise UserError(
                f"{p}: {name}{suffix} is missing, which "
                + (
                    "every llmsim run writes"
                    if name in ("requests", "steps")
                    else "this run wrote (summary.json tables)"
                )
                + " beside summary.json (deleted or moved?); rerun the command that wrote the folder"
            )


# ---------------------------------------------------------------- the folder


def folder_kind(p: Path) -> str:
    """``run``, ``plan`` or ``sweep``, from the files those commands write. A folder that holds both
    a run's summary and a sweep's table is refused: `llmsim run` and `llmsim sweep` each refuse the
    other's folder, so one holding both was put together by hand, and reporting either would
    overwrite the other's report."""
    if not p.exists():
        raise UserError(f"{p}: no such folder; point `llmsim report` at the output folder of a run, a sweep or a plan")
    if not p.is_dir():
        # the folder it is in, suggested only where it is a results folder (a summary.json given)
        within = p.parent if any((p.parent / f).is_file() for f in RESULTS_FILES) else None
        raise UserError(
            f"{p}: a file, not a folder; `llmsim report` takes the whole output folder of a run, a sweep or "
            "a plan" + (f"; give the folder it is in: `llmsim report {within}`" if within is not None else "")
        )
    if (p / "plan.json").exists():
        return "plan"
    run = p / "summary.json"
    sweep = next((f for f in (p / "sweep.parquet", p / "sweep.csv") if f.exists()), None)
    if run.exists() and sweep is not None:
        raise UserError(
            f"{p}: holds both a run's summary.json and a sweep's {sweep.name}, which no llmsim command writes "
            "together; report the folder of one of them"
        )
    if run.exists():
        return "run"
    if sweep is not None:
        return "sweep"
    if (p / "twin_summary.json").exists():
        raise UserError(
            f"{p}: the output folder of `llmsim twin`, which writes its own figures and tables (twin.png, "
            "twin_summary.json); `llmsim report` takes the output folder of a run, a sweep or a plan"
        )
    inside = sorted(q.name for q in p.iterdir() if q.is_dir() and any((q / f).exists() for f in RESULTS_FILES))
    hint = ""
    if inside:
        hint = (
            f" (its subfolder {inside[0]} is one)"
            if len(inside) == 1
            else f" (its subfolders {', '.join(inside[:5])} are)"
        )
    raise UserError(
        f"{p}: no summary.json, plan.json or sweep.csv here; point `llmsim report` at the output folder "
        f"of a run, a sweep or a plan{hint}"
    )


RESULTS_FILES = ("summary.json", "plan.json", "sweep.csv", "sweep.parquet")  # what folder_kind looks for


@dataclass
class ResultsDir:
    """Everything a report reads from one folder (absent files are empty frames / None / {})."""

    path: Path
    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    scenario: Scenario | None = None
    plan: dict | None = None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    kind: str = "run"
    sweep: pd.DataFrame = field(default_factory=pd.DataFrame)
    sweep_meta: dict = field(default_factory=dict)
    chunks: pd.DataFrame = field(default_factory=pd.DataFrame)  # traced requests' prefill chunks
    scaling: pd.DataFrame = field(default_factory=pd.DataFrame)  # the autoscaler's decisions

    @classmethod
    def load(cls, path: str | Path) -> ResultsDir:
        p = Path(path)
        kind = folder_kind(p)
        if kind == "sweep":
            meta = load_json_object(p / "sweep.json") if (p / "sweep.json").exists() else {}
            table = _sweep_table(p, meta)
            return cls(p, {}, pd.DataFrame(), pd.DataFrame(), kind=kind, sweep=table, sweep_meta=meta)
        # a plan with no winner has no winner's run: no summary.json, requests or steps
        summary = load_json_object(p / "summary.json") if (p / "summary.json").exists() else {}
        missing = [k for k in SUMMARY_KEYS if k not in summary]
        if (p / "summary.json").exists() and missing:  # another tool's JSON, or a summary cut short
            kind = file_kind(summary) if len(missing) == len(SUMMARY_KEYS) else None  # (some present: a summary cut)
            what = f"this is {kind}" if kind else f"missing {', '.join(missing)}"
            raise UserError(f"{p / 'summary.json'}: not an llmsim run summary ({what})")
        sc, raw = None, None
        if (p / "scenario.json").exists():
            raw = load_json_object(p / "scenario.json")
            sc = _scenario_of(p / "scenario.json", {k: v for k, v in raw.items() if k != "run_id"})
        check_one_run(p, summary, raw)
        if summary:
            check_run_tables(p, sc, summary.get("tables"))
        tables = {name: _floats(_csv(p / f"{name}.csv")) for name in PLAN_TABLES if (p / f"{name}.csv").exists()}
        plan = _plan_of(p, tables) if kind == "plan" else None
        names = ("requests", "steps", "chunks", "scaling")
        if summary:
            _check_row_counts(p, summary, sc)
        if summary.get("run_id") is not None and sc is None:  # (every run since run ids writes it)
            raise UserError(
                f"{p}: scenario.json missing, which this run wrote (summary.json has its run id); the report's "
                "hardware and roofline come from it: run `llmsim run` again to rewrite the folder"
            )
        requests, steps, chunks, scaling = (_table(p, name) for name in names)  # Parquet or CSV
        if summary:
            _check_summary_figures(p / "summary.json", summary)
            _check_rows(p, "requests", requests, REQUEST_RULES)
            _check_rows(p, "steps", steps, STEP_RULES)
        return cls(p, summary, requests, steps, sc, plan, tables, kind, chunks=chunks, scaling=scaling)


SUMMARY_KEYS = ("requests", "slo", "saturation", "pools")  # what every run summary has and a report reads
# what a sweep table always has and its report reads (sweep.py METRICS), and a plan's (planning/output.py)
SWEEP_KEYS = ("request_throughput", "request_goodput", "slo_attainment", "slo_met")
PLAN_KEYS = ("target_rps", "recommendation")
PLAN_TABLE_KEYS = ("config", "feasible", "reason")


@contextlib.contextmanager
def readable(path: Path) -> Iterator[None]:
    """A table that cannot be parsed (cut short, another format, binary) as one line naming it."""
    import pyarrow

    try:
        yield
    except (pyarrow.ArrowException, ValueError, OSError, EOFError) as exc:
        if path.suffix == ".parquet":
            why = "truncated, or not a Parquet file"
        else:
            text = str(exc).strip().splitlines()
            why = text[0] if text else type(exc).__name__
        raise UserError(f"{path}: not a readable table ({why}); rerun the command that wrote it") from None


# what a run's tables hold as llmsim writes them: columns whose every value is a number >= 0 (NaN
# where a figure does not apply, e.g. the TTFT of a rejected request), and the request statuses
REQUEST_RULES = (
    "arrival_s", "queued_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens", "generated_tokens",
    "cached_tokens", "ttft_s", "tbt_mean_s", "tbt_max_s", "tpot_s", "e2e_s", "preemptions", "transfer_s",
)  # fmt: skip
STEP_RULES = ("start_s", "duration_s", "prefill_tokens", "decode_tokens", "batch_size", "kv_blocks_used")
REQUEST_STATUSES = ("finished", "rejected", "unfinished")
SUMMARY_TEXT = ("model", "policy", "run_id", "scenario")  # summary.json's top-level texts; the rest are numbers


def _check_summary_figures(path: Path, summary: dict) -> None:
    """summary.json's top-level figures are numbers (or null), as llmsim writes them: text such as
    "fast" where a latency belongs would be printed in the report as if it were one. And they agree
    with each other as llmsim computes them (``_check_figures_agree``)."""
    for key, value in summary.items():
        if isinstance(value, dict | list) or key in SUMMARY_TEXT:
            continue
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise UserError(
                f"{path}: {key}: {value!r}, where llmsim writes a number or a section; not as llmsim wrote it"
            )
    _check_figures_agree(path, summary)


_PERCENTILE_KEY = re.compile(r"(median|p([\d.]+))_(\w+)_ms")


def _check_figures_agree(path: Path, summary: dict) -> None:
    """An edited summary whose figures contradict each other is refused, naming the key: a metric's
    percentiles in order (p50 <= p90 <= p99 ...), the throughputs the completed requests and output
    tokens over the duration (metrics.py computes them so)."""
    by_metric: dict[str, list[tuple[float, str]]] = {}
    for key, value in summary.items():
        m = _PERCENTILE_KEY.fullmatch(key)
        if m and isinstance(value, int | float) and not isinstance(value, bool):
            at = 50.0 if m[1] == "median" else float(m[2]) if m[2].count(".") <= 1 else -1.0
            by_metric.setdefault(m[3], []).append((at, key))
    for keys in by_metric.values():
        keys.sort()
        for (_, low), (_, high) in zip(keys, keys[1:], strict=False):
            if summary[high] < summary[low] * (1 - 1e-9) - 1e-9:
                raise UserError(
                    f"{path}: {high}: {summary[high]!r} is below {low} ({summary[low]!r}); not as llmsim wrote it"
                )
    duration = summary.get("duration")
    if not isinstance(duration, int | float) or isinstance(duration, bool) or not duration > 0:
        return
    for rate, count in (("request_throughput", "completed"), ("output_throughput", "total_output_tokens")):
        r, n = summary.get(rate), summary.get(count)
        if (
            isinstance(r, int | float)
            and isinstance(n, int | float)
            and not math.isclose(r, n / duration, rel_tol=1e-6)
        ):
            raise UserError(
                f"{path}: {rate}: {r!r}, where {count} / duration is {n / duration:.6g}; not as llmsim wrote it"
            )


def _check_rows(p: Path, name: str, table: pd.DataFrame, columns: tuple[str, ...]) -> None:
    """A run's table as llmsim writes it: its number columns numbers >= 0 (or NaN), its requests'
    ids each once and statuses llmsim's. An edited table (negated TTFTs, a status llmsim never
    writes) is refused rather than drawn."""
    if table.empty:
        return
    found = table_path(p, name)
    where = found.name if found is not None else name
    for col in columns:
        if col not in table.columns:
            continue
        values = pd.to_numeric(table[col], errors="coerce").to_numpy(dtype=float)
        text = table[col].notna().to_numpy() & np.isnan(values)  # (a cell that is not a number at all)
        bad = np.flatnonzero(text | (values < 0) | np.isinf(values))
        if len(bad):
            row = int(bad[0])
            raise UserError(
                f"{p / where}: row {row + 2}, column {col!r}: {_cell(table[col].iloc[row])!r}, where llmsim writes a "
                "number >= 0; not as llmsim wrote it"
            )
    if name == "requests":
        if "status" in table.columns:
            bad = np.flatnonzero(~table["status"].isin(REQUEST_STATUSES).to_numpy())
            if len(bad):
                row = int(bad[0])
                raise UserError(
                    f"{p / where}: row {row + 2}, column 'status': {_cell(table['status'].iloc[row])!r}, where llmsim writes "
                    f"one of {', '.join(REQUEST_STATUSES)}"
                )
        if "id" in table.columns and table["id"].duplicated().any():
            row = int(np.flatnonzero(table["id"].duplicated().to_numpy())[0])
            raise UserError(f"{p / where}: row {row + 2}, column 'id': {_cell(table['id'].iloc[row])!r} is given twice")


def _cell(value: object) -> object:
    """A table cell as Python shows it (a NumPy scalar as its plain number)."""
    return value.item() if isinstance(value, np.generic) else value


def _table_rows(path: Path) -> int:
    """Rows of a table file, read without loading it: a Parquet file's footer, a CSV's lines."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        with readable(path):
            return int(pq.ParquetFile(path).metadata.num_rows)
    with path.open("rb") as fh:
        return max(sum(1 for _ in fh) - 1, 0)


def _check_row_counts(p: Path, summary: dict, sc: Scenario | None) -> None:
    """A run's tables hold the rows its summary counts, checked before they are read: one request
    row per request, no more step rows than steps (fewer when sampled), no more prefill chunks than
    the traced requests' steps. A table edited to millions of rows (a small compressed file) is
    refused rather than read into memory."""
    reqs, steps = summary.get("requests"), summary.get("steps_total")
    total = reqs.get("total") if isinstance(reqs, dict) else None
    traced = total
    if sc is not None and sc.output.trace == "sample":
        traced = min(total or 0, sc.output.trace_requests)
    limits = {
        "requests": (total, "its summary's requests.total"),
        "steps": (steps, "its summary's steps_total"),
        "chunks": (
            steps * traced if isinstance(steps, int) and isinstance(traced, int) else None,
            "steps x traced requests",
        ),
    }
    for name, (limit, what) in limits.items():
        path = table_path(p, name)
        if path is None or not isinstance(limit, int) or isinstance(limit, bool):
            continue
        rows = _table_rows(path)
        if (rows != limit) if name == "requests" else (rows > limit):
            relation = "" if name == "requests" else "at most "
            raise UserError(f"{path}: {rows:,} rows, where {what} says {relation}{limit:,}; not as llmsim wrote it")


def _table(p: Path, name: str) -> pd.DataFrame:
    """``read_table`` of a results folder, a file it cannot parse named."""
    with readable(table_path(p, name) or p / name):
        return read_table(p, name)


def _check_sweep_hashes(p: Path, meta: dict) -> None:
    """Each sweep table is the one sweep.json records (its SHA-256; sweeps before llmsim recorded
    them are not checked): an edited table, or one copied from another sweep, is refused."""
    from llmsim.results import file_sha256

    recorded = meta.get("tables")
    if not isinstance(recorded, dict):
        return
    for name, digest in recorded.items():
        path = p / str(name)
        if path.exists() and file_sha256(path) != digest:
            raise UserError(
                f"{path}: not the table sweep.json records (edited, or from another sweep); run `llmsim sweep` "
                "again to rewrite the folder"
            )


def _sweep_table(p: Path, meta: dict) -> pd.DataFrame:
    """sweep.parquet (or sweep.csv), refused when it is not one sweep's table: another tool's CSV, a
    header without rows, or a table whose columns are not the axes sweep.json names (two sweeps' files)."""
    path = p / "sweep.parquet" if (p / "sweep.parquet").exists() else p / "sweep.csv"
    _check_sweep_hashes(p, meta)
    with readable(path):
        table = pd.read_parquet(path) if path.suffix == ".parquet" else _csv(path)
    missing = [k for k in SWEEP_KEYS if k not in table.columns]
    if missing:
        raise UserError(f"{path}: not an llmsim sweep table (missing column(s) {', '.join(missing)})")
    if table.empty:
        raise UserError(f"{path}: no rows; a sweep table has one row per point of the grid")
    axes = [k for k in meta.get("grid") or {} if k not in table.columns]
    if axes:
        raise UserError(
            f"{p / 'sweep.json'}: grid axis {', '.join(axes)} is not a column of {path.name}: the two files come "
            "from different sweeps; run `llmsim sweep` again to rewrite the folder"
        )
    for col in table.columns:  # a swept list or mapping (output.percentiles=[50, 90],[99]) as its text:
        if table[col].dtype == object and any(_composite(v) for v in table[col]):  # grouped and shown as such
            table[col] = [_shown(v) for v in table[col]]
    return table


def _composite(v: object) -> bool:
    return isinstance(v, list | dict | tuple) or (hasattr(v, "tolist") and getattr(v, "ndim", 0) > 0)


def _plan_of(p: Path, tables: dict[str, pd.DataFrame]) -> dict:
    """plan.json, and plan.csv's columns, refused when they are another tool's (or cut short)."""
    plan = load_json_object(p / "plan.json")
    missing = [k for k in PLAN_KEYS if k not in plan]
    if missing:
        raise UserError(f"{p / 'plan.json'}: not an llmsim plan (missing {', '.join(missing)})")
    # what every plan writes (planning/output.py), and what a plan with a winner or an SLO capacity adds:
    # one gone, the report would leave its section out without a word
    must = ["plan.csv", "winners.csv", "pareto.csv", "sensitivity.csv", "infeasible.csv"]
    must += ["load.csv"] if plan.get("slo_capacity") is not None else []
    must += ["summary.json", "scenario.json"] if plan.get("winner") is not None else []
    gone = [name for name in must if not (p / name).exists()]
    if gone:
        raise UserError(
            f"{p}: {', '.join(gone)} missing, which this plan wrote (plan.json); rerun llmsim plan to rewrite the folder"
        )
    table = tables.get("plan", pd.DataFrame())
    missing = [k for k in PLAN_TABLE_KEYS if k not in table.columns]
    if missing:
        raise UserError(f"{p / 'plan.csv'}: not an llmsim plan table (missing column(s) {', '.join(missing)})")
    return plan


def _scenario_of(path: Path, data: dict) -> Scenario:
    """scenario.json as a Scenario, or one line naming the file and the key that is wrong."""
    from pydantic import ValidationError

    from llmsim.errors import pydantic_message

    try:
        sc = Scenario.model_validate(data)
    except ValidationError as exc:
        lines = pydantic_message(exc, str(path), {}).splitlines()
        more = f" (and {len(lines) - 1} more problem(s))" if len(lines) > 1 else ""
        raise UserError(lines[0] + more) from None
    from llmsim.hardware import load_profile

    try:  # the report prices with them: a name edited to nothing known is the file's mistake
        load_profile(sc.hardware, Path(sc.base_dir))
    except UserError as exc:
        raise UserError(f"{path}: hardware: {exc}") from None
    from llmsim.build import build_model, build_pools

    try:  # (the report's figures build the model and its pools: a model or cluster edited into one that cannot be)
        build_pools(sc, build_model(sc))
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    return sc


def _csv(path: Path) -> pd.DataFrame:
    if not path.exists() or path.stat().st_size <= 1:
        return pd.DataFrame()
    with readable(path):
        try:
            return read_csv_table(path)
        except pd.errors.EmptyDataError:  # a header-less empty table (no rows, no columns)
            return pd.DataFrame()


def _floats(df: pd.DataFrame) -> pd.DataFrame:
    """A CSV gives back 3.0 as the integer 3, which the CLI printed as a float ("3.00"): every
    integer column but the counts is a float again, so the report's cells are the CLI's."""
    for col in df.columns:
        ints = pd.api.types.is_integer_dtype(df[col]) and not pd.api.types.is_bool_dtype(df[col])
        if ints and col not in INTEGER_COLUMNS:
            df[col] = df[col].astype(float)
    return df


# ---------------------------------------------------------------- labels and cells

_METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL", "tbt_max": "TBT max"}
_LATENCY_COLUMN = re.compile(r"^(mean|median|std|p[\d.]+)_(ttft|tpot|itl|e2el|tbt_max)_ms$")
LABELS = {
    "completed": "completed",
    "requests": "requests",
    "offered_rps": "offered rate (req/s)",
    "rate_rps": "offered rate (req/s)",
    "request_throughput": "request throughput (req/s)",
    "request_goodput": "request goodput (req/s)",
    "input_throughput": "input throughput (tok/s)",
    "output_throughput": "output throughput (tok/s)",
    "total_token_throughput": "total token throughput (tok/s)",
    "slo_attainment": "SLO attainment",
    "slo_attainment_nominal": "SLO attainment at nominal efficiency",
    "slo_met": "meets SLOs",
    "meets_slos": "meets SLOs",
    "efficiency_factor": "efficiency factor",
    "usd_per_hour": "price ($/hour)",
    "usd_per_mtok": "$ per million tokens (prompt + output)",
    "usd_per_m_output_tok": "$ per million output tokens",
    "power_w": "power at TDP (W)",
    "j_per_token": "energy (J/token at TDP)",
    "kv_util_mean": "KV cache utilisation (mean)",
    "kv_util_peak": "KV cache utilisation (peak)",
    "busy_fraction": "replica busy fraction",
    "queue_growth_share": "queue growth (share of offered)",
    "reason": "why",
}
PERCENT_COLUMNS = {
    "slo_attainment",
    "slo_attainment_nominal",
    "kv_util_mean",
    "kv_util_peak",
    "busy_fraction",
    "queue_growth_share",
}
# counts that a CSV with empty cells reads back as floats (512.0): printed as integers
INTEGER_COLUMNS = {"tp", "replicas", "chunk_tokens", "devices", "completed", "requests", "rejected", "preemptions"}


def column_label(col: str) -> str:
    """A readable header with its unit: ``p99_ttft_ms`` -> ``TTFT p99 (ms)``; unknown names stay as they are."""
    m = _LATENCY_COLUMN.match(col)
    if m:
        return f"{_METRIC_NAMES[m.group(2)]} {m.group(1)} (ms)"
    return LABELS.get(col, col)


def table_value(v: object, col: str = "") -> object:
    """A table cell before the number format: shares as ``95.8%`` (as the CLI prints an attainment),
    booleans as yes/no, counts read back as floats as ints, absent as None; other numbers stay numbers
    so that ``tables.cells`` (the CLI's format) can give a column one scale."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # numpy / pandas scalars
        v = v.item()  # type: ignore[union-attr]
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)) and col in PERCENT_COLUMNS:
        return f"{v:.1%}"
    if isinstance(v, float) and col in INTEGER_COLUMNS and v.is_integer():
        return int(v)
    return v


def overhead_rows(hw: HardwareProfile) -> list[list[str]]:
    """A profile's overheads, each in its unit (seconds as µs, bytes as bytes), one row per figure
    (``elementwise_op_fixed_s`` holds one per op)."""
    rows = []
    for k, f in hw.overheads:
        for d, g in _figures(f):
            if "_bytes" in k:
                value = f"{g.value:,.0f} bytes" if g.value >= 1000 else f"{g.value:.4g} bytes"
            else:
                value = f"{g.value * 1e6:.1f} µs"
            rows.append([f"overhead {k} {d}".rstrip(), value, g.source])
    return rows


def _figures(f: object) -> list[tuple[str, Figure]]:
    """A profile field's figures: one, or one per key of a mapping (``gemm_dtype_fraction: {fp8:
    ...}``, ``elementwise_op_fixed_s: {add: ...}``), or none where it is unset."""
    if isinstance(f, dict):
        return sorted(f.items())
    return [("", f)] if f is not None else []  # type: ignore[list-item]


def cell(v: object, col: str = "") -> str:
    """One value on its own, as the CLI's summary lines print it (``llmsim.tables.fmt``), except that
    a float of 1e5 and more is written out (123,456) rather than as 1.23e+05."""
    v = table_value(v, col)
    if v is None:
        return "-"
    if isinstance(v, float) and abs(v) >= 1e5:
        return f"{v:,.0f}"
    return fmt(v)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ---------------------------------------------------------------- sections (data, not markup)


@dataclass
class Table:
    """A titled table of formatted cells; ``align`` is ``l`` or ``r`` per column (numbers right)."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    align: list[str] = field(default_factory=list)
    note: str = ""

    def __post_init__(self) -> None:
        self.align = self.align or ["l"] * len(self.headers)


@dataclass
class Figure:
    """A plot: its caption, its PNG, and the file report.md links it from."""

    caption: str
    png: bytes
    file: str = ""

    @property
    def b64(self) -> str:
        return base64.b64encode(self.png).decode("ascii")


def frame_table(title: str, df: pd.DataFrame, cols: list[str], note: str = "") -> Table:
    """The columns ``cols`` of ``df`` (those it has), headers readable, cells as the CLI prints them."""
    cols = [c for c in cols if c in df.columns]
    raw = [[r[c] for c in cols] for r in df[cols].to_dict("records")]
    rows = [[table_value(v, c) for v, c in zip(row, cols, strict=True)] for row in raw]
    align = ["l"] * len(cols)
    if rows:  # numbers (and shares) right-aligned, as the terminal prints them
        columns = zip(zip(*rows, strict=True), cols, strict=True)
        align = [
            "r" if all(v is None or _is_number(v) or c in PERCENT_COLUMNS for v in vs) else "l" for vs, c in columns
        ]
    return Table(title, [column_label(c) for c in cols], cells(rows), align, note)


def pairs_table(title: str, pairs: list[tuple[str, object]], headers: tuple[str, str] = ("metric", "value")) -> Table:
    return Table(title, list(headers), [[k, v if isinstance(v, str) else cell(v)] for k, v in pairs])


# ---------------------------------------------------------------- a run


def run_table(s: dict) -> Table:
    """The run's summary, line by line what ``llmsim run`` prints (same numbers, same formatting)."""
    slo, sat = s["slo"], s["saturation"]
    pools = pools_line(s)
    # the CLI's order (the scenario's), not summary.json's sorted keys
    targets = slo_targets(slo)
    pairs: list[tuple[str, object]] = [
        ("cluster", pools),
        ("requests", requests_line(s)),
        ("duration (s)", fmt(s["duration"])),
        ("request throughput (req/s)", fmt(s["request_throughput"])),
        ("input throughput (tok/s)", fmt(s.get("input_throughput"))),
        ("output throughput (tok/s)", fmt(s["output_throughput"])),
        ("total token throughput (tok/s)", fmt(s["total_token_throughput"])),
        ("peak output throughput (tok/s, 1 s buckets)", fmt(s.get("max_output_tokens_per_s"))),
        ("max concurrent requests", fmt(s.get("max_concurrent_requests"))),
        ("SLOs", targets or "(none set)"),
        ("SLO attainment", f"{slo['attainment']:.1%} (target {slo.get('attainment_target', 0.9):.0%})"),
        ("request goodput (req/s)", fmt(s["request_goodput"])),
    ]
    if "kv_cache" in s:
        kv = s["kv_cache"]
        pairs.append(("KV cache utilisation", f"mean {kv['utilization_mean']:.1%}, peak {kv['utilization_peak']:.1%}"))
    if "kv_offload" in s:
        pairs.append(("KV offload", offload_line(s)))
    if "autoscaling" in s:
        pairs.append(("autoscaling", scaling_line(s)))
    if "lora" in s:
        pairs.append(("multi-LoRA", lora_line(s)))
    cost = s.get("cost") or {}
    if cost.get("usd_per_million_output_tokens") is not None:
        pairs.append(
            (
                "cost",
                f"${fmt(cost['cluster_usd_per_hour'])}/h, ${fmt(cost['usd_per_million_output_tokens'])} "
                "per million output tokens",
            )
        )
    pairs.append(("verdict", f"{sat['verdict'].upper()}: {sat['explanation']}"))
    title = (
        f"Run: {s.get('scenario')} (model {s.get('model')}, policy {s.get('policy')}, "
        f"engine {s.get('engine', {}).get('name')}, seed {s.get('seed')})"
    )
    return pairs_table(title, pairs)


def latency_table(s: dict) -> Table:
    """The CLI's latency table (``llmsim.metrics.latency_table``), cell for cell."""
    from llmsim.metrics import latency_table as bench_table

    rows, headers = bench_table(s)
    return Table(
        "Latency (ms)",
        headers,
        cells(rows),
        ["l"] + ["r"] * (len(headers) - 1),
        "vLLM bench serve's definitions: TTFT to the first token, TPOT per request after the first, ITL over "
        "every token gap, E2EL arrival to last token; TBT max is each request's worst gap (what slo.tbt_s bounds).",
    )


def class_table(s: dict) -> Table | None:
    classes = s.get("classes")
    if not classes:
        return None
    df = pd.DataFrame([{"class": k, **v} for k, v in classes.items()]).rename(columns={"attainment": "slo_attainment"})
    return frame_table(
        "Per request class", df, ["class", "requests", "slo_attainment", "p99_ttft_ms", "median_tpot_ms"]
    )


def run_recommendation(s: dict) -> str:
    slo, sat = s["slo"], s["saturation"]
    target = slo.get("attainment_target", 0.9)
    offered = s.get("workload", {}).get("mean_rate_rps")  # None for requests that arrive at once
    at = f" at {offered:.2f} req/s offered" if offered is not None else ""
    g = s.get("request_goodput")  # None: no latency SLO set
    good = f", a request goodput of {fmt(g)} req/s" if g is not None else ""
    verdict = "meets" if slo.get("met_target") else "misses"
    text = (
        f"This configuration {verdict} the SLOs: {slo['attainment']:.1%} of requests met every latency target "
        f"(target {target:.0%}){at}{good}. Saturation verdict: {sat['verdict']} ({sat['explanation']})."
    )
    if sat["verdict"] != "stable":
        text += " Add replicas or a faster device before trusting these latencies."
    elif slo.get("met_target"):
        text += " Run `llmsim plan` to see whether a cheaper configuration also meets them."
    return text


def assumption_tables(r: ResultsDir) -> list[Table]:
    out = []
    if r.scenario is not None:
        from llmsim.build import build_model, build_pools

        sc = r.scenario
        pools = build_pools(sc, build_model(sc))
        for pool in pools:
            hw = pool.hw
            rows = [[f"peak {k} (dense)", f"{f.value / 1e12:.1f} TFLOP/s", f.source] for k, f in hw.peak_flops.items()]
            rows += [
                ["memory", f"{hw.memory_capacity_bytes.value / 1e9:.0f} GB", hw.memory_capacity_bytes.source],
                [
                    "bandwidth",
                    f"{hw.memory_bandwidth_bytes_per_s.value / 1e12:.2f} TB/s",
                    hw.memory_bandwidth_bytes_per_s.source,
                ],
                ["power", f"{hw.power_w.value:.0f} W", hw.power_w.source],
                ["price", f"${hw.price_per_hour_usd.value:.2f}/hour", hw.price_per_hour_usd.source],
            ]
            for k, f in hw.efficiency:
                # a figure, or one per dtype (gemm_dtype_fraction: {fp8: ..., int8: ...})
                rows += [[f"efficiency {k} {d}".rstrip(), cell(g.value), g.source] for d, g in _figures(f)]
            rows += overhead_rows(hw)
            out.append(Table(f"Hardware: {hw.name} (pool {pool.name})", ["figure", "value", "source"], rows))
        m = build_model(sc)
        policy = f"{sc.policy.kind} (chunk {sc.policy.chunk_tokens}, max seqs {sc.policy.max_num_seqs})"
        pairs: list[tuple[str, object]] = [
            ("layers", m.num_layers),
            ("hidden size", m.hidden_size),
            ("attention heads / KV heads", f"{m.num_heads} / {m.num_kv_heads}"),
            ("weights dtype", m.weight_format()),
            ("KV cache dtype", str(sc.kv_cache.dtype)),
            ("policy", policy),
        ]
        if sc.kv_cache.dtype in ("fp8", "int8"):  # its attention: fp8 MMAs, or 16-bit over the converted cache
            pairs.insert(-1, ("attention compute dtype", attention_dtypes(pools)))
        if m.sliding_window or sc.model.sliding_window is not None:  # the window the run used
            layers = f" on the local layers (1 in {m.global_attn_every} global)" if m.global_attn_every else ""
            window = f"{m.sliding_window:,} tokens{layers}" if m.sliding_window else "none: full attention"
            pairs.insert(3, ("attention window", window))
        out.append(pairs_table(f"Model: {m.name}", pairs, ("field", "value")))
    wl = r.summary.get("workload", {})
    if wl:
        out.append(pairs_table("Workload", list(wl.items()), ("statistic", "value")))
    out.append(slo_table(r.summary.get("slo", {})))
    return out


def attention_dtypes(pools: list) -> str:
    """The attention kernels' compute dtype (``ops.attention_dtype``), per pool where they differ; an
    MLA model's prefill and decode kernels each (its prefill runs 16-bit whatever the cache)."""
    from llmsim.costmodel.ops import attention_dtype, mla_prefill_dtype

    def dtypes(cost) -> str:
        decode = attention_dtype(cost.cfg)
        prefill = mla_prefill_dtype(cost.cfg) if cost.model.is_mla else decode
        return decode if prefill == decode else f"prefill {prefill}, decode {decode}"

    each = {p.name: dtypes(p.cost) for p in pools}
    if len(set(each.values())) == 1:
        return next(iter(each.values()))
    return ", ".join(f"{d} (pool {name})" for name, d in each.items())


def slo_table(slo: dict) -> Table:
    """The SLOs as the scenario states them (seconds), shares as the CLI prints them."""
    rows: list[tuple[str, object]] = []
    for k, v in slo.items():
        if v is None or k == "classes":
            continue
        if k.endswith("_s"):
            rows.append((k, f"{v:g} s"))
        elif k in ("attainment", "attainment_target"):
            rows.append((k, f"{v:.1%}"))
        else:
            rows.append((k, v))
    return pairs_table("SLO", rows, ("key", "value"))


def run_figures(r: ResultsDir) -> list[Figure]:
    from llmsim import plots

    out: list[Figure] = []
    slo = r.summary.get("slo", {})
    if not r.requests.empty:
        out.append(
            Figure("Latency CDFs (TTFT, TPOT, TBT max, E2EL)", plots.png_bytes(plots.latency_cdfs(r.requests, slo)))
        )
    if not r.steps.empty:
        out.append(Figure("Batch size and KV-cache utilisation over time", plots.png_bytes(plots.timelines(r.steps))))
        fig = plots.gantt(r.steps, GANTT_WINDOW_S)
        out.append(Figure(f"Per-replica step timeline (first {GANTT_WINDOW_S:g} s)", plots.png_bytes(fig)))
        roof = roofline_points(r)
        if roof is not None:
            pts, peak, bw, name = roof
            out.append(Figure("Roofline of the step mix", plots.png_bytes(plots.roofline(pts, peak, bw, name))))
    if not r.scaling.empty:
        a = r.summary.get("autoscaling", {})
        fig = plots.replicas(r.scaling, a.get("metric", "metric"), a.get("target"))
        out.append(Figure("Replicas over time (the autoscaler's decisions)", plots.png_bytes(fig)))
    return out


def roofline_points(r: ResultsDir) -> tuple[pd.DataFrame, float, float, str] | None:
    """FLOPs and bytes of (a sample of) the steps, from their token counts and the mean context.

    Steps record token counts, not per-sequence contexts, so each decode sequence is given the
    run's mean context (prompt + half the output) and each step's prefill is one chunk."""
    if r.scenario is None or r.requests.empty:
        return None
    from llmsim.build import build_model, build_pools
    from llmsim.costmodel.ops import model_batch_shape

    sc = r.scenario
    try:
        pools = build_pools(sc, build_model(sc))
    except UserError:
        return None
    cost = pools[-1].cost if len(pools) > 1 else pools[0].cost
    fin = r.requests[r.requests["status"] == "finished"]
    ctx = int(fin["prompt_tokens"].mean() + fin["output_tokens"].mean() / 2) if len(fin) else 1024
    steps = r.steps
    if len(steps) > MAX_ROOFLINE_POINTS:
        steps = steps.iloc[:: math.ceil(len(steps) / MAX_ROOFLINE_POINTS)]
    rows = []
    for st in steps.itertuples():
        chunks = [(int(st.prefill_tokens), 0)] if st.prefill_tokens else []
        shape = model_batch_shape(cost.model, chunks, [ctx] * int(st.decode_tokens))
        ops = cost.ops(shape)
        flops = sum(o.flops * o.count for o in ops)
        nbytes = sum(o.bytes * o.count for o in ops)
        if nbytes > 0 and st.duration_s > 0:
            rows.append(
                {
                    "prefill_tokens": st.prefill_tokens,
                    "decode_tokens": st.decode_tokens,
                    "intensity": flops / nbytes,
                    "achieved_flops": flops / st.duration_s,
                }
            )
    if not rows:
        return None
    hw = cost.hw
    dtype = sc.model.act_dtype  # the GEMMs' compute dtype (fp8 / int8 / fp4 for quantised compute)
    peak = hw.peak(dtype) if hw.computes_in(dtype) else hw.peak("fp32")
    return pd.DataFrame(rows), peak, hw.bandwidth, hw.name


def run_context(r: ResultsDir) -> dict:
    s = r.summary
    return {
        "recommendation": run_recommendation(s),
        "run": run_table(s),
        "latency": latency_table(s),
        "classes": class_table(s),
        "figures": run_figures(r),
        "assumptions": assumption_tables(r),
    }


# ---------------------------------------------------------------- a plan

PLAN_COLUMNS = [
    "config",
    "devices",
    "usd_per_hour",
    "usd_per_m_output_tok",
    "usd_per_mtok",
    "power_w",
    "j_per_token",
    "slo_attainment",
    "request_goodput",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "p99_tbt_max_ms",
    "verdict",
]
SENSITIVITY_COLUMNS = [
    "config",
    "efficiency_factor",
    "slo_attainment_nominal",
    "slo_attainment",
    "request_goodput",
    "p99_ttft_ms",
    "p99_tbt_max_ms",
    "verdict",
    "meets_slos",
]
LOAD_COLUMNS = [
    "rate_rps",
    "slo_attainment",
    "request_throughput",
    "request_goodput",
    "p99_ttft_ms",
    "p99_itl_ms",
    "p99_tbt_max_ms",
    "verdict",
]


def never_met(r: ResultsDir) -> pd.DataFrame:
    """The candidates that never met the SLOs, as ``llmsim plan`` printed and counted them
    (``infeasible.csv``); a plan folder from before that file is re-derived from ``plan.csv``."""
    if "infeasible" in r.tables:
        return r.tables["infeasible"]
    from llmsim.planning.ranking import infeasible_candidates

    return infeasible_candidates(r.tables.get("plan", pd.DataFrame()))


def plan_overview(r: ResultsDir) -> Table:
    plan = r.plan or {}
    cap = plan.get("slo_capacity") or {}
    pairs: list[tuple[str, object]] = [
        ("target rate (req/s)", fmt(plan.get("target_rps"))),
        ("SLO attainment target", f"{plan.get('target_attainment', 0.9):.0%}"),
        ("points evaluated", len(r.tables.get("plan", pd.DataFrame()))),
        ("winner", plan.get("winner") or "(none)"),
        ("candidates that never met the SLOs", len(never_met(r))),
    ]
    if plan.get("left_out"):  # plan.engines' pairs with hardware they do not run on
        pairs.append(("left out of the search", "; ".join(str(x) for x in plan["left_out"])))
    if cap:
        # the recommendation's format for the same number
        pairs.append(("winner's SLO capacity: highest rate still meeting the SLOs (req/s)", f"{cap['rate_rps']:.2f}"))
    return pairs_table("Overview", pairs)


def plan_figures(r: ResultsDir) -> list[Figure]:
    from llmsim import plots

    out: list[Figure] = []
    slo = r.summary.get("slo", {})
    if "load" in r.tables and not r.tables["load"].empty:
        knee = ((r.plan or {}).get("slo_capacity") or {}).get("rate_rps")
        fig = plots.load_curves(r.tables["load"], slo, knee)
        out.append(
            Figure("Latency, throughput and goodput vs offered load, with the SLO capacity", plots.png_bytes(fig))
        )
    plan = r.tables.get("plan", pd.DataFrame())
    if "p99_ttft_ms" in plan and plan["p99_ttft_ms"].notna().any():  # a point that ran: something to place
        front = r.tables.get("pareto", pd.DataFrame())
        out.append(Figure("Cost vs latency, Pareto front", plots.png_bytes(plots.pareto(r.tables["plan"], front))))
    return out


def plan_context(r: ResultsDir) -> dict:
    t = r.tables
    bad = never_met(r)
    ctx = {
        "recommendation": (r.plan or {}).get("recommendation", ""),
        "overview": plan_overview(r),
        "winners": frame_table(
            "Cheapest configurations meeting the SLOs", t.get("winners", pd.DataFrame()), PLAN_COLUMNS
        ),
        "pareto": frame_table("Cost-latency Pareto front", t.get("pareto", pd.DataFrame()), PLAN_COLUMNS),
        "never_met": frame_table(
            f"Candidates that never met the SLOs ({len(bad)}), and why",
            bad,
            ["config", "reason"],
            "each at the largest replica count tried",
        ),
        "sensitivity": frame_table(
            "Sensitivity: winners with every efficiency scaled",
            t.get("sensitivity", pd.DataFrame()),
            SENSITIVITY_COLUMNS,
        ),
        "load": frame_table(
            "SLO capacity search of the winner (offered rate vs attainment)",
            t.get("load", pd.DataFrame()),
            LOAD_COLUMNS,
        ),
        "figures": plan_figures(r),
        "run": None,
        "assumptions": assumption_tables(r) if r.summary else [],
    }
    if r.summary:  # the winner's run at the target rate
        run = run_context(r)
        ctx.update(run=run["run"], latency=run["latency"], classes=run["classes"])
        ctx["figures"] = ctx["figures"] + run["figures"]
    return ctx


# ---------------------------------------------------------------- a sweep

SWEEP_COLUMNS = [
    "completed",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "p99_itl_ms",  # ITL's mean is within a hair of TPOT's: in sweep.csv and the plots, not here
    "mean_e2el_ms",
    "p99_e2el_ms",
    "p99_tbt_max_ms",
    "slo_attainment",
    "verdict",
    "usd_per_hour",
    "usd_per_m_output_tok",
]


def swept_keys(r: ResultsDir) -> list[str]:
    """The grid's keys: from sweep.json, else the table's columns that are not metrics."""
    if r.sweep_meta.get("grid"):
        return list(r.sweep_meta["grid"])
    from llmsim.sweep import METRICS

    metrics = {c for c, _ in METRICS} | {"error"}
    return [c for c in r.sweep.columns if c not in metrics]


def _point(row: dict, keys: list[str]) -> str:
    return ", ".join(f"{k}={row[k]}" for k in keys)


def sweep_summary(r: ResultsDir, keys: list[str]) -> str:
    """The sweep in one paragraph, from its own numbers: how many points met the SLOs, the best goodput, the cheapest."""
    df = r.sweep
    ok = df[df["error"].isna()] if "error" in df else df
    target = (r.sweep_meta.get("slo") or {}).get("attainment_target", 0.9)
    if "slo_met" in ok:
        verdicts = ok["verdict"] if "verdict" in ok else [None] * len(ok)
        keeps = ok["keeps_up"] if "keeps_up" in ok else [None] * len(ok)  # (a sweep written before it)
        held = [slos_held(m, v, k) for m, v, k in zip(ok["slo_met"].fillna(False), verdicts, keeps, strict=True)]
        met = ok[held]
    else:
        met = ok.iloc[0:0]
    points, meet = f"{len(df)} point{'s' if len(df) != 1 else ''}", "meets" if len(met) == 1 else "meet"
    text = [f"{points} over {', '.join(keys)}; {len(met)} {meet} the SLOs (attainment target {target:.0%})."]
    if len(ok) < len(df):
        text.append(f"{len(df) - len(ok)} could not run (see the error column).")
    goodput = pd.to_numeric(ok.get("request_goodput"), errors="coerce") if len(ok) else pd.Series(dtype=float)
    if goodput.notna().any():
        best = ok.loc[goodput.idxmax()].to_dict()
        text.append(f"Highest request goodput: {fmt(best['request_goodput'])} req/s at {_point(best, keys)}.")
    if len(met):
        cheap = met.sort_values("usd_per_hour", kind="stable").iloc[0].to_dict()
        text.append(f"Cheapest point meeting the SLOs: {_point(cheap, keys)} at ${fmt(cheap['usd_per_hour'])}/hour.")
    return " ".join(text)


def sweep_figures(r: ResultsDir, keys: list[str]) -> list[Figure]:
    from llmsim import plots

    slo = r.sweep_meta.get("slo") or {}
    if "error" in r.sweep and r.sweep["error"].notna().all():  # (no point ran: nothing to plot)
        return []
    out = []
    for key in keys:
        if r.sweep[key].nunique() < 2:
            continue
        fig = plots.sweep_curves(r.sweep, key, [k for k in keys if k != key], slo)
        out.append(
            Figure(
                f"TTFT, TPOT, ITL, E2EL (p99 and mean), TBT max, throughput and goodput vs {key}", plots.png_bytes(fig)
            )
        )
    return out


def sweep_context(r: ResultsDir) -> dict:
    keys = swept_keys(r)
    df = r.sweep
    cols = [*keys, *SWEEP_COLUMNS]
    if "error" in df and df["error"].notna().any():
        cols.append("error")
    meta = r.sweep_meta
    pairs: list[tuple[str, object]] = [
        ("scenario", str(meta.get("scenario", "?"))),
        ("points", len(df)),
        *((f"swept: {k}", ", ".join(str(v) for v in dict.fromkeys(df[k]))) for k in keys),
        *((f"fixed: {k}", str(v)) for k, v in (meta.get("fixed") or {}).items()),
    ]
    slo = meta.get("slo") or {}
    return {
        "recommendation": sweep_summary(r, keys),
        "overview": pairs_table("Sweep", pairs),
        "points": frame_table("Every point", df, cols, "every metric of every point is in sweep.csv"),
        "figures": sweep_figures(r, keys),
        "slo": slo_table(slo) if slo else None,
    }


# ---------------------------------------------------------------- rendering


def _shown(v: object) -> str:
    """A swept value as text: a list read back from Parquet is an array, shown as the list it was."""
    return str(v.tolist()) if _composite(v) and hasattr(v, "tolist") else str(v)


def _md_cell(v: object) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _environment():  # noqa: ANN202 - jinja2 is imported only when a report is written
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,  # a misspelled name in a template fails the test, not silently
    )
    env.filters["mdcell"] = _md_cell
    return env


def report_context(r: ResultsDir) -> dict:
    """What the ``{kind}.html.j2`` / ``{kind}.md.j2`` templates receive."""
    if r.kind == "sweep":
        name = r.sweep_meta.get("scenario") or r.path.name
        ctx = sweep_context(r)
    elif r.kind == "plan":
        name = r.summary.get("scenario") or (r.scenario.name if r.scenario else r.path.name)
        ctx = plan_context(r)
    else:
        name = r.summary.get("scenario", r.path.name)
        ctx = run_context(r)
    ctx.setdefault("latency", None)
    ctx.setdefault("classes", None)
    for i, f in enumerate(ctx["figures"]):
        f.file = f"report_plots/{i:02d}.png"
    kind = {"run": "run", "plan": "capacity plan", "sweep": "sweep"}[r.kind]
    return {"title": f"llmsim {kind} report: {name}", "kind": r.kind, **ctx}


def build_report(r: ResultsDir) -> tuple[str, str, list[Figure]]:
    """(html, markdown, figures). Markdown links the figures as files under ``report_plots/``."""
    ctx = report_context(r)
    env = _environment()
    page = env.get_template(f"{r.kind}.html.j2").render(**ctx)
    md = env.get_template(f"{r.kind}.md.j2").render(**ctx)
    return page, md, ctx["figures"]


def write_report(path: str | Path, into: str | Path | None = None, results: ResultsDir | None = None) -> list[Path]:
    """report.html (self-contained), report.md (+ report_plots/*.png) and trace.json (Perfetto)
    of the folder ``path``, written into ``into`` (default: ``path``; ``llmsim report`` passes the
    temporary copy it swaps into place, so errors still name the real folder); ``results``: the
    folder already loaded (``llmsim report`` loads it first, so a bad folder is never copied)."""
    r = results if results is not None else ResultsDir.load(path)
    page, md, figures = build_report(r)
    out = Path(into if into is not None else path)
    plots_dir = out / "report_plots"
    if plots_dir.is_symlink():  # (a link to a folder elsewhere: its files are not this report's to overwrite)
        plots_dir.unlink()
    plots_dir.mkdir(exist_ok=True)
    for old in plots_dir.glob("[0-9][0-9].png"):  # an earlier report's extra plots would look current
        old.unlink()
    for f in figures:
        (out / f.file).write_bytes(f.png)
    run_id = r.summary.get("run_id")
    stamp = f"\n<!-- llmsim run_id: {run_id} -->\n" if run_id else ""  # invisible in both renderings
    atomic_write_text(out / "report.html", page + stamp)
    atomic_write_text(out / "report.md", md + stamp)
    written = [out / "report.html", out / "report.md"]
    output = r.scenario.output if r.scenario else None
    written += write_trace(out, r.steps, r.requests, r.summary, output, r.chunks, r.summary.get("run_id"))
    test_pause("write:report")
    return written
