"""vLLM's fused-MoE kernel compiles its variants on first use: a fresh server's first step of a new kind waits.

vLLM runs a 16-bit MoE model's experts with its Triton kernel ``fused_moe_kernel`` (the
``TritonExperts`` backend; where vLLM ships no tuned config file for the experts' shape it logs
"Using default MoE config", as every MoE server in data/validation/vllm-gpu-bench/ does). Triton
compiles one binary per key, and two parts of the key depend on the step's token count M (vLLM
PR #55268, "Warm up the Triton fused MoE GEMMs", open in 2026-09):

- the tile config ``get_default_config`` picks for M (16-bit, since vLLM PR #34846):
  ``costmodel.fusedmoe.tile_config``, which also prices the kernel's padded tiles;
- whether the kernel's runtime integers ``EM`` (the expert-sorted token list's padded length) and
  ``num_valid_tokens`` (M x top-k) are divisible by 16 or equal 1, which Triton specialises on
  (vLLM PR #49903: "specializes into ``== 1``, ``% 16 == 0`` and neither").

A MoE layer calls it twice, for the gate/up GEMM (top-k) and the down GEMM (top-k 1, the routing
weights applied): two keys a step. Start-up compiles what its profile run (max_num_batched_tokens
tokens) and its CUDA-graph capture (each captured size) reach, and nothing warms the rest in vLLM
0.30 ("JIT kernel warmup finished in 0.00s"). A step that needs another key waits while Triton
compiles it. With graphs on, every step up to the largest captured size runs padded to an even
captured size, so the first key missing is an eager step's (more tokens than that) with an odd M:
a prompt beside an odd number of decodes. vLLM's JIT monitor logs it once a server ("Triton
kernel JIT compilation during inference: fused_moe_kernel"), 3-4 s into the first benchmark pass
of each MoE server whose log is readable (the H100's two and the A6000 pair's; none in later
passes), where the first request that overlaps another's decode arrives.

Not modelled: vLLM's tuned config files (their own M buckets: where one exists for the experts'
shape, other steps compile), other backends (FP8 block-scaled experts on DeepGEMM or CUTLASS,
FlashInfer's), and Triton's disk cache across server starts (a key compiled by an earlier server
on the same host loads in milliseconds: ``engine.moe_jit_compile_s: 0``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from llmsim.costmodel.fusedmoe import tile_config

SPARSITY = 4  # vLLM skips the token sort when M x top-k x 4 <= experts (its SPARSITY_FACTOR)

Key = tuple[int, ...]


def _specialised(n: int) -> int:
    """How Triton keys a runtime integer: 1 (equal to one), 16 (divisible by 16) or 0 (neither)."""
    return 1 if n == 1 else 16 if n % 16 == 0 else 0


def kernel_keys(m: int, experts: int, top_k: int) -> tuple[Key, Key]:
    """The two compile keys (gate/up GEMM, down GEMM) a step of ``m`` tokens needs, as far as
    they depend on ``m``: the GEMM, its tile config, whether the token sort is skipped, and the
    specialisation of ``EM`` and ``num_valid_tokens`` (vllm/model_executor/layers/fused_moe/
    fused_moe.py: ``EM = sorted_token_ids.size(0)``, capped at rows x top_k x BLOCK_SIZE_M for a
    call of fewer rows than BLOCK_SIZE_M; moe_align_block_size pads the sorted list to
    ``M x top_k + experts x (BLOCK_SIZE_M - 1)``)."""
    config = tile_config(m, experts)
    block_m = config[0]
    routed = m * top_k  # num_valid_tokens, for both GEMMs
    naive = routed * SPARSITY <= experts
    padded = routed * block_m if naive else routed + experts * (block_m - 1)
    keys = []
    for gemm, rows, k in ((0, m, top_k), (1, routed, 1)):  # the down GEMM's rows are the routed tokens
        em = padded if naive or rows >= block_m else min(padded, rows * k * block_m)
        keys.append((gemm, *config, int(naive), _specialised(em), _specialised(routed)))
    return keys[0], keys[1]


@dataclass(frozen=True)
class MoeJitSpec:
    """A pool's fused-MoE kernels at start-up: the experts each GPU holds, top-k, the seconds a
    key takes to compile, and the token counts start-up ran (the profile run's, each capture size)."""

    experts: int
    top_k: int
    compile_s: float
    warm_tokens: tuple[int, ...]

    def start(self, compiled: Iterable[Key] = ()) -> MoeKernels:
        """A server's kernels at its start (plus ``compiled``, what an earlier run on it compiled)."""
        return MoeKernels(self.experts, self.top_k, self.compile_s, self.warm_tokens, compiled)


SIXTEEN_BIT = ("bf16", "fp16")


def moe_jit_spec(
    compile_s: float,
    family: str,
    experts: int,
    top_k: int,
    dtypes: tuple[str, ...],
    ep: int,
    pp: int,
    graph_sizes: tuple[int, ...],
    profile_tokens: int,
) -> MoeJitSpec | None:
    """The pool's kernels to track, or None where this mechanism is not modelled: no compile time
    (the ideal engine, a warm server), not a GPU, a dense model, experts or compute not 16-bit
    (other kernels), expert parallelism (each rank's token count is its dispatch's) or pipeline
    stages (their replica prices its own steps)."""
    if compile_s <= 0 or family != "gpu" or not experts or ep > 1 or pp > 1:
        return None
    if any(d not in SIXTEEN_BIT for d in dtypes):
        return None
    return MoeJitSpec(experts, top_k, compile_s, (*graph_sizes, profile_tokens))


KEY_LENGTH = len(kernel_keys(1, 1, 1)[0])  # (GEMM, six config terms, naive, EM's and num_valid_tokens' specialisation)


def valid_key(key: object) -> bool:
    """Is ``key`` one ``kernel_keys`` makes (a ``ServerCache`` made by hand is checked)?"""
    return isinstance(key, tuple) and len(key) == KEY_LENGTH and all(type(v) is int for v in key)


class MoeKernels:
    """One server's compiled fused-MoE kernels: which keys it has, and what the first step that
    needs a new one waits (``compile_s`` a key)."""

    def __init__(
        self, experts: int, top_k: int, compile_s: float, warm_tokens: Iterable[int], compiled: Iterable[Key] = ()
    ):
        self.experts, self.top_k, self.compile_s = experts, top_k, compile_s
        self.compiled: set[Key] = set(compiled)
        for m in warm_tokens:  # start-up: the profile run and each CUDA-graph capture
            self.compiled.update(kernel_keys(m, experts, top_k))
        self._ready: set[int] = set()  # token counts whose keys are compiled (a step's quick check)
        self.compiles = 0  # keys compiled while serving
        self.wait_s = 0.0  # and the seconds steps waited for them

    def pending(self, tokens: int) -> bool:
        """Would a step running its experts over ``tokens`` wait for a compile?"""
        if tokens in self._ready:
            return False
        if all(k in self.compiled for k in kernel_keys(tokens, self.experts, self.top_k)):
            self._ready.add(tokens)
            return False
        return True

    def stall_s(self, tokens: int) -> float:
        """Seconds a step over ``tokens`` waits for the keys it is first to need (they are then compiled)."""
        if tokens in self._ready:
            return 0.0
        new = [k for k in kernel_keys(tokens, self.experts, self.top_k) if k not in self.compiled]
        self.compiled.update(new)
        self._ready.add(tokens)
        self.compiles += len(new)
        wait = len(new) * self.compile_s
        self.wait_s += wait
        return wait

    def state(self) -> tuple[Key, ...]:
        """The compiled keys, for a later run on the same server (``results.ServerCache``)."""
        return tuple(sorted(self.compiled))
