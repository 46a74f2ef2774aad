"""Queue order within a replica: where a new arrival goes in the waiting queue.

* ``fcfs``: arrival order.
* ``shortest_prompt_first``: shorter prompts jump ahead of longer ones (lower mean TTFT).
* ``length_bucketed``: prompts grouped by power-of-two length bucket, so a step batches
  requests of similar length (less padding / more even chunks); FCFS within a bucket.

Starvation protection: a waiting request can be overtaken at most ``max_bypass`` times; after
that nothing may be inserted ahead of it. Counting overtakes instead of seconds keeps the order a
pure function of the arrival sequence (no clock).
"""

from __future__ import annotations

from collections import deque

from llmsim.request import Request

ORDERS = ("fcfs", "shortest_prompt_first", "length_bucketed")


def order_key(req: Request, order: str) -> int:
    if order == "shortest_prompt_first":
        return req.prompt_tokens
    if order == "length_bucketed":
        return max(req.prompt_tokens - 1, 1).bit_length()  # bucket = ceil(log2(tokens))
    return 0


def enqueue(waiting: deque[Request], req: Request, order: str, bypassed: dict[int, int], max_bypass: int) -> None:
    """Insert ``req`` into ``waiting`` by ``order``; ``bypassed`` counts overtakes per request id."""
    if order == "fcfs" or not waiting:
        waiting.append(req)
        return
    key = order_key(req, order)
    pos = len(waiting)
    # walk back from the tail past longer (or later-bucket) requests that may still be overtaken
    while pos > 0:
        other = waiting[pos - 1]
        if other.swapped or other.preemptions or other.kv_tokens or order_key(other, order) <= key:
            break
        if bypassed.get(other.id, 0) >= max_bypass:
            break
        pos -= 1
    for i in range(pos, len(waiting)):
        oid = waiting[i].id
        bypassed[oid] = bypassed.get(oid, 0) + 1
    waiting.insert(pos, req)
