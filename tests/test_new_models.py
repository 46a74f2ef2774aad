"""Llama-4 Scout / Maverick, GPT-OSS and DeepSeek-R1 in the catalog (data/models/configs.md sections
9-13): parameter counts and KV bytes by hand and against the published figures, interleaved MoE
layers, MXFP4 experts, and their scenarios running."""

from __future__ import annotations

from pathlib import Path

import pytest

import llmsim
from llmsim.costmodel.ops import BatchShape, OpConfig, batch_shape, step_ops
from llmsim.costmodel.roofline import CostConfig
from llmsim.models import CATALOG, DTYPE_BYTES, PUBLISHED_ACTIVE_PARAMS, PUBLISHED_PARAMS
from llmsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
SCOUT = CATALOG["llama-4-scout-17b-16e-instruct"]
MAVERICK = CATALOG["llama-4-maverick-17b-128e-instruct"]
OSS = CATALOG["gpt-oss-120b"]


@pytest.mark.parametrize("name", ["llama-4-scout-17b-16e-instruct", "llama-4-maverick-17b-128e-instruct"])
def test_llama4_active_params_match_the_model_card(name: str) -> None:
    published, _ = PUBLISHED_ACTIVE_PARAMS[name]
    assert CATALOG[name].active_params() == pytest.approx(published, rel=0.015)


def test_llama4_by_hand() -> None:
    H, q, kv, inter = 5120, 5120, 1024, 8192
    attn = H * (q + 2 * kv) + q * H
    expert = 3 * H * inter
    # Scout: every layer 16 routed experts + 1 shared + a router of 16 logits
    layer = attn + 17 * expert + H * 16 + 2 * H
    assert SCOUT.total_params() == 48 * layer + 2 * 202048 * H + H
    # Maverick: 24 MoE layers (128 + 1 shared), 24 dense MLPs of 16,384
    moe = attn + 129 * expert + H * 128 + 2 * H
    dense = attn + 3 * H * 16384 + 2 * H
    assert (MAVERICK.moe_layers, MAVERICK.dense_layers) == (24, 24)
    assert MAVERICK.total_params() == 24 * moe + 24 * dense + 2 * 202048 * H + H
    # both cache K and V of 8 heads of 128 on every layer (the chunked layers' KV priced whole)
    assert SCOUT.kv_bytes_per_token("bf16") == 2 * 48 * 8 * 128 * 2 == 196_608


def test_gpt_oss_by_hand_and_mxfp4_experts() -> None:
    assert OSS.total_params() == pytest.approx(PUBLISHED_PARAMS["gpt-oss-120b"][0], rel=1e-3)
    assert CATALOG["gpt-oss-20b"].total_params() == pytest.approx(PUBLISHED_PARAMS["gpt-oss-20b"][0], rel=1e-3)
    # the model card's parts: MLP 114.71B (experts + router), attention 0.96B
    experts = 36 * 128 * OSS.expert_params()
    assert experts + 36 * 2880 * 128 == pytest.approx(114.71e9, rel=2e-3)
    assert 36 * OSS.attention_params() == pytest.approx(0.96e9, rel=1e-2)
    # the experts in 4.25-bit MXFP4, the rest bf16: the checkpoint's 60.8 GiB (model card Table 1)
    assert DTYPE_BYTES["mxfp4"] == 4.25 / 8
    assert OSS.weight_bytes() == pytest.approx(experts * 4.25 / 8 + (OSS.total_params() - experts) * 2)
    assert OSS.weight_bytes() / 2**30 == pytest.approx(60.8, rel=0.03)
    # KV: 8 heads of 64 on 36 layers; half the layers attend over a 128-token window
    assert OSS.kv_bytes_per_token("bf16") == 2 * 36 * 8 * 64 * 2
    assert OSS.attention_windows() == (None, 128)


def test_expert_gemms_read_mxfp4_weights() -> None:
    shape = BatchShape(decode_seqs=64, decode_tokens=64, decode_ctx_tokens=64 * 1000)
    ops = {o.name: o for o in step_ops(OSS, shape, CostConfig())}
    up = ops["mlp_up_proj"]
    assert up.weight_dtype == "mxfp4"
    # the experts touched (expected, uniform routing), each [2880, 2 x 2880] at 4.25 bits
    from llmsim.costmodel.ops import experts_touched

    per_expert = 2880 * 2 * 2880 * 4.25 / 8
    assert up.weight_bytes == pytest.approx(experts_touched(128, 4, 128, 64) * per_expert)
    assert ops["attn_pre_proj"].weight_dtype == "bf16"


def test_roofline_refuses_a_storage_only_dtype(capsys) -> None:
    from llmsim.cli import main

    argv = ["roofline", "--model", "gpt-oss-120b", "--hardware", "H100-SXM", "--decode-batch", "8"]
    assert main([*argv, "--kv-dtype", "mxfp4"]) == 2
    assert "--kv-dtype 'mxfp4': expected one of" in capsys.readouterr().err


def test_deepseek_r1_is_v3s_architecture() -> None:
    r1, v3 = CATALOG["deepseek-r1"], CATALOG["deepseek-v3"]
    assert r1.with_(name="x", source="") == v3.with_(name="x", source="")


def test_models_command_lists_the_new_models(capsys) -> None:
    from llmsim.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in ("llama-4-scout-17b-16e-instruct", "llama-4-maverick-17b-128e-instruct", "gpt-oss-120b", "gpt-oss-20b"):
        assert name in out


@pytest.mark.parametrize(
    ("model", "hardware", "cluster"),
    [
        ("gpt-oss-120b", "H100-SXM", {"replicas": 1}),  # fits one 80 GB GPU (MXFP4 experts)
        ("gpt-oss-20b", "H100-SXM", {"replicas": 1}),
        ("llama-4-scout-17b-16e-instruct", "H100-SXM", {"tp": 4}),
        ("llama-4-maverick-17b-128e-instruct", "H200", {"replicas": 8, "expert_parallel": True}),
    ],
)
def test_the_new_models_serve(model: str, hardware: str, cluster: dict) -> None:
    data = {
        "name": "new",
        "model": model,
        "hardware": hardware,
        "cluster": cluster,
        "policy": {"kind": "vllm"},
        "workload": {
            "kind": "poisson",
            "rate_rps": 4,
            "num_requests": 40,
            "prompt_tokens": {"dist": "fixed", "value": 500},
            "output_tokens": {"dist": "fixed", "value": 50},
        },
    }
    s = llmsim.run(scenario_from_dict(data, "test", ROOT)).summary
    assert s["requests"]["finished"] == 40 and s["mean_tpot_ms"] > 0


def test_gpt_j_by_hand_and_from_its_config(tmp_path: Path) -> None:
    """GPT-J 6B (data/models/configs.md section 6): one LayerNorm per layer feeds attention and
    the MLP (parallel residual), a 2-matrix GELU MLP with biases, a separate LM head."""
    import json

    from llmsim.models import from_hf_config

    gptj = CATALOG["gpt-j-6b"]
    H, inter, V = 4096, 16384, 50400
    attn = 4 * H * H + 4 * H  # q, k, v, out (+ the biases the catalog counts with linear_bias)
    mlp = 2 * H * inter + inter + H
    layer = attn + mlp + 2 * H  # one ln_1 (weight + bias)
    assert gptj.total_params() == 28 * layer + 2 * V * H + 2 * H == 6_051_291_136
    # the card's 6,053,381,344: within 0.04 % (configs.md: the config's own count is 6,050,882,784)
    assert gptj.total_params() == pytest.approx(PUBLISHED_PARAMS["gpt-j-6b"][0], rel=4e-4)
    assert gptj.kv_bytes_per_token("fp16") == 2 * 28 * 16 * 256 * 2
    names = [op.name for op in step_ops(gptj, batch_shape([], [100]), OpConfig())]
    assert "input_layernorm" in names and "post_attention_layernorm" not in names
    # the config as published (configs.md section 6, verbatim): the importer keeps its torch_dtype,
    # float32 (vLLM's --dtype auto would serve it in fp16: model.weight_dtype says so)
    cfg = {
        "activation_function": "gelu_new",
        "architectures": ["GPTJForCausalLM"],
        "attn_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gptj",
        "n_embd": 4096,
        "n_head": 16,
        "n_inner": None,
        "n_layer": 28,
        "n_positions": 2048,
        "resid_pdrop": 0.0,
        "rotary": True,
        "rotary_dim": 64,
        "scale_attn_weights": True,
        "tie_word_embeddings": False,
        "tokenizer_class": "GPT2Tokenizer",
        "torch_dtype": "float32",
        "transformers_version": "4.19.0.dev0",
        "vocab_size": 50400,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    imported = from_hf_config(tmp_path / "config.json", name="gpt-j-6b")
    assert imported.weight_dtype == "fp32"
    assert imported.with_(source=gptj.source, weight_dtype="fp16") == gptj


def test_qwen3_moe_config_imports_as_the_catalog_model(tmp_path: Path) -> None:
    """A Qwen3-MoE config.json's experts are moe_intermediate_size wide; its intermediate_size
    (6144) is the dense MLP no layer uses when every layer is MoE. Read as the expert width it made
    Qwen3-30B-A3B a 233 B model."""
    import json

    from llmsim.models import from_hf_config

    cfg = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "vocab_size": 151936,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec, catalog = from_hf_config(path), CATALOG["qwen3-30b-a3b-instruct-2507"]
    assert spec.intermediate_size == catalog.intermediate_size == 768
    assert spec.total_params() == pytest.approx(catalog.total_params(), rel=1e-3)
    assert spec.active_params() == pytest.approx(catalog.active_params(), rel=1e-3)
