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

from llmsim.costmodel.ops import nodes_reached
from llmsim.hardware import HardwareProfile, Link


def tp_link(hw: HardwareProfile, tp: int) -> Link:
    """The link a group of ``tp`` devices talks over (tensor parallelism, an expert-parallel
    group): scale-up if the device has one and the group fits in its domain (``Link.max_devices``:
    one NVSwitch node, or a bridged NVLink pair); a larger group inside one server (the host
    link's ``max_devices``, where the profile gives it) over PCIe peer to peer, one spanning nodes
    over scale-out (RDMA); with neither, the scale-up link; without one, the host link. A group
    across nodes is priced as one ring over the slower link (NCCL's per-GPU NICs bound a ring that
    leaves the node; its hierarchical variants are not modelled). A CPU profile is a whole node
    whose socket link (UPI, xGMI) lies inside the one device: ranks of whole nodes talk over
    scale-out, and the socket link joins only devices of fewer sockets (``hardware.cpu_subset``
    gives it their count)."""
    up = hw.scale_up
    if hw.cpu is not None and up is not None and up.max_devices is None:
        return hw.scale_out if tp > 1 and hw.scale_out is not None else hw.host_link
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
# H800s (NVLink 400 GB/s both ways, 200 per direction, on NVIDIA's H800 SXM datasheet; "~160 GB/s"
# reachable, the README says) and one ConnectX-7 400 Gb/s NIC (~50 GB/s) each, 7,168 hidden,
# top-8, FP8 dispatch and BF16 combine. Each rate below is a fraction of the link's rated speed,
# over the copies that move (a copy to this rank's own experts moves nothing).
# Normal ("high-throughput") kernels, intranode EP 8 (its test routes a plain top-8: 5.25 of 8
# ranks a token, its own among them): 153 / 158 GB/s counted over all of those; over the 4.59
# that move, 0.67 / 0.69 of 200 GB/s
DEEPEP_NVLINK_FRACTION = 0.68
# ... internode (its test picks 4 of the nodes, then top-8 within them, so a token reaches 4 of 4
# or of 8 nodes, its own among them): 58 / 51 GB/s at EP 32 / 64 counted over those; over the 3
# and 3.5 others, 0.87 / 0.89 of the NIC (at EP 16 NVLink forwarding is the bottleneck instead)
DEEPEP_RDMA_FRACTION = 0.88
# the SMs DeepEP's normal kernels run on while they move tokens (vLLM's DeepEPHTAll2AllManager
# num_sms = 20, "the DeepEP default", vllm/distributed/device_communicators/all2all.py); the
# low-latency kernels take none (its DeepEPLLAll2AllManager.max_sms_used is 0)
DEEPEP_HT_SMS = 20
# Low-latency kernels (128 tokens a rank, every (token, expert) copy sent on its own, the node's
# peers over NVLink): EP 16-256 fit latency + remote bytes / (NIC x fraction) within 5.2 %:
# dispatch 118-194 us -> 35 us and 0.93, combine 195-369 us -> 6 us and 0.80
DEEPEP_LL_DISPATCH = (35e-6, 0.93)
DEEPEP_LL_COMBINE = (6e-6, 0.80)


def deepep_fabric(hw: HardwareProfile) -> bool:
    """Can DeepEP run between this GPU's node peers? It needs NVLink with full peer access between
    all of them (its README; its ROCm port runs over AMD's xGMI mesh): not PCIe peers, host staging
    or NVLink bridges joining pairs."""
    up = hw.scale_up
    if hw.family != "gpu" or up is None or "bridge" in up.name:
        return False
    return up.name.startswith(("NVLink", "Infinity Fabric (xGMI)"))


def deepep_refusal(tp: int, hw: HardwareProfile) -> str | None:
    """Why DeepEP's kernels cannot be priced for data-parallel ranks of ``tp`` GPUs on ``hw``
    (None: they can): one GPU a rank (the wide expert-parallel layout; DeepEP with tensor-parallel
    ranks is not modelled), NVLink between the node's GPUs (``deepep_fabric``)."""
    if tp > 1:
        return f"DeepEP is priced for one GPU a data-parallel rank (tp 1, the wide expert-parallel layout), not tp {tp}"
    if not deepep_fabric(hw):
        up = hw.scale_up
        return (
            "DeepEP needs NVLink between all of a node's GPUs (its README: full NVLink peer access); "
            f"{hw.name}'s peers meet over {up.name if up else 'nothing'}"
        )
    return None


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
