"""``llmsim validate``: the cost model's per-op predictions against a measured profile."""

from __future__ import annotations

import argparse
import json

from llmsim.tables import table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="compare per-op predictions with measured timings (MAPE)")
    p.add_argument("--hardware", required=True, help="profile name or YAML path (e.g. a calibrated one)")
    p.add_argument("--model", required=True, help="catalog name or HuggingFace config.json")
    p.add_argument(
        "--profile", required=True, nargs="+", metavar="FILE", help="Vidur mlp.csv/all_reduce.csv or generic CSV"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (errors as fractions)")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from llmsim.calibration.readers import read_profile
    from llmsim.calibration.validate import validate
    from llmsim.hardware import load_profile
    from llmsim.models import get_model

    hw, model = load_profile(args.hardware), get_model(args.model)
    rows = [r for f in args.profile for r in read_profile(f)]
    # multi-node all-reduces run over the network; the profile's scale-up link does not describe them
    rows = [r for r in rows if r.op != "all_reduce_multinode"]
    rep = validate(hw, model, rows)
    if args.json:
        print(json.dumps(rep.as_json()))
        return 0
    per_op = rep.per_op()
    print(f"{hw.name} vs {len(rows)} measured kernels ({model.name}); MAPE = mean |predicted - measured| / measured")
    print(
        table(
            [[op, f"{r.mape:.1%}", f"{r.p90:.1%}", f"{r.worst:.1%}", int(r.n)] for op, r in per_op.iterrows()],
            ["op", "MAPE", "p90", "worst", "rows"],
        )
    )
    by_tp = rep.per_op_tp()
    print("\nMAPE per op and TP degree (ranks for all-reduce)")
    print(
        table(
            [[op, *(f"{v:.1%}" if v == v else "-" for v in r)] for op, r in by_tp.iterrows()],
            ["op", *[f"tp{c}" for c in by_tp.columns]],
        )
    )
    print("\nworst cases")
    worst = [
        [
            r.op,
            r.tp if r.kind == "gemm" else r.ranks,
            f"{r.m}x{r.n}x{r.k}" if r.kind == "gemm" else f"{r.bytes:.0f} B",
            f"{r.seconds * 1e6:.1f}",
            f"{r.predicted_s * 1e6:.1f}",
            f"{r.ape:.1%}",
        ]
        for r in rep.frame.nlargest(5, "ape").itertuples()
    ]
    print(table(worst, ["op", "tp/ranks", "shape m x n x k", "measured us", "predicted us", "error"]))
    print(f"\noverall MAPE {rep.overall_mape:.1%}")
    return 0
