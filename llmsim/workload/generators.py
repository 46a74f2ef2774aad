"""Synthetic workloads: arrival processes and token-length distributions, all from one seeded RNG."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from llmsim.errors import UserError
from llmsim.workload.base import Workload
from llmsim.workload.identity import segment_block_ids, segment_key
from llmsim.workload.limits import MAX_PREFIX_BLOCKS, MAX_REQUESTS, MAX_TOKENS_PER_REQUEST, check_prefix_blocks
from llmsim.workload.tokenizer import bench_order


def poisson_arrivals(rng: np.random.Generator, rate_rps: float, n: int) -> np.ndarray:
    """Exponential gaps with mean 1/rate; the first request arrives at t=0."""
    gaps = rng.exponential(1.0 / rate_rps, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def gamma_arrivals(rng: np.random.Generator, rate_rps: float, cv: float, n: int) -> np.ndarray:
    """Gamma gaps with mean 1/rate and coefficient of variation ``cv`` (cv > 1 is burstier than Poisson)."""
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / (rate_rps * shape), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def ramp_rates(strategy: str, start_rps: float, end_rps: float, n: int) -> np.ndarray:
    """Each of ``n`` requests' rate under vllm bench serve's ramp-up (vllm/benchmarks/serve.py,
    ``_get_current_request_rate``): from start to end by the request's index over n - 1."""
    progress = np.arange(n, dtype=float) / max(n - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    return start_rps * (end_rps / start_rps) ** progress


def ramp_arrivals(rng: np.random.Generator, rates: np.ndarray, cv: float) -> np.ndarray:
    """llmsim's draw of ramped arrivals: Gamma gaps (CV ``cv``) each at its request's rate, the
    first request at 0 s as llmsim's own arrivals are."""
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / (rates * shape))
    gaps[0] = 0.0
    return np.cumsum(gaps)


def vllm_bench_arrivals(
    seed: int, rate_rps: float, burstiness: float, n: int, rates: np.ndarray | None = None
) -> np.ndarray:
    """The send times of ``vllm bench serve --request-rate rate --burstiness b --seed seed``, from the
    benchmark's start: n gaps from numpy's global generator seeded with the seed (its random dataset
    draws from a generator of its own), Gamma(shape b, scale 1/(rate b)), cumulated and scaled so
    that the last is at n / rate (vllm/benchmarks/serve.py, ``get_request``: "close the gap for
    stabilizing the throughput data"); the first request waits its own gap."""
    state = np.random.RandomState(seed)  # (np.random.seed(seed) then np.random.gamma, one at a time)
    if rates is not None:  # ramp-up: each gap at its request's rate (ramp_rates), and not rescaled
        return np.cumsum(state.gamma(burstiness, 1.0 / (rates * burstiness)))
    t = np.cumsum(state.gamma(burstiness, 1.0 / (rate_rps * burstiness), size=n))
    return t * (n / rate_rps / t[-1]) if t[-1] > 0 else t


def profile_integral(profile: list[tuple[float, float]], t_s: np.ndarray | float) -> np.ndarray:
    """The rate profile's scale integrated from 0 to ``t_s``: the seconds of rate_rps traffic by then."""
    at = np.array([a for a, _ in profile], dtype=float)
    scale = np.array([s for _, s in profile], dtype=float)
    cum = np.concatenate(([0.0], np.cumsum(scale[:-1] * np.diff(at))))
    k = np.searchsorted(at, t_s, side="right") - 1
    return cum[k] + scale[k] * (np.asarray(t_s, dtype=float) - at[k])


def warp_arrivals(u_s: np.ndarray, profile: list[tuple[float, float]]) -> np.ndarray:
    """Arrivals drawn at rate_rps (``u_s``) moved to where a rate of rate_rps x scale(t) puts them:
    t = L^-1(u) with L(t) = the scale integrated to t (``profile_integral``). For Poisson arrivals
    this is the time-rescaling theorem: the result is a Poisson process of that varying rate."""
    at = np.array([a for a, _ in profile], dtype=float)
    scale = np.array([s for _, s in profile], dtype=float)
    cum = profile_integral(profile, at)
    k = np.searchsorted(cum, u_s, side="right") - 1
    return at[k] + (u_s - cum[k]) / scale[k]


def arrivals_to_horizon(
    draw_gaps: Callable[[int], np.ndarray], n: int, horizon_s: float, where: str, chunk: int = 1 << 20
) -> np.ndarray:
    """Arrival times of at most ``n`` requests, drawn ``chunk`` gaps at a time and cut at the horizon.

    Only for a workload too large to draw whole (n > MAX_REQUESTS): the arrivals after the horizon
    are never simulated, so they are not generated. A workload that fits is drawn whole, as before,
    so its random stream (and every existing result) is unchanged."""
    parts: list[np.ndarray] = []
    drawn, t_end = 0, 0.0
    while drawn < n and t_end <= horizon_s:
        gaps = draw_gaps(min(chunk, n - drawn))
        if drawn == 0:
            gaps[0] = 0.0  # the first request arrives at t=0, as in the whole-array generators
        parts.append(gaps)
        drawn += len(gaps)
        t_end += float(gaps.sum())
        if drawn > MAX_REQUESTS + chunk:
            break
    arrivals = np.cumsum(np.concatenate(parts))
    arrivals = arrivals[arrivals <= horizon_s]
    if len(arrivals) > MAX_REQUESTS:
        raise UserError(
            f"{where}: more than {MAX_REQUESTS:,} requests arrive before workload.horizon_s "
            f"({horizon_s:g} s), over the limit per run; lower rate_rps or horizon_s"
        )
    return arrivals


def batch_arrivals(n: int, batch_size: int, interval_s: float) -> np.ndarray:
    """Fixed-size batches all arriving at once, ``interval_s`` apart (offline benchmarks)."""
    return (np.arange(n) // batch_size) * interval_s


def sample_lengths(
    rng: np.random.Generator, spec: dict, n: int, empirical: np.ndarray | None = None, key: str = "length spec"
) -> np.ndarray:
    """Draw ``n`` token counts from a length spec (see docs/scenario.md, ``workload.prompt_tokens``).

    A draw over MAX_TOKENS_PER_REQUEST (a lognormal tail with no ``max``, an overflowing sigma) is
    a UserError naming ``key``: cast to int64 it would wrap to a negative count, later a 1-token prompt."""
    dist = spec["dist"]
    if dist == "fixed":
        out = np.full(n, int(spec["value"]))
    elif dist == "uniform":
        out = rng.integers(int(spec["min"]), int(spec["max"]) + 1, size=n)
    elif dist == "lognormal":
        # parameterised by the median and sigma of log(tokens): easy to read off a trace
        out = np.rint(rng.lognormal(np.log(spec["median"]), spec["sigma"], size=n))
    elif dist == "empirical":
        assert empirical is not None
        out = rng.choice(empirical, size=n, replace=True)
    else:  # pragma: no cover - the scenario schema only admits the names above
        raise ValueError(dist)
    lo, hi = spec.get("min", 0 if dist != "uniform" else None), spec.get("max")
    if dist != "uniform":
        out = np.clip(out, lo if lo is not None else 0, hi if hi is not None else None)
    over = ~np.isfinite(out) | (out > MAX_TOKENS_PER_REQUEST)
    if over.any():
        raise UserError(
            f"{key}: a {dist} draw of {float(out[over][0]):.3g} tokens is over the limit of "
            f"{MAX_TOKENS_PER_REQUEST:,} tokens per request; set `max`"
        )
    return out.astype(np.int64)


def synthetic(arrival_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray, source: str) -> Workload:
    return Workload(arrival_s, np.maximum(prompt_tokens, 1), np.maximum(output_tokens, 0), source=source)


SYNTH_HASH_TOKENS = 16  # tokens per content id in synthetic prefix ids
_SYSTEM_BASE = 1 << 40  # content ids of system prompts (disjoint from per-request ids)


def whole_ids(tokens: int) -> int:
    """Synthetic content ids covering ``tokens`` tokens (the last one partly filled)."""
    return -(-tokens // SYNTH_HASH_TOKENS)


def system_prompt_ids(count: int, tokens: int) -> list[list[int]]:
    """Content ids of ``count`` distinct system prompts of ``tokens`` tokens each."""
    per = whole_ids(tokens)
    _check_ids(count * per, "workload.system_prompts", "count x tokens")
    return [_system_prompt(p, per) for p in range(count)]


def _system_prompt(p: int, per: int) -> list[int]:
    """The content ids of system prompt ``p`` (of ``per`` ids)."""
    return [_SYSTEM_BASE + p * per + j for j in range(per)]


def _unique_ids(w: Workload) -> list[list[int]]:
    """Existing ids, or fresh ids unique to each request (nothing shared)."""
    if w.block_hashes is not None:
        return [list(h) for h in w.block_hashes]
    out, nxt = [], 0
    for p in w.prompt_tokens:
        per = whole_ids(int(p))
        out.append(list(range(nxt, nxt + per)))
        nxt += per
    return out


def zipf_weights(n: int, exponent: float) -> np.ndarray:
    """Popularity of ``n`` ranked items, the i-th (from 1) weighing 1 / i^exponent, normalised to
    sum to 1 (0 = uniform): system prompts, LoRA adapters, MoE experts (eplb.py)."""
    weights = 1.0 / np.arange(1, n + 1, dtype=float) ** exponent
    return weights / weights.sum()


def with_system_prompts(
    rng: np.random.Generator, w: Workload, count: int, tokens: int, share: float, zipf: float
) -> Workload:
    """Prefix ``share`` of the requests with one of ``count`` shared system prompts (Zipf-popular
    with exponent ``zipf``; 0 = uniform). Prompts grow by ``tokens`` (rounded to whole ids)."""
    n = len(w)
    per = whole_ids(tokens)  # every prefixed request repeats its prompt's ids
    _check_ids(n * per, "workload.system_prompts", "requests x tokens")
    sys_tokens = per * SYNTH_HASH_TOKENS
    pick = rng.choice(count, size=n, p=zipf_weights(count, zipf))
    has = rng.random(n) < share
    ids = _unique_ids(w)
    # only the prompts some request picked are made (count may far exceed the requests)
    prompts = {int(p): _system_prompt(int(p), per) for p in np.unique(pick[has])}
    hashes = [prompts[pick[i]] + ids[i] if has[i] else ids[i] for i in range(n)]
    return Workload(
        w.arrival_s,
        w.prompt_tokens + np.where(has, sys_tokens, 0),
        w.output_tokens,
        klass=w.klass,
        block_hashes=hashes,
        output_hashes=w.output_hashes,
        hash_block_tokens=SYNTH_HASH_TOKENS,
        source=f"{w.source} + {count} system prompt(s) of {sys_tokens} tokens",
        meta=dict(w.meta, system_prompt_tokens=sys_tokens),
        after_ptr=w.after_ptr,
        after_idx=w.after_idx,
        delay_s=w.delay_s,
        session=w.session,
    )


def vllm_bench_prompts(w: Workload, seed: int, by_count: bool) -> Workload:
    """Prompt content as `vllm bench serve`'s random dataset draws it (vllm/benchmarks/datasets.py,
    RandomDataset): request i's tokens run on from a random offset drawn with the seed, so one seed
    gives every run the same prompts. With fixed lengths numpy draws nothing for them (a range of 0),
    the offsets are the stream's first draws and the first N prompts are the same whatever
    --num-prompts is (``by_count`` False: the records of docs/validation.md show it); with random
    lengths the count's draws come first, so only runs of the same count repeat. A shared prefix
    (--random-prefix-len, workload.system_prompts) is the seed's too. (vllm bench's test request, its
    first prompt sent alone before the run, is not modelled: vLLM 0.30 skips it unless
    --ready-check-timeout-sec is above 0, and the records it was checked on show no such request.)"""
    n = len(w)
    prefix = int(w.meta.get("system_prompt_tokens", 0))  # (whole ids: with_system_prompts rounds it)
    _check_ids(bench_content_ids(1, int(w.prompt_tokens.sum())), *BENCH_IDS)
    head = segment_block_ids([_bench_prefix(seed, prefix)], SYNTH_HASH_TOKENS) if prefix else []
    own = (w.prompt_tokens - prefix) // SYNTH_HASH_TOKENS  # each prompt's own full blocks
    base = segment_key("vllm_bench", seed, n) if by_count else segment_key("vllm_bench", seed)
    ids = [head + block_ids for block_ids in _stream_ids(base, own)]
    return dataclasses.replace(
        w,
        block_hashes=ids,
        hash_block_tokens=SYNTH_HASH_TOKENS,
        source=f"{w.source}, vllm bench's random prompts (seed {seed})",
    )


BENCH_IDS = ("workload.prompts", "vllm_bench's prompts (num_requests x their tokens)")


def bench_content_ids(requests: int, prompt_tokens: int) -> int:
    """Content ids ``vllm_bench_prompts`` gives ``requests`` prompts of ``prompt_tokens`` each (one
    per full SYNTH_HASH_TOKENS-token block)."""
    return requests * (prompt_tokens // SYNTH_HASH_TOKENS)


def check_bench_prompt_ids(requests: int, shortest_tokens: int) -> None:
    """``vllm_bench_prompts``' bound, checked before drawing: ``requests`` prompts of at least
    ``shortest_tokens`` each."""
    _check_ids(bench_content_ids(requests, shortest_tokens), *BENCH_IDS)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise (uint64, wrapping): a well-spread 64-bit hash."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _stream_ids(base: int, blocks: np.ndarray) -> list[list[int]]:
    """Content ids of request i's ``blocks[i]`` blocks of its own token stream, named by (``base``,
    i, block): equal exactly where two requests' streams are (the same i under one base). Computed
    at once with numpy, not hashed block by block (a 5,000-prompt run has ~640k of them); in
    [2**61, 2**62), apart from the small synthetic ids and most segment ids."""
    counts = np.asarray(blocks, dtype=np.int64)
    total = int(counts.sum())
    req = np.repeat(np.arange(len(counts), dtype=np.uint64), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    pos = (np.arange(total, dtype=np.int64) - starts).astype(np.uint64)
    keys = _mix64(np.full(total, base, dtype=np.uint64) ^ ((req + np.uint64(1)) * _GOLDEN))
    ids = (_mix64(keys + pos * _GOLDEN) >> np.uint64(3)) | np.uint64(1 << 61)
    flat = ids.tolist()
    edges = np.cumsum(counts).tolist()
    return [flat[a:b] for a, b in zip([0, *edges[:-1]], edges, strict=True)]


def _bench_prefix(seed: int, tokens: int) -> tuple[int, int]:
    return segment_key("vllm_bench_prefix", seed), tokens


def vllm_bench_prefix_ids(seed: int, tokens: int) -> list[int]:
    """Content ids of the shared prefix of ``vllm_bench_prompts`` (``tokens`` rounded up to whole
    ids, as ``with_system_prompts`` rounds it): what ``system_prompts.prewarm`` caches for them."""
    return segment_block_ids([_bench_prefix(seed, whole_ids(tokens) * SYNTH_HASH_TOKENS)], SYNTH_HASH_TOKENS)


def lora_adapters(rng: np.random.Generator, w: Workload, adapters: int, share: float, zipf: float) -> np.ndarray:
    """Each request's LoRA adapter (-1: none): ``share`` of them run with one of ``adapters``
    adapters, Zipf-popular with exponent ``zipf`` (0 = uniform); a session's calls (conversation
    turns, sub-calls) all use its first one's, as one user or agent talks to one fine-tuned model."""
    n = len(w)
    pick = rng.choice(adapters, size=n, p=zipf_weights(adapters, zipf))
    out = np.where(rng.random(n) < share, pick, -1).astype(np.int64)
    if w.session is not None:
        first = {}
        sessions = w.session.tolist()
        for i, sid in enumerate(sessions):
            first.setdefault(sid, i)
        out = out[[first[sid] for sid in sessions]]
    return out


class _IdSource:
    """Made-up content ids for synthetic text, one per SYNTH_HASH_TOKENS-token block, never reused."""

    def __init__(self) -> None:
        self.next = 0

    def fresh(self, tokens: int) -> list[int]:
        per = whole_ids(tokens)
        self.next += per
        return list(range(self.next - per, self.next))


def _check_ids(
    total: int, key: str = "workload.conversations", what: str = "the turns' prompts, each turn repeating the history"
) -> None:
    """Synthetic prefix ids are Python ints in lists (conversations build each turn's ids from
    the whole history: ids grow with turns squared): stop at MAX_PREFIX_BLOCKS, while building,
    rather than run out of memory."""
    if total > MAX_PREFIX_BLOCKS:
        raise UserError(
            f"{key}: {what} need more than {MAX_PREFIX_BLOCKS:,} content ids for prefix caching (one per "
            f"{SYNTH_HASH_TOKENS}-token block, ~56 bytes each); make them fewer or shorter"
        )


def conversations(rng: np.random.Generator, w: Workload, turns: int, think_s: float) -> Workload:
    """Turn each request into a conversation of ``turns`` turns. Turn t's prompt is the history
    (earlier prompts and answers) plus the new message, so it shares the history's prefix ids.
    Later turns arrive an exponential think time apart; the result is re-sorted by arrival."""
    arr, prm, out, kls, ids, answers = [], [], [], [], [], []
    fresh = _IdSource().fresh
    total = 0

    n = len(w)
    for i in range(n):
        t = float(w.arrival_s[i])
        history: list[int] = []
        for turn in range(turns):
            msg = fresh(int(w.prompt_tokens[(i + turn * 7919) % n]))  # a new message per turn
            hist_tokens = len(history) * SYNTH_HASH_TOKENS
            arr.append(t)
            prm.append(hist_tokens + int(w.prompt_tokens[(i + turn * 7919) % n]))
            o = int(w.output_tokens[(i + turn * 104729) % n])
            out.append(o)
            kls.append(None if w.klass is None else w.klass[i])
            ids.append(history + msg)
            total += len(ids[-1])
            _check_ids(total)
            answers.append(fresh(max(o, 1)))
            history = history + msg + answers[-1]  # the answer joins the history
            t += float(rng.exponential(think_s)) if think_s > 0 else 0.0
    order = np.argsort(np.asarray(arr), kind="stable")
    return Workload(
        np.asarray(arr)[order],
        np.asarray(prm)[order],
        np.asarray(out)[order],
        klass=None if w.klass is None else np.asarray(kls, dtype=object)[order],
        block_hashes=[ids[j] for j in order],
        output_hashes=[answers[j] for j in order],
        hash_block_tokens=SYNTH_HASH_TOKENS,
        source=f"{w.source} as {turns}-turn conversations",
        meta=dict(w.meta, turns=turns, think_s=think_s),
    )


def closed_loop_conversations(
    rng: np.random.Generator, w: Workload, turns: int, think_s: float, fanout: int
) -> Workload:
    """Turn each request into a closed-loop session of ``turns`` calls (a user or an agent that
    reads each answer before the next call): turn t is sent an exponential think time (mean
    ``think_s``) after turn t-1 is answered, and its prompt is the history (earlier prompts,
    answers and sub-call results) plus a new message, so it shares the history's prefix ids.
    After every turn but the last, ``fanout`` sub-calls (tool or sub-agent calls) are sent as soon
    as the turn is answered, in parallel, each with the history plus its own message as its
    prompt; the next turn waits for all of them and carries their outputs as tool results.

    Requests are ordered session by session (each session's calls in the order they can be sent)
    and every call carries its session's start as ``arrival_s``, the earliest it could be sent;
    ``after_ptr`` / ``after_idx`` say which calls each waits for and ``delay_s`` how long after the
    last of them answers it is sent (sim: ``feeder.Feeder``)."""
    arr, prm, out, kls, ids, deps_of, delays, session = [], [], [], [], [], [], [], []
    answers: list[list[int]] = []
    fresh = _IdSource().fresh
    total = 0

    n = len(w)

    def draw(i: int, salt: int) -> tuple[int, int]:  # a (prompt, output) pair from the base workload
        return int(w.prompt_tokens[(i + salt * 7919) % n]), int(w.output_tokens[(i + salt * 104729) % n])

    for i in range(n):
        t0 = float(w.arrival_s[i])
        history: list[int] = []
        waits_on: list[int] = []  # the calls the next turn waits for
        for turn in range(turns):
            new, o = draw(i, turn * (fanout + 1))
            msg = fresh(new)
            me = len(arr)
            arr.append(t0)
            prm.append(len(history) * SYNTH_HASH_TOKENS + new)
            out.append(o)
            kls.append(None if w.klass is None else w.klass[i])
            ids.append(history + msg)
            total += len(ids[-1])
            _check_ids(total)
            deps_of.append(waits_on)
            delays.append(float(rng.exponential(think_s)) if turn and think_s > 0 else 0.0)
            session.append(i)
            answers.append(fresh(max(o, 1)))
            history = history + msg + answers[-1]  # the answer joins the history
            waits_on = [me]
            if turn == turns - 1 or not fanout:
                continue
            results: list[int] = []
            waits_on = []
            for j in range(fanout):
                new, o = draw(i, turn * (fanout + 1) + j + 1)
                waits_on.append(len(arr))
                arr.append(t0)
                prm.append(len(history) * SYNTH_HASH_TOKENS + new)
                out.append(o)
                kls.append(None if w.klass is None else w.klass[i])
                ids.append(history + fresh(new))
                total += len(ids[-1])
                _check_ids(total)
                deps_of.append([me])
                delays.append(0.0)  # sent as soon as the turn's answer asks for it
                session.append(i)
                answers.append([])  # its result joins the history after the turn's, not after its own prompt
                results += fresh(max(o, 1))
            history = history + results  # the sub-calls' outputs come back as tool results
    ptr = np.zeros(len(arr) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps_of])
    return Workload(
        np.asarray(arr),
        np.asarray(prm),
        np.asarray(out),
        klass=None if w.klass is None else np.asarray(kls, dtype=object),
        block_hashes=ids,
        output_hashes=answers,
        hash_block_tokens=SYNTH_HASH_TOKENS,
        source=f"{w.source} as {turns}-turn closed-loop sessions"
        + (f", {fanout} sub-calls per turn" if fanout else ""),
        meta=dict(w.meta, turns=turns, think_s=think_s, closed_loop=True, fanout=fanout),
        after_ptr=ptr,
        after_idx=np.asarray([j for d in deps_of for j in d], dtype=np.int64),
        delay_s=np.asarray(delays, dtype=np.float64),
        session=np.asarray(session, dtype=np.int64),
    )


def shared_prefix(
    rng: np.random.Generator,
    arrival_s: np.ndarray,
    system_prompt_len: int,
    question_len: np.ndarray,
    output_len: np.ndarray,
    multi_turn: bool,
    block_tokens: int,
    order_kind: str = "llmsim",
    seed: int = 0,
) -> Workload:
    """inference-perf's ``shared_prefix`` data on an arrival process.

    ``question_len`` / ``output_len`` are (groups, users per group) arrays: user (g, u) has a
    question of ``question_len[g, u]`` tokens after group g's system prompt of
    ``system_prompt_len`` tokens, and gets ``output_len[g, u]`` tokens back (in full, as with
    ``ignore_eos``). The users are shuffled once (``order_kind``: llmsim's ``rng``; ``vllm_bench``,
    as vllm bench serve's prefix_repetition dataset shuffles its requests, listed group by group:
    Python's ``random`` seeded with ``seed``; ``fixed``: group by group); request i goes to user
    i mod P (P = groups x users). Single turn: every request of a user repeats its prompt (system prompt +
    question). Multi-turn: request i is round i // P of its user's chat: its prompt is the whole
    chat so far (system prompt, then each earlier question and answer) plus a new question.

    Prompt content is named, not sampled (identity.segment_block_ids): prompts share exactly their
    common system prompt / chat history, hashed into chained ids of ``block_tokens`` tokens."""
    groups, per = question_len.shape
    users = [(g, u) for g in range(groups) for u in range(per)]
    if order_kind == "vllm_bench":  # (its prefix_repetition dataset's order: listed group by group)
        order = np.array(bench_order(len(users), seed), dtype=np.int64)
    else:
        order = np.arange(len(users)) if order_kind == "fixed" else rng.permutation(len(users))
    n = len(arrival_s)
    # every prompt's length first (request i: user order[i mod P], round i // P, whose chat holds
    # the system prompt, the earlier rounds' questions and answers and the new question), to
    # refuse a workload whose content ids would not fit before making any
    user = order[np.arange(n) % len(users)]
    q_user = question_len.reshape(-1)[user].astype(np.int64)
    rounds = np.arange(n) // len(users) if multi_turn else np.zeros(n, dtype=np.int64)
    lengths = system_prompt_len + rounds * (q_user + output_len.reshape(-1)[user]) + q_user
    check_prefix_blocks(lengths, block_tokens, "workload.shared_prefix")
    prm = np.zeros(n, dtype=np.int64)
    out = np.zeros(n, dtype=np.int64)
    ids: list[list[int]] = []
    answers: list[list[int]] = []  # multi-turn: the ids the answer's blocks continue the prompt with
    state: dict[int, tuple[list[tuple[int, int]], list[int]]] = {}  # user -> (chat so far, its ids)
    for i in range(n):
        k = int(order[i % len(users)])
        g, u = users[k]
        q, o = int(question_len[g, u]), int(output_len[g, u])
        rnd = i // len(users) if multi_turn else 0
        if k in state:
            history, known = state[k]
        else:
            history, known = [(segment_key("system", g), system_prompt_len)], []
        segments = [*history, (segment_key("question", g, u, rnd), q)]
        chain = segment_block_ids(segments, block_tokens, known)
        prm[i] = sum(length for _, length in segments)
        out[i] = o
        ids.append(chain)
        if multi_turn:  # the answer joins the chat; the next turn's prompt extends this one
            chat = [*segments, (segment_key("answer", g, u, rnd), o)]
            answers.append(segment_block_ids(chat, block_tokens, chain)[len(chain) :])
            state[k] = (chat, chain)
        else:
            state[k] = (history, chain)
    assert (prm == lengths).all()  # the lengths checked are the prompts made
    mode = "multi-turn chats" if multi_turn else "single-turn prompts"
    return Workload(
        arrival_s,
        prm,
        out,
        block_hashes=ids,
        output_hashes=answers if multi_turn else None,
        hash_block_tokens=block_tokens,
        source=f"shared_prefix: {groups} system prompt(s) of {system_prompt_len} tokens x {per} users, {mode}",
        meta={"shared_prefix_groups": groups, "shared_prefix_users": groups * per},
    )
