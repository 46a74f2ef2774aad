"""TensorRT-LLM's own all-reduce on H100s, measured, priced back by the H100-SXM profile's ring.

``data/validation/collectives/trtllm-1.2.0rc1-h100-custom-allreduce.csv`` (README there) holds
TensorRT-LLM 1.2.0rc1's all-reduce kernel timed on 2 and 4 H100 80GB HBM3 by NVIDIA's
aiconfigurator collector, fp16 messages of 128 elements to 1 GiB. The profile prices every
all-reduce as NCCL's ring (``comm.all_reduce_s``: a latency per hop, bytes at its bus fraction),
which no measurement on H100 has fitted: this prints how far that is from an engine's own kernel,
by message size (a check, nothing is fitted to it).

    python benchmarks/custom_allreduce.py
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from llmsim.costmodel.comm import all_reduce_s, tp_link
from llmsim.hardware import load_profile
from llmsim.tables import table

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "validation" / "collectives" / "trtllm-1.2.0rc1-h100-custom-allreduce.csv"
BANDS = ((0, 2**20, "under 1 MiB"), (2**20, 2**25, "1-32 MiB"), (2**25, 2**40, "32 MiB and up"))


def rows() -> list[tuple[int, int, float, float]]:
    """(ranks, message bytes, measured s, llmsim s) per row of the measurement."""
    hw = load_profile("H100-SXM")
    fraction = hw.efficiency.allreduce_bus_fraction.value
    out = []
    with DATA.open(newline="") as fh:
        for r in csv.DictReader(fh):
            ranks, nbytes = int(r["num_gpus"]), int(r["message_elements"]) * 2  # (fp16)
            priced = all_reduce_s(nbytes, ranks, tp_link(hw, ranks), fraction)
            out.append((ranks, nbytes, float(r["latency_ms"]) * 1e-3, priced))
    return out


def band_rows(data: list[tuple[int, int, float, float]]) -> list[list[object]]:
    """One row per rank count and message band: how many sizes, and the median, least and most error."""
    out: list[list[object]] = []
    for ranks in sorted({r for r, *_ in data}):
        for lo, hi, name in BANDS:
            errs = [p / m - 1 for r, b, m, p in data if r == ranks and lo <= b < hi]
            if errs:
                spread = (statistics.median(errs), min(errs), max(errs))
                out.append([ranks, name, len(errs), *(f"{e:+.0%}" for e in spread)])
    return out


def main() -> int:
    print("H100-SXM's ring all-reduce against TensorRT-LLM 1.2.0rc1's own kernel (llmsim / measured - 1)")
    print(table(band_rows(rows()), ["ranks", "message", "rows", "median", "min", "max"], align="rlrrrr"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
