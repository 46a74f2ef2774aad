"""``llmsim calibrate``: fit a hardware profile's efficiencies and overheads to measured kernels."""

from __future__ import annotations

import argparse
from pathlib import Path

from llmsim.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit a hardware profile to measured operator timings")
    p.add_argument("--hardware", help="profile to start from (name or YAML path)")
    p.add_argument(
        "--profile", nargs="+", metavar="FILE", help="measured timings: Vidur mlp.csv/all_reduce.csv or generic CSV"
    )
    p.add_argument("--out", help="calibrated profile YAML (default hardware_profiles/calibrated/<name>.yaml)")
    p.add_argument("--local-cpu", action="store_true", help="measure this machine's CPU and write a profile")
    p.add_argument("--quick", action="store_true", help="with --local-cpu: fewer, smaller measurements")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.local_cpu:
        return _local_cpu(args)
    if not args.hardware or not args.profile:
        raise UserError("calibrate needs --hardware and --profile FILE... (or --local-cpu)")
    from llmsim.calibration.fit import calibrate
    from llmsim.calibration.readers import read_profile
    from llmsim.hardware import PROFILES_DIR, dump_profile, load_profile

    hw = load_profile(args.hardware)
    rows = [r for f in args.profile for r in read_profile(f)]
    new, res = calibrate(hw, rows, args.profile)
    out = Path(args.out) if args.out else PROFILES_DIR / "calibrated" / f"{hw.name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    dump_profile(new, out)
    print(f"fitted {res.gemm_rows} GEMM rows and {res.comm_rows} all-reduce rows from {len(args.profile)} file(s)")
    for key, value in res.params.items():
        print(f"  {key:24s} {value:.4g}")
    if res.gemm_rows:
        print(f"  GEMM fit MAPE           {res.gemm_mape:.1%}")
    if res.comm_rows:
        print(f"  all-reduce fit MAPE     {res.comm_mape:.1%}")
    print(f"wrote {out}")
    return 0


def _local_cpu(args: argparse.Namespace) -> int:
    from llmsim.calibration.localcpu import measure_and_write

    out = Path(args.out) if args.out else Path("hardware_profiles/calibrated/local-cpu.yaml")
    out.parent.mkdir(parents=True, exist_ok=True)
    written = measure_and_write(out, args.quick)
    print(f"wrote {written}")
    return 0
