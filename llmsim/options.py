"""What a simulation runs with beyond the pools and the workload (built by ``api.sim_options``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim.moejit import Key


@dataclass
class LinkSpec:
    """The KV-transfer link between pools, per device and direction."""

    kind: str
    bandwidth_bytes_per_s: float
    latency_s: float
    layerwise_overlap: bool = False


@dataclass
class TierSpec:
    """A KV offload tier below the device's cache (kvcache.OffloadTier), per replica."""

    name: str  # cpu, ssd, remote
    capacity_blocks: int
    bytes_per_s: float  # reading blocks back into the device's cache
    latency_s: float


@dataclass
class LoraSpec:
    """A replica's multi-LoRA settings in the simulation's units (lora.py; scenario ``lora``)."""

    max_loras: int  # GPU slots: adapters one batch may use
    max_cpu_loras: int  # adapters host memory keeps
    adapter_bytes: float  # one adapter (all of a replica's devices), as loaded
    host_bytes_per_s: float  # host -> device copy
    host_latency_s: float
    disk_bytes_per_s: float  # disk -> host read of an adapter the host cache does not hold
    disk_latency_s: float  # per disk load (opening and parsing the checkpoint)


@dataclass
class SimOptions:
    """Everything beyond the basic loop; defaults reproduce plain colocated serving."""

    prefix_caching: bool = False
    reuse_partial_first: bool = False  # kv_cache.reuse_partial_first (kvcache.BlockManager.partial_first)
    prewarm: list[list[int]] = field(default_factory=list)  # hash-id prefixes cached at t=0
    prewarm_block_tokens: int = 0  # tokens per id in ``prewarm`` (0: the workload's)
    # a server's history: each replica's free block queue at t=0 (chain hashes, oldest first), as an
    # earlier run of the same replicas left it (``BlockManager.free_queue_state``; before ``prewarm``)
    free_queues: list[list[int]] = field(default_factory=list)
    keep_free_queues: bool = False  # SimOutput.free_queues: each replica's at the end
    # ... and each replica's compiled fused-MoE kernel keys (moejit.MoeKernels.state; kept with the queues)
    moe_kernels: list[tuple[Key, ...]] = field(default_factory=list)
    kv_link: LinkSpec | None = None  # disaggregated only
    decode_router: str = "least_outstanding"
    router_view_s: float | None = None  # seconds between the router's views of the replicas (router.view_s)
    max_concurrency: int | None = None  # client-side cap on requests in flight (feeder.py)
    # an answer reaches the client this long after the engine's last step (engine.output_delay_s):
    # a closed-loop client's next call and its in-flight slot wait for it (feeder.py)
    answer_delay_s: float = 0.0
    # the API server's handling of each request before the engine has it (engine.frontend), over the
    # deployment's frontends: base seconds and seconds a prompt token (sim.engine_reach_s)
    frontend_base_s: float = 0.0
    frontend_per_token_s: float = 0.0
    # arrivals wait on answers (feeder.py): no replica may run ahead of SimPy's clock, since an
    # answer can release a request at any instant (set by sim.simulate)
    feedback: bool = False
    kv_bytes_per_token: float = 0.0  # whole model (all layers), for KV transfers
    num_layers: int = 1
    n_seqs: int = 1  # parallel samples / beams per request
    exact_steps: bool = False  # one event per step: no shortcuts (fastpath.py)
    # requests whose prefill chunks are kept for the timeline (output.trace); all when trace_all
    traced_ids: frozenset[int] = field(default_factory=frozenset)
    trace_all: bool = False
    prefill_policy: str = "traditional"  # disaggregated: the prefill pool's scheduler
    offload: list[TierSpec] = field(default_factory=list)  # KV offload tiers, fastest first (kv_cache.offload)
    lora: LoraSpec | None = None  # multi-LoRA serving (scenario ``lora``; lora.py)
