"""The API server in front of the engine (engine.frontend): one request at a time, measured with
real vLLM under bursts (benchmarks/vllm_cpu/frontend_burst.py, data/validation/vllm-cpu-frontend/)."""

from __future__ import annotations

import numpy as np
import pytest

import llmsim
from llmsim.cli import main
from llmsim.engine import PRESETS, VLLM_FRONTEND_INGEST
from llmsim.sim import engine_reach_s

BURST = {
    "name": "front",
    "seed": 1,
    "model": "llama-3.2-1b",
    "hardware": "H100-SXM",
    "workload": {
        "kind": "all_at_once",
        "num_requests": 400,
        "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 4},
    },
}


def test_a_request_waits_for_the_ones_the_server_handles_before_it() -> None:
    """Lindley's recursion: each starts when the one before is done, or at its own arrival; one
    the server was free for reaches the engine at its arrival exactly (its own handling is in the
    light-load output_delay_s)."""
    arrival = np.array([0.0, 0.0, 0.0, 1.0, 1.001, 5.0])
    reach = engine_reach_s(arrival, np.full(6, 1000), 2.86e-3, 2.25e-6)
    c = 2.86e-3 + 2.25e-6 * 1000
    assert reach == pytest.approx([0.0, c, 2 * c, 1.0, 1.0 + c, 5.0], abs=1e-12)
    assert reach[3] == 1.0 and reach[5] == 5.0  # (exactly: not recomputed through the sums)
    free = np.cumsum(np.full(50, 0.1))
    assert engine_reach_s(free, np.full(50, 100), 1e-3, 0.0) == free.tolist()


def test_a_burst_through_one_api_server_reaches_the_engine_one_request_at_a_time() -> None:
    """400 short requests at once on a 1B model: the engine admits them within a few steps, the
    API server hands them over one every 3 ms (vLLM 0.32's measured figures), so the last one's
    first token comes ~1.2 s after the first's; without the term all 400 start together."""
    assert PRESETS["vllm-v1"].frontend.base_s == 0  # (opt-in: engine.py says why)
    term = {"base_s": VLLM_FRONTEND_INGEST.base_s, "per_token_s": VLLM_FRONTEND_INGEST.per_token_s}
    plain = llmsim.run(BURST).requests
    queued = llmsim.run({**BURST, "engine": {"preset": "vllm-v1", "frontend": term}})
    service = VLLM_FRONTEND_INGEST.base_s + VLLM_FRONTEND_INGEST.per_token_s * 64
    req = queued.requests
    assert req["ttft_s"].max() >= 399 * service
    assert plain["ttft_s"].max() < 0.5 * 399 * service
    assert queued.summary["engine"]["frontend"] == term
    two = llmsim.run({**BURST, "cluster": {"replicas": 2}, "engine": {"preset": "vllm-v1", "frontend": term}})
    assert two.requests["ttft_s"].max() < 0.6 * req["ttft_s"].max()  # (two servers, each its own)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("fast", "engine.frontend must be a mapping"),
        ({"base_s": -1}, "engine.frontend.base_s must be a number of seconds"),
        ({"per_seq_s": 0.01}, "engine.frontend.per_seq_s: the API server's work is per request"),
    ],
)
def test_a_bad_frontend_term_is_named(tmp_path, capsys, value, fragment) -> None:
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BURST, "engine": {"preset": "vllm-v1", "frontend": value}}))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_the_engines_figures_are_the_fit_of_the_committed_bursts() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "vllm_cpu" / "frontend_fit.py"
    spec = importlib.util.spec_from_file_location("frontend_fit", path)
    assert spec is not None and spec.loader is not None
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    import pandas as pd

    table = pd.concat([fit.bursts(r) for r in fit.RUNS], ignore_index=True)
    assert len(fit.RUNS) == 2 and len(table) == 32 + 60
    base, per_token = fit.fit(table, "text")
    assert VLLM_FRONTEND_INGEST.base_s == pytest.approx(base, abs=5e-6)
    assert VLLM_FRONTEND_INGEST.per_token_s == pytest.approx(per_token, abs=5e-9)


def test_an_api_server_past_its_pace_reads_overloaded_and_a_closed_loop_client_is_refused(tmp_path, capsys) -> None:
    """500 req/s of Poisson arrivals against a server that hands over ~330 a second: its own queue
    grows, and the verdict said "backlogged ... the running batch, not the queue" (the queue it
    judges held only the engine's waiting requests). A client's max_concurrency sends through the
    feeder, where the term was ignored while the summary recorded it."""
    term = {"base_s": VLLM_FRONTEND_INGEST.base_s, "per_token_s": VLLM_FRONTEND_INGEST.per_token_s}
    wl = {"kind": "poisson", "rate_rps": 500, "num_requests": 3000}
    over = llmsim.run(
        {**BURST, "workload": {**BURST["workload"], **wl}, "engine": {"preset": "vllm-v1", "frontend": term}}
    )
    assert over.summary["saturation"]["verdict"] == "overloaded"
    import yaml

    path = tmp_path / "s.yaml"
    capped = {**BURST, "workload": {**BURST["workload"], **wl, "max_concurrency": 64}}
    path.write_text(yaml.safe_dump({**capped, "engine": {"preset": "vllm-v1", "frontend": term}}))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "engine.frontend: the API server's queue is priced for open-loop arrivals" in capsys.readouterr().err
