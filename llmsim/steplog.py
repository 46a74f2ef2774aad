"""steps.csv as it is built: one row per batch step, appended to columns, optionally sampled.

Every row comes through ``StepLog.add`` (a plain step, a step of a closed-form decode run, a
pipelined micro-batch), so the columns are written in one place.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmsim.kvcache import BlockManager
from llmsim.schedulers.plan import BatchPlan

STEP_COLUMNS = [
    "pool",
    "replica",
    "start_s",
    "duration_s",
    "prefill_tokens",
    "decode_tokens",
    "batch_size",
    "preempted",
    "kv_blocks_used",
    "kv_utilization",
    "kv_fragmentation",
    "waiting",
    "swap_s",
    "draft_s",
    "spec_tokens",
]


# Rows kept as Python lists (a boxed float is 32 bytes) before they are packed into typed arrays
# (8 bytes a cell): a 1M-request run logs tens of millions of steps, ~600 bytes each in lists,
# ~120 packed
PACK_ROWS = 1 << 16
_UNPACKED = ("pool",)  # (one shared str per row: the list holds references only)
# Rows a log keeps at most, ~2 GB packed (120 bytes a row). A run's steps are not bounded by its
# requests (100,000 requests of 10,000 tokens decoded one at a time are 10**9 steps), so past this
# the log keeps every other row it holds and samples half as often from then on: the table reads
# as ``output.steps: sample`` with the interval doubled (``every``), whatever the run's length
MAX_ROWS = 1 << 24


class StepLog:
    """Columnar step records, keeping every ``every``-th step (1 = all, 0 = none)."""

    def __init__(self, every: int = 1, max_rows: int | None = None) -> None:
        self.every = every  # keep every ``every``-th step; doubles each time the rows reach max_rows
        self.max_rows = MAX_ROWS if max_rows is None else max_rows
        self.cols: dict[str, list] = {k: [] for k in STEP_COLUMNS}
        self.packed: dict[str, list[np.ndarray]] = {k: [] for k in STEP_COLUMNS if k not in _UNPACKED}
        self.seen = 0  # steps taken, kept or not
        self.unpacked_rows = 0
        self.packed_rows = 0

    def skip(self, steps: int) -> bool:
        """Count ``steps`` steps without rows when steps.csv is off; True if so."""
        if self.every:
            return False
        self.seen += steps
        return True

    def add(
        self,
        pool: str,
        replica: int,
        start_s: float,
        duration_s: float,
        prefill_tokens: int,
        decode_tokens: int,
        batch_size: int,
        preempted: int,
        kv_blocks_used: int,
        kv_blocks: int,
        kv_fragmentation: float,
        waiting: int,
        swap_s: float,
        draft_s: float,
        spec_tokens: int,
    ) -> None:
        self.seen += 1
        if not self.every or (self.seen - 1) % self.every:
            return
        c = self.cols
        c["pool"].append(pool)
        c["replica"].append(replica)
        c["start_s"].append(start_s)
        c["duration_s"].append(duration_s)
        c["prefill_tokens"].append(prefill_tokens)
        c["decode_tokens"].append(decode_tokens)
        c["batch_size"].append(batch_size)
        c["preempted"].append(preempted)
        c["kv_blocks_used"].append(kv_blocks_used)
        c["kv_utilization"].append(kv_blocks_used / kv_blocks)
        c["kv_fragmentation"].append(kv_fragmentation)
        c["waiting"].append(waiting)
        c["swap_s"].append(swap_s)
        c["draft_s"].append(draft_s)
        c["spec_tokens"].append(spec_tokens)
        self.unpacked_rows += 1
        if self.unpacked_rows >= PACK_ROWS:
            self.pack()
            if self.packed_rows >= self.max_rows:
                self.thin()

    def pack(self) -> None:
        """Move the rows held in lists into typed arrays (numpy infers each column's type as pandas
        would from the list: int64, float64 where any cell is a float)."""
        if not self.unpacked_rows:  # (an empty list would pack as float64 and upcast an int column)
            return
        for k, chunks in self.packed.items():
            chunks.append(np.asarray(self.cols[k]))
            self.cols[k] = []
        self.packed_rows += self.unpacked_rows
        self.unpacked_rows = 0

    def thin(self) -> None:
        """Keep every other row held (the 1st, 3rd, ... as they came) and sample half as often: the
        rows are then those that ``every`` twice as large would have kept. Called with every row
        packed; each piece is copied and let go in turn, so the peak is one piece over the log."""
        for chunks in self.packed.values():
            at = 0  # (the rows' index over all pieces: a piece of odd length shifts the next one's)
            for i, piece in enumerate(chunks):
                chunks[i] = piece[at % 2 :: 2].copy()
                at += len(piece)
        for k in _UNPACKED:
            self.cols[k] = self.cols[k][::2]
        self.packed_rows = sum(len(p) for p in self.packed["start_s"])
        self.every *= 2

    def add_plan(
        self,
        pool: str,
        replica: int,
        plan: BatchPlan,
        start_s: float,
        duration_s: float,
        kv: BlockManager,
        waiting: int,
        swap_s: float,
        draft_s: float,
    ) -> None:
        """The row of a step that ran ``plan``, with the KV cache as the step left it (the caller
        asked ``skip(1)`` first)."""
        self.add(
            pool,
            replica,
            start_s,
            duration_s,
            plan.prefill_tokens,
            plan.num_decode,
            plan.size,
            len(plan.preempted),
            kv.used,
            kv.num_blocks,
            kv.fragmentation,
            waiting,
            swap_s,
            draft_s,
            plan.spec_k,
        )

    def frame(self) -> pd.DataFrame:
        """Rows in time order (decode runs log their steps when the run ends), once: the log hands
        its columns over, each packed piece let go as it is joined (a run's steps are its largest
        table, and a second copy of it was most of a long run's peak memory)."""
        self.pack()
        if not self.packed["start_s"]:
            return pd.DataFrame(self.cols, columns=STEP_COLUMNS)
        start, replica = np.concatenate(self.packed["start_s"]), np.concatenate(self.packed["replica"])
        order = np.lexsort((replica, start))  # (stable: by start_s, then replica, as they came)
        data: dict[str, object] = {}
        for k in STEP_COLUMNS:
            if k in self.packed:
                data[k] = np.concatenate(self.packed[k])[order]
                self.packed[k] = []
            else:
                data[k] = np.asarray(self.cols[k], dtype=object)[order]
                self.cols[k] = []
        return pd.DataFrame(data, columns=STEP_COLUMNS, copy=False)
