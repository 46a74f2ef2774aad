"""steps.csv's rows as they are built (llmsim/steplog.py): packed into typed arrays as they come,
read back as the same table."""

from __future__ import annotations

from pathlib import Path

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


def test_a_log_past_its_bound_keeps_what_a_doubled_interval_would(monkeypatch) -> None:
    """A run's steps are not bounded by its requests (one request decoded alone is a step a
    token), so a log holding MAX_ROWS rows keeps every other one and samples half as often: the
    table is then exactly what ``output.steps: sample`` with that interval keeps, pieces of odd
    length and an interval asked for included."""
    rows = _rows(500)
    for pack, every in ((8, 1), (7, 3)):
        monkeypatch.setattr(steplog, "PACK_ROWS", pack)
        log = StepLog(every=every, max_rows=40)
        for r in rows:
            log.add(*r)
        assert log.every >= 4 * every, "the bound never thinned the log"
        assert log.packed_rows + log.unpacked_rows <= 40 + pack
        want = StepLog(every=log.every, max_rows=10**9)
        for r in rows:
            want.add(*r)
        pd.testing.assert_frame_equal(log.frame(), want.frame())


def test_a_run_past_the_bound_says_its_steps_table_is_sampled(monkeypatch) -> None:
    """The run's summary and its text name the interval kept when the bound sampled the table."""
    import llmsim
    from llmsim.commands.run import summary_text
    from llmsim.scenario import scenario_from_dict

    monkeypatch.setattr(steplog, "PACK_ROWS", 16)
    monkeypatch.setattr(steplog, "MAX_ROWS", 64)
    sc = scenario_from_dict(
        {
            "name": "bound",
            "model": "gpt2",
            "hardware": "H100-SXM",
            "workload": {
                "kind": "poisson",
                "rate_rps": 2,
                "duration_s": 5,
                "prompt_tokens": {"dist": "fixed", "value": 64},
                "output_tokens": {"dist": "fixed", "value": 200},
            },
        },
        "bound.yaml",
        Path(__file__).parent,
    )
    res = llmsim.run(sc)
    t = res.summary["steps_table"]
    assert t["asked_every"] == 1 and t["kept_every"] >= 4 and t["rows"] == len(res.steps) <= 64 + 16
    assert res.summary["steps_total"] > 4 * t["rows"] // 2
    assert f"keeps one step in {t['kept_every']:,}" in summary_text(res.summary)


def test_the_report_s_timeline_draws_a_long_table_as_its_envelope() -> None:
    """A replica's batch-size and KV lines keep at most plots.TIMELINE_POINTS points: each run of
    samples drawn as its lowest and highest, in time order, so every peak and trough is kept; a
    short line is drawn whole."""
    import numpy as np

    from llmsim.plots import TIMELINE_POINTS, envelope

    rng = np.random.RandomState(0)
    t = np.arange(200_000, dtype=float)
    y = rng.randint(0, 256, size=t.size).astype(float)
    y[123_457] = 999.0  # (one spike: a decimation that strides over it loses it)
    tt, yy = envelope(t, y)
    assert len(tt) <= TIMELINE_POINTS and np.all(np.diff(tt) > 0)
    assert yy.max() == 999.0 and yy.min() == y.min()
    short = t[:100], y[:100]
    assert all(a is b for a, b in zip(envelope(*short), short, strict=True))
