"""Timing one step of the reference model on this machine: a cold forward pass, and the drift
probes that say how fast the machine runs now relative to when it was calibrated.

The twin's engine reads the probes during a run to normalise its clock (``engine.SpeedProbe``);
the calibration (``llmsim.calibration``) reads them around every calibration step and stores
their references in the profile. Both time alike: NumPy's BLAS on ``BLAS_THREADS`` threads, the
process CPU clock (``CLOCK``), one cold pass per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from llmsim.models import ModelSpec
from llmsim.reference.model import Model, Segment
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.weights import Weights, init_weights

CLOCK = time.process_time  # see ReferenceEngine: the twin times the engine with the same clock
BLAS_THREADS = 1  # the engine and the benchmarks both run NumPy's BLAS on one thread (see docs/reference.md)

# A step to time: fresh prefill chunks of n tokens, and (batch, context) groups of decodes.
Step = tuple[list[int], list[tuple[int, int]]]

# The twin's model (also shipped as scenarios/twin_small_config.json): a 4-layer, 512-wide
# Llama-style decoder with 4:1 grouped-query attention, ~20 M parameters in fp32.
TWIN_SPEC = ModelSpec(
    name="twin-llama-4x512",
    hidden_size=512,
    intermediate_size=1408,
    num_layers=4,
    num_heads=8,
    num_kv_heads=2,
    head_dim=64,
    vocab_size=8192,
    weight_dtype="fp32",
    source="scenarios/twin_small_config.json (a small Llama-style shape chosen to run on 2 CPU cores)",
)

# The probe: a calibration step timed again around every twin run, to show whether this machine
# (a VM whose neighbours come and go) runs at the speed it was calibrated at.
PROBE: Step = ([], [(8, 256)])
# A second, compute-bound probe for steps that prefill: while the probe above (memory-bound) ran
# ~1.2x its calibration time in the twin runs of docs/reference.md section 4, prefill steps ran at
# calibrated speed, so one factor for both over-corrected them.
PREFILL_PROBE: Step = ([128], [])


def step_segments(model: Model, chunks: list[int], decodes: list[tuple[int, int]]) -> list[Segment]:
    """Model segments of one step: fresh prefills of ``chunks`` tokens and ``(batch, context)``
    decode groups, with blocks from the model's paged cache."""
    cache, vocab = model.cache, model.spec.vocab_size
    segs = [Segment(np.arange(n) % vocab, 0, cache.allocate(-(-n // 16)), "prefill") for n in chunks]
    for b, ctx in decodes:
        segs += [Segment(np.array([1]), ctx, cache.allocate(-(-(ctx + 1) // 16)), "decode") for _ in range(b)]
    return segs


def pass_s(model: Model, segs: list[Segment], clock: Callable[[], float] = CLOCK) -> float:
    """Seconds of one forward pass with greedy sampling."""
    t0 = clock()
    logits = model.forward(segs)
    [int(np.argmax(lg[-1])) for lg in logits if lg is not None]
    return clock() - t0


def cold_pass_s(model: Model, chunks: list[int], decodes: list[tuple[int, int]]) -> float:
    """One forward pass (+ greedy sampling) of a step, with no warm-up: as the engine runs its
    steps, each after a step of another shape. (On this machine a cold pass of the calibration
    steps took a median 1.06x its warmed-up time, 0.87x-1.30x by step: calibrating on warm
    steps priced the engine's steps ~2-6% short, docs/reference.md section 3.)"""
    segs = step_segments(model, chunks, decodes)
    t = pass_s(model, segs)
    for seg in segs:
        model.cache.release(seg.table)
    return t


def probe_timer(
    clock: Callable[[], float] = CLOCK, weights: Weights | None = None, step: Step | None = None
) -> Callable[[], float]:
    """A function timing ``step`` (default ``PROBE``; or ``PREFILL_PROBE``) once, for the engine's
    drift normalisation: one forward pass of a separate ``TWIN_SPEC``-shaped model on ``clock``.

    ``weights``: the engine's own weights when they have ``TWIN_SPEC``'s shapes (timing does not
    depend on the values), so the probe does not evict the engine's weights from the cache; else
    seed-0 weights, as at calibration. No warm-up: the probe is read as the engine's steps and
    the calibration's steps are timed, one cold pass each (``cold_pass_s``); one pass costs one
    ~15 ms step."""
    shapes = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size")
    same = weights is not None and all(getattr(weights.spec, f) == getattr(TWIN_SPEC, f) for f in shapes)
    w = weights if same else init_weights(TWIN_SPEC, 0, np.float32)
    model = Model(w, PagedKVCache(w.spec, 16, np.float32))
    segs = step_segments(model, *(step or PROBE))
    model.forward(segs)  # once untimed: the first pass on a fresh cache pays for its allocation
    return lambda: pass_s(model, segs, clock)
