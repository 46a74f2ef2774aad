"""Step times of the reference model measured as the twin's engine runs its steps: one cold pass
per step in each of several rounds, each sample rescaled to the speed of the drift probes'
references (``reference.timing``), the median per step.

Used by the calibration's fit to the engine (``enginefit``) and by the twin's single-step grid
(``stepgrid``), so that a profile and its validation see the machine at one speed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from llmsim.reference.model import Model
from llmsim.reference.timing import PREFILL_PROBE, Step, cold_pass_s, probe_timer
from llmsim.reference.weights import Weights


def time_steps_probed(
    model: Model, cases: list[Step], rounds: int, probes: dict[str, Callable[[], float]]
) -> tuple[list[list[float]], dict[str, list[float]]]:
    """One cold pass (``cold_pass_s``) of every case in each of ``rounds`` rounds, every probe in
    ``probes`` timed once just before every case: (samples[round][case], readings[probe]).
    Rounds spread each case's samples over the whole measurement, so a slow spell of the machine
    disturbs one sample of each case, not every sample of one case."""
    samples: list[list[float]] = []
    readings: dict[str, list[float]] = {k: [] for k in probes}
    for _ in range(rounds):
        row = []
        for ch, dec in cases:
            for k, fn in probes.items():
                readings[k].append(fn())
            row.append(cold_pass_s(model, ch, dec))
        samples.append(row)
    return samples, readings


def column_medians(samples: list[list[float]]) -> list[float]:
    """The median per case of ``time_steps_probed``'s samples."""
    return [float(np.median(col)) for col in zip(*samples, strict=True)]


def time_steps_cold_normalised(
    model: Model,
    cases: list[Step],
    rounds: int,
    references: dict[str, float] | None = None,
    weights: Weights | None = None,
) -> tuple[list[float], list[float], list[float], dict[str, float]]:
    """Cold passes of ``cases`` rescaled to the speed of the drift probes' ``references``
    ("decode", and "prefill" if the profile has it), as the twin rescales its engine's steps.
    Returns (normalised, raw, factor) medians per case and the references used.

    Without ``references`` (calibrating) both probes are read and each reference is the median of
    its readings over the whole measurement (rounds x cases), read the way the twin reads a probe
    (``probe_timer``: one cold pass), not from the probe step's own samples. (On this machine,
    whose passes alternate between two speeds, the prefill reference still came out 35.3 and
    44.8 ms in two calibrations, against 35.8-46.3 ms from 5 samples in five: the spread is the
    machine's, docs/reference.md section 4; the normalisation removes it from the samples.)"""
    probes = {"decode": probe_timer(weights=weights)}
    if references is None or "prefill" in references:
        probes["prefill"] = probe_timer(weights=weights, step=PREFILL_PROBE)
    samples, readings = time_steps_probed(model, cases, rounds, probes)
    if references is None:
        references = {k: float(np.median(v)) for k, v in readings.items()}
    refs = {k: references.get(k, references["decode"]) for k in ("decode", "prefill")}
    readings.setdefault("prefill", readings["decode"])
    raw = column_medians(samples)
    normalised = normalised_medians(cases, samples, readings, refs)
    factors = [r / n for r, n in zip(raw, normalised, strict=True)]
    return normalised, raw, factors, references


def normalised_medians(
    cases: list[Step],
    samples: list[list[float]],
    readings: dict[str, list[float]],
    references: dict[str, float],
) -> list[float]:
    """Each calibration sample rescaled to the machine speed of the probes' references, as the
    twin rescales its engine's steps (``reference.engine.SpeedProbe``): divided by the median of
    the probe readings around it (the one just before it and its two neighbours) over the
    reference, the prefill probe for a step that prefills, the decode probe for the others; the
    median per case. Without it a calibration whose steps ran at different machine speeds (this
    VM alternates between two) fits a profile of no one speed, while the twin's normalised clock
    assumes the profile describes the machine at the references' speed."""
    n = len(cases)
    out = []
    for j, (chunks, _) in enumerate(cases):
        kind = "prefill" if chunks else "decode"
        r = readings[kind]
        col = []
        for i, row in enumerate(samples):
            k = i * n + j  # this sample's reading: the probe ran just before it
            factor = float(np.median(r[max(0, k - 1) : k + 2])) / references[kind]
            col.append(row[j] / factor)
        out.append(float(np.median(col)))
    return out
