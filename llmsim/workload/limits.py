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
"""

from __future__ import annotations

import math

from llmsim.errors import UserError

MAX_TOKENS_PER_REQUEST = 10_000_000
MAX_REQUESTS = 10_000_000


def check_requests(n: float, key: str, origin: str) -> None:
    """Refuse a request count over MAX_REQUESTS (``n`` may be a float product such as rate x duration)."""
    if not math.isfinite(n) or n > MAX_REQUESTS:
        raise UserError(
            f"{origin}: {key}: {_count(n)} requests is over the limit of {MAX_REQUESTS:,} per run "
            "(about 1.6 KB of memory each); simulate a shorter window or split the run"
        )


def check_tokens(value: float, key: str, origin: str) -> None:
    """Refuse a token count (a length spec's value, median, bound, a system prompt) over the bound."""
    if not math.isfinite(value) or value > MAX_TOKENS_PER_REQUEST:
        raise UserError(
            f"{origin}: {key}: {_count(value)} tokens is over the limit of {MAX_TOKENS_PER_REQUEST:,} tokens per request"
        )


def _count(n: float) -> str:
    """A count for a message: grouped digits when it is a sane number, else its float form."""
    return f"{int(n):,}" if math.isfinite(n) and abs(n) < 1e15 else f"{n:.3g}"
