"""Checks on a finished run: the facts every correct simulation satisfies, whatever the input.

``check_run`` is called by ``llmsim.run`` after the frames and the summary are built. A broken
fact is a bug in llmsim, never a user mistake: it raises ``InvariantError`` naming the
invariant, and the request or step that broke it (the CLI exits 3). The checks are vectorised
over the frames, so they cost little next to the simulation (benchmarks/bench_invariants.py).

The invariants (docs/reliability.md explains each):

- ``one_state``: every request of the workload appears once and ends finished, rejected (with a
  reason) or unfinished at the horizon.
- ``tokens_complete``: a finished request generated exactly the output tokens it asked for.
- ``time_order``: arrival <= first scheduled <= first token <= finish; TBT >= 0.
- ``kv_capacity``: no step uses more KV blocks than its pool has.
- ``kv_freed``: finished and rejected requests hold no KV blocks, and a replica whose requests are
  all done holds none (blocks kept only as a reusable prefix cache do not count as used).
- ``step_duration``: every step lasts a finite, non-negative time and starts at t >= 0.
- ``no_stall``: if no event is left in the event loop, every request is finished or rejected
  (anything else could never move again: a scheduler deadlock).
- ``summary_totals``: the counts and token totals in summary.json equal the sums over requests.csv.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from llmsim.errors import InvariantError

STATES = ("finished", "rejected", "unfinished")
# Timestamps come from one float clock; sums of float step durations may differ in the last bits.
TIME_TOL_S = 1e-9


def fail(invariant: str, where: str, detail: str) -> None:
    raise InvariantError(f"invariant {invariant!r} broken at {where}: {detail}")


def _first(mask: np.ndarray | pd.Series) -> int | None:
    idx = np.flatnonzero(np.asarray(mask, dtype=bool))
    return int(idx[0]) if len(idx) else None


_CHECKED_NUMBERS = (
    "generated_tokens",
    "output_tokens",
    "arrival_s",
    "queued_s",
    "first_token_s",
    "finish_s",
    "tbt_mean_s",
    "tbt_max_s",
)


def _distinct(ids: np.ndarray) -> bool:
    """No id twice. Ids come in arrival order, usually increasing: one pass proves that; else a
    sort (np.unique's hash table took 0.5 s of a 1M-request run's checks)."""
    if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()):
        return True
    s = np.sort(ids)
    return not bool((s[1:] == s[:-1]).any())


def check_requests(req: pd.DataFrame, n_requests: int) -> None:
    """one_state, tokens_complete and time_order over requests.csv."""
    if len(req) != n_requests:
        fail("one_state", "the request table", f"{len(req)} rows for a workload of {n_requests} requests")
    ids = req["id"].to_numpy()
    if not _distinct(ids):
        dup = int(pd.Series(ids)[pd.Series(ids).duplicated()].iloc[0])
        fail("one_state", f"request {dup}", "appears more than once")
    # numpy columns: a handful of pandas operations would cost more than all the checks together;
    # the text columns are compared where they are (as Python strings, a million rows take ~60 MB each)
    c = {k: req[k].to_numpy() for k in _CHECKED_NUMBERS}
    status = req["status"]
    fin, rejected = (status == "finished").to_numpy(dtype=bool), (status == "rejected").to_numpy(dtype=bool)
    known = status.isin(STATES).to_numpy(dtype=bool)
    _bad_row(req, ~known, "one_state", lambda r: f"status {r['status']!r} is not one of {STATES}")
    no_reason = (req["reject_reason"].fillna("") == "").to_numpy(dtype=bool)
    _bad_row(req, rejected & no_reason, "one_state", lambda r: "rejected without a reason")
    gen, asked = c["generated_tokens"], c["output_tokens"]
    _bad_row(
        req,
        fin & (gen != asked),
        "tokens_complete",
        lambda r: f"finished with {r['generated_tokens']} of {r['output_tokens']} output tokens",
    )
    _bad_row(
        req,
        ~fin & (gen > asked),
        "tokens_complete",
        lambda r: f"generated {r['generated_tokens']} tokens but asked for {r['output_tokens']}",
    )
    t = {
        k: c[k].astype(float) for k in ("arrival_s", "queued_s", "first_token_s", "finish_s", "tbt_mean_s", "tbt_max_s")
    }
    _bad_row(req, fin & np.isnan(t["finish_s"]), "time_order", lambda r: "finished without a finish time")
    _bad_row(
        req,
        fin & (asked > 0) & np.isnan(t["first_token_s"]),
        "time_order",
        lambda r: "finished with output tokens but no first-token time",
    )
    for early, late in (
        ("arrival_s", "queued_s"),
        ("queued_s", "first_token_s"),
        ("arrival_s", "first_token_s"),
        ("first_token_s", "finish_s"),
        ("arrival_s", "finish_s"),
    ):
        # NaN compares False, so a time not reached yet (unfinished, rejected) never trips the check
        _bad_row(
            req,
            t[late] < t[early] - TIME_TOL_S,
            "time_order",
            lambda r, a=early, b=late: f"{b} = {r[b]!r} before {a} = {r[a]!r}",
        )
    for col in ("tbt_mean_s", "tbt_max_s"):
        _bad_row(req, t[col] < -TIME_TOL_S, "time_order", lambda r, k=col: f"{k} = {r[k]} < 0")
    _bad_row(
        req,
        t["tbt_max_s"] < t["tbt_mean_s"] - TIME_TOL_S,
        "time_order",
        lambda r: f"largest gap {r['tbt_max_s']} below the mean gap {r['tbt_mean_s']}",
    )


def _bad_row(req: pd.DataFrame, mask: np.ndarray, invariant: str, describe) -> None:  # type: ignore[no-untyped-def]
    i = _first(mask)
    if i is not None:
        row = req.iloc[i]
        fail(invariant, f"request {row['id']} (replica {row['replica']}, status {row['status']})", describe(row))


def check_steps(steps: pd.DataFrame, capacity_blocks: dict[str, int]) -> None:
    """step_duration and kv_capacity over steps.csv (all of it, or the sample kept)."""
    if steps.empty:
        return
    dur = steps["duration_s"].to_numpy(dtype=float)
    start = steps["start_s"].to_numpy(dtype=float)
    i = _first(~np.isfinite(dur) | (dur < 0) | ~np.isfinite(start) | (start < 0))
    if i is not None:
        fail("step_duration", _step(steps, i), f"start {start[i]!r} s, duration {dur[i]!r} s")
    cap = steps["pool"].map(capacity_blocks).to_numpy(dtype=float)
    used = steps["kv_blocks_used"].to_numpy(dtype=float)
    i = _first(np.isnan(cap) | (used > cap) | (used < 0))
    if i is not None:
        fail("kv_capacity", _step(steps, i), f"{used[i]:.0f} KV blocks in use, capacity {cap[i]:.0f}")


def _step(steps: pd.DataFrame, i: int) -> str:
    row = steps.iloc[i]
    return f"step {i} of steps.csv (pool {row['pool']}, replica {row['replica']}, t={row['start_s']:.6g} s)"


def check_kv_freed(replicas: pd.DataFrame, requests: Sequence) -> None:
    """Every block a replica holds belongs to a request still in flight (``replicas``: one row per
    replica with its ``pool``, ``replica`` index and ``kv_blocks_used`` at the end)."""
    for r in requests:
        if r.blocks and r.status in ("finished", "rejected"):
            fail("kv_freed", f"request {r.id} (replica {r.replica})", f"{r.status} but still holds {r.blocks} blocks")
    in_flight = [r for r in requests if r.status not in ("finished", "rejected")]
    rows = list(zip(replicas["replica"].tolist(), replicas["kv_blocks_used"].tolist(), strict=True))
    if not in_flight:
        for index, used in rows:
            if used:
                fail("kv_freed", f"replica {index}", f"every request is done but {used} blocks are held")
    busy = {r.replica for r in in_flight}
    if replicas["pool"].nunique() == 1:  # replica indices are unique only within one pool
        for index, used in rows:
            if index not in busy and used:
                fail("kv_freed", f"replica {index}", f"all its requests are done but {used} blocks are held")


def check_no_stall(events_left: bool, requests: Sequence, horizon_s: float) -> None:
    """no_stall: when no event is left in SimPy's queue at the end (``sim.events_pending``),
    nothing can ever happen again, so a request still waiting or running is stuck for good (a
    scheduler deadlock)."""
    if events_left:
        return  # the horizon cut off work still in progress: those requests are merely unfinished
    for r in requests:
        if r.status not in ("finished", "rejected"):
            fail(
                "no_stall",
                f"request {r.id} (replica {r.replica}, status {r.status})",
                f"no event is left before the horizon ({horizon_s:.6g} s) but the request is stuck, prefilled "
                f"{r.prefilled}/{r.prefill_target} with {r.generated} of {r.output_tokens} tokens generated",
            )


def check_summary(req: pd.DataFrame, summary: dict) -> None:
    """summary_totals: summary.json agrees with requests.csv."""
    status = req["status"]  # (compared in place: as Python strings a million rows take ~60 MB)
    fin = (status == "finished").to_numpy(dtype=bool)

    def total(col: str) -> int:
        return int(req[col].to_numpy()[fin].sum())

    expected = {
        ("requests", "total"): len(req),
        ("requests", "finished"): int(fin.sum()),
        ("requests", "rejected"): int((status == "rejected").sum()),
        ("requests", "unfinished"): int((status == "unfinished").sum()),
        ("requests", "preemptions"): int(req["preemptions"].to_numpy().sum()),
        ("tokens", "prompt"): total("prompt_tokens"),
        ("tokens", "output"): total("generated_tokens"),
        ("tokens", "cached"): total("cached_tokens"),
    }
    for (section, key), want in expected.items():
        got = summary.get(section, {}).get(key)
        if got != want:
            fail("summary_totals", f"summary.json {section}.{key}", f"says {got!r}, requests.csv sums to {want}")
    r = summary["requests"]
    if r["finished"] + r["rejected"] + r["unfinished"] != r["total"]:
        fail("summary_totals", "summary.json requests", f"{r} do not add up to the total")
    span = summary.get("duration")
    if span and fin.any():
        rate = int(fin.sum()) / span
        if not math.isclose(summary["request_throughput"], rate, rel_tol=1e-9):
            fail("summary_totals", "summary.json request_throughput", f"{summary['request_throughput']} != {rate}")
        if summary["completed"] != int(fin.sum()):
            fail("summary_totals", "summary.json completed", f"{summary['completed']} != {int(fin.sum())}")


def check_run(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    summary: dict,
    n_requests: int,
    capacity_blocks: dict[str, int],
    replicas: pd.DataFrame | None = None,
    request_objects: Sequence = (),
    horizon_s: float = math.inf,
    events_left: bool = True,
) -> None:
    """Check every invariant of a finished run; raise ``InvariantError`` on the first broken one.
    ``replicas`` is ``SimOutput.replicas`` (the counters frame), ``events_left`` its
    ``events_left``."""
    check_requests(requests, n_requests)
    check_steps(steps, capacity_blocks)
    if replicas is not None and len(replicas):
        check_no_stall(events_left, request_objects, horizon_s)
        check_kv_freed(replicas, request_objects)
    check_summary(requests, summary)
