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


@pytest.mark.parametrize("partial_first", [False, True])
def test_a_freed_partial_block_is_reused_first_where_the_engine_does(partial_first: bool) -> None:
    """vLLM 0.32 puts a freed block without a hash (the partly filled last one) at the head of its
    free queue, to be reused before any cached block; vLLM 0.19 queued it behind them."""
    kv = BlockManager(4, 16, prefix_caching=True, partial_first=partial_first)
    a = req(0, prompt=32, chain=chain_hashes([1, 2], 16, 16, 32))  # 2 full blocks
    b = req(1, prompt=20, chain=chain_hashes([3], 16, 16, 20))  # 1 full block and 4 tokens
    for r in (a, b):
        kv.allocate(r, r.prompt_tokens)
        r.kv_tokens = r.prompt_tokens
        kv.commit(r)
    partial = b.block_ids[1]
    kv.free(a)
    kv.free(b)  # freed last: its partial block is the most recently freed
    c = req(2, prompt=16)
    kv.allocate(c, 16)  # one block: b's partial one, or the least recently freed (a's tail, cached)
    assert (c.block_ids == [partial]) == partial_first
    assert kv.cached_prefix_blocks(a.prefix_chain) == (2 if partial_first else 1)
    assert kv.evictions == (0 if partial_first else 1)


def test_a_request_turned_away_leaves_its_prefix_hits_where_they_were() -> None:
    """vLLM takes a prefix hit's blocks out of the free queue only when it allocates for the request
    (``allocate_slots`` touches them): one that does not fit changes nothing, and the cache keeps
    evicting least recently freed first."""
    kv = BlockManager(4, 16, prefix_caching=True)
    old = req(0, prompt=33, chain=chain_hashes([1, 2], 16, 16, 33))
    new = req(1, prompt=33, chain=chain_hashes([3, 4], 16, 16, 33))
    for r in (old, new):
        kv.allocate(r, 32)
        r.kv_tokens = 32
        kv.commit(r)
        kv.free(r)
    before = kv.free_queue_state()
    again = req(2, prompt=33, chain=old.prefix_chain)
    assert kv.match_prefix(again) == 32 and kv.free_blocks == 2
    kv.unmatch(again)  # (say its last token's block did not fit beside a running request)
    assert kv.free_queue_state() == before and kv.used == 0
    kv.allocate(req(3), 16)  # the least recently freed: old's tail block
    assert kv.cached_prefix_blocks(old.prefix_chain) == 1 and kv.cached_prefix_blocks(new.prefix_chain) == 2


def test_content_computed_twice_stays_cached_while_either_block_holds_it() -> None:
    """Two requests that compute the same block at once (neither found it cached) both keep it
    cached, as vLLM's block map holds every block of a hash; a lookup finds the earlier one, and
    the content is gone only when both blocks are evicted."""
    kv = BlockManager(2, 16, prefix_caching=True)
    chain = chain_hashes([7], 16, 16, 17)
    a, b = req(0, prompt=17, chain=chain), req(1, prompt=17, chain=chain)
    for r in (a, b):  # both planned before either is committed
        kv.allocate(r, 16)
        r.kv_tokens = 16
    held = [a.block_ids[0], b.block_ids[0]]
    for r in (a, b):
        kv.commit(r)
        kv.free(r)
    assert kv.cached_blocks == 2
    kv.allocate(req(2), 16)  # the least recently freed block: a's
    assert kv.evictions == 1 and kv.cached_prefix_blocks(chain) == 1
    c = req(3, prompt=17, chain=chain)
    assert kv.match_prefix(c) == 16 and c.block_ids == [held[1]]  # found in b's block
    kv.unmatch(c)
    kv.allocate(req(4), 16)  # b's, the last
    assert kv.evictions == 2 and kv.cached_prefix_blocks(chain) == 0


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
