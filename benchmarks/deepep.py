"""DeepEP's published kernel timings (data/calibration/deepep/) priced back by llmsim's DeepEP model.

Each row of DeepEP's V1 README tables (H800s, NVLink rated 200 GB/s a direction, one 400 Gb/s NIC a
GPU, eight GPUs a node) is turned into the time it measured (a bandwidth row: the bytes DeepEP's test
counts over that bandwidth, under the test's own routing) and priced with ``comm.deepep_s`` on links
of those rates and that routing. These rows are where the model's constants come from: the table
shows how well one set of constants holds them all (in-sample), not a validation.

    python benchmarks/deepep.py
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from llmsim.costmodel.comm import deepep_s
from llmsim.costmodel.ops import deepep_token_bytes, nodes_reached
from llmsim.hardware import Link
from llmsim.tables import table

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "calibration" / "deepep" / "legacy_readme.csv"
NODE_GPUS = 8


def _link(name: str, rate: float, source: str) -> Link:
    fig = {"value": rate, "source": source}
    return Link(name=name, bandwidth_bytes_per_s=fig, latency_s={"value": 0.0, "source": "not used by deepep_s"})


NVLINK = _link("NVLink (H800)", 200e9, "NVIDIA H800 SXM datasheet: NVLink 400 GB/s, both directions")
RDMA = _link("ConnectX-7 400 Gb/s", 50e9, "400 Gb/s InfiniBand NDR = 50 GB/s a direction")


def test_groups(r: dict) -> tuple[int, int]:
    """The routing of DeepEP's own test for the row (tests/test_intranode.py, test_internode.py):
    a plain top-8 within one node; across nodes, 4 of the nodes picked first (``min(nodes, 4)``
    groups, one a node), then the top-8 experts within them."""
    nodes = -(-int(r["ep"]) // NODE_GPUS)
    if r["kernels"] == "low_latency" or nodes == 1:
        return (0, 0)
    return (nodes, min(nodes, 4))


def row_bytes(hidden: int, dtype: str) -> int:
    """One token's payload: FP8 with its scales, or BF16 (``ops.deepep_token_bytes``)."""
    return deepep_token_bytes(hidden, dtype == "fp8")


def measured_s(r: dict) -> float:
    """The row's time: a latency as given, or the bytes DeepEP's test counts over its bandwidth
    (every (token, node) pair a token reaches over RDMA, (token, GPU) pair within one node)."""
    if r["unit"] == "us":
        return float(r["measured"]) * 1e-6
    ep, tokens = int(r["ep"]), int(r["tokens"])
    units = ep if r["link"] == "NVLink" else -(-ep // NODE_GPUS)
    pairs = nodes_reached(units, int(r["topk"]), test_groups(r))
    return tokens * pairs * row_bytes(int(r["hidden"]), r["dispatch_dtype"]) / (float(r["measured"]) * 1e9)


def main() -> int:
    rows = []
    with DATA.open() as f:
        for r in csv.DictReader(f):
            real = measured_s(r)
            priced = deepep_s(
                int(r["tokens"]),
                row_bytes(int(r["hidden"]), r["dispatch_dtype"]),
                int(r["topk"]),
                int(r["ep"]),
                NODE_GPUS,
                r["kernels"] == "low_latency",
                r["op"] == "combine",
                NVLINK,
                RDMA,
                test_groups(r),
            )
            rows.append(
                [
                    r["kernels"],
                    r["op"],
                    r["ep"],
                    f"{real * 1e6:,.0f}",
                    f"{priced * 1e6:,.0f}",
                    f"{priced / real - 1:+.1%}",
                ]
            )
    print("DeepEP V1's measured kernels (docs/legacy.md) against comm.deepep_s on the same links (in-sample)")
    print(table(rows, ["kernels", "op", "EP", "measured us", "llmsim us", "err"], align="llrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
