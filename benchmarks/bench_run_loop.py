"""Memory over a loop of runs in one process (`llmsim bench --after`, a notebook, a plan).

    python benchmarks/bench_run_loop.py             # four runs of 30,000 requests, peak RSS after each

A run's state (its requests, their block lists) is held by reference cycles through the event
loop's closures until the collector runs; ``llmsim.run`` freezes what exists when it starts
(llmsim/api.py, ``_run_gc``), so a run that followed another used to freeze the one before's
state for good. After a run of ``api._COLLECT_AFTER_REQUESTS`` requests or more the outermost run
collects as it returns. Printed: the process's peak RSS after each run, as shipped and with that
collection switched off (each in a fresh process).
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import sys

SCENARIO = {
    "name": "loop",
    "model": "qwen3-8b",
    "hardware": "H100-SXM",
    "policy": {"kind": "vllm"},
    "workload": {
        "kind": "poisson",
        "rate_rps": 30,
        "num_requests": 30_000,
        "arrivals": "vllm_bench",
        "prompts": "vllm_bench",
        "prompt_tokens": {"dist": "fixed", "value": 1024},
        "output_tokens": {"dist": "fixed", "value": 16},
    },
    "output": {"steps": "none"},
}
RUNS = 4


def _loop(collect: bool, queue: mp.Queue) -> None:
    import llmsim
    import llmsim.api

    if not collect:
        llmsim.api._COLLECT_AFTER_REQUESTS = 1 << 62  # (as before 2026-12-06)
    peaks = []
    for _ in range(RUNS):
        llmsim.run(SCENARIO)
        peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    queue.put(peaks)


def main() -> int:
    ctx = mp.get_context("spawn")
    rows = {}
    for name, collect in (("shipped", True), ("no collection", False)):
        queue: mp.Queue = ctx.Queue()
        proc = ctx.Process(target=_loop, args=(collect, queue))
        proc.start()
        rows[name] = queue.get()
        proc.join()
    print(f"{'':>14}  " + "  ".join(f"after run {k + 1:>2}" for k in range(RUNS)) + "   (peak RSS, MB)")
    for name, peaks in rows.items():
        print(f"{name:>14}  " + "  ".join(f"{p:>12.0f}" for p in peaks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
