"""KV offload tiers below the device cache (``kv_cache.offload``, ``kvcache.OffloadTier``): evicted
cached blocks written back, passed down when a tier is full, read back on a prefix hit and the
read priced in the admitting step, by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import llmsim
from llmsim.errors import UserError
from llmsim.kvcache import BlockManager, OffloadTier, chain_hashes
from llmsim.models import get_model
from llmsim.request import Request
from llmsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]


def _cached(kv: BlockManager, rid: int, ids: list[int]) -> Request:
    """A request whose prompt (one 16-token block per id, plus a token) was prefilled, committed and freed."""
    r = Request(rid, 0.0, 16 * len(ids) + 1, 1)
    r.prefix_chain = chain_hashes(ids, 16, 16, r.prompt_tokens)
    kv.allocate(r, 16 * len(ids))
    r.kv_tokens = r.prefilled = 16 * len(ids)
    kv.commit(r)
    kv.free(r)
    return r


def _manager(cpu_blocks: int, ssd_blocks: int = 0) -> BlockManager:
    kv = BlockManager(4, 16, watermark=0.0, prefix_caching=True)
    kv.tiers = [OffloadTier("cpu", cpu_blocks, 10e9, 5e-6)]
    if ssd_blocks:
        kv.tiers.append(OffloadTier("ssd", ssd_blocks, 2e9, 1e-4))
    kv.block_bytes = 1e6
    return kv


def test_evicted_blocks_are_written_back_and_passed_down_when_full() -> None:
    kv = _manager(cpu_blocks=2, ssd_blocks=8)
    a = _cached(kv, 0, [1, 2, 3, 4])  # fills the device (4 blocks), cached
    _cached(kv, 1, [5, 6, 7, 8])  # evicts a's 4 blocks, its tail first (vLLM v1 frees in reverse)
    cpu, ssd = kv.tiers
    assert kv.evictions == 4 and cpu.stored_blocks == 4
    # the cpu tier keeps the last two written, a's head (blocks 2 then 1), passing 4 and 3 down:
    # the blocks every later prompt with this prefix needs first sit in the fastest tier
    assert list(cpu.held) == a.prefix_chain[1::-1] and list(ssd.held) == a.prefix_chain[:1:-1]
    assert cpu.dropped_blocks == 2 and ssd.stored_blocks == 2


def _device_and_tiers() -> tuple[BlockManager, Request]:
    """A 5-block device that keeps a's head block; a's next two blocks on the cpu, its last on the ssd."""
    kv = BlockManager(5, 16, watermark=0.0, prefix_caching=True)
    kv.tiers = [OffloadTier("cpu", 2, 10e9, 5e-6), OffloadTier("ssd", 8, 2e9, 1e-4)]
    kv.block_bytes = 1e6
    a = _cached(kv, 0, [1, 2, 3, 4])
    _cached(kv, 1, [5, 6, 7, 8])  # one fresh block, then a's tail: blocks 4, 3, 2 evicted
    cpu, ssd = kv.tiers
    assert kv.cached_prefix_blocks(a.prefix_chain) == 1  # a's head survives on the device
    assert list(cpu.held) == a.prefix_chain[2:0:-1] and list(ssd.held) == a.prefix_chain[3:]
    again = Request(2, 0.0, a.prompt_tokens, 1)
    again.prefix_chain = a.prefix_chain
    return kv, again


def test_a_prefix_hit_reads_blocks_back_when_admitted_and_the_step_pays_for_it() -> None:
    kv, again = _device_and_tiers()
    cpu, ssd = kv.tiers
    # the whole 4-block prefix is cached: block 1 on the device, 2-3 on the cpu, 4 on the ssd;
    # the tiers' blocks count as computed tokens but are not read until the request is admitted
    assert kv.match_prefix(again) == 64 and again.blocks == 1
    assert kv.blocks_needed(again, 1) == 4  # the three blocks to read back and one for the last token
    assert (cpu.hit_blocks, ssd.hit_blocks, kv.take_load_s()) == (0, 0, 0.0)
    kv.allocate(again, 1)
    assert again.blocks == 5 and len(again.block_ids) == 5 and kv.used == 5
    assert (cpu.hit_blocks, ssd.hit_blocks, cpu.reads, ssd.reads) == (2, 1, 1, 1)
    # one read per tier: latency + blocks x block bytes / bandwidth
    assert kv.take_load_s() == pytest.approx((5e-6 + 2e6 / 10e9) + (1e-4 + 1e6 / 2e9))
    assert kv.take_load_s() == 0.0  # paid once
    # read back, the blocks left their tiers and are the device's, registered in chain order;
    # the reads evicted the other request's four blocks, written back to the cpu (2 kept, 2 down)
    a_chain = again.prefix_chain
    assert all(h not in t.held for t in kv.tiers for h in a_chain)
    assert [kv._block_of[h] for h in a_chain] == again.block_ids[:4]
    assert (len(cpu.held), len(ssd.held)) == (2, 2)
    kv.free(again)
    assert kv.cached_prefix_blocks(a_chain) == 4


def test_a_request_not_admitted_after_all_reads_nothing() -> None:
    kv, again = _device_and_tiers()
    cpu, ssd = kv.tiers
    held = (list(cpu.held), list(ssd.held))
    assert kv.match_prefix(again) == 64
    kv.unmatch(again)
    # as vLLM's connector loads only for a request it schedules: no read, no eviction, no charge
    assert kv.take_load_s() == 0.0 and (cpu.hit_blocks, ssd.hit_blocks) == (0, 0)
    assert (list(cpu.held), list(ssd.held)) == held and kv.evictions == 3
    assert (kv.used, kv.tokens_held, kv.hit_tokens, kv.query_tokens) == (0, 0, 0, 0)
    assert kv.match_prefix(again) == 64  # still there for its next try


def test_a_block_computed_again_leaves_its_tier() -> None:
    kv = _manager(cpu_blocks=8)
    a = _cached(kv, 0, [1, 2])
    _cached(kv, 1, [5, 6, 7, 8])  # a's blocks go to the cpu
    cpu = kv.tiers[0]
    assert set(cpu.held) == set(a.prefix_chain)
    _cached(kv, 2, [1, 2])  # prefilled without a match (as a request that skipped the cache would)
    # the device registered them again, so the cpu's copies go: a hash lives in one place
    assert not set(cpu.held) & set(a.prefix_chain) and kv.cached_prefix_blocks(a.prefix_chain) == 2


def _check_one_place(kv: BlockManager) -> None:
    device = set(kv._block_of)
    assert {kv._hash_of[b] for b in kv._block_of.values()} == device
    # a hash two blocks computed at once is held by both (vLLM's block map): the later ones, apart
    dups = [(h, b) for h, blocks in kv._dups.items() for b in blocks]
    assert all(kv._hash_of[b] == h and kv._block_of[h] != b for h, b in dups)
    assert len(kv._hash_of) == len(device) + len(dups)
    seen = set(device)
    for t in kv.tiers:
        assert len(t.held) <= t.capacity_blocks and not seen & set(t.held)
        seen |= set(t.held)
    assert 0 <= kv.used <= kv.num_blocks and set(kv._free_queue).isdisjoint(kv._ref)


@pytest.mark.parametrize("seed", range(6))
def test_random_traffic_keeps_every_hash_in_one_place(seed: int) -> None:
    """Requests over a few shared prefixes, admitted or turned away at random, finishing in any
    order: the device's map and its inverse agree, no hash is in two places (the KeyError of a
    hash registered on the device while a tier still held it), counts stay within capacity."""
    import random

    rng = random.Random(seed)
    kv = BlockManager(12, 16, watermark=0.0, prefix_caching=True)
    kv.tiers = [OffloadTier("cpu", 6, 10e9, 5e-6), OffloadTier("ssd", 10, 2e9, 1e-4)]
    kv.block_bytes = 1e6
    running: list[Request] = []
    for rid in range(400):
        ids = [rng.randrange(3)] + [rng.randrange(4) for _ in range(rng.randrange(1, 5))]
        r = Request(rid, 0.0, 16 * len(ids) + rng.randrange(1, 16), 1)
        r.prefix_chain = chain_hashes(ids, 16, 16, r.prompt_tokens)
        if rng.random() < 0.3:  # some skip the cache and compute every block again
            r.prefix_chain, chain = None, r.prefix_chain
            kv.match_prefix(r)
            r.prefix_chain = chain
        else:
            kv.match_prefix(r)
        rest = r.prompt_tokens - r.kv_tokens
        if rng.random() < 0.2 or not kv.can_allocate(kv.blocks_needed(r, rest)):
            kv.unmatch(r)
        else:
            kv.allocate(r, rest)
            r.kv_tokens = r.prefilled = r.prompt_tokens
            kv.commit(r)
            running.append(r)
        while running and (len(running) > 2 or rng.random() < 0.4):
            kv.free(running.pop(rng.randrange(len(running))))
        kv.take_load_s()
        _check_one_place(kv)
    assert sum(t.hit_blocks for t in kv.tiers) > 0 and kv.evictions > 0  # (the tiers were used)


def _data(offload: list, num_blocks: int = 3000, **workload: object) -> dict:
    return {
        "name": "offload",
        "seed": 1,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "policy": {"kind": "vllm", "chunk_tokens": 2048, "max_num_seqs": 64},
        "kv_cache": {"prefix_caching": True, "num_blocks": num_blocks, "offload": offload},
        "workload": {
            "kind": "poisson",
            "rate_rps": 4,
            "num_requests": 300,
            "prompt_tokens": {"dist": "lognormal", "median": 200, "sigma": 0.5, "min": 16, "max": 2000},
            "output_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.5, "min": 1, "max": 500},
            # 40 system prompts of 4,096 tokens: 10,240 blocks, over three times the device's 3,000
            "system_prompts": {"count": 40, "tokens": 4096, "share": 1.0},
            **workload,
        },
        "output": {"steps": "all"},
    }


CPU = [{"tier": "cpu", "capacity_gb": 64}]
SMALL_CPU_SSD = [{"tier": "cpu", "capacity_gb": 2}, {"tier": "ssd", "capacity_gb": 100, "bandwidth_gbps": 6}]


@pytest.fixture(scope="module")
def runs() -> dict:
    return {
        name: llmsim.run(scenario_from_dict(_data(tiers), "test", ROOT))
        for name, tiers in (("none", []), ("cpu", CPU), ("cpu+ssd", SMALL_CPU_SSD))
    }


def test_offload_serves_the_prefixes_the_device_evicted(runs) -> None:
    none, cpu, both = (runs[k].summary for k in ("none", "cpu", "cpu+ssd"))
    # the device alone holds under a third of the system prompts: most are evicted before reuse
    assert none["prefix_cache"]["hit_rate"] < 0.3
    # 64 GB of host memory holds them all (10,240 blocks x 2 MB): nearly every prefix comes back
    assert cpu["kv_offload"]["tiers"]["cpu"]["hit_rate"] > 0.5
    assert cpu["prefix_cache"]["hit_rate"] > 0.8 and cpu["kv_offload"]["tiers"]["cpu"]["dropped_blocks"] == 0
    # reading a prompt back is far cheaper than prefilling it: TTFT drops
    assert cpu["mean_ttft_ms"] < 0.5 * none["mean_ttft_ms"]
    # 2 GB of host memory holds ~950 blocks; the rest come from a 6 GB/s drive: slower than all-cpu
    assert both["kv_offload"]["tiers"]["ssd"]["hit_tokens"] > both["kv_offload"]["tiers"]["cpu"]["hit_tokens"]
    assert cpu["mean_ttft_ms"] < both["mean_ttft_ms"] < none["mean_ttft_ms"]
    assert both["kv_offload"]["load_s"] > cpu["kv_offload"]["load_s"]


def test_the_step_that_admits_a_hit_waits_for_its_read(runs) -> None:
    from llmsim.hardware import load_profile

    res = runs["cpu"]
    block_bytes = get_model("llama-3.1-8b").kv_bytes_per_token("bf16") * 16
    assert block_bytes == pytest.approx(2 * 32 * 8 * 128 * 2 * 16)  # K and V, 32 layers, 8 KV heads of 128, bf16
    cpu = res.summary["kv_offload"]["tiers"]["cpu"]
    assert cpu["held_blocks"] <= int(64e9 // block_bytes)
    # the reads go over the H100 profile's host link (as swapping does), one copy per admission
    # that read: its latency plus the blocks' bytes at the link's bandwidth (a request turned away
    # reads nothing, so every block counted as a hit was read by a step)
    link = load_profile("H100-SXM", ROOT).host_link
    want = cpu["reads"] * link.latency_s.value + cpu["hit_tokens"] / 16 * block_bytes / link.bandwidth_bytes_per_s.value
    load = res.summary["kv_offload"]["load_s"]
    assert load == pytest.approx(want, rel=1e-9)
    # the steps' swap_s is those reads (nothing was preempted)
    assert res.summary["preemption"]["requests_preempted"] == 0
    assert res.steps["swap_s"].sum() == pytest.approx(load, rel=1e-9)


def test_fast_paths_equal_exact_steps_with_offload() -> None:
    sc = scenario_from_dict(_data(SMALL_CPU_SSD, num_requests=120), "test", ROOT)
    fast, exact = llmsim.run(sc), llmsim.run(sc, exact_steps=True)
    assert fast.summary["kv_offload"] == exact.summary["kv_offload"]
    f, e = (r.requests.sort_values("id").reset_index(drop=True) for r in (fast, exact))
    for col in ("first_token_s", "finish_s"):
        assert f[col].to_numpy() == pytest.approx(e[col].to_numpy(), rel=1e-9, abs=1e-9)


def test_deterministic(runs) -> None:
    again = llmsim.run(scenario_from_dict(_data(CPU), "test", ROOT))
    pd.testing.assert_frame_equal(runs["cpu"].requests, again.requests)


@pytest.mark.parametrize(
    ("offload", "prefix", "message"),
    [
        (CPU, False, "set prefix_caching: true"),
        ([{"tier": "ssd", "capacity_gb": 100}], True, r"offload\[0\]: the ssd tier needs bandwidth_gbps"),
        (CPU + CPU, True, "each tier once"),
        ([{"tier": "gpu", "capacity_gb": 1}], True, "tier"),
        ([{"tier": "cpu", "capacity_gb": 0}], True, "greater than 0"),
        ([{"tier": "cpu", "capacity_gb": 1e300}], True, "less than or equal to 1000000"),
        ([{"tier": "ssd", "capacity_gb": 9, "bandwidth_gbps": 1e-9}], True, "greater than or equal to 0.001"),
        ([{"tier": "cpu", "capacity_gb": 9, "latency_us": 1e12}], True, "less than or equal to 10000000"),
    ],
)
def test_bad_offload_refused(offload: list, prefix: bool, message: str) -> None:
    data = _data(offload)
    data["kv_cache"]["prefix_caching"] = prefix
    with pytest.raises(UserError, match=message):
        scenario_from_dict(data, "test", ROOT)


def test_offload_on_a_disaggregated_prefill_pool() -> None:
    """Under disaggregation the prefill replicas match prompts, so they get the tiers: the offloaded
    prefixes are read back there instead of prefilled again; the decode replicas, which take
    prefilled requests, have none."""
    data = _data(CPU, num_requests=200)
    data["policy"] = {"kind": "disaggregated"}
    pool = {"replicas": 1, "tp": 1}
    data["cluster"] = {"prefill_pool": pool, "decode_pool": pool}
    data["kv_cache"]["num_blocks"] = 3000
    with_tiers = llmsim.run(scenario_from_dict(data, "test", ROOT))
    data["kv_cache"]["offload"] = []
    without = llmsim.run(scenario_from_dict(data, "test", ROOT))
    cpu = with_tiers.summary["kv_offload"]["tiers"]["cpu"]
    assert cpu["hit_tokens"] > 0 and cpu["stored_blocks"] > 0
    assert with_tiers.summary["prefix_cache"]["hit_rate"] > without.summary["prefix_cache"]["hit_rate"] + 0.2
    assert with_tiers.summary["mean_ttft_ms"] < without.summary["mean_ttft_ms"]


def test_no_prompt_content_no_tiers() -> None:
    """Without prompt content there is nothing to match: the tiers are not built, the summary says why."""
    data = _data(CPU, num_requests=20)
    del data["workload"]["system_prompts"]
    res = llmsim.run(scenario_from_dict(data, "test", ROOT))
    assert "kv_offload" not in res.summary and "nothing to match" in res.summary["prefix_cache"]["note"]
