"""Paged KV cache: fixed-size physical blocks handed to requests as they grow, freed when they finish.

Capacity is counted in blocks of ``block_tokens`` tokens. Each request holds a block table
(``req.block_ids``, physical ids the NumPy reference engine indexes its paged cache with). A
request holding ``t`` tokens of KV holds ``ceil(t / block_tokens)`` blocks; only its last block
can be partly empty, and that internal waste is what ``fragmentation`` reports.

Prefix caching (vLLM's automatic prefix caching): every full prompt block gets a hash chained
from its parent's hash and its own content (token hashes, or a trace's ``hash_ids``). Once its
KV has been computed the block is registered under that hash; a later request whose chain starts
with the same hashes shares those blocks (reference counts) and skips their prefill. A cached
block nobody references stays in the cache until a new allocation needs it, so unreferenced
cached blocks count as free.

Freed blocks wait in one queue, as vLLM v1's free block queue: never-used blocks are taken first,
then the least recently freed, cached or not; a cached one taken then loses its hash (eviction).
A finished request's blocks enter it tail-first (vLLM v1 ``KVCacheManager.free`` frees "in
reverse order so that the tail blocks are evicted first"): a prompt's head, the part later
prompts share, outlives its tail. ``free_queue_state`` / ``restore`` hand the queue to the next run
on the same server (a benchmark's later pass: ``llmsim bench --after``).

Offload tiers (LMCache-style: CPU memory, local SSD, a remote store; ``OffloadTier``): a cached
block evicted from the device is written back to the first tier, and a tier full of them passes
its least recently used one down to the next (the last drops it). ``match_prefix`` continues a
prompt's chain into the tiers after the device's cached blocks end; the blocks found there
count as cached tokens, so the admission check asks for their device blocks too, and only when
the request is admitted (``allocate``) are they read back into fresh device blocks, as vLLM's
connector loads only for a request it schedules. A hash lives in one place: the device or one
tier (a block read back, or computed again, leaves its tier). The copies' seconds are kept for
the step that admits the request (``take_load_s``).
"""

from __future__ import annotations

from collections import OrderedDict

from llmsim.errors import InvariantError
from llmsim.request import Request, blocks_for


def chain_hashes(
    hash_ids: list[int], hash_block_tokens: int, block_tokens: int, prompt_tokens: int, seed: int = 0
) -> list[int]:
    """Chained hashes of a prompt's full KV blocks, from content ids of ``hash_block_tokens``-token
    blocks (Mooncake: 512). A KV block's key is the ids it overlaps plus its offset in the first,
    so 512-token ids map onto 16-token KV blocks and the other way round. ``seed`` starts the chain
    (0: the base model; a LoRA adapter's own, as vLLM puts the LoRA id in every block's key)."""
    out: list[int] = []
    parent = seed
    covered = len(hash_ids) * hash_block_tokens
    for i in range(min(prompt_tokens, covered) // block_tokens):
        start = i * block_tokens
        j0, j1 = start // hash_block_tokens, (start + block_tokens - 1) // hash_block_tokens
        parent = hash((parent, tuple(hash_ids[j0 : j1 + 1]), start - j0 * hash_block_tokens))
        out.append(parent)
    return out


UNCACHED = -1  # a free block without a chain hash in ``BlockManager.free_queue_state`` (CPython's hash() is never -1)


class OffloadTier:
    """One tier below the device cache: the chain hashes it holds (least recently used first),
    its capacity in blocks, how fast a block comes back, and its counters."""

    def __init__(self, name: str, capacity_blocks: int, bytes_per_s: float, latency_s: float) -> None:
        self.name = name
        self.capacity_blocks = capacity_blocks
        self.bytes_per_s = bytes_per_s
        self.latency_s = latency_s
        self.held: OrderedDict[int, None] = OrderedDict()
        self.stored_blocks = 0  # written here (from the device or the tier above)
        self.hit_blocks = 0  # read back into the device's cache
        self.reads = 0  # copies: one per admission that read blocks from here
        self.dropped_blocks = 0  # passed down (or dropped by the last tier) when full


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_tokens: int,
        watermark: float = 0.01,
        prefix_caching: bool = False,
        track_ids: bool = True,
        partial_first: bool = False,
    ) -> None:
        if num_blocks < 1:
            raise ValueError("num_blocks must be >= 1")
        self.num_blocks = num_blocks
        self.block_tokens = block_tokens
        self.prefix_caching = prefix_caching
        # physical block ids per request (block tables): the reference engine and prefix sharing
        # need them; a simulated replica without prefix caching counts blocks only
        self.track_ids = track_ids or prefix_caching
        # Blocks kept free when admitting new prompts, so running requests can still grow.
        self.watermark_blocks = int(watermark * num_blocks)
        self.used = 0  # blocks referenced by at least one request
        self.peak_used = 0
        self.tokens_held = 0  # Σ kv tokens of block holders (for fragmentation)
        # Block ids are handed out lazily (never-used ids from a counter first, then freed ones, the
        # least recently freed first), and reference counts live in a dict of blocks in use: memory
        # follows the blocks used, not the capacity (a 1.5 TB CPU node holds tens of millions of blocks).
        self._fresh = 0
        self._ref: dict[int, int] = {}
        self._hash_of: dict[int, int] = {}  # block id -> chain hash (registered blocks)
        self._block_of: dict[int, int] = {}  # chain hash -> the block a lookup finds
        # chain hash -> later blocks that computed the same content (vLLM keeps every one cached and
        # a lookup finds the earliest still there: BlockHashToBlockMap, vllm/v1/core/block_pool.py)
        self._dups: dict[int, list[int]] = {}
        # vLLM v1's free block queue past its never-used blocks (vllm/v1/core/block_pool.py,
        # FreeKVCacheBlockQueue): every freed block, cached or not, least recently freed first; a block
        # taken from its head that is cached loses its hash then (an eviction). A request's blocks
        # that hold nothing a later prompt repeats (its partial last one; its answer's, unless the
        # workload says a later prompt repeats it) so wait their turn with the cached ones.
        self._free_queue: OrderedDict[int, None] = OrderedDict()
        # ... except, with ``partial_first``, a freed block that holds no full block of KV (a
        # request's partly filled last one): it goes to the head, taken before any cached one (vLLM
        # from PR #42656, mid-2026: BlockPool.free_blocks prepends the blocks without a hash, 0.32.0)
        self.partial_first = partial_first and prefix_caching
        self._front = 0  # blocks at the head of the queue put there by partial_first
        self._restored_evictable = 0  # queued blocks of a restored state a prewarm may still evict (the oldest)
        self._registered: dict[int, int] = {}  # request id -> prompt blocks registered so far
        # prefix-cache statistics
        self.hit_tokens = 0
        self.query_tokens = 0
        # a preempted request's lookups when it is resumed, apart: vLLM keeps them out of its hit rate
        # (vllm/v1/metrics/stats.py, PrefixCacheStats.record: preempted_queries / preempted_hits)
        self.resumed_hit_tokens = 0
        self.resumed_query_tokens = 0
        self.evictions = 0
        # offload tiers below the device, fastest first, and the seconds of block loads the next
        # step must wait for (per request, so a request not admitted after all gives them back)
        self.tiers: list[OffloadTier] = []
        self.block_bytes = 0.0  # one block's KV (all of a replica's devices), for load times
        self._load_s = 0.0
        # request id -> (chain hash, tier) of the blocks it matched in the tiers, read back if it
        # is admitted (allocate), forgotten if not (unmatch)
        self._pending: dict[int, list[tuple[int, int]]] = {}
        self._queried = -1  # the request whose prompt match_prefix last counted as queried
        # request id -> the matched blocks still in the free queue: they leave it when the request
        # is admitted (allocate), and stay where they were if it is not (unmatch), as vLLM touches
        # a prefix hit's blocks only in allocate_slots (vllm/v1/core/kv_cache_manager.py, 0.32.0)
        self._untouched: dict[int, list[int]] = {}

    # ---- queries -----------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        return self.num_blocks - self.used

    @property
    def cached_blocks(self) -> int:
        """Registered blocks nobody references (reusable, evictable)."""
        return sum(1 for bid in self._free_queue if bid in self._hash_of)

    def blocks_for_request(self, req: Request, tokens: int) -> int:
        """Blocks a request holds at ``tokens`` tokens per sequence: with n sequences the full
        prompt blocks are shared and each sequence owns the rest (its copy of the partly filled
        prompt block, then its own generated tokens)."""
        if req.n_seqs == 1 or tokens <= req.prompt_tokens:
            return blocks_for(tokens, self.block_tokens)
        shared = req.prompt_tokens // self.block_tokens
        return shared + req.n_seqs * blocks_for(tokens - shared * self.block_tokens, self.block_tokens)

    def blocks_needed(self, req: Request, new_tokens: int) -> int:
        return self.blocks_for_request(req, req.kv_tokens + new_tokens) - req.blocks

    def can_allocate(self, blocks: int, admission: bool = False) -> bool:
        reserve = self.watermark_blocks if admission else 0
        return blocks <= self.free_blocks - reserve

    @property
    def utilization(self) -> float:
        return self.used / self.num_blocks

    @property
    def fragmentation(self) -> float:
        """Share of allocated token slots that hold no token (internal fragmentation)."""
        slots = self.used * self.block_tokens
        return max(0.0, 1.0 - self.tokens_held / slots) if slots else 0.0

    def counters(self) -> dict[str, int]:
        """Capacity, use at the end, peak use and prefix-cache statistics (a replica's counters)."""
        return {
            "kv_blocks": self.num_blocks,
            "kv_blocks_used": self.used,
            "kv_peak_blocks": self.peak_used,
            "prefix_hit_tokens": self.hit_tokens,
            "prefix_query_tokens": self.query_tokens,
            "prefix_resumed_hit_tokens": self.resumed_hit_tokens,
            "prefix_resumed_query_tokens": self.resumed_query_tokens,
            "prefix_evictions": self.evictions,
        }

    def tier_counters(self) -> dict[str, int]:
        """Each offload tier's counters, ``offload_<tier>_<counter>`` (a replica's counters)."""
        out: dict[str, int] = {}
        for t in self.tiers:
            out[f"offload_{t.name}_stored_blocks"] = t.stored_blocks
            out[f"offload_{t.name}_hit_blocks"] = t.hit_blocks
            out[f"offload_{t.name}_reads"] = t.reads
            out[f"offload_{t.name}_dropped_blocks"] = t.dropped_blocks
            out[f"offload_{t.name}_held_blocks"] = len(t.held)
        return out

    def cached_prefix_blocks(self, chain: list[int] | None, limit: int = -1) -> int:
        """How many leading blocks of ``chain`` (of its first ``limit``, if >= 0) this cache holds
        (prefix-affinity routing)."""
        n = 0
        for h in chain or ():
            if n == limit or h not in self._block_of:
                break
            n += 1
        return n

    # ---- updates -----------------------------------------------------------------------
    def _pop_free_id(self) -> int | None:
        """A never-used block id, while any is left."""
        if self._fresh < self.num_blocks:
            self._fresh += 1
            return self._fresh - 1
        return None

    def _take(self) -> int:
        if self._front:  # a partial block freed to the head: before the never-used ones too, as in vLLM's queue
            self._front -= 1
        else:
            bid = self._pop_free_id()
            if bid is not None:
                return bid
            if not self._free_queue:
                raise InvariantError("KV cache has no free or evictable block")
        bid, _ = self._free_queue.popitem(last=False)  # the least recently freed block
        h = self._hash_of.pop(bid, None)
        if h is None:
            return bid
        self.evictions += 1  # (it was cached: evicted)
        dups = self._dups.get(h)
        if dups is not None:  # another block holds the same content: the hash stays cached
            if self._block_of[h] == bid:
                self._block_of[h] = dups.pop(0)
            else:
                dups.remove(bid)
            if not dups:
                del self._dups[h]
            return bid
        del self._block_of[h]
        if self.tiers:
            self._write_back(h, 0)
        return bid

    def _register(self, h: int, bid: int) -> None:
        """Block ``bid`` (holding no hash yet) now holds the content ``h``."""
        self._hash_of[bid] = h
        if h in self._block_of:
            self._dups.setdefault(h, []).append(bid)
            return
        self._block_of[h] = bid
        if self.tiers:
            self._leave_tiers(h)

    def _write_back(self, h: int, level: int) -> None:
        """Block ``h`` goes to tier ``level``; a full tier passes its oldest block further down."""
        while level < len(self.tiers):  # (h is in no tier: a hash lives in one place)
            tier = self.tiers[level]
            tier.held[h] = None
            tier.stored_blocks += 1
            if len(tier.held) <= tier.capacity_blocks:
                return
            h, _ = tier.held.popitem(last=False)
            tier.dropped_blocks += 1
            level += 1

    def _tier_of(self, h: int) -> int:
        """The tier holding block ``h`` (-1: none)."""
        for k, tier in enumerate(self.tiers):
            if h in tier.held:
                return k
        return -1

    def _match_tiers(self, chain: list[int]) -> list[tuple[int, int]]:
        """The blocks of ``chain`` (continuing a device match) held by the tiers, up to the first
        held by none: (chain hash, tier) each."""
        found: list[tuple[int, int]] = []
        for h in chain:
            level = self._tier_of(h)
            if level < 0:
                break
            found.append((h, level))
        return found

    def _load_pending(self, req: Request) -> None:
        """Read the tier blocks ``req`` matched into fresh device blocks, registered and
        referenced: they leave their tiers first, so the evictions the reads cause (written back
        to the first tier) cannot push them further down; one copy's seconds per tier read."""
        found = self._pending.pop(req.id)
        per_tier = [0] * len(self.tiers)
        for h, level in found:
            del self.tiers[level].held[h]
            per_tier[level] += 1
        self._hold(len(found), f"request {req.id} reads")
        ids = req.block_ids if req.block_ids is not None else []
        for h, _ in found:
            bid = self._take()
            self._ref[bid] = 1
            self._register(h, bid)
            ids.append(bid)
        req.block_ids = ids
        req.blocks += len(found)
        for k, n in enumerate(per_tier):
            if n:
                t = self.tiers[k]
                t.hit_blocks += n
                t.reads += 1
                self._load_s += t.latency_s + n * self.block_bytes / t.bytes_per_s

    def _leave_tiers(self, h: int) -> None:
        """The device holds ``h`` now: a tier's copy of it goes (a hash lives in one place)."""
        level = self._tier_of(h)
        if level >= 0:
            del self.tiers[level].held[h]

    def take_load_s(self) -> float:
        """Seconds of offload-tier reads the step being priced waits for (then forgotten)."""
        total = self._load_s
        self._load_s = 0.0
        return total

    def allocate(self, req: Request, new_tokens: int) -> None:
        """Grow ``req`` so it can hold ``new_tokens`` more tokens of KV than it holds now."""
        self.grow(req, new_tokens, new_tokens)

    def grow(self, req: Request, ahead_tokens: int, new_slots: int) -> None:
        """Hold blocks for ``req.kv_tokens + ahead_tokens`` tokens, of which ``new_slots`` token
        slots are reserved by this call (a decode run reserves slots ahead of its tokens)."""
        if self._untouched and req.id in self._untouched:  # admitted: its hits leave the free queue
            for bid in self._untouched.pop(req.id):
                del self._free_queue[bid]
        if self._pending and req.id in self._pending:  # admitted: its tier hits are read now
            self._load_pending(req)
        if req.n_seqs == 1:  # hot path (every decode step): inline blocks_needed
            n = -(-(req.kv_tokens + ahead_tokens) // self.block_tokens) - req.blocks
            if n <= 0:
                self.tokens_held += new_slots
                return
        else:
            n = self.blocks_needed(req, ahead_tokens)
        if n > 0:
            self._hold(n, f"request {req.id} needs")
            if self.track_ids:
                if req.block_ids is None:
                    req.block_ids = []
                for _ in range(n):
                    bid = self._take()
                    self._ref[bid] = 1
                    req.block_ids.append(bid)
            req.blocks += n
        self.tokens_held += new_slots

    def _hold(self, blocks: int, who: str) -> None:
        """Count ``blocks`` more blocks in use (``who``: for the over-capacity message)."""
        if blocks > self.free_blocks:
            raise InvariantError(f"KV cache over capacity: {who} {blocks} blocks, {self.free_blocks} free")
        self.used += blocks
        if self.used > self.peak_used:
            self.peak_used = self.used

    def grow_counts(self, blocks: int, slots: int) -> None:
        """Hold ``blocks`` more blocks and ``slots`` more token slots for requests tracked by
        count only (``DecodeSet`` members: no block ids)."""
        self._hold(blocks, "decoding requests need")
        self.tokens_held += slots

    def reserve(self, blocks: int) -> None:
        """Hold ``blocks`` for a request still arriving (disaggregated KV transfer)."""
        self._hold(blocks, "reserving")

    def unreserve(self, blocks: int) -> None:
        self.used -= blocks

    def swap_in(self, req: Request) -> int:
        """Bring a swapped-out request's KV back into fresh blocks; returns the tokens moved."""
        tokens = req.kv_tokens
        req.kv_tokens = 0
        self.allocate(req, tokens)
        req.kv_tokens = tokens
        req.swapped = False
        return tokens

    def free(self, req: Request) -> None:
        """Release the request's blocks (call before its counters are reset)."""
        if req.block_ids is None:  # held by count only (no block ids handed out)
            self.used -= req.blocks
        # tail first: the queue gives up a prompt's last blocks before its shared head (vLLM v1)
        ids = req.block_ids or ()
        # blocks from here on hold no full block of KV (with n sequences, every block is taken for full)
        partial = req.kv_tokens // self.block_tokens if self.partial_first and req.n_seqs == 1 else len(ids)
        first: list[int] = []
        for i in range(len(ids) - 1, -1, -1):
            bid = ids[i]
            self._ref[bid] -= 1
            if self._ref[bid] == 0:
                del self._ref[bid]
                self.used -= 1
                if i >= partial and bid not in self._hash_of:
                    first.append(bid)
                else:
                    self._free_queue[bid] = None  # most recently freed last (a cached one stays cached)
        for bid in reversed(first):  # (the tail's last block at the very head, as vLLM's prepend_n)
            self._free_queue[bid] = None
            self._free_queue.move_to_end(bid, last=False)
        self._front += len(first)
        if self.used < 0:
            raise InvariantError(f"KV cache block count went negative freeing request {req.id}")
        self.tokens_held -= req.kv_tokens
        req.blocks = 0
        req.block_ids = None
        self._registered.pop(req.id, None)
        if self._pending:
            self._pending.pop(req.id, None)

    # ---- prefix caching ----------------------------------------------------------------
    def match_prefix(self, req: Request) -> int:
        """Share the cached blocks of the longest cached prefix of a request that holds no KV yet.
        At least one prompt token is always left to prefill (it samples the first token).
        Returns the tokens served from cache."""
        if not self.prefix_caching or req.kv_tokens or req.blocks:
            return 0
        chain = req.prefix_chain or []
        self._count(req, req.prefill_target, 0)
        self._queried = req.id  # (unmatch takes the query back, hit or not)
        limit = (req.prefill_target - 1) // self.block_tokens
        ids: list[int] = []
        for h in chain[:limit]:
            bid = self._block_of.get(h)
            if bid is None:
                break
            ids.append(bid)
        queued = [bid for bid in ids if bid not in self._ref]
        if queued:
            self._untouched[req.id] = queued
            self.used += len(queued)
        for bid in ids:
            self._ref[bid] = self._ref.get(bid, 0) + 1
        matched = len(ids)
        if self.tiers and matched < limit:
            found = self._match_tiers(chain[matched:limit])
            if found:
                self._pending[req.id] = found
                matched += len(found)
        if not matched:
            return 0
        if self.used > self.peak_used:
            self.peak_used = self.used
        tokens = matched * self.block_tokens
        req.block_ids = ids
        req.blocks = len(ids)  # the tier hits' blocks are held when they are read (allocate)
        req.kv_tokens = req.prefilled = tokens
        if not req.preemptions:  # (as vLLM's num_cached_tokens: the first lookup's)
            req.cached_tokens = max(req.cached_tokens, tokens)
        self.tokens_held += tokens
        self._registered[req.id] = matched
        self._count(req, 0, tokens)
        return tokens

    def _count(self, req: Request, queried: int, hit: int) -> None:
        if req.preemptions:
            self.resumed_query_tokens += queried
            self.resumed_hit_tokens += hit
        else:
            self.query_tokens += queried
            self.hit_tokens += hit

    def unmatch(self, req: Request) -> None:
        """Undo ``match_prefix`` for a request that could not be admitted after all."""
        if self._queried == req.id:  # a request turned away is counted once, when it is admitted
            self._count(req, -req.prefill_target, 0)
            self._queried = -1
        if req.kv_tokens:  # (free forgets its tier hits: nothing was read)
            self._count(req, 0, -req.kv_tokens)
            queued = set(self._untouched.pop(req.id, ()))
            for bid in queued:  # never left the free queue: they keep their place in it
                del self._ref[bid]
            self.used -= len(queued)
            req.block_ids = [bid for bid in req.block_ids or () if bid not in queued]
            self.free(req)
            req.kv_tokens = req.prefilled = 0

    def commit(self, req: Request, ahead_tokens: int = 0) -> None:
        """Register the request's prompt blocks whose KV is now computed, for later requests; with
        ``ahead_tokens``, also those the step being planned computes (vLLM caches a block when it
        allocates it, so a request admitted later in the same step shares it)."""
        chain = req.prefix_chain
        if not self.prefix_caching or not chain or req.block_ids is None:
            return
        # the chain covers the prompt's full blocks, and where a later prompt repeats the answer
        # (workload output_hashes) the answer's too: its blocks are registered at the finish
        full = min((req.kv_tokens + ahead_tokens) // self.block_tokens, len(chain), len(req.block_ids))
        for i in range(self._registered.get(req.id, 0), full):
            h = chain[i]
            bid = req.block_ids[i]
            if bid not in self._hash_of:  # (else a block it shares: cached already)
                self._register(h, bid)
        self._registered[req.id] = max(full, self._registered.get(req.id, 0))

    def cache_computed(self, req: Request) -> None:
        """Register every full block ``req`` has computed, its answer's too, before a recompute
        preemption frees them: vLLM caches each block of a request as it fills (generated tokens
        included, ``KVCacheManager.allocate_slots``), so the request finds them again when it is
        admitted anew, unless they were evicted meanwhile. Blocks past its chain (the answer, or a
        prompt without content ids) get ids of its own, which no other request's chain holds."""
        if not self.prefix_caching or req.block_ids is None or req.n_seqs > 1:
            return  # (parallel samples: past the shared prompt the table holds each sequence's blocks in turn)
        chain = req.prefix_chain or []
        full = min(req.kv_tokens // self.block_tokens, len(req.block_ids))
        if len(chain) < full:
            parent = chain[-1] if chain else hash((-3, req.id))
            extra = []
            for i in range(len(chain), full):  # (ints only: a str's hash is salted per process)
                parent = hash((parent, -2, req.id, i))
                extra.append(parent)
            req.prefix_chain = chain + extra
        self.commit(req)

    def free_queue_state(self) -> list[int]:
        """The free block queue as it stands, oldest first: each block's chain hash, or UNCACHED
        for a block that holds none (then the cached blocks still in use, none once every request
        is done): what a server keeps between two benchmark passes (``SimOptions.free_queues``)."""
        queue = [self._hash_of.get(bid, UNCACHED) for bid in self._free_queue]
        return queue + [h for bid, h in self._hash_of.items() if bid not in self._free_queue]

    def restore(self, state: list[int]) -> None:
        """Start from a ``free_queue_state`` of this server's cache: its queue, in its order (of a
        larger cache's, the most recently freed blocks that fit)."""
        kept = state[-self.num_blocks :]
        for h in kept:
            self._queue(h)
        self._restored_evictable = len(kept)

    def prewarm_room(self) -> int:
        """The most entries of a prefix's chain ``prewarm`` can use: each either is cached already
        (skipped) or takes a never-used block or a restored one it may evict."""
        return len(self._block_of) + max(self.num_blocks - self._fresh, 0) + self._restored_evictable

    def prewarm(self, chain: list[int]) -> int:
        """Cache a prefix before any request arrives (its blocks stay evictable), after what a
        restored state holds, whose oldest blocks it may take; never another prewarmed prefix's.
        Returns blocks added."""
        added = 0
        for h in chain:
            if h in self._block_of:
                continue
            if self._fresh >= self.num_blocks:
                if not self._restored_evictable:
                    break
                self._restored_evictable -= 1
            self._queue(h)
            added += 1
        return added

    def _queue(self, h: int) -> None:
        """A free block holding ``h`` (UNCACHED: nothing) at the tail of the free queue: a
        never-used one, else the queue's head (evicted)."""
        bid = self._take()
        self._free_queue[bid] = None
        if h != UNCACHED:
            self._register(h, bid)
