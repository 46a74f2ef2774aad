"""The serving engine: what the software adds to the hardware (scenario section ``engine:``).

A step of a real engine is more than its kernels. The host schedules the batch, prepares the
inputs and processes the outputs (named ``HostTerm`` s, each ``base + per_seq · seqs +
per_token · tokens``); with async scheduling (vLLM v1's default on GPUs) that host work overlaps
the device's previous step, so a step lasts ``max(device, host)`` instead of their sum, and a
request that arrives while a step runs is planned one step later (the next step was planned
when this one started). Steps run under CUDA graphs up to the largest captured size, padded up to
the next one (vLLM: decode-only steps whole, mixed steps' GEMMs piecewise; TensorRT-LLM:
decode-only steps of a captured size alone); bigger ones run eager (every kernel pays its launch
gap). Each token reaches the client ``output_delay_s`` after the step that made it
(detokenising, streaming).

``EngineSpec`` carries those terms with their sources and names the table of scheduler defaults
a scenario that leaves a key unset gets (``defaults``: ``vllm_defaults``). Presets: ``ideal`` (the
hardware alone, as llmsim priced it before there was an engine model), ``vllm-v1`` (vLLM
v1's scheduler and defaults; host terms measured on vLLM 0.32 on a CPU and carried as priors
to GPUs, see ``PRESETS``), ``trtllm`` (TensorRT-LLM's PyTorch backend: its defaults, overlap
scheduler and CUDA graphs, from its code; checked on TensorRT-LLM 1.0's throughput table),
``trtllm-engine`` (TensorRT-LLM 0.x's C++ executor, as Triton serves it: its defaults from its
docs, its step and frontend times fitted to TensorRT-LLM 0.14's online table) and
the two engines of DistServe's evaluation. A calibrated engine profile (``llmsim calibrate --serving``) is a
YAML file of the same fields.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from llmsim.errors import UserError, load_yaml_file, value_text

if TYPE_CHECKING:
    from llmsim.hardware import HardwareProfile


@dataclass(frozen=True)
class HostTerm:
    """Host seconds of one part of a step: ``base_s + per_seq_s · seqs + per_token_s · tokens``."""

    base_s: float = 0.0
    per_seq_s: float = 0.0
    per_token_s: float = 0.0
    source: str = ""

    def seconds(self, seqs: int, tokens: int) -> float:
        return self.base_s + self.per_seq_s * seqs + self.per_token_s * tokens

    @property
    def priced(self) -> bool:
        """Whether the term costs anything (a preset's unset term is all zeros)."""
        return self.base_s > 0 or self.per_seq_s > 0 or self.per_token_s > 0


HOST_TERMS = ("schedule", "prepare", "output")  # the named host parts of a step, in order


@dataclass(frozen=True)
class EngineSpec:
    """A serving engine's behaviour: host terms, pipelining, CUDA graphs, scheduler defaults."""

    name: str
    source: str
    schedule: HostTerm = HostTerm()  # the scheduler's decision (vLLM: Scheduler.schedule)
    prepare: HostTerm = HostTerm()  # inputs and metadata for the forward, sampling
    output: HostTerm = HostTerm()  # update_from_output, stop checks, handing outputs to the frontend
    # a step whose running batch changed in the step before (a request left, or one had prompt
    # tokens): vLLM v1's model runner condenses and reorders its persistent batch and rebuilds the
    # sampling metadata (GPUModelRunner._update_states, InputBatch.refresh_metadata, 0.32); a
    # settled batch skips them. Fitted by calibrate --serving; zero in the presets
    batch_change: HostTerm = HostTerm()
    async_scheduling: bool = False  # plan step N+1 while step N runs (vLLM's batch queue of 2)
    output_delay_s: float = 0.0  # step end -> the client sees the token (detokenise, stream)
    # the API server's work on each request before the engine has it (HTTP, tokenising the prompt,
    # input processing): base_s + per_token_s x prompt tokens, one request at a time, so a request
    # that arrives while others are handled waits for them. Its own handling at light load is inside
    # output_delay_s (measured so); this adds the wait. Open-loop arrivals (sim.engine_reach_s)
    frontend: HostTerm = HostTerm()
    # seconds a step waits for each fused-MoE kernel variant it is the first to need, on a server
    # whose start-up did not compile it (moejit.py); 0: every variant is compiled (a warm server)
    moe_jit_compile_s: float = 0.0
    # disaggregated: the prefill instance streams the first token as its prompt step ends (DistServe:
    # ContextStageLLMEngine._step hands each request's StepOutput to the client, then queues its KV
    # for migration), so a wait for the decode side shows in TPOT; false: the client's first token
    # comes from the decode instance once the KV lands (vLLM's P/D proxy streams the decode's answer)
    first_token_at_prefill: bool = False
    cuda_graphs: bool | None = None  # None: the scenario's cluster.cuda_graphs
    cuda_graph_sizes: tuple[int, ...] = ()  # captured decode batch sizes (empty: every size)
    # a step between two captured sizes runs padded up to the next one (vLLM; TensorRT-LLM with
    # cuda_graph_config.enable_padding); false: only a step of a captured size replays its graph,
    # any other runs eager (TensorRT-LLM's default, enable_padding false)
    cuda_graph_padding: bool = True
    # graphs for decode-only steps alone (TensorRT-LLM: "enabled for batches that consist of
    # decoding requests *only*", tensorrt_llm/llmapi/llm_args.py); false: vLLM's PIECEWISE graphs
    # run a mixed step's GEMMs and norms graphed too
    cuda_graph_decode_only: bool = False
    # the rows a CUDA graph pads a step with are routed to no expert (their top-k ids set to -1,
    # VLLM_MOE_SKIP_PADDING, vLLM PR #46428 "Skip DP padding tokens in MoE", 2026-06; on by default in
    # vllm/envs.py by 2026-08-02, as the descriptions of PRs #50757 (closed) and #50759 (open) state;
    # the V1 model runner marks its padding from PR #56079, merged 2026-09-09, before 0.30.0), where
    # the router supports it: the fused softmax top-k (Mixtral, Qwen-MoE), not grouped top-k or custom
    # routers (DeepSeek's; #50759 extends it). llmsim applies it without expert parallelism only.
    # False: padded rows are routed like real ones (vLLM 0.19)
    moe_skip_padding: bool = False
    # an fp8 KV cache makes the engine quantise its queries and run attention in fp8 on a device
    # whose kernels take fp8 queries (HardwareProfile.fp8_attention), whatever the compute dtype:
    # vLLM's Attention layer (query_quant, QuantFP8, compiled into the op before it) for
    # FlashAttention-3 on SM90, FlashInfer's q_data_type for trtllm-gen on SM100. False: fp8
    # attention only with fp8 compute, as TensorRT-LLM's FP8 context FMHA and XQA run
    # (costmodel/ops.py attention_dtype)
    fp8_query: bool = False
    # "vllm" / "trtllm" / "trtllm-engine": policy/kv_cache keys a scenario leaves unset get that
    # engine's (vllm_defaults, trtllm_defaults); the trtllm ones also make it run as TensorRT-LLM
    # (is_trtllm)
    defaults: str = ""
    hardware_step_overhead: bool = False  # ideal: keep the profile's step_overhead_s instead
    # Device memory the engine holds besides weights and KV cache, per device (build.kv_blocks): what
    # vLLM's start-up profile run measures and subtracts before it sizes the cache
    sampler_profile_bytes_per_logit: float = 0.0  # its dummy sampler run over max_num_seqs x vocab logits
    # memory outside torch's allocator that grows during the profile, at TP 1 and per device at TP > 1;
    # None: the hardware profile's measured overheads.engine_non_torch_bytes, else VLLM_NON_TORCH_BYTES
    non_torch_bytes: float | None = 0.0
    non_torch_bytes_tp: float | None = 0.0
    moe_workspace_persists: bool = False  # MoE kernels' scratch buffers stay allocated between calls
    # the profile takes the sampled rows' logits after the forward pass has freed its activations
    # (vLLM 0.30's start-up profile: its torch peak is the forward's alone, v0.30-glyd.csv); false:
    # the forward's peak holds the fp32 logits too (build.activation_bytes, vLLM 0.19's)
    logits_after_forward: bool = False
    # vLLM >= 0.21 subtracts an estimate of its CUDA graphs' memory before it sizes the cache
    # (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on by default since 0.21; cuda_graph_estimate_bytes):
    # bytes per PIECEWISE graph per layer on the device, and bytes per FULL graph it extrapolates per
    # layer x attention head x batch row; None: the hardware profile's measured overheads of the same
    # names, else VLLM_GRAPH_BYTES_PER_LAYER / VLLM_FULL_GRAPH_BYTES_PER_HEAD_ROW; 0: nothing subtracted
    cuda_graph_bytes_per_layer: float | None = 0.0
    cuda_graph_full_bytes_per_head_row: float | None = 0.0
    memory_source: str = ""
    # On a CPU (family cpu): the host's seconds per operator, which there add to every call (eager
    # Python, the dispatcher, OpenMP's fork/join): replaces the hardware profile's kernel_launch_s,
    # unless that profile is calibrated (its own launch was fitted or measured with its stack).
    # None keeps the profile's (a C++ runtime's engine).
    cpu_op_s: float | None = None

    def reserved_bytes(
        self,
        forward_bytes: float,
        logits_bytes: float,
        max_seqs: int,
        step_tokens: int,
        vocab: int,
        tp: int,
        moe_workspace: float = 0.0,
    ) -> tuple[float, float, float, float]:
        """(activation peak, sampler profile, MoE scratch kept, non-torch) bytes per device: the profile's torch peak
        is the larger of the forward pass's activations (``forward_bytes``, with the sampled rows'
        fp32 ``logits_bytes`` on top unless ``logits_after_forward``) and the sampler run's
        buffers, over the whole vocabulary on every TP rank (the logits are gathered first) for
        min(max_num_seqs, max_num_batched_tokens) rows (vLLM's ``_dummy_run`` makes that many
        requests of the profile's tokens); plus, where the engine keeps them, the MoE kernels'
        scratch buffers sized by the profile's tokens (``build.moe_workspace_bytes``). The
        non-torch terms must be resolved (``for_hardware``)."""
        sampler = self.sampler_profile_bytes_per_logit * min(max_seqs, step_tokens) * vocab
        non_torch = self.non_torch_bytes_tp if tp > 1 else self.non_torch_bytes
        assert non_torch is not None, "engine memory terms not resolved for a device (engine.for_hardware)"
        kept = moe_workspace if self.moe_workspace_persists else 0.0
        forward = forward_bytes if self.logits_after_forward else forward_bytes + logits_bytes
        return max(forward, sampler) + kept, sampler, kept, non_torch

    def cuda_graph_estimate_bytes(self, layers: int, heads: int, plan: GraphPlan) -> float:
        """vLLM's estimate of its CUDA graphs' memory, subtracted before the cache is sized, as vLLM
        0.30 makes it: it captures every PIECEWISE graph and the two largest FULL ones in a
        scratch pool, measures them ("Capturing CUDA graphs (PIECEWISE): 51/51 ... (FULL): 2/2",
        "Graph capturing finished ..., took 0.38 GiB"), and adds the second FULL capture's growth
        for each FULL graph left. So: bytes per PIECEWISE graph per layer x the device's layers x
        the PIECEWISE graphs, plus bytes per layer x attention head x batch row x the second FULL
        size x the FULL graphs beyond two (the attention kernel's per-graph buffers: 5-7 bytes on
        FlashAttention-2, 11-18 on FlashAttention-3; v0.30-glyd.csv, benchmarks/vllm_memory.py)."""
        piecewise, full = self.cuda_graph_bytes_per_layer, self.cuda_graph_full_bytes_per_head_row
        assert piecewise is not None and full is not None, "engine memory terms not resolved (engine.for_hardware)"
        extrapolated = max(plan.full - 2, 0) * plan.second_full_size
        return piecewise * layers * plan.piecewise + full * layers * heads * extrapolated

    def host_breakdown(self, seqs: int, tokens: int) -> dict[str, float]:
        """Host seconds of each named term of a step (``CostModel.host_s`` prices their sum)."""
        return {f"engine_{k}": getattr(self, k).seconds(seqs, tokens) for k in HOST_TERMS}


def vllm_capture_sizes(max_size: int = 512) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes: [1, 2, 4] + range(8, 256, 8) + range(256, max+1, 16)
    (vllm/config/compilation.py, ``max_cudagraph_capture_size`` docstring, 0.19 and 0.32; the
    RTX 4090 run's meta.json lists exactly these up to 512)."""
    return tuple(s for s in [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)] if s <= max_size)


# vLLM's default list, up to 512 (1,024 on data-centre Blackwell, not modelled): the one it caps at
# 2 x max_num_seqs (build.graph_sizes)
VLLM_DEFAULT_SIZES = vllm_capture_sizes()


@dataclass(frozen=True)
class GraphPlan:
    """The CUDA graphs vLLM captures: PIECEWISE and FULL counts, and the second-largest FULL size."""

    piecewise: int = 0
    full: int = 0
    second_full_size: int = 0


def graph_plan(sizes: tuple[int, ...], max_num_seqs: int) -> GraphPlan:
    """CUDA graphs vLLM captures under its default mode FULL_AND_PIECEWISE: a PIECEWISE graph for
    every capture size (mixed batches) and a FULL graph for every size a uniform decode batch
    reaches, up to max_num_seqs (vLLM 0.30's logs: 51 PIECEWISE and 35 FULL at 256 sequences, 51
    and 51 at 1,024 on FlashAttention-3; v0.30-glyd.csv's capture sizes)."""
    full = sorted(s for s in sizes if s <= max_num_seqs)
    return GraphPlan(len(sizes), len(full), full[-2] if len(full) > 1 else 0)


# vLLM 0.32.0 on this project's 2-core CPU, fitted on the calibration runs only (`llmsim calibrate
# --serving`, data/validation/vllm-cpu/engine-fit/engine.yaml; docs/validation.md). The scheduler
# and output processing are the same Python on any platform; a GPU server's host core is faster
# than one of this VM's, so on GPUs these are upper priors (calibrate --serving replaces them).
# The output term is the engine core's part only, ``Scheduler.update_from_output`` (the harness's
# update_start -> update_end): the harness runs vLLM in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0),
# so its "update_from_output -> next step" interval also holds the OutputProcessor and the harness's
# own stamping, which ``vllm serve`` runs in the API-server process (AsyncLLM's output_handler,
# vllm/v1/engine/async_llm.py), beside the engine core's loop rather than in it: 0.249 ms + 10.8 us
# per sequence of the 0.350 ms + 19.5 us fitted to the whole interval. Refitted by
# tests/test_engine.py from the campaign's calibration runs.
_FIT = "vLLM 0.32 CPU, calibrate --serving on the calibration runs (data/validation/vllm-cpu/engine-fit/engine.yaml)"
_VLLM_SCHEDULE = HostTerm(1.128e-4, 1.311e-5, 1.437e-7, f"{_FIT}: step start -> end of Scheduler.schedule")
_VLLM_OUTPUT = HostTerm(
    1.010e-4,
    8.678e-6,
    3.542e-8,
    "vLLM 0.32 CPU, the calibration runs of data/validation/vllm-cpu/ (as engine-fit/), non-negative least squares "
    "of Scheduler.update_from_output alone (steps.csv update_start_s -> update_end_s); the rest of the in-process "
    "interval runs in vLLM's API-server process under vllm serve",
)
# Input preparation and sampling on a GPU runner: Vidur's measured medians for the Sarathi engine
# on an A100 (Vidur's data/profiling/a100/cpu_overheads.csv at commit 6d98aa8, as the A100 profile's
# step_overhead_s cites it: prepare_inputs 0.85 + sampler 0.6 ms), an
# upper prior for vLLM v1's persistent batch; async scheduling hides it under any longer device step.
_VLLM_PREPARE_GPU = HostTerm(
    1.45e-3, 0.0, 0.0, "Vidur a100/cpu_overheads.csv (6d98aa8) medians: prepare_inputs 0.85 + sampler 0.6 ms"
)


# TensorRT-LLM 0.x's C++ executor (TensorRT engines; trtllm-bench's TensorRT flow, Triton's
# tensorrtllm_backend): its per-step host work (the batch manager's scheduling, the engine's
# enqueue, sampling) and, behind Triton, the path from a step to the client (the ensemble's
# preprocessing and postprocessing Python models, the streamed response). Neither is published:
# both are fitted (benchmarks/trtllm_online.py --fit) to the mean TTFT and ITL of the 8B rows of
# TensorRT-LLM 0.14's online serving table (data/validation/published/trtllm-0.14-online.csv), and
# checked on its 70B TP4 rows (docs/validation.md, "TensorRT-LLM 0.14 behind Triton")
_TRTLLM_ENGINE_STEP = HostTerm(
    1.25e-3,
    0.0,
    0.0,
    "fitted: TensorRT-LLM 0.14's online table, its 8B rows (benchmarks/trtllm_online.py --fit); 70B rows held out",
)
_TRITON_FRONTEND_S = 4.0e-3


def vllm_defaults(hw: HardwareProfile) -> tuple[dict[str, object], dict[str, object]]:
    """vLLM's defaults for a server on ``hw`` (OpenAI API server usage): policy and kv_cache keys.

    ``max_num_batched_tokens`` / ``max_num_seqs``: vllm/engine/arg_utils.py (0.32.0, the same
    table in 0.19): >= 160 GiB devices 16384 / 1024; >= 70 GiB except A100 8192 / 1024; other GPUs
    2048 / 256; CPU 2048 / 128; TPU v6e 1024, v5e 512, v5p 256 tokens. Block size 16 on GPUs and
    TPUs, 128 on CPU (vllm/platforms/cpu.py); prefix caching on; no watermark in v1; a freed partial
    block reused first (vllm/v1/core/block_pool.py ``free_blocks``, 0.32.0; not in 0.19)."""
    gib = hw.memory_bytes / 2**30
    if hw.family == "cpu":
        tokens, seqs, block = 2048, 128, 128
    elif hw.family == "tpu":
        tokens = {"TPU-v6e": 1024, "TPU-v5e": 512, "TPU-v5p": 256}.get(hw.name, 1024)
        seqs, block = 256, 16
    elif gib >= 160:
        tokens, seqs, block = 16384, 1024, 16
    elif gib >= 70 and "a100" not in hw.name.lower():
        tokens, seqs, block = 8192, 1024, 16
    else:
        tokens, seqs, block = 2048, 256, 16
    policy = {"kind": "vllm", "max_num_seqs": seqs, "chunk_tokens": tokens, "max_batch_tokens": tokens}
    return policy, {"block_tokens": block, "watermark": 0.0, "prefix_caching": True, "reuse_partial_first": True}


# TensorRT-LLM's LLM API defaults (the PyTorch backend of trtllm-serve and trtllm-bench, 1.x;
# tensorrt_llm/llmapi/llm_args.py): an unset max_batch_size / max_num_tokens takes BuildConfig's
# 2048 / 8192 (tensorrt_llm/builder.py); KvCacheConfig: tokens_per_block 32, free_gpu_memory_fraction
# 0.9 (of the memory free after the model and its profile run), enable_block_reuse true;
# SchedulerConfig: GUARANTEED_NO_EVICT; enable_chunked_prefill false
TRTLLM_MAX_BATCH = 2048
TRTLLM_MAX_TOKENS = 8192


def trtllm_defaults(pp: int = 1, block_reuse: bool = True) -> tuple[dict[str, object], dict[str, object]]:
    """TensorRT-LLM's defaults (``TRTLLM_MAX_BATCH`` and the rest above): policy and kv_cache keys.
    max_batch_size bounds one micro-batch, and ``pp`` of them are in flight: the executor holds
    max_batch_size x pp sequences (max_num_sequences, _torch/pyexecutor/py_executor_creator.py;
    assumed the same for the 0.x C++ executor, whose in-flight batcher also keeps a micro-batch
    per stage). ``block_reuse``: on in the LLM API (1.x); off in the 0.x C++ executor behind
    Triton (``enable_kv_cache_reuse`` unset, tensorrtllm_backend docs/model_config.md). 32-token
    blocks in both: trtllm-build's plugin config has ``tokens_per_block`` 32 in the releases with
    ``reduce_fusion`` (tensorrt_llm/plugin/plugin.py; older ones had 64 or 128, and which release
    changed it is not pinned down)."""
    policy = {"kind": "trtllm", "max_num_seqs": TRTLLM_MAX_BATCH * pp, "max_batch_tokens": TRTLLM_MAX_TOKENS}
    kv = {
        "block_tokens": 32,
        "memory_fraction": 0.9,
        "memory_fraction_of": "free",
        "watermark": 0.0,
        "prefix_caching": block_reuse,
    }
    return policy, kv


def trtllm_graph_sizes(max_batch_size: int = 128, padding: bool = False) -> tuple[int, ...]:
    """TensorRT-LLM's CUDA-graph batch sizes: without padding 1-31, 32, 64, 128, with it 1, 2, 4
    and 8-128 by 8; then the powers of two up to ``max_batch_size``, which is 128 unless
    cuda_graph_config sets it, and it itself (``CudaGraphConfig._generate_cuda_graph_batch_sizes``,
    tensorrt_llm/llmapi/llm_args.py)."""
    sizes = [1, 2, 4, *range(8, 129, 8)] if padding else [*range(1, 32), 32, 64, 128]
    sizes += [2**i for i in range(8, max(8, (max_batch_size - 1).bit_length()))]
    sizes = sorted(x for x in set(sizes) if x <= max_batch_size)
    return tuple(sizes if sizes[-1] == max_batch_size else [*sizes, max_batch_size])


TRTLLM_TABLES = ("trtllm", "trtllm-engine")  # the defaults tables of TensorRT-LLM's engines


def engine_defaults(spec: EngineSpec, hw: HardwareProfile, pp: int) -> tuple[dict[str, object], dict[str, object]]:
    """The policy and kv_cache keys of ``spec``'s defaults table (``spec.defaults`` is set): vLLM's
    per device, TensorRT-LLM 1.x's LLM API's (block reuse on) or its 0.x executor's (off)."""
    if spec.defaults == "vllm":
        return vllm_defaults(hw)
    return trtllm_defaults(pp, block_reuse=spec.defaults == "trtllm")


def is_trtllm(spec: EngineSpec) -> bool:
    """An engine that runs as TensorRT-LLM: its defaults, its CUDA graphs, NVIDIA GPUs only (the
    ``trtllm`` and ``trtllm-engine`` presets, or any engine whose ``defaults`` say so; its name is
    the user's to set)."""
    return spec.defaults in TRTLLM_TABLES


def for_stages(spec: EngineSpec, pp: int) -> EngineSpec:
    """The engine over ``pp`` pipeline stages: TensorRT-LLM runs them in their own loop
    (PyExecutor._executor_loop_pp, chosen for pp_size > 1 whatever disable_overlap_scheduler says),
    not the overlap scheduler's."""
    if is_trtllm(spec) and pp > 1 and spec.async_scheduling:
        return replace(spec, async_scheduling=False)
    return spec


def refused_on(spec: EngineSpec, hw: HardwareProfile) -> str:
    """Why ``spec`` cannot run on ``hw`` ("" where it can): TensorRT-LLM runs on NVIDIA GPUs only."""
    if is_trtllm(spec) and (hw.family != "gpu" or not hw.vendor.strip().lower().startswith("nvidia")):
        return (
            f"{spec.name} runs as TensorRT-LLM (defaults: {spec.defaults}), which runs on NVIDIA GPUs, not on "
            f"{hw.name} ({hw.vendor}, {hw.family})"
        )
    return ""


def for_hardware(spec: EngineSpec, hw: HardwareProfile, where: str = "engine", check: bool = True) -> EngineSpec:
    """The engine as it runs on ``hw``: vLLM on a CPU forces async scheduling off ("not required
    on CPU", vllm/platforms/cpu.py); no engine runs CUDA graphs on a CPU or a TPU (not even one whose
    preset or ``cluster.cuda_graphs`` asks for them: they are a CUDA GPU's). The
    memory reservations were measured on CUDA GPUs (vLLM on a CPU sizes its cache from
    VLLM_CPU_KVCACHE_SPACE, not from a profile run): elsewhere they are not applied. An engine
    that runs as TensorRT-LLM is refused off NVIDIA GPUs (``where`` names the key to blame; not
    with ``check`` false: a device nothing runs on)."""
    if check and (refusal := refused_on(spec, hw)):
        raise UserError(f"{where}: {refusal}; use the vllm-v1 or ideal engine there")
    if hw.family in ("cpu", "tpu"):
        spec = replace(spec, **memory_terms(PRESETS["ideal"]))  # (the ideal engine reserves nothing)
    spec = _device_memory(spec, hw)
    if spec.defaults == "vllm" and hw.family == "cpu":
        spec = replace(spec, async_scheduling=False)
    if hw.family in ("cpu", "tpu"):  # CUDA graphs are a CUDA GPU's (a TPU's XLA graphs have no sizes to pad to)
        return replace(spec, cuda_graphs=False, cuda_graph_sizes=())
    return spec


def _device_memory(spec: EngineSpec, hw: HardwareProfile) -> EngineSpec:
    """Memory terms left to the device (None): the hardware profile's measured figure, else vLLM's
    defaults (engine.py's VLLM_* readings). A number set in the engine stays."""
    changes = {}
    for field, (figure, default) in DEVICE_TERMS.items():
        if getattr(spec, field) is None:
            measured = getattr(hw.overheads, figure)
            changes[field] = measured.value if measured else default
    return replace(spec, **changes)


# The engines of DistServe's evaluation (OSDI'24) on an A100-80GB: host terms fitted by
# llmsim/calibration/stepmodel.py to DistServe's step-time models of them (data/validation/distserve/,
# Apache-2.0; OPT-13B TP1) over llmsim's A100 kernels. `benchmarks/distserve_presets.py` prints the
# fit and tests/test_stepmodel.py refits these numbers; docs/validation.md has the errors (TP1 fit
# 3.2% / 8.0% MAPE per step; held out TP2 and TP4 worse).
_DS = "DistServe profiler-a100-80g.{}.json (OPT-13B TP1), residual over llmsim's A100 kernels, stepmodel.fit_host_terms"
_VLLM_2024 = HostTerm(7.7298e-3, 0.0, 3.6484e-5, _DS.format("vllm"))
_DISTSERVE_2024 = HostTerm(1.7626e-3, 1.0464e-4, 0.0, _DS.format("distserve"))

# vLLM's start-up memory profile on CUDA GPUs. vLLM sizes its KV cache as gpu_memory_utilization x the
# device, less the weights, the profile's torch peak, the memory outside torch that grew during it and,
# from 0.21, an estimate of its CUDA graphs' memory (vllm/v1/worker/gpu_worker.py,
# determine_available_memory; VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, "default since v0.21.0").
#
# vLLM >= 0.21 (vllm-v1's terms): read off the start-up logs of vLLM 0.30.0 behind the 43 GPU passes,
# data/validation/vllm-memory/v0.30-glyd.csv, its fit rows (Qwen3-8B, warm compile cache, on an L4, an
# A100-40GB and a GH200; every other model, GPU and cold start held out; benchmarks/vllm_memory.py,
# docs/validation.md). Its torch peak is the forward pass's activations alone (0.18-0.19 GiB for Qwen3-8B
# at 2,048 tokens, 0.75 at 8,192: no sampler or logits on top). The memory outside torch (printed as
# "consumed" less the weights) is 0.23 and 0.28 GiB on the L4 and the A100 at TP 1 and about as much at
# TP 2 (the communicators are set up before the start-up snapshot). The graph estimate is vLLM's
# profiling capture of every PIECEWISE graph and two FULL ones ("took 0.38 GiB": 0.212 MiB per PIECEWISE
# graph per layer on both) plus, for each FULL graph beyond two, the second FULL capture's growth (6.3
# bytes per layer x head x batch row of the second FULL size: FlashAttention-2's per-graph buffers). The
# GH200 reads 0.90 GiB, 0.346 MiB and 11.9 bytes (FlashAttention-3): the Hopper profiles carry those as
# overheads (H100 and H200 run the same FlashAttention-3 kernels), and a GPU without its own takes these.
_MEM = "benchmarks/vllm_memory.py: vLLM 0.30.0 start-up logs, data/validation/vllm-memory/v0.30-glyd.csv (fit rows)"
VLLM_NON_TORCH_BYTES = 273804165.0  # mean of the L4's and the A100's 0.23 / 0.28 GiB
VLLM_GRAPH_BYTES_PER_LAYER = 222234.0  # their profiling capture, 0.38 GiB / (36 layers x 51 PIECEWISE graphs)
VLLM_FULL_GRAPH_BYTES_PER_HEAD_ROW = 6.264  # (estimate - capture) / (33 FULL graphs x 36 layers x 32 heads x 248 rows)
# the engine's memory terms a GPU profile may measure (null in the engine: the profile's overheads
# figure, else the default): field -> (overheads figure, default)
DEVICE_TERMS: dict[str, tuple[str, float]] = {
    "non_torch_bytes": ("engine_non_torch_bytes", VLLM_NON_TORCH_BYTES),
    "non_torch_bytes_tp": ("engine_non_torch_bytes", VLLM_NON_TORCH_BYTES),
    "cuda_graph_bytes_per_layer": ("cuda_graph_bytes_per_layer", VLLM_GRAPH_BYTES_PER_LAYER),
    "cuda_graph_full_bytes_per_head_row": ("cuda_graph_full_bytes_per_head_row", VLLM_FULL_GRAPH_BYTES_PER_HEAD_ROW),
}
# vLLM 0.19-0.20 (graphs captured after the cache is allocated, nothing subtracted for them), fitted by
# benchmarks/vllm_memory.py to the fitting rows of data/validation/vllm-memory/v0.19-h100.csv (its DEBUG
# log lines "torch peak memory increase" and "non-torch forward increase" from public H100 logs; the
# other rows held out, docs/validation.md). The torch peak is the dummy sampler run of vllm PR #13594
# (top-k = vocab - 1 and top-p on; 15.09 bytes a logit fitted, about fp32 logits + a sorted fp32 copy +
# int64 indices) over max_num_seqs rows; the non-torch growth is CUDA/cuBLAS workspaces at TP 1 and
# NCCL plus custom all-reduce buffers beyond. MoE models keep their fused-MoE scratch buffers between
# calls in both (FusedMoEModularKernel.shared_buffers, a class attribute,
# vllm/model_executor/layers/fused_moe/modular_kernel.py), so the peak sits on them.
# engine: {preset: vllm-v1, **VLLM_019_MEMORY} sizes a cache as vLLM 0.19 did.
VLLM_019_MEMORY: dict[str, object] = {
    "sampler_profile_bytes_per_logit": 15.09,
    "non_torch_bytes": 0.2467 * 2**30,
    "non_torch_bytes_tp": 2.07 * 2**30,
    "logits_after_forward": False,
    "cuda_graph_bytes_per_layer": 0.0,
    "cuda_graph_full_bytes_per_head_row": 0.0,
    "memory_source": "benchmarks/vllm_memory.py fit to data/validation/vllm-memory/v0.19-h100.csv "
    "(vLLM 0.19 H100 start-up logs)",
}

# vLLM's host cost per operator on a CPU (its CPU build runs eager: a Python call per module, the
# dispatcher, an OpenMP fork/join per kernel): measured with real vLLM 0.32.0 on a 2-vCPU Xeon VM
# (2.6 GHz, 2 threads) as the difference of a 2- and an 18-layer model's decode steps, less llmsim's
# kernel prices, per operator as llmsim lists them: 37.9 and 36.7 us in two pairs of runs
# (data/validation/vllm-cpu-depth/, benchmarks/vllm_cpu/depth_overhead.py; tests/test_vllm_cpu_depth.py
# holds this value to them). A CPU with more threads per operator forks and joins over more of them.
_VLLM_CPU_OP_S = 37.3e-6

# A request's first token (and every later one) reaches a `vllm bench serve` client this long after
# the engine produced it: vLLM's OpenAI server and its streaming, which the engine's own stamps and
# the CPU twin's in-process harness do not see. Measured as the client's TTFT less vLLM's own
# (vllm:time_to_first_token_seconds) through `vllm serve`'s completions endpoint, 512-token prompts:
# +8.4 and +12.0 ms in two rounds (github.com/vllm-project/vllm PR #54628, vLLM 0.28.1rc1, an RTX 4070
# laptop under WSL2; the chat and responses endpoints +10.5 to +12.2). It covers the way in (HTTP,
# tokenising) and the stream out, all added after the engine here (the same for a client's TTFT and
# E2E). It depends on the host: against vLLM 0.30's GPU passes llmsim read 4-17.5 ms short on the
# A100, H100 and GH200 hosts without it, 64 ms on the L4 (mostly its prefill; docs/validation.md).
# Offline benchmarks and replays of engine-side stamps set it to 0.
_VLLM_FRONTEND_S = 0.010

# vLLM's OpenAI server handles one request at a time before its engine has it: the HTTP request, the
# prompt's tokenisation (Renderer.render_cmpl) and AsyncLLM.add_request's processing, then the
# engine core adds it. Measured with real vLLM 0.32.0 (CPU build) on this project's 2-vCPU VM
# (benchmarks/vllm_cpu/frontend_burst.py, data/validation/vllm-cpu-frontend/): bursts of 128 and 256
# streaming completions sent at once, text prompts of 128 and 1,024 tokens (a 1,000-token BPE), the
# last request reaching the engine core 3.15 and 5.16 ms a request after the first send (the median
# of 8 bursts each): 2.86 ms + 2.25 us a prompt token. The VM's two cores also ran the client and
# the engine core; a GPU host's API server has a core of its own, of a speed not measured here. Not
# in the vllm-v1 preset: on the 43 vLLM 0.30 GPU passes it moves no figure by more than 0.4 points
# (their all-at-once passes wait for the engine, not the API server), and what a GPU host's server
# takes is not measured; a scenario opts in with engine.frontend (VLLM_FRONTEND_INGEST's figures,
# docs/scenario.md), which matters where a small model's engine admits faster than one API
# server handles requests (hundreds a second)
VLLM_FRONTEND_INGEST = HostTerm(
    2.86e-3,
    0.0,
    2.25e-6,
    "vLLM 0.32 CPU, vllm serve under bursts of 128-256 text prompts (benchmarks/vllm_cpu/frontend_burst.py)",
)

# Seconds Triton takes to compile one variant of vLLM's fused-MoE kernel while serving (moejit.py):
# vLLM 0.30 on an H100 SXM host with an empty compile cache ran its start-up profile run, which
# compiles the gate/up and down GEMMs' variants for its token count, in 0.72 s, where the same
# server started again on the filled cache ran it in 0.20 s: 0.52 s for two variants (github.com/
# surya-koritala/Glyd, benchmarks/gpu/vllm-m6-h100-2026-10-01/moe-bench/bench-Qwen3-30B-A3B/
# serve-bf16-cold.txt @cb2d0766 and serve-bf16.txt @10e8caea, "Initial profiling/warmup run took").
# The same cold start's CUDA-graph capture slowed by about as much at each size where the tile
# config changes. It is the host CPU's time: the A100 and A6000 hosts' first passes read slower.
_VLLM_MOE_JIT_S = 0.26
SERVER_STATE = ("moe_jit_compile_s",)  # fields that describe a server's state, not its engine (load_engine)

PRESETS: dict[str, EngineSpec] = {
    "ideal": EngineSpec(
        "ideal",
        "the hardware alone: the profile's step_overhead_s per step, no pipelining, the scenario's CUDA-graph "
        "switch, llmsim's own scheduler defaults (what llmsim priced before the engine model)",
        hardware_step_overhead=True,
    ),
    "vllm-v1": EngineSpec(
        "vllm-v1",
        "vLLM v1 (0.19-0.32): scheduler vllm/v1/core/sched/scheduler.py, defaults vllm/engine/arg_utils.py, "
        "async scheduling on GPUs (vllm/config/scheduler.py), CUDA graphs FULL_AND_PIECEWISE with the default "
        "capture sizes; host terms measured on vLLM 0.32 (CPU build); 10 ms from the engine to a client through "
        "vLLM's OpenAI server (vLLM PR #54628), see llmsim/engine.py",
        schedule=_VLLM_SCHEDULE,
        prepare=_VLLM_PREPARE_GPU,
        output=_VLLM_OUTPUT,
        async_scheduling=True,
        output_delay_s=_VLLM_FRONTEND_S,
        moe_jit_compile_s=_VLLM_MOE_JIT_S,
        cuda_graphs=True,
        cuda_graph_sizes=VLLM_DEFAULT_SIZES,
        moe_skip_padding=True,
        fp8_query=True,
        defaults="vllm",
        non_torch_bytes=None,  # (the GPU's measured figure, else VLLM_NON_TORCH_BYTES: for_hardware)
        non_torch_bytes_tp=None,
        moe_workspace_persists=True,
        logits_after_forward=True,
        cuda_graph_bytes_per_layer=None,  # (the GPU's, else VLLM_GRAPH_BYTES_PER_LAYER)
        cuda_graph_full_bytes_per_head_row=None,  # (the GPU's, else VLLM_FULL_GRAPH_BYTES_PER_HEAD_ROW)
        memory_source=_MEM,
        cpu_op_s=_VLLM_CPU_OP_S,
    ),
    "trtllm": EngineSpec(
        "trtllm",
        "TensorRT-LLM 1.x, PyTorch backend (trtllm-serve / trtllm-bench): its in-flight batching scheduler "
        "(policy trtllm: GUARANTEED_NO_EVICT, chunked prefill off), the LLM API's defaults (2048 sequences, "
        "8192 tokens a step, 32-token KV blocks, 0.9 of free memory for the cache, block reuse on), the overlap "
        "scheduler (disable_overlap_scheduler false) and CUDA graphs for decode-only batches at 1-31, 32, 64 and "
        "128 without padding (cuda_graph_config's defaults), tensorrt_llm/llmapi/llm_args.py; host terms and "
        "device-memory reservations not measured (see llmsim/engine.py)",
        # the executor's per-step host work (scheduling, input preparation, sampling) runs in Python
        # (tensorrt_llm/_torch/pyexecutor), overlapped with the device's step: not measured on
        # TensorRT-LLM, priced as vLLM's GPU runner prepares its steps (Vidur's measured medians)
        prepare=_VLLM_PREPARE_GPU,
        async_scheduling=True,
        cuda_graphs=True,
        cuda_graph_sizes=trtllm_graph_sizes(),
        cuda_graph_padding=False,
        cuda_graph_decode_only=True,
        defaults="trtllm",
    ),
    "trtllm-engine": EngineSpec(
        "trtllm-engine",
        "TensorRT-LLM 0.x with TensorRT engines: the C++ executor behind Triton's tensorrtllm_backend (and "
        "trtllm-bench's TensorRT flow): in-flight batching (policy trtllm: GUARANTEED_NO_EVICT, chunked context "
        "off), trtllm-build's limits (2048 sequences, 8192 tokens a step), 0.9 of free memory for the cache, block "
        "reuse off, no overlap of steps and no CUDA graphs (tensorrtllm_backend docs/model_config.md: "
        "cuda_graph_mode false, enable_trt_overlap removed; executorImpl.cpp executionLoop: forwardSync, "
        "fetchNewRequests, forwardAsync in turn); its per-step host time and Triton's frontend delay "
        "fitted to TensorRT-LLM 0.14's online serving table (see llmsim/engine.py)",
        prepare=_TRTLLM_ENGINE_STEP,
        output_delay_s=_TRITON_FRONTEND_S,
        cuda_graphs=False,
        cuda_graph_decode_only=True,
        cuda_graph_padding=False,
        defaults="trtllm-engine",
    ),
    "vllm-2024": EngineSpec(
        "vllm-2024",
        "vLLM of early 2024 as DistServe measured it (the baseline of the DistServe paper): synchronous "
        "steps, decode CUDA graphs, host terms fitted to DistServe's step model of it (llmsim/engine.py); "
        "pair with policy.kind traditional (no chunked prefill)",
        prepare=_VLLM_2024,
        cuda_graphs=True,
    ),
    "distserve-2024": EngineSpec(
        "distserve-2024",
        "DistServe's own engine (OSDI'24) as its authors measured it: synchronous steps, decode CUDA graphs, "
        "host terms fitted to DistServe's step model of it (llmsim/engine.py), the first token streamed by the "
        "prefill instance (distserve/single_stage_engine.py); pair with policy.kind disaggregated",
        prepare=_DISTSERVE_2024,
        cuda_graphs=True,
        first_token_at_prefill=True,
    ),
}
DEFAULT_ENGINE = "vllm-v1"


def _term(d: object, key: str, origin: str) -> HostTerm:
    if not isinstance(d, dict):
        raise UserError(f"{origin}: engine.{key} must be a mapping of base_s, per_seq_s, per_token_s, source")
    unknown = set(d) - {f.name for f in fields(HostTerm)}
    if unknown:
        raise UserError(f"{origin}: engine.{key}: unknown key(s) {sorted(unknown)}; expected base_s, per_seq_s, ...")
    vals = {k: _seconds(v, f"{origin}: engine.{key}.{k}") for k, v in d.items() if k != "source"}
    return HostTerm(**vals, source=str(d.get("source", "")))


# an engine's host seconds per step, per sequence or per token, and its output delay: no engine
# spends a minute on any of them, and 1e308 s would print infinities and verdicts of nothing
MAX_HOST_S = 60.0
# a captured CUDA-graph size is a step's token count: the scenario's bound on a step (MAX_STEP_TOKENS)
MAX_GRAPH_TOKENS = 2**24
# an engine's device-memory amounts (bytes per device): a pebibyte is more than any device holds, and
# 1e300 would reach the fit check as a 300-digit number of GB blamed on the cluster
MAX_ENGINE_BYTES = float(2**50)


def _numeric(v: object) -> object:
    """A number written as YAML 1.1 reads ``1e-3`` (without a dot: a string) as the number it
    means, as the scenario's other sections take it; anything else as it is."""
    if isinstance(v, str):
        with contextlib.suppress(ValueError):
            return float(v)
    return v


def _seconds(v: object, where: str) -> float:
    """A duration from a YAML value: a finite number of seconds in 0..MAX_HOST_S (not a bool), or a
    clear error."""
    v = _numeric(v)
    # (a range test, not isfinite: it refuses NaN and inf too, and is exact for a 400-digit int,
    # which isfinite overflows on)
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= MAX_HOST_S:
        raise UserError(f"{where} must be a number of seconds from 0 to {MAX_HOST_S:g}, got {value_text(v)}")
    return float(v)


_BOOLS = (
    "async_scheduling",
    "cuda_graphs",
    "cuda_graph_padding",
    "cuda_graph_decode_only",
    "hardware_step_overhead",
    "moe_workspace_persists",
    "fp8_query",
    "first_token_at_prefill",
    "moe_skip_padding",
    "logits_after_forward",
)
_TEXTS = ("name", "source", "memory_source")
DEVICE_AMOUNTS = tuple(DEVICE_TERMS)  # (null: the GPU's own)
_AMOUNTS = ("sampler_profile_bytes_per_logit", *DEVICE_AMOUNTS)
# what the engine holds on the device
MEMORY_FIELDS = (*_AMOUNTS, "moe_workspace_persists", "logits_after_forward", "memory_source")


def memory_terms(spec: EngineSpec) -> dict[str, object]:
    """``spec``'s device-memory terms, to give another engine the same (``dataclasses.replace``)."""
    return {k: getattr(spec, k) for k in MEMORY_FIELDS}


DEFAULT_TABLES = ("", "vllm", *TRTLLM_TABLES)


def _field(k: str, v: object, origin: str) -> object:
    """One engine field, checked: a clear error naming it, never a silent coercion."""
    where = f"{origin}: engine.{k}"
    if k == "frontend" and isinstance(v, dict) and v.get("per_seq_s"):
        raise UserError(
            f"{where}.per_seq_s: the API server's work is per request (base_s) and prompt token (per_token_s)"
        )
    if k in HOST_TERMS or k in ("batch_change", "frontend"):
        return _term(v, k, origin)
    if k == "cuda_graph_sizes":
        if not isinstance(v, list) or not v or not all(type(x) is int and 0 < x <= MAX_GRAPH_TOKENS for x in v):
            raise UserError(
                f"{where} must be a non-empty list of batch sizes from 1 to {MAX_GRAPH_TOKENS:,}, got {value_text(v)}"
            )
        return tuple(sorted(set(v)))
    if k in ("output_delay_s", "moe_jit_compile_s"):
        return _seconds(v, where)
    if k == "cpu_op_s":
        return None if v is None else _seconds(v, where)
    if k in _AMOUNTS:
        if v is None and k in DEVICE_AMOUNTS:
            return None
        v = _numeric(v)
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= MAX_ENGINE_BYTES:
            nullable = " (or null: the GPU profile's figure, else vllm-v1's default)" if k in DEVICE_AMOUNTS else ""
            raise UserError(
                f"{where} must be a number of bytes from 0 to 2**50 (a pebibyte){nullable}, got {value_text(v)}"
            )
        return float(v)
    if k in _BOOLS:
        if k == "cuda_graphs" and v is None:
            return None
        if not isinstance(v, bool):
            raise UserError(f"{where} must be true or false, got {v!r}")
        return v
    if k in _TEXTS:
        if not isinstance(v, str):
            raise UserError(f"{where} must be text, got {v!r}")
        return v
    if k == "defaults":
        if v not in DEFAULT_TABLES:
            raise UserError(f"{where} must be one of {', '.join(repr(t) for t in DEFAULT_TABLES)}, got {v!r}")
        return v
    return v


def engine_from_dict(d: dict, origin: str, base: EngineSpec | None = None) -> EngineSpec:
    """An engine from a mapping of ``EngineSpec`` fields over ``base`` (a preset or a profile)."""
    spec = base or PRESETS[DEFAULT_ENGINE]
    known = {f.name for f in fields(EngineSpec)}
    unknown = set(d) - known - {"preset", "profile", "fit"}
    if unknown:
        raise UserError(f"{origin}: engine: unknown key(s) {sorted(unknown)}; expected one of {sorted(known)}")
    changes = {k: _field(k, v, origin) for k, v in d.items() if k not in ("preset", "profile", "fit")}
    if spec.defaults == "trtllm" and "cuda_graph_padding" in changes and "cuda_graph_sizes" not in changes:
        # (TensorRT-LLM 1.x captures other sizes with padding on: 1, 2, 4 and 8-128 by 8; the 0.x
        # executor's graphs, off by default, keep every size)
        changes["cuda_graph_sizes"] = trtllm_graph_sizes(padding=changes["cuda_graph_padding"])
    return replace(spec, **changes)


def profile_path(value: str, base_dir: Path) -> Path | None:
    """The engine profile file an ``engine:`` string names (relative paths from ``base_dir``), or
    None where it names a preset."""
    if value in PRESETS or not value.endswith((".yaml", ".yml")):
        return None
    return _in(base_dir, value)


def _in(base_dir: Path, value: str) -> Path:
    """``value`` as a path, relative ones from ``base_dir``."""
    path = Path(value)
    return path if path.is_absolute() else base_dir / path


def load_engine(value: str | dict | None, base_dir: Path, origin: str) -> EngineSpec:
    """The scenario's ``engine:``: a preset name, a profile path, or a mapping (``preset:`` or
    ``profile:`` plus overrides). None: the default preset."""
    if value is None:
        return PRESETS[DEFAULT_ENGINE]
    if isinstance(value, str):
        value = {"preset": value} if profile_path(value, base_dir) is None else {"profile": value}
    if "preset" in value and "profile" in value:
        raise UserError(f"{origin}: engine: give a preset or a profile, not both")
    base = None
    if "profile" in value:
        path = _in(base_dir, str(value["profile"]))
        if not path.is_file():  # (a folder named x.yaml is not a profile either)
            what = (
                "file not found" if not path.exists() else "is a directory" if path.is_dir() else "not a regular file"
            )
            raise UserError(f"{origin}: engine.profile: {path}: {what}, expected an engine profile YAML")
        data = load_yaml_file(path)
        if not isinstance(data, dict):
            raise UserError(f"{path}: an engine profile must be a mapping of engine fields")
        if {"model", "hardware", "workload"} & set(data):  # a scenario given where its engine belongs
            raise UserError(f"{path}: a scenario, not an engine profile (an engine profile lists engine fields only)")
        if "preset" in data or "profile" in data:  # (engine_from_dict reads past them in a scenario's section)
            raise UserError(
                f"{path}: an engine profile lists engine fields itself; it cannot name a "
                f"{'preset' if 'preset' in data else 'profile'} to start from (a scenario's engine: section "
                "can: engine: {preset: NAME, <field>: <value>})"
            )
        # a profile of a vLLM deployment (calibrate --serving writes defaults: vllm) keeps vLLM's memory
        # terms and kernels unless it sets its own: the serving fit measures time, not memory
        blank = EngineSpec("profile", "")
        if data.get("defaults") == "vllm":
            vllm = PRESETS[DEFAULT_ENGINE]
            blank = replace(
                blank, **memory_terms(vllm), fp8_query=vllm.fp8_query, moe_skip_padding=vllm.moe_skip_padding
            )
        base = engine_from_dict({k: v for k, v in data.items() if k != "fit"}, str(path), blank)
    elif "preset" in value:
        name = str(value["preset"])
        if name not in PRESETS:
            raise UserError(f"{origin}: engine.preset {name!r} is unknown; expected one of {', '.join(PRESETS)}")
        base = PRESETS[name]
    if "fit" in value:  # (engine_from_dict reads past it: a profile file carries its fit report there)
        raise UserError(
            f"{origin}: engine.fit: a fit report belongs to an engine profile file (`llmsim calibrate "
            "--serving` writes it), not to a scenario's engine section"
        )
    spec = engine_from_dict(value, origin, base)
    ref = base or PRESETS[DEFAULT_ENGINE]  # (what engine_from_dict started from)
    # a field set to what the preset already has changes nothing (its validated accuracy stands)
    # (moe_jit_compile_s says what the server has compiled, as a server's history does: the same engine)
    changed = {
        k for k in set(value) - {"preset", "profile", "name", *SERVER_STATE} if getattr(spec, k) != getattr(ref, k)
    }
    if changed and "name" not in value:  # no longer the preset its accuracy was validated for
        spec = replace(spec, name=f"{spec.name} (modified: {', '.join(sorted(changed))})")
    _check_preset_name(spec, origin)
    return spec


def _check_preset_name(spec: EngineSpec, origin: str) -> None:
    """A preset's name on another engine would be quoted that preset's validated accuracy
    (accuracy.validated reads the name): refused unless the engine is the preset."""
    preset = PRESETS.get(spec.name)
    if preset is None:
        return
    ignored = {"name", "source", *SERVER_STATE}
    differ = sorted(
        f.name for f in fields(EngineSpec) if f.name not in ignored and getattr(spec, f.name) != getattr(preset, f.name)
    )
    if differ:
        raise UserError(
            f"{origin}: engine.name: {spec.name!r} is a preset's name, and this engine differs from that preset "
            f"({', '.join(differ)}); name it otherwise"
        )
