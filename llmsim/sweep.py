"""Sweeps: run every combination of a grid of scenario overrides and collect one table.

A grid maps dotted key paths to value lists (``--set policy.chunk_tokens=256,512`` or
``--set cluster.replicas=1..8``). Points run on local processes (default), in this process
(``workers=1``) or on a Dask distributed cluster; whichever runs them, rows come back in grid
order, so the tables are identical.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import pandas as pd
import yaml

from llmsim.errors import UserError, atomic_write, atomic_write_text, load_yaml_file

# Summary metrics copied into every sweep row: (column, path into summary.json). Latencies are
# vLLM-bench keys in ms (llmsim/metrics.py): mean, median, p90 and p99, present where the
# scenario's output.percentiles include 90 and 99 (the default).
_LATENCY_COLUMNS = [
    f"{stat}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el", "tbt_max") for stat in ("mean", "median", "p90", "p99")
]
METRICS: list[tuple[str, tuple[str, ...]]] = [
    ("requests", ("requests", "total")),
    ("completed", ("completed",)),
    ("rejected", ("requests", "rejected")),
    ("preemptions", ("requests", "preemptions")),
    ("offered_rps", ("workload", "mean_rate_rps")),
    ("request_throughput", ("request_throughput",)),
    ("request_goodput", ("request_goodput",)),
    ("output_throughput", ("output_throughput",)),
    ("total_token_throughput", ("total_token_throughput",)),
    *((col, (col,)) for col in _LATENCY_COLUMNS),
    ("slo_attainment", ("slo", "attainment")),
    ("slo_met", ("slo", "met_target")),
    ("verdict", ("saturation", "verdict")),
    ("queue_growth_share", ("saturation", "growth_share")),
    ("kv_util_mean", ("kv_cache", "utilization_mean")),
    ("kv_util_peak", ("kv_cache", "utilization_peak")),
    ("busy_fraction", ("utilization", "replica_busy_fraction")),
    ("usd_per_hour", ("cost", "cluster_usd_per_hour")),
    ("usd_per_mtok", ("cost", "usd_per_million_tokens")),
    ("usd_per_m_output_tok", ("cost", "usd_per_million_output_tokens")),
]


def parse_values(text: str) -> list[object]:
    """``a,b,c`` -> list; ``1..8`` -> 1..8 inclusive; ``1..8..2`` -> step 2; scalars via YAML."""
    text = text.strip()
    if ".." in text and "," not in text:
        parts = text.split("..")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise UserError(f"range {text!r}: expected integers like 1..8 or 1..16..2") from None
        if len(nums) not in (2, 3) or (len(nums) == 3 and nums[2] <= 0) or nums[1] < nums[0]:
            raise UserError(f"range {text!r}: expected LO..HI or LO..HI..STEP with LO <= HI and STEP > 0")
        return list(range(nums[0], nums[1] + 1, nums[2] if len(nums) == 3 else 1))
    return [yaml.safe_load(v) for v in text.split(",") if v.strip() != ""]


def parse_grid(items: list[str]) -> dict[str, list[object]]:
    """``["policy.kind=chunked,traditional", "cluster.replicas=1..4"]`` -> ordered grid."""
    grid: dict[str, list[object]] = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"--set {item!r}: expected KEY=VALUES, e.g. cluster.replicas=1..8 or policy.kind=a,b")
        key, values = item.split("=", 1)
        vals = parse_values(values)
        if not vals:
            raise UserError(f"--set {item!r}: no values")
        grid[key.strip()] = vals
    return grid


def expand(grid: dict[str, list[object]]) -> list[dict[str, object]]:
    """Every combination, the last key varying fastest (the order of the table's rows)."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


def _get(d: dict, path: tuple[str, ...]) -> object:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def summary_row(summary: dict) -> dict[str, object]:
    """The flat metrics of one run (None where a metric does not apply)."""
    return {col: _get(summary, path) for col, path in METRICS}


def run_point(data: dict, base_dir: str, origin: str, overrides: dict[str, object]) -> dict[str, object]:
    """Simulate one grid point; a user error (e.g. the model does not fit) becomes an ``error`` cell."""
    import copy

    from llmsim.api import run
    from llmsim.scenario import scenario_from_dict, set_path

    row: dict[str, object] = {**overrides, **{col: None for col, _ in METRICS}, "error": None}
    try:
        d = copy.deepcopy(data)
        for key, value in overrides.items():
            set_path(d, key, value)
        sc = scenario_from_dict(d, origin, Path(base_dir))
        res = run(sc)
    except UserError as exc:
        row["error"] = str(exc).replace(f"{origin}: ", "")
        return row
    row.update(summary_row(res.summary))
    return row


def _indexed(args: tuple[int, dict, str, str, dict]) -> tuple[int, dict]:
    i, data, base_dir, origin, overrides = args
    return i, run_point(data, base_dir, origin, overrides)


def run_sweep(
    scenario_path: str | Path,
    grid: dict[str, list[object]],
    overrides: dict[str, object] | None = None,
    workers: int | None = None,
    dask: str | object | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Run every point of ``grid`` on ``scenario_path`` and return one row per point, in grid order.

    ``dask`` is a scheduler address (``tcp://host:8786``) or a ``distributed.Client``; otherwise
    ``workers`` local processes run the points (``workers=1`` runs them in this process).
    """
    path = Path(scenario_path)
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of sections")
    data.pop("plan", None)  # the plan section is read by `llmsim plan`, not by single runs
    from llmsim.scenario import set_path

    for key, value in (overrides or {}).items():
        set_path(data, key, value)
    rows = run_points(data, str(path.resolve().parent), str(path), expand(grid), workers, dask, progress)
    return table_of(rows, list(grid))


def run_points(
    data: dict,
    base_dir: str,
    origin: str,
    points: list[dict[str, object]],
    workers: int | None = None,
    dask: str | object | None = None,
    progress: bool = True,
    desc: str = "sweep",
) -> list[dict]:
    """Run ``points`` (override dicts) on the scenario ``data``; rows come back in ``points`` order."""
    tasks = [(i, data, base_dir, origin, p) for i, p in enumerate(points)]
    if not tasks:
        return []
    if dask is not None:
        return _run_dask(tasks, dask, progress, desc)
    return _run_local(tasks, workers, progress, desc)


def table_of(rows: list[dict], input_cols: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=[*input_cols, *(c for c, _ in METRICS), "error"])
    # mixed-type input columns (e.g. 512 and "auto") become strings so Parquet can store them
    for col in input_cols:
        if df[col].map(type).nunique() > 1:
            df[col] = df[col].astype(str)
    return df


def _bar(total: int, progress: bool, desc: str):
    from llmsim.progress import bar

    return bar(total, desc, progress, unit="run")


def _run_local(tasks: list[tuple], workers: int | None, progress: bool, desc: str) -> list[dict]:
    import os

    workers = workers or min(len(tasks), os.cpu_count() or 1)
    out: list[dict | None] = [None] * len(tasks)
    with _bar(len(tasks), progress, desc) as bar:
        if workers <= 1:
            for t in tasks:
                i, row = _indexed(t)
                out[i] = row
                bar.update()
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(_indexed, t) for t in tasks]
                for fut in as_completed(futures):
                    i, row = fut.result()
                    out[i] = row
                    bar.update()
    return [r for r in out if r is not None]


def _run_dask(tasks: list[tuple], dask: str | object, progress: bool, desc: str) -> list[dict]:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:  # pragma: no cover - dask is a dependency
        raise UserError("--dask needs the `distributed` package: pip install 'dask[distributed]'") from None
    own = isinstance(dask, str)
    try:
        client = Client(dask, timeout="10s") if own else dask
    except OSError as exc:
        raise UserError(f"--dask {dask}: cannot connect to a Dask scheduler ({exc})") from None
    try:
        futures = client.map(_indexed, tasks, pure=False)  # type: ignore[attr-defined]
        out: list[dict | None] = [None] * len(tasks)
        with _bar(len(tasks), progress, f"{desc} (dask)") as bar:
            for fut in dask_completed(futures):
                i, row = fut.result()
                out[i] = row
                bar.update()
        return [r for r in out if r is not None]
    finally:
        if own:
            client.close()


def write_table(df: pd.DataFrame, out_dir: Path, stem: str = "sweep") -> list[Path]:
    """``sweep.parquet`` and ``sweep.csv`` (both written atomically)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv, pq = out_dir / f"{stem}.csv", out_dir / f"{stem}.parquet"
    atomic_write_text(csv, df.to_csv(index=False, float_format="%.9g"))
    atomic_write(pq, lambda tmp: df.to_parquet(tmp, index=False))
    return [pq, csv]
