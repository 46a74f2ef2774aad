"""Collectives and point-to-point transfers: the α–β (latency + size/bandwidth) model.

Ring all-reduce moves 2·(p−1)/p of the message per rank in 2·(p−1) latency hops; a ring
all-gather or reduce-scatter half of that; a point-to-point send moves it once. Bandwidths are
per direction (unidirectional) and derated by the measured NCCL bus-bandwidth fraction of the
profile.
"""

from __future__ import annotations

from llmsim.hardware import HardwareProfile, Link


def tp_link(hw: HardwareProfile, tp: int) -> Link:
    """The link a group of ``tp`` devices talks over (tensor parallelism, an expert-parallel
    group): scale-up if the device has one and the group fits in its domain (``Link.max_devices``,
    one NVSwitch node), scale-out (RDMA) for a group spanning nodes, else the host link. A group
    across nodes is priced as one ring over the slower link (NCCL's per-GPU NICs bound a ring that
    leaves the node; its hierarchical variants are not modelled)."""
    up = hw.scale_up
    if tp > 1 and up is not None:
        span = up.max_devices
        if span is not None and tp > span.value and hw.scale_out is not None:
            return hw.scale_out
        return up
    return hw.host_link


def all_reduce_s(message_bytes: float, ranks: int, link: Link, bus_fraction: float) -> float:
    """Ring all-reduce of ``message_bytes`` per rank over ``ranks`` ranks (a reduce-scatter then
    an all-gather: twice ``all_gather_s`` of the same bytes)."""
    if ranks <= 1 or message_bytes <= 0:
        return 0.0
    bw = link.bandwidth_bytes_per_s.value * bus_fraction
    hops = 2 * (ranks - 1)
    return hops * link.latency_s.value + (hops / ranks) * message_bytes / bw


def all_gather_s(total_bytes: float, ranks: int, link: Link, bus_fraction: float) -> float:
    """Ring all-gather (or reduce-scatter) whose result is ``total_bytes`` on every rank: each
    rank sends and receives (p−1)/p of it in p−1 latency hops."""
    if ranks <= 1 or total_bytes <= 0:
        return 0.0
    bw = link.bandwidth_bytes_per_s.value * bus_fraction
    hops = ranks - 1
    return hops * link.latency_s.value + (hops / ranks) * total_bytes / bw


def send_s(message_bytes: float, link: Link, efficiency: float = 1.0) -> float:
    """One point-to-point transfer (pipeline-stage send, KV-cache transfer)."""
    if message_bytes <= 0:
        return 0.0
    return link.latency_s.value + message_bytes / (link.bandwidth_bytes_per_s.value * efficiency)
