"""The reference inference engine: the simulator's own scheduler decisions, executed for real.

The engine holds the same objects a simulated replica holds (``BlockManager`` and a scheduler
from ``make_scheduler``, the one factory both use), calls ``schedule`` and ``complete`` exactly
as ``llmsim.replica.Replica`` does, and in between runs the plan through the NumPy model and reads
``time.perf_counter``.
Physical KV blocks are the manager's: ``req.block_ids`` is the block table the model indexes
its paged cache with (so prefix sharing and preemption act on real K/V).

Clock: time is measured while there is work; when the engine is idle it jumps to the next
arrival instead of sleeping (the simulator does the same), so a trace with gaps does not cost
real waiting. Each step's duration is measured, never modelled. ``clock="wall"`` reads
``time.perf_counter``; ``clock="cpu"`` reads this process's CPU time (``time.process_time``),
which equals wall time on an idle machine when NumPy runs one BLAS thread, and does not count
the time other processes of a shared machine take from it. A callable clock can be injected.

Drift normalisation (``probe=SpeedProbe(...)``): a shared VM changes speed during a run (its
host's other tenants come and go), which no process clock removes. Every ``interval_s`` of
engine time the engine times a fixed step of a separate probe model (outside the engine's
clock, like the log bookkeeping), divides it by that step's time at calibration, and advances
its clock by each step's measured duration divided by this speed factor (the median of the
last ``window`` probes). The engine then runs on the clock of the machine the profile was
calibrated on. The steps table keeps every step's raw duration, its factor and its normalised
duration; ``EngineOutput.raw_times`` maps the normalised timeline back to the raw one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from llmsim.costmodel.ops import BatchShape
from llmsim.kvcache import BlockManager
from llmsim.reference.model import Model, Segment
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.weights import Weights
from llmsim.request import REJECTED, Request
from llmsim.schedulers import BatchPlan, SchedulerConfig, make_scheduler


@dataclass
class SpeedProbe:
    """How fast this machine runs now, relative to when the profile was calibrated.

    ``measure()`` times one fixed step (seconds, on the engine's raw clock); its ratio to
    ``reference_s`` (the same step at calibration) is one probe's speed factor (> 1: slower now).
    The factor the engine applies is the median of the last ``window`` probes, which discards a
    single probe disturbed by a momentary hiccup but follows a slow spell within a few probes.
    """

    measure: Callable[[], float]
    reference_s: float
    # a probe every 0.1 s of engine time, the median of the last 3: on this VM the speed wanders on
    # a scale of seconds and a ~0.3 s causal median tracks it best (docs/reference.md, section 4)
    interval_s: float = 0.1
    window: int = 3
    samples: list[tuple[float, float]] = field(default_factory=list)  # (engine time, factor) per probe

    def sample(self, at_s: float) -> float:
        """Time the probe step once (the first time, enough times to fill the window); return the
        smoothed factor."""
        while True:
            self.samples.append((at_s, self.measure() / self.reference_s))
            if len(self.samples) > self.window:
                return self.factor

    @property
    def factor(self) -> float:
        recent = [f for _, f in self.samples[-self.window :]]
        return float(np.median(recent)) if recent else 1.0


@dataclass
class EngineOutput:
    requests: list[Request]
    steps: pd.DataFrame  # one row per step, columns STEP_COLUMNS (engine clock, raw clock, speed factor)
    shapes: list[BatchShape] = field(default_factory=list)  # each step's plan.shape(), for pricing it
    probes: list[tuple[float, float]] = field(default_factory=list)  # (engine time, factor) per probe
    prefill_probes: list[tuple[float, float]] = field(default_factory=list)  # the same, of the prefill probe

    def raw_times(self, times_s: pd.Series | np.ndarray | list) -> np.ndarray:
        """Engine-clock timestamps taken during steps (as requests are stamped) on the raw clock of the same run."""
        return self.retimed(times_s, self.steps["raw_duration_s"].to_numpy())

    def retimed(self, times_s: pd.Series | np.ndarray | list, durations_s: np.ndarray) -> np.ndarray:
        """Engine-clock timestamps on the timeline of the same steps taking ``durations_s`` (e.g. as
        measured, or as the cost model prices them): each step starts when the previous one ends, but
        not before the arrivals it serves (``ready_s``). A timestamp inside a step keeps its fraction
        of the step, so stamps map exactly when the durations are the engine's own, rescaled."""
        st = self.steps
        times = np.asarray(times_s, float)
        if st.empty:
            return times
        starts = np.empty(len(st))
        t = 0.0
        for k, (ready, dur) in enumerate(zip(st["ready_s"].to_numpy(), durations_s, strict=True)):
            starts[k] = t = max(t, ready)
            t += dur
        xs = np.column_stack([st["start_s"], st["start_s"] + st["duration_s"]]).ravel()
        ys = np.column_stack([starts, starts + durations_s]).ravel()
        return np.interp(times, xs, ys)


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
        clock: str | Callable[[], float] = "wall",
        probe: SpeedProbe | None = None,
        prefill_probe: SpeedProbe | None = None,
        predict_s: Callable[[BatchShape], float] | None = None,
    ) -> None:
        self.clock = CLOCKS[clock] if isinstance(clock, str) else clock
        # ``probe`` (a decode step) scales every step; with ``prefill_probe`` (a prefill step, sampled
        # at the same moments) that one scales the steps that prefill: a busy neighbour can slow
        # memory-bound decode steps and compute-bound prefill steps by different amounts
        self.probe, self.prefill_probe = probe, prefill_probe if probe is not None else None
        self.weights = weights
        self.kv = BlockManager(num_blocks, block_tokens, watermark)
        # built as a simulated replica builds its own (replica.Replica): the dynamic chunk budget
        # predicts step times with ``predict_s``, the profile's cost model of this machine
        self.sched = make_scheduler(policy, sched_cfg, self.kv, predict_s=predict_s)
        self.cache = PagedKVCache(weights.spec, block_tokens, weights.dtype)
        self.model = Model(weights, self.cache)
        # the log's shapes are the simulator's (replica.Replica): the model's windows, MLA's verification
        self.windows, self.spec_as_decode = weights.spec.attention_windows(), weights.spec.spec_as_decode
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
        """Serve ``requests`` (sorted by arrival) to completion; stamp their times; log every step.

        Two clocks run side by side. The engine clock ``t`` (requests are stamped with it, arrivals
        are admitted by it) advances by each step's measured duration divided by the speed factor
        (1 without a probe; the prefill probe's on steps that prefill, when there is one). The raw
        clock ``t_raw`` advances by the measured durations themselves; a step starts on it no
        earlier than the arrivals it serves, so the raw timeline is the same schedule as
        measured, had nobody rescaled it."""
        sched = self.sched
        cols: dict[str, list] = {k: [] for k in STEP_COLUMNS}
        shapes: list[BatchShape] = []
        clock, probe, pprobe = self.clock, self.probe, self.prefill_probe
        t = t_raw = 0.0
        factor, pfactor, next_probe, reading = 1.0, 1.0, 0.0, float("nan")
        i, n = 0, len(requests)
        while i < n or sched.has_work():
            while i < n and requests[i].arrival_s <= t:
                self._submit(requests[i])
                i += 1
            if not sched.has_work():
                t = max(t, requests[i].arrival_s)  # idle: jump to the next arrival
                continue
            if probe is not None and t >= next_probe:  # outside both clocks
                factor, next_probe = probe.sample(t), t + probe.interval_s
                reading = probe.samples[-1][1]
                if pprobe is not None:
                    pfactor = pprobe.sample(t)
            c0 = clock()
            plan = sched.schedule()
            if plan.empty:
                if i >= n:
                    raise RuntimeError("reference engine stalled: requests wait but nothing can be scheduled")
                spent = clock() - c0
                t, t_raw = max(t + spent / factor, requests[i].arrival_s), t_raw + spent
                continue
            g0 = clock()
            # for the log only: its time is not the engine's
            shapes.append(plan.shape(*self.windows, self.spec_as_decode))
            c0 += clock() - g0
            f0 = clock()
            self.execute(plan)
            f1 = clock()
            step_factor = pfactor if pprobe is not None and plan.prefill_tokens else factor
            end = t + (f1 - c0) / step_factor
            sched.complete(plan, end)
            raw = clock() - c0
            dur = raw / step_factor
            # the raw timeline: no step starts before the requests it serves have arrived
            ready = max(r.arrival_s for r in [*(r for r, _ in plan.prefill), *plan.decode])
            t_raw = max(t_raw, ready)
            row = (t, dur, (f1 - f0) / step_factor, t_raw, raw, f1 - f0, step_factor, reading, ready)
            row += (plan.prefill_tokens, len(plan.decode), plan.size, len(plan.preempted))
            for k, v in zip(STEP_COLUMNS, row, strict=True):
                cols[k].append(v)
            t, t_raw, reading = t + dur, t_raw + raw, float("nan")
        return EngineOutput(
            requests,
            pd.DataFrame(cols),
            shapes,
            list(probe.samples) if probe else [],
            list(pprobe.samples) if pprobe else [],
        )

    def _submit(self, r: Request) -> None:
        reason = self.sched.rejection_reason(r)
        if reason:
            r.status, r.reject_reason = REJECTED, reason
            return
        self.sched.add(r)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
# *_s: the engine clock (normalised by speed_factor when a probe runs); raw_*_s: as measured;
# speed_factor: the factor applied to this step; probe_factor: the (decode) probe's reading just
# before this step (else NaN); ready_s: the latest arrival among the requests it serves
STEP_COLUMNS = ["start_s", "duration_s", "forward_s", "raw_start_s", "raw_duration_s", "raw_forward_s"]
STEP_COLUMNS += [
    "speed_factor",
    "probe_factor",
    "ready_s",
    "prefill_tokens",
    "decode_tokens",
    "batch_size",
    "preempted",
]
