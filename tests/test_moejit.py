"""vLLM's fused-MoE kernel compiles on first use (llmsim/moejit.py): which steps wait, how long,
and what a server's history carries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import llmsim
from llmsim.costmodel.fusedmoe import tile_config
from llmsim.engine import vllm_capture_sizes
from llmsim.errors import UserError
from llmsim.moejit import MoeKernels, kernel_keys
from llmsim.scenario import scenario_from_dict

COMPILE_S = 0.26  # the vllm-v1 preset's (engine.py, _VLLM_MOE_JIT_S)


def _kernels(experts: int = 128, budget: int = 8192) -> MoeKernels:
    """A vLLM 0.30 server's kernels after start-up: its profile run and the default captures."""
    return MoeKernels(experts, 8, COMPILE_S, (*vllm_capture_sizes(512), budget))


def test_tile_configs_are_vllms_default_buckets():
    """get_default_config's 16-bit buckets (vLLM PR #34846): BLOCK_SIZE_M 16/32/64/128."""
    assert tile_config(1, 128) == (16, 64, 128, 1, 4, 4)
    assert tile_config(33, 128) == (32, 64, 128, 1, 4, 3)
    assert tile_config(65, 128) == (32, 128, 64, 1, 4, 3)
    assert tile_config(128, 128) == (64, 128, 64, 1, 4, 3)
    assert tile_config(129, 128) == (64, 128, 64, 1, 8, 3)
    assert tile_config(8192, 128) == (128, 128, 64, 1, 8, 3)
    assert tile_config(8192, 8)[3] == 16  # (more than 128 tokens an expert: grouped launch order)


def test_an_odd_token_count_changes_the_key_and_an_even_one_does_not():
    """EM and num_valid_tokens (M x 8) are divisible by 16 exactly when M is even."""
    assert kernel_keys(1024, 128, 8) == kernel_keys(8192, 128, 8)
    assert kernel_keys(1025, 128, 8) != kernel_keys(1024, 128, 8)
    assert kernel_keys(1025, 128, 8) == kernel_keys(3001, 128, 8)
    assert all(len(set(kernel_keys(m, 128, 8))) == 2 for m in (1, 7, 100, 1025))  # two GEMMs


def test_start_up_leaves_only_eager_odd_steps_to_compile():
    """Under CUDA graphs every step up to 512 tokens runs padded to a captured size, which start-up
    compiled; past it, even token counts share the profile run's keys, odd ones do not."""
    k = _kernels()
    assert not any(k.pending(m) for m in vllm_capture_sizes(512))
    assert not any(k.pending(m) for m in range(514, 8193, 2))
    assert all(k.pending(m) for m in range(513, 8193, 2))
    assert k.stall_s(1025) == pytest.approx(2 * COMPILE_S)
    assert k.stall_s(4097) == 0.0 and not k.pending(1027)  # (compiled once for every odd count)
    assert (k.compiles, k.wait_s) == (2, pytest.approx(2 * COMPILE_S))
    eager = MoeKernels(128, 8, COMPILE_S, (8192,))  # enforce_eager: no captures
    assert eager.pending(1) and eager.pending(40) and not eager.pending(8192)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("moejit")
    for gap in (1, 30):
        text = f"arrival_s,prompt_tokens,output_tokens\n0.0,1024,512\n{gap}.0,1024,8\n"
        (folder / f"gap{gap}.csv").write_text(text)
    return folder


def _scenario(
    traces: Path, gap_s: int, engine: object = "vllm-v1", model: str = "qwen3-30b-a3b-instruct-2507"
) -> llmsim.Scenario:
    """Two 1,024-token prompts on an H100, the second ``gap_s`` after the first (which decodes
    512 tokens, about 4 s)."""
    return scenario_from_dict(
        {
            "name": "moejit",
            "seed": 0,
            "model": model,
            "hardware": "H100-SXM",
            "engine": engine,
            "workload": {"kind": "trace", "trace": {"path": str(traces / f"gap{gap_s}.csv"), "format": "generic"}},
            "output": {"steps": "all"},
        },
        "moejit.yaml",
        None,
    )


def test_a_prompt_beside_one_decode_waits_for_the_compile(traces):
    """The second prompt runs beside the first's decode: 1,025 tokens, eager, odd. Its first
    token comes the two compiles later than on a server that had them."""
    res = llmsim.run(_scenario(traces, 1))
    warm = llmsim.run(_scenario(traces, 1, {"preset": "vllm-v1", "moe_jit_compile_s": 0}))
    assert res.summary["moe_jit"] == {"compile_s": COMPILE_S, "kernels_compiled": 2, "wait_s": 2 * COMPILE_S}
    ttft, warm_ttft = res.requests["ttft_s"].to_numpy(), warm.requests["ttft_s"].to_numpy()
    assert ttft[0] == warm_ttft[0]  # (the first prompt ran alone: 1,024 tokens, compiled at start-up)
    assert ttft[1] - warm_ttft[1] == pytest.approx(2 * COMPILE_S, rel=0.02)
    assert res.steps["duration_s"].max() > 2 * COMPILE_S
    assert llmsim.run(_scenario(traces, 1), exact_steps=True).requests.equals(res.requests)  # (the fast path agrees)
    assert "moe_jit" not in warm.summary  # (nothing to compile: not tracked)


def test_no_compile_alone_on_a_dense_model_or_the_ideal_engine(traces):
    alone = llmsim.run(_scenario(traces, 30)).summary  # (the second prompt comes after the first is done)
    assert alone["moe_jit"]["kernels_compiled"] == 0
    assert "moe_jit" not in llmsim.run(_scenario(traces, 1, model="qwen3-8b")).summary
    assert "moe_jit" not in llmsim.run(_scenario(traces, 1, engine="ideal")).summary


def test_a_server_s_history_keeps_its_kernels(traces):
    first = llmsim.run(_scenario(traces, 1), keep_server_cache=True)
    cache = first.server_cache
    assert cache is not None and len(cache.kernels) == 1 and len(cache.kernels[0]) > 2
    later = llmsim.run(_scenario(traces, 1), server_cache=cache).summary
    assert later["moe_jit"]["kernels_compiled"] == 0
    forged = dataclasses.replace(cache, kernels=((("not", "a", "key"),),))
    with pytest.raises(UserError, match="server_cache.kernels: expected the MoE kernel keys an earlier run left"):
        llmsim.run(_scenario(traces, 1), server_cache=forged)
    # one entry a replica, as a run leaves them (a hand-made cache with another count is refused)
    doubled = dataclasses.replace(cache, kernels=cache.kernels * 2)
    with pytest.raises(UserError, match=r"server_cache.kernels: expected one entry for each of the deployment's 1 "):
        llmsim.run(_scenario(traces, 1), server_cache=doubled)
    # a bf16 server's kernels (and prefix cache) are not an fp16 server's
    bf16 = _scenario(traces, 1)
    fp16 = bf16.model_copy(
        update={"model": bf16.model.model_copy(update={"act_dtype": "fp16", "weight_dtype": "fp16"})}
    )
    with pytest.raises(UserError, match=r"its model.weight_dtype and model.act_dtype \('bf16', 'bf16'\)"):
        llmsim.run(fp16, server_cache=cache)


def test_the_compile_time_is_checked(traces):
    with pytest.raises(UserError, match=r"engine.moe_jit_compile_s must be a number of seconds from 0"):
        _scenario(traces, 1, {"preset": "vllm-v1", "moe_jit_compile_s": -1})


def test_a_warm_server_is_the_same_engine(traces):
    """moe_jit_compile_s: 0 says what the server compiled, not how the engine runs: the preset keeps
    its name, so its validated accuracy still applies."""
    sc = _scenario(traces, 1, {"preset": "vllm-v1", "moe_jit_compile_s": 0})
    assert sc.engine_spec.name == "vllm-v1"
    assert _scenario(traces, 1, {"preset": "vllm-v1", "output_delay_s": 0}).engine_spec.name.startswith(
        "vllm-v1 (modified"
    )


def test_the_kernels_line_says_which_server() -> None:
    """`llmsim run` and `llmsim bench` name the server the kernels compiled on: a fresh one, or one
    that had served the --after runs (their kernels kept)."""
    from llmsim.commands.run import moe_jit_line

    s = {"moe_jit": {"kernels_compiled": 2, "wait_s": 2 * COMPILE_S}}
    assert "(a fresh vLLM server;" in moe_jit_line(s)
    assert "(a server that had served only the --after runs;" in moe_jit_line(s, served_before=True)
    assert moe_jit_line({"moe_jit": {"kernels_compiled": 0}}) is None
