"""The twin's plumbing on a tiny model: engine and simulator see the same workload and scheduler,
the comparison frame and files are well formed, and the profile cpubench writes is valid.
(Timing accuracy is a benchmark: benchmarks/bench_twin.py.)"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from llmsim.errors import UserError
from llmsim.hardware import load_profile
from llmsim.models import ModelSpec
from llmsim.reference import cpubench, twin
from llmsim.reference.engine import ReferenceEngine
from llmsim.reference.model import Model, PagedKVCache, greedy_generate, init_weights
from llmsim.schedulers import SchedulerConfig

TINY = ModelSpec("tiny", 32, 64, 2, 4, 2, 8, 61, weight_dtype="fp32")


@pytest.mark.parametrize("policy", ["traditional", "chunked"])
def test_engine_emits_plain_greedy_tokens_under_its_scheduler(policy):
    """Whatever the scheduler does (batching, chunking, preemption by recompute), every request
    gets exactly the tokens greedy decoding of its prompt alone gives."""
    w = init_weights(TINY, 0, np.float64)
    eng = ReferenceEngine(w, policy, SchedulerConfig(max_num_seqs=4, chunk_tokens=16), 24, 4, clock="cpu")
    rng = np.random.default_rng(0)
    reqs = [eng.new_request(i, i * 1e-4, int(rng.integers(5, 30)), int(rng.integers(1, 10))) for i in range(12)]
    prompts = [list(r.payload) for r in reqs]
    out = eng.run(reqs)
    assert sum(r.preemptions for r in reqs) > 0  # the small cache forces preemptions
    for r, p in zip(reqs, prompts, strict=True):
        assert r.status == "finished"
        assert r.payload[len(p) :] == greedy_generate(Model(w, PagedKVCache(TINY, 4, np.float64)), p, r.output_tokens)
        assert r.arrival_s <= r.first_token_s <= r.finish_s
    assert (out.steps["duration_s"] >= out.steps["forward_s"]).all()
    assert out.steps["prefill_tokens"].sum() >= sum(r.prompt_tokens for r in reqs)
    assert eng.kv.used == 0


def fake_profile(tmp_path: Path) -> Path:
    """A local-cpu-shaped profile with made-up efficiencies (no benchmarking in unit tests)."""
    data = yaml.safe_load(Path("hardware_profiles/EPYC-9654.yaml").read_text())
    data["name"] = "local-cpu-test"
    data["memory_capacity_bytes"]["value"] = 4e9  # a small KV pool: the block manager lists every block
    path = tmp_path / "local-cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_twin_compares_the_same_requests(tmp_path, monkeypatch):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "vocab_size": 61, "torch_dtype": "float32"}))  # fmt: skip
    sc = yaml.safe_load(Path("scenarios/twin_small.yaml").read_text())
    sc["model"]["hf_config"] = str(cfg)
    sc["workload"]["num_requests"] = 6
    sc["workload"]["prompt_tokens"] = {"dist": "uniform", "min": 4, "max": 20}
    sc["workload"]["output_tokens"] = {"dist": "uniform", "min": 2, "max": 6}
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(sc))
    result = twin.run_twin(path, fake_profile(tmp_path))
    f = result.requests
    assert len(f) == 6 and f["id"].tolist() == list(range(6))
    for m in twin.METRICS:
        assert (f[f"{m}_meas"].dropna() > 0).all()
        assert np.allclose(f[f"{m}_err"], f[f"{m}_pred"] / f[f"{m}_meas"] - 1, equal_nan=True)
    assert set(result.summary["error"]) <= set(twin.METRICS)
    steps = pd.DataFrame({"step": ["a"], "predicted_s": [1.1], "measured_s": [1.0], "error": [0.1]})
    paths = twin.write(tmp_path / "out", result, steps)
    assert all(p.exists() for p in paths)
    summary = json.loads((tmp_path / "out" / "twin_summary.json").read_text())
    assert summary["steps"]["median_abs_error"] == pytest.approx(0.1)


def test_twin_rejects_unsupported_policy(tmp_path):
    sc = yaml.safe_load(Path("scenarios/twin_small.yaml").read_text())
    sc["model"]["hf_config"] = str(Path("scenarios/twin_small_config.json").resolve())
    sc["policy"]["kind"] = "static"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(sc))
    with pytest.raises(UserError, match="traditional and chunked"):
        twin.run_twin(path, fake_profile(tmp_path))


def test_fit_gemm_recovers_a_known_roofline():
    """Times generated from a roofline with known half_m and memory rate are fitted back."""
    peak, bw, half, frac = 1e11, 1e10, 24.0, 0.5
    rows = []
    for m in (1, 2, 4, 8, 16, 64, 256, 1024):
        for n, k in ((512, 512), (2048, 512)):
            t = max(2 * m * n * k / (peak * m / (m + half)), 4 * (m * k + k * n + m * n) / (bw * frac))
            rows.append({"m": m, "n": n, "k": k, "s": t})
    rows.append({"m": 4096, "n": 4096, "k": 4096, "s": 2 * 4096**3 / peak})  # the best shape sets the peak
    got_peak, got_half, got_frac = cpubench.fit_gemm(rows, bw)
    assert got_peak == pytest.approx(peak)
    assert got_half == pytest.approx(half, rel=0.1)
    assert got_frac == pytest.approx(frac, rel=0.1)


def test_profile_section_values_are_replaced_not_their_sources():
    prof = {
        "efficiency": {"gemm_half_m": {"value": 1.0, "source": "x"}},
        "overheads": {"kernel_fixed_s": {"value": 2.0, "source": "y"}},
    }
    out = cpubench._with_values(prof, {"gemm_half_m": 5.0, "kernel_fixed_s": 3.0})
    assert out["efficiency"]["gemm_half_m"] == {"value": 5.0, "source": "x"}
    assert out["overheads"]["kernel_fixed_s"]["value"] == 3.0
    assert prof["efficiency"]["gemm_half_m"]["value"] == 1.0  # the input is not mutated


@pytest.mark.slow
def test_measure_and_write_produces_a_valid_local_cpu_profile(tmp_path):
    path = cpubench.measure_and_write(tmp_path / "local-cpu.yaml", quick=True)
    prof = load_profile(path)
    assert prof.name == "local-cpu" and prof.family == "cpu"
    assert all("measured by llmsim calibrate --local-cpu on" in f.source for f in [prof.peak_flops["fp32"]])
    assert "measured by llmsim calibrate --local-cpu" in prof.efficiency.gemm_half_m.source
