"""Multi-LoRA serving (vLLM's ``--enable-lora``): which linear layers carry adapters, what an
adapter weighs, and the adapters a replica holds (``LoraCache``).

vLLM wraps every linear layer of a decoder (``get_supported_lora_modules``, vllm/lora/utils.py:
"all linear layers support LoRA"); for a Llama-style model those are the fused ``qkv_proj`` (three
slices: q, k, v), ``o_proj``, the fused ``gate_up_proj`` (two slices) and ``down_proj``. Each slice
has A [rank, in] and B [out, rank]; under tensor parallelism a column-parallel layer keeps A whole
and splits B's outputs, a row-parallel one splits A's inputs and keeps B whole (vLLM's
``ColumnParallelLinearWithLoRA`` / ``RowParallelLinearWithLoRA``, ``fully_sharded_loras`` off), and
the row-parallel partial sums ride the base layer's all-reduce. The GPU buffers hold ``max_loras``
adapters at ``max_lora_rank`` for every wrapped layer (``create_lora_weights``,
vllm/lora/layers/base_linear.py) whatever rank an adapter has, and the Punica kernels compute at
that rank too.

Adapters live in two LRU caches (``LoRAModelManager``, vllm/lora/model_manager.py): ``max_loras``
GPU slots and ``max_cpu_loras`` adapters in host memory. A step whose batch uses an adapter not in a
GPU slot copies it in first (``set_active_loras`` in the model runner's input preparation, before
the forward pass), reading it from disk first when the host cache does not hold it either
(``LRUCacheWorkerLoRAManager``, vllm/lora/worker_manager.py).

Not modelled: LoRA on MoE experts, MLA projections, embeddings and the LM head (refused or left
out: ``check_model``), vLLM's opt-in asynchronous adapter loading, and adapters of several ranks in
one run (every adapter has ``workload.lora.rank``, a trace's ``max_lora_rank``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from llmsim.errors import InvariantError
from llmsim.models import ModelSpec
from llmsim.options import LoraSpec


@dataclass(frozen=True)
class LoraModule:
    """One wrapped linear layer as one device holds it: ``slices`` A matrices of ``in_dim`` inputs
    (the shrink) and B matrices of ``out_dim`` outputs in all (the expand)."""

    name: str
    in_dim: int
    out_dim: int
    slices: int


def lora_modules(model: ModelSpec, tp: int = 1) -> list[LoraModule]:
    """The LoRA-wrapped layers of one decoder layer on one of ``tp`` devices."""
    h, q, kv = model.hidden_size, model.q_size, model.kv_size
    inter = model.intermediate_size
    mlp_slices = 2 if model.gated_mlp else 1
    return [
        LoraModule("qkv_proj", h, (q + 2 * kv) // tp, 3),  # column-parallel: A whole, B split
        LoraModule("o_proj", q // tp, h, 1),  # row-parallel: A split, B whole
        LoraModule("gate_up_proj", h, mlp_slices * inter // tp, mlp_slices),
        LoraModule("down_proj", inter // tp, h, 1),
    ]


def adapter_params(model: ModelSpec, rank: int, tp: int = 1) -> int:
    """Parameters of one adapter at ``rank`` (one device's share under ``tp``), all layers."""
    per_layer = sum(rank * (m.slices * m.in_dim + m.out_dim) for m in lora_modules(model, tp))
    return per_layer * model.num_layers


def slots_bytes(model: ModelSpec, max_loras: int, max_rank: int, tp: int, pp: int, dtype_bytes: int) -> float:
    """GPU memory one device reserves for the adapters' buffers: ``max_loras`` slots at
    ``max_rank`` for every wrapped layer on its pipeline stage (``create_lora_weights``)."""
    return max_loras * adapter_params(model, max_rank, tp) / pp * dtype_bytes


def check_model(model: ModelSpec, where: str) -> str | None:
    """Why LoRA on ``model`` is not modelled (None: it is)."""
    if model.is_moe:
        return f"{where}: LoRA on {model.name}'s MoE experts is not modelled (dense models only)"
    if model.is_mla:
        return f"{where}: LoRA on {model.name}'s MLA projections is not modelled (standard attention only)"
    return None


class LoraCache:
    """A replica's adapters: the GPU slots and the host cache, each least recently used first, and
    what loading them cost."""

    def __init__(self, spec: LoraSpec) -> None:
        self.spec = spec
        self.gpu: OrderedDict[int, None] = OrderedDict()
        self.cpu: OrderedDict[int, None] = OrderedDict()
        self.gpu_loads = 0  # host -> device copies
        self.disk_loads = 0  # disk -> host reads
        self.load_s = 0.0

    def resident(self, adapter: int) -> bool:
        return adapter in self.gpu

    def has_free_slot(self) -> bool:
        return len(self.gpu) < self.spec.max_loras

    def activate(self, adapters: set[int]) -> float:
        """Seconds the step that uses ``adapters`` waits to have them all in GPU slots (the least
        recently used slots not in this step make room; the scheduler keeps a batch within
        ``max_loras``)."""
        s = self.spec
        seconds = 0.0
        for a in sorted(adapters):
            if a in self.gpu:  # (held in host memory too: the host cache holds every loaded adapter)
                self.gpu.move_to_end(a)
                if a in self.cpu:
                    self.cpu.move_to_end(a)
                continue
            if a in self.cpu:
                self.cpu.move_to_end(a)
            else:  # read from disk into the host cache first
                seconds += s.disk_latency_s + s.adapter_bytes / s.disk_bytes_per_s
                self.disk_loads += 1
                self.cpu[a] = None
                if len(self.cpu) > s.max_cpu_loras:
                    self.cpu.popitem(last=False)
            seconds += s.host_latency_s + s.adapter_bytes / s.host_bytes_per_s
            self.gpu_loads += 1
            if len(self.gpu) >= s.max_loras:
                victim = next((g for g in self.gpu if g not in adapters), None)
                if victim is None:  # (the scheduler keeps a batch within max_loras)
                    raise InvariantError(f"a step uses {len(adapters)} LoRA adapters, over max_loras={s.max_loras}")
                del self.gpu[victim]
            self.gpu[a] = None
        self.load_s += seconds
        return seconds

    def counters(self) -> dict[str, float]:
        return {"lora_gpu_loads": self.gpu_loads, "lora_disk_loads": self.disk_loads, "lora_load_s": self.load_s}


def affinity_score(running: set[int], waiting: set[int], max_loras: int, adapter: int) -> float:
    """How well a replica suits a request for ``adapter``, as the Gateway API inference extension's
    LoRA-affinity scorer rates pods (pkg/epp/scheduling/framework/plugins/scorer/lora_affinity.go,
    used by llm-d) from vLLM's ``vllm:lora_requests_info`` metric (the adapters of its running and
    of its waiting requests, and ``max_lora``): 1.0 with the adapter running there, 0.8 with room
    for one more adapter, 0.6 with the adapter waiting there, else 0."""
    if adapter < 0:
        return 0.0
    if adapter in running:
        return 1.0
    if len(running | waiting) < max_loras:
        return 0.8
    return 0.6 if adapter in waiting else 0.0
