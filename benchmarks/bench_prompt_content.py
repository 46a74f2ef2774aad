"""What giving `llmsim bench`'s drawn prompts their content costs (workload.prompts: vllm_bench).

    python benchmarks/bench_prompt_content.py            # three sizes, with and without content

`llmsim bench` gives the random dataset's prompts their content (llmsim/vllmcli.py, settle_prompts)
so that the prefix cache acts on them as vLLM's does; a run with content takes the prefix-cache
path (chain hashes per request, no columnar decode fast path) and holds one int per 16 prompt
tokens. Past `vllmcli.BENCH_CONTENT_IDS` blocks it draws them without. Each case runs `llmsim bench`
in a fresh process with the prefix cache on (content) and off (`--no-enable-prefix-caching`: none),
the same traffic otherwise, and prints the whole command's wall time and peak RSS. Quote ratios:
the machine is shared.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = [  # (label, --bench)
    ("1,000 x 1,024", "--num-prompts 1000 --random-input-len 1024 --random-output-len 256 --request-rate 8"),
    ("5,000 x 2,048", "--num-prompts 5000 --random-input-len 2048 --random-output-len 256"),
    ("30,000 x 1,024", "--num-prompts 30000 --random-input-len 1024 --random-output-len 128 --request-rate 30"),
]
SERVE = "vllm serve Qwen/Qwen3-8B --max-model-len 4096"


def _run(bench: str, content: bool) -> tuple[float, float]:
    """The command's wall seconds and its process's peak RSS in MB."""
    serve = SERVE if content else SERVE + " --no-enable-prefix-caching"
    cli = (  # (what `llmsim` runs, then its own peak RSS on stderr)
        "import resource, sys; from llmsim.cli import main; code = main(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(code)"
    )
    argv = [sys.executable, "-c", cli, "bench", "--hardware", "H100-SXM", "--serve", serve, "--bench", bench]
    t0 = time.perf_counter()
    done = subprocess.run([*argv, "--quiet"], check=True, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    return wall, int(done.stderr.split()[-1]) / 1024


def main() -> int:
    print(
        f"{'prompts':>16}  {'blocks':>10}  {'none s':>7}  {'content s':>9}  {'ratio':>5}  {'none MB':>7}  {'content MB':>10}"
    )
    for label, bench in CASES:
        words = bench.split()
        n, tokens = int(words[1]), int(words[3])
        none_s, none_mb = _run(bench, content=False)
        with_s, with_mb = _run(bench, content=True)
        blocks = n * (tokens // 16)
        print(
            f"{label:>16}  {blocks:>10,}  {none_s:>7.2f}  {with_s:>9.2f}  {with_s / none_s:>5.1f}  "
            f"{none_mb:>7.0f}  {with_mb:>10.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
