"""What one planned step costs a replica: the model step, swap copies, speculative drafting.

The cost model prices the plan's shape (``CostModel.step_time``); a replica adds the copies of
preempted KV to or from host memory over the host link before the step, the reads of prefix
blocks from KV offload tiers (``BlockManager.take_load_s``), the copies of LoRA adapters its
batch uses that are not in a GPU slot (``lora.LoraCache``), and the draft model's (or MTP heads')
proposals of speculative decoding, and the wait of a step that is first to need a fused-MoE
kernel variant start-up did not compile (``moejit.MoeKernels``). The totals are the replica's
counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.costmodel.ops import BatchShape, model_batch_shape
from llmsim.schedulers.plan import BatchPlan

if TYPE_CHECKING:
    from llmsim.build import PoolSpec
    from llmsim.kvcache import BlockManager
    from llmsim.lora import LoraCache
    from llmsim.moejit import Key, MoeKernels


class StepCost:
    """Prices a replica's plans and keeps the totals of what was added to the model step."""

    def __init__(
        self,
        pool: PoolSpec,
        kv_bytes_per_token: float,
        kv: BlockManager | None = None,
        lora: LoraCache | None = None,
        compiled: tuple[Key, ...] = (),
    ) -> None:
        self.cost = pool.cost
        # the server's compiled fused-MoE kernels (None: not tracked, moejit.moe_jit_spec)
        self.kernels: MoeKernels | None = None if pool.moe_jit is None else pool.moe_jit.start(compiled)
        self.draft_cost = pool.draft_cost
        host = pool.hw.host_link
        self._host_bw = host.bandwidth_bytes_per_s.value * pool.tp * pool.pp
        self._host_lat = host.latency_s.value
        self._kv_bytes_per_token = kv_bytes_per_token
        self.kv = kv  # whose offload-tier reads a step waits for
        self.lora = lora  # the replica's adapters (multi-LoRA)
        self.lora_kernel_s = 0.0  # of the model steps, the LoRA kernels' seconds
        self.swap_s = 0.0
        self.offload_load_s = 0.0
        self.draft_s = 0.0
        self.spec_base_s = 0.0  # what the verify steps would have cost decoding one token a request
        self.spec_time_s = 0.0  # what draft + verify cost

    def price(self, plan: BatchPlan, shape: BatchShape) -> tuple[float, float, float]:
        """(step seconds, of which host copies (swaps, offload reads, adapter loads), of which drafting)."""
        swap = self.swap_time(plan)
        if self.lora is not None:
            swap += self._lora(plan, shape)
        dt = self.cost.step_time(shape, plan.changed)
        # the step waits for Triton before its experts run (speculation or not: its baseline waits too)
        stall = 0.0 if self.kernels is None else self.kernels.stall_s(self.expert_tokens(shape))
        dt += stall
        draft = 0.0
        if plan.spec_k and plan.decode:
            contexts = [r.kv_tokens for r in plan.decode]  # the same rows, one token each
            if self.draft_cost is None:  # self-speculation: each MTP head costs about one layer
                decodes = self._grouped(model_batch_shape(self.cost.model, [], contexts), shape)
                draft = plan.spec_k * self.cost.step_time(decodes) / self.cost.model.num_layers
            else:  # the draft model's own step over the same rows, with its own attention windows
                # (its own cost model has no expert parallelism: no DP group gathers its tokens)
                decodes = model_batch_shape(self.draft_cost.model, [], contexts)
                if self.draft_cost.cfg.ep > 1:
                    decodes = self._grouped(decodes, shape)
                draft = plan.spec_k * self.draft_cost.step_time(decodes)
            # the speedup's baseline: the same step, its prompt chunks included, decoding one token
            # a request (comparing a mixed step with its decodes alone would charge the chunks to
            # speculation)
            chunks = [(c, r.kv_tokens) for r, c in plan.prefill]
            padded = [r.kv_tokens for r in plan.padding for _ in range(r.n_seqs)]
            plain = self._grouped(model_batch_shape(self.cost.model, chunks, contexts + padded), shape)
            self.draft_s += draft
            self.spec_base_s += self.cost.step_time(plain, plan.changed) + stall
            self.spec_time_s += dt + draft
        return dt + swap + draft, swap, draft

    def expert_tokens(self, shape: BatchShape) -> int:
        """The tokens a step's experts run over: padded to the captured size under a CUDA graph."""
        return self.cost.graph_view(shape.tokens, shape.prefill_tokens == 0)[0]

    def compiles(self, shape: BatchShape) -> bool:
        """Would this step wait for a fused-MoE kernel to compile (then it is priced alone)?"""
        return self.kernels is not None and self.kernels.pending(self.expert_tokens(shape))

    @staticmethod
    def _grouped(alone: BatchShape, step: BatchShape) -> BatchShape:
        """``alone`` (part of ``step``'s rows) on lock-stepped EP ranks (dpgroup.py): the group
        gathers tokens in proportion to the rows, and splits them for dual batch overlap as it
        decided for the step."""
        if step.group_tokens:
            alone.group_tokens = max(1, step.group_tokens * alone.tokens // step.tokens)
        alone.microbatch = step.microbatch
        return alone

    def swap_time(self, plan: BatchPlan) -> float:
        """Copying preempted KV to or from host memory before the step, over the host link, and
        reading the prefix blocks its admissions found in offload tiers."""
        load = 0.0
        if self.kv is not None and self.kv.tiers:
            load = self.kv.take_load_s()
            self.offload_load_s += load
        moved = plan.swap_in_tokens + plan.swap_out_tokens
        if not moved:
            return load
        swap = self._host_lat + moved * self._kv_bytes_per_token / self._host_bw
        self.swap_s += swap
        return swap + load

    def _lora(self, plan: BatchPlan, shape: BatchShape) -> float:
        """Multi-LoRA: mark on ``shape`` the tokens that run with an adapter and how many adapters
        (the LoRA kernels' terms, ``ops.lora_ops``); returns the seconds of copying in the adapters
        not in a GPU slot."""
        assert self.lora is not None
        adapters: set[int] = set()
        tokens = 0
        for r, c in plan.prefill:
            if r.lora_id >= 0:
                adapters.add(r.lora_id)
                tokens += c
        per_decode = plan.spec_k + 1 if plan.spec_k else 1
        for r in plan.decode:
            if r.lora_id >= 0:
                adapters.add(r.lora_id)
                tokens += per_decode * r.n_seqs
        if not adapters:
            return 0.0
        shape.lora_tokens, shape.lora_adapters = tokens, len(adapters)
        self.lora_kernel_s += self.cost.lora_s(shape)
        return self.lora.activate(adapters)

    def counters(self) -> dict[str, float]:
        jit = self.kernels  # (zeros where untracked: a frame of replicas of several pools sums them)
        out: dict[str, float] = {
            "moe_jit_compiles": 0 if jit is None else jit.compiles,
            "moe_jit_wait_s": 0.0 if jit is None else jit.wait_s,
            "swap_s": self.swap_s,
            "offload_load_s": self.offload_load_s,
            "draft_s": self.draft_s,
            "spec_base_s": self.spec_base_s,
            "spec_time_s": self.spec_time_s,
        }
        if self.lora is not None:
            out |= self.lora.counters() | {"lora_kernel_s": self.lora_kernel_s}
        return out
