"""Model architectures: a catalog of well-known models and any HuggingFace ``config.json``.

Parameter counts and KV-cache bytes are derived from the architecture (GQA, MoE, tied
embeddings, biases), never typed in; tests check them against published counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from llmsim.errors import UserError, did_you_mean, load_json_object

if TYPE_CHECKING:
    from collections.abc import Iterable

    from llmsim.quantconfig import CheckpointQuant


class MatrixUnits(Protocol):
    """What a device says of its matrix units (HardwareProfile; named so, models.py does not
    import hardware.py, which imports it)."""

    def computes_in(self, dtype: str) -> bool: ...


DTYPE_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5}
# weight storage only (no matrix unit computes in it: GEMMs dequantise to act_dtype): OCP MXFP4, a
# 4-bit E2M1 value per element plus one 8-bit E8M0 scale per 32 (OCP Microscaling Formats v1.0),
# 4.25 bits: GPT-OSS's experts as released
DTYPE_BYTES["mxfp4"] = 4.25 / 8
# Group-quantised weights carry a scale (and, asymmetric, a zero point) per group of weights along
# a column: bytes the weight streams read with them. Each dtype's default is its usual checkpoint
# format, as (weights per group, bits of scale and zero point per group); a scenario's
# model.weight_group_size / weight_scale_bits override it (ITREX's fp32 scales, llama.cpp's Q4_0):
# - int4: AWQ / GPTQ at group 128 (vLLM's and TensorRT-LLM's int4 checkpoints): an fp16 scale and
#   a 4-bit zero point packed eight to an int32 (AutoAWQ / AutoGPTQ qzeros), 20 bits, 4.16 bits
#   a weight;
# - fp4: NVFP4, an E4M3 scale per 16 values (NVIDIA, "Introducing NVFP4", 2025; ModelOpt and
#   TensorRT-LLM's FP4), 4.5 bits a weight; its one fp32 scale per tensor is left out.
# fp8 and int8 checkpoints scale per tensor or per output channel (FP8 block scales: one per
# 128 x 128), under 0.2 % of their bytes: none counted.
WEIGHT_GROUPS: dict[str, tuple[int, float]] = {"int4": (128, 20.0), "fp4": (16, 8.0)}


def weight_groups(dtype: str, group_size: int | None = None, scale_bits: float | None = None) -> tuple[int, float]:
    """(weights per scale, bits of scale and zero point per group) of ``dtype``'s weights: the
    given values, either left ``None`` the dtype's default format (``WEIGHT_GROUPS``; an fp16
    scale for a group size given to a dtype without one). 0 weights per scale: no group scales
    (per channel), as 16- and 32-bit weights always are (a quantised model's LM head among them)."""
    default_group, default_bits = WEIGHT_GROUPS.get(dtype, (0, 16.0))
    group = 0 if DTYPE_BYTES[dtype] >= 2 else default_group if group_size is None else group_size
    return group, default_bits if scale_bits is None else scale_bits


def weight_param_bytes(dtype: str, group_size: int | None = None, scale_bits: float | None = None) -> float:
    """Bytes one stored weight of ``dtype`` takes, its share of its group's scales included
    (``weight_groups`` says which groups)."""
    group, bits = weight_groups(dtype, group_size, scale_bits)
    return DTYPE_BYTES[dtype] + bits / 8 / group if group else DTYPE_BYTES[dtype]


# DeepSeek sparse attention's fields, ModelSpec's and config.json's alike: a deepseek config with
# index_topk is served with the indexer (vLLM's DeepseekV2 attention: ``is_v32 = hasattr(config,
# "index_topk")``), so all three are needed
DSA_FIELDS = ("index_n_heads", "index_head_dim", "index_topk")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer. Sizes are for the whole model (not per device)."""

    name: str
    hidden_size: int
    intermediate_size: int  # per expert for MoE
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU: gate and up projections (3 matrices) instead of 2
    norm: str = "rmsnorm"  # "rmsnorm" (weight only) or "layernorm" (weight + bias)
    qkv_bias: bool = False  # Qwen2 style
    linear_bias: bool = False  # GPT-2 style: every linear has a bias
    learned_positions: int = 0  # GPT-2: size of the learned absolute position table (0 = RoPE)
    # GPT-J style: attention and MLP read the same normalised input, x + attn(ln(x)) + mlp(ln(x)),
    # so a layer has one norm, not two (HF GPTJBlock; vLLM models/gpt_j.py GPTJBlock.forward)
    parallel_residual: bool = False
    num_experts: int = 0  # 0 = dense MLP
    experts_per_token: int = 0
    sliding_window: int | None = None
    global_attn_every: int = 0  # with a window: every n-th layer attends globally, the rest locally (0: all local)
    max_position_embeddings: int = 4096
    weight_dtype: str = "bf16"
    # the decoder weights' quantisation groups (weight_param_bytes): None = the dtype's default format
    weight_group_size: int | None = None
    weight_scale_bits: float | None = None
    # a checkpoint's own quantisation (its config.json quantization_config, quantconfig.py): the
    # compute dtype of its GEMMs ("" weight-only: 16-bit) and the KV cache dtype vLLM's
    # --kv-cache-dtype auto takes from it ("" the model's); a scenario that does not set
    # model.act_dtype / kv_cache.dtype runs with them (scenario.apply_checkpoint)
    checkpoint_act_dtype: str = ""
    checkpoint_kv_dtype: str = ""
    source: str = ""
    # DeepSeek MoE (DeepSeek-V2/V3 config.json): ``n_shared_experts`` experts of intermediate_size
    # every token passes through besides its routed ones, and the first ``first_k_dense_replace``
    # layers dense MLPs of ``dense_intermediate_size`` (the config's intermediate_size)
    shared_experts: int = 0
    first_dense_layers: int = 0
    dense_intermediate_size: int = 0
    # multi-head latent attention (MLA, DeepSeek-V2 arXiv:2405.04434 sec. 2.1; V3 arXiv:2412.19437
    # sec. 2.1.1): K and V come from a cached latent of kv_lora_rank plus one shared RoPE key of
    # qk_rope_head_dim; q from a latent of q_lora_rank (0: a plain projection). With MLA,
    # num_kv_heads = num_heads and head_dim = qk_nope + qk_rope (the q/k head of the expanded form)
    kv_lora_rank: int = 0  # 0 = not MLA
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # Llama 4 (Llama4TextConfig.interleave_moe_layer_step): every n-th layer is MoE, the others
    # dense MLPs of dense_intermediate_size (HF: moe_layers = range(n - 1, num_layers, n))
    moe_layer_step: int = 1
    # the routed experts' own storage dtype where the checkpoint quantises them alone (GPT-OSS:
    # mxfp4, attention and embeddings bf16); "" = weight_dtype
    expert_weight_dtype: str = ""
    # DeepSeekMoE's group-limited routing (config.json n_group / topk_group): the routed experts in
    # ``expert_groups`` groups, a token's experts all within ``expert_groups_per_token`` of them
    # (DeepSeek-V3: 8 and 4, so a token reaches at most 4 nodes when each holds whole groups); 0 = none
    expert_groups: int = 0
    expert_groups_per_token: int = 0
    # the router adds a learned bias per expert to its scores before it picks (config.json topk_method
    # noaux_tc: DeepSeek-V3's e_score_correction_bias). Under vLLM's dummy weights (--load-format dummy:
    # every tensor uniform in +-1e-3, initialize_dummy_weights in vllm/model_executor/model_loader/
    # weight_utils.py) the bias outweighs the scores, which differ by ~1e-5, so every token picks the
    # same experts (vllmcli.DUMMY_WEIGHTS_NOTE)
    router_bias: bool = False
    # DeepSeek Sparse Attention (DSA, DeepSeek-V3.2; config.json index_n_heads / index_head_dim /
    # index_topk): with MLA, a lightning indexer of index_n_heads x index_head_dim scores every
    # cached token of a query (FP8, its own key cache) and the attention reads only the index_topk
    # best. 0 = dense MLA
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0

    def __post_init__(self) -> None:
        """Refuse field combinations the cost model would price as something else (MLA's and
        DeepSeekMoE's fields; the older fields are checked where they are read)."""
        where = f"model {self.name!r}"
        for field in (
            "first_dense_layers",
            "dense_intermediate_size",
            "shared_experts",
            "kv_lora_rank",
            "q_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
            *DSA_FIELDS,
        ):
            if getattr(self, field) < 0:
                raise UserError(f"{where}: {field}: expected a non-negative integer, got {getattr(self, field)}")
        # first_dense_layers above num_layers is allowed: a truncated copy (with_(num_layers=2), a
        # draft) keeps its dense first layers, all of them dense (moe_layers / decoder_params cap it)
        if self.weight_group_size is not None and self.weight_group_size < 0:
            raise UserError(
                f"{where}: weight_group_size: expected weights per scale (0: per channel), got {self.weight_group_size}"
            )
        if self.weight_scale_bits is not None and not 0 <= self.weight_scale_bits <= 64:
            raise UserError(
                f"{where}: weight_scale_bits: expected the bits of a group's scale and zero point (0-64), "
                f"got {self.weight_scale_bits}"
            )
        groups, picks = self.expert_groups, self.expert_groups_per_token
        if (groups or picks) and not (0 < picks <= groups and self.num_experts % groups == 0):
            raise UserError(
                f"{where}: expert_groups {groups} / expert_groups_per_token {picks}: expected groups that divide "
                f"the {self.num_experts} experts and 1..groups picked a token (config.json n_group, topk_group)"
            )
        if self.moe_layer_step < 1:
            raise UserError(f"{where}: moe_layer_step: expected an integer >= 1, got {self.moe_layer_step}")
        if self.expert_weight_dtype and self.expert_weight_dtype not in DTYPE_BYTES:
            raise UserError(
                f"{where}: expert_weight_dtype: {self.expert_weight_dtype!r} is not one of {sorted(DTYPE_BYTES)}"
            )
        if (self.first_dense_layers or self.moe_layer_step > 1) and self.dense_intermediate_size <= 0:
            raise UserError(
                f"{where}: dense_intermediate_size: must be > 0 with dense layers (first_dense_layers "
                f"{self.first_dense_layers}, moe_layer_step {self.moe_layer_step}): the dense layers' MLP width"
            )
        mla_fields = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        if any(getattr(self, f) for f in DSA_FIELDS):
            missing = [f for f in DSA_FIELDS if getattr(self, f) <= 0]
            if missing:
                raise UserError(f"{where}: {missing[0]}: DeepSeek sparse attention needs {', '.join(DSA_FIELDS)} > 0")
            if not self.is_mla or not self.q_lora_rank:
                raise UserError(
                    f"{where}: {'kv_lora_rank' if not self.is_mla else 'q_lora_rank'}: DeepSeek sparse attention "
                    "needs multi-head latent attention with q_lora_rank > 0 (the indexer reads the query latent)"
                )
            if self.index_head_dim > 128 and self.index_head_dim % 128:
                raise UserError(
                    f"{where}: index_head_dim: {self.index_head_dim} is not a multiple of 128, the group the "
                    "indexer's FP8 keys are scaled in (vLLM's quant_block_size)"
                )
            if self.index_head_dim < self.qk_rope_head_dim:
                raise UserError(
                    f"{where}: index_head_dim: {self.index_head_dim} is narrower than the rope part it carries "
                    f"(qk_rope_head_dim {self.qk_rope_head_dim})"
                )
        if not self.is_mla:
            stray = [f for f in mla_fields if getattr(self, f)]
            if stray:
                raise UserError(f"{where}: {stray[0]}: an MLA field without kv_lora_rank > 0 (not MLA)")
            return
        for field in ("v_head_dim", "qk_rope_head_dim"):
            if getattr(self, field) <= 0:
                raise UserError(f"{where}: {field}: multi-head latent attention needs it > 0")
        if self.sliding_window is not None:
            raise UserError(
                f"{where}: sliding_window: multi-head latent attention with a sliding window is not "
                "modelled (the MLA path attends to the whole context)"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def spec_as_decode(self) -> bool:
        """Does a speculative verification step run in the decode kernel (k+1 query tokens per
        request) rather than as a (k+1)-token prefill chunk? MLA: vLLM's MLA backends take short
        queries as decodes (``_init_reorder_batch_threshold(..., supports_spec_as_decode=True)``,
        vllm/v1/attention/backends/mla/); the chunk form would up-project every cached latent."""
        return self.is_mla

    @property
    def is_dsa(self) -> bool:
        """DeepSeek sparse attention: MLA over the index_topk tokens a lightning indexer picks."""
        return self.index_topk > 0

    @property
    def index_cache_row_bytes(self) -> int:
        """Bytes the indexer caches per token per layer, whatever the KV cache's dtype: its key in
        FP8 and one fp32 scale per group of up to 128 values (vLLM's DeepseekV32IndexerCache head
        size ``head_dim + head_dim // quant_block_size * 4`` = 132 for DeepSeek-V3.2)."""
        return self.index_head_dim + -(-self.index_head_dim // 128) * 4 if self.is_dsa else 0

    @property
    def moe_layers(self) -> int:
        """Layers with an MoE MLP (all of them but the first dense ones; 0 for a dense model)."""
        return self.num_layers - self.dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        """The dense-MLP layers of an MoE model: its first_dense_layers (at most num_layers), or
        with moe_layer_step n all but every n-th."""
        if self.moe_layer_step > 1:
            return self.num_layers - self.num_layers // self.moe_layer_step
        return min(self.first_dense_layers, self.num_layers)

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    # ---- parameter counts -------------------------------------------------------------
    def attention_params(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            return self.mla_params()
        n = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        if self.qkv_bias or self.linear_bias:
            n += self.q_size + 2 * self.kv_size
        if self.linear_bias:
            n += h
        return n

    def mla_params(self) -> int:
        """MLA's weights (vLLM DeepseekV2MLAAttention): q_a [H, q_lora] + its RMSNorm + q_b [q_lora,
        heads·(nope+rope)] (or q [H, heads·(nope+rope)] without q_lora), kv_a [H, kv_lora + rope] + its
        RMSNorm, kv_b [kv_lora, heads·(nope+v)], o [heads·v, H]."""
        h, heads = self.hidden_size, self.num_heads
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank:
            n = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk
        else:
            n = h * heads * qk
        n += h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        n += self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return n + heads * self.v_head_dim * h + self.indexer_params()

    def indexer_params(self) -> int:
        """DeepSeek sparse attention's indexer per layer (vLLM Indexer): wq_b [q_lora, Hi·di], wk
        [H, di], weights_proj [H, Hi] and the key's LayerNorm (weight and bias); 0 without DSA."""
        if not self.is_dsa:
            return 0
        hi, di = self.index_n_heads, self.index_head_dim
        return self.q_lora_rank * hi * di + self.hidden_size * (di + hi) + 2 * di

    def expert_params(self, intermediate: int = 0) -> int:
        """One MLP (one expert for MoE), of ``intermediate`` when given."""
        h, i = self.hidden_size, intermediate or self.intermediate_size
        n = (3 if self.gated_mlp else 2) * h * i
        if self.linear_bias:
            n += (2 if self.gated_mlp else 1) * i + h
        return n

    def norm_params(self) -> int:
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    @property
    def norms_per_layer(self) -> int:
        """Norms in one decoder layer: before attention and before the MLP, or one shared by both
        with a parallel residual."""
        return 1 if self.parallel_residual else 2

    def layer_params(self, active_only: bool = False) -> int:
        experts = max(1, self.num_experts)
        if self.is_moe and active_only:
            experts = self.experts_per_token
        router = self.hidden_size * self.num_experts if self.is_moe else 0
        n = (
            self.attention_params()
            + experts * self.expert_params()
            + router
            + self.norms_per_layer * self.norm_params()
        )
        if self.shared_experts:  # always active
            n += self.shared_experts * self.expert_params()
        return n

    def dense_layer_params(self) -> int:
        """One of the dense-MLP layers of an MoE model (a dense MLP of dense_intermediate_size)."""
        return (
            self.attention_params()
            + self.expert_params(self.dense_intermediate_size)
            + self.norms_per_layer * self.norm_params()
        )

    def decoder_params(self, active_only: bool = False) -> int:
        """Every decoder layer's parameters (active ones: the routed experts a token uses)."""
        if not self.dense_layers or not self.is_moe:
            return self.num_layers * self.layer_params(active_only)
        moe = (self.num_layers - self.dense_layers) * self.layer_params(active_only)
        return moe + self.dense_layers * self.dense_layer_params()

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size + self.learned_positions * self.hidden_size

    def lm_head_params(self) -> int:
        return 0 if self.tie_embeddings else self.vocab_size * self.hidden_size

    def total_params(self) -> int:
        return self.embedding_params() + self.decoder_params() + self.norm_params() + self.lm_head_params()

    def active_params(self) -> int:
        """Parameters touched per token (MoE: only the routed experts)."""
        return (
            self.embedding_params() + self.decoder_params(active_only=True) + self.norm_params() + self.lm_head_params()
        )

    def weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of the weights in ``dtype``. A quantised checkpoint (fp8, int8, int4: FP8 and W8A8
        from llm-compressor / ModelOpt, AWQ, GPTQ) quantises the decoder layers; the embeddings, the
        final norm and the LM head stay 16-bit (their ``ignore: [lm_head]`` / unquantised modules)."""
        per = self.param_bytes(dtype)
        total = self.total_params()
        # experts with a dtype of their own (GPT-OSS's mxfp4) are counted apart
        experts = self.routed_expert_params() if self.expert_weight_dtype else 0
        if DTYPE_BYTES[dtype or self.weight_dtype] >= 2:
            rest = (total - experts) * per
        else:
            layers = self.decoder_params() - experts
            rest = layers * per + (total - experts - layers) * self.end_param_bytes(dtype)
        return rest + (self.expert_weight_bytes(dtype) if experts else 0.0)

    def routed_expert_params(self) -> int:
        """Parameters of every routed expert on every MoE layer (0 for a dense model)."""
        return self.moe_layers * self.num_experts * self.expert_params()

    def expert_weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of the routed experts' weights (0 for a dense model): the part of ``weight_bytes``
        expert parallelism splits over GPUs. The router stays whole on every GPU, so it is not
        counted here. The experts are decoder-layer weights, stored in ``dtype`` as ``weight_bytes``
        has them, unless the model gives them their own ``expert_weight_dtype`` (GPT-OSS's mxfp4),
        which a scenario's ``model.weight_dtype`` does not change."""
        if not self.is_moe:
            return 0.0
        per = DTYPE_BYTES[self.expert_weight_dtype] if self.expert_weight_dtype else self.param_bytes(dtype)
        return self.routed_expert_params() * per

    def weight_format(self) -> str:
        """The decoder weights' dtype as a report shows it, with the bits a weight takes where
        group scales add to them."""
        bits = self.param_bytes() * 8
        if bits == DTYPE_BYTES[self.weight_dtype] * 8:
            return self.weight_dtype
        return f"{self.weight_dtype}, {bits:.3g} bits a weight with its group scales"

    def param_bytes(self, dtype: str | None = None) -> float:
        """Bytes one decoder-layer weight takes in ``dtype`` (default: the model's), its share of
        the quantisation groups' scales included (``weight_param_bytes``)."""
        return weight_param_bytes(dtype or self.weight_dtype, self.weight_group_size, self.weight_scale_bits)

    def weight_bytes_per_device(
        self, dtype: str | None, tp: int, pp: int, ep: int = 1, redundant_experts: int = 0
    ) -> float:
        """Weights the most loaded GPU holds: the heaviest pipeline stage's (``stage_weight_bytes``)."""
        return max(self.stage_weight_bytes(dtype, tp, pp, ep, redundant_experts))

    def stage_weight_bytes(
        self, dtype: str | None, tp: int, pp: int, ep: int = 1, redundant_experts: int = 0
    ) -> list[float]:
        """Weights one GPU of each pipeline stage holds: everything split over its tp devices,
        except that under expert parallelism the experts are split over ep (vLLM: E/ep whole experts
        per GPU), and for MLA the replicated latent projections and 16-bit W_UK / W_UV
        (``mla_extra_bytes_per_device``). ``redundant_experts``: EPLB's extra expert copies, spread
        over the ep x pp GPUs. Each stage holds its layers (``stage_split``), the first the
        embedding and the last the final norm and the LM head (a tied head loaded there as a copy:
        vLLM builds them on those ranks alone, ``PPMissingLayer`` elsewhere)."""
        total = self.weight_bytes(dtype)
        experts = self.expert_weight_bytes(dtype) if ep > 1 else 0.0
        if pp == 1:
            stages = [(total - experts) / tp + experts / ep]
        else:
            per = self.end_param_bytes(dtype)
            emb = self.embedding_params() * per
            head = (self.norm_params() + self.vocab_size * self.hidden_size) * per  # (a tied one: its copy)
            ends = emb + self.norm_params() * per + self.lm_head_params() * per  # what weight_bytes counts
            layer = (total - ends - experts) / (tp * self.num_layers) + experts / (ep * self.num_layers)
            stages = [n * layer for n in self.stage_split(pp)]
            stages[0] += emb / tp
            stages[-1] += head / tp
        if self.is_mla:
            mla = self.mla_extra_bytes_per_device(dtype, tp, pp)
            stages = [w + mla for w in stages]
        if redundant_experts:
            copies = self.expert_weight_bytes(dtype) / self.num_experts * redundant_experts / (ep * pp)
            stages = [w + copies for w in stages]
        return stages

    def end_param_bytes(self, dtype: str | None = None) -> float:
        """Bytes a weight outside the decoder layers takes (the embedding, final norm and LM head):
        the layers' where they are 16-bit or wider, else 16-bit (a quantised checkpoint leaves them)."""
        return self.param_bytes(dtype) if DTYPE_BYTES[dtype or self.weight_dtype] >= 2 else 2.0

    def mla_replicated_params(self) -> int:
        """MLA weights every TP rank holds whole, per layer: the latent down-projections q_a
        [H, q_lora] and kv_a [H, kv_lora + rope] and their RMSNorms (vLLM DeepseekV2MLAAttention:
        fused_qkv_a_proj / kv_a_proj_with_mqa are ReplicatedLinear)."""
        h, lq = self.hidden_size, self.q_lora_rank
        n = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        return n + (h * lq + lq if lq else 0) + self.indexer_params()  # (the indexer is replicated too)

    def stage_split(self, pp: int) -> list[int]:
        """Layers of each of ``pp`` pipeline stages as vLLM splits them when ``pp`` does not divide
        the layers: the remainder's extra layers go to the stages before the last, from the
        second-to-last back (vllm/distributed/utils.py get_pp_indices), so the last stage keeps
        the LM head and one layer fewer."""
        split = [self.num_layers // pp] * pp
        for i in range(2, self.num_layers % pp + 2):
            split[-i] += 1
        return split

    def stage_layers(self, pp: int) -> int:
        """Layers of the largest of ``pp`` pipeline stages, ceil(num_layers / pp) (``stage_split``):
        the stage that paces a full pipeline and holds the most weights and KV cache per token.
        The cost model prices a stage's kernels at this many layers; a smaller stage takes its
        share of that time (``PipelineReplica``, ``CostModel.step_time``)."""
        return -(-self.num_layers // pp)

    def mla_absorbed_bytes_per_device(self, tp: int, pp: int) -> float:
        """The absorbed decode matrices one GPU keeps beside kv_b_proj: W_UK [P, Lkv] and W_UV
        [Lkv, V] for each of its heads and layers, in 16 bits whatever the checkpoint (vLLM
        MLACommonImpl.process_weights_after_loading dequantises kv_b_proj into W_UK_T and W_UV,
        vllm/v1/attention/backends/mla/common.py)."""
        per_head = self.qk_nope_head_dim * self.kv_lora_rank + self.kv_lora_rank * self.v_head_dim
        return self.stage_layers(pp) * (self.num_heads // tp) * per_head * 2.0

    def mla_extra_bytes_per_device(self, dtype: str | None, tp: int, pp: int) -> float:
        """What MLA adds to an even tp x pp split of the weights on one GPU: the replicated latent
        projections' other (tp - 1)/tp, and the 16-bit absorbed W_UK / W_UV."""
        per = self.param_bytes(dtype)  # decoder-layer weights: the checkpoint's dtype
        replicated = self.num_layers * self.mla_replicated_params() * per
        return replicated * (1 - 1 / tp) / pp + self.mla_absorbed_bytes_per_device(tp, pp)

    # ---- KV cache --------------------------------------------------------------------
    @property
    def mla_cache_width(self) -> int:
        """Elements MLA caches per token per layer: the KV latent and the shared RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def kv_bytes_per_token_per_layer(self, kv_dtype: str = "bf16") -> float:
        if self.is_mla:  # one latent per token, not per head (DeepSeek-V2 sec. 2.1.2: (d_c + d_h^R)·l)
            return self.mla_cache_width * DTYPE_BYTES[kv_dtype] + self.index_cache_row_bytes
        return 2 * self.kv_size * DTYPE_BYTES[kv_dtype]

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> float:
        """K and V for every layer: 2 · L · n_kv · head_dim · bytes (MLA: L · (kv_lora + rope) · bytes)."""
        return self.num_layers * self.kv_bytes_per_token_per_layer(kv_dtype)

    def kv_bytes_per_token_per_device(self, kv_dtype: str, tp: int, pp: int) -> float:
        """KV bytes one GPU caches per token: its KV heads' K and V over its stage's layers. MLA's
        latent has no heads to split: every TP rank caches all of it (vLLM's MLA attention layer
        is built with num_kv_heads = 1 and its cache spec's head size kv_lora_rank + qk_rope_head_dim
        on every rank, vllm/model_executor/layers/mla.py and attention/layer.py MLAAttention)."""
        if self.is_mla:  # (the indexer's key cache too: its heads share one key, replicated as well)
            return self.kv_bytes_per_token_per_layer(kv_dtype) * self.stage_layers(pp)
        return 2 * self.kv_heads_per_device(tp) * self.head_dim * DTYPE_BYTES[kv_dtype] * self.stage_layers(pp)

    def kv_heads_per_device(self, tp: int) -> int:
        """KV heads each tensor-parallel rank holds: replicated when tp exceeds the KV heads."""
        return max(1, self.num_kv_heads // tp)

    def attention_windows(self) -> tuple[int | None, int | None]:
        """(window of the step's main attention aggregates, window of the local layers if the model
        interleaves local and global layers). Mistral: (4096, None); Gemma-2: (None, 4096)."""
        if self.is_dsa:  # every query attends to min(its context, index_topk) keys, as a window would
            return None, self.index_topk
        if self.sliding_window is None:
            return None, None
        if self.global_attn_every:
            return None, self.sliding_window
        return self.sliding_window, None

    def stage_global_layers(self, pp: int) -> int:
        """Layers that attend globally in the stage the cost model prices (``stage_layers``; of the
        stages that large, the one with the most global layers). HF's local/global pattern makes
        layer i global when i + 1 is a multiple of ``global_attn_every`` (Gemma 2 and 3, GPT-OSS):
        one stage of 21 of Gemma-2's 42 layers holds 10 global layers, the other 11."""
        every = self.global_attn_every
        if not every:
            return self.stage_layers(pp)
        largest, start, most = self.stage_layers(pp), 0, 0
        for layers in self.stage_split(pp):
            if layers == largest:  # the global layers among start .. start + layers - 1
                most = max(most, (start + layers) // every - start // every)
            start += layers
        return most

    def checkpoint_compute(self, weight_dtype: str | None, devices: Iterable[MatrixUnits]) -> str:
        """The compute dtype its checkpoint asks for (W8A8, W4A4) where the weights are the
        checkpoint's (``weight_dtype`` None or the model's) and every device has those matrix units;
        "" else: 16-bit GEMMs over the dequantised weights, as vLLM's Marlin kernels run them
        (scenario.apply_checkpoint, llmsim roofline)."""
        act = self.checkpoint_act_dtype
        if not act or weight_dtype not in (None, self.weight_dtype):
            return ""
        return act if all(hw.computes_in(act) for hw in devices) else ""

    def with_(self, **changes: object) -> ModelSpec:
        return replace(self, **changes)  # type: ignore[arg-type]


def _llama(
    name: str, h: int, i: int, layers: int, heads: int, kv: int, vocab: int, head_dim: int = 0, **kw: object
) -> ModelSpec:
    """A Llama-shaped decoder (gated MLP, GQA); heads of hidden / heads unless ``head_dim`` says."""
    return ModelSpec(
        name=name,
        hidden_size=h,
        intermediate_size=i,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim or h // heads,
        vocab_size=vocab,
        **kw,  # type: ignore[arg-type]
    )


def _gemma(name: str, h: int, i: int, layers: int, heads: int, kv: int, **kw: object) -> ModelSpec:
    """A Gemma (1 or 2): 256-wide heads, a 256,000-token vocabulary tied to the LM head, 8,192
    positions, a gated (GeGLU) MLP."""
    return _llama(name, h, i, layers, heads, kv, 256000, 256, tie_embeddings=True, max_position_embeddings=8192, **kw)


_REF = "HF config.json, see docs/reference/hardware_models.md B.1-B.3"

CATALOG: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        _llama("llama-2-7b", 4096, 11008, 32, 32, 32, 32000, source=_REF + " [ISIM-L2-7B][OLIVE]"),
        _llama("llama-2-70b", 8192, 28672, 80, 64, 8, 32000, source=_REF + " [CFG-L2-70B-snippet]"),
        _llama(
            "llama-3.1-8b",
            4096,
            14336,
            32,
            32,
            8,
            128256,
            max_position_embeddings=131072,
            source=_REF + " [AIC-L31-8B]",
        ),
        _llama(
            "llama-3.1-70b",
            8192,
            28672,
            80,
            64,
            8,
            128256,
            max_position_embeddings=131072,
            source=_REF + " [AIC-L31-70B]",
        ),
        _llama(
            "llama-3.1-405b",
            16384,
            53248,
            126,
            128,
            8,
            128256,
            max_position_embeddings=131072,
            source=_REF + " [AIC-L31-405B]",
        ),
        _llama(
            "llama-3-8b",
            4096,
            14336,
            32,
            32,
            8,
            128256,
            max_position_embeddings=8192,
            source="Meta-Llama-3-8B config.json (same shape as Llama-3.1-8B; Vidur mlp.csv shape)",
        ),
        _llama(
            "llama-3-70b",
            8192,
            28672,
            80,
            64,
            8,
            128256,
            max_position_embeddings=8192,
            source="Meta-Llama-3-70B config.json (same shape as Llama-3.1-70B; Vidur mlp.csv shape)",
        ),
        _llama(
            "mistral-7b",
            4096,
            14336,
            32,
            32,
            8,
            32000,
            sliding_window=4096,
            max_position_embeddings=32768,
            source=_REF + " [CFG-MISTRAL-doc]",
        ),
        _llama(
            "mixtral-8x7b",
            4096,
            14336,
            32,
            32,
            8,
            32000,
            num_experts=8,
            experts_per_token=2,
            max_position_embeddings=32768,
            source=_REF + " [AIC-MIXTRAL]",
        ),
        _llama(
            "qwen2.5-7b",
            3584,
            18944,
            28,
            28,
            4,
            152064,
            qkv_bias=True,
            max_position_embeddings=131072,
            source=_REF + " [QWEN-7B-README]",
        ),
        _llama(
            "qwen2.5-72b",
            8192,
            29568,
            80,
            64,
            8,
            152064,
            qkv_bias=True,
            max_position_embeddings=131072,
            source=_REF + " [QWEN-72B-README]",
        ),
        _llama(
            "codellama-34b",
            8192,
            22016,
            48,
            64,
            8,
            32016,
            max_position_embeddings=16384,
            source="CodeLlama-34b-Instruct-hf config.json (Vidur mlp.csv shape columns)",
        ),
        _gemma(
            "gemma-7b",
            3072,
            24576,
            28,
            16,
            16,
            source="google/gemma-7b config.json (model_type gemma, hidden_act gelu; data/models/configs.md "
            "section 5: the gated repository's fields as its derivatives give them)",
        ),
        _gemma(  # multi-query attention
            "gemma-2b",
            2048,
            16384,
            18,
            8,
            1,
            source="google/gemma-2b config.json (model_type gemma; data/models/configs.md section 5)",
        ),
        _gemma(
            "gemma-2-9b",
            3584,
            14336,
            42,
            16,
            8,
            sliding_window=4096,
            global_attn_every=2,  # layers alternate local (4096 window) and global attention
            source="google/gemma-2-9b config.json (model_type gemma2, sliding_window 4096, head_dim 256); "
            "local/global alternation as in google-deepmind/gemma's gemma2 configs",
        ),
        ModelSpec(
            name="opt-13b",
            hidden_size=5120,
            intermediate_size=20480,  # ffn_dim: fc1 / fc2 with ReLU, not gated
            num_layers=40,
            num_heads=40,
            num_kv_heads=40,
            head_dim=128,
            vocab_size=50272,
            tie_embeddings=True,
            gated_mlp=False,
            norm="layernorm",
            linear_bias=True,
            learned_positions=2050,  # 2048 positions + OPT's offset of 2
            max_position_embeddings=2048,
            weight_dtype="fp16",
            source="facebook/opt-13b config.json (model_type opt: hidden_size 5120, ffn_dim 20480, 40 layers, "
            "40 heads, vocab 50272, max_position_embeddings 2048, relu, do_layer_norm_before, tied lm_head); "
            "the model of DistServe's evaluation (OSDI'24) and of its fitted step models",
        ),
        ModelSpec(
            name="gpt-j-6b",
            hidden_size=4096,
            intermediate_size=16384,  # n_inner null: 4 x n_embd; fc_in / fc_out with gelu_new, not gated
            num_layers=28,
            num_heads=16,
            num_kv_heads=16,
            head_dim=256,
            vocab_size=50400,
            gated_mlp=False,
            norm="layernorm",
            # the MLP's biases; GPT-J's q/k/v/out projections have none but are counted with them
            # (+458,752 parameters), and its LM head's bias is not (-50,400): 0.007 % in all
            linear_bias=True,
            parallel_residual=True,  # one ln_1 feeds attention and MLP: x + attn(ln_1(x)) + mlp(ln_1(x))
            max_position_embeddings=2048,
            weight_dtype="fp16",
            source="EleutherAI/gpt-j-6b config.json (data/models/configs.md section 6; model_type gptj: n_embd 4096, n_layer 28, n_head 16, "
            "rotary_dim 64 (RoPE on 64 of each head's 256 dims), n_positions 2048, vocab_size 50400, "
            "n_inner null, gelu_new, tie_word_embeddings false); HF GPTJBlock / vLLM models/gpt_j.py: "
            "parallel attention and MLP after one LayerNorm",
        ),
        ModelSpec(
            name="gpt2",
            hidden_size=768,
            intermediate_size=3072,
            num_layers=12,
            num_heads=12,
            num_kv_heads=12,
            head_dim=64,
            vocab_size=50257,
            tie_embeddings=True,
            gated_mlp=False,
            norm="layernorm",
            linear_bias=True,
            learned_positions=1024,
            max_position_embeddings=1024,
            weight_dtype="fp32",
            source=_REF + " [HFLOG-GPT2]",
        ),
        ModelSpec(
            name="qwen3-32b",
            hidden_size=5120,
            intermediate_size=25600,
            num_layers=64,
            num_heads=64,
            num_kv_heads=8,
            head_dim=128,  # q_size 8192 != hidden_size: Qwen3 sets head_dim explicitly
            vocab_size=151936,
            max_position_embeddings=40960,
            source="Qwen/Qwen3-32B config.json (model_type qwen3, no attention bias, untied embeddings; "
            "per-head q/k RMSNorm not counted)",
        ),
        ModelSpec(
            name="qwen3-8b",
            hidden_size=4096,
            intermediate_size=12288,
            num_layers=36,
            num_heads=32,
            num_kv_heads=8,
            head_dim=128,
            vocab_size=151936,
            max_position_embeddings=40960,
            source="Qwen/Qwen3-8B config.json (model_type qwen3: hidden 4096, intermediate 12288, 36 layers, 32 query "
            "/ 8 KV heads of 128, vocab 151936, untied embeddings, max_position_embeddings 40960; the model card's "
            "8.2B parameters, 6.95B non-embedding, check the sizes; per-head q/k RMSNorm not counted)",
        ),
        ModelSpec(
            name="qwen3-14b",
            hidden_size=5120,
            intermediate_size=17408,
            num_layers=40,
            num_heads=40,
            num_kv_heads=8,
            head_dim=128,
            vocab_size=151936,
            max_position_embeddings=40960,
            source="Qwen/Qwen3-14B config.json (model_type qwen3: hidden 5120, intermediate 17408, 40 layers, 40 query "
            "/ 8 KV heads of 128, vocab 151936, untied embeddings, max_position_embeddings 40960; the model card's "
            "14.8B parameters, 13.2B non-embedding, check the sizes; per-head q/k RMSNorm not counted)",
        ),
        ModelSpec(
            name="qwen3-30b-a3b-instruct-2507",
            hidden_size=2048,
            intermediate_size=768,  # moe_intermediate_size; the config's intermediate_size 6144 is unused
            num_layers=48,
            num_heads=32,
            num_kv_heads=4,
            head_dim=128,
            vocab_size=151936,
            num_experts=128,
            experts_per_token=8,
            max_position_embeddings=262144,
            source="Qwen/Qwen3-30B-A3B-Instruct-2507 config.json (model_type qwen3_moe, 128 experts, top-8, "
            "moe_intermediate_size 768, every layer MoE, no shared expert; per-head q/k RMSNorm not counted)",
        ),
        # configs and their sources: data/models/configs.md
        _llama(
            "llama-2-13b",
            5120,
            13824,
            40,
            40,
            40,
            32000,
            source="meta-llama/Llama-2-13b-hf config.json (verbatim copy, data/models/configs.md section 1)",
        ),
        _llama(
            "llama-7b",
            4096,
            11008,
            32,
            32,
            32,
            32000,
            max_position_embeddings=2048,
            source="huggyllama/llama-7b (LLaMA-1 7B) config.json: Llama-2-7B's shape, 2048 context (configs.md section 7)",
        ),
        _llama(
            "llama-3.2-3b",
            3072,
            8192,
            28,
            24,
            8,
            128256,
            max_position_embeddings=131072,
            tie_embeddings=True,
            source="meta-llama/Llama-3.2-3B(-Instruct) config.json: head_dim 128, tied embeddings (configs.md section 2, 8)",
        ),
        _llama(
            "llama-3.2-1b",
            2048,
            8192,
            16,
            32,
            8,
            128256,
            max_position_embeddings=131072,
            tie_embeddings=True,
            source="meta-llama/Llama-3.2-1B config.json: head_dim 64, tied embeddings (configs.md section 2)",
        ),
        _llama(
            "mixtral-8x22b",
            6144,
            16384,
            56,
            48,
            8,
            32000,
            num_experts=8,
            experts_per_token=2,
            max_position_embeddings=65536,
            source="mistralai/Mixtral-8x22B-v0.1 config.json (mistral-community copy @42a1ba7; configs.md section 3)",
        ),
        ModelSpec(
            name="qwen3-235b-a22b",
            hidden_size=4096,
            intermediate_size=1536,  # moe_intermediate_size; the config's intermediate_size 12288 is unused
            num_layers=94,
            num_heads=64,
            num_kv_heads=4,
            head_dim=128,
            vocab_size=151936,
            num_experts=128,
            experts_per_token=8,
            max_position_embeddings=40960,
            source="Qwen/Qwen3-235B-A22B config.json (model_type qwen3_moe, 128 experts, top-8, every layer MoE, "
            "no shared expert; configs.md section 4; per-head q/k RMSNorm not counted)",
        ),
        ModelSpec(
            name="deepseek-v3",
            hidden_size=7168,
            intermediate_size=2048,  # moe_intermediate_size (routed and shared experts)
            num_layers=61,
            num_heads=128,
            num_kv_heads=128,  # MLA: every head has its own K/V in the expanded form
            head_dim=192,  # qk_nope_head_dim + qk_rope_head_dim
            vocab_size=129280,
            num_experts=256,  # n_routed_experts
            experts_per_token=8,
            shared_experts=1,
            first_dense_layers=3,  # first_k_dense_replace
            dense_intermediate_size=18432,  # intermediate_size of the dense layers
            kv_lora_rank=512,
            q_lora_rank=1536,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
            max_position_embeddings=163840,
            expert_groups=8,  # n_group: group-limited routing, a token's 8 experts in 4 of 8 groups
            expert_groups_per_token=4,  # topk_group
            router_bias=True,  # topk_method noaux_tc
            weight_dtype="fp8",  # released as FP8 (e4m3, 128x128 block scales; embeddings and lm_head bf16)
            # its quantization_config (quant_method fp8, activation_scheme dynamic): vLLM quantises the
            # activations per token group and runs the GEMMs in FP8 (W8A8, quantconfig.py)
            checkpoint_act_dtype="fp8",
            source="deepseek-ai/DeepSeek-V3 config.json (model_type deepseek_v3; configs.md section 9): MLA "
            "(q_lora 1536, kv_lora 512, nope 128, rope 64, v 128), 256 routed experts top-8 + 1 shared, "
            "first 3 layers dense (18432); the multi-token-prediction module (num_nextn_predict_layers 1) "
            "and the router's 256 e_score_correction_bias per layer are not counted",
        ),
        # configs and their sources: data/models/configs.md sections 10-13
        ModelSpec(
            name="llama-4-scout-17b-16e-instruct",
            hidden_size=5120,
            intermediate_size=8192,  # each expert's, and the shared expert's
            num_layers=48,
            num_heads=40,
            num_kv_heads=8,
            head_dim=128,
            vocab_size=202048,
            num_experts=16,  # num_local_experts
            experts_per_token=1,
            shared_experts=1,  # Llama4TextMoe's shared_expert (code, not config)
            # attention_chunk_size 8192 on the RoPE layers, global NoPE attention every 4th layer
            # (no_rope_layers): priced as a window of 8192 on 3 of 4 layers (docs/costmodel.md)
            sliding_window=8192,
            global_attn_every=4,
            max_position_embeddings=10485760,
            source="meta-llama/Llama-4-Scout-17B-16E-Instruct text_config (configs.md section 10): 16 experts "
            "top-1 + 1 shared on every layer (interleave_moe_layer_step 1), chunked attention 8192 with NoPE "
            "every 4th layer; the vision encoder and qk-norm are not counted",
        ),
        ModelSpec(
            name="gpt-oss-120b",
            hidden_size=2880,
            intermediate_size=2880,
            num_layers=36,
            num_heads=64,
            num_kv_heads=8,
            head_dim=64,
            vocab_size=201088,
            num_experts=128,
            experts_per_token=4,
            linear_bias=True,  # attention_bias: q, k, v, o biases; the experts' gate_up / down biases too
            sliding_window=128,  # layer_types: sliding_attention and full_attention alternate
            global_attn_every=2,
            max_position_embeddings=131072,
            expert_weight_dtype="mxfp4",  # the experts as released; attention, router, embeddings bf16
            source="openai/gpt-oss-120b config.json (configs.md section 12): 128 experts top-4 on every layer, "
            "alternating 128-token sliding and full attention, MXFP4 experts; the per-head attention sinks "
            "(one learned logit per head and row) are not priced",
        ),
    ]
}
# Llama 4 Maverick is Scout with 128 experts on every other layer (configs.md section 11)
CATALOG["llama-4-maverick-17b-128e-instruct"] = CATALOG["llama-4-scout-17b-16e-instruct"].with_(
    name="llama-4-maverick-17b-128e-instruct",
    num_experts=128,
    moe_layer_step=2,  # interleave_moe_layer_step: layers 1, 3, ..., 47 are MoE
    dense_intermediate_size=16384,  # intermediate_size_mlp: the dense layers' MLP
    max_position_embeddings=1048576,
    source="meta-llama/Llama-4-Maverick-17B-128E-Instruct text_config (configs.md section 11): 128 "
    "experts top-1 + 1 shared on every other layer, dense MLPs of 16384 between; chunked attention "
    "8192 (its NoPE layout taken as Scout's: not found in a source); the vision encoder is not counted",
)
# gpt-oss-20b is gpt-oss-120b with 24 layers of 32 experts (configs.md section 13)
CATALOG["gpt-oss-20b"] = CATALOG["gpt-oss-120b"].with_(
    name="gpt-oss-20b",
    num_layers=24,
    num_experts=32,
    source="openai/gpt-oss-20b config.json (configs.md section 13): 32 experts top-4, otherwise as gpt-oss-120b",
)
# DeepSeek-R1 has DeepSeek-V3's architecture (configs.md section 9 read R1's own config.json)
CATALOG["deepseek-r1"] = CATALOG["deepseek-v3"].with_(
    name="deepseek-r1",
    source="deepseek-ai/DeepSeek-R1 config.json (configs.md section 9, verbatim): DeepSeek-V3's architecture",
)
# DeepSeek-V3.2(-Exp) is DeepSeek-V3 with a lightning indexer per layer (DSA, configs.md section 14)
CATALOG["deepseek-v3.2"] = CATALOG["deepseek-v3"].with_(
    name="deepseek-v3.2",
    index_n_heads=64,
    index_head_dim=128,
    index_topk=2048,
    source="deepseek-ai/DeepSeek-V3.2-Exp config.json (model_type deepseek_v32; configs.md section 14): "
    "DeepSeek-V3's architecture plus DeepSeek sparse attention, index_n_heads 64, index_head_dim 128, "
    "index_topk 2048; the multi-token-prediction module is not counted",
)

# Qwen/Qwen3-30B-A3B, the original release: the 2507 release's architecture, a 40,960-token context
CATALOG["qwen3-30b-a3b"] = CATALOG["qwen3-30b-a3b-instruct-2507"].with_(
    name="qwen3-30b-a3b",
    max_position_embeddings=40960,
    source="Qwen/Qwen3-30B-A3B config.json (configs.md section 15): the 2507 release's architecture, "
    "max_position_embeddings 40960",
)

# HuggingFace ids of served checkpoints -> (catalog name, why the mapping holds where the names
# differ). A fine-tune (chat, instruct, distill) has its base's architecture, which is all the cost
# model reads. `served_model` also takes an id whose last part is a catalog name (Qwen/Qwen3-8B).
HF_IDS: dict[str, tuple[str, str]] = {
    "meta-llama/Llama-3.3-70B-Instruct": ("llama-3.1-70b", "Llama 3.3 70B has Llama 3.1 70B's architecture"),
    "meta-llama/Llama-3.1-70B-Instruct": ("llama-3.1-70b", ""),
    "meta-llama/Llama-3.1-70B": ("llama-3.1-70b", ""),
    "meta-llama/Meta-Llama-3.1-70B-Instruct": ("llama-3.1-70b", ""),
    "meta-llama/Llama-3.1-405B-Instruct": ("llama-3.1-405b", ""),
    "meta-llama/Llama-3.1-405B": ("llama-3.1-405b", ""),
    "meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b", ""),
    "meta-llama/Llama-3.1-8B": ("llama-3.1-8b", ""),
    "meta-llama/Meta-Llama-3.1-8B-Instruct": ("llama-3.1-8b", ""),
    "meta-llama/Meta-Llama-3-8B-Instruct": ("llama-3-8b", ""),
    "meta-llama/Meta-Llama-3-8B": ("llama-3-8b", ""),
    "meta-llama/Meta-Llama-3-70B-Instruct": ("llama-3-70b", ""),
    "meta-llama/Llama-2-7b-hf": ("llama-2-7b", ""),
    "meta-llama/Llama-2-7b-chat-hf": ("llama-2-7b", "the chat fine-tune has the base architecture"),
    "huggyllama/llama-7b": ("llama-7b", ""),
    "meta-llama/Llama-2-13b-hf": ("llama-2-13b", ""),
    "meta-llama/Llama-2-13b-chat-hf": ("llama-2-13b", "the chat fine-tune has the base architecture"),
    "meta-llama/Llama-2-70b-hf": ("llama-2-70b", ""),
    "meta-llama/Llama-2-70b-chat-hf": ("llama-2-70b", "the chat fine-tune has the base architecture"),
    "meta-llama/Llama-3.2-3B-Instruct": ("llama-3.2-3b", ""),
    "meta-llama/Llama-3.2-1B-Instruct": ("llama-3.2-1b", ""),
    "google/gemma-7b-it": ("gemma-7b", "the instruction fine-tune has the base architecture"),
    "google/gemma-2b-it": ("gemma-2b", "the instruction fine-tune has the base architecture"),
    "mistralai/Mistral-7B-v0.1": ("mistral-7b", ""),
    "mistralai/Mistral-7B-Instruct-v0.1": ("mistral-7b", "the v0.1 instruction fine-tune has the base architecture"),
    "mistralai/Mixtral-8x7B-v0.1": ("mixtral-8x7b", ""),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": ("mixtral-8x7b", "the instruction fine-tune has the base architecture"),
    "mistralai/Mixtral-8x22B-v0.1": ("mixtral-8x22b", ""),
    "EleutherAI/gpt-j-6b": ("gpt-j-6b", ""),
    "facebook/opt-13b": ("opt-13b", ""),
    "Qwen/Qwen2.5-72B-Instruct": ("qwen2.5-72b", ""),
    "Qwen/Qwen2.5-7B-Instruct": ("qwen2.5-7b", ""),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": ("llama-3.1-70b", "the distill is a Llama 3.3 70B fine-tune"),
    "deepseek-ai/DeepSeek-R1": ("deepseek-v3", "R1 has DeepSeek-V3's architecture (data/models/configs.md)"),
}


_HF_NAMES = {k.rsplit("/", 1)[-1].lower(): v for k, v in HF_IDS.items()}
# the suffixes a fine-tune of a catalog model is published under (its architecture is the base's)
TUNE_SUFFIXES = ("-it", "-instruct", "-chat", "-chat-hf", "-hf")


def served_model(hf_id: str) -> tuple[str | None, str]:
    """The catalog entry a served checkpoint's HuggingFace id names, and why where the names differ:
    ``HF_IDS``, else the id's last part when that is a catalog name (``Qwen/Qwen3-8B`` ->
    ``qwen3-8b``), else the same without a quantisation suffix (``Qwen/Qwen3-8B-FP8``: quantconfig
    reads the format from it) or a fine-tune's (``google/gemma-2-9b-it``); (None, reason) for a
    model llmsim's catalog does not have."""
    from llmsim.quantconfig import split_quant_suffix

    if hf_id in HF_IDS:
        return HF_IDS[hf_id]
    org, _, last = hf_id.rstrip("/").rpartition("/")
    if last.lower() in CATALOG:
        return last.lower(), ""
    if last.lower() in _HF_NAMES:  # (the same model under another organisation: a re-upload, a quantiser's)
        return _HF_NAMES[last.lower()]
    base, quant = split_quant_suffix(last)
    if quant is not None:
        name, why = served_model(base)
        if name is not None:
            return name, "; ".join(w for w in (why, f"the {quant.method} checkpoint of {base}, by its name") if w)
    for suffix in TUNE_SUFFIXES:
        if last.lower().endswith(suffix) and last.lower().removesuffix(suffix) in CATALOG:
            return last.lower().removesuffix(suffix), "the fine-tune has the base model's architecture"
    return None, f"model not in llmsim's catalog: {hf_id}"


# Published totals used by tests (parameters), with their sources.
PUBLISHED_PARAMS = {
    "llama-2-7b": (6.74e9, "Llama 2 paper / HF model card: 7B (6.74B)"),
    "llama-2-70b": (68.98e9, "HF model card 70B (68.98B computed in reference B.3)"),
    "llama-3.1-8b": (8.03e9, "HF model card: 8.03B"),
    "llama-3.1-70b": (70.55e9, "HF model card: 70.6B"),
    "llama-3.1-405b": (405.85e9, "HF model card: 405B"),
    "mistral-7b": (7.24e9, "Mistral 7B: 7.24B (HF model card)"),
    "mixtral-8x7b": (46.7e9, "Mistral blog: 46.7B total, 12.9B active [MIXTRAL-COUNTS]"),
    "qwen2.5-7b": (7.61e9, "Qwen2.5-7B model card: 7.61B [QWEN-7B-README]"),
    "qwen2.5-72b": (72.7e9, "Qwen2.5-72B model card: 72.7B [QWEN-72B-README]"),
    "gpt2": (124.44e6, "GPT-2 small: 124M (HF printout 124.4M) [HFLOG-GPT2]"),
    "gpt-j-6b": (6_053_381_344, "EleutherAI/gpt-j-6b model card: n_parameters 6,053,381,344"),
    "gemma-2-9b": (9.24e9, "Gemma 2 9B model card: 9.24B parameters"),
    "gemma-7b": (
        8.54e9,
        "Gemma technical report (2024) Table 2: 7B, 7,751,248,896 non-embedding + 786,825,216 embedding",
    ),
    "gemma-2b": (
        2.51e9,
        "Gemma technical report (2024) Table 2: 2B, 1,981,884,416 non-embedding + 524,550,144 embedding",
    ),
    "qwen3-32b": (32.8e9, "Qwen3-32B model card: 32.8B parameters"),
    "qwen3-8b": (8.2e9, "Qwen3-8B model card: 8.2B parameters (6.95B non-embedding)"),
    "qwen3-14b": (14.8e9, "Qwen3-14B model card: 14.8B parameters (13.2B non-embedding)"),
    "qwen3-30b-a3b-instruct-2507": (30.5e9, "Qwen3-30B-A3B-Instruct-2507 model card: 30.5B total, 3.3B activated"),
    "llama-2-13b": (13.0e9, "Llama 2 model card: 13B (13.02B from the config, data/models/configs.md)"),
    "llama-3.2-3b": (3.21e9, "Llama 3.2 model card: 3B (3.21B)"),
    "llama-3.2-1b": (1.23e9, "Llama 3.2 model card: 1B (1.23B)"),
    "mixtral-8x22b": (141e9, "Mistral AI, mistral.ai/news/mixtral-8x22b: 141B total, 39B active"),
    "qwen3-235b-a22b": (235e9, "Qwen3-235B-A22B model card: 235B in total and 22B activated"),
    "deepseek-v3": (671e9, "DeepSeek-V3 technical report (arXiv:2412.19437) abstract: 671B total, 37B activated"),
    "deepseek-r1": (671e9, "DeepSeek-R1 model card: 671B total, 37B activated (DeepSeek-V3's architecture)"),
    "llama-4-maverick-17b-128e-instruct": (
        400e9,
        "meta-llama/llama-models models/llama4/MODEL_CARD.md: Maverick 17B (Activated) 400B (Total)",
    ),
    "gpt-oss-120b": (116.83e9, "gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B total, 5.13B active"),
    "gpt-oss-20b": (20.91e9, "gpt-oss model card (arXiv:2508.10925) Table 1: 20.91B total, 3.61B active"),
}
# Published activated parameters (MoE), with their sources.
PUBLISHED_ACTIVE_PARAMS = {
    "deepseek-v3": (37e9, "DeepSeek-V3 technical report (arXiv:2412.19437): 37B activated for each token"),
    "llama-4-scout-17b-16e-instruct": (17e9, "llama-models MODEL_CARD.md: Scout 17B (Activated) 109B (Total)"),
    "llama-4-maverick-17b-128e-instruct": (17e9, "llama-models MODEL_CARD.md: Maverick 17B (Activated)"),
}


def hf_model_name(path: Path, cfg: dict) -> str:
    """The name of a model read from a HuggingFace config: its ``_name_or_path``; else the file's
    name when that says something (``llama-s5.json`` -> ``llama-s5``, not ``config.json``); else one
    built from the config, ``{model_type}-{hidden}h{layers}L`` (``-{experts}e`` for MoE), with
    ``architectures[0]`` standing in for a missing ``model_type``. A scenario overrides it with
    ``model: {hf_config: PATH, name: NAME}``."""
    given = cfg.get("_name_or_path")
    if isinstance(given, str) and given.strip().strip("/"):
        return given.strip().rstrip("/")
    if path.stem.lower() != "config":
        return path.stem
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    kind = cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None
    base = kind or (arch.removesuffix("ForCausalLM").lower() if arch else "hf-model")
    hidden = cfg.get("hidden_size") or cfg.get("n_embd")
    layers = cfg.get("num_hidden_layers") or cfg.get("n_layer")
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    return base + (f"-{hidden}h{layers}L" if hidden and layers else "") + (f"-{experts}e" if experts else "")


def from_hf_config(path: Path, name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a HuggingFace ``config.json`` (Llama, Mistral, Mixtral, Qwen2, GPT-2, GPT-J),
    named ``name`` when given, else by :func:`hf_model_name`."""
    path = Path(path)
    cfg = load_json_object(
        path, "model.hf_config", unique_keys=False
    )  # (as transformers reads it: the last of two keys)
    spec_name = name or hf_model_name(path, cfg)
    try:
        return _from_hf(cfg, path, spec_name)
    except UserError as exc:  # ModelSpec's own checks name the model; an imported one is named by its file
        prefix, msg = f"model {spec_name!r}:", str(exc)
        if not msg.startswith(prefix):
            raise
        raise UserError(f"{path}:{msg[len(prefix) :]}") from None


def _from_hf(cfg: dict, path: Path, name: str) -> ModelSpec:
    """``from_hf_config`` of a loaded config, named ``name``."""

    def need(*keys: str) -> int:
        for k in keys:
            if k in cfg and cfg[k] is not None:
                v = cfg[k]
                if isinstance(v, bool) or not isinstance(v, int) or v <= 0:  # (true is an int in Python)
                    raise UserError(f"{path}: {k}: expected a positive integer, got {v!r}")
                return v
        raise UserError(f"{path}: missing key {keys[0]!r} (HuggingFace config.json field)")

    family = hf_family(cfg, path)
    if family == "deepseek":
        return _deepseek_from_hf(cfg, path, need, name)
    is_gpt2, is_gptj = family == "gpt2", family == "gptj"
    hidden = need("hidden_size", "n_embd")
    heads = need("num_attention_heads", "n_head")
    kv_heads = _count(cfg, path, "num_key_value_heads", heads)
    inter = _count(cfg, path, "intermediate_size", _count(cfg, path, "n_inner", 4 * hidden))
    experts = _count(cfg, path, "num_local_experts", _count(cfg, path, "num_experts", 0, zero_ok=True), zero_ok=True)
    model_type = cfg.get("model_type") or ARCHITECTURES.get(str((cfg.get("architectures") or [""])[0]))
    if model_type in MOE_TYPES and not experts:  # else priced as the dense model it is not
        field = EXPERT_COUNT_FIELD[model_type]
        got = f"got {cfg[field]!r}" if cfg.get(field) is not None else "it is missing"
        raise UserError(f"{path}: {field}: a {model_type} config needs its expert count (1 or more); {got}")
    if experts:
        inter = _expert_intermediate(cfg, path, inter)
    _check_shapes(cfg, path, hidden, heads, kv_heads, experts)
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    dtype = _hf_dtype(cfg, path, "float32" if is_gpt2 else "bfloat16")
    spec = ModelSpec(
        name=name,
        hidden_size=hidden,
        intermediate_size=int(inter),
        num_layers=need("num_hidden_layers", "n_layer"),
        num_heads=heads,
        num_kv_heads=int(kv_heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        vocab_size=need("vocab_size"),
        tie_embeddings=_flag(cfg, path, "tie_word_embeddings", is_gpt2),
        gated_mlp=not (is_gpt2 or is_gptj),
        norm="layernorm" if is_gpt2 or is_gptj else "rmsnorm",
        qkv_bias=bool(cfg.get("attention_bias", False)) or cfg.get("model_type") == "qwen2",
        linear_bias=is_gpt2 or is_gptj,  # (GPT-J: the MLP's; its attention's counted too, as in the catalog)
        parallel_residual=is_gptj,
        learned_positions=int(cfg.get("n_positions", 0)) if is_gpt2 else 0,
        num_experts=int(experts),
        experts_per_token=int(cfg.get("num_experts_per_tok", 0)) if experts else 0,
        sliding_window=int(window) if window else None,
        # Gemma 2 alternates local and global layers; Gemma 3 names the period sliding_window_pattern
        global_attn_every=_count(cfg, path, "sliding_window_pattern", 2 if cfg.get("model_type") == "gemma2" else 0)
        if window
        else 0,
        max_position_embeddings=hf_context_len(cfg),
        weight_dtype=dtype,
        source=f"HF config {path}",
    )
    return with_checkpoint_quant(spec, cfg, path)


def with_checkpoint_quant(spec: ModelSpec, cfg: dict, path: Path) -> ModelSpec:
    """``spec`` with its config's ``quantization_config`` applied (quantconfig.read_quant): the
    decoder weights' dtype and groups, and the compute and KV cache dtypes the checkpoint asks for."""
    from llmsim.quantconfig import read_quant

    q = read_quant(cfg, str(path), Path(path).parent)
    return spec if q is None else with_quant(spec, q)


def with_quant(spec: ModelSpec, q: CheckpointQuant) -> ModelSpec:
    """``spec`` as a checkpoint quantised in format ``q``: its weights' dtype and groups, and the
    compute and KV cache dtypes it asks for (``scenario.apply_checkpoint`` resolves those per device)."""
    return spec.with_(
        weight_dtype=q.weight_dtype,
        weight_group_size=q.group_size,
        weight_scale_bits=q.scale_bits,
        checkpoint_act_dtype=q.act_dtype,
        checkpoint_kv_dtype=q.kv_dtype,
    )


# The HF model_types the importer reads, and what it makes of them: dense or MoE decoders with
# RoPE (Llama-like: GQA, SwiGLU, RMSNorm; Qwen2 adds QKV biases; Gemma 2 alternates windows) or
# GPT-2 (learned positions, LayerNorm, GELU, biases) or GPT-J (RoPE, LayerNorm, GELU, attention and
# MLP in parallel after one norm). Anything else would be priced as something
# it is not: it is refused, naming the field (issue #17: never a silent dense fallback).
HF_FAMILIES = {
    "llama": "llama",
    "mistral": "llama",
    "mixtral": "llama",
    "qwen2": "llama",
    "qwen3": "llama",
    "qwen3_moe": "llama",
    "gemma2": "llama",
    "gpt2": "gpt2",
    "gptj": "gptj",
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
    "deepseek_v32": "deepseek",
}
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Gemma2ForCausalLM": "gemma2",
    "GPT2LMHeadModel": "gpt2",
    "GPTJForCausalLM": "gptj",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV32ForCausalLM": "deepseek_v32",
}
# fields of architectures the cost model does not price: (field, what it means)
UNSUPPORTED_FIELDS = (
    ("kv_lora_rank", "multi-head latent attention (DeepSeek MLA)"),
    ("q_lora_rank", "multi-head latent attention (DeepSeek MLA)"),
    ("n_shared_experts", "shared experts"),
    ("shared_expert_intermediate_size", "shared experts"),
    ("linear_attn_config", "linear-attention layers"),
    ("index_topk", "DeepSeek sparse attention (DeepSeek-V3.2's lightning indexer) outside a DeepSeek model"),
    ("index_n_heads", "DeepSeek sparse attention (DeepSeek-V3.2's lightning indexer) outside a DeepSeek model"),
)
# what the deepseek family prices itself: MLA, shared experts, DeepSeek sparse attention (refused elsewhere)
FAMILY_FIELDS = {"deepseek": ("kv_lora_rank", "q_lora_rank", "n_shared_experts", "index_topk", "index_n_heads")}


def hf_family(cfg: dict, path: Path) -> str:
    """The importer's family of a config: by ``model_type``, else by ``architectures[0]``; a config
    of another architecture, or with fields of one the cost model does not price, is refused."""
    model_type = cfg.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise UserError(f"{path}: model_type: expected a name such as 'llama', got {model_type!r}")
    if model_type is None:
        archs = cfg.get("architectures") or []
        first = archs[0] if isinstance(archs, list) and archs else None
        model_type = ARCHITECTURES.get(first) if isinstance(first, str) else None
        if model_type is None and "n_embd" in cfg:
            model_type = "gpt2"  # (GPT-2's own field names)
    supported = ", ".join(sorted(HF_FAMILIES))
    if model_type is None:
        raise UserError(f"{path}: model_type: missing, and no known architectures entry; supported: {supported}")
    if model_type not in HF_FAMILIES:
        raise UserError(
            f"{path}: model_type: {model_type!r} is not an architecture llmsim prices; supported: {supported}"
        )
    own = FAMILY_FIELDS.get(HF_FAMILIES[model_type], ())
    for field, what in UNSUPPORTED_FIELDS:
        if cfg.get(field) and field not in own:
            raise UserError(
                f"{path}: {field}: {what} is not modelled (model_type {model_type!r}); it would be priced wrong"
            )
    return HF_FAMILIES[model_type]


# the config fields MLA needs (DeepseekV2Config / DeepseekV3Config in transformers), q_lora_rank
# aside: null there means no query compression (DeepSeek-V2-Lite)
MLA_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
# fields a DeepSeek config must state although transformers has defaults for them (its
# configuration_deepseek_v3.py: q_lora_rank 1536, first_k_dense_replace 3, n_shared_experts 1;
# DeepseekV2Config's differ): a config without them is refused rather than priced on a guess
DEEPSEEK_REQUIRED = ("q_lora_rank",)
DEEPSEEK_MOE_REQUIRED = ("first_k_dense_replace", "n_shared_experts")
# HF torch_dtype -> the weight dtype
HF_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}
MOE_TYPES = ("mixtral", "qwen3_moe")  # the model types whose configs must give an expert count
EXPERT_COUNT_FIELD = {"mixtral": "num_local_experts", "qwen3_moe": "num_experts"}  # (their config field)


def _hf_dtype(cfg: dict, path: Path, default: str) -> str:
    """The weight dtype of a config's ``torch_dtype`` (``default`` when it has none); another value
    is refused, naming the field, rather than priced as bf16."""
    raw = cfg.get("torch_dtype")
    if raw is None:
        return HF_DTYPES[default]
    if not isinstance(raw, str) or raw.removeprefix("torch.") not in HF_DTYPES:
        raise UserError(f"{path}: torch_dtype: expected one of {sorted(HF_DTYPES)}, got {raw!r}")
    return HF_DTYPES[raw.removeprefix("torch.")]


def _flag(cfg: dict, path: Path, key: str, default: bool) -> bool:
    """A true/false field; a string such as ``"no"`` is refused (``bool("no")`` is True)."""
    v = cfg.get(key, default)
    if not isinstance(v, bool):
        raise UserError(f"{path}: {key}: expected true or false, got {v!r}")
    return v


def _deepseek_from_hf(cfg: dict, path: Path, need, name: str | None) -> ModelSpec:  # type: ignore[no-untyped-def]
    """A DeepSeek-V2/V3 config: MLA attention and DeepSeekMoE (routed + shared experts, the first
    ``first_k_dense_replace`` layers dense). Every MLA field must be there: priced without one the
    attention would be something else."""
    for key in MLA_FIELDS:
        if cfg.get(key) is None:
            raise UserError(
                f"{path}: missing key {key!r}: a {cfg.get('model_type', 'deepseek')} config with multi-head "
                f"latent attention needs {', '.join(MLA_FIELDS)} (HuggingFace config.json fields)"
            )
    nope, rope = need("qk_nope_head_dim"), need("qk_rope_head_dim")
    heads = need("num_attention_heads")
    experts = _count(cfg, path, "n_routed_experts", 0, zero_ok=True)
    kind = cfg.get("model_type", "deepseek")
    for key in DEEPSEEK_REQUIRED + (DEEPSEEK_MOE_REQUIRED if experts else ()):
        if key not in cfg or (key != "q_lora_rank" and cfg[key] is None):  # (null q_lora_rank: no compression)
            null = " (null: no query compression)" if key == "q_lora_rank" else ""
            raise UserError(
                f"{path}: missing key {key!r}: a {kind} config must state it{null}; transformers' default "
                "would be a guess (HuggingFace config.json field)"
            )
    freq = cfg.get("moe_layer_freq", 1)
    if experts and freq != 1:
        raise UserError(f"{path}: moe_layer_freq: {freq!r}: only every layer after first_k_dense_replace MoE (1)")
    k = top_k(cfg, path, experts) if experts else 0
    _check_context(cfg, path)
    layers = need("num_hidden_layers")
    dense_layers = _count(cfg, path, "first_k_dense_replace", 0, zero_ok=True) if experts else layers
    if dense_layers > layers:
        raise UserError(f"{path}: first_k_dense_replace: {dense_layers} exceeds num_hidden_layers {layers}")
    inter = need("intermediate_size")
    dtype = _hf_dtype(cfg, path, "bfloat16")
    spec = ModelSpec(
        name=name,
        hidden_size=need("hidden_size"),
        intermediate_size=need("moe_intermediate_size") if experts else inter,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=nope + rope,
        vocab_size=need("vocab_size"),
        tie_embeddings=_flag(cfg, path, "tie_word_embeddings", False),
        num_experts=experts,
        experts_per_token=k,
        shared_experts=_count(cfg, path, "n_shared_experts", 0, zero_ok=True) if experts else 0,
        first_dense_layers=dense_layers if experts else 0,
        dense_intermediate_size=inter if experts else 0,
        kv_lora_rank=need("kv_lora_rank"),
        q_lora_rank=_count(cfg, path, "q_lora_rank", 0, zero_ok=True),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=need("v_head_dim"),
        max_position_embeddings=hf_context_len(cfg),
        weight_dtype=dtype,
        source=f"HF config {path}",
        **_dsa_fields(cfg, path, need),
        **_expert_groups(cfg, path, experts),
        router_bias=bool(experts) and cfg.get("topk_method") == "noaux_tc",
    )
    return with_checkpoint_quant(spec, cfg, path)  # (DeepSeek-V3 as released: FP8 e4m3 in 128 x 128 blocks)


def _expert_groups(cfg: dict, path: Path, experts: int) -> dict[str, int]:
    """A DeepSeekMoE config's group-limited routing (n_group / topk_group, which vLLM's grouped top-k
    reads for every DeepSeek MoE; one group, V2-Lite's, limits nothing); {} without."""
    groups = _count(cfg, path, "n_group", 1)
    if not experts or groups <= 1:
        return {}
    return {"expert_groups": groups, "expert_groups_per_token": _count(cfg, path, "topk_group", groups)}


def _dsa_fields(cfg: dict, path: Path, need) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """A DeepSeek-V3.2 config's indexer sizes (model_type deepseek_v32, or any deepseek config
    with index_topk, as vLLM reads it); {} for dense MLA."""
    if cfg.get("model_type") != "deepseek_v32" and cfg.get("index_topk") is None:
        return {}
    for key in DSA_FIELDS:
        if cfg.get(key) is None:
            raise UserError(
                f"{path}: missing key {key!r}: a DeepSeek sparse-attention config needs "
                f"{', '.join(DSA_FIELDS)} (HuggingFace config.json fields)"
            )
    return {key: need(key) for key in DSA_FIELDS}


def _expert_intermediate(cfg: dict, path: Path, inter: int) -> int:
    """An MoE layer's expert width. Qwen3-MoE gives it as ``moe_intermediate_size`` (its
    ``intermediate_size`` is the dense MLP of ``mlp_only_layers``, unused when every layer is MoE:
    transformers' Qwen3MoeDecoderLayer); Mixtral's ``intermediate_size`` is the expert's own. Mixed
    dense and MoE layers (``decoder_sparse_step`` > 1, ``mlp_only_layers``) are refused: priced as
    all-MoE they would be wrong without a word."""
    step = cfg.get("decoder_sparse_step")
    if step is not None and _count(cfg, path, "decoder_sparse_step", 1) != 1:
        raise UserError(f"{path}: decoder_sparse_step: {step}: only every layer MoE (1) is modelled")
    dense = cfg.get("mlp_only_layers")
    if dense not in (None, []):
        raise UserError(f"{path}: mlp_only_layers: {dense!r}: only every layer MoE (an empty list) is modelled")
    if cfg.get("model_type") == "qwen3_moe" and cfg.get("moe_intermediate_size") is None:
        # (transformers' Qwen3MoeConfig default, which vLLM reads: not the dense intermediate_size)
        return QWEN3_MOE_EXPERT_WIDTH
    return _count(cfg, path, "moe_intermediate_size", inter)


QWEN3_MOE_EXPERT_WIDTH = 768  # transformers Qwen3MoeConfig(moe_intermediate_size=768)


def top_k(cfg: dict, path: Path, experts: int) -> int:
    """An MoE config's ``num_experts_per_tok``: 1 to its expert count."""
    k = _count(cfg, path, "num_experts_per_tok", 0, zero_ok=True)
    if not 0 < k <= experts:
        got = f"got {k}" if cfg.get("num_experts_per_tok") is not None else "it is missing"
        raise UserError(f"{path}: num_experts_per_tok: expected 1..{experts} for an MoE of {experts} experts; {got}")
    return k


def _count(cfg: dict, path: Path, key: str, default: object, zero_ok: bool = False) -> int:
    """An optional count field: a positive integer (or 0 where allowed), else ``default``."""
    v = cfg.get(key)
    if v is None:
        return int(default)  # type: ignore[call-overload]
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (v == 0 and not zero_ok):
        raise UserError(f"{path}: {key}: expected a {'non-negative' if zero_ok else 'positive'} integer, got {v!r}")
    return v


def _check_shapes(cfg: dict, path: Path, hidden: int, heads: int, kv_heads: int, experts: int) -> None:
    """The config's numbers must make one model: heads divide the width (unless head_dim says),
    KV heads divide the heads, an MoE names how many experts each token uses."""
    head_dim = cfg.get("head_dim")
    if head_dim is None and hidden % heads:
        raise UserError(f"{path}: num_attention_heads: {heads} does not divide hidden_size {hidden} (and no head_dim)")
    if head_dim is not None:
        _count(cfg, path, "head_dim", 0)
    if kv_heads > heads or heads % kv_heads:
        raise UserError(f"{path}: num_key_value_heads: {kv_heads} must divide num_attention_heads {heads}")
    if experts:
        top_k(cfg, path, experts)
    window = cfg.get("sliding_window")
    if window is not None and cfg.get("use_sliding_window", True):
        _count(cfg, path, "sliding_window", 0)
    _check_context(cfg, path)


def _check_context(cfg: dict, path: Path) -> None:
    """Every context key a config states is a positive count, and a stretching ``rope_scaling``
    a finite positive factor (``hf_context_len`` reads them)."""
    for key in CONTEXT_KEYS:
        if cfg.get(key) is not None:
            _count(cfg, path, key, 0)
    rope = cfg.get("rope_scaling")
    if not isinstance(rope, dict) or rope.get("rope_type", rope.get("type")) in UNSTRETCHED_ROPE:
        return
    factor = rope.get("factor")
    if factor is not None and (
        isinstance(factor, bool) or not isinstance(factor, int | float) or not math.isfinite(factor) or factor <= 0
    ):
        raise UserError(f"{path}: rope_scaling.factor: expected a finite positive number, got {factor!r}")
    original = rope.get("original_max_position_embeddings")
    if original is not None and (isinstance(original, bool) or not isinstance(original, int) or original <= 0):
        raise UserError(
            f"{path}: rope_scaling.original_max_position_embeddings: expected a positive integer, got {original!r}"
        )
    base = original if rope.get("rope_type", rope.get("type")) == "yarn" and original else _stated_context(cfg)
    if factor is not None and base * factor > MAX_CONTEXT:
        raise UserError(
            f"{path}: rope_scaling.factor: {factor!r} stretches the {base:,}-token context past {MAX_CONTEXT:,} tokens"
        )


# The config keys vLLM reads a model's context from, the smallest winning (vllm/config/model.py
# _get_and_verify_max_len, 0.32: possible_keys), and its fallback when none is there
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
DEFAULT_CONTEXT = 2048
MAX_CONTEXT = 2**31 - 1  # tokens: a context past this is a typo, not a model (int32 positions)
# rope_scaling types whose config already gives the stretched length (or that stretch nothing)
UNSTRETCHED_ROPE = ("su", "longrope", "llama3", "mrope", "default", None)


def _stated_context(cfg: dict) -> int:
    """The smallest context a config states (CONTEXT_KEYS), before any rope scaling."""
    found = [int(cfg[k]) for k in CONTEXT_KEYS if isinstance(cfg.get(k), int | float) and cfg[k] > 0]
    return min(found) if found else DEFAULT_CONTEXT


def hf_context_len(cfg: dict) -> int:
    """The context length vLLM derives from a HuggingFace config: the smallest of CONTEXT_KEYS,
    times ``rope_scaling.factor`` for the scalings that stretch it (yarn from its
    ``original_max_position_embeddings``; not llama3 / su / longrope, whose configs already give
    the stretched length)."""
    length = _stated_context(cfg)
    rope = cfg.get("rope_scaling")
    if isinstance(rope, dict):
        kind = rope.get("rope_type", rope.get("type"))
        factor = rope.get("factor")
        if kind not in UNSTRETCHED_ROPE and isinstance(factor, int | float):
            if kind == "yarn" and isinstance(rope.get("original_max_position_embeddings"), int | float):
                length = int(rope["original_max_position_embeddings"])
            length = int(length * factor)
    return length


def get_model(name_or_path: str | Path, base_dir: Path | None = None, name: str | None = None) -> ModelSpec:
    """A catalog name (case-insensitive) or a path to a HuggingFace config.json (named ``name``
    when given, else by :func:`hf_model_name`)."""
    text = str(name_or_path)
    if text.endswith(".json"):
        path = Path(text)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return from_hf_config(path, name)
    key = text.lower()
    if key in CATALOG:
        return CATALOG[key]
    raise UserError(f"unknown model {text!r}{did_you_mean(key, list(CATALOG))}; `llmsim models` lists them")
