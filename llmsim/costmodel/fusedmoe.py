"""vLLM's fused-MoE kernel computes whole tiles: each expert's rows are padded to its tile height.

vLLM's Triton ``fused_moe_kernel`` (vllm/model_executor/layers/fused_moe/fused_moe.py) sorts the
routed rows by expert and pads each expert's list to a multiple of ``BLOCK_SIZE_M``
(``moe_align_block_size``); every program then multiplies a whole ``BLOCK_SIZE_M``-row tile, the
padding rows loaded as zeros (``token_mask``) but multiplied all the same. So an expert with 129
rows costs two 128-row tiles, and a step of M tokens executes ``padded_share / share`` times its
FLOPs. The tile height is the config ``get_default_config`` picks for M (``tile_config``: vLLM
ships no tuned file for the experts' shape of any MoE server in data/validation/vllm-gpu-bench/,
whose logs say "Using default MoE config"). Seen in the held-out whole-layer tables
(data/validation/moe_kernels/layer_tables.csv): the A100's Qwen3-30B-A3B layer jumps 16 % from
512 to 768 tokens, where each expert's 32 rows fill half a 64-row tile and then its 48 rows three
eighths of a 128-row one.
"""

from __future__ import annotations

import math

_TAIL_Z = 8.0  # standard deviations past which a row count's chance is taken as 0 or 1


def tile_config(m: int, experts: int) -> tuple[int, int, int, int, int, int]:
    """(BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, warps, stages) that vLLM's
    ``get_default_config`` gives a 16-bit call of ``m`` tokens (the batch-size-aware buckets of
    vLLM PR #34846, 2026-02)."""
    block_m = 16 if m <= 32 else 32 if m <= 96 else 64 if m <= 512 else 128
    block_n = 64 if m <= 64 else 128
    block_k = 128 if m <= 64 else 64
    group_m = 16 if m // max(experts, 1) > 128 else 1
    warps = 4 if m <= 128 else 8
    stages = 4 if m <= 32 else 3
    return block_m, block_n, block_k, group_m, warps, stages


def padded_share(share: float, block_m: int) -> float:
    """Expected rows a touched expert's tiles hold when it gets ``share`` rows on average: its row
    count rounded up to a multiple of ``block_m``, averaged over the count's spread. A touched
    expert has at least one row, so one tile; each further tile is paid when the count passes
    j x block_m, with the count taken as Poisson around ``share`` (many tokens, each picking this
    expert with a small chance), by its normal approximation. Routing that is skewed or alike
    spreads the counts differently: not followed, only their mean."""
    if share <= 0.0:
        return 0.0
    sd = math.sqrt(share)
    # tiles certainly paid (the count is surely past j x block_m for j below this), then the rest
    first = max(1, math.ceil((share - _TAIL_Z * sd - 0.5) / block_m))
    tiles = float(first)
    j = first
    while True:
        z = (j * block_m + 0.5 - share) / sd
        if z > _TAIL_Z:
            break
        tiles += 0.5 * math.erfc(z / math.sqrt(2.0))  # P(count > j x block_m)
        j += 1
    # (to a millionth of a tile: a chance of 1e-9 must not read as a second tile where the rows
    # are counted in whole tiles, as the GEMM curve's wave term does)
    return round(tiles, 6) * block_m
