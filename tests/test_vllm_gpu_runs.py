"""The real vLLM GPU runs (data/validation/vllm-gpu/: four vLLM 0.19 runs, one vLLM 0.28 run) load,
their replay runs, and the RTX 4090 / RTX PRO 6000 profiles load. No accuracy thresholds: the engine
model is still changing."""

from __future__ import annotations

import gzip
import hashlib
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from script_module import load_script

from llmsim.hardware import load_profile

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "validation" / "vllm-gpu"


def _replay_module():
    return load_script("vllm_gpu_replay", ROOT / "benchmarks" / "vllm_gpu" / "replay.py")


replay = _replay_module()
RUN_KEYS = [r.key for r in replay.RUNS]


def test_data_folder_has_licence_and_readme():
    assert "MIT" in (DATA / "LICENSE-LLMServingSim.txt").read_text()
    readme = (DATA / "README.md").read_text()
    assert "5daddb21a545658d5150b535712d0494584b5278" in readme


@pytest.mark.parametrize("key", RUN_KEYS)
def test_run_data_loads(key):
    run = next(r for r in replay.RUNS if r.key == key)
    meta = run.meta()
    assert meta["vllm_version"] in ("0.19.0", "0.28.0")
    real = replay.real_requests(run)
    assert len(real) == meta["num_requests"] == 300
    assert (real["ttft_s"] > 0).all() and (real["e2e_s"] >= real["ttft_s"]).all()
    peer = replay.peer_requests(run)
    if peer is None:  # only the peer's summary table is in the project
        assert len(replay.summary_table(run)["Sim"]) == 6
    else:
        assert len(peer) == 300 and peer.notna().all().all()
    if run.workload == "requests":  # the workload file is not in the project: the requests' own lengths
        ts = pd.read_csv(run.dir / "timeseries.csv")  # the same run: its per-second log sums to them
        assert ts["prompt_throughput"].sum() == real["input_toks"].sum()
        assert ts["gen_throughput"].sum() == real["output_toks"].sum()
        return
    wl = DATA / (meta["dataset_path"] + ".gz")
    with gzip.open(wl, "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == meta["dataset_hash"]  # the run's exact workload


@pytest.mark.parametrize("key", RUN_KEYS)
def test_real_metrics_match_the_sources_own_table(key):
    """Our TTFT/TPOT/E2E of the measured run equal the 'vLLM' column of LLMServingSim's summary.txt."""
    run = next(r for r in replay.RUNS if r.key == key)
    real = replay.real_requests(run)
    if run.workload == "requests":
        # the DeepSeek run's summary (a later version of the source's tool) measures from the client's
        # arrival, put on the engine's clock by the smallest queueing lag (README)
        arrival = real["arrival_time"] + (real["queued_ts"] - real["arrival_time"]).min()
        real = real.assign(ttft_s=real["first_token_ts"] - arrival, e2e_s=real["last_token_ts"] - arrival)
    got = replay.stats(real)
    text = (run.dir / "llmservingsim_prediction" / "summary.txt").read_text()
    for label, k in (("TTFT Mean", "ttft_mean"), ("TPOT Mean", "tpot_mean"), ("Latency Mean", "e2e_mean")):
        vllm_ms = float(re.search(rf"^{label}\s+([\d.]+)", text, re.M).group(1))
        assert got[k] * 1e3 == pytest.approx(vllm_ms, abs=0.11), label
    assert replay.summary_table(run)["vLLM"]["ttft_mean"] * 1e3 == pytest.approx(
        float(re.search(r"^TTFT Mean\s+([\d.]+)", text, re.M).group(1))
    )


def test_replay_prefix_gives_finite_metrics():
    run = next(r for r in replay.RUNS if r.key == "RTX4090/Llama-3.1-8B")
    row = replay.replay(run, max_requests=60)
    assert row["requests"] == 60 and row["finished"] == 60
    # vLLM's block 0 is its null block: the recorded count less one holds KV
    assert row["kv_blocks"] == run.meta()["kv_cache"]["num_gpu_blocks"] - 1 or "reserve_gb" in row["kv"]
    for side in ("real", "llmsim"):
        assert all(math.isfinite(v) and v > 0 for v in row[side].values()), side
    assert len(replay.table([row])) == 6


def test_scenarios_follow_meta():
    for run in replay.RUNS:
        kw = run.meta()["engine_kwargs"]
        sc = replay.scenario_dict(run, Path("x.jsonl"))
        assert sc["cluster"]["tp"] == kw["tensor_parallel_size"]
        assert sc["cluster"]["replicas"] == kw["data_parallel_size"]
        assert sc["policy"]["chunk_tokens"] == kw["max_num_batched_tokens"]
        assert sc["policy"]["max_num_seqs"] == kw["max_num_seqs"]
        assert sc["kv_cache"]["block_tokens"] == run.meta().get("kv_cache", {}).get("block_size", 16)
        assert sc["kv_cache"]["prefix_caching"]
        assert sc["cluster"].get("expert_parallel", False) == kw["enable_expert_parallel"]


def test_decode_step_table_reads_the_runs_log():
    """The real decode step time comes from seconds without prompt tokens: running / tok/s."""
    run = next(r for r in replay.RUNS if r.key == "RTXPRO6000/Qwen3-32B")
    real = replay.decode_seconds(*replay.per_second_log(run))
    ts = pd.read_csv(run.dir / "timeseries.csv")
    row = ts[(ts["t"] == 31.0)].iloc[0]  # 128 running, 2176 tok/s, no prompt tokens: 17 steps/s
    assert row["prompt_throughput"] == 0 and row["running"] == 128
    assert real.loc[row.name, "step_s"] == pytest.approx(128 / 2176)


def _steps(replica: list[int], start: list[float], batch: list[int], prefill: list[int], dur: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "replica": replica,
            "start_s": start,
            "duration_s": dur,
            "batch_size": batch,
            "decode_tokens": [b - (1 if p else 0) for b, p in zip(batch, prefill, strict=True)],
            "prefill_tokens": prefill,
        }
    )


def test_llmsims_run_is_read_as_the_log_reads_a_run():
    """As vLLM's stat logger builds the log: a step counts in the second it ends, running is the
    requests after the second's last step, a prompt counts in the second its first token came."""
    # 0.125 s steps of 10 sequences from 0.0 (ends exact in binary); step 20 carries a prompt chunk
    n = 25
    steps = _steps([0] * n, [0.125 * i for i in range(n)], [10] * n, [0] * 20 + [256] + [0] * 4, 0.125)
    requests = pd.DataFrame({"first_token_s": [2.625], "prompt_tokens": [300]})
    log = replay.sim_per_second_log(steps, requests)
    # ends 0.125 .. 3.125: 7 in second 0, 8 in seconds 1 and 2 (one with the chunk: 9 decodes and
    # the finished prompt's first token), 2 in 3
    assert list(log["gen_throughput"]) == [70, 80, 80, 20]
    assert list(log["running"]) == [10, 10, 10, 0]  # the last step has no next one: the run is over
    assert list(log["prompt_throughput"]) == [0, 0, 300, 0]
    sim = replay.decode_seconds(log, 1)
    assert list(sim["step_s"]) == pytest.approx([10 / 70, 10 / 80])  # second 2 has a prompt: left out
    run = next(r for r in replay.RUNS if r.key == "RTXPRO6000/Qwen3-32B")
    rows = replay.decode_step_rows(run, log)
    low = next(r for r in rows if r["decoding per rank"] == "1-15")
    assert low["llmsim seconds"] == 2 and low["llmsim_ms"] == pytest.approx(1e3 * (10 / 70 + 10 / 80) / 2)


def test_a_rank_that_empties_reads_zero_running():
    """A gap before a rank's next step means it emptied: the second before reads 0 running, not the
    batch of new arrivals it starts later."""
    steps = _steps([0] * 4, [0.0, 0.25, 0.5, 5.0], [3, 2, 1, 4], [0] * 4, 0.25)
    log = replay.sim_per_second_log(steps, pd.DataFrame({"first_token_s": [], "prompt_tokens": []}))
    assert list(log["running"]) == [0, 0]


def test_data_parallel_ranks_are_read_as_one_log():
    """Two lock-stepped ranks: the log's running and generated tokens are their totals, the step the same."""
    steps = _steps([0, 1] * 12, [0.125 * (i // 2) for i in range(24)], [8, 4] * 12, [0] * 24, 0.125)
    sim = replay.decode_seconds(
        replay.sim_per_second_log(steps, pd.DataFrame({"first_token_s": [], "prompt_tokens": []})), 2
    )
    # second 0: 7 steps a rank end in it (0.125-0.875), 12 sequences a step; second 1 ends the run
    # (its last steps have no next: 0 running, not a decode second)
    assert list(sim["per_rank"]) == [6.0] and list(sim["step_s"]) == pytest.approx([12 / 84])


@pytest.mark.parametrize("name", ["RTX-4090", "RTX-PRO-6000"])
def test_profiles_load_and_are_dense(name):
    p = load_profile(name)
    assert p.name == name and p.family == "gpu"
    assert "dense" in p.peak_flops["bf16"].source.lower()
    assert "ASSUMPTION" in p.price_per_hour_usd.source
    bf16 = p.peak("bf16")
    for dt, factor in (("fp8", 2), ("int8", 2), ("int4", 4), ("fp4", 4)):
        if dt in p.peak_flops:
            assert p.peak_flops[dt].value <= factor * bf16 * 1.02, dt
    assert p.scale_up is not None and p.host_link.bandwidth_bytes_per_s.value > 0


def test_profile_figures():
    rtx = load_profile("RTX-4090")
    assert rtx.peak("bf16") == pytest.approx(165.2e12)  # FP32-accumulate, not the 330.3 FP16-accumulate rate
    meta = (DATA / "RTX4090" / "Llama-3.1-8B" / "meta.json").read_text()
    assert str(int(rtx.memory_bytes)) in meta  # the run's recorded device_total_memory_bytes
    pro = load_profile("RTX-PRO-6000")
    assert pro.bandwidth == pytest.approx(1597e9)
    assert pro.memory_bytes > 96e9


def test_requests_run_replays_from_its_own_requests(tmp_path):
    """The vLLM 0.28 DeepSeek run (no workload file in the project) replays from its requests'
    arrivals and lengths, with the recorded KV blocks of 64 tokens and its derived model config:
    the catalog's DeepSeek-V3.2 with 16 layers and 64 routed experts."""
    from llmsim.models import CATALOG, from_hf_config

    run = next(r for r in replay.RUNS if r.workload == "requests")
    derived = from_hf_config(run.dir / run.model["hf_config"])
    base = CATALOG["deepseek-v3.2"]
    assert (derived.num_layers, derived.num_experts) == (16, 64)
    for field in ("hidden_size", "kv_lora_rank", "q_lora_rank", "index_topk", "index_n_heads", "experts_per_token"):
        assert getattr(derived, field) == getattr(base, field), field
    row = replay.replay(run, max_requests=40, out=tmp_path)
    assert row["requests"] == row["finished"] == 40
    assert row["kv_blocks"] == run.meta()["kv_cache"]["num_gpu_blocks"] - 1
    assert row["peer"] is None  # a cut replay is not compared with the peer's whole-run summary
    # llmsim's request i is the real bench-i: the same lengths, matched by id
    real = replay.real_requests(run).iloc[:40]
    sim = pd.read_csv(tmp_path / f"{run.key.replace('/', '_')}_llmsim_requests.csv").sort_values("id")
    assert real["request_id"].tolist() == [f"bench-{i}" for i in sim["id"]]
    assert real["input_toks"].tolist() == sim["prompt_tokens"].tolist()
    assert real["output_toks"].tolist() == sim["output_tokens"].tolist()
