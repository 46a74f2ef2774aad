"""Paged KV cache: block tables, accounting, and the prefix cache's hashing and LRU eviction."""

from __future__ import annotations

import pytest

from llmsim.errors import InvariantError
from llmsim.kvcache import BlockManager, chain_hashes
from llmsim.request import Request


def req(rid: int, prompt: int = 40, out: int = 4, chain: list[int] | None = None) -> Request:
    r = Request(rid, 0.0, prompt, out)
    r.prefix_chain = chain
    return r


def test_block_table_grows_with_tokens_and_ids_are_unique() -> None:
    kv = BlockManager(10, 16)
    a, b = req(0), req(1)
    kv.allocate(a, 33)  # 3 blocks
    a.kv_tokens = 33
    kv.allocate(b, 16)
    b.kv_tokens = 16
    assert len(a.block_ids) == a.blocks == 3 and len(b.block_ids) == 1
    assert len(set(a.block_ids) | set(b.block_ids)) == 4
    assert kv.used == 4 and kv.utilization == pytest.approx(0.4)
    # 49 tokens in 4 blocks of 16 slots: 15 slots empty
    assert kv.fragmentation == pytest.approx(1 - 49 / 64)
    kv.free(a)
    assert kv.used == 1 and a.blocks == 0 and a.block_ids is None
    with pytest.raises(InvariantError):
        kv.allocate(req(2), 16 * 10)


def test_watermark_only_applies_to_admission() -> None:
    kv = BlockManager(100, 16, watermark=0.1)
    assert kv.can_allocate(95) and not kv.can_allocate(95, admission=True)


def test_chain_maps_512_token_ids_onto_16_token_blocks() -> None:
    a = chain_hashes([7, 8], 512, 16, 1024)
    b = chain_hashes([7, 9], 512, 16, 1024)
    assert len(a) == 64
    assert a[:32] == b[:32] and a[32] != b[32]  # the first 512 tokens are shared, then they differ
    # a partly filled last block is not hashed
    assert len(chain_hashes([7, 8], 512, 16, 1000)) == 1000 // 16
    # and ids smaller than a block combine: two 16-token ids per 32-token block
    assert len(chain_hashes([1, 2, 3, 4], 16, 32, 64)) == 2


def test_prefix_match_shares_blocks_and_leaves_one_token_to_prefill() -> None:
    kv = BlockManager(20, 16, prefix_caching=True)
    chain = chain_hashes([1, 2, 3, 4], 16, 16, 64)
    a = req(0, prompt=64, chain=chain)
    kv.allocate(a, 64)
    a.kv_tokens = a.prefilled = 64
    kv.commit(a)
    b = req(1, prompt=64, chain=chain)
    assert kv.match_prefix(b) == 48  # 3 of 4 blocks: the last token must still run to sample
    assert b.block_ids == a.block_ids[:3] and kv.used == 4  # shared, not copied
    kv.free(a)
    assert kv.used == 3  # b still references three of a's blocks
    kv.free(b)
    assert kv.used == 0 and kv.cached_blocks == 4  # cached, unreferenced, reusable


def test_lru_evicts_the_least_recently_freed_cached_block() -> None:
    kv = BlockManager(2, 16, prefix_caching=True)
    old = req(0, prompt=17, chain=chain_hashes([1], 16, 16, 17))
    new = req(1, prompt=17, chain=chain_hashes([2], 16, 16, 17))
    for r in (old, new):
        kv.allocate(r, 16)
        r.kv_tokens = 16
        kv.commit(r)
        kv.free(r)
    assert kv.cached_blocks == 2
    kv.allocate(req(2), 16)  # needs one block: evicts `old`'s
    assert kv.evictions == 1
    assert kv.cached_prefix_blocks(new.prefix_chain) == 1 and kv.cached_prefix_blocks(old.prefix_chain) == 0


def test_prewarm_caches_a_prefix_without_holding_it() -> None:
    kv = BlockManager(8, 16, prefix_caching=True)
    chain = chain_hashes([5, 6, 7], 16, 16, 48)
    assert kv.prewarm(chain) == 3
    assert kv.used == 0 and kv.cached_blocks == 3
    r = req(0, prompt=60, chain=chain)
    assert kv.match_prefix(r) == 48 and r.cached_tokens == 48


def test_swap_in_restores_tokens_into_new_blocks() -> None:
    kv = BlockManager(8, 16)
    r = req(0)
    kv.allocate(r, 40)
    r.kv_tokens = 40
    kv.free(r)
    r.preempt_for_swap()
    assert r.swapped and r.kv_tokens == 40 and r.preemptions == 1
    assert kv.swap_in(r) == 40
    assert r.blocks == 3 and not r.swapped and kv.used == 3
