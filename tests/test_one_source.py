"""One source per formula: the shape aggregates, attention's FLOPs and bytes, and norm FLOPs are
each written once in ``costmodel/ops.py``. Where a speed copy stays for the compiled path (the
roofline's attention pricing), a test here holds it to the reference and the copy names the test."""

from __future__ import annotations

import itertools

import pytest

from llmsim.costmodel.ops import (
    BatchShape,
    attention_ops,
    batch_shape,
    chunk_aggregates,
    decode_keys_seen,
    norm_flops_per_elem,
    on_attention_side,
    step_ops,
)
from llmsim.costmodel.roofline import CostConfig, CostModel
from llmsim.hardware import load_profile
from llmsim.models import CATALOG
from llmsim.request import Request
from llmsim.schedulers.plan import BatchPlan

WINDOWS = (None, 1, 3, 8)


def test_chunk_aggregates_count_what_they_name() -> None:
    # query i of a chunk (absolute position p + i) attends to keys max(0, p+i+1-w) .. p+i
    for c, p, w in itertools.product(range(1, 9), range(0, 9), WINDOWS):
        keys = [range(max(0, p + i + 1 - (w or p + i + 1)), p + i + 1) for i in range(c)]
        pairs = sum(len(k) for k in keys)
        seen = len(set().union(*keys))
        assert chunk_aggregates(c, p, w) == (pairs, seen, c * seen), (c, p, w)


def test_decode_keys_seen_is_context_plus_new_tokens_under_the_window() -> None:
    assert decode_keys_seen(10, 1) == 11 and decode_keys_seen(10, 3) == 13
    assert decode_keys_seen(10, 1, 8) == 8 and decode_keys_seen(3, 1, 8) == 4


def _request(kv_tokens: int, prompt: int = 100, prefilled: int = 0, n_seqs: int = 1) -> Request:
    r = Request(0, 0.0, prompt, 10)
    r.kv_tokens, r.prefilled, r.n_seqs = kv_tokens, prefilled, n_seqs
    return r


def _aggregates(s: BatchShape) -> tuple[int, ...]:
    return (
        s.prefill_tokens,
        s.prefill_seqs,
        s.prefill_attn_pairs,
        s.prefill_kv_tokens,
        s.prefill_score_elems,
        s.decode_seqs,
        s.decode_tokens,
        s.decode_ctx_tokens,
    )


@pytest.mark.parametrize(("window", "local"), [(None, None), (6, None), (None, 5), (3, 2)])
def test_batch_plan_shape_is_batch_shape_of_its_rows(window: int | None, local: int | None) -> None:
    """A plan's shape is ``batch_shape`` of its chunks and decode rows: parallel sampling decodes a
    row per sequence, padding decodes, speculation verifies a (k+1)-token chunk per request, and a
    columnar set adds its members' rows (no window: sets only serve unwindowed models)."""
    chunks = [(_request(4, prefilled=4), 7), (_request(0), 3), (_request(9, prompt=12, prefilled=9), 3)]
    decodes = [_request(2), _request(11, n_seqs=3), _request(5)]
    padding = [_request(8, n_seqs=2)]
    plan = BatchPlan()
    plan.prefill, plan.decode, plan.padding = chunks, decodes, padding
    rows = [(c, r.kv_tokens) for r, c in chunks]
    contexts = [r.kv_tokens for r in decodes + padding for _ in range(r.n_seqs)]
    want = batch_shape(rows, contexts, window, local_window=local)
    got = plan.shape(window, local)
    assert _aggregates(got) == _aggregates(want)
    assert (got.local is None) == (local is None)
    if got.local is not None and want.local is not None:
        assert _aggregates(got.local) == _aggregates(want.local)
    assert got.logits_rows == 1 + len(contexts)  # the one prompt that finishes, and every row

    plan.spec_k = 2
    padded = [r.kv_tokens for r in padding for _ in range(r.n_seqs)]
    want = batch_shape(rows + [(3, r.kv_tokens) for r in decodes], padded, window)
    got = plan.shape(window)
    assert _aggregates(got) == _aggregates(want)
    assert got.logits_rows == 1 + len(padded) + 3 * len(decodes)

    plan.padding = []  # MLA: verification as k+1 decode tokens per request (vLLM's spec-as-decode)
    want = batch_shape(rows, [r.kv_tokens for r in decodes], window, tokens_per_decode=3, local_window=local)
    got = plan.shape(window, local, spec_as_decode=True)
    assert _aggregates(got) == _aggregates(want)
    if got.local is not None and want.local is not None:
        assert _aggregates(got.local) == _aggregates(want.local)
    assert got.logits_rows == 1 + 3 * len(decodes)
    plan.padding = padding

    if window is None:
        plan.spec_k, plan.set_n, plan.set_ctx = 0, 4, 40  # four members of ten cached tokens each
        want = batch_shape(rows, contexts + [10] * 4)
        assert _aggregates(plan.shape()) == _aggregates(want)


CASES = [
    # (model, hardware, config): dense, GQA under tp, local+global, sliding window, MoE,
    # LayerNorm; flash and naive kernels; CUDA graphs; pipeline stages; quantised KV
    ("llama-3.1-8b", "H100-SXM", CostConfig()),
    ("llama-2-70b", "H100-SXM", CostConfig(tp=4, pp=2, kv_dtype="fp8")),
    ("gemma-2-9b", "A100-SXM-80GB", CostConfig(cuda_graphs=True)),
    ("mistral-7b", "TPU-v5e", CostConfig(tp=2)),
    ("mixtral-8x7b", "MI300X", CostConfig(tp=8, attention_kernel="naive")),
    ("gpt2", "Xeon-8480+", CostConfig(attention_kernel="naive", numa_aware=False)),
    # expert parallelism (dp 2 x tp 2, and over pipeline stages); a profile with moe_memory_fraction
    ("qwen3-30b-a3b-instruct-2507", "H100-SXM", CostConfig(tp=2, ep=4)),
    ("qwen3-30b-a3b-instruct-2507", "RTX-PRO-6000", CostConfig(pp=2, ep=2)),
    # MLA (expanded prefill, absorbed decode) with DeepSeekMoE: FP8 weights and compute under
    # tp 8 with CUDA graphs, and expert parallelism over 8 DP ranks with an fp8 KV cache
    ("deepseek-v3", "H200", CostConfig(tp=8, weight_dtype="fp8", act_dtype="fp8", cuda_graphs=True)),
    ("deepseek-v3", "H200", CostConfig(ep=8, weight_dtype="fp8", kv_dtype="fp8", attention_kernel="naive")),
    # (no pp: deepseek-v3's dense first layers refuse pipeline stages, build.check_parallelism)
]


def _shapes(window: int | None, local: int | None) -> list[BatchShape]:
    return [
        batch_shape([(512, 0)], [], window, local_window=local),
        batch_shape([], [100 + 997 * i for i in range(16)], window, local_window=local),
        batch_shape([(256, 4000), (64, 0)], [7000] * 8, window, local_window=local),
        batch_shape([], [3000] * 4, window, tokens_per_decode=3, local_window=local),  # verifying drafts
        batch_shape([], [1], window, local_window=local),  # launch-bound
    ]


@pytest.mark.parametrize(("model", "hw", "cfg"), CASES)
def test_fast_attention_pricing_matches_priced_ops(model: str, hw: str, cfg: CostConfig) -> None:
    """The roofline's attention pricing (``_attention_s``, ``_decode_attention_s`` and
    ``_kernel_total_s``) is a speed copy of pricing ``attention_ops`` with ``price``: both take
    their FLOPs and bytes from ``AttentionDims``, and their times agree to rounding. So does a
    whole ``step_time`` with the per-stage sum of every priced op."""
    spec = CATALOG[model]
    cm = CostModel(spec, load_profile(hw), cfg)
    window, local = spec.attention_windows()
    for s in _shapes(window, local):
        decode_only = s.prefill_tokens == 0
        ops = attention_ops(spec, s, cfg)
        # (MLA lists the GEMMs of its prefill/decode split with its attention kernels)
        assert ops and all(on_attention_side(op) for op in ops)
        reference_s = sum(cm.price(op, decode_only).total_s for op in ops)
        assert cm._attention_s(s, decode_only) == pytest.approx(reference_s, rel=1e-12)
        head_s = cm.head_time(s)  # (the last stage's alone)
        whole_s = (cm.stage_time(s) - head_s) * cfg.pp + head_s + cm.pp_send_time(s) * (cfg.pp - 1)
        whole_s += cm.hw.overheads.step_overhead_s.value
        assert cm.step_time(s) == pytest.approx(whole_s, rel=1e-12)
        if decode_only:  # a run of decode steps is each step's step_time
            grown = [batch_shape([], [c + i for c in range(100, 100 + s.decode_seqs)], window) for i in range(4)]
            runs = cm.decode_steps_s(grown[0], 4)
            assert runs == pytest.approx([cm.step_time(g) for g in grown], rel=1e-12)


def test_attention_ops_flops_and_bytes_from_first_principles() -> None:
    """Llama-2-7B (32 heads of 128, no GQA), bf16: decode attention over C cached keys is
    4·C·heads·head_dim FLOPs and reads K and V (2·heads·head_dim·2 bytes each key) plus q."""
    spec = CATALOG["llama-2-7b"]
    s = batch_shape([(100, 50)], [1000, 3000])
    prefill, decode = attention_ops(spec, s, CostConfig())
    assert decode.flops == 4 * (1001 + 3001) * 32 * 128
    assert decode.bytes_read == (1001 + 3001) * 2 * 4096 * 2 + 2 * 4096 * 2
    assert prefill.flops == 4 * (100 * 50 + 100 * 101 // 2) * 32 * 128
    assert prefill.bytes_read == 100 * 4096 * 2 + 150 * 2 * 4096 * 2


@pytest.mark.parametrize(("model", "flops"), [("llama-3.1-8b", 4.0), ("gpt2", 7.0)])
def test_norm_flops_have_one_source(model: str, flops: float) -> None:
    spec = CATALOG[model]
    assert norm_flops_per_elem(spec) == flops
    ops = step_ops(spec, batch_shape([(16, 0)], [5]), CostConfig())
    norms = [op for op in ops if op.name in ("input_layernorm", "post_attention_layernorm", "final_norm")]
    assert len(norms) == 3
    assert all(op.flops == flops * op.bytes_written / 2 for op in norms)  # elements = bf16 bytes written / 2
