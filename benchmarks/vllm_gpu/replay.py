"""Replay five real vLLM GPU serving runs (four of 0.19, one of 0.28) in llmsim and score them (issue #15 item 4).

The runs (data/validation/vllm-gpu/, from LLMServingSim's bench/examples, MIT) are 300 ShareGPT
requests each at ~10 req/s on an RTX 4090 or RTX PRO 6000 Blackwell. For each run this builds an
llmsim scenario from the run's meta.json (model, hardware, tp, max_num_seqs, chunk budget =
max_num_batched_tokens, chunked prefill, the block size and KV blocks where recorded, prefix caching),
replays the run's own workload file (format ``llmservingsim``: arrival times and token ids; the
DeepSeek run, whose workload file is not in the project: its requests' arrivals and lengths), and
prints TTFT, TPOT and E2E mean and p99 for the real run, llmsim and LLMServingSim's prediction.

    .venv/bin/python benchmarks/vllm_gpu/replay.py [--runs NAME ...] [--max-requests N] [--out DIR]

Metric definitions (LLMServingSim's bench/core/validate.py, applied to the real run):
TTFT = first_token_ts - queued_ts, E2E = last_token_ts - queued_ts,
TPOT = (last_token_ts - first_token_ts) / (output_toks - 1), over requests with output_toks > 1.
llmsim's requests.csv measures the same spans from arrival.

Qwen3-30B-A3B ran with data_parallel_size 2 + enable_expert_parallel (TP1). It is replayed with
``cluster.replicas: 2`` and ``cluster.expert_parallel: true`` (from the run's engine_kwargs): the
two replicas are the two DP ranks of one EP group of 2, each GPU holding 64 of the 128 experts
(32 GB of weights instead of 61 GB, so a larger KV cache) and paying an all-gather and a
reduce-scatter of both ranks' tokens around every MoE layer, vLLM's default
``allgather_reducescatter`` backend (docs/scenario.md). The two ranks step in lock-step
(llmsim/dpgroup.py: the slower rank sets every step, the experts see both ranks' tokens), and
requests are spread by ``vllm_dp``, vLLM's own DP load balancer (4 x waiting + running, on a view
taken every 100 ms).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "validation" / "vllm-gpu"

METRICS = ("ttft", "tpot", "e2e")
STATS = ("mean", "p99")


@dataclass(frozen=True)
class Run:
    key: str  # folder under data/validation/vllm-gpu/
    model: str | dict  # llmsim catalog name, or a scenario `model:` section (a config.json in the run's folder)
    hardware: str  # hardware_profiles/ name
    note: str = ""
    # "dataset": the run's own token-id workload (workloads/); "requests": arrivals and lengths from its
    # requests.jsonl, where the workload file is not in the project (no prompt content: no prefix-cache hits)
    workload: str = "dataset"

    @property
    def dir(self) -> Path:
        return DATA / self.key

    def meta(self) -> dict:
        return json.loads((self.dir / "meta.json").read_text())

    def scenario_model(self) -> str | dict:
        """The scenario's `model:`: a catalog name, or a section whose `hf_config` names a file in the run's folder."""
        if isinstance(self.model, str):
            return self.model
        return {**self.model, "hf_config": str(self.dir / self.model["hf_config"])}


RUNS = [
    Run("RTX4090/Llama-3.1-8B", "llama-3.1-8b", "RTX-4090"),
    Run("RTXPRO6000/Llama-3.1-8B", "llama-3.1-8b", "RTX-PRO-6000"),
    Run("RTXPRO6000/Qwen3-32B", "qwen3-32b", "RTX-PRO-6000", "TP2 over PCIe"),
    Run(
        "RTXPRO6000/Qwen3-30B-A3B-Instruct-2507",
        "qwen3-30b-a3b-instruct-2507",
        "RTX-PRO-6000",
        "DP2+EP: cluster.expert_parallel, EP 2",
    ),
    # vLLM 0.28, FP8 block-quantised weights with dynamic FP8 activations (the run's quant_config); the
    # model's config is derived (README there), and the run's workload file is not in the project
    Run(
        "RTXPRO6000/DeepSeek-V3.2-Exp-16L64E",
        {"name": "deepseek-v3.2-exp-16l64e", "hf_config": "model-config.derived.json", "act_dtype": "fp8"},
        "RTX-PRO-6000",
        "derived model config; lengths and arrivals from requests.jsonl (no prompt content)",
        workload="requests",
    ),
]


def read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def real_requests(run: Run) -> pd.DataFrame:
    """The measured run, one row per request, with ttft_s / tpot_s / e2e_s."""
    df = pd.DataFrame(read_jsonl_gz(run.dir / "requests.jsonl.gz"))
    df["ttft_s"] = df["first_token_ts"] - df["queued_ts"]
    df["e2e_s"] = df["last_token_ts"] - df["queued_ts"]
    many = df["output_toks"] > 1
    df["tpot_s"] = np.where(
        many, (df["last_token_ts"] - df["first_token_ts"]) / (df["output_toks"] - 1).clip(lower=1), np.nan
    )
    return df


def peer_requests(run: Run) -> pd.DataFrame | None:
    """LLMServingSim's per-request prediction (nanoseconds in sim.csv), None where the project
    holds only its summary (``summary_table``)."""
    path = run.dir / "llmservingsim_prediction" / "sim.csv.gz"
    if not path.exists():
        return None
    cols = ["request id", "output", "arrival", "end_time", "TTFT", "TPOT", "latency"]
    df = pd.read_csv(path, usecols=cols)
    df["ttft_s"], df["tpot_s"], df["e2e_s"] = df["TTFT"] / 1e9, df["TPOT"] / 1e9, df["latency"] / 1e9
    return df.sort_values("request id").reset_index(drop=True)


def summary_table(run: Run) -> dict[str, dict[str, float]]:
    """LLMServingSim's summary.txt: {"vLLM" | "Sim": {"ttft_mean": s, "ttft_p99": s, ...}}."""
    labels = {"TTFT": "ttft", "TPOT": "tpot", "Latency": "e2e"}
    out: dict[str, dict[str, float]] = {"vLLM": {}, "Sim": {}}
    for line in (run.dir / "llmservingsim_prediction" / "summary.txt").read_text().splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0] in labels and parts[1] in ("Mean", "P99"):
            key = f"{labels[parts[0]]}_{parts[1].lower()}"
            out["vLLM"][key], out["Sim"][key] = float(parts[2]) / 1e3, float(parts[3]) / 1e3
    return out


def _accuracy():
    """llmsim.accuracy (the shared scorer) where this checkout has it, else None."""
    try:
        from llmsim import accuracy
    except ImportError:
        return None
    return accuracy if hasattr(accuracy, "summary") and hasattr(accuracy, "compare") else None


def scoring_frame(df: pd.DataFrame, side: str) -> pd.DataFrame:
    """A side's requests as llmsim.accuracy reads them: id, arrival_s, first_token_s, finish_s,
    output_tokens (seconds on that side's clock; the real run's start is queued_ts)."""
    if side == "real":
        ids = df["request_id"].str.replace("bench-", "", regex=False)
        cols = (ids, df["queued_ts"], df["first_token_ts"], df["last_token_ts"], df["output_toks"])
    elif side == "peer":
        arrival = df["arrival"] / 1e9
        cols = (df["request id"], arrival, arrival + df["TTFT"] / 1e9, df["end_time"] / 1e9, df["output"])
    else:  # llmsim requests frame, finished requests
        cols = (df["id"], df["arrival_s"], df["first_token_s"], df["finish_s"], df["output_tokens"])
    names = ("id", "arrival_s", "first_token_s", "finish_s", "output_tokens")
    out = pd.DataFrame({n: np.asarray(c) for n, c in zip(names, cols, strict=True)})
    out["id"] = out["id"].astype(int).astype(str)
    return out


def stats(df: pd.DataFrame) -> dict[str, float]:
    """mean and p99 of each metric in seconds, from a frame with ttft_s / tpot_s / e2e_s
    (NaN where a frame has no rows)."""
    out: dict[str, float] = {}
    for m in METRICS:
        s = df[f"{m}_s"].dropna()
        out[f"{m}_mean"] = float(s.mean()) if len(s) else float("nan")
        out[f"{m}_p99"] = float(np.percentile(s, 99)) if len(s) else float("nan")
    return out


def score(frame: pd.DataFrame, own: pd.DataFrame) -> dict[str, float]:
    """``stats`` through llmsim.accuracy.summary when it exists (same definitions), else pandas here."""
    acc = _accuracy()
    if acc is None:
        return stats(own)
    s = acc.summary(frame)

    def fig(m: str, q: str) -> float:  # vLLM-bench keys (mean_ttft_ms); older llmsim: ttft_mean
        v = s.get(f"{q}_{'e2el' if m == 'e2e' else m}_ms", s.get(f"{'e2el' if m == 'e2e' else m}_{q}"))
        return float("nan") if v is None else v / 1e3

    return {f"{m}_{q}": fig(m, q) for m in METRICS for q in STATS}


def workload_file(run: Run, tmp: Path, max_requests: int | None) -> Path:
    """The run's workload jsonl, decompressed (the trace loader reads plain files), optionally cut;
    for a ``requests`` run, a generic CSV of its requests' arrivals (client clock, from the first)
    and token counts."""
    if run.workload == "requests":
        real = real_requests(run).iloc[:max_requests]
        # llmsim numbers requests in trace order: bench-i must be row i, in arrival order, for the
        # scoring to match them by id
        ids = real["request_id"].str.replace("bench-", "", regex=False).astype(int).tolist()
        if ids != list(range(len(real))) or not real["arrival_time"].is_monotonic_increasing:
            raise SystemExit(f"{run.key}: requests.jsonl is not bench-0, bench-1, ... in arrival order")
        dst = tmp / f"{run.key.replace('/', '_')}.csv"
        pd.DataFrame(
            {
                "arrival_s": real["arrival_time"] - real["arrival_time"].min(),
                "prompt_tokens": real["input_toks"],
                "output_tokens": real["output_toks"],
            }
        ).to_csv(dst, index=False)
        return dst
    src = DATA / run.meta()["dataset_path"]  # workloads/<name>.jsonl, stored gzipped
    src = src.with_name(src.name + ".gz")
    dst = tmp / f"{run.key.replace('/', '_')}.jsonl"
    with gzip.open(src, "rt") as fin, dst.open("w") as fout:
        if max_requests is None:
            shutil.copyfileobj(fin, fout)
        else:
            for i, line in enumerate(fin):
                if i >= max_requests:
                    break
                fout.write(line)
    return dst


def _supports_num_blocks() -> bool:
    from llmsim.scenario import KVCacheConfig

    return "num_blocks" in KVCacheConfig.model_fields


def scenario_dict(run: Run, trace: Path, policy: str = "vllm") -> dict:
    """The llmsim scenario of a run, from its meta.json."""
    from llmsim.engine import VLLM_019_MEMORY
    from llmsim.vllmcli import dummy_routing, model_spec

    meta = run.meta()
    kw = meta["engine_kwargs"]
    kv = meta.get("kv_cache") or {}
    dp, tp = int(kw.get("data_parallel_size") or 1), int(kw.get("tensor_parallel_size") or 1)
    ep = bool(kw.get("enable_expert_parallel"))  # EP size = DP x TP (vLLM), cluster.expert_parallel
    # the DeepSeek run served dummy weights (load_format dummy) behind a biased router: every token
    # reaches the same experts (vllmcli.DUMMY_WEIGHTS_NOTE), as `llmsim bench` translates it
    same_experts = dummy_routing(kw.get("load_format"), ep and dp * tp > 1, model_spec(run.scenario_model()))
    kv_cache: dict = {
        "block_tokens": int(kv.get("block_size", 16)),  # vLLM 0.19 default 16
        "prefix_caching": bool(kv.get("enable_prefix_caching", True)),  # vLLM 0.19 default on
        "memory_fraction": float(kv.get("gpu_memory_utilization", 0.9)),  # vLLM default 0.9
        "watermark": 0.0,  # vLLM v1's KV manager keeps no watermark
        # a freed partial block reused first: vLLM's PR #42656 (opened 2026-05-14), after the 0.19
        # runs (2026-04-25), before the 0.28 one (2026-09-03)
        "reuse_partial_first": not str(meta.get("vllm_version", "")).startswith("0.19."),
    }
    return {
        "name": "vllm-gpu-" + run.key.replace("/", "-").lower(),
        "seed": int(kw.get("seed") or 0),
        "model": run.scenario_model(),
        "hardware": run.hardware,
        # the runs' times are vLLM's own stamps (queued_ts, first_token_ts: LLMServingSim's validate.py),
        # not a client's: the API server's delay to the client (engine.output_delay_s) is not in them
        # and they ran vLLM 0.19, which sized its KV cache without a CUDA-graph estimate (engine.VLLM_019_MEMORY)
        "engine": {"preset": "vllm-v1", "output_delay_s": 0.0, **VLLM_019_MEMORY},
        "cluster": {
            "replicas": dp,
            "tp": tp,
            **({"expert_routing_exponent": 0.0} if same_experts else {}),
            "router": "vllm_dp" if dp > 1 else "round_robin",  # vLLM's own DP load balancer
            **({"expert_parallel": True} if ep else {}),
            "cuda_graphs": True,  # vLLM 0.19 default: full CUDA graphs for decode (cudagraph_mode FULL_AND_PIECEWISE)
        },
        "policy": {
            "kind": policy,
            "max_num_seqs": int(kw["max_num_seqs"]),
            "chunk_tokens": int(kw["max_num_batched_tokens"]),
            "max_batch_tokens": int(kw["max_num_batched_tokens"]),
            # --max-model-len where the run set one (null: the model's own context, llmsim's default too)
            **({"max_model_len": int(kw["max_model_len"])} if kw.get("max_model_len") else {}),
        },
        "kv_cache": kv_cache,
        "workload": {
            "kind": "trace",
            "trace": (
                {"path": str(trace), "format": "generic"}
                if run.workload == "requests"
                else {"path": str(trace), "format": "llmservingsim", "hash_block_tokens": kv_cache["block_tokens"]}
            ),
        },
        "output": {"steps": "all"},  # for decode_steps: every step's duration and batch
    }


def build_scenario(run: Run, trace: Path, policy: str = "vllm"):
    """A validated Scenario, with the KV capacity set to the run's recorded block count where it has one."""
    from llmsim.build import build_model, build_pools
    from llmsim.scenario import scenario_from_dict

    data = scenario_dict(run, trace, policy)
    recorded = (run.meta().get("kv_cache") or {}).get("num_gpu_blocks")
    how = "llmsim memory estimate (not recorded by the run)"
    if recorded:
        if _supports_num_blocks():
            data["kv_cache"]["num_blocks"] = int(recorded) - 1  # block 0 is vLLM's null block (v1/core/block_pool.py)
            how = f"recorded {recorded} blocks (kv_cache.num_blocks)"
        else:  # no block-count key: hold back memory so the budget gives exactly the recorded blocks
            sc = scenario_from_dict(json.loads(json.dumps(data)), run.key, ROOT)
            mem = build_pools(sc, build_model(sc))[0].memory
            block_bytes = mem["kv_bytes_per_token"] * data["kv_cache"]["block_tokens"]
            reserve = mem["kv_bytes"] - (int(recorded) + 0.5) * block_bytes
            if reserve >= 0:
                data["kv_cache"]["reserve_gb"] = reserve / 1e9
                how = f"recorded {recorded} blocks (via kv_cache.reserve_gb {reserve / 1e9:.3f})"
            else:
                how = f"llmsim estimate: cannot reach the recorded {recorded} blocks with reserve_gb >= 0"
    sc = scenario_from_dict(data, run.key, ROOT)
    return sc, how


def replay(run: Run, max_requests: int | None = None, policy: str = "vllm", out: Path | None = None) -> dict:
    """Simulate one run; returns its score row (real, llmsim and peer stats) and llmsim's frames."""
    import llmsim

    with tempfile.TemporaryDirectory() as tmp:
        trace = workload_file(run, Path(tmp), max_requests)
        sc, kv_how = build_scenario(run, trace, policy)
        res = llmsim.run(sc)
    sim = res.requests
    fin = sim[sim["status"] == "finished"]
    sim_log = sim_per_second_log(res.steps, res.requests)  # (read by both step tables)
    decode = decode_step_rows(run, sim_log)
    real = real_requests(run)
    peer = peer_requests(run)
    if max_requests is not None:  # compare like with like: the same first requests
        real = real.iloc[:max_requests]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        sim.to_csv(out / f"{run.key.replace('/', '_')}_llmsim_requests.csv", index=False)
    frames = {"real": scoring_frame(real, "real"), "llmsim": scoring_frame(fin, "llmsim")}
    if max_requests is None and peer is not None:
        frames["peer"] = scoring_frame(peer, "peer")
    own = {"real": real, "llmsim": fin, "peer": peer}
    acc = _accuracy()
    e2e_mape = {}
    scores = acc.compare(frames["real"], frames["llmsim"]) if acc is not None else {}
    if acc is not None:  # per-request E2E error over requests matched by id
        for side in ("llmsim", "peer"):
            if side in frames:
                e2e_mape[side] = acc.compare(frames["real"], frames[side])["e2el_request_mape"]
    return {
        "run": run.key,
        "note": run.note,
        "kv": kv_how,
        "kv_blocks": int(res.summary["pools"][0]["kv_blocks_per_replica"]),
        "finished": int(len(fin)),
        "requests": int(len(sim)),
        "preemptions": int(sim["preemptions"].sum()),
        "scorer": "llmsim.accuracy" if acc is not None else "pandas (replay.py)",
        "e2e_request_mape": e2e_mape,
        "scores": {**scores, "run": run.key, **res.summary["accuracy_like"]},  # (devices, moe: --record's tags)
        "decode_steps": decode,
        "prompt_steps": prompt_step_row(run, sim_log),
        **{side: score(frames[side], own[side]) if side in frames else None for side in ("real", "llmsim", "peer")},
        # no per-request prediction in the project: the peer's own summary table (mean and p99)
        **({"peer": summary_table(run)["Sim"]} if peer is None and max_requests is None else {}),
    }


BANDS = ((1, 16), (16, 64), (64, 128), (128, 10**9))  # decoding requests per rank


def per_second_log(run: Run) -> tuple[pd.DataFrame, int]:
    """The run's per-second log (timeseries.csv: tokens per second, running, waiting) and its
    data-parallel ranks (the log's counts are their totals)."""
    return pd.read_csv(run.dir / "timeseries.csv"), int(run.meta()["engine_kwargs"].get("data_parallel_size") or 1)


def decode_seconds(ts: pd.DataFrame, dp: int) -> pd.DataFrame:
    """The decode step time a per-second log implies: in a second with no prompt tokens every running
    request decodes once per step, so step = running / generated tokens per second (DP ranks step
    side by side: the totals give the same ratio). One row per such second, with the requests per rank."""
    quiet = ts[(ts["prompt_throughput"] == 0) & (ts["gen_throughput"] > 0) & (ts["running"] > 0)]
    return pd.DataFrame({"per_rank": quiet["running"] / dp, "step_s": quiet["running"] / quiet["gen_throughput"]})


def sim_per_second_log(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """llmsim's run as vLLM's per-second log reads a run (LLMServingSim's bench/core/stat_logger.py,
    which wrote these runs' timeseries.csv): a step counts in the second it ends; generated tokens
    are the steps' decode tokens and the first tokens of prefills that finished; prompt tokens are
    each request's whole prompt, counted in the second its first token came (vLLM counts a prompt
    when its prefill finishes, so a second of prefill chunks before the last reads 0 there too);
    running is each rank's requests after its last step of the second (its next step's batch, where
    it follows at once), summed over the ranks that stepped."""
    end = steps["start_s"] + steps["duration_s"]
    ranks = steps.assign(second=end.floordiv(1.0))
    by_rank = ranks.groupby("replica")
    # the next step's batch, where it follows at once: a rank steps back to back while it has
    # requests, so a gap means it emptied (and a step after the gap holds new arrivals)
    follows = by_rank["start_s"].shift(-1) <= end + 1e-9
    ranks = ranks.assign(after=by_rank["batch_size"].shift(-1, fill_value=0).where(follows, 0))
    last = ranks.groupby(["second", "replica"]).agg(gen=("decode_tokens", "sum"), running=("after", "last"))
    log = last.groupby(level=0).sum()
    first = requests.dropna(subset=["first_token_s"])
    at_first = first.groupby(first["first_token_s"].floordiv(1.0))
    prompt, firsts = at_first["prompt_tokens"].sum(), at_first.size()
    return pd.DataFrame(
        {
            "prompt_throughput": prompt.reindex(log.index, fill_value=0),
            # (a finished prefill's first token is a generated token too, as vLLM counts it)
            "gen_throughput": log["gen"] + firsts.reindex(log.index, fill_value=0),
            "running": log["running"],
        }
    ).reset_index(drop=True)


def decode_step_rows(run: Run, sim_log: pd.DataFrame) -> list[dict]:
    """Median decode step (ms) by requests per rank, the real run's per-second log beside llmsim's
    (``sim_per_second_log``), both read as ``decode_seconds``: the engine-and-kernel cost of a step,
    apart from the queueing that TTFT and E2E add."""
    ts, dp = per_second_log(run)
    real, sim = decode_seconds(ts, dp), decode_seconds(sim_log, dp)
    rows = []
    for lo, hi in BANDS:
        r = real[(real["per_rank"] >= lo) & (real["per_rank"] < hi)]["step_s"]
        m = sim[(sim["per_rank"] >= lo) & (sim["per_rank"] < hi)]["step_s"]
        if len(r):
            label = f"{lo}-{hi - 1}" if hi < 10**9 else f">={lo}"
            real_ms, sim_ms = 1e3 * float(r.median()), 1e3 * float(m.median()) if len(m) else float("nan")
            rows.append(
                {
                    "run": run.key,
                    "decoding per rank": label,
                    "real seconds": len(r),
                    "real_ms": real_ms,
                    "llmsim seconds": len(m),
                    "llmsim_ms": sim_ms,
                    "llmsim_err": _err(sim_ms, real_ms),
                }
            )
    return rows


def prompt_seconds(ts: pd.DataFrame, dp: int) -> pd.DataFrame:
    """The seconds of a per-second log with prompt tokens: a rank's mean step (running / generated
    tokens per second: each running request decodes once a step, as in ``decode_seconds``) and its
    prompt tokens per step."""
    busy = ts[(ts["prompt_throughput"] > 0) & (ts["gen_throughput"] > 0) & (ts["running"] > 0)]
    step_s = busy["running"] / busy["gen_throughput"]
    return pd.DataFrame({"step_s": step_s, "prompt_per_step": busy["prompt_throughput"] / dp * step_s})


def prompt_step_row(run: Run, sim_log: pd.DataFrame) -> dict:
    """Steps while prompts are being prefilled, the real run's log beside llmsim's
    (``sim_per_second_log``): medians over the seconds with prompt tokens of a rank's mean step
    (ms) and its prompt tokens per step."""
    ts, dp = per_second_log(run)
    real, sim = prompt_seconds(ts, dp), prompt_seconds(sim_log, dp)
    return {
        "run": run.key,
        "real seconds": len(real),
        "real step ms": 1e3 * float(real["step_s"].median()),
        "real prompt tok/step": float(real["prompt_per_step"].median()),
        "llmsim seconds": len(sim),
        "llmsim step ms": 1e3 * float(sim["step_s"].median()),
        "llmsim prompt tok/step": float(sim["prompt_per_step"].median()),
    }


def _err(sim: float | None, real: float) -> str:
    if sim is None or not np.isfinite(sim) or not np.isfinite(real) or real == 0:
        return "-"
    return f"{100.0 * (sim - real) / real:+.1f}%"


def table(rows: list[dict]) -> pd.DataFrame:
    """One row per run x metric, values in ms."""
    out = []
    for r in rows:
        for m in METRICS:
            for s in STATS:
                k = f"{m}_{s}"
                real = r["real"][k]
                sim = r["llmsim"][k]
                peer = r["peer"][k] if r["peer"] else None
                out.append(
                    {
                        "run": r["run"],
                        "metric": f"{m.upper()} {s}",
                        "real_ms": real * 1e3,
                        "llmsim_ms": sim * 1e3,
                        "llmsim_err": _err(sim, real),
                        "llmservingsim_ms": peer * 1e3 if peer is not None else float("nan"),
                        "llmservingsim_err": _err(peer, real),
                    }
                )
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="*", help="run folders (default: all), e.g. RTX4090/Llama-3.1-8B")
    ap.add_argument("--max-requests", type=int, default=None, help="replay only the first N requests")
    ap.add_argument("--policy", default="vllm", help="llmsim policy.kind (default vllm: vLLM v1's scheduler)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "vllm_gpu", help="where score.csv goes")
    ap.add_argument("--record", action="store_true", help="store the errors in data/validation/accuracy.json")
    args = ap.parse_args(argv)
    runs = [r for r in RUNS if not args.runs or r.key in args.runs]
    if not runs:
        print(f"no such run; choose from {[r.key for r in RUNS]}", file=sys.stderr)
        return 2
    rows = []
    for run in runs:
        rows.append(replay(run, args.max_requests, args.policy, args.out))
        r = rows[-1]
        extra = f"; {r['note']}" if r["note"] else ""
        print(
            f"{r['run']}: {r['finished']}/{r['requests']} finished, {r['preemptions']} preemptions, "
            f"KV {r['kv_blocks']} blocks/replica ({r['kv']}){extra}; scored by {r['scorer']}"
            + "".join(f"; per-request E2E MAPE {k} {100 * v:.1f}%" for k, v in r["e2e_request_mape"].items()),
            flush=True,
        )
    df = table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "score.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.float_format", "{:,.1f}".format):
        print(df.to_string(index=False))
    print(f"wrote {args.out / 'score.csv'}")
    steps = pd.DataFrame([d for r in rows for d in r["decode_steps"]])
    print(
        "\ndecode step time, median ms over the seconds without prompt tokens (running / generated tok/s; "
        "llmsim's steps read as the same per-second log)"
    )
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.float_format", "{:,.1f}".format):
        print(steps.to_string(index=False))
    mixed = pd.DataFrame([r["prompt_steps"] for r in rows])
    print(
        "\nsteps while prompts are prefilled, per rank, medians over the seconds with prompt tokens "
        "(step = running / generated tok/s; llmsim's steps read as the same per-second log)"
    )
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.float_format", "{:,.1f}".format):
        print(mixed.to_string(index=False))
    if args.record and args.max_requests is None:
        from llmsim.accuracy import record

        src = (
            f"benchmarks/vllm_gpu/replay.py on {len(rows)} real vLLM GPU runs (0.19; the DeepSeek one 0.28, with a derived "
            "model config; no parameter fitted to them; one platform choice, RTX-PRO-6000's host-staged all-reduce, "
            "made after seeing the Qwen3-32B run)"
        )
        print(f"wrote {record('vllm-gpu', [r['scores'] for r in rows], src)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
