"""The fit that turns the micro-benchmarks' figures into a profile that prices this machine's
engine steps: a bounded least squares of the cost model's step times on measured calibration
steps (prefills, decode batches, spread contexts, chunked-prefill steps).

The calibration steps are kept apart from the twin's validation grid (``stepgrid``) and include
both drift probes' steps (``reference.timing.PROBE`` and ``PREFILL_PROBE``), whose references the
profile stores.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import norm

from llmsim.calibration.steptimes import time_steps_cold_normalised
from llmsim.costmodel import CostConfig, CostModel
from llmsim.costmodel.ops import BatchShape, batch_shape
from llmsim.hardware import HardwareProfile
from llmsim.models import ModelSpec
from llmsim.reference.model import Model
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.timing import Step
from llmsim.reference.weights import init_weights

# The cost config the reference model is priced with: fp32 everywhere, and the naive attention
# kernel (NumPy materialises the score matrix)
FP32 = CostConfig(weight_dtype="fp32", kv_dtype="fp32", act_dtype="fp32", attention_kernel="naive")

# Calibration steps (kept apart from the twin's validation grid of 16..2048-token prefills and
# decode batches 1..64 at contexts 128..4096). Decode batches of 1..16 price their GEMMs from the
# measured ``gemm_small_m`` table. Prefill 128 and decode b=8 ctx=256 are the drift probes' steps.
CAL_PREFILL = [32, 128, 512, 1536]
CAL_ROUNDS = 9  # cold passes per calibration step (one per round; their median, normalised)
FIT_RANGE = 3.0
CAL_DECODE = [(1, 384), (2, 256), (8, 256), (32, 256), (4, 1024), (48, 768), (1, 2560), (8, 2048), (24, 1536)]
CAL_DECODE += [(12, 3072), (40, 1536)]
# A served batch mixes contexts (the engine's decode attention then runs a few length groups) and
# chunked prefill adds a chunk to decodes: calibrate on such steps too, (chunk, batch, mean context).
CAL_SPREAD = [(0, 6, 300), (0, 12, 600), (0, 24, 400), (128, 4, 500), (256, 10, 300)]
SPREAD_SIGMA = 0.7  # lognormal spread of contexts around the mean (the twin's prompts: sigma 0.7)
FIT_KEYS = [
    "gemm_half_m",
    "memory_fraction",
    "attention_fraction",
    "decode_attention_fraction",
    "elementwise_memory_fraction",
    "kernel_fixed_s",
    "gemm_small_m",  # one scale on the whole measured table: its level is refined, its shape kept
]


def calibration_steps(quick: bool) -> list[tuple[Step, BatchShape]]:
    """The calibration steps (fewer if ``quick``), each with the batch shape the cost model prices."""
    prefill = CAL_PREFILL[:3] if quick else CAL_PREFILL
    decode = CAL_DECODE[:7] if quick else CAL_DECODE
    cases: list[tuple[Step, BatchShape]] = [(([n], []), batch_shape([(n, 0)], [])) for n in prefill]
    cases += [(([], [(b, c)]), batch_shape([], [c] * b)) for b, c in decode]
    for chunk, b, c in CAL_SPREAD[:2] if quick else CAL_SPREAD:
        ctxs = spread_contexts(b, c)
        chunks = [chunk] if chunk else []
        cases.append(((chunks, [(1, x) for x in ctxs]), batch_shape([(n, 0) for n in chunks], ctxs)))
    return cases


def fit_to_engine(spec: ModelSpec, data: dict, quick: bool) -> tuple[dict, list[dict], dict[str, float]]:
    """Fit the roofline's efficiencies so the cost model prices this machine's engine steps.

    The peaks (fp32 FLOP/s, bandwidth) stay the micro-benchmarks'; the shape parameters
    (``FIT_KEYS``) start from the micro-benchmark values (``data``, with the profile so far under
    "profile") and are refined by least squares on the log of measured vs predicted step time
    over the calibration steps, each kept within ``FIT_RANGE`` x of its micro-benchmark value.
    Returns the fitted values, one row per step (measured, predicted, raw) and the drift probes'
    references ("decode": ``PROBE``, "prefill": ``PREFILL_PROBE``), read throughout
    (``time_steps_cold_normalised``).
    """
    model = Model(init_weights(spec, 0, np.float32), PagedKVCache(spec, 16, np.float32))
    cases = calibration_steps(quick)
    steps = [step for step, _ in cases]
    measured, raw, _, references = time_steps_cold_normalised(model, steps, 2 if quick else CAL_ROUNDS, weights=model.w)
    measured = np.array(measured)
    x0 = np.log([data[k] for k in FIT_KEYS])

    def predict(x: np.ndarray) -> np.ndarray:
        values = dict(zip(FIT_KEYS, np.exp(x), strict=True))
        cost = CostModel(spec, HardwareProfile.model_validate(with_values(data["profile"], values)), FP32)
        return np.array([cost.step_time(shape) for _, shape in cases])

    def log_errors(x: np.ndarray) -> np.ndarray:
        return np.log(predict(x) / measured)

    # each parameter stays within FIT_RANGE x of its micro-benchmark value: the fit refines
    # measurements, it must not turn a parameter into a free knob (e.g. make elementwise ops free).
    # A bounded trust-region least squares (it replaced Powell's method, which stopped at a higher
    # loss on the same measurements: e.g. 0.149 vs 0.119 with eight parameters, docs/reference.md)
    bounds = (x0 - np.log(FIT_RANGE), x0 + np.log(FIT_RANGE))
    res = least_squares(log_errors, x0, bounds=bounds, diff_step=1e-3, max_nfev=100 if quick else 400)
    pred = predict(res.x)
    rows = [
        {"step": step_label(*step), "measured_s": float(m), "predicted_s": float(p), "raw_s": r}
        for step, m, p, r in zip(steps, measured, pred, raw, strict=True)
    ]
    return dict(zip(FIT_KEYS, map(float, np.exp(res.x)), strict=True)), rows, references


def spread_contexts(batch: int, mean_ctx: int) -> list[int]:
    """``batch`` contexts at evenly spaced quantiles of a lognormal (``SPREAD_SIGMA``) with mean ``mean_ctx``."""
    z = norm.ppf((np.arange(batch) + 0.5) / batch)
    x = np.exp(SPREAD_SIGMA * z)
    return [max(1, int(round(v))) for v in x / x.mean() * mean_ctx]


def step_label(chunks: list[int], decodes: list[tuple[int, int]]) -> str:
    """A calibration step as the profile's ``calibration.fit_steps`` names it."""
    if len(decodes) > 1 and all(b == 1 for b, _ in decodes):  # a spread of contexts
        ctx = [c for _, c in decodes]
        dec = [f"decode b={len(ctx)} ctx={min(ctx)}..{max(ctx)} (mean {sum(ctx) // len(ctx)})"]
    else:
        dec = [f"decode b={b} ctx={c}" for b, c in decodes]
    return ", ".join([f"prefill {n}" for n in chunks] + dec)


def with_values(profile: dict, values: dict) -> dict:
    """A copy of the profile data with new values of efficiency/overhead figures (a ``*_s`` key is
    an overhead), their sources kept; a table's value (``gemm_small_m``) is scaled by its number."""
    out = {**profile, "efficiency": dict(profile["efficiency"]), "overheads": dict(profile["overheads"])}
    for k, v in values.items():
        section = "overheads" if k.endswith("_s") else "efficiency"
        old = out[section][k]["value"]
        new = [x * float(v) for x in old] if isinstance(old, list) else float(v)  # a table: v scales it
        out[section][k] = {**out[section][k], "value": new}
    return out
