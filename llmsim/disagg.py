"""Disaggregated serving: a prefill pool, a decode pool, and the KV transfers between them.

A prefill replica's scheduler marks a request ``transferring`` when its prompt is done; the
replica hands it to ``KVTransfer.start`` (its ``handoff``). The transfer picks a decode replica,
waits until that replica has blocks for the KV and a batch slot (back-pressure: until then the KV
stays in the prefill replica's memory and keeps its blocks), sends it over the prefill replica's
outbound link, then frees the source's blocks (``Replica.release_transferred``) and gives the
request to the decode replica (``Replica.accept_prefilled``), whose first token reaches the user
then (unless the engine streams it from the prefill replica as the prompt ends:
``EngineSpec.first_token_at_prefill``). Both sides are reached only through public methods and attributes (KV capacity, the running
count, ``FastPath.note_external_blocks`` for a reservation during a decode run), never private state.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from llmsim.fastpath import Driven, Timer
from llmsim.replica import Replica
from llmsim.request import Request, blocks_for
from llmsim.router import route

if TYPE_CHECKING:
    from llmsim.options import SimOptions


class KVTransfer:
    """Moves prompts' KV from prefill replicas to decode replicas.

    A transfer occupies the prefill replica's outbound link: latency + bytes / (per-device
    bandwidth × devices sending in parallel), one prompt at a time in the order they got their
    blocks (FIFO). With layer-wise overlap all layers but the last are sent while the prompt's
    step computes, so only what the step did not hide is exposed.
    """

    def __init__(self, env: simpy.Environment, opts: SimOptions) -> None:
        assert opts.kv_link is not None
        self.env = env
        self.decode: list[Replica] = []  # the decode pool (``connect``)
        self.opts = opts
        self.link = opts.kv_link
        self.count = 0
        self.bytes = 0.0
        self.busy_s = 0.0
        self.waits_s = 0.0
        self._link_free_s: dict[int, float] = {}  # prefill replica -> when its outbound link is next free
        self._incoming: dict[int, int] = {}  # decode replica -> transfers in flight to it
        # prompts done whose KV has not landed: waiting for room on the decode side or for the
        # link, or on the wire; a queue like the replicas' own (the saturation verdict counts it)
        self.waiting = 0
        self.timer = Timer(env)  # (the transfers' arrivals)

    def connect(self, decode: list[Replica]) -> None:
        self.decode = decode
        self._incoming = {r.index: 0 for r in decode}

    def start(self, src: Replica, req: Request, step_s: float) -> None:
        """A prefill replica's hand-off: ``req``'s prompt finished in a step of ``step_s``. It
        picks the decode replica now; with room there, the send is one event (its arrival);
        without, a process waits for blocks first."""
        dst = route(self.decode, self.opts.decode_router, self.count, req)
        self.count += 1
        self.waiting += 1
        blocks = blocks_for(req.kv_tokens + 1, dst.kv.block_tokens)
        dst.sync()
        if self._has_room(dst, blocks):
            self._send(src, dst, req, blocks, step_s, self.env.now)
        else:
            Driven(self.env, self._wait_then_send(src, dst, req, blocks, step_s))

    def kv_bytes(self, tokens: int) -> float:
        return tokens * self.opts.kv_bytes_per_token

    def wire_s(self, src: Replica, dst: Replica, tokens: int) -> float:
        """Seconds the link is busy: KV bytes over the devices sending in parallel."""
        devices = min(src.pool.tp * src.pool.pp, dst.pool.tp * dst.pool.pp)
        return self.kv_bytes(tokens) / (self.link.bandwidth_bytes_per_s * devices)

    def seconds(self, src: Replica, dst: Replica, tokens: int, step_s: float) -> float:
        """Exposed transfer time after the prompt's last step (what TTFT pays)."""
        wire = self.wire_s(src, dst, tokens)
        if self.link.layerwise_overlap:
            wire = max(wire / self.opts.num_layers, wire - step_s)
        return self.link.latency_s + wire

    def _has_room(self, dst: Replica, blocks: int) -> bool:
        """Blocks for the KV and a batch slot on ``dst``. The watermark protects running requests'
        growth; an idle replica admits into it (as the schedulers do), or a prompt needing more
        than capacity minus watermark would wait forever."""
        running = dst.sched.num_running()
        if not dst.kv.can_allocate(blocks, admission=running > 0):
            return False
        return running + self._incoming[dst.index] < dst.pool.sched.max_num_seqs

    def _wait_then_send(
        self, src: Replica, dst: Replica, req: Request, blocks: int, step_s: float
    ) -> Generator[simpy.Event, Any, None]:
        """Back-pressure: wait for the decode replica's blocks and a batch slot, then send."""
        t0 = self.env.now
        while True:
            yield dst.blocks_freed()
            dst.sync()
            if self._has_room(dst, blocks):
                break
        self._send(src, dst, req, blocks, step_s, t0)

    def _send(self, src: Replica, dst: Replica, req: Request, blocks: int, step_s: float, t0: float) -> None:
        """Reserve the blocks on ``dst`` and send once the source's link is free (FIFO); the
        request lands on ``dst`` at the end (``land``), ``t0`` being when its prompt finished."""
        now = self.env.now
        dst.kv.reserve(blocks)
        dst.fast.note_external_blocks(blocks)
        self._incoming[dst.index] += 1
        dt = self.seconds(src, dst, req.kv_tokens, step_s)
        start = max(now, self._link_free_s.get(src.index, 0.0))
        self._link_free_s[src.index] = start + dt
        sent = Sent(self, src, dst, req, blocks, t0, dt)
        self.timer.call(start + dt - now, sent.land)

    def land(self, sent: Sent) -> None:
        """The KV is on ``sent.dst``: the source frees its blocks, the decode replica takes the request."""
        src, dst, req = sent.src, sent.dst, sent.req
        now = self.env.now
        self.busy_s += self.wire_s(src, dst, req.kv_tokens)
        self.bytes += self.kv_bytes(req.kv_tokens)
        self.waits_s += now - sent.t0 - sent.dt
        req.transfer_s = now - sent.t0
        src.release_transferred(req)
        self._incoming[dst.index] -= 1
        self.waiting -= 1
        dst.accept_prefilled(req, sent.blocks)


class Sent:
    """A transfer on the wire: what its arrival needs (``KVTransfer.land``)."""

    def __init__(
        self, transfer: KVTransfer, src: Replica, dst: Replica, req: Request, blocks: int, t0: float, dt: float
    ) -> None:
        self.transfer = transfer
        self.src, self.dst, self.req = src, dst, req
        self.blocks, self.t0, self.dt = blocks, t0, dt

    def land(self, _event: object) -> None:
        self.transfer.land(self)
