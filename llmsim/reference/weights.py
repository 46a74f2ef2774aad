"""The reference model's weights: seeded random numbers in a ``ModelSpec``'s shapes, a truncated
draft model, and weight-only INT8 emulation.

Random numbers do: what the reference model checks is FLOPs, bytes, times and equivalences, not
text quality. Per layer: ``w_qkv`` [n_embd, q + 2kv], ``w_o`` [q, n_embd], ``w_up`` [n_embd, up_n] (a
gated MLP's gate and up side by side: up_n = 2 x intermediate), ``w_down`` [intermediate, n_embd]
(MoE: both with a leading [n_experts] axis, and ``w_router`` [n_embd, n_experts]), the norms'
``ln1_*`` / ``ln2_*`` and the optional biases ``b_*``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from llmsim.models import ModelSpec


@dataclass
class Weights:
    spec: ModelSpec
    wte: np.ndarray  # [n_vocab, n_embd]
    wpe: np.ndarray | None  # [n_pos, n_embd] (GPT-2 learned positions)
    layers: list[dict[str, np.ndarray]]
    ln_f: dict[str, np.ndarray]
    lm_head: np.ndarray  # [n_embd, n_vocab] (a view of wte.T when tied)

    @property
    def dtype(self) -> np.dtype:
        return self.wte.dtype


def init_weights(spec: ModelSpec, seed: int = 0, dtype: type = np.float32, std: float = 0.02) -> Weights:
    """Seeded random weights (normal, std 0.02 as GPT-2's init); norms start at 1."""
    rng = np.random.default_rng(seed)
    H, q, kv, inter = spec.hidden_size, spec.q_size, spec.kv_size, spec.intermediate_size
    up_n = 2 * inter if spec.gated_mlp else inter

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(dtype)

    def norm() -> dict[str, np.ndarray]:
        d = {"g": np.ones(H, dtype)}
        if spec.norm == "layernorm":
            d["b"] = np.zeros(H, dtype)
        return d

    layers = []
    for i in range(spec.num_layers):
        if spec.is_mla:
            lay = _mla_weights(spec, w, dtype)
        else:
            lay = {"w_qkv": w(H, q + 2 * kv), "w_o": w(q, H)}
        lay.update({f"ln1_{k}": v for k, v in norm().items()})
        if not spec.parallel_residual:  # (one norm per layer with a parallel residual)
            lay.update({f"ln2_{k}": v for k, v in norm().items()})
        if spec.qkv_bias or spec.linear_bias:
            lay["b_qkv"] = w(q + 2 * kv)
        if spec.linear_bias:
            lay["b_o"] = w(H)
        dense_first = i < spec.first_dense_layers
        if dense_first:  # DeepSeekMoE's first layers: one dense MLP
            d = spec.dense_intermediate_size
            lay["w_up"], lay["w_down"] = w(H, 2 * d if spec.gated_mlp else d), w(d, H)
        elif spec.is_moe:
            lay["w_router"] = w(H, spec.num_experts)
            lay["w_up"] = w(spec.num_experts, H, up_n)
            lay["w_down"] = w(spec.num_experts, inter, H)
            if spec.shared_experts:
                s = spec.shared_experts * inter
                lay["w_shared_up"], lay["w_shared_down"] = w(H, 2 * s if spec.gated_mlp else s), w(s, H)
        else:
            lay["w_up"], lay["w_down"] = w(H, up_n), w(inter, H)
            if spec.linear_bias:
                lay["b_up"], lay["b_down"] = w(up_n), w(H)
        layers.append(lay)
    wte = w(spec.vocab_size, H)
    wpe = w(spec.learned_positions, H) if spec.learned_positions else None
    lm_head = wte.T if spec.tie_embeddings else w(H, spec.vocab_size)
    return Weights(spec, wte, wpe, layers, norm(), lm_head)


def _mla_weights(spec: ModelSpec, w, dtype: type) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """MLA's matrices as vLLM holds them: ``w_qkv_a`` [H, Lq + Lkv + R] (q_a and kv_a fused),
    the latent norms' gains ``g_q_a`` [Lq] and ``g_kv_a`` [Lkv], ``w_q_b`` [Lq (or H), N·(P+R)],
    ``w_kv_b`` [Lkv, N·(P+V)] (per head: W_UK's P columns, then W_UV's V) and ``w_o`` [N·V, H]."""
    H, N = spec.hidden_size, spec.num_heads
    P, R, V = spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    Lq, Lkv = spec.q_lora_rank, spec.kv_lora_rank
    lay = {
        "w_qkv_a": w(H, Lq + Lkv + R),
        "g_kv_a": np.ones(Lkv, dtype),
        "w_q_b": w(Lq or H, N * (P + R)),
        "w_kv_b": w(Lkv, N * (P + V)),
        "w_o": w(N * V, H),
    }
    if Lq:
        lay["g_q_a"] = np.ones(Lq, dtype)
    if spec.is_dsa:  # the lightning indexer (DeepSeek-V3.2): wq_b on the query latent, wk and weights_proj
        Hi, di = spec.index_n_heads, spec.index_head_dim
        lay.update(
            {
                "w_idx_q": w(Lq, Hi * di),
                "w_idx_k": w(H, di),
                "w_idx_w": w(H, Hi),
                "g_idx_k": np.ones(di, dtype),
                "b_idx_k": np.zeros(di, dtype),
            }
        )
    return lay


def truncated(weights: Weights, num_layers: int) -> Weights:
    """A smaller draft model: the first ``num_layers`` layers with the same embeddings and head."""
    spec = weights.spec.with_(num_layers=num_layers, name=weights.spec.name + f"-draft{num_layers}")
    return replace(weights, spec=spec, layers=weights.layers[:num_layers])


def quantize_int8(w: np.ndarray, axis: int = -2) -> np.ndarray:
    """Symmetric INT8 with one scale per output channel (absmax over the input dim ``axis``),
    dequantised back: the weight-only INT8 path's numbers, computed in the float dtype."""
    scale = np.abs(w).max(axis=axis, keepdims=True) / 127.0
    scale = np.where(scale == 0, 1.0, scale)
    return (np.clip(np.rint(w / scale), -127, 127) * scale).astype(w.dtype)


def int8_weights(weights: Weights) -> Weights:
    """Every linear weight (not norms, biases or embeddings) through INT8 and back."""
    layers = [{k: quantize_int8(v) if k.startswith("w_") else v for k, v in lay.items()} for lay in weights.layers]
    lm_head = weights.lm_head if weights.spec.tie_embeddings else quantize_int8(weights.lm_head)
    return replace(weights, layers=layers, lm_head=lm_head)
