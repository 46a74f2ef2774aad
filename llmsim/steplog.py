"""steps.csv as it is built: one row per batch step, appended to columns, optionally sampled.

Every row comes through ``StepLog.add`` (a plain step, a step of a closed-form decode run, a
pipelined micro-batch), so the columns are written in one place.
"""

from __future__ import annotations

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


class StepLog:
    """Columnar step records, keeping every ``every``-th step (1 = all, 0 = none)."""

    def __init__(self, every: int = 1) -> None:
        self.every = every
        self.cols: dict[str, list] = {k: [] for k in STEP_COLUMNS}
        self.seen = 0  # steps taken, kept or not

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
        """Rows in time order (decode runs log their steps when the run ends)."""
        df = pd.DataFrame(self.cols, columns=STEP_COLUMNS)
        return df.sort_values(["start_s", "replica"], kind="stable").reset_index(drop=True)
