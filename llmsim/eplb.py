"""How evenly an expert-parallel MoE layer loads its GPUs: skewed routing, and EPLB's fix.

Real routers do not spread tokens evenly over the experts: some experts are far more popular
(DeepSeek-V3's report, arXiv:2412.19437 sec. 3.4, deploys redundant experts because "the load of
experts" is unbalanced). Under expert parallelism every GPU holds whole experts, the all-to-all
waits for the slowest, so a step's MoE layers take as long as the GPU with the most routed
tokens: the cost model scales the expert GEMMs by ``max rank load / mean rank load``
(``CostConfig.moe_imbalance``).

* ``expert_loads``: expert popularity, Zipf with exponent ``skew`` (0 = uniform; an expert takes at
  most one of a token's k picks), scattered over the expert ids by a seeded permutation (popularity
  has nothing to do with an expert's index).
* ``linear_rank_loads``: vLLM's default placement (``expert_placement_strategy: linear``): rank r
  holds experts r·E/ep .. (r+1)·E/ep − 1.
* ``eplb_rank_loads``: vLLM's EPLB (``--enable-eplb``, ``EPLBConfig.num_redundant_experts``;
  vllm/distributed/eplb/rebalance_algo.py, after DeepSeek's EPLB): ``redundant`` extra copies go,
  one at a time, to the expert whose copies carry the most load each, and the copies are then
  packed onto the ranks heaviest first, each to the least loaded rank with a slot left.

Not modelled: EPLB's periodic re-measurement (loads are known and fixed for the run), its
hierarchical (per-node group) policy, and an imbalance under tensor-parallel experts (there every
GPU runs a slice of every expert, so skew does not unbalance the GPUs; it only shrinks the experts a
step reaches, costmodel/ops.py ``experts_touched``).
"""

from __future__ import annotations

import numpy as np

from llmsim.costmodel.ops import pick_probabilities


def expert_loads(num_experts: int, skew: float, seed: int, k: int = 1) -> list[float]:
    """Each expert's share of the routed tokens (they sum to 1), when each token picks ``k``
    experts: the picks' chances over k (costmodel/ops.py ``pick_probabilities``, the same ones that
    set how many experts a step reaches), so no expert takes more than 1/k of the rows."""
    weights = np.array(pick_probabilities(num_experts, k, skew)) / k
    order = np.random.default_rng(seed).permutation(num_experts)
    loads = np.empty(num_experts)
    loads[order] = weights  # the i-th most popular expert is expert order[i]
    return loads.tolist()


def linear_rank_loads(loads: list[float], ep: int) -> list[float]:
    """The load of each of ``ep`` ranks under vLLM's linear placement."""
    per = len(loads) // ep
    return [sum(loads[r * per : (r + 1) * per]) for r in range(ep)]


def eplb_rank_loads(loads: list[float], ep: int, redundant: int) -> list[float]:
    """The load of each rank once EPLB has placed ``len(loads) + redundant`` expert copies,
    (len(loads) + redundant) / ep per rank (vLLM requires that to divide)."""
    copies = [1] * len(loads)
    for _ in range(redundant):  # replicate_experts: the heaviest per copy gets one more
        hot = max(range(len(loads)), key=lambda e: (loads[e] / copies[e], -e))
        copies[hot] += 1
    items = sorted(
        ((loads[e] / copies[e], e) for e in range(len(loads)) for _ in range(copies[e])),
        key=lambda x: (-x[0], x[1]),
    )
    slots = (len(loads) + redundant) // ep
    rank_load, rank_items = [0.0] * ep, [0] * ep
    for w, _ in items:  # balanced_packing: heaviest first, onto the lightest rank with room
        r = min((r for r in range(ep) if rank_items[r] < slots), key=lambda r: (rank_load[r], r))
        rank_load[r] += w
        rank_items[r] += 1
    return rank_load


def imbalance(rank_loads: list[float]) -> float:
    """Busiest rank over the mean (1 = perfectly even)."""
    mean = sum(rank_loads) / len(rank_loads)
    return max(rank_loads) / mean if mean > 0 else 1.0


def expert_imbalance(
    num_experts: int, ep: int, skew: float, seed: int, eplb: bool, redundant: int = 0, k: int = 1
) -> float:
    """The step's MoE slowdown under expert parallelism: linear placement, or EPLB's (with
    ``redundant`` extra copies), ``k`` experts a token."""
    loads = expert_loads(num_experts, skew, seed, k)
    ranks = eplb_rank_loads(loads, ep, redundant) if eplb else linear_rank_loads(loads, ep)
    return imbalance(ranks)
