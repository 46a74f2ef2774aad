"""What a scheduler decides for one step (``BatchPlan``), and the columnar decoders it may hold.

A plan lists the step's prefill chunks and decodes; ``shape()`` reduces it to the aggregates the
cost model prices (``costmodel.ops.BatchShape``). ``DecodeColumns`` is what a scheduler needs of
a set of decoding requests held as columns (the simulator passes its ``decodeset.DecodeSet``;
the reference engine passes none): the scheduler knows the interface, not the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from llmsim.costmodel.ops import BatchShape, chunk_aggregates, decode_keys_seen
from llmsim.request import Request


class DecodeColumns(Protocol):
    """Decoding requests held as columns: one token per member per tick (``decodeset.DecodeSet``)."""

    n: int  # members
    ctx: int  # Σ kv_tokens of the members

    def add(self, r: Request) -> None: ...

    def flush(self) -> list[Request]: ...

    def blocks_next(self) -> int: ...

    def newest(self) -> int: ...

    def allocate(self, blocks: int, ticks: int = 1) -> None: ...

    def tick_once(self, end_s: float) -> list[Request]: ...


@dataclass(init=False)
class BatchPlan:
    prefill: list[tuple[Request, int]]  # (request, new prompt tokens)
    decode: list[Request]
    preempted: list[Request]
    padding: list[Request]  # static batching: finished slots still computed
    swap_in_tokens: int  # KV tokens copied host -> device before this step
    swap_out_tokens: int  # KV tokens copied device -> host (swap preemption)
    spec_k: int  # speculative decoding: each decode verifies spec_k drafts (spec_k + 1 tokens)
    # columnar replicas: every member of this set decodes too; its size and Σ context when planned
    decode_set: DecodeColumns | None
    set_n: int
    set_ctx: int
    # the running batch changed in the step before (a request left or had prompt tokens): set by
    # the replica, priced by the engine's batch_change term (engine.py)
    changed: bool

    def __init__(self) -> None:  # written out: compiled natively, one per step (see BatchShape)
        self.prefill = []
        self.decode = []
        self.preempted = []
        self.padding = []
        self.swap_in_tokens = self.swap_out_tokens = self.spec_k = 0
        self.decode_set = None
        self.set_n = self.set_ctx = 0
        self.changed = False

    @property
    def num_decode(self) -> int:
        return len(self.decode) + self.set_n

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.num_decode

    @property
    def prefill_tokens(self) -> int:
        return sum(c for _, c in self.prefill)

    @property
    def size(self) -> int:
        return len(self.prefill) + self.num_decode + len(self.padding)

    def shape(
        self, window: int | None = None, local_window: int | None = None, spec_as_decode: bool = False
    ) -> BatchShape:
        """The step's aggregates for the cost model (context = tokens already cached). Speculative
        verification of k drafts is priced as a (k+1)-token chunk per decoding sequence, or, with
        ``spec_as_decode`` (MLA models: vLLM's MLA backends run short verification queries in their
        decode kernel, ``_init_reorder_batch_threshold(..., supports_spec_as_decode=True)`` in
        vllm/v1/attention/backends/mla/), as k+1 decode tokens per sequence. Models that
        interleave local and global layers pass ``local_window`` too (``ModelSpec.attention_windows``).
        The same aggregates as ``ops.batch_shape`` of the plan's rows, written over the plan's own
        lists for the step loop; ``tests/test_one_source.py::test_batch_plan_shape_is_batch_shape_of_its_rows``
        holds the two equal."""
        if local_window is not None:  # (set on the fresh shape: dataclasses.replace took ~5 µs a step)
            shape = self.shape(window, None, spec_as_decode)
            shape.local = self.shape(local_window, None, spec_as_decode)
            return shape
        # (the per-chunk and per-row sums are ops.chunk_aggregates and ops.decode_keys_seen, the
        # same as batch_shape's; the loops run over the plan's lists, building none per step)
        p_tokens = pairs = kv = score = sampled = 0
        for r, c in self.prefill:
            chunk_pairs_, keys_seen, score_elems = chunk_aggregates(c, r.kv_tokens, window)
            p_tokens += c
            pairs += chunk_pairs_
            kv += keys_seen
            score += score_elems
            sampled += r.prefilled + c == r.prefill_target  # only prompts that finish are sampled
        n_chunks = len(self.prefill)
        d_ctx = n_dec = 0  # parallel sampling: every sequence of a request decodes its own row
        for r in self.padding:  # static batching's finished slots decode too (their rows are wasted)
            d_ctx += decode_keys_seen(r.kv_tokens, 1, window) * r.n_seqs
            n_dec += r.n_seqs
        d_tok = 0  # decode tokens beyond one per decoding row: speculative verification as decode
        if self.spec_k and spec_as_decode:  # k+1 query tokens per request, in the decode kernel
            verify = self.spec_k + 1
            for r in self.decode:
                d_ctx += decode_keys_seen(r.kv_tokens, verify, window)
                n_dec += 1
                d_tok += verify - 1
        elif self.spec_k:  # each decode verifies its k drafts: a (k+1)-token chunk, one per request
            verify = self.spec_k + 1
            for r in self.decode:
                chunk_pairs_, keys_seen, score_elems = chunk_aggregates(verify, r.kv_tokens, window)
                p_tokens += verify
                pairs += chunk_pairs_
                kv += keys_seen
                score += score_elems
            n_chunks += len(self.decode)
        else:
            for r in self.decode:
                d_ctx += decode_keys_seen(r.kv_tokens, 1, window) * r.n_seqs
                n_dec += r.n_seqs
        if self.set_n:  # columnar sets run without windows: each member's context plus its new token
            d_ctx += self.set_ctx + self.set_n
            n_dec += self.set_n
        return BatchShape(
            prefill_tokens=p_tokens,
            prefill_seqs=n_chunks,
            prefill_attn_pairs=pairs,
            prefill_kv_tokens=kv,
            prefill_score_elems=score,
            decode_seqs=n_dec,
            decode_tokens=n_dec + d_tok,
            decode_ctx_tokens=d_ctx,
            # verification samples every position
            logits_rows=sampled
            + n_dec
            + d_tok
            + (0 if spec_as_decode else len(self.decode) * (self.spec_k + 1 if self.spec_k else 0)),
        )
