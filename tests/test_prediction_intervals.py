"""Prediction intervals (llmsim/accuracy.py): a run is told the errors of the validation runs like it,
on its hardware families and of a model with or without experts (docs/validation.md, "Prediction
intervals")."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

import llmsim
from llmsim.accuracy import RECORD, error_spread, interval_line, record, runs_like, validated

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"workload.num_requests": 40, "output.steps": "none"}
GPU_DENSE = {"devices": ["gpu"], "moe": False}


def _score(run: str, device: str, moe: bool, ttft: float, e2e: float) -> dict:
    return {"run": run, "devices": [device], "moe": moe, "err_mean_ttft_ms": ttft, "err_mean_e2el_ms": e2e}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "accuracy.json"
    scores = [
        _score("dense-a", "gpu", False, 0.02, -0.01),
        _score("dense-b", "gpu", False, -0.04, 0.03),
        _score("moe-a", "gpu", True, 0.30, 0.50),
        _score("cpu-a", "cpu", False, 0.10, math.nan),  # a figure the run lacks: left out, not counted
    ]
    record("set", scores, "test", path)
    return path


def test_the_spread_is_recomputed_over_the_runs_like_this_one(store: Path) -> None:
    every = validated("vllm-v1", path=store)["set"]
    assert every["runs"] == ["dense-a", "dense-b", "moe-a", "cpu-a"] and "per_run" not in every
    assert every["errors"]["mean_e2el_ms"]["runs"] == 3  # (cpu-a's NaN)
    dense = validated("vllm-v1", ["gpu"], False, path=store)["set"]
    assert dense["runs"] == ["dense-a", "dense-b"] and dense["devices"] == ["gpu"]
    assert dense["errors"]["mean_ttft_ms"] == {"median_abs_err": pytest.approx(0.03), "max_abs_err": 0.04, "runs": 2}
    assert "per_run" not in dense
    moe = validated("vllm-v1", ["gpu"], True, path=store)["set"]
    assert moe["runs"] == ["moe-a"] and moe["errors"]["mean_e2el_ms"]["max_abs_err"] == 0.5
    cpu = validated("vllm-v1", ["cpu"], None, path=store)["set"]
    assert cpu["runs"] == ["cpu-a"] and "mean_e2el_ms" not in cpu["errors"]
    # the engine is validated, but on no run like a TPU's: {} (not None, "not validated for this engine")
    assert validated("vllm-v1", ["tpu"], False, path=store) == {}
    assert validated("ideal", ["gpu"], False, path=store) is None


def test_a_run_on_several_families_is_told_each_familys_runs_and_which_have_none(store: Path) -> None:
    both = validated("vllm-v1", ["cpu", "gpu"], False, path=store)["set"]
    assert both["runs"] == ["dense-a", "dense-b", "cpu-a"]
    like = {"devices": ["gpu", "tpu"], "moe": False}
    line = interval_line(validated("vllm-v1", like["devices"], False, path=store), like)
    assert "on GPU and TPU runs of dense models" in line
    assert "no run on TPU hardware was replayed" in line
    assert "no run on" not in interval_line(validated("vllm-v1", ["gpu"], False, path=store), GPU_DENSE)


def test_untagged_runs_are_refused_when_recorded_and_match_nothing_when_read(tmp_path: Path) -> None:
    path = tmp_path / "accuracy.json"
    with pytest.raises(ValueError, match="carry no devices / moe tags"):
        record("set", [{"run": "r", "err_mean_ttft_ms": 0.1}], "test", path)
    assert not path.exists()
    old = {
        "source": "x",
        "runs": ["r"],
        "errors": {"mean_ttft_ms": {"median_abs_err": 0.1, "max_abs_err": 0.1, "runs": 1}},
    }
    path.write_text(json.dumps({"old": old}))
    assert validated("vllm-v1", path=path) == {"old": old}
    assert validated("vllm-v1", ["gpu"], False, path=path) == {}


def test_the_lines_name_the_kind_of_run() -> None:
    like = {"devices": ["tpu"], "moe": False}
    assert interval_line({}, like).startswith("not validated on TPU runs of dense models")
    assert "not validated for this engine" in interval_line(None, like)
    moe = {"devices": ["gpu"], "moe": True}
    line = interval_line(validated("vllm-v1", ["gpu"], True), moe)
    assert line.startswith("validated against real vLLM on GPU runs of mixture-of-experts models:")
    assert interval_line(validated("vllm-v1")).startswith("validated against real vLLM: median")
    assert runs_like({"gpu", "cpu"}, False) == {"devices": ["cpu", "gpu"], "moe": False}


def test_every_stored_run_carries_its_kind_and_the_spread_is_its_runs() -> None:
    """accuracy.json as the scripts' --record wrote it: each run tagged as its simulation was, and
    each record's spread the one its runs' errors give (a hand edit of either shows)."""
    data = json.loads(RECORD.read_text())
    for kind, rec in data.items():
        tags = {r["run"]: (tuple(r["devices"]), r["moe"]) for r in rec["per_run"]}
        assert list(tags) == rec["runs"], kind
        assert set(tags.values()) <= {(("gpu",), False), (("gpu",), True), (("cpu",), False)}, kind
        runs = [{f"err_{k}": v for k, v in r["errors"].items()} for r in rec["per_run"]]
        assert error_spread(runs) == rec["errors"], kind
    bench = {r["run"]: r["moe"] for r in data["vllm-gpu-bench"]["per_run"]}
    runs = yaml.safe_load((ROOT / "data/validation/vllm-gpu-bench/runs.yaml").read_text())["runs"]
    assert bench == {r["id"]: r["model"].endswith("-A3B") for r in runs}  # Qwen3-30B-A3B and -16B-A3B: 10
    assert {d for k in ("vllm-cpu", "vllm-cpu-xeon") for r in data[k]["per_run"] for d in r["devices"]} == {"cpu"}


def test_a_run_is_told_the_errors_of_its_kind() -> None:
    dense = llmsim.run(ROOT / "scenarios/quickstart.yaml", SMALL).summary
    assert dense["accuracy_like"] == GPU_DENSE
    assert set(dense["accuracy"]) == {"vllm-gpu", "vllm-gpu-bench"}  # not the CPU campaigns
    over = SMALL | {"model": "qwen3-30b-a3b-instruct-2507", "cluster.replicas": 1}
    moe = llmsim.run(ROOT / "scenarios/quickstart.yaml", over).summary
    assert moe["accuracy_like"] == {"devices": ["gpu"], "moe": True}
    rec = json.loads(RECORD.read_text())["vllm-gpu-bench"]
    assert moe["accuracy"]["vllm-gpu-bench"]["runs"] == [r["run"] for r in rec["per_run"] if r["moe"]]


def test_a_plan_is_told_the_errors_of_its_candidates_kind() -> None:
    from llmsim.commands.plan import plan_like
    from llmsim.planning.base import Base

    base = Base.from_path(str(ROOT / "scenarios/plan_azure_conv.yaml"), {})
    assert plan_like(base, base.scenario(), ["H100-SXM", "A100-40GB"]) == GPU_DENSE
    # (an AMD GPU is its own kind: every replayed GPU run is NVIDIA's, tests/test_hostile_round8.py)
    assert plan_like(base, base.scenario(), ["H100-SXM", "MI300X"]) == {"devices": ["amd-gpu", "gpu"], "moe": False}
    assert plan_like(base, base.scenario(), ["H100-SXM", "Xeon-8480+"]) == {"devices": ["cpu", "gpu"], "moe": False}
