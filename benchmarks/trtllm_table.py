"""Every cell of TensorRT-LLM 0.17's throughput table, simulated as a user would set it up.

data/validation/published/trtllm-0.17-throughput.csv holds the 373 cells of the "Throughput
Measurements" table of TensorRT-LLM's performance overview (v0.17 edition; README there). Each cell
becomes a published point like the twelve `trtllm017-*` records of points.yaml: the record of its
GPU column is the template (engine flow, KV fraction, precision, profile), and the cell sets the
model, TP degree, lengths, request count and figure. `published_points.run_point` maps, simulates
and scores it, so a cell is priced exactly as those records are.

    python benchmarks/trtllm_table.py                  # summary by GPU, model and TP
    python benchmarks/trtllm_table.py --cells          # and every cell
    python benchmarks/trtllm_table.py --gpu L40S --write cells.csv
"""

from __future__ import annotations

import argparse
import copy
import csv
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import published_points as pp  # noqa: E402

from llmsim.tables import table  # noqa: E402

TABLE = pp.ROOT / "data" / "validation" / "published" / "trtllm-0.17-throughput.csv"

# the table's GPU column -> the points.yaml record of the same page and column used as the template
TEMPLATES = {
    "H200 141GB HBM3": "trtllm017-llama31-405b-h200-tp8-fp8-1000-1000",
    "H100 80GB HBM3": "trtllm017-llama31-70b-h100-tp4-fp8-2048-2048",
    "GH200 480GB": "trtllm017-llama31-8b-gh200-tp1-fp8-128-128",
    "L40S": "trtllm017-llama31-8b-l40s-tp1-fp8-1000-1000",
    "A100-SXM4-80GB": "trtllm017-llama31-8b-a100-tp1-fp16-1000-1000",
}
# the table's model names -> Hugging Face ids (the page: "LLaMA v3.1 8B/70B/405B", base or Instruct
# not stated; the same architecture either way)
MODELS = {
    "LLaMA v3.1 8B": "meta-llama/Llama-3.1-8B",
    "LLaMA v3.1 70B": "meta-llama/Llama-3.1-70B",
    "LLaMA v3.1 405B": "meta-llama/Llama-3.1-405B",
    "Mistral 7B": "mistralai/Mistral-7B-v0.1",
    "Mixtral 8x7B": "mistralai/Mixtral-8x7B-v0.1",
    "Mixtral 8x22B": "mistralai/Mixtral-8x22B-v0.1",
}
# $num_requests per input/output length, the page's own table ("Preparing a Dataset")
REQUESTS = {
    (128, 128): 30000,
    (128, 2048): 3000,
    (128, 4096): 1500,
    (2048, 128): 3000,
    (2048, 2048): 1500,
    (5000, 500): 1500,
    (1000, 1000): 3000,
    (500, 2000): 3000,
    (20000, 2000): 1000,
}


def load_cells(path: Path = TABLE) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cell_point(cell: dict, records: dict[str, dict]) -> dict:
    """The published point of one cell: its GPU column's record with the cell's settings."""
    point = copy.deepcopy(records[TEMPLATES[cell["gpu"]]])
    isl, osl, tp = int(cell["input_len"]), int(cell["output_len"]), int(cell["tp"])
    point["id"] = f"{cell['model']} | {cell['gpu'].split()[0]} | tp{tp} | {isl}/{osl}"
    point["model"] = MODELS[cell["model"]]
    point["parallelism"]["tp"] = point["hardware"]["count"] = tp
    point["settings"].update(input_len=isl, output_len=osl, num_requests=REQUESTS[(isl, osl)])
    point["value"] = float(cell["output_tokens_per_s"])
    return point


def summary_rows(rows: list[tuple[dict, pp.Row]]) -> list[list[object]]:
    """One line per GPU, model and TP degree: cells, within +-20 %, median and range of the error."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for cell, row in rows:
        if row.error is not None:
            groups[(cell["gpu"].split()[0], cell["model"], cell["tp"])].append(row.error)
    out: list[list[object]] = []
    for (gpu, model, tp), errs in sorted(groups.items()):
        ok = sum(abs(e) <= pp.OK_BAND for e in errs)
        out.append(
            [gpu, model, tp, len(errs), ok, f"{statistics.median(errs):+.1%}", f"{min(errs):+.1%}", f"{max(errs):+.1%}"]
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", help="only this GPU column (H200, H100, GH200, L40S, A100-SXM4-80GB)")
    ap.add_argument("--model", help="only this model, as the table names it (e.g. 'Mixtral 8x7B')")
    ap.add_argument("--cells", action="store_true", help="print every cell")
    ap.add_argument("--write", help="write every cell to this CSV")
    args = ap.parse_args(argv)
    records = {p["id"]: p for p in pp.load_points()}
    cells = [
        c
        for c in load_cells()
        if (not args.gpu or c["gpu"].split()[0] == args.gpu) and (not args.model or c["model"] == args.model)
    ]
    start = time.perf_counter()
    rows = [(c, pp.run_point(cell_point(c, records))) for c in cells]
    if args.cells:
        body = [
            [
                r.id,
                f"{r.published:,.0f}",
                f"{r.simulated or 0:,.0f}",
                "-" if r.error is None else f"{r.error:+.1%}",
                r.status,
            ]
            for _, r in rows
        ]
        print(table(body, ["cell", "published", "simulated", "error", "status"], align="lrrrl"))
        print()
    head = ["gpu", "model", "tp", "cells", "within 20%", "median error", "min", "max"]
    print(table(summary_rows(rows), head, align="llrrrrrr"))
    print(f"\n{pp.summary_line([r for _, r in rows])}")
    by_gpu: dict[str, list[pp.Row]] = defaultdict(list)
    for c, r in rows:
        by_gpu[c["gpu"].split()[0]].append(r)
    for gpu, rs in by_gpu.items():
        ok = sum(r.status == "ok" for r in rs)
        print(f"  {gpu}: {ok} of {len(rs)} within +-20%")
    print(f"({len(rows)} cells in {time.perf_counter() - start:.0f} s)")
    if args.write:
        pp.write_csv([r for _, r in rows], Path(args.write))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
