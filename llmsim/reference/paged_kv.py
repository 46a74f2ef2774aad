"""The reference model's paged KV cache: K/V stored in fixed-size blocks, addressed through each
sequence's block table, optionally rounded as an INT8 or FP8 cache would store it."""

from __future__ import annotations

import numpy as np

from llmsim.models import ModelSpec


def fake_quant_kv(x: np.ndarray, kind: str | None) -> np.ndarray:
    """[rows, n_kv, head_dim] -> same, rounded as an INT8 (per row and head absmax scale) or FP8
    E4M3 (3 mantissa bits, max 448) cache would store it."""
    if kind is None or not x.size:  # (MLA's value side is empty)
        return x
    if kind == "int8":
        scale = np.abs(x).max(axis=-1, keepdims=True) / 127.0
        scale = np.where(scale == 0, 1.0, scale)
        return (np.rint(x / scale) * scale).astype(x.dtype)
    if kind == "fp8":
        y = np.clip(x, -448.0, 448.0)
        _, exp = np.frexp(y)  # |y| in [2**(exp-1), 2**exp)
        quantum = np.ldexp(1.0, np.maximum(exp, -5) - 4)  # 3 mantissa bits; subnormals below 2**-6
        return (np.rint(y / quantum) * quantum).astype(x.dtype)
    raise ValueError(f"unknown KV quantisation {kind!r} (int8 or fp8)")


def fp8_groups(x: np.ndarray, group: int = 128) -> np.ndarray:
    """[..., d] -> same, rounded as FP8 E4M3 with one scale per ``group`` values (absmax -> 448), as
    DeepSeek-V3.2's indexer stores its keys and queries (vLLM per_token_group_quant_fp8)."""
    shape = x.shape
    g = x.reshape(*shape[:-1], -1, min(group, shape[-1]))
    scale = np.abs(g).max(axis=-1, keepdims=True) / 448.0
    scale = np.where(scale == 0, 1.0, scale)
    return (fake_quant_kv(g / scale, "fp8") * scale).reshape(shape).astype(x.dtype)


class PagedKVCache:
    """K/V storage in fixed-size blocks; a sequence's block table maps position -> slot.

    Same semantics as ``llmsim.kvcache.BlockManager``: ``block_tokens`` tokens per block, a
    sequence of ``t`` tokens holds ``ceil(t / block_tokens)`` blocks. Storage grows on demand, so
    a manager with a huge block count costs only what is used. Blocks are reference counted so a
    prefix can be shared by several sequences.
    """

    def __init__(self, spec: ModelSpec, block_tokens: int, dtype: type = np.float32, quant: str | None = None):
        self.spec, self.block_tokens, self.dtype, self.quant = spec, block_tokens, np.dtype(dtype), quant
        self.capacity = 0
        # MLA caches one row per token, the KV latent and the shared RoPE key (kv_lora + rope wide),
        # in ``k``; its ``v`` is empty (the latent is the value too)
        self.kv_heads = 1 if spec.is_mla else spec.num_kv_heads
        self.k_dim = spec.mla_cache_width if spec.is_mla else spec.head_dim
        self.v_dim = 0 if spec.is_mla else spec.head_dim
        # [L, blocks, block_tokens, n_kv, hd]: a block's tokens are contiguous, so gathering a
        # sequence's K/V copies whole blocks (a NumPy fancy index per block, not per token)
        self.k = np.zeros((spec.num_layers, 0, block_tokens, self.kv_heads, self.k_dim), self.dtype)
        self.v = np.zeros((spec.num_layers, 0, block_tokens, self.kv_heads, self.v_dim), self.dtype)
        # DeepSeek sparse attention's indexer keys, one per token and layer, in the same blocks
        self.i_dim = spec.index_head_dim if spec.is_dsa else 0
        self.ik = np.zeros((spec.num_layers, 0, block_tokens, self.i_dim), self.dtype)
        self.free_ids: list[int] = []
        self.refs: dict[int, int] = {}

    def _grow(self, blocks: int) -> None:
        new = max(blocks, 2 * self.capacity, 16)
        shape = (self.spec.num_layers, new, self.block_tokens, self.kv_heads)
        k, v = np.zeros((*shape, self.k_dim), self.dtype), np.zeros((*shape, self.v_dim), self.dtype)
        k[:, : self.k.shape[1]], v[:, : self.v.shape[1]] = self.k, self.v
        self.k, self.v = k, v
        ik = np.zeros((self.spec.num_layers, new, self.block_tokens, self.i_dim), self.dtype)
        ik[:, : self.ik.shape[1]] = self.ik
        self.ik = ik
        self.free_ids.extend(range(new - 1, self.capacity - 1, -1))
        self.capacity = new

    def ensure(self, block_id: int) -> None:
        """Make physical block ``block_id`` addressable (ids handed out by a ``BlockManager``)."""
        if block_id >= self.capacity:
            self._grow(block_id + 1)
            self.free_ids.clear()  # the manager owns the ids: this cache only stores them

    def allocate(self, n: int) -> list[int]:
        if n > len(self.free_ids):
            self._grow(self.capacity + n)
        ids = [self.free_ids.pop() for _ in range(n)]
        for i in ids:
            self.refs[i] = 1
        return ids

    def share(self, ids: list[int]) -> list[int]:
        """Another sequence reuses these (full, prefix) blocks."""
        for i in ids:
            self.refs[i] += 1
        return list(ids)

    def release(self, ids: list[int]) -> None:
        for i in ids:
            self.refs[i] -= 1
            if self.refs[i] == 0:
                del self.refs[i]
                self.free_ids.append(i)

    @property
    def used_blocks(self) -> int:
        return len(self.refs)

    def slots(self, table: list[int], start: int, stop: int) -> np.ndarray:
        """Positions [start, stop) of a sequence -> flat slot indices."""
        pos = np.arange(start, stop)
        return np.asarray(table, dtype=np.int64)[pos // self.block_tokens] * self.block_tokens + pos % self.block_tokens

    def write(self, layer: int, slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        self.k[layer].reshape(-1, self.kv_heads, self.k_dim)[slots] = fake_quant_kv(k, self.quant)
        if self.v_dim:  # (MLA: no separate values)
            self.v[layer].reshape(-1, self.kv_heads, self.v_dim)[slots] = fake_quant_kv(v, self.quant)

    def write_index(self, layer: int, slots: np.ndarray, keys: np.ndarray) -> None:
        """The indexer's keys [T, i_dim] of the tokens at ``slots``, stored as FP8 groups."""
        self.ik[layer].reshape(-1, self.i_dim)[slots] = fp8_groups(keys)

    def index_keys(self, layer: int, table: list[int], stop: int) -> np.ndarray:
        """The indexer keys of positions [0, stop) of one sequence: [stop, i_dim]."""
        return self.ik[layer].reshape(-1, self.i_dim)[self.slots(table, 0, stop)]

    def gather(self, layer: int, tables: list[list[int]], spans: list[tuple[int, int]]):  # noqa: ANN201
        """K and V of positions [lo, hi) of each sequence, padded to one length:
        -> K, V [b, n_keys, n_kv, hd], valid [b, n_keys] and the first position of each row."""
        bt = self.block_tokens
        first = [lo // bt for lo, _ in spans]
        n_blk = max(-(-hi // bt) - f for (_, hi), f in zip(spans, first, strict=True))
        idx = np.zeros((len(spans), n_blk), np.int64)
        for j, (t, f, (_, hi)) in enumerate(zip(tables, first, spans, strict=True)):
            row = t[f : -(-hi // bt)]
            idx[j, : len(row)] = row
        shape = (len(spans), n_blk * bt, self.kv_heads)
        K, V = self.k[layer, idx].reshape(*shape, self.k_dim), self.v[layer, idx].reshape(*shape, self.v_dim)
        start = np.array(first)[:, None] * bt
        pos = start + np.arange(n_blk * bt)[None, :]  # [b, n_keys] absolute positions
        lo, hi = np.array(spans).T
        return K, V, (pos >= lo[:, None]) & (pos < hi[:, None]), pos
