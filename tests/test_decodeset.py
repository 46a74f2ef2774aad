"""DecodeSet: decoding requests held as columns give each request the counters, times and gaps
it would have had if it were stepped one by one."""

from __future__ import annotations

import random

import numpy as np
import pytest

from llmsim.decodeset import DecodeSet
from llmsim.gaps import GapHistogram
from llmsim.kvcache import BlockManager
from llmsim.request import FINISHED, Request


def _joined(kv: BlockManager, rid: int, prompt: int, output: int, now: float) -> Request:
    """A request whose prompt is done (its blocks held) and whose first token came out at ``now``."""
    r = Request(rid, 0.0, prompt, output)
    kv.allocate(r, prompt)
    r.kv_tokens = r.prefilled = prompt
    r.generated = 1
    r.first_token_s = r.last_token_s = now
    r.admit_seq = rid
    return r


@pytest.mark.parametrize("trim_ticks", [4096, 4])  # 4: end times are trimmed often
def test_columns_match_stepping_each_request(trim_ticks: int) -> None:
    rng = random.Random(7)
    bt = 16
    kv = BlockManager(100_000, bt, track_ids=False)  # as on a simulated columnar replica
    gaps = GapHistogram()
    cols = DecodeSet(kv, gaps, trim_ticks)
    plain: dict[int, dict] = {}  # the same requests stepped one by one
    plain_gaps: list[float] = []
    now, rid = 0.0, 0
    for _ in range(400):
        if rng.random() < 0.3:  # a prompt finishes and its request joins
            r = _joined(kv, rid, rng.randint(1, 70), rng.randint(2, 40), now)
            plain[rid] = {"kv": r.kv_tokens, "gen": 1, "last": now, "max": 0.0, "out": r.output_tokens, "req": r}
            cols.add(r)
            rid += 1
        if not cols.n:
            now += 0.01
            continue
        need = cols.blocks_next()
        want = sum(1 for p in plain.values() if p["kv"] % bt == 0 and p["gen"] < p["out"])
        assert need == want  # members sitting exactly at a block boundary need one more block
        cols.allocate(need)
        now += rng.uniform(0.005, 0.05)
        finishing = {i for i, p in plain.items() if p["gen"] == p["out"] - 1}
        done = cols.tick_once(now)
        for p in plain.values():
            if p["gen"] < p["out"]:
                plain_gaps.append(now - p["last"])
                p["max"] = max(p["max"], now - p["last"])
                p["kv"] += 1
                p["gen"] += 1
                p["last"] = now
        assert {r.id for r in done} == finishing
        for r in done:
            assert r.status == FINISHED and r.finish_s == now and r.blocks == 0
    for r in cols.flush():
        assert r.status != FINISHED
    for p in plain.values():
        r = p["req"]
        assert (r.kv_tokens, r.generated) == (p["kv"], p["gen"])
        assert r.last_token_s == p["last"]
        assert r.max_tbt_s == p["max"]
    expected = GapHistogram()
    for g in plain_gaps:
        expected.add(g)
    assert expected.total == gaps.total
    assert np.array_equal(expected.counts, gaps.counts)
    assert kv.used == sum(-(-p["kv"] // bt) for p in plain.values() if p["req"].status != FINISHED)
