"""Simulator speed and memory: wall time, simulated requests/steps per wall second, peak RSS.

    python benchmarks/bench_sim.py            # all cases
    python benchmarks/bench_sim.py a c100k    # some cases
    python benchmarks/bench_sim.py --exact-steps a   # one event per step (no closed-form jumps)
    LLMSIM_PURE_PYTHON=1 python benchmarks/bench_sim.py a   # the pure-Python modules (not compiled)

Each case runs in a fresh process so its peak RSS is its own. The table is what
docs/performance.md records; quote ratios, not absolute seconds, across machines.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AZURE_CONV = str(ROOT / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv")


def _poisson(rate: float, n: int, prompt: dict, output: dict) -> dict:
    return {"kind": "poisson", "rate_rps": rate, "num_requests": n, "prompt_tokens": prompt, "output_tokens": output}


def _empirical(column: str) -> dict:
    return {"dist": "empirical", "trace": AZURE_CONV, "format": "azure"}


def cases() -> dict[str, dict]:
    quiet = {"dir": "/tmp/llmsim-bench", "steps": "none"}
    synthetic_len = (
        {"dist": "lognormal", "median": 1020, "sigma": 0.8, "min": 16, "max": 8192},
        {"dist": "lognormal", "median": 129, "sigma": 0.9, "min": 1, "max": 1000},
    )
    out = {
        # (a) the peer's published case: Llama-2-70B TP2 on one A100, chunked 512, <=128 seqs,
        #     Poisson 1 req/s, Azure-conversation lengths
        "a": {
            "name": "a",
            "seed": 1,
            "model": "llama-2-70b",
            "hardware": "A100-SXM-80GB",
            "cluster": {"replicas": 1, "tp": 2},
            "policy": {"kind": "chunked", "chunk_tokens": 512, "max_num_seqs": 128},
            "workload": _poisson(1.0, 10_000, _empirical("prompt"), _empirical("output")),
            "output": quiet,
        },
    }
    for policy in ("traditional", "chunked", "disaggregated", "trtllm"):
        sc = {
            "name": f"b-{policy}",
            "seed": 1,
            "model": "llama-3.1-8b",
            "hardware": "H100-SXM",
            "cluster": {"replicas": 4, "router": "least_outstanding"},
            "policy": {"kind": policy, "chunk_tokens": 512},
            "workload": {"kind": "trace", "trace": {"path": AZURE_CONV, "format": "azure"}},
            "output": quiet,
        }
        if policy == "disaggregated":
            sc["cluster"] = {
                "prefill_pool": {"replicas": 2},
                "decode_pool": {"replicas": 2},
                "kv_link": {"kind": "nvlink"},
            }
        out[f"b-{policy}"] = sc
    for n, label in ((100_000, "c100k"), (1_000_000, "c1m")):
        out[label] = {
            "name": label,
            "seed": 1,
            "model": "llama-3.1-8b",
            "hardware": "H100-SXM",
            "cluster": {"replicas": 8, "router": "least_outstanding"},
            "policy": {"kind": "chunked", "chunk_tokens": 1024},
            "workload": _poisson(40.0, n, *synthetic_len),
            "output": quiet,
        }
    out["d"] = {
        "name": "d",
        "seed": 1,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "cluster": {"replicas": 64, "router": "least_outstanding"},
        "policy": {"kind": "chunked", "chunk_tokens": 1024},
        "workload": _poisson(300.0, 100_000, *synthetic_len),
        "output": quiet,
    }
    # (e) long prompts (median 8,000 tokens) chunked 512 at a time on one replica: most steps carry
    #     one prompt's chunk beside the decodes (chunk runs), within capacity and past it
    long_len = (
        {"dist": "lognormal", "median": 8000, "sigma": 0.5, "min": 1000, "max": 30000},
        {"dist": "lognormal", "median": 200, "sigma": 0.8, "min": 1, "max": 1000},
    )
    for label, rate in (("e", 2.0), ("e-overload", 3.0)):
        out[label] = {
            "name": label,
            "seed": 1,
            "model": "llama-3.1-8b",
            "hardware": "H100-SXM",
            "cluster": {"replicas": 1},
            "policy": {"kind": "chunked", "chunk_tokens": 512},
            "workload": _poisson(rate, 20_000, *long_len),
            "output": quiet,
        }
    return out


def _run_case(spec: dict, exact: bool, queue: mp.Queue) -> None:
    import llmsim
    from llmsim.scenario import scenario_from_dict

    sc = scenario_from_dict(spec, f"bench case {spec['name']}", ROOT)
    run = llmsim.run  # imported here, not timed (the simulation, not the start-up: bench_startup.py times that)
    t0 = time.perf_counter()
    kwargs = {"exact_steps": True} if exact else {}
    res = run(sc, **kwargs)
    wall = time.perf_counter() - t0
    s = res.summary
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(
        {
            "case": spec["name"],
            "requests": s["requests"]["total"],
            "steps": s.get("steps_total", len(res.steps)),
            "wall_s": wall,
            "sim_s": s.get("duration", s.get("throughput", {}).get("makespan_s")),  # older code: throughput.makespan_s
            "rss_mb": rss_mb,
            "verdict": s["saturation"]["verdict"],
            "mode": llmsim.native.mode,
        }
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    ap.add_argument("--exact-steps", action="store_true", help="one event per step (no decode-run jumps)")
    args = ap.parse_args(argv)
    specs = cases()
    names = args.cases or list(specs)
    ctx = mp.get_context("spawn")
    rows = []
    for name in names:
        if name not in specs:
            print(f"unknown case {name!r}; known: {', '.join(specs)}", file=sys.stderr)
            return 2
        q = ctx.Queue()
        p = ctx.Process(target=_run_case, args=(specs[name], args.exact_steps, q))
        p.start()
        p.join()
        if p.exitcode != 0:
            print(f"case {name} failed (exit {p.exitcode})", file=sys.stderr)
            continue
        rows.append(q.get())
    for mode in sorted({r["mode"] for r in rows}):  # compiled or pure Python (llmsim/native.py)
        print(f"simulator modules: {mode}")
    hdr = f"{'case':<16}{'requests':>10}{'steps':>11}{'wall s':>9}{'req/wall s':>12}{'steps/wall s':>14}"
    hdr += f"{'sim/wall':>11}{'peak RSS MB':>13}  verdict"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(
            f"{r['case']:<16}{r['requests']:>10,}{r['steps']:>11,}{r['wall_s']:>9.2f}"
            f"{r['requests'] / r['wall_s']:>12,.0f}{r['steps'] / r['wall_s']:>14,.0f}"
            f"{r['sim_s'] / r['wall_s']:>11,.0f}{r['rss_mb']:>13,.0f}  {r['verdict']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
