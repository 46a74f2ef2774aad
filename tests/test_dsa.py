"""DeepSeek sparse attention (DeepSeek-V3.2): the lightning indexer and MLA over the keys it keeps.

The NumPy reference model's counted FLOPs and bytes against the op list, its chunked and stepped
runs against each other (the indexer's choice depends on a query's own logits only), the sparse
attention against dense MLA where it keeps every key, the KV cache per token, the HF importer.
"""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_mla import MLA, V3
from test_reference_counters import FP32, MIXES, assert_counts_match, run_counted
from test_reference_model import chunked_logits, tokens

from llmsim.costmodel import CostConfig, CostModel
from llmsim.costmodel.ops import attention_ops, batch_shape, model_batch_shape, step_ops
from llmsim.errors import UserError
from llmsim.hardware import load_profile
from llmsim.models import CATALOG, from_hf_config
from llmsim.reference.weights import init_weights

# a tiny DSA model: 4 indexer heads of 16 (rope 8 of them), each query keeps its 6 best keys
DSA = MLA.with_(name="tiny-dsa", index_n_heads=4, index_head_dim=16, index_topk=6)
V32 = CATALOG["deepseek-v3.2"]  # DeepSeek-V3 with index_n_heads 64, index_head_dim 128, index_topk 2048


@pytest.mark.parametrize("mix", list(MIXES))
def test_reference_dsa_counts_equal_cost_model(mix):
    chunks, decodes = MIXES[mix]
    assert_counts_match(DSA, run_counted(DSA, chunks, decodes), model_batch_shape(DSA, chunks, decodes), cfg=FP32)


def test_the_indexer_keeps_min_context_topk_keys_per_query():
    ops = attention_ops(DSA, model_batch_shape(DSA, [(20, 30)], [3, 40]), FP32)
    topk = [op for op in ops if op.name == "dsa_topk"]  # the prefill's and the decodes'
    # prefill: query i of the chunk sees 31 + i keys and keeps 6; decode: 4 and 41 keys, keeps 4 and 6
    assert sum(op.bytes_written for op in topk) == 4.0 * (20 * 6 + 4 + 6)
    assert sum(op.flops for op in topk) == sum(31 + i for i in range(20)) + 4 + 41
    assert "mla_kv_b_proj" not in {op.name for op in ops}  # every token attends in the absorbed form


def test_chunked_prefill_equals_stepping_token_by_token():
    w = init_weights(DSA, 0, np.float64)
    toks = tokens(24, DSA.vocab_size)
    full = chunked_logits(w, toks, [])
    stepped = chunked_logits(w, toks, [10, *range(11, 24)])
    assert np.abs(stepped - full).max() < 1e-9


def test_keeping_every_key_is_dense_mla():
    w = init_weights(DSA.with_(index_topk=10**6), 0, np.float64)
    toks = tokens(20, DSA.vocab_size)
    sparse = chunked_logits(w, toks, [8])
    dense = chunked_logits(replace(w, spec=MLA), toks, [8])  # (the indexer's weights unused)
    assert np.abs(sparse - dense).max() < 1e-9
    few = chunked_logits(init_weights(DSA, 0, np.float64), toks, [8])  # 6 of up to 20 keys: not dense
    assert np.abs(few - dense).max() > 1e-6


def test_kv_cache_holds_the_latent_and_the_index_key():
    # vLLM's DeepseekV32IndexerCache: 128 FP8 values + one fp32 scale = 132 bytes per token and layer
    assert V32.index_cache_row_bytes == 132
    assert V32.kv_bytes_per_token("bf16") == 61 * (576 * 2 + 132) == 78324
    assert V32.kv_bytes_per_token_per_device("fp8", 8, 1) == 61 * (576 + 132)  # replicated on every TP rank


def test_sparse_attention_pays_at_long_contexts_not_short():
    hw, cfg = load_profile("H200"), CostConfig(tp=8, weight_dtype="fp8", act_dtype="fp8", kv_dtype="fp8")
    dense, sparse = CostModel(V3, hw, cfg), CostModel(V32, hw, cfg)
    for ctx, faster in ((1_000, False), (64_000, True)):
        d = dense.step_time(batch_shape([], [ctx] * 32))
        s = sparse.step_time(model_batch_shape(V32, [], [ctx] * 32))
        assert (s < d) is faster, (ctx, d, s)
    names = {op.name for op in step_ops(V32, model_batch_shape(V32, [(512, 0)], [100]), cfg)}
    assert {"dsa_index_q_proj", "dsa_index_logits_prefill", "dsa_index_logits_decode", "dsa_topk"} <= names


def test_hf_importer_reads_a_deepseek_v32_config(tmp_path):
    from test_mla import V3_CONFIG

    path = tmp_path / "config.json"
    dsa = {"index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048}
    path.write_text(json.dumps({**V3_CONFIG, "model_type": "deepseek_v32", **dsa}))
    spec = from_hf_config(path)
    assert spec.with_(name=V32.name, source=V32.source) == V32
    path.write_text(json.dumps({**V3_CONFIG, "model_type": "deepseek_v32"}))
    with pytest.raises(UserError, match="missing key 'index_n_heads': a DeepSeek sparse-attention config"):
        from_hf_config(path)
    path.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "vocab_size": 100,
                **dsa,
            }
        )
    )
    with pytest.raises(UserError, match="index_topk: DeepSeek sparse attention .* outside a DeepSeek model"):
        from_hf_config(path)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"index_topk": 8}, "index_n_heads: DeepSeek sparse attention needs index_n_heads, index_head_dim"),
        ({"index_n_heads": 2, "index_head_dim": 192, "index_topk": 8}, "index_head_dim: 192 is not a multiple of 128"),
        ({"index_n_heads": 2, "index_head_dim": 16, "index_topk": 8, "q_lora_rank": 0}, "q_lora_rank"),
        ({"index_n_heads": 2, "index_head_dim": 4, "index_topk": 8}, "index_head_dim: 4 is narrower"),
    ],
)
def test_model_spec_refuses_an_incomplete_indexer(changes, match):
    with pytest.raises(UserError, match=match):
        MLA.with_(**changes)


def test_the_indexer_weights_count_and_are_replicated():
    # vLLM's Indexer: wq_b [1536, 64 x 128], wk [7168, 128], weights_proj [7168, 64], the key's LayerNorm
    per_layer = 1536 * 64 * 128 + 7168 * (128 + 64) + 2 * 128
    assert V32.indexer_params() == per_layer
    assert V32.total_params() - V3.total_params() == 61 * per_layer  # ~0.85B
    w = init_weights(DSA, 0, np.float32)
    held = sum(w.layers[0][k].size for k in ("w_idx_q", "w_idx_k", "w_idx_w", "g_idx_k", "b_idx_k"))
    assert held == DSA.indexer_params()
    tp8, tp1 = V32.weight_bytes_per_device("fp8", 8, 1), V32.weight_bytes_per_device("fp8", 1, 1)
    assert tp8 - tp1 / 8 > 7 / 8 * 61 * per_layer  # every rank holds the whole indexer


def test_catalog_deepseek_v32_is_v3_with_the_indexer(capsys):
    from llmsim.cli import main

    assert V32.with_(name=V3.name, source=V3.source, index_n_heads=0, index_head_dim=0, index_topk=0) == V3
    assert V32.total_params() - V3.total_params() == V3.num_layers * V32.indexer_params()
    assert main(["models", "deepseek-v3.2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sparse_attention_topk"] == 2048


def test_twin_prices_a_dsa_model_with_its_kept_keys(tmp_path):
    """`llmsim twin` on a tiny DeepSeek-V3.2-shaped config: the reference engine's step log and
    the step grid price DSA with the model's windows (each crashed before: a shape without the
    kept-key aggregates is refused rather than priced as dense MLA)."""
    import pandas as pd
    import yaml
    from test_mla import V3_CONFIG

    from llmsim.calibration.enginefit import FP32 as GRID_CONFIG
    from llmsim.cli import main

    root = Path(__file__).resolve().parents[1]
    tiny = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4}
    tiny |= {"vocab_size": 97, "kv_lora_rank": 16, "q_lora_rank": 24, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8}
    tiny |= {"v_head_dim": 12, "moe_intermediate_size": 32, "intermediate_size": 80, "n_routed_experts": 4}
    tiny |= {"num_experts_per_tok": 2, "first_k_dense_replace": 1, "torch_dtype": "float32", "n_group": 1}
    dsa = {"model_type": "deepseek_v32", "index_n_heads": 4, "index_head_dim": 128, "index_topk": 16}
    (tmp_path / "config.json").write_text(json.dumps({**V3_CONFIG, **tiny, **dsa}))
    sc = yaml.safe_load((root / "scenarios/twin_small.yaml").read_text())
    sc["model"]["hf_config"] = str(tmp_path / "config.json")
    sc["workload"] |= {"num_requests": 3, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 40}}
    sc["workload"]["output_tokens"] = {"dist": "uniform", "min": 2, "max": 4}
    (tmp_path / "twin.yaml").write_text(yaml.safe_dump(sc))
    hw = yaml.safe_load((root / "hardware_profiles/EPYC-9654.yaml").read_text())
    hw["name"], hw["memory_capacity_bytes"]["value"] = "local-cpu-test", 4e9
    (tmp_path / "cpu.yaml").write_text(yaml.safe_dump(hw))
    twin = ["twin", str(tmp_path / "twin.yaml"), "--profile", str(tmp_path / "cpu.yaml"), "--quick"]
    assert main([*twin, "--skip-grid", "--raw-clock", "--out", str(tmp_path / "run")]) == 0
    assert main([*twin, "--steps-only", "--out", str(tmp_path / "grid")]) == 0
    grid = pd.read_csv(tmp_path / "grid" / "twin_steps.csv")
    model = from_hf_config(tmp_path / "config.json")
    # the reference engine's numerics (fp32 weights, activations and KV cache), as the grid prices them
    cost = CostModel(model, load_profile(str(tmp_path / "cpu.yaml")), GRID_CONFIG)
    row = grid[grid["kind"] == "decode"].iloc[-1]
    b, c = int(row["tokens_or_batch"]), int(row["context"])
    assert c > 16  # past index_topk: dense MLA would read every key
    assert row["predicted_s"] == pytest.approx(cost.step_time(batch_shape([], [c] * b, None, local_window=16)))


def test_sparse_kernels_against_flashmla_published_rates():
    """FlashMLA's published rates on H800 SXM5 (compute and bandwidth of an H100 SXM): sparse
    decode 410 TFLOP/s at batch 128, 128 heads, s_q 2, top-2048 with the FP8 cache, computing in
    bf16 (docs/20250929-hopper-fp8-sparse-deep-dive.md); sparse prefill "up to 640 TFlops"
    (README, 2025.09.29). FLOPs as the blog counts them: 2 · h_q · s_q · topk · (576 + 512)."""
    cm = CostModel(V32, load_profile("H100-SXM"), CostConfig(act_dtype="fp8", kv_dtype="fp8"))

    def rate(shape, name):
        op = next(o for o in cm.ops(shape) if o.name == name)
        t = cm.price(op)
        return op.flops / max(t.compute_s, t.memory_s) / 1e12, op

    decode, op = rate(batch_shape([], [32768] * 128, None, tokens_per_decode=2, local_window=2048), "attention_decode")
    assert op.dtype == "bf16" and op.flops == 2 * 128 * 2 * 128 * 2048 * (576 + 512)
    assert decode == pytest.approx(410, rel=0.25)
    prefill, _ = rate(batch_shape([(4096, 16384)], [], None, local_window=2048), "attention_prefill")
    assert prefill == pytest.approx(640, rel=0.25)
