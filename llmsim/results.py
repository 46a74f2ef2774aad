"""Results: per-request and per-step DataFrames, and every summary metric as a function of them.

Nothing here knows about schedulers or SimPy: notebooks, reports and the CLI all call these
functions on the same frames.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd

from llmsim.errors import atomic_write, atomic_write_text, test_pause
from llmsim.gaps import GapHistogram
from llmsim.metrics import (
    DEFAULT_PERCENTILES,
    arrived_mask,
    bench_metrics,
    dist_ms,
    finished,
    itl_from_histogram,
    sent_mask,
)
from llmsim.progress import finite
from llmsim.tables import fmt

if TYPE_CHECKING:
    from llmsim.moejit import Key


@dataclass(frozen=True)
class Deployment:
    """What a server's prefix caches belong to: blocks mean the same only for the same model, KV
    block size and dtype, and pools (each one's name, hardware, replicas, tp and pp); its compiled
    kernels only for the same weights' and compute dtypes (a bf16 server's fused-MoE kernels are
    not an fp16 one's)."""

    model: str
    block_tokens: int
    kv_dtype: str
    pools: tuple[tuple[str, str, int, int, int], ...]
    dtypes: tuple[str, str] = ("", "")  # the model's weight and compute (activation) dtypes


@dataclass(frozen=True)
class ServerCache:
    """A server's prefix caches as a run left them, for a later run on the same server to start
    from (``llmsim.run(..., server_cache=)``; `llmsim bench --after`): each replica's free block
    queue, oldest first (``kvcache.BlockManager.free_queue_state``), the fused-MoE kernels it
    compiled (``moejit``), and the deployment they belong to. Offload tiers are not kept: a later run starts with them empty."""

    deployment: Deployment
    queues: tuple[tuple[int, ...], ...]  # per replica, the pools in order
    # per replica, the fused-MoE kernel keys compiled (moejit.MoeKernels.state; empty where untracked)
    kernels: tuple[tuple[Key, ...], ...] = ()


@dataclass
class Results:
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    queue: pd.DataFrame = field(default_factory=pd.DataFrame)  # backlog samples over time
    chunks: pd.DataFrame = field(default_factory=pd.DataFrame)  # traced requests' prefill chunks
    scaling: pd.DataFrame = field(default_factory=pd.DataFrame)  # the autoscaler's decisions (autoscaler.py)
    extra: dict = field(default_factory=dict)  # pool/replica details, transfers, ...
    # the prefix caches at the end, for a later run on the same server (api.run keep_server_cache);
    # not written
    server_cache: ServerCache | None = None

    def write(self, out_dir: Path, table_format: str = "parquet", run_id: str | None = None) -> list[Path]:
        """Write requests and steps (Parquet, or CSV on request) and summary.json, each atomically;
        the other format's file of a previous run is removed so the folder holds one run.
        ``run_id`` (``make_run_id``) goes into summary.json and every table (docs/reliability.md)."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, frame in (("requests", self.requests), ("steps", self.steps)):
            paths.append(write_table(frame, out_dir / name, table_format, run_id))
            test_pause(f"write:{name}")
        paths.insert(1, out_dir / "summary.json")
        # the tables written (an optional one where the run has rows for it): `llmsim report`
        # refuses a folder that lost one, where it would leave their part out without a word
        optional = {name: getattr(self, name) for name in OPTIONAL_TABLES}  # (a frame each: chunks, scaling)
        written = [name for name, frame in optional.items() if not frame.empty]
        summary = {**self.summary, "tables": ["requests", "steps", *written]}
        if run_id is not None:
            summary["run_id"] = run_id
        text = json.dumps(finite(summary), indent=2, sort_keys=True, allow_nan=False)  # strict JSON
        atomic_write_text(paths[1], text + "\n")
        test_pause("write:summary")
        for name, frame in optional.items():
            if frame.empty:  # (a table of an earlier run would describe other requests)
                for suffix in TABLE_SUFFIX.values():
                    (out_dir / name).with_suffix(suffix).unlink(missing_ok=True)
            else:
                paths.append(write_table(frame, out_dir / name, table_format, run_id))
        return paths


TABLE_SUFFIX = {"parquet": ".parquet", "csv": ".csv"}
OPTIONAL_TABLES = ("chunks", "scaling")  # written only where a run has rows for them (summary.json tables)
RUN_ID_KEY = b"llmsim.run_id"  # Parquet schema metadata key
CSV_RUN_IDS = "csv_run_ids.json"  # CSV has no metadata: {file: {"run_id", "sha256"}} next to them


def make_run_id(scenario_json: str, exact_steps: bool = False) -> str:
    """The run's id: a hash of what determines its results (the resolved scenario, seed included,
    the engine mode and the llmsim version), so the same scenario and seed still give the same
    bytes (tests/test_determinism.py) and two runs that differ never share an id."""
    from llmsim.cli import version

    key = json.dumps([scenario_json, bool(exact_steps), version()])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def write_table(frame: pd.DataFrame, stem: Path, table_format: str, run_id: str | None = None) -> Path:
    """``stem``.parquet or ``stem``.csv (floats to 9 significant digits), written atomically; with
    ``run_id`` in the Parquet schema metadata, or for CSV in ``csv_run_ids.json`` with the hash."""
    path = stem.with_suffix(TABLE_SUFFIX[table_format])
    if table_format == "csv":
        text = frame.to_csv(index=False, float_format="%.9g")
        atomic_write_text(path, text)
        if run_id is not None:
            _record_csv_run_id(path, run_id, hashlib.sha256(text.encode()).hexdigest())
    else:
        atomic_write(path, lambda tmp: _write_parquet(frame, tmp, run_id))
    for other in TABLE_SUFFIX.values():
        if other != path.suffix:
            stem.with_suffix(other).unlink(missing_ok=True)
    return path


def _write_parquet(frame: pd.DataFrame, path: Path, run_id: str | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if run_id is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), RUN_ID_KEY: run_id.encode()})
    pq.write_table(table, path)


def _record_csv_run_id(path: Path, run_id: str, sha256: str) -> None:
    manifest = path.parent / CSV_RUN_IDS
    ids = json.loads(manifest.read_text()) if manifest.exists() else {}
    ids[path.name] = {"run_id": run_id, "sha256": sha256}
    atomic_write_text(manifest, json.dumps(ids, indent=2, sort_keys=True) + "\n")


def table_run_id(path: Path) -> str | None:
    """The run id a table carries (None: written without one, e.g. by llmsim before run ids);
    a CSV whose bytes are not the ones recorded is ``"(changed)"``: it came from somewhere else."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        meta = pq.read_schema(path).metadata or {}
        return meta[RUN_ID_KEY].decode() if RUN_ID_KEY in meta else None
    manifest = path.parent / CSV_RUN_IDS
    entry = (json.loads(manifest.read_text()) if manifest.exists() else {}).get(path.name)
    if entry is None:
        return None
    same = file_sha256(path) == entry["sha256"]
    return entry["run_id"] if same else "(changed)"


def file_sha256(path: Path) -> str:
    """A file's SHA-256, read in 1 MiB pieces (a results table can be GBs: read whole, a 1.5 GB
    steps.csv took 1.7 GB of memory only to be hashed)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def table_path(folder: Path, name: str) -> Path | None:
    """The file of a results folder's ``name`` table, whichever format it was written in (None: absent)."""
    return next((f for f in (Path(folder) / f"{name}{s}" for s in TABLE_SUFFIX.values()) if f.exists()), None)


def read_table(folder: Path, name: str) -> pd.DataFrame:
    """A results folder's ``name`` table, whichever format it was written in (empty if absent)."""
    path = table_path(folder, name)
    if path is None:
        return pd.DataFrame()
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return read_csv_table(path) if path.stat().st_size > 1 else pd.DataFrame()


def read_csv_table(path: Path) -> pd.DataFrame:
    """A CSV table llmsim wrote, read as written: a row with more fields than the header is refused
    (pandas would take the surplus leading fields as an index and shift every column silently)."""
    import warnings

    from llmsim.errors import UserError

    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            return pd.read_csv(path, index_col=False)
        except pd.errors.ParserWarning:
            raise UserError(
                f"{path}: a row has more fields than the header (edited?); not as llmsim wrote it"
            ) from None


def chunks_frame(reqs: list) -> pd.DataFrame:
    """The prefill chunks the traced requests kept (``Request.chunks``): id, the end of the step
    that carried the chunk (engine time, s), its tokens; for the timeline (llmsim/timeline.py)."""
    rows = [(r.id, t, c) for r in reqs if r.chunks for t, c in r.chunks]
    return pd.DataFrame(rows, columns=["id", "end_s", "tokens"])


def requests_frame(reqs: list, output_delay_s: float = 0.0) -> pd.DataFrame:
    """One row per request, in arrival order. Client-side times (first token, last token,
    finish) come ``output_delay_s`` after the step that produced them (engine.output_delay_s)."""
    n = len(reqs)

    def column(attr: str, dtype: type) -> np.ndarray:
        # straight into an array: a list of a million boxed numbers first would hold ~30 bytes
        # each, and the frame is built once, in its final column order (a reorder copies it)
        return np.fromiter(map(attrgetter(attr), reqs), dtype=dtype, count=n)

    arrival = column("arrival_s", np.float64)
    first, finish, last = (column(a, np.float64) for a in ("first_token_s", "finish_s", "last_token_s"))
    if output_delay_s:
        first += output_delay_s
        finish += output_delay_s
        last += output_delay_s
    generated = column("generated", np.int64)
    gaps = generated - 1
    tbt_mean = np.where(gaps > 0, (last - first) / gaps.clip(min=1), np.nan)
    cols = {
        "id": column("id", np.int64),
        "class": [r.klass for r in reqs],
        "replica": column("replica", np.int64),
        "status": [r.status if r.status in ("finished", "rejected") else "unfinished" for r in reqs],
        "reject_reason": [r.reject_reason for r in reqs],
        "arrival_s": arrival,
        "queued_s": column("queued_s", np.float64),
        "first_token_s": first,
        "finish_s": finish,
        "prompt_tokens": column("prompt_tokens", np.int64),
        "output_tokens": column("output_tokens", np.int64),
        "generated_tokens": generated,
        "cached_tokens": column("cached_tokens", np.int64),
        "ttft_s": first - arrival,
        "tbt_mean_s": tbt_mean,
        "tbt_max_s": np.where(gaps > 0, column("max_tbt_s", np.float64), np.nan),
        "tpot_s": tbt_mean.copy(),
        "e2e_s": finish - arrival,
        "preemptions": column("preemptions", np.int64),
        "transfer_s": column("transfer_s", np.float64),
    }
    lora = column("lora_id", np.int64)
    if (lora >= 0).any():  # multi-LoRA: each request's adapter (-1: the base model)
        cols["lora_id"] = lora
    return pd.DataFrame(
        cols, copy=False
    )  # (the columns are ours: a copy would hold each twice, ~110 MB per 1M requests)


# each latency SLO key and the requests column it bounds (tbt_s: each request's worst gap)
SLO_COLUMNS = {"ttft_s": "ttft_s", "tbt_s": "tbt_max_s", "tpot_s": "tpot_s", "e2e_s": "e2e_s"}
LATENCY_SLOS = tuple(SLO_COLUMNS)


def has_latency_slo(slo: dict, classes: dict | None = None) -> bool:
    """Whether any latency target is set (at the top or for a request class)."""
    sets = [slo, *(classes or {}).values()]
    return any(s.get(k) is not None for s in sets for k in LATENCY_SLOS)


def slo_targets(slo: dict) -> str:
    """``ttft_s<=1.0, tbt_s<=0.1``: the targets as the CLI and the report print them."""
    return ", ".join(f"{k}<={slo[k]}" for k in LATENCY_SLOS if slo.get(k) is not None)


def slo_mask(req: pd.DataFrame, slo: dict, classes: dict | None = None) -> pd.Series:
    """True for finished requests meeting every configured SLO (per-class overrides apply)."""
    ok = req["status"] == "finished"

    def meets(frame: pd.DataFrame, s: dict) -> pd.Series:
        m = pd.Series(True, index=frame.index)
        for key, col in SLO_COLUMNS.items():
            if s.get(key) is not None:
                m &= frame[col].fillna(0.0) <= s[key]
        return m

    base = meets(req, slo)
    for name, override in (classes or {}).items():
        sel = req["class"] == name
        if sel.any():
            merged = {**slo, **{k: v for k, v in override.items() if v is not None}}
            base[sel] = meets(req[sel], merged)
    return ok & base


# why requests were rejected, by the head of the reason the scheduler, replica or transfer gave
# (schedulers/base.py, schedulers/traditional.py, replica.py, sim.py): summary.rejected_by's keys
REJECTION_KINDS = (
    ("max_model_len", r"prompt of \d+ tokens \+ \d+ output tokens exceeds max_model_len"),
    ("kv_capacity", r"needs \d+ tokens of KV cache"),
    ("max_batch_tokens", r"prompt of \d+ tokens exceeds max_batch_tokens"),
    ("queue_full", r"queue full"),
    ("session_ended", r"session ended"),  # feeder.py: an earlier call of the session was rejected
)


# a disaggregated pool's refusals say which pool (sim.py: the decode pool's, replica.py: the prefill pool's)
POOL_PREFIXES = {"decode pool: ": "decode_pool", "prefill pool: ": "prefill_pool"}


def rejection_kind(reason: str) -> str:
    """The kind of a rejection reason (REJECTION_KINDS; a disaggregated pool's get ``decode_pool.`` or
    ``prefill_pool.`` first)."""
    for prefix, pool in POOL_PREFIXES.items():
        if reason.startswith(prefix):
            return f"{pool}.{rejection_kind(reason[len(prefix) :])}"
    for kind, pattern in REJECTION_KINDS:
        if re.match(pattern, reason):
            return kind
    return "other"


def rejection_counts(reasons: pd.Series) -> dict[str, int]:
    """Rejected requests per kind of reason, most common first."""
    kinds = reasons.dropna().loc[lambda r: r != ""].map(rejection_kind).value_counts()
    return {str(k): int(v) for k, v in kinds.items()}


def pools_line(summary: dict) -> str:
    """'main: 2x H100-SXM tp1 pp1' per pool, ' ep2' where its experts are split (run output, report)."""
    return ", ".join(
        f"{p['name']}: {p['replicas']}x {p['hardware']} tp{p['tp']} pp{p['pp']}"
        + (f" ep{p['ep']}" if p.get("ep", 1) > 1 else "")
        for p in summary["pools"]
    )


def requests_line(summary: dict) -> str:
    """'N total, F finished, R rejected (by kind), U unfinished, P preemptions' (run output, report)."""
    req, by = summary["requests"], summary.get("rejected_by")
    why = f" ({', '.join(f'{n} {k}' for k, n in by.items())})" if by else ""
    unsent = f" ({req['unsent']} never sent: the horizon came first)" if req.get("unsent") else ""
    return (
        f"{req['total']} total, {req['finished']} finished, {req['rejected']} rejected{why}, "
        f"{req['unfinished']} unfinished{unsent}, {req['preemptions']} preemptions"
    )


def scaling_line(summary: dict) -> str:
    """What the autoscaler did and cost (run output, report; summary ``autoscaling``)."""
    a = summary["autoscaling"]
    return (
        f"{a['metric']} target {fmt(a['target'])}: {a['scale_ups']} up, {a['drained']} drained, "
        f"{a['cancelled']} cancelled; replicas {a['min_replicas']}..{a['max_replicas']}, {a['peak_serving']} serving at "
        f"the peak, {fmt(a['mean_replicas'])} billed on average; {fmt(a['gpu_hours'])} GPU-h, ${fmt(a['usd'])}; "
        f"a new replica serves {fmt(a['start_s']['total_s'])} s after it is asked for"
    )


def offload_line(summary: dict) -> str:
    """Where prefix hits came from with KV offload tiers (run output, report; summary ``kv_offload``)."""
    o = summary["kv_offload"]
    tiers = ", ".join(f"{name} {t['hit_rate']:.1%}" for name, t in o["tiers"].items())
    return (
        f"prompt tokens served from the device cache {o['device_hit_rate']:.1%}, {tiers}; "
        f"{fmt(o['load_s'])} s of steps waiting for reads"
    )


def prefix_line(summary: dict) -> str:
    """The prefix cache in a line (run output; summary ``prefix_cache``): vLLM's hit rate, the
    prefill it saved (a resumed preempted request's own blocks too), the cached blocks evicted."""
    p = summary["prefix_cache"]
    return (
        f"cache hit rate {p['hit_rate']:.1%} of new requests' prompt tokens; {p['saved_prefill_tokens']:,} "
        f"prompt tokens not prefilled, {p['evictions']:,} cached blocks evicted"
    )


def lora_line(summary: dict) -> str:
    """Multi-LoRA in a line (run output, report; summary ``lora``): adapters, loads, their cost."""
    lo = summary["lora"]
    busy = lo["busy_s"]
    share = f" ({lo['kernel_s'] / busy:.1%} of busy time)" if busy else ""
    return (
        f"{lo['adapters_used']:,} adapters over {lo['requests_with_adapter']:,} requests, max_loras "
        f"{lo['max_loras']}; {lo['gpu_loads']:,} slot loads ({lo['store_loads']:,} from the store), "
        f"{fmt(lo['load_s'])} s of steps waiting for them; LoRA kernels {fmt(lo['kernel_s'])} s{share}"
    )


def _slope(t: np.ndarray, q: np.ndarray) -> float:
    """Least-squares slope of ``q`` over ``t``. Times too close together for ``polyfit`` (samples
    1e-200 s apart: its column scale underflows, LAPACK prints to stderr, the matrix is singular)
    are fitted over the window scaled to [0, 1] instead; 0 if even that is not a number."""
    span = float(np.ptp(t))
    if not span > 0:
        return 0.0
    with np.errstate(all="ignore"):  # (numpy's warnings would print past --quiet)
        slope = _fitted_slope(t, q) if span > 1e-100 else math.nan
        if not math.isfinite(slope):
            slope = _fitted_slope((t - t.min()) / span, q) / span
    return slope if math.isfinite(slope) else 0.0


def _batch_slope_se(t: np.ndarray, q: np.ndarray) -> float | None:
    """Standard error of the queue's slope over ``t`` by batch means: the samples (one per arrival)
    cut into up to ten runs of consecutive ones, each run's mean queue fitted against its mean
    time, the error from that fit's residuals. A queue's samples are correlated over a latency (a
    burst lifts many in a row), so the residuals of the fit over every sample understate it; means
    over runs longer than that are near independent (Law & Kelton, *Simulation Modeling and
    Analysis*, batch means). None under eight samples: too few to tell."""
    batches = min(10, len(t) // 2)
    if batches < 4:
        return None
    mid = np.array([b.mean() for b in np.array_split(t, batches)])
    mean = np.array([b.mean() for b in np.array_split(q, batches)])
    x = mid - mid.mean()
    sxx = float(x @ x)
    if not sxx > 0:
        return None
    slope = float(x @ (mean - mean.mean())) / sxx
    residual = mean - mean.mean() - slope * x
    return math.sqrt(float(residual @ residual) / (batches - 2) / sxx)


def _fitted_slope(x: np.ndarray, y: np.ndarray) -> float:
    try:
        return float(np.polyfit(x, y, 1)[0])
    except (np.linalg.LinAlgError, ValueError):
        return math.nan


def slos_held(slo_met: object, verdict: object, keeps_up: object = None) -> bool:
    """A run's SLOs held in a way a deployment would see: met, not overloaded, and the run kept up
    with its load (``keeps_up``, the saturation verdict's; None: not known, as in a sweep table
    written before it). A finite workload offered past capacity, or one too short to settle, can
    meet them because its requests end before the queue's wait grows; one that kept receiving them
    would not (plan rows, SLO capacity, sensitivity, sweep reports)."""
    return bool(slo_met) and verdict != "overloaded" and kept_up(keeps_up)


def kept_up(keeps_up: object) -> bool:
    """A run's ``saturation.keeps_up`` as a summary or a table cell holds it (numpy, maybe NaN):
    unknown (None, NaN: a table written before it) counts as kept up."""
    return keeps_up is None or bool(pd.isna(keeps_up)) or bool(keeps_up)


def saturation_verdict(
    queue: pd.DataFrame,
    n_requests: int,
    unfinished: int,
    last_arrival_s: float,
    shed: int = 0,
    finished: int = -1,
    not_offered: int = 0,
    in_flight: int = 0,
    burst_waited: bool = False,
    in_system_share: float | None = None,
    in_system_se: float | None = None,
    in_system_not_judged: str = "",
    rejected: int = 0,
    waits: Waits | None = None,
) -> dict:
    """Stable / backlogged / overloaded, from how the waiting queue grows while requests arrive.

    The least-squares slope of the waiting-queue length over the arrival window, divided by
    the arrival rate, is the share of offered requests that pile up instead of being served; it
    counts only where it stands three standard errors (``_batch_slope_se``) clear of zero.
    Requests shed by a full queue (``shed``) count as piled up: a capped queue cannot grow; the
    others ``rejected`` (too long, too large for the KV cache) are named in the explanation. A run
    in which no request finished (all rejected, shed or cut by the horizon) is ``unserved``: it has
    no latencies to describe, whatever its queue did.

    A run cut by its horizon: ``n_requests`` and ``unfinished`` count the requests that arrived
    before it (``not_offered`` arrived after: never offered, they say nothing of the system), and
    of those left unfinished the ``in_flight`` a steady state would hold (``_saturation``) are not a
    backlog.
    All requests at one instant (``last_arrival_s`` 0) have no steady state: ``burst_waited`` says
    whether some were admitted after others (``_saturation``: their ``queued_s``).
    A load that admits everyone (a large ``max_num_seqs`` and KV cache) grows the running batch,
    not the queue: ``in_system_share`` (``_in_system_growth``) is how fast the requests in the
    system, waiting or running, still grow at the end of the arrivals, ``in_system_se`` its
    standard error (None: not judged, ``in_system_not_judged`` says why). Past ``IN_SYSTEM_GROWING``
    and three standard errors a run that would read stable is backlogged instead: it has not
    settled, whether it is overloaded or only warming up (near capacity such a batch takes many
    latencies to settle, so a short run cannot tell the two apart); so is one whose arrivals were
    too short to warm up ("short: ..."), and one past ``IN_SYSTEM_GROWING`` within three standard
    errors (a run too short to tell its growth from noise: not shown to settle; a settled run this
    short reads so by chance for some seeds).
    ``waits`` (``_waits``): how long requests waited in the queue. A run that would read stable
    but where some request waited past TRANSIENT_WAITS of the median latency went through a backlog
    and drained it (a burst): backlogged; so is one where the requests arriving at some time waited
    a median past TRANSIENT_WAITS of the quietest time's median wait plus the time in service (and
    past TRANSIENT_WAIT_S): a backlog that held for a stretch of the run and drained (a peak of load
    past capacity), where every latency is mostly a wait and no one stands out against the median.
    (Not the queue's length: a steady bursty run's queue is long for an instant.)
    """
    backlog = max(unfinished - in_flight, 0)
    out = {
        "queue_growth_rps": 0.0,
        "growth_share": 0.0,
        "growth_share_se": None,
        "unfinished": unfinished + not_offered,
        "not_offered": not_offered,
        "final_queue": 0,
        "shed": shed,
        "in_system_growth_share": in_system_share,
        "in_system_growth_se": in_system_se,
        "in_system_not_judged": in_system_not_judged,
    }
    if not queue.empty and last_arrival_s > 0:
        win = queue[queue["time_s"] <= last_arrival_s]
        if len(win) >= 3:
            t, q = win["time_s"].to_numpy(), win["waiting"].to_numpy(dtype=float)
            slope = _slope(t, q)
            rate = n_requests / last_arrival_s
            out["queue_growth_rps"] = slope
            out["growth_share"] = slope / rate if rate > 0 else 0.0
            se = _batch_slope_se(t, q)
            out["growth_share_se"] = se / rate if se is not None and rate > 0 else None
            out["final_queue"] = int(q[-1])
    elif not queue.empty and n_requests > 1:  # all at t = 0: the queue the last arrival met
        at_once = queue[queue["time_s"] <= 0.0]
        out["final_queue"] = int(at_once["waiting"].iloc[-1]) if len(at_once) else 0
    share = out["growth_share"]
    # a slope three standard errors clear of zero: a bursty or short run's queue rises and falls
    # by chance (a fifth of light gamma runs at cv 3 read a slope past 1 % of the offered rate)
    se_share = out["growth_share_se"]
    grows = se_share is None or share > 3 * se_share
    burst = n_requests > 1 and last_arrival_s <= 0
    unsettled = few = transient = held = undetermined = False
    short = in_system_not_judged.startswith("short:") and not burst
    if n_requests and finished == 0:
        verdict = "unserved"
    elif _piled_up(backlog, shed, n_requests, share, short) or (share > 0.05 and grows and n_requests >= FEW_ARRIVALS):
        verdict = "overloaded"
    elif share > 0.05 and grows:  # a queue of one or two over a handful of arrivals is a slope, not an overload
        verdict, few = "backlogged", True
    elif _growing(in_system_share, in_system_se) or short:
        verdict, unsettled = "backlogged", True
    elif in_system_share is not None and in_system_share > IN_SYSTEM_GROWING:
        verdict, undetermined = "backlogged", True  # (grew past the bar, within the noise of a run this short)
    elif (share > 0.01 and grows) or backlog + shed > 0 or (burst and burst_waited):
        verdict = "backlogged"
    elif waits is not None and waits.longest_s > max(TRANSIENT_WAITS * waits.latency_s, TRANSIENT_WAIT_S):
        verdict, transient = "backlogged", True  # (a burst the system drained: not a steady state)
    elif waits is not None and waits.peak_s > max(
        TRANSIENT_WAITS * (waits.quiet_s + waits.in_service_s), TRANSIENT_WAIT_S
    ):
        verdict, held = "backlogged", True  # (a peak past capacity the system drained)
    else:
        verdict = "stable"
    out["verdict"] = verdict
    # a deployment offered this load keeps up with it: stable, or a burst or peak it drained (its
    # latencies are the workload's own; an all-at-once batch it served whole); not where the queue or
    # the batch grew, requests were left, or the run was too short to show it settles (plans and SLO
    # capacities count only these)
    drained = burst and verdict == "backlogged" and backlog + shed == 0  # (a batch at once, every one served)
    out["keeps_up"] = verdict == "stable" or transient or held or drained
    explanations = {
        "stable": "the queue does not grow while requests arrive; latencies describe steady state",
        "backlogged": "the queue grows slowly or requests were left at the horizon; latencies include a backlog",
        "overloaded": "offered load exceeds capacity: the queue grows without bound and latencies depend on "
        "the run length, not the system",
        "unserved": "no request finished: every one was rejected (see requests.rejected and each request's "
        "reject_reason) or cut by the horizon; there are no latencies to describe",
    }
    if burst and verdict in ("stable", "backlogged"):  # (no arrival window: no steady state to judge)
        explanations["stable"] = "every request arrived at once and none waited: a batch, not a steady state"
        explanations["backlogged"] = (
            "every request arrived at once: latencies include each one's wait for the batch ahead of it, not a steady state"
        )
    if few:
        explanations["backlogged"] = (
            f"the queue grew, but over only {n_requests} arrivals: too few to tell an overload from a "
            "short queue; latencies include it"
        )
    elif unsettled and short:
        explanations["backlogged"] = (
            f"{in_system_not_judged.removeprefix('short: ')}; latencies are a warm-up's, not a steady state's"
        )
    elif transient and waits is not None:
        wait, at, w0 = waits.longest_s, waits.longest_arrival_s, waits.latency_s
        explanations["backlogged"] = (
            f"a request that arrived at {at:.4g} s waited {wait:.3g} s in the queue, {wait / w0:.0f}x the median "
            f"request's latency ({w0:.3g} s), and the queue then drained: latencies include that backlog, not a "
            "steady state"
        )
    elif held and waits is not None:
        explanations["backlogged"] = (
            f"requests that arrived around {waits.peak_at_s:.4g} s waited a median {waits.peak_s:.3g} s in the "
            f"queue (the quietest time {waits.quiet_s:.3g} s; {waits.in_service_s:.3g} s in service), and the queue "
            "drained: the load passed capacity for a while; latencies describe that backlog, not a steady state"
        )
    elif undetermined:
        explanations["backlogged"] = (
            f"the requests in the system grew by {in_system_share:.0%} of the offered rate over the second half of "
            f"the arrivals, past {IN_SYSTEM_GROWING:.0%}, in a run too short to tell that from a settled run's "
            f"noise (standard error {in_system_se:.0%}): not shown to reach a steady state; a longer run tells"
        )
    elif unsettled:
        explanations["backlogged"] = (
            "the requests in the system (admitted, so the running batch, not the queue) were still growing when "
            "arrivals ended: the run is overloaded or has not warmed up; latencies are not a steady state's"
        )
    out["explanation"] = explanations[verdict]
    if rejected and verdict != "unserved":  # (the queue judges the requests let in, not the ones turned away)
        out["explanation"] += (
            f"; {rejected:,} of the {n_requests:,} requests ({rejected / n_requests:.0%}) were rejected, never "
            "served (each request's reject_reason), so the latencies describe only the rest"
        )
    return out


def summarize(
    req: pd.DataFrame,
    steps: pd.DataFrame,
    queue: pd.DataFrame,
    slo: dict,
    slo_classes: dict,
    kv_capacity_blocks: int,
    meta: dict,
    gaps: GapHistogram | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    clock_start_s: float | None = None,
) -> dict:
    """summary.json: vLLM-bench metrics at the top level (llmsim/metrics.py), then llmsim's own
    sections. ``gaps``: every inter-token gap of the run (ITL); None leaves ITL empty."""
    fin = finished(req)
    n = len(req)
    meets = slo_mask(req, slo, slo_classes)
    horizon_s = meta.get("horizon_s")
    sent = pd.Series(sent_mask(req, horizon_s), index=req.index)  # (attainment's)
    # ITL over every gap the run produced (the histogram's): a request the horizon cut counts its
    # gaps so far (vLLM's runs have none such, as its benchmark waits)
    itl = itl_from_histogram(gaps, percentiles)
    good = meets if has_latency_slo(slo, slo_classes) else None  # vLLM: no --goodput, no goodput
    summary = {
        **bench_metrics(req, good, itl, percentiles, fin, clock_start_s, horizon_s),
        "percentiles": list(percentiles),
        **meta,
        "requests": {
            "total": n,
            "finished": int(len(fin)),
            "rejected": int((req["status"] == "rejected").sum()),
            "unfinished": int((req["status"] == "unfinished").sum()),
            "preemptions": int(req["preemptions"].sum()),
        },
        **({"rejected_by": rejection_counts(req["reject_reason"])} if (req["status"] == "rejected").any() else {}),
        "tokens": {
            "prompt": int(fin["prompt_tokens"].sum()),
            "output": int(fin["generated_tokens"].sum()),
            "cached": int(fin["cached_tokens"].sum()),
        },
        "slo": {
            **{k: v for k, v in slo.items() if v is not None},
            "attainment": float(meets[sent].mean()) if sent.any() else 0.0,
            "met_target": bool(sent.any() and meets[sent].mean() >= slo.get("attainment_target", 0.9)),
        },
    }
    if "class" in req and req["class"].nunique() > 1:
        summary["classes"] = {
            str(k): {
                "requests": int(len(g)),
                "attainment": float(meets[g.index][sent[g.index]].mean()) if sent[g.index].any() else 0.0,
                **dist_ms("ttft", fin.loc[fin["class"] == k, "ttft_s"].to_numpy(), percentiles),
                **dist_ms("tpot", fin.loc[fin["class"] == k, "tpot_s"].to_numpy(), percentiles),
            }
            for k, g in req.groupby("class")
        }
    if not steps.empty and kv_capacity_blocks:
        w = steps["duration_s"].to_numpy()
        util = steps["kv_utilization"].to_numpy()  # each step's own replica's share (steplog.py)
        summary["kv_cache"] = {
            "capacity_blocks_per_replica": kv_capacity_blocks,
            "utilization_mean": float(np.average(util, weights=w)) if w.sum() > 0 else 0.0,
            "utilization_peak": float(util.max()),
        }
    shed = int(req["reject_reason"].fillna("").str.startswith("queue full").sum()) if n else 0
    summary["saturation"] = _saturation(req, fin, queue, meta.get("horizon_s"), shed)
    return summary


# The in-system signal's threshold: a fifth of the offered requests piling up, and three of its
# standard errors. A settled count fluctuates by about sqrt(lambda W) (Poisson, lambda W in the
# system) and stays correlated for about a latency W, so half a window of T seconds with N arrivals
# holds ~T / W independent samples and the slope's share of the offered rate has a standard error of
# ~sqrt(12 / N) * W / T: 0.10 for 150 arrivals over 14 s with 5 s latencies
# (scenarios/moe_expert_parallel.yaml, which reads 0.19 settled). The waiting queue's own 0.05
# stays the finer test where the queue is what grows.
IN_SYSTEM_GROWING = 0.2
# requests below which a run's in-system growth is not judged (``_in_system_growth``): such a run's
# steady state rests on the waiting queue alone
IN_SYSTEM_MIN_REQUESTS = 100


# arrivals below which the waiting queue's slope alone cannot call a run overloaded: five
# arrivals at 8 req/s, two of them briefly waiting for the next step, have a slope of 8.5 % of the
# offered rate (the quickstart with num_requests 5)
FEW_ARRIVALS = 20
# a request that waited in the queue this many times the median request's latency, and at least
# this long, shows a backlog the run went through even where the queue's slope over the whole run is
# flat (a burst it drained); a steady run, bursty or near capacity, drains its queue within a latency
TRANSIENT_WAITS = 5.0
TRANSIENT_WAIT_S = 1.0


def _piled_up(backlog: int, shed: int, n_requests: int, share: float, short: bool) -> bool:
    """More than 5 % of the offered requests left waiting past the horizon or shed. Not where a
    horizon cut a run that had not warmed up (``short``) and nothing was shed: what it left is the
    warm-up's, and the finished requests' latency behind ``in_flight`` is the survivors' (short)."""
    if short and not shed and share <= 0.05:
        return False
    return backlog + shed > 0.05 * max(n_requests, 1)


def _growing(share: float | None, se: float | None) -> bool:
    """The in-system count still grew: past ``IN_SYSTEM_GROWING`` and three standard errors."""
    return share is not None and se is not None and share > max(IN_SYSTEM_GROWING, 3 * se)


def _in_system_growth(
    req: pd.DataFrame, fin: pd.DataFrame, last_arrival_s: float
) -> tuple[float | None, float | None, str]:
    """How fast the requests in the system (arrived, not yet finished or rejected) grow over the
    second half of the arrival window, as a share of the offered rate there, the standard error of
    that share (``IN_SYSTEM_GROWING``), and why it was not judged: (None, None, reason) where a run
    is too small to tell, or too short to have warmed up ("short: ...").

    A steady state holds about the arrivals of the last latency W in the system (Little's law), so
    the count less the arrivals of the last ``W0`` seconds (``W0``: the median latency of the first
    tenth's requests, which met an emptier system) stays flat once warm, even while the offered rate
    ramps; an overload grows it at the offered rate less the served one, and so does a warm-up that
    lasts past the window's first half. Judged on >= 100 requests with >= 50 arrivals in the
    second half, and arrivals lasting at least two early latencies (else the window's count less
    the last W0's arrivals is minus the departures: flat while nothing has left, not settled). The
    standard error's latency is the median of the requests that arrived before the window: the
    latency a settled run keeps, and one an overload has not yet swollen."""
    arrival = np.sort(req["arrival_s"].to_numpy(dtype=float))
    if len(arrival) < IN_SYSTEM_MIN_REQUESTS or len(fin) < 10:
        return None, None, f"fewer than {IN_SYSTEM_MIN_REQUESTS} requests or 10 finished: too few to judge"
    t0 = float(arrival[0])
    span = last_arrival_s - t0
    fin_arrival = fin["arrival_s"].to_numpy(dtype=float)
    e2e = fin["e2e_s"].to_numpy(dtype=float)
    early = e2e[fin_arrival <= t0 + 0.1 * span]
    if not span > 0 or len(early) < 5:
        return None, None, "fewer than 5 requests of the first tenth of the arrivals finished: too few to judge"
    w0 = float(np.median(early))
    half = t0 + span / 2
    n_half = len(arrival) - int(np.searchsorted(arrival, half, side="right"))
    if n_half < 50:
        return None, None, "fewer than 50 arrivals in the second half of the arrivals: too few to judge"
    if w0 >= span / 2:
        return (
            None,
            None,
            (
                f"short: the arrivals lasted {span:.3g} s, less than two early latencies ({w0:.3g} s each): "
                "too short to reach a steady state"
            ),
        )
    status = req["status"]  # (compared as the column's own strings: no million Python strs made)
    leave = np.where(
        (status == "finished").to_numpy(dtype=bool),
        req["finish_s"].to_numpy(dtype=float),
        np.where((status == "rejected").to_numpy(dtype=bool), req["arrival_s"].to_numpy(dtype=float), np.inf),
    )
    leave.sort()
    grid = np.linspace(half, last_arrival_s, 101)
    arrived = np.searchsorted(arrival, grid, side="right")
    in_system = arrived - np.searchsorted(leave, grid, side="right")
    excess = in_system - (arrived - np.searchsorted(arrival, grid - w0, side="right"))
    window_s = last_arrival_s - half
    share = _slope(grid, excess.astype(float)) / (n_half / window_s)
    before = e2e[fin_arrival <= half]
    latency_s = float(np.median(before)) if len(before) else w0
    return share, math.sqrt(12 / n_half) * latency_s / window_s, ""


def _saturation(req: pd.DataFrame, fin: pd.DataFrame, queue: pd.DataFrame, horizon_s: float | None, shed: int) -> dict:
    """``saturation_verdict`` of a run, over the requests that arrived before its horizon (those
    after were never offered). Of those a cut leaves unfinished, the number a steady state holds in
    the system at any instant is not a backlog: Little's law, the offered rate times the finished
    requests' mean latency (a backlog past that still counts; the waiting queue's growth is
    judged apart)."""
    arrival = req["arrival_s"].to_numpy()
    offered = arrived_mask(arrival, horizon_s)
    left = int(((req["status"] == "unfinished").to_numpy(dtype=bool) & offered).sum())
    n_offered = int(offered.sum())
    last_arrival = float(arrival[offered].max()) if offered.any() else 0.0
    in_flight = 0
    span_s = last_arrival - float(arrival.min()) if n_offered else 0.0
    if horizon_s is not None and left and len(fin) and span_s > 0:
        in_flight = min(left, math.ceil(n_offered / span_s * float(fin["e2e_s"].mean())))
    queued = req["queued_s"].to_numpy(dtype=float)
    # (the queue's samples at t = 0 count the arrivals one by one, before any step: no measure of waiting)
    waited = bool(np.isfinite(queued).any() and np.nanmax(queued) > np.nanmin(queued) + 1e-12)
    growth, growth_se, not_judged = _in_system_growth(req[offered], fin, last_arrival)
    return saturation_verdict(
        queue,
        n_offered,
        left,
        last_arrival,
        shed,
        int(len(fin)),
        not_offered=len(req) - n_offered,
        in_flight=in_flight,
        burst_waited=waited,
        in_system_share=growth,
        in_system_se=growth_se,
        in_system_not_judged=not_judged,
        rejected=max(int(((req["status"] == "rejected").to_numpy(dtype=bool) & offered).sum()) - shed, 0),
        waits=_waits(req[offered], fin),
    )


class Waits(NamedTuple):
    """How long requests waited, for the verdict: a wait runs from arrival to the end of the
    request's first step (``queued_s``), so it holds that step too."""

    longest_s: float  # the longest wait
    longest_arrival_s: float  # when that request arrived
    # the finished requests' median latency (of the whole run: a burst at its start would make the
    # early requests' the burst's)
    latency_s: float
    in_service_s: float  # the finished requests' median time from their first step's end to finished
    # the requests cut by arrival into WAIT_BATCHES runs: the highest of their median waits, the
    # lowest but the first run's (the first arrivals meet an empty server: not a steady state's
    # quiet), and the middle of the arrivals of the run with the highest
    peak_s: float
    quiet_s: float
    peak_at_s: float


WAIT_BATCHES = 10


def _waits(req: pd.DataFrame, fin: pd.DataFrame) -> Waits | None:
    """The run's ``Waits``: None where nobody was scheduled or nobody finished."""
    arrival = req["arrival_s"].to_numpy(dtype=float)
    wait = req["queued_s"].to_numpy(dtype=float) - arrival
    seen = np.isfinite(wait)
    if not len(fin) or not seen.any():
        return None
    i = int(np.nanargmax(wait))
    order = np.argsort(arrival[seen], kind="stable")
    runs = [r for r in np.array_split(order, min(WAIT_BATCHES, int(seen.sum()))) if len(r)]
    medians = np.array([np.median(wait[seen][r]) for r in runs])
    peak = int(np.argmax(medians))
    fin_wait = (fin["queued_s"] - fin["arrival_s"]).to_numpy(dtype=float)
    e2e = fin["e2e_s"].to_numpy(dtype=float)
    return Waits(
        float(wait[i]),
        float(arrival[i]),
        float(np.median(e2e)),
        float(np.median(e2e - fin_wait)),
        float(medians[peak]),
        float(medians[1:].min() if len(medians) > 1 else medians[0]),
        float(np.median(arrival[seen][runs[peak]])),
    )
