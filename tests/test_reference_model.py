"""Equivalence checks of the NumPy reference transformer (tiny models, milliseconds each).

Tolerances: float64 results agree to 1e-10 (absolute, on logits of size ~1), float32 to 1e-4;
the differences are only the order of floating-point sums (BLAS blocking, chunk boundaries).
"""

import numpy as np
import pytest

from llmsim.models import CATALOG, ModelSpec
from llmsim.reference.generate import Sequence, contiguous_logits, greedy_generate, speculative_generate
from llmsim.reference.model import Model, Segment
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.weights import init_weights, int8_weights, truncated

TOL = {np.float64: 1e-10, np.float32: 1e-4}
LLAMA = ModelSpec("tiny-llama", 64, 128, 2, 4, 2, 16, 97)  # GQA 4 heads / 2 KV heads
MOE = LLAMA.with_(name="tiny-moe", num_experts=4, experts_per_token=2)
GPT2 = CATALOG["gpt2"].with_(
    hidden_size=64,
    intermediate_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=4,
    head_dim=16,
    vocab_size=101,
    learned_positions=128,
)
SPECS = [LLAMA, MOE, GPT2]
DTYPES = [np.float64, np.float32]


def tokens(n: int, vocab: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, n)


def chunked_logits(w, toks, cuts, block_tokens=4, window=None) -> np.ndarray:
    model = Model(w, PagedKVCache(w.spec, block_tokens, w.dtype))
    seq = Sequence(model, [])
    outs = []
    for a, b in zip([0, *cuts], [*cuts, len(toks)], strict=True):
        seq._ensure(b)
        seg = Segment(toks[a:b], a, seq.table, "decode" if b - a == 1 else "prefill", "all", window)
        outs.append(model.forward([seg])[0])
        seq.cached = b
    return np.concatenate(outs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_chunked_prefill_equals_full_prefill(spec, dtype):
    w = init_weights(spec, 0, dtype)
    toks = tokens(45, spec.vocab_size)
    full = contiguous_logits(w, toks)
    for cuts in ([16, 32], [1, 2, 3, 20, 44], [7]):
        assert np.abs(chunked_logits(w, toks, cuts) - full).max() < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_cache_with_scattered_blocks_equals_contiguous(dtype):
    w = init_weights(LLAMA, 0, dtype)
    toks = tokens(30, LLAMA.vocab_size)
    cache = PagedKVCache(LLAMA, 4, dtype)
    cache.allocate(20)
    table = [17, 3, 11, 0, 19, 8, 5, 14]  # non-contiguous physical blocks
    out = Model(w, cache).forward([Segment(toks, 0, table, logits="all")])[0]
    assert np.abs(out - contiguous_logits(w, toks)).max() < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_prefix_reuse_equals_recompute(dtype):
    w = init_weights(LLAMA, 0, dtype)
    bt = 4
    model = Model(w, PagedKVCache(LLAMA, bt, dtype))
    shared = list(tokens(12, LLAMA.vocab_size, 5))  # 3 full blocks
    a = Sequence(model, [])
    a.feed(shared + [1, 2, 3], logits="none")
    b_tail = [7, 8, 9, 10, 11]
    b = Sequence(model, [])
    b.table = model.cache.share(a.table[:3])  # reuse A's prefix blocks, prefill only the tail
    b.cached = 12
    reused = b.feed(b_tail, logits="all")
    recomputed = contiguous_logits(w, np.array(shared + b_tail))[12:]
    assert np.abs(reused - recomputed).max() < TOL[dtype]
    assert model.cache.refs[a.table[0]] == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_logits_do_not_depend_on_batch_mates(dtype):
    w = init_weights(MOE, 0, dtype)
    cache = PagedKVCache(MOE, 4, dtype)
    model = Model(w, cache)
    mine = tokens(10, MOE.vocab_size, 2)
    alone = contiguous_logits(w, mine)
    # the same request next to a prefill chunk of another sequence and two decodes
    others_tbl = cache.allocate(12)
    my_tbl = cache.allocate(3)
    prefix = Segment(tokens(20, MOE.vocab_size, 3), 0, others_tbl[:5], logits="none")
    model.forward([prefix])
    batch = [
        Segment(tokens(9, MOE.vocab_size, 4), 20, others_tbl[:8], "prefill", "last"),
        Segment(mine, 0, my_tbl, "prefill", "all"),
        Segment(tokens(1, MOE.vocab_size, 6), 5, others_tbl[8:10], "decode", "last"),
    ]
    mixed = model.forward(batch)[1]
    assert np.abs(mixed - alone).max() < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", [LLAMA, GPT2], ids=lambda s: s.name)
def test_speculative_greedy_equals_plain_greedy(spec, dtype):
    w = init_weights(spec, 0, dtype)
    draft = truncated(w, 1)  # a smaller draft: the target's first layer, same embeddings and head
    prompt = list(tokens(9, spec.vocab_size, 7))
    plain = greedy_generate(Model(w, PagedKVCache(spec, 4, dtype)), prompt, 24)
    for k in (1, 3, 5):
        spec_out, passes = speculative_generate(
            Model(w, PagedKVCache(spec, 4, dtype)), Model(draft, PagedKVCache(spec, 4, dtype)), prompt, 24, k
        )
        assert spec_out == plain
        assert passes <= 23  # never more target passes than plain decoding


@pytest.mark.parametrize("dtype", DTYPES)
def test_sliding_window_chunked_and_decode_match_full(dtype):
    spec = LLAMA.with_(sliding_window=8)
    w = init_weights(spec, 0, dtype)
    toks = tokens(40, spec.vocab_size)
    full = contiguous_logits(w, toks)
    assert np.abs(chunked_logits(w, toks, [5, 13, 14, 15, 30]) - full).max() < TOL[dtype]
    # a window as long as the sequence is plain causal attention; a short one changes the logits
    plain = init_weights(LLAMA, 0, dtype)
    assert np.abs(contiguous_logits(plain, toks, window=40) - contiguous_logits(plain, toks)).max() < TOL[dtype]
    assert np.abs(full - contiguous_logits(plain, toks)).max() > 1e3 * TOL[dtype]


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_quantised_paths_report_their_error():
    """INT8 weights and INT8/FP8 KV are not exact: their relative logit error is reported and bounded."""
    w = init_weights(LLAMA, 0, np.float64)
    toks = tokens(40, LLAMA.vocab_size)
    ref = contiguous_logits(w, toks)
    errors = {"int8-weights": _rel_err(contiguous_logits(int8_weights(w), toks), ref)}
    for kind in ("int8", "fp8"):
        model = Model(w, PagedKVCache(LLAMA, 4, np.float64, quant=kind))
        seq = Sequence(model, [])
        out = np.concatenate([seq.feed(list(toks[:20]), "all"), *[seq.feed([t], "all") for t in toks[20:]]])
        errors[f"{kind}-kv"] = _rel_err(out, ref)
    print("relative logit error:", {k: f"{v:.2e}" for k, v in errors.items()})
    for name, err in errors.items():
        assert 0 < err < 0.1, name  # not equal, but close
    assert errors["int8-kv"] < errors["fp8-kv"]  # 8-bit integer keeps more mantissa than E4M3
