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
