"""The data-parallel ranks of one expert-parallel group, stepping in lock-step (vLLM DP + EP).

vLLM serves ``--data-parallel-size N --enable-expert-parallel`` as N engines, each with its own
scheduler and KV cache, whose MoE layers all-gather every rank's tokens and reduce-scatter the
results (``costmodel.ops._expert_parallel_moe_ops``). Those collectives join the ranks inside every
MoE layer of every step, so vLLM keeps them in step (read on vLLM main, 2026, the code v0.19
shipped): ``DPEngineCoreProc.run_busy_loop`` (vllm/v1/engine/core.py) makes a rank with nothing
scheduled run a dummy batch, a one-token decode (``execute_dummy_batch``), while any rank of the
group has work; the all-gather and reduce-scatter take each rank's own token count
(``AgRsAll2AllManager``'s ``all_gatherv`` / ``reduce_scatterv`` with the sizes
``coordinate_batch_across_dp`` agreed, vllm/v1/worker/dp_utils.py), padded to the largest on steps
that run in CUDA graphs. A step therefore lasts as long as its slowest rank's: a rank decoding 100
requests waits out its peer's 2,048-token prefill chunk at every MoE layer.

``DataParallelGroup`` is that barrier: one SimPy process plans every rank's next step (each with
its own scheduler, ``Replica.next_plan``), prices each rank's plan as that rank's own step
(``Replica.begin_step``: its dense layers and attention on its own tokens, its experts on the
tokens the group gathers, ``CostModel.group_tokens``), waits out the longest, and hands every rank
its outcome at the common end (``Replica.end_step``). What a rank waited beyond its own step is its
``dp_wait_s`` (summary ``data_parallel``). Dual batch overlap splits the group's step only where every
rank would split its own (vLLM's ranks agree in ``coordinate_batch_across_dp``; an idle rank's dummy
batch votes no): ``BatchShape.microbatch``. Not modelled: the dummy batch's own cost (a one-token
step, never the slowest of a step with work); on graphed steps, each rank's own dense layers and
attention padded to the largest rank's count (only the gathered count is padded here, so a rank
with few tokens but long contexts can be slower in vLLM than priced); the GPUs' time in dummy
batches (``busy_s`` counts a rank's own steps and waits only); and the DP group's all-reduce of
"any unfinished requests" every 32nd step (``_has_global_unfinished_reqs``: a CPU Gloo call that
decides when an idle group stops stepping).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from llmsim.fastpath import Driven, Later, Timer

if TYPE_CHECKING:
    from llmsim.replica import Replica


class DataParallelGroup:
    """Steps its ranks (``ranks``, set once they are built) together; wakes on any rank's input."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.ranks: list[Replica] = []
        self._idle = True
        self.timer = Timer(env)  # (SimPy's events as compiled ones: fastpath.Timer)
        self._wake: Later | simpy.Event = env.event()

    def start(self, ranks: list[Replica]) -> None:
        self.ranks = ranks
        Driven(self.env, self.loop())

    def wake(self) -> None:
        """A rank got something (an arrival, a prefilled request): the next group step plans it."""
        if self._idle:
            self._idle = False
            self.timer.fire(self._wake)

    def loop(self) -> Generator[Later | simpy.Event, Any, None]:  # the process (fastpath.Driven)
        env = self.env
        while True:
            plans = [rank.next_plan() for rank in self.ranks]
            if all(plan is None for plan in plans):  # nothing runs anywhere until something arrives
                for rank in self.ranks:
                    rank.rest()
                self._idle = True
                self._wake = self.timer.hold()
                yield self._wake
                continue
            start = env.now
            shapes = [
                None if plan is None else rank.step_shape(plan) for rank, plan in zip(self.ranks, plans, strict=True)
            ]
            tokens = [1 if shape is None else shape.tokens for shape in shapes]  # an idle rank's dummy token
            decode_only = all(shape is None or not shape.prefill_tokens for shape in shapes)
            cost = self.ranks[0].cost
            gathered = cost.group_tokens(tokens, decode_only)
            # dual batch overlap: every rank splits its step or none does (vLLM's
            # coordinate_batch_across_dp; an idle rank's dummy batch votes no)
            split = int(all(s is not None and cost.microbatched(s.tokens, not s.prefill_tokens) for s in shapes))
            for shape in shapes:
                if shape is not None:
                    shape.group_tokens = gathered
                    shape.microbatch = split
                    if shape.local is not None:
                        shape.local.group_tokens = gathered
                        shape.local.microbatch = split
            own = [
                rank.begin_step(plan, shape, start) for rank, plan, shape in zip(self.ranks, plans, shapes, strict=True)
            ]
            step_s = max(o[0] for o in own if o is not None)
            yield self.timer.after(step_s)
            for rank, plan, mine in zip(self.ranks, plans, own, strict=True):
                if plan is not None and mine is not None:  # (mine is None exactly when plan is)
                    rank.end_step(plan, start, step_s, mine)
                else:
                    rank.dp_dummy_steps += 1  # it ran a dummy batch through the step
