"""Engines of an earlier day as llmsim engines: host terms fitted to a real engine's step-time model.

DistServe's authors profiled vLLM (early 2024, the baseline of the DistServe paper, OSDI'24) and
their own engine on an A100-80GB and fitted, per model and TP degree, a step time in ms
(``simdistserve/estimators/time_estimator.py``, data/validation/distserve/):

* prefill: ``a + b · Σ L + c · Σ L²`` over the prompts ``L`` of the step;
* decode: ``a + b · Σ context + c · batch``, with one set of coefficients below
  ``decoding_large_small_bs_threshold`` requests and one above.

llmsim prices the same steps' kernels on its A100 profile; what the engine took beyond them is the
engine's share. ``fit_host_terms`` fits that residual, over a grid of prefill and decode steps, to
the host terms an ``EngineSpec`` carries (``base + per_seq · seqs + per_token · tokens``, sync:
those engines had no async scheduling), by non-negative least squares, and reports the error of
the fitted engine against the step model on the grid and on the held-out TP degrees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmsim.costmodel import CostConfig, CostModel, batch_shape
from llmsim.engine import EngineSpec, HostTerm
from llmsim.hardware import HardwareProfile
from llmsim.models import ModelSpec

DATA = Path(__file__).resolve().parents[2] / "data" / "validation" / "distserve"

# the step shapes of the fit: whole prompts (neither engine chunked prefills) and decode batches
PREFILL_GRID = [(n, length) for n in (1, 2, 4) for length in (64, 128, 256, 512, 1024, 2048) if n * length <= 4096]
DECODE_GRID = [(bs, ctx) for bs in (1, 4, 16, 32, 64, 96, 128, 192, 256) for ctx in (128, 512, 1024, 1792)]


def load_step_models(engine: str) -> dict[str, dict[str, dict]]:
    """``{model: {tp: coefficients}}`` of DistServe's profile of ``engine`` (``vllm`` or ``distserve``)."""
    return json.loads((DATA / f"profiler-a100-80g.{engine}.json").read_text())


def step_model_s(coeffs: dict, prompts: list[int], contexts: list[int]) -> float:
    """The fitted step time (s) of a prefill step (``prompts``) or a decode step (``contexts``),
    as DistServe's time_estimator computes it."""
    if prompts:
        a, b, c = coeffs["prefill"]
        return (a + b * sum(prompts) + c * sum(p * p for p in prompts)) / 1e3
    large = len(contexts) >= coeffs["decoding_large_small_bs_threshold"]
    a, b, c = coeffs["decoding_largebs" if large else "decoding_smallbs"]
    return (a + b * sum(contexts) + c * len(contexts)) / 1e3


@dataclass
class StepFit:
    """Host terms that make llmsim's engine match a step model, and how well."""

    base_s: float
    per_seq_s: float
    per_token_s: float
    mape: float  # on the fit grid, of the whole step time
    worst: float

    def engine(self, name: str, source: str, cuda_graphs: bool) -> EngineSpec:
        """The fitted engine: the host terms as its ``prepare`` (these models do not say which part of
        the host work each is), sync, the fit's CUDA-graph switch."""
        term = HostTerm(self.base_s, self.per_seq_s, self.per_token_s, source)
        return EngineSpec(name, source, prepare=term, cuda_graphs=cuda_graphs)


def grid_steps() -> list[tuple[list[int], list[int]]]:
    """(prompts, decode contexts) of every step of the fit grid."""
    steps: list[tuple[list[int], list[int]]] = [([length] * n, []) for n, length in PREFILL_GRID]
    return steps + [([], [ctx] * bs) for bs, ctx in DECODE_GRID]


def device_s(cm: CostModel, prompts: list[int], contexts: list[int]) -> float:
    """llmsim's price of the step without host terms (``cm`` built with an engine of none)."""
    return cm.step_time(batch_shape([(p, 0) for p in prompts], contexts))


def cost_model(model: ModelSpec, hw: HardwareProfile, tp: int, cuda_graphs: bool) -> CostModel:
    cfg = CostConfig(tp=tp, weight_dtype="fp16", kv_dtype="fp16", act_dtype="fp16", cuda_graphs=cuda_graphs)
    return CostModel(model, hw, cfg, EngineSpec("device only", "no host terms"))


def fit_host_terms(model: ModelSpec, hw: HardwareProfile, tp: int, coeffs: dict, cuda_graphs: bool = True) -> StepFit:
    """Non-negative least squares of (step model − llmsim device time) on base, seqs, tokens."""
    from scipy.optimize import nnls

    cm = cost_model(model, hw, tp, cuda_graphs)
    rows, target, whole = [], [], []
    for prompts, contexts in grid_steps():
        measured = step_model_s(coeffs, prompts, contexts)
        seqs, tokens = len(prompts) + len(contexts), sum(prompts) + len(contexts)
        rows.append([1.0, seqs, tokens])
        target.append(measured - device_s(cm, prompts, contexts))
        whole.append(measured)
    a, y = np.asarray(rows), np.asarray(target)
    scale = a.max(axis=0)
    coef, _ = nnls(a / scale, y)
    coef = coef / scale
    fit = StepFit(float(coef[0]), float(coef[1]), float(coef[2]), 0.0, 0.0)
    err = step_errors(fit.engine("fit", "", cuda_graphs), model, hw, tp, coeffs)
    fit.mape, fit.worst = float(np.mean(np.abs(err))), float(np.max(np.abs(err)))
    return fit


def step_errors(engine: EngineSpec, model: ModelSpec, hw: HardwareProfile, tp: int, coeffs: dict) -> np.ndarray:
    """Signed relative error of llmsim's step time under ``engine`` against the step model, per grid step."""
    cfg = CostConfig(
        tp=tp, weight_dtype="fp16", kv_dtype="fp16", act_dtype="fp16", cuda_graphs=bool(engine.cuda_graphs)
    )
    cm = CostModel(model, hw, cfg, engine)
    out = []
    for prompts, contexts in grid_steps():
        measured = step_model_s(coeffs, prompts, contexts)
        out.append(cm.step_time(batch_shape([(p, 0) for p in prompts], contexts)) / measured - 1)
    return np.asarray(out)
