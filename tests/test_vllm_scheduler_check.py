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

# the workloads where llmsim still differs (docs/validation.md: vLLM's one loop over the running
# requests, in admission order, preempting for a prompt in progress too)
APART = {"preempt-heavy", "preempt-heavy-small-budget", "many-small-tight"}


def _rows() -> dict[str, dict]:
    expected = json.loads(gzip.decompress(check.EXPECTED.read_bytes()))["steps"]
    got = {name: check.llmsim_steps(case) for name, case in check.cases().items()}
    return {r["case"]: r for r in check.compare(expected, got)}


def test_the_scheduler_is_vllms_step_for_step() -> None:
    rows = _rows()
    assert set(rows) == set(check.cases())
    for name, r in rows.items():
        if name in APART:
            # the same preemptions, the steps and tokens within 1 % and 2 %
            assert r["llmsim_preemptions"] == r["vllm_preemptions"], r
            assert abs(r["llmsim_steps"] / r["vllm_steps"] - 1) < 0.01, r
            assert abs(r["llmsim_tokens"] / r["vllm_tokens"] - 1) < 0.02, r
        else:
            assert r["identical"] == r["vllm_steps"] == r["llmsim_steps"], r


def test_a_different_decision_is_caught() -> None:
    """The comparison is not vacuous: a step with another chunk is counted."""
    expected = json.loads(gzip.decompress(check.EXPECTED.read_bytes()))["steps"]
    got = {"burst": check.llmsim_steps(check.cases()["burst"])}
    got["burst"][5][0][0][1] += 1
    (row,) = check.compare({"burst": expected["burst"]}, got)
    assert (row["identical"], row["first_difference"]) == (row["vllm_steps"] - 1, 5)
