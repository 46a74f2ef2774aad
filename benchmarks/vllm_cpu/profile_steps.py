"""Step-time profile of the real vLLM v1 engine on this CPU, for calibration.

Fixed batches, each repeated (repeats interleaved: pass 1 runs every experiment once,
then pass 2, ...), timed around ``LLMEngine.step()`` with the same per-step recorder as
serve.py.  Experiments:

* ``prefill-L{L}x{k}``: k fresh prompts of L tokens, ``max_tokens=1``; the first step
  is a pure prefill of k*L tokens (k*L <= the token budget).
* ``decode-B{B}-C{C}``: B prompts of C tokens with ``max_tokens=17``; after the prefill
  steps (labelled ``...:prefill``) come 16 pure decode steps at batch B, contexts C..C+16
  (labelled ``...:decode``).
* ``mixed-B{B}-L{L}``: B requests decoding at context ~256, then one fresh prompt of L
  tokens joins: the step that carries it (labelled ``...:mixed``) holds B decodes + L
  prefill tokens; two more decode steps follow, then everything is aborted.

Writes ``data/validation/vllm-cpu/profile/`` (steps.csv.gz, meta.json).

    /opt/vllm-venv/bin/python benchmarks/vllm_cpu/profile_steps.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serve  # noqa: E402  (same folder; vllm itself is imported inside functions)

PREFILL = [(16, 1), (64, 1), (128, 1), (256, 1), (512, 1), (1024, 1), (2000, 1)]
PREFILL += [(128, 4), (256, 4), (512, 2), (128, 16)]
DECODE_B = [1, 2, 4, 8, 16, 32, 64]
DECODE_C = [128, 512, 1536]
MAX_DECODE_TOKENS = 16384  # skip (B, C) whose prefill would be larger than this
MIXED = [(4, 64), (4, 512), (16, 64), (16, 512), (16, 1024), (32, 256)]


def experiments() -> list[tuple[str, dict]]:
    ex = [(f"prefill-L{L}x{k}", {"kind": "prefill", "L": L, "k": k}) for L, k in PREFILL]
    for C in DECODE_C:
        for B in DECODE_B:
            if B * C <= MAX_DECODE_TOKENS:
                ex.append((f"decode-B{B}-C{C}", {"kind": "decode", "B": B, "C": C}))
    ex += [(f"mixed-B{B}-L{L}", {"kind": "mixed", "B": B, "L": L, "C": 256}) for B, L in MIXED]
    return ex


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(serve.OUT_ROOT / "profile"))
    ap.add_argument("--only", default="", help="substring filter on experiment names")
    ap.add_argument("--warmup", choices=serve.WARMUPS, default="full", help="warm-up before t0 (serve.WARMUPS)")
    ap.add_argument("--model", default="", help="a model folder (config.json) other than model/ (the depth profiles)")
    args = ap.parse_args(argv)

    env = serve.setup_env()
    load_before = serve.load_avg()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    kind = RequestOutputKind.DELTA
    engine, engine_kwargs = serve.build_engine({"model": str(Path(args.model).resolve())} if args.model else None)
    cfg = serve.resolved_config(engine)
    warm = serve.warmup(engine, SamplingParams, TokensPrompt, kind, args.warmup)
    clock0 = time.monotonic()

    def clock():
        return time.monotonic() - clock0

    rec = serve.StepRecorder(engine, clock)
    rng = random.Random(12345)
    uid = [0]

    def add(L, max_tokens):
        uid[0] += 1
        rid = f"p{uid[0]}"
        ids = [rng.randrange(3, serve.VOCAB) for _ in range(L)]
        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, detokenize=False, output_kind=kind)
        engine.add_request(rid, TokensPrompt(prompt_token_ids=ids), sp)
        return rid

    def step(label):
        rec.label = label
        t0 = clock()
        outs = engine.step()
        t1 = clock()
        rec.mark_step(t0, t1, len(outs))
        return outs

    def drain(label):
        while engine.has_unfinished_requests():
            step(label)

    exps = [e for e in experiments() if args.only in e[0]]
    for rep in range(args.repeats):
        for name, e in exps:
            tag = f"{name}#r{rep}"
            if e["kind"] == "prefill":
                for _ in range(e["k"]):
                    add(e["L"], 1)
                step(f"{tag}:prefill")
                drain(f"{tag}:rest")
            elif e["kind"] == "decode":
                ids = [add(e["C"], 17) for _ in range(e["B"])]
                got = dict.fromkeys(ids, 0)
                # prefill until every request has its first token
                while min(got.values()) == 0:
                    for o in step(f"{tag}:prefill"):
                        got[o.request_id] += len(o.outputs[0].token_ids)
                drain(f"{tag}:decode")
            else:
                ids = [add(e["C"], 64) for _ in range(e["B"])]
                got = dict.fromkeys(ids, 0)
                while min(got.values()) == 0:
                    for o in step(f"{tag}:prefill"):
                        got[o.request_id] += len(o.outputs[0].token_ids)
                step(f"{tag}:decode")
                add(e["L"], 4)
                step(f"{tag}:mixed")
                step(f"{tag}:after")
                step(f"{tag}:after")
                engine.abort_request(list(engine.output_processor.request_states), internal=True)
                drain(f"{tag}:rest")
            engine.reset_prefix_cache()
        print(f"pass {rep} done at {clock():.1f}s, load {serve.load_avg()}", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    serve.write_steps(out / "steps.csv.gz", rec.rows)
    meta = {
        "run": out.name,
        "kind": "profile",
        "started_utc": started,
        "finished_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "load_avg_before": load_before,
        "load_avg_after": serve.load_avg(),
        "env": env,
        "engine_args": engine_kwargs,
        "resolved": cfg,
        "warmup": warm,
        "harness": serve.harness_files(),
        "repeats": args.repeats,
        "experiments": [{"name": n, **e} for n, e in exps],
        "machine": serve.machine_info(),
        "clock": "time.monotonic() - t0; t0 = after warm-up",
        "steps": len(rec.rows),
    }
    with open(out / "meta.json", "w") as fh:
        json.dump(meta, fh, indent=1, default=repr)
    print(json.dumps({"steps": len(rec.rows), "out": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
