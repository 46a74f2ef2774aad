"""Prompt identity: per-request ids of full prompt blocks, chained the way vLLM's prefix cache
hashes them, so equal prefixes give equal ids and different prefixes different ids.

vLLM v1 (``vllm/v1/core/kv_cache_utils.py``): ``hash_block_tokens(hash_fn, parent, block_tokens,
extra_keys)`` hashes ``(parent_block_hash, tuple(block token ids), extra_keys)``, the first block's
parent being ``NONE_HASH`` (random per process unless PYTHONHASHSEED is set); the request hasher
walks the prompt ``block_size`` tokens at a time and hashes **full blocks only**, each chained on
the previous block's hash. ``extra_keys`` (LoRA id, multimodal hashes, ``cache_salt`` on the first
block, prompt embeddings) are absent for plain text prompts. llmsim keeps the structure and not
the values: blake2b-64 with a fixed seed instead of sha256 of the pickled/CBOR tuple.

The ids go into ``Workload.block_hashes`` with ``hash_block_tokens`` = the block size they were
hashed at; ``kvcache.chain_hashes`` maps them onto the simulated KV block size (a KV block is keyed
by the ids it overlaps, which for a multiple of the hash block size is vLLM's own
``BlockHashListWithBlockSize``). Hashing at the scenario's ``kv_cache.block_tokens`` is exact.

Two sources of content:
- real token ids (``token_block_ids``): a trace that carries them (LLMServingSim / vLLM-bench JSONL);
- symbolic token streams (``segment_block_ids``): a prompt as a list of segments ``(key, length)``
  whose tokens are ``(key, 0) .. (key, length - 1)``. Two prompts share exactly the tokens their
  streams share, so a system prompt, a question or a whole repeated prompt is named by its key
  (generic traces' ``prompt_id`` / ``prefix_group``, the ``shared_prefix`` generator).
Token ids are hashed and dropped: a workload holds one int per full block, never the tokens.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import numpy as np

DEFAULT_HASH_BLOCK_TOKENS = 16  # vLLM's default block_size
_TOKENS = b"llmsim:tokens"  # blake2b personalisation: real token ids and symbolic streams never collide
_SEGMENTS = b"llmsim:segment"
_ROOT = b"\x00" * 8  # the chain's NONE_HASH (fixed: runs are reproducible)
_PIECE = struct.Struct("<Qqq")
# a fresh blake2b-64 of the segment kind, copied per block (a copy is ~40 % cheaper than a new one)
_SEGMENT_HASHER = hashlib.blake2b(digest_size=8, person=_SEGMENTS)


def _id(digest: bytes) -> int:
    return int.from_bytes(digest, "little") >> 1  # 63 bits: fits an int64 column anywhere


def token_block_ids(tokens: np.ndarray, block_tokens: int) -> list[int]:
    """Chained ids of the full ``block_tokens``-token blocks of a prompt's token ids."""
    data = np.ascontiguousarray(tokens, dtype="<i8").tobytes()
    step = 8 * block_tokens
    out: list[int] = []
    parent = _ROOT
    for i in range(len(tokens) // block_tokens):
        h = _id(hashlib.blake2b(parent + data[i * step : (i + 1) * step], digest_size=8, person=_TOKENS).digest())
        out.append(h)
        parent = h.to_bytes(8, "little")
    return out


def segment_key(*parts: object) -> int:
    """A stable key naming one segment of symbolic tokens (e.g. ``("system", 3)``)."""
    return _id(hashlib.blake2b(repr(parts).encode(), digest_size=8, person=_SEGMENTS).digest())


def segment_block_ids(
    segments: Sequence[tuple[int, int]], block_tokens: int, known: list[int] | None = None
) -> list[int]:
    """Chained ids of the full blocks of a stream of segments ``(key, length)``.

    ``known``: ids already computed for a prefix of this same stream (a conversation's previous
    turn); hashing resumes after them. Returns a new list (``known`` is not modified)."""
    out = list(known or [])
    total = sum(length for _, length in segments)
    parent = out[-1].to_bytes(8, "little") if out else _ROOT
    seg, seg_start = 0, 0  # the segment holding token `start`, and its first token's offset
    pack, new_hasher, from_bytes = _PIECE.pack, _SEGMENT_HASHER.copy, int.from_bytes
    for b in range(len(out), total // block_tokens):
        start, end = b * block_tokens, (b + 1) * block_tokens
        while seg_start + segments[seg][1] <= start:
            seg_start += segments[seg][1]
            seg += 1
        key, length = segments[seg]
        if end <= seg_start + length:  # (the block within one segment: most blocks)
            pieces = pack(key, start - seg_start, end - seg_start)
        else:
            pieces = _pieces(segments, seg, seg_start, start, end)
        hasher = new_hasher()
        hasher.update(parent + pieces)
        parent = hasher.digest()
        h = from_bytes(parent, "little") >> 1  # (as _id)
        out.append(h)
        parent = h.to_bytes(8, "little")
    return out


def _pieces(segments: Sequence[tuple[int, int]], s: int, s0: int, start: int, end: int) -> bytes:
    """The ``(key, from, to)`` pieces of the segments a block from ``start`` to ``end`` spans,
    ``s`` the segment holding ``start`` and ``s0`` its first token's offset (empty ones skipped)."""
    pieces = []
    pos = start
    while pos < end:
        key, length = segments[s]
        if length > 0:
            hi = min(end, s0 + length)
            pieces.append(_PIECE.pack(key, pos - s0, hi - s0))
            pos = hi
        s0 += length
        s += 1
    return b"".join(pieces)
