"""Op lists: the FLOPs and bytes of every kernel of one batch step, as plain data.

A step is described by a ``BatchShape`` (a few aggregates over its prefill chunks and decode
sequences), never by request objects, so pricing a step is O(1) and can be cached. The same op
list feeds the roofline pricing, ``llmsim roofline`` tables, and the NumPy reference model's
op-count checks.

Conventions: FLOPs count a multiply-add as 2. Bytes are HBM (device-memory) traffic:
weights and activations read, activations and KV written. Sizes are per device (sharded by
tensor parallelism ``tp``); counts are per step over the layers of one pipeline stage.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from llmsim.models import DTYPE_BYTES, ModelSpec, weight_param_bytes

OpKind = Literal["gemm", "attention", "elementwise", "comm"]


@dataclass(slots=True, init=False)  # not frozen: built once per simulated step, and frozen init costs 3x
class BatchShape:
    """Aggregates of one step's batch.

    ``prefill_attn_pairs`` is Σ over chunks of causal (query, key) pairs: a chunk of ``c`` new
    tokens after ``p`` cached ones attends to ``c·p + c·(c+1)/2`` pairs (clipped by a sliding
    window). ``prefill_kv_tokens`` is Σ (p + c): the K/V rows a FlashAttention kernel streams.
    ``decode_ctx_tokens`` is Σ context over decoding sequences: every cached K/V byte is read.
    ``decode_tokens`` can exceed ``decode_seqs`` when each sequence verifies several tokens
    (speculative decoding). ``group_tokens`` is, under expert parallelism across data-parallel
    ranks, the tokens the whole group's MoE layers gather this step (``dpgroup.py`` knows every
    rank's); 0 when unknown: every rank is then taken to carry this one's ``tokens``. Without
    expert parallelism it is the tokens routed to experts where fewer than ``tokens`` (a CUDA
    graph's padding rows the engine routes to none, ``CostModel``); 0: all of them.
    """

    prefill_tokens: int
    prefill_seqs: int
    prefill_attn_pairs: int
    prefill_kv_tokens: int
    prefill_score_elems: int  # Σ c·(p + c): score matrix a naive kernel writes to HBM
    decode_seqs: int
    decode_tokens: int
    decode_ctx_tokens: int
    logits_rows: int  # rows that go through the LM head; -1 = prefill_seqs + decode_tokens
    local: BatchShape | None  # local+global models: the aggregates seen by the windowed layers
    group_tokens: int  # tokens the MoE experts see: EP, gathered over the DP (0 = tokens x dp); else 0 = tokens
    lora_tokens: int  # multi-LoRA: tokens of requests with an adapter (lora.py)
    lora_adapters: int  # multi-LoRA: distinct adapters those tokens use
    # dual batch overlap's decision for the step where data-parallel ranks make it together
    # (dpgroup.py: all split or none): 1 split, 0 not, -1 the step's own tokens decide
    microbatch: int

    # written out (init=False) so that the compiled module builds it natively: a dataclass's
    # generated __init__ stays interpreted and took ~1 µs of every simulated step
    def __init__(
        self,
        prefill_tokens: int = 0,
        prefill_seqs: int = 0,
        prefill_attn_pairs: int = 0,
        prefill_kv_tokens: int = 0,
        prefill_score_elems: int = 0,
        decode_seqs: int = 0,
        decode_tokens: int = 0,
        decode_ctx_tokens: int = 0,
        logits_rows: int = -1,
        local: BatchShape | None = None,
        group_tokens: int = 0,
        lora_tokens: int = 0,
        lora_adapters: int = 0,
        microbatch: int = -1,
    ) -> None:
        self.prefill_tokens = prefill_tokens
        self.prefill_seqs = prefill_seqs
        self.prefill_attn_pairs = prefill_attn_pairs
        self.prefill_kv_tokens = prefill_kv_tokens
        self.prefill_score_elems = prefill_score_elems
        self.decode_seqs = decode_seqs
        self.decode_tokens = decode_tokens
        self.decode_ctx_tokens = decode_ctx_tokens
        self.logits_rows = logits_rows
        self.local = local
        self.group_tokens = group_tokens
        self.lora_tokens = lora_tokens
        self.lora_adapters = lora_adapters
        self.microbatch = microbatch

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    @property
    def lm_rows(self) -> int:
        return self.logits_rows if self.logits_rows >= 0 else self.prefill_seqs + self.decode_tokens

    @property
    def is_empty(self) -> bool:
        return self.tokens == 0


def chunk_pairs(chunk: int, past: int, window: int | None = None) -> int:
    """Causal (query, key) pairs of a chunk of ``chunk`` tokens after ``past`` cached tokens."""
    if window is None or past + chunk <= window:
        return chunk * past + chunk * (chunk + 1) // 2
    # each query i (absolute position past+i) sees min(window, past+i+1) keys
    total = 0
    first_full = max(0, window - past - 1)  # queries before this see fewer than `window` keys
    n_partial = min(chunk, first_full)
    total += n_partial * past + n_partial * (n_partial + 1) // 2
    total += (chunk - n_partial) * window
    return total


def chunk_aggregates(chunk: int, past: int, window: int | None = None) -> tuple[int, int, int]:
    """(causal pairs, distinct keys seen, score elements) of one prefill chunk of ``chunk`` tokens
    after ``past`` cached ones: its terms of ``prefill_attn_pairs``, ``prefill_kv_tokens`` and
    ``prefill_score_elems``. The one source of those sums, for ``batch_shape`` and for
    ``BatchPlan.shape`` (every simulated step; a native tuple when compiled, so nothing is built)."""
    # under a window the chunk's queries together see its own keys and the window - 1 before them
    keys_seen = past + chunk if window is None else min(past + chunk, window + chunk - 1)
    return chunk_pairs(chunk, past, window), keys_seen, chunk * keys_seen


def decode_keys_seen(ctx: int, new_tokens: int, window: int | None = None) -> int:
    """Keys one decoding sequence's attention reads: its ``ctx`` cached tokens plus its
    ``new_tokens``, at most ``window`` (its term of ``decode_ctx_tokens``)."""
    return ctx + new_tokens if window is None else min(ctx + new_tokens, window)


def batch_shape(
    prefill_chunks: list[tuple[int, int]],
    decode_contexts: list[int],
    window: int | None = None,
    tokens_per_decode: int = 1,
    local_window: int | None = None,
) -> BatchShape:
    """Build a BatchShape from (chunk_tokens, past_tokens) prefill chunks and decode contexts.

    A decode sequence's context is the number of tokens already in its KV cache; the new
    token(s) attend to those plus themselves.
    """
    tokens = pairs = kv = score = 0
    for c, p in prefill_chunks:
        chunk_pairs_, keys_seen, score_elems = chunk_aggregates(c, p, window)
        tokens += c
        pairs += chunk_pairs_
        kv += keys_seen
        score += score_elems
    d_ctx = 0
    for ctx in decode_contexts:
        d_ctx += decode_keys_seen(ctx, tokens_per_decode, window)
    shape = BatchShape(
        prefill_tokens=tokens,
        prefill_seqs=len(prefill_chunks),
        prefill_attn_pairs=pairs,
        prefill_kv_tokens=kv,
        prefill_score_elems=score,
        decode_seqs=len(decode_contexts),
        decode_tokens=len(decode_contexts) * tokens_per_decode,
        decode_ctx_tokens=d_ctx,
    )
    if local_window is not None:
        shape.local = batch_shape(prefill_chunks, decode_contexts, local_window, tokens_per_decode)
    return shape


def model_batch_shape(
    model: ModelSpec,
    prefill_chunks: list[tuple[int, int]],
    decode_contexts: list[int],
    tokens_per_decode: int = 1,
) -> BatchShape:
    """``batch_shape`` with ``model``'s attention windows (``ModelSpec.attention_windows``): the
    shape of a step of that model. A sliding-window, local+global or sparse-attention model priced
    from a shape without them would read its whole context (a DSA model's is refused)."""
    window, local = model.attention_windows()
    return batch_shape(prefill_chunks, decode_contexts, window, tokens_per_decode, local)


@dataclass(slots=True, init=False)  # init written out: compiled natively (see BatchShape)
class Op:
    """One kernel (or collective), repeated ``count`` times per step (e.g. once per layer)."""

    name: str
    kind: OpKind
    flops: float
    bytes_read: float
    bytes_written: float
    dtype: str  # compute dtype (the peak it runs against)
    count: int
    m: int  # GEMM shape [m, k] @ [k, n]; attention: m = query rows
    n: int
    k: int
    weight_bytes: float  # part of bytes_read that is weights (for quantisation studies)
    weight_dtype: str  # the dtype those weights are stored in ("" for an op without weights)
    groups: int  # GEMMs of this shape in one launch (MoE: the experts touched), for the wave count
    # comm ops: the collective and the ranks it spans. "all_reduce" runs over the tensor-parallel
    # group (its bytes_read is the message), as does "tp_all_gather" (the LM head's logits);
    # "all_gather" / "reduce_scatter" (MoE expert-parallel dispatch / combine) over ``ranks``
    # ranks of the expert-parallel group. The gathers' larger of bytes_read / bytes_written is
    # the gathered whole. "deepep_dispatch" / "deepep_combine" (DeepEP's all-to-all): ``m``
    # tokens of this rank, each sent as ``k`` copies of ``n`` bytes to the ranks holding its experts
    collective: str
    ranks: int
    # prefill attention, for the profile's optional attention terms (hardware.Efficiency): FLOPs of
    # the causally masked part of its chunks' score rectangles, which a flash kernel skips
    # (``attention_masked_fraction`` of it is paid anyway), and of one score per query row and
    # head (``attention_row_keys`` of them price each row's own work)
    masked_flops: float
    query_flops: float
    # a grouped GEMM's mean rows per group (MoE: routed / touched, a fraction), which its
    # efficiency is priced at; 0: ``m``. (``m`` itself stays whole)
    rows: float
    # a grouped expert GEMM: the tokens of its kernel call (vLLM's M, the gathered tokens under
    # expert parallelism), which pick the fused kernel's tile height (costmodel/fusedmoe.py); 0: none
    tokens: int

    def __init__(
        self,
        name: str,
        kind: OpKind,
        flops: float,
        bytes_read: float,
        bytes_written: float,
        dtype: str,
        count: int = 1,
        m: int = 0,
        n: int = 0,
        k: int = 0,
        weight_bytes: float = 0.0,
        weight_dtype: str = "",
        groups: int = 1,
        collective: str = "all_reduce",
        ranks: int = 0,
        masked_flops: float = 0.0,
        query_flops: float = 0.0,
        rows: float = 0.0,
        tokens: int = 0,
    ) -> None:
        self.name, self.kind, self.dtype, self.count = name, kind, dtype, count
        self.flops, self.bytes_read, self.bytes_written = flops, bytes_read, bytes_written
        self.m, self.n, self.k, self.weight_bytes, self.weight_dtype = m, n, k, weight_bytes, weight_dtype
        self.groups = groups
        self.collective, self.ranks = collective, ranks
        self.masked_flops, self.query_flops = masked_flops, query_flops
        self.rows = rows
        self.tokens = tokens

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte."""
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass(frozen=True)
class OpConfig:
    """How the model is laid out and run: parallelism, dtypes, kernels."""

    tp: int = 1
    pp: int = 1
    # expert parallelism: the MoE experts are split over ``ep`` GPUs (vLLM: EP size = DP x TP,
    # --enable-expert-parallel); 1 = every GPU holds every expert (TP-split)
    ep: int = 1
    weight_dtype: str = "bf16"
    # the weights' quantisation groups (models.weight_param_bytes): None = the dtype's default format
    weight_group_size: int | None = None
    weight_scale_bits: float | None = None
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"  # activations and the GEMM compute dtype (fp8 for W8A8)
    attention_kernel: Literal["flash", "naive"] = "flash"
    lora_rank: int = 0  # multi-LoRA: max_lora_rank, the rank the LoRA kernels compute at (0 = off)
    redundant_experts: int = 0  # expert parallelism with EPLB: extra expert copies over the ep GPUs
    # MoE routing skew (cluster.expert_skew): the experts' popularity is Zipf with this exponent (0 =
    # uniform); it shrinks the experts a step's tokens reach (experts_touched). The grouped GEMM is
    # still priced at the mean rows per expert reached, optimistic for the popular experts' tiles
    expert_skew: float = 0.0
    # tokens that route alike (cluster.expert_routing_exponent): a step's T tokens reach the experts
    # T^this independent tokens would (experts_touched); 1 = independent
    expert_routing_exponent: float = 1.0
    # how expert parallelism's DP ranks exchange tokens (vLLM --all2all-backend, ALL2ALL_BACKENDS):
    # all-gather + reduce-scatter of every token (vLLM's default), or DeepEP's all-to-all kernels,
    # which send each token only where its experts are (_deepep_transfers)
    all2all_backend: str = "allgather_reducescatter"
    # attention over an fp8 KV cache in fp8, as the engine and device decide it (build.fp8_attention):
    # None = with fp8/fp4 compute only (attention_dtype); True = the engine quantises the queries
    # and the device's kernels take them, whatever the compute dtype; False = 16-bit attention
    fp8_attention: bool | None = None


# 8- and 4-bit compute (W8A8, NVFP4 W4A4): each GEMM takes fp8/int8/fp4 inputs on the tensor cores, but what flows between
# the GEMMs stays 16-bit: vLLM's Fp8LinearMethod / W8A8 int8 kernels quantise a GEMM's input
# (per tensor, fused into the norm or activation before it) and return bf16 (vllm/model_executor/
# layers/quantization/fp8.py, 0.32), as TensorRT-LLM's FP8 GEMM plugins do. So norms, residual
# adds, RoPE, TP all-reduces and the LM head (left unquantised by FP8 checkpoints) stay bf16, and
# attention too unless the KV cache is fp8 (FlashAttention-3 / TRT-LLM FP8 FMHA then run fp8).
QUANTISED_COMPUTE = ("fp8", "int8", "fp4")


def param_bytes(cfg: OpConfig, dtype: str = "") -> float:
    """Bytes one stored weight takes, its group scales included: the model's weight dtype in
    ``cfg``'s quantisation groups, or ``dtype``'s own format where an op's weights are stored
    apart (the experts' mxfp4, whose scales ``DTYPE_BYTES`` counts)."""
    if dtype and dtype != cfg.weight_dtype:
        return weight_param_bytes(dtype)
    return weight_param_bytes(cfg.weight_dtype, cfg.weight_group_size, cfg.weight_scale_bits)


def storage_of(act_dtype: str) -> str:
    """The dtype activations are kept in between GEMMs that compute in ``act_dtype``."""
    return "bf16" if act_dtype in QUANTISED_COMPUTE else act_dtype


def storage_dtype(cfg: OpConfig) -> str:
    return storage_of(cfg.act_dtype)


def attention_dtype(cfg: OpConfig) -> str:
    """The attention kernel's compute dtype: fp8 over an fp8 KV cache where ``cfg.fp8_attention``
    says so, or, left unset, with fp8/fp4 compute (TensorRT-LLM's FP8 context FMHA and XQA); 16-bit
    otherwise. 16-bit attention over an fp8 cache converts each key and value as it loads them (vLLM's
    FlashInfer and Triton kernels, triton_unified_attention.py): that vector work runs beside the
    tensor cores and the cache stream and is not priced apart (docs/costmodel.md "FP8 KV cache")."""
    fp8 = cfg.act_dtype in ("fp8", "fp4") if cfg.fp8_attention is None else cfg.fp8_attention
    return "fp8" if fp8 and cfg.kv_dtype == "fp8" else storage_dtype(cfg)


def mla_prefill_dtype(cfg: OpConfig) -> str:
    """MLA's prefill attention dtype: the storage dtype (16-bit), whatever the KV cache. vLLM's
    expanded K/V come out of kv_b_proj in the activations' 16-bit dtype and a cached fp8 context is
    converted back to it before the prefill kernel (vllm/v1/attention/backends/mla/common.py,
    MLACommonImpl._compute_prefill_context: gather_and_maybe_dequant_cache), so an fp8 KV cache
    makes only the absorbed decode kernel fp8 (``attention_dtype``)."""
    return storage_dtype(cfg)


def gemm(name: str, m: int, n: int, k: int, cfg: OpConfig, count: int, weights: bool = True) -> Op:
    """[m, k] @ [k, n] with a weight matrix [k, n] (read once per kernel): its input in the
    compute dtype (``act_dtype``, quantised by the op before it), its output in the storage dtype."""
    a_in, a_out = DTYPE_BYTES[cfg.act_dtype], DTYPE_BYTES[storage_dtype(cfg)]
    w = param_bytes(cfg) * k * n if weights else a_in * k * n
    return Op(
        name=name,
        kind="gemm",
        flops=2.0 * m * n * k,
        bytes_read=m * k * a_in + w,
        bytes_written=m * n * a_out,
        dtype=_compute_dtype(cfg),
        count=count,
        m=m,
        n=n,
        k=k,
        weight_bytes=w if weights else 0.0,
        weight_dtype=cfg.weight_dtype if weights else "",
    )


def _compute_dtype(cfg: OpConfig) -> str:
    # Weight-only quantisation (int4/int8 weights, bf16 activations) dequantises to the
    # activation dtype, so the tensor-core rate is the activation dtype's.
    return cfg.act_dtype


# every elementwise op a step can hold, by name (a profile's per-op elementwise terms name them)
ELEMENTWISE_OPS = (
    "emb",
    "input_layernorm",
    "attn_rope",
    "kv_cache_write",
    "add",
    "post_attention_layernorm",
    "mlp_act",
    "dense_mlp_act",
    "shared_expert_act",
    "moe_sum",
    "mla_q_a_layernorm",
    "mla_kv_a_layernorm",
    "final_norm",
    "sampling",
    "dsa_index_k_norm",
    "dsa_index_rope",
    "dsa_index_q_quant",
    "dsa_index_cache_write",
    "dsa_topk",
)


def elementwise(name: str, elems: int, flops_per_elem: float, reads: int, cfg: OpConfig, count: int) -> Op:
    """A pass over ``elems`` activations reading ``reads`` tensors of that size, writing one."""
    dtype = storage_dtype(cfg)
    a = DTYPE_BYTES[dtype]
    return Op(name, "elementwise", flops_per_elem * elems, reads * elems * a, elems * a, dtype, count)


def norm_flops_per_elem(model: ModelSpec) -> float:
    """FLOPs per activation of one normalisation pass: 4 for RMSNorm (square, sum, scale by the
    inverse RMS, gain), 7 for LayerNorm (the mean's sum and subtraction, and a bias, besides).
    The one source of this convention: the cost model's norms and the NumPy reference's counts."""
    return 4.0 if model.norm == "rmsnorm" else 7.0


def layer_ops(model: ModelSpec, s: BatchShape, cfg: OpConfig) -> list[Op]:
    """Ops of the decoder layers on one pipeline stage (count = layers per stage)."""
    tp, L = cfg.tp, model.stage_layers(cfg.pp)
    T = s.tokens
    H = model.hidden_size
    q, kv = model.q_size // tp, model.kv_heads_per_device(tp) * model.head_dim
    act = storage_dtype(cfg)
    a, kvb = DTYPE_BYTES[act], DTYPE_BYTES[cfg.kv_dtype]
    ops: list[Op] = []
    if T == 0:
        return ops
    norm_flops = norm_flops_per_elem(model)
    ops.append(elementwise("input_layernorm", T * H, norm_flops, 1, cfg, L))
    if model.is_mla:
        ops.extend(_mla_projection_ops(model, T, cfg, L))
    else:
        ops.append(gemm("attn_pre_proj", T, q + 2 * kv, H, cfg, L))
        if not model.learned_positions:
            ops.append(elementwise("attn_rope", T * (q + kv), 3.0, 1, cfg, L))
        # Writing the new tokens' K and V into the (paged) cache.
        ops.append(Op("kv_cache_write", "elementwise", 0.0, T * 2 * kv * a, T * 2 * kv * kvb, act, L))
    ops.extend(attention_ops(model, s, cfg))
    if model.is_mla:  # o_proj [heads·v_head_dim / tp, H]
        ops.append(gemm("attn_post_proj", T, H, model.num_heads // tp * model.v_head_dim, cfg, L))
    else:
        ops.append(gemm("attn_post_proj", T, H, q, cfg, L))
    if tp > 1:
        ops.append(Op("tp_all_reduce", "comm", 0.0, T * H * a, T * H * a, act, L))
    ops.append(elementwise("add", T * H, 1.0, 2, cfg, L))
    if not model.parallel_residual:  # (a parallel residual's MLP reads the input_layernorm's output)
        ops.append(elementwise("post_attention_layernorm", T * H, norm_flops, 1, cfg, L))
    if model.dense_layers or model.shared_experts:
        ops.extend(_deepseek_mlp_ops(model, T, cfg, L, s.group_tokens))
    else:
        ops.extend(_mlp_ops(model, T, cfg, L, s.group_tokens))
    if tp > 1:
        ops.append(Op("tp_all_reduce", "comm", 0.0, T * H * a, T * H * a, act, L))
    ops.append(elementwise("add", T * H, 1.0, 2, cfg, L))
    if s.lora_tokens and cfg.lora_rank:
        ops.extend(lora_ops(model, s.lora_tokens, s.lora_adapters, cfg))
    return ops


def lora_ops(model: ModelSpec, tokens: int, adapters: int, cfg: OpConfig) -> list[Op]:
    """The Punica kernels of multi-LoRA (vllm/lora/ops/triton_ops/lora_shrink_op.py and
    lora_expand_op.py) on the ``tokens`` that use one of ``adapters`` adapters, per wrapped layer
    (``lora.lora_modules``): the shrink, x [T, in] @ A [in, r] for each slice into an fp32 buffer,
    and the expand, [T, r] @ B [r, out] added into the base layer's output; each reads the weights
    of every adapter in the batch once, at ``max_lora_rank`` (vLLM's buffers are padded to it).
    Tokens without an adapter are skipped by the kernels (lora id -1)."""
    from llmsim.lora import lora_modules  # (only a LoRA step gets here)

    T, r, L = tokens, cfg.lora_rank, model.stage_layers(cfg.pp)
    act = storage_dtype(cfg)
    a = DTYPE_BYTES[act]
    ops: list[Op] = []
    for mod in lora_modules(model, cfg.tp):
        S, k, n = mod.slices, mod.in_dim, mod.out_dim
        w_a, w_b = adapters * S * r * k * a, adapters * r * n * a
        ops.append(
            Op(
                "lora_shrink",
                "gemm",
                2.0 * T * r * k * S,
                S * T * k * a + w_a,
                S * T * r * 4,
                act,
                L,
                T,
                r * S,
                k,
                w_a,
                act,
            )
        )
        ops.append(
            Op(
                "lora_expand",
                "gemm",
                2.0 * T * r * n,
                S * T * r * 4 + w_b + T * n * a,
                T * n * a,
                act,
                L,
                T,
                n,
                r,
                w_b,
                act,
            )
        )
    return ops


# ---- multi-head latent attention (DeepSeek-V2 arXiv:2405.04434 sec. 2.1, DeepSeek-V3 arXiv:2412.19437
# sec. 2.1.1), as vLLM runs it (vllm/v1/attention/backends/mla/common.py's module docstring: the
# "compute friendly" expanded form for prefill, the "data-movement friendly" absorbed form for
# decode; DeepseekV2MLAAttention in vllm/model_executor/models/deepseek_v2.py: q_a and kv_a are
# replicated on every TP rank (fused_qkv_a_proj), q_b / kv_b column-parallel, o_proj row-parallel).
# Per device: n = heads / tp, P = qk_nope_head_dim, R = qk_rope_head_dim, Lq = q_lora_rank,
# Lkv = kv_lora_rank, V = v_head_dim.
# The ops of the prefill/decode split (expanded kv_b over the prefill keys, the absorbed W_UK / W_UV
# batched GEMMs of the decode tokens) run inside vLLM's MLA attention op, so they are listed with
# the attention kernels (``attention_ops``) and priced, graphed or not, as attention is.
MLA_SPLIT_OPS = ("mla_kv_b_proj", "mla_q_absorb", "mla_out_absorb", "dsa_topk")


def on_attention_side(op: Op) -> bool:
    """Whether an op runs as part of the attention kernels (priced with them, graphed as they are):
    the attention ops themselves and MLA's split ops."""
    return op.kind == "attention" or op.name in MLA_SPLIT_OPS


def _mla_projection_ops(model: ModelSpec, T: int, cfg: OpConfig, L: int) -> list[Op]:
    """The token-wise MLA ops before attention: the latent down-projections (fused q_a + kv_a, or
    kv_a alone without q compression), the q/kv latent RMSNorms, the q up-projection, RoPE on the
    query's and the shared key's R dims, and the cache write of the latent + rope key per token."""
    n, P, R = model.num_heads // cfg.tp, model.qk_nope_head_dim, model.qk_rope_head_dim
    Lq, Lkv, H = model.q_lora_rank, model.kv_lora_rank, model.hidden_size
    act = storage_dtype(cfg)
    a, kvb = DTYPE_BYTES[act], DTYPE_BYTES[cfg.kv_dtype]
    norm_flops = norm_flops_per_elem(model)
    ops = [gemm("mla_qkv_a_proj", T, Lq + Lkv + R, H, cfg, L)]  # [H, Lq + Lkv + R], replicated
    if Lq:
        ops.append(elementwise("mla_q_a_layernorm", T * Lq, norm_flops, 1, cfg, L))
    ops.append(elementwise("mla_kv_a_layernorm", T * Lkv, norm_flops, 1, cfg, L))
    # q_b [Lq, n·(P+R)] (without q compression q_proj [H, n·(P+R)])
    ops.append(gemm("mla_q_b_proj" if Lq else "mla_q_proj", T, n * (P + R), Lq or H, cfg, L))
    ops.append(elementwise("attn_rope", T * (n * R + R), 3.0, 1, cfg, L))
    w = model.mla_cache_width  # the latent and the rope key: Lkv + R per token, whatever the heads
    ops.append(Op("kv_cache_write", "elementwise", 0.0, T * w * a, T * w * kvb, act, L))
    if model.is_dsa:
        ops.extend(_dsa_indexer_token_ops(model, T, cfg, L))
    return ops


# ---- DeepSeek sparse attention (DSA, DeepSeek-V3.2), as vLLM runs it: a lightning indexer per layer
# (vllm/model_executor/models/deepseek_v2.py Indexer: wq_b [Lq, Hi·di] on the query latent, wk [H, di]
# and weights_proj [H, Hi] on the hidden state, all replicated on every TP rank; a LayerNorm on the
# key, RoPE on the first R dims; q and k quantised to FP8 in groups of 128, the key cached as FP8 +
# fp32 scale, DeepseekV32IndexerCache) scores every cached token of each query, logits = sum over
# heads of w_h · ReLU(q_h · k) (DeepGEMM fp8_mqa_logits / fp8_paged_mqa_logits), and keeps the
# index_topk best; the MLA then runs in its absorbed form for every token, prefill included, over
# those keys only (vllm/v1/attention/backends/mla/flashmla_sparse.py, SparseMLACommonImpl). Hi =
# index_n_heads, di = index_head_dim. Not counted: the indexer's Hadamard rotation of q and k
# (d log d adds per vector, under 1% of its projections).
def _dsa_indexer_token_ops(model: ModelSpec, T: int, cfg: OpConfig, L: int) -> list[Op]:
    """The indexer's token-wise ops: projections, key norm, RoPE, FP8 quantisation, key-cache write."""
    d = DSADims(model)
    Hi, di, R, H = d.heads, d.dim, model.qk_rope_head_dim, model.hidden_size
    a = DTYPE_BYTES[storage_dtype(cfg)]
    act = storage_dtype(cfg)
    return [
        gemm("dsa_index_q_proj", T, Hi * di, model.q_lora_rank, cfg, L),
        gemm("dsa_index_k_proj", T, di, H, cfg, L),
        gemm("dsa_index_weights_proj", T, Hi, H, _unquantised(cfg), L),  # (kept 16-bit: quant_config=None)
        elementwise("dsa_index_k_norm", T * di, 7.0, 1, cfg, L),  # LayerNorm (norm_flops_per_elem's 7)
        elementwise("dsa_index_rope", T * (Hi * R + R), 3.0, 1, cfg, L),
        # per group of 128: absmax and scale (2 FLOPs a value); fp8 values and fp32 scales out
        Op("dsa_index_q_quant", "elementwise", 2.0 * T * Hi * di, T * Hi * di * a, T * d.q_row_bytes, act, L),
        Op("dsa_index_cache_write", "elementwise", 2.0 * T * di, T * di * a, T * d.row_bytes, act, L),
    ]


@dataclass(slots=True, init=False)  # init written out: compiled natively (see BatchShape)
class DSADims:
    """The indexer's sizes and the FLOPs and bytes of its logits and top-k kernels: the one source
    of those formulas (``attention_ops``; the NumPy reference counts the same)."""

    heads: int  # index_n_heads: every TP rank computes all of them (replicated projections)
    dim: int  # index_head_dim
    topk: int
    row_bytes: float  # one cached index key: FP8 values and an fp32 scale per 128
    q_row_bytes: float  # one token's index queries, as cached keys are stored

    def __init__(self, model: ModelSpec) -> None:  # (FP8 keys and queries whatever the config)
        self.heads, self.dim, self.topk = model.index_n_heads, model.index_head_dim, model.index_topk
        self.row_bytes = float(model.index_cache_row_bytes)
        self.q_row_bytes = float(self.heads * model.index_cache_row_bytes)

    def logits(self, queries: int, pairs: int, keys_read: int) -> tuple[float, float, float]:
        """``pairs`` (query, cached key) scores, each heads x (dim MACs, a ReLU, a weighted add);
        reads every query's FP8 q and head weights (fp32) and ``keys_read`` cached keys, writes
        the fp32 logits."""
        flops = pairs * (2.0 * self.heads * self.dim + 3.0 * self.heads)
        read = queries * (self.q_row_bytes + 4.0 * self.heads) + keys_read * self.row_bytes
        return flops, read, 4.0 * pairs

    def select(self, pairs: int, kept: int) -> tuple[float, float, float]:
        """Top-k over the logits: a comparison per logit; reads them, writes the ``kept`` indices (int32)."""
        return float(pairs), 4.0 * pairs, 4.0 * kept

    @staticmethod
    def kernel_heads(heads: int) -> int:
        """Attention heads the sparse MLA kernels compute for ``heads`` real ones on a device: vLLM's
        FlashMLA-sparse FP8 decode kernel takes h_q = 64 or 128 and its BF16 prefill kernel pads to
        64 (Hopper; 128 on Blackwell, not distinguished here), so a TP rank with fewer heads pays
        for 64 (vllm/v1/attention/backends/mla/flashmla_sparse.py _compute_fp8_decode_padded_heads)."""
        return 64 if heads <= 64 else -(-heads // 64) * 64


@dataclass(slots=True, init=False)  # init written out: compiled natively (see BatchShape)
class MLADims:
    """MLA's per-device attention sizes and the FLOPs and bytes of its kernels: the one source of
    those formulas (``attention_ops``; the NumPy reference counts the same)."""

    heads: int
    nope: int
    rope: int
    latent: int  # kv_lora_rank
    v_dim: int
    act_bytes: float  # the decode kernel's q / output (attention_dtype)
    prefill_bytes: float  # the prefill kernel's Q, expanded K/V and O (mla_prefill_dtype: 16-bit)
    cache_row_bytes: float  # one cached token's latent + rope key
    kernel: str

    def __init__(self, model: ModelSpec, cfg: OpConfig) -> None:
        self.heads = model.num_heads // cfg.tp
        self.nope, self.rope = model.qk_nope_head_dim, model.qk_rope_head_dim
        self.latent, self.v_dim = model.kv_lora_rank, model.v_head_dim
        self.act_bytes = DTYPE_BYTES[attention_dtype(cfg)]
        self.prefill_bytes = DTYPE_BYTES[mla_prefill_dtype(cfg)]
        self.cache_row_bytes = model.mla_cache_width * DTYPE_BYTES[cfg.kv_dtype]
        self.kernel = cfg.attention_kernel

    def prefill(self, s: BatchShape) -> tuple[float, float, float]:
        """Expanded MHA: QK^T over P + R dims and PV over V dims per head and (query, key) score;
        reads Q, the expanded K (P + R per head) and V of every key row, writes O (V per head)."""
        n, qk = self.heads, self.nope + self.rope
        flops = 2.0 * prefill_scores(s, self.kernel) * n * (qk + self.v_dim)
        read = (s.prefill_tokens * n * qk + s.prefill_kv_tokens * n * (qk + self.v_dim)) * self.prefill_bytes
        written = s.prefill_tokens * n * self.v_dim * self.prefill_bytes
        if self.kernel == "naive":
            score_bytes = s.prefill_score_elems * n * self.prefill_bytes
            read += 2 * score_bytes
            written += 2 * score_bytes
        return flops, read, written

    def prefill_masked_flops(self, s: BatchShape) -> float:
        if self.kernel == "naive":
            return 0.0
        return 2.0 * (s.prefill_score_elems - s.prefill_attn_pairs) * self.heads * (self.nope + self.rope + self.v_dim)

    def prefill_query_flops(self, s: BatchShape) -> float:
        return 2.0 * s.prefill_tokens * self.heads * (self.nope + self.rope + self.v_dim)

    def decode_flops_per_ctx(self, tokens: int, seqs: int) -> float:
        """Absorbed MQA over the latent: per head and cached key, 2·(Lkv + R) FLOPs for the score
        and 2·Lkv for the value (the latent is the value), for each of a sequence's new tokens."""
        return 2.0 * (tokens // max(1, seqs)) * self.heads * (2 * self.latent + self.rope)

    def decode_bytes(self, s: BatchShape) -> tuple[float, float]:
        """Reads the absorbed q (Lkv + R per head) and every cached latent row once per layer (all
        heads share it), writes the latent-space output (Lkv per head)."""
        n = self.heads
        read = (
            s.decode_tokens * n * (self.latent + self.rope) * self.act_bytes
            + s.decode_ctx_tokens * self.cache_row_bytes
        )
        return read, s.decode_tokens * n * self.latent * self.act_bytes


def _batched_gemm(name: str, rows: int, n: int, k: int, groups: int, cfg: OpConfig, count: int) -> Op:
    """``groups`` GEMMs [rows, k] @ [k, n] in one launch (one per head: torch.bmm)."""
    op = gemm(name, rows, n * groups, k, cfg, count)
    a_in, a_out = DTYPE_BYTES[cfg.act_dtype], DTYPE_BYTES[storage_dtype(cfg)]
    w = param_bytes(cfg) * k * n * groups
    return dataclasses.replace(
        op,
        bytes_read=rows * k * groups * a_in + w,
        bytes_written=rows * n * groups * a_out,
        n=n,
        weight_bytes=w,
        groups=groups,
    )


def _mla_attention(model: ModelSpec, s: BatchShape, cfg: OpConfig, L: int) -> list[Op]:
    dims = MLADims(model, cfg)
    n, P, R, Lkv, V = dims.heads, dims.nope, dims.rope, dims.latent, dims.v_dim
    dtype = attention_dtype(cfg)  # the absorbed decode kernel's; prefill is mla_prefill_dtype's
    ops: list[Op] = []
    if L <= 0:
        return ops
    if model.is_dsa:
        return _dsa_attention(model, s, cfg, L)
    if s.prefill_tokens:
        # kv_b [Lkv, n·(P+V)] expands the latent of every key a chunk attends to: its own new
        # tokens and its cached context (vLLM's _compute_prefill_context re-expands the cache)
        ops.append(gemm("mla_kv_b_proj", s.prefill_kv_tokens, n * (P + V), Lkv, cfg, L))
        flops, read, written = dims.prefill(s)
        ops.append(
            Op(
                "attention_prefill",
                "attention",
                flops,
                read,
                written,
                mla_prefill_dtype(cfg),
                L,
                m=s.prefill_tokens,
                n=P + R,
                k=P + R,
                masked_flops=dims.prefill_masked_flops(s),
                query_flops=dims.prefill_query_flops(s),
            )
        )
    if s.decode_tokens:
        # W_UK / W_UV are dequantised from kv_b at load time and multiplied in 16 bits
        # (MLACommonImpl.process_weights_after_loading: W_UK_T, W_UV; torch.bmm)
        bmm = _unquantised(cfg)
        t = s.decode_tokens
        ops.append(_batched_gemm("mla_q_absorb", t, Lkv, P, n, bmm, L))  # q_nope [t, P] @ W_UK [P, Lkv] per head
        read, written = dims.decode_bytes(s)
        flops = s.decode_ctx_tokens * dims.decode_flops_per_ctx(t, s.decode_seqs)
        ops.append(Op("attention_decode", "attention", flops, read, written, dtype, L, m=t, n=Lkv + R, k=Lkv + R))
        ops.append(_batched_gemm("mla_out_absorb", t, V, Lkv, n, bmm, L))  # o_latent [t, Lkv] @ W_UV [Lkv, V] per head
    return ops


def _dsa_attention(model: ModelSpec, s: BatchShape, cfg: OpConfig, L: int) -> list[Op]:
    """DSA's context-dependent ops: the indexer's logits over every key each query may see and
    their top-k, then the absorbed MLA of every token over the keys kept: ``s.local``'s aggregates
    (each query keeps min(its context, index_topk) keys, as a window of index_topk would; a shape
    built without the model's ``attention_windows`` would price the attention dense, so it is an
    error). A decoding sequence's new tokens (speculative verification) each score and keep their
    own keys."""
    if s.local is None and (s.prefill_attn_pairs or s.decode_ctx_tokens):  # (no context: token-wise pricing only)
        raise ValueError(
            "a DeepSeek sparse-attention step needs its kept-key aggregates: build the shape with the model's attention_windows()"
        )
    dims, d, kept = MLADims(model, cfg), DSADims(model), s.local or s
    n, P, R, Lkv, V = dims.heads, dims.nope, dims.rope, dims.latent, dims.v_dim
    per_seq = s.decode_tokens // max(1, s.decode_seqs)  # query tokens per decoding sequence
    bmm = _unquantised(cfg)
    ops: list[Op] = []
    # (phase, query tokens, scored pairs, cached keys read, kept pairs, kernel dtype)
    phases = (
        (
            "prefill",
            s.prefill_tokens,
            s.prefill_attn_pairs,
            s.prefill_kv_tokens,
            kept.prefill_attn_pairs,
            mla_prefill_dtype(cfg),
        ),
        (
            "decode",
            s.decode_tokens,
            s.decode_ctx_tokens * per_seq,
            s.decode_ctx_tokens,
            kept.decode_ctx_tokens * per_seq,
            # 16-bit MMAs over an fp8 cache too: FlashMLA's sparse decode kernel dequantises each
            # kept row to bf16 first (FlashMLA docs/20250929-hopper-fp8-sparse-deep-dive.md)
            storage_dtype(cfg),
        ),
    )
    for phase, t, pairs, keys, sel, _ in phases:
        if t:
            ops.append(
                Op(f"dsa_index_logits_{phase}", "attention", *d.logits(t, pairs, keys), "fp8", L, m=t, n=d.dim, k=d.dim)
            )
            ops.append(Op("dsa_topk", "elementwise", *d.select(pairs, sel), "fp32", L))
    ops.append(_batched_gemm("mla_q_absorb", s.tokens, Lkv, P, n, bmm, L))  # every token's q_nope @ W_UK
    # a kept key's score over Lkv + R dims and its latent value, for the heads the sparse kernels compute
    per_pair = 2.0 * d.kernel_heads(n) * (2 * Lkv + R)
    for phase, t, _, _, sel, dtype in phases:
        if t:
            a = DTYPE_BYTES[dtype]
            read, written = t * n * (Lkv + R) * a + sel * dims.cache_row_bytes, t * n * Lkv * a
            q_flops = t * per_pair if phase == "prefill" else 0.0  # (price's per-row term: prefill only)
            ops.append(
                Op(
                    f"attention_{phase}",
                    "attention",
                    sel * per_pair,
                    read,
                    written,
                    dtype,
                    L,
                    m=t,
                    n=Lkv + R,
                    k=Lkv + R,
                    query_flops=q_flops,
                )
            )
    ops.append(_batched_gemm("mla_out_absorb", s.tokens, V, Lkv, n, bmm, L))  # o_latent @ W_UV
    return ops


def attention_ops(model: ModelSpec, s: BatchShape, cfg: OpConfig) -> list[Op]:
    """The attention kernels of one step: the only ops that depend on context, not just on tokens.

    A model that interleaves local (sliding-window) and global layers gets both kinds, each
    counted over its own layers: ``attention_*`` over the global ones (aggregates of ``s``) and
    ``attention_*_local`` over the windowed ones (aggregates of ``s.local``)."""
    layers = model.stage_layers(cfg.pp)
    if model.is_mla:
        return _mla_attention(model, s, cfg, layers)
    if s.local is None:
        return _attention(model, s, cfg, layers, "")
    n_global = model.stage_global_layers(cfg.pp)
    return _attention(model, s, cfg, n_global, "") + _attention(model, s.local, cfg, layers - n_global, "_local")


def prefill_scores(s: BatchShape, kernel: str) -> int:
    """(query, key) scores the prefill attention computes: a naive kernel (eager PyTorch, the NumPy
    reference) computes the whole score rectangle of each chunk and masks it afterwards, while
    FlashAttention skips the tiles the causal mask empties (counted here as the causal pairs).
    A 256-token chunk after 256 cached tokens computes 1.33x its causal pairs, a fresh prompt 2x."""
    return s.prefill_score_elems if kernel == "naive" else s.prefill_attn_pairs


@dataclass(slots=True, init=False)  # init written out: compiled natively (see BatchShape)
class AttentionDims:
    """The per-device sizes of attention and the FLOPs and bytes that follow from them: the one
    source of those formulas. ``attention_ops`` turns them into ``Op``s; ``CostModel`` prices a
    step from them directly (it builds one of these per model, and no ops per step)."""

    heads: int  # query heads per device
    head_dim: int
    q_width: int  # query (= output) elements per token per device
    act_bytes: float
    kv_row_bytes: float  # K and V bytes of one cached token per device
    kernel: str  # "flash", or "naive": scores and probabilities go through HBM

    def __init__(self, model: ModelSpec, cfg: OpConfig) -> None:
        tp = cfg.tp
        self.heads, self.head_dim = model.num_heads // tp, model.head_dim
        self.q_width = model.q_size // tp
        self.act_bytes = DTYPE_BYTES[attention_dtype(cfg)]
        self.kv_row_bytes = 2 * (model.kv_heads_per_device(tp) * model.head_dim) * DTYPE_BYTES[cfg.kv_dtype]
        self.kernel = cfg.attention_kernel

    def q_bytes(self, tokens: int) -> float:
        """Query bytes the kernel reads for ``tokens`` new tokens (its output writes as many)."""
        return tokens * self.q_width * self.act_bytes

    def prefill(self, s: BatchShape) -> tuple[float, float, float]:
        """(FLOPs, bytes read, bytes written) of one layer's prefill attention over ``s``'s chunks."""
        flops = 4.0 * prefill_scores(s, self.kernel) * self.head_dim * self.heads  # QK^T and PV, 2 FLOPs per MAC
        read = self.q_bytes(s.prefill_tokens) + s.prefill_kv_tokens * self.kv_row_bytes
        written = self.q_bytes(s.prefill_tokens)
        if self.kernel == "naive":
            # scores S and probabilities P are materialised in HBM: written once, read back once
            score_bytes = s.prefill_score_elems * self.heads * self.act_bytes
            read += 2 * score_bytes
            written += 2 * score_bytes
        return flops, read, written

    def prefill_masked_flops(self, s: BatchShape) -> float:
        """FLOPs of the causally masked (query, key) scores of ``s``'s chunk rectangles: what a flash
        kernel skips and a naive one computes (its ``prefill`` FLOPs already count them). Some flash
        kernels pay for part of it anyway: FlashAttention-2's ``flash_attn_with_kvcache`` with new
        K/V to append (Sarathi-Serve's prefill, Vidur's profiles) has every query block copy the
        chunk's new K/V up to its diagonal, a cost that grows as the square of the chunk like the
        masked half does; ``efficiency.attention_masked_fraction`` prices it."""
        if self.kernel == "naive":
            return 0.0
        return 4.0 * (s.prefill_score_elems - s.prefill_attn_pairs) * self.head_dim * self.heads

    def prefill_query_flops(self, s: BatchShape) -> float:
        """FLOPs of one (query, key) score for each of ``s``'s new tokens and query heads: the unit
        in which ``efficiency.attention_row_keys`` prices the work a prefill kernel does per query
        row whatever its keys (loading Q, the softmax epilogue, writing O; a measured A100 kernel
        spends as long on it as on ~600 keys)."""
        return 4.0 * s.prefill_tokens * self.head_dim * self.heads

    def decode_flops_per_ctx(self, tokens: int, seqs: int) -> float:
        """One layer's decode-attention FLOPs per token of ``decode_ctx_tokens``: QK^T and PV of
        each of a sequence's new tokens (``tokens / seqs``) against every key it reads. Its bytes
        are ``kv_row_bytes`` per context token plus ``q_bytes(tokens)`` each way."""
        return 4.0 * (tokens // max(1, seqs)) * self.head_dim * self.heads


def _attention(model: ModelSpec, s: BatchShape, cfg: OpConfig, L: int, suffix: str) -> list[Op]:
    dims = AttentionDims(model, cfg)
    hd = dims.head_dim
    ops: list[Op] = []
    if L <= 0:
        return ops
    if s.prefill_tokens:
        flops, read, written = dims.prefill(s)
        name = "attention_prefill" + suffix
        masked, query = dims.prefill_masked_flops(s), dims.prefill_query_flops(s)
        dtype, m = attention_dtype(cfg), s.prefill_tokens
        ops.append(
            Op(
                name,
                "attention",
                flops,
                read,
                written,
                dtype,
                L,
                m=m,
                n=hd,
                k=hd,
                masked_flops=masked,
                query_flops=query,
            )
        )
    if s.decode_tokens:
        flops = s.decode_ctx_tokens * dims.decode_flops_per_ctx(s.decode_tokens, s.decode_seqs)
        read = dims.q_bytes(s.decode_tokens) + s.decode_ctx_tokens * dims.kv_row_bytes
        written = dims.q_bytes(s.decode_tokens)
        name = "attention_decode" + suffix
        ops.append(Op(name, "attention", flops, read, written, attention_dtype(cfg), L, m=s.decode_tokens, n=hd, k=hd))
    return ops


def _dense_mlp(prefix: str, model: ModelSpec, T: int, inter: int, cfg: OpConfig, L: int) -> list[Op]:
    """One dense MLP of ``inter`` (per device) over T tokens: ``{prefix}up_proj`` (gate and up
    fused when gated), ``{prefix}act``, ``{prefix}down_proj``."""
    H = model.hidden_size
    up_n = 2 * inter if model.gated_mlp else inter
    act_flops, act_reads = _mlp_activation(model)
    return [
        gemm(f"{prefix}up_proj", T, up_n, H, cfg, L),
        elementwise(f"{prefix}act", T * inter, act_flops, act_reads, cfg, L),
        gemm(f"{prefix}down_proj", T, H, inter, cfg, L),
    ]


def _mlp_ops(model: ModelSpec, T: int, cfg: OpConfig, L: int, group_tokens: int = 0) -> list[Op]:
    H, tp = model.hidden_size, cfg.tp
    inter = model.intermediate_size // tp
    if not model.is_moe:
        return _dense_mlp("mlp_", model, T, inter, cfg, L)
    up_n = 2 * inter if model.gated_mlp else inter
    act_flops, act_reads = _mlp_activation(model)
    if cfg.ep > 1:
        return _expert_parallel_moe_ops(model, T, cfg, L, group_tokens)
    # MoE: every token visits `experts_per_token` experts. FLOPs follow routed tokens; weight
    # bytes follow the experts actually touched (expected distinct experts for T tokens, as their
    # popularity makes them), which is what makes small-batch MoE decode memory-bound.
    E, k = model.num_experts, model.experts_per_token
    real = group_tokens or T  # (rows a CUDA graph pads the step with reach no expert where skipped)
    routed = real * k
    touched = experts_touched(E, k, E, real, cfg.expert_skew, cfg.expert_routing_exponent)
    return [
        gemm("moe_router", T, E, H, cfg, L),
        _expert_gemm("mlp_up_proj", routed, up_n, H, touched, cfg, L, T, model.expert_weight_dtype),
        elementwise("mlp_act", routed * inter, act_flops, act_reads, cfg, L),
        _expert_gemm("mlp_down_proj", routed, H, inter, touched, cfg, L, T, model.expert_weight_dtype),
        topk_sum(T, k, H, cfg, L),
    ]


def topk_sum(tokens: int, k: int, H: int, cfg: OpConfig, count: int) -> Op:
    """The sum of each token's ``k`` weighted expert outputs into its hidden state (vLLM's
    ``moe_sum`` after the fused experts, ``TopKWeightAndReduceContiguous``): it reads the whole
    [tokens, k, H] output of the down GEMM (under expert parallelism every gathered token's k
    slots, the other ranks' zeroed) and writes [tokens, H]."""
    a = DTYPE_BYTES[storage_dtype(cfg)]
    rows = tokens * k
    return Op("moe_sum", "elementwise", float(rows * H), rows * H * a, tokens * H * a, storage_dtype(cfg), count)


def _deepseek_mlp_ops(model: ModelSpec, T: int, cfg: OpConfig, L: int, group_tokens: int = 0) -> list[Op]:
    """DeepSeekMoE (DeepSeek-V3 arXiv:2412.19437 sec. 2.1.2; vLLM DeepseekV2MoE): the first
    ``first_dense_layers`` layers are dense MLPs of ``dense_intermediate_size`` (``dense_mlp_*``);
    the others route each token to ``experts_per_token`` of the experts (``_mlp_ops``) and also
    pass every token through the ``shared_experts`` (one MLP of shared x intermediate, TP-split and
    not expert-parallel: vLLM's shared_experts DeepseekV2MLP). Pipeline parallelism is refused for
    such models (``build.check_parallelism``): the step is priced as pp x one stage, and only the
    first stage would hold the dense layers."""
    tp = cfg.tp
    dense = min(model.dense_layers, L)  # (pp 1: build.check_parallelism refuses more with dense layers)
    moe = L - dense
    ops: list[Op] = []
    if dense:
        ops.extend(_dense_mlp("dense_mlp_", model, T, model.dense_intermediate_size // tp, cfg, dense))
    if moe:  # (without expert parallelism their grouped router routes padding rows: no skip count)
        ops.extend(_mlp_ops(model, T, cfg, moe, group_tokens if cfg.ep > 1 else 0))
        if model.shared_experts:
            inter = model.shared_experts * model.intermediate_size // tp
            ops.extend(_dense_mlp("shared_expert_", model, T, inter, cfg, moe))
    return ops


def _mlp_activation(model: ModelSpec) -> tuple[float, int]:
    """(FLOPs per element, tensors read) of the MLP activation: SiLU(x)*y reads gate and up,
    tanh-GELU reads one."""
    return (5.0, 2) if model.gated_mlp else (8.0, 1)


def experts_touched(
    experts: int, k: int, local_experts: int, tokens: int, skew: float = 0.0, exponent: float = 1.0
) -> float:
    """Expected distinct experts, of ``local_experts`` held here out of ``experts``, that ``tokens``
    tokens routed to ``k`` experts each reach. Uniform routing (``skew`` 0): each expert is missed
    by a token with probability 1 - k/E, independently across tokens. Skewed routing: expert e is
    picked by a token with probability about k·p_e, p_e its Zipf popularity with exponent ``skew``
    (``pick_probabilities``: still k picks a token), so popular experts take more of the tokens
    and a step reaches fewer distinct experts; the local experts are an average share. Tokens that
    route alike (``exponent`` < 1): T tokens reach what T^exponent independent ones would, one
    token still its k experts; measured on random-token prompts (docs/validation.md, "vLLM 0.30
    GPU runs")."""
    independent = tokens**exponent if exponent != 1.0 and tokens > 1 else float(tokens)
    if skew == 0.0:
        return local_experts * (1.0 - (1.0 - k / experts) ** independent)
    reached = sum(1.0 - (1.0 - q) ** independent for q in pick_probabilities(experts, k, skew))
    return reached * local_experts / experts


def nodes_reached(nodes: int, k: int, groups: tuple[int, int] = (0, 0)) -> float:
    """Expected nodes (or ranks) holding at least one of a token's ``k`` experts, spread evenly. A
    group-limited router picks ``groups[1]`` of ``groups[0]`` expert groups first (DeepSeek-V3's
    4 of 8), a group's experts kept together (EPLB's hierarchical placement): with ``g`` groups a
    node (g >= 1, fractional where they do not divide) a node is missed when none of its groups is
    picked; with a group spread over ``s`` nodes each picked group spreads its k / picks experts over
    those. Without groups, k independent picks."""
    n_groups, picks = groups
    if not (n_groups and picks):
        return nodes * (1.0 - (1.0 - 1.0 / nodes) ** k)
    if nodes <= n_groups:
        per = n_groups / nodes
        missed = 1.0
        for i in range(picks):  # (C(n - per, picks) / C(n, picks), per taken as a real number)
            missed *= max(0.0, n_groups - per - i) / (n_groups - i)
        return nodes * (1.0 - missed)
    span = nodes / n_groups
    return picks * span * (1.0 - (1.0 - 1.0 / span) ** (k / picks))


_PICKS: dict[tuple[int, int, float], tuple[float, ...]] = {}


def pick_probabilities(experts: int, k: int, skew: float) -> tuple[float, ...]:
    """Each expert's chance to be among a token's ``k`` picks under Zipf popularity with exponent
    ``skew``, most popular first (cached): k·p_e, an expert past certainty held at 1 and the rest
    scaled up to keep k picks a token. Over k, each expert's share of the routed rows (eplb.py)."""
    key = (experts, k, skew)
    if key not in _PICKS:
        # Zipf weights as workload.generators.zipf_weights, in plain Python: this module is compiled
        weights = [1.0 / (i + 1) ** skew for i in range(experts)]
        certain, share = 0, 0.0  # the most popular experts, picked by every token (weights fall with rank)
        while certain < k:
            share = (k - certain) / sum(weights[certain:])
            if weights[certain] * share <= 1.0:
                break
            certain += 1
        _PICKS[key] = tuple(1.0 if i < certain else w * share for i, w in enumerate(weights))
    return _PICKS[key]


def _expert_parallel_moe_ops(model: ModelSpec, T: int, cfg: OpConfig, L: int, group_tokens: int = 0) -> list[Op]:
    """One MoE layer on one GPU under expert parallelism, as vLLM runs --enable-expert-parallel with
    its default all2all backend, ``allgather_reducescatter`` (``ParallelConfig.all2all_backend``'s
    default in vllm/config/parallel.py; the VLLM_ALL2ALL_BACKEND env default before it; "Default
    backend" in docs.vllm.ai serving/expert_parallel_deployment from v0.12 to the latest, v0.22, so
    in 0.19). Its ``AgRsAll2AllManager``
    (vllm/distributed/device_communicators/all2all.py) dispatches by all-gathering every DP rank's
    hidden states and router logits (``all_gatherv`` over the DP group) and combines by
    reduce-scattering the expert outputs back to their ranks (``reduce_scatterv``).

    So the router runs locally on this rank's T tokens; the E/ep local experts, whole (EP does not
    TP-split them), see every DP rank's tokens, T x dp; the TP all-reduce after the layer stays
    (``layer_ops``): the TP ranks of a DP rank share its tokens and hold different experts.
    ``group_tokens`` is the count gathered over the DP group, where the caller knows every rank's
    (the lock-stepped ranks of ``dpgroup.py``: the sum, or the padded largest x dp on steps in CUDA
    graphs, ``CostModel.group_tokens``); without it every DP rank is taken to carry T."""
    H, E, k = model.hidden_size, model.num_experts, model.experts_per_token
    dp = cfg.ep // cfg.tp  # the ranks tokens are gathered over (vLLM: the DP group)
    gathered = group_tokens or T * dp
    # EPLB's redundant copies (cfg.redundant_experts): (E + R) / ep physical experts a GPU, a
    # token's pick landing on one of its expert's copies, so the copies are touched (and read) too
    physical = E + cfg.redundant_experts
    local = physical // cfg.ep
    routed = -(-gathered * k // cfg.ep)  # rows routed to the local experts (T·k at tp 1), rounded up
    # (with a routing skew, the average GPU's share of the experts reached: the busiest GPU's own
    # count is not followed, only its load, cfg.moe_imbalance)
    touched = experts_touched(physical, k, local, gathered, cfg.expert_skew, cfg.expert_routing_exponent)
    inter = model.intermediate_size  # whole: the experts are not TP-split
    up_n = 2 * inter if model.gated_mlp else inter
    act_flops, act_reads = _mlp_activation(model)
    act = storage_dtype(cfg)
    a = DTYPE_BYTES[act]
    # a token's hidden state and router logits, as AgRsAll2AllManager.dispatch_router_logits gathers
    # them (where routing runs before the dispatch its top-k weights and ids, 8k bytes instead of
    # E x 2: either is a few per cent of the hidden state)
    row = (H + E) * a
    deepep = deepep_ranks(cfg.all2all_backend, cfg.ep, cfg.tp)
    # the experts' kernel call: every gathered token, or under DeepEP the distinct tokens that
    # arrive (a token reaches nodes_reached of the ep ranks)
    groups = (model.expert_groups, model.expert_groups_per_token)
    call = (round(gathered * nodes_reached(cfg.ep, k, groups) / cfg.ep) or 1) if deepep else gathered
    experts = [
        _expert_gemm("mlp_up_proj", routed, up_n, H, touched, cfg, L, call, model.expert_weight_dtype),
        elementwise("mlp_act", routed * inter, act_flops, act_reads, cfg, L),
        _expert_gemm("mlp_down_proj", routed, H, inter, touched, cfg, L, call, model.expert_weight_dtype),
    ]
    router = gemm("moe_router", T, E, H, cfg, L)
    if deepep:  # (DeepEP's combine sums a token's k outputs: no moe_sum kernel)
        dispatch, combine = _deepep_transfers(model, T, cfg, L, call)
        return [router, dispatch, *experts, combine]
    experts.append(topk_sum(gathered, k, H, cfg, L))
    if dp == 1:  # EP over TP ranks alone: they share their tokens, nothing to dispatch (vLLM: dp_size 1)
        return [router, *experts]
    dispatch = Op("moe_dispatch", "comm", 0.0, T * row, gathered * row, act, L, collective="all_gather", ranks=dp)
    combine = Op("moe_combine", "comm", 0.0, gathered * H * a, T * H * a, act, L, collective="reduce_scatter", ranks=dp)
    return [router, dispatch, *experts, combine]


DEEPEP_BACKENDS = ("deepep_high_throughput", "deepep_low_latency")
# vLLM's --all2all-backend values llmsim prices (vllm/config/parallel.py All2AllBackend): its default,
# then DeepEP's normal ("high throughput", prefill) and low-latency (decode) kernels
ALL2ALL_BACKENDS = ("allgather_reducescatter", *DEEPEP_BACKENDS)


def deepep_ranks(backend: str, ep: int, tp: int) -> bool:
    """Does a pool exchange tokens with DeepEP: a DeepEP backend and expert parallelism over
    data-parallel ranks (ep > tp; vLLM ignores the backend otherwise)?"""
    return backend in DEEPEP_BACKENDS and ep > tp


def deepep_token_bytes(hidden: int, fp8: bool, act_bytes: float = 2.0) -> int:
    """One token as DeepEP's dispatch sends it: FP8 with an fp32 scale a 128 values, else its
    hidden state as the activations store it."""
    return hidden + 4 * -(-hidden // 128) if fp8 else int(hidden * act_bytes)


def _deepep_transfers(model: ModelSpec, T: int, cfg: OpConfig, L: int, arrive: int) -> tuple[Op, Op]:
    """The dispatch and combine of one MoE layer on one GPU whose DP ranks exchange tokens with
    DeepEP (vLLM ``--all2all-backend deepep_high_throughput`` / ``deepep_low_latency``; docs.vllm.ai
    serving/expert_parallel_deployment): the router has run on this rank's ``T`` tokens, the
    dispatch sends each token only to the ranks holding its ``k`` experts (FP8 with its per-128
    scales where the experts compute in FP8, vLLM quantising before the dispatch; else 16-bit),
    ``arrive`` tokens reach this rank's experts, and the combine sends each expert output back,
    16-bit, summing a token's k outputs on the way (DeepEP's combine reduces). How the copies cross
    NVLink and RDMA is priced from the ranks a node holds (``comm.deepep_s``)."""
    H, k = model.hidden_size, model.experts_per_token
    act = storage_dtype(cfg)
    back_row = int(H * DTYPE_BYTES[act])
    row = deepep_token_bytes(H, cfg.act_dtype == "fp8", DTYPE_BYTES[act])
    # (m: one copy of each token sent; comm.deepep_s counts the copies)
    ep = cfg.ep
    dispatch = Op(
        "moe_dispatch", "comm", 0.0, T * row, arrive * row, act, L, T, row, k, collective="deepep_dispatch", ranks=ep
    )
    up, down = arrive * back_row, T * back_row  # (the combine: every output back to its token's rank)
    combine = Op("moe_combine", "comm", 0.0, up, down, act, L, T, back_row, k, collective="deepep_combine", ranks=ep)
    return dispatch, combine


def _expert_gemm(
    name: str, routed: int, n: int, k: int, touched: float, cfg: OpConfig, count: int, tokens: int, wdtype: str = ""
) -> Op:
    """A grouped expert GEMM of a kernel call of ``tokens`` tokens: FLOPs of every routed token,
    weight bytes of the experts touched. Its ``m`` is the rows each touched expert multiplies
    (routed / touched): the grouped kernel (vLLM's fused_moe, CUTLASS grouped GEMM) runs one GEMM
    per expert, so its tiles fill, and its efficiency is priced, at that many rows, not at the
    routed total; all the experts' tiles share one launch, so its last wave is counted over the
    experts touched (``groups``, rounded; the roofline takes the exact count, routed / rows).
    ``wdtype``: the experts' own storage dtype (``ModelSpec.expert_weight_dtype``; GPT-OSS's mxfp4)."""
    if wdtype:  # a format of its own: its scales are in DTYPE_BYTES, not the model's groups
        cfg = dataclasses.replace(cfg, weight_dtype=wdtype, weight_group_size=0)
    op = gemm(name, routed, n, k, cfg, count)
    w = touched * n * k * param_bytes(cfg)
    rows = max(1, round(routed / touched)) if touched > 0 else routed
    groups = max(1, round(touched))
    # the efficiency follows the exact share (a rounded one jumped where it crossed 1.5, 2.5, ...:
    # the time fell by up to a third as tokens were added, the FLOPs being the routed ones)
    share = routed / touched if touched > 0 else 0.0
    return dataclasses.replace(
        op,
        bytes_read=routed * k * DTYPE_BYTES[cfg.act_dtype] + w,
        weight_bytes=w,
        m=rows,
        groups=groups,
        rows=share,
        tokens=tokens,
    )


def step_ops(
    model: ModelSpec, s: BatchShape, cfg: OpConfig, first_stage: bool = True, last_stage: bool = True
) -> list[Op]:
    """All ops of one step on one device of one pipeline stage."""
    ops: list[Op] = []
    T, H = s.tokens, model.hidden_size
    if T == 0:
        return ops
    act = storage_dtype(cfg)
    a = DTYPE_BYTES[act]
    if first_stage:
        ops.append(Op("emb", "elementwise", 0.0, T * H * a, T * H * a, act, 1))
    ops.extend(layer_ops(model, s, cfg))
    if last_stage:
        ops.extend(head_ops(model, s.lm_rows, cfg))
    return ops


HEAD_OPS = frozenset({"final_norm", "lm_head", "logits_all_gather", "sampling"})  # head_ops' names


def head_ops(model: ModelSpec, rows: int, cfg: OpConfig) -> list[Op]:
    """Final norm, LM head and sampling over the ``rows`` positions that sample a token (none for
    a step whose chunks all end mid-prompt).

    Under tensor parallelism the LM head is vocab-parallel: each rank computes its ``V / tp``
    slice of the logits, which are then all-gathered over the TP group, and every rank samples
    from the whole vocabulary (vLLM's ``LogitsProcessor._gather_logits``:
    ``tensor_model_parallel_all_gather``, the default ``Platform.use_all_gather()`` being True;
    vllm/model_executor/layers/logits_processor.py and vllm/platforms/interface.py, 0.32.0).
    The logits travel in the head's output dtype (16 bits under quantised layers)."""
    if not rows:
        return []
    H, V = model.hidden_size, model.vocab_size
    norm_flops = norm_flops_per_elem(model)
    head = _unquantised(cfg)
    ops = [
        elementwise("final_norm", rows * H, norm_flops, 1, cfg, 1),
        gemm("lm_head", rows, V // cfg.tp, H, head, 1),
    ]
    if cfg.tp > 1:
        dtype = storage_dtype(head)
        own, whole = rows * (V // cfg.tp) * DTYPE_BYTES[dtype], rows * V * DTYPE_BYTES[dtype]
        gather = Op("logits_all_gather", "comm", 0.0, own, whole, dtype, 1, collective="tp_all_gather", ranks=cfg.tp)
        ops.append(gather)
    ops.append(elementwise("sampling", rows * V, 5.0, 1, cfg, 1))
    return ops


def _unquantised(cfg: OpConfig) -> OpConfig:
    """The LM head's layout: quantised checkpoints (FP8, W8A8, AWQ/GPTQ) leave it in 16 bits."""
    if cfg.act_dtype not in QUANTISED_COMPUTE and DTYPE_BYTES[cfg.weight_dtype] >= 2:
        return cfg  # 16- or 32-bit weights: the head is as the layers are
    act = storage_dtype(cfg)
    return dataclasses.replace(cfg, act_dtype=act, weight_dtype=act if DTYPE_BYTES[act] == 2 else "bf16")
