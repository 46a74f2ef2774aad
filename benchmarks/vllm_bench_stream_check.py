"""The requests ``llmsim bench`` replays for a ``vllm bench serve`` command line against the ones vLLM's
own benchmark code sends: send times, prompt and output lengths and (where the dataset has a text)
the prompts' token ids, case by case.

vLLM's side is vLLM itself, not a transcription: its own argument parser reads the command line,
``main_async``'s seeding, ``get_samples`` and ``get_request`` (on a clock that advances only when it
sleeps) run as the benchmark runs them (vllm/benchmarks/serve.py, datasets/datasets.py). llmsim's
side is ``vllmcli.parse_bench`` → ``scenario_dict`` → ``build_workload``, what ``llmsim bench`` runs.
Both read the same files, made here: a ShareGPT-style JSON and a custom-dataset JSONL (seeded
synthetic text), and two tokenizer folders (tests/data/vllm_bench_stream/: a 1,000-token byte-level
BPE with and without a BOS post-processor, with the ChatML and Llama 3 chat templates of
tests/data/chat_templates/).

    # record vLLM's streams (a Python with vllm[bench]: vllm, transformers, pandas)
    .venv/bin/python benchmarks/vllm_bench_stream_check.py --record /opt/vllm-venv/bin/python
    # compare llmsim with the record (what tests/test_vllm_bench_stream.py does)
    .venv/bin/python benchmarks/vllm_bench_stream_check.py

The random and prefix_repetition datasets' token ids are vLLM's re-encoding of random text, which
llmsim does not reproduce (it has no tokenizer for them): their content is llmsim's own ids, drawn
with the seed, so that a prompt repeats where vLLM's repeats. Only their lengths and times are
compared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path

from recorded import run_in

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "vllm_bench_stream"
TEMPLATES = ROOT / "tests" / "data" / "chat_templates"
EXPECTED = DATA / "expected.json"
SEND_TOLERANCE_S = 1e-9  # (the gaps are summed in another order: a few 1e-15 s apart)
# vLLM sends the random and prefix_repetition datasets' prompts as text: random token ids decoded and
# encoded again, which this small tokenizer lengthens by 0-2 tokens (0.1 % of them over a case; none
# with a 151,643-token BPE). llmsim counts the ids it was asked for.
RE_ENCODING_SLACK_TOKENS = 2

MODELS = {  # folder -> (tokenizer file, chat template, special tokens)
    "m0": ("tokenizer.json", "template_chatml.jinja", {"eos_token": "<|im_end|>"}),
    "m1": (
        "tokenizer_bos.json",
        "template_llama3.jinja",
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    ),
}
SG, CUSTOM = "{dir}/sharegpt.json", "{dir}/custom.jsonl"
CASES = {  # name -> (vllm bench serve command line, model folder)
    "random-poisson": (
        "--dataset-name random --random-input-len 300 --random-output-len 20 --num-prompts 50 --request-rate 4 --seed 3",
        "m0",
    ),
    "random-gamma-bos": (
        "--dataset-name random --random-input-len 300 --random-output-len 20 --num-prompts 50 --request-rate 2 --burstiness 0.5 --seed 5",
        "m1",
    ),
    "random-range-ratio": (
        "--dataset-name random --random-input-len 300 --random-output-len 20 --random-range-ratio 0.5 --num-prompts 50 --request-rate 4 --seed 3",
        "m0",
    ),
    "random-prefix": (
        "--dataset-name random --random-input-len 200 --random-output-len 10 --random-prefix-len 64 --num-prompts 30 --request-rate 5",
        "m0",
    ),
    "random-all-at-once": ("--dataset-name random --random-input-len 200 --random-output-len 8 --num-prompts 40", "m0"),
    "random-max-concurrency": (
        "--dataset-name random --random-input-len 100 --random-output-len 8 --num-prompts 30 --request-rate 8 --burstiness 3 --max-concurrency 4 --seed 4",
        "m1",
    ),
    "random-ramp-up-linear": (
        "--dataset-name random --random-input-len 100 --random-output-len 8 --num-prompts 60 "
        "--ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 20 --seed 2",
        "m0",
    ),
    "random-ramp-up-exponential-gamma": (
        "--dataset-name random --random-input-len 100 --random-output-len 8 --num-prompts 50 "
        "--ramp-up-strategy exponential --ramp-up-start-rps 2 --ramp-up-end-rps 16 --burstiness 2 --seed 7",
        "m1",
    ),
    "sharegpt": (f"--dataset-name sharegpt --dataset-path {SG} --num-prompts 120 --request-rate 3 --seed 11", "m0"),
    "sharegpt-bos-output-len": (
        f"--dataset-name sharegpt --dataset-path {SG} --num-prompts 90 --sharegpt-output-len 64 --request-rate 3 --burstiness 2 --seed 2",
        "m1",
    ),
    "sharegpt-oversample": (
        f"--dataset-name sharegpt --dataset-path {SG} --num-prompts 600 --request-rate 10 --seed 4",
        "m0",
    ),
    "sharegpt-in-order": (
        f"--dataset-name sharegpt --dataset-path {SG} --num-prompts 500 --request-rate 10 --disable-shuffle --no-oversample",
        "m1",
    ),
    "custom-chatml": (
        f"--dataset-name custom --dataset-path {CUSTOM} --num-prompts 100 --request-rate 2 --seed 9",
        "m0",
    ),
    "custom-llama3-oversample": (
        f"--dataset-name custom --dataset-path {CUSTOM} --num-prompts 200 --request-rate 2 --seed 8",
        "m1",
    ),
    "custom-skip-template": (
        f"--dataset-name custom --dataset-path {CUSTOM} --num-prompts 60 --skip-chat-template --custom-output-len 33 --request-rate 2 --seed 1",
        "m1",
    ),
    "custom-in-order": (
        f"--dataset-name custom --dataset-path {CUSTOM} --num-prompts 40 --disable-shuffle --request-rate 2",
        "m0",
    ),
    "prefix-repetition": (
        "--dataset-name prefix_repetition --prefix-repetition-prefix-len 64 --prefix-repetition-suffix-len 100 --prefix-repetition-num-prefixes 4 --prefix-repetition-output-len 16 --num-prompts 40 --seed 6",
        "m0",
    ),
}
_SENTENCE = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by word "
    "but not what all were we when your can said there use an each which she do how their if will up other about "
    "out many then them these so some her would make like him into time has look two more write go see number no"
)
_WORDS = _SENTENCE.split()

# vLLM's side, run by --record's interpreter: argv[1] {case: [argv, tokenizer folder]}; prints JSON
_VLLM_SIDE = r"""
import argparse, asyncio, json, random, sys
import numpy as np
import vllm
from vllm.benchmarks import serve as S
from vllm.benchmarks.datasets.datasets import get_samples
from transformers import AutoTokenizer

def stream(argv, folder):
    p = argparse.ArgumentParser()
    S.add_cli_args(p)
    args = p.parse_args(argv + ["--model", folder, "--tokenizer", folder])
    random.seed(args.seed)  # (main_async)
    np.random.seed(args.seed)
    tok = AutoTokenizer.from_pretrained(folder)
    reqs = get_samples(args, tok)
    now = [0.0]
    async def sleep(s):
        now[0] += s
    S.time.time, S.asyncio.sleep = (lambda: now[0]), sleep
    async def sends():
        out = []
        gen = S.get_request(reqs, args.request_rate, args.burstiness, args.ramp_up_strategy,
                            args.ramp_up_start_rps, args.ramp_up_end_rps)
        async for _ in gen:
            out.append(now[0])
        return out
    times = asyncio.run(sends())
    rows = []
    for r, t in zip(reqs, times):
        ids = r.prompt if isinstance(r.prompt, list) else tok(r.prompt).input_ids  # (what the server counts)
        rows.append({"send_s": t, "prompt_tokens": len(ids), "output_tokens": r.expected_output_len, "ids": ids})
    return rows

cases = json.loads(sys.argv[1])
print(json.dumps({"vllm": vllm.__version__, "streams": {k: stream(a, f) for k, (a, f) in cases.items()}}))
"""


def make_inputs(folder: Path) -> None:
    """The datasets' files and the two tokenizer folders, in ``folder`` (seeded: the same every time)."""
    rng = random.Random(7)

    def text(words: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(words)) + rng.choice(["", "?", "!\n", " 你好", " 🚀"])

    chats = []
    for i in range(400):  # (one to three turns: entries of other than two are dropped, as vLLM drops them)
        turns = rng.choice([1, 2, 2, 2, 3])
        convo = [{"from": ("human", "gpt")[j % 2], "value": text(rng.randint(1, 900))} for j in range(turns)]
        chats.append({"id": str(i), "conversations": convo})
    (folder / "sharegpt.json").write_text(json.dumps(chats), encoding="utf-8")
    lines = [json.dumps({"prompt": text(rng.randint(1, 600))}) for _ in range(150)]
    (folder / "custom.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = {  # (a tiny Llama: llmsim reads the served model's config.json)
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "intermediate_size": 384,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
        "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "vocab_size": 1000,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }  # fmt: skip
    for name, (tokenizer, template, tokens) in MODELS.items():
        model = folder / name
        model.mkdir()
        (model / "tokenizer.json").write_bytes((DATA / tokenizer).read_bytes())
        (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
        chat = (TEMPLATES / template).read_bytes().decode("utf-8")
        tok_config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": chat, **tokens}
        (model / "tokenizer_config.json").write_text(json.dumps(tok_config), encoding="utf-8")


def _argv(case: str, folder: Path) -> list[str]:
    return CASES[case][0].format(dir=folder).split()


def _ids_digest(block_ids: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(block_ids).encode()).hexdigest()


def record(python: str) -> dict:
    """vLLM's streams, by ``python`` (an interpreter with vllm[bench]); prompt ids kept as llmsim's
    block ids of them (a digest per case)."""
    import numpy as np

    from llmsim.workload.identity import token_block_ids

    with tempfile.TemporaryDirectory(prefix="llmsim-stream-") as tmp:
        folder = Path(tmp)
        make_inputs(folder)
        cases = {c: [_argv(c, folder), str(folder / CASES[c][1])] for c in CASES}
        out = run_in(python, _VLLM_SIDE, json.dumps(cases))
    streams = {}
    for case, rows in out.pop("streams").items():
        blocks = [token_block_ids(np.asarray(r["ids"], dtype=np.int64), 16) for r in rows]
        streams[case] = {
            "send_s": [r["send_s"] for r in rows],
            "prompt_tokens": [r["prompt_tokens"] for r in rows],
            "output_tokens": [r["output_tokens"] for r in rows],
            "prompt_block_ids_sha256": _ids_digest(blocks),
        }
    return {**out, "streams": streams}


def llmsim_streams(folder: Path) -> dict[str, dict]:
    """Each case's requests as ``llmsim bench`` builds them."""
    from llmsim import vllmcli
    from llmsim.build import build_workload
    from llmsim.scenario import scenario_from_dict

    make_inputs(folder)
    out = {}
    for case in CASES:
        serve = vllmcli.parse_serve(f"vllm serve {folder / CASES[case][1]}")
        bench, _ = vllmcli.parse_bench("vllm bench serve " + " ".join(_argv(case, folder)))
        w = build_workload(scenario_from_dict(vllmcli.scenario_dict("H100-SXM", serve, bench), case, folder))
        has_text = bench.dataset_name in ("sharegpt", "custom")
        out[case] = {
            "send_s": w.arrival_s.tolist(),
            "prompt_tokens": w.prompt_tokens.tolist(),
            "output_tokens": w.output_tokens.tolist(),
            "prompt_block_ids_sha256": _ids_digest(w.block_hashes) if has_text and w.block_hashes else None,
        }
    return out


def compare(expected: dict, got: dict[str, dict]) -> list[dict]:
    """Per case: requests, those sent at vLLM's time (to SEND_TOLERANCE_S), with its prompt length
    (to RE_ENCODING_SLACK_TOKENS where vLLM re-encodes random ids) and output length, and whether the
    prompts' token ids are vLLM's (None: not compared)."""
    rows = []
    for case, want in expected["streams"].items():
        have = got[case]
        n = len(want["send_s"])
        same_n = len(have["send_s"]) == n
        pairs = list(zip(want["send_s"], have["send_s"], strict=False)) if same_n else []
        digest = have["prompt_block_ids_sha256"]
        slack = 0 if digest is not None else RE_ENCODING_SLACK_TOKENS
        prompts = zip(want["prompt_tokens"], have["prompt_tokens"], strict=False)
        rows.append(
            {
                "case": case,
                "requests": n,
                "llmsim_requests": len(have["send_s"]),
                "send_time": sum(abs(a - b) <= SEND_TOLERANCE_S for a, b in pairs),
                "prompt_tokens": sum(abs(a - b) <= slack for a, b in prompts),
                "output_tokens": sum(
                    a == b for a, b in zip(want["output_tokens"], have["output_tokens"], strict=False)
                ),
                "token_ids": None if digest is None else digest == want["prompt_block_ids_sha256"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", metavar="PYTHON", help="record vLLM's streams with this interpreter")
    args = ap.parse_args(argv)
    if args.record:
        EXPECTED.write_text(json.dumps(record(args.record)) + "\n", encoding="utf-8")
        print(f"wrote {EXPECTED.relative_to(ROOT)}")
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="llmsim-stream-") as tmp:
        rows = compare(expected, llmsim_streams(Path(tmp)))
    from llmsim.tables import table

    print(table([list(r.values()) for r in rows], list(rows[0])))
    ok = all(
        r["llmsim_requests"] == r["requests"] == r["send_time"] == r["prompt_tokens"] == r["output_tokens"]
        and r["token_ids"] is not False
        for r in rows
    )
    print(
        f"{sum(r['requests'] for r in rows)} requests in {len(rows)} cases against vLLM {expected['vllm']}'s own code:"
    )
    print("identical" if ok else "DIFFERENT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
