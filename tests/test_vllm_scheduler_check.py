"""llmsim's ``vllm`` policy decides as vLLM 0.32.0's own v1 scheduler does, step by step
(benchmarks/vllm_scheduler_check.py; the record in tests/data/vllm_scheduler/, made with vLLM's
``Scheduler`` class itself)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import vllm_scheduler_check as check  # noqa: E402

from llmsim.schedulers import BatchPlan  # noqa: E402


def _rows() -> dict[str, dict]:
    expected = json.loads(gzip.decompress(check.EXPECTED.read_bytes()))["steps"]
    got = {name: check.llmsim_steps(case) for name, case in check.cases().items()}
    return {r["case"]: r for r in check.compare(expected, got)}


def test_the_scheduler_is_vllms_step_for_step() -> None:
    rows = _rows()
    assert set(rows) == set(check.cases())
    for r in rows.values():
        assert r["identical"] == r["vllm_steps"] == r["llmsim_steps"], r


def test_a_different_decision_is_caught() -> None:
    """The comparison is not vacuous: a step with another chunk is counted."""
    expected = json.loads(gzip.decompress(check.EXPECTED.read_bytes()))["steps"]
    got = {"burst": check.llmsim_steps(check.cases()["burst"])}
    got["burst"][5][0][0][1] += 1
    (row,) = check.compare({"burst": expected["burst"]}, got)
    assert (row["identical"], row["first_difference"]) == (row["vllm_steps"] - 1, 5)


def test_the_simulator_s_columnar_decoders_decide_the_same() -> None:
    """Without prefix caching the simulator holds decoding requests as columns (decodeset.py), and a
    step whose prompt in progress was overtaken (long_prefill_token_threshold) takes them back to
    plan it in vLLM's order: the decisions are those of the plain running list."""
    for name, case in check.cases().items():
        plain = {**case, "prefix_caching": False}
        assert check.llmsim_steps(plain, columnar=True) == check.llmsim_steps(plain), name


def test_planning_every_step_in_vllm_s_order_decides_the_same() -> None:
    """``VllmScheduler`` plans decodes before prompts in progress except where the two orders would
    differ (``_decodes_first_agrees``: a prompt in progress overtaken, and the budget or the blocks
    short): planning every step in vLLM's own order decides the same."""
    from llmsim.schedulers import SCHEDULERS, VllmScheduler

    class InOrder(VllmScheduler):
        def _plan(self, swap_in: bool) -> BatchPlan:
            return self._plan_in_order()

    SCHEDULERS["vllm-in-order"] = InOrder
    try:
        for name, case in check.cases().items():
            assert check.llmsim_steps(case, policy="vllm-in-order") == check.llmsim_steps(case), name
    finally:
        del SCHEDULERS["vllm-in-order"]
