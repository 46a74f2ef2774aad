"""A fourth round of trying to break llmsim as a user would (2026-12-07): CUDA-graph sizes past the
token budget, a misspelt profile column, quantised checkpoints vLLM has no kernel for or quantises
only in part, a hub id's format against a --quantization flag. Each now behaves."""

from __future__ import annotations

import json

import pytest
import yaml

import llmsim
from llmsim.build import build_model
from llmsim.cli import main
from llmsim.errors import UserError
from llmsim.quantconfig import read_quant
from llmsim.scenario import scenario_from_dict

SCENARIO = {
    "name": "round4",
    "seed": 1,
    "model": "llama-3.1-8b",
    "hardware": "H100-SXM",
    "policy": {"kind": "vllm", "chunk_tokens": 512, "max_num_seqs": 64},
    "workload": {
        "kind": "poisson",
        "rate_rps": 4,
        "num_requests": 30,
        "prompt_tokens": {"dist": "fixed", "value": 500},
        "output_tokens": {"dist": "fixed", "value": 50},
    },
}
BENCH = "vllm bench serve --num-prompts 10 --request-rate 4 --random-input-len 500 --random-output-len 50"
LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def test_graph_sizes_all_past_the_budget_run_every_step_eager() -> None:
    """Sizes above the token budget are dropped; with none left no graph is captured
    (it kept the smallest and padded every decode step up to it: 4x the TPOT, or nothing served
    for a size of millions)."""

    def tpot(**over: object) -> float:
        return llmsim.run({**SCENARIO, **over}).summary["mean_tpot_ms"]

    eager = tpot(cluster={"cuda_graphs": False})
    assert tpot(engine={"preset": "vllm-v1", "cuda_graph_sizes": [1024]}) == eager
    assert tpot(engine={"preset": "vllm-v1", "cuda_graph_sizes": [16777216]}) == eager
    # a list given is filtered by the token budget alone, as vLLM filters it (its 2 x max_num_seqs
    # cap is its default list's): 256 under a 512-token budget is captured, and 64 sequences pad to it
    assert tpot(engine={"preset": "vllm-v1", "cuda_graph_sizes": [256]}) > 1.3 * eager


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def test_a_misspelt_profile_column_is_refused(tmp_path, capsys) -> None:
    """A generic CSV's ``dtpye`` column was read past: fp8 GEMMs fitted as bf16 at 100 % of peak."""
    path = tmp_path / "typo.csv"
    path.write_text("op,kind,dtpye,m,n,k,seconds\n" + "mlp_up_proj,gemm,fp8,512,28672,4096,0.0003\n")
    code, err = _run(
        ["calibrate", "--hardware", "H100-SXM", "--profile", str(path), "--out", str(tmp_path / "x.yaml")], capsys
    )
    assert code == 2 and "'dtpye'" in err and "did you mean 'dtype'" in err, err
    assert not (tmp_path / "x.yaml").exists()


def test_validate_refuses_a_time_faster_than_the_peak(tmp_path, capsys) -> None:
    """As calibrate does: a MAPE of 19,551,102 % is a unit mistake, not a miss."""
    path = tmp_path / "fast.csv"
    path.write_text("op,kind,m,n,k,seconds\nmlp_up_proj,gemm,512,28672,4096,1e-9\n")
    code, err = _run(["validate", "--hardware", "H100-SXM", "--model", "llama-3-8b", "--profile", str(path)], capsys)
    assert code == 2 and "faster than H100-SXM's dense peak" in err, err


def test_a_hub_ids_format_and_the_quantization_flag_must_agree(tmp_path, capsys) -> None:
    """A flag of the name's family keeps the name's bits (GPTQ-Int8 stayed int8 only without the
    flag); one of another family is refused, as for a checkpoint folder."""
    out = tmp_path / "s.yaml"
    serve = "vllm serve Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8 --quantization gptq"
    argv = ["bench", "--hardware", "H100-SXM", "--serve", serve, "--bench", BENCH, "--scenario-out", str(out)]
    assert main(argv) == 0
    assert yaml.safe_load(out.read_text())["model"]["checkpoint"] == "gptq-int8"
    capsys.readouterr()
    serve = "vllm serve RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8 --quantization gptq"
    code, err = _run(["bench", "--hardware", "H100-SXM", "--serve", serve, "--bench", BENCH], capsys)
    assert code == 2 and "name says its checkpoint is fp8-quantised" in err, err


def test_a_hub_ids_format_resolves_on_each_device(tmp_path) -> None:
    """``--scenario-out`` of a hub id named FP8 records the format (``model.checkpoint``), not the
    compute dtype of the GPU it was written for: the sweep's A100 point ran refused (act fp8 needs
    FP8 units), and an A100-written file ran the H100 weight-only. (scenario_from_dict resolves it.)"""
    for hw, act in [("H100-SXM", "fp8"), ("A100-SXM-80GB", "bf16")]:
        raw = {**SCENARIO, "hardware": hw, "model": {"name": "llama-3.1-8b", "checkpoint": "fp8"}}
        sc = scenario_from_dict(raw, "test", tmp_path)
        assert (build_model(sc).weight_dtype, sc.model.act_dtype) == ("fp8", act)
    with pytest.raises(UserError, match="drop one"):
        scenario_from_dict({**SCENARIO, "model": {"hf_config": "x", "checkpoint": "fp8"}}, "test", tmp_path)


@pytest.mark.parametrize(
    "weights, acts",
    [
        ({"num_bits": 8, "type": "float"}, {"num_bits": 4, "type": "float"}),
        ({"num_bits": 8, "type": "int"}, {"num_bits": 8, "type": "float"}),
        ({"num_bits": 8, "type": "float"}, {"num_bits": 8, "type": "int"}),
        (
            {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
            {"num_bits": 8, "type": "int"},
        ),
    ],
)
def test_compressed_tensors_pairs_vllm_has_no_scheme_for_are_refused(weights: dict, acts: dict) -> None:
    q = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": weights, "input_activations": acts}}}
    with pytest.raises(UserError, match="config_groups.g: .* no compressed-tensors scheme"):
        read_quant({"quantization_config": q}, "config.json")


def _ct(ignore: list[str] | None = None, targets: list[str] | None = None) -> dict:
    group = {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}
    if targets is not None:
        group["targets"] = targets
    q = {"quant_method": "compressed-tensors", "config_groups": {"g": group}}
    return {"quantization_config": q | ({"ignore": ignore} if ignore is not None else {})}


def test_a_partly_quantised_checkpoint_is_refused() -> None:
    """``ignore`` / ``targets`` / ``modules_to_not_convert`` that leave decoder layers in 16 bits were
    not read: 16 GB of weights priced as 5.7 GB of int4."""
    for cfg, field in [
        (_ct(ignore=["lm_head", "re:.*"]), "ignore"),
        (_ct(targets=["re:.*lm_head"]), "targets"),
        (
            {"quantization_config": {"quant_method": "awq", "bits": 4, "modules_to_not_convert": ["self_attn", "mlp"]}},
            "modules_to_not_convert",
        ),
    ]:
        with pytest.raises(UserError, match=field):
            read_quant(cfg, "config.json")
    # the same layers named one by one, as llm-compressor writes them: refused past an eighth of the layers
    by_path = [f"model.layers.{i}.{m}" for i in range(32) for m in ("self_attn.q_proj", "mlp.down_proj")]
    with pytest.raises(UserError, match="modules of 32 layers by path"):
        read_quant(_ct(ignore=["lm_head", *by_path]) | {"num_hidden_layers": 32}, "config.json")
    # what real checkpoints leave out: the LM head, a MoE router however its pattern is written
    # (llm-compressor's Mixtral and Qwen3-Next examples), a vision tower, a few layers' modules
    routers = ["re:.*block_sparse_moe.gate$", "re:.*mlp[.]gate$", "re:.*\\.gate$", "re:.*shared_expert_gate$"]
    for cfg in [
        _ct(ignore=["lm_head", "re:.*mlp.gate$", "re:visual.*", "model.layers.0.mlp.down_proj"], targets=["Linear"]),
        _ct(ignore=["lm_head", *routers, "re:.*vision_tower.*", "model.embed_tokens"]),
        _ct(targets=["re:.*w1$", "re:.*w2$", "re:.*w3$"]),  # (Mixtral's expert names)
        {"quantization_config": {"quant_method": "awq", "bits": 4, "modules_to_not_convert": ["visual"]}},
    ]:
        assert read_quant(cfg, "config.json") is not None


def test_a_scenario_weight_dtype_brings_its_own_groups(tmp_path) -> None:
    """An AWQ checkpoint's 128-weight groups stayed on weights a scenario made fp4 (NVFP4 with
    128-weight groups) or fp8."""
    folder = tmp_path / "awq"
    folder.mkdir()
    q = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    (folder / "config.json").write_text(json.dumps(LLAMA | {"quantization_config": q}))
    raw = {**SCENARIO, "model": {"hf_config": str(folder)}}
    assert build_model(scenario_from_dict(raw, "test", tmp_path)).weight_group_size == 128
    for dtype in ("fp4", "fp8"):
        m = build_model(
            scenario_from_dict({**raw, "model": {"hf_config": str(folder), "weight_dtype": dtype}}, "test", tmp_path)
        )
        assert (m.weight_dtype, m.weight_group_size, m.weight_scale_bits) == (dtype, None, None)
    kept = build_model(
        scenario_from_dict({**raw, "model": {"hf_config": str(folder), "weight_dtype": "int4"}}, "test", tmp_path)
    )
    assert kept.weight_group_size == 128  # (the checkpoint's own dtype: its own groups)


def test_groups_that_do_not_divide_a_layer_are_refused(tmp_path) -> None:
    """An AWQ group of 7 weights (4,096 is not whole groups of it) was priced; vLLM refuses it. The
    message names where the size came from."""
    for model, source in [
        ({"name": "llama-3.1-8b", "weight_dtype": "int4", "weight_group_size": 7}, "model.weight_group_size 7"),
        ({"name": "llama-3.1-8b", "checkpoint": "awq", "weight_group_size": 96}, "model.weight_group_size 96"),
    ]:
        with pytest.raises(UserError, match=source):
            llmsim.run({**SCENARIO, "model": model})
    # a catalog entry's intermediate size is the base model's, which quantised releases pad to split
    # evenly (Qwen2.5-72B-AWQ's 29,696): not checked, so the published checkpoint runs at TP 4
    tp4 = {**SCENARIO, "model": {"name": "qwen2.5-72b", "checkpoint": "awq"}, "cluster": {"tp": 4}}
    tp4["workload"] = {**SCENARIO["workload"], "num_requests": 4}
    assert llmsim.run(tp4).summary["completed"] == 4
    folder = tmp_path / "awq7"
    folder.mkdir()
    q = {"quant_method": "awq", "bits": 4, "group_size": 7}
    (folder / "config.json").write_text(json.dumps(LLAMA | {"quantization_config": q}))
    with pytest.raises(UserError, match="the checkpoint's group_size 7: .*hidden_size"):
        llmsim.run({**SCENARIO, "model": {"hf_config": str(folder)}})
    llmsim.run({**SCENARIO, "model": {"name": "llama-3.1-8b", "weight_dtype": "int4", "weight_group_size": 64}})


def test_fp8_and_modelopt_exclusion_lists_are_read() -> None:
    """The fp8 method's ``ignored_layers`` (else ``modules_to_not_convert``: vLLM's
    Fp8Config.from_config) and ModelOpt's ``exclude_modules`` (legacy hf_quant_config.json) /
    ``ignore`` (config.json) were not read: every layer left in 16 bits was priced in fp8 / fp4."""
    attn_all = [f"model.layers.{i}.self_attn.o_proj" for i in range(32)]
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    legacy = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}}
    modelopt = {"quant_method": "modelopt", "quant_algo": "FP8"}
    for q, field in [
        (fp8 | {"ignored_layers": ["lm_head", *attn_all]}, "ignored_layers"),
        (fp8 | {"modules_to_not_convert": ["lm_head", *attn_all]}, "modules_to_not_convert"),
        (legacy | {"quantization": legacy["quantization"] | {"exclude_modules": ["model.layers.*.mlp*"]}}, "exclude"),
        (modelopt | {"ignore": ["lm_head", "model.layers.*.self_attn*"]}, "ignore"),
    ]:
        with pytest.raises(UserError, match=f"{field}.*leaves decoder layers unquantised"):
            read_quant({"quantization_config": q, "num_hidden_layers": 32}, "config.json")
    # what such checkpoints usually leave out: the LM head, a router, a layer or two
    for q in [
        fp8 | {"ignored_layers": ["lm_head", "model.layers.0.mlp.gate"]},
        # names matched whole that are no layer's path reach no decoder linear (MiniMax-M2's list)
        fp8 | {"modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]},
        modelopt | {"ignore": ["lm_head", "self_attn"]},
        legacy | {"quantization": legacy["quantization"] | {"exclude_modules": ["lm_head", "*.mlp.gate"]}},
        modelopt | {"ignore": ["lm_head", "model.layers.0.self_attn*"]},
    ]:
        assert read_quant({"quantization_config": q, "num_hidden_layers": 32}, "config.json") is not None
