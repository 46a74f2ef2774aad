"""Goodput search and capacity plans."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import llmsim
from llmsim.build import build_workload
from llmsim.errors import UserError
from llmsim.planning.base import Base
from llmsim.planning.goodput import goodput_search
from llmsim.planning.ranking import pareto_front
from llmsim.planning.rate import rate_knob, rate_overrides

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"

SYNTH = """
name: goodput_tiny
seed: 1
model: llama-3.1-8b
hardware: H100-SXM
policy: {kind: chunked, chunk_tokens: 512, max_num_seqs: 64}
workload:
  kind: poisson
  rate_rps: 8
  num_requests: 120
  prompt_tokens: {dist: lognormal, median: 1000, sigma: 0.6, min: 16, max: 4096}
  output_tokens: {dist: uniform, min: 16, max: 64}
slo: {ttft_s: 0.4, tbt_s: 0.05, attainment: 0.9}
"""


@pytest.fixture
def synth(tmp_path):
    p = tmp_path / "synth.yaml"
    p.write_text(SYNTH)
    return p


def test_goodput_is_within_one_bisection_step_of_the_crossing(synth):
    g = goodput_search(synth, rel_tol=0.05)
    assert g.rate_rps > 0 and g.fail_rps is not None
    assert g.step_rps <= 0.05 * g.fail_rps + 1e-12
    # re-run just below and just above, independently of the search
    below = llmsim.run(synth, {"workload.rate_rps": g.rate_rps}).summary["slo"]["attainment"]
    above = llmsim.run(synth, {"workload.rate_rps": g.fail_rps}).summary
    assert below >= g.target
    # above the capacity the target is missed, or met only while the queue grows (a finite workload
    # ends before its latencies show it): overloaded rates fail the search
    assert above["slo"]["attainment"] < g.target or above["saturation"]["verdict"] == "overloaded"
    assert g.attainment == below
    assert g.verdict in ("stable", "backlogged")
    frame = g.frame()
    assert frame["rate_rps"].is_monotonic_increasing and len(frame) == len(g.evaluations)
    # the search's answer is an offered rate (the SLO capacity); each run's request_goodput is vLLM's
    # figure, the requests per second that met the SLOs, never above what the run served
    assert (frame["request_goodput"] <= frame["request_throughput"] + 1e-12).all()
    at = frame[frame["rate_rps"] == g.rate_rps].iloc[0]
    assert at["request_goodput"] < g.rate_rps


def test_slos_in_seconds_meet_the_metrics_in_ms_in_the_reason():
    from llmsim.planning.rows import _verdict, slo_ms

    slo = {"ttft_s": 2.0, "tbt_s": 0.15, "tpot_s": None, "e2e_s": None, "attainment": 0.9}
    assert slo_ms(slo) == {"ttft": 2000.0, "tbt_max": 150.0}  # tbt_s bounds the worst gap, not ITL
    res = {"error": None, "slo_met": False, "verdict": "stable", "slo_attainment": 0.175}
    res.update(p99_ttft_ms=510.2, p99_tbt_max_ms=158.4, p99_itl_ms=40.0)
    reason = _verdict(res, 0.9, slo)["reason"]
    assert reason.startswith("latency:") and "17.5% < 90%" in reason
    assert "TTFT p99 510 ms vs SLO 2000 ms" in reason and "TBT max p99 158 ms vs SLO 150 ms" in reason


@pytest.mark.skipif(not TRACE.exists(), reason="Azure trace not copied into data/traces yet")
def test_trace_rate_is_scaled_by_speedup_keeping_the_shape(tmp_path):
    p = tmp_path / "trace.yaml"
    p.write_text(
        f"name: t\nmodel: llama-3.1-8b\nhardware: H100-SXM\n"
        f"workload: {{kind: trace, trace: {{path: {TRACE}, duration_s: 60}}}}\n"
    )
    base = Base.from_path(p)
    key, per_unit = rate_knob(base)
    assert key == "workload.trace.speedup"
    w1 = build_workload(base.scenario())
    target = 3 * per_unit
    w3 = build_workload(base.scenario(rate_overrides(base, target)))
    np.testing.assert_allclose(w3.arrival_s, w1.arrival_s / 3)
    np.testing.assert_array_equal(w3.prompt_tokens, w1.prompt_tokens)
    assert w3.stats()["mean_rate_rps"] == pytest.approx(target)


def test_a_plan_s_rate_counts_requests_not_sessions(tmp_path):
    """The plan's req/s was rate_rps whatever the workload made of it: 3-turn conversations at 4
    sessions/s read "4 req/s" (12 were sent a second), a rate profile's quiet stretch was not
    counted, and a client's max_concurrency let a candidate "meet" a rate it served a hundredth of
    (hostile round 5)."""
    p = tmp_path / "synth.yaml"
    p.write_text(SYNTH)
    assert rate_knob(Base.from_path(p)) == ("workload.rate_rps", 1.0)
    for overrides, per_unit in [
        ({"workload.conversations": {"turns": 3, "think_s": 1}}, 3.0),
        ({"workload.conversations": {"turns": 3, "closed_loop": True, "fanout": 2}}, 3.0 + 2 * 2),
        (
            {"workload.rate_profile": [[0, 1], [2, 0.1]], "workload.duration_s": 20, "workload.num_requests": None},
            (2 + 18 * 0.1) / 20,
        ),
    ]:
        data = yaml.safe_load(SYNTH)
        for key, value in overrides.items():
            data["workload"][key.split(".")[1]] = value
        p.write_text(yaml.safe_dump(data))
        assert rate_knob(Base.from_path(p)) == ("workload.rate_rps", pytest.approx(per_unit))
    for key, value, named in [
        ("rate_profile", [[0, 1], [2, 0.1]], "rate_profile with num_requests"),
        ("max_concurrency", 2, "max_concurrency: the plan searches"),
    ]:
        data = yaml.safe_load(SYNTH)
        data["workload"][key] = value
        p.write_text(yaml.safe_dump(data))
        with pytest.raises(UserError, match=named):
            rate_knob(Base.from_path(p))
    # a trace replayed under a client's cap: the same refusal
    p.write_text(
        f"name: t\nmodel: llama-3.1-8b\nhardware: H100-SXM\n"
        f"workload: {{kind: trace, max_concurrency: 2, trace: {{path: {TRACE}, duration_s: 60}}}}\n"
    )
    with pytest.raises(UserError, match="max_concurrency: the plan searches"):
        rate_knob(Base.from_path(p))


def test_all_at_once_has_no_rate_to_search(tmp_path):
    p = tmp_path / "batch.yaml"
    p.write_text(
        "name: b\nmodel: llama-3.1-8b\nhardware: H100-SXM\nworkload: {kind: all_at_once, num_requests: 4, "
        "prompt_tokens: {dist: fixed, value: 8}, output_tokens: {dist: fixed, value: 8}}\n"
    )
    with pytest.raises(UserError, match="no arrival rate"):
        goodput_search(p)


def test_pareto_front_keeps_only_undominated_rows():
    import pandas as pd

    df = pd.DataFrame({"c": [1, 2, 2, 3, 4], "l": [5.0, 3.0, 4.0, 3.5, 1.0], "name": list("abcde")})
    front = pareto_front(df, "c", "l")
    assert list(front["name"]) == ["a", "b", "e"]


def test_infeasible_lists_each_failing_candidate_once_at_its_last_replica_count():
    import pandas as pd

    from llmsim.planning.ranking import infeasible_candidates as _infeasible

    t = pd.DataFrame(
        {
            "config": ["1x A tp1 chunked", "2x A tp1 chunked", "1x B tp1 chunked", "2x B tp1 chunked"],
            "feasible": [False, True, False, False],
            "reason": ["overload: x", "meets SLOs", "overload: y", "latency: z"],
        }
    )
    bad = _infeasible(t)
    assert list(bad["config"]) == ["2x B tp1 chunked"] and bad["reason"].iloc[0].startswith("latency")
    assert _infeasible(t[t["config"].str.contains("A")].assign(feasible=True)).empty


def test_sensitivity_scales_the_per_dtype_gemm_fractions_too(tmp_path):
    """An FP8 plan's sensitivity must move the FP8 GEMM fraction, not only the bf16 one."""
    from llmsim.hardware import load_profile
    from llmsim.planning.robustness import scaled_profile

    path = scaled_profile("H100-SXM", ".", 0.85, tmp_path)
    base, low = load_profile("H100-SXM"), load_profile(path)
    assert low.efficiency.gemm_fraction("fp8") == pytest.approx(0.85 * base.efficiency.gemm_fraction("fp8"))
    assert low.efficiency.gemm_fraction("bf16") == pytest.approx(0.85 * base.efficiency.gemm_fraction("bf16"))


def test_a_colocated_candidate_drops_a_disaggregated_base_s_pools() -> None:
    """A plan over a disaggregated base scenario that also tries colocated policies: the colocated
    candidate clears the base's pools (they apply to policy disaggregated only, which the scenario
    check enforces) and runs on its own replicas."""
    from llmsim.planning.space import Candidate

    colocated = Candidate("A100-SXM-80GB", 1, "chunked", None, None)
    over = colocated.overrides(2)
    assert over["cluster.prefill_pool"] is None and over["cluster.decode_pool"] is None
    small = {"workload.num_requests": 10, "output.steps": "none"}
    res = llmsim.run(ROOT / "scenarios" / "colocated_vs_disaggregated.yaml", {**over, **small})
    assert [p["replicas"] for p in res.summary["pools"]] == [2]


# a few requests of a few tokens: enough for a plan's candidates to build and run
SMALL_WORKLOAD = (
    "workload: {kind: all_at_once, num_requests: 2, prompt_tokens: {dist: fixed, value: 8}, "
    "output_tokens: {dist: fixed, value: 2}}\noutput: {steps: none}\n"
)
PLAN_BOTH = "plan: {policies: [chunked, disaggregated], pd_ratios: ['1:1']}\n"


def _scenario(tmp_path: Path, head: str, tail: str = "") -> Path:
    """A small scenario file: ``head`` (name, model, hardware, cluster ...), the small workload, ``tail``."""
    path = tmp_path / "s.yaml"
    path.write_text(head + SMALL_WORKLOAD + tail)
    return path


def _candidates_by_policy(path: Path) -> dict:
    """The plan candidates of the scenario at ``path``, one per policy."""
    from llmsim.planning.base import Base
    from llmsim.planning.space import candidates

    base = Base.from_path(path)
    return {c.policy: c for c in candidates(base, base.plan_config())[0]}


def test_a_pipelined_scenario_s_candidates_count_and_name_their_stages(tmp_path) -> None:
    """cluster.pp multiplies a colocated candidate's devices (power, J per token) and shows in its
    label; a disaggregated candidate's pools are not pipelined."""
    head = "name: p\nmodel: llama-3.1-8b\nhardware: H100-SXM\ncluster: {tp: 1, pp: 4}\n"
    by_policy = _candidates_by_policy(_scenario(tmp_path, head, PLAN_BOTH))
    assert by_policy["chunked"].label.startswith("H100-SXM tp1 pp4 ") and by_policy["chunked"].devices(2) == 8
    assert by_policy["disaggregated"].pp == 1 and by_policy["disaggregated"].devices(1) == 2


def test_a_disaggregated_candidate_resets_a_colocated_base_s_sizing(tmp_path) -> None:
    """A disaggregated scenario refuses cluster.replicas / tp / pp (its pools size it), so a
    disaggregated candidate over a colocated base with them set resets them and runs on its pools."""
    from llmsim.planning.space import Candidate

    path = _scenario(
        tmp_path, "name: p\nmodel: llama-3.1-8b\nhardware: H100-SXM\ncluster: {replicas: 3, tp: 2, pp: 2}\n"
    )
    over = Candidate("H100-SXM", 1, "disaggregated", None, "1:2").overrides(1)
    res = llmsim.run(path, over)
    assert [(p["replicas"], p["tp"]) for p in res.summary["pools"]] == [(1, 1), (2, 1)]
    with pytest.raises(UserError, match=r"cluster.replicas: a disaggregated cluster is sized by its pools"):
        llmsim.run(path, {k: v for k, v in over.items() if k != "cluster.replicas"})


def test_a_disaggregated_base_s_pools_give_the_plan_its_tp_and_expert_parallelism(tmp_path) -> None:
    """Without plan.tp a disaggregated base is planned at its pools' tp (its cluster.tp must stay 1),
    and a scenario's expert parallelism follows each candidate into its layout: a colocated
    candidate's cluster, a disaggregated one's pools."""
    head = (
        "name: d\nmodel: qwen3-30b-a3b-instruct-2507\nhardware: H100-SXM\npolicy: {kind: disaggregated}\n"
        "cluster: {prefill_pool: {replicas: 1, tp: 2, expert_parallel: true}, decode_pool: {replicas: 1, tp: 2, "
        "expert_parallel: true}}\n"
    )
    path = _scenario(tmp_path, head, PLAN_BOTH)
    by_policy = _candidates_by_policy(path)
    assert {c.tp for c in by_policy.values()} == {2}
    colocated, disagg = by_policy["chunked"].overrides(2), by_policy["disaggregated"].overrides(1)
    assert colocated["cluster.expert_parallel"] is True
    assert disagg["cluster.expert_parallel"] is False and disagg["cluster.decode_pool"]["expert_parallel"] is True
    for over in (colocated, disagg):
        assert llmsim.run(path, over).summary["requests"]["finished"] == 2


def test_the_robustness_sentence_names_the_plan_s_own_sensitivity() -> None:
    from llmsim.planning.prose import _robustness

    rows = pd.DataFrame(
        {
            "efficiency_factor": [0.6, 1.4],
            "meets_slos": [False, True],
            "slo_attainment": [0.5, 1.0],
            "verdict": ["stable", "stable"],
        }
    )
    assert _robustness(rows).startswith("With every efficiency 40% lower it MISSES the SLOs (attainment 50.0%")
    # a met attainment that does not hold: the run did not keep up, and the sentence says so
    unsettled = rows.assign(slo_attainment=[1.0, 1.0], verdict=["backlogged", "stable"])
    assert "MISSES the SLOs (attainment 100.0%, verdict backlogged)" in _robustness(unsettled)


def test_an_overloaded_point_is_not_feasible_even_where_its_finite_workload_met_the_slos() -> None:
    """A short workload offered far past capacity can meet the SLOs (its requests end before the
    queue's wait grows), and the plan recommended such a point; a deployment that keeps receiving
    them would not meet them, so overload decides first."""
    from llmsim.planning.rows import _verdict

    res = {"slo_met": True, "verdict": "overloaded", "queue_growth_share": 0.9, "slo_attainment": 1.0}
    v = _verdict(res, 0.9, {"ttft_s": 1.0})
    assert (
        v["feasible"] is False
        and v["reason"].startswith("overload:")
        and "only because the workload ends" in v["reason"]
    )
    assert _verdict({**res, "verdict": "stable"}, 0.9, {})["feasible"] is True


def test_a_plan_compares_engines_where_each_runs(tmp_path) -> None:
    """plan.engines: each engine a candidate on each device it runs on, with its own policy and
    budget where the scenario names none; a TensorRT-LLM engine's pairs with an AMD GPU are left
    out and said (printed, plan.json), not refused; none left is an error."""
    from llmsim.commands.plan import engine_likes, plan_text
    from llmsim.planning.capacity import capacity_plan
    from llmsim.planning.space import candidates, checked_space

    head = (
        "name: p\nmodel: llama-3.1-8b\nhardware: H100-SXM\noutput: {steps: none}\n"
        "workload: {kind: poisson, rate_rps: 2, num_requests: 6, prompt_tokens: {dist: fixed, value: 64}, "
        "output_tokens: {dist: fixed, value: 4}}\n"
    )
    plan = "plan: {hardware: [H100-SXM, MI300X], engines: [vllm-v1, trtllm], replicas: [1], goodput_search: false, sensitivity: 0}\n"
    path = tmp_path / "s.yaml"
    path.write_text(head + plan)
    base = Base.from_path(path)
    cands, left_out = candidates(base, base.plan_config())
    assert {(c.hardware, c.engine, c.policy, c.chunk_tokens) for c in cands} == {
        ("H100-SXM", "vllm-v1", "vllm", 8192),
        ("MI300X", "vllm-v1", "vllm", 16384),  # vLLM's budget for that device (>= 160 GiB)
        ("H100-SXM", "trtllm", "trtllm", None),
    }
    assert len(left_out) == 1 and left_out[0].startswith("MI300X on trtllm: ") and "NVIDIA GPUs" in left_out[0]
    trt = next(c for c in cands if c.engine == "trtllm")
    assert trt.label == "H100-SXM tp1 trtllm on trtllm" and trt.overrides(1)["engine"] == "trtllm"
    mi = next(c for c in cands if c.hardware == "MI300X")
    assert mi.label == "MI300X tp1 vllm chunk16384 on vllm-v1"
    assert base.scenario(mi.overrides(1)).policy.chunk_tokens == 16384
    result = capacity_plan(base, progress=False)
    assert result.left_out == left_out and len(result.table) == 3
    assert sorted(result.table["engine"]) == ["trtllm", "vllm-v1", "vllm-v1"]
    from llmsim.planning.output import write_plan

    write_plan(result, base, tmp_path / "out", progress=False)
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["left_out"] == left_out
    # the winner's run names its engine
    winner = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert winner["engine"]["name"] == (result.best.candidate.engine if result.best else None)
    text = plan_text(result, engine_likes(base, base.scenario(), cands))
    assert "left out of the search (1):" in text and "accuracy (trtllm) " in text and "accuracy (vllm-v1) " in text
    path.write_text(head + plan.replace("H100-SXM, ", "").replace("vllm-v1, ", ""))
    with pytest.raises(UserError, match="plan.engines: no engine runs on any device of the plan .MI300X on trtllm: "):
        checked_space(Base.from_path(path))


def test_plan_engines_lose_nothing_the_scenario_wrote(tmp_path) -> None:
    """The scenario's own engine settings would be dropped by plan.engines: refused; an empty name
    is no engine; the plan table names each row's engine; each engine's accuracy line is about the
    devices it was paired with; a chunk size the scenario states is every engine's."""
    from llmsim.commands.plan import engine_likes
    from llmsim.planning.space import candidates, checked_space

    head = "name: p\nmodel: llama-3.1-8b\nhardware: H100-SXM\n"
    plan = "plan: {hardware: [H100-SXM, Xeon-8480+], engines: [vllm-v1, trtllm-engine], replicas: [1]}\n"
    path = _scenario(tmp_path, head + "engine: {preset: vllm-v1, output_delay_s: 0.2}\n", plan)
    with pytest.raises(UserError, match=r"whose own settings \(output_delay_s\) no listed engine would keep"):
        checked_space(Base.from_path(path))
    path = _scenario(tmp_path, head, plan.replace("trtllm-engine", "''"))
    with pytest.raises(UserError, match="'' names no engine"):
        checked_space(Base.from_path(path))
    path = _scenario(tmp_path, head + "policy: {kind: vllm, chunk_tokens: 512}\n", plan)
    base = Base.from_path(path)
    cands, left_out = candidates(base, base.plan_config())
    assert len(left_out) == 1 and left_out[0].startswith("Xeon-8480+ on trtllm-engine")
    assert {c.chunk_tokens for c in cands if c.policy == "vllm"} == {512}
    likes = engine_likes(base, base.scenario(), cands)
    assert likes["trtllm-engine"]["devices"] == ["gpu"] and likes["vllm-v1"]["devices"] == ["cpu", "gpu"]


def test_one_engine_profile_named_twice_is_one_entry(tmp_path) -> None:
    from llmsim.planning.space import checked_space

    (tmp_path / "prof.yaml").write_text("name: mine\ndefaults: vllm\n")
    plan = f"plan: {{engines: [prof.yaml, ./prof.yaml, {tmp_path / 'prof.yaml'}], replicas: [1]}}\n"
    path = _scenario(tmp_path, "name: p\nmodel: llama-3.1-8b\nhardware: H100-SXM\n", plan)
    with pytest.raises(UserError, match="plan.engines: 'prof.yaml' and './prof.yaml' are the same file"):
        checked_space(Base.from_path(path))


def test_a_candidate_without_a_stated_budget_gets_its_device_s_and_shows_it(tmp_path) -> None:
    """No plan.chunk_tokens and none in the scenario: each device runs vLLM's default budget for it
    (8,192 on an H100, 2,048 on an L40S: vllm/engine/arg_utils.py), named in its label."""
    from llmsim.planning.space import candidates

    path = _scenario(
        tmp_path, "name: p\nmodel: llama-3.1-8b\nhardware: H100-SXM\n", "plan: {hardware: [H100-SXM, L40S]}\n"
    )
    base = Base.from_path(path)
    labels = [c.label for c in candidates(base, base.plan_config())[0]]
    assert labels == ["H100-SXM tp1 vllm chunk8192", "L40S tp1 vllm chunk2048"]
