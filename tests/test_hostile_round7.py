"""Findings of the seventh hostile round (2026-12-07): the serving metrics against ``vllm bench
serve``'s definitions (vllm/benchmarks/serve.py and lib/endpoint_request_func.py, 0.32), and the
files a run writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmsim
from llmsim.cli import main
from llmsim.metrics import bench_metrics, dist_ms

ROOT = Path(__file__).resolve().parent.parent

BASE = {
    "name": "r7",
    "seed": 1,
    "model": "llama-3.1-8b",
    "hardware": "H100-SXM",
    "workload": {
        "kind": "poisson",
        "rate_rps": 5,
        "num_requests": 40,
        "prompt_tokens": {"dist": "fixed", "value": 300},
        "output_tokens": {"dist": "fixed", "value": 60},
    },
}


def test_a_speculative_verify_steps_tokens_are_one_chunk_with_one_gap() -> None:
    """vLLM streams the tokens one verify step accepted as one chunk and records one ITL for it:
    ITL read ~TPOT (2.9 ms where the chunks' gaps are 7.3), and the worst gap a third of it."""
    spec = {"method": "mtp", "k": 3, "acceptance": 0.7}
    res = llmsim.run({**BASE, "speculative": spec, "policy": {"kind": "vllm"}})
    s, req = res.summary, res.requests
    spans = float((req["finish_s"] - req["first_token_s"]).sum())
    chunks = spans / (s["mean_itl_ms"] / 1e3)  # the gaps the mean is over
    tokens_per_chunk = float((req["generated_tokens"] - 1).sum()) / chunks
    assert tokens_per_chunk == pytest.approx(1 + 0.7 + 0.7**2 + 0.7**3, rel=0.1)
    assert s["mean_itl_ms"] > 2 * s["mean_tpot_ms"]
    assert (req["tbt_max_s"] >= req["tbt_mean_s"] * 2).all()  # (a chunk's gap, not a token's)


def _frame(rows: list[tuple[str, float, float, float]]) -> pd.DataFrame:
    """Requests of 10 output tokens: (status, arrival, first token, finish)."""
    df = pd.DataFrame(rows, columns=["status", "arrival_s", "first_token_s", "finish_s"])
    df["prompt_tokens"], df["generated_tokens"] = 100, 10
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    df["tpot_s"] = (df["e2e_s"] - df["ttft_s"]) / 9
    return df


def _itl() -> dict:
    return dist_ms("itl", np.empty(0), (99.0,))


def test_duration_runs_to_the_last_answer_a_rejection_included() -> None:
    """(An all-rejected run read a duration of 0 s over requests spread across 3.7 s; vLLM's clock
    runs until every request is answered, failed ones too.)"""
    nan = float("nan")
    rejected = _frame([("rejected", t, nan, nan) for t in (0.0, 1.5, 3.72)])
    assert bench_metrics(rejected, None, _itl())["duration"] == pytest.approx(3.72)
    late = _frame([("finished", 0.0, 0.1, 1.0), ("rejected", 2.0, nan, nan)])
    got = bench_metrics(late, None, _itl())
    assert got["duration"] == pytest.approx(2.0) and got["failed"] == 1


def test_the_peaks_buckets_start_at_the_first_completed_request() -> None:
    """vLLM's one-second buckets start at the earliest successful request's send time
    (``min_start_time``), not at a rejected request before it."""
    nan = float("nan")
    rows = [("rejected", 0.0, nan, nan), ("finished", 0.65, 0.7, 0.95), ("finished", 1.05, 1.1, 1.5)]
    got = bench_metrics(_frame(rows), None, _itl())
    # from 0.65 s both requests lie in the first bucket; from 0 s each would have its own
    assert got["max_concurrent_requests"] == 2


def test_requests_after_the_horizon_are_not_failed_and_not_drawn(tmp_path) -> None:
    """Requests arriving after ``horizon_s`` were never sent: vLLM's ``failed`` counts sent requests
    only; attainment is over the sent; an unfinished request's trace slices end at the horizon,
    not at the last arrival."""
    sc = {
        **BASE,
        "workload": {**BASE["workload"], "rate_rps": 20, "num_requests": 200, "horizon_s": 5.0},
        "output": {"trace": "full"},
        "slo": {"ttft_s": 10.0},
    }
    (tmp_path / "h.json").write_text(json.dumps(sc))
    assert main(["run", str(tmp_path / "h.json"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    req = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    sent = req[req["arrival_s"] <= 5.0]
    assert len(sent) < len(req)
    assert s["failed"] == len(sent) - s["completed"]
    assert s["slo"]["attainment"] == pytest.approx(s["completed"] / len(sent))
    assert s["duration"] == pytest.approx(5.0 - float(req["arrival_s"].min()))
    events = json.loads((tmp_path / "out" / "trace.json").read_text())["traceEvents"]
    drawn = [e for e in events if e.get("cat") == "request" and e["name"].startswith("request ")]
    assert len(drawn) == len(sent)
    ends = [e["ts"] + e["dur"] for e in drawn if e["name"].endswith("(unfinished)")]
    assert ends and max(ends) == pytest.approx(5.0e6, abs=1.0)


def test_a_calibrated_profiles_overheads_are_listed_in_their_units(tmp_path) -> None:
    """(A run on a calibrated profile crashed writing its report: ``elementwise_op_fixed_s`` holds a
    figure per op; and byte overheads read as microseconds x 1e6.)"""
    sc = {**BASE, "hardware": "hardware_profiles/calibrated/H100-SXM.yaml"}
    (tmp_path / "c.json").write_text(json.dumps({**sc, "hardware": str(ROOT / sc["hardware"])}))
    assert main(["run", str(tmp_path / "c.json"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    rows = [line for line in (tmp_path / "out" / "report.md").read_text().splitlines() if "| overhead " in line]
    assert any("overhead elementwise_op_fixed_s add |" in r and " µs |" in r for r in rows)
    nontorch = next(r for r in rows if "engine_non_torch_bytes" in r)
    assert " bytes |" in nontorch and "µs" not in nontorch.split("|")[2]


def test_cpu_ranks_of_whole_nodes_talk_over_the_network_and_sockets_over_their_link() -> None:
    """A CPU profile is a whole 2-socket node: tp 2 of them are two servers (priced as two whole
    nodes each), which the socket link (UPI) does not join; two 1-socket devices of one node it does."""
    from llmsim.costmodel.comm import tp_link
    from llmsim.hardware import cpu_subset, load_profile

    node = load_profile("Xeon-8480+")
    assert node.scale_out is not None and node.scale_up is not None
    assert tp_link(node, 2) is node.scale_out
    socket = cpu_subset(node, 1, None)
    assert tp_link(socket, 2).name == node.scale_up.name
    assert tp_link(socket, 4) is socket.scale_out  # (a second node)


def test_fp8_compute_at_the_bf16_rate_is_not_slower_than_bf16() -> None:
    """TPU v5p and v6e run fp8 at their bf16 rate: the small-row loss, which scales with the weight
    bytes a FLOP streams, read fp8 up to 1.55x slower than bf16 for GPT-OSS's MXFP4 experts."""
    from llmsim.costmodel.ops import batch_shape
    from llmsim.costmodel.roofline import CostConfig, CostModel
    from llmsim.hardware import load_profile
    from llmsim.models import CATALOG

    m = CATALOG["gpt-oss-20b"]
    for hw in ("TPU-v5p", "TPU-v6e", "H100-SXM"):
        prof = load_profile(hw)
        t = {
            act: CostModel(m, prof, CostConfig(act_dtype=act, weight_dtype=m.weight_dtype)).step_time(
                batch_shape([], [1024] * 8)
            )
            for act in ("bf16", "fp8")
        }
        assert t["fp8"] <= t["bf16"] * 1.0001, (hw, t)


def test_requests_a_client_held_back_at_the_horizon_were_not_sent() -> None:
    """A concurrency cap (or a session) holds requests back: those the horizon came before were
    never sent, whatever their workload arrival (they counted as failed: 37 of 40 where one sent
    request was cut off)."""
    sc = {
        **BASE,
        "workload": {**BASE["workload"], "rate_rps": 50, "horizon_s": 1.0, "max_concurrency": 1},
    }
    res = llmsim.run(sc)
    s, req = res.summary, res.requests
    held = s["requests"]["unsent"]
    assert held > 30
    assert s["failed"] == len(req) - held - s["completed"]


def test_a_pipelines_cache_is_sized_by_the_stage_that_affords_the_fewest_blocks() -> None:
    """vLLM takes the fewest blocks any PP rank affords: with 28 layers over 3 stages (9, 10, 9) the
    stage with the most layers and the ones with the embedding or the head are different stages;
    the heaviest stage's weights over the most layers' KV read 7 % short."""
    from llmsim.build import build_model, build_pools
    from llmsim.scenario import scenario_from_dict

    sc = scenario_from_dict({**BASE, "model": "llama-3.2-3b", "cluster": {"pp": 3}}, "pp3", ROOT)
    model = build_model(sc)
    pool = build_pools(sc, model)[0]
    mem = pool.memory
    room = (
        mem["usable_bytes"]
        - mem["activation_reserved_bytes"]
        - mem["non_torch_bytes"]
        - mem["cuda_graph_estimate_bytes"]
        - mem["reserve_bytes"]
    )
    block = model.kv_bytes_per_token_per_device("bf16", 1, 3) / model.stage_layers(3) * 16
    stages = zip(model.stage_weight_bytes("bf16", 1, 3), model.stage_split(3), strict=True)
    assert pool.kv_blocks == min(int((room - w) // (block * n)) for w, n in stages)
    assert mem["replica_weights_bytes"] == pytest.approx(sum(model.stage_weight_bytes("bf16", 1, 3)))
