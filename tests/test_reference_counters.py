"""The reference model's counted FLOPs and bytes equal the cost model's op list.

FLOPs: exactly, per op name (GEMMs 2mnk from the real array shapes; attention 4 x pairs the
mask really allowed x head_dim x heads). Bytes: exactly under the rule in docs/reference.md
(float32 everywhere, so the cost model runs with fp32 weights, activations and KV).
"""

import numpy as np
import pytest

from llmsim.costmodel.ops import OpConfig, batch_shape
from llmsim.models import CATALOG, ModelSpec
from llmsim.reference.counters import Counter, OpCount, expected_counts
from llmsim.reference.engine import ReferenceEngine
from llmsim.reference.model import Model, Segment
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.weights import init_weights
from llmsim.schedulers import SchedulerConfig

FP32 = OpConfig(weight_dtype="fp32", kv_dtype="fp32", act_dtype="fp32")
NAIVE = OpConfig(weight_dtype="fp32", kv_dtype="fp32", act_dtype="fp32", attention_kernel="naive")
MHA = ModelSpec("tiny-mha", 64, 160, 2, 4, 4, 16, 97)
GQA = ModelSpec("tiny-gqa", 64, 160, 3, 8, 2, 8, 89)
MOE = GQA.with_(name="tiny-moe", num_experts=4, experts_per_token=2)
GPT2 = CATALOG["gpt2"].with_(
    hidden_size=48,
    intermediate_size=192,
    num_layers=2,
    num_heads=4,
    num_kv_heads=4,
    head_dim=12,
    vocab_size=83,
    learned_positions=256,
)
# GPT-J's parallel residual (one LayerNorm feeds attention and MLP), RoPE, biases, GELU MLP
GPTJ = CATALOG["gpt-j-6b"].with_(
    hidden_size=48, intermediate_size=192, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=12, vocab_size=83
)
SPECS = [MHA, GQA, MOE, GPT2, GPTJ]
MIXES = {
    "prefill-only": ([(37, 0)], []),
    "chunks-after-cache": ([(16, 48), (5, 3)], []),
    "decode-only": ([], [1, 17, 64]),
    "mixed": ([(24, 8), (3, 0)], [5, 40]),
}


def run_counted(spec: ModelSpec, chunks, decodes, window=None, kernel="flash") -> Counter:
    w = init_weights(spec, 0, np.float32)
    cache = PagedKVCache(spec, 8, np.float32)
    model = Model(w, cache, Counter(), count_kernel=kernel)
    segs = []
    for c, p in chunks:
        segs.append(
            Segment(np.arange(c) % spec.vocab_size, p, cache.allocate(-(-(p + c) // 8)), "prefill", "last", window)
        )
    for ctx in decodes:
        segs.append(Segment(np.array([3]), ctx, cache.allocate(-(-(ctx + 1) // 8)), "decode", "last", window))
    model.forward(segs)
    return model.counter  # type: ignore[return-value]


def assert_counts_match(spec, counted: Counter, shape, check_bytes=True, skip_bytes=(), cfg=FP32) -> None:
    want = expected_counts(spec, shape, cfg)
    assert set(counted.ops) <= set(want)  # the cost model lists zero-size ops (no sampled rows) too
    for name, exp in want.items():
        got = counted.ops.get(name, OpCount())
        assert got.flops == exp.flops, name
        if check_bytes and name not in skip_bytes:
            assert (got.bytes_read, got.bytes_written) == pytest.approx(
                (exp.bytes_read, exp.bytes_written), rel=1e-12
            ), name


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_counted_ops_equal_cost_model(spec, mix):
    chunks, decodes = MIXES[mix]
    counted = run_counted(spec, chunks, decodes)
    # MoE weight bytes follow the experts actually touched; the cost model uses the expectation
    # under uniform routing, so for MoE only FLOPs are exact (bytes: see the single-token test).
    assert_counts_match(spec, counted, batch_shape(chunks, decodes), check_bytes=not spec.is_moe)


@pytest.mark.parametrize("mix", ["prefill-only", "chunks-after-cache", "mixed"])
def test_naive_kernel_bytes_count_the_materialised_scores(mix):
    """NumPy writes and re-reads the score matrix: the cost model's naive-kernel bytes, exactly."""
    chunks, decodes = MIXES[mix]
    counted = run_counted(GQA, chunks, decodes, kernel="naive")
    assert_counts_match(GQA, counted, batch_shape(chunks, decodes), cfg=NAIVE)


def test_moe_single_token_bytes_are_exact():
    """One token touches exactly k experts, which is also the cost model's expectation."""
    assert_counts_match(MOE, run_counted(MOE, [], [9]), batch_shape([], [9]))


def test_sliding_window_decode_counts_match():
    spec = GQA.with_(sliding_window=16)
    decodes = [3, 40, 15, 16]
    assert_counts_match(spec, run_counted(spec, [], decodes), batch_shape([], decodes, 16))


def test_sliding_window_prefill_flops_match():
    spec = GQA.with_(sliding_window=16)
    chunks = [(20, 30), (9, 0), (40, 0)]
    assert_counts_match(spec, run_counted(spec, chunks, []), batch_shape(chunks, [], 16), check_bytes=False)


def test_sliding_window_prefill_kv_bytes_match():
    spec = GQA.with_(sliding_window=16)
    chunks = [(20, 30)]
    assert_counts_match(spec, run_counted(spec, chunks, []), batch_shape(chunks, [], 16))


def test_no_sampled_rows_reads_no_lm_head():
    from dataclasses import replace

    shape = replace(batch_shape([(16, 0)], []), logits_rows=0)
    w = init_weights(GQA, 0, np.float32)
    cache = PagedKVCache(GQA, 8, np.float32)
    model = Model(w, cache, Counter(), count_kernel="flash")
    model.forward([Segment(np.arange(16), 0, cache.allocate(2), "prefill", "none")])
    assert_counts_match(GQA, model.counter, shape)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_kv_bytes_per_token_match_model_spec(spec):
    cache = PagedKVCache(spec, 8, np.float32)
    cache.allocate(1)
    per_token = (cache.k.nbytes + cache.v.nbytes) / (cache.k.shape[1] * cache.k.shape[2])  # per block slot
    assert per_token == spec.kv_bytes_per_token("fp32")
    counted = run_counted(spec, [(10, 0)], [])
    assert counted.ops["kv_cache_write"].bytes_written / 10 == spec.kv_bytes_per_token("fp32")


def test_engine_steps_count_what_the_scheduler_planned():
    """Each real step of the engine (chunked policy: prefill chunks mixed with decodes) counts the
    ops the cost model prices for ``plan.shape()`` of the same plan."""
    w = init_weights(GQA, 0, np.float32)
    eng = ReferenceEngine(w, "chunked", SchedulerConfig(max_num_seqs=4, chunk_tokens=24), 64, 8)
    eng.model.counter = counter = Counter()
    eng.model.count_kernel = "flash"
    for i, (p, o) in enumerate([(30, 4), (7, 6), (50, 3), (12, 5)]):
        eng.sched.add(eng.new_request(i, 0.0, p, o))
    kinds = set()
    for step in range(40):
        if not eng.sched.has_work():
            break
        plan = eng.sched.schedule()
        shape = plan.shape(GQA.sliding_window)
        counter.clear()
        eng.execute(plan)
        assert_counts_match(GQA, counter, shape)
        kinds.add((bool(plan.prefill), bool(plan.decode)))
        eng.sched.complete(plan, float(step))
    assert (True, True) in kinds  # saw mixed prefill+decode steps
    assert not eng.sched.has_work()
