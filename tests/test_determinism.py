"""Same scenario + seed -> byte-identical requests.parquet, steps.parquet and summary.json; another seed differs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmsim.cli import main

SCENARIO = {
    "name": "determinism",
    "seed": 11,
    "model": "llama-3.1-8b",
    "hardware": "H100-SXM",
    "cluster": {"replicas": 2, "router": "least_outstanding"},
    "policy": {"kind": "chunked", "chunk_tokens": 256, "max_num_seqs": 16},
    # a small KV pool (most of the memory reserved) forces preemptions, the subtlest code path
    "kv_cache": {
        "reserve_gb": 58.732
    },  # leaves 320 blocks, 5,120 tokens of KV (weights 16.1 GB of 76.5 GB usable, vLLM 1.0 GB)
    "workload": {
        "kind": "gamma",
        "rate_rps": 30.0,
        "cv": 3.0,  # bursty
        "num_requests": 60,
        "prompt_tokens": {"dist": "lognormal", "median": 600, "sigma": 0.8, "min": 1, "max": 4000},
        "output_tokens": {"dist": "uniform", "min": 0, "max": 200},
    },
}


def run_to(tmp_path: Path, tag: str, seed: int) -> Path:
    sc = tmp_path / f"{tag}.yaml"
    sc.write_text(yaml.safe_dump({**SCENARIO, "seed": seed}))
    out = tmp_path / tag
    assert main(["run", str(sc), "--out", str(out), "--quiet", "--no-report"]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("det")
    return {"a": run_to(tmp, "a", 11), "b": run_to(tmp, "b", 11), "c": run_to(tmp, "c", 12)}


@pytest.mark.parametrize("name", ["requests.parquet", "summary.json", "steps.parquet"])
def test_same_seed_gives_identical_bytes(runs, name):
    assert (runs["a"] / name).read_bytes() == (runs["b"] / name).read_bytes()


def test_the_run_exercises_preemption(runs):
    import json

    summary = json.loads((runs["a"] / "summary.json").read_text())
    assert summary["requests"]["preemptions"] > 0
    assert summary["requests"]["finished"] == 60


@pytest.mark.parametrize("name", ["requests.parquet", "summary.json"])
def test_different_seed_differs(runs, name):
    assert (runs["a"] / name).read_bytes() != (runs["c"] / name).read_bytes()


def test_no_temporary_files_left_behind(runs):
    for out in runs.values():
        assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_a_runs_scenario_json_runs_it_again_byte_for_byte(tmp_path: Path) -> None:
    """scenario.json is the run as it ran (the engine's choices written in, CUDA graphs too), so
    `llmsim run OUT/scenario.json` repeats it exactly (its run id too)."""
    first = run_to(tmp_path, "first", 11)
    again = tmp_path / "again"
    assert main(["run", str(first / "scenario.json"), "--out", str(again), "--quiet", "--no-report"]) == 0
    for name in ("requests.parquet", "steps.parquet", "summary.json"):
        assert (first / name).read_bytes() == (again / name).read_bytes(), name


def test_a_plan_copy_lets_each_hardware_choose_its_cuda_graphs() -> None:
    """A copy of the scenario for other hardware (planning) re-resolves what the engine chose:
    vLLM captures CUDA graphs on a GPU, and has none on a CPU."""
    from llmsim.planning.base import Base
    from llmsim.scenario import scenario_from_dict

    sc = scenario_from_dict({**SCENARIO, "engine": "vllm-v1"}, "t", Path("."))
    assert sc.cluster.cuda_graphs is True and sc._engine_filled["cluster"] == ["cuda_graphs"]
    cpu = Base.from_scenario(sc).scenario({"hardware": "Xeon-8480+"})
    assert cpu.cluster.cuda_graphs is False
    forced = scenario_from_dict({**SCENARIO, "engine": "vllm-v1", "cluster": {"cuda_graphs": False}}, "t", Path("."))
    assert forced.cluster.cuda_graphs is False and "cluster" not in forced._engine_filled


def test_the_collector_neither_changes_a_run_nor_stays_changed() -> None:
    """``llmsim.run`` freezes the objects before it and collects less often while it runs
    (llmsim/api.py ``_run_gc``): a run with the collector at any setting, off included, gives the
    same requests and steps, and the caller's thresholds and frozen set are as they were after it,
    also when the run fails."""
    import contextlib
    import gc

    import llmsim
    import llmsim.api
    from llmsim.errors import UserError

    sc = {**SCENARIO, "kv_cache": {}, "workload": {**SCENARIO["workload"], "num_requests": 30}}
    before = gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()
    shipped = llmsim.run(sc)
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before
    original = llmsim.api._run_gc
    try:
        llmsim.api._run_gc = contextlib.nullcontext
        gc.disable()
        off = llmsim.run(sc)
        gc.enable()
        gc.set_threshold(1, 1, 1)
        eager = llmsim.run(sc)
    finally:
        llmsim.api._run_gc = original
        gc.enable()
        gc.set_threshold(*before[0])
    for other in (off, eager):
        assert shipped.requests.equals(other.requests)
        assert shipped.steps.equals(other.steps)

    def fails(*args: object) -> None:
        assert gc.get_threshold() == llmsim.api._RUN_GC_THRESHOLDS  # inside the run's collector settings
        raise UserError("building failed")

    original_build = llmsim.api.build_workload
    llmsim.api.build_workload = fails
    try:
        with pytest.raises(UserError, match="building failed"):
            llmsim.run(sc)
    finally:
        llmsim.api.build_workload = original_build
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before


def test_a_loop_of_small_runs_leaves_nothing_behind() -> None:
    """A run's state is held by reference cycles, and each run freezes what exists before it: the
    outermost run collects as it returns (llmsim/api.py ``_run_gc``), so a loop of runs (a sweep's
    points with --workers 1, a notebook) keeps no earlier run's objects. Before, every 5-request
    run left ~4,800 objects for good (a sweep of 400 points grew by ~110 MB)."""
    import gc

    import llmsim

    sc = {**SCENARIO, "kv_cache": {}, "workload": {**SCENARIO["workload"], "num_requests": 5}}
    llmsim.run(sc)  # (the caches a first run fills)
    gc.collect()
    tracked = len(gc.get_objects())
    for _ in range(10):
        llmsim.run(sc)
    assert len(gc.get_objects()) - tracked < 1_000
