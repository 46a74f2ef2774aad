"""A decoder-only transformer's forward pass in NumPy, sized by a ``llmsim.models.ModelSpec``.

Written in the spirit of picoGPT: pure functions with their shape contracts as comments.
Llama style (RMSNorm, RoPE, grouped-query attention, SwiGLU, optional top-k MoE) and GPT-2
style (LayerNorm, learned positions, GELU, biases, tied embeddings) come from the same code,
switched by the spec's fields. The weights are ``weights.Weights``, the K/V live in a
``paged_kv.PagedKVCache``, and ``generate`` runs whole sequences through a ``Model``.

A step runs a batch of ``Segment``s: each is one sequence's new tokens (a prefill chunk, or a
decode token) after ``past`` tokens already in the paged KV cache. All segments' rows go through
the GEMMs together (that is what batching buys); attention is per sequence, through the block
table of that sequence. Given a ``Counter``, the model also counts every op's FLOPs and bytes
as it runs (``counters``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llmsim.costmodel.ops import DSADims, norm_flops_per_elem
from llmsim.reference.counters import Counter
from llmsim.reference.paged_kv import PagedKVCache, fp8_groups
from llmsim.reference.weights import Weights

ROPE_THETA = 10000.0  # Llama-2 default (HF config rope_theta)
NORM_EPS = 1e-5


# ---- building blocks (pure functions) -------------------------------------------------------
def rmsnorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:  # [n_seq, n_embd] -> [n_seq, n_embd]
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + NORM_EPS) * g


def layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:  # [n_seq, n_embd] -> [n_seq, n_embd]
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + NORM_EPS) * g + b


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def gelu(x: np.ndarray) -> np.ndarray:  # GPT-2's tanh approximation
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:  # [n_seq, n_head, hd], [n_seq] -> [n_seq, n_head, hd]
    """Rotary position embedding, HF Llama's rotate-half layout."""
    hd = x.shape[-1]
    inv = ROPE_THETA ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)  # [hd/2]
    ang = (pos[:, None] * inv[None, :]).astype(x.dtype)  # [n_seq, hd/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


# ---- one step -------------------------------------------------------------------------------
@dataclass
class Segment:
    """One sequence's rows in a step: ``tokens`` at positions past .. past+len-1.

    ``kind`` is "prefill" (a prompt chunk) or "decode" (one new token per sequence);
    ``logits`` is "none", "last" (sample the next token) or "all" (speculative verification,
    equivalence tests). ``table`` must already cover past + len(tokens) positions.
    """

    tokens: np.ndarray  # [n_new] int
    past: int
    table: list[int]
    kind: str = "prefill"
    logits: str = "last"
    window: int | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.tokens)


class Model:
    """Runs batches of segments through ``weights`` and a ``PagedKVCache``; counts ops if given a Counter."""

    def __init__(
        self, weights: Weights, cache: PagedKVCache, counter: Counter | None = None, count_kernel: str = "naive"
    ) -> None:
        self.w, self.cache, self.counter = weights, cache, counter
        # NumPy materialises the score matrix, as the cost model's "naive" attention kernel does;
        # "flash" counts bytes as a fused kernel would (scores never leave the chip)
        self.count_kernel = count_kernel
        self.spec = weights.spec
        self.a = weights.dtype.itemsize  # activation bytes per element
        self.kvb = cache.dtype.itemsize

    def _norm(self, name: str, x: np.ndarray, p: dict[str, np.ndarray], prefix: str) -> np.ndarray:
        if self.counter is not None:
            flops = norm_flops_per_elem(self.spec)  # the cost model's convention (ops.norm_flops_per_elem)
            self.counter.elementwise(name, x.size, flops, 1, self.a)
        if self.spec.norm == "rmsnorm":
            return rmsnorm(x, p[prefix + "g"])
        return layernorm(x, p[prefix + "g"], p[prefix + "b"])

    def _linear(self, name: str, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        y = x @ w  # [m, k] @ [k, n] -> [m, n]
        if b is not None:
            y += b
        if self.counter is not None:
            self.counter.gemm(name, x.shape[0], w.shape[1], w.shape[0], self.a, w.dtype.itemsize)
        return y

    def forward(self, segs: list[Segment]) -> list[np.ndarray | None]:
        """Run one step; return each segment's logits ([1 or n_new, n_vocab], or None)."""
        c = self.counter
        tokens = np.concatenate([s.tokens for s in segs])  # [T]
        pos = np.concatenate([np.arange(s.past, s.past + s.n) for s in segs])  # [T]
        x = self.w.wte[tokens]  # [T, n_embd]
        if self.w.wpe is not None:
            x = x + self.w.wpe[pos]
        if c is not None:
            c.add("emb", 0.0, x.size * self.a, x.size * self.a)
        slots = [self.cache.slots(s.table, s.past, s.past + s.n) for s in segs]
        for layer, p in enumerate(self.w.layers):
            h = self._norm("input_layernorm", x, p, "ln1_")
            x_attn = x + self._attention(layer, p, h, pos, segs, slots)
            if c is not None:
                c.elementwise("add", x.size, 1.0, 2, self.a)
            if not self.spec.parallel_residual:  # GPT-J: the MLP reads the same h, x + attn(h) + mlp(h)
                h = self._norm("post_attention_layernorm", x_attn, p, "ln2_")
            x = x_attn + self._mlp(p, h, layer)
            if c is not None:
                c.elementwise("add", x.size, 1.0, 2, self.a)
        return self._logits(x, segs)

    # ---- attention ----------------------------------------------------------------------
    def _attention(self, layer, p, h, pos, segs, slots) -> np.ndarray:  # [T, n_embd] -> [T, n_embd]
        spec, c = self.spec, self.counter
        if spec.is_mla:
            return self._mla_attention(layer, p, h, pos, segs, slots)
        q_size, kv_size, hd = spec.q_size, spec.kv_size, spec.head_dim
        qkv = self._linear("attn_pre_proj", h, p["w_qkv"], p.get("b_qkv"))  # [T, q + 2kv]
        T = h.shape[0]
        q = qkv[:, :q_size].reshape(T, spec.num_heads, hd)
        k = qkv[:, q_size : q_size + kv_size].reshape(T, spec.num_kv_heads, hd)
        v = qkv[:, q_size + kv_size :].reshape(T, spec.num_kv_heads, hd)
        if not spec.learned_positions:
            q, k = rope(q, pos), rope(k, pos)
            if c is not None:
                c.elementwise("attn_rope", T * (q_size + kv_size), 3.0, 1, self.a)
        self.cache.write(layer, np.concatenate(slots), k, v)
        if c is not None:
            c.add("kv_cache_write", 0.0, T * 2 * kv_size * self.a, T * 2 * kv_size * self.kvb)
        out = np.empty((T, spec.num_heads, hd), q.dtype)
        row = 0
        dec_rows, dec_segs = [], []
        for s in segs:
            if s.kind == "decode":
                dec_rows.append(row)
                dec_segs.append(s)
            else:
                out[row : row + s.n] = self._attend_chunk(layer, q[row : row + s.n], s)
            row += s.n
        if dec_segs:
            out[dec_rows] = self._attend_decodes(layer, q[dec_rows], dec_segs)
        return self._linear("attn_post_proj", out.reshape(T, q_size), p["w_o"], p.get("b_o"))

    def _visible(self, s: Segment) -> tuple[int, np.ndarray]:
        """First key position a chunk needs and its [n_new, n_keys] causal (+window) mask."""
        w = s.window if s.window is not None else self.spec.sliding_window
        lo = 0 if w is None else max(0, s.past - w + 1)
        qpos = np.arange(s.past, s.past + s.n)[:, None]
        kpos = np.arange(lo, s.past + s.n)[None, :]
        mask = kpos <= qpos
        if w is not None:
            mask &= qpos - kpos < w
        return lo, mask

    def _attend_chunk(self, layer: int, q: np.ndarray, s: Segment) -> np.ndarray:
        """One sequence's chunk: [n_new, n_head, hd] -> [n_new, n_head, hd], keys from the cache."""
        spec, hd = self.spec, self.spec.head_dim
        lo, _ = self._visible(s)
        K, V, _, pos = self.cache.gather(layer, [s.table], [(lo, s.past + s.n)])  # [1, n_keys, n_kv, hd]
        w = s.window if s.window is not None else spec.sliding_window
        qpos = np.arange(s.past, s.past + s.n)[:, None]
        mask = (pos <= qpos) & (pos >= lo)  # [n_new, n_keys] causal, and inside the window
        if w is not None:
            mask &= qpos - pos < w
        g = spec.num_heads // spec.num_kv_heads
        Q = q.reshape(s.n, spec.num_kv_heads, g, hd).transpose(1, 2, 0, 3)  # [n_kv, g, n_new, hd]
        scores = (Q @ K[0].transpose(1, 2, 0)[:, None]) / np.sqrt(hd).astype(q.dtype)  # [n_kv, g, n_new, n_keys]
        scores = np.where(mask, scores, -np.inf)
        o = softmax(scores) @ V[0].transpose(1, 0, 2)[:, None]  # [n_kv, g, n_new, hd]
        if self.counter is not None:
            scores_bytes = s.n * (s.past + s.n - lo) * spec.num_heads * self.a if self.count_kernel == "naive" else 0
            # a naive kernel computes every score of the rectangle, the masked ones too (ops.prefill_scores)
            computed = s.n * (s.past + s.n - lo) if self.count_kernel == "naive" else int(mask.sum())
            self._count_attention("attention_prefill", s.n, computed, s.past + s.n - lo, scores_bytes)
        return o.transpose(2, 0, 1, 3).reshape(s.n, spec.num_heads, hd)

    def _attend_decodes(self, layer: int, q: np.ndarray, segs: list[Segment]) -> np.ndarray:
        """All decode tokens: [B, n_head, hd] -> [B, n_head, hd].

        Sequences are sorted by context and batched in groups whose contexts differ by at most
        25%; each group's keys are gathered into one padded [b, n_keys, n_kv, hd] array, so a
        step costs a few NumPy calls per group instead of per sequence.
        """
        spec, hd = self.spec, self.spec.head_dim
        g = spec.num_heads // spec.num_kv_heads
        spans = []
        for s in segs:
            w = s.window if s.window is not None else spec.sliding_window
            end = s.past + 1
            spans.append((end - min(end, w) if w else 0, end))
        out = np.empty((len(segs), spec.num_kv_heads, g, hd), q.dtype)
        Q = q.reshape(len(segs), spec.num_kv_heads, g, hd)
        for group in _length_groups([hi - lo for lo, hi in spans]):
            K, V, valid, _ = self.cache.gather(layer, [segs[i].table for i in group], [spans[i] for i in group])
            scores = (Q[group] @ K.transpose(0, 2, 3, 1)) / np.sqrt(hd).astype(q.dtype)  # [b, n_kv, g, n_keys]
            scores = np.where(valid[:, None, None, :], scores, -np.inf)
            out[group] = softmax(scores) @ V.transpose(0, 2, 1, 3)  # [b, n_kv, g, hd]
        if self.counter is not None:
            rows = sum(hi - lo for lo, hi in spans)
            self._count_attention("attention_decode", len(segs), rows, rows)
        return out.reshape(len(segs), spec.num_heads, hd)

    def _count_attention(self, name: str, rows: int, pairs: int, kv_rows: int, scores_bytes: float = 0.0) -> None:
        """Scores S and probabilities P of a naive kernel are each written once and read once."""
        spec = self.spec
        flops = 4.0 * pairs * spec.head_dim * spec.num_heads  # QK^T and PV over the scores computed
        read = rows * spec.q_size * self.a + kv_rows * 2 * spec.kv_size * self.kvb + 2 * scores_bytes
        self.counter.add(name, flops, read, rows * spec.q_size * self.a + 2 * scores_bytes)  # type: ignore[union-attr]

    # ---- multi-head latent attention ----------------------------------------------------
    def _mla_attention(self, layer, p, h, pos, segs, slots) -> np.ndarray:  # [T, n_embd] -> [T, n_embd]
        """DeepSeek MLA as vLLM runs it (vllm/v1/attention/backends/mla/common.py): latent
        projections for every token; prefill chunks attend in the expanded form (kv_b turns each
        key's latent into per-head K_nope and V), decode tokens in the absorbed form (W_UK folded
        into the query, attention over the cached latents themselves, W_UV applied after)."""
        spec, c = self.spec, self.counter
        N, P, R, V = spec.num_heads, spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
        Lq, Lkv = spec.q_lora_rank, spec.kv_lora_rank
        T = h.shape[0]
        a = self._linear("mla_qkv_a_proj", h, p["w_qkv_a"])  # [T, Lq + Lkv + R]
        q_c, kv_c, k_pe = a[:, :Lq], a[:, Lq : Lq + Lkv], a[:, Lq + Lkv :]
        if Lq:
            q_c = self._latent_norm("mla_q_a_layernorm", q_c, p["g_q_a"])
        kv_c = self._latent_norm("mla_kv_a_layernorm", kv_c, p["g_kv_a"])
        q = self._linear("mla_q_b_proj" if Lq else "mla_q_proj", q_c if Lq else h, p["w_q_b"]).reshape(T, N, P + R)
        q_nope, q_pe = q[..., :P], rope(q[..., P:], pos)  # [T, N, P], [T, N, R]
        k_pe = rope(k_pe[:, None, :], pos)[:, 0]  # [T, R]: one rope key shared by every head
        if c is not None:
            c.elementwise("attn_rope", T * (N * R + R), 3.0, 1, self.a)
        latent = np.concatenate([kv_c, k_pe], axis=-1)  # [T, Lkv + R]: what the cache holds per token
        self.cache.write(layer, np.concatenate(slots), latent[:, None, :], np.zeros((T, 1, 0), latent.dtype))
        if c is not None:
            w = spec.mla_cache_width
            c.add("kv_cache_write", 0.0, T * w * self.a, T * w * self.kvb)
        scale = np.sqrt(P + R).astype(q.dtype)  # the expanded form's softmax scale, in both forms
        w_kv_b = p["w_kv_b"]  # [Lkv, N·(P+V)]
        if spec.is_dsa:
            keep = self._dsa_indexer(layer, p, h, q_c, pos, segs, slots)
            return self._dsa_attention(layer, p, q_nope, q_pe, segs, keep, scale)
        out = np.empty((T, N, V), q.dtype)
        rows, starts, row = [], [], 0
        pre = [(i, s) for i, s in enumerate(segs) if s.kind != "decode"]
        for s in segs:
            starts.append(row)
            row += s.n
        if pre:  # expanded form: kv_b over every key row of every chunk, one GEMM
            gathered = []
            for _, s in pre:
                lo, _ = self._visible(s)
                C, _, valid, kpos = self.cache.gather(layer, [s.table], [(lo, s.past + s.n)])
                gathered.append((s, lo, C[0, :, 0][valid[0]], kpos[0][valid[0]]))  # [n_keys, Lkv + R]
            lat = np.concatenate([g[2] for g in gathered])
            kv = self._linear("mla_kv_b_proj", lat[:, :Lkv], w_kv_b).reshape(-1, N, P + V)
            at = 0
            for (i, s), (_, lo, C, kpos) in zip(pre, gathered, strict=True):
                n_keys = C.shape[0]
                K = np.concatenate(
                    [kv[at : at + n_keys, :, :P], np.broadcast_to(C[:, None, Lkv:], (n_keys, N, R))], axis=-1
                )  # [n_keys, N, P + R]
                Vs = kv[at : at + n_keys, :, P:]  # [n_keys, N, V]
                at += n_keys
                r0 = starts[i]
                Q = np.concatenate([q_nope[r0 : r0 + s.n], q_pe[r0 : r0 + s.n]], axis=-1)  # [n_new, N, P + R]
                w_ = s.window if s.window is not None else spec.sliding_window
                qpos = np.arange(s.past, s.past + s.n)[:, None]
                mask = (kpos <= qpos) & (kpos >= lo)
                if w_ is not None:
                    mask &= qpos - kpos < w_
                scores = (Q.transpose(1, 0, 2) @ K.transpose(1, 2, 0)) / scale  # [N, n_new, n_keys]
                scores = np.where(mask, scores, -np.inf)
                out[r0 : r0 + s.n] = (softmax(scores) @ Vs.transpose(1, 0, 2)).transpose(1, 0, 2)
                if c is not None:
                    real_keys = s.past + s.n - lo
                    naive = self.count_kernel == "naive"
                    computed = s.n * real_keys if naive else int(mask.sum())
                    sb = s.n * real_keys * N * self.a if naive else 0
                    flops = 2.0 * computed * N * (P + R + V)
                    read = (s.n * N * (P + R) + real_keys * N * (P + R + V)) * self.a + 2 * sb
                    c.add("attention_prefill", flops, read, s.n * N * V * self.a + 2 * sb)
        dec = [(i, s) for i, s in enumerate(segs) if s.kind == "decode"]
        if dec:  # absorbed form
            rows = [starts[i] for i, _ in dec]
            t = len(rows)
            W = w_kv_b.reshape(Lkv, N, P + V)
            w_uk, w_uv = W[:, :, :P].transpose(1, 2, 0), W[:, :, P:].transpose(1, 0, 2)  # [N, P, Lkv], [N, Lkv, V]
            ql = self._bmm("mla_q_absorb", q_nope[rows], w_uk)  # [t, N, Lkv]
            Q = np.concatenate([ql, q_pe[rows]], axis=-1)  # [t, N, Lkv + R]
            o_lat = np.empty((t, N, Lkv), q.dtype)
            keys = 0
            for j, (_, s) in enumerate(dec):
                C, _, valid, _ = self.cache.gather(layer, [s.table], [(0, s.past + 1)])
                C = C[0, :, 0][valid[0]]  # [n_keys, Lkv + R]
                keys += C.shape[0]
                scores = (Q[j] @ C.T) / scale  # [N, n_keys]
                o_lat[j] = softmax(scores) @ C[:, :Lkv]  # [N, Lkv]: the latent is the value
            if c is not None:
                flops = 2.0 * keys * N * (2 * Lkv + R)
                read = t * N * (Lkv + R) * self.a + keys * spec.mla_cache_width * self.kvb
                c.add("attention_decode", flops, read, t * N * Lkv * self.a)
            out[rows] = self._bmm("mla_out_absorb", o_lat, w_uv)  # [t, N, V]
        return self._linear("attn_post_proj", out.reshape(T, N * V), p["w_o"])

    # ---- DeepSeek sparse attention (DeepSeek-V3.2) --------------------------------------
    def _dsa_indexer(self, layer, p, h, q_c, pos, segs, slots) -> list[list[np.ndarray]]:
        """The lightning indexer (ops._dsa_indexer_token_ops, DSADims): per query token the
        positions of the index_topk cached tokens with the largest sum_h w_h·ReLU(q_h·k), among
        those it may see. -> per segment, per query row, the kept positions."""
        spec, c = self.spec, self.counter
        Hi, di, R, T = spec.index_n_heads, spec.index_head_dim, spec.qk_rope_head_dim, h.shape[0]
        d = DSADims(spec)
        iq = self._linear("dsa_index_q_proj", q_c, p["w_idx_q"]).reshape(T, Hi, di)  # [T, Hi, di]
        ik = self._linear("dsa_index_k_proj", h, p["w_idx_k"])  # [T, di]
        iw = self._linear("dsa_index_weights_proj", h, p["w_idx_w"])  # [T, Hi]
        if c is not None:
            c.elementwise("dsa_index_k_norm", T * di, 7.0, 1, self.a)
            c.elementwise("dsa_index_rope", T * (Hi * R + R), 3.0, 1, self.a)
            c.add("dsa_index_q_quant", 2.0 * T * Hi * di, T * Hi * di * self.a, T * d.q_row_bytes)
            c.add("dsa_index_cache_write", 2.0 * T * di, T * di * self.a, T * d.row_bytes)
        ik = layernorm(ik, p["g_idx_k"], p["b_idx_k"])
        iq = np.concatenate([rope(iq[..., :R], pos), iq[..., R:]], axis=-1)  # RoPE on the first R dims
        ik = np.concatenate([rope(ik[:, None, :R], pos)[:, 0], ik[:, R:]], axis=-1)
        iq = fp8_groups(iq)
        self.cache.write_index(layer, np.concatenate(slots), ik)
        keep, row = [], 0
        for s in segs:
            K = self.cache.index_keys(layer, s.table, s.past + s.n)  # [n_keys, di]
            logits = np.einsum("qh,qhk->qk", iw[row : row + s.n], np.maximum(iq[row : row + s.n] @ K.T, 0.0))
            qpos = np.arange(s.past, s.past + s.n)[:, None]
            seen = np.arange(K.shape[0])[None, :] <= qpos  # [n_new, n_keys]: causal
            logits = np.where(seen, logits, -np.inf)
            kept = [
                np.argsort(-row_)[: min(int(n), spec.index_topk)] for row_, n in zip(logits, seen.sum(1), strict=True)
            ]
            keep.append(kept)
            if c is not None:
                pairs, n_kept = int(seen.sum()), sum(len(k) for k in kept)
                phase = "decode" if s.kind == "decode" else "prefill"
                c.add(f"dsa_index_logits_{phase}", *d.logits(s.n, pairs, K.shape[0]))
                c.add("dsa_topk", *d.select(pairs, n_kept))
            row += s.n
        return keep

    def _dsa_attention(self, layer, p, q_nope, q_pe, segs, keep, scale) -> np.ndarray:
        """Absorbed MLA for every token over the latents its indexer kept (prefill included)."""
        spec, c = self.spec, self.counter
        N, P, V, Lkv, R = (
            spec.num_heads,
            spec.qk_nope_head_dim,
            spec.v_head_dim,
            spec.kv_lora_rank,
            spec.qk_rope_head_dim,
        )
        T = q_nope.shape[0]
        W = p["w_kv_b"].reshape(Lkv, N, P + V)
        w_uk, w_uv = W[:, :, :P].transpose(1, 2, 0), W[:, :, P:].transpose(1, 0, 2)  # [N, P, Lkv], [N, Lkv, V]
        Q = np.concatenate([self._bmm("mla_q_absorb", q_nope, w_uk), q_pe], axis=-1)  # [T, N, Lkv + R]
        o_lat = np.empty((T, N, Lkv), Q.dtype)
        rows = {"prefill": [0, 0], "decode": [0, 0]}  # per phase: query tokens, kept keys
        row = 0
        for s, kept in zip(segs, keep, strict=True):
            C, _, _, _ = self.cache.gather(layer, [s.table], [(0, s.past + s.n)])
            C = C[0, :, 0]  # [n_keys, Lkv + R]: row i is position i
            for j, idx in enumerate(kept):
                scores = (Q[row + j] @ C[idx].T) / scale  # [N, k]
                o_lat[row + j] = softmax(scores) @ C[idx, :Lkv]
            phase = rows["decode" if s.kind == "decode" else "prefill"]
            phase[0] += s.n
            phase[1] += sum(len(k) for k in kept)
            row += s.n
        if c is not None:
            per_pair = 2.0 * DSADims.kernel_heads(N) * (2 * Lkv + R)  # (the heads the sparse kernels compute)
            for name, (t, pairs) in (("attention_prefill", rows["prefill"]), ("attention_decode", rows["decode"])):
                if t:
                    read = t * N * (Lkv + R) * self.a + pairs * spec.mla_cache_width * self.kvb
                    c.add(name, pairs * per_pair, read, t * N * Lkv * self.a)
        out = self._bmm("mla_out_absorb", o_lat, w_uv)  # [T, N, V]
        return self._linear("attn_post_proj", out.reshape(T, N * V), p["w_o"])

    def _latent_norm(self, name: str, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        if self.counter is not None:
            self.counter.elementwise(name, x.size, norm_flops_per_elem(self.spec), 1, self.a)
        return rmsnorm(x, g)

    def _bmm(self, name: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:  # [t, N, k], [N, k, n] -> [t, N, n]
        y = np.einsum("tnk,nkm->tnm", x, w)
        if self.counter is not None:
            t, N, k = x.shape
            n = w.shape[2]
            self.counter.add(
                name, 2.0 * t * N * n * k, (t * N * k) * self.a + N * k * n * w.dtype.itemsize, t * N * n * self.a
            )
        return y

    # ---- MLP ----------------------------------------------------------------------------
    def _mlp(self, p: dict[str, np.ndarray], h: np.ndarray, layer: int = 0) -> np.ndarray:  # [T, n_embd] -> [T, n_embd]
        if layer < self.spec.first_dense_layers:  # DeepSeekMoE's dense first layers
            return self._ffn(h, p["w_up"], p["w_down"], prefix="dense_")
        if not self.spec.is_moe:
            return self._ffn(h, p["w_up"], p["w_down"], p.get("b_up"), p.get("b_down"))
        spec = self.spec
        logits = self._linear("moe_router", h, p["w_router"])  # [T, n_experts]
        k = spec.experts_per_token
        top = np.argpartition(-logits, k - 1, axis=-1)[:, :k]  # [T, k]
        gate = softmax(np.take_along_axis(logits, top, axis=-1))  # [T, k] (Mixtral: softmax over the top-k)
        out = np.zeros_like(h)
        for e in np.unique(top):
            rows, slot = np.nonzero(top == e)
            y = self._ffn(h[rows], p["w_up"][e], p["w_down"][e])
            out[rows] += gate[rows, slot][:, None] * y
        if self.counter is not None:  # (the top-k sum: each token's k weighted outputs read, one written)
            self.counter.elementwise("moe_sum", h.size, k, k, self.a)
        if spec.shared_experts:  # every token, besides its routed experts
            out += self._ffn(h, p["w_shared_up"], p["w_shared_down"], prefix="shared_expert_", mlp="")
        return out

    def _ffn(
        self, h, w_up, w_down, b_up=None, b_down=None, prefix="", mlp="mlp_"
    ) -> np.ndarray:  # [m, n_embd] -> [m, n_embd]
        up = self._linear(prefix + mlp + "up_proj", h, w_up, b_up)  # [m, up_n]
        inter = w_down.shape[0]
        if self.spec.gated_mlp:
            act = silu(up[:, :inter]) * up[:, inter:]
            flops, reads = 5.0, 2
        else:
            act = gelu(up)
            flops, reads = 8.0, 1
        if self.counter is not None:
            self.counter.elementwise(prefix + mlp + "act", act.size, flops, reads, self.a)
        return self._linear(prefix + mlp + "down_proj", act, w_down, b_down)

    # ---- head ---------------------------------------------------------------------------
    def _logits(self, x: np.ndarray, segs: list[Segment]) -> list[np.ndarray | None]:
        rows, spans, row = [], [], 0
        for s in segs:
            take = {"none": [], "last": [row + s.n - 1], "all": list(range(row, row + s.n))}[s.logits]
            spans.append((len(rows), len(rows) + len(take)) if take else None)
            rows.extend(take)
            row += s.n
        if not rows:
            return [None] * len(segs)
        h = self._norm("final_norm", x[rows], self.w.ln_f, "")
        logits = self._linear("lm_head", h, self.w.lm_head)  # [rows, n_vocab]
        if self.counter is not None:
            self.counter.elementwise("sampling", logits.size, 5.0, 1, self.a)
        return [None if sp is None else logits[sp[0] : sp[1]] for sp in spans]


# One more group costs about as much as this many padded key rows (a group is ~10 NumPy calls
# per layer, ~0.1 ms on this machine's CPU; a padded row ~0.4 us: calibration.microbench's decode attention).
GROUP_PAD_ROWS = 256


def _length_groups(lengths: list[int], pad_rows: int = GROUP_PAD_ROWS) -> list[list[int]]:
    """Indices sorted by length, cut into groups that are padded to their longest member. A
    sequence joins the current group unless that would add more than ``pad_rows`` padded rows
    (then a new group is cheaper), so the step's attention costs about its real key rows plus a
    few groups whatever the spread of contexts, as one ragged paged-attention kernel would."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups: list[list[int]] = []
    for i in order:
        grp = groups[-1] if groups else None
        if grp is not None and (lengths[i] - lengths[grp[-1]]) * len(grp) <= pad_rows:
            grp.append(i)
        else:
            groups.append([i])
    return groups
