"""vLLM's own device memory (engine.py's memory terms, build.kv_blocks): fitted on public vLLM 0.19
start-up logs, tested on the held-out ones and on the RTX 4090 run's recorded KV block count."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from script_module import load_script

from llmsim.engine import (
    PRESETS,
    VLLM_019_MEMORY,
    VLLM_FULL_GRAPH_BYTES_PER_HEAD_ROW,
    VLLM_GRAPH_BYTES_PER_LAYER,
    VLLM_NON_TORCH_BYTES,
    GraphPlan,
    for_hardware,
    graph_plan,
    vllm_capture_sizes,
)
from llmsim.errors import UserError
from llmsim.hardware import load_profile

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    return load_script("vllm_memory", ROOT / "benchmarks" / "vllm_memory.py")


def test_the_019_terms_carry_the_fit():
    bench = _bench()
    terms = bench.fit(bench.load())
    v = VLLM_019_MEMORY
    assert v["sampler_profile_bytes_per_logit"] == pytest.approx(terms["sampler_profile_bytes_per_logit"], abs=0.01)
    assert v["non_torch_bytes"] == pytest.approx(terms["non_torch_bytes"], rel=1e-3)
    assert v["non_torch_bytes_tp"] == pytest.approx(terms["non_torch_bytes_tp"], rel=1e-3)
    assert PRESETS["ideal"].sampler_profile_bytes_per_logit == PRESETS["ideal"].non_torch_bytes == 0.0
    assert PRESETS["ideal"].cuda_graph_bytes_per_layer == PRESETS["ideal"].cuda_graph_full_bytes_per_head_row == 0.0


def test_the_preset_and_the_hopper_profiles_carry_the_030_readings():
    bench = _bench()
    fit = bench.fit_030(bench.load_030())
    default, hopper = fit["default"], fit["hopper"]
    # vllm-v1's own terms: the L4's and the A100's readings, which a GPU without its own takes
    assert pytest.approx(default["non_torch_bytes"], rel=1e-6) == VLLM_NON_TORCH_BYTES
    assert pytest.approx(default["cuda_graph_bytes_per_layer"], rel=1e-5) == VLLM_GRAPH_BYTES_PER_LAYER
    assert pytest.approx(default["cuda_graph_full_bytes_per_head_row"], rel=1e-3) == VLLM_FULL_GRAPH_BYTES_PER_HEAD_ROW
    for name in ("L4", "A100-40GB", "RTX-A6000", "B200"):
        spec = for_hardware(PRESETS["vllm-v1"], load_profile(name))
        assert spec.non_torch_bytes == spec.non_torch_bytes_tp == VLLM_NON_TORCH_BYTES
        assert spec.cuda_graph_bytes_per_layer == VLLM_GRAPH_BYTES_PER_LAYER
        assert spec.cuda_graph_full_bytes_per_head_row == VLLM_FULL_GRAPH_BYTES_PER_HEAD_ROW
    # the GH200's, carried by every Hopper profile
    for name in ("GH200", "H100-SXM", "H100-PCIe", "H200", str(ROOT / "hardware_profiles/calibrated/H100-SXM.yaml")):
        spec = for_hardware(PRESETS["vllm-v1"], load_profile(name))
        assert spec.non_torch_bytes == pytest.approx(hopper["non_torch_bytes"], rel=1e-6)
        assert spec.cuda_graph_bytes_per_layer == pytest.approx(hopper["cuda_graph_bytes_per_layer"], rel=1e-5)
        assert spec.cuda_graph_full_bytes_per_head_row == pytest.approx(
            hopper["cuda_graph_full_bytes_per_head_row"], rel=1e-3
        )
    # an engine that sets a number keeps it over the GPU's
    own = for_hardware(replace(PRESETS["vllm-v1"], non_torch_bytes=1.0), load_profile("GH200"))
    assert own.non_torch_bytes == 1.0 and own.non_torch_bytes_tp == pytest.approx(hopper["non_torch_bytes"])


def test_030_start_ups_are_predicted():
    bench = _bench()
    rows = bench.load_030()
    table = bench.predict_030(rows)
    fit = table[table.split == "fit"]
    assert set(fit.model) == {"Qwen3-8B"} and set(fit.cache) == {"warm"}
    assert set(table[table.split == "held-out"].model) >= {"Qwen3-14B", "Qwen3-32B", "Qwen2.5-72B-Instruct"}
    warm = table[(table.split == "held-out") & (table.cache == "warm")]
    # the torch peak of a dense model is its forward pass alone (no sampler, no logits): within 5 %
    dense = warm[~warm.model.str.contains("A3B")]
    assert len(dense) == 2 and ((dense.pred_peak_gib / dense.peak_gib - 1).abs() < 0.05).all()
    # the KV cache of every held-out warm start: within 2.5 % (0.2-1.8 %)
    assert len(warm) == 4 and warm.kv_err_pct.abs().max() < 2.5
    # vLLM's graph estimate, every held-out start: within 0.15 GiB (the 72B pair's 0.43 read 0.57)
    held = table[table.split == "held-out"]
    assert (held.pred_graphs_gib - held.graphs_gib).abs().max() < 0.15
    # a cold compile cache leaves less (0.5-1.6 GiB): not modelled, llmsim reads those high or low
    cold = table[(table.split == "held-out") & (table.cache == "cold")]
    assert len(cold) == 9 and cold.kv_err_pct.abs().max() > 30


def test_held_out_logs_are_predicted():
    bench = _bench()
    rows = bench.load()
    table = bench.predict(rows, bench.fit(rows))
    held = table[table.split == "held-out"]
    assert len(held) >= 15 and set(rows[rows.split == "fit"].model) & set(rows[rows.split == "held-out"].model) == set()
    dense = held[(held.by == "sampler") & (held.vocab >= 100_000) & ~held.moe]
    # the vocabulary sets the peak of the dense models: within 8 % of every held-out one
    assert len(dense) >= 10 and dense.peak_err_pct.abs().max() < 8.0
    # MoE models: the fused-MoE kernel's scratch, kept between calls, sits under the peak (from
    # vLLM's workspace shapes, nothing fitted): within 8 % where the catalog has the architecture
    moe = held[held.moe & (held.moe_ws_gib > 0)]
    assert len(moe) == 2 and moe.peak_err_pct.abs().max() < 8.0
    # the KV cache it leaves: within 4.5 % on every held-out row
    assert held.kv_err_pct.abs().max() < 4.5
    # where the forward pass sets the peak (a small vocabulary: CodeLlama-7B, Mixtral), one layer's
    # larger half, not both halves summed (+30 % on CodeLlama-7B): within 8 %
    forward = held[held.by == "forward"]
    assert len(forward) == 2 and forward.peak_err_pct.abs().max() < 8.0


def test_the_rtx4090_run_sizes_closer_to_vllm():
    blocks = _bench().rtx4090_blocks()
    real = blocks["vLLM 0.19 (recorded)"]
    v1, ideal = blocks["llmsim, engine vllm-v1"], blocks["llmsim, engine ideal"]
    assert abs(v1 / real - 1) < 0.10 < ideal / real - 1  # 2,815 and 3,007 against 2,588


def test_no_reservation_where_it_was_not_measured():
    for hw in ("Xeon-8480+", "TPU-v5e"):
        spec = for_hardware(PRESETS["vllm-v1"], load_profile(hw))
        assert spec.reserved_bytes(1e6, 2e5, 256, 8192, 128256, 1, moe_workspace=5e8) == (1.2e6, 0.0, 0.0, 0.0)
        assert spec.cuda_graph_estimate_bytes(32, 32, graph_plan(vllm_capture_sizes(512), 1024)) == 0.0
    old = for_hardware(replace(PRESETS["vllm-v1"], **VLLM_019_MEMORY), load_profile("H100-SXM"))
    peak, sampler, _, non_torch = old.reserved_bytes(1e6, 2e5, 4096, 2048, 128256, 2)
    assert sampler == pytest.approx(old.sampler_profile_bytes_per_logit * 2048 * 128256)  # rows capped at the tokens
    assert peak == sampler and non_torch == old.non_torch_bytes_tp == VLLM_019_MEMORY["non_torch_bytes_tp"]
    assert (
        old.cuda_graph_estimate_bytes(32, 32, GraphPlan(51, 51, 496)) == 0.0
    )  # 0.19 subtracted nothing for its graphs
    new = for_hardware(PRESETS["vllm-v1"], load_profile("H100-SXM"))
    peak, sampler, _, non_torch = new.reserved_bytes(1e6, 2e5, 4096, 2048, 128256, 2)
    assert (peak, sampler) == (1e6, 0.0)  # the forward's activations alone: the logits come after them
    # every PIECEWISE graph per layer, and the FULL graphs beyond the two vLLM captures per head and row
    expected = 362593 * 32 * 51 + 11.889 * 32 * 32 * 49 * 496
    assert new.cuda_graph_estimate_bytes(32, 32, GraphPlan(51, 51, 496)) == pytest.approx(expected)


def test_a_sampler_warm_up_that_cannot_fit_is_named():
    import llmsim

    sc = {
        "name": "huge-batch",
        "model": "llama-3.1-8b",
        "hardware": "RTX-4090",
        "engine": {"preset": "vllm-v1", **VLLM_019_MEMORY},  # vLLM 0.19's sampler warm-up
        "policy": {"kind": "vllm", "chunk_tokens": 16384, "max_batch_tokens": 16384, "max_num_seqs": 16384},
        "workload": {
            "kind": "poisson",
            "rate_rps": 1,
            "num_requests": 2,
            "prompt_tokens": {"dist": "fixed", "value": 10},
            "output_tokens": {"dist": "fixed", "value": 10},
        },
    }
    with pytest.raises(UserError, match="sampler warm-up .* lower policy.max_num_seqs"):
        llmsim.run(sc)


def test_graph_plan_follows_vllms_capture():
    sizes = vllm_capture_sizes(512)
    assert graph_plan(sizes, 256) == GraphPlan(51, 35, 248)  # "PIECEWISE=51 (largest=512), FULL=35 (largest=256)"
    assert graph_plan(sizes, 1024) == GraphPlan(51, 51, 496)
    assert graph_plan(vllm_capture_sizes(128), 128) == GraphPlan(19, 19, 120)
    assert graph_plan((), 256) == GraphPlan(0, 0, 0)  # eager: none
    assert graph_plan((1,), 256) == GraphPlan(1, 1, 0)


def test_a_fitted_vllm_profile_keeps_the_memory_terms(tmp_path):
    # calibrate --serving fits time, not memory: a profile of a vLLM deployment (defaults: vllm)
    # reserves what the preset does unless it says otherwise
    from llmsim.engine import load_engine

    (tmp_path / "engine.yaml").write_text("defaults: vllm\nasync_scheduling: true\n")
    spec = load_engine("engine.yaml", tmp_path, "test")
    v = PRESETS["vllm-v1"]
    assert spec.sampler_profile_bytes_per_logit == v.sampler_profile_bytes_per_logit
    assert (spec.non_torch_bytes, spec.non_torch_bytes_tp) == (v.non_torch_bytes, v.non_torch_bytes_tp)
    assert spec.moe_workspace_persists
    (tmp_path / "other.yaml").write_text("async_scheduling: true\nnon_torch_bytes: 1000\n")
    other = load_engine("other.yaml", tmp_path, "test")
    assert other.non_torch_bytes == 1000.0 and other.sampler_profile_bytes_per_logit == 0.0


def test_each_pool_takes_its_own_gpus_memory_terms():
    # a disaggregated scenario's pools on different GPUs: each its GPU's figures, whatever the
    # top-level hardware says (H100 prefill: the Hopper profiles' 0.90 GiB; A100 decode: vllm-v1's)
    from llmsim.build import build_model, build_pools
    from llmsim.scenario import load_scenario

    for top in ("H100-SXM", "A100-SXM-80GB"):
        sc = load_scenario(ROOT / "scenarios/heterogeneous_pools.yaml", overrides={"hardware": top})
        prefill, decode = build_pools(sc, build_model(sc))
        assert (prefill.hw.name, decode.hw.name) == ("H100-SXM", "A100-SXM-80GB")
        assert prefill.memory["non_torch_bytes"] == pytest.approx(966367642)
        assert decode.memory["non_torch_bytes"] == VLLM_NON_TORCH_BYTES
        assert prefill.memory["cuda_graph_estimate_bytes"] > decode.memory["cuda_graph_estimate_bytes"]
