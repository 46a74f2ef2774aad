"""Autoscaling (``autoscaler.py``, ``cluster.autoscaling``) and rate profiles (``workload.rate_profile``).

The decision logic is checked against the HPA's documented algorithm by hand; a run against a
hand computation of when replicas are asked for, when they serve and what they are billed."""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmsim
from llmsim.autoscaler import ScalingSpec, recommend, stabilize
from llmsim.build import build_workload
from llmsim.errors import UserError
from llmsim.models import get_model
from llmsim.scenario import scenario_from_dict
from llmsim.workload import generators as gen

ROOT = Path(__file__).resolve().parents[1]


def _spec(metric: str = "waiting", target: float = 10.0, **kw: object) -> ScalingSpec:
    base: dict = {"initial": 1, "min_replicas": 1, "max_replicas": 100, "start_s": 60.0}
    return ScalingSpec(metric=metric, target=target, **(base | kw))  # type: ignore[arg-type]


# ---------------------------------------------------------------- the HPA's formula, by hand


def test_recommend_scales_by_the_ratio_to_target() -> None:
    # kubernetes.io HPA "Algorithm details": 200m used against a 100m target doubles the replicas
    assert recommend(_spec(target=100), [200.0, 200.0], 2, 0) == 4
    assert recommend(_spec(target=100), [50.0, 50.0, 50.0, 50.0], 4, 0) == 2
    assert recommend(_spec(target=10), [14.0, 15.0, 16.0], 3, 0) == math.ceil(3 * 1.5)


def test_recommend_holds_within_the_tolerance() -> None:
    assert recommend(_spec(target=100), [109.0, 109.0], 2, 0) == 2  # ratio 1.09: within 10 %
    assert recommend(_spec(target=100), [111.0, 111.0], 2, 0) == 3  # ratio 1.11: ceil(2.22)
    assert recommend(_spec(target=100, tolerance=0.0), [101.0], 1, 0) == 2


def test_replicas_still_starting_count_as_idle_up_and_at_target_down() -> None:
    # up: 2 serving at 30 (target 10), 2 starting at 0 -> (60 + 0) / (10 x 4) = 1.5 -> ceil(6)
    assert recommend(_spec(), [30.0, 30.0], 2, 2) == 6
    # down: 2 serving at 2, 2 starting at target -> (4 + 20) / 40 = 0.6 -> ceil(2.4)
    assert recommend(_spec(), [2.0, 2.0], 2, 2) == 3
    # up by the serving ones (1.2) but down once the starting ones count as idle (0.6): hold
    assert recommend(_spec(), [12.0, 12.0], 2, 2) == 4


def test_a_deployment_metric_scales_the_whole_count() -> None:
    # p90 TTFT 900 ms against 300 ms with 2 serving and 1 starting: ceil(3 x 2), the serving
    # (ready) ones only, as GetObjectMetricReplicas counts them
    assert recommend(_spec("ttft_p90_ms", 300.0), [900.0], 2, 1) == 6
    assert recommend(_spec("ttft_p90_ms", 300.0), [310.0], 2, 1) == 3  # within the tolerance: as it is
    assert recommend(_spec("ttft_p90_ms", 300.0), [0.0], 3, 0) == 0  # no traffic: as few as allowed


def test_stabilize_holds_the_highest_recent_recommendation_before_scaling_down() -> None:
    spec = _spec(down_window_s=300.0)
    hist: deque = deque()
    assert stabilize(spec, hist, 0.0, 5, 5) == 5
    assert stabilize(spec, hist, 15.0, 5, 2) == 5  # 5 was recommended within 300 s
    assert stabilize(spec, hist, 299.0, 5, 2) == 5
    assert stabilize(spec, hist, 301.0, 5, 2) == 2  # the 5 of t = 0 left the window
    # the window's start does not count (the HPA keeps those After(now - window))
    edge: deque = deque()
    assert stabilize(spec, edge, 0.0, 5, 5) == 5
    assert stabilize(spec, edge, 300.0, 5, 2) == 2


def test_a_huge_ratio_is_capped_not_an_overflow() -> None:
    assert recommend(_spec(target=1e-300), [5.0], 1, 0) == 10**9
    assert stabilize(_spec(max_replicas=8), deque(), 0.0, 1, 10**9) == 5


def test_stabilize_limits_a_scale_up_to_double_or_four_more() -> None:
    spec = _spec()
    assert stabilize(spec, deque(), 0.0, 1, 50) == 5  # max(2 x 1, 1 + 4)
    assert stabilize(spec, deque(), 0.0, 10, 50) == 20  # max(2 x 10, 10 + 4)
    assert stabilize(spec, deque(), 0.0, 3, 0) == 1  # down to min_replicas at once (no window)
    assert stabilize(_spec(max_replicas=6), deque(), 0.0, 5, 50) == 6


def test_the_scale_up_limit_holds_over_15_seconds_whatever_the_interval() -> None:
    spec = _spec(interval_s=1.0)
    hist: deque = deque()
    ups: deque = deque()
    assert stabilize(spec, hist, 300.0, 8, 100, ups) == 16  # 8 -> max(16, 12)
    assert stabilize(spec, hist, 301.0, 16, 100, ups) == 16  # still 8 at the period's start
    assert stabilize(spec, hist, 314.0, 16, 100, ups) == 16
    assert stabilize(spec, hist, 315.0, 16, 100, ups) == 32  # the 15 s since 300 s are over


# ---------------------------------------------------------------- a run, by hand


def _data(autoscaling: dict | None, replicas: int = 1, **workload: object) -> dict:
    cluster: dict = {"replicas": replicas, "router": "least_outstanding"}
    if autoscaling is not None:
        cluster["autoscaling"] = autoscaling
    load = {"num_requests": 400} if "duration_s" not in workload else {}
    return {
        "name": "autoscaling",
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "cluster": cluster,
        "policy": {"kind": "vllm", "max_num_seqs": 8},
        "workload": {
            "kind": "all_at_once",
            **load,
            "prompt_tokens": {"dist": "fixed", "value": 512},
            "output_tokens": {"dist": "fixed", "value": 256},
            **workload,
        },
        "output": {"steps": "none"},
    }


SCALE = {"metric": "waiting", "target": 10, "max_replicas": 4, "provision_s": 10, "load_gbps": 2, "engine_init_s": 20}


@pytest.fixture(scope="module")
def burst() -> llmsim.Results:
    return llmsim.run(scenario_from_dict(_data(SCALE), "test", ROOT))


def test_a_backlog_asks_for_replicas_that_serve_after_their_start(burst) -> None:
    a, dec, req = burst.summary["autoscaling"], burst.scaling, burst.requests
    # 400 requests at t = 0, 8 running at a time: those not yet scheduled at the first decision
    # (t = 15 s) wait; ceil(waiting / 10) wanted, 4 at most, +4 per decision at most: 3 more at 15 s
    weights_s = get_model("llama-3.1-8b").weight_bytes("bf16") / 2e9  # 16 GB at 2 GB/s
    assert a["start_s"]["weights_load_s"] == pytest.approx(weights_s, rel=1e-9)
    start_s = 10 + weights_s + 20
    assert a["start_s"]["total_s"] == pytest.approx(start_s)
    first = dec.iloc[0]
    # queued_s: the end of a request's first step, so the step running at 15 s (<= 8 new) counts as later
    later = int((req["queued_s"] > 15.0).sum())
    assert first["metric"] in range(later - 8, later + 1)
    assert (first["time_s"], first["recommended"], first["desired"]) == (15.0, math.ceil(first["metric"] / 10), 4)
    assert (first["serving"], first["starting"]) == (1, 3)
    # they serve at 15 s + their start: the first decision after it sees 4 serving
    ready = dec[dec["time_s"] >= 15 + start_s].iloc[0]
    before = dec[dec["time_s"] < 15 + start_s].iloc[-1]
    assert (before["serving"], before["starting"]) == (1, 3) and ready["serving"] == 4
    # requests are routed when they arrive (t = 0): the new replicas take none of the backlog
    assert (req["replica"] == 0).all() and a["scale_ups"] == 3
    # billed: replica 0 over the run's span, each new one from 15 s to its drain (idle: at once)
    end = req["arrival_s"].min() + burst.summary["duration"]
    drains = dec[dec["serving"].diff() < 0]
    gone = [(t, int(n)) for t, n in zip(drains["time_s"], -dec["serving"].diff()[drains.index], strict=True)]
    released = [t for t, n in gone for _ in range(n)] + [end] * (3 - sum(n for _, n in gone))
    hand_s = end + sum(min(t, end) - 15.0 for t in released)
    assert a["replica_hours"] * 3600 == pytest.approx(hand_s, rel=1e-9)
    price = burst.summary["pools"][0]["price_per_hour_usd"]  # one replica's, tp1
    assert a["gpu_hours"] == pytest.approx(a["replica_hours"])
    assert a["usd"] == pytest.approx(a["gpu_hours"] * price)


def test_new_replicas_serve_later_arrivals_and_lower_ttft() -> None:
    # Poisson arrivals at 6 req/s on one replica capped at 8 sequences: the queue grows, the HPA adds replicas
    data = _data(SCALE, kind="poisson", rate_rps=6, num_requests=1200)
    res = llmsim.run(scenario_from_dict(data, "test", ROOT))
    fixed = llmsim.run(scenario_from_dict(_data(None, kind="poisson", rate_rps=6, num_requests=1200), "test", ROOT))
    a, dec, req = res.summary["autoscaling"], res.scaling, res.requests
    first_up = float(dec.loc[dec["starting"] > 0, "time_s"].iloc[0])
    assert a["peak_serving"] == 4
    for rep in range(1, 4):
        mine = req[req["replica"] == rep]
        assert len(mine) > 0
        assert mine["arrival_s"].min() >= first_up + a["start_s"]["total_s"] - 1e-9  # nothing before it serves
    # one replica at 8 sequences serves ~2.5 req/s: alone it falls behind; with 4 it keeps up
    assert fixed.summary["saturation"]["verdict"] != "stable"
    assert res.summary["mean_ttft_ms"] < 0.5 * fixed.summary["mean_ttft_ms"]
    assert res.requests["finish_s"].max() < fixed.requests["finish_s"].max()


def test_scale_down_drains_and_bills_until_the_last_request_finishes() -> None:
    # a burst at 8 req/s for 120 s then a trickle: replicas start, then drain once the 60 s window passes
    autoscaling = SCALE | {"metric": "concurrency", "target": 8, "scale_down_window_s": 60}
    data = _data(autoscaling, kind="poisson", rate_rps=8, rate_profile=[[0, 1], [120, 0.02]], duration_s=400)
    res = llmsim.run(scenario_from_dict(data, "test", ROOT))
    a, req, lives = res.summary["autoscaling"], res.requests, res.extra["lifetimes"]
    assert a["scale_ups"] > 0 and a["drained"] > 0 and a["final_serving"] < a["peak_serving"]
    for life in lives.itertuples():
        mine = req[req["replica"] == life.replica]
        if math.isnan(life.drain_s):  # still serving at the end: billed to it
            assert life.released_s >= mine["finish_s"].max()
            continue
        assert (mine["arrival_s"] <= life.drain_s).all()  # a draining replica takes nothing new
        # billed until its last request finished (at once if it had none left)
        assert life.released_s == pytest.approx(max(life.drain_s, mine["finish_s"].max()))
    assert a["drained"] == int(lives["drain_s"].notna().sum())


def test_fast_paths_equal_exact_steps_with_autoscaling() -> None:
    autoscaling = SCALE | {"metric": "kv_usage", "target": 0.01, "scale_down_window_s": 30}
    data = _data(autoscaling, kind="poisson", rate_rps=8, rate_profile=[[0, 1], [60, 0.1]], duration_s=150)
    data["policy"]["max_num_seqs"] = 64
    sc = scenario_from_dict(data, "test", ROOT)
    fast, exact = llmsim.run(sc), llmsim.run(sc, exact_steps=True)
    assert fast.summary["autoscaling"]["scale_ups"] > 0
    pd.testing.assert_frame_equal(fast.scaling, exact.scaling, rtol=1e-9)
    f, e = (r.requests.sort_values("id").reset_index(drop=True) for r in (fast, exact))
    assert (f["replica"] == e["replica"]).all()
    for col in ("first_token_s", "finish_s"):
        assert f[col].to_numpy() == pytest.approx(e[col].to_numpy(), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(
    "extra",
    [
        {"cluster": {"router": "vllm_dp"}},  # a stale view resized as replicas come and go
        {"cluster": {"router": "kv_aware", "router_view_s": 1.0}},
        {"cluster": {"router": "round_robin"}},
        {"workload": {"conversations": {"turns": 3, "think_s": 1.0, "closed_loop": True, "fanout": 1}}},
        {"autoscaling": {"metric": "ttft_p90_ms", "target": 200}},
    ],
    ids=["vllm_dp", "stale_kv_aware", "round_robin", "closed_loop", "ttft"],
)
def test_every_serving_path_scales(extra: dict) -> None:
    data = _data(SCALE | extra.get("autoscaling", {}), kind="poisson", rate_rps=6, num_requests=300)
    data["cluster"] |= extra.get("cluster", {})
    data["workload"] |= extra.get("workload", {})
    res = llmsim.run(scenario_from_dict(data, "test", ROOT))
    a = res.summary["autoscaling"]
    assert a["scale_ups"] > 0
    assert (res.requests["status"] == "finished").all()
    assert res.requests["replica"].nunique() > 1


def test_a_long_idle_stretch_is_skipped_not_ticked_through() -> None:
    # two batches a million seconds apart: ~66,667 decisions ticked one by one, two handfuls here
    data = _data(SCALE, batch_size=400, batch_interval_s=1e6)
    data["workload"]["num_requests"] = 800
    res = llmsim.run(scenario_from_dict(data, "test", ROOT))
    assert (res.requests["status"] == "finished").all()
    assert len(res.scaling) < 200
    # the second batch scales up just as the first did, at the first 15 s tick after it (the
    # tick it would have had without the skip: 66,667 x 15 s): the skipped decisions changed nothing
    assert res.scaling.loc[res.scaling["time_s"] >= 1e6, "time_s"].iloc[0] == pytest.approx(66_667 * 15.0)
    first = res.scaling[res.scaling["time_s"] < 1e5]
    second = res.scaling[res.scaling["time_s"] >= 1e6]
    assert first["desired"].max() == second["desired"].max() == 4


def test_deterministic_and_written(tmp_path: Path) -> None:
    data = _data(SCALE, kind="poisson", rate_rps=6, num_requests=300)
    sc = scenario_from_dict(data, "test", ROOT)
    one, two = llmsim.run(sc), llmsim.run(sc)
    pd.testing.assert_frame_equal(one.requests, two.requests)
    pd.testing.assert_frame_equal(one.scaling, two.scaling)
    paths = one.write(tmp_path)
    assert tmp_path / "scaling.parquet" in paths
    assert len(pd.read_parquet(tmp_path / "scaling.parquet")) == len(one.scaling)


def test_without_autoscaling_nothing_changes() -> None:
    res = llmsim.run(scenario_from_dict(_data(None, kind="poisson", rate_rps=6, num_requests=50), "test", ROOT))
    assert "autoscaling" not in res.summary and res.scaling.empty


@pytest.mark.parametrize(
    ("autoscaling", "replicas", "message"),
    [
        ({"metric": "waiting", "target": 1, "min_replicas": 3, "max_replicas": 2}, 2, "min_replicas .3. is above"),
        ({"metric": "waiting", "target": 1, "max_replicas": 2}, 3, "must lie within"),
        ({"metric": "kv_usage", "target": 80, "max_replicas": 2}, 1, "fraction"),
        ({"metric": "queue", "target": 1, "max_replicas": 2}, 1, "metric"),
        ({"metric": "waiting", "target": 1}, 1, "max_replicas"),
        ({"metric": "waiting", "target": 1, "max_replicas": 2, "interval_s": 1e-6}, 1, "interval_s"),
        ({"metric": "waiting", "target": 1, "max_replicas": 2, "load_gbps": 1e-300}, 1, "load_gbps"),
        ({"metric": "waiting", "target": 1, "max_replicas": 2, "provision_s": 1e300}, 1, "provision_s"),
    ],
)
def test_bad_autoscaling_refused(autoscaling: dict, replicas: int, message: str) -> None:
    with pytest.raises(UserError, match=message):
        scenario_from_dict(_data(autoscaling, replicas), "test", ROOT)


def test_plan_refuses_an_autoscaler() -> None:
    from llmsim.planning.base import as_base

    with pytest.raises(UserError, match="cluster.autoscaling: llmsim plan searches fixed replica counts"):
        as_base(ROOT / "scenarios/autoscaling.yaml").plan_config()


def test_autoscaling_refused_where_not_modelled() -> None:
    data = _data(SCALE)
    data["cluster"]["expert_parallel"] = True
    with pytest.raises(UserError, match="expert-parallel"):
        scenario_from_dict(data, "test", ROOT)
    data = _data(SCALE)
    data["policy"] = {"kind": "disaggregated"}
    data["cluster"] |= {"prefill_pool": {"replicas": 1}, "decode_pool": {"replicas": 1}}
    with pytest.raises(UserError, match="disaggregated"):
        scenario_from_dict(data, "test", ROOT)


# ---------------------------------------------------------------- rate profiles


def test_warp_inverts_the_profile_integral() -> None:
    profile = [(0.0, 1.0), (100.0, 4.0), (300.0, 0.5)]
    assert gen.profile_integral(profile, 50.0) == pytest.approx(50.0)
    assert gen.profile_integral(profile, 200.0) == pytest.approx(100 + 400)
    assert gen.profile_integral(profile, 400.0) == pytest.approx(100 + 800 + 50)
    u = np.array([0.0, 50.0, 100.0, 500.0, 900.0, 950.0, 2000.0])
    t = gen.warp_arrivals(u, profile)
    assert gen.profile_integral(profile, t) == pytest.approx(u)


def test_rate_profile_shapes_the_arrivals() -> None:
    data = _data(None, kind="poisson", rate_rps=10, rate_profile=[[0, 1], [100, 3], [200, 0.5]], duration_s=400)
    wl = build_workload(scenario_from_dict(data, "test", ROOT))
    assert len(wl) == round(10 * (100 + 300 + 100))  # rate x the profile's integral over the duration
    t = wl.arrival_s
    for lo, hi, rate in ((0, 100, 10), (100, 200, 30), (200, 400, 5)):
        n = ((t >= lo) & (t < hi)).sum()
        expect = rate * (hi - lo)
        assert abs(n - expect) < 5 * math.sqrt(expect)  # Poisson: within 5 sigma


def test_a_profile_over_a_duration_ends_at_the_duration() -> None:
    # a last stretch at 5 % of the rate: ~90 arrivals in 900 s, wherever the random draws fall
    profile = [[0, 1], [300, 12], [900, 0.05]]
    for seed in (1, 2, 3):
        data = _data(None, kind="poisson", rate_rps=2, rate_profile=profile, duration_s=1800)
        data["seed"] = seed
        t = build_workload(scenario_from_dict(data, "test", ROOT)).arrival_s
        late = int((t >= 900).sum())
        assert abs(late - 90) < 5 * math.sqrt(90) and t.max() <= 1800


def test_a_stretch_without_traffic() -> None:
    data = _data(None, kind="poisson", rate_rps=5, rate_profile=[[0, 1], [100, 0], [200, 1]], duration_s=300)
    t = build_workload(scenario_from_dict(data, "test", ROOT)).arrival_s
    assert not ((t >= 100) & (t < 200)).any() and (t >= 200).sum() > 300
    with pytest.raises(UserError, match="last scale"):
        scenario_from_dict(
            _data(None, kind="poisson", rate_rps=5, num_requests=9, rate_profile=[[0, 1], [9, 0]]), "t", ROOT
        )


def test_a_profile_on_a_trace_is_refused() -> None:
    data = _data(None)
    data["workload"] = {
        "kind": "trace",
        "trace": {"path": "data/traces/AzureLLMInferenceTrace_conv.csv", "format": "azure"},
    }
    data["workload"]["rate_profile"] = [[0, 2]]
    with pytest.raises(UserError, match="rate_profile"):
        scenario_from_dict(data, "t", ROOT)


def test_without_a_profile_the_arrivals_are_unchanged() -> None:
    plain = build_workload(scenario_from_dict(_data(None, kind="poisson", rate_rps=5, num_requests=100), "t", ROOT))
    flat = _data(None, kind="poisson", rate_rps=5, num_requests=100, rate_profile=[[0, 1]])
    assert build_workload(scenario_from_dict(flat, "t", ROOT)).arrival_s == pytest.approx(plain.arrival_s)


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ([[5, 1]], "start at 0"),
        ([[0, 1], [10, 2], [10, 3]], r"rate_profile\[2\]"),
        ([[0, 0]], "last scale"),
        ([], "at least 1"),
    ],
)
def test_bad_rate_profile_refused(profile: list, message: str) -> None:
    with pytest.raises(UserError, match=message):
        scenario_from_dict(_data(None, kind="poisson", rate_rps=5, num_requests=10, rate_profile=profile), "t", ROOT)
    with pytest.raises(UserError, match="all_at_once"):
        scenario_from_dict(_data(None, rate_profile=[[0, 1]]), "t", ROOT)
