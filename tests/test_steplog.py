"""steps.csv's rows as they are built (llmsim/steplog.py): packed into typed arrays as they come,
read back as the same table."""

from __future__ import annotations

import pandas as pd

import llmsim.steplog as steplog
from llmsim.steplog import STEP_COLUMNS, StepLog


def _rows(n: int) -> list[tuple]:
    # the types add() declares (compiled, it makes an int given for a float a float), two pools
    return [
        ("prefill" if i % 3 else "decode", i % 4, 0.01 * i, 0.002, 16 * (i % 2), i % 7, 1 + i % 9, 0, 40 + i, 1000,
         0.25, i % 5, 0.0 if i < n // 2 else 0.5 * i, 0.0, 0)
        for i in range(n)
    ]  # fmt: skip


def test_packed_rows_read_back_as_the_rows_as_given(monkeypatch) -> None:
    """A long run's steps are packed every PACK_ROWS rows (8 bytes a cell where a list of boxed
    numbers took ~600 bytes a row: a 1M-request run's steps needed ~17 GB); the table, its order
    and its column types are those of the rows as given."""
    monkeypatch.setattr(steplog, "PACK_ROWS", 7)
    rows = _rows(50)
    log = StepLog()
    for r in rows:
        log.add(*r)
    assert log.packed["start_s"], "the rows were not packed"
    got = log.frame()
    want = pd.DataFrame([dict(zip(STEP_COLUMNS, (*r[:9], r[8] / r[9], *r[10:]), strict=True)) for r in rows])
    want = want.sort_values(["start_s", "replica"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
    short = StepLog()
    for r in rows[:5]:
        short.add(*r)
    pd.testing.assert_frame_equal(short.frame(), want.iloc[:5].reset_index(drop=True))
