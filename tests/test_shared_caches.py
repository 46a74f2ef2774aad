"""What a process keeps between runs (a sweep's or plan's points): cost models with their price
caches, hardware profiles, the last trace read. Sharing changes no result, and a file changed
since it was read is read again."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd

import llmsim
from llmsim import build
from llmsim.build import build_model, build_pools, build_workload
from llmsim.hardware import available_profiles, load_profile
from llmsim.scenario import scenario_from_dict

DATA = Path(__file__).parent / "data"


def _scenario(policy: dict, replicas: int, rate: float, seed: int = 3) -> dict:
    return {
        "name": "shared",
        "seed": seed,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "cluster": {"replicas": replicas, "router": "least_outstanding"},
        "policy": policy,
        "workload": {
            "kind": "poisson",
            "rate_rps": rate,
            "num_requests": 300,
            "prompt_tokens": {"dist": "lognormal", "median": 700, "sigma": 0.9, "min": 4, "max": 6000},
            "output_tokens": {"dist": "lognormal", "median": 120, "sigma": 0.8, "min": 1, "max": 800},
        },
        "output": {"steps": "all"},
    }


def _run(data: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    res = llmsim.run(scenario_from_dict(data, "shared.yaml", Path(".")))
    return res.requests, res.steps


def test_a_warmed_shared_cost_model_prices_as_a_fresh_one() -> None:
    # a sweep's points: other replica counts, rates and seeds on the same model, hardware and engine
    policy = {"kind": "chunked", "chunk_tokens": 512, "max_num_seqs": 64}
    warm = _scenario(policy, replicas=2, rate=20.0)
    point = _scenario(policy, replicas=1, rate=6.0, seed=4)
    build._cost_models.clear()
    fresh = _run(point)
    build._cost_models.clear()
    _run(warm)  # fills the shared model's caches with other shapes first
    a = scenario_from_dict(warm, "a.yaml", Path("."))
    b = scenario_from_dict(point, "b.yaml", Path("."))
    assert build_pools(a, build_model(a))[0].cost is build_pools(b, build_model(b))[0].cost
    shared = _run(point)
    pd.testing.assert_frame_equal(fresh[0], shared[0])
    pd.testing.assert_frame_equal(fresh[1], shared[1])


def test_the_shared_cost_models_are_bounded() -> None:
    sc = scenario_from_dict(_scenario({"kind": "chunked"}, replicas=1, rate=1.0), "s.yaml", Path("."))
    cost = build_pools(sc, build_model(sc))[0].cost
    build._cost_models.clear()
    made = [
        build.shared_cost_model(cost.model, cost.hw, replace(cost.cfg, moe_imbalance=1.0 + i / 8), cost.engine)
        for i in range(build.SHARED_COST_MODELS + 3)
    ]
    assert len(build._cost_models) == build.SHARED_COST_MODELS
    newest = made[-1]
    assert build.shared_cost_model(newest.model, newest.hw, newest.cfg, newest.engine) is newest
    oldest = made[0]
    assert build.shared_cost_model(oldest.model, oldest.hw, oldest.cfg, oldest.engine) is not oldest  # (dropped)


def test_a_changed_profile_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    shutil.copy(available_profiles()["H100-SXM"], path)
    first = load_profile(str(path))
    assert load_profile(str(path)) is first  # (read once)
    text = path.read_text()
    assert "price_per_hour_usd: {value: 3.00," in text
    path.write_text(text.replace("price_per_hour_usd: {value: 3.00,", "price_per_hour_usd: {value: 3.5,", 1))
    os.utime(path, ns=(1, 1))  # (a different modification time, however fast the rewrite)
    assert load_profile(str(path)).price_per_hour_usd.value == 3.5


def test_a_changed_trace_file_is_read_again(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    shutil.copy(DATA / "azure_sample.csv", trace)
    data = _scenario({"kind": "chunked"}, replicas=1, rate=1.0)
    data["workload"] = {"kind": "trace", "trace": {"path": str(trace), "format": "azure"}}
    sc = scenario_from_dict(data, "t.yaml", tmp_path)
    first = build_workload(sc)
    assert build._trace(trace, "azure", 16) is build._trace(trace, "azure", 16)  # (kept)
    lines = trace.read_text().splitlines()
    trace.write_text("\n".join(lines[:-1]) + "\n")  # one request fewer
    assert len(build_workload(sc)) == len(first) - 1


def test_the_same_relative_profile_name_in_another_folder_is_another_file(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    text = available_profiles()["H100-SXM"].read_text()
    prices = {"a": "3.5", "b": "4.5"}
    for folder, price in prices.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "mine.yaml").write_text(
            text.replace("price_per_hour_usd: {value: 3.00,", f"price_per_hour_usd: {{value: {price},", 1)
        )
        os.utime(tmp_path / folder / "mine.yaml", ns=(1, 1))  # (the same size and time in both folders)
    for folder, price in prices.items():
        monkeypatch.chdir(tmp_path / folder)
        assert load_profile("mine.yaml").price_per_hour_usd.value == float(price)


def test_an_edit_that_keeps_size_and_modification_time_is_read_again(tmp_path: Path) -> None:
    # cp -p, rsync -t, tar x: the same size and mtime, but the change time moves
    path = tmp_path / "mine.yaml"
    shutil.copy(available_profiles()["H100-SXM"], path)
    before = path.stat()
    assert load_profile(str(path)).price_per_hour_usd.value == 3.0
    path.write_text(
        path.read_text().replace("price_per_hour_usd: {value: 3.00,", "price_per_hour_usd: {value: 7.00,", 1)
    )
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    assert load_profile(str(path)).price_per_hour_usd.value == 7.0


def test_a_trace_read_under_another_name_keeps_its_own_name(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    shutil.copy(DATA / "azure_sample.csv", trace)
    (tmp_path / "alias.csv").symlink_to(trace)
    assert build._trace(trace, "azure", 16).source == str(trace)
    assert build._trace(tmp_path / "alias.csv", "azure", 16).source == str(tmp_path / "alias.csv")
