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
    "kv_cache": {"reserve_gb": 59.8},  # leaves about 8,000 tokens of KV (weights 16.1 GB of 77 GB usable)
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
