"""The host's cost per operator of real vLLM on the Xeon VM, measured from two model depths
(data/validation/vllm-cpu-depth/, benchmarks/vllm_cpu/depth_overhead.py), against itself and
against what the third campaign's serving fit found without being able to isolate it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "vllm_cpu"))

import depth_overhead  # noqa: E402

from llmsim.hardware import load_profile  # noqa: E402


def test_two_depth_pairs_agree_and_the_serving_fit_matches_them() -> None:
    t = depth_overhead.table()
    assert set(t["ops"]) == {12}  # a Llama layer as llmsim lists it
    est = depth_overhead.per_op_overhead_us(t)
    assert set(est) == {"rep1", "rep2"}
    lo, hi = min(est.values()), max(est.values())
    assert hi / lo < 1.15, est  # the two pairs, minutes apart, within 15 %
    assert (t["layer_us"] > t["kernels_us"]).all()  # every layer costs more than its kernels
    fitted = load_profile(ROOT / "data/validation/vllm-cpu-xeon/engine-fit/hardware.yaml")
    fitted_us = fitted.overheads.kernel_launch_s.value * 1e6
    # the serving fit (per-op and per-step costs not separable there, its launch at its bound)
    # lands within 20 % of the measured per-operator cost
    assert abs(fitted_us / (sum(est.values()) / 2) - 1) < 0.2, (fitted_us, est)
    # the vllm-v1 engine's cost per operator on a CPU is this measurement: the two pairs' mean
    from llmsim.engine import PRESETS

    assert PRESETS["vllm-v1"].cpu_op_s == round(sum(est.values()) / 2, 1) * 1e-6, est
