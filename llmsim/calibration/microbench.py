"""NumPy micro-benchmarks of this machine: the figures of a ``local-cpu`` hardware profile
before the fit to the engine's steps (``enginefit``) refines them.

What the roofline needs for a CPU running the reference model, each measured here with the
BLAS thread count the reference engine uses (``BLAS_THREADS``, set by the caller, ``localcpu``):

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
- per-op overhead (``kernel_fixed_s``) and per-step overhead (``step_overhead_s``): a forward
  pass of a 1-token, width-8 copy of the model (all overhead, no work) divided by its op count,
  and the engine's schedule/complete bookkeeping around the forward.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from llmsim.costmodel.ops import OpConfig, batch_shape, step_ops
from llmsim.models import ModelSpec
from llmsim.reference.counters import Counter
from llmsim.reference.engine import ReferenceEngine
from llmsim.reference.model import Model, Segment, rmsnorm, silu
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.timing import CLOCK
from llmsim.reference.weights import init_weights
from llmsim.schedulers import SchedulerConfig

SMALL_M = 16  # GEMMs of 1..SMALL_M rows (every decode batch of the twin) get a measured rate each
SMALL_M_CTX = 256  # context of the decode steps the small-m table is timed in (the probe step's)
FP32_OPS = OpConfig(weight_dtype="fp32", kv_dtype="fp32", act_dtype="fp32")


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
    tiny = spec.with_(hidden_size=8, intermediate_size=8, num_heads=2, num_kv_heads=2, head_dim=4, vocab_size=8)
    w = init_weights(tiny, 0, np.float32)
    cache = PagedKVCache(tiny, 16, np.float32)
    model = Model(w, cache)
    seg = Segment(np.zeros(1, int), 3, cache.allocate(1), "decode")
    ops = step_ops(tiny, batch_shape([], [3]), FP32_OPS)
    launch = best_time(lambda: model.forward([seg]), min_s) / sum(op.count for op in ops)
    # Per-step bookkeeping: schedule + execute + complete of the engine minus the forward itself.
    eng = ReferenceEngine(w, "chunked", SchedulerConfig(max_num_seqs=64), 4096, 16)
    samples = []
    for _ in range(3):
        for i in range(16):
            eng.sched.add(eng.new_request(i, 0.0, 8, 40))
        while eng.sched.has_work():
            t0 = CLOCK()
            plan = eng.sched.schedule()
            f0 = CLOCK()
            eng.execute(plan)
            f1 = CLOCK()
            eng.sched.complete(plan, 0.0)
            samples.append((f0 - t0) + (CLOCK() - f1))
    return launch, float(np.median(samples))
