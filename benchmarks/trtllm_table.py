"""Every cell of TensorRT-LLM's published throughput tables, simulated as a user would set it up.

data/validation/published/ holds two whole tables of TensorRT-LLM's performance overview (README
there): `trtllm-0.17-throughput.csv`, the 373 cells of the v0.17 edition (TensorRT engines), and
`trtllm-1.0-throughput.csv`, the 146 cells of the dense models of the v1.0 edition (PyTorch backend,
Blackwell FP4, pipeline parallelism on RTX PRO 6000). Each cell becomes a published point like the
`trtllm017-*` / `trtllm10-*` records of points.yaml: the record of its GPU column is the template
(engine flow, KV fraction, precision, profile), and the cell sets the model, TP and PP degrees,
lengths, request count and figure. `published_points.run_point` maps, simulates and scores it, so a
cell is priced exactly as those records are.

    python benchmarks/trtllm_table.py                        # both tables: summary by GPU, model, TP, PP
    python benchmarks/trtllm_table.py --table 1.0 --cells    # one table, every cell
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
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import published_points as pp  # noqa: E402

from llmsim.tables import table  # noqa: E402

PUBLISHED = pp.ROOT / "data" / "validation" / "published"
# $num_requests per input/output length, the pages' own table ("Preparing a Dataset")
REQUESTS = {
    (128, 128): 30000,
    (128, 2048): 3000,
    (128, 4096): 1500,
    (1000, 2000): 1500,
    (2048, 128): 3000,
    (2048, 2048): 1500,
    (5000, 500): 1500,
    (1000, 1000): 3000,
    (500, 2000): 3000,
    (20000, 2000): 1000,
}


@dataclass(frozen=True)
class Table:
    path: Path
    templates: dict[str, str]  # the table's GPU column -> the points.yaml record of its page and column
    models: dict[str, str]  # the table's model names -> Hugging Face ids


TABLES = {
    "0.17": Table(
        PUBLISHED / "trtllm-0.17-throughput.csv",
        {
            "H200 141GB HBM3": "trtllm017-llama31-405b-h200-tp8-fp8-1000-1000",
            "H100 80GB HBM3": "trtllm017-llama31-70b-h100-tp4-fp8-2048-2048",
            "GH200 480GB": "trtllm017-llama31-8b-gh200-tp1-fp8-128-128",
            "L40S": "trtllm017-llama31-8b-l40s-tp1-fp8-1000-1000",
            "A100-SXM4-80GB": "trtllm017-llama31-8b-a100-tp1-fp16-1000-1000",
        },
        # the page: "LLaMA v3.1 8B/70B/405B", base or Instruct not stated (the same architecture)
        {
            "LLaMA v3.1 8B": "meta-llama/Llama-3.1-8B",
            "LLaMA v3.1 70B": "meta-llama/Llama-3.1-70B",
            "LLaMA v3.1 405B": "meta-llama/Llama-3.1-405B",
            "Mistral 7B": "mistralai/Mistral-7B-v0.1",
            "Mixtral 8x7B": "mistralai/Mixtral-8x7B-v0.1",
            "Mixtral 8x22B": "mistralai/Mixtral-8x22B-v0.1",
        },
    ),
    "1.0": Table(
        PUBLISHED / "trtllm-1.0-throughput.csv",
        {
            "B200": "trtllm10-llama33-70b-b200-tp1-fp4-1000-1000",
            "GB200": "trtllm10-llama33-70b-gb200-tp1-fp4-128-2048",
            "H200": "trtllm10-llama31-8b-h200-tp1-fp8-1000-1000",
            "H100": "trtllm10-llama31-8b-h100-tp1-fp8-1000-1000",
            "RTX6000Pro": "trtllm10-llama33-70b-rtx6000pro-tp1pp1-fp4-1000-1000",
        },
        # ModelOpt's FP8 / FP4 checkpoints of the Instruct models (the page's model lists)
        {
            "Llama 3.1 8B": "meta-llama/Llama-3.1-8B-Instruct",
            "Llama 3.3 70B": "meta-llama/Llama-3.3-70B-Instruct",
            "Llama 3.1 405B": "meta-llama/Llama-3.1-405B-Instruct",
        },
    ),
}


def load_cells(name: str) -> list[dict]:
    """The table's cells, each with its table's name (``table``) and a PP degree (1 where the
    table has no PP column)."""
    with open(TABLES[name].path, newline="") as f:
        return [{"pp": "1", **c, "table": name} for c in csv.DictReader(f)]


def cell_point(cell: dict, records: dict[str, dict]) -> dict:
    """The published point of one cell: its GPU column's record with the cell's settings."""
    tab = TABLES[cell["table"]]
    point = copy.deepcopy(records[tab.templates[cell["gpu"]]])
    isl, osl, tp, pp_ = int(cell["input_len"]), int(cell["output_len"]), int(cell["tp"]), int(cell["pp"])
    split = f"tp{tp}" + (f"pp{pp_}" if pp_ > 1 else "")
    point["id"] = f"{cell['table']} | {cell['model']} | {cell['gpu'].split()[0]} | {split} | {isl}/{osl}"
    point["model"] = tab.models[cell["model"]]
    point["parallelism"].update(tp=tp, pp=pp_)
    point["hardware"]["count"] = tp * pp_
    point["settings"].update(input_len=isl, output_len=osl, num_requests=REQUESTS[(isl, osl)])
    point["value"] = float(cell["output_tokens_per_s"])
    return point


def summary_rows(rows: list[tuple[dict, pp.Row]]) -> list[list[object]]:
    """One line per table, GPU, model, TP and PP: cells, within +-20 %, median and range of the error."""
    groups: dict[tuple[str, str, str, str, str], list[float]] = defaultdict(list)
    for cell, row in rows:
        if row.error is not None:
            key = (cell["table"], cell["gpu"].split()[0], cell["model"], cell["tp"], cell["pp"])
            groups[key].append(row.error)
    out: list[list[object]] = []
    for key, errs in sorted(groups.items()):
        ok = sum(abs(e) <= pp.OK_BAND for e in errs)
        out.append([*key, len(errs), ok, f"{statistics.median(errs):+.1%}", f"{min(errs):+.1%}", f"{max(errs):+.1%}"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", choices=[*TABLES, "all"], default="all", help="which edition's table")
    ap.add_argument("--gpu", help="only this GPU column, by its first word (H200, L40S, A100-SXM4-80GB, RTX6000Pro)")
    ap.add_argument("--model", help="only this model, as the table names it (e.g. 'Mixtral 8x7B')")
    ap.add_argument("--cells", action="store_true", help="print every cell")
    ap.add_argument("--write", help="write every cell to this CSV")
    args = ap.parse_args(argv)
    records = {p["id"]: p for p in pp.load_points()}
    names = list(TABLES) if args.table == "all" else [args.table]
    cells = [
        c
        for name in names
        for c in load_cells(name)
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
    head = ["table", "gpu", "model", "tp", "pp", "cells", "within 20%", "median error", "min", "max"]
    print(table(summary_rows(rows), head, align="lllrrrrrrr"))
    print()
    for name in names:
        mine = [(c, r) for c, r in rows if c["table"] == name]
        by_gpu: dict[str, list[pp.Row]] = defaultdict(list)
        for c, r in mine:
            by_gpu[c["gpu"].split()[0]].append(r)
        gpus = ", ".join(f"{g} {sum(r.status == 'ok' for r in rs)} of {len(rs)}" for g, rs in by_gpu.items())
        print(f"{name}: {pp.summary_line([r for _, r in mine])}\n  within +-20% by GPU: {gpus}")
    print(f"({len(rows)} cells in {time.perf_counter() - start:.0f} s)")
    if args.write:
        pp.write_csv([r for _, r in rows], Path(args.write))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
