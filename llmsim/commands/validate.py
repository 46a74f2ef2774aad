"""``llmsim validate``: the cost model's per-op predictions against a measured profile."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmsim.errors import UserError
from llmsim.progress import Bar, bar, printer, to_json
from llmsim.tables import table

if TYPE_CHECKING:
    from llmsim.calibration.readers import Measurement
    from llmsim.calibration.validate import Report
    from llmsim.hardware import HardwareProfile

WORST = 5  # worst cases shown


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="compare per-op predictions with measured timings (MAPE)")
    p.add_argument("--hardware", required=True, help="profile name or YAML path (e.g. a calibrated one)")
    p.add_argument("--model", required=True, help="catalog name or HuggingFace config.json")
    p.add_argument(
        "--profile",
        required=True,
        nargs="+",
        metavar="FILE",
        help="Vidur mlp.csv/attention.csv/all_reduce.csv or generic CSV (or the same gzipped, .gz)",
    )
    p.add_argument(
        "--baseline",
        metavar="HARDWARE",
        help="a second profile priced on the same rows, side by side (e.g. the default)",
    )
    p.add_argument("--json", action="store_true", help="print JSON: every figure of the text (errors as fractions)")
    p.add_argument(
        "--quiet", action="store_true", help="no progress bar; print nothing but errors and what --json asks for"
    )
    p.set_defaults(func=cmd_validate)


def read_profiles(files: list[str], progress: Bar, label: str) -> list[Measurement]:
    """Every measured row of ``files``, one step of ``progress`` per file (a calibration may read
    dozens); ``label`` names the command on the bar."""
    from llmsim.calibration.readers import read_profile

    rows: list[Measurement] = []
    for f in files:
        progress.set_description(f"{label}: reading {Path(f).name}")
        rows += read_profile(f)
        progress.update()
    return rows


def cmd_validate(args: argparse.Namespace) -> int:
    from llmsim.calibration.readers import check_dtypes
    from llmsim.calibration.validate import validate
    from llmsim.commands.models import model_arg
    from llmsim.hardware import load_profile

    hw, model = load_profile(args.hardware), model_arg(args.model)
    base = load_profile(args.baseline) if args.baseline else None
    with bar(len(args.profile) + 1, "validate", not args.quiet, unit="step") as b:
        rows = read_profiles(args.profile, b, "validate")
        # multi-node all-reduces run over the network; the profile's scale-up link does not describe them
        rows = [r for r in rows if r.op != "all_reduce_multinode"]
        if not rows:
            raise UserError(
                f"{', '.join(args.profile)}: only multi-node all-reduce rows, which go over the network "
                "and are not validated: nothing to compare"
            )
        check_dtypes(rows, hw)
        if base is not None:
            check_dtypes(rows, base)
        b.set_description("validate: pricing")
        rep = validate(hw, model, rows)
        base_rep = validate(base, model, rows) if base is not None else None
        b.update()
    say = printer(args.quiet)
    if args.json:  # (the profiles' own names; "calibrated" says which is)
        named = (base.name, base_rep) if base is not None and base_rep is not None else None
        out = report_json(rep, hw.name, model.name, named)
        out["calibrated"] = bool(hw.calibration)
        if base is not None:
            out["baseline"]["calibrated"] = bool(base.calibration)
        print(to_json(out))
        return 0
    baseline = (label(base), base_rep) if base is not None and base_rep is not None else None
    print_report(rep, label(hw), model.name, say, baseline)
    return 0


def label(hw: HardwareProfile) -> str:
    """A profile's name in the report, marked when calibrated (a calibrated profile keeps its
    base's name, and the two are often compared)."""
    return f"{hw.name} (calibrated)" if hw.calibration else hw.name


def report_json(rep: Report, hardware: str, model: str, baseline: tuple[str, Report] | None = None) -> dict:
    """The text report's figures, unrounded: fractions for errors, seconds for times, bytes for
    all-reduce sizes; a TP degree an op was not measured at, or a band no row falls in, is ``null``.
    With a baseline its per-op, per-kind, attention-band and overall figures under ``baseline``."""
    by_tp = rep.per_op_tp()
    out = {
        "hardware": hardware,
        "model": model,
        "measured_kernels": len(rep.frame),
        "ops": {
            op: {"mape": r.mape, "p90": r.p90, "worst": r.worst, "n": int(r.n)} for op, r in rep.per_op().iterrows()
        },
        "kinds": _kinds_json(rep),
        "mape_per_tp": {op: {f"tp{c}": v for c, v in zip(by_tp.columns, r, strict=True)} for op, r in by_tp.iterrows()},
        "attention_bands": _bands_json(rep),
        "worst_cases": [worst_json(r) for r in rep.frame.nlargest(WORST, "ape").itertuples()],
        "overall_mape": rep.overall_mape,
    }
    if baseline is not None:
        name, b = baseline
        out["baseline"] = {
            "hardware": name,
            "ops": {op: {"mape": r.mape, "n": int(r.n)} for op, r in b.per_op().iterrows()},
            "kinds": _kinds_json(b),
            "attention_bands": _bands_json(b),
            "overall_mape": b.overall_mape,
        }
    return out


def _kinds_json(rep: Report) -> dict:
    return {kind: {"mape": r.mape, "n": int(r.n)} for kind, r in rep.per_kind().iterrows()}


def _bands_json(rep: Report) -> list[dict]:
    """One entry per (op, size band): the MAPE per cached-token band (null where no row), all, rows."""
    bands = rep.attention_bands()
    out = []
    for (op, size), r in bands.iterrows():
        ctx = {c: r[c] for c in bands.columns if c not in ("all", "rows")}
        out.append({"op": op, "size": size, "mape_by_kv": ctx, "mape": r["all"], "n": int(r["rows"])})
    return out


def worst_json(r: Any) -> dict:  # noqa: ANN401 - a pandas itertuples row
    """One worst case: a GEMM's TP degree and shape, an attention kernel's TP degree and batch
    (sequences, new tokens each, cached tokens each), an elementwise kernel's TP degree, tokens
    and hidden size, or an all-reduce's ranks and bytes."""
    if r.kind == "gemm":
        shape = {"tp": r.tp, "m": r.m, "n": r.n, "k": r.k}
    elif r.kind == "attention":
        shape = {"tp": r.tp, "batch": r.batch, "new_tokens": r.m, "kv_tokens": r.kv}
    elif r.kind == "elementwise":
        shape = {"tp": r.tp, "tokens": r.m, "hidden": r.k}
    else:
        shape = {"ranks": r.ranks, "bytes": r.bytes}
    return {"op": r.op, **shape, "measured_s": r.seconds, "predicted_s": r.predicted_s, "error": r.ape}


def _shape(r: Any) -> str:  # noqa: ANN401 - a pandas itertuples row
    if r.kind == "gemm":
        return f"{r.m}x{r.n}x{r.k}"
    if r.kind == "attention":  # sequences x (new tokens each + cached tokens each)
        return f"{r.batch}x({r.m}+{r.kv} kv)"
    if r.kind == "elementwise":  # tokens of a layer with hidden size k
        return f"{r.m} tok, H {r.k}"
    return f"{r.bytes:.0f} B"


def _pct(v: float) -> str:
    return f"{v:.1%}" if v == v else "-"


def print_report(
    rep: Report, hardware: str, model: str, out: Callable[..., None], baseline: tuple[str, Report] | None = None
) -> None:
    """The text report: per-op and per-kind MAPE (beside the baseline's, if any), MAPE per op and
    TP degree, attention's by regime and size band, the worst cases, overall."""
    per_op = rep.per_op()
    base_name, base = baseline if baseline is not None else ("", None)
    out(f"{hardware} vs {len(rep.frame)} measured kernels ({model}); MAPE = mean |predicted - measured| / measured")
    extra = [f"{base_name} MAPE"] if base is not None else []
    base_op = base.per_op()["mape"] if base is not None else None
    base_kind = base.per_kind()["mape"] if base is not None else None
    rows = [
        [op, _pct(r.mape), _pct(r.p90), _pct(r.worst), int(r.n), *([_pct(base_op[op])] if base_op is not None else [])]
        for op, r in per_op.iterrows()
    ]
    out(table(rows, ["op", "MAPE", "p90", "worst", "rows", *extra]))
    out("\nMAPE per kind of op")
    kinds = [
        [kind, _pct(r.mape), int(r.n), *([_pct(base_kind[kind])] if base_kind is not None else [])]
        for kind, r in rep.per_kind().iterrows()
    ]
    out(table(kinds, ["kind", "MAPE", "rows", *extra]))
    by_tp = rep.per_op_tp()
    out("\nMAPE per op and TP degree (ranks for all-reduce)")
    out(
        table(
            [[op, *(_pct(v) for v in r)] for op, r in by_tp.iterrows()],
            ["op", *[f"tp{c}" for c in by_tp.columns]],
        )
    )
    for name, r in [(hardware, rep), *([(base_name, base)] if base is not None else [])]:
        bands = r.attention_bands()
        if bands.empty:
            continue
        out(f"\nattention MAPE by regime and size on {name}; kv = tokens cached per sequence")
        cols = [c for c in bands.columns if c != "rows"]
        body = [[op, size, *(_pct(row[c]) for c in cols), int(row["rows"])] for (op, size), row in bands.iterrows()]
        out(table(body, ["op", "size", *cols, "rows"]))
    out("\nworst cases")
    worst = [
        [
            r.op,
            r.ranks if r.kind == "comm" else r.tp,
            _shape(r),
            f"{r.seconds * 1e6:.1f}",
            f"{r.predicted_s * 1e6:.1f}",
            f"{r.ape:.1%}",
        ]
        for r in rep.frame.nlargest(WORST, "ape").itertuples()
    ]
    out(table(worst, ["op", "tp/ranks", "shape", "measured us", "predicted us", "error"]))
    tail = f" ({base_name}: {base.overall_mape:.1%})" if base is not None else ""
    out(f"\noverall MAPE {rep.overall_mape:.1%}{tail}")
