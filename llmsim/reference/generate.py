"""Whole sequences through the reference model: one contiguous prefill, greedy decoding, and
greedy speculative decoding with a smaller draft (the equivalence tests' and examples' paths)."""

from __future__ import annotations

import numpy as np

from llmsim.reference.model import Model, Segment
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.weights import Weights


def contiguous_logits(weights: Weights, tokens: np.ndarray, window: int | None = None) -> np.ndarray:
    """Whole sequence in one prefill through a contiguous (one block) cache: [n] -> [n, n_vocab]."""
    cache = PagedKVCache(weights.spec, block_tokens=max(1, len(tokens)), dtype=weights.dtype)
    table = cache.allocate(1)
    (out,) = Model(weights, cache).forward([Segment(tokens, 0, table, logits="all", window=window)])
    return out  # type: ignore[return-value]


class Sequence:
    """A sequence's token ids and block table in a shared paged cache (for chunked/spec tests)."""

    def __init__(self, model: Model, tokens: list[int] | np.ndarray) -> None:
        self.model, self.tokens, self.table, self.cached = model, list(tokens), [], 0

    def _ensure(self, total: int) -> None:
        bt = self.model.cache.block_tokens
        need = -(-total // bt) - len(self.table)
        if need > 0:
            self.table += self.model.cache.allocate(need)

    def feed(self, new: list[int], logits: str = "last") -> np.ndarray:
        """Append tokens and run them as one chunk after what is cached."""
        self._ensure(self.cached + len(new))
        seg = Segment(np.asarray(new), self.cached, self.table, "decode" if len(new) == 1 else "prefill", logits)
        (out,) = self.model.forward([seg])
        self.cached += len(new)
        return out  # type: ignore[return-value]

    def rollback(self, cached: int) -> None:
        """Forget cached tokens past ``cached`` (rejected speculative tokens): later writes overwrite them."""
        self.cached = cached


def greedy_generate(model: Model, prompt: list[int], n: int) -> list[int]:
    seq = Sequence(model, prompt)
    out = [int(np.argmax(seq.feed(list(prompt))[-1]))]
    while len(out) < n:
        out.append(int(np.argmax(seq.feed([out[-1]])[-1])))
    return out


def speculative_generate(target: Model, draft: Model, prompt: list[int], n: int, k: int = 4) -> tuple[list[int], int]:
    """Greedy speculative decoding: the draft proposes ``k`` tokens, the target checks them in one
    forward pass and keeps the longest agreeing prefix plus its own next token. Returns the
    tokens and the number of target verification passes."""
    tseq, dseq = Sequence(target, prompt), Sequence(draft, prompt)
    out = [int(np.argmax(tseq.feed(list(prompt))[-1]))]
    dseq.feed(list(prompt), logits="none")
    passes = 0
    while len(out) < n:
        base = tseq.cached  # tokens of prompt + out[:-1] are cached in both models
        proposal, nxt = [], out[-1]
        for _ in range(k):
            nxt = int(np.argmax(dseq.feed([nxt])[-1]))
            proposal.append(nxt)
        logits = tseq.feed([out[-1], *proposal[:-1]], logits="all")  # [k, n_vocab]
        passes += 1
        want = np.argmax(logits, axis=-1)
        accepted = 0
        while accepted < k and proposal[accepted] == int(want[accepted]):
            accepted += 1
        new = proposal[:accepted] + ([int(want[accepted])] if accepted < k else [])
        out.extend(new)
        # keep the K/V of out[-1..] that were fed and agreed; the rest is overwritten later
        kept = base + 1 + min(accepted, k - 1)
        tseq.rollback(kept)
        dseq.rollback(kept)
    return out[:n], passes
