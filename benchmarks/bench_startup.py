"""Whole-command wall time, start-up included: what a user waits for at the prompt.

    python benchmarks/bench_startup.py            # every command, 5 fresh processes each
    python benchmarks/bench_startup.py --rounds 9

Each command runs as its own process (``python -m llmsim.cli ...`` through the venv's
interpreter), so the time includes the interpreter, every import and the command's work. The
table gives the median and the fastest of the rounds, and which of the heavy libraries (pandas,
matplotlib, SimPy, pyarrow, SciPy) the command imported: a command that prints a table from a
profile needs none of them. docs/performance.md ("Start-up") records it; quote ratios.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "matplotlib", "simpy", "pyarrow", "scipy")

_ROOFLINE = "roofline --model llama-3.1-8b --hardware H100-SXM"
COMMANDS: list[tuple[str, list[str]]] = [
    (label, cmd.split())
    for label, cmd in [
        ("--version", "--version"),
        ("--help", "--help"),
        ("hardware", "hardware"),
        ("hardware H100-SXM", "hardware H100-SXM"),
        ("models", "models"),
        ("models llama-3.1-8b", "models llama-3.1-8b"),
        ("run --help", "run --help"),
        ("roofline (no chart)", f"{_ROOFLINE} --prefill-tokens 512 --decode-batch 8 --context 1024 --out -"),
        ("roofline (chart)", f"{_ROOFLINE} --decode-batch 8 --out {{tmp}}/r.png"),
        ("run quickstart", "run scenarios/quickstart.yaml --out {tmp}/qs --quiet"),
    ]
]


def _once(args: list[str], importtime: bool = False) -> tuple[float, str]:
    """Wall seconds of one fresh process, and its stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        flags = ["-X", "importtime"] if importtime else []
        argv = [sys.executable, *flags, "-m", "llmsim.cli", *(a.format(tmp=tmp) for a in args)]
        t0 = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"llmsim {' '.join(args)} failed ({done.returncode}): {done.stderr[-500:]}")
    return wall, done.stderr


def heavy_imports(args: list[str]) -> set[str]:
    """The heavy libraries a command imports (one more run, under ``-X importtime``, not timed)."""
    lines = _once(args, importtime=True)[1].splitlines()
    return {line.split("|")[-1].strip().split(".")[0] for line in lines if "|" in line} & set(HEAVY)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="fresh processes per command (default 5)")
    args = ap.parse_args(argv)
    print(f"{'command':<24}{'median s':>10}{'best s':>9}  heavy imports")
    print("-" * 70)
    for label, cmd in COMMANDS:
        walls = [_once(cmd)[0] for _ in range(args.rounds)]
        heavy = ", ".join(sorted(heavy_imports(cmd))) or "none"
        print(f"{label:<24}{statistics.median(walls):>10.2f}{min(walls):>9.2f}  {heavy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
