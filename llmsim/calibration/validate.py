"""Compare the cost model's per-op predictions with measured timings: MAPE and worst cases.

The prediction for a kernel is ``OpTime.kernel_s`` (device time, no host launch gap): Vidur and
the generic CSV time kernels with device events, which do not see the gap between launches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from llmsim.calibration.readers import Measurement, to_frame
from llmsim.costmodel.comm import all_reduce_s, tp_link
from llmsim.costmodel.ops import gemm
from llmsim.costmodel.roofline import CostConfig, CostModel
from llmsim.hardware import HardwareProfile
from llmsim.models import ModelSpec


def predict_s(hw: HardwareProfile, model: ModelSpec, rows: list[Measurement]) -> np.ndarray:
    """Predicted seconds per measured row, priced by ``CostModel`` itself (the code the simulator runs)."""
    models: dict[tuple[int, str], CostModel] = {}
    out = np.empty(len(rows))
    for i, r in enumerate(rows):
        if r.kind == "comm":
            link = tp_link(hw, r.ranks)
            out[i] = all_reduce_s(r.bytes, r.ranks, link, hw.efficiency.allreduce_bus_fraction.value)
            continue
        cm = models.get((r.tp, r.dtype))
        if cm is None:
            cfg = CostConfig(tp=r.tp, weight_dtype=r.dtype, act_dtype=r.dtype, kv_dtype=r.dtype)
            cm = models[(r.tp, r.dtype)] = CostModel(model, hw, cfg)
        out[i] = cm.price(gemm(r.op, r.m, r.n, r.k, cm.cfg, 1)).kernel_s
    return out


@dataclass
class Report:
    """Per-row predictions and errors, with the summaries ``llmsim validate`` prints."""

    frame: pd.DataFrame  # one row per measurement: op, tp, m, n, k, ranks, bytes, seconds, predicted_s, ape

    @property
    def overall_mape(self) -> float:
        return float(self.frame["ape"].mean()) if len(self.frame) else float("nan")

    def per_op(self) -> pd.DataFrame:
        g = self.frame.groupby("op")
        return pd.DataFrame(
            {"mape": g["ape"].mean(), "p90": g["ape"].quantile(0.9), "worst": g["ape"].max(), "n": g.size()}
        )

    def per_op_tp(self) -> pd.DataFrame:
        key = np.where(self.frame["kind"] == "comm", self.frame["ranks"], self.frame["tp"])
        return self.frame.assign(degree=key).pivot_table(index="op", columns="degree", values="ape", aggfunc="mean")

    def worst(self, n: int = 5) -> pd.DataFrame:
        cols = ["op", "tp", "ranks", "m", "n", "k", "bytes", "seconds", "predicted_s", "ape"]
        return self.frame.nlargest(n, "ape")[cols]

    def as_json(self) -> dict:
        ops = {op: {"mape": round(float(r.mape), 4), "n": int(r.n)} for op, r in self.per_op().iterrows()}
        return {"ops": ops, "overall_mape": round(self.overall_mape, 4)}


def validate(hw: HardwareProfile, model: ModelSpec, rows: list[Measurement]) -> Report:
    frame = to_frame(rows)
    frame["predicted_s"] = predict_s(hw, model, rows)
    frame["ape"] = (frame["predicted_s"] - frame["seconds"]).abs() / frame["seconds"]
    return Report(frame)
