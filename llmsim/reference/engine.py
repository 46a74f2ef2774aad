"""The reference inference engine: the simulator's own scheduler decisions, executed for real.

The engine holds the same objects a simulated replica holds (``BlockManager`` and a scheduler
from ``make_scheduler``), calls ``schedule`` and ``complete`` exactly as ``llmsim.sim.Replica``
does, and in between runs the plan through the NumPy model and reads ``time.perf_counter``.
Physical KV blocks are the manager's: ``req.block_ids`` is the block table the model indexes
its paged cache with (so prefix sharing and preemption act on real K/V).

Clock: time is measured while there is work; when the engine is idle it jumps to the next
arrival instead of sleeping (the simulator does the same), so a trace with gaps does not cost
real waiting. Each step's duration is measured, never modelled. ``clock="wall"`` reads
``time.perf_counter``; ``clock="cpu"`` reads this process's CPU time (``time.process_time``),
which equals wall time on an idle machine when NumPy runs one BLAS thread, and does not count
the time other processes of a shared machine take from it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from llmsim.costmodel.ops import BatchShape
from llmsim.kvcache import BlockManager
from llmsim.reference.model import Model, PagedKVCache, Segment, Weights
from llmsim.request import REJECTED, Request
from llmsim.schedulers import BatchPlan, SchedulerConfig, make_scheduler


@dataclass
class EngineOutput:
    requests: list[Request]
    steps: pd.DataFrame  # start_s, duration_s, forward_s, prefill_tokens, decode_tokens, batch_size
    shapes: list[BatchShape] = field(default_factory=list)  # each step's plan.shape(), for pricing it


class ReferenceEngine:
    def __init__(
        self,
        weights: Weights,
        policy: str,
        sched_cfg: SchedulerConfig,
        num_blocks: int,
        block_tokens: int,
        watermark: float = 0.01,
        seed: int = 0,
        clock: str = "wall",
    ) -> None:
        self.clock = CLOCKS[clock]
        self.weights = weights
        self.kv = BlockManager(num_blocks, block_tokens, watermark)
        self.sched = make_scheduler(policy, sched_cfg, self.kv)
        self.cache = PagedKVCache(weights.spec, block_tokens, weights.dtype)
        self.model = Model(weights, self.cache)
        self.window = weights.spec.sliding_window
        self.rng = np.random.default_rng(seed)

    # ---- one step ----------------------------------------------------------------------
    def _sync_blocks(self, reqs: list[Request]) -> None:
        """The manager hands out physical block ids (``req.block_ids``); make them addressable."""
        top = max((max(r.block_ids) for r in reqs if r.block_ids), default=-1)
        self.cache.ensure(top)

    def segments(self, plan: BatchPlan) -> list[Segment]:
        """The plan as model segments; token ids come from each request's payload (prompt + generated)."""
        segs = []
        for r, c in plan.prefill:
            toks = r.payload[r.kv_tokens : r.kv_tokens + c]  # type: ignore[index]
            done = r.prefilled + c == r.prefill_target
            segs.append(Segment(np.asarray(toks), r.kv_tokens, r.block_ids, "prefill", "last" if done else "none"))
        for r in plan.decode:
            tok = r.payload[r.kv_tokens]  # type: ignore[index]
            segs.append(Segment(np.asarray([tok]), r.kv_tokens, r.block_ids, "decode", "last"))
        return segs

    def execute(self, plan: BatchPlan) -> None:
        """Run the plan's tokens through the model and append each sampled (greedy) token."""
        self._sync_blocks([*(r for r, _ in plan.prefill), *plan.decode])
        segs = self.segments(plan)
        logits = self.model.forward(segs)
        owners = [r for r, _ in plan.prefill] + list(plan.decode)
        for r, lg in zip(owners, logits, strict=True):
            if lg is not None:  # this row samples: complete() will count it as generated
                r.payload.append(int(np.argmax(lg[-1])))  # type: ignore[union-attr]

    # ---- a whole workload ----------------------------------------------------------------
    def new_request(self, rid: int, arrival_s: float, prompt_tokens: int, output_tokens: int) -> Request:
        r = Request(rid, arrival_s, prompt_tokens, output_tokens)
        r.payload = [int(t) for t in self.rng.integers(0, self.weights.spec.vocab_size, prompt_tokens)]
        return r

    def run(self, requests: list[Request]) -> EngineOutput:
        """Serve ``requests`` (sorted by arrival) to completion; stamp their times; log every step."""
        waiting: deque[Request] = deque()
        running: list[Request] = []
        cols: dict[str, list] = {k: [] for k in STEP_COLUMNS}
        shapes: list[BatchShape] = []
        clock = self.clock
        start, skipped, i, n = clock(), 0.0, 0, len(requests)

        def now() -> float:
            return clock() - start + skipped

        while i < n or waiting or running:
            t = now()
            while i < n and requests[i].arrival_s <= t:
                self._submit(requests[i], waiting)
                i += 1
            if not waiting and not running:
                skipped += requests[i].arrival_s - t  # idle: jump to the next arrival
                continue
            t0 = now()
            plan = self.sched.schedule(waiting, running)
            if plan.empty:
                if i >= n:
                    raise RuntimeError("reference engine stalled: requests wait but nothing can be scheduled")
                skipped += max(0.0, requests[i].arrival_s - now())
                continue
            g0 = clock()
            shapes.append(plan.shape(self.window))  # for the log only: its time is not the engine's
            skipped -= clock() - g0
            f0 = now()
            self.execute(plan)
            f1 = now()
            self.sched.complete(plan, f1, running)
            t1 = now()
            row = (t0, t1 - t0, f1 - f0, plan.prefill_tokens, len(plan.decode), plan.size, len(plan.preempted))
            for k, v in zip(STEP_COLUMNS, row, strict=True):
                cols[k].append(v)
        return EngineOutput(requests, pd.DataFrame(cols), shapes)

    def _submit(self, r: Request, waiting: deque[Request]) -> None:
        reason = self.sched.rejection_reason(r)
        if reason:
            r.status, r.reject_reason = REJECTED, reason
            return
        waiting.append(r)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
STEP_COLUMNS = ["start_s", "duration_s", "forward_s", "prefill_tokens", "decode_tokens", "batch_size", "preempted"]
