"""Time and peak memory of sampling vllm bench's ShareGPT dataset (llmsim/workload/sharegpt.py)
from a ShareGPT-shaped file, beside loading the file whole as vLLM does (``json.load``).

    .venv/bin/python benchmarks/sharegpt_read.py [--mb 300] [--requests 1000]

The file is synthetic (ShareGPT V3 itself is ~670 MB and not in the project): conversations of
1-10 turns of 5-1,500 words, tokenised by a word-level tokenizer built here. Each measurement runs
in its own process; peak memory is its maximum resident set (getrusage), the interpreter and
imports included. Machines are shared and noisy: compare the two rows, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = """
import json, resource, sys, time
from pathlib import Path
t = time.perf_counter()
if sys.argv[1] == "llmsim":
    from llmsim.workload import sharegpt
    n = len(sharegpt.sample(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), 0))
else:
    n = len(json.load(open(sys.argv[2], encoding="utf-8")))
print(n, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def write_files(folder: Path, megabytes: float) -> tuple[Path, Path]:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = [f"w{i}" for i in range(500)]
    tok = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate(words)}}, "<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(folder / "tokenizer.json"))
    rng = random.Random(0)
    size, i = 0, 0
    with open(folder / "sharegpt.json", "w", encoding="utf-8") as fh:
        fh.write("[")
        while size < megabytes * 1e6:
            turns = [
                {
                    "from": ("human", "gpt")[t % 2],
                    "value": " ".join(rng.choices(words, k=rng.choice([5, 40, 200, 600, 1500]))),
                }
                for t in range(rng.choice([1, 2, 4, 6, 10]))
            ]
            text = ("," if i else "") + json.dumps({"id": str(i), "conversations": turns})
            fh.write(text)
            size, i = size + len(text), i + 1
        fh.write("]")
    return folder / "sharegpt.json", folder / "tokenizer.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=300, help="the file's size in MB (default 300)")
    ap.add_argument("--requests", type=int, default=1000, help="--num-prompts (default 1000)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data, tok = write_files(Path(tmp), args.mb)
        print(f"file {data.stat().st_size / 1e6:,.0f} MB, {args.requests:,} requests\n")
        print(f"{'how':<42} {'items':>8} {'seconds':>8} {'peak MB':>8}")
        for how, label in (
            ("llmsim", "llmsim: streamed, the sample tokenised"),
            ("json", "json.load of the whole file (vLLM's)"),
        ):
            out = subprocess.run(
                [sys.executable, "-c", MEASURE, how, str(data), str(tok), str(args.requests)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            print(f"{label:<42} {int(out[0]):>8,} {float(out[1]):>8.2f} {float(out[2]):>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
