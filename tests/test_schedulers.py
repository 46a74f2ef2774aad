"""Scheduler decisions on small hand-made workloads, driven without the event loop."""

from __future__ import annotations

from collections import deque

import pytest

from llmsim.kvcache import BlockManager
from llmsim.request import Request
from llmsim.schedulers import SchedulerConfig, make_scheduler
from llmsim.schedulers.queue import enqueue


def drive(policy: str, reqs: list[Request], blocks: int, **cfg: object) -> tuple[list, list[Request]]:
    """Run the scheduler to completion with 1-second steps; returns the plans and finished requests."""
    kv = BlockManager(blocks, 16, watermark=0.0)
    sched = make_scheduler(policy, SchedulerConfig(**cfg), kv)
    for r in reqs:
        sched.add(r)
    plans, done = [], []
    t = 0.0
    while sched.has_work():
        plan = sched.schedule()
        assert not plan.empty, "scheduler stalled"
        t += 1.0
        plans.append(plan)
        done += sched.complete(plan, t)
        assert kv.used <= kv.num_blocks
    assert kv.used == 0
    return plans, done


@pytest.mark.parametrize("mode", ["recompute", "swap"])
@pytest.mark.parametrize("policy", ["traditional", "chunked"])
def test_preempted_requests_finish_with_their_token_count(policy: str, mode: str) -> None:
    reqs = [Request(i, 0.0, 40 + 8 * i, 60) for i in range(6)]
    plans, done = drive(policy, reqs, blocks=24, preemption=mode, chunk_tokens=64)
    assert len(done) == 6
    assert sum(r.preemptions for r in reqs) > 0
    for r in reqs:
        assert r.generated == r.output_tokens == 60
    if mode == "swap":
        assert sum(p.swap_out_tokens for p in plans) > 0
        assert sum(p.swap_in_tokens for p in plans) == sum(p.swap_out_tokens for p in plans)
    else:
        assert sum(p.swap_out_tokens for p in plans) == 0


def test_chunked_steps_respect_the_budget_and_first_token_waits_for_the_last_chunk() -> None:
    reqs = [Request(0, 0.0, 300, 5), Request(1, 0.0, 50, 20)]
    plans, _ = drive("chunked", reqs, blocks=100, chunk_tokens=128)
    for p in plans:
        assert p.prefill_tokens + len(p.decode) <= 128
    chunks = [c for p in plans for r, c in p.prefill if r.id == 0]
    assert sum(chunks) == 300 and len(chunks) >= 3
    last_chunk_step = max(i for i, p in enumerate(plans) if any(r.id == 0 for r, _ in p.prefill))
    assert reqs[0].first_token_s == last_chunk_step + 1.0


def test_traditional_prefill_steps_stall_decodes() -> None:
    reqs = [Request(0, 0.0, 64, 30)] + [Request(i, 0.0, 64, 5) for i in range(1, 4)]
    plans, _ = drive("traditional", reqs, blocks=100, max_num_seqs=1)
    for p in plans:
        assert not (p.prefill and p.decode)


def test_dynamic_budget_shrinks_when_a_step_would_miss_the_tbt_target() -> None:
    kv = BlockManager(1000, 16)
    cfg = SchedulerConfig(chunk_tokens=1024, chunk_budget="dynamic", tbt_target_s=0.05)
    sched = make_scheduler("chunked", cfg, kv, predict_s=lambda shape: 0.01 + shape.prefill_tokens * 1e-4)
    sched.add(Request(0, 0.0, 4000, 4))  # 1024 tokens would take 0.11 s
    plan = sched.schedule()
    assert plan.prefill_tokens == 256  # 1024 -> 512 -> 256 (0.0356 s <= 0.05 s)
    sched = make_scheduler("chunked", SchedulerConfig(chunk_tokens=1024), BlockManager(1000, 16))
    sched.add(Request(1, 0.0, 4000, 4))
    assert sched.schedule().prefill_tokens == 1024


@pytest.mark.parametrize("spec_as_decode", [False, True])
def test_dynamic_budget_predicts_verification_as_the_step_is_priced(spec_as_decode: bool) -> None:
    """With speculation, the budget's predicted step is the one the replica will price
    (``BatchPlan.shape``): verification as a (k+1)-token chunk per request, or as k+1 decode
    tokens where the model verifies in its decode kernel (MLA)."""
    from llmsim.schedulers import SpecConfig

    seen = []
    cfg = SchedulerConfig(
        chunk_tokens=256,
        chunk_budget="dynamic",
        tbt_target_s=1.0,  # never halves: the prediction is of the step that runs
        speculative=SpecConfig(k=3, acceptance=[0.0] * 3),
        spec_as_decode=spec_as_decode,
    )
    sched = make_scheduler("chunked", cfg, BlockManager(1000, 16), predict_s=lambda s: seen.append(s) or 0.0)
    for i in range(2):
        sched.add(Request(i, 0.0, 20 + 10 * i, 50))
    sched.complete(sched.schedule(), 1.0)  # both prompts done: two decoding requests
    sched.add(Request(2, 0.0, 4000, 4))
    plan = sched.schedule()
    assert len(plan.decode) == 2 and plan.prefill_tokens == 256 - 2 * 4
    want, got = plan.shape(None, None, spec_as_decode), seen[-1]
    for field in ("prefill_tokens", "prefill_seqs", "prefill_attn_pairs", "prefill_kv_tokens"):
        assert getattr(got, field) == getattr(want, field), field
    for field in ("decode_seqs", "decode_tokens", "decode_ctx_tokens"):
        assert getattr(got, field) == getattr(want, field), field
    # the chunk is taken to end its prompt (the worst case): one sampled row more than the plan's
    assert got.lm_rows == want.lm_rows + 1


def test_shortest_prompt_first_with_starvation_protection() -> None:
    waiting: deque[Request] = deque()
    bypassed: dict[int, int] = {}
    long = Request(0, 0.0, 5000, 1)
    enqueue(waiting, long, "shortest_prompt_first", bypassed, max_bypass=2)
    for i in range(1, 5):
        enqueue(waiting, Request(i, 0.0, 100, 1), "shortest_prompt_first", bypassed, max_bypass=2)
    # the long prompt is overtaken twice, then holds its place
    assert [r.id for r in waiting] == [1, 2, 0, 3, 4]
    fcfs: deque[Request] = deque()
    for i, p in enumerate([300, 100, 200]):
        enqueue(fcfs, Request(i, 0.0, p, 1), "fcfs", {}, 2)
    assert [r.id for r in fcfs] == [0, 1, 2]


def test_length_buckets_group_similar_prompts() -> None:
    waiting: deque[Request] = deque()
    for i, p in enumerate([1100, 100, 1500, 3000, 120, 1900]):
        enqueue(waiting, Request(i, 0.0, p, 1), "length_bucketed", {}, max_bypass=10)
    # buckets (65-128], (1024-2048], (2048-4096]; arrival order within a bucket
    assert [r.prompt_tokens for r in waiting] == [100, 120, 1100, 1500, 1900, 3000]


def test_parallel_samples_share_prompt_blocks_copy_on_write() -> None:
    kv = BlockManager(1000, 16)
    r = Request(0, 0.0, 40, 10)  # 2 full prompt blocks + 8 tokens in a partly filled one
    r.n_seqs = 4
    assert kv.blocks_for_request(r, 40) == 3  # prefill: one copy
    assert kv.blocks_for_request(r, 41) == 2 + 4 * 1  # each sequence copies the partial block
    assert kv.blocks_for_request(r, 40 + 9) == 2 + 4 * 2
    plans, done = drive("chunked", [r], blocks=100)
    assert r.generated == 10 and done == [r]
    decode = next(p for p in plans if p.decode)
    assert decode.shape().decode_seqs == 4  # four rows per step


def test_a_dynamic_budget_without_a_predictor_is_refused() -> None:
    """It would run the fixed budget without saying so (what the twin's engine used to do)."""
    cfg = SchedulerConfig(chunk_tokens=1024, chunk_budget="dynamic", tbt_target_s=0.05)
    with pytest.raises(ValueError, match="predict_s"):
        make_scheduler("chunked", cfg, BlockManager(1000, 16))


def drive_pipelined(policy: str, reqs: list[Request], blocks: int, depth: int, **cfg: object) -> list[Request]:
    """As ``drive``, with up to ``depth`` micro-batches in flight (pipeline.py's order): a new one
    is scheduled from the requests not in flight; the oldest lands when the pipe is full or the
    scheduler has nothing to add."""
    kv = BlockManager(blocks, 8, watermark=0.0)
    sched = make_scheduler(policy, SchedulerConfig(**cfg), kv)
    for r in reqs:
        sched.add(r)
    flight: deque = deque()
    done: list[Request] = []
    t = 0.0
    while sched.has_work():
        plan = sched.schedule() if len(flight) < depth else None
        if plan is not None and not plan.empty:
            flight.append((plan, sched.hold(plan)))
            continue
        assert flight, "scheduler stalled with nothing in flight"
        plan, members = flight.popleft()
        t += 1.0
        done += sched.complete(plan, t)
        sched.release(members)
        assert t < 10_000, "requests evict each other for ever"
    return done


@pytest.mark.parametrize("policy", ["traditional", "chunked"])
def test_pipelined_requests_that_each_fill_the_cache_still_finish(policy: str) -> None:
    # Found by the property suite (gpt2, pp=3, a 25-block cache): two requests of 163 tokens each
    # need 21 of 25 blocks. The older one, short of a block while the newer one was in flight,
    # preempted itself; re-admitted, it did the same to the other: 40,000 preemptions, no finish.
    reqs = [Request(i, 0.0, 144, 19) for i in range(4)]
    done = drive_pipelined(policy, reqs, blocks=25, depth=3, chunk_tokens=16, max_batch_tokens=1024)
    assert len(done) == 4
    assert all(r.generated == 19 for r in reqs)
    assert sum(r.preemptions for r in reqs) < 20


@pytest.mark.parametrize("policy", ["chunked", "vllm"])
def test_pipelined_swap_preemption_does_not_swap_its_victim_straight_back(policy: str) -> None:
    # Found by a review (the quickstart at pp=2, swap preemption, a 700-block cache: a segfault
    # compiled, RecursionError in pure Python): the newest partial prompt, swapped out so the
    # others could grow, was swapped back in by the same step's re-plan, and out again, for ever
    reqs = [Request(i, 0.0, 144, 19) for i in range(4)]
    done = drive_pipelined(policy, reqs, blocks=25, depth=3, chunk_tokens=16, max_batch_tokens=1024, preemption="swap")
    assert len(done) == 4
    assert all(r.generated == 19 for r in reqs)
    assert sum(r.preemptions for r in reqs) < 20


@pytest.mark.parametrize("policy", ["traditional", "static", "chunked", "vllm"])
def test_a_dropped_scheduler_releases_its_collaborators(policy: str) -> None:
    """mypyc compiled a native subclass of a base open to interpreted subclasses so that its
    instances, once freed, kept a reference to the KV manager and the decode set they were built
    with: a replica's ~37 KB stayed behind every run, and a sweep or plan of many points ran out of
    memory. Each policy is open to interpreted subclasses too now, and a freed scheduler lets go."""
    import gc
    import sys

    from llmsim.decodeset import DecodeSet
    from llmsim.gaps import GapHistogram

    kv = BlockManager(64, 16, 0.0, False, False)
    columns = DecodeSet(kv, GapHistogram())
    before = sys.getrefcount(kv), sys.getrefcount(columns)
    sched = make_scheduler(policy, SchedulerConfig(), kv, columns.gaps, None, columns)
    del sched
    gc.collect()
    assert (sys.getrefcount(kv), sys.getrefcount(columns)) == before


# ---- trtllm: TensorRT-LLM's GUARANTEED_NO_EVICT in-flight batching ----------------------------


def test_it_never_preempts_where_vllm_s_scheduler_must() -> None:
    # 6 requests of 40-80 + 60 tokens in 24 blocks of 16: their lifetimes do not all fit at once
    reqs = [Request(i, 0.0, 40 + 8 * i, 60) for i in range(6)]
    _, done = drive("trtllm", reqs, blocks=24, max_batch_tokens=512)
    assert len(done) == 6 and all(r.generated == 60 for r in reqs)
    assert sum(r.preemptions for r in reqs) == 0
    vllm = [Request(i, 0.0, 40 + 8 * i, 60) for i in range(6)]
    drive("vllm", vllm, blocks=24, chunk_tokens=512, max_batch_tokens=512)
    assert sum(r.preemptions for r in vllm) > 0  # (the same load does evict under vLLM's rule)


def test_a_request_starts_only_when_its_whole_lifetime_fits_beside_the_started_ones() -> None:
    # each request: 64 + 64 tokens set aside (prompt + max_new_tokens, as TensorRT-LLM) -> 8 blocks of
    # 16; 20 blocks hold two lifetimes
    kv = BlockManager(20, 16, watermark=0.0)
    sched = make_scheduler("trtllm", SchedulerConfig(max_batch_tokens=4096), kv)
    for i in range(3):
        sched.add(Request(i, 0.0, 64, 64))
    plan = sched.schedule()
    assert [r.id for r, _ in plan.prefill] == [0, 1]  # the third's lifetime would not fit
    sched.complete(plan, 1.0)
    # 12 blocks are free now (2 x 4 held), yet 2 x 4 more are promised to the started two
    assert kv.free_blocks == 12
    plan = sched.schedule()
    assert not plan.prefill and len(plan.decode) == 2


def test_contexts_and_generations_share_a_step_and_the_first_misfit_ends_it() -> None:
    kv = BlockManager(1000, 16, watermark=0.0)
    sched = make_scheduler("trtllm", SchedulerConfig(max_batch_tokens=1000), kv)
    sched.add(Request(0, 0.0, 100, 10))
    sched.complete(sched.schedule(), 1.0)
    for i, prompt in enumerate((800, 500, 50), start=1):
        sched.add(Request(i, 1.0, prompt, 10))
    plan = sched.schedule()
    # the decode (1 token) and the 800-token context fit 1,000; the 500-token one does not, and the
    # 50-token one behind it may not overtake it (arrival order)
    assert [r.id for r in plan.decode] == [0]
    assert [(r.id, c) for r, c in plan.prefill] == [(1, 800)]


def test_a_prompt_past_max_num_tokens_is_refused_not_chunked() -> None:
    sched = make_scheduler("trtllm", SchedulerConfig(max_batch_tokens=256), BlockManager(1000, 16))
    assert "exceeds max_batch_tokens=256" in sched.rejection_reason(Request(0, 0.0, 300, 4))
    assert sched.rejection_reason(Request(1, 0.0, 256, 4)) == ""


def test_pipelined_micro_batches_keep_the_guarantee() -> None:
    reqs = [Request(i, 0.0, 24 + 4 * i, 30) for i in range(8)]
    done = drive_pipelined("trtllm", reqs, blocks=40, depth=2, max_batch_tokens=256)
    assert len(done) == 8 and sum(r.preemptions for r in reqs) == 0


def test_trtllm_chunked_context_cuts_chunks_at_whole_blocks_first_come_first_served() -> None:
    kv = BlockManager(1000, 16, watermark=0.0)
    cfg = SchedulerConfig(max_batch_tokens=256, context_chunking=True)
    sched = make_scheduler("trtllm", cfg, kv)
    assert sched.rejection_reason(Request(9, 0.0, 1000, 4)) == ""  # (chunked: longer than a step is fine)
    for i in range(3):
        sched.add(Request(i, 0.0, 20, 50))
    sched.complete(sched.schedule(), 1.0)  # three 20-token prompts, whole
    sched.add(Request(3, 1.0, 1000, 5))
    sched.add(Request(4, 1.0, 100, 5))
    plan = sched.schedule()
    # 3 decodes leave 253 tokens: the 1,000-token prompt takes 240 (15 whole blocks), the next
    # prompt starts but gets nothing past the first (first come, first served)
    assert len(plan.decode) == 3
    assert [(r.id, c) for r, c in plan.prefill] == [(3, 240)]
    chunks = [240]
    t = 2.0
    sched.complete(plan, t)
    while any(r.id == 3 and r.in_prefill for r in sched.running):
        plan = sched.schedule()
        chunks += [c for r, c in plan.prefill if r.id == 3]
        t += 1.0
        sched.complete(plan, t)
    assert sum(chunks) == 1000 and all(c % 16 == 0 for c in chunks[:-1])


def test_enable_chunked_context_belongs_to_the_trtllm_policy() -> None:
    from llmsim.scenario import PolicyConfig

    assert PolicyConfig(kind="trtllm", enable_chunked_context=True).enable_chunked_context
    with pytest.raises(ValueError, match="enable_chunked_context applies to kind: trtllm only"):
        PolicyConfig(kind="chunked", enable_chunked_context=True)


def test_trtllm_sets_aside_prompt_plus_every_output_token() -> None:
    # 16 + 17 tokens = 33 -> 3 blocks of 16 (TensorRT-LLM's prompt + max_new_tokens): 4 blocks hold one
    kv = BlockManager(4, 16, watermark=0.0)
    sched = make_scheduler("trtllm", SchedulerConfig(max_batch_tokens=4096), kv)
    for i in range(2):
        sched.add(Request(i, 0.0, 16, 17))
    assert [r.id for r, _ in sched.schedule().prefill] == [0]
    assert "capacity is 2 blocks" in make_scheduler("trtllm", SchedulerConfig(), BlockManager(2, 16)).rejection_reason(
        Request(9, 0.0, 16, 17)
    )


def test_trtllm_chunking_goes_on_past_a_prompt_that_gets_no_whole_block() -> None:
    # FIRST_COME_FIRST_SERVED: 13 tokens left after the first chunk are no whole block for the
    # 100-token prompt, but the 10-token one behind it runs whole (setCtxRequestsChunkSize goes on)
    kv = BlockManager(1000, 16, watermark=0.0)
    sched = make_scheduler("trtllm", SchedulerConfig(max_batch_tokens=256, context_chunking=True), kv)
    for i in range(3):
        sched.add(Request(i, 0.0, 20, 50))
    sched.complete(sched.schedule(), 1.0)
    for i, prompt in ((3, 1000), (4, 100), (5, 10)):
        sched.add(Request(i, 1.0, prompt, 5))
    plan = sched.schedule()
    assert [(r.id, c) for r, c in plan.prefill] == [(3, 240), (5, 10)]
    assert [r.id for r in sched.waiting] == [4]  # (first in the queue still)


def test_trtllm_a_lifetime_misfit_stops_admission_before_any_lora_pass_over() -> None:
    # the capacity pass stops at the first request whose blocks do not fit; only one that fits
    # may be passed over for its adapter (capacityScheduler.cpp: blocks first, then PEFT pages)
    kv = BlockManager(20, 16, watermark=0.0)
    sched = make_scheduler("trtllm", SchedulerConfig(max_batch_tokens=4096, max_loras=1), kv)
    reqs = [Request(0, 0.0, 16, 16), Request(1, 1.0, 288, 16), Request(2, 1.0, 16, 16)]
    for r, adapter in zip(reqs, (0, 1, 0), strict=True):
        r.lora_id = adapter
    sched.add(reqs[0])
    sched.complete(sched.schedule(), 1.0)
    sched.add(reqs[1])  # 304 tokens, 19 of the 20 blocks: not beside the first's 2
    sched.add(reqs[2])
    plan = sched.schedule()
    assert not plan.prefill and [r.id for r in plan.decode] == [0]


def test_trtllm_max_utilization_admits_on_what_a_step_needs_and_pauses_the_newest() -> None:
    # the three 64 + 64 lifetimes (8 blocks each) do not fit 20 blocks together, but their prompts do:
    # MAX_UTILIZATION starts all three and pauses the newest when the decodes run short
    kv = BlockManager(20, 16, watermark=0.0)
    sched = make_scheduler("trtllm", SchedulerConfig(max_batch_tokens=4096, capacity_policy="max_utilization"), kv)
    for i in range(3):
        sched.add(Request(i, 0.0, 64, 64))
    assert [r.id for r, _ in sched.schedule().prefill] == [0, 1, 2]
    reqs = [Request(i, 0.0, 40 + 8 * i, 60) for i in range(6)]
    _, done = drive("trtllm", reqs, blocks=24, max_batch_tokens=512, capacity_policy="max_utilization")
    assert len(done) == 6 and sum(r.preemptions for r in reqs) > 0


def test_trtllm_static_batch_starts_a_batch_whole_and_the_next_once_it_drains() -> None:
    """STATIC_BATCH (GuaranteedNoEvictScheduler::impl<true>): waiting requests are considered only
    while no started request generates; then every one that fits starts together."""
    kv = BlockManager(100, 16, watermark=0.0)
    sched = make_scheduler("trtllm", SchedulerConfig(max_batch_tokens=4096, capacity_policy="static_batch"), kv)
    for i in range(3):
        sched.add(Request(i, 0.0, 64, 4))
    assert [r.id for r, _ in sched.schedule().prefill] == [0, 1, 2]  # one batch, together
    # batches of two (max_batch_size): each starts only once the one before has drained
    reqs = [Request(i, 0.0, 64, 4 + 4 * i) for i in range(6)]
    plans, done = drive(
        "trtllm", reqs, blocks=100, max_batch_tokens=4096, max_num_seqs=2, capacity_policy="static_batch"
    )
    assert len(done) == 6
    starts = [[r.id for r, _ in p.prefill] for p in plans if p.prefill]
    assert starts == [[0, 1], [2, 3], [4, 5]] and not any(p.prefill and p.decode for p in plans)
    eager, _ = drive("trtllm", [Request(i, 0.0, 64, 4 + 4 * i) for i in range(6)], blocks=100, max_num_seqs=2)
    assert any(p.prefill and p.decode for p in eager)  # (GUARANTEED_NO_EVICT refills a slot as soon as it frees)


def test_capacity_scheduler_policy_belongs_to_the_trtllm_policy() -> None:
    from llmsim.scenario import PolicyConfig

    assert PolicyConfig(kind="trtllm", capacity_scheduler_policy="max_utilization")
    with pytest.raises(ValueError, match="capacity_scheduler_policy applies to kind: trtllm only"):
        PolicyConfig(kind="vllm", capacity_scheduler_policy="max_utilization")
    with pytest.raises(ValueError, match="static_batch with enable_chunked_context is not modelled"):
        PolicyConfig(kind="trtllm", capacity_scheduler_policy="static_batch", enable_chunked_context=True)


# ---- vllm: vLLM's one loop over the running requests, where a capped prompt was overtaken ------


def _capped_prompt_beside(
    short_prompt: int, short_output: int, blocks: int, prompt: int, output: int, **cfg: object
) -> tuple:
    """A vllm scheduler with a 64-token budget, a long prompt capped by the threshold and a short
    request admitted behind it (which finishes its prompt first): (scheduler, kv, long, short)."""
    kv = BlockManager(blocks, 16, 0.0, False)
    sched = make_scheduler("vllm", SchedulerConfig(max_num_seqs=8, max_batch_tokens=64, chunk_tokens=64, **cfg), kv)
    long, short = Request(0, 0.0, prompt, output), Request(1, 0.0, short_prompt, short_output)
    sched.add(long)
    sched.add(short)
    return sched, kv, long, short


@pytest.mark.parametrize("preemption", ["swap", "recompute"])
def test_a_prompt_in_progress_never_preempts_a_decode_the_step_has_planned(preemption: str) -> None:
    """Under swap (chunked's plan, decodes first) a request admitted behind a prompt capped by the
    threshold decodes while that prompt is still in progress: the prompt, short of blocks, must not
    swap out the decode already planned in the step (the step then decoded a waiting request)."""
    sched, kv, long, short = _capped_prompt_beside(
        16, 40, 11, 160, 3, long_prefill_token_threshold=16, preemption=preemption
    )
    for step in range(400):
        plan = sched.schedule()
        assert all(r.status == "running" for r in plan.decode), step
        sched.complete(plan, float(step))
        if not sched.has_work():
            break
    assert long.generated == 3 and short.generated == 40 and kv.used == 0 and kv.tokens_held == 0


def test_speculative_decodes_are_not_starved_by_a_capped_prompt() -> None:
    """With speculative decoding the step keeps decodes first (vLLM would cut a late decode's
    proposals to the budget, which a plan's one spec_k cannot say): a decode whose k+1 tokens did
    not fit beside an older capped prompt waited the whole prompt out."""
    from llmsim.schedulers import SpecConfig

    spec = SpecConfig(k=4, acceptance=[0.7] * 4)
    sched, _, _, short = _capped_prompt_beside(2, 50, 1000, 3000, 2, long_prefill_token_threshold=62, speculative=spec)
    stalled = 0
    for step in range(60):
        plan = sched.schedule()
        stalled += not short.in_prefill and short.status == "running" and short not in plan.decode
        sched.complete(plan, float(step))
    assert stalled == 0 and short.generated == 50
