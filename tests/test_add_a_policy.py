"""docs/architecture.md, "How to add a policy", followed step by step: a toy policy written here,
registered here, runs through the simulator and the NumPy reference engine with no edit elsewhere."""

from pathlib import Path

import numpy as np
import pytest

import llmsim
from llmsim.models import ModelSpec
from llmsim.reference.engine import ReferenceEngine
from llmsim.reference.weights import init_weights
from llmsim.scenario import scenario_from_dict
from llmsim.schedulers import SCHEDULERS, BatchPlan, Scheduler, SchedulerConfig, register_policy


class DecodeFirst(Scheduler):
    """Step 1, the decision: running requests decode; whole prompts are admitted (up to
    ``max_batch_tokens``) only in a step where nothing decodes."""

    name = "decode_first"

    def schedule(self) -> BatchPlan:
        plan = BatchPlan()
        self._schedule_decodes(plan)
        if plan.num_decode:
            return plan
        tokens = 0
        while self.waiting and self.num_running() < self.cfg.max_num_seqs:
            c = self._try_admit(self.waiting[0], self.cfg.max_batch_tokens - tokens, whole=True)
            if not c:
                break
            plan.prefill.append((self.running[-1], c))
            tokens += c
        return plan


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_policy("decode_first", DecodeFirst)  # step 2: one call, no fast paths
    yield
    del SCHEDULERS["decode_first"]


def test_the_toy_policy_runs_in_the_simulator():
    spec = {
        "name": "toy",
        "seed": 3,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "policy": {"kind": "decode_first"},
        "workload": {
            "kind": "poisson",
            "rate_rps": 20.0,
            "num_requests": 60,
            "prompt_tokens": {"dist": "fixed", "value": 300},
            "output_tokens": {"dist": "fixed", "value": 20},
        },
        "output": {"dir": "/tmp/llmsim-toy"},
    }
    res = llmsim.run(scenario_from_dict(spec, "toy policy", Path(__file__).parent))
    assert res.summary["requests"]["finished"] == 60
    steps = res.steps
    # the policy's rule, seen from outside: no step mixes prompts with decodes
    assert not ((steps["prefill_tokens"] > 0) & (steps["decode_tokens"] > 0)).any()
    assert (steps["prefill_tokens"] > 0).any() and (steps["decode_tokens"] > 0).any()


def test_the_toy_policy_runs_in_the_reference_engine():
    tiny = ModelSpec("tiny", 32, 64, 2, 4, 2, 8, 61, weight_dtype="fp32")
    eng = ReferenceEngine(init_weights(tiny, 0, np.float32), "decode_first", SchedulerConfig(max_num_seqs=4), 64, 4)
    reqs = [eng.new_request(i, 0.0, 10 + i, 5) for i in range(6)]
    out = eng.run(reqs)
    assert all(r.status == "finished" and r.generated == 5 for r in out.requests)
    assert not ((out.steps["prefill_tokens"] > 0) & (out.steps["decode_tokens"] > 0)).any()
