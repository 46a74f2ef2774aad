"""What the twin's fit leaves unpriced in real vLLM's decode steps on the Xeon VM
(benchmarks/vllm_cpu/batch_change.py over data/validation/vllm-cpu-xeon/): steps whose running
batch changed in the step before (a request left, or one decodes for the first time after its
prompt) run longer than the fit prices them; settled steps are priced close. No vLLM needed."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "vllm_cpu"))

import batch_change  # noqa: E402


def _error(steps) -> float:  # noqa: ANN001
    return float(steps.priced_s.sum() / steps.exec_s.sum() - 1)


def test_steps_after_a_batch_change_are_the_ones_priced_short() -> None:
    steps = batch_change.decode_steps(ROOT / "data" / "validation" / "vllm-cpu-xeon")
    for split in ("calibration", "validation"):
        mine = steps[(steps.split == split) & (steps.seqs >= 4)]
        settled = mine[(mine.since >= 10) & ~mine.shrank]
        after_prompt = mine[mine.since == 1]
        after_leave = mine[(mine.since > 3) & mine.shrank]
        assert len(settled) > 500 and len(after_prompt) > 100 and len(after_leave) > 100
        assert abs(_error(settled)) < 0.04, split  # a settled batch: priced within 4 % (3.1 %, 0.6 %)
        # the step after a change: 6.5-12 % short in both splits (not modelled: docs/validation.md)
        assert _error(after_prompt) < -0.05 and _error(after_leave) < -0.05, split


def test_settled_steps_move_with_the_run_and_with_one_sequence() -> None:
    """The repeats of a validation workload (same seed and rates, run later) price their settled
    decode steps up to 10 points apart: the real engine's run-to-run floor, not a step shape. What
    holds across a workload's runs is the single-sequence step, priced long."""
    steps = batch_change.decode_steps(ROOT / "data" / "validation" / "vllm-cpu-xeon")
    calm = steps[(steps.since >= 10) & ~steps.shrank]
    per_run = calm.groupby("run").apply(_error)
    mid = [per_run[f"poisson-mid{r}"] for r in ("", "-rep2", "-rep3")]
    assert max(mid) - min(mid) > 0.08  # -7.3 %, +2.4 %, -1.7 %
    for name in ("poisson-mid", "poisson-high", "poisson-overload", "shared-prefix"):
        # each flagged validation run is the slowest of its three (priced shortest)
        assert per_run[name] < min(per_run[f"{name}-rep2"], per_run[f"{name}-rep3"]), name
    one, two, more = calm[calm.seqs == 1], calm[calm.seqs == 2], calm[(calm.seqs >= 3) & (calm.seqs <= 32)]
    assert _error(one) > 0.10 and _error(two) > 0.04  # +12.9 %, +6.0 %
    assert abs(_error(more)) < 0.03
    for run in ("poisson-light", "poisson-light-rep2", "poisson-light-rep3"):
        assert per_run[run] > 0.07  # two sequences on average: long in all three runs


def test_the_calibration_runs_disagree_at_one_sequence() -> None:
    """Where the fit's one-sequence price comes from: the campaign's two step profiles (the same
    experiments, run apart) measured one- and two-sequence decode steps 12-14 % apart but eight
    and more within 2.5 %, and the calibration serving run with the most one-sequence steps ran
    them faster than either; the fit prices one sequence at the first profile's level."""
    import pandas as pd

    campaign = ROOT / "data" / "validation" / "vllm-cpu-xeon"

    def median_ms(run: str, exp: str) -> float:
        s = pd.read_csv(campaign / run / "steps.csv.gz")
        s = s[s["label"].str.startswith(exp + "#") & s["label"].str.endswith(":decode")]
        return float(((s.update_start_s - s.sched_end_s) * 1e3).median())  # execution, as the fit reads it

    for b in (1, 2):  # 7.27 / 6.47 ms and 7.77 / 6.81 ms
        assert median_ms("profile", f"decode-B{b}-C128") / median_ms("profile-rep2", f"decode-B{b}-C128") > 1.11
    for b in (8, 16, 32, 64):
        ratio = median_ms("profile", f"decode-B{b}-C128") / median_ms("profile-rep2", f"decode-B{b}-C128")
        assert abs(ratio - 1) < 0.025, b
    steps = batch_change.decode_steps(campaign)
    one = steps[(steps.since >= 10) & ~steps.shrank & (steps.seqs == 1) & (steps.split == "calibration")]
    by_run = one.groupby("run").agg(real=("exec_s", "median"), priced=("priced_s", "median"), n=("exec_s", "size"))
    assert abs(by_run.priced["profile"] / by_run.real["profile"] - 1) < 0.02  # 7.45 ms both
    assert by_run.n.idxmax() == "poisson-light-b"  # 142 steps at 5.97 ms, priced 7.43
    assert by_run.real["poisson-light-b"] < by_run.real["profile-rep2"] < by_run.real["profile"]
