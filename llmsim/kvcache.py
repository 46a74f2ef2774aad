"""Paged KV cache: fixed-size blocks handed to requests as they grow, freed when they finish.

Capacity is counted in blocks of ``block_tokens`` tokens. A request holding ``t`` tokens of KV
holds ``ceil(t / block_tokens)`` blocks; only its last block can be partly empty, and that
internal waste is what ``fragmentation`` reports.
"""

from __future__ import annotations

from llmsim.errors import InvariantError
from llmsim.request import Request, blocks_for


class BlockManager:
    def __init__(self, num_blocks: int, block_tokens: int, watermark: float = 0.01) -> None:
        if num_blocks < 1:
            raise ValueError("num_blocks must be >= 1")
        self.num_blocks = num_blocks
        self.block_tokens = block_tokens
        # Blocks kept free when admitting new prompts, so running requests can still grow.
        self.watermark_blocks = int(watermark * num_blocks)
        self.used = 0
        self.peak_used = 0
        self.tokens_held = 0  # Σ kv tokens of block holders (for fragmentation)

    # ---- queries -----------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        return self.num_blocks - self.used

    def blocks_needed(self, req: Request, new_tokens: int) -> int:
        return blocks_for(req.kv_tokens + new_tokens, self.block_tokens) - req.blocks

    def can_allocate(self, blocks: int, admission: bool = False) -> bool:
        reserve = self.watermark_blocks if admission else 0
        return blocks <= self.free_blocks - reserve

    def fits_ever(self, tokens: int) -> bool:
        """Could a request of ``tokens`` total KV tokens fit in an otherwise empty cache?"""
        return blocks_for(tokens, self.block_tokens) <= self.num_blocks

    @property
    def utilization(self) -> float:
        return self.used / self.num_blocks

    @property
    def fragmentation(self) -> float:
        """Share of allocated token slots that hold no token (internal fragmentation)."""
        slots = self.used * self.block_tokens
        return 1.0 - self.tokens_held / slots if slots else 0.0

    # ---- updates -----------------------------------------------------------------------
    def allocate(self, req: Request, new_tokens: int) -> None:
        """Grow ``req`` so it can hold ``new_tokens`` more tokens of KV."""
        n = self.blocks_needed(req, new_tokens)
        if n > self.free_blocks:
            raise InvariantError(f"KV cache over capacity: request {req.id} needs {n} blocks, {self.free_blocks} free")
        if n > 0:
            self.used += n
            req.blocks += n
            if self.used > self.peak_used:
                self.peak_used = self.used
        self.tokens_held += new_tokens

    def free(self, req: Request) -> None:
        self.used -= req.blocks
        self.tokens_held -= req.kv_tokens  # call before the request's counters are reset
        req.blocks = 0
        if self.used < 0:
            raise InvariantError(f"KV cache block count went negative freeing request {req.id}")
