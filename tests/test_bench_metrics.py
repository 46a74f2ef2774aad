"""summary.json speaks ``vllm bench serve``: the same keys, units and definitions, by hand and
against the committed real vLLM runs (llmsim/metrics.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmsim
from llmsim.accuracy import summary as measured_summary
from llmsim.gaps import GapHistogram
from llmsim.metrics import bench_metrics, dist_ms, itl_from_histogram, p_word
from llmsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]

# The scalar keys `vllm bench serve --save-result --metric-percentiles 90,99 --goodput ...` writes
# (vllm/benchmarks/serve.py of vLLM 0.32: the `result` dict of `benchmark` and `process_one_metric`)
VLLM_KEYS = {
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p90", "p99")),
}


def _frame(rows: list[tuple[float, float, float, int]]) -> pd.DataFrame:
    """(arrival, first token, finish, output tokens) per request, all finished, 10-token prompts."""
    a, f, e, n = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    return pd.DataFrame(
        {
            "status": "finished",
            "arrival_s": a,
            "first_token_s": f,
            "finish_s": e,
            "prompt_tokens": 10,
            "generated_tokens": n.astype(int),
            "ttft_s": f - a,
            "tpot_s": np.where(n > 1, (e - f) / np.maximum(n - 1, 1), np.nan),
            "e2e_s": e - a,
        }
    )


def test_the_definitions_by_hand() -> None:
    # request 0: arrives 0, first token 0.1, 11 tokens to 1.1 -> TPOT 0.1; request 1: one token
    req = _frame([(0.0, 0.1, 1.1, 11), (0.5, 0.7, 0.7, 1)])
    itl = dist_ms("itl", np.full(10, 0.1), (90.0, 99.0))
    m = bench_metrics(req, pd.Series([True, False]), itl, (90.0, 99.0))
    assert m["duration"] == pytest.approx(1.1)
    assert m["completed"] == 2 and m["failed"] == 0
    assert m["total_input_tokens"] == 20 and m["total_output_tokens"] == 12
    assert m["request_throughput"] == pytest.approx(2 / 1.1)
    assert m["request_goodput"] == pytest.approx(1 / 1.1)
    assert m["total_token_throughput"] == pytest.approx(32 / 1.1)
    assert m["mean_ttft_ms"] == pytest.approx(150.0) and m["median_ttft_ms"] == pytest.approx(150.0)
    assert m["std_ttft_ms"] == pytest.approx(50.0)
    # a one-token request has no TPOT (vLLM leaves it out of the TPOT figures)
    assert m["mean_tpot_ms"] == pytest.approx(100.0) and m["p99_tpot_ms"] == pytest.approx(100.0)
    assert m["mean_itl_ms"] == pytest.approx(100.0) and m["std_itl_ms"] == pytest.approx(0.0)
    assert m["p90_e2el_ms"] == pytest.approx(float(np.percentile([1100.0, 200.0], 90)))
    # both requests are active in second 0; tokens: 1 + 0.9·10 evenly from 0.1 to 1.1, + 1 at 0.7
    assert m["max_concurrent_requests"] == 2
    assert m["max_output_tokens_per_s"] == pytest.approx(1 + 9 + 1)


def test_percentile_labels_follow_vllm() -> None:
    assert p_word(99) == "p99" and p_word(99.9) == "p99.9" and p_word(50.0) == "p50"
    assert set(dist_ms("ttft", np.array([0.1]), (99.9,))) == {
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p99.9_ttft_ms",
    }
    assert all(v is None for v in dist_ms("ttft", np.array([np.nan]), (99.0,)).values())


def test_itl_from_the_gap_histogram_is_within_its_bins() -> None:
    rng = np.random.default_rng(0)
    gaps = rng.lognormal(np.log(0.02), 0.5, 20_000)
    h = GapHistogram()
    for g in gaps:
        h.add(float(g))
    got = itl_from_histogram(h, (90.0, 99.0))
    want = dist_ms("itl", gaps, (90.0, 99.0))
    for k in ("mean_itl_ms", "std_itl_ms"):  # (exact: the histogram keeps the sums)
        assert got[k] == pytest.approx(want[k], rel=1e-9), k
    for k in ("median_itl_ms", "p90_itl_ms", "p99_itl_ms"):
        assert got[k] == pytest.approx(want[k], rel=0.005), k


@pytest.mark.parametrize(
    "gaps",
    [[0.00628, 0.01504], [0.005, 0.005, 0.005], [0.004, 0.02, 0.021, 0.3], [0.01]],
    ids=["two-far-apart", "constant", "bimodal", "one"],
)
def test_itl_figures_are_numpys_on_few_gaps(gaps: list[float]) -> None:
    """(The median of two gaps read the shorter one's bin, 6.28 ms for numpy's 10.66, and a
    constant gap's std 0.007 ms: the first bin reaching the rank, and the std from bin centres.)"""
    h = GapHistogram()
    for g in gaps:
        h.add(g)
    got = itl_from_histogram(h, (0.0, 25.0, 90.0, 99.0, 100.0))
    want = dist_ms("itl", np.array(gaps), (0.0, 25.0, 90.0, 99.0, 100.0))
    assert got["std_itl_ms"] == pytest.approx(want["std_itl_ms"], abs=1e-9)
    for k in ("mean_itl_ms", "median_itl_ms", "p0_itl_ms", "p25_itl_ms", "p90_itl_ms", "p99_itl_ms", "p100_itl_ms"):
        assert got[k] == pytest.approx(want[k], rel=0.005), k


def test_a_run_of_steps_keeps_the_sums_of_its_gaps() -> None:
    ends = [0.0, 0.01, 0.021, 0.033, 0.05]
    h, one_by_one = GapHistogram(), GapHistogram()
    h.add_ends(ends, 0, len(ends), 3)
    for a, b in zip(ends, ends[1:], strict=False):
        one_by_one.add(b - a, 3)
    assert h.total == one_by_one.total == 12
    assert h.mean_s() == pytest.approx(one_by_one.mean_s(), rel=1e-12)
    assert h.std_s() == pytest.approx(one_by_one.std_s(), rel=1e-9)


def test_p0_itl_is_the_shortest_gap_not_the_empty_first_bin() -> None:
    """(P0 read 0.00 ms where every gap was ~6.5 ms: the first bin of the histogram, empty, was taken.)"""
    gaps = np.array([0.0065, 0.0066, 0.0064])
    h = GapHistogram()
    for g in gaps:
        h.add(float(g))
    got = itl_from_histogram(h, (0.0, 100.0))
    assert got["p0_itl_ms"] == pytest.approx(6.4, rel=0.005) and got["p100_itl_ms"] == pytest.approx(6.6, rel=0.005)


def _small_run(slo: dict | None = None, **output: object) -> llmsim.Results:
    sc = {
        "name": "bench-keys",
        "seed": 1,
        "model": {"name": "llama-3.1-8b"},
        "hardware": "H100-SXM",
        "workload": {
            "kind": "poisson",
            "rate_rps": 4.0,
            "num_requests": 60,
            "prompt_tokens": {"dist": "uniform", "min": 100, "max": 800},
            "output_tokens": {"dist": "uniform", "min": 20, "max": 200},
        },
        "output": output,
        **({"slo": slo} if slo is not None else {}),
    }
    return llmsim.run(scenario_from_dict(sc, "test", ROOT))


def test_a_run_carries_every_vllm_key_in_ms() -> None:
    s = _small_run().summary
    assert set(s) >= VLLM_KEYS, VLLM_KEYS - set(s)
    assert s["percentiles"] == [90.0, 99.0]
    # ms, not s: the mean TTFT figure is the requests' mean in seconds times 1000
    r = _small_run().requests
    assert s["mean_ttft_ms"] == pytest.approx(r["ttft_s"].mean() * 1e3)
    assert s["completed"] == s["requests"]["finished"]
    json.dumps(s, allow_nan=False)  # strict JSON: no NaN anywhere in what a user diffs


def test_percentiles_are_configurable() -> None:
    s = _small_run(percentiles=[50, 99.9]).summary
    assert "p99.9_ttft_ms" in s and "p50_e2el_ms" in s and "p99_ttft_ms" not in s


@pytest.mark.parametrize(
    "run",
    ["vllm-cpu/poisson-light", "vllm-cpu/shared-prefix"],
)
def test_a_measured_run_and_a_simulated_run_have_the_same_keys(run: str) -> None:
    # the committed real vLLM runs scored with the same function: a key-by-key diff lines up
    measured = pd.read_csv(ROOT / "data" / "validation" / run / "requests.csv")
    m = measured_summary(measured)
    s = _small_run().summary
    assert set(m) >= VLLM_KEYS and {k for k in m if k in VLLM_KEYS} == {k for k in s if k in VLLM_KEYS}
    assert m["completed"] == len(measured)
    assert m["mean_ttft_ms"] == pytest.approx(((measured["first_token_s"] - measured["arrival_s"]) * 1e3).mean())


def test_twin_writes_both_sides_as_vllm_bench_json(tmp_path: Path) -> None:
    from llmsim.cli import main

    run = ROOT / "data" / "validation" / "vllm-cpu" / "poisson-light"
    assert main(["twin", "--engine", "vllm", "--quiet", "--out", str(tmp_path), str(run)]) == 0
    a = json.loads((tmp_path / "bench" / "poisson-light.measured.json").read_text())
    b = json.loads((tmp_path / "bench" / "poisson-light.simulated.json").read_text())
    assert set(a) == set(b) and set(a) >= VLLM_KEYS


def test_no_latency_slo_means_no_goodput_as_in_vllm() -> None:
    # vLLM writes request_goodput: null without --goodput; llmsim without any latency target
    s = _small_run(slo={"ttft_s": None, "tbt_s": None}).summary
    assert s["request_goodput"] is None and s["request_throughput"] > 0


def test_summary_json_is_strict_json(tmp_path: Path) -> None:
    res = _small_run()
    res.summary["nan_figure"] = float("nan")  # whatever a section holds, the file stays strict
    res.write(tmp_path)
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and json.loads(text)["nan_figure"] is None


def test_run_gaps_bin_as_each_gap_alone() -> None:
    """``add_ends`` reuses the previous gap's bin while a gap is strictly inside it: the counts equal
    binning each gap on its own, on slowly changing runs and on gaps placed on the bins' edges."""
    import math
    import random

    from llmsim.gaps import _bin_of

    rng = random.Random(7)
    h = GapHistogram()  # (its class attributes read through an instance: compiled, they are descriptors)
    scale, lo_s, bins = h._scale, h.LO, h.BINS
    for _ in range(300):
        on_edges = rng.random() < 0.3
        # edge runs start at 0, where the differences of step ends keep a gap's last digits
        t, ends = (0.0 if on_edges else rng.uniform(0, 1e4)), []
        a = 10 ** rng.uniform(-6.5, 3.5)
        b = rng.uniform(-1e-3, 1e-3) * a
        k = 1
        for i in range(rng.randint(2, 200)):
            if on_edges:  # near one bin's edge: on it, or a float either side, runs of them in one bin
                edge = lo_s * math.exp((k := k if i % 4 else rng.randint(1, bins)) / scale)
                gap = edge * (1 + rng.choice([-1, 0, 1]) * 1e-15)
            else:
                gap = max(1e-9, a + b * i)
            ends.append(t)
            t += gap
        ends.append(t)
        lo = rng.randint(0, 1)
        hi = rng.randint(lo + 1, len(ends))
        want = [0] * (bins + 2)
        for i in range(lo + 1, hi):
            want[_bin_of(ends[i] - ends[i - 1], scale)] += 3
        got = GapHistogram()
        largest = got.add_ends(ends, lo, hi, 3)
        assert got.counts.tolist() == want
        assert largest == max((ends[i] - ends[i - 1] for i in range(lo + 1, hi)), default=-1.0)
