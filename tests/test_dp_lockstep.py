"""The data-parallel ranks of an expert-parallel pool step in lock-step (``dpgroup.py``), their
MoE layers gather the group's real token counts (``BatchShape.group_tokens``), and vLLM's DP load
balancer spreads arrivals (router ``vllm_dp``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import llmsim
from llmsim.build import build_model, build_pools
from llmsim.costmodel.ops import batch_shape
from llmsim.errors import UserError
from llmsim.request import Request
from llmsim.router import StaleRouter, route, view_s
from llmsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]


def _data(**cluster: object) -> dict:
    # round robin: rank 0 gets the first request of the trace, rank 1 the second
    return {
        "name": "lockstep",
        "model": "qwen3-30b-a3b-instruct-2507",
        "hardware": "RTX-PRO-6000",
        "cluster": {"replicas": 2, "expert_parallel": True, "router": "round_robin", **cluster},
        "workload": {"kind": "trace", "trace": ""},  # (the ``trace`` fixture's file)
        "output": {"steps": "all"},
    }


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rank 0 prefills 2,000 tokens and answers 4; rank 1 prefills 16 in the same first step, then
    decodes its 40 while rank 0 finishes, then alone beside rank 0's dummy batches."""
    path = tmp_path_factory.mktemp("lockstep") / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,2000,4\n0.0,16,40\n")
    return path


def _run(trace: Path, **cluster: object) -> llmsim.Results:
    data = _data(**cluster)
    data["workload"]["trace"] = {"path": str(trace), "format": "generic"}
    return llmsim.run(scenario_from_dict(data, "test", ROOT))


def test_ranks_step_together_and_the_slow_rank_sets_the_step(trace: Path) -> None:
    res = _run(trace)
    steps = res.steps
    both = steps.pivot_table(index="start_s", columns="replica", values="duration_s", aggfunc="first")
    busy = both.dropna()  # group steps where both ranks had work
    assert len(busy) > 0
    assert (busy[0] == busy[1]).all()  # one duration for both ranks of a step
    # the step where rank 0 prefills its 2,000 tokens: rank 1's 16-token prefill lasts as long
    first = steps[(steps.replica == 0) & (steps.prefill_tokens > 0)].iloc[0]
    peer = steps[(steps.replica == 1) & (steps.start_s == first.start_s)].iloc[0]
    assert peer.prefill_tokens == 16 and peer.duration_s == first.duration_s
    dp = res.summary["data_parallel"]
    assert dp["ranks"] == 2 and dp["lockstep_wait_s"] > 0
    # rank 0 is done after 4 group steps; rank 1 decodes on beside its dummy batches
    assert dp["dummy_steps"] == len(steps[steps.replica == 1]) - len(steps[steps.replica == 0])
    assert res.summary == _run(trace).summary  # deterministic


def test_wait_is_the_gap_to_the_slowest_rank_by_hand(tmp_path: Path) -> None:
    """One shared step: both prompts answer their single token in it. Rank 1's wait is the
    group step (rank 0's own) less its own step, both priced with the group's 2,016 tokens."""
    path = tmp_path / "one_step.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,2000,1\n0.0,16,1\n")
    data = _data()
    data["workload"]["trace"] = {"path": str(path), "format": "generic"}
    sc = scenario_from_dict(data, "test", ROOT)
    cm = build_pools(sc, build_model(sc))[0].cost
    res = llmsim.run(sc)
    assert len(res.steps) == 2  # one step on each rank
    # rank 0 runs eager (2,000 tokens > the largest captured size, 256 at max_num_seqs 128), so
    # the gathered count is the sum
    gathered = cm.group_tokens([2000, 16], False)
    assert gathered == 2016
    big, small = batch_shape([(2000, 0)], []), batch_shape([(16, 0)], [])
    big.group_tokens = small.group_tokens = gathered
    assert res.steps.duration_s.tolist() == pytest.approx([cm.step_time(big)] * 2, rel=1e-12)
    wait = res.summary["data_parallel"]["lockstep_wait_s"]
    assert wait == pytest.approx(cm.step_time(big) - cm.step_time(small), rel=1e-12)
    assert wait > 0


def test_group_tokens_sum_when_eager_and_pad_in_graphs(trace: Path) -> None:
    data = _data()
    data["workload"]["trace"] = {"path": str(trace), "format": "generic"}
    sc = scenario_from_dict(data, "test", ROOT)
    cm = build_pools(sc, build_model(sc))[0].cost
    assert cm.group_tokens([3000, 5], False) == 3005  # past the largest captured size (256): eager
    assert cm.group_tokens([5, 1], True) == 2 * 8  # decode steps padded to the graph size of 5 (8)
    assert cm.group_tokens([100, 30], True) == 2 * 104
    assert cm.group_tokens([100, 1], False) == 2 * 104  # a mixed step under 256 runs piecewise graphs
    data["cluster"]["cuda_graphs"] = False
    eager = build_pools(scenario_from_dict(data, "test", ROOT), build_model(sc))[0].cost
    assert eager.group_tokens([100, 1], False) == 101


def test_group_tokens_price_the_experts_and_default_to_tokens_times_dp(trace: Path) -> None:
    data = _data()
    data["workload"]["trace"] = {"path": str(trace), "format": "generic"}
    sc = scenario_from_dict(data, "test", ROOT)
    cm = build_pools(sc, build_model(sc))[0].cost
    plain = batch_shape([(600, 0)], [])
    told = batch_shape([(600, 0)], [])
    told.group_tokens = 1200  # what the default assumes at dp 2
    assert cm.step_time(told) == cm.step_time(plain)
    # the other rank decodes 10 tokens: each local expert gets 126 rows a step, not 250, 1.4
    # 128-row tiles of the fused kernel on average instead of 2.3 (costmodel/fusedmoe.py)
    plain, fewer = batch_shape([(2000, 0)], []), batch_shape([(2000, 0)], [])
    fewer.group_tokens = 2010
    bd_plain, bd_fewer = cm.breakdown(plain), cm.breakdown(fewer)
    assert bd_fewer["mlp_up_proj"] < bd_plain["mlp_up_proj"]
    assert bd_fewer["moe_dispatch"] < bd_plain["moe_dispatch"]
    assert bd_fewer["attention_prefill"] == bd_plain["attention_prefill"]


def test_independent_replicas_without_expert_parallel(trace: Path) -> None:
    res = _run(trace, expert_parallel=False)
    assert "data_parallel" not in res.summary
    steps = res.steps
    r0 = steps[steps.replica == 0].duration_s.tolist()
    r1 = steps[steps.replica == 1].duration_s.tolist()
    assert r0[0] != r1[0]  # each replica prices its own step
    assert "dp_wait_s" not in res.steps.columns


def test_disaggregated_pools_each_step_in_lockstep(trace: Path) -> None:
    data = _data()
    data["workload"] = {
        "kind": "poisson",
        "rate_rps": 20,
        "num_requests": 60,
        "prompt_tokens": {"dist": "uniform", "min": 16, "max": 1500},
        "output_tokens": {"dist": "uniform", "min": 1, "max": 60},
    }
    data["policy"] = {"kind": "disaggregated"}
    pool = {"replicas": 2, "expert_parallel": True}
    data["cluster"] = {"prefill_pool": pool, "decode_pool": pool, "router": "vllm_dp"}
    res = llmsim.run(scenario_from_dict(data, "test", ROOT))
    assert res.summary["requests"]["finished"] == 60
    assert res.summary["data_parallel"]["ranks"] == 4  # two groups of two
    for pool_name in ("prefill", "decode"):
        steps = res.steps[res.steps["pool"] == pool_name]
        by_start = steps.groupby("start_s")["duration_s"].nunique()
        assert (by_start == 1).all()  # a group's ranks share every step


def test_four_ranks_share_every_step() -> None:
    data = _data(replicas=4)
    data["workload"] = {
        "kind": "poisson",
        "rate_rps": 30,
        "num_requests": 80,
        "prompt_tokens": {"dist": "uniform", "min": 16, "max": 2500},
        "output_tokens": {"dist": "uniform", "min": 1, "max": 40},
    }
    res = llmsim.run(scenario_from_dict(data, "test", ROOT))
    assert res.summary["requests"]["finished"] == 80
    starts = res.steps.groupby("start_s")["duration_s"].nunique()
    assert (starts == 1).all()
    # busy ranks + dummy ranks = 4 in every group step
    per_step = res.steps.groupby("start_s").size()
    assert int((4 - per_step).sum()) == res.summary["data_parallel"]["dummy_steps"]


def test_lockstep_slows_the_light_rank(trace: Path) -> None:
    """Rank 1's 16-token prompt is done in the step where rank 0 prefills 2,000 tokens: its first
    token comes with rank 0's, where an independent replica has it after its own short step."""
    on = _run(trace).requests.set_index("id")
    off = _run(trace, expert_parallel=False).requests.set_index("id")
    assert on.loc[1, "first_token_s"] == on.loc[0, "first_token_s"]
    assert on.loc[1, "ttft_s"] > 2 * off.loc[1, "ttft_s"]  # 77 ms against 31 ms


def test_pipeline_with_dp_ranks_refused() -> None:
    data = _data(pp=2)
    fixed = {"dist": "fixed", "value": 8}
    data["workload"] = {"kind": "all_at_once", "num_requests": 2, "prompt_tokens": fixed, "output_tokens": fixed}
    with pytest.raises(UserError, match="replicas 2.*pipeline parallelism"):
        sc = scenario_from_dict(data, "test", ROOT)
        build_pools(sc, build_model(sc))


class _Kv:
    def __init__(self, utilization: float) -> None:
        self.utilization = utilization


class _Rep:
    """What a router reads of a replica (``router.Routable``), set by hand."""

    def __init__(self, index: int, waiting: int = 0, running: int = 0, outstanding: int = 0, kv: float = 0.0) -> None:
        self.index, self.outstanding_tokens, self.kv = index, outstanding, _Kv(kv)
        self.waiting, self.running, self.synced = waiting, running, 0

    @property
    def num_waiting(self) -> int:
        return self.waiting

    @property
    def num_running(self) -> int:
        return self.running

    def sync(self) -> None:
        self.synced += 1


def _req(prompt: int = 100, output: int = 10) -> Request:
    return Request(0, 0.0, prompt, output)


def test_vllm_dp_scores_waiting_four_times_running() -> None:
    a, b = _Rep(0, waiting=1, running=0), _Rep(1, waiting=0, running=3)
    lb = StaleRouter([a, b], "vllm_dp", view_s("vllm_dp", None))
    assert lb.pick(_req()) is b  # 4 x 1 + 0 = 4 against 0 + 3 = 3
    # b's own count went up by one waiting (7): a is next, although the replicas did not change
    assert lb.pick(_req()) is a
    assert lb.pick(_req()) is b  # a's count is 8 now, b's 7
    assert a.synced == b.synced == 1  # one view (when built) until the simulation refreshes it


def test_vllm_dp_breaks_ties_by_index_and_a_refresh_resets_its_own_counts() -> None:
    a, b = _Rep(0), _Rep(1)
    lb = StaleRouter([a, b], "vllm_dp", view_s("vllm_dp", None))
    assert view_s("vllm_dp", None) == 0.1 and view_s("kv_aware", None) == 0.0
    assert lb.pick(_req()) is a  # a tie: the first in scan order
    assert lb.pick(_req()) is b  # a counts the one it sent
    lb.look()  # the next 100 ms: both replicas still report 0
    assert lb.pick(_req()) is a
    assert a.synced == 2


def test_stale_kv_aware_herds_an_interval_onto_one_replica() -> None:
    """A stale kv_aware router sends every arrival of an interval to the replica that looked
    emptiest when it last looked (its own sends move only the tie-breaking queue term)."""
    a, b = _Rep(0, kv=0.5), _Rep(1, kv=0.2)
    live = StaleRouter([a, b], "kv_aware", 0.0)
    stale = StaleRouter([a, b], "kv_aware", 1.0)
    assert [stale.pick(_req()).index for _ in range(3)] == [1, 1, 1]
    b.kv.utilization = 0.9  # b fills up; the stale router does not see it until it looks again
    assert stale.pick(_req()) is b
    assert live.pick(_req()) is a  # a live one sees it at once
    stale.look()
    assert stale.pick(_req()) is a


def test_stale_least_outstanding_counts_its_own_sends() -> None:
    a, b = _Rep(0, outstanding=150), _Rep(1, outstanding=0)
    stale = StaleRouter([a, b], "least_outstanding", 5.0)
    picks = [stale.pick(_req(100, 10)).index for _ in range(3)]
    assert picks == [1, 1, 0]  # b 0 -> 110 -> 220, then a's 150 is the least


def test_a_live_view_routes_as_route_does() -> None:
    rng = random.Random(7)
    for policy in ("least_outstanding", "kv_aware"):
        reps = [_Rep(i) for i in range(4)]
        live = StaleRouter(reps, policy, 0.0)
        for k in range(200):
            for r in reps:  # the replicas move between arrivals
                r.outstanding_tokens, r.waiting, r.kv.utilization = rng.randrange(5), rng.randrange(3), rng.random()
            assert live.pick(_req()) is route(reps, policy, k), (policy, k)


def test_router_view_changes_a_run_and_is_refused_for_prefix_affinity() -> None:
    over = {
        "cluster.replicas": 4,
        "cluster.router": "kv_aware",
        "workload.rate_rps": 24,
        "workload.num_requests": 400,
        "output.steps": "none",
    }
    live = llmsim.run(ROOT / "scenarios/quickstart.yaml", over).summary
    stale = llmsim.run(ROOT / "scenarios/quickstart.yaml", {**over, "cluster.router_view_s": 3.0}).summary
    assert stale["mean_ttft_ms"] > 2 * live["mean_ttft_ms"]  # herding onto one replica per 3 s queues (305 vs 75 ms)
    with pytest.raises(UserError, match="router_view_s.*prefix_affinity"):
        scenario_from_dict(
            {**_data(router="prefix_affinity", router_view_s=0.5), "workload": {"kind": "all_at_once"}}, "t", ROOT
        )


def test_a_quiet_gap_skips_the_views_no_arrival_reads(tmp_path: Path) -> None:
    """vLLM's DP balancer reads a view refreshed every 100 ms; while nothing is in the system the
    views between two arrivals read the same idle replicas, so the simulation goes straight to the
    last one before the next arrival (a quiet gap cost one event every 100 ms: 100 requests at
    1e-5 req/s took 111 s). Each request after a gap sees the replicas idle, so rank 0 takes it
    (ties go to the lowest index), where the busy burst's view would send it to rank 1 (rank 0
    held two of its three): also an arrival on a whole number of views, where a view at the
    arrival's instant comes after it (a skip that landed there sent 10 s and 30 s to rank 1)."""
    path = tmp_path / "gap.csv"
    rows = ["0.0,512,64"] * 3 + ["10.0,512,64", "20.0,512,64", "30.0,512,64", "100000.05,512,64"]
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    data = _data(router="vllm_dp")
    data["workload"]["trace"] = {"path": str(path), "format": "generic"}
    data["output"] = {"steps": "none"}
    req = llmsim.run(scenario_from_dict(data, "test", ROOT)).requests.sort_values("id")
    assert req["replica"].tolist() == [0, 1, 0, 0, 0, 0, 0]
    assert (req["status"] == "finished").all()


def test_the_last_view_before_an_arrival_is_where_timeouts_reach() -> None:
    """The skip lands where successive timeouts of the view interval would (their float sums), and
    strictly before the arrival, so the runs after it are cut at the same instants as before."""
    from llmsim.sim import delay_to, last_look_before

    t = 0.1
    ticks = [t]
    while ticks[-1] + 0.1 < 30.0:
        ticks.append(ticks[-1] + 0.1)
    assert last_look_before(0.1, 30.0, 0.1) == ticks[-1] < 30.0
    assert last_look_before(5.0, 5.05, 0.1) == 5.0  # (nothing to skip)
    for now, at in ((0.1, 29.900000000000134), (3.0, 1e5 + 0.3), (1e-9, 7.7)):
        assert now + delay_to(now, at) == at
