"""Score llmsim against real vLLM 0.30 GPU serving runs (data/validation/vllm-gpu-bench/, a validation set).

Each run is one `vllm bench serve` pass against vLLM's own bf16 path: a random dataset of fixed
prompt and output lengths (ignore_eos), sent all at once (request rate inf), as a Poisson stream
(rate r: at the very times the bench client drew with the run's seed, `workload.arrivals:
vllm_bench`), or one at a time (max concurrency 1). The scenario a user would write for it: the model
(catalog, or the folder's derived config), the GPU's profile, tensor parallelism, the `vllm-v1`
engine with the run's stated server arguments (max_num_seqs, max_num_batched_tokens,
max_model_len, gpu_memory_utilization, the CUDA-graph capture size), and the KV capacity vLLM
logged ("GPU KV cache size: N tokens", less its null block) so that the timing is scored apart
from the memory estimate, which is scored on its own (llmsim's KV tokens against the logged ones);
``--own-kv`` scores them as a user's scenario runs, on llmsim's own KV estimate.
Nothing is fitted to these runs.

    .venv/bin/python benchmarks/vllm_gpu/bench_runs.py [--runs ID ...] [--out DIR] [--own-kv]
    .venv/bin/python benchmarks/vllm_gpu/bench_runs.py --fit-decode   # the H100's memory side, fitted
                                                                       # to the records' decode steps

Errors are llmsim / real - 1, on the metrics `vllm bench serve` prints (ms): TTFT, TPOT, ITL and
E2EL mean, median and p99, and request throughput.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "validation" / "vllm-gpu-bench"
RUNS = DATA / "runs.yaml"

# the GPU names the records print -> llmsim's profiles
HARDWARE = {
    "NVIDIA A100-SXM4-40GB": "A100-40GB",
    "NVIDIA H100 80GB HBM3": "H100-SXM",
    "NVIDIA GH200 480GB": "GH200",
    "NVIDIA L4": "L4",
    "NVIDIA RTX A6000": "RTX-A6000",
}
# a checkpoint llmsim's catalog does not have: its derived config in this folder (README there)
DERIVED = {"kalomaze/Qwen3-16B-A3B": {"name": "qwen3-16b-a3b", "hf_config": str(DATA / "qwen3-16b-a3b.config.json")}}
METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p99")


def load_runs(path: Path = RUNS) -> list[dict]:
    """The runs, each marked ``served_before`` where an earlier pass ran on its server (``as_served``)."""
    runs = yaml.safe_load(path.read_text())["runs"]
    servers: set[str] = set()
    for run in runs:
        server = run["id"].rsplit("/", 1)[0]  # (a server's passes share the id up to the pass)
        run["served_before"] = server in servers
        servers.add(server)
    return runs


def as_served(data: dict, run: dict) -> dict:
    """The scenario of a pass as its server ran it: after an earlier pass on the same server, its
    fused-MoE kernels were compiled (llmsim/moejit.py). runs.yaml lists a server's passes in the
    order they ran (the records' summary tables; the H100 and A6000 MoE servers' logs show vLLM's
    one JIT warning in the rate-1 pass, none later). Their prompts are scored cold (README)."""
    if not run.get("served_before"):
        return data
    engine = data["engine"] if isinstance(data["engine"], dict) else {"preset": data["engine"]}
    return data | {"engine": engine | {"moe_jit_compile_s": 0}}


def hardware(run: dict) -> str:
    gpu = str(run["gpu"])
    for name, profile in HARDWARE.items():
        if gpu.startswith(name):
            return profile
    raise KeyError(f"{run['id']}: no profile for GPU {gpu!r}")


def _int(value: object) -> int | None:
    """A stated integer setting (some records add a note after the number: '256 (README: ...)')."""
    if value is None:
        return None
    text = str(value).split()[0]
    return int(text) if text.isdigit() else None


def scenario_dict(run: dict, logged_kv: bool = True) -> dict:
    """The scenario ``llmsim bench`` makes of the run's `vllm serve` and `vllm bench serve` settings
    (llmsim/vllmcli.py; ``logged_kv``: with the KV capacity vLLM logged)."""
    from llmsim.metrics import DEFAULT_PERCENTILES
    from llmsim.vllmcli import Bench, Serve, capture_sizes, scenario_dict

    server, bench = run.get("server") or {}, run["bench"]
    sizes, _, _ = capture_sizes(json.loads(server.get("compilation_config") or "{}"))  # --compilation-config's JSON
    serve = Serve(
        model=DERIVED[run["model"]]["hf_config"] if run["model"] in DERIVED else run["model"],
        tp=int(run.get("tensor_parallel_size") or 1),
        max_num_seqs=_int(server.get("max_num_seqs")),
        max_num_batched_tokens=_int(server.get("max_num_batched_tokens")),
        max_model_len=_int(server.get("max_model_len")),
        gpu_memory_utilization=float(server.get("gpu_memory_utilization") or 0.9),
        cuda_graph_sizes=sizes,
    )
    traffic = Bench(
        random_input_len=int(bench["random_input_len"]),
        random_output_len=int(bench["random_output_len"]),
        num_prompts=int(bench["num_prompts"]),
        request_rate=float(bench["request_rate"]),
        burstiness=float(bench.get("burstiness") or 1.0),
        max_concurrency=int(bench["max_concurrency"]) if bench.get("max_concurrency") else None,
        seed=int(bench.get("seed") or 0),
        metric_percentiles=list(DEFAULT_PERCENTILES),
    )
    # vLLM's "GPU KV cache size: N tokens" is N / 16 blocks, its null block among them
    blocks = int(run["kv_cache"]["gpu_kv_cache_tokens"]) // 16 if logged_kv else None
    name = "vllm-gpu-bench-" + run["id"].replace("/", "-")
    out = scenario_dict(hardware(run), serve, traffic, name=name, kv_blocks=blocks)
    if run["model"] in DERIVED:
        out["model"] = DERIVED[run["model"]]  # (named as the folder names it)
    return out


def kv_tokens_estimate(run: dict) -> int:
    """llmsim's own KV capacity for the run (tokens per replica), from its memory model."""
    from llmsim.build import build_model, build_pools
    from llmsim.scenario import scenario_from_dict

    sc = scenario_from_dict(scenario_dict(run, logged_kv=False), run["id"], ROOT)
    pool = build_pools(sc, build_model(sc))[0]
    return int(pool.kv_blocks) * int(sc.kv_cache.block_tokens)


def simulate(run: dict, logged_kv: bool = True) -> dict:
    """llmsim's figures for ``run``, keyed as the real run's ``results`` (``logged_kv``: with the KV
    capacity vLLM logged, else llmsim's own estimate)."""
    import llmsim
    from llmsim.scenario import scenario_from_dict

    sc = scenario_from_dict(as_served(scenario_dict(run, logged_kv), run), run["id"], ROOT)
    s = llmsim.run(sc).summary
    out = {f"{stat}_{m}_ms": s.get(f"{stat}_{m}_ms") for m in METRICS for stat in STATS}
    out["request_throughput"] = s.get("request_throughput")
    out["like"] = s["accuracy_like"]  # the kind of run it is (devices, moe), which --record tags it with
    return out


def score(run: dict, logged_kv: bool = True) -> dict:
    real, sim = run["results"], simulate(run, logged_kv)
    row: dict = {
        "run": run["id"],
        "gpu": hardware(run),
        "model": run["model"].split("/")[-1],
        "tp": int(run.get("tensor_parallel_size") or 1),
        "rate": run["bench"]["request_rate"],
        "kv_tokens_real": int(run["kv_cache"]["gpu_kv_cache_tokens"]),
        "kv_tokens_llmsim": kv_tokens_estimate(run),
        **sim["like"],
    }
    for key in [f"{stat}_{m}_ms" for m in METRICS for stat in STATS] + ["request_throughput"]:
        r, p = real.get(key), sim.get(key)
        row[f"{key}_real"], row[f"{key}_llmsim"] = r, p
        row[f"{key}_err"] = (p / r - 1) if r and p is not None else float("nan")
    row["kv_tokens_err"] = row["kv_tokens_llmsim"] / row["kv_tokens_real"] - 1
    return row


# a bucket of the records' step tables (runs.yaml `steps.decode_buckets`, steps.txt as printed):
# "<64 sequences: 253 steps, 4.4 s, 17.3 ms a step" or "decode steps of 64-127 sequences: 467, 11.3 s, ..."
_BUCKET = re.compile(r"(?:<(\d+)|(\d+)-(\d+)) sequences: (\d+)(?: steps)?, [\d.]+ s, ([\d.]+) ms a step")


def step_table_rows(run: dict) -> list[dict]:
    """A run's measured steps (its record's step table: the mean prompt-carrying step, the mean
    decode step per band of running sequences) beside llmsim's steps of the same pass, read the same
    way (its steps with prompt tokens; its decode-only steps by decoding sequences). Nothing fitted."""
    import llmsim
    from llmsim.scenario import scenario_from_dict

    table = run["steps"]
    data = as_served(scenario_dict(run), run) | {"output": {"steps": "all"}}
    steps = llmsim.run(scenario_from_dict(data, run["id"], ROOT)).steps
    prompt, decode = steps[steps["prefill_tokens"] > 0], steps[steps["prefill_tokens"] == 0]
    bands = [("prompt steps", prompt, int(table["prompt_steps"]), float(table["prompt_ms_per_step"]))]
    for text in table["decode_buckets"]:
        m = _BUCKET.search(text)
        lo, hi = (1, int(m[1]) - 1) if m[1] else (int(m[2]), int(m[3]))
        band = decode[(decode["decode_tokens"] >= lo) & (decode["decode_tokens"] <= hi)]
        bands.append((f"decode, {lo}-{hi} seqs", band, int(m[4]), float(m[5])))
    return [
        {
            "run": run["id"],
            "steps": name,
            "real steps": n_real,
            "real_ms": real_ms,
            "llmsim steps": len(band),
            "llmsim_ms": 1e3 * float(band["duration_s"].mean()) if len(band) else float("nan"),
        }
        for name, band, n_real, real_ms in bands
    ]


DECODE_STEPS = DATA / "decode_steps.yaml"


def decode_step_rows(path: Path = DECODE_STEPS) -> list[dict]:
    """The records' measured vLLM decode steps against llmsim's step time for the same batch and
    context (the vllm-v1 engine, the GPU's profile, CUDA graphs): the decode step apart from
    queueing and prefill."""
    rows = []
    for entry in yaml.safe_load(path.read_text()):
        for step, priced in priced_decode_steps(entry):
            rows.append(
                {
                    "gpu": entry["profile"],
                    "model": entry["model"].split("/")[-1],
                    "batch x context": f"{step['batch']} x {step['context']:,}",
                    "real_ms": step["step_ms"],
                    "llmsim_ms": round(priced, 2),
                    "err": f"{priced / step['step_ms'] - 1:+.1%}",
                }
            )
    return rows


def priced_decode_steps(entry: dict, hardware: str | None = None) -> list[tuple[dict, float]]:
    """Each step of one ``decode_steps.yaml`` entry with llmsim's price of it (ms), on the entry's
    GPU profile or on ``hardware`` (a profile name or YAML path)."""
    from llmsim.build import build_model, build_pools
    from llmsim.costmodel.ops import model_batch_shape
    from llmsim.scenario import scenario_from_dict
    from llmsim.vllmcli import model_entry

    longest = max(s["context"] for s in entry["steps"]) + 1
    d = {
        "name": "decode-steps",
        "model": DERIVED.get(entry["model"]) or model_entry(entry["model"])[0],
        "hardware": hardware or entry["profile"],
        "policy": {"kind": "vllm", "max_model_len": longest},
        "workload": {
            "kind": "all_at_once",
            "num_requests": 1,
            "prompt_tokens": {"dist": "fixed", "value": 1},
            "output_tokens": {"dist": "fixed", "value": 1},
        },
    }
    sc = scenario_from_dict(d, "decode_steps.yaml", ROOT)
    model = build_model(sc)
    cost = build_pools(sc, model)[0].cost
    shape = lambda s: model_batch_shape(model, [], [s["context"]] * s["batch"])  # noqa: E731
    return [(s, cost.step_time(shape(s)) * 1e3) for s in entry["steps"]]


# the decode-step fit: the GPU whose steps fit its profile's memory side, and the one that takes the
# value and whose own steps are held out (hardware_profiles/H100-SXM.yaml, GH200.yaml)
DECODE_FIT, DECODE_HELD_OUT = "H100-SXM", "GH200"


def decode_step_mape(gpu: str, memory_fraction: float | None = None) -> float:
    """Mean |error| of llmsim's price of ``gpu``'s measured decode steps, on its shipped profile or
    with ``efficiency.memory_fraction`` set to ``memory_fraction``."""
    import tempfile

    from llmsim.hardware import load_profile

    (entry,) = [e for e in yaml.safe_load(DECODE_STEPS.read_text()) if e["profile"] == gpu]
    with tempfile.TemporaryDirectory() as tmp:
        trial = None
        if memory_fraction is not None:  # (a trial profile, as a file: a scenario names its hardware)
            data = load_profile(gpu).model_dump(mode="json", exclude_none=True)
            data["efficiency"]["memory_fraction"] = {"value": memory_fraction, "source": "decode-step fit trial"}
            trial = Path(tmp) / f"{gpu}.yaml"
            trial.write_text(yaml.safe_dump(data))
        priced = priced_decode_steps(entry, str(trial) if trial else None)
    return statistics.fmean(abs(ms / step["step_ms"] - 1) for step, ms in priced)


def fit_decode_memory_fraction(gpu: str = DECODE_FIT) -> float:
    """The ``memory_fraction`` (0.005 steps over 0.80-1.00, the kernel floor as the profile has it)
    whose prices of ``gpu``'s measured decode steps have the least mean |error|."""
    trials = [round(0.80 + 0.005 * i, 3) for i in range(41)]
    return min(trials, key=lambda f: decode_step_mape(gpu, f))


HEADLINE = ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "request_throughput")
# the figures llmsim.accuracy records as prediction intervals (its RECORDED keys)
HEADLINE_RECORDED = ("mean_ttft_ms", "p99_ttft_ms", "mean_e2el_ms", "p99_e2el_ms", "mean_itl_ms")


def print_table(rows: list[dict]) -> None:
    df = pd.DataFrame(rows)
    cols = ["run", "gpu", "model", "tp", "rate"]
    show = df[cols].copy()
    for key in HEADLINE:
        name = key.replace("_ms", "").replace("request_throughput", "req_s")
        show[f"{name} real"] = df[f"{key}_real"].map(lambda v: f"{v:,.1f}" if v == v and v is not None else "-")
        show[f"{name} err"] = df[f"{key}_err"].map(lambda v: f"{v:+.1%}" if v == v else "-")
    show["KV est err"] = df["kv_tokens_err"].map(lambda v: f"{v:+.1%}")
    print(show.to_string(index=False))
    print()
    print("median |error| and share within +-10 % / +-20 %, over the runs:")
    for key in [f"{stat}_{m}_ms" for m in METRICS for stat in STATS] + ["request_throughput", "kv_tokens"]:
        errs = [abs(v) for v in df[f"{key}_err"] if v == v]
        if errs:
            within10 = sum(e <= 0.10 for e in errs)
            within20 = sum(e <= 0.20 for e in errs)
            print(
                f"  {key:20s} {statistics.median(errs):6.1%}  {within10:2d}/{len(errs)} within 10%,"
                f" {within20:2d}/{len(errs)} within 20%"
            )


def print_decode_fit() -> int:
    """The decode-step fit as --fit-decode prints it: the fitted value, and both GPUs' step MAPE on
    the shipped profiles and with the fitted value (the held-out GPU takes the fitted GPU's)."""
    from llmsim.hardware import load_profile

    fitted = fit_decode_memory_fraction()
    print(f"{DECODE_FIT} memory_fraction fitted to its decode steps (kernel floor as shipped): {fitted:.3f}")
    print(f"{'gpu':10s} {'role':9s} {'shipped':>8s} {'MAPE':>6s} {'at fit':>7s}")
    for gpu, role in ((DECODE_FIT, "fit"), (DECODE_HELD_OUT, "held out")):
        shipped = load_profile(gpu).efficiency.memory_fraction.value
        print(f"{gpu:10s} {role:9s} {shipped:8.3f} {decode_step_mape(gpu):6.1%} {decode_step_mape(gpu, fitted):7.1%}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", metavar="ID", help="run ids (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "vllm_gpu_bench", help="folder for score.csv")
    ap.add_argument("--record", action="store_true", help="store the errors in data/validation/accuracy.json")
    ap.add_argument(
        "--own-kv", action="store_true", help="size each KV cache with llmsim's memory model, as a user's scenario does"
    )
    ap.add_argument(
        "--fit-decode",
        action="store_true",
        help=f"fit {DECODE_FIT}'s memory_fraction to its measured decode steps; {DECODE_HELD_OUT}'s held out",
    )
    args = ap.parse_args(argv)
    if args.fit_decode:
        return print_decode_fit()
    runs = load_runs()
    if args.runs:
        unknown = sorted(set(args.runs) - {r["id"] for r in runs})
        if unknown:
            ids = ", ".join(r["id"] for r in runs)
            print(f"bench_runs.py: error: unknown run id(s) {', '.join(unknown)}; the runs are: {ids}", file=sys.stderr)
            return 2
        runs = [r for r in runs if r["id"] in args.runs]
    if args.record and (args.runs or args.own_kv):  # (the record is the whole set's spread, as logged)
        print(
            "bench_runs.py: error: --record stores the whole set's errors on the logged KV; drop --runs / --own-kv",
            file=sys.stderr,
        )
        return 2
    try:  # (before any scoring: a folder that cannot be made fails now, not after the runs)
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(
            f"bench_runs.py: error: --out {args.out}: not a folder that can be written ({exc.strerror})",
            file=sys.stderr,
        )
        return 2
    t0 = time.perf_counter()
    rows = [score(r, logged_kv=not args.own_kv) for r in runs]
    print_table(rows)
    if not args.runs:
        print(
            "\nvLLM's own decode step, one step's wall time (the records' profiles and decode tables) against llmsim's:"
        )
        print(pd.DataFrame(decode_step_rows()).to_string(index=False))
        timed = pd.DataFrame([row for r in runs if r.get("steps") for row in step_table_rows(r)])
        timed["err"] = (timed["llmsim_ms"] / timed["real_ms"] - 1).map(lambda v: f"{v:+.1%}")
        print("\nthe records' step tables (steps.txt: mean ms a step) against llmsim's steps in the same passes:")
        print(timed.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    pd.DataFrame(rows).to_csv(args.out / "score.csv", index=False)
    print(f"\n{len(rows)} runs in {time.perf_counter() - t0:.0f} s; wrote {args.out / 'score.csv'}")
    if args.record:
        from llmsim.accuracy import record

        scores = [
            {
                "run": r["run"],
                "devices": r["devices"],
                "moe": r["moe"],
                **{f"err_{k}": r[f"{k}_err"] for k in HEADLINE_RECORDED},
            }
            for r in rows
        ]
        src = (
            f"benchmarks/vllm_gpu/bench_runs.py on {len(rows)} real vLLM 0.30 GPU runs (vllm bench serve, random "
            "fixed lengths; A100-40GB, H100, GH200, L4, 2x RTX A6000; data/validation/vllm-gpu-bench/), KV capacity "
            "as vLLM logged it, requests sent at the times vllm bench serve drew with each run's seed; no parameter fitted to them, but ten changes adopted after seeing them (README.md lists them), "
            "each from other measurements, among them the A100 and H100/H200 GEMM curves fitted to Vidur's kernels, the vllm-v1 preset's 10 ms "
            "client delay (vLLM PR #54628), the L4's GEMM rate fitted to measured prompt passes at its power cap, the "
            "GH200's fitted to measured layer products (these passes run at two trial values first), the H100's (and "
            "GH200's) memory fraction fitted to the records' measured vLLM decode steps (docs/validation.md)"
        )
        print(f"wrote {record('vllm-gpu-bench', scores, src)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
