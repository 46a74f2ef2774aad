"""Multi-head latent attention (DeepSeek-V2/V3) and DeepSeek-V3 in the catalog (issue #17 items 1-2).

The op list against first principles (the formulas of docs/costmodel.md), the NumPy reference
model's counted FLOPs and bytes against the op list, the absorbed decode against the expanded
prefill numerically, the KV cache per token and per device, and the HF importer.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from test_reference_counters import FP32, MIXES, NAIVE, assert_counts_match, run_counted
from test_reference_model import chunked_logits, tokens

import llmsim
from llmsim.costmodel.ops import OpConfig, attention_ops, batch_shape, step_ops
from llmsim.errors import UserError
from llmsim.models import CATALOG, PUBLISHED_ACTIVE_PARAMS, PUBLISHED_PARAMS, ModelSpec, from_hf_config
from llmsim.reference.model import Model, Segment
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.weights import init_weights
from llmsim.scenario import scenario_from_dict

V3 = CATALOG["deepseek-v3"]
# tiny MLA models: q compression or not, and DeepSeekMoE (a dense first layer, routed + shared experts)
MLA = ModelSpec(
    "tiny-mla",
    64,
    96,
    2,
    4,
    4,
    24,
    97,
    kv_lora_rank=16,
    q_lora_rank=24,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=12,
)
MLA_NO_Q_LORA = MLA.with_(name="tiny-mla-noq", q_lora_rank=0)
DEEPSEEK = MLA.with_(
    name="tiny-deepseek",
    num_layers=3,
    intermediate_size=32,
    num_experts=4,
    experts_per_token=2,
    shared_experts=1,
    first_dense_layers=1,
    dense_intermediate_size=80,
)


def test_deepseek_v3_matches_its_published_counts():
    total, _ = PUBLISHED_PARAMS["deepseek-v3"]
    active, _ = PUBLISHED_ACTIVE_PARAMS["deepseek-v3"]
    assert V3.total_params() == pytest.approx(total, rel=0.005)  # 671.03B
    assert V3.active_params() == pytest.approx(active, rel=0.02)  # 37.55B ("37B")
    # the latent and the rope key per layer: 61 x (512 + 64) x 2 bytes
    assert V3.kv_bytes_per_token("bf16") == 61 * 576 * 2 == 70272
    assert V3.weight_dtype == "fp8"


def test_mla_cache_is_replicated_on_every_tp_rank():
    """No heads to split: each TP rank holds the whole latent (vLLM MLACommonBackend's KV cache
    shape has no head axis); pipeline stages split the layers."""
    assert V3.kv_bytes_per_token_per_device("bf16", tp=8, pp=1) == V3.kv_bytes_per_token("bf16")
    # 61 layers over 2 stages: the larger stage's 31 bound the cache (vLLM splits 31 + 30)
    assert V3.kv_bytes_per_token_per_device("fp8", tp=1, pp=2) == 31 * 576
    llama = CATALOG["llama-3.1-70b"]  # 8 KV heads over tp 4: a quarter each, as before
    assert llama.kv_bytes_per_token_per_device("bf16", 4, 1) == llama.kv_bytes_per_token("bf16") / 4


def test_mla_ops_from_first_principles():
    """DeepSeek-V3 at tp 8 (16 heads per GPU), bf16: the named MLA ops and their FLOPs and bytes."""
    s = batch_shape([(100, 50)], [1000, 3000])
    ops = {op.name: op for op in step_ops(V3, s, OpConfig(tp=8))}
    n, T = 16, 102
    assert ops["mla_qkv_a_proj"].flops == 2 * T * (1536 + 512 + 64) * 7168  # replicated: not split
    assert ops["mla_q_b_proj"].flops == 2 * T * n * 192 * 1536
    assert ops["mla_kv_a_layernorm"].flops == 4 * T * 512
    assert ops["mla_q_a_layernorm"].flops == 4 * T * 1536
    assert ops["attn_rope"].flops == 3 * T * (n * 64 + 64)
    assert ops["kv_cache_write"].bytes_written == T * 576 * 2
    # prefill, expanded: kv_b over the chunk's 150 keys; QK^T over 192 dims and PV over 128 per pair
    pairs = 100 * 50 + 100 * 101 // 2
    assert ops["mla_kv_b_proj"].flops == 2 * 150 * n * 256 * 512
    assert ops["attention_prefill"].flops == 2 * pairs * n * (192 + 128)
    assert ops["attention_prefill"].bytes_read == (100 * n * 192 + 150 * n * 320) * 2
    # decode, absorbed: W_UK into q, MQA over the latent (2(Lkv+R) + 2Lkv per head and key), W_UV after
    ctx = 1001 + 3001
    assert ops["mla_q_absorb"].flops == 2 * 2 * n * 128 * 512
    assert ops["attention_decode"].flops == ctx * n * (2 * 576 + 2 * 512)
    assert ops["attention_decode"].bytes_read == 2 * n * 576 * 2 + ctx * 576 * 2  # the latent read once per layer
    assert ops["mla_out_absorb"].flops == 2 * 2 * n * 512 * 128
    assert ops["attn_post_proj"].flops == 2 * T * 7168 * n * 128
    # DeepSeekMoE: 3 dense layers (18432 / 8), 58 MoE layers with the shared expert (2048 / 8)
    assert ops["dense_mlp_up_proj"].count == 3 and ops["dense_mlp_up_proj"].flops == 2 * T * 2 * 2304 * 7168
    assert ops["mlp_up_proj"].count == 58 and ops["shared_expert_up_proj"].count == 58
    assert ops["shared_expert_down_proj"].flops == 2 * T * 7168 * 256
    assert ops["mla_q_b_proj"].count == 61


def test_mla_absorbed_weights_stay_16_bit_under_fp8():
    """vLLM dequantises W_UK / W_UV from kv_b at load time and runs the decode BMMs in bf16."""
    s = batch_shape([], [500] * 4)
    ops = {op.name: op for op in attention_ops(V3, s, OpConfig(weight_dtype="fp8", act_dtype="fp8"))}
    assert ops["mla_q_absorb"].weight_dtype == "bf16" and ops["mla_q_absorb"].dtype == "bf16"
    assert ops["mla_q_absorb"].weight_bytes == 128 * 128 * 512 * 2


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("spec", [MLA, MLA_NO_Q_LORA, DEEPSEEK], ids=lambda s: s.name)
def test_reference_mla_counts_equal_cost_model(spec, mix):
    chunks, decodes = MIXES[mix]
    shape = batch_shape(chunks, decodes)
    # routed-expert weight bytes follow the experts really touched (the cost model: the expectation)
    assert_counts_match(spec, run_counted(spec, chunks, decodes), shape, check_bytes=not spec.is_moe, cfg=FP32)
    naive = run_counted(spec, chunks, decodes, kernel="naive")
    assert_counts_match(spec, naive, shape, check_bytes=not spec.is_moe, cfg=NAIVE)


def test_reference_deepseek_moe_single_token_bytes_are_exact():
    assert_counts_match(DEEPSEEK, run_counted(DEEPSEEK, [], [9]), batch_shape([], [9]))


@pytest.mark.parametrize("spec", [MLA, MLA_NO_Q_LORA, DEEPSEEK], ids=lambda s: s.name)
def test_absorbed_decode_equals_expanded_prefill(spec):
    """Decoding token by token (absorbed form) gives the logits of one prefill (expanded form)."""
    w = init_weights(spec, 0, np.float64)
    toks = tokens(20, spec.vocab_size)
    full = chunked_logits(w, toks, [])
    stepped = chunked_logits(w, toks, [8, *range(9, 20)])  # a chunk, then one decode per token
    assert np.abs(stepped - full).max() < 1e-10


def test_reference_mla_cache_holds_the_latent():
    cache = PagedKVCache(MLA, 8, np.float32)
    cache.allocate(1)
    per_token = (cache.k.nbytes + cache.v.nbytes) / (cache.k.shape[1] * cache.k.shape[2])
    assert per_token == MLA.kv_bytes_per_token("fp32") == 2 * (16 + 8) * 4
    model = Model(init_weights(MLA, 0, np.float32), cache)
    out = model.forward([Segment(np.arange(5), 0, cache.allocate(1), "prefill", "last")])
    assert out[0] is not None and out[0].shape == (1, MLA.vocab_size)


V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "vocab_size": 129280,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 8,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "max_position_embeddings": 163840,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8"},
}


def test_hf_importer_reads_deepseek_v3_as_the_catalog_has_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(V3_CONFIG))
    spec = from_hf_config(path)
    assert spec.with_(name=V3.name, source=V3.source) == V3


def test_hf_importer_refuses_what_it_cannot_price(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**V3_CONFIG, "index_topk": 2048}))  # DSA (as vLLM reads it) without its sizes
    with pytest.raises(UserError, match="missing key 'index_n_heads'"):
        from_hf_config(path)
    path.write_text(json.dumps({k: v for k, v in V3_CONFIG.items() if k != "v_head_dim"}))
    with pytest.raises(UserError, match="missing key 'v_head_dim'"):
        from_hf_config(path)
    llama_mla = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8}
    path.write_text(json.dumps({**llama_mla, "vocab_size": 100, "kv_lora_rank": 64}))
    with pytest.raises(UserError, match="kv_lora_rank: multi-head latent attention"):  # only deepseek prices it
        from_hf_config(path)


def test_models_command_lists_deepseek_v3(capsys):
    from llmsim.cli import main

    assert main(["models"]) == 0
    assert "deepseek-v3" in capsys.readouterr().out


def _v3_pool(overrides=None):
    from pathlib import Path

    from llmsim.build import build_model, build_pools
    from llmsim.scenario import load_scenario

    sc = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "deepseek_v3_ep.yaml", overrides)
    return build_pools(sc, build_model(sc))[0]


def test_deepseek_v3_ep_scenario_memory():
    """8 x H200, EP 8, FP8: each GPU holds 1/8 of the routed experts and all the rest; its KV cache
    per token is the whole latent of all 61 layers (576 bf16 elements each)."""
    pool = _v3_pool()
    experts = V3.expert_weight_bytes("fp8")  # 58 MoE layers x 256 experts x 3·7168·2048, 1 byte each
    assert experts == 58 * 256 * 3 * 7168 * 2048
    absorbed = 61 * 128 * (128 * 512 + 512 * 128) * 2  # 16-bit W_UK / W_UV of all 128 heads (tp 1)
    assert pool.memory["weights_bytes"] == pytest.approx(V3.weight_bytes("fp8") - experts + experts / 8 + absorbed)
    assert pool.memory["kv_bytes_per_token"] == 70272
    assert pool.kv_blocks == int(pool.memory["kv_bytes"] // (70272 * 16))


def test_tensor_parallel_does_not_split_the_latent_cache():
    pool = _v3_pool({"cluster.replicas": 1, "cluster.tp": 8, "cluster.expert_parallel": False})
    assert pool.memory["kv_bytes_per_token"] == 70272  # the whole latent on each of the 8 ranks
    # q_a / kv_a whole on every rank (fp8), and the rank's 16 heads' 16-bit W_UK / W_UV
    replicated = 61 * (7168 * 1536 + 1536 + 7168 * (512 + 64) + 512)
    absorbed = 61 * 16 * (128 * 512 + 512 * 128) * 2
    expected = (V3.weight_bytes("fp8") - replicated) / 8 + replicated + absorbed
    assert pool.memory["weights_bytes"] == pytest.approx(expected)


# ---- review fixes: fp8 prefill, per-device weights, pp, importer defaults, validation, drafts ----


def test_mla_prefill_stays_16_bit_with_an_fp8_kv_cache():
    """vLLM expands K/V with kv_b_proj in bf16 and dequantises a cached fp8 context before the
    prefill kernel: only the absorbed decode runs fp8 (attention_dtype), prefill never."""
    s = batch_shape([(512, 1000)], [2000] * 4)
    fp8 = {op.name: op for op in step_ops(V3, s, OpConfig(tp=8, weight_dtype="fp8", act_dtype="fp8", kv_dtype="fp8"))}
    bf16_kv = {op.name: op for op in step_ops(V3, s, OpConfig(tp=8, weight_dtype="fp8", act_dtype="fp8"))}
    pre = fp8["attention_prefill"]
    assert pre.dtype == "bf16"
    assert (pre.flops, pre.bytes_read, pre.bytes_written) == (
        bf16_kv["attention_prefill"].flops,
        bf16_kv["attention_prefill"].bytes_read,
        bf16_kv["attention_prefill"].bytes_written,
    )
    n = 16  # 2 bytes per element of Q, the expanded K (P + R) and V of every key, and O
    assert pre.bytes_read == (512 * n * 192 + 1512 * n * (192 + 128)) * 2
    assert fp8["attention_decode"].dtype == "fp8"  # the absorbed decode over the fp8 latent
    assert bf16_kv["attention_decode"].dtype == "bf16"


def test_mla_prefill_is_priced_at_the_16_bit_rate():
    from llmsim.costmodel.roofline import CostConfig, CostModel
    from llmsim.hardware import load_profile

    hw = load_profile("H200")
    s = batch_shape([(2048, 0)], [])
    times = {}
    for kv in ("bf16", "fp8"):
        cost = CostModel(V3, hw, CostConfig(tp=8, weight_dtype="fp8", act_dtype="fp8", kv_dtype=kv))
        times[kv] = {t.op.name: t.total_s for t in cost.priced(s)}
    assert times["fp8"]["attention_prefill"] == times["bf16"]["attention_prefill"]


def test_mla_weights_per_device_replicate_the_latent_projections_and_keep_w_uk_w_uv():
    replicated = 61 * (7168 * 1536 + 1536 + 7168 * 576 + 512)  # q_a, kv_a and their norms per layer
    assert V3.num_layers * V3.mla_replicated_params() == replicated
    for tp, pp in ((1, 1), (8, 1), (4, 1)):
        absorbed = 61 * (128 // tp) * (128 * 512 + 512 * 128) * 2
        expected = (V3.weight_bytes("fp8") - replicated) / (tp * pp) + replicated / pp + absorbed / pp
        assert V3.weight_bytes_per_device("fp8", tp, pp) == pytest.approx(expected)
    # bf16 checkpoint: the replicated part 2 bytes an element
    bf16 = (V3.weight_bytes("bf16") - 2 * replicated) / 8 + 2 * replicated + 61 * 16 * 131072 * 2
    assert V3.weight_bytes_per_device("bf16", 8, 1) == pytest.approx(bf16)
    for name in ("llama-3.1-70b", "mixtral-8x7b", "qwen3-235b-a22b"):  # not MLA: the even split, as before
        m = CATALOG[name]  # (untied: the first stage's embedding weighs what the last's head does, + its norm)
        assert m.weight_bytes_per_device("bf16", 4, 2) == pytest.approx(m.weight_bytes("bf16") / 8, rel=1e-6)


def test_pipeline_parallelism_is_refused_with_dense_first_layers():
    from llmsim.build import check_parallelism

    with pytest.raises(UserError, match=r"cluster\.pp: pipeline parallelism \(2 stages\) with the 1 dense-MLP layers"):
        check_parallelism(DEEPSEEK.with_(num_layers=4), 1, 2, "cluster")
    check_parallelism(DEEPSEEK.with_(num_layers=4), 1, 1, "cluster")
    check_parallelism(DEEPSEEK.with_(num_layers=4, first_dense_layers=0), 1, 2, "cluster")  # all MoE: fine
    check_parallelism(MLA, 1, 2, "cluster")  # dense MLA: every stage alike


def _write(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("key", ["q_lora_rank", "first_k_dense_replace", "n_shared_experts"])
def test_hf_importer_requires_the_deepseek_fields_transformers_defaults(tmp_path, key):
    """transformers' DeepseekV3Config would default them (1536, 3, 1): a config must state them."""
    path = _write(tmp_path, {k: v for k, v in V3_CONFIG.items() if k != key})
    with pytest.raises(UserError, match=f"missing key '{key}'"):
        from_hf_config(path)


def test_hf_importer_null_q_lora_rank_means_no_query_compression(tmp_path):
    spec = from_hf_config(_write(tmp_path, {**V3_CONFIG, "q_lora_rank": None}))
    assert spec.q_lora_rank == 0
    assert spec.experts_per_token == 8 and spec.shared_experts == 1 and spec.first_dense_layers == 3


@pytest.mark.parametrize("value", [-5, 0, "long"])
def test_hf_importer_checks_the_deepseek_context_length(tmp_path, value):
    with pytest.raises(UserError, match="max_position_embeddings: expected a positive integer"):
        from_hf_config(_write(tmp_path, {**V3_CONFIG, "max_position_embeddings": value}))


def test_truncated_deepseek_keeps_non_negative_layer_counts():
    short = V3.with_(num_layers=2)  # fewer layers than first_dense_layers (3): all of them dense
    assert short.moe_layers == 0 and short.dense_layers == 2
    assert short.decoder_params() == 2 * short.dense_layer_params()
    assert short.expert_weight_bytes("fp8") == 0


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"dense_intermediate_size": 0},
            r"dense_intermediate_size: must be > 0 with dense layers \(first_dense_layers 1",
        ),
        ({"first_dense_layers": -1}, "first_dense_layers: expected a non-negative integer"),
        ({"v_head_dim": 0}, "v_head_dim: multi-head latent attention needs it > 0"),
        ({"qk_rope_head_dim": 0}, "qk_rope_head_dim: multi-head latent attention needs it > 0"),
        ({"sliding_window": 4096}, "sliding_window: multi-head latent attention with a sliding window"),
        ({"kv_lora_rank": 0}, "q_lora_rank: an MLA field without kv_lora_rank"),
        ({"kv_lora_rank": -4}, "kv_lora_rank: expected a non-negative integer"),
    ],
)
def test_model_spec_refuses_inconsistent_mla_and_deepseek_fields(changes, match):
    with pytest.raises(UserError, match=match):
        DEEPSEEK.with_(**changes)


def test_draft_kv_cache_per_device_splits_heads_like_the_target():
    """A draft's KV heads split over tp as kv_bytes_per_token_per_device does (replicated past its
    KV heads), not over every device."""
    from pathlib import Path

    from llmsim.build import build_model, build_pools
    from llmsim.scenario import load_scenario

    sc = load_scenario(
        Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml",
        {
            "model": "qwen2.5-72b",
            "cluster.replicas": 1,
            "cluster.tp": 8,
            "speculative": {"draft_model": "qwen2.5-7b", "k": 3},
        },
    )
    target, draft = CATALOG["qwen2.5-72b"], CATALOG["qwen2.5-7b"]  # the draft's 4 KV heads < tp 8
    pool = build_pools(sc, build_model(sc))[0]
    expected = target.kv_bytes_per_token_per_device("bf16", 8, 1) + draft.kv_bytes_per_token_per_device("bf16", 8, 1)
    assert pool.memory["kv_bytes_per_token"] == expected
    assert draft.kv_bytes_per_token_per_device("bf16", 8, 1) == draft.kv_bytes_per_token("bf16") / 4


def test_mla_verification_runs_in_the_decode_kernel():
    """vLLM's MLA backends verify short speculative queries in the absorbed decode kernel
    (``supports_spec_as_decode``), not as expanded prefill chunks that up-project every cached
    latent: a replica of an MLA model prices its verify steps as k+1 decode tokens per request,
    which at long contexts is several times cheaper than the chunk form."""
    from llmsim.costmodel import CostConfig, CostModel
    from llmsim.hardware import load_profile

    cm = CostModel(V3, load_profile("H200"), CostConfig(act_dtype="fp8"))
    as_decode = cm.step_time(batch_shape([], [16000] * 32, tokens_per_decode=2))
    as_chunks = cm.step_time(batch_shape([(2, 16000)] * 32, []))
    assert as_chunks > 3 * as_decode
    # end to end: MTP on long prompts speeds decoding up (priced as chunks, each verify step would
    # cost about 7x a plain one at 16k tokens of context, and speculation would slow it 4x)
    run = llmsim.run(
        scenario_from_dict(
            {
                "name": "v3-mtp",
                "model": {"name": "deepseek-v3", "act_dtype": "fp8"},
                "hardware": "H200",
                "cluster": {"tp": 8},
                "policy": {"kind": "vllm", "chunk_tokens": 8192},
                "workload": {
                    "kind": "all_at_once",
                    "num_requests": 16,
                    "prompt_tokens": {"dist": "fixed", "value": 16000},
                    "output_tokens": {"dist": "fixed", "value": 100},
                },
                "speculative": {"method": "mtp", "k": 1, "acceptance": [0.8]},
                "output": {"steps": "none"},
            },
            "v3-mtp.yaml",
            Path("."),
        )
    )
    spec = run.summary["speculative"]
    assert 1.0 < spec["speedup"] <= spec["tokens_per_step"]
