"""A model read from a HuggingFace config is named from the config, not from its folder, and a
scenario can rename it (``model: {hf_config: PATH, name: NAME}``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import llmsim
from llmsim.build import build_model
from llmsim.errors import UserError
from llmsim.models import from_hf_config, get_model

SHAPE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
}


def write(path: Path, cfg: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return path


def test_name_or_path_wins(tmp_path):
    cfg = {**SHAPE, "_name_or_path": "meta-llama/Llama-3.1-8B"}
    assert from_hf_config(write(tmp_path / "s5" / "config.json", cfg)).name == "meta-llama/Llama-3.1-8B"
    assert from_hf_config(write(tmp_path / "llama-s5.json", cfg)).name == "meta-llama/Llama-3.1-8B"


def test_a_telling_file_name_names_the_model(tmp_path):
    assert from_hf_config(write(tmp_path / "s5" / "llama-s5.json", SHAPE)).name == "llama-s5"
    assert from_hf_config(write(tmp_path / "s5" / "llama-s5.json", {**SHAPE, "_name_or_path": ""})).name == "llama-s5"


def test_config_json_is_named_from_its_shape_not_its_folder(tmp_path):
    m = from_hf_config(write(tmp_path / "s5" / "config.json", SHAPE))
    assert m.name == "llama-512h4L"
    no_type = {k: v for k, v in SHAPE.items() if k != "model_type"}
    assert from_hf_config(write(tmp_path / "a" / "config.json", no_type)).name == "llama-512h4L"
    moe = {**SHAPE, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
    assert from_hf_config(write(tmp_path / "b" / "config.json", moe)).name == "mixtral-512h4L-8e"
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}
    assert from_hf_config(write(tmp_path / "c" / "config.json", gpt2)).name == "gpt2-768h12L"
    bare = {k: v for k, v in SHAPE.items() if k not in ("model_type", "architectures")}
    with pytest.raises(UserError, match="model_type: missing"):  # no architecture to name it by, or price it as
        from_hf_config(write(tmp_path / "d" / "config.json", bare))


@pytest.mark.parametrize(
    ("change", "culprit"),
    [
        ({"model_type": "qwen3_next"}, "model_type: 'qwen3_next' is not an architecture"),
        ({"model_type": "deepseek_v3"}, "missing key 'kv_lora_rank'"),  # MLA's fields, named
        ({"kv_lora_rank": 512}, "kv_lora_rank: multi-head latent attention"),
        ({"n_shared_experts": 1}, "n_shared_experts: shared experts"),
        ({"num_attention_heads": 7}, "num_attention_heads: 7 does not divide hidden_size 512"),
        ({"num_key_value_heads": -2}, "num_key_value_heads: expected a positive integer"),
        ({"num_key_value_heads": 3}, "num_key_value_heads: 3 must divide num_attention_heads"),
        ({"model_type": "mixtral", "num_local_experts": 8}, "num_experts_per_tok: expected 1..8"),
        ({"max_position_embeddings": 0}, "max_position_embeddings: expected a positive integer"),
    ],
)
def test_configs_that_do_not_make_one_model_are_refused(tmp_path, change, culprit):
    # never a silent dense fallback, never negative KV bytes or zero active experts (#17, #19)
    with pytest.raises(UserError, match=re.escape(culprit)):
        from_hf_config(write(tmp_path / "config.json", {**SHAPE, **change}))


def test_shipped_configs():
    root = Path(__file__).resolve().parents[1]
    assert get_model(root / "benchmarks/vllm_cpu/model/config.json").name == "llama-512h4L"
    assert get_model(root / "scenarios/twin_small_config.json").name == "twin-llama-4x512"


def test_explicit_name_overrides(tmp_path):
    path = write(tmp_path / "s5" / "config.json", {**SHAPE, "_name_or_path": "/ckpt/run-17"})
    assert from_hf_config(path, "my-name").name == "my-name"
    assert get_model(str(path), name="my-name").name == "my-name"


def _scenario(tmp_path: Path, model: dict) -> Path:
    root = Path(__file__).resolve().parents[1]
    data = yaml.safe_load((root / "scenarios/quickstart.yaml").read_text())
    data["model"] = model
    data["workload"]["num_requests"] = 5
    data["output"]["dir"] = str(tmp_path / "results")
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_scenario_renames_an_hf_model(tmp_path):
    write(tmp_path / "s5" / "config.json", SHAPE)
    sc = llmsim.load_scenario(_scenario(tmp_path, {"hf_config": "s5/config.json", "name": "my-name"}))
    m = build_model(sc)
    assert m.name == "my-name" and m.hidden_size == 512  # the config's shape, not a catalog model's
    sc = llmsim.load_scenario(_scenario(tmp_path, {"hf_config": "s5/config.json"}))
    assert build_model(sc).name == "llama-512h4L"
    res = llmsim.run(_scenario(tmp_path, {"hf_config": "s5/config.json", "name": "my-name"}))
    assert res.summary["model"] == "my-name"


def test_scenario_needs_a_model(tmp_path):
    with pytest.raises(UserError, match="hf_config"):
        llmsim.load_scenario(_scenario(tmp_path, {"weight_dtype": "bf16"}))
