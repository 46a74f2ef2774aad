"""Bounds on the sizes a workload may ask for, checked before any array is allocated.

A hostile or mistyped size (``rate_rps: 1e9`` with ``duration_s: 1e9``, a lognormal median of
1e308) must end in one clear error naming the key and the limit, not in a MemoryError, the OOM
killer, or a silent overflow into 1-token prompts. The numbers (docs/workloads.md, "Limits"):

- ``MAX_TOKENS_PER_REQUEST``: 10,000,000 prompt or output tokens per request, 75x the longest
  context of any catalog model (128k); a larger count is a typo, and its prefix ids alone
  (one int per 16 tokens) would take 5 MB per request.
- ``MAX_REQUESTS``: 10,000,000 requests per run. Measured (``resource.getrusage`` peak RSS of a
  100k- against a 20k-request run, gpt2 on H100, 4 replicas): a request costs ~1.6 KB over the
  whole run (workload columns, its ``Request`` object, the results tables), so 10M requests need
  ~16 GB; the workload arrays alone (24 bytes per request plus generation temporaries) stay under
  1 GB, so the check itself never runs out of memory.
- ``MAX_PREFIX_BLOCKS``: 50,000,000 content ids per run, the chained block hashes that name a
  prompt's content for prefix caching when llmsim makes them up (shared-prefix workloads, a
  trace's prefix groups): one per ``hash_block_tokens`` tokens of every prompt, ~56 bytes each
  (measured: peak RSS over 2M ids), so the bound is ~2.8 GB, reached at 8*10**8 prompt tokens
  in 16-token blocks (the one-hour Azure conversation trace needs ~10**6). Ids read from a trace
  file (token ids, Mooncake hash_ids) are bounded by the file's size; the KV-block hashes the
  simulation chains from them are not (a Mooncake id names 512 tokens, 32 blocks of 16), so
  those are held to the same bound (``check_chain_blocks``), over the requests that fit
  max_model_len (the others are rejected unhashed).
"""

from __future__ import annotations

import math

import numpy as np

from llmsim.errors import UserError

MAX_TOKENS_PER_REQUEST = 10_000_000
MAX_REQUESTS = 10_000_000
# a rate profile whose small scale puts arrivals past this (~32 years) is a typo (1e-300), not traffic
MAX_ARRIVAL_S = 1e9
# an arrival time at all: past 1e11 s a float64 second keeps ~15 us of resolution, a step's order
# (Unix times, ~1.7e9 s, resolve ~0.2 us and are accepted)
MAX_ABS_ARRIVAL_S = 1e11
MAX_PREFIX_BLOCKS = 50_000_000
# a trace file: MAX_REQUESTS rows of ~400 bytes (a Mooncake JSONL row with its hash ids; a CSV row
# is ~30), refused before pandas or json reads it into memory
MAX_TRACE_BYTES = 4 * 2**30


def check_prefix_blocks(prompt_tokens: np.ndarray, block_tokens: int, origin: str) -> None:
    """Refuse a workload whose made-up content ids (one per started block of every prompt) pass
    MAX_PREFIX_BLOCKS, before any is made."""
    blocks = int((-(-prompt_tokens.astype(np.int64) // block_tokens)).sum())
    if blocks > MAX_PREFIX_BLOCKS:
        raise UserError(
            f"{origin}: the prompts need {blocks:,} content ids for prefix caching, over the limit of "
            f"{MAX_PREFIX_BLOCKS:,} per run (one per {block_tokens}-token block of every prompt, ~56 bytes "
            "each); simulate fewer or shorter prompts, or larger hash blocks"
        )


def check_chain_blocks(
    hash_ids: list[list[int]],
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    id_tokens: int,
    block_tokens: int,
    longest: float,
    origin: str,
) -> None:
    """Refuse a workload whose content ids (one per ``id_tokens`` tokens) chain into more than
    MAX_PREFIX_BLOCKS hashes of ``block_tokens``-token KV blocks, counted over the requests of at
    most ``longest`` tokens (prompt + output: the ones a run hashes, ``build.longest_hashed``),
    before any is made."""
    covered = np.fromiter((len(ids) for ids in hash_ids), dtype=np.int64, count=len(hash_ids)) * id_tokens
    fits = (prompt_tokens.astype(np.int64) + output_tokens) <= longest
    blocks = int((np.minimum(prompt_tokens, covered) // block_tokens)[fits].sum())
    if blocks > MAX_PREFIX_BLOCKS:
        raise UserError(
            f"{origin}: the trace's content ids name {blocks:,} KV blocks of {block_tokens} tokens for prefix "
            f"caching, over the limit of {MAX_PREFIX_BLOCKS:,} per run (one hash each); replay fewer requests "
            "(trace.max_requests, trace.duration_s) or larger kv_cache.block_tokens"
        )


def as_float(n: float) -> float:
    """``n`` as a float, inf for an integer past the float range (``math.isfinite`` of a 400-digit
    int raises OverflowError)."""
    try:
        return float(n)
    except OverflowError:
        return math.inf if n > 0 else -math.inf


def check_requests(n: float, key: str, origin: str) -> None:
    """Refuse a request count over MAX_REQUESTS (``n`` may be a float product such as rate x duration)."""
    n = as_float(n)
    if not math.isfinite(n) or n > MAX_REQUESTS:
        raise UserError(
            f"{origin}: {key}: {_count(n)} requests is over the limit of {MAX_REQUESTS:,} per run "
            "(about 1.6 KB of memory each); simulate a shorter window or split the run"
        )


def check_tokens(value: float, key: str, origin: str) -> None:
    """Refuse a token count (a length spec's value, median, bound, a system prompt) over the bound."""
    value = as_float(value)
    if not math.isfinite(value) or value > MAX_TOKENS_PER_REQUEST:
        raise UserError(
            f"{origin}: {key}: {_count(value)} tokens is over the limit of {MAX_TOKENS_PER_REQUEST:,} tokens per request"
        )


def _count(n: float) -> str:
    """A count for a message: grouped digits when it is a sane number, else its float form."""
    return f"{int(n):,}" if math.isfinite(n) and abs(n) < 1e15 else f"{n:.3g}"
