"""Synthetic workloads: arrival processes and token-length distributions, all from one seeded RNG."""

from __future__ import annotations

import numpy as np

from llmsim.workload.base import Workload


def poisson_arrivals(rng: np.random.Generator, rate_rps: float, n: int) -> np.ndarray:
    """Exponential gaps with mean 1/rate; the first request arrives at t=0."""
    gaps = rng.exponential(1.0 / rate_rps, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def gamma_arrivals(rng: np.random.Generator, rate_rps: float, cv: float, n: int) -> np.ndarray:
    """Gamma gaps with mean 1/rate and coefficient of variation ``cv`` (cv > 1 is burstier than Poisson)."""
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / (rate_rps * shape), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def batch_arrivals(n: int, batch_size: int, interval_s: float) -> np.ndarray:
    """Fixed-size batches all arriving at once, ``interval_s`` apart (offline benchmarks)."""
    return (np.arange(n) // batch_size) * interval_s


def sample_lengths(rng: np.random.Generator, spec: dict, n: int, empirical: np.ndarray | None = None) -> np.ndarray:
    """Draw ``n`` token counts from a length spec (see docs/scenario.md, ``workload.prompt_tokens``)."""
    dist = spec["dist"]
    if dist == "fixed":
        out = np.full(n, int(spec["value"]))
    elif dist == "uniform":
        out = rng.integers(int(spec["min"]), int(spec["max"]) + 1, size=n)
    elif dist == "lognormal":
        # parameterised by the median and sigma of log(tokens): easy to read off a trace
        out = np.rint(rng.lognormal(np.log(spec["median"]), spec["sigma"], size=n))
    elif dist == "empirical":
        assert empirical is not None
        out = rng.choice(empirical, size=n, replace=True)
    else:  # pragma: no cover - the scenario schema only admits the names above
        raise ValueError(dist)
    lo, hi = spec.get("min", 0 if dist != "uniform" else None), spec.get("max")
    if dist != "uniform":
        out = np.clip(out, lo if lo is not None else 0, hi if hi is not None else None)
    return out.astype(np.int64)


def synthetic(arrival_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray, source: str) -> Workload:
    return Workload(arrival_s, np.maximum(prompt_tokens, 1), np.maximum(output_tokens, 0), source=source)
