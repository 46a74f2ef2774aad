"""Compare the cost model's per-op predictions with measured timings: MAPE and worst cases.

The prediction for a kernel is ``OpTime.kernel_s`` (device time, no host launch gap): Vidur and
the generic CSV time kernels with device events, which do not see the gap between launches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from llmsim.calibration.fit import attention_op, attention_spec, check_possible, elementwise_op
from llmsim.calibration.readers import Measurement, to_frame
from llmsim.costmodel.comm import all_reduce_s, tp_link
from llmsim.costmodel.ops import gemm
from llmsim.costmodel.roofline import CostConfig, CostModel
from llmsim.hardware import HardwareProfile
from llmsim.models import ModelSpec

KIND_NAMES = {"gemm": "linear", "attention": "attention", "elementwise": "elementwise", "comm": "all-reduce"}
# size bands of ``Report.attention_bands``: new tokens per sequence (prefill chunk) or sequences
# (decode batch), and the tokens already cached per sequence; (label, lowest, highest)
CHUNK_BANDS = [("chunk 1-256", 1, 256), ("chunk 257-1024", 257, 1024), ("chunk 1025+", 1025, None)]
BATCH_BANDS = [("batch 1-4", 1, 4), ("batch 5-16", 5, 16), ("batch 17-64", 17, 64), ("batch 65+", 65, None)]
KV_BANDS = [("kv 0", 0, 0), ("kv 1-511", 1, 511), ("kv 512-2047", 512, 2047), ("kv 2048+", 2048, None)]


def predict_s(hw: HardwareProfile, model: ModelSpec, rows: list[Measurement]) -> np.ndarray:
    """Predicted seconds per measured row, priced by ``CostModel`` itself (the code the simulator
    runs). An attention row is priced on the op ``ops.attention_ops`` builds for its own measured
    shape (heads, KV heads, head size, TP), not ``model``'s, as a GEMM row's shape is its own; an
    elementwise row on the op ``ops.step_ops`` builds for its own layer shape."""
    models: dict[tuple, CostModel] = {}
    out = np.empty(len(rows))
    for i, r in enumerate(rows):
        if r.kind == "comm":
            link = tp_link(hw, r.ranks)
            out[i] = all_reduce_s(r.bytes, r.ranks, link, hw.efficiency.allreduce_bus_fraction.value)
            continue
        attn, elem = r.kind == "attention", r.kind == "elementwise"
        key = (r.tp, r.dtype, r.heads, r.kv_heads, r.head_dim) if attn else (r.tp, r.dtype)
        cm = models.get(key)
        if cm is None:
            cfg = CostConfig(tp=r.tp, weight_dtype=r.dtype, act_dtype=r.dtype, kv_dtype=r.dtype)
            cm = models[key] = CostModel(attention_spec(r) if attn else model, hw, cfg)
        if attn:
            op = attention_op(r, cm.cfg)
        elif elem:  # (built on the row's own layer shape, as an attention row's)
            op = elementwise_op(r, cm.cfg)
        else:
            op = gemm(r.op, r.m, r.n, r.k, cm.cfg, 1)
        out[i] = cm.price(op).kernel_s
    return out


def _band(values: pd.Series, bands: list[tuple[str, int, int | None]]) -> pd.Series:
    label = pd.Series("", index=values.index)
    for name, lo, hi in bands:
        label[(values >= lo) & (values <= (hi if hi is not None else np.inf))] = name
    return label


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

    def per_kind(self) -> pd.DataFrame:
        """MAPE and rows per kind of op, in the order of ``KIND_NAMES``: linear (GEMMs), attention,
        all-reduce."""
        g = self.frame.assign(kind=self.frame["kind"].map(KIND_NAMES)).groupby("kind")
        out = pd.DataFrame({"mape": g["ape"].mean(), "n": g.size()})
        return out.reindex([k for k in KIND_NAMES.values() if k in out.index])

    def attention_bands(self) -> pd.DataFrame:
        """Attention MAPE by regime and size: rows are the op and its band of new tokens (prefill
        chunk) or of sequences (decode batch), columns the band of cached tokens per sequence,
        plus ``all``; NaN where no row falls. Empty without attention rows."""
        f = self.frame[self.frame["kind"] == "attention"]
        if f.empty:
            return pd.DataFrame()
        prefill = f["op"] == "attention_prefill"
        size = _band(f["m"], CHUNK_BANDS).where(prefill, _band(f["batch"], BATCH_BANDS))
        f = f.assign(size=size, ctx=_band(f["kv"], KV_BANDS))
        table = f.pivot_table(index=["op", "size"], columns="ctx", values="ape", aggfunc="mean")
        table = table.reindex(columns=[b[0] for b in KV_BANDS]).dropna(axis="columns", how="all")
        order = [("attention_prefill", b[0]) for b in CHUNK_BANDS] + [("attention_decode", b[0]) for b in BATCH_BANDS]
        table["all"] = f.groupby(["op", "size"])["ape"].mean()
        table["rows"] = f.groupby(["op", "size"]).size()
        return table.reindex([k for k in order if k in table.index])

    def worst(self, n: int = 5) -> pd.DataFrame:
        cols = ["op", "tp", "ranks", "m", "n", "k", "bytes", "seconds", "predicted_s", "ape"]
        return self.frame.nlargest(n, "ape")[cols]

    def as_json(self) -> dict:
        ops = {op: {"mape": round(float(r.mape), 4), "n": int(r.n)} for op, r in self.per_op().iterrows()}
        return {"ops": ops, "overall_mape": round(self.overall_mape, 4)}


def validate(hw: HardwareProfile, model: ModelSpec, rows: list[Measurement]) -> Report:
    check_possible(hw, [r for r in rows if r.kind == "gemm"])  # (as calibrate: a unit mistake, not a miss)
    frame = to_frame(rows)
    frame["predicted_s"] = predict_s(hw, model, rows)
    frame["ape"] = (frame["predicted_s"] - frame["seconds"]).abs() / frame["seconds"]
    return Report(frame)
