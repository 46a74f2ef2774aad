"""sha256 of the requests.csv and steps.csv every case writes: proof that a change left the output alone.

    python benchmarks/output_hashes.py                          # every case, print the table
    python benchmarks/output_hashes.py --cases a swap           # some cases (all their variants)
    python benchmarks/output_hashes.py --cases a+exact          # one variant
    python benchmarks/output_hashes.py --list                   # the cases and what each covers
    python benchmarks/output_hashes.py --write hashes.json      # save {case: {requests, steps}}
    python benchmarks/output_hashes.py --check benchmarks/output_hashes_vllm.json  # exit 1 on a mismatch (default engine)
    python benchmarks/output_hashes.py --engine ideal --check benchmarks/output_hashes_ideal.json  # engine ideal
    LLMSIM_PURE_PYTHON=1 python benchmarks/output_hashes.py --check ...   # the pure-Python modules

The cases are bench_sim.py's (all but c1m) with steps.csv written in full, plus small coverage
cases for the mechanisms the benchmarks miss (pipeline stages, static batching, speculation,
prefix caching, preemption, parallel sampling, dynamic chunks, a chunked prefill pool, kv_aware
routing, sliding windows, load shedding). A case runs as is and, named ``CASE+exact``, with
``exact_steps`` (one event per step): the two agree to float rounding, not byte for byte, so each
has its own hashes. Every case runs in a fresh process, writes its results the way ``llmsim run``
does (``Results.write``) into a temporary folder, and hashes the two files a user gets; the
"evidence" column shows the summary numbers that prove a coverage case exercises its mechanism
(a case whose mechanism did not engage is marked ``NOT EXERCISED`` and fails the run).

The table says which modules ran (llmsim/native.py): "compiled", or "pure" when
``LLMSIM_PURE_PYTHON=1`` is set or a compiled module's source changed since ``make build``
(then a warning says so and the compiled code is not what was checked). Run it both ways.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench_sim import ROOT, cases

if TYPE_CHECKING:
    from llmsim.results import Results

BENCH_CASES = ("a", "b-traditional", "b-chunked", "b-disaggregated", "c100k", "d")  # c1m: too big with steps
MOONCAKE = str(ROOT / "data" / "traces" / "conversation_trace.jsonl")
HASHED = ("requests", "steps")  # requests.csv, steps.csv
EXACT = "+exact"  # suffix of a case run with exact_steps
ENGINE_ENV = "LLMSIM_HASH_ENGINE"  # --engine, for the spawned runs
# prompts and outputs of the synthetic coverage cases (Azure-conversation-like)
LENGTHS = {
    "prompt_tokens": {"dist": "lognormal", "median": 1020, "sigma": 0.8, "min": 16, "max": 8192},
    "output_tokens": {"dist": "lognormal", "median": 129, "sigma": 0.9, "min": 1, "max": 1000},
}


def _case(name: str, workload: dict, **sections: object) -> dict:
    """A coverage case: Llama-3.1-8B on H100s, chunked, unless ``sections`` say otherwise."""
    spec: dict = {
        "name": name,
        "seed": 1,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "cluster": {"replicas": 2, "router": "least_outstanding"},
        "policy": {"kind": "chunked", "chunk_tokens": 512, "max_num_seqs": 128},
    }
    spec.update(sections)
    spec["workload"] = workload
    return spec


def _poisson(rate: float, n: int, **extra: object) -> dict:
    return {"kind": "poisson", "rate_rps": rate, "num_requests": n, **LENGTHS, **extra}


def coverage_cases() -> dict[str, dict]:
    """Small cases (seconds each) for the mechanisms the benchmark cases leave out."""
    long_prompts = {"dist": "uniform", "min": 2000, "max": 7000}  # contexts cross a 4096-token window
    specs = [
        _case("pp2", _poisson(6.0, 1000), cluster={"replicas": 1, "tp": 2, "pp": 2}, model="llama-3.1-70b"),
        _case("static", _poisson(4.0, 1000), policy={"kind": "static", "max_num_seqs": 32}),
        _case(
            "spec-draft",
            _poisson(2.0, 500),
            model="llama-3.1-70b",
            cluster={"replicas": 1, "tp": 4},
            speculative={"method": "draft", "draft_model": "llama-3.1-8b", "k": 4, "acceptance": 0.7},
        ),
        _case(
            "spec-mtp",
            _poisson(8.0, 1000),
            cluster={"replicas": 1},
            policy={"kind": "traditional", "max_num_seqs": 128},
            speculative={"method": "mtp", "k": 2, "acceptance": [0.9, 0.6]},
        ),
        _case(
            "prefix-sysprompt",
            _poisson(10.0, 1500, system_prompts={"count": 4, "tokens": 1024, "share": 0.9, "zipf": 1.0}),
            kv_cache={"prefix_caching": True},
        ),
        _case(
            "prefix-mooncake",
            {"kind": "trace", "trace": {"path": MOONCAKE, "format": "mooncake", "max_requests": 400}},
            cluster={"replicas": 4, "router": "prefix_affinity"},
            policy={"kind": "chunked", "chunk_tokens": 2048, "max_num_seqs": 128},
            kv_cache={"dtype": "fp8", "prefix_caching": True},
        ),
        _case(
            "swap",
            _poisson(20.0, 600, output_tokens={"dist": "uniform", "min": 200, "max": 800}),
            hardware="A100-SXM-80GB",
            cluster={"replicas": 1},
            kv_cache={"memory_fraction": 0.23, "preemption": "swap"},
        ),
        _case(
            "recompute",
            _poisson(20.0, 600, output_tokens={"dist": "uniform", "min": 200, "max": 800}),
            hardware="A100-SXM-80GB",
            cluster={"replicas": 1},
            policy={"kind": "traditional", "max_num_seqs": 128},
            kv_cache={"memory_fraction": 0.23, "preemption": "recompute"},
        ),
        _case("n-seqs", _poisson(4.0, 800, parallel_samples=4)),
        _case(
            "chunked-dynamic",
            _poisson(12.0, 1500),
            policy={"kind": "chunked", "chunk_tokens": 2048, "chunk_budget": "dynamic", "tbt_target_s": 0.02},
        ),
        _case(
            "disagg-chunked",
            _poisson(12.0, 1500),
            cluster={
                "prefill_pool": {"replicas": 1},
                "decode_pool": {"replicas": 2},
                "kv_link": {"kind": "rdma", "layerwise_overlap": True},
                "decode_router": "kv_aware",
            },
            policy={"kind": "disaggregated", "prefill_pool_policy": "chunked", "chunk_tokens": 512},
        ),
        _case("kv-aware", _poisson(16.0, 2000), cluster={"replicas": 3, "router": "kv_aware", "cuda_graphs": True}),
        _case(
            "window-mistral",
            _poisson(2.0, 500, prompt_tokens=long_prompts),
            model="mistral-7b",
            hardware="A100-SXM-80GB",
            cluster={"replicas": 1},
        ),
        _case(
            "window-gemma2",
            _poisson(1.5, 400, prompt_tokens=long_prompts),
            model="gemma-2-9b",
            cluster={"replicas": 1},
            policy={"kind": "traditional", "max_num_seqs": 64},
        ),
        _case(
            "shed",
            _poisson(60.0, 1500),
            cluster={"replicas": 1},
            policy={"kind": "traditional", "max_num_seqs": 64, "queue_order": "shortest_prompt_first", "max_queue": 32},
        ),
    ]
    return {s["name"]: s for s in specs}


def all_cases() -> dict[str, dict]:
    """Every case's scenario dict, with steps.csv written in full."""
    bench = cases()
    specs = {name: bench[name] for name in BENCH_CASES} | coverage_cases()
    engine = os.environ.get(ENGINE_ENV)
    for spec in specs.values():
        spec["output"] = {"steps": "all"}  # Results.write gets the folder; output.dir is unused
        if engine:
            spec["engine"] = engine
    return specs


def runs() -> dict[str, tuple[str, bool]]:
    """Run name -> (case, exact_steps): the fast path for every case, exact steps for most."""
    out: dict[str, tuple[str, bool]] = {}
    for name in all_cases():
        out[name] = (name, False)
        if name in ("a", "b-chunked") or name not in BENCH_CASES:
            out[name + EXACT] = (name, True)
    return out


# --- evidence that a coverage case exercises its mechanism: (ok, what the run shows) ---------

Evidence = Callable[["Results", dict], tuple[bool, str]]


def _pipeline(res: Results, spec: dict) -> tuple[bool, str]:
    p = res.summary.get("pipeline", {})
    return p.get("stages") == 2, f"pipeline stages={p.get('stages')} bubble_s={p.get('bubble_s', 0):.1f}"


def _static(res: Results, spec: dict) -> tuple[bool, str]:
    steps = res.steps
    mixed = int(((steps["prefill_tokens"] > 0) & (steps["decode_tokens"] > 0)).sum())
    prefill = int((steps["prefill_tokens"] > 0).sum())
    return mixed == 0 and prefill > 0, f"prefill steps={prefill}, steps mixing prefill and decode={mixed}"


def _speculative(res: Results, spec: dict) -> tuple[bool, str]:
    sp, proposed = res.summary.get("speculative", {}), int(res.steps["spec_tokens"].sum())
    tps = sp.get("tokens_per_step", 0.0)
    return (
        tps > 1.0 and proposed > 0,
        f"tokens/step={tps:.2f} spec_tokens={proposed} draft_s={sp.get('draft_s', 0):.1f}",
    )


def _prefix(res: Results, spec: dict) -> tuple[bool, str]:
    pc = res.summary.get("prefix_cache", {})
    saved = pc.get("saved_prefill_tokens", 0)
    return saved > 0, f"prefix hits: saved tokens={saved} hit rate={pc.get('hit_rate', 0):.2f}"


def _preempted(res: Results, spec: dict) -> tuple[bool, str]:
    s = res.summary
    n, swap_s = s["requests"]["preemptions"], s["preemption"]["swap_s"]
    ok = n > 0 and (swap_s > 0) == (s["preemption"]["mode"] == "swap")
    return ok, f"preemptions={n} swap_s={swap_s:.2f}"


def _n_seqs(res: Results, spec: dict) -> tuple[bool, str]:
    # steps.csv counts requests, not sequences: the n sequences show in the KV blocks they hold
    import llmsim
    from llmsim.scenario import scenario_from_dict

    one = dict(spec, workload=dict(spec["workload"], parallel_samples=1))
    single = llmsim.run(scenario_from_dict(one, "parallel_samples=1", ROOT)).steps["kv_blocks_used"].mean()
    ratio = res.steps["kv_blocks_used"].mean() / single
    return ratio > 1.2, f"mean KV blocks x{ratio:.2f} of the same run with parallel_samples=1"


def _dynamic(res: Results, spec: dict) -> tuple[bool, str]:
    # a fixed budget fills steps with prompt tokens up to chunk_tokens; dynamic keeps them shorter
    budget, steps = spec["policy"]["chunk_tokens"], res.steps
    most = int((steps["prefill_tokens"] + steps["decode_tokens"]).max())
    longer = int((res.requests["prompt_tokens"] > budget).sum())
    ok = most < budget and longer > 0
    return ok, f"largest step {most} tokens of the {budget} budget (prompts > {budget}: {longer})"


def _disagg_chunked(res: Results, spec: dict) -> tuple[bool, str]:
    budget, steps, req = spec["policy"]["chunk_tokens"], res.steps, res.requests
    longest = int(steps.loc[steps["pool"] == "prefill", "prefill_tokens"].max())
    split = int((req["prompt_tokens"] > budget).sum())
    kv = res.summary.get("kv_transfer", {}).get("transfers", 0)
    ok = longest <= budget and split > 0 and kv > 0
    return ok, f"largest prefill-pool step={longest} tokens (prompts > {budget}: {split}) kv transfers={kv}"


def _kv_aware(res: Results, spec: dict) -> tuple[bool, str]:
    rep = res.requests["replica"]
    per = rep.value_counts().sort_index().tolist()
    off = int((rep != res.requests["id"] % len(per)).sum())  # not round robin
    return len(per) == 3 and off > 0, f"requests per replica={per}, {off} off the round-robin order"


def _window(res: Results, spec: dict) -> tuple[bool, str]:
    req = res.requests
    over = int((req["prompt_tokens"] + req["generated_tokens"] > 4096).sum())
    return over > 0, f"requests past the 4096-token window={over}"


def _shed(res: Results, spec: dict) -> tuple[bool, str]:
    rej = res.summary["requests"]["rejected"]
    return rej > 0, f"rejected by max_queue={rej}"


EVIDENCE: dict[str, Evidence] = {
    "pp2": _pipeline,
    "static": _static,
    "spec-draft": _speculative,
    "spec-mtp": _speculative,
    "prefix-sysprompt": _prefix,
    "prefix-mooncake": _prefix,
    "swap": _preempted,
    "recompute": _preempted,
    "n-seqs": _n_seqs,
    "chunked-dynamic": _dynamic,
    "disagg-chunked": _disagg_chunked,
    "kv-aware": _kv_aware,
    "window-mistral": _window,
    "window-gemma2": _window,
    "shed": _shed,
}


# --- running ------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _run_case(run: str, queue: mp.Queue) -> None:
    """Child process: simulate one run, write its results as ``llmsim run`` does, hash the files."""
    import llmsim
    from llmsim.scenario import scenario_from_dict

    case, exact = runs()[run]
    spec = all_cases()[case]
    t0 = time.perf_counter()
    res = llmsim.run(scenario_from_dict(spec, f"hash case {case}", ROOT), exact_steps=exact)
    with tempfile.TemporaryDirectory(prefix="llmsim-hashes-") as tmp:
        res.write(Path(tmp), "csv")  # the CSV bytes are what the baselines hash
        hashes = {kind: sha256(Path(tmp) / f"{kind}.csv") for kind in HASHED}
    wall_s = time.perf_counter() - t0  # simulating, writing, hashing (not the evidence)
    ok, evidence = True, ""
    if case in EVIDENCE:
        ok, evidence = EVIDENCE[case](res, spec)
    queue.put(
        {
            "run": run,
            "case": case,
            "exact": exact,
            "mode": llmsim.native.mode,
            "wall_s": wall_s,
            "verdict": res.summary["saturation"]["verdict"],
            "rows": (len(res.requests), len(res.steps)),
            "exercised": ok,
            "evidence": evidence,
            **hashes,
        }
    )


def run_all(names: list[str]) -> list[dict]:
    """Each run in a fresh process, one at a time; a failed run is reported and left out."""
    ctx = mp.get_context("spawn")
    rows = []
    for name in names:
        q = ctx.Queue()
        p = ctx.Process(target=_run_case, args=(name, q))
        p.start()
        p.join()  # the child's one small message fits the pipe: joining first cannot deadlock
        if p.exitcode != 0:
            print(f"run {name} failed (exit {p.exitcode})", file=sys.stderr)
            continue
        rows.append(q.get(timeout=60))
    return rows


def select(wanted: list[str]) -> list[str]:
    """Run names for ``--cases``: a case name selects its variants, ``CASE+exact`` just that one."""
    known = runs()
    if not wanted:
        return list(known)
    out = []
    for w in wanted:
        hit = [r for r, (case, _) in known.items() if w in (r, case)]
        if not hit:
            raise SystemExit(f"unknown case {w!r}; known: {', '.join(known)}")
        out += [r for r in hit if r not in out]
    return out


def _short_mode(mode: str) -> str:
    return "compiled" if mode == "compiled" else "pure"


def print_table(rows: list[dict]) -> None:
    for mode in sorted({r["mode"] for r in rows}):
        print(f"simulator modules: {mode}")
    hdr = f"{'case':<18}{'mode':<10}{'exact':<7}{'requests sha256[:16]':<22}{'steps sha256[:16]':<22}"
    hdr += f"{'steps':>10}{'wall s':>8}  {'verdict':<11} evidence"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        flag = "" if r["exercised"] else "NOT EXERCISED: "
        print(
            f"{r['case']:<18}{_short_mode(r['mode']):<10}{'yes' if r['exact'] else 'no':<7}"
            f"{r['requests'][:16]:<22}{r['steps'][:16]:<22}{r['rows'][1]:>10,}{r['wall_s']:>8.1f}"
            f"  {r['verdict']:<11} {flag}{r['evidence']}"
        )


def git_commit() -> str:
    """The checkout's commit, marked when the working tree differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    sha = git("rev-parse", "HEAD") or "unknown"
    return sha + (" (uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else "")


def write(path: Path, rows: list[dict], note: str) -> None:
    data: dict[str, object] = {"commit": git_commit() + (f"; {note}" if note else "")}
    data["mode"] = sorted({r["mode"] for r in rows})
    data.update({r["run"]: {kind: r[kind] for kind in HASHED} for r in rows})
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {path} ({len(rows)} runs)")


def check(path: Path, rows: list[dict]) -> list[str]:
    """Mismatches between this run's hashes and a saved file's (runs the file lacks count too)."""
    saved = json.loads(path.read_text())
    bad = []
    for r in rows:
        want = saved.get(r["run"])
        if not isinstance(want, dict):
            bad.append(f"{r['run']}: not in {path}")
            continue
        bad += [
            f"{r['run']}: {kind}.csv {r[kind][:16]} != saved {want[kind][:16]}"
            for kind in HASHED
            if r[kind] != want.get(kind)
        ]
    return bad


def list_cases() -> None:
    for run, (case, exact) in runs().items():
        what = "benchmark case (bench_sim.py)" if case in BENCH_CASES else EVIDENCE[case].__name__.lstrip("_")
        print(f"{run:<24}{'exact steps' if exact else 'fast path':<13}{what}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=[], metavar="CASE", help="cases or CASE+exact runs (default: all)")
    ap.add_argument("--write", type=Path, metavar="FILE", help="save the hashes as JSON")
    ap.add_argument("--note", default="", help="with --write: appended to the file's commit line")
    ap.add_argument("--check", type=Path, metavar="FILE", help="compare with saved hashes; exit 1 on a mismatch")
    ap.add_argument("--list", action="store_true", help="list the runs and exit")
    ap.add_argument("--engine", help="run every case under this engine (e.g. ideal: the pre-engine baseline)")
    args = ap.parse_args(argv)
    if args.engine:
        os.environ[ENGINE_ENV] = args.engine  # the spawned runs read it
    if args.list:
        list_cases()
        return 0
    names = select(args.cases)
    t0 = time.perf_counter()
    rows = run_all(names)
    print_table(rows)
    print(f"{len(rows)} runs in {time.perf_counter() - t0:.1f} s")
    status = 0 if len(rows) == len(names) else 1
    unexercised = [r["run"] for r in rows if not r["exercised"]]
    if unexercised:
        print(f"cases that did not exercise their mechanism: {', '.join(unexercised)}", file=sys.stderr)
        status = 1
    if args.write:
        write(args.write, rows, args.note)
    if args.check:
        bad = check(args.check, rows)
        print(f"{len(bad)} mismatches against {args.check}" + "".join(f"\n  {b}" for b in bad))
        status = status or int(bool(bad))
    return status


if __name__ == "__main__":
    sys.exit(main())
