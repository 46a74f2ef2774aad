"""Digital-twin benchmark: the real-size twin run of issue 5, as docs/reference.md section 4
records it. Calibrates this CPU (unless --keep-profile), then compares the simulator with the
NumPy reference engine on the single-step grid and on scenarios/twin_small.yaml under the
chunked and traditional policies, alternating run by run.

    .venv/bin/python benchmarks/bench_twin.py [--quick] [--keep-profile] [--repeats 8]

It is ``llmsim twin`` with the benchmark's settings (one implementation, see
llmsim/commands/twin.py); tables go to stdout, files to --out (default results/bench_twin).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmsim.cli import main as llmsim_main

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter calibration and a smaller step grid")
    ap.add_argument("--profile", type=Path, default=ROOT / "results/local-cpu.yaml")
    ap.add_argument("--keep-profile", action="store_true", help="reuse an existing profile")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench_twin")
    ap.add_argument("--repeats", type=int, default=8, help="twin runs per policy (this machine is shared: runs vary)")
    args = ap.parse_args(argv)
    cmd = ["twin", str(ROOT / "scenarios/twin_small.yaml"), "--policies", "chunked,traditional"]
    cmd += ["--repeats", str(args.repeats), "--profile", str(args.profile), "--out", str(args.out)]
    if not (args.keep_profile and args.profile.exists()):
        cmd.append("--recalibrate")
    if args.quick:
        cmd.append("--quick")
    return llmsim_main(cmd)


if __name__ == "__main__":
    sys.exit(main())
