"""DistServe's own measured runs (data/validation/distserve/runs/, a validation set) replayed in llmsim.

DistServe's authors served OPT-13B on A100-80GB GPUs with ShareGPT conversations (prompts and
answers as long as the dataset's, within OPT's 2,048-token context) arriving as a Poisson stream,
and kept every request's issue time, TTFT and TPOT: the vLLM of early 2024 on one GPU, and
DistServe's engine with prefill on two GPUs in TP 2 and decode on a third. Each run is replayed
here as the scenario a user would write for it: the exact arrival times and lengths as a trace,
the engines' presets (`vllm-2024`, `distserve-2024`: host terms fitted to DistServe's step models
of the same engines, llmsim/engine.py), the servers' arguments in DistServe's evaluation script
(evaluation/2-benchmark-serving/2-start-api-server.py: vLLM with 1,024 sequences and a 16,384-token
batch; DistServe's prefill 128 prompts and 8,192 tokens a batch, its decode 1,024 sequences; block
16) and the KV capacity DistServe measured for the model (66,144 tokens on one GPU, 163,008 on two in
TP 2), so timing is scored apart from memory. Nothing is fitted to these runs.

    .venv/bin/python benchmarks/distserve_real.py [--runs NAME ...] [--record]

Per run: TTFT and TPOT mean and p90 (ms), E2E mean, and SLO attainment under the paper's chatbot
SLOs (TTFT 0.25 s and TPOT 0.1 s, both met), real against llmsim; then per engine the highest run
rate with at least 90% attainment, per GPU, which is how DistServe states its result. ``--record``
stores each engine's errors (as llmsim.accuracy scores them) in data/validation/accuracy.json, so
a run under `vllm-2024` or `distserve-2024` prints them as its validated intervals.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "validation" / "distserve" / "runs"
TTFT_SLO_S, TPOT_SLO_S, ATTAINMENT = 0.25, 0.1, 0.9  # the paper's chatbot SLOs for OPT-13B
# DistServe's measured OPT-13B KV capacity, tokens per instance by TP (data/validation/distserve/max_num_tokens.csv)
KV_TOKENS = {1: 66_144, 2: 163_008}
# run name -> (engine preset, GPUs): the files' names are DistServe's (README here)
ENGINES = {"vllm": ("vllm-2024", 1), "distserve-c21d11": ("distserve-2024", 3)}
_NAME = re.compile(r"^(?P<engine>vllm|distserve-c21d11)-(?P<n>\d+)-(?P<rate>[\d.]+)$")


def runs() -> list[str]:
    """The committed runs, by engine then rate."""

    def key(name: str) -> tuple[str, float]:
        m = _NAME.match(name)
        assert m, name
        return m["engine"], float(m["rate"])

    return sorted((p.stem for p in DATA.glob("*.csv")), key=key)


def load(name: str) -> pd.DataFrame:
    """One run's requests in arrival order, arrival in seconds from the first."""
    df = pd.read_csv(DATA / f"{name}.csv").sort_values("issue_time", kind="stable").reset_index(drop=True)
    df["arrival_s"] = df["issue_time"] - df["issue_time"].iloc[0]
    return df


def scenario_dict(name: str, trace: Path) -> dict:
    m = _NAME.match(name)
    assert m, name
    preset, _ = ENGINES[m["engine"]]
    base: dict = {
        "name": f"distserve-real-{name}",
        "seed": 0,
        "model": "opt-13b",
        "hardware": "A100-SXM-80GB",
        "engine": preset,
        "kv_cache": {"block_tokens": 16, "watermark": 0.01, "dtype": "fp16", "num_blocks": KV_TOKENS[1] // 16},
        "workload": {"kind": "trace", "trace": {"path": str(trace), "format": "generic"}},
        "slo": {"ttft_s": TTFT_SLO_S, "tpot_s": TPOT_SLO_S, "tbt_s": None, "attainment": ATTAINMENT},
        "output": {"steps": "none"},
    }
    # the servers' arguments in DistServe's evaluation (evaluation/2-benchmark-serving/2-start-api-server.py)
    if m["engine"] == "vllm":  # vLLM of early 2024 on one GPU: whole prompts first
        base["cluster"] = {"replicas": 1, "tp": 1}
        base["policy"] = {"kind": "traditional", "max_num_seqs": 1024, "max_batch_tokens": 16384}
    else:  # prefill on two GPUs in TP 2 (context_tp 2), decode on one, KV over NVLink
        base["cluster"] = {
            "prefill_pool": {
                "replicas": 1,
                "tp": 2,
                "max_num_seqs": 128,
                "max_batch_tokens": 8192,
                "num_blocks": KV_TOKENS[2] // 16,
            },
            "decode_pool": {"replicas": 1, "tp": 1, "max_num_seqs": 1024, "max_batch_tokens": 65536},
            "kv_link": {"kind": "nvlink"},
        }
        base["policy"] = {"kind": "disaggregated", "max_num_seqs": 1024, "max_batch_tokens": 8192}
    return base


def simulate(name: str, real: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """llmsim's requests for the run, in arrival order (ttft_s, tpot_s, e2e_s), and the kind of run
    it is (summary ``accuracy_like``: devices, moe; what --record tags the run with)."""
    import llmsim
    from llmsim.scenario import scenario_from_dict

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.csv"
        cols = {
            "arrival_s": real["arrival_s"],
            "prompt_tokens": real["prompt_len"],
            "output_tokens": real["output_len"],
        }
        pd.DataFrame(cols).to_csv(trace, index=False, float_format="%.6f")
        sc = scenario_from_dict(scenario_dict(name, trace), name, ROOT)
        res = llmsim.run(sc)
    reqs = res.requests.sort_values(["arrival_s", "id"], kind="stable").reset_index(drop=True)
    return reqs, res.summary["accuracy_like"]


def attained(ttft_s: np.ndarray, tpot_s: np.ndarray) -> float:
    """Share of requests meeting both SLOs (a one-token answer has no TPOT to miss)."""
    tpot = np.nan_to_num(tpot_s, nan=0.0)
    return float(np.mean((ttft_s <= TTFT_SLO_S) & (tpot <= TPOT_SLO_S)))


def request_tables(real: pd.DataFrame, sim: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both sides as llmsim.accuracy's per-request tables (one clock per side, matched by id)."""
    ids = np.arange(len(real))
    measured = pd.DataFrame(
        {
            "id": ids,
            "arrival_s": real["arrival_s"],
            "first_token_s": real["arrival_s"] + real["ttft_ms"] / 1e3,
            "finish_s": real["arrival_s"] + real["latency_ms"] / 1e3,
            "prompt_tokens": real["prompt_len"],
            "output_tokens": real["output_len"],
        }
    )
    cols = ["arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens"]
    predicted = sim[cols].assign(id=ids)
    return measured, predicted


def score(name: str) -> dict:
    from llmsim.accuracy import compare

    real = load(name)
    sim, like = simulate(name, real)
    assert len(sim) == len(real) and (sim["prompt_tokens"].to_numpy() == real["prompt_len"].to_numpy()).all()
    m = _NAME.match(name)
    assert m
    row: dict = {"run": name, "engine": ENGINES[m["engine"]][0], "gpus": ENGINES[m["engine"]][1]}
    row["rate"], row["requests"] = float(m["rate"]), len(real)
    # both sides' vLLM-bench figures and their errors, as llmsim.accuracy scores every validation set
    cmp = row["compared"] = compare(*request_tables(real, sim)) | like  # (what --record stores)
    for label, key in (("ttft", "ttft"), ("tpot", "tpot"), ("e2e", "e2el")):
        for stat in ("mean", "p90"):
            row[f"{label}_{stat}_real"], row[f"{label}_{stat}_sim"] = (
                cmp[f"{side}_{stat}_{key}_ms"] for side in ("real", "sim")
            )
    row["e2e_request_mape"] = cmp["e2el_request_mape"]
    rt, st = real["ttft_ms"].to_numpy() / 1e3, sim["ttft_s"].to_numpy()
    rp, sp = real["tpot_ms"].to_numpy() / 1e3, sim["tpot_s"].to_numpy()
    row["attain_real"], row["attain_sim"] = attained(rt, rp), attained(st, sp)
    return row


def slo_rate(rows: list[dict], side: str) -> float:
    """The highest run rate whose attainment (``side``: real or sim) is at least 90%; 0 where none is."""
    ok = [r["rate"] for r in rows if r[f"attain_{side}"] >= ATTAINMENT]
    return max(ok, default=0.0)


def slo_rates(rows: list[dict]) -> list[list[object]]:
    """Per engine: the highest run rate at >= 90% attainment, real and llmsim, and per GPU ("< r"
    where even the lowest rate run, r, misses it)."""
    out = []
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = [r for r in rows if r["engine"] == engine]
        gpus, lowest = mine[0]["gpus"], min(r["rate"] for r in mine)
        cells: list[object] = [engine, gpus, ", ".join(f"{r['rate']:g}" for r in mine)]
        for per_gpu in (False, True):
            for side in ("real", "sim"):
                rate = slo_rate(mine, side)
                cells.append(
                    f"{rate / gpus if per_gpu else rate:.2f}" if rate else f"< {lowest / gpus if per_gpu else lowest:g}"
                )
        out.append(cells)
    return out


def main() -> int:
    from llmsim.tables import table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", metavar="NAME", help="run names (default: all)")
    ap.add_argument("--record", action="store_true", help="store the errors in data/validation/accuracy.json")
    args = ap.parse_args()
    if args.record and args.runs:
        print("distserve_real.py: error: --record stores the whole set's errors; drop --runs", file=sys.stderr)
        return 2
    rows = [score(n) for n in (args.runs or runs())]

    def pair(r: dict, key: str) -> list[str]:
        real, sim = r[f"{key}_real"], r[f"{key}_sim"]
        return [f"{real:,.1f}", f"{sim:,.1f}", f"{sim / real - 1:+.1%}"]

    heads = ["run", "rate"]
    for key in ("ttft_mean", "ttft_p90", "tpot_mean", "tpot_p90", "e2e_mean"):
        heads += [f"{key} real", "llmsim", "err"]
    heads += ["e2e MAPE/req", "SLO real", "llmsim"]
    body = []
    for r in rows:
        cells: list[object] = [r["run"], r["rate"]]
        for key in ("ttft_mean", "ttft_p90", "tpot_mean", "tpot_p90", "e2e_mean"):
            cells += pair(r, key)
        cells += [f"{r['e2e_request_mape']:.1%}", f"{r['attain_real']:.1%}", f"{r['attain_sim']:.1%}"]
        body.append(cells)
    print(table(body, heads))
    print("\nmedian |error| over each engine's runs (mean TTFT, mean TPOT, mean E2E; per-request E2E MAPE):")
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = [r for r in rows if r["engine"] == engine]
        errs = [
            np.median([abs(r[f"{k}_mean_sim"] / r[f"{k}_mean_real"] - 1) for r in mine])
            for k in ("ttft", "tpot", "e2e")
        ]
        mape = np.median([r["e2e_request_mape"] for r in mine])
        print(
            f"  {engine:<15} {len(mine)} runs: TTFT {errs[0]:.1%}, TPOT {errs[1]:.1%}, E2E {errs[2]:.1%}; E2E/request {mape:.1%}"
        )
    print()
    heads = ["engine", "GPUs", "run rates (req/s)", "SLO rate real", "llmsim", "per GPU real", "llmsim"]
    print(table(slo_rates(rows), heads))
    if args.record:
        from llmsim.accuracy import record

        for engine in dict.fromkeys(r["engine"] for r in rows):
            scores = [{**r["compared"], "run": r["run"]} for r in rows if r["engine"] == engine]
            src = "benchmarks/distserve_real.py: DistServe's measured OPT-13B runs (data/validation/distserve/runs/)"
            path = record(f"distserve-runs/{engine}", scores, src, engine=engine)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
