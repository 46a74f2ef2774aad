"""Per-operator host cost of real vLLM on this CPU, from two model depths (no vLLM needed).

The serving fits (``llmsim calibrate --serving``) cannot tell a cost paid per operator from one
paid per step: every step of one model runs the same operators. Two models that differ only in
depth can: ``profile_steps.py --model benchmarks/vllm_cpu/model-h128-L{2,18}`` timed the same
decode batches on a 2-layer and an 18-layer Llama of hidden size 128 (its kernels take a few
microseconds), so (step at 18 layers - step at 2) / 16 is one layer's time, the per-step work
cancelling. Less llmsim's price of that layer's kernels (the campaign machine's profile, launch
set to 0), divided by the layer's operators as llmsim lists them, it is the host's cost per
operator: what ``overheads.kernel_launch_s`` stands for on a CPU (docs/costmodel.md, "Launch gap").

    python benchmarks/vllm_cpu/depth_overhead.py     # the table, from data/validation/vllm-cpu-depth/

Measured runs and their settings: data/validation/vllm-cpu-depth/README.md.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "validation" / "vllm-cpu-depth"
MODELS = Path(__file__).resolve().parent
PROFILE = ROOT / "data" / "validation" / "vllm-cpu-xeon" / "host-cpu.yaml"  # the same machine's prior
SHALLOW, DEEP = 2, 18
PAIRS = ("", "-rep2")  # two measurements of each depth, taken in the order L2, L18, L18-rep2, L2-rep2
OVERHEAD_REGIME = "B <= 4, C = 128"  # where the layer's kernels are smallest beside the host's work


def decode_steps_ms(run: str) -> pd.Series:
    """Median decode-step time (ms) per experiment (``decode-B{B}-C{C}``) of one profile run."""
    s = pd.read_csv(DATA / run / "steps.csv.gz")
    s = s[s["label"].str.endswith(":decode")]
    exp = s["label"].str.split("#").str[0]
    return ((s["step_end_s"] - s["step_start_s"]) * 1e3).groupby(exp).median()


@functools.cache
def _cost_model():  # type: ignore[no-untyped-def]
    from llmsim.costmodel.roofline import CostConfig, CostModel
    from llmsim.hardware import load_profile
    from llmsim.models import from_hf_config

    hw = load_profile(PROFILE)
    zero = hw.overheads.kernel_launch_s.model_copy(update={"value": 0.0})
    hw = hw.model_copy(update={"overheads": hw.overheads.model_copy(update={"kernel_launch_s": zero})})
    model = from_hf_config(MODELS / f"model-h128-L{DEEP}" / "config.json")
    cfg = CostConfig(act_dtype="fp32", weight_dtype="fp32", kv_dtype="fp32")
    return CostModel(model, hw, cfg), model, cfg


def kernels_us_per_layer(batch: int, context: int) -> tuple[float, int]:
    """llmsim's price of one decoder layer's kernels in a decode step of ``batch`` sequences at
    ``context`` tokens, with no launch cost; and the layer's operator count."""
    from llmsim.costmodel.ops import batch_shape, layer_ops

    cm, model, cfg = _cost_model()
    ops = layer_ops(model, batch_shape([], [context + 8] * batch), cfg)  # (mid-way through 16 steps)
    per_step = sum(cm.price(op, True).total_s for op in ops)  # (an op's total covers every layer)
    return per_step / model.num_layers * 1e6, len(ops)


def table() -> pd.DataFrame:
    """Per experiment and pair: one layer's measured time, llmsim's kernels, the rest per operator."""
    rows = []
    for tag in PAIRS:
        shallow, deep = decode_steps_ms(f"h128-L{SHALLOW}{tag}"), decode_steps_ms(f"h128-L{DEEP}{tag}")
        for exp in shallow.index.intersection(deep.index):
            b, c = (int(x) for x in exp.removeprefix("decode-B").split("-C"))
            layer_us = (deep[exp] - shallow[exp]) / (DEEP - SHALLOW) * 1e3
            kernels_us, n_ops = kernels_us_per_layer(b, c)
            rows.append(
                {
                    "pair": tag.lstrip("-") or "rep1",
                    "batch": b,
                    "context": c,
                    "layer_us": layer_us,
                    "kernels_us": kernels_us,
                    "ops": n_ops,
                    "host_us_per_op": (layer_us - kernels_us) / n_ops,
                }
            )
    return pd.DataFrame(rows).sort_values(["pair", "context", "batch"], ignore_index=True)


def per_op_overhead_us(t: pd.DataFrame) -> dict[str, float]:
    """The host's cost per operator where the kernels are smallest (``OVERHEAD_REGIME``), per pair."""
    small = t[(t["batch"] <= 4) & (t["context"] == 128)]
    return {p: float(np.median(g["host_us_per_op"])) for p, g in small.groupby("pair")}


def main() -> int:
    t = table()
    print(t.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    est = per_op_overhead_us(t)
    print(f"\nhost cost per operator, {OVERHEAD_REGIME}, median per pair (us): ", end="")
    print(", ".join(f"{p} {v:.1f}" for p, v in est.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
