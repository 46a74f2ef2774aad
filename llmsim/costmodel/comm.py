"""Collectives and point-to-point transfers: latency + size / bandwidth, per protocol.

A ring collective over p ranks takes ``steps`` latency hops and moves ``steps / p`` of its bytes
per rank: an all-reduce (a reduce-scatter then an all-gather) 2·(p−1) steps, an all-gather or a
reduce-scatter p−1, a point-to-point send the bytes once. Bandwidths are per direction
(unidirectional) and derated by a measured bus-bandwidth fraction.

A link without ``collective_protocols`` runs every collective one way: ``latency_s`` per hop at the
profile's ``allreduce_bus_fraction`` (the ring α–β model). A link with them (fitted by
``llmsim calibrate`` to measured collectives) prices each protocol and takes the fastest, as NCCL's
tuner does: its LL / LL128 protocols pay less per hop and move fewer bytes per second than Simple,
so small messages go one way and large ones the other (NCCL src/graph/tuning.cc).
"""

from __future__ import annotations

import math

from llmsim.hardware import HardwareProfile, Link


def tp_link(hw: HardwareProfile, tp: int) -> Link:
    """The link a group of ``tp`` devices talks over (tensor parallelism, an expert-parallel
    group): scale-up if the device has one and the group fits in its domain (``Link.max_devices``:
    one NVSwitch node, or a bridged NVLink pair); a larger group inside one server (the host
    link's ``max_devices``, where the profile gives it) over PCIe peer to peer, one spanning nodes
    over scale-out (RDMA); with neither, the scale-up link; without one, the host link. A group
    across nodes is priced as one ring over the slower link (NCCL's per-GPU NICs bound a ring that
    leaves the node; its hierarchical variants are not modelled)."""
    up = hw.scale_up
    if tp > 1 and up is not None:
        span = up.max_devices
        if span is not None and tp > span.value:
            server = hw.host_link.max_devices
            if server is not None and tp <= server.value:
                return hw.host_link
            if hw.scale_out is not None:
                return hw.scale_out
        return up
    return hw.host_link


def ring_s(steps: int, ranks: int, nbytes: float, link: Link, bus_fraction: float) -> float:
    """A ring collective of ``steps`` latency hops moving ``steps / ranks`` of ``nbytes`` per rank:
    the link's fastest protocol for this size (``bus_fraction``: the profile's, for a link without
    protocols of its own)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    bw = link.bandwidth_bytes_per_s.value
    protocols = link.collective_protocols
    if protocols is None:
        return steps * link.latency_s.value + (steps / ranks) * nbytes / (bw * bus_fraction)
    return min(
        p.base_s.value + steps * p.hop_s.value + (steps / ranks) * nbytes / (bw * p.bus_fraction.value)
        for p in protocols
    )


def all_reduce_s(message_bytes: float, ranks: int, link: Link, bus_fraction: float) -> float:
    """Ring all-reduce of ``message_bytes`` per rank over ``ranks`` ranks (a reduce-scatter then
    an all-gather: 2·(p−1) steps)."""
    return ring_s(2 * (ranks - 1), ranks, message_bytes, link, bus_fraction)


def all_gather_s(total_bytes: float, ranks: int, link: Link, bus_fraction: float) -> float:
    """Ring all-gather (or reduce-scatter) whose result is ``total_bytes`` on every rank: each
    rank sends and receives (p−1)/p of it in p−1 steps."""
    return ring_s(ranks - 1, ranks, total_bytes, link, bus_fraction)


def send_s(message_bytes: float, link: Link, efficiency: float = 1.0) -> float:
    """One point-to-point transfer (pipeline-stage send, KV-cache transfer)."""
    if message_bytes <= 0:
        return 0.0
    return link.latency_s.value + message_bytes / (link.bandwidth_bytes_per_s.value * efficiency)


# DeepEP's all-to-all kernels as its authors measured them (deepseek-ai/DeepEP docs/legacy.md,
# the V1 README's "Performance", read at 0297fc8; data/calibration/deepep/, benchmarks/deepep.py):
# H800s with ~160 GB/s of NVLink and one ConnectX-7 400 Gb/s NIC (~50 GB/s) each, 7,168 hidden,
# top-8, FP8 dispatch and BF16 combine. Each rate below is a fraction of the link it crosses.
# Normal ("high-throughput") kernels, intranode EP 8: 153 / 158 GB/s (dispatch / combine) counted
# over each rank a token reaches, its own among them (4 of 8: 4 of 8 groups, a group a rank); over
# the copies that move (the 3.5 other ranks) 0.84 / 0.86 of the ~160 GB/s
DEEPEP_NVLINK_FRACTION = 0.85
# ... internode: 58 / 51 GB/s at EP 32 / 64 counted over every node a token reaches, its own among
# them (DeepSeek-V3's routing: 4 of 8 expert groups, so 3.14 / 4 nodes of which 2.36 / 3.5 remote):
# 0.87 / 0.89 of the NIC for the copies that leave the node (at EP 16 NVLink forwarding is the
# bottleneck instead: benchmarks/deepep.py prices every row)
DEEPEP_RDMA_FRACTION = 0.88
# Low-latency kernels (128 tokens a rank, every (token, expert) copy sent on its own, the node's
# peers over NVLink): EP 16-256 fit latency + remote bytes / (NIC x fraction) within 4 %:
# dispatch 118-194 us -> 35 us and 0.93, combine 195-369 us -> 6 us and 0.80
# the SMs DeepEP's normal kernels run on while they move tokens (vLLM's DeepEPHTAll2AllManager
# num_sms = 20, "the DeepEP default", vllm/distributed/device_communicators/all2all.py); the
# low-latency kernels take none (its DeepEPLLAll2AllManager.max_sms_used is 0)
DEEPEP_HT_SMS = 20
DEEPEP_LL_DISPATCH = (35e-6, 0.93)
DEEPEP_LL_COMBINE = (6e-6, 0.80)


def deepep_fabric(hw: HardwareProfile) -> bool:
    """Can DeepEP run between this GPU's node peers? It needs NVLink with full peer access between
    them (its README; its ROCm port runs over AMD's xGMI), so not PCIe peers or host staging."""
    up = hw.scale_up
    return hw.family == "gpu" and up is not None and up.name.startswith(("NVLink", "Infinity Fabric (xGMI)"))


def deepep_s(
    tokens: int,
    row_bytes: float,
    k: int,
    ranks: int,
    node_ranks: int,
    low_latency: bool,
    combine: bool,
    up: Link,
    out: Link,
    groups: tuple[int, int] = (0, 0),
) -> float:
    """One DeepEP dispatch (or combine, the same traffic back) of ``tokens`` tokens from this rank
    to ``ranks`` expert-parallel ranks, ``node_ranks`` of them in a node (NVLink, ``up``), the
    rest behind the NIC (``out``), each token routed to ``k`` experts spread evenly over the ranks
    (``groups``: a group-limited router's (groups, groups a token picks), DeepSeek-V3's (8, 4)).
    Low-latency kernels send every (token, expert) copy: those to other nodes over RDMA, the node's
    own over NVLink. Normal kernels send a token once to each other node it reaches over RDMA and
    forward it there over NVLink to each rank it reaches; the two overlap."""
    if tokens <= 0 or ranks <= 1:
        return 0.0
    g = min(node_ranks, ranks)
    nvl_bw = up.bandwidth_bytes_per_s.value * DEEPEP_NVLINK_FRACTION
    nic = out.bandwidth_bytes_per_s.value
    if low_latency:
        latency, fraction = DEEPEP_LL_COMBINE if combine else DEEPEP_LL_DISPATCH
        copies = tokens * k
        remote = copies * (ranks - g) / ranks
        local = copies * (g - 1) / ranks  # (a copy to this rank's own experts moves nothing)
        return latency + max(remote * row_bytes / (nic * fraction), local * row_bytes / nvl_bw)
    nodes = -(-ranks // g)
    remote_nodes = nodes_reached(nodes, k, groups) * (nodes - 1) / nodes  # (each node alike: its own among them)
    reached = nodes_reached(ranks, k, groups) * (ranks - 1) / ranks  # other ranks a token reaches
    rdma = tokens * remote_nodes * row_bytes / (nic * DEEPEP_RDMA_FRACTION)
    return max(rdma, tokens * reached * row_bytes / nvl_bw)


def nodes_reached(nodes: int, k: int, groups: tuple[int, int] = (0, 0)) -> float:
    """Expected nodes (or ranks) holding at least one of a token's ``k`` experts, spread evenly. A
    group-limited router picks ``groups[1]`` of ``groups[0]`` expert groups first (DeepSeek-V3's
    4 of 8): with whole groups a node (EPLB's hierarchical placement keeps them so) a node is missed
    when none of its groups is picked; with a group over several nodes each picked group spreads its
    k / picks experts over those. Without groups, k independent picks."""
    n_groups, picks = groups
    if n_groups and picks and n_groups % nodes == 0:
        per = n_groups // nodes
        return nodes * (1.0 - math.comb(n_groups - per, picks) / math.comb(n_groups, picks))
    if n_groups and picks and nodes % n_groups == 0:
        span = nodes // n_groups
        return picks * span * (1.0 - (1.0 - 1.0 / span) ** (k / picks))
    return nodes * (1.0 - (1.0 - 1.0 / nodes) ** k)
