"""The run's timeline as Chrome trace-event JSON (``trace.json``), for ui.perfetto.dev or chrome://tracing.

A trace is a function of a results folder's frames: the steps (steps.csv), the requests
(requests.csv), the pools of summary.json and the scenario's ``output.trace`` settings (read from
scenario.json, so ``llmsim report DIR`` rebuilds the same file). What it shows:

- **one process per pool** (``pool main (2x H100-SXM tp1)``), **one thread per replica**
  (``replica 0``, the replica numbers of requests.csv), one slice per steps.csv row, named
  ``prefill|decode|mixed p<prefill tokens>+d<decode tokens>`` (category: the kind). Steps of one
  replica that really overlap (pipeline micro-batches in flight) go to extra threads
  ``replica 0 (in flight 2)``, so slices never overlap within a thread;
- **counters per replica** in the pool's process: ``replica N KV cache`` (``%`` of the pool's
  ``kv_blocks_per_replica``, or ``blocks`` when the capacity is unknown), ``replica N running``
  (``requests``: the batch size of the step in progress, 0 between steps) and ``replica N waiting``
  (``requests``: the queue at each step, held until the next). Perfetto names each track
  ``<event name> <arg>``, e.g. ``replica 0 KV cache %``;
- **a process "requests"** with the traced requests packed into lanes (a lane takes a request
  once its previous one has finished, so slices never overlap within a lane): a slice
  ``request 17`` from arrival to finish, with children (each only if it took time) ``queued`` (arrival → the start of the
  first step that included it), ``prefill`` (→ first token) and ``decode`` (→ finish); rejected
  requests are instant events on the thread ``rejected``. (requests.csv's ``queued_s`` is the
  *end* of that first step; its start comes from the steps, or ``queued_s`` stands in when the
  step is not in them.)

Inside ``prefill``, one slice per prefill chunk (``chunk 2: 512 tokens``: the step that carried
it; the simulator keeps the chunk ends of the traced requests, the ``chunks`` table), the gaps
between them the other requests' turns; after a preemption by recompute, the prompt prefilled
again shows as ``recompute`` slices inside ``decode``. What the frames do not hold is not drawn: a
chunk whose step is not in the steps table (``output.steps: sample`` or ``none``) is left out, and
a preempted request's time back in the queue lies inside its ``prefill`` or ``decode`` slice
(``args.preemptions`` counts them). An unfinished
request's last known phase runs to the run's horizon (else the last instant the frames hold);
requests arriving after the horizon were never sent and are not drawn.

Bounds: step slices are one per steps row, at most ``MAX_STEP_SLICES`` per replica under ``trace:
sample`` (a longer run keeps every k-th step; ``trace: full`` keeps all, ``output.steps: sample``
thins the rows themselves); each counter
track keeps at most ``MAX_COUNTER_POINTS`` points (only changes, then the maximum of each of that
many equal time buckets, so peaks survive); request tracks hold ``output.trace_requests`` requests
(``trace: sample``, evenly spread over arrival order, no RNG) or all of them (``trace: full``).
Times are integer nanoseconds written as microseconds (``ts``, ``dur``), ``displayTimeUnit: ms``.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim.errors import atomic_write
from llmsim.metrics import sent_mask
from llmsim.scenario import OutputConfig

TRACE_FILE = "trace.json"
MAX_COUNTER_POINTS = 2000  # per counter track: 3 tracks per replica
MAX_STEP_SLICES = 20_000  # per replica with trace: sample (every k-th step beyond; full: all)
# CSV tables keep 9 significant digits (results.py float_format "%.9g"), so back-to-back steps read
# back can overlap by ~1e-8 of the clock (100 ns at 80 s): closer than this is touching, not overlap
CSV_REL_TOL = 2e-8
IDLE_GAP_NS = 1000  # a gap between steps longer than this drops "running" to 0
PHASES = ("queued", "prefill", "decode")


# ---------------------------------------------------------------- entry points


def write_trace(
    out_dir: str | Path,
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    summary: dict,
    output: OutputConfig | None = None,
    chunks: pd.DataFrame | None = None,
    run_id: str | None = None,
) -> list[Path]:
    """trace.json in ``out_dir`` (streamed, then renamed into place); [] when ``trace: none`` (which
    also removes a trace an earlier run left there, as it would describe another run) or when the
    frames are empty (a folder without a run: anything there is left alone). ``run_id`` goes in
    the trace's ``metadata`` (shown by Perfetto under the trace's info)."""
    path = Path(out_dir) / TRACE_FILE
    out = output or OutputConfig()
    if out.trace == "none":
        path.unlink(missing_ok=True)
        return []
    if steps.empty and requests.empty:
        return []
    metadata = {"llmsim_run_id": run_id} if run_id else None
    _write_json_atomic(path, trace_events(steps, requests, summary, out, chunks=chunks), metadata)
    return [path]


def perfetto_trace(
    steps: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    summary: dict | None = None,
    output: OutputConfig | None = None,
    max_counter_points: int = MAX_COUNTER_POINTS,
    chunks: pd.DataFrame | None = None,
) -> dict:
    """The whole trace as one dict (what trace.json holds)."""
    events = trace_events(steps, requests, summary, output, max_counter_points, chunks)
    return {"traceEvents": list(events), "displayTimeUnit": "ms"}


def trace_events(
    steps: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    summary: dict | None = None,
    output: OutputConfig | None = None,
    max_counter_points: int = MAX_COUNTER_POINTS,
    chunks: pd.DataFrame | None = None,
) -> Iterator[dict]:
    """Every event of the trace: metadata first, then steps, counters and requests (with their
    prefill chunks where the ``chunks`` table has them)."""
    requests = pd.DataFrame() if requests is None else requests
    out = output or OutputConfig()
    pools = _pool_infos(steps, (summary or {}).get("pools") or [])
    tids = _Tids()
    for pid, info in enumerate(pools, start=1):
        yield from _process_meta(pid, _pool_label(info), pid - 1)
        yield from _pool_events(
            pid, info, steps, tids, max_counter_points, None if out.trace == "full" else MAX_STEP_SLICES
        )
    if out.trace != "none" and not requests.empty:
        # the requests' first token and finish are the client's (engine.output_delay_s after the
        # step that made them); their phases are drawn on the steps' clock, the engine's
        delay = float(((summary or {}).get("engine") or {}).get("output_delay_s") or 0.0)
        horizon = (summary or {}).get("horizon_s")
        if horizon is not None:  # (requests after it were never sent: not drawn)
            requests = requests[sent_mask(requests, horizon)]
        yield from _request_events(len(pools) + 1, requests, steps, out, tids, chunks, delay, horizon)


# ---------------------------------------------------------------- pools, replicas, steps


def _pool_infos(steps: pd.DataFrame, summary_pools: list[dict]) -> list[dict]:
    """summary.json's pools in their order, each with its global replica numbers; pools that only
    steps.csv names (an old summary) follow with the replicas the steps show."""
    infos, offset = [], 0
    for p in summary_pools:
        n = int(p.get("replicas", 0))
        infos.append(dict(p, replica_ids=list(range(offset, offset + n))))
        offset += n
    known = {p["name"] for p in infos}
    if not steps.empty:
        for name in sorted(set(steps["pool"].astype(str)) - known):
            infos.append({"name": name, "replica_ids": []})
        for info in infos:
            seen = steps.loc[steps["pool"].astype(str) == str(info["name"]), "replica"].unique()
            info["replica_ids"] = sorted(set(info["replica_ids"]) | {int(r) for r in seen})
    return infos


def _pool_label(info: dict) -> str:
    if "hardware" not in info:
        return f"pool {info['name']}"
    pp = f" pp{info['pp']}" if int(info.get("pp", 1)) > 1 else ""
    return f"pool {info['name']} ({info['replicas']}x {info['hardware']} tp{info.get('tp', 1)}{pp})"


def _pool_events(
    pid: int, info: dict, steps: pd.DataFrame, tids: _Tids, max_points: int, max_slices: int | None
) -> Iterator[dict]:
    mine = steps[steps["pool"].astype(str) == str(info["name"])] if not steps.empty else steps
    by_replica = {int(r): g for r, g in mine.groupby("replica")} if not mine.empty else {}
    for replica in info["replica_ids"]:
        rows = by_replica.get(replica)
        if rows is None:  # a replica that never stepped: its track is there, empty
            yield from _thread_meta(pid, tids.next(), f"replica {replica}", replica * 1000)
            continue
        yield from _replica_events(pid, replica, rows, tids, info.get("kv_blocks_per_replica"), max_points, max_slices)


def _replica_events(
    pid: int,
    replica: int,
    rows: pd.DataFrame,
    tids: _Tids,
    capacity: int | None,
    max_points: int,
    max_slices: int | None,
) -> Iterator[dict]:
    rows = rows.iloc[np.argsort(rows["start_s"].to_numpy(), kind="stable")]
    start_s = rows["start_s"].to_numpy(dtype=float)
    start_ns = _ns(start_s)
    end_ns = np.maximum(_ns(start_s + rows["duration_s"].to_numpy(dtype=float)), start_ns)
    lanes = _pack_lanes(start_ns, end_ns, _csv_tol_ns(end_ns))
    end_ns = _clip_to_next(start_ns, end_ns, lanes)
    lane_tids = [tids.next() for _ in range(int(lanes.max()) + 1)]
    for k, tid in enumerate(lane_tids):
        label = f"replica {replica}" if k == 0 else f"replica {replica} (in flight {k + 1})"
        yield from _thread_meta(pid, tid, label, replica * 1000 + k)
    stride = 1 if max_slices is None else max(1, -(-len(rows) // max_slices))
    yield from _step_slices(pid, rows, start_ns, end_ns, [lane_tids[k] for k in lanes.tolist()], stride)
    yield from _counters(pid, replica, rows, start_ns, end_ns, capacity, max_points)


def _step_slices(
    pid: int, rows: pd.DataFrame, start_ns: np.ndarray, end_ns: np.ndarray, tid_of: list[int], stride: int = 1
) -> Iterator[dict]:
    """One slice per step, or per ``stride``-th step (a long run under ``trace: sample``)."""
    cols = {c: rows[c].to_numpy().tolist() for c in ("prefill_tokens", "decode_tokens", "batch_size", "waiting")}
    kv = rows["kv_blocks_used"].to_numpy().tolist()
    pre = rows["preempted"].to_numpy().tolist() if "preempted" in rows else [0] * len(rows)
    for i, (t0, t1) in enumerate(zip(start_ns.tolist(), end_ns.tolist(), strict=True)):
        if i % stride:
            continue
        p, d = int(cols["prefill_tokens"][i]), int(cols["decode_tokens"][i])
        kind = "prefill" if d == 0 else "decode" if p == 0 else "mixed"
        ts, dur = _ts_dur(t0, t1)
        yield {
            "name": f"{kind} p{p}+d{d}",
            "cat": kind,
            "ph": "X",
            "ts": ts,
            "dur": dur,
            "pid": pid,
            "tid": tid_of[i],
            "args": {
                "prefill_tokens": p,
                "decode_tokens": d,
                "batch_size": int(cols["batch_size"][i]),
                "kv_blocks_used": int(kv[i]),
                "waiting": int(cols["waiting"][i]),
                "preempted": int(pre[i]),
            },
        }


# ---------------------------------------------------------------- counters


def _counters(
    pid: int,
    replica: int,
    rows: pd.DataFrame,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    capacity: int | None,
    max_points: int,
) -> Iterator[dict]:
    if rows.empty:
        return
    kv = rows["kv_blocks_used"].to_numpy(dtype=float)
    kv_arg, kv_val = ("%", np.round(100.0 * kv / capacity, 3)) if capacity else ("blocks", kv)
    t_run, v_run = _running_series(start_ns, end_ns, rows["batch_size"].to_numpy(dtype=float))
    series = (
        (f"replica {replica} KV cache", kv_arg, start_ns, kv_val),
        (f"replica {replica} running", "requests", t_run, v_run),
        (f"replica {replica} waiting", "requests", start_ns, rows["waiting"].to_numpy(dtype=float)),
    )
    for name, arg, t, v in series:
        ts, vs = downsample(t, v, max_points)
        for t_ns, val in zip(ts.tolist(), vs.tolist(), strict=True):
            yield {"name": name, "ph": "C", "ts": t_ns / 1000, "pid": pid, "args": {arg: _num(val)}}


def _running_series(start_ns: np.ndarray, end_ns: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The batch size at each step start, and 0 from the end of a step that the next one does not
    follow at once (the replica is idle: nothing runs), and after the last."""
    nxt = np.append(start_ns[1:], np.iinfo(np.int64).max)
    idle = nxt - np.maximum.accumulate(end_ns) > IDLE_GAP_NS
    t = np.concatenate([start_ns, end_ns[idle]])
    v = np.concatenate([batch, np.zeros(int(idle.sum()))])
    order = np.argsort(t, kind="stable")
    return t[order], v[order]


def downsample(t: np.ndarray, v: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` of a step-wise series: only the points where the value changes, then,
    if still too many, the maximum of each of ``max_points`` equal time buckets (at the bucket's
    first point), so a peak is never averaged away."""
    keep = np.ones(len(v), bool)
    keep[1:] = v[1:] != v[:-1]
    t, v = t[keep], v[keep]
    if len(t) <= max_points:
        return t, v
    span = float(t[-1] - t[0]) or 1.0
    bucket = np.minimum(((t - t[0]) / span * max_points).astype(np.int64), max_points - 1)
    first = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    t, v = t[first], np.maximum.reduceat(v, first)
    keep = np.ones(len(v), bool)
    keep[1:] = v[1:] != v[:-1]
    return t[keep], v[keep]


# ---------------------------------------------------------------- requests


def sample_indices(n: int, output: OutputConfig) -> list[int]:
    """Positions in arrival order of the requests that get tracks: all (``full``), none (``none``),
    or ``trace_requests`` of them evenly spread (``sample``; the first and the last included, no
    RNG). The simulator keeps these requests' prefill chunks (the workload is in arrival order)."""
    if output.trace == "none" or n == 0:
        return []
    if output.trace == "full" or n <= output.trace_requests:
        return list(range(n))
    return np.unique(np.round(np.linspace(0, n - 1, output.trace_requests)).astype(int)).tolist()


def sample_requests(requests: pd.DataFrame, output: OutputConfig) -> pd.DataFrame:
    """The requests that get tracks (``sample_indices`` over the requests in arrival order)."""
    ordered = requests.sort_values(["arrival_s", "id"], kind="stable")
    if output.trace == "none":
        return ordered
    return ordered.iloc[sample_indices(len(ordered), output)]


def _request_events(
    pid: int,
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    output: OutputConfig,
    tids: _Tids,
    chunks: pd.DataFrame | None = None,
    delay_s: float = 0.0,
    horizon_s: float | None = None,
) -> Iterator[dict]:
    chosen = sample_requests(requests, output)
    spans = _chunk_spans_ns(chunks, steps)
    label = f"requests (all {len(requests)})" if len(chosen) == len(requests) else None
    label = label or f"requests ({len(chosen)} of {len(requests)}, evenly spread over arrival order)"
    yield from _process_meta(pid, label, 1_000_000)
    rejected = chosen[chosen["status"] == "rejected"]
    served = chosen[chosen["status"] != "rejected"]
    last_s = _last_instant_s(requests, steps) if horizon_s is None else horizon_s  # (where the run stopped)
    bounds = _phase_bounds_ns(served, _first_scheduled_s(served, steps), last_s, delay_s)
    lanes = _pack_lanes(bounds[:, 0], bounds[:, -1], np.zeros(len(bounds), np.int64))
    lane_tids = [tids.next() for _ in range(int(lanes.max()) + 1 if len(lanes) else 0)]
    for k, tid in enumerate(lane_tids):
        yield from _thread_meta(pid, tid, f"lane {k}", k)
    for i, row in enumerate(served.to_dict("records")):
        yield from _request_slices(pid, lane_tids[int(lanes[i])], row, bounds[i], spans.get(int(row["id"]), []))
    if not rejected.empty:
        tid = tids.next()
        yield from _thread_meta(pid, tid, "rejected", len(lane_tids))
        for row in rejected.to_dict("records"):
            yield {
                "name": f"rejected {int(row['id'])}",
                "cat": "rejected",
                "ph": "i",
                "s": "t",
                "ts": round(float(row["arrival_s"]) * 1e9) / 1000,
                "pid": pid,
                "tid": tid,
                "args": _request_args(row),
            }


def _first_scheduled_s(served: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """When each request was first scheduled. ``queued_s`` stamps the *end* of the first step that
    included the request (``Scheduler.complete`` runs when a step ends), so this is the start of
    that step, found in the steps of the request's replica; ``queued_s`` itself where the step is
    not there (steps sampled or off, a disaggregated request now numbered by its decode replica)."""
    q = served["queued_s"].to_numpy(dtype=float).copy() if not served.empty else np.zeros(0)
    if steps.empty or served.empty:
        return q
    rep = served["replica"].to_numpy(dtype=float)
    for r, g in steps.groupby("replica"):
        mine = np.flatnonzero((rep == r) & ~np.isnan(q))
        if len(mine):
            start = _step_start_of(q[mine], g)
            hit = ~np.isnan(start)
            q[mine[hit]] = start[hit]
    return q


def _step_start_of(end_s: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The start of the step of ``steps`` that ended at each of ``end_s`` (the nearest end, within
    CSV rounding); NaN where none did (steps sampled or off)."""
    end = (steps["start_s"] + steps["duration_s"]).to_numpy(dtype=float)
    order = np.argsort(end, kind="stable")
    end, start = end[order], steps["start_s"].to_numpy(dtype=float)[order]
    if not len(end) or not len(end_s):
        return np.full(len(end_s), np.nan)
    hi = np.minimum(np.searchsorted(end, end_s), len(end) - 1)  # the nearest end: hi or the one before
    lo = np.maximum(hi - 1, 0)
    j = np.where(np.abs(end[lo] - end_s) <= np.abs(end[hi] - end_s), lo, hi)
    hit = np.abs(end[j] - end_s) <= CSV_REL_TOL * np.abs(end_s) + 1e-9
    return np.where(hit, start[j], np.nan)


def _chunk_spans_ns(chunks: pd.DataFrame | None, steps: pd.DataFrame) -> dict[int, list[tuple[int, int, int]]]:
    """Per request id, its prefill chunks as (start, end, tokens): the steps that carried them
    (the simulator keeps each traced request's chunk ends, ``chunks`` table); chunks whose step
    is not in the steps table are left out."""
    if chunks is None or chunks.empty or steps.empty:
        return {}
    start = _step_start_of(chunks["end_s"].to_numpy(dtype=float), steps)
    found = ~np.isnan(start)
    out: dict[int, list[tuple[int, int, int]]] = {}
    ids, t0 = chunks["id"].to_numpy()[found], _ns(start[found])
    t1, tok = _ns(chunks["end_s"].to_numpy(dtype=float)[found]), chunks["tokens"].to_numpy()[found]
    for rid, a, b, n in zip(ids.tolist(), t0.tolist(), t1.tolist(), tok.tolist(), strict=True):
        out.setdefault(int(rid), []).append((a, b, int(n)))
    return out


def _phase_bounds_ns(served: pd.DataFrame, scheduled_s: np.ndarray, last_s: float, delay_s: float = 0.0) -> np.ndarray:
    """(n, 4) instants arrival, first scheduled, first token, finish, on the engine's clock (the
    client's first token and finish less ``delay_s``). A time the request never reached is the last
    instant the frames hold for the phase it was in, and the next ones are empty; cumulative max
    keeps the order if CSV rounding swapped two equal instants."""
    if served.empty:
        return np.zeros((0, 4), np.int64)
    t = np.column_stack(
        [
            served["arrival_s"].to_numpy(dtype=float),
            scheduled_s,
            *(served[c].to_numpy(dtype=float) - delay_s for c in ("first_token_s", "finish_s")),
        ]
    )
    t = np.where(np.isnan(t), last_s, t)
    return np.maximum.accumulate(_ns(t), axis=1)


def _last_instant_s(requests: pd.DataFrame, steps: pd.DataFrame) -> float:
    cols = [c for c in ("arrival_s", "queued_s", "first_token_s", "finish_s") if c in requests]
    last = float(np.nanmax(requests[cols].to_numpy(dtype=float))) if cols else 0.0
    if not steps.empty:
        last = max(last, float((steps["start_s"] + steps["duration_s"]).max()))
    return last


def _request_slices(
    pid: int, tid: int, row: dict, b: np.ndarray, chunks: list[tuple[int, int, int]] | None = None
) -> Iterator[dict]:
    rid = int(row["id"])
    status = str(row["status"])
    name = f"request {rid}" if status == "finished" else f"request {rid} ({status})"
    t = b.tolist()
    ts, dur = _ts_dur(t[0], t[3])
    request_end_us = ts + dur
    phase_end_us = [request_end_us] * len(PHASES)  # (the float end each phase's slice got)
    yield {
        "name": name,
        "cat": "request",
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "pid": pid,
        "tid": tid,
        "args": _request_args(row),
    }
    reached = [True, _known(row["queued_s"]), _known(row["first_token_s"])]
    small = {"id": rid, "replica": _int_or_none(row.get("replica"))}
    for k, phase in enumerate(PHASES):
        # a phase that took no time is left out: viewers nest a zero-length slice inside the
        # sibling that starts at the same instant, or put it after the request at its end
        if reached[k] and t[k + 1] > t[k]:
            ts, dur = _ts_dur(t[k], t[k + 1], request_end_us)
            phase_end_us[k] = ts + dur
            yield {
                "name": phase,
                "cat": "request",
                "ph": "X",
                "ts": ts,
                "dur": dur,
                "pid": pid,
                "tid": tid,
                "args": small,
            }
    yield from _chunk_slices(pid, tid, t, chunks or [], small, phase_end_us)


def _chunk_slices(
    pid: int, tid: int, t: list[int], chunks: list[tuple[int, int, int]], args: dict, phase_end_us: list[float]
) -> Iterator[dict]:
    """A slice per prefill chunk (the step that carried it), inside the phase it lies in: the
    prompt's chunks inside ``prefill``; after a preemption by recompute, the prompt and the tokens
    generated so far prefilled again inside ``decode`` ("recompute")."""
    for k, (a, e, tokens) in enumerate(chunks):
        inside_prefill = e <= t[2]
        # kept inside its phase (CSV rounding at the edges; a recompute that began within the
        # client's output delay of the first token)
        a, e = max(a, t[1] if inside_prefill else t[2]), min(e, t[3])
        if e <= a:
            continue
        name = f"chunk {k + 1}: {tokens} tokens" if inside_prefill else f"recompute: {tokens} tokens"
        ts, dur = _ts_dur(a, e, phase_end_us[PHASES.index("prefill" if inside_prefill else "decode")])
        yield {"name": name, "cat": "chunk", "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _request_args(row: dict) -> dict:
    out: dict = {"id": int(row["id"]), "replica": _int_or_none(row.get("replica")), "status": str(row["status"])}
    for key in ("class", "reject_reason"):
        if isinstance(row.get(key), str):
            out[key] = row[key]
    for key in ("prompt_tokens", "output_tokens", "generated_tokens", "cached_tokens", "preemptions"):
        if key in row:
            out[key] = _int_or_none(row[key])
    for key in ("ttft_s", "e2e_s", "transfer_s"):
        if key in row and _known(row[key]):
            out[key.replace("_s", "_ms")] = round(float(row[key]) * 1e3, 6)
    return out


# ---------------------------------------------------------------- helpers


class _Tids:
    """Thread ids unique across the whole trace (viewers key some state on tid alone)."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


def _process_meta(pid: int, name: str, sort_index: int) -> Iterator[dict]:
    yield {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}
    yield {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": sort_index}}


def _thread_meta(pid: int, tid: int, name: str, sort_index: int) -> Iterator[dict]:
    yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
    yield {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": sort_index}}


def _pack_lanes(start_ns: np.ndarray, end_ns: np.ndarray, tol_ns: np.ndarray) -> np.ndarray:
    """A lane per interval (sorted by start) such that intervals in a lane never overlap by more
    than their tolerance: the lowest free lane first, so lane 0 is the busiest."""
    n = len(start_ns)
    lanes = np.zeros(n, np.int64)
    if n < 2:
        return lanes
    prev_end = np.maximum.accumulate(end_ns)[:-1]
    if np.all(start_ns[1:] >= prev_end - tol_ns[:-1]):
        return lanes  # the usual case: one lane, no Python loop over millions of steps
    busy: list[tuple[int, int]] = []  # (end - tol, lane)
    free: list[int] = []
    for i, (s, e, tol) in enumerate(zip(start_ns.tolist(), end_ns.tolist(), tol_ns.tolist(), strict=True)):
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy) + len(free)
        lanes[i] = lane
        heapq.heappush(busy, (e - tol, lane))
    return lanes


def _clip_to_next(start_ns: np.ndarray, end_ns: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """A slice ends no later than the next one in its lane begins (the overlap is CSV rounding)."""
    out = end_ns.copy()
    for lane in np.unique(lanes).tolist():
        idx = np.flatnonzero(lanes == lane)
        out[idx[:-1]] = np.minimum(out[idx[:-1]], start_ns[idx[1:]])
    return np.maximum(out, start_ns)


def _ts_dur(t0_ns: int, t1_ns: int, within_us: float = math.inf) -> tuple[float, float]:
    """(ts, dur) in µs with ts + dur <= the end in floating point too, and <= ``within_us`` (the
    float end of the slice this one nests in: two sums of different starts can land an ulp apart).
    DevTools and chrome://tracing add them as floats, and an end one ulp past the next slice's start
    (or its parent's end) reads as an overlap (that slice drops out of the flame chart); Perfetto
    rounds each to ns, which the nudge leaves alone."""
    ts, end = t0_ns / 1000, min(t1_ns / 1000, within_us)
    dur = end - ts
    while dur > 0 and ts + dur > end:
        dur = math.nextafter(dur, 0.0)
    return ts, dur


def _csv_tol_ns(t_ns: np.ndarray) -> np.ndarray:
    return (np.abs(t_ns) * CSV_REL_TOL).astype(np.int64) + 1


def _ns(seconds: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(seconds, dtype=float) * 1e9).astype(np.int64)


def _known(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _int_or_none(v: Any) -> int | None:
    return int(v) if _known(v) else None


def _num(v: float) -> int | float:
    return int(v) if float(v).is_integer() else float(v)


def _write_json_atomic(path: Path, events: Iterable[dict], metadata: dict | None = None) -> None:
    """One event per line, streamed (a trace of millions of steps never sits in memory as one
    string), to a temporary name that is renamed into place. ``allow_nan=False``: JSON has no NaN.
    ``metadata``: the trace format's top-level ``metadata`` object (before the events)."""
    head = f'"metadata":{json.dumps(metadata, separators=(",", ":"))},' if metadata else ""

    # one encoder for every event: json.dumps with options builds a new one per call
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

    def stream(tmp: Path) -> None:
        with tmp.open("w") as fh:
            fh.write('{"displayTimeUnit":"ms",' + head + '"traceEvents":[')
            for i, ev in enumerate(events):
                fh.write(("\n" if i == 0 else ",\n") + encode(ev))
            fh.write("\n]}\n")

    atomic_write(path, stream)
