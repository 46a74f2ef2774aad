"""A checkpoint's quantization_config read as vLLM 0.32 reads it (llmsim/quantconfig.py), through
both ways a checkpoint reaches llmsim: a scenario's model.hf_config and `vllm serve /path`."""

import json
from pathlib import Path

import pytest

from llmsim.errors import UserError
from llmsim.models import from_hf_config
from llmsim.quantconfig import CheckpointQuant, read_quant
from llmsim.scenario import scenario_from_dict
from llmsim.vllmcli import Bench, parse_serve, scenario_dict

ROOT = Path(__file__).resolve().parent.parent
CONFIG = json.loads((ROOT / "data" / "validation" / "vllm-gpu-bench" / "qwen3-16b-a3b.config.json").read_text())


def _ct(weights: dict, acts: dict | None, **extra: object) -> dict:
    """A compressed-tensors quantization_config of one group, as llm-compressor writes it."""
    group = {"targets": ["Linear"], "weights": weights, "input_activations": acts}
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": group}, "ignore": ["lm_head"], **extra}


FP8_DYNAMIC = _ct(
    {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
    {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True, "dynamic": True},
    format="float-quantized",
)
W8A8_INT8 = _ct(
    {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True, "dynamic": False},
    {"num_bits": 8, "type": "int", "strategy": "token", "symmetric": True, "dynamic": True},
    format="int-quantized",
)
W4A16 = _ct(
    {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True, "dynamic": False},
    None,
    format="pack-quantized",
)
NVFP4 = _ct(
    {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True},
    {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local"},
    format="nvfp4-pack-quantized",
)


@pytest.mark.parametrize(
    "quant, expected",
    [
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, CheckpointQuant("fp8", "fp8", "fp8")),
        (
            {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
            CheckpointQuant("awq", "int4", "", 128, None),
        ),
        (
            {"quant_method": "gptq", "bits": 8, "group_size": -1, "sym": True},
            CheckpointQuant("gptq", "int8", "", 0, 16),
        ),
        (FP8_DYNAMIC, CheckpointQuant("compressed-tensors", "fp8", "fp8", 0, None)),
        (W8A8_INT8, CheckpointQuant("compressed-tensors", "int8", "int8", 0, None)),
        (W4A16, CheckpointQuant("compressed-tensors", "int4", "", 128, 16.0)),
        (NVFP4, CheckpointQuant("compressed-tensors", "fp4", "fp4", 16, None)),
        (
            {
                "quant_method": "modelopt",
                "quant_algo": "FP8",
                "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": False},
            },
            CheckpointQuant("modelopt", "fp8", "fp8", None, None, "fp8"),
        ),
        (
            {"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}},
            CheckpointQuant("modelopt", "fp4", "fp4", None, None, "fp8"),
        ),
        ({"quant_method": "modelopt_fp4", "quant_algo": "W4A16_NVFP4"}, CheckpointQuant("modelopt_fp4", "fp4", "")),
        (  # NVFP4 whose groups quantise no activations: W4A16 (ModelOptNvFp4Config._from_config)
            {"quant_method": "modelopt", "quant_algo": "NVFP4", "config_groups": {"g": {"input_activations": None}}},
            CheckpointQuant("modelopt", "fp4", ""),
        ),
        ({"quant_method": "mxfp8"}, CheckpointQuant("mxfp8", "fp8", "fp8", 32, 8.0)),  # (MiniMax's spelling)
        ({"quant_method": "compressed_tensors", **W8A8_INT8}, CheckpointQuant("compressed-tensors", "int8", "int8", 0)),
        (
            {**FP8_DYNAMIC, "kv_cache_scheme": {"num_bits": 8, "type": "float"}},
            CheckpointQuant("compressed-tensors", "fp8", "fp8", 0, None, "fp8"),
        ),
        (  # AutoAWQ's own key names
            {"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": True},
            CheckpointQuant("awq", "int4", "", 64, None),
        ),
    ],
)
def test_each_format_reads_as_vllm_runs_it(quant, expected):
    assert read_quant({"quantization_config": quant}, "c.json") == expected


@pytest.mark.parametrize(
    "quant, fragment",
    [
        ({"quant_method": "bitsandbytes"}, "quant_method 'bitsandbytes': llmsim reads awq"),
        ({"quant_method": "awq", "bits": 8}, "awq with bits 8: vLLM reads 4-bit weights"),
        ({"quant_method": "gptq", "bits": "4"}, "quantization_config.bits: expected an integer"),
        ({"quant_method": "gptq", "bits": 4, "sym": False}, "sym: False: vLLM 0.32 serves symmetric GPTQ weights only"),
        ({"quant_method": "compressed-tensors", "config_groups": {}}, "config_groups: expected a mapping of one"),
        (
            {
                **W4A16,
                "config_groups": {"a": W4A16["config_groups"]["group_0"], "b": FP8_DYNAMIC["config_groups"]["group_0"]},
            },
            "the groups quantise layers differently (a: int4 weights, 16-bit compute; b: fp8 weights, fp8 compute)",
        ),
        (_ct({"num_bits": 2, "type": "int"}, None), "type 'int' with num_bits 2: llmsim reads"),
        ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}, "quant_algo 'MIXED_PRECISION': llmsim reads"),
        ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"}, "NVFP4 KV cache is not"),
        ("fp8", "quantization_config: expected a mapping"),
        ({**FP8_DYNAMIC, "kv_cache_scheme": {"num_bits": 4, "type": "float"}}, "kv_cache_scheme: {'num_bits': 4"),
        ({"quant_method": "awq", "bits": 4, "group_size": 10**15}, "group_size: expected -1 (per channel) or a count"),
    ],
)
def test_what_llmsim_cannot_price_is_refused_by_name(quant, fragment):
    with pytest.raises(UserError, match="c.json: quantization_config") as err:
        read_quant({"quantization_config": quant}, "c.json")
    assert fragment in str(err.value)


def _checkpoint(tmp_path: Path, quant: dict, name: str = "ckpt") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**CONFIG, "quantization_config": quant}))
    return folder


def test_the_hf_importer_takes_the_checkpoint_s_weights(tmp_path):
    spec = from_hf_config(_checkpoint(tmp_path, W4A16) / "config.json")
    assert (spec.weight_dtype, spec.weight_group_size, spec.weight_scale_bits) == ("int4", 128, 16.0)
    assert spec.checkpoint_act_dtype == ""
    plain = from_hf_config(_checkpoint(tmp_path, {**FP8_DYNAMIC}, "fp8") / "config.json")
    assert (plain.weight_dtype, plain.checkpoint_act_dtype) == ("fp8", "fp8")


WORKLOAD = {
    "kind": "poisson",
    "num_requests": 4,
    "rate_rps": 1.0,
    "prompt_tokens": {"dist": "fixed", "value": 100},
    "output_tokens": {"dist": "fixed", "value": 10},
}


def _scenario(folder: Path, hardware: str = "H100-SXM", **model: object) -> object:
    data = {
        "name": "q",
        "model": {"hf_config": str(folder), **model},
        "hardware": hardware,
        "workload": WORKLOAD,
    }
    return scenario_from_dict(data, "q.yaml", folder)


def test_a_scenario_computes_as_the_checkpoint_asks_where_the_gpu_can(tmp_path):
    """W8A8 FP8 on an H100; the same checkpoint on an A100 (no FP8 units) runs weight-only, as
    vLLM's Marlin kernels run it; a scenario's own act_dtype or weight_dtype wins; a ModelOpt
    checkpoint's FP8 KV cache is the cache's dtype unless kv_cache.dtype says otherwise."""
    fp8 = _checkpoint(tmp_path, FP8_DYNAMIC)
    assert _scenario(fp8).model.act_dtype == "fp8"
    assert _scenario(fp8)._engine_filled["model"] == ["act_dtype"]
    assert _scenario(fp8, "A100-SXM-80GB").model.act_dtype == "bf16"
    assert _scenario(fp8, act_dtype="bf16").model.act_dtype == "bf16"
    assert _scenario(fp8, weight_dtype="bf16").model.act_dtype == "bf16"
    opt = _checkpoint(tmp_path, {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}, "mo")
    assert _scenario(opt).kv_cache.dtype == "fp8"
    own = scenario_from_dict(
        {
            "name": "q",
            "model": {"hf_config": str(opt)},
            "hardware": "H100-SXM",
            "kv_cache": {"dtype": "bf16"},
            "workload": WORKLOAD,
        },
        "q.yaml",
        opt,
    )
    assert own.kv_cache.dtype == "bf16"


def _served(hardware: str, line: str) -> object:
    """The scenario `llmsim bench` runs for a `vllm serve` line, as loaded (its checkpoint read)."""
    return scenario_from_dict({**scenario_dict(hardware, parse_serve(line), Bench()), "name": "q"}, "q", ROOT)


def test_vllm_serve_of_a_checkpoint_reads_its_format(tmp_path):
    """The translated scenario leaves a checkpoint's precision to its config (the model, then
    apply_checkpoint per device), so --scenario-out swept onto another GPU resolves it there."""
    int8 = scenario_dict("H100-SXM", parse_serve(f"vllm serve {_checkpoint(tmp_path, W8A8_INT8)}"), Bench())
    assert set(int8["model"]) == {"hf_config"}
    assert _served("H100-SXM", f"vllm serve {_checkpoint(tmp_path, W8A8_INT8, 'i8')}").model.act_dtype == "int8"
    nvfp4 = _checkpoint(tmp_path, NVFP4, "nvfp4")
    assert _served("H100-SXM", f"vllm serve {nvfp4}").model.act_dtype == "bf16"  # (no FP4 units: W4A16)
    assert _served("B200", f"vllm serve {nvfp4} --quantization compressed-tensors").model.act_dtype == "fp4"
    legacy = tmp_path / "legacy"  # ModelOpt <= 0.29: hf_quant_config.json beside a plain config.json
    legacy.mkdir()
    (legacy / "config.json").write_text(json.dumps(CONFIG))
    quant = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    (legacy / "hf_quant_config.json").write_text(json.dumps(quant))
    sc = _served("H100-SXM", f"vllm serve {legacy}")
    assert (sc.model.act_dtype, sc.kv_cache.dtype) == ("fp8", "fp8")
    assert from_hf_config(legacy / "config.json").weight_dtype == "fp8"
    with pytest.raises(UserError, match="--quantization modelopt, but the checkpoint is compressed-tensors-quantised"):
        scenario_dict("H100-SXM", parse_serve(f"vllm serve {nvfp4} --quantization modelopt"), Bench())
    with pytest.raises(UserError, match="--quantization compressed-tensors reads a checkpoint quantised with it"):
        scenario_dict("H100-SXM", parse_serve("vllm serve llama-3.1-8b --quantization compressed-tensors"), Bench())


@pytest.mark.parametrize(
    "hub_id, model",
    [
        (
            "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8",
            {"name": "llama-3.1-8b", "checkpoint": "fp8"},
        ),
        (
            "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
            {"name": "llama-3.1-8b", "checkpoint": "w8a8"},
        ),
        ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", {"name": "llama-3.1-8b", "checkpoint": "awq"}),
        ("nvidia/Llama-3.3-70B-Instruct-FP4", {"name": "llama-3.1-70b", "checkpoint": "nvfp4"}),
        ("Qwen/Qwen3-30B-A3B-FP8", {"name": "qwen3-30b-a3b", "checkpoint": "fp8"}),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("unsloth/Llama-3.2-1B-Instruct", "llama-3.2-1b"),
    ],
)
def test_a_hub_id_names_its_base_model_and_format(hub_id, model):
    """A quantised checkpoint's hub id, with no config.json to read: the base model by its name
    (under any organisation), the format by the suffix it is published under."""
    assert scenario_dict("H100-SXM", parse_serve(f"vllm serve {hub_id}"), Bench())["model"] == model


def test_a_flag_beside_a_quantised_hub_id():
    awq = scenario_dict("H100-SXM", parse_serve("vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ --quantization awq"), Bench())
    assert awq["model"] == {"name": "qwen2.5-7b", "checkpoint": "awq"}
    with pytest.raises(UserError, match="--quantization awq reads a checkpoint quantised with it"):
        scenario_dict("H100-SXM", parse_serve("vllm serve Qwen/Qwen3-8B --quantization awq"), Bench())


def test_roofline_prices_the_checkpoint_s_own_precision(tmp_path, capsys):
    """`llmsim roofline` of a quantised checkpoint: its compute and KV dtypes unless the flags say
    otherwise (it priced every checkpoint in bf16), and the header says which."""
    from llmsim.cli import main

    path = _checkpoint(tmp_path, {**FP8_DYNAMIC, "kv_cache_scheme": {"num_bits": 8, "type": "float"}}) / "config.json"
    base = ["roofline", "--model", str(path), "--hardware", "H100-SXM", "--decode-batch", "8", "--out", "-"]
    assert main([*base, "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert (own["weight_dtype"], own["act_dtype"], own["kv_dtype"]) == ("fp8", "fp8", "fp8")
    assert main([*base, "--act-dtype", "bf16", "--kv-dtype", "bf16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_s"] > own["step_s"]
    assert main([*base[:4], "A100-SXM-80GB", *base[5:]]) == 0  # (no FP8 units: weight-only)
    assert "(fp8 weights, bf16 compute, fp8 KV)" in capsys.readouterr().out


def test_a_qwen3_moe_config_without_its_expert_width_takes_transformers_default(tmp_path):
    cfg = {k: v for k, v in CONFIG.items() if k != "moe_intermediate_size"}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert from_hf_config(tmp_path / "c.json").intermediate_size == 768
    (tmp_path / "k.json").write_text(json.dumps({k: v for k, v in CONFIG.items() if k != "num_experts_per_tok"}))
    with pytest.raises(UserError, match="num_experts_per_tok: expected 1..64 for an MoE of 64 experts; it is missing"):
        from_hf_config(tmp_path / "k.json")
