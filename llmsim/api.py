"""The Python entry point: ``llmsim.run(scenario) -> Results``."""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.autoscaler import ScalingSpec, billed_s
from llmsim.build import (
    PoolSpec,
    activation_bytes,
    all2all_summary,
    build_model,
    build_pools,
    build_workload,
    check_prewarm,
    check_slo_classes,
    longest_hashed,
    prewarm_prefixes,
)
from llmsim.errors import UserError
from llmsim.invariants import check_run
from llmsim.models import ModelSpec
from llmsim.moejit import Key, valid_key
from llmsim.options import LoraSpec, TierSpec
from llmsim.results import Deployment, Results, ServerCache, chunks_frame, requests_frame, summarize
from llmsim.scenario import Scenario, load_scenario
from llmsim.sim import LinkSpec, SimOptions, SimOutput, simulate
from llmsim.workload.base import Workload
from llmsim.workload.limits import check_chain_blocks


def _scenario_of(scenario: object, overrides: dict[str, object] | None) -> Scenario:
    """``run``'s scenario argument as a validated Scenario."""
    if overrides is not None and (not isinstance(overrides, dict) or not all(isinstance(k, str) for k in overrides)):
        raise UserError(
            "llmsim.run: overrides must be a dict of dotted keys to values, e.g. {'cluster.replicas': 2}, got "
            f"{type(overrides).__name__}" + (" with a key that is not text" if isinstance(overrides, dict) else "")
        )
    if isinstance(scenario, Scenario):
        if overrides:
            raise UserError(
                "llmsim.run: overrides apply to a scenario path or dict; this Scenario is validated already "
                f"(change it with model_copy(update=...), or pass its path): {sorted(overrides)}"
            )
        return scenario
    if isinstance(scenario, dict):
        from llmsim.scenario import scenario_from_dict, with_overrides

        return scenario_from_dict(with_overrides(scenario, overrides), "scenario (dict)", Path.cwd())
    if not isinstance(scenario, str | Path):
        raise UserError(f"llmsim.run: expected a scenario path, dict or Scenario, got {type(scenario).__name__}")
    if isinstance(scenario, str) and "\n" in scenario:
        raise UserError(
            "llmsim.run: got YAML text, not a path: pass its data as a dict (yaml.safe_load) or a file path"
        )
    return load_scenario(scenario, overrides)


def default_horizon_s(sc: Scenario, last_arrival_s: float) -> float:
    """Where a run stops when ``workload.horizon_s`` is unset. Requests that arrive over time: twice
    the last arrival plus 600 s, so an overloaded run still ends and says so. Requests all there at
    t = 0 (``all_at_once``, an offline batch): no horizon, the run lasts until the last one is done,
    as an offline benchmark (trtllm-bench, vLLM's benchmark_throughput) waits for them."""
    if sc.workload.kind == "all_at_once":
        return math.inf
    return 2.0 * last_arrival_s + 600.0


def run(
    scenario: Scenario | str | Path | dict,
    overrides: dict[str, object] | None = None,
    checks: bool = True,
    exact_steps: bool = False,
    progress: Callable[[float, float], None] | None = None,
    server_cache: ServerCache | None = None,
    keep_server_cache: bool = False,
) -> Results:
    """Simulate a scenario (a ``Scenario``, a path to its YAML, or its data as a dict, whose relative
    paths resolve against the current folder) and return its frames and summary. ``overrides``
    (``{"workload.rate_rps": 4}``, as ``--set`` takes them) apply to a path or a dict; a
    ``Scenario`` is already validated, so they are refused there (``model_copy`` changes one).

    ``exact_steps`` simulates one event per step with every request a Python object touched each
    step, instead of the fast paths (columnar decoders, decode runs priced in closed form, steps
    completed without events): the same results to float rounding, see docs/performance.md.

    ``checks`` verifies the run's invariants (llmsim/invariants.py) and raises ``InvariantError``.
    ``progress(now_s, last_arrival_s)`` follows the simulated time up to the last arrival (``llmsim run``'s bar).

    ``server_cache``: the server's history, its prefix caches at the start as an earlier run on it
    left them (that run's ``Results.server_cache``: the same model, KV blocks and pools);
    ``keep_server_cache``: keep this run's in ``Results.server_cache`` for the next (``llmsim bench
    --after``)."""
    sc = _scenario_of(scenario, overrides)
    with _run_gc():
        return _run(sc, checks, exact_steps, progress, server_cache, keep_server_cache)


# A run's container objects mostly live to its end (requests, their per-request state), so
# CPython's collector, which counts allocations, keeps traversing survivors: at the default
# thresholds (700, 10, 10) it took ~12 % of case a and 3.8 s of a 1M-request run, 70 % of it in
# full collections that also walk every imported module's objects (benchmarks/bench_gc.py). The
# run freezes what existed before it (moved out of the collector's sight, not garbage) and
# collects less often; a run leaves ~1 cyclic-garbage object per request, so memory is unchanged.
_RUN_GC_THRESHOLDS = (5_000, 20, 100)
_gc_depth = 0  # nested runs (a plan in a notebook) restore only at the outermost
# A run's state (its requests, their block lists, its pools) is held by reference cycles through
# the event loop's closures, so it waits for a collection; the next run's freeze would keep it for
# good and a loop of runs would grow (a 30,000-request run left ~230 MB each time, a 5-request
# sweep point ~270 KB). So the outermost run collects as it returns, before it unfreezes: the
# collector then walks only what the run made, not every imported module's objects
# (benchmarks/bench_run_loop.py)


@contextmanager
def _run_gc() -> Iterator[None]:
    global _gc_depth
    saved = gc.get_threshold()
    if _gc_depth == 0:
        gc.freeze()
        gc.set_threshold(*_RUN_GC_THRESHOLDS)
    _gc_depth += 1
    try:
        yield
    finally:
        _gc_depth -= 1
        if _gc_depth == 0:
            try:
                if gc.isenabled():  # (a caller who switched the collector off keeps it off)
                    gc.collect()
            finally:  # (an interrupt during the collection still restores the caller's collector)
                gc.set_threshold(*saved)
                gc.unfreeze()


def _run(
    sc: Scenario,
    checks: bool,
    exact_steps: bool,
    progress: Callable[[float, float], None] | None,
    server_cache: ServerCache | None = None,
    keep_server_cache: bool = False,
) -> Results:
    try:
        model = build_model(sc)
        pools = build_pools(sc, model)
        workload = build_workload(sc)
        check_prewarm(sc, pools, sc.kv_cache.prewarm_block_tokens or workload.tokens_per_id(sc.kv_cache.block_tokens))
        check_slo_classes(sc, workload)
        if sc.engine_spec.frontend.priced and (workload.has_dependencies or sc.workload.max_concurrency):
            raise UserError(
                "engine.frontend: the API server's queue is priced for open-loop arrivals, not for a client's "
                "max_concurrency or for calls that wait on answers (conversations, sub-calls); remove one of them"
            )
    except UserError as exc:  # building knows the key path; name the scenario file too
        msg = str(exc)
        raise UserError(msg if msg.startswith(sc._origin) else f"{sc._origin}: {msg}") from None
    # the latest a request can be sent (with calls that wait on answers: their chains' delays too)
    last = workload.latest_send_s
    horizon = sc.workload.horizon_s or default_horizon_s(sc, last)
    every = {"all": 1, "sample": sc.output.sample_every, "none": 0}[sc.output.steps]
    here = deployment(sc, model, pools)
    opts = with_server_cache(
        sim_options(sc, model, pools, exact_steps, has_identity(workload), len(workload)),
        *starting_state(sc, here, server_cache),
        keep_server_cache,
    )
    if workload.block_hashes is not None and (opts.prefix_caching or sc.cluster.router == "prefix_affinity"):
        check_chain_blocks(
            workload.block_hashes,
            workload.prompt_tokens,
            workload.output_tokens,
            workload.tokens_per_id(sc.kv_cache.block_tokens),
            sc.kv_cache.block_tokens,
            longest_hashed(pools, sc.cluster.router),
            sc._origin,
        )
    out = simulate(
        pools,
        workload,
        sc.policy.kind,
        sc.cluster.router,
        sc.kv_cache.block_tokens,
        sc.kv_cache.watermark,
        horizon,
        every,
        sc.policy.max_queue,
        opts,
        progress,
        scaling_spec(sc, pools[0]),
    )
    req = requests_frame(out.requests, sc.engine_spec.output_delay_s)
    slo = sc.slo.model_dump(exclude={"classes"})
    slo["attainment_target"] = slo.pop("attainment")
    classes = {k: v.model_dump(exclude={"classes", "attainment"}) for k, v in sc.slo.classes.items()}
    meta = {
        "scenario": sc.name,
        "seed": sc.seed,
        "model": model.name,
        "policy": sc.policy.kind,
        "engine": engine_summary(sc),
        "pools": [
            {
                "name": p.name,
                "hardware": p.hw.name,
                "replicas": p.replicas,
                "tp": p.tp,
                "pp": p.pp,
                "ep": p.cost.cfg.ep,  # expert-parallel degree (1: every GPU holds every expert)
                "kv_blocks_per_replica": p.kv_blocks,
                "expert_imbalance": p.cost.cfg.moe_imbalance,  # busiest EP GPU / mean (eplb.py)
                # a step's T tokens reach what T^this independent ones would (MoE models only)
                **({"expert_routing_exponent": p.cost.cfg.expert_routing_exponent} if model.is_moe else {}),
                **all2all_summary(p.cost.cfg),
                "memory_per_device": p.memory,
                "price_per_hour_usd": p.hw.price_per_hour_usd.value * p.replicas * p.tp * p.pp,
            }
            for p in pools
        ],
        "horizon_s": horizon if math.isfinite(horizon) else None,  # None: run until every request was done
        "workload": workload.stats(),
    }
    percentiles = tuple(sc.output.percentiles)
    clock = 0.0 if sc.workload.sends_as_vllm_bench else None  # (the client's clock: bench_metrics)
    summary = summarize(req, out.steps, out.queue, slo, classes, pools[0].kv_blocks, meta, out.gaps, percentiles, clock)
    from llmsim.accuracy import accuracy_family, runs_like, validated

    # prediction intervals (docs/validation.md): the errors of the validation runs like this one
    like = runs_like({accuracy_family(p.hw) for p in pools}, model.is_moe)
    summary["accuracy"] = validated(sc.engine_spec.name, **like)
    summary["accuracy_like"] = like
    reps = out.replicas
    busy = sum(reps["busy_s"].tolist())
    summary["steps_total"] = int(sum(reps["steps"].tolist()))
    if every and out.steps_every != every:  # (the log's bound, steplog.MAX_ROWS, sampled a long run's steps)
        summary["steps_table"] = {"kept_every": out.steps_every, "asked_every": every, "rows": len(out.steps)}
    # busy over the run's duration (first arrival to the last answer); over the horizon when it is 0
    span = summary["duration"] if summary["duration"] > 0 else max(out.horizon_s, 1e-12)
    replica_s = len(out.replicas) * span  # replica-seconds there; with an autoscaler, those billed
    cost_per_s = sum(p["price_per_hour_usd"] for p in meta["pools"]) / 3600.0
    if out.lifetimes is not None:
        first = float(req["arrival_s"].min()) if len(req) else 0.0
        summary["autoscaling"] = autoscaling_summary(sc, pools[0], out, first, first + span)
        replica_s = summary["autoscaling"]["replica_hours"] * 3600.0
        cost_per_s = summary["autoscaling"]["usd"] / span
    summary["utilization"] = {"replica_busy_fraction": min(1.0, busy / max(replica_s, 1e-12))}
    toks = summary["tokens"]["output"] + summary["tokens"]["prompt"]
    summary["cost"] = {
        "cluster_usd_per_hour": cost_per_s * 3600.0,
        "usd_per_million_tokens": cost_per_s * span / toks * 1e6 if toks else None,
        "usd_per_million_output_tokens": (
            cost_per_s * span / summary["tokens"]["output"] * 1e6 if summary["tokens"]["output"] else None
        ),
    }
    summary.update(mechanism_summary(sc, model, pools, out))
    if out.unsent >= 0:  # requests waited on answers or slots: those the horizon came before
        summary["requests"]["unsent"] = out.unsent
    if workload.session is not None:
        summary["sessions"] = session_summary(req, workload.session)
    if checks:
        capacity = {p.name: p.kv_blocks for p in pools}
        check_run(req, out.steps, summary, len(workload), capacity, reps, out.requests, out.horizon_s, out.events_left)
    scaling = pd.DataFrame() if out.decisions is None else out.decisions
    chunks = chunks_frame(out.requests)
    extra = {} if out.lifetimes is None else {"lifetimes": out.lifetimes}  # each replica's life (autoscaler.Life)
    left = None
    if out.free_queues is not None:
        # a run whose prompts carry no content (or with the prefix cache off) tracks no blocks: what
        # it evicted is not known, so the cache after it is taken as empty
        queues = out.free_queues if opts.prefix_caching else [[] for _ in out.free_queues]
        left = ServerCache(here, tuple(tuple(q) for q in queues), tuple(out.moe_kernels or ()))
    return Results(req, out.steps, summary, out.queue, chunks, scaling, extra, left)


def scaling_spec(sc: Scenario, pool: PoolSpec) -> ScalingSpec | None:
    """The scenario's autoscaler, a new replica's start priced: the pod's provisioning, its
    weights (all its devices' shares) read at ``load_gbps``, the engine's start."""
    a = sc.cluster.autoscaling
    if a is None:
        return None
    return ScalingSpec(
        metric=a.metric,
        target=a.target,
        initial=sc.cluster.replicas,
        min_replicas=a.min_replicas,
        max_replicas=a.max_replicas,
        start_s=a.provision_s + weights_load_s(sc, pool) + a.engine_init_s,
        interval_s=a.interval_s,
        tolerance=a.tolerance,
        up_window_s=a.scale_up_window_s,
        down_window_s=a.scale_down_window_s,
        ttft_window_s=a.ttft_window_s,
        output_delay_s=sc.engine_spec.output_delay_s,
    )


def weights_load_s(sc: Scenario, pool: PoolSpec) -> float:
    assert sc.cluster.autoscaling is not None
    return pool.memory["replica_weights_bytes"] / (sc.cluster.autoscaling.load_gbps * 1e9)


def autoscaling_summary(sc: Scenario, pool: PoolSpec, out: SimOutput, start_s: float, end_s: float) -> dict:
    """What the autoscaler did and what it cost over [start_s, end_s] (the run's span: first
    arrival to last finish, as the fixed cluster's cost is taken)."""
    a = sc.cluster.autoscaling
    lives, dec = out.lifetimes, out.decisions
    assert a is not None and lives is not None and dec is not None
    replica_s = billed_s(lives, start_s, end_s)
    gpus = pool.tp * pool.pp
    load_s = weights_load_s(sc, pool)
    serving = [sc.cluster.replicas, *dec["serving"].tolist()]
    return {
        "metric": a.metric,
        "target": a.target,
        "min_replicas": a.min_replicas,
        "max_replicas": a.max_replicas,
        "interval_s": a.interval_s,
        "start_s": {
            "provision_s": a.provision_s,
            "weights_load_s": load_s,
            "engine_init_s": a.engine_init_s,
            "total_s": a.provision_s + load_s + a.engine_init_s,
        },
        "decisions": len(dec),
        "scale_ups": int(len(lives) - sc.cluster.replicas),
        "cancelled": int(lives["cancelled_s"].notna().sum()),
        "drained": int(lives["drain_s"].notna().sum()),
        "peak_serving": int(max(serving)),
        "final_serving": int(serving[-1]),
        "mean_replicas": replica_s / max(end_s - start_s, 1e-12),
        "replica_hours": replica_s / 3600.0,
        "gpu_hours": replica_s * gpus / 3600.0,
        "usd": replica_s * gpus * pool.hw.price_per_hour_usd.value / 3600.0,
    }


def session_summary(req: pd.DataFrame, session: np.ndarray) -> dict:
    """Closed-loop sessions (feeder.py): how long each took, from its first call's arrival to its
    last answer, over the sessions whose every call was answered."""
    frame = pd.DataFrame(
        {"session": session[req["id"].to_numpy()], "arrival_s": req["arrival_s"], "finish_s": req["finish_s"]}
    )
    frame["done"] = req["status"].to_numpy() == "finished"
    per = frame.groupby("session").agg(start=("arrival_s", "min"), end=("finish_s", "max"), done=("done", "all"))
    span = (per["end"] - per["start"])[per["done"]].to_numpy()
    return {
        "count": len(per),
        "requests": len(frame),
        "completed": int(per["done"].sum()),
        "duration_mean_s": float(span.mean()) if len(span) else None,
        "duration_p50_s": float(np.percentile(span, 50)) if len(span) else None,
        "duration_p99_s": float(np.percentile(span, 99)) if len(span) else None,
    }


def engine_summary(sc: Scenario) -> dict:
    """The engine a run used, as summary.json records it (engine.py)."""
    e = sc.engine_spec
    return {
        "name": e.name,
        "async_scheduling": e.async_scheduling,
        "cuda_graphs": sc.cluster.cuda_graphs if e.cuda_graphs is None else e.cuda_graphs,
        "output_delay_s": e.output_delay_s,
        **(
            {"frontend": {"base_s": e.frontend.base_s, "per_token_s": e.frontend.per_token_s}}
            if e.frontend.priced
            else {}
        ),
        "first_token_at_prefill": e.first_token_at_prefill,  # (disaggregated: where TTFT is stamped)
        "source": e.source,
    }


def with_server_cache(
    opts: SimOptions, queues: list[list[int]], kernels: list[tuple[Key, ...]], keep: object
) -> SimOptions:
    """The options with the server's history: each replica's free block queue and compiled MoE
    kernels an earlier run left, and whether to keep this run's (``keep_server_cache``) for the next."""
    if not isinstance(keep, bool):
        raise UserError(f"llmsim.run: keep_server_cache must be true or false, got {type(keep).__name__}")
    return dataclasses.replace(opts, free_queues=queues, moe_kernels=kernels, keep_free_queues=keep)


def deployment(sc: Scenario, model: ModelSpec, pools: list[PoolSpec]) -> Deployment:
    """What this run's prefix caches belong to (a ``ServerCache``'s ``deployment``)."""
    shape = tuple((p.name, p.hw.name, p.replicas, p.tp, p.pp) for p in pools)
    dtypes = (str(model.weight_dtype), str(sc.model.act_dtype))
    return Deployment(model.name, sc.kv_cache.block_tokens, str(sc.kv_cache.dtype), shape, dtypes)


def starting_state(sc: Scenario, here: Deployment, cache: object) -> tuple[list[list[int]], list[tuple[Key, ...]]]:
    """Each replica's free block queue and compiled MoE kernels at the start: ``cache``'s, where it
    is an earlier run's on this server (a ``ServerCache`` of the same deployment), else empty."""
    if cache is None:
        return [], []
    if not isinstance(cache, ServerCache):
        raise UserError(
            f"llmsim.run: server_cache must be an earlier run's Results.server_cache, got {type(cache).__name__}"
        )
    if sc.cluster.autoscaling is not None:
        raise UserError(
            f"{sc._origin}: server_cache: a server's history with cluster.autoscaling is not modelled "
            "(its replicas come and go)"
        )
    names = {
        "block_tokens": "kv_cache.block_tokens",
        "kv_dtype": "kv_cache.dtype",
        "dtypes": "model.weight_dtype and model.act_dtype",
        "pools": "pools (name, hardware, replicas, tp, pp)",
    }
    for f in dataclasses.fields(Deployment):
        theirs, ours = getattr(cache.deployment, f.name), getattr(here, f.name)
        if theirs != ours:
            what = names.get(f.name, f.name)
            raise UserError(
                f"{sc._origin}: server_cache is of another deployment: its {what} {theirs!r}, this run's {ours!r} "
                "(a server's cache carries over only to a run of the same model, dtypes, KV blocks and pools)"
            )
    queues = [list(q) for q in cache.queues]
    for q in queues:
        if not all(type(h) is int and -(2**63) <= h < 2**63 for h in q):
            raise UserError("llmsim.run: server_cache.queues: expected the block hashes an earlier run left (ints)")
    kernels = list(cache.kernels) if isinstance(cache.kernels, tuple) else None
    if kernels is None or not all(isinstance(keys, tuple) and all(valid_key(k) for k in keys) for keys in kernels):
        raise UserError("llmsim.run: server_cache.kernels: expected the MoE kernel keys an earlier run left")
    count = sum(p[2] for p in here.pools)  # (an earlier run leaves one entry a replica, or none)
    for name, state in (("queues", queues), ("kernels", kernels)):
        if state and len(state) != count:
            raise UserError(
                f"llmsim.run: server_cache.{name}: expected one entry for each of the deployment's {count} "
                f"replicas, as an earlier run leaves them, got {len(state)}"
            )
    return queues, kernels


def has_identity(workload: Workload) -> bool:
    """Does any request carry prompt content (block hashes) a prefix cache could match?"""
    return workload.block_hashes is not None and any(workload.block_hashes)


def sim_options(
    sc: Scenario,
    model: ModelSpec,
    pools: list[PoolSpec],
    exact_steps: bool = False,
    identity: bool = True,
    n_requests: int = 0,
) -> SimOptions:
    """The scenario's queue, prefix-cache and KV-link settings for the event loop. A prefix cache
    with nothing to match (no request carries content, nothing prewarmed) never hits and changes
    nothing: it is left off, so the columnar fast path stays available (same results)."""
    prefixes, prefix_block_tokens = prewarm_prefixes(sc)
    link = None
    if sc.policy.kind == "disaggregated":
        lk = sc.cluster.kv_link
        hw = pools[0].hw
        default = {"nvlink": hw.scale_up, "rdma": hw.scale_out, "pcie": hw.host_link, "custom": hw.scale_out}[lk.kind]
        link = LinkSpec(
            kind=lk.kind,
            bandwidth_bytes_per_s=lk.bandwidth_gbps * 1e9 if lk.bandwidth_gbps else default.bandwidth_bytes_per_s.value,
            latency_s=lk.latency_us * 1e-6 if lk.latency_us is not None else default.latency_s.value,
            layerwise_overlap=lk.layerwise_overlap,
        )
    caching = sc.kv_cache.prefix_caching and (identity or bool(prefixes))
    return SimOptions(
        prefix_caching=caching,
        reuse_partial_first=sc.kv_cache.reuse_partial_first,
        prewarm=prefixes,
        prewarm_block_tokens=prefix_block_tokens,
        kv_link=link,
        decode_router=sc.cluster.decode_router,
        router_view_s=sc.cluster.router_view_s,
        max_concurrency=sc.workload.max_concurrency,
        answer_delay_s=sc.engine_spec.output_delay_s,
        # one API server a replica of the pool requests arrive at (its vllm serve), priced as one server
        # that many times as fast (a shared queue; an autoscaled pool: its starting count)
        frontend_base_s=sc.engine_spec.frontend.base_s / pools[0].replicas,
        frontend_per_token_s=sc.engine_spec.frontend.per_token_s / pools[0].replicas,
        kv_bytes_per_token=model.kv_bytes_per_token(sc.kv_cache.dtype),
        num_layers=model.num_layers,
        n_seqs=sc.workload.beam_width or sc.workload.parallel_samples,
        exact_steps=exact_steps,
        prefill_policy=sc.policy.prefill_pool_policy,
        traced_ids=frozenset() if sc.output.trace == "full" else frozenset(traced(n_requests, sc)),
        trace_all=sc.output.trace == "full",
        offload=offload_tiers(sc, model, pools[0]) if caching else [],  # (nothing to match without ids)
        lora=lora_spec(sc, model, pools[0]),
    )


def lora_spec(sc: Scenario, model: ModelSpec, pool: PoolSpec) -> LoraSpec | None:
    """A replica's multi-LoRA settings (scenario ``lora``): an adapter is the workload's rank
    (default max_lora_rank) over every wrapped layer, in the model's 16-bit dtype; copied to the
    GPUs over their host links together (the profile's, x tp), read from the store once per load."""
    lo = sc.lora
    if lo is None:
        return None
    from llmsim.costmodel.ops import storage_of
    from llmsim.lora import adapter_params
    from llmsim.models import DTYPE_BYTES

    wl = sc.workload.lora
    rank = wl.rank if wl is not None and wl.rank is not None else lo.max_lora_rank
    host = pool.hw.host_link
    return LoraSpec(
        max_loras=lo.max_loras,
        max_cpu_loras=lo.max_cpu_loras or lo.max_loras,
        adapter_bytes=adapter_params(model, rank) * DTYPE_BYTES[storage_of(sc.model.act_dtype)],
        host_bytes_per_s=host.bandwidth_bytes_per_s.value * pool.tp * pool.pp,
        host_latency_s=host.latency_s.value,
        disk_bytes_per_s=lo.load_gbps * 1e9,
        disk_latency_s=lo.load_latency_ms * 1e-3,
    )


def offload_tiers(sc: Scenario, model: ModelSpec, pool: PoolSpec) -> list[TierSpec]:
    """The scenario's KV offload tiers, sized in blocks of the replica's KV (kv_cache.offload), for
    the replicas that match prompts: the colocated pool's, or a disaggregated prefill pool's
    (``pools[0]``; the decode replicas take prefilled requests and match nothing)."""
    block_bytes = model.kv_bytes_per_token(sc.kv_cache.dtype) * sc.kv_cache.block_tokens
    host = pool.hw.host_link
    out = []
    for t in sc.kv_cache.offload:
        cpu = t.tier == "cpu"
        bw = t.bandwidth_gbps * 1e9 if t.bandwidth_gbps else host.bandwidth_bytes_per_s.value * pool.tp * pool.pp
        lat = t.latency_us * 1e-6 if t.latency_us is not None else (host.latency_s.value if cpu else 0.0)
        out.append(TierSpec(t.tier, max(1, int(t.capacity_gb * 1e9 // block_bytes)), bw, lat))
    return out


def traced(n_requests: int, sc: Scenario) -> list[int]:
    """The requests whose prefill chunks the timeline draws (imported here: a run without a
    report never loads the timeline module at start-up)."""
    from llmsim.timeline import sample_indices

    return sample_indices(n_requests, sc.output)


def offload_summary(sc: Scenario, reps: pd.DataFrame, hit_tokens: int, query_tokens: int) -> dict:
    """Per tier: what was written back, read back (its hit rate: prompt tokens served from it over
    those queried), passed down and held at the end; the device's own hits; the seconds of reads."""
    bt = sc.kv_cache.block_tokens
    tiers = {}
    from_tiers = 0
    for t in sc.kv_cache.offload:
        col = f"offload_{t.tier}_"
        hits = int(reps[col + "hit_blocks"].sum()) * bt
        from_tiers += hits
        tiers[t.tier] = {
            "capacity_gb": t.capacity_gb,
            "stored_blocks": int(reps[col + "stored_blocks"].sum()),
            "hit_tokens": hits,
            "hit_rate": hits / query_tokens if query_tokens else 0.0,
            "reads": int(reps[col + "reads"].sum()),
            "dropped_blocks": int(reps[col + "dropped_blocks"].sum()),
            "held_blocks": int(reps[col + "held_blocks"].sum()),
        }
    device = max(hit_tokens - from_tiers, 0)
    return {
        "device_hit_tokens": device,
        "device_hit_rate": device / query_tokens if query_tokens else 0.0,
        "tiers": tiers,
        "load_s": float(reps["offload_load_s"].sum()),
    }


def lora_summary(sc: Scenario, reps: pd.DataFrame, out: SimOutput) -> dict:
    """Multi-LoRA: the settings, the adapters the requests used, the loads (GPU slot copies, reads
    from the store) and the seconds steps waited for them, and the LoRA kernels' share of the steps."""
    lo = sc.lora
    assert lo is not None
    used = [r.lora_id for r in out.requests if r.lora_id >= 0]

    def total(col: str) -> float:
        return float(reps[col].sum()) if col in reps else 0.0

    return {
        "max_loras": lo.max_loras,
        "max_lora_rank": lo.max_lora_rank,
        "max_cpu_loras": lo.max_cpu_loras or lo.max_loras,
        "adapters_used": len(set(used)),
        "requests_with_adapter": len(used),
        "gpu_loads": int(total("lora_gpu_loads")),
        "store_loads": int(total("lora_disk_loads")),
        "load_s": total("lora_load_s"),  # steps waiting for adapters to be copied in
        "kernel_s": total("lora_kernel_s"),  # the LoRA kernels' part of the steps
        "busy_s": total("busy_s"),
    }


def mechanism_summary(sc: Scenario, model: ModelSpec, pools: list[PoolSpec], out: SimOutput) -> dict:
    """Per-mechanism numbers: memory peaks, preemption/swap, prefix cache, KV transfer, speculation."""
    reps = out.replicas  # one row per replica (Replica.counters)
    res: dict = {}
    steps = out.steps
    if not steps.empty:
        res["kv_fragmentation_mean"] = float(steps["kv_fragmentation"].mean())

    def total(col: str, rows: pd.DataFrame = reps) -> float:  # in replica order, as the counters were kept
        return sum(rows[col].tolist())

    peak_tokens = max(reps["max_step_tokens"].tolist(), default=0)
    p0 = pools[0]
    res["memory"] = {
        "max_step_tokens": peak_tokens,
        "activation_peak_bytes": activation_bytes(model, peak_tokens, p0.sched.max_num_seqs, p0.tp, sc.model.act_dtype),
        "kv_peak_blocks": max(reps["kv_peak_blocks"].tolist()),
    }
    if any(p.moe_jit is not None for p in pools):  # (a server's first steps of a new kind: moejit.py)
        res["moe_jit"] = {
            "compile_s": max(p.moe_jit.compile_s for p in pools if p.moe_jit is not None),
            "kernels_compiled": int(total("moe_jit_compiles")),
            "wait_s": total("moe_jit_wait_s"),
        }
    res["preemption"] = {
        "mode": sc.kv_cache.preemption,
        "swap_s": total("swap_s"),
        "requests_preempted": int(sum(1 for r in out.requests if r.preemptions)),
    }
    if sc.kv_cache.prefix_caching:
        hit = int(total("prefix_hit_tokens"))
        query = int(total("prefix_query_tokens"))
        # a preempted request resumed looks its prompt up again: saved work, not in vLLM's hit rate
        again, again_query = int(total("prefix_resumed_hit_tokens")), int(total("prefix_resumed_query_tokens"))
        res["prefix_cache"] = {
            "hit_rate": hit / query if query else 0.0,  # vLLM's: new requests' lookups
            "saved_prefill_tokens": hit + again,
            "queried_prompt_tokens": query,
            "evictions": int(total("prefix_evictions")),
        }
        if again_query:
            res["prefix_cache"]["resumed"] = {"queried_tokens": again_query, "hit_tokens": again}
        hit, query = hit + again, query + again_query  # (the tiers serve every lookup)
        if not query:
            res["prefix_cache"]["note"] = "no request carries prompt content (block hashes): nothing to match"
        if sc.kv_cache.offload and query:  # (no content, no tiers: SimOptions.offload)
            res["kv_offload"] = offload_summary(sc, reps, hit, query)
    if sc.lora is not None:
        res["lora"] = lora_summary(sc, reps, out)
    if out.transfer is not None:
        tr = out.transfer
        ts = np.array([r.transfer_s for r in out.requests if r.transfer_s > 0])
        finish = [r.finish_s for r in out.requests if r.finish_s == r.finish_s]
        span = max(finish, default=0.0)
        links = int((reps["side"] == "prefill").sum())
        res["kv_transfer"] = {
            "link": tr["link"],
            "transfers": int(len(ts)),
            "bytes": tr["bytes"],
            "transfer_s_mean": float(ts.mean()) if len(ts) else 0.0,
            "transfer_s_p99": float(np.percentile(ts, 99)) if len(ts) else 0.0,
            "wait_for_decode_blocks_s": tr["waits_s"],
            "link_utilization": tr["busy_s"] / (links * span) if span > 0 else 0.0,
        }
    if "active_s" in reps:  # pipelined replicas
        pp_reps = reps[reps["active_s"].notna()]
        active = total("active_s", pp_reps)
        stages = [c for c in reps.columns if c.startswith("stage") and c.endswith("_busy_s")]
        busy = [total(c, pp_reps) for c in stages]
        res["pipeline"] = {
            "stages": len(busy),
            # share of each stage's active span (first micro-batch start to last landing) spent computing
            "stage_utilization": [b / active if active > 0 else 0.0 for b in busy],
            "bubble_s": sum(active - b for b in busy),
        }
    if "dp_wait_s" in reps:  # the lock-stepped ranks of an expert-parallel pool (dpgroup.py)
        dp_reps = reps[reps["dp_wait_s"].notna()]
        busy = total("busy_s", dp_reps)
        wait = total("dp_wait_s", dp_reps)
        res["data_parallel"] = {
            "ranks": len(dp_reps),
            "lockstep_wait_s": wait,
            # share of the ranks' step time spent waiting for the slowest rank at the MoE collectives
            "lockstep_wait_fraction": wait / busy if busy > 0 else 0.0,
            "dummy_steps": int(total("dp_dummy_steps", dp_reps)),
        }
    spec_reps = reps[reps["spec_slots"] > 0]
    if sc.speculative is not None and len(spec_reps):
        slots = int(total("spec_slots", spec_reps))
        emitted = int(total("spec_emitted", spec_reps))
        base = total("spec_base_s", spec_reps)
        spent = total("spec_time_s", spec_reps)
        draft = total("draft_s", spec_reps)
        res["speculative"] = {
            "method": sc.speculative.method,
            "k": sc.speculative.k,
            "tokens_per_step": emitted / slots,
            "accepted_per_step": emitted / slots - 1.0,
            "draft_s": draft,
            "verify_s": spent - draft,
            # decode tokens per second with speculation over the same batches decoded plainly
            "speedup": (emitted / spent) / (slots / base) if spent > 0 and base > 0 else None,
        }
    return res
