"""TensorRT-LLM 0.14's online serving table, every row simulated; and the fit of the ``trtllm-engine`` preset.

data/validation/published/trtllm-0.14-online.csv holds the 72 rows of the "Online Serving Measurements" table
of TensorRT-LLM's performance overview (v0.17 edition, v0.14.0 data, Triton's tensorrtllm_backend, BF16,
500 requests): Llama 3.1 8B (TP1) and 70B (TP4) on H100 and H200, three length pairs, QPS 2 to 32 and INF.
Each row becomes a published point like the ``trtllm014-*`` records of points.yaml (the record of its model
and GPU is the template), so it is mapped exactly as they are (``published_points.map_point``: policy trtllm,
trtllm-build's limits, Poisson arrivals); one simulation gives its mean TTFT, mean ITL and output tokens/s.

The rows split before any fitting: the 8B rows at a finite QPS fit the preset's two host terms (its step
time and Triton's frontend delay), the 70B TP4 rows at a finite QPS check them; the INF rows (every request
at once) are reported apart.

    python benchmarks/trtllm_online.py                 # every row under the mapping's engine; summary
    python benchmarks/trtllm_online.py --rows          # ... and every row
    python benchmarks/trtllm_online.py --engine ideal  # another engine (a preset name or a JSON mapping)
    python benchmarks/trtllm_online.py --fit           # the grid fit of the trtllm-engine preset's terms
    python benchmarks/trtllm_online.py --record        # store the held-out rows' errors as the preset's
                                                       # prediction intervals (data/validation/accuracy.json)
"""

from __future__ import annotations

import argparse
import copy
import csv
import itertools
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import published_points as pp  # noqa: E402

import llmsim  # noqa: E402
from llmsim.tables import table  # noqa: E402

TABLE = pp.ROOT / "data" / "validation" / "published" / "trtllm-0.14-online.csv"
# the points.yaml record of each model and GPU: the template of its rows
TEMPLATES = {
    ("LLaMA 3.1 70B", "H100"): "trtllm014-online-llama31-70b-h100-tp4-467-256-qps8-ttft",
    ("LLaMA 3.1 70B", "H200"): "trtllm014-online-llama31-70b-h200-tp4-202-214-qps16-ttft",
    ("LLaMA 3.1 8B", "H100"): "trtllm014-online-llama31-8b-h100-tp1-202-214-qps16-ttft",
    ("LLaMA 3.1 8B", "H200"): "trtllm014-online-llama31-8b-h200-tp1-467-256-qps32-outtput",
}
FIT_MODEL = "LLaMA 3.1 8B"  # its finite-QPS rows fit; the 70B rows check
FIGURES = (("TTFT", "mean_ttft_ms", "mean_ttft_ms"), ("ITL", "mean_itl_ms", "mean_itl_ms"))
OUTPUT = ("output", "output_tokens_per_s", "output_throughput")
# the fit's grid: the step's host seconds and the frontend's (prepare.base_s, output_delay_s)
STEP_GRID_S = tuple(x * 0.25e-3 for x in range(0, 9))
FRONTEND_GRID_S = tuple(x * 1e-3 for x in range(0, 9))


class BadEngine(Exception):
    """--engine names an engine a row's scenario refuses: said in one line, exit 2."""


@dataclass
class Result:
    row: dict  # the table's row
    simulated: dict[str, float]  # the summary's figures
    like: dict  # the kind of run it was (summary accuracy_like: devices, moe), as --record tags it


def load_rows(path: Path = TABLE) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def row_set(row: dict) -> str:
    """fit, check (held out) or INF (every request at once: reported apart)."""
    if row["qps"] == "INF":
        return "INF"
    return "fit" if row["model"] == FIT_MODEL else "check"


def row_id(row: dict) -> str:
    """``LLaMA 3.1 8B | H100 | 467/256 | QPS 2``: a row as the table, the points and the record name it."""
    return f"{row['model']} | {row['gpu'].split()[0]} | {row['input_len']}/{row['output_len']} | QPS {row['qps']}"


def row_point(row: dict, records: dict[str, dict]) -> dict:
    """The published point of one row: its model and GPU's record with the row's lengths and rate."""
    point = copy.deepcopy(records[TEMPLATES[(row["model"], row["gpu"].split()[0])]])
    point["id"] = row_id(row)
    s = point["settings"]
    s.update(input_len=int(row["input_len"]), output_len=int(row["output_len"]), num_requests=500)
    # (INF as the records write it: every request at once, through the same Triton flow)
    point["mode"] = "online"
    s["request_rate"] = "INF" if row["qps"] == "INF" else float(row["qps"])
    point["metric"], point["value"] = "ttft_ms_mean", float(row["mean_ttft_ms"])
    return point


def simulate_row(row: dict, records: dict[str, dict], engine: object = None) -> Result:
    """One row simulated under the mapping's engine, or ``engine`` in its place."""
    mp = pp.map_point(row_point(row, records))
    if mp.scenario is not None and engine is not None:
        mp.scenario["engine"] = engine
    sc = pp.validate(mp) if mp.scenario is not None else None
    if sc is None:
        raise BadEngine(f"{row_id(row)}: {'; '.join(mp.reasons)}")
    s = llmsim.run(sc).summary
    keys = [k for _, _, k in (*FIGURES, OUTPUT)]
    return Result(row, {k: float(s[k]) for k in keys}, s["accuracy_like"])


def error(res: Result, column: str, key: str) -> float:
    return res.simulated[key] / float(res.row[column]) - 1


def score(results: list[Result]) -> float:
    """The fit's objective: the mean |error| of the mean TTFT and mean ITL over ``results``."""
    return statistics.mean(abs(error(r, c, k)) for r in results for _, c, k in FIGURES)


def summary(results: list[Result]) -> list[list[object]]:
    """One line per set and figure: rows, within +-20 %, median |error|, median error."""
    out: list[list[object]] = []
    for name in ("fit", "check", "INF"):
        mine = [r for r in results if row_set(r.row) == name]
        for label, column, key in (*FIGURES, OUTPUT):
            errs = [error(r, column, key) for r in mine]
            if not errs:
                continue
            ok = sum(abs(e) <= pp.OK_BAND for e in errs)
            med_abs = statistics.median(abs(e) for e in errs)
            out.append([name, label, len(errs), ok, f"{med_abs:.1%}", f"{statistics.median(errs):+.1%}"])
    return out


def row_lines(results: list[Result]) -> list[list[object]]:
    lines = []
    for r in results:
        row = r.row
        cells: list[object] = [row_set(row), row["model"].split()[-1], row["gpu"].split()[0]]
        cells += [f"{row['input_len']}/{row['output_len']}", row["qps"]]
        for _, column, key in (*FIGURES, OUTPUT):
            cells += [f"{float(row[column]):,.0f}", f"{r.simulated[key]:,.1f}", f"{error(r, column, key):+.1%}"]
        lines.append(cells)
    return lines


def fit(rows: list[dict], records: dict[str, dict]) -> tuple[float, float, list[list[object]]]:
    """The grid's best (step host seconds, frontend seconds) on the fit rows, and the grid's best lines."""
    fit_rows = [r for r in rows if row_set(r) == "fit"]
    grid = []
    for step_s, front_s in itertools.product(STEP_GRID_S, FRONTEND_GRID_S):
        engine = {"preset": "trtllm-engine", "prepare": {"base_s": step_s}, "output_delay_s": front_s}
        results = [simulate_row(r, records, engine) for r in fit_rows]
        grid.append((score(results), step_s, front_s))
    grid.sort()
    best = [[f"{s * 1e3:.2f}", f"{f * 1e3:.0f}", f"{obj:.2%}"] for obj, s, f in grid[:8]]
    return grid[0][1], grid[0][2], best


RECORD_KIND = "trtllm-0.14-online"


def held_out_scores(results: list[Result]) -> list[dict]:
    """The rows no fit saw (the 70B rows and every INF row), as ``llmsim.accuracy.record`` stores
    runs: each row's mean-TTFT and mean-ITL errors, tagged as its simulation was."""
    return [
        {
            "run": row_id(r.row),
            **r.like,  # (the summary's accuracy_like: devices and moe, as the run was tagged)
            **{f"err_{key}": error(r, column, key) for _, column, key in FIGURES},
        }
        for r in results
        if row_set(r.row) != "fit"
    ]


def engine_arg(text: str | None) -> object:
    if text is None:
        return None
    if not text.lstrip().startswith("{"):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadEngine(f"--engine {text!r}: not a JSON mapping ({exc})") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", help="simulate under this engine: a preset name or a JSON mapping")
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--fit", action="store_true", help="grid-fit the trtllm-engine preset's two terms on the 8B rows")
    ap.add_argument(
        "--record", action="store_true", help="store the held-out rows' errors in data/validation/accuracy.json"
    )
    args = ap.parse_args(argv)
    if args.record and (args.fit or args.engine):
        print("trtllm_online.py: error: --record stores the preset as shipped; drop --fit / --engine", file=sys.stderr)
        return 2
    try:
        return run(args)
    except BadEngine as exc:
        print(f"trtllm_online.py: error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    records = {p["id"]: p for p in pp.load_points()}
    rows = load_rows()
    start = time.perf_counter()
    if args.fit:
        step_s, front_s, best = fit(rows, records)
        print(table(best, ["step host ms", "frontend ms", "mean |error| (fit rows)"], align="rrr"))
        print(f"\nbest: prepare.base_s {step_s:.5f}, output_delay_s {front_s:.4f}")
        engine = {"preset": "trtllm-engine", "prepare": {"base_s": step_s}, "output_delay_s": front_s}
    else:
        engine = engine_arg(args.engine)
    results = [simulate_row(r, records, engine) for r in rows]
    if args.rows:
        head = ["set", "model", "gpu", "lengths", "QPS"]
        for label, _, _ in (*FIGURES, OUTPUT):
            head += [label, "sim", "error"]
        print(table(row_lines(results), head, align="lllll" + "rrr" * 3))
        print()
    head = ["rows", "figure", "n", "within 20%", "median |error|", "median error"]
    print(table(summary(results), head, align="llrrrr"))
    print(
        f"\nmean |error| of mean TTFT and ITL: fit rows {score([r for r in results if row_set(r.row) == 'fit']):.1%}, "
        f"check rows {score([r for r in results if row_set(r.row) == 'check']):.1%}"
    )
    print(f"({len(rows)} rows in {time.perf_counter() - start:.0f} s)")
    if args.record:
        from llmsim.accuracy import record

        source = (
            "TensorRT-LLM 0.14 behind Triton, its published online table (perf-overview.md, v0.17 edition): the 70B "
            "TP4 rows and the INF rows, held out of the trtllm-engine preset's fit (benchmarks/trtllm_online.py)"
        )
        print(f"wrote {record(RECORD_KIND, held_out_scores(results), source, engine='trtllm-engine')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
