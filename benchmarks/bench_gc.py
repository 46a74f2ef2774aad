"""What CPython's cyclic garbage collector costs a run, at its default thresholds and at the run's.

    python benchmarks/bench_gc.py               # cases a, b-chunked, c100k
    python benchmarks/bench_gc.py a c1m         # some cases (bench_sim.py's)
    python benchmarks/bench_gc.py --exact-steps a

``llmsim.run`` freezes the objects that exist before it and raises the collector's thresholds
for its duration (``llmsim/api.py``, ``_run_gc``). Each case runs twice, each time in a fresh
process: ``default`` with that switched off (CPython's 700/10/10, nothing frozen) and ``run`` as
shipped. Printed per case: the run's wall time, the collections of each generation and the
seconds spent in them (``gc.callbacks``), and the process's peak RSS (what collecting less often
could hold back). Quote ratios: the machine is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_sim  # noqa: E402  (the cases, one source)


def _measure(spec: dict, shipped: bool, exact: bool, queue: mp.Queue) -> None:
    import llmsim
    import llmsim.api
    from llmsim.scenario import scenario_from_dict

    if not shipped:
        llmsim.api._run_gc = contextlib.nullcontext  # CPython's defaults, nothing frozen
    sc = scenario_from_dict(spec, f"bench case {spec['name']}", bench_sim.ROOT)
    spent: dict[int, list[float]] = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            entry = spent[info["generation"]]
            entry[0] += 1
            entry[1] += time.perf_counter() - started[0]

    gc.callbacks.append(on_gc)
    t0 = time.perf_counter()
    res = llmsim.run(sc, exact_steps=exact)
    wall = time.perf_counter() - t0
    gc.callbacks.remove(on_gc)
    del res
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    queue.put({"wall_s": wall, "spent": spent, "peak_mib": peak_mib})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", default=["a", "b-chunked", "c100k"])
    ap.add_argument("--exact-steps", action="store_true")
    args = ap.parse_args(argv)
    specs = bench_sim.cases()
    ctx = mp.get_context("spawn")  # a fresh interpreter: nothing collected or frozen before
    print(
        f"{'case':<16} {'collector':<9} {'wall s':>7} {'gc s':>6} {'gc share':>8}  {'gen0 / gen1 / gen2 (s)':<34} {'peak RSS MiB':>12}"
    )
    print("-" * 100)
    for name in args.cases:
        for shipped in (False, True):
            queue = ctx.Queue()
            p = ctx.Process(target=_measure, args=(specs[name], shipped, args.exact_steps, queue))
            p.start()
            r = queue.get()
            p.join()
            sp = r["spent"]
            gc_s = sum(v[1] for v in sp.values())
            gens = " / ".join(f"{int(sp[g][0])} ({sp[g][1]:.3f})" for g in (0, 1, 2))
            label = "run" if shipped else "default"
            print(
                f"{name:<16} {label:<9} {r['wall_s']:>7.2f} {gc_s:>6.3f} {gc_s / r['wall_s']:>8.1%}  {gens:<34} {r['peak_mib']:>12,.0f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
