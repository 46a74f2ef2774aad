"""The closed-form decode-run jumps give the same results as one event per step."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmsim
from llmsim.costmodel import CostConfig, CostModel, batch_shape
from llmsim.engine import PRESETS
from llmsim.hardware import load_profile
from llmsim.models import CATALOG
from llmsim.results import read_table
from llmsim.scenario import scenario_from_dict
from llmsim.steplog import STEP_COLUMNS

ROOT = Path(__file__).resolve().parent.parent

LENGTHS = {
    "prompt_tokens": {"dist": "lognormal", "median": 600, "sigma": 0.8, "min": 8, "max": 4000},
    "output_tokens": {"dist": "lognormal", "median": 90, "sigma": 0.9, "min": 1, "max": 600},
}


# vLLM v1, synchronous (as on a CPU: host work adds to the step), with a step after a batch change
# costing 2 ms + 0.1 ms per sequence more (engine.batch_change)
CHANGE: dict = {"preset": "vllm-v1", "async_scheduling": False, "batch_change": {"base_s": 2e-3, "per_seq_s": 1e-4}}


def _scenario(policy: str, engine: str | dict = "ideal", **extra: object) -> llmsim.Scenario:
    d: dict = {
        "name": f"fast-{policy}",
        "engine": engine,
        "seed": 3,
        "model": "llama-3.1-8b",
        "hardware": "A100-SXM-80GB",
        "cluster": {"replicas": 2, "router": "least_outstanding"},
        "policy": {"kind": policy, "chunk_tokens": 256, "max_num_seqs": 64},
        "kv_cache": {"memory_fraction": 0.35},  # tight: preemptions happen too
        "workload": {"kind": "poisson", "rate_rps": 12.0, "num_requests": 250, **LENGTHS},
    }
    if policy == "disaggregated":
        d["cluster"] = {"prefill_pool": {"replicas": 1}, "decode_pool": {"replicas": 2}, "kv_link": {"kind": "nvlink"}}
    for key, value in extra.items():
        section, name = key.split("__")
        if section == "model":
            d["model"] = {"name": value}
            d["workload"]["prompt_tokens"] = {"dist": "uniform", "min": 2000, "max": 6000}
            continue
        d.setdefault(section, {})[name] = value
    return scenario_from_dict(d, "test", Path("."))


def _compare(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a["status"]) == list(b["status"])
    num = a.select_dtypes("number").columns
    np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), rtol=1e-9, atol=1e-9)


# one replica with a small cache under overload: requests are preempted (and come back)
TIGHT = {"cluster__replicas": 1, "kv_cache__memory_fraction": 0.23}
# every numeric column of steps.csv (kv_blocks_used is compared exactly, below)
NUMERIC_STEP_COLUMNS = [c for c in STEP_COLUMNS if c not in ("pool", "replica", "kv_blocks_used")]


@pytest.mark.parametrize(
    ("policy", "extra"),
    [
        ("traditional", {}),
        ("chunked", {}),
        ("disaggregated", {}),
        ("disaggregated", {"policy__prefill_pool_policy": "chunked"}),
        ("static", {}),
        ("chunked", {"cluster__router": "kv_aware"}),
        ("traditional", {"kv_cache__preemption": "swap"}),
        ("chunked", {"cluster__cuda_graphs": True}),
        ("chunked", {"cluster__replicas": 1, "workload__rate_rps": 3.0}),  # runs end at the next arrival
        ("traditional", {"cluster__replicas": 1}),
        ("chunked", {"cluster__replicas": 1, "workload__kind": "all_at_once"}),  # simultaneous arrivals
        ("chunked", {"cluster__replicas": 1, "workload__horizon_s": 5.0}),  # cut by the horizon
        # preemption: victims are picked among columnar decoders and prompts in progress
        ("traditional", TIGHT),
        ("chunked", TIGHT),
        ("chunked", {**TIGHT, "kv_cache__preemption": "swap"}),
        ("disaggregated", {"kv_cache__memory_fraction": 0.23, "workload__rate_rps": 30.0}),
        # local+global attention, contexts crossing the 4096-token window
        ("chunked", {"model__name": "gemma-2-9b", "workload__rate_rps": 3.0}),
        ("traditional", {"model__name": "mistral-7b", "workload__rate_rps": 3.0}),
        # the vLLM engine: its scheduler, async scheduling (arrivals join the plan after next),
        # host terms and CUDA-graph padding in every step's price
        ("vllm", {"engine": "vllm-v1"}),
        ("vllm", {"engine": "vllm-v1", "cluster__replicas": 1, "workload__rate_rps": 3.0}),
        ("vllm", {"engine": "vllm-v1", "cluster__replicas": 1, "workload__kind": "all_at_once"}),
        ("vllm", {"engine": "vllm-v1", **TIGHT}),
        ("chunked", {"engine": "vllm-v1", "kv_cache__prefix_caching": False}),
        ("disaggregated", {"engine": "vllm-v1"}),
        # a step after its batch changed pays the engine's batch_change term: decode runs start after it
        ("vllm", {"engine": CHANGE}),
        ("chunked", {"engine": {**CHANGE, "async_scheduling": True}, "kv_cache__prefix_caching": False}),
        ("vllm", {"engine": CHANGE, "cluster__replicas": 1, "workload__rate_rps": 3.0}),
        ("traditional", {"engine": CHANGE, **TIGHT}),
        # chunk runs (a prompt's chunks beside unchanged decodes): a per-prompt cap under the
        # budget; small chunks, so long runs that the free blocks end
        ("vllm", {"engine": "vllm-v1", "policy__long_prefill_token_threshold": 48}),
        (
            "chunked",
            {
                "cluster__replicas": 1,
                "kv_cache__num_blocks": 300,
                "policy__chunk_tokens": 64,
                "workload__rate_rps": 2.0,
            },
        ),
        ("vllm", {"engine": CHANGE, "cluster__replicas": 1, "policy__chunk_tokens": 64, "workload__rate_rps": 3.0}),
        # TensorRT-LLM's scheduler: decode runs over its running list (no columns); a small cache
        # holds requests back on their whole lifetime (never a preemption)
        ("trtllm", {}),
        ("trtllm", {"cluster__replicas": 1, "kv_cache__num_blocks": 600, "workload__rate_rps": 6.0}),
        ("trtllm", {"policy__enable_chunked_context": True, "policy__max_batch_tokens": 256}),
        ("trtllm", {"engine": "vllm-v1", "cluster__replicas": 1, "workload__rate_rps": 3.0}),
        # ... under MAX_UTILIZATION with chunked context: pauses (preemptions) in a tight cache
        (
            "trtllm",
            {"policy__capacity_scheduler_policy": "max_utilization", "policy__enable_chunked_context": True, **TIGHT},
        ),
        # ... under STATIC_BATCH: arrivals wait for the batch to drain (long decode runs, no mixed steps)
        ("trtllm", {"policy__capacity_scheduler_policy": "static_batch", "cluster__replicas": 1}),
    ],
)
def test_fast_paths_match_exact_steps(policy: str, extra: dict) -> None:
    sc = _scenario(policy, **extra)
    exact = llmsim.run(sc, exact_steps=True)
    fast = llmsim.run(sc)
    _compare(exact.requests, fast.requests)
    if extra.get("kv_cache__memory_fraction"):
        assert exact.summary["requests"]["preemptions"] > 0  # the case exercises preemption
    assert exact.summary["steps_total"] == fast.summary["steps_total"]
    assert len(exact.steps) == len(fast.steps)
    cols = NUMERIC_STEP_COLUMNS
    np.testing.assert_allclose(exact.steps[cols], fast.steps[cols], rtol=1e-9, atol=1e-12)
    assert (exact.steps["kv_blocks_used"].to_numpy() == fast.steps["kv_blocks_used"].to_numpy()).all()
    for q in ("median", "p90", "p99"):
        assert exact.summary[f"{q}_itl_ms"] == fast.summary[f"{q}_itl_ms"]
    for section in ("memory", "preemption"):  # peaks and counts, as the steps left them
        assert exact.summary[section] == fast.summary[section], section
    assert exact.summary["kv_cache"] == pytest.approx(fast.summary["kv_cache"], rel=1e-12)  # (time-weighted means)


def _count_events(monkeypatch: pytest.MonkeyPatch, sc: llmsim.Scenario, **kwargs: object) -> tuple[int, int]:
    """(SimPy events scheduled, steps simulated) of one run: read from the environment's event-id
    counter, which SimPy's ``schedule`` and ``fastpath.Later`` both draw from."""
    import simpy

    envs: list[simpy.Environment] = []
    init = simpy.Environment.__init__

    def keeping(env: simpy.Environment, *a: object, **k: object) -> None:
        init(env, *a, **k)  # type: ignore[arg-type]
        envs.append(env)

    monkeypatch.setattr(simpy.Environment, "__init__", keeping)
    res = llmsim.run(sc, **kwargs)
    monkeypatch.setattr(simpy.Environment, "__init__", init)
    (env,) = envs
    return next(env._eid), res.summary["steps_total"]  # type: ignore[attr-defined]


def test_fast_paths_need_far_fewer_events_than_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    # the point of the fast paths, counted rather than timed: decode runs jump, and a replica that
    # nothing can reach before its step ends completes the step without an event
    sc = _scenario("chunked", cluster__replicas=1)
    exact_events, steps = _count_events(monkeypatch, sc, exact_steps=True)
    fast_events, fast_steps = _count_events(monkeypatch, sc)
    assert fast_steps == steps
    assert exact_events > steps  # one event per step, plus arrivals
    assert fast_events < exact_events / 3, (fast_events, exact_events)


@pytest.mark.parametrize("engine", ["ideal", "vllm-v1"])
@pytest.mark.parametrize("hw", ["H100-SXM", "TPU-v5e", "Xeon-8480+"])
def test_decode_steps_s_equals_step_by_step_pricing(hw: str, engine: str) -> None:
    model = CATALOG["llama-3.1-8b"]
    spec = PRESETS[engine]
    for graphs in (False, True):
        cfg = CostConfig(cuda_graphs=graphs, cuda_graph_sizes=spec.cuda_graph_sizes)
        cm = CostModel(model, load_profile(hw), cfg, spec)
        shape = batch_shape([], [100 + 37 * i for i in range(48)])
        times = cm.decode_steps_s(shape, 300)
        exact = [
            cm.step_time(dataclasses.replace(shape, decode_ctx_tokens=shape.decode_ctx_tokens + 48 * j))
            for j in range(300)
        ]
        np.testing.assert_allclose(times, exact, rtol=1e-12)


@pytest.mark.parametrize(("contexts", "kink"), [([1], True), ([1000] * 32, False)])
def test_affine_run_pricing_only_where_linear(contexts: list[int], kink: bool) -> None:
    # on a GPU without CUDA graphs a launch longer than a short decode attention kernel floors it
    # (only the gap idles the device): a run across the context where the kernel outgrows the
    # launch takes the array formula, a run inside one regime the affine shortcut; both price
    # every step as step_time does. (A 10 us launch on an RTX 4090: the kink falls inside the run.)
    hw = load_profile("RTX-4090")
    launch = hw.overheads.kernel_launch_s.model_copy(update={"value": 10e-6})
    hw = hw.model_copy(update={"overheads": hw.overheads.model_copy(update={"kernel_launch_s": launch})})
    cm = CostModel(CATALOG["llama-3.1-8b"], hw, CostConfig())
    shape = batch_shape([], contexts)
    stage = cm._dense_stage_time(shape.tokens, shape.lm_rows, True)
    host = cm.host_s(shape.decode_seqs, shape.tokens)
    assert (cm._affine_decode_steps_s(shape, 2000, stage, host, True) is None) == kink
    n = len(contexts)
    exact = [
        cm.step_time(dataclasses.replace(shape, decode_ctx_tokens=shape.decode_ctx_tokens + n * j)) for j in range(2000)
    ]
    np.testing.assert_allclose(cm.decode_steps_s(shape, 2000), exact, rtol=1e-12)


def test_a_run_prices_only_the_steps_it_reaches() -> None:
    # an affine run is priced as far as someone reads it: an arrival that cuts it early leaves
    # the later steps unpriced; the steps it does price, and its end, are the floats the whole
    # run priced at once gives (the same sums in the same order)
    from llmsim.costmodel.roofline import AffineSteps
    from llmsim.kvcache import BlockManager
    from llmsim.runs import Run

    times = AffineSteps(0.010, 1e-6, 0.01002)  # the floor (host time) leads for the first steps
    whole = Run([], BlockManager(100, 16, 0.0), 5.0, times.expand(1000), 1000)
    whole.price_through(1000)
    lazy = Run([], BlockManager(100, 16, 0.0), 5.0, times, 1000)
    assert lazy.end_s() == whole.ends[-1]
    assert lazy.ends == []  # (the end is summed without keeping steps)
    done = lazy.steps_through(5.5)
    assert done == whole.steps_through(5.5) and 40 < done < 60
    assert len(lazy.ends) == done  # through the step in progress at the cut, no further
    assert lazy.ends == whole.ends[:done]
    assert [lazy.duration(i) for i in range(done)] == [whole.duration(i) for i in range(done)]
    assert lazy.duration(0) == 0.01002 and lazy.duration(done - 1) > 0.01002
    assert not lazy.ends_before(whole.ends[-1]) and lazy.ends_before(whole.ends[-1] + 1e-9)
    assert lazy.ends == whole.ends


def test_gap_histogram_takes_a_runs_end_times() -> None:
    # add_ends bins the differences of successive end times of each segment (never across two)
    from llmsim.gaps import GapHistogram

    rng = np.random.default_rng(1)
    ends = np.cumsum(rng.uniform(1e-3, 0.2, 400)).tolist()
    a, b = GapHistogram(), GapHistogram()
    for lo, hi, count in ((0, 50, 3), (50, 51, 9), (60, 400, 7)):
        if hi - lo > 1:
            a.add_ends(ends, lo, hi, count)
        for i in range(lo + 1, hi):
            b.add(ends[i] - ends[i - 1], count)
    assert a.total == b.total == 49 * 3 + 339 * 7
    np.testing.assert_array_equal(a.counts, b.counts)


def test_cli_exact_steps_flag_gives_the_same_requests(tmp_path: Path) -> None:
    from llmsim.cli import main

    sc = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"
    args = ["run", str(sc), "--quiet", "--no-report", "--set", "workload.num_requests=60"]
    assert main([*args, "--out", str(tmp_path / "fast")]) == 0
    assert main([*args, "--out", str(tmp_path / "exact"), "--exact-steps"]) == 0
    _compare(read_table(tmp_path / "exact", "requests"), read_table(tmp_path / "fast", "requests"))


def test_a_batch_change_is_paid_by_the_step_after_it() -> None:
    # the term prices the steps whose batch changed in the step before and no other: the run's busy
    # time grows by it, once per such step, and the presets (zero) leave every step as it was
    sync = {"preset": "vllm-v1", "async_scheduling": False}  # (host work adds to the step, as on a CPU)
    plain = llmsim.run(_scenario("vllm", sync, cluster__replicas=1))
    base_s = 2e-3
    changed = llmsim.run(_scenario("vllm", {**sync, "batch_change": {"base_s": base_s}}, cluster__replicas=1))
    steps = changed.steps
    assert changed.summary["steps_total"] >= plain.summary["steps_total"] * 0.9
    extra_s = steps["duration_s"].sum() - plain.steps["duration_s"].sum()
    # at least one step in ten follows a change (arrivals and finishes every few steps) and the
    # term never exceeds one per step
    assert len(steps) * base_s * 0.1 < extra_s < len(steps) * base_s * 1.01
    assert changed.summary["mean_itl_ms"] > plain.summary["mean_itl_ms"]


def test_a_decode_run_ends_where_a_transfers_reservation_leaves_it_short() -> None:
    """A slow KV link and a small decode cache: a transfer reserves blocks on the decode replica in
    the middle of a decode run that was as long as the free blocks allowed when it began. The run
    must end where the step-by-step loop runs short of blocks (and preempts); it used to run on
    and overdraw the cache (InvariantError, found by a review of 2026-12-05)."""
    over = {"cluster.kv_link": {"kind": "custom", "bandwidth_gbps": 0.5}, "kv_cache.num_blocks": 500}
    sc = llmsim.load_scenario(ROOT / "scenarios" / "colocated_vs_disaggregated.yaml", over)
    exact = llmsim.run(sc, exact_steps=True)
    fast = llmsim.run(sc)
    assert exact.summary["requests"]["preemptions"] > 100
    assert fast.summary["requests"]["preemptions"] == exact.summary["requests"]["preemptions"]
    assert fast.summary["steps_total"] == exact.summary["steps_total"]
    _compare(exact.requests, fast.requests)


def test_the_prefix_affinity_router_reads_replicas_brought_up_to_date() -> None:
    """Two replicas with prefix caching and a tight cache under the prefix_affinity router: a
    replica inside a decode run allocates its steps' blocks lazily, and those allocations evict
    cached prefix blocks; the router must sync the replicas before it counts their cached blocks,
    or it routes on blocks the step-by-step run has already evicted (found by a fuzz of fast
    against exact steps, 2026-12-05)."""
    d = {
        "name": "prefix-affinity",
        "seed": 223,
        "engine": "ideal",
        "model": "llama-3.2-1b",
        "hardware": "A100-SXM-80GB",
        "cluster": {"replicas": 2, "router": "prefix_affinity"},
        "policy": {"kind": "chunked", "max_num_seqs": 256, "chunk_tokens": 128},
        "kv_cache": {"block_tokens": 16, "prefix_caching": True, "num_blocks": 120},
        "workload": {
            "kind": "poisson",
            "num_requests": 229,
            "rate_rps": 8.0,
            "shared_prefix": {
                "num_groups": 5,
                "num_prompts_per_group": 3,
                "system_prompt_len": 500,
                "question_len": 100,
                "output_len": 80,
            },
        },
    }
    sc = scenario_from_dict(d, "test", Path("."))
    exact = llmsim.run(sc, exact_steps=True)
    fast = llmsim.run(sc)
    assert exact.summary["steps_total"] == fast.summary["steps_total"]
    _compare(exact.requests, fast.requests)


@pytest.mark.parametrize(("members", "free"), [(0, 10_000), (5, 10_000), (5, 40), (12, 9)])
def test_a_chunk_run_counts_the_blocks_its_steps_take(members: int, free: int) -> None:
    """A chunk run's three views of its blocks agree: what its length allows (``chunk_run_length``),
    what it would still need (``extra_blocks``, read when someone else takes blocks during it) and
    what it holds after each step (``kv_after_steps``, the steps.csv column), against the cache's
    own count as the run allocates step by step."""
    from llmsim.costmodel.roofline import AffineSteps
    from llmsim.decodeset import DecodeSet
    from llmsim.kvcache import BlockManager
    from llmsim.request import Request
    from llmsim.runs import ChunkRun, chunk_run_length

    bt, chunk = 16, 40
    kv = BlockManager(10_000, bt, track_ids=False)
    cols = DecodeSet(kv, None)
    for i in range(members):  # decoders at every position inside their last block
        r = Request(i, 0.0, 30 + 7 * i, 500)
        kv.allocate(r, r.prompt_tokens)
        r.kv_tokens = r.prefilled = r.prompt_tokens
        r.generated, r.admit_seq = 1, i
        cols.add(r)
    prompt = Request(99, 0.0, 1_000, 10)
    kv.allocate(prompt, 123)  # a prompt part-way through
    prompt.kv_tokens = prompt.prefilled = 123
    cols.allocate(cols.blocks_next())  # step 0, the plan: the decoders' blocks, then the chunk's
    kv.allocate(prompt, chunk)
    kv.num_blocks = kv.used + free  # (the free blocks the case wants)
    k = chunk_run_length(cols, prompt, chunk, kv.free_blocks, 1 << 20, 2)
    whole = -(-(1_000 - 123) // chunk) - 1  # 21: its chunks before the last (no decoder finishes before)
    run = ChunkRun(cols, kv, 0.0, AffineSteps(0.01, 0.0, 0.0), k, prompt, chunk)
    need = [run.extra_blocks(s) for s in range(1, k + 1)]
    assert need[-1] <= kv.free_blocks
    if free > 1_000:
        assert k == whole
    else:  # the free blocks end it: one more step would not fit
        assert 2 <= k < whole
        assert run.extra_blocks(k + 1) > kv.free_blocks
    used, held = run.kv_after_steps(0, k)
    used0 = kv.used
    for s in range(1, k + 1):
        run.allocate_through(s)
        assert kv.used - used0 == need[s - 1]
        assert (kv.used, kv.tokens_held) == (used[s - 1], held[s - 1])


def test_a_transfer_landing_during_a_chunk_run_sees_the_runs_blocks() -> None:
    """A chunked prefill pool whose prompts take many chunks, and a slow link: transfers land on the
    prefill replica during its chunk runs and free the finished prompts' blocks. The run's steps hold
    their blocks first (``Replica.release_transferred`` brings the replica up to the instant), so the
    cache's peak is the step-by-step loop's (without that the fast path's came out 592 blocks against 829)."""
    d = {
        "name": "landing",
        "engine": "ideal",
        "seed": 5,
        "model": "llama-3.1-8b",
        "hardware": "A100-SXM-80GB",
        "cluster": {
            "prefill_pool": {"replicas": 1},
            "decode_pool": {"replicas": 1},
            "kv_link": {"kind": "custom", "bandwidth_gbps": 2.0},
        },
        "policy": {"kind": "disaggregated", "chunk_tokens": 256, "max_num_seqs": 64, "prefill_pool_policy": "chunked"},
        "kv_cache": {"memory_fraction": 0.35},
        "workload": {
            "kind": "poisson",
            "rate_rps": 0.8,
            "num_requests": 25,
            "prompt_tokens": {"dist": "uniform", "min": 6000, "max": 12000},
            "output_tokens": {"dist": "fixed", "value": 2},
        },
    }
    sc = scenario_from_dict(d, "test", Path("."))
    exact, fast = llmsim.run(sc, exact_steps=True), llmsim.run(sc)
    _compare(exact.requests, fast.requests)
    # (829 while the decode pool refused the prompts past its 8,192-token step budget, a third of them)
    assert exact.summary["memory"]["kv_peak_blocks"] == fast.summary["memory"]["kv_peak_blocks"] == 1153
