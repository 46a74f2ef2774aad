"""The serving metrics of a run under the names, units and definitions of ``vllm bench serve``.

One function, :func:`bench_metrics`, turns a per-request table into the keys of vLLM's
benchmark result JSON (vllm/benchmarks/serve.py, 0.32: ``calculate_metrics`` and
``process_one_metric``), so that a simulated run and a measured one can be diffed key by key:

- ``duration`` (s), ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``;
- ``request_throughput`` (req/s), ``request_goodput`` (req/s meeting the SLOs),
  ``output_throughput`` and ``total_token_throughput`` (tok/s);
- ``max_output_tokens_per_s`` and ``max_concurrent_requests`` over one-second buckets;
- ``{mean,median,std,p<P>}_{ttft,tpot,itl,e2el}_ms`` for the chosen percentiles ``P``.

Definitions as vLLM's: TTFT = first token − arrival; TPOT per request = (E2EL − TTFT) /
(output tokens − 1), requests of one token left out; ITL over every gap between the streamed
chunks of every request (a chunk is a token, or the tokens one speculative verify step accepted);
E2EL = finish − arrival; percentiles by
``np.percentile`` over completed requests. Where vLLM reports 0 for an empty set, these are
``None`` (JSON null). llmsim's extra, the worst gap of each request (``*_tbt_max_ms``), follows
the same pattern, and so does ``input_throughput`` (tok/s). docs/results.md has the mapping from the older llmsim names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from llmsim.gaps import GapHistogram

DEFAULT_PERCENTILES = (90.0, 99.0)


def p_word(p: float) -> str:
    """vLLM's percentile label: ``99`` -> ``p99``, ``99.9`` -> ``p99.9``."""
    return "p" + (str(int(p)) if int(p) == p else str(p))


def dist_ms(name: str, values_s: np.ndarray, percentiles: tuple[float, ...]) -> dict[str, float | None]:
    """``mean_/median_/std_/p<P>_{name}_ms`` of ``values_s`` (seconds; NaN left out)."""
    v = np.asarray(values_s, dtype=float)
    v = v[np.isfinite(v)] * 1e3
    keys = ["mean", "median", "std", *(p_word(p) for p in percentiles)]
    if not len(v):
        return {f"{k}_{name}_ms": None for k in keys}
    figs = [v.mean(), np.median(v), v.std(), *np.percentile(v, percentiles)]
    return {f"{k}_{name}_ms": float(f) for k, f in zip(keys, figs, strict=True)}


def itl_from_histogram(hist: GapHistogram | None, percentiles: tuple[float, ...]) -> dict:
    """ITL figures of a run from its :class:`llmsim.gaps.GapHistogram` of every gap: mean and std
    exact (its sums), median and percentiles np.percentile's within the histogram's 0.5% bins."""
    keys = ["mean", "median", "std", *(p_word(p) for p in percentiles)]
    if hist is None or not hist.total:
        return {f"{k}_itl_ms": None for k in keys}
    figs = [hist.mean_s(), hist.percentile(50), hist.std_s(), *(hist.percentile(p) for p in percentiles)]
    return {f"{k}_itl_ms": float(f) * 1e3 for k, f in zip(keys, figs, strict=True)}


def _max_concurrent(start_s: float, arrival_s: np.ndarray, finish_s: np.ndarray) -> int:
    """vLLM's count: a request is active in every whole second from its start to its end bucket.
    The count changes only at a bucket where a request starts, so those are the ones counted
    (floats throughout: a run's length does not bound the buckets)."""
    if not len(arrival_s):
        return 0
    first = np.sort(np.floor(arrival_s - start_s))
    last = np.sort(np.floor(finish_s - start_s))
    started = np.searchsorted(first, first, side="right")  # requests whose first bucket is <= k
    ended = np.searchsorted(last, first, side="left")  # requests whose last bucket is < k
    return int((started - ended).max())


def _max_tokens_per_s(start_s: float, first_s: np.ndarray, finish_s: np.ndarray, tokens: np.ndarray) -> float:
    """Most output tokens in one second bucket. The first token is counted at ``first_s`` and the
    other ``tokens - 1`` spread evenly up to ``finish_s``: the simulator keeps every gap in a
    histogram, not each token's time (measured runs have them, but are scored the same way).

    Between two events (a first token, a finish) the count per bucket is constant, so only the
    buckets next to an event can differ: those are the ones priced (bounded by the requests,
    whatever the run's length)."""
    if not len(first_s):
        return 0.0
    a, b = first_s - start_s, finish_s - start_s
    events = _buckets(np.floor(np.concatenate([a, b])))  # (first: a million requests share ~a run's seconds)
    k = np.unique(np.concatenate([events - 1, events, events + 1]))
    k = k[(k >= 0) & (k <= max(float(b.max()), 0.0))]
    first = (tokens >= 1).astype(float)  # a prefill-only request (0 output tokens) emits none
    later = np.maximum(tokens.astype(float) - 1, 0.0)
    span = b - a
    ramp = span > 0  # a request with no span emits its later tokens at once, at its finish
    rate = later[ramp] / span[ramp]

    def emitted(t: np.ndarray) -> np.ndarray:  # first tokens by t + each request's later tokens, linearly from a to b
        out = _step_sum(a, first, t) + _step_sum(b[~ramp], later[~ramp], t)
        return out + _ramp_sum(a[ramp], rate, t) - _ramp_sum(b[ramp], rate, t)

    if not len(k):
        return 0.0
    both = emitted(np.concatenate([k + 1, k]))  # (one pass: each sum sorts a million kinks)
    return float((both[: len(k)] - both[len(k) :]).max())


def _buckets(whole_s: np.ndarray) -> np.ndarray:
    """``np.unique`` of whole seconds from the run's start, NaN left out: marked in an array of
    the run's seconds when there are fewer of those than values (no sort of a million), else sorted."""
    v = whole_s[~np.isnan(whole_s)]
    if not len(v) or v.min() < 0 or v.max() >= len(v):
        return np.unique(v)
    seen = np.zeros(int(v.max()) + 1, dtype=bool)
    seen[v.astype(np.int64)] = True
    return np.flatnonzero(seen).astype(float)


def _ramp_sum(kinks: np.ndarray, slope: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Σ slope·max(t − kink, 0) at every t of ``grid`` (sorted kinks, prefix sums)."""
    order = np.argsort(kinks)
    k, s = kinks[order], slope[order]
    cs, cks = np.concatenate(([0.0], np.cumsum(s))), np.concatenate(([0.0], np.cumsum(s * k)))
    i = np.searchsorted(k, grid, side="right")
    return grid * cs[i] - cks[i]


def _step_sum(at: np.ndarray, amount: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Σ amount·[t ≥ at] at every t of ``grid``."""
    order = np.argsort(at)
    cs = np.concatenate(([0.0], np.cumsum(amount[order].astype(float))))
    return cs[np.searchsorted(at[order], grid, side="right")]


def mean_gap_s(first_to_last_s: np.ndarray, tokens: np.ndarray) -> float | None:
    """The token-weighted mean gap (mean ITL): the time from first to last token over all the
    requests' gaps (``tokens - 1`` each), in seconds; None without gaps."""
    gaps = np.maximum(np.asarray(tokens, dtype=float) - 1, 0)
    span = np.where(gaps > 0, np.nan_to_num(np.asarray(first_to_last_s, dtype=float)), 0.0)
    return float(span.sum() / gaps.sum()) if gaps.sum() else None


def latencies(frame: pd.DataFrame) -> pd.DataFrame:
    """``ttft_s``, ``tpot_s``, ``e2e_s`` of a table with arrival, first token, finish and output
    tokens (a measured run's requests.csv), by vLLM's definitions."""
    out_tokens = frame["output_tokens"].to_numpy(dtype=float)
    ttft = frame["first_token_s"] - frame["arrival_s"]
    e2e = frame["finish_s"] - frame["arrival_s"]
    gaps = out_tokens - 1
    tpot = np.where(gaps > 0, (e2e - ttft) / np.maximum(gaps, 1), np.nan)
    return pd.DataFrame({"ttft_s": ttft.to_numpy(), "tpot_s": tpot, "e2e_s": e2e.to_numpy()}, index=frame.index)


def finished(req: pd.DataFrame) -> pd.DataFrame:
    """The finished requests' rows: the frame itself when every request finished (the usual run;
    a boolean selection would copy every column, ~200 MB per million requests)."""
    done = req["status"] == "finished"
    return req if done.all() else req[done]


def arrived_mask(arrival_s: np.ndarray, horizon_s: float | None) -> np.ndarray:
    """The requests arriving by a run's horizon (a cut run never offered the later ones; None: it
    ran until every request was done)."""
    arrival = np.asarray(arrival_s, dtype=float)
    return arrival <= horizon_s if horizon_s is not None else np.ones(len(arrival), dtype=bool)


def sent_mask(req: pd.DataFrame, horizon_s: float | None) -> np.ndarray:
    """The requests a run sent: those arriving by its horizon (``arrived_mask``) that reached a
    replica, not those a client's concurrency cap or a session still held back when the horizon
    came (unfinished, ``replica`` -1)."""
    sent = arrived_mask(req["arrival_s"].to_numpy(), horizon_s)
    if horizon_s is not None and "replica" in req and "status" in req:
        held = (req["status"].to_numpy() == "unfinished") & (req["replica"].to_numpy(dtype=float) < 0)
        sent &= ~held
    return sent


def bench_metrics(
    req: pd.DataFrame,
    good: pd.Series | None,
    itl: dict,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    fin: pd.DataFrame | None = None,
    clock_start_s: float | None = None,
    horizon_s: float | None = None,
) -> dict:
    """vLLM-bench result keys of a run.

    ``req``: one row per request with ``status`` ("finished" counts as completed), ``arrival_s``,
    ``first_token_s``, ``finish_s``, ``prompt_tokens``, ``generated_tokens``, ``ttft_s``,
    ``tpot_s``, ``e2e_s`` and optionally ``tbt_max_s``; ``good``: requests meeting the SLOs (or
    None: no goodput, as vLLM without ``--goodput``); ``itl``: the ``*_itl_ms`` figures
    (:func:`itl_from_histogram` or :func:`dist_ms` over every gap); ``fin``: ``finished(req)``
    where the caller has it (a run with rejections copies the frame to make it); ``clock_start_s``:
    where the run's clock starts (None: the first arrival; 0 for ``arrivals: vllm_bench``, as vllm
    bench serve starts its clock before the first request's own gap); ``horizon_s``: where the run
    stopped (None: it ran until every request was done), requests arriving after it never sent.

    ``duration`` runs, as vLLM's benchmark clock, until every sent request is answered: the last
    finish, a rejection (answered at its arrival) after it, or the horizon that cut a request off;
    ``failed`` counts the sent requests not completed. The one-second buckets of the two peaks
    start at the first completed request's arrival (vLLM's ``min_start_time``)."""
    fin = finished(req) if fin is None else fin
    n_done = len(fin)
    arrival = req["arrival_s"].to_numpy(dtype=float)
    sent = sent_mask(req, horizon_s)
    start = float(arrival.min()) if len(req) else 0.0
    if clock_start_s is not None:
        start = min(start, clock_start_s)
    status = req["status"].to_numpy()
    answers = [fin["finish_s"].to_numpy(dtype=float), arrival[sent & (status == "rejected")]]
    if horizon_s is not None and (sent & (status == "unfinished")).any():
        answers.append(np.array([horizon_s]))
    answered = np.concatenate(answers)
    end = max(float(answered.max()), start) if len(answered) else start
    dur = max(end - start, 1e-12)
    tin, tout = int(fin["prompt_tokens"].sum()), int(fin["generated_tokens"].sum())
    first = float(fin["arrival_s"].min()) if n_done else start
    out: dict = {
        "duration": end - start,
        "completed": n_done,
        "failed": int(sent.sum()) - n_done,
        "total_input_tokens": tin,
        "total_output_tokens": tout,
        "request_throughput": n_done / dur,
        "request_goodput": float(good.sum()) / dur if good is not None else None,
        "output_throughput": tout / dur,
        "total_token_throughput": (tin + tout) / dur,
        "input_throughput": tin / dur,  # llmsim's extra: vLLM's JSON has the total alone
        "max_output_tokens_per_s": _max_tokens_per_s(
            first, fin["first_token_s"].to_numpy(), fin["finish_s"].to_numpy(), fin["generated_tokens"].to_numpy()
        ),
        "max_concurrent_requests": _max_concurrent(first, fin["arrival_s"].to_numpy(), fin["finish_s"].to_numpy()),
    }
    out.update(dist_ms("ttft", fin["ttft_s"].to_numpy(), percentiles))
    out.update(dist_ms("tpot", fin["tpot_s"].to_numpy(), percentiles))
    out.update(itl)
    out.update(dist_ms("e2el", fin["e2e_s"].to_numpy(), percentiles))
    if "tbt_max_s" in fin:
        out.update(dist_ms("tbt_max", fin["tbt_max_s"].to_numpy(), percentiles))
    return out


LATENCY_ROWS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2EL", "e2el"), ("TBT max", "tbt_max"))


def latency_table(s: dict) -> tuple[list[list[object]], list[str]]:
    """The latency table of a summary (CLI and report), in vLLM-bench names (ms): mean, median and the run's
    percentiles per metric; TBT max (each request's worst gap) is llmsim's extra."""
    stats = ["mean", "median", *(p_word(p) for p in s.get("percentiles", DEFAULT_PERCENTILES))]
    rows = [[label, *(s.get(f"{k}_{m}_ms") for k in stats)] for label, m in LATENCY_ROWS]
    return rows, ["latency (ms)", *stats]
