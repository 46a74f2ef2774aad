"""``llmsim calibrate --serving``: fit the engine's host terms (and, for a machine without a
measured profile, the kernel model's efficiencies) to a real engine's serving runs.

A run is a folder written by ``benchmarks/vllm_cpu/`` (data/validation/vllm-cpu/README.md):
``meta.json`` (engine arguments, resolved configuration), ``requests.csv`` (every request's
arrival, first token, finish) and ``steps.csv.gz`` (every engine step with its wall-clock
phases: schedule, model execution, output processing, and its batch as ``tokens@computed``).
Each step's phases are fitted separately, because each is its own named engine term:

* ``schedule`` = step start -> end of ``Scheduler.schedule``;
* ``prepare`` + device = end of scheduling -> start of ``update_from_output`` (input preparation,
  the forward pass, sampling): the device part is the cost model's price of the step's batch,
  the rest is ``prepare``;
* ``output`` = ``update_from_output`` -> the next step's start when the engine stays busy.

Each host term is ``base + per_seq · seqs + per_token · tokens``, a non-negative least squares
fit. With ``fit_hardware`` the kernel model's efficiencies and launch overhead are refined too
(bounded, on the log of the execution time, jointly with ``prepare``), as ``calibrate
--local-cpu`` refines a profile on the reference engine's steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.errors import UserError, load_json_object
from llmsim.vllmcli import DTYPES as _VLLM_DTYPES
from llmsim.workload.limits import MAX_ARRIVAL_S, MAX_REQUESTS, MAX_TOKENS_PER_REQUEST

STEP_COLUMNS = {
    "step_start_s",
    "sched_end_s",
    "update_start_s",
    "step_end_s",
    "num_scheduled_reqs",
    "num_scheduled_tokens",
    "batch",
}
# a run's engine_args.dtype as llmsim names it: vllm serve's --dtype choices (vllmcli.DTYPES), its
# auto the bf16 vLLM's CPU backend serves an fp32 config in
DTYPES = {**_VLLM_DTYPES, "auto": "bf16"}
BUSY_GAP_S = 2e-3  # a gap between steps longer than this is idle time (waiting for arrivals)
HW_FIT_KEYS = ("gemm_max_fraction", "memory_fraction", "attention_fraction", "elementwise_memory_fraction")
# refined too where the profile has them (absent, their ops follow memory_fraction)
HW_FIT_OPTIONAL = ("moe_memory_fraction", "attention_memory_fraction")
HW_FIT_OVERHEADS = ("kernel_launch_s",)
FIT_RANGE = 4.0  # a refined efficiency stays within this factor of the profile's prior
MAX_FIT_STEPS = 1500  # steps used by the joint fit (evenly spaced over all calibration steps)
# past this mean error the fit describes nothing (the shipped CPU fit: 12%; the wrong model: 26,000%)
MAX_EXEC_MAPE = 1.0
# steps a run may hold: a day of an engine's steps at ~10 a second; read no further (a gzip of
# repeated rows is small on disk and unbounded in memory)
MAX_STEPS = 1_000_000
# a step's sequences: the largest max_num_seqs any engine takes is thousands
MAX_STEP_SEQS = 1_000_000
MAX_CSV_BYTES = 2**30  # a run's table, inflated: 1,000,000 steps of ~1 KB (a batch of hundreds of sequences)
STAMP_SLACK_S = 1.0  # a step may start before the first arrival / end after the last finish by this much
MIN_STEPS_PER_TERM = 2  # steps the fit needs per term it fits (schedule, output: 3 each; execution: its own)


@dataclass
class ServingRun:
    """One measured run: its folder, metadata, requests and steps."""

    name: str
    folder: Path
    meta: dict
    requests: pd.DataFrame
    steps: pd.DataFrame | None

    @property
    def engine_args(self) -> dict:
        """meta.json's ``engine_args`` (an object where given: ``_check_meta``)."""
        return self.meta.get("engine_args", {})


def read_run(folder: Path) -> ServingRun:
    """A run folder of the vLLM harness; a clear error naming what is missing."""
    folder = Path(folder)
    meta_path = folder / "meta.json"
    if not folder.is_dir():  # (not "no meta.json": a mistyped path is not a folder missing one file)
        raise UserError(
            f"{folder}: {'no such folder' if not folder.exists() else 'a file'}; expected a "
            "measured run folder (meta.json, requests.csv; data/validation/vllm-cpu/README.md)"
        )
    if not meta_path.exists():
        raise UserError(f"{folder}: not a serving run (no meta.json); see data/validation/vllm-cpu/README.md")
    meta = load_json_object(meta_path)
    _check_meta(meta, meta_path)
    req_path = folder / "requests.csv"
    requests = _read_csv(req_path, MAX_REQUESTS) if req_path.exists() else pd.DataFrame()  # a step profile has none
    missing = set(REQUEST_COLUMNS) - set(requests.columns)
    if len(requests.columns) and missing:  # (before "no rows": a file cut inside its header has neither)
        raise UserError(f"{req_path}: missing column(s) {sorted(missing)}")
    if req_path.exists() and requests.empty:
        raise UserError(f"{req_path}: no requests (a header without rows); a step profile has no requests.csv")
    _check_numbers(requests, req_path)
    steps_path = folder / "steps.csv.gz"
    steps = _read_csv(steps_path, MAX_STEPS) if steps_path.exists() else None
    if steps is not None and (missing := STEP_COLUMNS - set(steps.columns)):
        raise UserError(f"{steps_path}: missing column(s) {sorted(missing)}; see data/validation/vllm-cpu/README.md")
    if steps is not None:
        _check_steps(steps, steps_path, requests)
    if steps is None and requests.empty:
        raise UserError(f"{folder}: neither requests.csv nor steps.csv.gz")
    return ServingRun(folder.name, folder, meta, requests, steps)


REQUEST_COLUMNS = ("id", "arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens")


def _read_csv(path: Path, max_rows: int) -> pd.DataFrame:
    """A run's CSV (plain or gzipped), one line naming the file when it cannot be parsed: cut short
    (a copy interrupted), not CSV, or gzip data under a plain name; no more than ``max_rows`` rows
    are read (memory stays bounded whatever the file inflates to)."""
    import gzip
    import zlib

    try:
        _check_inflated_size(path)
        table = pd.read_csv(path, nrows=max_rows + 1)
    except (ValueError, EOFError, OSError, gzip.BadGzipFile, zlib.error) as exc:  # ParserError, UnicodeDecodeError
        text = str(exc).strip().splitlines()
        raise UserError(f"{path}: not a readable CSV table ({text[0] if text else type(exc).__name__})") from None
    if len(table) > max_rows:
        raise UserError(f"{path}: more than {max_rows:,} rows, more than a run may hold")
    return table


def _check_inflated_size(path: Path) -> None:
    """A table's bytes as pandas would see them (a gzip's inflated) are at most MAX_CSV_BYTES: counted
    while streaming, so a small file that inflates past memory is refused before it is held."""
    import gzip

    with path.open("rb") as raw:
        zipped = raw.read(2) == b"\x1f\x8b"
    if not zipped:
        if path.stat().st_size > MAX_CSV_BYTES:
            raise UserError(
                f"{path}: {path.stat().st_size:,} bytes, more than a run's table may hold ({MAX_CSV_BYTES:,})"
            )
        return
    seen = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            seen += len(chunk)
            if seen > MAX_CSV_BYTES:
                raise UserError(f"{path}: inflates past {MAX_CSV_BYTES:,} bytes, more than a run's table may hold")


def _check_meta(meta: dict, path: Path) -> None:
    """The keys of meta.json that the fit and the engine profile read, each of its type: a list
    where an object belongs, or text where a flag belongs, named rather than misread."""
    for key in ("engine_args", "resolved"):
        if key in meta and not isinstance(meta[key], dict):
            raise UserError(f"{path}: {key}: expected an object, got {type(meta[key]).__name__}")
    resolved = meta.get("resolved") or {}
    sched = resolved.get("scheduler")
    if sched is not None and not isinstance(sched, dict):
        raise UserError(f"{path}: resolved.scheduler: expected an object, got {type(sched).__name__}")
    meta_flag(sched or {}, "async_scheduling", False, f"{path}: resolved.scheduler")
    sizes = resolved.get("cudagraph_capture_sizes")
    ok = isinstance(sizes, list) and all(
        isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 2**24 for x in sizes
    )
    if sizes is not None and not ok:
        raise UserError(
            f"{path}: resolved.cudagraph_capture_sizes: expected a list of batch sizes from 1 to {2**24:,}, got {sizes!r}"
        )
    model = (meta.get("engine_args") or {}).get("model")
    if model is not None and not isinstance(model, str):
        raise UserError(f"{path}: engine_args.model: expected the served model's name or path, got {model!r}")


def meta_flag(section: dict, key: str, default: bool, where: str) -> bool:
    """``section[key]`` of a meta.json as true or false (``default`` where absent or null); text
    such as "false" is refused, not read as true."""
    value = section.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise UserError(f"{where}.{key}: expected true or false, got {value!r}")
    return value


def _check_steps(steps: pd.DataFrame, path: Path, requests: pd.DataFrame) -> None:
    """Every step's stamps and counts are numbers of the run (its clock, in seconds; whole counts in
    range) and its batch (``tokens@computed`` items) adds up to them: a stamp in milliseconds, a
    count that contradicts the batch, or a malformed cell is named by row, not fitted."""

    def where(row: int, col: str) -> str:
        return f"{path}: row {row + 2}, column {col!r}"

    stamps = ("step_start_s", "sched_end_s", "update_start_s", "step_end_s")
    for col in (*stamps, "num_scheduled_reqs", "num_scheduled_tokens"):
        values = pd.to_numeric(steps[col], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            got = steps[col].iloc[bad[0]]
            shown = "a blank or NaN cell" if pd.isna(got) else repr(str(got))
            raise UserError(f"{where(int(bad[0]), col)}: expected a finite number, got {shown}")
        steps[col] = values
    for col, high in (("num_scheduled_reqs", MAX_STEP_SEQS), ("num_scheduled_tokens", MAX_TOKENS_PER_REQUEST)):
        v = steps[col].to_numpy()
        bad = np.flatnonzero((v < 0) | (v > high) | (v != np.floor(v)))
        if len(bad):
            raise UserError(f"{where(int(bad[0]), col)}: expected a whole count from 0 to {high:,}, got {v[bad[0]]:g}")
    if not requests.empty:  # one clock (data/validation/vllm-cpu/README.md): steps fall within the requests'
        first = float(requests["arrival_s"].min()) - STAMP_SLACK_S
        last = float(requests["finish_s"].max()) + STAMP_SLACK_S
        for col in stamps:
            v = steps[col].to_numpy()
            bad = np.flatnonzero((v < first) | (v > last))
            if len(bad):
                raise UserError(
                    f"{where(int(bad[0]), col)}: {v[bad[0]]:g} s, outside the run's requests ({first + STAMP_SLACK_S:g} to "
                    f"{last - STAMP_SLACK_S:g} s, requests.csv, on the same clock): a stamp in another unit?"
                )
    t = steps[list(stamps)].to_numpy()
    back = np.flatnonzero((t[:, 1:] <= t[:, :-1]).any(axis=1))
    if len(back):  # (a step's phases are the differences of its stamps: each must be positive)
        row = int(back[0])
        col = stamps[1 + int(np.flatnonzero(t[row, 1:] <= t[row, :-1])[0])]
        raise UserError(
            f"{where(row, col)}: {t[row, stamps.index(col)]:g} s, not after the step's stamp before it; each "
            f"step's stamps come in order: {', '.join(stamps)}"
        )
    early = np.flatnonzero(t[1:, 0] < t[:-1, -1])  # (a step starts after the one before it ends)
    if len(early):
        row = int(early[0]) + 1
        raise UserError(
            f"{where(row, 'step_start_s')}: {t[row, 0]:g} s, before the step above it ended ({t[row - 1, -1]:g} s, "
            "step_end_s): one engine runs one step at a time"
        )
    if "step" in steps:
        blank = steps["step"].isna()
        if blank.any():
            raise UserError(f"{where(int(np.flatnonzero(blank.to_numpy())[0]), 'step')}: a blank step id")
        twice = steps["step"].duplicated()
        if twice.any():
            row = int(np.flatnonzero(twice.to_numpy())[0])
            raise UserError(f"{where(row, 'step')}: step {steps['step'].iloc[row]} again: one row a step")
    for row, (batch, seqs, tokens) in enumerate(
        zip(steps["batch"], steps["num_scheduled_reqs"], steps["num_scheduled_tokens"], strict=True)
    ):
        items = _batch_items(batch, where(row, "batch"))
        if len(items) != seqs or sum(n for n, _ in items) != tokens:
            raise UserError(
                f"{where(row, 'batch')}: {len(items)} sequences of {sum(n for n, _ in items):,} tokens, where the step "
                f"says {seqs:g} sequences (num_scheduled_reqs) of {tokens:g} tokens (num_scheduled_tokens)"
            )


def _batch_items(batch: object, where: str) -> list[tuple[int, int]]:
    """``"365@0 1@365"`` -> [(365, 0), (1, 365)]: tokens >= 1 computed after >= 0 already computed."""
    items = []
    for item in str(batch if not pd.isna(batch) else "").split():
        n, at, done = item.partition("@")
        if not (at and n.isdigit() and done.isdigit()):
            raise UserError(f"{where}: {item!r}: expected tokens@computed (whole numbers, as 365@0)")
        tokens, computed = int(n), int(done)
        if not 1 <= tokens <= MAX_TOKENS_PER_REQUEST or computed > MAX_TOKENS_PER_REQUEST:
            raise UserError(f"{where}: {item!r}: token counts from 1 (computed from 0) to {MAX_TOKENS_PER_REQUEST:,}")
        items.append((tokens, computed))
    return items


def _check_numbers(requests: pd.DataFrame, path: Path) -> None:
    """Every measured request has finite times and token counts: a blank or NaN cell would drop out
    of the comparison's medians silently."""
    for col in REQUEST_COLUMNS[1:]:
        values = pd.to_numeric(requests[col], errors="coerce") if col in requests else pd.Series(dtype=float)
        bad = values.index[~np.isfinite(values.to_numpy(dtype=float))]
        if len(bad):
            row = int(bad[0])
            got = requests[col].iloc[row]
            shown = "a blank or NaN cell" if pd.isna(got) else repr(str(got))
            raise UserError(f"{path}: row {row + 2}, column {col!r}: expected a finite number, got {shown}")
    if requests.empty:
        return
    # a request's times in order (each stamp is on the run's clock, t0 = the first arrival)
    rules = (
        ("arrival_s", requests["arrival_s"] < 0, "an arrival before the run's start (negative)"),
        ("first_token_s", requests["first_token_s"] < requests["arrival_s"], "a first token before its arrival"),
        ("finish_s", requests["finish_s"] < requests["first_token_s"], "a finish before its first token"),
        # (1e9 s, ~32 years, as a workload's arrivals: a stamp in another unit, not a run's length)
        ("finish_s", requests["finish_s"] > MAX_ARRIVAL_S, f"past {MAX_ARRIVAL_S:.0e} s after the run's start"),
        ("prompt_tokens", requests["prompt_tokens"] < 1, "fewer than 1 prompt token"),
        ("output_tokens", requests["output_tokens"] < 1, "fewer than 1 output token"),
        ("prompt_tokens", requests["prompt_tokens"] > MAX_TOKENS_PER_REQUEST, "over the limit of tokens per request"),
        ("output_tokens", requests["output_tokens"] > MAX_TOKENS_PER_REQUEST, "over the limit of tokens per request"),
    )
    for col, bad, what in rules:
        rows = np.flatnonzero(bad.to_numpy())
        if len(rows):
            row = int(rows[0])
            raise UserError(f"{path}: row {row + 2}, column {col!r}: {what} ({requests[col].iloc[row]})")
    blank = np.flatnonzero(requests["id"].isna().to_numpy() | (requests["id"].astype(str).str.strip() == ""))
    if len(blank):
        raise UserError(f"{path}: row {int(blank[0]) + 2}, column 'id': a blank cell (each request has its own id)")
    again = np.flatnonzero(requests["id"].astype(str).duplicated().to_numpy())
    if len(again):  # (the comparison matches requests by id: a second one would be scored twice)
        row = int(again[0])
        raise UserError(f"{path}: row {row + 2}, column 'id': {requests['id'].iloc[row]!r} is given twice")


def parse_batch(batch: str) -> tuple[list[tuple[int, int]], list[int]]:
    """``"365@0 1@365"`` -> prefill chunks [(tokens, computed before)] and decode contexts (a run's
    cells were checked as it was read: ``_batch_items``)."""
    chunks: list[tuple[int, int]] = []
    decodes: list[int] = []
    for tokens, computed in _batch_items(batch, "batch"):
        if tokens == 1 and computed > 0:
            decodes.append(computed)
        else:
            chunks.append((tokens, computed))
    return chunks, decodes


def step_phases(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step: seqs, tokens and the seconds of its three phases (``output`` includes the gap
    to the next step when the engine stayed busy)."""
    s = steps.sort_values("step_start_s").reset_index(drop=True)
    gap = (s["step_start_s"].shift(-1) - s["step_end_s"]).fillna(0.0)
    gap = gap.where(gap < BUSY_GAP_S, 0.0)
    return pd.DataFrame(
        {
            "batch": s["batch"],
            "seqs": s["num_scheduled_reqs"],
            "tokens": s["num_scheduled_tokens"],
            "schedule_s": s["sched_end_s"] - s["step_start_s"],
            "exec_s": s["update_start_s"] - s["sched_end_s"],
            "output_s": s["step_end_s"] - s["update_start_s"] + gap,
        }
    )


def batch_changed(batches: pd.Series, seqs: pd.Series) -> np.ndarray:
    """Per step (in step order): did the running batch change in the step before? It carried
    prompt tokens, or a request left (the step before ran more sequences than this one, less
    those this one starts). What the engine's ``batch_change`` term prices (engine.py)."""
    parsed = [parse_batch(b) for b in batches]
    prompt = np.array([sum(c for c, _ in chunks) for chunks, _ in parsed])
    starts = np.array([sum(1 for _, done in chunks if done == 0) for chunks, _ in parsed])
    n = seqs.to_numpy()
    changed = np.zeros(len(n), dtype=bool)
    changed[1:] = (prompt[:-1] > 0) | (n[:-1] > n[1:] - starts[1:])
    return changed


def nnls_term(
    seqs: np.ndarray, tokens: np.ndarray, y: np.ndarray, extra: np.ndarray | None = None
) -> tuple[list[float], float]:
    """``base, per_seq, per_token`` >= 0 by non-negative least squares (then one coefficient per
    column of ``extra``, if given); and the fit's MAPE."""
    from scipy.optimize import nnls

    a = np.column_stack([np.ones(len(y)), seqs, tokens, *([] if extra is None else [extra])]).astype(float)
    scale = a.max(axis=0)  # columns of similar size for a well-conditioned solve
    scale[scale <= 0] = 1.0  # (a column of zeros: nothing to scale)
    coef, _ = nnls(a / scale, y)
    coef = coef / scale
    pred = a @ coef
    timed = y > 0  # a phase the clock saw as 0 s has no relative error
    mape = float(np.mean(np.abs(pred[timed] - y[timed]) / y[timed])) if timed.any() else float("nan")
    return [float(c) for c in coef], mape


def _term_dict(coef: list[float], source: str) -> dict:
    return {"base_s": coef[0], "per_seq_s": coef[1], "per_token_s": coef[2], "source": source}


def run_dtype(run: ServingRun) -> str:
    """The dtype the run served in (meta.json engine_args.dtype), as llmsim names it."""
    raw = str(run.engine_args.get("dtype", "auto")).removeprefix("torch.")
    if raw not in DTYPES:
        raise UserError(f"{run.folder}/meta.json: engine_args.dtype {raw!r} is not one of {sorted(DTYPES)}")
    return DTYPES[raw]


def fit_serving(
    runs: list[ServingRun], model_spec, hw_data: dict, fit_hardware: bool, fit_batch_change: bool = False
) -> tuple[dict, dict | None, dict]:
    """(engine profile fields, refined hardware profile data or None, fit report). With
    ``fit_batch_change`` the execution fit also takes ``batch_change`` (base and per sequence) on
    the steps whose batch changed in the step before (``batch_changed``)."""
    from scipy.optimize import least_squares

    from llmsim.calibration.enginefit import with_values
    from llmsim.costmodel import CostConfig, CostModel
    from llmsim.costmodel.ops import model_batch_shape
    from llmsim.engine import EngineSpec
    from llmsim.hardware import HardwareProfile

    _check_runs(runs)
    phases = []
    for r in runs:  # (each run's steps in order: whether a step's batch changed reads the one before)
        if r.steps is not None:
            one = step_phases(r.steps)
            if fit_batch_change:
                one["changed"] = batch_changed(one["batch"], one["seqs"])
            phases.append(one)
    if not phases:
        raise UserError("calibrate --serving: none of the runs has steps.csv.gz (per-step times are needed)")
    ph = pd.concat(phases, ignore_index=True)
    read = len(ph)
    ph = ph[(ph["exec_s"] > 0) & (ph["schedule_s"] > 0) & (ph["output_s"] > 0)].reset_index(drop=True)
    names = ", ".join(r.name for r in runs)
    if ph.empty:  # (a steps.csv.gz with a header only, or every step's stamps out of order)
        raise UserError(
            f"calibrate --serving: of the {read:,} steps in {names}'s steps.csv.gz none has positive schedule, "
            "execution and output times (each step's stamps in order: start, sched_end, update_start, end)"
        )
    terms = 3 + (len(HW_FIT_KEYS) + len(HW_FIT_OPTIONAL) + len(HW_FIT_OVERHEADS) if fit_hardware else 0)
    terms += 2 if fit_batch_change else 0
    if len(ph) < MIN_STEPS_PER_TERM * terms:  # (fewer, and the fit is exact on nothing: any terms pass)
        raise UserError(
            f"calibrate --serving: {len(ph):,} usable steps in {names}; fitting {terms} terms of the execution time "
            f"needs at least {MIN_STEPS_PER_TERM * terms}"
        )
    seqs, tokens = ph["seqs"].to_numpy(), ph["tokens"].to_numpy()
    sched, sched_err = nnls_term(seqs, tokens, ph["schedule_s"].to_numpy())
    out, out_err = nnls_term(seqs, tokens, ph["output_s"].to_numpy())

    pick = np.unique(np.linspace(0, len(ph) - 1, min(MAX_FIT_STEPS, len(ph))).astype(int))
    sub = ph.iloc[pick]
    shapes = [model_batch_shape(model_spec, *parse_batch(b)) for b in sub["batch"]]
    y = sub["exec_s"].to_numpy()
    s_seqs, s_tokens = sub["seqs"].to_numpy(), sub["tokens"].to_numpy()
    # the batch_change term's columns (none without fit_batch_change): changed, changed x seqs
    change_cols = np.zeros((len(sub), 0))
    if fit_batch_change:
        chg = sub["changed"].to_numpy().astype(float)
        change_cols = np.column_stack([chg, chg * s_seqs])
    n_chg = change_cols.shape[1]
    dtypes = {run_dtype(r) for r in runs}
    if len(dtypes) > 1:
        raise UserError(f"calibrate --serving: the runs served in different dtypes {sorted(dtypes)}; fit them apart")
    dt = dtypes.pop()
    cfg = CostConfig(weight_dtype=dt, kv_dtype=dt, act_dtype=dt, attention_kernel="flash")
    device_only = EngineSpec("device", "device time only")  # no host terms: step_time = the kernels

    def device_s(data: dict) -> np.ndarray:
        cost = CostModel(model_spec, HardwareProfile.model_validate(data), cfg, device_only)
        return np.array([cost.step_time(s) for s in shapes])

    optional = [k for k in HW_FIT_OPTIONAL if hw_data["efficiency"].get(k)]
    keys = [*HW_FIT_KEYS, *optional, *HW_FIT_OVERHEADS]
    fitted_hw = None
    if fit_hardware:
        x0 = np.log([_value(hw_data, k) for k in keys])

        n_keys = len(keys)

        def model(x: np.ndarray) -> tuple[np.ndarray, dict]:
            data = with_values(hw_data, dict(zip(keys, np.exp(x[:n_keys]), strict=True)))
            host = x[n_keys] + x[n_keys + 1] * s_seqs + x[n_keys + 2] * s_tokens + change_cols @ x[n_keys + 3 :]
            return device_s(data) + host, data

        def resid(x: np.ndarray) -> np.ndarray:
            return np.log(np.maximum(model(x)[0], 1e-9) / y)

        lo = np.r_[x0 - math.log(FIT_RANGE), 0.0, 0.0, 0.0, np.zeros(n_chg)]
        # efficiencies are fractions of a peak: never above 1 (an overhead has no such cap)
        cap = np.array([0.0 if not k.endswith("_s") else np.inf for k in keys])
        hi = np.r_[np.minimum(x0 + math.log(FIT_RANGE), cap), 0.1, 1e-3, 1e-5, [0.1, 1e-3][:n_chg]]
        start = np.r_[x0, 1e-4, 1e-6, 0.0, [1e-4, 1e-6][:n_chg]]
        res = least_squares(resid, np.clip(start, lo, hi), bounds=(lo, hi), diff_step=1e-3, max_nfev=60)
        pred, fitted_hw = model(res.x)
        prep = [float(v) for v in res.x[n_keys : n_keys + 3]]
        change = [float(v) for v in res.x[n_keys + 3 :]]
        fitted_hw = {**fitted_hw, "calibration": {"method": "calibrate --serving --fit-hardware", "runs": names}}
        for k, v in zip(keys, np.exp(res.x[: len(keys)]), strict=True):
            section = "overheads" if k.endswith("_s") else "efficiency"
            fitted_hw[section][k] = {
                "value": float(v),
                "source": f"fitted by calibrate --serving to model-execution times of {names}",
            }
    else:
        dev = device_s(hw_data)
        coef, _ = nnls_term(s_seqs, s_tokens, np.maximum(y - dev, 0.0), change_cols)
        prep, change = coef[:3], coef[3:]
        pred = dev + prep[0] + prep[1] * s_seqs + prep[2] * s_tokens + change_cols @ np.array(change)
    exec_err = float(np.mean(np.abs(pred - y) / y))
    if exec_err > MAX_EXEC_MAPE:  # (a fit this far off priced another model or machine than the run's)
        served = sorted({str(r.engine_args.get("model", "?")) for r in runs})
        raise UserError(
            f"calibrate --serving: the kernel model misses the runs' model-execution times by {exec_err:.0%} "
            f"on average even after fitting: is --model the model they served ({', '.join(served)}, meta.json) "
            f"and --hardware their machine ({hw_data.get('name', '?')} given)?"
        )
    src = f"calibrate --serving on {names}"
    engine = {
        "name": "fitted",
        "source": src,
        "schedule": _term_dict(sched, f"{src}: step start -> end of Scheduler.schedule"),
        "prepare": _term_dict(prep, f"{src}: execution time beyond the kernel model (inputs, sampling)"),
        "output": _term_dict(out, f"{src}: update_from_output -> next step (busy)"),
    }
    if fit_batch_change:
        engine["batch_change"] = _term_dict(
            [*change, 0.0], f"{src}: execution time of a step whose batch changed in the step before"
        )
    report = {
        "runs": [r.name for r in runs],
        "steps": int(len(ph)),
        "exec_fit_steps": int(len(sub)),
        "mape": {"schedule": sched_err, "exec": exec_err, "output": out_err},
        "median_s": {k: float(ph[f"{k}_s"].median()) for k in ("schedule", "exec", "output")},
    }
    return engine, fitted_hw, report


def _check_runs(runs: list[ServingRun]) -> None:
    """One engine's runs: each folder once (a run given twice would weigh twice), and one served
    model (meta.json engine_args.model, where the runs say it): one engine fit for another
    model's steps describes neither."""
    each_once([r.folder for r in runs], "calibrate --serving: ")
    models = {str(r.engine_args["model"]): r.folder for r in runs if r.engine_args.get("model")}
    if len(models) > 1:
        listed = "; ".join(f"{m} ({folder})" for m, folder in models.items())
        raise UserError(
            f"calibrate --serving: the runs served different models ({listed}); fit each model's runs apart"
        )


def each_once(folders: list[Path], prefix: str) -> None:
    """Each measured run given once (a run given twice would weigh twice in a fit or a score)."""
    seen: dict[Path, Path] = {}
    for folder in folders:
        first = seen.setdefault(folder.resolve(), folder)
        if first is not folder:
            raise UserError(f"{prefix}{folder} is given twice (as {first}); give each run once")


def _value(hw_data: dict, key: str) -> float:
    section = "overheads" if key.endswith("_s") else "efficiency"
    return float(hw_data[section][key]["value"])
