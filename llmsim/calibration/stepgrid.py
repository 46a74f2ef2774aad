"""The local-cpu profile checked on single steps it was not fitted to: prefills of n tokens and
decode batches at a context, predicted by the cost model vs measured on the reference model
(``llmsim twin``'s step grid, ``twin_steps.csv``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from llmsim.calibration.enginefit import FP32
from llmsim.calibration.steptimes import column_medians, time_steps_cold_normalised, time_steps_probed
from llmsim.costmodel import CostModel
from llmsim.costmodel.ops import model_batch_shape
from llmsim.hardware import load_profile
from llmsim.models import ModelSpec
from llmsim.reference.model import Model
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.timing import BLAS_THREADS
from llmsim.reference.weights import init_weights

PREFILL_GRID = [16, 64, 256, 1024, 2048]
DECODE_GRID = [(b, c) for b in (1, 4, 16, 64) for c in (128, 512, 1024, 4096) if b * c <= 65536]


def measure_steps(
    spec: ModelSpec, profile_path: Path, rounds: int = 5, quick: bool = False, normalise: bool = True
) -> pd.DataFrame:
    """Predicted vs measured time of single steps: prefills of n tokens, decode batches at a context.
    Measured as the calibration measures its steps: one cold pass per case in each of ``rounds``
    rounds over the grid (5; 2 if quick), median per case. ``normalise`` (with the profile's probe
    references): the probes are timed just before each case and each sample divided by its speed
    factor, as the engine's clock is (``measured_raw_s``: as measured, ``speed_factor``: raw over
    normalised)."""
    prof = load_profile(profile_path)
    cost = CostModel(spec, prof, FP32)
    model = Model(init_weights(spec, 0, np.float32), PagedKVCache(spec, 16, np.float32))
    prefill = PREFILL_GRID[:3] if quick else PREFILL_GRID
    decode = [(b, c) for b, c in DECODE_GRID if b * c <= 8192] if quick else DECODE_GRID
    cases = [([n], []) for n in prefill] + [([], [(b, c)]) for b, c in decode]
    cal = prof.calibration or {}
    refs = {
        k: cal[key]["measured_s"]
        for k, key in (("decode", "probe_step"), ("prefill", "probe_prefill_step"))
        if key in cal
    }
    rounds = 2 if quick else rounds
    with threadpool_limits(BLAS_THREADS, "blas"):
        if normalise and "decode" in refs:
            measured, raw, factors, _ = time_steps_cold_normalised(model, cases, rounds, refs, weights=model.w)
        else:
            measured = raw = column_medians(time_steps_probed(model, cases, rounds, {})[0])
            factors = [1.0] * len(cases)
    rows = [("prefill", n, 0, cost.step_time(model_batch_shape(cost.model, [(n, 0)], []))) for n in prefill]
    rows += [("decode", b, c, cost.step_time(model_batch_shape(cost.model, [], [c] * b))) for b, c in decode]
    rows = [(*r, m, w, f) for r, m, w, f in zip(rows, measured, raw, factors, strict=True)]
    cols = ["kind", "tokens_or_batch", "context", "predicted_s", "measured_s", "measured_raw_s", "speed_factor"]
    df = pd.DataFrame(rows, columns=cols)
    df.insert(0, "step", [f"prefill {n}" if k == "prefill" else f"decode b={n} ctx={c}" for k, n, c, *_ in rows])
    df["error"] = df["predicted_s"] / df["measured_s"] - 1
    df["error_raw"] = df["predicted_s"] / df["measured_raw_s"] - 1
    return df
