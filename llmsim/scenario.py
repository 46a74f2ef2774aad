"""Scenario YAML -> validated ``Scenario``. Every key is documented in docs/scenario.md.

Validation names the file and the key path of every problem and suggests the closest valid
key or name. Relative paths in a scenario resolve against the scenario file's folder.
"""

from __future__ import annotations

import copy
import types
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llmsim.errors import FLAG_FOR_NUMBER, UNION_TAG, UserError, load_yaml_file, pydantic_message, value_text
from llmsim.quantconfig import CheckpointFormat

if TYPE_CHECKING:
    from llmsim.models import ModelSpec

PosInt = Annotated[int, Field(gt=0)]
PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]  # fp4: NVFP4 / MXFP4 (4-bit floats, block scales)
TraceFormat = Literal["azure", "mooncake", "burstgpt", "generic", "llmservingsim"]

# Upper bounds on the sizes a scenario sets (issue #19). Each sits far above any real deployment
# and low enough that a typo (an extra three zeros) fails here, naming the key and the limit,
# instead of exhausting memory or time later. docs/scenario.md "Hostile command lines" lists them.
# replicas: each is a Python object and a SimPy process (10,000 idle replicas take ~0.5 GB and a
# few seconds); a few thousand GPUs is already a data centre.
MAX_REPLICAS = 10_000
# tp / pp: a degree must divide the attention heads / the layers, and no catalog model has more
# than 128 of either; 1,024 leaves room for custom configs while catching 10**6.
MAX_PARALLEL = 1_024
# max_num_seqs: vLLM's default is 256 (1,024 on big GPUs); a million sequences decoding at once
# would need more KV cache than any device holds even at one block each.
MAX_SEQS = 1_000_000
# max_batch_tokens / chunk_tokens: tokens in one step; vLLM's budgets are 2**11..2**16, and a
# prompt is at most a model's context (~10**6 tokens); 2**24 catches exponents typed by mistake.
MAX_STEP_TOKENS = 2**24
# kv_cache.num_blocks: per replica; 192 GB (B200) of the smallest KV (gpt2 in fp8, 18 KB per
# token) at one token per block is ~10**7 blocks, so 10**8 is above any engine's report.
MAX_KV_BLOCKS = 100_000_000
# block_tokens: vLLM offers 1..256 (hybrid attention/Mamba models stretch it to ~2k); a block
# longer than a whole prompt only wastes memory.
MAX_BLOCK_TOKENS = 8_192
# seed: numpy's SeedSequence takes any integer >= 0 (a negative one is a traceback there); 64
# bits keeps it an ordinary integer in summary.json for readers that parse int64.
MAX_SEED = 2**64 - 1
# all_at_once batch_size: requests sent together; a run holds at most 10**7 requests
# (workload.limits.MAX_REQUESTS), so a batch past that is a typo
MAX_BATCH = 10_000_000
# cluster.router_view_s: the shortest period between a stale router's views (s)
MIN_ROUTER_VIEW_S = 1e-3

Replicas = Annotated[int, Field(gt=0, le=MAX_REPLICAS)]
Parallel = Annotated[int, Field(gt=0, le=MAX_PARALLEL)]
Seqs = Annotated[int, Field(gt=0, le=MAX_SEQS)]
StepTokens = Annotated[int, Field(gt=0, le=MAX_STEP_TOKENS)]
BlockTokens = Annotated[int, Field(gt=0, le=MAX_BLOCK_TOKENS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # every number finite (issue #19)

    @field_validator("*", mode="before")
    @classmethod
    def _no_flag_for_a_number(cls, v: object, info: ValidationInfo) -> object:
        """``replicas: true`` is not 1: pydantic's lax mode reads true/false as 1/0 for a number
        (text such as "4" or "1e-3" stays accepted: YAML 1.1 reads 1e-3 as text)."""
        if isinstance(v, bool) and info.field_name is not None:
            types = _leaf_types(cls.model_fields[info.field_name].annotation)
            if bool not in types and types & {int, float}:
                raise ValueError(FLAG_FOR_NUMBER)
        return v


def _leaf_types(annotation: object) -> set:
    """The plain types an annotation admits, through Annotated, unions and containers' own type."""
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _leaf_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_leaf_types(a) for a in typing.get_args(annotation)))
    if origin is Literal:
        return {type(a) for a in typing.get_args(annotation)}
    return {origin or annotation}


class ModelConfig(_Strict):
    name: str | None = None  # catalog name; with hf_config, the name the model is shown under
    hf_config: str | None = None  # path to a HuggingFace config.json
    weight_dtype: Dtype | None = None  # default: bf16 (fp32 for GPT-2)
    # group-quantised weights' scales (models.WEIGHT_GROUPS): weights per scale (0: per channel)
    # and bits of scale + zero point per group; default: the dtype's usual format (int4: AWQ /
    # GPTQ at 128 with an fp16 scale and a 4-bit zero; fp4: NVFP4, an 8-bit scale per 16)
    weight_group_size: Annotated[int, Field(ge=0, le=1 << 20)] | None = None
    weight_scale_bits: Annotated[float, Field(ge=0, le=64)] | None = None
    # the attention window of the model's windowed layers, as the engine runs it: 0 = full
    # attention on every layer (an engine that ignores the checkpoint's window: TensorRT-LLM unless
    # max_attention_window_size is given); default: the model's (config.json sliding_window)
    sliding_window: Annotated[int, Field(ge=0, le=1 << 24)] | None = None
    # the GEMMs' compute dtype: fp8 / int8 = W8A8 on 8-bit tensor cores (activations between the
    # GEMMs stay bf16), fp4 = NVFP4 / MXFP4 W4A4 on Blackwell; with int4 weights, int8 is W4A8
    act_dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8", "fp4"] = "bf16"
    attention_kernel: Literal["flash", "naive"] = "flash"
    # a catalog model's quantised checkpoint named by its format (quantconfig.CHECKPOINT_FORMATS:
    # what a hub id's suffix says), priced as its config.json would be: weights and groups, and
    # the compute dtype on each device that has those units (apply_checkpoint)
    checkpoint: CheckpointFormat | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if self.name is None and self.hf_config is None:
            raise ValueError("give `name` (catalog) or `hf_config` (path to config.json; `name` then renames it)")
        if self.checkpoint is not None and self.hf_config is not None:
            raise ValueError(
                "`checkpoint` names a catalog model's format; with `hf_config` the config's own quantization_config "
                "says it: drop one"
            )
        return self


# vLLM --all2all-backend values llmsim prices (costmodel/ops.ALL2ALL_BACKENDS)
All2All = Literal["allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency"]


class PoolConfig(_Strict):
    """A group of identical replicas (the whole cluster when colocated)."""

    hardware: str | None = None  # default: the scenario's `hardware`
    replicas: Replicas = 1
    tp: Parallel = 1  # tensor parallelism: devices per pipeline stage
    pp: Parallel = 1  # pipeline stages
    # MoE: split the experts over the pool's replicas x tp GPUs (vLLM --data-parallel-size N
    # --enable-expert-parallel: EP size = DP x TP; build.expert_parallel_degree)
    expert_parallel: bool = False
    # how this pool's expert-parallel ranks exchange tokens (default: cluster.all2all_backend): a
    # disaggregated deployment runs DeepEP's normal kernels for prefill, its low-latency ones for decode
    all2all_backend: All2All | None = None
    max_num_seqs: Seqs | None = None  # default: policy.max_num_seqs
    max_batch_tokens: StepTokens | None = None
    # KV blocks per replica of this pool as its engine reported them (pools of different tp hold
    # different caches); default: kv_cache.num_blocks, else the memory budget
    num_blocks: Annotated[int, Field(gt=0, le=MAX_KV_BLOCKS)] | None = None


class LinkConfig(_Strict):
    """KV-transfer link between prefill and decode pools (per direction)."""

    kind: Literal["nvlink", "pcie", "rdma", "custom"] = "rdma"
    bandwidth_gbps: PosFloat | None = None  # GB/s per direction; default from the hardware profile
    latency_us: NonNegFloat | None = None
    layerwise_overlap: bool = False  # send layer by layer while the prefill computes


class AutoscalingConfig(_Strict):
    """A replica-count policy in the loop, as Kubernetes' HPA runs one (autoscaler.py): every
    ``interval_s`` it reads ``metric``, wants ceil(replicas x value / target) replicas and starts
    or drains them; ``cluster.replicas`` serve at t = 0."""

    metric: Literal["waiting", "concurrency", "kv_usage", "ttft_p90_ms"]
    # per replica for waiting / concurrency (requests), a 0..1 fraction for kv_usage, ms for ttft_p90_ms
    target: Annotated[float, Field(gt=0, le=1e9)]
    min_replicas: Replicas = 1
    max_replicas: Replicas
    # the HPA's --horizontal-pod-autoscaler-sync-period default; at least 1 s (a controller that
    # reads Prometheus metrics scraped every few seconds decides no faster)
    interval_s: Annotated[float, Field(ge=1.0, le=86_400)] = 15.0
    tolerance: Annotated[float, Field(ge=0, lt=1)] = 0.1  # the HPA's default: no change within +-10 %
    scale_up_window_s: NonNegFloat = 0.0  # behavior.scaleUp.stabilizationWindowSeconds default
    scale_down_window_s: NonNegFloat = 300.0  # behavior.scaleDown.stabilizationWindowSeconds default
    ttft_window_s: PosFloat = 60.0  # ttft_p90_ms: over the requests sent in the last this many seconds
    # a new replica's start: the pod and container (vllm-project/vllm#44881, a RunPod cold start:
    # "container init -> engine config ~16 s"; a new node takes minutes more: raise it) ...
    provision_s: Annotated[float, Field(ge=0, le=86_400)] = 16.0
    # ... its weights read at this rate, GB/s per replica (ai-dynamo/aiperf#449, a vLLM log: "Model
    # loading took 14.9889 GiB and 18.506763 seconds" = 0.87 GB/s) ...
    load_gbps: Annotated[float, Field(ge=0.001)] = 0.87  # (1 MB/s at least: a typo's 1e-300 would never start)
    # ... and the engine's start: KV profiling, torch.compile, CUDA graphs (the same log: "init
    # engine (profile, create kv cache, warmup model) took 53.20 seconds")
    engine_init_s: Annotated[float, Field(ge=0, le=86_400)] = 53.2

    @model_validator(mode="after")
    def _range(self) -> AutoscalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})")
        if self.metric == "kv_usage" and self.target > 1:
            raise ValueError(f"target: kv_usage is a fraction of the KV cache (0..1], got {self.target}")
        return self


class ClusterConfig(_Strict):
    replicas: Replicas = 1
    tp: Parallel = 1
    pp: Parallel = 1
    # MoE: the replicas are data-parallel ranks of one expert-parallel group: each GPU holds
    # num_experts / (replicas x tp) experts (vLLM --data-parallel-size --enable-expert-parallel)
    expert_parallel: bool = False
    # MoE: Zipf exponent of the experts' popularity (0 = even routing: fewer experts reached, and under
    # expert parallelism the busiest GPU's load, eplb.py), and vLLM's expert-parallel load balancer
    # (--enable-eplb) with its EPLBConfig.num_redundant_experts extra expert copies
    expert_skew: Annotated[float, Field(ge=0, le=10)] = 0.0
    # MoE: a step's T tokens reach the experts T^exponent independent tokens would (1 = independent
    # routing). Sequences that route alike reach fewer; vLLM bench's random-token prompts do (llmsim
    # bench sets the measured value, vllmcli.RANDOM_TOKEN_ROUTING_EXPONENT); 0: every token reaches
    # the same experts, as a biased router does under dummy weights (ModelSpec.router_bias)
    expert_routing_exponent: Annotated[float, Field(ge=0, le=1)] = 1.0
    eplb: bool = False
    redundant_experts: Annotated[int, Field(ge=0, le=4096)] = 0
    # MoE expert parallelism over data-parallel ranks: how the ranks exchange tokens (vLLM
    # --all2all-backend): every token all-gathered and reduce-scattered (vLLM's default), or DeepEP's
    # all-to-all kernels, which send a token only where its experts are: "high throughput" (normal
    # kernels, prefill) or "low latency" (decode); costmodel/comm.deepep_s
    all2all_backend: All2All = "allgather_reducescatter"
    # vLLM's dual batch overlap (--enable-dbo, DeepEP only): a step of at least the threshold's tokens
    # (decode-only steps / steps with a prompt; vLLM's defaults) runs as two micro-batches, one's
    # dispatch and combine under the other's compute
    dual_batch_overlap: bool = False
    dbo_decode_token_threshold: Annotated[int, Field(ge=0, le=MAX_STEP_TOKENS)] = 32
    dbo_prefill_token_threshold: Annotated[int, Field(ge=0, le=MAX_STEP_TOKENS)] = 512
    router: Literal["round_robin", "least_outstanding", "kv_aware", "prefix_affinity", "vllm_dp", "lora_affinity"] = (
        "round_robin"
    )
    # seconds between the router's views of the replicas' load (router.StaleRouter); unset: live,
    # 0.1 s for vllm_dp (its coordinator's period). 0 is live too; a view is taken every period of the
    # run (one event each), so a period under 1 ms, far below any router's, would be a unit slip that
    # runs for hours (1e-300 s would never move the clock)
    router_view_s: NonNegFloat | None = None
    # disaggregated: how a finished prompt picks its decode replica
    decode_router: Literal["round_robin", "least_outstanding", "kv_aware"] = "least_outstanding"
    # decode-only steps replay CUDA graphs (no per-kernel launch gaps); unset: the engine's choice
    # (apply_engine writes it in, so a run's scenario.json says what ran)
    cuda_graphs: bool | None = None
    numa_aware: bool = True  # CPU devices: keep each socket's reads local
    # CPU nodes: run on this many of the node's sockets, this many cores on each (hardware.cpu_subset)
    sockets: PosInt | None = None
    cores: PosInt | None = None
    prefill_pool: PoolConfig | None = None  # disaggregated policy only
    decode_pool: PoolConfig | None = None
    kv_link: LinkConfig = LinkConfig()
    autoscaling: AutoscalingConfig | None = None  # colocated pools only

    @model_validator(mode="after")
    def _view_of_a_router_with_one(self) -> ClusterConfig:
        if self.router_view_s and self.router in ("prefix_affinity", "lora_affinity"):
            raise ValueError(
                f"router_view_s: a stale view of the replicas' caches is not modelled ({self.router} "
                "reads them live); use 0, or router least_outstanding / kv_aware / vllm_dp"
            )
        if self.router_view_s and self.router_view_s < MIN_ROUTER_VIEW_S:
            raise ValueError(
                f"router_view_s: {self.router_view_s:g} s between views is under {MIN_ROUTER_VIEW_S:g} s "
                "(vLLM's DP coordinator refreshes every 0.1 s); use 0 for a live view"
            )
        if self.router_view_s and self.router == "round_robin":
            raise ValueError(
                "router_view_s: round_robin reads nothing of the replicas; remove it or pick a router that does"
            )
        a = self.autoscaling
        if a is not None and not a.min_replicas <= self.replicas <= a.max_replicas:
            raise ValueError(
                f"replicas: the {self.replicas} replicas serving at the start must lie within autoscaling's "
                f"min_replicas..max_replicas ({a.min_replicas}..{a.max_replicas})"
            )
        if self.redundant_experts and not self.eplb:
            raise ValueError("redundant_experts: extra expert copies are EPLB's; set eplb: true")
        if a is not None and self.expert_parallel:
            raise ValueError(
                "autoscaling: an expert-parallel pool is one group of data-parallel ranks stepping together; "
                "resizing it is not modelled (remove expert_parallel or autoscaling)"
            )
        return self


def check_policy_kind(kind: str) -> None:
    """A policy kind the simulator runs, else a ValueError naming the known ones (the scenario's
    ``policy.kind`` and a plan's ``plan.policies``)."""
    from llmsim.schedulers import SCHEDULERS  # the registry: policies added at run time count

    known = [*SCHEDULERS, "disaggregated"]
    if kind not in known:
        raise ValueError(f"unknown policy {kind!r}; expected one of {', '.join(known)}")


class PolicyConfig(_Strict):
    kind: str = "traditional"  # a registered scheduler (schedulers.SCHEDULERS) or disaggregated
    max_num_seqs: Seqs = 256
    max_batch_tokens: StepTokens = 8192
    chunk_tokens: StepTokens = 512  # chunked prefill budget per step (decode tokens count against it)
    queue_order: Literal["fcfs", "shortest_prompt_first", "length_bucketed"] = "fcfs"
    max_bypass: PosInt = 16  # starvation protection: times a waiting request may be overtaken
    chunk_budget: Literal["fixed", "dynamic"] = "fixed"  # dynamic: shrink chunks when TBT is at risk
    tbt_target_s: PosFloat | None = None  # dynamic budget target (default: slo.tbt_s)
    min_chunk_tokens: PosInt = 64
    max_queue: PosInt | None = None  # per replica; arrivals beyond it are rejected (load shedding)
    # vllm policy: admit a prompt only if all of it fits (scheduler_reserve_full_isl); cap a prompt's
    # tokens per step (long_prefill_token_threshold, 0 = off)
    reserve_full_prompt: bool = True
    long_prefill_token_threshold: Annotated[int, Field(ge=0)] = 0
    # ... floored at the budget's fair share, budget / requests running or waiting (vLLM 0.32's
    # --long-prefill-token-threshold-adaptive, vllm/v1/core/sched/scheduler.py)
    long_prefill_token_threshold_adaptive: bool = False
    # context limit per request (prompt + output), vLLM's --max-model-len; default: the model's context
    max_model_len: Annotated[int, Field(gt=0, le=MAX_STEP_TOKENS)] | None = None
    # a max_model_len past the model's context, as vLLM allows it with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    # and TensorRT-LLM's build takes any max_seq_len (positions past the trained ones are computed)
    allow_long_max_model_len: bool = False
    # disaggregated: how the prefill pool batches prompts (whole prompts, or chunk_tokens per step)
    prefill_pool_policy: Literal["traditional", "chunked"] = "traditional"
    # trtllm policy: TensorRT-LLM's enable_chunked_context (prompts split over steps, off by default)
    enable_chunked_context: bool = False
    # trtllm policy: TensorRT-LLM's CapacitySchedulerPolicy (GUARANTEED_NO_EVICT is its default)
    capacity_scheduler_policy: Literal["guaranteed_no_evict", "max_utilization", "static_batch"] = "guaranteed_no_evict"

    @field_validator("kind")
    @classmethod
    def _known_policy(cls, kind: str) -> str:
        check_policy_kind(kind)
        return kind

    @model_validator(mode="after")
    def _prefill_pool_policy_needs_disaggregation(self) -> PolicyConfig:
        if self.prefill_pool_policy != "traditional" and self.kind != "disaggregated":
            raise ValueError(f"prefill_pool_policy applies to kind: disaggregated only (kind is {self.kind})")
        if "kind" in self.model_fields_set:  # (else the engine's default kind decides: apply_engine)
            problem = self.trtllm_keys_problem()
            if problem:
                raise ValueError(problem)
        return self

    def trtllm_keys_problem(self) -> str:
        """Why keys of TensorRT-LLM's scheduler do not apply under this kind ('' where they do)."""
        if self.capacity_scheduler_policy != "guaranteed_no_evict" and self.kind != "trtllm":
            return f"capacity_scheduler_policy applies to kind: trtllm only (kind is {self.kind})"
        if self.enable_chunked_context and self.kind != "trtllm":
            return (
                f"enable_chunked_context applies to kind: trtllm only (kind is {self.kind}; "
                "chunked and vllm chunk prompts always)"
            )
        if self.enable_chunked_context and self.capacity_scheduler_policy == "static_batch":
            # (TensorRT-LLM's STATIC_BATCH also holds a started prompt's next chunk back while any
            # request generates, which llmsim's step does not do)
            return "capacity_scheduler_policy static_batch with enable_chunked_context is not modelled"
        return ""


class OffloadTierConfig(_Strict):
    """A KV offload tier below the device's cache (LMCache-style; kvcache.OffloadTier), per replica."""

    # bounds keep block counts and copy times finite: a petabyte per replica, 1 MB/s to 1 PB/s,
    # 10 s per read are beyond any real tier
    tier: Literal["cpu", "ssd", "remote"]
    capacity_gb: Annotated[float, Field(gt=0, le=1e6)]
    # reading blocks back, GB/s per replica; cpu: the device profile's host link x the replica's
    # devices (what swapping uses); ssd / remote have no default (give the drive's or the network's)
    bandwidth_gbps: Annotated[float, Field(ge=1e-3, le=1e6)] | None = None
    latency_us: Annotated[float, Field(ge=0, le=1e7)] | None = None  # per read; cpu: the host link's; else 0


class KVCacheConfig(_Strict):
    block_tokens: BlockTokens = 16
    dtype: Literal["bf16", "fp16", "fp8", "int8", "fp32"] = "bf16"
    memory_fraction: float = Field(0.9, gt=0, le=1)  # of device memory usable by weights + KV
    # what memory_fraction is a fraction of: the device's total (vLLM's gpu_memory_utilization,
    # SGLang's mem_fraction_static) or what is free once weights and activations are placed
    # (TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction, default 0.9)
    memory_fraction_of: Literal["total", "free"] = "total"
    # extra reserve (activations, CUDA context) in GB; 10**5 GB is past any device (1e300 was "inf GB")
    reserve_gb: Annotated[float, Field(ge=0, le=1e5)] = 0.0
    watermark: float = Field(0.01, ge=0, lt=1)
    num_blocks: Annotated[int, Field(gt=0, le=MAX_KV_BLOCKS)] | None = (
        None  # KV blocks per replica as the engine reported them (overrides the memory budget)
    )
    # the cache's own size in bytes per device, as vLLM's --kv-cache-memory-bytes sets it: the memory
    # budget (memory_fraction and what the weights and activations leave) is then not read
    memory_bytes: Annotated[int, Field(gt=0, le=2**50)] | None = None
    preemption: Literal["recompute", "swap"] = "recompute"
    prefix_caching: bool = False
    # with prefix caching, a freed block holding no full block of KV (a request's partly filled last
    # one) is reused before the cached ones: vLLM from PR #42656 (mid-2026, in 0.28-0.32); off, every
    # freed block waits its turn least recently freed first (vLLM 0.19)
    reuse_partial_first: bool = False
    # prefixes (lists of content ids, 0..2**63-1 as a trace's hash ids) cached on every replica at t=0
    prewarm: list[list[Annotated[int, Field(ge=0, lt=2**63)]]] = []
    prewarm_block_tokens: BlockTokens | None = None  # tokens per id in `prewarm` (default: the workload's)
    # tiers below the device cache, fastest first: evicted cached blocks are written back there
    # and read back on a prefix hit (needs prefix_caching)
    offload: list[OffloadTierConfig] = Field([], max_length=8)

    @model_validator(mode="after")
    def _offload(self) -> KVCacheConfig:
        names = [t.tier for t in self.offload]
        if len(set(names)) < len(names):
            raise ValueError(f"offload: each tier once, got {names}")
        for i, t in enumerate(self.offload):
            if t.tier != "cpu" and t.bandwidth_gbps is None:
                raise ValueError(
                    f"offload[{i}]: the {t.tier} tier needs bandwidth_gbps (its read rate, GB/s per replica)"
                )
        return self


class LoraConfig(_Strict):
    """Multi-LoRA serving, vLLM's ``--enable-lora`` and its engine arguments (defaults: vLLM's
    LoRAConfig, vllm/config/lora.py); which requests use which adapter: ``workload.lora``."""

    max_loras: Annotated[int, Field(ge=1, le=1024)] = 1  # GPU slots: distinct adapters in one batch
    # the buffers' and kernels' rank, one of vLLM's (vllm/config/lora.py MaxLoRARanks, 0.32)
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] = 16
    max_cpu_loras: Annotated[int, Field(ge=1, le=1_000_000)] | None = None  # host cache; default max_loras
    # an adapter not in host memory is read from the model store at this rate (the same store the
    # weights come from: ai-dynamo/aiperf#449, "Model loading took 14.9889 GiB and 18.506763
    # seconds" = 0.87 GB/s) after a fixed cost of opening and converting it (huggingface/peft#981:
    # the first adapters took 24-27 ms each to load)
    load_gbps: Annotated[float, Field(ge=1e-3, le=1e6)] = 0.87
    load_latency_ms: Annotated[float, Field(ge=0, le=1e6)] = 25.0

    @model_validator(mode="after")
    def _cpu_cache(self) -> LoraConfig:
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            # vLLM refuses it too (LoRAConfig: "max_cpu_loras must be >= max_loras")
            raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras})")
        return self


class WorkloadLoraConfig(_Strict):
    """Which requests run with a LoRA adapter: ``share`` of them, each with one of ``adapters``
    adapters (Zipf-popular with exponent ``zipf``; a conversation keeps its adapter)."""

    adapters: Annotated[int, Field(ge=1, le=1_000_000)]
    share: float = Field(1.0, ge=0, le=1)
    zipf: Annotated[float, Field(ge=0, le=20)] = 0.0  # (past 20 the first adapter takes everything)
    rank: Annotated[int, Field(ge=1, le=1024)] | None = None  # every adapter's; default lora.max_lora_rank


class LengthSpec(_Strict):
    dist: Literal["fixed", "uniform", "lognormal", "empirical"]
    value: PosInt | None = None  # fixed
    min: Annotated[int, Field(ge=0)] | None = None  # uniform (and clip for the others)
    max: PosInt | None = None
    median: PosFloat | None = None  # lognormal
    sigma: PosFloat | None = None
    trace: str | None = None  # empirical: a trace file whose lengths are resampled
    format: TraceFormat = "azure"

    @model_validator(mode="after")
    def _fields_for_dist(self) -> LengthSpec:
        need = {
            "fixed": ["value"],
            "uniform": ["min", "max"],
            "lognormal": ["median", "sigma"],
            "empirical": ["trace"],
        }[self.dist]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"dist {self.dist!r} needs {missing}")
        # a key another dist reads is refused, not ignored: `{dist: fixed, value: 10, median: 300}`
        # would draw 10 and say nothing. min / max clip every dist's draw; empirical also reads format.
        # Only keys written with a value other than the default count: a scenario dumped and read
        # again (a sweep point, a run's scenario.json) carries every key, `format: azure` and the Nones.
        reads = list(dict.fromkeys([*need, *(["format"] if self.dist == "empirical" else []), "min", "max"]))
        unused = [
            k
            for k in LengthSpec.model_fields
            if k not in reads and k != "dist" and k in self.model_fields_set
            if getattr(self, k) != LengthSpec.model_fields[k].default
        ]
        if unused:
            raise ValueError(
                f"dist {self.dist!r} does not read {unused}; it reads {', '.join(reads)} (remove them, or change dist)"
            )
        # (min and max bound a uniform draw and clip the others: crossed, every length would be max)
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class RampUpConfig(_Strict):
    """``vllm bench serve --ramp-up-strategy S --ramp-up-start-rps A --ramp-up-end-rps B``: request i
    of n arrives after a gap drawn at its own rate, from A to B across the requests (linear: A +
    (B - A) i / (n - 1); exponential: A (B / A)^(i / (n - 1))), the gaps not rescaled."""

    strategy: Literal["linear", "exponential"]
    start_rps: PosFloat  # (vLLM's first request at rate 0 fails its own assertion)
    end_rps: PosFloat

    @model_validator(mode="after")
    def _rising(self) -> RampUpConfig:
        if self.start_rps > self.end_rps:  # (vllm bench serve refuses it too)
            raise ValueError(f"start_rps ({self.start_rps:g}) above end_rps ({self.end_rps:g}): a ramp rises")
        return self


class SystemPromptConfig(_Strict):
    """Synthetic shared system prompts: a request starts with one of ``count`` prompts."""

    count: PosInt = 1
    tokens: PosInt = 512
    share: float = Field(1.0, ge=0, le=1)  # fraction of requests that carry a system prompt
    zipf: Annotated[float, Field(ge=0, le=20)] = 0.0  # popularity skew (0 = uniform; past 20 the first takes all)
    prewarm: bool = False  # cache every system prompt on every replica before the first arrival


class ConversationConfig(_Strict):
    """Synthetic multi-turn chats: each turn's prompt is the whole history plus a new message."""

    turns: PosInt = 4
    # mean pause (exponential) before the next turn: after the previous turn was sent (open loop), or
    # after its answer, and its sub-calls' answers, came back (closed_loop)
    think_s: NonNegFloat = 30.0
    closed_loop: bool = False  # send each turn when the previous one is answered (a user or an agent)
    fanout: Annotated[int, Field(ge=0)] = 0  # closed loop: parallel sub-calls after each turn but the last

    @property
    def calls(self) -> int:
        """A session's requests: its turns and, after each but the last, its fanout sub-calls."""
        return self.turns + self.fanout * (self.turns - 1)

    @model_validator(mode="after")
    def _fanout_needs_answers(self) -> ConversationConfig:
        if self.fanout and not self.closed_loop:
            raise ValueError("fanout: sub-calls are sent when a turn is answered, which needs closed_loop: true")
        return self


def either(plain: object, nested: object, nested_type: type | tuple[type, ...]) -> object:
    """``plain | nested``, told apart by the value's Python type (``nested_type``), so an error
    is that branch's alone: a plain union reported both (``question_len.constrained-int: ...;
    question_len.function-after[...]: ...``). The branch tags start with errors.UNION_TAG, which
    the message leaves out of the key path."""

    def pick(value: object) -> str:
        return f"{UNION_TAG}nested" if isinstance(value, nested_type) else f"{UNION_TAG}plain"

    return Annotated[
        Annotated[plain, Tag(f"{UNION_TAG}plain")] | Annotated[nested, Tag(f"{UNION_TAG}nested")],
        Discriminator(pick),
    ]


TokensOrSpec = either(PosInt, LengthSpec, (dict, LengthSpec))  # a token count, or a length spec to draw from
Acceptance = either(float, list[float], (list, tuple))  # one probability, or one per proposal position


class SharedPrefixConfig(_Strict):
    """inference-perf's ``shared_prefix`` data: ``num_groups`` system prompts, each shared by
    ``num_prompts_per_group`` users (questions); request i asks prompt i mod (groups x users)."""

    num_groups: PosInt = Field(10, validation_alias=AliasChoices("num_groups", "num_unique_system_prompts"))
    num_prompts_per_group: PosInt = Field(
        10, validation_alias=AliasChoices("num_prompts_per_group", "num_users_per_system_prompt")
    )
    system_prompt_len: Annotated[int, Field(ge=0)] = 100  # tokens of each group's shared system prompt (0: none)
    question_len: TokensOrSpec = 50  # tokens per question (a length spec: drawn per user)
    output_len: TokensOrSpec = 50  # output tokens, generated in full (ignore_eos)
    enable_multi_turn_chat: bool = False  # each user's turn = its whole chat so far + a new question
    # the users' order: llmsim's (shuffled with the scenario's seed); vllm_bench: as vllm bench serve's
    # prefix_repetition dataset shuffles its requests (Python's random seeded with --seed); fixed:
    # group by group (its --disable-shuffle)
    order: Literal["llmsim", "vllm_bench", "fixed"] = "llmsim"


class ClassConfig(_Strict):
    """A request class of a synthetic mix (its own lengths; its SLO goes in slo.classes)."""

    share: PosFloat  # relative weights, at most 1e300: their sum must stay a finite number
    prompt_tokens: LengthSpec | None = None  # default: the workload's
    output_tokens: LengthSpec | None = None

    @field_validator("share")
    @classmethod
    def _summable(cls, v: float) -> float:
        if v > 1e300:  # (a Field bound would print 1e300 as its 301 digits)
            raise ValueError(f"{v:g} is past 1e300: shares are relative weights, and their sum must stay finite")
        return v


class DatasetConfig(_Strict):
    """A benchmark dataset the requests' prompts and lengths come from, drawn as the benchmark
    draws them (``vllm bench serve --dataset-name sharegpt``, llmsim/workload/sharegpt.py; ``custom``,
    llmsim/workload/custom.py); the workload's kind still says when they arrive."""

    name: Literal["sharegpt", "custom"]
    path: str  # the dataset file (--dataset-path)
    tokenizer: str  # the model's tokenizer.json, its folder, or a model id in the Hugging Face cache (--tokenizer)
    # every answer's length (--sharegpt-output-len / --custom-output-len); default sharegpt's own, custom's 256
    output_tokens: PosInt | None = None
    shuffle: bool = True  # false: --disable-shuffle
    oversample: bool = True  # false: --no-oversample (fewer requests when the file has fewer valid ones)
    chat_template: bool = True  # custom: prompts as the chat template renders them; false: --skip-chat-template

    @model_validator(mode="after")
    def _template_is_custom_s(self) -> DatasetConfig:
        if self.name != "custom" and not self.chat_template:
            raise ValueError(
                f"chat_template: the {self.name} dataset sends its prompts as they are; only custom reads it"
            )
        return self


class TraceConfig(_Strict):
    path: str
    format: TraceFormat = "azure"
    speedup: PosFloat = 1.0  # 2.0 replays twice as fast (twice the rate)
    start_s: NonNegFloat = 0.0
    duration_s: PosFloat | None = None
    max_requests: PosInt | None = None
    # tokens per hashed block of prompt content (token ids, prompt ids); default kv_cache.block_tokens
    hash_block_tokens: BlockTokens | None = None


class WorkloadConfig(_Strict):
    kind: Literal["poisson", "gamma", "all_at_once", "trace"]
    rate_rps: PosFloat | None = None  # poisson / gamma
    # poisson / gamma in place of rate_rps: each request's rate ramps from start to end (RampUpConfig)
    ramp_up: RampUpConfig | None = None
    # poisson / gamma: the rate over time, [[from_s, scale], ...]: rate_rps x scale from from_s on
    # (the first from 0 s; the last holds to the end); arrivals drawn at rate_rps, time-warped
    # (a scale of 0 is a stretch without traffic; the last one must be above 0)
    rate_profile: list[tuple[NonNegFloat, NonNegFloat]] | None = Field(None, min_length=1, max_length=100_000)
    # gamma: coefficient of variation of inter-arrival gaps. Past 10 the gamma shape (1/cv^2) is so
    # small that draws underflow to 0 (measured, numpy, 10k draws: 0.07% at cv 10, 15% at 20, 75% at
    # 50) and the sample mean leaves the rate; below 1e-3 the shape overflows
    cv: Annotated[float, Field(ge=1e-3, le=10.0)] = 1.0
    # poisson / gamma: whose random arrivals. llmsim: drawn from the scenario's seed (the first at 0 s);
    # vllm_bench: the sequence `vllm bench serve --request-rate R --burstiness 1/cv^2 --seed <seed>`
    # sends (workload/generators.vllm_bench_arrivals), so a replay of a bench run sees its arrivals
    arrivals: Literal["llmsim", "vllm_bench"] = "llmsim"
    # synthetic kinds: whose prompt content. llmsim: every prompt its own; vllm_bench: as `vllm bench
    # serve --dataset-name random --seed <seed>` draws them (workload/generators.vllm_bench_prompts),
    # the same prompts in every run with that seed, so a run on a warm server hits what an earlier
    # one left (api.run server_cache, `llmsim bench --after`)
    prompts: Literal["llmsim", "vllm_bench"] = "llmsim"
    num_requests: PosInt | None = None
    duration_s: PosFloat | None = None  # alternative to num_requests: rate x duration requests
    batch_size: Annotated[int, Field(gt=0, le=MAX_BATCH)] = 1  # all_at_once: requests per batch
    batch_interval_s: NonNegFloat = 0.0
    prompt_tokens: LengthSpec | None = None
    output_tokens: LengthSpec | None = None
    trace: TraceConfig | None = None
    horizon_s: PosFloat | None = None  # stop simulating here; default 2 x last arrival + 600 s
    system_prompts: SystemPromptConfig | None = None
    parallel_samples: PosInt = 1  # n sequences per request sharing the prompt's KV blocks
    beam_width: PosInt | None = None  # beam search: width sequences per request (priced like n samples)
    conversations: ConversationConfig | None = None
    classes: dict[str, ClassConfig] = {}
    shared_prefix: SharedPrefixConfig | None = None  # replaces prompt_tokens / output_tokens
    dataset: DatasetConfig | None = None  # replaces prompt_tokens / output_tokens: a benchmark's dataset
    # at most this many requests in flight (sent, not yet answered); the rest wait in order of
    # arrival and are sent when a slot frees, as `vllm bench serve --max-concurrency` does
    max_concurrency: PosInt | None = None
    lora: WorkloadLoraConfig | None = None  # requests' LoRA adapters (needs the scenario's `lora` section)

    @property
    def sends_as_vllm_bench(self) -> bool:
        """Arrivals drawn as `vllm bench serve` draws them (``arrivals: vllm_bench`` on a kind that
        has random arrivals; beside another kind, as a sweep may carry it, the key is not read)."""
        return self.kind in ("poisson", "gamma") and self.arrivals == "vllm_bench"

    @model_validator(mode="after")
    def _complete(self) -> WorkloadConfig:
        self._refuse_ignored()
        if self.kind == "trace":
            if self.trace is None:
                raise ValueError("kind 'trace' needs a `trace:` section")
            if self.shared_prefix is not None:
                raise ValueError("`shared_prefix` generates synthetic requests; a trace brings its own")
            if self.lora is not None:
                raise ValueError(
                    "`lora` gives synthetic requests their adapters; a generic trace names its own in a `lora` column"
                )
            for key in ("conversations", "system_prompts", "rate_profile", "dataset"):
                if getattr(self, key) is not None:
                    raise ValueError(f"`{key}` reshapes synthetic requests; a trace brings its own (remove it)")
            return self
        if self.prompts == "vllm_bench":
            self._check_bench_prompts()
        if self.dataset is not None:
            clash = (
                [
                    k
                    for k in ("prompt_tokens", "output_tokens", "shared_prefix", "system_prompts", "conversations")
                    if getattr(self, k)
                ]
                + (["classes"] if self.classes else [])
                + (["prompts: vllm_bench"] if self.prompts != "llmsim" else [])
            )
            if clash:
                raise ValueError(
                    f"`dataset` gives every request its prompt and length (the benchmark's sample); remove {clash}"
                )
        elif self.shared_prefix is not None:
            clash = [
                k
                for k in ("prompt_tokens", "output_tokens", "system_prompts", "conversations", "classes")
                if getattr(self, k)
            ]
            if clash:
                raise ValueError(
                    f"`shared_prefix` sets the lengths, system prompts and turns itself; remove {clash} "
                    "(multi-turn: shared_prefix.enable_multi_turn_chat)"
                )
        elif self.prompt_tokens is None or self.output_tokens is None:
            raise ValueError(
                f"kind {self.kind!r} needs `prompt_tokens` and `output_tokens` length specs (or a `shared_prefix` or `dataset` section)"
            )
        if self.ramp_up is not None:
            self._check_ramp_up()
        elif self.kind in ("poisson", "gamma") and self.rate_rps is None:
            raise ValueError(f"kind {self.kind!r} needs `rate_rps` (or a `ramp_up`)")
        if self.kind in ("poisson", "gamma"):
            if self.arrivals == "vllm_bench" and (self.num_requests is None or self.rate_profile is not None):
                raise ValueError(
                    "arrivals: vllm_bench sends `num_requests` (vllm bench serve's --num-prompts) at one "
                    "`rate_rps`; give num_requests and no rate_profile"
                )
            if self.num_requests is None and self.duration_s is None:
                raise ValueError("give `num_requests` or `duration_s`")
            # alternatives (docs/scenario.md): with both, num_requests was drawn and duration_s ignored
            # without a word. (all_at_once reads only num_requests: there duration_s is a key its kind
            # does not read, allowed for a sweep over workload.kind.)
            if self.num_requests is not None and self.duration_s is not None:
                raise ValueError(
                    f"`num_requests` ({self.num_requests}) and `duration_s` ({self.duration_s:g}) are alternatives "
                    f"(a count, or rate_rps x duration_s requests); give one (set the other to null)"
                )
            p = self.rate_profile
            if p is not None and p[0][0] != 0:
                raise ValueError(f"rate_profile: the first entry must start at 0 s, got {p[0][0]}")
            if p is not None and p[-1][1] <= 0:
                raise ValueError(f"rate_profile[{len(p) - 1}]: the last scale holds to the end and must be above 0")
            for k in range(1, len(p or ())):
                if p[k][0] <= p[k - 1][0]:  # type: ignore[index]
                    raise ValueError(
                        f"rate_profile[{k}]: starts at {p[k][0]} s, not after the entry before ({p[k - 1][0]} s)"  # type: ignore[index]
                    )
        elif self.rate_profile is not None:
            raise ValueError("rate_profile: shapes poisson / gamma arrivals over time; kind 'all_at_once' has none")
        elif self.num_requests is None:
            raise ValueError("kind 'all_at_once' needs `num_requests`")
        return self

    def _check_ramp_up(self) -> None:
        """A ramp sets every request's rate: it replaces rate_rps, over num_requests requests."""
        clash = [k for k in ("rate_rps", "rate_profile", "duration_s") if getattr(self, k) is not None]
        if self.kind not in ("poisson", "gamma"):
            raise ValueError(f"ramp_up: ramps the rate of poisson / gamma arrivals; kind {self.kind!r} has none")
        if clash:
            raise ValueError(f"ramp_up: sets each request's rate itself, over num_requests requests; remove {clash}")
        if self.num_requests is None:
            raise ValueError("ramp_up: needs `num_requests` (its rates run from the first request to the last)")

    def _check_bench_prompts(self) -> None:
        """vllm bench's random dataset: one prompt a request, all after one shared prefix at most."""
        clash = [k for k in ("shared_prefix", "conversations", "classes") if getattr(self, k)]
        if clash:
            raise ValueError(
                f"prompts: vllm_bench draws vllm bench's random dataset, one prompt a request; remove {clash}"
            )
        s = self.system_prompts
        if s is not None and (s.count != 1 or s.share != 1.0):
            raise ValueError(
                "prompts: vllm_bench: its shared prefix (--random-prefix-len) is one system prompt every "
                f"request starts with: system_prompts count 1, share 1 (got count {s.count}, share {s.share})"
            )

    def _refuse_ignored(self) -> None:
        """A synthetic kind's key beside a trace is refused, not ignored: a trace with
        ``num_requests: 1000`` would otherwise replay the whole trace and say nothing. (Between the
        synthetic kinds a key one does not read stays allowed: a sweep over ``workload.kind``
        carries ``rate_rps`` into ``all_at_once`` and ``cv`` into ``poisson``.) Fields are compared
        with their defaults, not by whether they were written: a scenario dumped and read again (a
        sweep point) carries every default."""
        if self.kind != "trace":
            return
        hints = {
            "rate_rps": "a trace keeps its own arrivals; `trace.speedup` scales its rate",
            "ramp_up": "a trace keeps its own arrivals; `trace.speedup` scales its rate",
            "num_requests": "a trace brings its own requests; `trace.max_requests` caps them",
            "duration_s": "a trace brings its own requests; `trace.duration_s` cuts it",
            "prompt_tokens": "a trace brings its own lengths",
            "output_tokens": "a trace brings its own lengths",
            "classes": "a trace brings its own classes (the generic format's `class` column)",
            "cv": "a trace keeps its own arrivals",
            "arrivals": "a trace keeps its own arrivals",
            "prompts": "a trace brings its own prompts (token ids, prompt ids)",
            "batch_size": "a trace keeps its own arrivals",
            "batch_interval_s": "a trace keeps its own arrivals",
        }
        defaults = {
            "cv": 1.0,
            "batch_size": 1,
            "batch_interval_s": 0.0,
            "classes": {},
            "arrivals": "llmsim",
            "prompts": "llmsim",
        }
        for key, why in hints.items():
            if getattr(self, key) != defaults.get(key):
                raise ValueError(f"`{key}`: {why}; kind 'trace' does not read it (remove it)")


class SLOConfig(_Strict):
    ttft_s: PosFloat | None = None
    tbt_s: PosFloat | None = None  # applies to the max gap between tokens of a request
    tpot_s: PosFloat | None = None  # mean time per output token after the first
    e2e_s: PosFloat | None = None
    attainment: float = Field(0.9, gt=0, le=1)  # target fraction of requests meeting every SLO
    classes: dict[str, SLOConfig] = {}  # per request class overrides


class SpeculativeConfig(_Strict):
    """Speculative decoding: a draft proposes ``k`` tokens, the target verifies them in one step."""

    method: Literal["draft", "mtp"] = "draft"  # mtp = self-speculation with extra heads
    draft_model: str | None = None  # catalog name (method draft), on the same devices
    k: PosInt = 4
    acceptance: Acceptance = 0.7  # per proposal position, given the earlier ones were accepted

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.method == "draft" and not self.draft_model:
            raise ValueError("method 'draft' needs `draft_model` (a catalog model name)")
        if self.method == "mtp" and self.draft_model:  # (it would be read past without a word)
            raise ValueError(
                "method 'mtp' drafts with the model's own heads: remove `draft_model`, or use method 'draft'"
            )
        acc = self.acceptance if isinstance(self.acceptance, list) else [self.acceptance]
        if any(not 0 <= a <= 1 for a in acc):
            raise ValueError("acceptance rates must lie in [0, 1]")
        if isinstance(self.acceptance, list) and len(self.acceptance) != self.k:
            raise ValueError(f"acceptance lists one rate per proposal: expected {self.k}, got {len(self.acceptance)}")
        return self

    def rates(self) -> list[float]:
        return list(self.acceptance) if isinstance(self.acceptance, list) else [self.acceptance] * self.k


# percentiles a run reports: each adds a column per latency metric to the tables and the summary;
# vllm bench serve users ask for a handful (--metric-percentiles), a list of thousands is a slip
MAX_PERCENTILES = 100


class OutputConfig(_Strict):
    dir: str = "results"
    steps: Literal["all", "sample", "none"] = "all"
    sample_every: PosInt = 100  # with steps: sample, keep every n-th step
    # percentiles of TTFT/TPOT/ITL/E2EL reported beside mean and median (vllm bench serve's
    # --metric-percentiles; its default is 99 alone)
    percentiles: list[Annotated[float, Field(ge=0, le=100)]] = Field(
        default_factory=lambda: [90.0, 99.0], min_length=1, max_length=MAX_PERCENTILES
    )
    format: Literal["parquet", "csv"] = "parquet"  # requests and steps tables
    trace: Literal["none", "sample", "full"] = "sample"  # trace.json: sampled requests, or every request
    trace_requests: PosInt = 200  # with trace: sample, how many requests get their own track

    @field_validator("percentiles")
    @classmethod
    def _each_once(cls, v: list[float]) -> list[float]:
        twice = sorted(p for p, n in Counter(v).items() if n > 1)
        if twice:  # (a second p99 column would say nothing new)
            raise ValueError(f"{', '.join(f'{p:g}' for p in twice)} given more than once")
        return v


class Scenario(_Strict):
    _origin: str = PrivateAttr(default="scenario")  # the file it came from, for error messages
    _engine: object = PrivateAttr(default=None)  # the resolved engine.EngineSpec (apply_engine)
    _engine_filled: dict = PrivateAttr(default_factory=dict)  # section -> keys the engine's defaults filled

    @property
    def engine_spec(self):  # type: ignore[no-untyped-def]
        """The serving engine this scenario runs under (``engine.EngineSpec``)."""
        if self._engine is None:  # built without scenario_from_dict: resolve for its hardware now
            from llmsim.engine import for_hardware, load_engine
            from llmsim.hardware import load_profile

            spec = load_engine(self.engine, Path(self.base_dir), self._origin)
            hw = load_profile(self.hardware, Path(self.base_dir))
            self._engine = for_hardware(spec, hw, f"{self._origin}: engine", check=not pools_name_hardware(self))
        return self._engine

    name: str
    seed: int = Field(0, ge=0, le=MAX_SEED)
    model: ModelConfig
    hardware: str
    cluster: ClusterConfig = ClusterConfig()
    policy: PolicyConfig = PolicyConfig()
    kv_cache: KVCacheConfig = KVCacheConfig()
    workload: WorkloadConfig
    slo: SLOConfig = SLOConfig()
    speculative: SpeculativeConfig | None = None
    lora: LoraConfig | None = None  # multi-LoRA serving (lora.py); workload.lora says who uses which adapter
    output: OutputConfig = OutputConfig()
    plan: dict | None = None  # capacity-plan search space; validated by llmsim.planning.PlanConfig
    engine: str | dict | None = None  # serving engine: a preset, a profile path, or a mapping (engine.py)
    base_dir: str = "."  # folder relative paths resolve against (set by the loader)

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_kind(cls, v: object) -> object:
        if v is not None and not isinstance(v, str | dict):
            from llmsim.engine import PRESETS

            raise ValueError(f"expected a preset name ({', '.join(PRESETS)}), an engine profile path or a mapping")
        return v

    @model_validator(mode="before")
    @classmethod
    def _model_shorthand(cls, data: object) -> object:
        # `model: llama-3.1-8b` is shorthand for `model: {name: llama-3.1-8b}`
        if isinstance(data, dict) and isinstance(data.get("model"), str):
            data = dict(data, model={"name": data["model"]})
        return data

    def path(self, p: str) -> Path:
        q = Path(p)
        return q if q.is_absolute() else Path(self.base_dir) / q

    def hf_config_path(self) -> Path:
        """``model.hf_config`` resolved: a config.json, or a model folder (a HuggingFace snapshot)
        holding one."""
        assert self.model.hf_config
        p = self.path(self.model.hf_config)
        if p.is_dir():
            if not (p / "config.json").is_file():
                raise UserError(f"model.hf_config: {p} is a folder without a config.json")
            return p / "config.json"
        if not p.exists():
            raise UserError(f"model.hf_config: file not found: {p}")
        return p


# keys a user may look for in the wrong section, and where they are
MOVED_KEYS = {
    "cluster.num_blocks": "kv_cache.num_blocks, or a disaggregated pool's cluster.prefill_pool/decode_pool.num_blocks",
    "model.dtype": "model.weight_dtype (the weights) or kv_cache.dtype (the KV cache)",
    # (a trace brings its own requests and times: the keys that change them are the trace's own)
    "workload.trace.num_requests": "workload.trace.max_requests",
    "workload.trace.rate_rps": "workload.trace.speedup",
    "workload.trace.rate": "workload.trace.speedup",
}


def _section_keys() -> dict[str, list[str]]:
    """Valid keys per section, for 'did you mean' suggestions."""
    out = {"": [k for k in Scenario.model_fields if k != "base_dir"]}  # (base_dir: llmsim sets it)
    for name, f in Scenario.model_fields.items():
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out[name] = list(ann.model_fields)
    out["workload.prompt_tokens"] = out["workload.output_tokens"] = list(LengthSpec.model_fields)
    out["workload.trace"] = list(TraceConfig.model_fields)
    out["cluster.prefill_pool"] = out["cluster.decode_pool"] = list(PoolConfig.model_fields)
    out["cluster.kv_link"] = list(LinkConfig.model_fields)
    out["cluster.autoscaling"] = list(AutoscalingConfig.model_fields)
    out["kv_cache.offload"] = list(OffloadTierConfig.model_fields)
    out["speculative"] = list(SpeculativeConfig.model_fields)
    out["workload.system_prompts"] = list(SystemPromptConfig.model_fields)
    out["workload.conversations"] = list(ConversationConfig.model_fields)
    out["workload.shared_prefix"] = list(SharedPrefixConfig.model_fields)
    out["workload.dataset"] = list(DatasetConfig.model_fields)
    out["lora"] = list(LoraConfig.model_fields)
    out["workload.lora"] = list(WorkloadLoraConfig.model_fields)
    return out


def scenario_from_dict(data: object, origin: str, base_dir: Path) -> Scenario:
    if not isinstance(data, dict):
        raise UserError(
            f"{origin}: expected a mapping of sections (name, model, hardware, ...), got {type(data).__name__}"
        )
    data = dict(data)
    if isinstance(data.get("run_id"), str) and isinstance(data.get("base_dir"), str):
        # a run's scenario.json (llmsim wrote it): run it again as it ran, its relative paths
        # resolved where the original scenario was, its run id left to the new run
        del data["run_id"]
        base_dir = Path(data["base_dir"])
    try:
        sc = Scenario.model_validate(dict(data, base_dir=str(base_dir)))
    except ValidationError as exc:
        raise UserError(pydantic_message(exc, origin, _section_keys(), MOVED_KEYS)) from None
    model = _check_names(sc, origin)
    sc = apply_engine(sc, origin)
    sc = apply_checkpoint(sc, model)
    if sc.kv_cache.offload and not sc.kv_cache.prefix_caching:  # (the engine may turn the cache on)
        raise UserError(f"{origin}: kv_cache.offload: the tiers serve prefix-cache hits; set prefix_caching: true")
    if any(t.tier == "cpu" for t in sc.kv_cache.offload):
        _check_host_tier(sc, origin)
    _check_lora(sc, origin)
    if sc.speculative is not None and sc.policy.kind == "static":  # (its scheduler never verifies drafts)
        raise UserError(
            f"{origin}: speculative: speculative decoding under policy 'static' is not modelled; "
            "remove speculative or pick another policy"
        )
    _check_speculative(sc, origin)
    return sc


def _check_host_tier(sc: Scenario, origin: str) -> None:
    """A cpu offload tier on a CPU device would be a second KV cache in the DRAM that holds the
    first (the tiers serve the first pool: the colocated one, or the prefill pool)."""
    from llmsim.hardware import load_profile

    hw = load_profile(pool_devices(sc)[0], Path(sc.base_dir))
    if hw.family == "cpu":
        raise UserError(
            f"{origin}: kv_cache.offload: a cpu tier on {hw.name}, a CPU, whose KV cache already lives in host "
            "memory (the tier would be a second cache in the same DRAM); leave it out, or use a disk tier"
        )


def _check_speculative(sc: Scenario, origin: str) -> None:
    """Speculative decoding where llmsim would price it without its cost: a pipeline's steps
    (pipeline.py prices each stage's share of the verify step, not the drafting), and requests of
    several sequences (each verify is priced as one sequence's k + 1 tokens)."""
    if sc.speculative is None:
        return
    if any(p.pp > 1 for _, p in pool_configs(sc)):
        raise UserError(
            f"{origin}: speculative: speculative decoding with pipeline parallelism (pp > 1) is not modelled "
            "(the drafting would not be priced); use pp 1"
        )
    w = sc.workload
    if w.parallel_samples > 1 or (w.beam_width or 1) > 1:
        raise UserError(
            f"{origin}: speculative: speculative decoding of requests with several sequences "
            "(workload.parallel_samples / beam_width above 1) is not modelled (one sequence's draft and "
            "verify would be priced per request)"
        )


def _check_lora(sc: Scenario, origin: str) -> None:
    """Multi-LoRA across sections: adapters need the engine's LoRA settings, fit its rank, and run
    where it is modelled (lora.py)."""
    lo, wl = sc.lora, sc.workload.lora
    if wl is not None and lo is None:
        raise UserError(
            f"{origin}: workload.lora: adapters need LoRA serving on; add a `lora:` section (max_loras, max_lora_rank)"
        )
    if lo is None:
        return
    if wl is not None and wl.rank is not None and wl.rank > lo.max_lora_rank:
        # vLLM refuses such an adapter when it loads it ("LoRA rank ... is greater than max_lora_rank")
        raise UserError(
            f"{origin}: workload.lora.rank: {wl.rank} is above lora.max_lora_rank ({lo.max_lora_rank}); "
            "raise max_lora_rank"
        )
    where = (
        "policy 'disaggregated'"
        if sc.policy.kind == "disaggregated"
        else "policy 'static'"
        if sc.policy.kind == "static"
        else f"pipeline parallelism (cluster.pp {sc.cluster.pp})"
        if sc.cluster.pp > 1
        else "expert parallelism"
        if sc.cluster.expert_parallel
        else ""
    )
    if where:
        raise UserError(f"{origin}: lora: multi-LoRA under {where} is not modelled")


def pool_configs(sc: Scenario) -> list[tuple[str, PoolConfig]]:
    """The pools a scenario asks for, by name: one ("main") when colocated; "prefill" and
    "decode" when disaggregated."""
    c = sc.cluster
    if sc.policy.kind == "disaggregated":
        # (the colocated sizing keys are refused beside pools: _check_pools_size_disaggregated)
        assert c.prefill_pool is not None and c.decode_pool is not None
        return [("prefill", c.prefill_pool), ("decode", c.decode_pool)]
    return [("main", PoolConfig(replicas=c.replicas, tp=c.tp, pp=c.pp, expert_parallel=c.expert_parallel))]


def pool_devices(sc: Scenario) -> list[str]:
    """The hardware each pool runs on, in ``pool_configs``' order: its own, else the scenario's."""
    return [p.hardware or sc.hardware for _, p in pool_configs(sc)]


def scenario_model(sc: Scenario) -> ModelSpec:
    """The model a scenario names, as released: its config.json read (quantization_config
    included), or the catalog's entry as ``model.checkpoint`` quantises it."""
    from llmsim.models import from_hf_config, get_model, with_quant
    from llmsim.quantconfig import CHECKPOINT_FORMATS

    if sc.model.hf_config:
        return from_hf_config(sc.hf_config_path(), sc.model.name)
    m = get_model(sc.model.name or "")
    return with_quant(m, CHECKPOINT_FORMATS[sc.model.checkpoint]) if sc.model.checkpoint else m


def apply_checkpoint(sc: Scenario, m: ModelSpec) -> Scenario:
    """The compute and KV cache dtypes a quantised checkpoint asks for (``model.hf_config``'s
    quantization_config, quantconfig.py; a catalog model's as released), where the file leaves model.act_dtype / kv_cache.dtype unset and keeps the
    checkpoint's weights: vLLM runs a checkpoint's quantization_config without a flag. W8A8 / W4A4
    compute only where every device of the scenario has those matrix units; elsewhere vLLM runs the
    weights dequantised in 16-bit GEMMs (Marlin), and so does llmsim. The keys filled join
    ``sc._engine_filled`` (a plan's other hardware resolves them again). ``m``: the scenario's
    model as released (``scenario_model``, read by ``_check_names``)."""
    from llmsim.hardware import load_profile

    if sc.model.weight_dtype not in (None, m.weight_dtype):
        return sc
    model, kv, filled = {}, {}, dict(sc._engine_filled)
    if m.checkpoint_act_dtype and "act_dtype" not in sc.model.model_fields_set:
        act = m.checkpoint_compute(
            sc.model.weight_dtype, (load_profile(h, Path(sc.base_dir)) for h in pool_devices(sc))
        )
        if act:
            model["act_dtype"] = act
            filled["model"] = ["act_dtype"]
    if m.checkpoint_kv_dtype and "dtype" not in sc.kv_cache.model_fields_set:
        kv["dtype"] = m.checkpoint_kv_dtype
        filled["kv_cache"] = sorted({*filled.get("kv_cache", []), "dtype"})
    if not model and not kv:
        return sc
    out = sc.model_copy(
        update={"model": sc.model.model_copy(update=model), "kv_cache": sc.kv_cache.model_copy(update=kv)}
    )
    out._engine_filled = filled
    return out


def pools_name_hardware(sc: Scenario) -> bool:
    """Disaggregated pools that each name their own hardware: nothing runs on the top-level device
    (the engine's device check is made on each pool as it is built)."""
    c = sc.cluster
    return sc.policy.kind == "disaggregated" and all(
        p is not None and p.hardware for p in (c.prefill_pool, c.decode_pool)
    )


def apply_engine(sc: Scenario, origin: str) -> Scenario:
    """The scenario as its engine runs it: the engine resolved (``sc.engine_spec``), and the policy
    and kv_cache keys the file leaves unset filled with the engine's defaults (``sc._engine_filled``
    names them, so a copy for other hardware can resolve them again: planning/base.py)."""
    from dataclasses import replace

    from llmsim.engine import DEVICE_AMOUNTS, engine_defaults, for_hardware, for_stages, load_engine
    from llmsim.hardware import load_profile

    loaded = load_engine(sc.engine, Path(sc.base_dir), origin)
    hw = load_profile(sc.hardware, Path(sc.base_dir))
    # the memory terms left to the device stay so: each pool resolves them on its own GPU
    # (build._pool calls for_hardware with the pool's profile)
    resolved = for_hardware(loaded, hw, f"{origin}: engine", check=not pools_name_hardware(sc))
    spec = replace(resolved, **{k: None for k in DEVICE_AMOUNTS if getattr(loaded, k) is None})
    if sc.policy.kind != "disaggregated":  # (the run's summary reports the one pool's engine; build._pool each pool's)
        spec = for_stages(spec, sc.cluster.pp)
    filled: dict[str, list[str]] = {}
    if sc.cluster.cuda_graphs is not None:  # the scenario's own switch wins
        spec = replace(spec, cuda_graphs=sc.cluster.cuda_graphs)
    else:  # the engine's (off where it does not say, as the ideal engine), written in
        graphs = bool(spec.cuda_graphs)
        sc = sc.model_copy(update={"cluster": sc.cluster.model_copy(update={"cuda_graphs": graphs})})
        filled["cluster"] = ["cuda_graphs"]
    table = engine_defaults(spec, hw, sc.cluster.pp) if spec.defaults else None
    sc = _one_vllm_budget(sc, origin, str(table[0]["kind"]) if table else "")
    if table:
        policy, kv = table
        kind = sc.policy.kind if "kind" in sc.policy.model_fields_set else policy["kind"]
        if kind != policy["kind"]:  # the engine's token budget is its own policy's; other policies keep theirs
            policy = {k: v for k, v in policy.items() if k not in ("kind", "max_batch_tokens")}
            if kind not in ("chunked", "disaggregated"):
                policy.pop("chunk_tokens", None)
        p_unset = {k: v for k, v in policy.items() if k not in sc.policy.model_fields_set}
        kv_unset = {k: v for k, v in kv.items() if k not in sc.kv_cache.model_fields_set}
        filled |= {"policy": sorted(p_unset), "kv_cache": sorted(kv_unset)}
        sc = sc.model_copy(
            update={
                "policy": sc.policy.model_copy(update=p_unset),
                "kv_cache": sc.kv_cache.model_copy(update=kv_unset),
            }
        )
    problem = sc.policy.trtllm_keys_problem()  # (on the kind the engine left: engine trtllm's)
    if problem:
        raise UserError(f"{origin}: policy: {problem}")
    if (
        isinstance(sc.engine, dict)
        and sc.engine.get("first_token_at_prefill") is True
        and sc.policy.kind != "disaggregated"
    ):
        raise UserError(
            f"{origin}: engine.first_token_at_prefill: sets whether the prefill instance streams the first token, which "
            f"only a disaggregated policy has (this scenario's policy is {sc.policy.kind}); remove it"
        )
    sc._origin = origin
    sc._engine = spec
    sc._engine_filled = filled
    return sc


def _one_vllm_budget(sc: Scenario, origin: str, default_kind: str) -> Scenario:
    """vLLM has one token budget per step (``--max-num-batched-tokens``) where llmsim's policies have
    two keys (``chunk_tokens``, what chunked prefill spends a step, and ``max_batch_tokens``): under
    ``policy.kind: vllm`` a file that sets one of them sets both (setting ``max_batch_tokens`` alone
    used to leave the budget at its default), and two different values are refused."""
    kind = sc.policy.kind if "kind" in sc.policy.model_fields_set else (default_kind or sc.policy.kind)
    given = {"chunk_tokens", "max_batch_tokens"} & sc.policy.model_fields_set
    if kind != "vllm" or not given:
        return sc
    if len(given) == 2:
        if sc.policy.chunk_tokens != sc.policy.max_batch_tokens:
            raise UserError(
                f"{origin}: policy: kind vllm has one token budget per step (vLLM's --max-num-batched-tokens), "
                f"but chunk_tokens is {sc.policy.chunk_tokens} and max_batch_tokens {sc.policy.max_batch_tokens}; "
                "set one of them (or both to the same value)"
            )
        return sc
    value = getattr(sc.policy, given.pop())
    return sc.model_copy(
        update={"policy": sc.policy.model_copy(update={"chunk_tokens": value, "max_batch_tokens": value})}
    )


def load_scenario(path: str | Path, overrides: dict[str, object] | None = None) -> Scenario:
    """Read and validate a scenario file; ``overrides`` maps dotted key paths to values."""
    path = Path(path)
    data = load_yaml_file(path)
    if overrides:
        if not isinstance(data, dict):
            raise UserError(f"{path}: expected a mapping of sections")
        for key, value in overrides.items():
            set_path(data, key, value)
    return scenario_from_dict(data, str(path), path.resolve().parent)


def with_overrides(data: dict, overrides: dict[str, object] | None) -> dict:
    """A copy of scenario ``data`` with each ``--set``-style override applied (``set_path``)."""
    import copy

    out = copy.deepcopy(data)
    for key, value in (overrides or {}).items():
        set_path(out, key, value)
    return out


def set_path(data: dict, dotted: str, value: object, option: str = "--set") -> None:
    """Set ``a.b.c = value`` in nested dicts (``--set`` overrides), creating sections as needed;
    ``option`` is how a bad key path is named (a sweep's fixed overrides are ``--fix`` items)."""
    if dotted.startswith("model.") and isinstance(data.get("model"), str):
        data["model"] = {"name": data["model"]}  # expand the `model: NAME` shorthand first
    if dotted.startswith("engine.") and isinstance(data.get("engine"), str):
        data["engine"] = {"preset": data["engine"]}  # and the `engine: PRESET` one
    node = data
    try:
        parts = key_parts(dotted)
    except UserError as exc:  # a sweep's or plan's key path: say which
        raise UserError(f"{option} {dotted}: {exc}") from None
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            if node.get(p) is not None:
                raise UserError(f"{option} {dotted}: {p!r} is {node[p]!r}, not a section with keys")
            node[p] = {}
        node = node[p]
    # a copy: a mapping or list value stays the caller's (a sweep sets one grid value into every
    # point, and a later key inside it would change the grid itself)
    node[parts[-1]] = copy.deepcopy(value) if isinstance(value, dict | list) else value


def key_parts(dotted: str) -> list[str]:
    """``"a.b.c"`` -> ``["a", "b", "c"]``, refusing an empty name (``""``, ``a..b``, ``a.``): it
    would become a key ``''`` that pydantic reports as unknown, hiding the typo."""
    parts = [p.strip() for p in dotted.split(".")]
    if not dotted.strip():
        raise UserError("empty key; expected KEY=VALUE, e.g. policy.chunk_tokens=256")
    if not all(parts):
        raise UserError(f"key {dotted!r} has an empty name between dots; expected e.g. policy.chunk_tokens")
    return parts


def _check_names(sc: Scenario, origin: str) -> ModelSpec:
    """Catalog and profile names resolve now, so a typo fails before any work; the model they name."""
    from llmsim.hardware import load_profile
    from llmsim.models import get_model

    base = Path(sc.base_dir)
    for key, name in [("hardware", sc.hardware), *_pool_hardware(sc)]:
        try:
            load_profile(name, base)
        except UserError as exc:
            raise UserError(f"{origin}: {key}: {exc}") from None
    if sc.speculative is not None and sc.speculative.draft_model:
        try:
            get_model(sc.speculative.draft_model)
        except UserError as exc:
            raise UserError(f"{origin}: speculative.draft_model: {exc}") from None
    try:
        model = scenario_model(sc)
    except UserError as exc:
        msg = str(exc)
        raise UserError(f"{origin}: {msg if msg.startswith('model.') else 'model: ' + msg}") from None
    for key, p in _paths(sc):
        if not sc.path(p).exists():
            raise UserError(f"{origin}: {key}: file not found: {sc.path(p)}")
    if sc.policy.kind == "disaggregated" and (sc.cluster.prefill_pool is None or sc.cluster.decode_pool is None):
        raise UserError(f"{origin}: cluster: policy 'disaggregated' needs cluster.prefill_pool and cluster.decode_pool")
    pools = [k for k in ("prefill_pool", "decode_pool") if getattr(sc.cluster, k) is not None]
    if pools and sc.policy.kind != "disaggregated":  # (they would be read past: one colocated pool runs)
        raise UserError(
            f"{origin}: cluster.{pools[0]}: pools are for policy.kind disaggregated, and the policy is "
            f"{sc.policy.kind!r}; remove the pools (cluster.replicas sizes a colocated cluster) or set the policy"
        )
    if sc.cluster.router == "lora_affinity" and sc.lora is None:
        raise UserError(
            f"{origin}: cluster.router: lora_affinity routes by the requests' LoRA adapters, and the scenario has no "
            "`lora` section; add one, or pick another router"
        )
    if sc.policy.kind == "disaggregated":
        _check_pools_size_disaggregated(sc.cluster, origin)
    if sc.policy.kind == "disaggregated" and sc.cluster.autoscaling is not None:
        raise UserError(
            f"{origin}: cluster.autoscaling: scaling the prefill and decode pools of a disaggregated cluster "
            "is not modelled; autoscaling applies to a colocated pool (policy traditional, chunked, vllm, ...)"
        )
    link = sc.cluster.kv_link
    if sc.policy.kind == "disaggregated" and link.kind == "custom" and link.bandwidth_gbps is None:
        raise UserError(f"{origin}: cluster.kv_link.bandwidth_gbps: a 'custom' link needs its bandwidth in GB/s")
    if sc.policy.kind == "disaggregated" and link.kind == "nvlink":
        _check_one_nvlink_domain(sc, origin)
    if sc.workload.classes and sc.workload.kind == "trace":
        raise UserError(f"{origin}: workload.classes: classes mix synthetic requests; a trace brings its own")
    return model


def _check_one_nvlink_domain(sc: Scenario, origin: str) -> None:
    """An NVLink KV link joins GPUs of one NVLink domain: pools on two kinds of device (an H100 and
    an A100, a TPU and a GPU) have none between them; their KV moves over the network (the link
    was priced at the prefill device's scale-up rate, a TPU's ICI to an A100 included)."""
    from llmsim.hardware import profile_file

    names = pool_devices(sc)
    files = {profile_file(n, Path(sc.base_dir)).resolve() for n in names}
    if len(files) > 1:
        raise UserError(
            f"{origin}: cluster.kv_link.kind: nvlink joins GPUs of one NVLink domain, and the pools run on "
            f"{names[0]} and {names[1]}; use rdma (or custom, with the link's bandwidth)"
        )


def _check_pools_size_disaggregated(c: ClusterConfig, origin: str) -> None:
    """A disaggregated cluster is its two pools: the colocated sizing keys would be read past, so
    one set away from its default is an error naming where it goes, never a silent no-op."""
    for key in ("replicas", "tp", "pp", "expert_parallel"):
        value = getattr(c, key)
        if value != ClusterConfig.model_fields[key].default:
            shown = str(value).lower() if isinstance(value, bool) else value_text(value)  # (as YAML writes it)
            raise UserError(
                f"{origin}: cluster.{key}: a disaggregated cluster is sized by its pools; set "
                f"cluster.prefill_pool.{key} and cluster.decode_pool.{key} instead (cluster.{key} is "
                f"{shown} here and would be ignored)"
            )


def _pool_hardware(sc: Scenario) -> list[tuple[str, str]]:
    out = []
    for key in ("prefill_pool", "decode_pool"):
        pool = getattr(sc.cluster, key)
        if pool is not None and pool.hardware:
            out.append((f"cluster.{key}.hardware", pool.hardware))
    return out


def _paths(sc: Scenario) -> list[tuple[str, str]]:
    out = []
    w = sc.workload
    if w.trace is not None:
        out.append(("workload.trace.path", w.trace.path))
    for key in ("prompt_tokens", "output_tokens"):
        spec = getattr(w, key)
        if spec is not None and spec.trace:
            out.append((f"workload.{key}.trace", spec.trace))
    for key in ("question_len", "output_len"):
        spec = getattr(w.shared_prefix, key, None)
        if isinstance(spec, LengthSpec) and spec.trace:
            out.append((f"workload.shared_prefix.{key}.trace", spec.trace))
    return out
