"""Memory and time of building the requests frame (results.requests_frame) from finished requests.

    python benchmarks/bench_requests_frame.py [N] [--old FILE]

Builds N finished ``Request`` objects (default 1,000,000), then the frame, and prints the peak
memory the frame's construction allocated (tracemalloc: Python and NumPy allocations, the same
figure on every run of the same code) and its wall time (a second build, untraced). ``--old FILE`` times a requests_frame
from another copy of llmsim/results.py beside it (``git show REV:llmsim/results.py > FILE``), on
the same requests, for a before/after table.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import tracemalloc

from llmsim.request import Request
from llmsim.results import requests_frame


def finished(n: int) -> list[Request]:
    out = []
    for i in range(n):
        r = Request(i, i * 0.01, 1000 + i % 500, 100 + i % 50, "chat")
        r.status, r.replica, r.queued_s = "finished", i % 8, r.arrival_s + 0.002
        r.first_token_s, r.generated = r.arrival_s + 0.05, r.output_tokens
        r.last_token_s = r.finish_s = r.first_token_s + 0.01 * r.output_tokens
        r.max_tbt_s = 0.02
        out.append(r)
    return out


def measure(build, reqs: list[Request]) -> tuple[float, float]:
    """Peak MiB allocated while building (tracemalloc, which slows allocation: so the wall time is
    taken on a second build without it)."""
    tracemalloc.start()
    frame = build(reqs, 0.001)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(frame) == len(reqs)
    del frame
    t0 = time.perf_counter()
    build(reqs, 0.001)
    return peak / 2**20, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=1_000_000)
    ap.add_argument("--old", help="another results.py to compare with")
    args = ap.parse_args()
    reqs = finished(args.n)
    rows = [("this code", *measure(requests_frame, reqs))]
    if args.old:
        spec = importlib.util.spec_from_file_location("old_results", args.old)
        old = importlib.util.module_from_spec(spec)
        sys.modules["old_results"] = old  # (its dataclasses look their module up)
        spec.loader.exec_module(old)
        rows.append(("--old", *measure(old.requests_frame, reqs)))
    print(f"{'requests_frame':<16}{'requests':>12}{'peak MiB':>11}{'wall s':>9}")
    for name, peak, wall in rows:
        print(f"{name:<16}{args.n:>12,}{peak:>11,.0f}{wall:>9.2f}")


if __name__ == "__main__":
    main()
