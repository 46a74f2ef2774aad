"""Memory over a loop of runs in one process (`llmsim sweep --workers 1`, `llmsim bench --after`,
a notebook, a plan).

    python benchmarks/bench_run_loop.py      # peak RSS along two loops: 4 large runs, 400 tiny ones

A run's state (its requests, their block lists, its pools) is held by reference cycles through
the event loop's closures until the collector runs; ``llmsim.run`` freezes what exists when it
starts (llmsim/api.py, ``_run_gc``), so a run that followed another used to freeze the one
before's state for good. The outermost run now collects as it returns, before it unfreezes.
Printed: the process's peak RSS along each loop, as shipped and with that collection switched off
(each loop in a fresh process).
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import sys
import types


def _scenario(requests: int, rate_rps: float) -> dict:
    return {
        "name": "loop",
        "model": "qwen3-8b",
        "hardware": "H100-SXM",
        "policy": {"kind": "vllm"},
        "workload": {
            "kind": "poisson",
            "rate_rps": rate_rps,
            "num_requests": requests,
            "arrivals": "vllm_bench",
            "prompts": "vllm_bench",
            "prompt_tokens": {"dist": "fixed", "value": 1024},
            "output_tokens": {"dist": "fixed", "value": 16},
        },
        "output": {"steps": "none"},
    }


# (name, requests a run, runs, RSS read after every this many runs)
LOOPS = (("30,000-request runs", 30_000, 4, 1), ("5-request runs (sweep points)", 5, 400, 100))


def _loop(collect: bool, requests: int, runs: int, every: int, queue: mp.Queue) -> None:
    import gc

    import llmsim
    import llmsim.api

    if not collect:  # (as before 2026-12-07: no collection as a run returns)
        llmsim.api.gc = types.SimpleNamespace(**{k: getattr(gc, k) for k in dir(gc) if not k.startswith("_")})
        llmsim.api.gc.collect = lambda *a: 0
    peaks = []
    for k in range(runs):
        llmsim.run(_scenario(requests, 1.0 + k))
        if (k + 1) % every == 0:
            peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    queue.put(peaks)


def main() -> int:
    ctx = mp.get_context("spawn")
    for title, requests, runs, every in LOOPS:
        rows = {}
        for name, collect in (("shipped", True), ("no collection", False)):
            queue: mp.Queue = ctx.Queue()
            proc = ctx.Process(target=_loop, args=(collect, requests, runs, every, queue))
            proc.start()
            rows[name] = queue.get()
            proc.join()
        marks = [every * (k + 1) for k in range(runs // every)]
        print(f"{title}: peak RSS (MB) after run")
        print(f"{'':>14}  " + "  ".join(f"{m:>8}" for m in marks))
        for name, peaks in rows.items():
            print(f"{name:>14}  " + "  ".join(f"{p:>8.0f}" for p in peaks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
