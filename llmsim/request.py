"""A request's serving state: tokens prefilled and generated, KV blocks, timestamps.

The same objects flow through the simulator and the NumPy reference engine; schedulers read
and update their token counters, the engines stamp the times.
"""

from __future__ import annotations

import math

WAITING, RUNNING, FINISHED, REJECTED = "waiting", "running", "finished", "rejected"


class Request:
    __slots__ = (
        "id",
        "arrival_s",
        "prompt_tokens",
        "output_tokens",
        "klass",
        "block_hashes",
        "prefill_target",
        "prefilled",
        "kv_tokens",
        "generated",
        "cached_tokens",
        "blocks",
        "block_ids",
        "status",
        "reject_reason",
        "replica",
        "preemptions",
        "first_token_s",
        "last_token_s",
        "finish_s",
        "max_tbt_s",
        "queued_s",
        "transfer_s",
        "spec_steps",
        "spec_accepted",
        "swapped",
        "prefix_chain",
        "prefill_only",
        "n_seqs",
        "payload",
        "admit_seq",
        "tick0",
        "chunks",
        "lora_id",
    )

    def __init__(
        self,
        rid: int,
        arrival_s: float,
        prompt_tokens: int,
        output_tokens: int,
        klass: str = "",
        block_hashes: list[int] | None = None,
    ) -> None:
        self.id = rid
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.klass = klass
        self.block_hashes = block_hashes
        self.prefill_target = prompt_tokens  # tokens to prefill before the next sampled token
        self.prefilled = 0  # of prefill_target, tokens already processed (incl. prefix-cache hits)
        self.kv_tokens = 0  # tokens whose K/V are in the cache
        self.generated = 0  # output tokens emitted so far
        self.cached_tokens = 0  # prompt tokens served from the prefix cache at its first lookup (vLLM's)
        self.blocks = 0  # KV blocks held
        self.block_ids: list[int] | None = None  # physical block table (prefix caching / reference engine)
        self.status = WAITING
        self.reject_reason = ""
        self.replica = -1
        self.preemptions = 0
        self.first_token_s = math.nan
        self.last_token_s = math.nan
        self.finish_s = math.nan
        self.max_tbt_s = 0.0
        self.queued_s = math.nan  # first time the request was scheduled
        self.transfer_s = 0.0  # disaggregated: KV transfer time
        self.spec_steps = 0  # speculative decoding: verify steps taken
        self.spec_accepted = 0  # speculative decoding: draft tokens accepted
        self.swapped = False  # preempted by swap: KV lives in host memory until swapped back in
        # chained hashes of the full KV blocks of its prompt (and answer, where a later prompt repeats it)
        self.prefix_chain: list[int] | None = None
        self.prefill_only = False  # disaggregated: leaves the prefill replica after its prompt
        # parallel sampling / beam search: sequences decoded together, sharing the prompt's KV
        # blocks (copy-on-write of the partly filled last one); token counters are per sequence
        self.n_seqs = 1
        self.payload: object = None  # engine-specific data (token ids in the reference engine)
        self.admit_seq = -1  # order of (re)admission into the running set: newest is preempted first
        self.tick0 = 0  # DecodeSet member: the replica's decode step count its counters refer to
        # traced requests (output.trace): (end of step, tokens) of every prefill chunk, for the
        # timeline; None for the others, which keep nothing per step
        self.chunks: list[tuple[float, int]] | None = None
        self.lora_id = -1  # multi-LoRA: the adapter this request runs with (-1: the base model)

    # ---- derived counters ------------------------------------------------------------
    @property
    def prompt_remaining(self) -> int:
        """Tokens still to prefill before the next token can be sampled."""
        return self.prefill_target - self.prefilled

    @property
    def in_prefill(self) -> bool:
        return self.prefilled < self.prefill_target

    @property
    def remaining_output(self) -> int:
        return self.output_tokens - self.generated

    def prefill_chunk(self, tokens: int, end_s: float) -> None:
        """A step that ended at ``end_s`` prefilled ``tokens`` more of its prompt (into its KV)."""
        if self.queued_s != self.queued_s:  # NaN: first time scheduled
            self.queued_s = end_s
        self.prefilled += tokens
        self.kv_tokens += tokens
        if self.chunks is not None:
            self.chunks.append((end_s, tokens))

    def preempt_for_recompute(self) -> None:
        """Drop the KV cache. Later the prompt and every generated token are prefilled again in
        one go; that prefill samples the next token, so no output token is produced twice."""
        self.prefill_target = self.prompt_tokens + self.generated
        self.prefilled = 0
        self.kv_tokens = 0
        self.preemptions += 1

    def preempt_for_swap(self) -> None:
        """Keep every counter: the KV moves to host memory and comes back intact."""
        self.swapped = True
        self.preemptions += 1

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (
            f"Request(id={self.id}, prompt={self.prompt_tokens}, out={self.output_tokens}, "
            f"prefilled={self.prefilled}/{self.prefill_target}, kv={self.kv_tokens}, "
            f"generated={self.generated}, status={self.status})"
        )


def admit_order(r: Request) -> int:
    """Sort key: the order requests were (re)admitted into the running set (the newest is preempted first)."""
    return r.admit_seq


def blocks_for(tokens: int, block_tokens: int) -> int:
    return -(-tokens // block_tokens)
