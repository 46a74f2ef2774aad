"""Physics the cost model must get right, each checked against a first-principles number."""

from __future__ import annotations

import math

import pytest

from llmsim.costmodel.ops import batch_shape, step_ops
from llmsim.costmodel.roofline import CostConfig, CostModel
from llmsim.hardware import load_profile
from llmsim.models import CATALOG, weight_param_bytes

EXPERT_OPS = ("mlp_up_proj", "mlp_down_proj")  # an MoE layer's grouped expert GEMMs
L2_7B = CATALOG["llama-2-7b"]


def _weight_bytes(cm: CostModel, shape) -> float:
    return sum(o.weight_bytes * o.count for o in cm.ops(shape))


def test_decode_step_is_weights_plus_kv_over_bandwidth() -> None:
    hw = load_profile("A100-SXM-80GB")
    cm = CostModel(L2_7B, hw, CostConfig(cuda_graphs=True))
    ctx = [2048] * 16
    shape = batch_shape([], ctx)
    kv_bytes = sum(c + 1 for c in ctx) * L2_7B.kv_bytes_per_token()
    floor_s = (_weight_bytes(cm, shape) + kv_bytes) / (hw.bandwidth * hw.efficiency.memory_fraction.value)
    device_s = cm.stage_time(shape)
    # streaming weights + KV is most of the step; the rest is small kernels and their latency floor
    assert floor_s < device_s < 1.35 * floor_s
    assert all(t.bound == "memory" for t in cm.priced(shape) if t.op.kind == "gemm")


def test_prefill_is_flops_over_peak() -> None:
    hw = load_profile("H100-SXM")
    cm = CostModel(L2_7B, hw)
    shape = batch_shape([(8192, 0)], [])
    flops = sum(o.flops * o.count for o in cm.ops(shape))
    ideal_s = flops / hw.peak("bf16")
    # achievable is gemm_max_fraction (~0.8) of peak, and attention runs slower still
    assert ideal_s / hw.efficiency.gemm_max_fraction.value < cm.stage_time(shape) < 1.6 * ideal_s
    gemms = [t for t in cm.priced(shape) if t.op.kind == "gemm" and t.op.m == 8192]
    assert gemms and all(t.bound == "compute" for t in gemms)


def test_fp8_weights_halve_decode_weight_bytes() -> None:
    hw = load_profile("H100-SXM")
    shape = batch_shape([], [1024] * 8)
    bf16 = CostModel(L2_7B, hw, CostConfig(weight_dtype="bf16"))
    fp8 = CostModel(L2_7B, hw, CostConfig(weight_dtype="fp8", act_dtype="fp8"))

    def layer_weight_bytes(cm: CostModel) -> float:
        return sum(t.op.weight_bytes * t.op.count for t in cm.priced(shape) if t.op.name != "lm_head")

    assert layer_weight_bytes(fp8) == pytest.approx(layer_weight_bytes(bf16) / 2)
    # FP8 checkpoints leave the LM head in bf16
    head = [t.op for t in fp8.priced(shape) if t.op.name == "lm_head"]
    assert head[0].dtype == "bf16" and head[0].weight_bytes == L2_7B.vocab_size * L2_7B.hidden_size * 2
    assert fp8.step_time(shape) < bf16.step_time(shape)
    # W8A8 runs the GEMMs at the FP8 tensor-core rate: prefill gets faster too
    big = batch_shape([(4096, 0)], [])
    assert fp8.stage_time(big) < 0.7 * bf16.stage_time(big)


def test_w8a8_keeps_activations_between_gemms_in_bf16() -> None:
    """Only the GEMMs run 8-bit: norms, residual adds, all-reduces and (with a bf16 KV cache)
    attention stay bf16, at bf16 rates and bytes (vLLM Fp8LinearMethod, TRT-LLM FP8 GEMMs)."""
    hw = load_profile("H100-SXM")
    shape = batch_shape([(2048, 0)], [512] * 4)
    bf16 = {t.op.name: t.op for t in CostModel(L2_7B, hw, CostConfig(tp=2)).priced(shape)}
    fp8 = {
        t.op.name: t.op
        for t in CostModel(L2_7B, hw, CostConfig(tp=2, weight_dtype="fp8", act_dtype="fp8")).priced(shape)
    }
    for name in ("input_layernorm", "add", "tp_all_reduce", "attention_prefill", "attention_decode", "kv_cache_write"):
        assert fp8[name].dtype == "bf16" and fp8[name].bytes == bf16[name].bytes, name
    up = fp8["mlp_up_proj"]
    assert up.dtype == "fp8" and up.bytes_written == bf16["mlp_up_proj"].bytes_written  # bf16 out
    assert up.bytes_read < bf16["mlp_up_proj"].bytes_read  # fp8 input and weights
    # an fp8 KV cache runs attention in fp8 (FlashAttention-3 / TRT-LLM FP8 FMHA)
    kv8 = CostModel(L2_7B, hw, CostConfig(tp=2, weight_dtype="fp8", act_dtype="fp8", kv_dtype="fp8"))
    assert {t.op.name: t.op for t in kv8.priced(shape)}["attention_prefill"].dtype == "fp8"


def test_quantised_weights_keep_embeddings_and_lm_head_16_bit() -> None:
    m = L2_7B
    layers = m.num_layers * m.layer_params()
    rest = m.total_params() - layers
    # an int4 checkpoint is AWQ / GPTQ's by default: an fp16 scale and a 4-bit zero per 128 weights
    assert m.weight_bytes("int4") == pytest.approx(layers * (0.5 + 20 / 8 / 128) + rest * 2)
    assert m.with_(weight_group_size=0).weight_bytes("int4") == pytest.approx(layers * 0.5 + rest * 2)
    assert m.weight_bytes("fp8") == pytest.approx(layers + rest * 2)
    assert m.weight_bytes("bf16") == m.total_params() * 2


def test_group_scales_are_streamed_with_the_weights_not_unpacked() -> None:
    """A group's scale is bytes every weight stream reads (ITREX's default, an fp32 scale per 32
    weights, makes int4 5 bits a weight), not more weights to unpack; NVFP4 is 4.5 bits."""
    assert weight_param_bytes("int4", 32, 32) * 8 == 5.0
    assert weight_param_bytes("fp4") * 8 == 4.5 and weight_param_bytes("mxfp4") * 8 == 4.25
    assert weight_param_bytes("fp8") == 1.0 and weight_param_bytes("int8", 128) * 8 == 8.125  # fp16 scale
    hw = load_profile("L4")  # a batch-4 decode there is weight-bound (on an A100 unpacking takes about as long)
    shape = batch_shape([], [512] * 4)

    def gemms(**groups: float) -> dict:
        cm = CostModel(L2_7B, hw, CostConfig(weight_dtype="int4", **groups))  # type: ignore[arg-type]
        return {t.op.name: t for t in cm.priced(shape) if t.op.kind == "gemm"}

    bare, g32 = gemms(weight_group_size=0), gemms(weight_group_size=32, weight_scale_bits=32)
    up_bare, up = bare["mlp_up_proj"], g32["mlp_up_proj"]
    assert up.op.weight_bytes == pytest.approx(up_bare.op.weight_bytes * 5 / 4)
    assert up.dequant_s == pytest.approx(up_bare.dequant_s)  # as many weights to unpack
    assert up.memory_s > up_bare.memory_s and up.total_s > up_bare.total_s  # a batch-4 decode streams them
    assert g32["lm_head"].op.weight_bytes == bare["lm_head"].op.weight_bytes  # the 16-bit head has none


def test_int4_weight_only_pays_dequantisation() -> None:
    hw = load_profile("A100-SXM-80GB")
    int4 = CostModel(L2_7B, hw, CostConfig(weight_dtype="int4"))
    decode = [t for t in int4.priced(batch_shape([], [512] * 4)) if t.op.kind == "gemm"]
    assert all(t.dequant_s > 0 for t in decode if t.op.name != "lm_head")
    # AWQ / GPTQ checkpoints leave the LM head 16-bit: nothing to unpack there
    assert [t.dequant_s for t in decode if t.op.name == "lm_head"] == [0.0]
    bf16 = CostModel(L2_7B, hw)
    # fewer bytes make decode faster, though not the full 4x (dequantisation and fixed costs)
    ratio = bf16.stage_time(batch_shape([], [512] * 4)) / int4.stage_time(batch_shape([], [512] * 4))
    assert 1.5 < ratio < 4.0


def test_flash_attention_bytes_linear_naive_quadratic() -> None:
    hw = load_profile("A100-SXM-80GB")

    def attn_bytes(kernel: str, n: int) -> float:
        ops = step_ops(L2_7B, batch_shape([(n, 0)], []), CostConfig(attention_kernel=kernel))
        return next(o.bytes for o in ops if o.name == "attention_prefill")

    flash = attn_bytes("flash", 8192) / attn_bytes("flash", 4096)
    naive = attn_bytes("naive", 8192) / attn_bytes("naive", 4096)
    assert flash == pytest.approx(2.0, rel=1e-9)
    assert naive == pytest.approx(4.0, rel=0.03)  # the n² score traffic dominates
    slow = CostModel(L2_7B, hw, CostConfig(attention_kernel="naive")).prefill_time(8192)
    assert slow > CostModel(L2_7B, hw).prefill_time(8192)


def test_tpu_pads_gemm_dims_to_its_mxu() -> None:
    hw = load_profile("TPU-v5e")
    cm = CostModel(L2_7B.with_(intermediate_size=11000), hw)  # up-proj n = 22000, not a multiple of 128
    op = next(o for o in cm.ops(batch_shape([(130, 0)], [])) if o.name == "mlp_up_proj")
    assert (op.m, op.n, op.k) == (130, 22000, 4096)
    # the weight tile dims pad to the 128x128 MXU; the streamed rows (m) are not padded: their
    # fill/drain under-use is the m/(m + 128) efficiency curve instead
    assert cm.padded_flops(op) == pytest.approx(op.flops * 22016 / 22000)
    aligned = next(o for o in CostModel(L2_7B, hw).ops(batch_shape([(130, 0)], [])) if o.name == "mlp_up_proj")
    assert CostModel(L2_7B, hw).padded_flops(aligned) == aligned.flops
    # a GPU pads nothing
    assert CostModel(L2_7B, load_profile("H100-SXM")).padded_flops(op) == op.flops


def test_numa_unaware_cpu_is_slower() -> None:
    hw = load_profile("Xeon-8480+")
    shape = batch_shape([], [512] * 4)
    aware = CostModel(L2_7B, hw, CostConfig(numa_aware=True)).step_time(shape)
    unaware = CostModel(L2_7B, hw, CostConfig(numa_aware=False)).step_time(shape)
    assert unaware > 1.3 * aware


def test_decode_grows_with_total_context_prefill_superlinear() -> None:
    cm = CostModel(L2_7B, load_profile("A100-SXM-80GB"))
    assert cm.decode_time([4096] * 16) > cm.decode_time([1024] * 16) > cm.decode_time([256] * 16)
    # same total context split differently costs about the same (paged attention reads every byte)
    assert cm.decode_time([2048] * 16) == pytest.approx(cm.decode_time([1024, 3072] * 8), rel=0.01)
    t1, t2 = cm.prefill_time(8192), cm.prefill_time(16384)
    assert t2 > 2.0 * t1  # attention is quadratic in prompt length


def test_gemm_wave_quantisation_and_small_m() -> None:
    cm = CostModel(L2_7B, load_profile("A100-SXM-80GB"))
    # 108 SMs, 128x128 tiles: n = 108 tiles fills one wave exactly; one more tile starts a second wave
    full = cm.gemm_efficiency(128, 108 * 128)
    spill = cm.gemm_efficiency(128, 109 * 128)
    assert spill < full
    assert cm.gemm_efficiency(8, 4096) < 0.2 * cm.gemm_efficiency(4096, 4096)


@pytest.mark.parametrize("profile", ["A100-SXM-80GB", "A40", "H100-SXM", "L4", "RTX-PRO-6000", "MI300X"])
def test_a_dense_gemm_never_gets_faster_with_more_rows(profile: str) -> None:
    """One row past a whole tile adds a row of tiles: the wave term read it as the launch filling
    more SMs while the FLOPs grew by one row, so 129 rows priced up to 9 % under 128 (Qwen3-14B's
    129-token prompt 12.3 ms where 128 read 13.4 ms on an H100). The time is held at the whole
    tiles' below it (GemmCurve.efficiency), for every width and every row count."""
    cm = CostModel(L2_7B, load_profile(profile))
    peak = cm.hw.peak("bf16")
    for n in (1024, 4096, 5120, 11008, 13824, 27648, 32000):
        times = [m / (peak * cm.gemm_efficiency(m, n)) for m in range(1, 1100)]
        drops = [m + 2 for m, (a, b) in enumerate(zip(times, times[1:], strict=False)) if b < a * (1 - 1e-12)]
        assert not drops, (n, drops[:5])


def test_a_prompt_one_token_past_a_tile_is_not_cheaper() -> None:
    cm = CostModel(CATALOG["qwen3-14b"], load_profile("H100-SXM"))
    times = [cm.stage_time(batch_shape([(t, 0)], [])) for t in range(120, 270)]
    assert all(b >= a for a, b in zip(times, times[1:], strict=False))


def test_cuda_graphs_remove_launch_gaps_in_decode_only() -> None:
    hw = load_profile("A100-SXM-80GB")
    decode = batch_shape([], [64] * 2)
    eager = CostModel(L2_7B, hw).breakdown(decode)
    graphs = CostModel(L2_7B, hw, CostConfig(cuda_graphs=True)).breakdown(decode)
    assert eager["kernel_launch_overhead"] >= 0 and graphs["kernel_launch_overhead"] == 0
    assert graphs["kernel_fixed_latency"] == eager["kernel_fixed_latency"] > 0


def test_breakdown_terms_sum_to_step_time() -> None:
    cm = CostModel(CATALOG["llama-2-70b"], load_profile("H100-SXM"), CostConfig(tp=4, pp=2))
    shape = batch_shape([(512, 0)], [1024] * 32)
    parts = cm.breakdown(shape)
    assert {"tp_all_reduce", "pp_send", "step_overhead", "kernel_fixed_latency", "mlp_up_proj"} <= set(parts)
    assert sum(parts.values()) == pytest.approx(cm.step_time(shape), rel=1e-9)


def test_layers_pp_does_not_divide_are_priced_as_the_largest_stage() -> None:
    """Llama-3.1-405B's 126 layers over 8 stages: engines run stages of 16 and 15 layers, and the
    16-layer stage paces the pipeline and holds the most weights and KV per token."""
    m = CATALOG["llama-3.1-405b"]
    assert (m.stage_layers(8), m.stage_layers(7), m.stage_layers(1)) == (16, 18, 126)
    hw = load_profile("H100-SXM")
    shape = batch_shape([], [1024] * 32)
    uneven, even = CostModel(m, hw, CostConfig(tp=1, pp=8)), CostModel(m, hw, CostConfig(tp=1, pp=7))
    assert uneven.stage_time(shape) / even.stage_time(shape) == pytest.approx(16 / 18, rel=0.02)
    assert m.kv_bytes_per_token_per_device("bf16", 1, 8) == m.kv_bytes_per_token("bf16") * 16 / 126
    # the stages' weights: their layers, the first the embedding, the last the final norm and LM head
    ends = (m.embedding_params() + m.norm_params() + m.lm_head_params()) * 2
    layer = (m.weight_bytes("bf16") - ends) / 126
    head = (m.norm_params() + m.lm_head_params()) * 2
    assert m.weight_bytes_per_device("bf16", 1, 8) == pytest.approx(16 * layer)  # (a 16-layer stage: 6.5 GB a layer)
    assert m.weight_bytes_per_device("bf16", 1, 7) == pytest.approx(18 * layer + head)  # (even: the last stage)


def test_a_pipelines_first_and_last_stages_hold_the_embedding_and_the_head() -> None:
    """vLLM builds the embedding on the first PP rank and the final norm and LM head on the last (a
    tied head loaded there as a copy), and sizes every rank's cache to the fewest blocks any rank
    affords: Gemma-2-9B's 256,000 x 3,584 embedding over 4 stages is 1.8 GB more on the first and
    last (the weights spread evenly read 4.6 GB a GPU where they hold 5.8)."""
    m = CATALOG["gemma-2-9b"]
    assert m.tie_embeddings
    emb = m.embedding_params() * 2
    layers = (m.weight_bytes("bf16") - emb - m.norm_params() * 2) / m.num_layers
    want = m.num_layers // 4 * layers + emb + m.norm_params() * 2  # (the last stage: its layers, norm, head copy)
    assert m.weight_bytes_per_device("bf16", 1, 4) == pytest.approx(want)
    assert m.weight_bytes_per_device("bf16", 1, 1) == pytest.approx(m.weight_bytes("bf16"))


def test_all_reduce_nvlink_faster_than_pcie() -> None:
    shape = batch_shape([(2048, 0)], [])
    nvlink = CostModel(L2_7B, load_profile("H100-SXM"), CostConfig(tp=2)).breakdown(shape)["tp_all_reduce"]
    pcie = CostModel(L2_7B, load_profile("H100-PCIe"), CostConfig(tp=2)).breakdown(shape)["tp_all_reduce"]
    assert pcie > 2 * nvlink


def test_tp_gathers_the_logits_and_every_rank_samples_the_whole_vocabulary() -> None:
    """vLLM's LogitsProcessor all-gathers the vocab-parallel LM head's logits over the TP group
    and every rank samples from all of them: the gather is one ring all-gather of the step's
    sampled rows x vocab in the head's 16-bit dtype, over the TP link; nothing at TP 1."""
    from llmsim.costmodel.comm import all_gather_s, tp_link

    hw = load_profile("H100-PCIe")
    shape = batch_shape([], [1024] * 64)  # 64 decodes: 64 sampled rows
    one = {o.name: o for o in CostModel(L2_7B, hw).ops(shape)}
    assert "logits_all_gather" not in one
    for cfg in (CostConfig(tp=4), CostConfig(tp=4, weight_dtype="fp8", act_dtype="fp8")):
        cm = CostModel(L2_7B, hw, cfg)
        ops = {o.name: o for o in cm.ops(shape)}
        gather = ops["logits_all_gather"]
        whole = 64 * L2_7B.vocab_size * 2
        assert (gather.bytes_written, gather.bytes_read, gather.ranks) == (whole, whole / 4, 4)
        assert cm.breakdown(shape)["logits_all_gather"] == pytest.approx(
            all_gather_s(whole, 4, tp_link(hw, 4), hw.efficiency.allreduce_bus_fraction.value)
        )
        # the sampler's pass covers the whole vocabulary on every rank, as at TP 1
        assert ops["sampling"].flops == one["sampling"].flops
    # the gather grows with the rows sampled, not with the tokens computed: a prompt chunk that
    # ends mid-prompt samples nothing
    mid = batch_shape([(512, 0)], [])
    mid.logits_rows = 0
    assert "logits_all_gather" not in {o.name for o in CostModel(L2_7B, hw, CostConfig(tp=4)).ops(mid)}


def test_moe_imbalance_slows_expert_gemms() -> None:
    moe = next(m for m in CATALOG.values() if m.is_moe)
    hw = load_profile("H100-SXM")
    shape = batch_shape([(4096, 0)], [])
    even = CostModel(moe, hw, CostConfig(tp=2)).breakdown(shape)["mlp_up_proj"]
    skew = CostModel(moe, hw, CostConfig(tp=2, moe_imbalance=1.5)).breakdown(shape)["mlp_up_proj"]
    assert skew == pytest.approx(1.5 * even, rel=0.05)


def test_local_global_attention_splits_layers_and_caps_local_context() -> None:
    """Gemma-2 interleaves 4096-token sliding-window layers with global ones: the local layers'
    KV reads stop growing at the window, the global layers' keep growing with the context."""
    from llmsim.costmodel import CostModel, batch_shape
    from llmsim.hardware import load_profile
    from llmsim.models import CATALOG

    model = CATALOG["gemma-2-9b"]
    window, local = model.attention_windows()
    assert (window, local) == (None, 4096)
    cm = CostModel(model, load_profile("H100-SXM"))

    def attn(ctx: int) -> dict:
        ops = {op.name: op for op in cm.ops(batch_shape([], [ctx] * 8, window, local_window=local))}
        return ops

    short, long = attn(2000), attn(16000)
    assert short["attention_decode"].count == 21 and short["attention_decode_local"].count == 21
    # below the window both kinds read the same KV bytes per layer
    assert short["attention_decode"].bytes_read == short["attention_decode_local"].bytes_read
    # beyond it, local layers read at most `window` tokens per sequence, global ones all of them
    kv_row = 2 * model.num_kv_heads * model.head_dim * 2  # K and V bytes per token per layer (bf16)
    q_bytes = 8 * model.q_size * 2
    assert long["attention_decode_local"].bytes_read == q_bytes + 8 * 4096 * kv_row
    assert long["attention_decode"].bytes_read == q_bytes + 8 * 16001 * kv_row
    # and a uniform sliding-window model (Mistral) windows every layer
    mistral = CATALOG["mistral-7b"]
    assert mistral.attention_windows() == (4096, None)
    ops = CostModel(mistral, cm.hw).ops(batch_shape([], [16000], 4096))
    assert [op.name for op in ops if op.kind == "attention"] == ["attention_decode"]


def test_each_compute_dtype_reaches_its_own_measured_fraction() -> None:
    """FP8 GEMMs reach 0.689 of the FP8 peak on H100, not bf16's 0.780 (MAMF's best shapes, 0.709
    and 0.803, in the same ratio): a big FP8 GEMM is 1.77x a bf16 one, not 2x
    (hardware_profiles/H100-SXM.yaml gemm_dtype_fraction)."""
    hw = load_profile("H100-SXM")
    bf16 = CostModel(L2_7B, hw, CostConfig())
    fp8 = CostModel(L2_7B, hw, CostConfig(weight_dtype="fp8", act_dtype="fp8"))
    big = 8192
    assert fp8.gemm_efficiency(big) / bf16.gemm_efficiency(big) == pytest.approx(0.709 / 0.803, rel=2e-3)
    up = {t.op.name: t for t in bf16.priced(batch_shape([(big, 0)], []))}["mlp_up_proj"]
    up8 = {t.op.name: t for t in fp8.priced(batch_shape([(big, 0)], []))}["mlp_up_proj"]
    assert up.compute_s / up8.compute_s == pytest.approx(2 * 0.709 / 0.803, rel=2e-3)  # peaks 989.4 / 1978.9


def test_w8a8_int8_computes_at_the_int8_rate() -> None:
    hw = load_profile("A100-SXM-80GB")
    int8 = CostModel(L2_7B, hw, CostConfig(weight_dtype="int8", act_dtype="int8"))
    up = {t.op.name: t for t in int8.priced(batch_shape([(8192, 0)], []))}["mlp_up_proj"]
    assert up.op.dtype == "int8" and up.dequant_s == 0.0  # int8 weights, int8 inputs: nothing to unpack
    assert up.compute_s * hw.peak("int8") * int8.gemm_efficiency(8192, up.op.n) == pytest.approx(up.op.flops)
    assert int8.gemm_efficiency(8192) < 0.706


def test_moe_expert_gemms_are_priced_at_the_rows_each_expert_gets() -> None:
    """Mixtral, 1,024 prompt tokens, top-2 of 8 experts: 2,048 routed rows over 8 experts is 256
    rows per expert GEMM, and the grouped kernel's tiles fill at 256 rows, not 2,048. Its tiles
    are whole: each expert's rows pad to the 128-row tile vLLM's default config gives 1,024
    tokens, 2.5 tiles an expert on average (256 rows, give or take 16), and it executes those."""
    from llmsim.costmodel.fusedmoe import padded_share, tile_config
    from llmsim.models import get_model

    mixtral = get_model("mixtral-8x7b")
    hw = load_profile("H100-SXM")
    cm = CostModel(mixtral, hw, CostConfig(tp=2))
    up = {t.op.name: t for t in cm.priced(batch_shape([(1024, 0)], []))}["mlp_up_proj"]
    assert up.op.m == 256 and up.op.flops == 2.0 * 2048 * up.op.n * up.op.k
    # the 8 experts' tiles share one launch: the last wave is counted over all of them
    assert up.op.groups == 8
    block_m, block_n = tile_config(1024, 8)[:2]
    assert (block_m, block_n) == cm.expert_tile_shape(up.op) == (128, 128)
    rows, tiles = cm.expert_tiles(up.op)
    assert rows == padded_share(256, 128) and 2.4 * 128 < rows < 2.6 * 128
    # the launch's tiles, as the work they hold: 8 experts' rows in tiles of the kernel's shape
    assert tiles == pytest.approx(8 * rows / block_m * math.ceil(up.op.n / block_n))
    eff = cm.gemm_efficiency(rows, 8 * up.op.n, tiles=tiles)
    # ... at the grouped kernel's own share of that rate (efficiency.moe_gemm_fraction)
    rate = hw.efficiency.moe_gemm_fraction.value
    assert up.compute_s == pytest.approx(up.op.flops * rows / 256 / (hw.peak("bf16") * eff * rate))
    assert cm.gemm_efficiency(256, up.op.n) < cm.gemm_efficiency(2048, up.op.n)
    # a TPU pads n and k to its MXU, whatever the rows: FLOPs scale, they are not recomputed from m
    tpu = CostModel(mixtral, load_profile("TPU-v5e"), CostConfig(tp=2))
    up_tpu = {t.op.name: t.op for t in tpu.priced(batch_shape([(1024, 0)], []))}["mlp_up_proj"]
    assert tpu.padded_flops(up_tpu) >= up_tpu.flops


@pytest.mark.parametrize(("model", "weights"), [("gpt-oss-120b", None), ("qwen3-30b-a3b-instruct-2507", "int4")])
def test_an_moe_steps_experts_never_get_faster_with_more_tokens(model: str, weights: str | None) -> None:
    """The grouped expert GEMMs are priced at each touched expert's exact share of the rows: a
    share rounded to whole rows, with the exact FLOPs, made the time fall by up to a third each
    time it crossed 1.5, 2.5, ... (A100, where the experts' compute shows through the memory roof)."""
    spec = CATALOG[model] if weights is None else CATALOG[model].with_(weight_dtype=weights)
    cfg = CostConfig(weight_dtype=spec.weight_dtype, kv_dtype="bf16", act_dtype="bf16")
    cost = CostModel(spec, load_profile("A100-SXM-80GB"), cfg)
    # the expert GEMMs alone (the dense ones: test_a_dense_gemm_never_gets_faster_with_more_rows)
    times = [
        sum(v for k, v in cost.breakdown(batch_shape([], [1000] * t)).items() if k in EXPERT_OPS) for t in range(1, 161)
    ]
    drops = [(t + 2, b / a - 1) for t, (a, b) in enumerate(zip(times, times[1:], strict=False)) if b < a * (1 - 1e-12)]
    assert not drops, drops


@pytest.mark.parametrize(("profile", "serial"), [("Xeon-8480+", True), ("EPYC-9654", True), ("A100-SXM-80GB", False)])
def test_cpu_operators_pay_their_whole_launch_gpu_kernels_only_the_gap(profile: str, serial: bool) -> None:
    """A GPU's host queues the next kernel while one runs, so a launch idles the device only where
    it is longer than the kernel; a CPU's cores dispatch the operator they then compute (eager
    PyTorch), so every call pays the launch on top. Checked per op and on a whole decode step."""
    hw = load_profile(profile)
    launch = hw.overheads.kernel_launch_s.value
    assert launch > 0
    cm = CostModel(L2_7B, hw)
    shape = batch_shape([], [2048] * 4)
    priced = cm.priced(shape)
    for t in priced:
        if t.op.kind == "comm":
            continue
        expected = launch if serial else max(0.0, launch - t.kernel_s)
        assert t.launch_s == pytest.approx(expected), t.op.name
    long_ops = [t for t in priced if t.op.kind == "gemm" and t.kernel_s > launch]
    assert long_ops, "the step has operators longer than one launch"
    assert all((t.launch_s > 0) == serial for t in long_ops)
    # the step is its ops' sum, attention's fast path included (tests/test_one_source.py holds the
    # fast path to price); a CPU step exceeds its kernels by every call's launch
    kernels_s = sum(t.kernel_s * t.op.count for t in priced)
    calls = sum(t.op.count for t in priced if t.op.kind != "comm")
    gap_s = cm.stage_time(shape) - kernels_s
    if serial:
        assert gap_s == pytest.approx(calls * launch, rel=1e-9)
    else:
        assert gap_s < calls * launch


def test_a_cpu_pays_the_engines_cost_per_operator_where_the_engine_sets_one() -> None:
    """On a CPU the host's cost per operator is the software's (EngineSpec.cpu_op_s: vLLM's, measured
    at two model depths, replaces the profile's launch); the ideal engine and a GPU keep the profile's."""
    from pathlib import Path

    from llmsim.engine import PRESETS, for_hardware, load_engine
    from llmsim.errors import UserError

    vllm = PRESETS["vllm-v1"]
    assert vllm.cpu_op_s is not None and vllm.cpu_op_s > 10 * 2e-6  # far above the profiles' 2 us prior
    shape = batch_shape([], [512] * 2)
    for profile, engine, launch in [
        ("Xeon-8480+", "vllm-v1", vllm.cpu_op_s),
        ("Xeon-8480+", "ideal", None),
        ("A100-SXM-80GB", "vllm-v1", None),
    ]:
        hw = load_profile(profile)
        spec = for_hardware(PRESETS[engine], hw)
        cm = CostModel(L2_7B, hw, CostConfig(cuda_graphs=False), spec)
        want = hw.overheads.kernel_launch_s.value if launch is None else launch
        for t in cm.priced(shape):
            if t.op.kind == "comm":
                continue
            gap = want if hw.family == "cpu" else max(0.0, want - t.kernel_s)
            assert t.launch_s == pytest.approx(gap), (profile, engine, t.op.name)
    # a calibrated profile (here the third vLLM-CPU campaign's serving fit: launch 40 us) keeps its own
    fitted = load_profile(
        Path(__file__).resolve().parent.parent / "data/validation/vllm-cpu-xeon/engine-fit/hardware.yaml"
    )
    assert fitted.calibration is not None
    cm = CostModel(L2_7B, fitted, CostConfig(), for_hardware(vllm, fitted))
    assert {t.launch_s for t in cm.priced(shape) if t.op.kind != "comm"} == {fitted.overheads.kernel_launch_s.value}
    # a scenario may set or clear it; a bad value is refused by name
    assert load_engine({"preset": "vllm-v1", "cpu_op_s": None}, Path("."), "s.yaml").cpu_op_s is None
    assert load_engine({"preset": "ideal", "cpu_op_s": 5e-6}, Path("."), "s.yaml").cpu_op_s == 5e-6
    with pytest.raises(UserError, match="engine.cpu_op_s must be a number of seconds"):
        load_engine({"preset": "vllm-v1", "cpu_op_s": -1}, Path("."), "s.yaml")


def test_dense_stage_cache_prices_as_uncached_on_both_sides_of_its_lists() -> None:
    # _dense_stage_time keeps its prices in lists up to _LISTED tokens (rows) and in a dict past
    # them and under expert parallelism: every path returns the uncached price, and a huge step
    # leaves no list that long behind (memory bounded whatever the step budget)
    from llmsim.costmodel.roofline import _LISTED

    cm = CostModel(CATALOG["llama-3.1-8b"], load_profile("H100-SXM"), CostConfig())
    for tokens, rows, group in [
        (0, 0, 0),
        (1, 1, 0),
        (512, 64, 0),
        (_LISTED - 1, _LISTED - 1, 0),
        (_LISTED, _LISTED, 0),
        (3 * _LISTED, 5, 0),
        (64, 64, 4096),
    ]:
        for decode_only in (True, False):
            want = cm._body_s(tokens, decode_only, group) + cm._head_s(rows, decode_only)
            for _ in range(2):  # priced, then from the cache
                assert cm._dense_stage_time(tokens, rows, decode_only, group) == want
    for cache in (cm._body_decode, cm._body_mixed, cm._head_decode, cm._head_mixed):
        assert len(cache) <= _LISTED


def test_a_pass_through_uneven_stages_costs_the_layers_sum() -> None:
    """vLLM's split of 32 layers over 31 stages is one stage of 2 and thirty of 1: a step through
    them all is 32 layers' time, not 31 stages of 2 (a pipeline sweep had a sawtooth)."""
    m = CATALOG["llama-3.1-8b"]
    assert m.stage_split(31) == [1] * 29 + [2, 1] and sum(m.stage_split(31)) == 32
    assert m.stage_split(8) == [4] * 8 and CATALOG["llama-3.1-405b"].stage_split(8) == [15] + [16] * 6 + [15]
    hw = load_profile("H100-SXM")
    shape = batch_shape([], [512] * 8)
    step = {pp: CostModel(m, hw, CostConfig(pp=pp)) for pp in (16, 31, 32)}
    sends = {pp: step[pp].pp_send_time(shape) * (pp - 1) for pp in step}
    for pp in (16, 31, 32):
        device = step[pp].step_time(shape) - sends[pp] - step[pp].with_host(0.0, 8, shape.tokens)
        head = step[pp].head_time(shape)
        assert device == pytest.approx((step[pp].stage_time(shape) - head) * 32 / m.stage_layers(pp) + head, rel=1e-9)
    assert step[31].step_time(shape) < step[32].step_time(shape)  # one send fewer, no layer more


def test_the_priced_stage_holds_the_most_global_layers() -> None:
    """Gemma-2 makes every second layer global (layer i when i + 1 is even): over 2 stages of 21
    one holds 10 global layers and the other 11, and the pipeline waits for the 11."""
    g = CATALOG["gemma-2-9b"]
    assert (g.stage_global_layers(1), g.stage_global_layers(2), g.stage_global_layers(5)) == (21, 11, 5)
    assert CATALOG["llama-3.1-8b"].stage_global_layers(4) == 8  # no local layers: all of the stage


def test_cuda_graph_padding_rows_reach_no_expert_where_the_engine_skips_them() -> None:
    """A decode step of 5 sequences pads to the captured size 8. vLLM's fused top-k router sets
    the padding rows' expert ids to -1 (VLLM_MOE_SKIP_PADDING, on in the vllm-v1 preset), so the
    experts read are those 5 tokens reach; the dense GEMMs still run all 8 rows. Without the skip
    (vLLM 0.19, ``moe_skip_padding: false``) the padding is routed like real tokens."""
    from dataclasses import replace

    from llmsim.engine import PRESETS, vllm_capture_sizes
    from llmsim.models import get_model

    moe = get_model("qwen3-30b-a3b-instruct-2507")
    hw = load_profile("H100-SXM")
    cfg = CostConfig(cuda_graphs=True, cuda_graph_sizes=vllm_capture_sizes(512))
    skip = CostModel(moe, hw, cfg, PRESETS["vllm-v1"])
    routed = CostModel(moe, hw, cfg, replace(PRESETS["vllm-v1"], moe_skip_padding=False))
    shape = batch_shape([], [1000] * 5)
    five, eight = batch_shape([], [1000] * 5), batch_shape([], [1000] * 8)
    # with the skip the padding costs only its dense rows; routed, it costs the three tokens' experts too
    assert skip.breakdown(shape)["cuda_graph_padding"] < 0.1 * routed.breakdown(shape)["cuda_graph_padding"]
    assert routed.step_time(five) == pytest.approx(routed.step_time(eight), rel=0.02)  # (padded to 8 either way)
    assert skip.step_time(five) < 0.85 * skip.step_time(eight)
    # a dense model's padding is the same either way
    dense = CATALOG["llama-3.1-8b"]
    a = CostModel(dense, hw, cfg, PRESETS["vllm-v1"]).step_time(shape)
    assert a == CostModel(dense, hw, cfg, replace(PRESETS["vllm-v1"], moe_skip_padding=False)).step_time(shape)
    # a shape carrying a DP group's count to a model without expert parallelism (a MoE draft
    # model's, stepcost._grouped) is priced on its own tokens, as before the skip existed
    grouped = batch_shape([], [1000] * 8)
    grouped.group_tokens = 32
    for engine in (PRESETS["vllm-v1"], replace(PRESETS["vllm-v1"], moe_skip_padding=False)):
        cm = CostModel(moe, hw, cfg, engine)
        assert cm.step_time(grouped) == cm.step_time(eight)
    # a grouped router (DeepSeek's: dense layers and shared experts) routes its padding rows
    ds = get_model("deepseek-v3")
    cfg8 = CostConfig(tp=8, cuda_graphs=True, cuda_graph_sizes=vllm_capture_sizes(512))
    b = CostModel(ds, hw, cfg8, PRESETS["vllm-v1"]).step_time(shape)
    assert b == CostModel(ds, hw, cfg8, replace(PRESETS["vllm-v1"], moe_skip_padding=False)).step_time(shape)


@pytest.mark.parametrize(
    ("model", "profile", "cfg", "decodes", "prompts"),
    [
        ("mixtral-8x7b", "H100-SXM", {"ep": 4}, range(80, 200), range(1, 2)),
        ("qwen3-30b-a3b-instruct-2507", "H100-SXM", {}, range(1, 2), range(3000, 3200)),
        ("mixtral-8x7b", "A100-SXM-80GB", {}, range(370, 400), range(500, 530)),
    ],
)
def test_padded_experts_never_get_faster_with_more_tokens(model, profile, cfg, decodes, prompts) -> None:
    """With each expert's rows padded to the fused kernel's whole tiles (costmodel/fusedmoe.py) the
    launch's tiles are counted as the work they hold: counted whole, a tail chance that pushed a
    mean share past a tile doubled the count and made one more token up to 8 % cheaper (Mixtral
    EP 4, 96 -> 97 decodes; Qwen3-30B-A3B, 3,085 -> 3,086 prompt tokens)."""
    cost = CostModel(CATALOG[model], load_profile(profile), CostConfig(**cfg))
    for shapes in ([batch_shape([], [512] * b) for b in decodes], [batch_shape([(n, 0)], []) for n in prompts]):
        times = [sum(v for k, v in cost.breakdown(s).items() if k in EXPERT_OPS) for s in shapes]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:], strict=False))


def test_the_lm_head_runs_once_a_step_under_pipeline_parallelism() -> None:
    """vLLM builds the LM head, final norm and sampler on the last PP rank alone (PPMissingLayer on
    the others): a step pays them once, not once a stage (pp 4 read 1.31 ms of LM head for the
    0.33 ms of one 1 GB read, pp 8 2.63 ms)."""
    m, hw = CATALOG["llama-3.1-8b"], load_profile("H100-SXM")
    shape = batch_shape([], [2048])
    heads = {pp: CostModel(m, hw, CostConfig(pp=pp)).breakdown(shape)["lm_head"] for pp in (1, 4, 8)}
    assert heads[4] == pytest.approx(heads[1], rel=1e-9) and heads[8] == pytest.approx(heads[1], rel=1e-9)
    one, four = CostModel(m, hw, CostConfig(pp=1)), CostModel(m, hw, CostConfig(pp=4))
    layers = one.stage_time(shape) - one.head_time(shape)
    sends = four.pp_send_time(shape) * 3
    device = four.step_time(shape) - four.with_host(0.0, 1, shape.tokens)
    assert device == pytest.approx(layers + one.head_time(shape) + sends, rel=0.02)
