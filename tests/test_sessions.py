"""Arrivals that wait on answers (``feeder.py``): closed-loop sessions (``workload.conversations``
with ``closed_loop`` and ``fanout``) and a client-side concurrency cap (``workload.max_concurrency``,
``vllm bench serve --max-concurrency``). Each is checked against the request table by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmsim
from llmsim.build import build_workload
from llmsim.errors import UserError
from llmsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]


def _data(**workload: object) -> dict:
    return {
        "name": "sessions",
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "policy": {"kind": "vllm"},
        "workload": {
            "kind": "poisson",
            "rate_rps": 2,
            "num_requests": 20,
            "prompt_tokens": {"dist": "lognormal", "median": 300, "sigma": 0.8, "min": 4, "max": 2000},
            "output_tokens": {"dist": "lognormal", "median": 120, "sigma": 0.8, "min": 1, "max": 600},
            **workload,
        },
        "output": {"steps": "none"},
    }


def _scenario(**workload: object):
    return scenario_from_dict(_data(**workload), "test", ROOT)


def _deps(wl) -> list[list[int]]:
    ptr, idx = wl.after_ptr, wl.after_idx
    return [idx[ptr[i] : ptr[i + 1]].tolist() for i in range(len(wl))]


SESSIONS = {"conversations": {"turns": 4, "think_s": 3.0, "closed_loop": True, "fanout": 2}}


@pytest.fixture(scope="module")
def sessions() -> tuple:
    sc = _scenario(**SESSIONS)
    return build_workload(sc), llmsim.run(sc)


def test_each_call_is_sent_its_delay_after_the_last_answer_it_waits_for(sessions) -> None:
    wl, res = sessions
    req = res.requests.set_index("id").sort_index()
    assert (req["status"] == "finished").all()
    deps = _deps(wl)
    checked = 0
    for i, d in enumerate(deps):
        if not d:
            assert req.loc[i, "arrival_s"] == wl.arrival_s[i]  # a session's first call: its start
            continue
        last = max(req.loc[j, "finish_s"] for j in d)
        assert req.loc[i, "arrival_s"] == pytest.approx(last + wl.delay_s[i], abs=1e-9), i
        checked += 1
    assert checked == len(wl) - 20  # every call but the 20 sessions' first


def test_sessions_shape_turns_subcalls_and_growing_prompts(sessions) -> None:
    wl, _ = sessions
    # 4 turns and 2 sub-calls after each of the first 3: 10 calls per session
    assert len(wl) == 20 * 10
    deps = _deps(wl)
    first = list(range(10))  # session 0: turn, sub, sub, turn, sub, sub, turn, sub, sub, turn
    assert [deps[i] for i in first] == [[], [0], [0], [1, 2], [3], [3], [4, 5], [6], [6], [7, 8]]
    assert wl.delay_s[[1, 2, 4, 5]].tolist() == [0.0] * 4  # sub-calls go out with the answer
    assert (wl.delay_s[[3, 6, 9]] > 0).all()  # turns wait a think time
    # turn 1's prompt holds turn 0's prompt and answer and both sub-calls' outputs (16-token ids)
    p, o = wl.prompt_tokens, wl.output_tokens
    history = -(-p[0] // 16) * 16 + -(-o[0] // 16) * 16 + sum(-(-o[j] // 16) * 16 for j in (1, 2))
    assert p[3] > history and p[3] - history < p.max()  # history + a new message
    assert wl.block_hashes[3][: len(wl.block_hashes[0])] == wl.block_hashes[0]  # a prefix of it
    assert (np.diff(wl.arrival_s) >= 0).all()  # sessions in order of their start


def test_a_session_rides_the_prefix_cache(sessions) -> None:
    _, res = sessions
    assert res.summary["prefix_cache"]["hit_rate"] > 0.5  # each call re-reads the history
    s = res.summary["sessions"]
    assert s["count"] == 20 and s["requests"] == 200
    req = res.requests
    assert s["duration_mean_s"] > req["e2e_s"].mean() * 4  # four turns, back to back, and waits


def test_open_loop_conversations_unchanged() -> None:
    wl = build_workload(_scenario(conversations={"turns": 3, "think_s": 5.0}))
    assert wl.after_ptr is None
    assert len(wl) == 60


def test_max_concurrency_holds_the_rest_first_come_first_served() -> None:
    sc = _scenario(kind="all_at_once", rate_rps=None, max_concurrency=4)
    res = llmsim.run(sc)
    req = res.requests.sort_values("id")
    assert (req["status"] == "finished").all()
    # at any instant at most 4 are in flight (sent and not answered)
    events = sorted([(t, 1) for t in req["arrival_s"]] + [(t, -1) for t in req["finish_s"]], key=lambda e: (e[0], e[1]))
    live = peak = 0
    for _, step in events:
        live += step
        peak = max(peak, live)
    assert peak == 4
    # the 5th request goes out when the first answer comes back, in arrival (id) order
    first_answers = sorted(req["finish_s"])[:4]
    sent_late = req[req["arrival_s"] > 0].sort_values("id")["arrival_s"].tolist()
    assert sent_late[:4] == pytest.approx(first_answers)


def test_concurrency_one_is_strictly_sequential() -> None:
    res = llmsim.run(_scenario(max_concurrency=1, num_requests=8))
    req = res.requests.sort_values("id")
    arrivals = req["arrival_s"].to_numpy()
    finishes = req["finish_s"].to_numpy()
    base = build_workload(_scenario(num_requests=8)).arrival_s
    # each is sent at its own arrival or when the one before is answered, whichever is later
    assert arrivals[1:] == pytest.approx(np.maximum(base[1:], finishes[:-1]))


def test_a_rejected_call_ends_its_session(tmp_path: Path) -> None:
    data = _data(**SESSIONS)
    data["policy"]["max_model_len"] = 1500  # later turns outgrow it
    sc = scenario_from_dict(data, "test", ROOT)
    res = llmsim.run(sc)
    req = res.requests
    # whoever waits on a rejected call is rejected as ended, never sent; nobody else is
    by_id = req.set_index("id")
    for i, d in enumerate(_deps(build_workload(sc))):
        upstream_rejected = any(by_id.loc[j, "status"] == "rejected" for j in d)
        ended = str(by_id.loc[i, "reject_reason"]).startswith("session ended")
        assert ended == upstream_rejected, i
    ended = req[req["reject_reason"].str.startswith("session ended")]
    assert len(ended) > 0
    assert res.summary["rejected_by"].get("session_ended", 0) == len(ended)
    assert res.summary["requests"]["unfinished"] == 0  # nothing is left waiting


def test_deterministic(sessions) -> None:
    _, res = sessions
    again = llmsim.run(_scenario(**SESSIONS))
    pd.testing.assert_frame_equal(res.requests, again.requests)


def test_fast_paths_equal_exact_steps() -> None:
    sc = _scenario(**SESSIONS)
    fast = llmsim.run(sc).requests.sort_values("id").reset_index(drop=True)
    exact = llmsim.run(sc, exact_steps=True).requests.sort_values("id").reset_index(drop=True)
    for col in ("arrival_s", "first_token_s", "finish_s"):
        assert fast[col].to_numpy() == pytest.approx(exact[col].to_numpy(), rel=1e-9, abs=1e-9)


def test_bad_keys_refused() -> None:
    with pytest.raises(UserError, match="fanout.*closed_loop"):
        _scenario(conversations={"turns": 3, "fanout": 2})
    with pytest.raises(UserError, match="max_concurrency"):
        _scenario(max_concurrency=0)


def _check_sent_after_answers(wl, req: pd.DataFrame, capped: bool = False) -> None:
    """Every call was answered, each sent its delay after the last answer it waited for (with a
    concurrency cap: then or later, when a slot freed)."""
    req = req.set_index("id").sort_index()
    assert (req["status"] == "finished").all()
    for i, d in enumerate(_deps(wl)):
        if d:
            ready = max(req.loc[j, "finish_s"] for j in d) + wl.delay_s[i]
            if capped:
                assert req.loc[i, "arrival_s"] >= ready - 1e-9, i
            else:
                assert req.loc[i, "arrival_s"] == pytest.approx(ready, abs=1e-9), i


SMALL = {
    "num_requests": 6,
    "rate_rps": 4,
    "conversations": {"turns": 3, "think_s": 0.5, "closed_loop": True, "fanout": 2},
}


@pytest.mark.parametrize("capped", [False, True], ids=["open", "max_concurrency-3"])
@pytest.mark.parametrize(
    "over",
    [
        {
            "policy": {"kind": "disaggregated"},
            "cluster": {"prefill_pool": {"replicas": 1}, "decode_pool": {"replicas": 1}},
        },
        {"cluster": {"pp": 2}},
        {"cluster": {"replicas": 2, "router": "vllm_dp"}},
        {"cluster": {"replicas": 2, "router": "kv_aware", "router_view_s": 0.5}},
        {"speculative": {"method": "mtp", "k": 2}},
        {"model": "qwen3-30b-a3b-instruct-2507", "cluster": {"replicas": 2, "expert_parallel": True}},
        {"policy": {"kind": "chunked"}},
    ],
    ids=["disaggregated", "pp2", "vllm_dp", "stale-kv-aware", "mtp", "ep-lockstep", "chunked"],
)
def test_every_serving_path_reports_its_answers(over: dict, capped: bool) -> None:
    data = _data(**SMALL, **({"max_concurrency": 3} if capped else {}))
    data.update({k: v for k, v in over.items() if k != "policy"})
    data["policy"] = over.get("policy", data["policy"])
    sc = scenario_from_dict(data, "test", ROOT)
    res = llmsim.run(sc)
    _check_sent_after_answers(build_workload(sc), res.requests, capped)
    assert res.summary["requests"]["unsent"] == 0


def test_a_horizon_before_the_sessions_end_counts_the_calls_never_sent() -> None:
    sc = _scenario(horizon_s=5.0, **SESSIONS)
    wl, res = build_workload(sc), llmsim.run(sc)
    req = res.requests.set_index("id").sort_index()
    # by hand: a root is sent if it arrives by the horizon, a dependent call if everything it waits
    # for finished and its delay after the last answer ends by the horizon
    sent = 0
    for i, d in enumerate(_deps(wl)):
        if not d:
            sent += wl.arrival_s[i] <= 5.0
        elif all(req.loc[j, "status"] == "finished" for j in d):
            sent += max(req.loc[j, "finish_s"] for j in d) + wl.delay_s[i] <= 5.0
    unsent = res.summary["requests"]["unsent"]
    assert unsent == len(wl) - sent > 0
    assert unsent <= res.summary["requests"]["unfinished"]
    assert res.summary["sessions"]["completed"] < 20


def test_conversations_on_a_trace_refused() -> None:
    data = _data(**SESSIONS)
    data["workload"] = {"kind": "trace", "trace": {"path": "data/traces/AzureLLMInferenceTrace_conv.csv"}}
    data["workload"]["conversations"] = SESSIONS["conversations"]
    with pytest.raises(UserError, match="conversations.*a trace brings its own"):
        scenario_from_dict(data, "test", ROOT)
