"""NumPy micro-benchmarks of this machine -> a ``local-cpu`` hardware profile.

What the roofline needs for a CPU running the reference model, each measured here with the
BLAS thread count the reference engine uses (``BLAS_THREADS``):

- GEMM time vs rows m on the reference model's own weight shapes: the best FLOP/s is the fp32
  peak (so ``gemm_max_fraction`` is 1 by construction); above ``SMALL_M`` rows ``gemm_half_m`` and
  the weight-streaming ``memory_fraction`` are fitted to the measured times under the roofline's own formula
  ``max(2mnk / (peak · m/(m+half_m)), bytes / (bw · memory_fraction))``;
- GEMMs of m = 1..``SMALL_M`` rows -> the ``gemm_small_m`` table: each m's GEMM rate, timed call by
  call inside the reference model's decode steps of m sequences (NumPy's BLAS runs one row as a
  GEMV, two at about half its rate per row, and packs tiles from three rows, faster per row at
  multiples of four rows: no smooth curve follows that);
- memory bandwidth: a streaming copy of a buffer larger than the last-level cache;
- attention: the reference model's prefill attention -> ``attention_fraction``, its paged decode
  attention -> ``decode_attention_fraction`` (two regimes on this CPU); elementwise passes (norm,
  add, SiLU) -> ``elementwise_memory_fraction``;
- per-op overhead (``kernel_launch_s``) and per-step overhead (``step_overhead_s``): a forward
  pass of a 1-token, width-8 copy of the model (all overhead, no work) divided by its op count,
  and the engine's schedule/complete bookkeeping around the forward.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from llmsim.costmodel.ops import batch_shape, step_ops
from llmsim.hardware import HardwareProfile, dump_profile
from llmsim.models import ModelSpec
from llmsim.reference.counters import Counter

CLOCK = time.process_time  # see ReferenceEngine: the twin times the engine with the same clock
BLAS_THREADS = 1  # the engine and the benchmarks both run NumPy's BLAS on one thread (see docs/reference.md)
SMALL_M = 16  # GEMMs of 1..SMALL_M rows (every decode batch of the twin) get a measured rate each
SMALL_M_CTX = 256  # context of the decode steps the small-m table is timed in (the probe step's)

# The twin's model (also shipped as scenarios/twin_small_config.json): a 4-layer, 512-wide
# Llama-style decoder with 4:1 grouped-query attention, ~20 M parameters in fp32.
TWIN_SPEC = ModelSpec(
    name="twin-llama-4x512",
    hidden_size=512,
    intermediate_size=1408,
    num_layers=4,
    num_heads=8,
    num_kv_heads=2,
    head_dim=64,
    vocab_size=8192,
    weight_dtype="fp32",
    source="scenarios/twin_small_config.json (a small Llama-style shape chosen to run on 2 CPU cores)",
)


def best_time(fn: Callable[[], object], min_s: float = 0.05, reps: int = 5) -> float:
    """Best of ``reps`` batches, each repeating ``fn`` for at least ``min_s`` (noise only slows things).
    Timed with ``CLOCK`` (process CPU time: on a shared machine other processes do not count)."""
    fn()
    best = float("inf")
    for _ in range(reps):
        n, t0 = 0, CLOCK()
        while True:
            fn()
            n += 1
            dt = CLOCK() - t0
            if dt >= min_s:
                break
        best = min(best, dt / n)
    return best


def gemm_table(spec: ModelSpec, ms: list[int], reps: int) -> list[dict]:
    """Measured seconds of [m, k] @ [k, n] for the model's weight shapes (median of ``reps``). Timed while walking through a whole
    model's weights in forward order (a GEMM repeated on one hot matrix reads it from cache and
    would overstate the weight-streaming rate a real forward pass gets); each repetition walks
    once at every m, so a slow spell of the machine lands on all m alike, not on a few of them."""
    from llmsim.reference.model import init_weights

    w = init_weights(spec, 0, np.float32)
    mats = [(name, lay[name]) for lay in w.layers for name in ("w_qkv", "w_o", "w_up", "w_down")]
    mats.append(("lm_head", np.ascontiguousarray(w.lm_head)))
    rng = np.random.default_rng(0)
    ks = {mat.shape[0] for _, mat in mats}
    xs = {(m, k): rng.standard_normal((m, k)).astype(np.float32) for m in ms for k in ks}
    times: dict[tuple[int, int, int], list[float]] = {}
    for _ in range(reps):
        for m in ms:
            for _, mat in mats:
                x = xs[(m, mat.shape[0])]
                t0 = CLOCK()
                x @ mat
                times.setdefault((m, *mat.shape), []).append(CLOCK() - t0)
    return [{"m": m, "n": n, "k": k, "s": float(np.median(ts))} for (m, k, n), ts in times.items()]


def stream_bandwidth(min_s: float, mbytes: int = 512) -> float:
    """Bytes/s (read + write) of copying a buffer bigger than the last-level cache."""
    src = np.ones(mbytes * 2**20 // 4, np.float32)
    dst = np.empty_like(src)
    return 2 * src.nbytes / best_time(lambda: np.copyto(dst, src), min_s, reps=3)


def engine_gemm_table(spec: ModelSpec, ms: list[int], reps: int, ctx: int = SMALL_M_CTX) -> list[dict]:
    """GEMM FLOPs and seconds of one decode step of ``m`` sequences (every GEMM then has m rows,
    the LM head's too), timed call by call inside the reference model's own forward pass: the
    median over ``reps`` steps. Timed in the forward, not in a loop of bare matmuls, because there
    the GEMMs see the cache left by the attention and norms around them (measured: 26-55% slower
    than the same matmuls back to back for m = 1..4). Each repetition runs every m once, so a
    slow spell of the machine lands on all m alike."""
    from llmsim.reference.model import Model, PagedKVCache, Segment, init_weights

    class TimedModel(Model):
        gemm_s = gemm_flops = 0.0

        def _linear(self, name, x, w, b=None):  # noqa: ANN001, ANN202 - Model._linear's signature
            t0 = CLOCK()
            y = super()._linear(name, x, w, b)
            self.gemm_s += CLOCK() - t0
            self.gemm_flops += 2.0 * x.shape[0] * w.shape[0] * w.shape[1]
            return y

    model = TimedModel(init_weights(spec, 0, np.float32), PagedKVCache(spec, 16, np.float32))
    blocks = -(-(ctx + 1) // 16)
    segs = {m: [Segment(np.array([1]), ctx, model.cache.allocate(blocks), "decode") for _ in range(m)] for m in ms}
    samples: dict[int, list[tuple[float, float]]] = {m: [] for m in ms}
    for _ in range(reps):
        for m in ms:
            model.forward(segs[m])  # once untimed: the previous step had another shape
            model.gemm_s = model.gemm_flops = 0.0
            model.forward(segs[m])
            samples[m].append((model.gemm_flops, model.gemm_s))
    return [
        {"m": m, "gemm_flops": float(np.median([f for f, _ in ss])), "gemm_s": float(np.median([t for _, t in ss]))}
        for m, ss in samples.items()
    ]


def small_m_table(rows: list[dict], peak: float, max_m: int) -> list[float]:
    """``gemm_small_m`` for m = 1..``max_m``: GEMM FLOP/s of a decode step of m sequences / peak
    (rows from ``engine_gemm_table``: the model's shapes weighted as a forward pass runs them).

    The whole GEMM time, weight streaming included: the cost model uses it in place of both the
    curve and the memory side. With 1 row NumPy's BLAS runs a GEMV (no tile packing), 2 rows cost
    about twice that, and from 3 rows it packs tiles, faster per row at multiples of 4 rows and
    slower at odd counts; the rate per m is measured, not fitted."""
    by_m = {r["m"]: r for r in rows}
    if missing := [m for m in range(1, max_m + 1) if m not in by_m]:
        raise ValueError(f"no GEMM timings at m = {missing}")
    return [by_m[m]["gemm_flops"] / by_m[m]["gemm_s"] / peak for m in range(1, max_m + 1)]


def fit_gemm(rows: list[dict], bw: float, min_m: int = 2) -> tuple[float, float, float]:
    """(peak FLOP/s, half_m, memory_fraction) minimising the log error of the roofline GEMM time
    over the rows with m >= ``min_m`` (smaller m are the measured ``gemm_small_m`` table). The peak
    is the best rate over all rows."""
    peak = max(2 * r["m"] * r["n"] * r["k"] / r["s"] for r in rows)
    rows = [r for r in rows if r["m"] >= min_m]
    m = np.array([r["m"] for r in rows], float)
    flops = np.array([2.0 * r["m"] * r["n"] * r["k"] for r in rows])
    nbytes = np.array([4.0 * (r["m"] * r["k"] + r["k"] * r["n"] + r["m"] * r["n"]) for r in rows])
    meas = np.array([r["s"] for r in rows])
    best = (float("inf"), 1.0, 1.0)
    for half in np.geomspace(0.25, 512, 60):
        for frac in np.geomspace(0.05, 20, 80):
            pred = np.maximum(flops / (peak * m / (m + half)), nbytes / (bw * frac))
            err = float(np.sum(np.log(pred / meas) ** 2))
            if err < best[0]:
                best = (err, float(half), float(frac))
    return peak, best[1], best[2]


def attention_fraction(
    spec: ModelSpec, peak: float, mem_rate: float, min_s: float, quick: bool
) -> tuple[float, float, list[dict]]:
    """Fractions of the GEMM peak the reference model's prefill and decode attention reach, each
    fitted over sizes. They are two regimes: prefill attention is a few large matmuls, decode
    attention gathers each sequence's paged K/V blocks into a padded array and runs many tiny
    matmuls (4 query rows per KV head), several times slower per FLOP."""
    from llmsim.reference.model import Model, PagedKVCache, Segment, init_weights

    one = spec.with_(num_layers=1)
    w = init_weights(one, 0, np.float32)
    cache = PagedKVCache(one, 16, np.float32)
    model = Model(w, cache, count_kernel="naive")
    rng = np.random.default_rng(0)
    rows = []
    cases = [("prefill", n, 0) for n in ([64, 512] if quick else [64, 256, 1024, 2048])]
    dec = [(2, 512), (8, 1536)] if quick else [(1, 1024), (2, 2560), (8, 512), (32, 1024), (16, 3072), (48, 256)]
    cases += [("decode", b, ctx) for b, ctx in dec]
    for kind, n, ctx in cases:
        if kind == "prefill":
            segs = [Segment(np.zeros(n, int), 0, cache.allocate(-(-n // 16)), "prefill")]
        else:
            segs = [Segment(np.zeros(1, int), ctx, cache.allocate(-(-(ctx + 1) // 16)), "decode") for _ in range(n)]
        tokens = sum(s.n for s in segs)
        q = rng.standard_normal((tokens, one.num_heads, one.head_dim)).astype(np.float32)
        model.counter = Counter()
        if kind == "prefill":
            model._attend_chunk(0, q, segs[0])
            fn = lambda q=q, s=segs[0]: model._attend_chunk(0, q, s)  # noqa: E731
        else:
            model._attend_decodes(0, q, segs)
            fn = lambda q=q, s=segs: model._attend_decodes(0, q, s)  # noqa: E731
        flops = sum(c.flops for c in model.counter.ops.values())
        nbytes = sum(c.bytes_read + c.bytes_written for c in model.counter.ops.values())
        model.counter = None
        t = best_time(fn, min_s, reps=3)
        rows.append({"kind": kind, "n": n, "ctx": ctx, "s": t, "flops": flops, "bytes": nbytes})
        for s in segs:
            cache.release(s.table)
    return (
        _fit_fraction([r for r in rows if r["kind"] == "prefill"], peak, mem_rate),
        _fit_fraction([r for r in rows if r["kind"] == "decode"], peak, mem_rate),
        rows,
    )


def _fit_fraction(rows: list[dict], peak: float, mem_rate: float) -> float:
    """The fraction whose roofline time max(flops / (peak·f), bytes / mem_rate) best fits (log error)."""
    cands = np.geomspace(1e-4, 1.0, 200)
    errs = [sum(np.log(max(r["flops"] / (peak * f), r["bytes"] / mem_rate) / r["s"]) ** 2 for r in rows) for f in cands]
    return float(cands[int(np.argmin(errs))])


def elementwise_fraction(spec: ModelSpec, bw: float, min_s: float) -> float:
    """Achieved bytes/s of the model's elementwise passes (counted as the cost model counts them) / bw."""
    from llmsim.reference.model import rmsnorm, silu

    rng = np.random.default_rng(0)
    fracs = []
    for T in (64, 512):
        x = rng.standard_normal((T, spec.hidden_size)).astype(np.float32)
        g = np.ones(spec.hidden_size, np.float32)
        u = rng.standard_normal((T, 2 * spec.intermediate_size)).astype(np.float32)
        i = spec.intermediate_size
        for fn, nbytes in [
            (lambda x=x, g=g: rmsnorm(x, g), 2 * x.nbytes),
            (lambda x=x: x + x, 3 * x.nbytes),
            (lambda u=u, i=i: silu(u[:, :i]) * u[:, i:], 1.5 * u.nbytes),
        ]:
            fracs.append(nbytes / best_time(fn, min_s) / bw)
    return float(np.median(fracs))


def overheads(spec: ModelSpec, min_s: float) -> tuple[float, float]:
    """(per-op launch, per-step overhead) seconds measured on the reference engine's code path."""
    from collections import deque

    from llmsim.reference.engine import ReferenceEngine
    from llmsim.reference.model import Model, PagedKVCache, Segment, init_weights
    from llmsim.schedulers import SchedulerConfig

    tiny = spec.with_(hidden_size=8, intermediate_size=8, num_heads=2, num_kv_heads=2, head_dim=4, vocab_size=8)
    w = init_weights(tiny, 0, np.float32)
    cache = PagedKVCache(tiny, 16, np.float32)
    model = Model(w, cache)
    seg = Segment(np.zeros(1, int), 3, cache.allocate(1), "decode")
    ops = step_ops(tiny, batch_shape([], [3]), _fp32())
    launch = best_time(lambda: model.forward([seg]), min_s) / sum(op.count for op in ops)
    # Per-step bookkeeping: schedule + execute + complete of the engine minus the forward itself.
    eng = ReferenceEngine(w, "chunked", SchedulerConfig(max_num_seqs=64), 4096, 16)
    samples = []
    for rep in range(3):
        reqs = [eng.new_request(i, 0.0, 8, 40) for i in range(16)]
        waiting, running = deque(reqs), []
        while waiting or running:
            t0 = CLOCK()
            plan = eng.sched.schedule(waiting, running)
            f0 = CLOCK()
            eng.execute(plan)
            f1 = CLOCK()
            eng.sched.complete(plan, 0.0, running)
            samples.append((f0 - t0) + (CLOCK() - f1))
        del rep
    return launch, float(np.median(samples))


def _step_segments(model, chunks: list[int], decodes: list[tuple[int, int]]) -> list:  # noqa: ANN001
    """Model segments of one step: fresh prefills of ``chunks`` tokens and ``(batch, context)``
    decode groups, with blocks from the model's paged cache."""
    from llmsim.reference.model import Segment

    cache, vocab = model.cache, model.spec.vocab_size
    segs = [Segment(np.arange(n) % vocab, 0, cache.allocate(-(-n // 16)), "prefill") for n in chunks]
    for b, ctx in decodes:
        segs += [Segment(np.array([1]), ctx, cache.allocate(-(-(ctx + 1) // 16)), "decode") for _ in range(b)]
    return segs


def _pass_s(model, segs: list, clock: Callable[[], float] = CLOCK) -> float:  # noqa: ANN001
    """Seconds of one forward pass with greedy sampling."""
    t0 = clock()
    logits = model.forward(segs)
    [int(np.argmax(lg[-1])) for lg in logits if lg is not None]
    return clock() - t0


def probe_timer(
    clock: Callable[[], float] = CLOCK,
    weights=None,  # noqa: ANN001
    step: tuple[list[int], list[tuple[int, int]]] | None = None,
) -> Callable[[], float]:
    """A function timing ``step`` (default ``PROBE``; or ``PREFILL_PROBE``) once, for the engine's
    drift normalisation: one forward pass of a separate ``TWIN_SPEC``-shaped model on ``clock``.

    ``weights``: the engine's own weights when they have ``TWIN_SPEC``'s shapes (timing does not
    depend on the values), so the probe does not evict the engine's weights from the cache; else
    seed-0 weights, as at calibration. No warm-up: the probe is read as the engine's steps and
    the calibration's steps are timed, one cold pass each (``cold_pass_s``); one pass costs one
    ~15 ms step."""
    from llmsim.reference.model import Model, PagedKVCache, init_weights

    shapes = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size")
    same = weights is not None and all(getattr(weights.spec, f) == getattr(TWIN_SPEC, f) for f in shapes)
    w = weights if same else init_weights(TWIN_SPEC, 0, np.float32)
    model = Model(w, PagedKVCache(w.spec, 16, np.float32))
    segs = _step_segments(model, *(step or PROBE))
    model.forward(segs)  # once untimed: the first pass on a fresh cache pays for its allocation
    return lambda: _pass_s(model, segs, clock)


def cold_pass_s(model, chunks: list[int], decodes: list[tuple[int, int]]) -> float:  # noqa: ANN001
    """One forward pass (+ greedy sampling) of a step, with no warm-up: as the engine runs its
    steps, each after a step of another shape. (On this machine a cold pass of the calibration
    steps took a median 1.06x its warmed-up time, 0.87x-1.30x by step: calibrating on warm
    steps priced the engine's steps ~2-6% short, docs/reference.md section 3.)"""
    segs = _step_segments(model, chunks, decodes)
    t = _pass_s(model, segs)
    for seg in segs:
        model.cache.release(seg.table)
    return t


def time_steps_probed(  # noqa: ANN201
    model,  # noqa: ANN001
    cases: list[tuple[list[int], list[tuple[int, int]]]],
    rounds: int,
    probes: dict[str, Callable[[], float]],
):
    """One cold pass (``cold_pass_s``) of every case in each of ``rounds`` rounds, every probe in
    ``probes`` timed once just before every case: (samples[round][case], readings[probe]).
    Rounds spread each case's samples over the whole measurement, so a slow spell of the machine
    disturbs one sample of each case, not every sample of one case."""
    samples, readings = [], {k: [] for k in probes}
    for _ in range(rounds):
        row = []
        for ch, dec in cases:
            for k, fn in probes.items():
                readings[k].append(fn())
            row.append(cold_pass_s(model, ch, dec))
        samples.append(row)
    return samples, readings


def column_medians(samples: list[list[float]]) -> list[float]:
    """The median per case of ``time_steps_probed``'s samples."""
    return [float(np.median(col)) for col in zip(*samples, strict=True)]


def time_steps_cold_normalised(  # noqa: ANN201
    model,  # noqa: ANN001
    cases: list[tuple[list[int], list[tuple[int, int]]]],
    rounds: int,
    references: dict[str, float] | None = None,
    weights=None,  # noqa: ANN001
):
    """Cold passes of ``cases`` rescaled to the speed of the drift probes' ``references``
    ("decode", and "prefill" if the profile has it), as the twin rescales its engine's steps.
    Returns (normalised, raw, factor) medians per case and the references used.

    Without ``references`` (calibrating) both probes are read and each reference is the median of
    its readings over the whole measurement (rounds x cases), read the way the twin reads a probe
    (``probe_timer``: one cold pass), not from the probe step's own samples. (On this machine,
    whose passes alternate between two speeds, the prefill reference still came out 35.3 and
    44.8 ms in two calibrations, against 35.8-46.3 ms from 5 samples in five: the spread is the
    machine's, docs/reference.md section 4; the normalisation removes it from the samples.)"""
    probes = {"decode": probe_timer(weights=weights)}
    if references is None or "prefill" in references:
        probes["prefill"] = probe_timer(weights=weights, step=PREFILL_PROBE)
    samples, readings = time_steps_probed(model, cases, rounds, probes)
    if references is None:
        references = {k: float(np.median(v)) for k, v in readings.items()}
    refs = {k: references.get(k, references["decode"]) for k in ("decode", "prefill")}
    readings.setdefault("prefill", readings["decode"])
    raw = column_medians(samples)
    normalised = normalised_medians(cases, samples, readings, refs)
    factors = [r / n for r, n in zip(raw, normalised, strict=True)]
    return normalised, raw, factors, references


def normalised_medians(
    cases: list[tuple[list[int], list[tuple[int, int]]]],
    samples: list[list[float]],
    readings: dict[str, list[float]],
    references: dict[str, float],
) -> list[float]:
    """Each calibration sample rescaled to the machine speed of the probes' references, as the
    twin rescales its engine's steps (``reference.engine.SpeedProbe``): divided by the median of
    the probe readings around it (the one just before it and its two neighbours) over the
    reference, the prefill probe for a step that prefills, the decode probe for the others; the
    median per case. Without it a calibration whose steps ran at different machine speeds (this
    VM alternates between two) fits a profile of no one speed, while the twin's normalised clock
    assumes the profile describes the machine at the references' speed."""
    n = len(cases)
    out = []
    for j, (chunks, _) in enumerate(cases):
        kind = "prefill" if chunks else "decode"
        r = readings[kind]
        col = []
        for i, row in enumerate(samples):
            k = i * n + j  # this sample's reading: the probe ran just before it
            factor = float(np.median(r[max(0, k - 1) : k + 2])) / references[kind]
            col.append(row[j] / factor)
        out.append(float(np.median(col)))
    return out


# Calibration steps (kept apart from the twin's validation grid of 16..2048-token prefills and
# decode batches 1..64 at contexts 128..4096). Decode batches of 1..16 price their GEMMs from the
# measured ``gemm_small_m`` table.
CAL_PREFILL = [32, 128, 512, 1536]
CAL_ROUNDS = 9  # cold passes per calibration step (one per round; their median, normalised)
FIT_RANGE = 3.0
# The probe: a calibration step timed again around every twin run, to show whether this machine
# (a VM whose neighbours come and go) runs at the speed it was calibrated at.
PROBE = ([], [(8, 256)])
# A second, compute-bound probe for steps that prefill: while the probe above (memory-bound) ran
# ~1.2x its calibration time in the twin runs of docs/reference.md section 4, prefill steps ran at
# calibrated speed, so one factor for both over-corrected them.
PREFILL_PROBE = ([128], [])
CAL_DECODE = [(1, 384), (2, 256), (8, 256), (32, 256), (4, 1024), (48, 768), (1, 2560), (8, 2048), (24, 1536)]
CAL_DECODE += [(12, 3072), (40, 1536)]
# A served batch mixes contexts (the engine's decode attention then runs a few length groups) and
# chunked prefill adds a chunk to decodes: calibrate on such steps too, (chunk, batch, mean context).
CAL_SPREAD = [(0, 6, 300), (0, 12, 600), (0, 24, 400), (128, 4, 500), (256, 10, 300)]
SPREAD_SIGMA = 0.7  # lognormal spread of contexts around the mean (the twin's prompts: sigma 0.7)
FIT_KEYS = [
    "gemm_half_m",
    "memory_fraction",
    "attention_fraction",
    "decode_attention_fraction",
    "elementwise_memory_fraction",
    "kernel_fixed_s",
    "gemm_small_m",  # one scale on the whole measured table: its level is refined, its shape kept
]


def fit_to_engine(spec: ModelSpec, data: dict, quick: bool) -> tuple[dict, list[dict], dict[str, float]]:
    """Fit the roofline's efficiencies so the cost model prices this machine's engine steps.

    The peaks (fp32 FLOP/s, bandwidth) stay the micro-benchmarks'; the shape parameters
    (``FIT_KEYS``) start from the micro-benchmark values and are refined by least squares on the
    log of measured vs predicted step time over the calibration steps, each kept within
    ``FIT_RANGE`` x of its micro-benchmark value. Also returns the drift probes' references
    ("decode": ``PROBE``, "prefill": ``PREFILL_PROBE``), read throughout (``time_steps_cold_normalised``).
    """
    from scipy.optimize import least_squares

    from llmsim.costmodel import CostConfig, CostModel
    from llmsim.costmodel.ops import batch_shape
    from llmsim.reference.model import Model, PagedKVCache, init_weights

    model = Model(init_weights(spec, 0, np.float32), PagedKVCache(spec, 16, np.float32))
    prefill = CAL_PREFILL[:3] if quick else CAL_PREFILL
    decode = CAL_DECODE[:7] if quick else CAL_DECODE
    cases = [([n], [], batch_shape([(n, 0)], [])) for n in prefill]
    cases += [([], [(b, c)], batch_shape([], [c] * b)) for b, c in decode]
    for chunk, b, c in CAL_SPREAD[:2] if quick else CAL_SPREAD:
        ctxs = spread_contexts(b, c)
        cases.append(
            ([chunk] if chunk else [], [(1, x) for x in ctxs], batch_shape([(chunk, 0)] if chunk else [], ctxs))
        )
    steps = [(ch, dec) for ch, dec, _ in cases]
    measured, raw, _, references = time_steps_cold_normalised(model, steps, 2 if quick else CAL_ROUNDS, weights=model.w)
    measured = np.array(measured)
    keys = FIT_KEYS
    x0 = np.log([data[k] for k in keys])
    cfg = CostConfig(weight_dtype="fp32", kv_dtype="fp32", act_dtype="fp32", attention_kernel="naive")

    def predict(x: np.ndarray) -> np.ndarray:
        prof = HardwareProfile.model_validate(_with_values(data["profile"], dict(zip(keys, np.exp(x), strict=True))))
        cost = CostModel(spec, prof, cfg)
        return np.array([cost.step_time(shape) for _, _, shape in cases])

    def log_errors(x: np.ndarray) -> np.ndarray:
        return np.log(predict(x) / measured)

    # each parameter stays within FIT_RANGE x of its micro-benchmark value: the fit refines
    # measurements, it must not turn a parameter into a free knob (e.g. make elementwise ops free).
    # A bounded trust-region least squares (it replaced Powell's method, which stopped at a higher
    # loss on the same measurements: e.g. 0.149 vs 0.119 with eight parameters, docs/reference.md)
    bounds = (x0 - np.log(FIT_RANGE), x0 + np.log(FIT_RANGE))
    res = least_squares(log_errors, x0, bounds=bounds, diff_step=1e-3, max_nfev=100 if quick else 400)
    pred = predict(res.x)
    rows = [
        {"step": _label(ch, dec), "measured_s": float(m), "predicted_s": float(p), "raw_s": r}
        for (ch, dec, _), m, p, r in zip(cases, measured, pred, raw, strict=True)
    ]
    return dict(zip(keys, map(float, np.exp(res.x)), strict=True)), rows, references


def spread_contexts(batch: int, mean_ctx: int) -> list[int]:
    """``batch`` contexts at evenly spaced quantiles of a lognormal (``SPREAD_SIGMA``) with mean ``mean_ctx``."""
    from scipy.stats import norm

    z = norm.ppf((np.arange(batch) + 0.5) / batch)
    x = np.exp(SPREAD_SIGMA * z)
    return [max(1, int(round(v))) for v in x / x.mean() * mean_ctx]


def _label(chunks: list[int], decodes: list[tuple[int, int]]) -> str:
    if len(decodes) > 1 and all(b == 1 for b, _ in decodes):  # a spread of contexts
        ctx = [c for _, c in decodes]
        dec = [f"decode b={len(ctx)} ctx={min(ctx)}..{max(ctx)} (mean {sum(ctx) // len(ctx)})"]
    else:
        dec = [f"decode b={b} ctx={c}" for b, c in decodes]
    return ", ".join([f"prefill {n}" for n in chunks] + dec)


def _with_values(profile: dict, values: dict) -> dict:
    out = {**profile, "efficiency": dict(profile["efficiency"]), "overheads": dict(profile["overheads"])}
    for k, v in values.items():
        section = "overheads" if k.endswith("_s") else "efficiency"
        old = out[section][k]["value"]
        new = [x * float(v) for x in old] if isinstance(old, list) else float(v)  # a table: v scales it
        out[section][k] = {**out[section][k], "value": new}
    return out


def _fp32():
    from llmsim.costmodel.ops import OpConfig

    return OpConfig(weight_dtype="fp32", kv_dtype="fp32", act_dtype="fp32")


def measure(quick: bool = False, spec: ModelSpec = TWIN_SPEC) -> tuple[HardwareProfile, dict]:
    """Run every benchmark; return the profile and the raw measurements."""
    min_s = 0.02 if quick else 0.08
    ms = [1, 24, 64, 256, 1024] if quick else [1, 2, 4, 8, 16, 20, 24, 32, 48, 64, 128, 256, 512, 1024, 2048]
    small_reps = 3 if quick else 9
    with threadpool_limits(BLAS_THREADS, "blas"):
        bw = stream_bandwidth(min_s, 256 if quick else 1024)
        rows = gemm_table(spec, ms, 5 if quick else 15)
        peak, half_m, mem_frac = fit_gemm(rows, bw, min_m=SMALL_M + 1)
        small_rows = engine_gemm_table(spec, list(range(1, SMALL_M + 1)), small_reps)
        small = small_m_table(small_rows, peak, SMALL_M)
        attn, dec_attn, attn_rows = attention_fraction(spec, peak, bw * mem_frac, min_s, quick)
        elem = elementwise_fraction(spec, bw, min_s)
        launch, step = overheads(spec, min_s)
    date = _dt.date.today().isoformat()
    cpu = _cpu_name()

    def src(what: str) -> str:
        return f"measured by llmsim calibrate --local-cpu on {date}, {what} ({cpu}, {BLAS_THREADS} BLAS thread)"

    fig = lambda v, what: {"value": float(v), "source": src(what)}  # noqa: E731
    mem_bytes = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    shapes = f"NumPy fp32 GEMM on {spec.name} weight shapes, m in {ms[0]}..{ms[-1]}"
    curve_shapes = f"NumPy fp32 GEMM on {spec.name} weight shapes, m in {SMALL_M + 1}..{ms[-1]}"
    data = {
        "name": "local-cpu",
        "family": "cpu",
        "vendor": platform.machine(),
        "description": f"this machine as the NumPy reference engine sees it: {cpu}, {BLAS_THREADS} BLAS thread",
        "peak_flops": {"fp32": fig(peak, f"best {shapes}")},
        "memory_capacity_bytes": fig(mem_bytes, "os.sysconf physical pages x page size"),
        "memory_bandwidth_bytes_per_s": fig(
            bw, "np.copyto (read + write) of a buffer larger than the last-level cache"
        ),
        "host_link": {
            "name": "memcpy (host memory is device memory)",
            "bandwidth_bytes_per_s": fig(bw / 2, "half the streaming read rate (a copy reads and writes)"),
            "latency_s": fig(launch, "one NumPy call, see kernel_launch_s"),
        },
        "power_w": {"value": 0.0, "source": "not measured: no power counter read by the benchmark"},
        "price_per_hour_usd": {"value": 0.0, "source": "ASSUMPTION: a local machine, no hourly price"},
        "efficiency": {
            "gemm_max_fraction": {"value": 1.0, "source": src("1 by construction: the fp32 peak is the best GEMM")},
            "gemm_half_m": fig(half_m, f"least-squares fit of the roofline GEMM time to {curve_shapes}"),
            "memory_fraction": fig(
                mem_frac, f"same fit: weight-streaming rate of small-m GEMMs / bandwidth, {curve_shapes}"
            ),
            "gemm_small_m": {
                "value": [float(v) for v in small],
                "source": src(
                    f"GEMM FLOP/s / peak of reference-engine decode steps of m = 1..{SMALL_M} sequences at context "
                    f"{SMALL_M_CTX}, each GEMM call timed inside the forward pass ({spec.name}, median of "
                    f"{small_reps} steps)"
                ),
            },
            "attention_fraction": fig(attn, "roofline fit to the reference model's prefill attention"),
            "decode_attention_fraction": fig(
                dec_attn, "roofline fit to the reference model's paged decode attention (gather + small matmuls)"
            ),
            "elementwise_memory_fraction": fig(elem, "median bytes/s of RMSNorm, add and SiLU·up passes / bandwidth"),
            "allreduce_bus_fraction": {"value": 1.0, "source": "not applicable: one process, no collectives"},
        },
        "overheads": {
            "kernel_launch_s": {
                "value": 0.0,
                "source": "NumPy calls are synchronous: nothing overlaps, the per-call cost is kernel_fixed_s",
            },
            "kernel_fixed_s": fig(launch, "forward of a width-8, 1-token copy of the model / its op count"),
            "step_overhead_s": fig(step, "median engine schedule + token bookkeeping + complete around a forward"),
        },
        "cpu": {
            "sockets": 1,
            "cores_per_socket": max(1, os.cpu_count() or 1),
            "numa_remote_bandwidth_fraction": {"value": 1.0, "source": "not applicable: one socket"},
        },
        "calibration": {
            "tool": "llmsim calibrate --local-cpu",
            "date": date,
            "quick": quick,
            "blas_threads": BLAS_THREADS,
            "model_shapes": spec.name,
        },
    }
    start = {"gemm_half_m": half_m, "memory_fraction": mem_frac}
    start.update({"attention_fraction": attn, "decode_attention_fraction": dec_attn})
    start.update({"elementwise_memory_fraction": elem, "kernel_fixed_s": launch, "gemm_small_m": 1.0})
    start["profile"] = data
    with threadpool_limits(BLAS_THREADS, "blas"):
        fitted, cal_rows, references = fit_to_engine(spec, start, quick)
    cal = "; refined by a least-squares fit to the reference engine's step times " + (
        f"({len(cal_rows)} calibration steps, kept apart from the twin's validation grid), micro-benchmark value {{:.4g}}"
    )
    # the drift probes' references: probe_timer readings throughout the calibration (median); the
    # same step's calibration-step median (calibration_step_s) is kept for comparison
    for key, step, ref in (("probe_step", PROBE, "decode"), ("probe_prefill_step", PREFILL_PROBE, "prefill")):
        row = next(r for r in cal_rows if r["step"] == _label(*step))
        data["calibration"][key] = {
            "step": row["step"],
            "measured_s": references[ref],
            "calibration_step_s": row["raw_s"],
        }
    data["calibration"]["fit_steps"] = cal_rows  # the fit's residuals, step by step
    scale = fitted.pop("gemm_small_m")  # the table's level, refined like the figures below
    data.update(_with_values(data, {"gemm_small_m": scale}))
    data["efficiency"]["gemm_small_m"]["source"] += cal.replace("micro-benchmark value", "scaled as a whole by").format(
        scale
    )
    for k, v in fitted.items():
        section = "overheads" if k.endswith("_s") else "efficiency"
        old = data[section][k]
        data[section][k] = {"value": v, "source": old["source"] + cal.format(old["value"])}
    raw = {
        "gemm": rows,
        "gemm_small_m": small_rows,
        "attention": attn_rows,
        "bandwidth_bytes_per_s": bw,
        "calibration_steps": cal_rows,
    }
    return HardwareProfile.model_validate(data), raw


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure_and_write(out_path: Path, quick: bool) -> Path:
    """Measure this machine and write the ``local-cpu`` profile YAML to ``out_path``."""
    profile, _ = measure(quick)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    dump_profile(profile, out_path)
    return out_path
