"""Findings of the fifth hostile round (2026-12-07) that have no better home."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmsim.build import build_workload
from llmsim.errors import UserError
from llmsim.scenario import scenario_from_dict


def _trace_scenario(tmp_path, **trace) -> object:
    rows = [f"{i * 0.1:.1f},160,8,p{i % 50}" for i in range(1000)]
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens,prompt_id\n" + "\n".join(rows) + "\n")
    data = {
        "name": "window",
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "workload": {"kind": "trace", "trace": {"path": "t.csv", "format": "generic", **trace}},
    }
    return scenario_from_dict(data, "test", tmp_path)


def test_a_trace_slice_counts_only_its_own_prompts_content_ids(tmp_path, monkeypatch) -> None:
    """A 1M-row generic trace with prompt ids was refused for the content ids of the whole file
    (66M over the 50M limit) when the run asked for its first 200 requests."""
    import llmsim.workload.limits as limits

    whole = build_workload(_trace_scenario(tmp_path))  # (under the real limit)
    monkeypatch.setattr(limits, "MAX_PREFIX_BLOCKS", 5_000)  # the file needs 10,000 (10 per row)
    with pytest.raises(UserError, match="10,000 content ids"):
        build_workload(_trace_scenario(tmp_path))
    for trace in ({"max_requests": 100}, {"start_s": 50.0, "duration_s": 10.0}):
        w = build_workload(_trace_scenario(tmp_path, **trace))
        assert len(w) == 100
        rows = slice(0, 100) if "max_requests" in trace else slice(500, 600)  # (0.1 s apart)
        assert w.block_hashes == whole.block_hashes[rows]  # the ids the whole file's rows carry
        np.testing.assert_allclose(w.arrival_s, whole.arrival_s[rows] - whole.arrival_s[rows][0])


def test_one_profile_named_in_two_cases_is_given_twice(tmp_path) -> None:
    """``H100-SXM`` and ``h100-sxm`` load the same profile: a plan and a sweep ran it twice, as two rows."""
    from llmsim.planning.base import Base
    from llmsim.planning.space import checked_space
    from llmsim.sweep import parse_grid

    with pytest.raises(UserError, match="'H100-SXM' and 'h100-sxm' are the same profile"):
        p = tmp_path / "plan.yaml"
        p.write_text(
            "name: p\nmodel: llama-3.1-8b\nhardware: H100-SXM\nworkload: {kind: poisson, rate_rps: 1, num_requests: 10,"
            " prompt_tokens: {dist: fixed, value: 8}, output_tokens: {dist: fixed, value: 8}}\n"
            "slo: {ttft_s: 1}\nplan: {hardware: [H100-SXM, h100-sxm], replicas: [1]}\n"
        )
        checked_space(Base.from_path(p))
    with pytest.raises(UserError, match="h100-sxm is given twice"):
        parse_grid(["hardware=H100-SXM,h100-sxm"])
    assert len(parse_grid(["hardware=a.yaml,A.yaml"])["hardware"]) == 2  # (files: as the file system names them)
    shipped = Path(__file__).resolve().parents[1] / "hardware_profiles" / "H100-SXM.yaml"
    with pytest.raises(UserError, match="given twice"):  # (a name and its own file: one profile)
        parse_grid([f"hardware=H100-SXM,{shipped}"])


def test_a_plan_without_latency_slos_says_so(tmp_path) -> None:
    """With no latency SLO a plan said its winner "meets the SLOs for 100.0% of requests"."""
    from llmsim.planning.capacity import capacity_plan

    p = tmp_path / "plan.yaml"
    head = (
        "name: p\nmodel: llama-3.1-8b\nhardware: H100-SXM\nworkload: {kind: poisson, rate_rps: 1, num_requests: 20,"
        " prompt_tokens: {dist: fixed, value: 64}, output_tokens: {dist: fixed, value: 8}}\n"
        "plan: {hardware: [H100-SXM], replicas: [1], sensitivity: 0, goodput_search: false}\n"
    )
    for slo, words in [("", "with no latency SLO set"), ("slo: {ttft_s: 1}\n", "it meets the SLOs for 100.0%")]:
        p.write_text(head + slo)
        assert words in capacity_plan(p, workers=1, progress=False).recommendation


def test_trace_unit_and_kind_mistakes_are_named(tmp_path) -> None:
    """JSON lines under a .json name read as a CSV whose columns were '{"arrival_s":0'; an
    LLMServingSim arrival_time_ns written in seconds was read as nanoseconds (a burst of 1 ns)."""
    from llmsim.workload.traces import load_trace

    rows = [f'{{"arrival_s": {i}, "prompt_tokens": 10, "output_tokens": 5}}' for i in range(3)]
    (tmp_path / "t.json").write_text("\n".join(rows) + "\n")
    with pytest.raises(UserError, match="holds JSON lines, not CSV"):
        load_trace(tmp_path / "t.json", "generic")
    (tmp_path / "t.jsonl").write_text("\n".join(rows) + "\n")
    assert len(load_trace(tmp_path / "t.jsonl", "generic")) == 3
    secs = [f'{{"input_toks": 10, "output_toks": 5, "arrival_time_ns": {t}}}' for t in (0, 0.5, 1.25)]
    (tmp_path / "s.jsonl").write_text("\n".join(secs) + "\n")
    with pytest.raises(UserError, match="a fraction of a nanosecond.*seconds"):
        load_trace(tmp_path / "s.jsonl", "llmservingsim")
    whole = [f'{{"input_toks": 10, "output_toks": 5, "arrival_time_ns": {t}}}' for t in range(30)]
    (tmp_path / "w.jsonl").write_text("\n".join(whole) + "\n")  # (30 seconds as whole numbers)
    with pytest.raises(UserError, match="1 ns apart on average.*seconds"):
        load_trace(tmp_path / "w.jsonl", "llmservingsim")
    pair = [
        '{"input_toks": 10, "output_toks": 5, "arrival_time_ns": 0}',
        '{"input_toks": 10, "output_toks": 5, "arrival_time_ns": 400000}',
    ]
    (tmp_path / "p.jsonl").write_text("\n".join(pair) + "\n")
    assert len(load_trace(tmp_path / "p.jsonl", "llmservingsim")) == 2  # (0.4 ms apart: a burst, not a unit slip)
    burst = ['{"input_toks": 10, "output_toks": 5, "arrival_time_ns": 0}' for _ in range(3)]
    (tmp_path / "b.jsonl").write_text("\n".join(burst) + "\n")
    assert len(load_trace(tmp_path / "b.jsonl", "llmservingsim")) == 3  # (all at once: one instant)


def test_a_trace_without_prompt_ids_is_read_once_for_every_window(tmp_path) -> None:
    """The id window joined the trace cache's key even where there are no ids to make: every
    window of a sweep read the file again."""
    from llmsim import build

    (tmp_path / "t.csv").write_text(
        "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i},8,8\n" for i in range(50))
    )
    data = {"name": "w", "model": "llama-3.1-8b", "hardware": "H100-SXM"}
    for n in (10, 20):
        trace = {"path": "t.csv", "format": "generic", "max_requests": n}
        sc = scenario_from_dict({**data, "workload": {"kind": "trace", "trace": trace}}, "test", tmp_path)
        assert build._id_window(sc) is None and len(build_workload(sc)) == n
