"""Sweeps: run every combination of a grid of scenario overrides and collect one table.

A grid maps dotted key paths to value lists (``--set policy.chunk_tokens=256,512`` or
``--set cluster.replicas=1..8``). Points run on local processes (default), in this process
(``workers=1``) or on a Dask distributed cluster; whichever runs them, rows come back in grid
order, so the tables are identical.

Two kinds of failure, told apart (docs/planning.md, "Exit statuses"):

* an error of the grid (an unknown key, a value of the wrong type or one the scenario rejects) is
  found by ``check_points`` before anything runs: every point's scenario is validated, without
  simulating, and the first bad one is a ``UserError`` naming its axis value;
* a point that fails at run time (the model does not fit that hardware, or any unexpected
  exception while building or simulating it) is a result: its row carries an ``error`` cell
  ("type: message" for an unexpected exception) and the other points still run.
"""

from __future__ import annotations

import itertools
import math
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import yaml

from llmsim.errors import UserError, atomic_write, atomic_write_text, cut, load_yaml_file, reason, yaml_value
from llmsim.metrics import LATENCY_ROWS

if TYPE_CHECKING:
    from llmsim.scenario import Scenario

# Summary metrics copied into every sweep row: (column, path into summary.json). Latencies are
# vLLM-bench keys in ms (llmsim/metrics.py): mean, median, p90 and p99 (every point computes
# those two beside its scenario's output.percentiles: point_scenario).
_LATENCY_COLUMNS = [f"{stat}_{m}_ms" for _, m in LATENCY_ROWS for stat in ("mean", "median", "p90", "p99")]
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
    ("keeps_up", ("saturation", "keeps_up")),
    ("queue_growth_share", ("saturation", "growth_share")),
    ("kv_util_mean", ("kv_cache", "utilization_mean")),
    ("kv_util_peak", ("kv_cache", "utilization_peak")),
    ("busy_fraction", ("utilization", "replica_busy_fraction")),
    ("usd_per_hour", ("cost", "cluster_usd_per_hour")),
    ("usd_per_mtok", ("cost", "usd_per_million_tokens")),
    ("usd_per_m_output_tok", ("cost", "usd_per_million_output_tokens")),
    # with cluster.autoscaling (empty otherwise)
    ("gpu_hours", ("autoscaling", "gpu_hours")),
    ("peak_replicas", ("autoscaling", "peak_serving")),
    ("scale_ups", ("autoscaling", "scale_ups")),
]


# Most points one sweep may hold (the product of its axes). Every point is validated before the
# first runs (a few ms each) and then simulated (seconds each), so a grid past this is a typo
# (`1..100000`), and checking the count first keeps a huge range from being built in memory.
MAX_POINTS = 10_000


def parse_values(text: str, item: str | None = None) -> list[object]:
    """``a,b,c`` -> list; ``1..8`` -> 1..8 inclusive; ``1..8..2`` -> step 2; scalars via YAML.
    ``item`` is the whole ``--set`` argument, named in errors (default: ``text``)."""
    text = text.strip()
    origin = f"--set {cut(item or text)!r}"  # the item, key and all, names every mistake in it
    if ".." in text and "," not in text:
        parts = text.split("..")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise UserError(f"{origin}: range {text!r}: expected integers like 1..8 or 1..16..2") from None
        if len(nums) not in (2, 3) or (len(nums) == 3 and nums[2] <= 0) or nums[1] < nums[0]:
            raise UserError(f"{origin}: range {text!r}: expected LO..HI or LO..HI..STEP with LO <= HI and STEP > 0")
        values = range(nums[0], nums[1] + 1, nums[2] if len(nums) == 3 else 1)
        count = (values.stop - values.start + values.step - 1) // values.step  # (len() overflows past 2**63)
        if count > MAX_POINTS:
            raise UserError(f"{origin}: range {text!r}: {count:,} values; a sweep runs at most {MAX_POINTS:,} points")
        return list(values)
    # (the values as `llmsim run` reads a --set value: plain YAML data)
    items = _top_level_items(text)
    if any(v.strip() for v in items) and any(not v.strip() for v in items):  # (all empty: "no values")
        raise UserError(f"{origin}: an empty value between commas")
    return [yaml_value(origin, v) for v in items if v.strip() != ""]


def _top_level_items(text: str) -> list[str]:
    """``a,[1, 2],{x: 1, y: 2}`` -> its three values: commas inside brackets, braces or quotes
    belong to a value (a YAML list or mapping), not between values."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"" and depth == 0 and not text[start:i].strip():  # (YAML quotes a whole scalar only)
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    return [*items, text[start:]]


# output keys that change no figure of a sweep's table: an axis over them repeats one simulation
NO_FIGURE_KEYS = (
    "output.dir",
    "output.format",
    "output.trace",
    "output.trace_requests",
    "output.steps",
    "output.sample_every",
)


def _same_profile(value: str) -> str:
    """What two hardware values naming one profile have in common: its file (a shipped name in any
    case, ``hardware.profile_file``; a path as written, normalised), as plan.hardware compares them."""
    import os

    from llmsim.hardware import profile_file

    if value.lower().endswith((".yaml", ".yml")):
        return os.path.normpath(value)
    try:
        return str(profile_file(value).resolve())
    except UserError:  # (an unknown name: the point's own run names it)
        return value


def _same_value(value: object, numeric_axis: bool) -> object:
    """What two axis values that make one simulation have in common: a number by its value (1 and
    1.0; a NaN is no repeat of another), on an axis of numbers also one YAML left as text (``01``,
    ``1e0``: a number field reads it as one), anything else as shown."""
    if isinstance(value, str) and numeric_axis:
        for read in (int, float):
            try:
                value = read(value)
                break
            except ValueError:
                pass
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value if value == value else object()  # (int and float hash alike where equal)
    return shown_value(value)


def parse_grid(items: list[str]) -> dict[str, list[object]]:
    """``["policy.kind=chunked,traditional", "cluster.replicas=1..4"]`` -> ordered grid."""
    grid: dict[str, list[object]] = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"--set {item!r}: expected KEY=VALUES, e.g. cluster.replicas=1..8 or policy.kind=a,b")
        key, values = item.split("=", 1)
        vals = parse_values(values, item)
        if not vals:
            raise UserError(f"--set {item!r}: no values; give a comma list or a range, e.g. {key.strip()}=1,2 or 1..4")
        if key.strip() in NO_FIGURE_KEYS:  # (every point would run the same simulation and write nothing of its own)
            raise UserError(
                f"--set {cut(item)!r}: {key.strip()} changes no figure of a sweep point (a sweep writes one table, "
                "not each point's files); use --fix, or llmsim run for the files"
            )
        seen: set[object] = set()
        numeric = any(isinstance(v, int | float) and not isinstance(v, bool) for v in vals)
        profiles = key.strip().endswith("hardware")
        for value in vals:  # (as typed: a list or a mapping is a value too, and unhashable; a number by its value)
            same = _same_profile(value) if profiles and isinstance(value, str) else _same_value(value, numeric)
            if same in seen:  # every point with it would be simulated twice, two rows saying the same
                shown = shown_value(value)
                raise UserError(f"--set {cut(item)!r}: the value {cut(shown)} is given twice; list each value once")
            seen.add(same)
        if key.strip() in grid:  # a dict would keep the last silently: one axis's values would vanish
            raise UserError(f"--set {item!r}: the axis {key.strip()} is given twice; list all its values in one --set")
        grid[key.strip()] = vals
    points = math.prod(len(v) for v in grid.values())
    if points > MAX_POINTS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in grid.items())
        raise UserError(f"--set: {sizes} = {points:,} points; a sweep runs at most {MAX_POINTS:,}")
    return grid


def check_axes(grid: dict[str, object], fixed: dict[str, object] | None = None) -> None:
    """Axes a sweep cannot honour: one also given by ``--fix`` (the axis would silently win), and
    keys of the ``plan:`` section, which only ``llmsim plan`` reads (every point would be the same run)."""
    for key in grid:
        if key in (fixed or {}):
            raise UserError(f"--set {key}: the key is also given by --fix {key}; sweep it or fix it, not both")
    given = [("--set", k) for k in grid] + [("--fix", k) for k in fixed or {}]
    for flag, key in given:  # policy.kind under policy={...}: whichever applied last would rule unseen
        for other_flag, other in given:
            if other != key and key.startswith(other + "."):
                raise UserError(
                    f"{flag} {key}: {other_flag} {other} sets the whole of {other}, this key with it; "
                    f"give {key} inside that value, or name {other}'s keys one by one"
                )
    for key in [*grid, *(fixed or {})]:
        if key.split(".")[0].strip() == "plan":
            flag = "--set" if key in grid else "--fix"
            raise UserError(
                f"{flag} {key}: the plan: section is read by `llmsim plan` only; a sweep's points ignore it "
                "(sweep the scenario keys it names, e.g. cluster.replicas or hardware)"
            )


MAX_WORKERS_PER_CORE = 4  # --workers past this many processes per core runs with this many


def check_workers(workers: int | None) -> None:
    """``--workers``: None (every core) or at least one process."""
    if workers is not None and workers < 1:
        raise UserError(f"--workers {workers}: expected a number of processes, at least 1 (1 runs in this process)")


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


def point_scenario(data: dict, base_dir: str, origin: str, overrides: dict[str, object]) -> Scenario:
    """The validated scenario of one grid point (no simulation): ``data`` with ``overrides`` applied."""
    from llmsim.scenario import scenario_from_dict, with_overrides

    sc = scenario_from_dict(with_overrides(data, overrides), origin, Path(base_dir))
    # the sweep's and the plan's tables show and rank on p90 and p99 (METRICS): computed beside
    # whatever output.percentiles asks, else their columns would be empty
    asked = sc.output.percentiles
    if not {90.0, 99.0} <= set(asked):
        sc.output.percentiles = sorted({*asked, 90.0, 99.0})
    return sc


def check_points(data: dict, base_dir: str, origin: str, points: list[dict[str, object]]) -> None:
    """Validate every point's scenario before the first simulation; the first bad one raises a
    one-line ``UserError`` naming the axis value to blame (or the whole point when only the
    combination is rejected). Validation is a few ms a point, a simulation seconds."""
    seen: set[str] = set()
    for point in points:
        key = repr(sorted(point.items(), key=lambda kv: kv[0]))
        if key in seen:  # the same overrides twice (e.g. a repeated axis value): validated once
            continue
        seen.add(key)
        problem = _invalid(data, base_dir, origin, point)
        if problem is not None:
            raise UserError(f"{_blame(data, base_dir, origin, point)}: {problem}")


def _invalid(data: dict, base_dir: str, origin: str, overrides: dict[str, object]) -> str | None:
    """The first line of the validation error of ``overrides`` (the file name dropped), or None."""
    from llmsim.build import build_model, check_moe_keys, check_pools_parallelism, check_workload_bounds

    try:
        sc = point_scenario(data, base_dir, origin, overrides)
        check_workload_bounds(sc)
        model = build_model(sc)
        check_moe_keys(sc, model)  # (routing keys on a dense model: every point's mistake)
        check_pools_parallelism(sc, model)  # (a tp that does not divide the heads: likewise)
    except UserError as exc:
        return reason(exc, origin)
    return None


def _blame(data: dict, base_dir: str, origin: str, point: dict[str, object]) -> str:
    """``--set KEY=VALUE`` when that one value is rejected on its own, else the whole point."""
    one = rejected_override(data, base_dir, origin, point)
    if one is not None:
        return f"{origin}: {one}"
    return f"{origin}: sweep point " + ", ".join(f"{k}={shown_value(v)}" for k, v in point.items())


def rejected_override(data: dict, base_dir: str, origin: str, overrides: dict[str, object]) -> str | None:
    """``--set KEY=VALUE`` of the first override the scenario ``data`` rejects on its own, or None."""
    for key, value in overrides.items():
        if _invalid(data, base_dir, origin, {key: value}) is not None:
            return set_item("--set", key, value)  # (cut: a 400-digit value echoed whole filled the screen)
    return None


def fix_blamed(exc: UserError, path: Path, fixed: dict[str, object]) -> UserError:
    """``exc``, a mistake found in the sweep of the scenario at ``path`` with the ``--fix`` values
    ``fixed``, naming the ``--fix`` item it comes from (``file: --fix KEY=VALUE: key: problem``), as
    ``llmsim run`` names a ``--set`` item: the file would be blamed for a value it does not hold, or
    the first axis value for a problem every point has. Only an item the file rejects on its own
    with this very problem is named: a --fix may need an axis (``--fix workload.duration_s=60``
    beside ``--set workload.num_requests=null,-5``), and then a bad axis value is the mistake.
    Unchanged where the file alone is already rejected."""
    origin = str(path)
    text = str(exc).splitlines()[0] if str(exc) else ""
    if not fixed or not text.startswith(f"{origin}: "):
        return exc
    data, base_dir = sweep_data(path, None), str(path.resolve().parent)
    if _invalid(data, base_dir, origin, {}) is not None:
        return exc
    for key, value in fixed.items():
        own = _invalid(data, base_dir, origin, {key: value})
        if own is not None and text.endswith(f": {own}"):  # (after the file, or an axis value it blamed)
            return UserError(f"{origin}: {set_item('--fix', key, value)}: {own}")
    return exc


def blame_overrides(exc: UserError, path: Path, overrides: dict[str, object]) -> UserError:
    """``exc``, a mistake in the scenario at ``path`` with ``--set`` ``overrides`` applied, naming
    the ``--set`` item it comes from as a sweep names its axis value (the file alone would be
    blamed for a value it does not hold): the one item rejected on its own, else all of them
    together. Unchanged where the file alone is already rejected, or the overrides are not
    what validation rejects (a mistake found while simulating)."""
    origin = str(path)
    text = str(exc)
    if not overrides or not text.startswith(f"{origin}: "):
        return exc
    data, base_dir = load_yaml_file(path), str(path.resolve().parent)
    if not isinstance(data, dict) or _invalid(data, base_dir, origin, {}) is not None:
        return exc
    if _invalid(data, base_dir, origin, overrides) is None:
        return exc
    items = rejected_override(data, base_dir, origin, overrides) or ", ".join(
        set_item("--set", k, v) for k, v in overrides.items()
    )
    return UserError(f"{origin}: {items}: {text.removeprefix(f'{origin}: ')}")


def shown_value(value: object) -> str:
    """A value as the user typed it on the command line (YAML flow style, not Python's repr)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def set_item(option: str, key: str, value: object) -> str:
    """``--set key=value`` as an error names it: the value cut to a line, and a null one (``key=``,
    ``key=null`` or ``key=~``, which YAML all reads alike) said as read, not echoed as one spelling."""
    if value is None:
        return f"{option} {key} (its value read as null)"
    return f"{option} {key}={cut(shown_value(value))}"


def failure(exc: BaseException, origin: str) -> str:
    """The ``error`` cell of a point that failed at run time: a user error's own one-line message
    (e.g. the model does not fit), anything else as ``Type: message`` (a bug, but one point's)."""
    if isinstance(exc, UserError):
        return str(exc).replace(f"{origin}: ", "")
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else '(no message)'}"


def run_point(data: dict, base_dir: str, origin: str, overrides: dict[str, object]) -> dict[str, object]:
    """Simulate one grid point; any exception (e.g. the model does not fit) becomes its ``error`` cell,
    so one bad point never stops the others (nor prints a traceback)."""
    from llmsim.api import run

    row = empty_row(overrides)
    try:
        res = run(point_scenario(data, base_dir, origin, overrides))
    except Exception as exc:  # noqa: BLE001 - reported in the row, by design
        row["error"] = failure(exc, origin)
        return row
    row.update(summary_row(res.summary))
    return row


def empty_row(overrides: dict[str, object], error: str | None = None) -> dict[str, object]:
    """A row with the point's inputs and no metrics."""
    return {**overrides, **{col: None for col, _ in METRICS}, "error": error}


def _indexed(args: tuple[int, dict, str, str, dict]) -> tuple[int, dict]:
    i, data, base_dir, origin, overrides = args
    return i, run_point(data, base_dir, origin, overrides)


def scenario_data(path: Path) -> dict:
    """A scenario file as plain data (what ``llmsim sweep`` and ``llmsim plan`` start from): a
    mapping, and not another llmsim file given by mistake (a run's summary.json, a plan.json, a
    hardware profile), which would fail as a list of every scenario key it lacks."""
    from llmsim.filekinds import file_kind, refuse_kind

    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise UserError(
            f"{path}: expected a mapping of sections (name, model, hardware, ...), got {type(data).__name__}"
        )
    kind = file_kind(data)
    if kind is not None and kind.startswith("the resolved scenario"):  # a run's scenario.json: runs again
        return data
    refuse_kind(data, str(path), "a scenario", "give a scenario YAML (docs/scenario.md)")
    return data


def sweep_data(path: Path, overrides: dict[str, object] | None) -> dict:
    """The scenario file as plain data with the fixed overrides applied (what every point starts from)."""
    from llmsim.scenario import set_path

    data = scenario_data(path)
    data.pop("plan", None)  # the plan section is read by `llmsim plan`, not by single runs
    for key, value in (overrides or {}).items():
        set_path(data, key, value, "--fix")
    return data


def run_sweep(
    scenario_path: str | Path,
    grid: dict[str, list[object]],
    overrides: dict[str, object] | None = None,
    workers: int | None = None,
    dask: str | object | None = None,
    progress: bool = True,
    validate: bool = True,
) -> pd.DataFrame:
    """Run every point of ``grid`` on ``scenario_path`` and return one row per point, in grid order.

    ``dask`` is a scheduler address (``tcp://host:8786``) or a ``distributed.Client``; otherwise
    ``workers`` local processes run the points (``workers=1`` runs them in this process).
    Every point is validated first (``check_points``: a ``UserError`` before anything runs);
    ``validate=False`` skips that for callers that already did.
    """
    path = Path(scenario_path)
    check_axes(grid, overrides)
    data = sweep_data(path, overrides)
    points = expand(grid)
    base_dir = str(path.resolve().parent)
    if validate:
        check_points(data, base_dir, str(path), points)
    rows = run_points(data, base_dir, str(path), points, workers, dask, progress)
    return table_of(rows, list(grid))


def check_sweep(
    scenario_path: str | Path, grid: dict[str, list[object]], overrides: dict[str, object] | None = None
) -> None:
    """Validate every point of the sweep ``run_sweep`` would run (a ``UserError`` on the first bad one)."""
    path = Path(scenario_path)
    check_axes(grid, overrides)
    data = sweep_data(path, overrides)
    check_points(data, str(path.resolve().parent), str(path), expand(grid))


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

    cores = os.cpu_count() or 1
    # never more processes than points, nor than a few per core: each is a whole interpreter
    # (~150 MB), and --workers 1000 for 3 points started hundreds of them
    workers = min(workers or cores, len(tasks), MAX_WORKERS_PER_CORE * cores)
    out: list[dict | None] = [None] * len(tasks)
    with _bar(len(tasks), progress, desc) as bar:
        if workers <= 1:
            for t in tasks:
                i, row = _indexed(t)
                out[i] = row
                bar.update()
        else:
            pool = ProcessPoolExecutor(max_workers=workers, initializer=_quiet_signals)
            try:
                futures = {pool.submit(_indexed, t): t for t in tasks}
                for fut in as_completed(futures):
                    i, row = _collect(fut, futures[fut])
                    out[i] = row
                    bar.update()
            except BaseException:  # (Ctrl-C, a kill: stop now; `with` would run every point left first)
                _stop(pool)
                raise
            pool.shutdown()
    return [r for r in out if r is not None]


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel the points not started and end the workers running one (the pool's own process
    table, ``_processes``, which Python 3.10-3.14 keep; 3.14 also has ``terminate_workers``)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # (shutdown forgets them)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=5)


def _quiet_signals() -> None:
    """A worker dies of SIGTERM / SIGINT silently. Forked, it inherits the command's handlers
    (cli.sigterm_raises): when one worker dies the pool SIGTERMs the others, which then raised
    ``Terminated`` and printed a traceback each; the parent reports the lost points as rows."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _collect(fut: object, task: tuple) -> tuple[int, dict]:
    """A finished future's row. ``run_point`` catches the point's own exceptions in the worker, so
    what is left here is the machinery failing (a worker process killed, a result that cannot be
    sent back, a Dask worker lost): that point's row says so and the sweep goes on."""
    try:
        return fut.result()  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - reported in the row, by design
        i, _, _, origin, overrides = task
        return i, empty_row(overrides, failure(exc, origin))


def dask_client(address: str) -> object:
    """A ``distributed.Client`` on the scheduler at ``address``; a malformed or unreachable address
    is a one-line ``UserError`` (called before anything runs, so nothing is half-done)."""
    try:
        from distributed import Client
        from distributed.comm import parse_address
        from distributed.comm.registry import backends
    except ImportError:  # pragma: no cover - dask is a dependency
        raise UserError("--dask needs the `distributed` package: pip install 'dask[distributed]'") from None
    hint = "expected a scheduler address like tcp://10.0.0.5:8786"
    scheme, loc = parse_address(address) if address.strip() else ("", "")
    if scheme not in backends or not loc:  # an unknown scheme makes distributed wait, then assert
        raise UserError(f"--dask {address!r}: not a Dask address ({hint})")
    try:
        return Client(address, timeout="10s")
    except (ValueError, TypeError) as exc:  # e.g. 'missing port number in address'
        raise UserError(f"--dask {address!r}: not a Dask address: {exc} ({hint})") from None
    except (OSError, TimeoutError) as exc:
        raise UserError(f"--dask {address!r}: cannot connect to a Dask scheduler ({exc})") from None


def _run_dask(tasks: list[tuple], dask: str | object, progress: bool, desc: str) -> list[dict]:
    from distributed import as_completed as dask_completed

    own = isinstance(dask, str)
    client = dask_client(dask) if isinstance(dask, str) else dask
    try:
        futures = client.map(_indexed, tasks, pure=False)  # type: ignore[attr-defined]
        task_of = {f.key: t for f, t in zip(futures, tasks, strict=True)}
        out: list[dict | None] = [None] * len(tasks)
        with _bar(len(tasks), progress, f"{desc} (dask)") as bar:
            for fut in dask_completed(futures):
                i, row = _collect(fut, task_of[fut.key])
                out[i] = row
                bar.update()
        return [r for r in out if r is not None]
    finally:
        if own:
            client.close()  # type: ignore[attr-defined]


def write_table(df: pd.DataFrame, out_dir: Path, stem: str = "sweep") -> list[Path]:
    """``sweep.parquet`` and ``sweep.csv`` (both written atomically)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv, pq = out_dir / f"{stem}.csv", out_dir / f"{stem}.parquet"
    atomic_write_text(csv, df.to_csv(index=False, float_format="%.9g"))
    atomic_write(pq, lambda tmp: df.to_parquet(tmp, index=False))
    return [pq, csv]
