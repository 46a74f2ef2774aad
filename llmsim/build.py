"""Scenario -> the objects a simulation runs on: workload, model, devices, cost models, KV capacity."""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from llmsim.costmodel import CostConfig, CostModel
from llmsim.costmodel.ops import DEEPEP_BACKENDS, deepep_ranks, storage_of
from llmsim.engine import VLLM_DEFAULT_SIZES, EngineSpec, for_hardware, for_stages, graph_plan, is_trtllm
from llmsim.errors import UserError
from llmsim.hardware import HardwareProfile, cpu_subset, file_version, load_profile
from llmsim.models import DTYPE_BYTES, ModelSpec, get_model, weight_groups
from llmsim.moejit import MoeJitSpec, moe_jit_spec
from llmsim.scenario import PoolConfig, Scenario, pool_configs, scenario_model
from llmsim.schedulers import SchedulerConfig
from llmsim.schedulers.base import SpecConfig
from llmsim.workload import generators as gen
from llmsim.workload.base import Workload, slice_and_scale
from llmsim.workload.limits import (
    MAX_ARRIVAL_S,
    MAX_PREFIX_BLOCKS,
    MAX_REQUESTS,
    as_float,
    check_requests,
    check_tokens,
)


def build_model(sc: Scenario) -> ModelSpec:
    m = scenario_model(sc)
    if sc.model.weight_dtype and sc.model.weight_dtype != m.weight_dtype:  # (another format: its own groups,
        # not the checkpoint's: an AWQ checkpoint's 128-weight groups are not NVFP4's 16)
        m = m.with_(weight_dtype=sc.model.weight_dtype, weight_group_size=None, weight_scale_bits=None)
    return _with_groups(sc, _with_window(sc, m))


def _with_window(sc: Scenario, m: ModelSpec) -> ModelSpec:
    """``model.sliding_window``: the window the engine runs the model's windowed layers with (0:
    none). A model without windowed layers has only 0 to take: a number would be a new model."""
    window = sc.model.sliding_window
    if window is None:
        return m
    if window and (m.sliding_window is None or m.is_mla):
        what = "multi-head latent attention attends to the whole context" if m.is_mla else "it has no windowed layers"
        raise UserError(
            f"model.sliding_window: {window:,} for {m.name}, but {what}; 0 (full attention) is its one "
            "setting (a model with a window of its own: model.hf_config)"
        )
    return m.with_(sliding_window=window or None)


def _with_groups(sc: Scenario, m: ModelSpec) -> ModelSpec:
    """``model.weight_group_size`` / ``weight_scale_bits``: the quantised weights' groups. Each
    refused where nothing would read it: groups on 16- or 32-bit weights, scale bits without groups."""
    size, bits = sc.model.weight_group_size, sc.model.weight_scale_bits
    if size is None and bits is None:
        return m
    key = "weight_group_size" if size is not None else "weight_scale_bits"
    if DTYPE_BYTES[m.weight_dtype] >= 2 and (size or bits is not None):
        raise UserError(
            f"model.{key}: quantisation groups need quantised weights (model.weight_dtype "
            f"fp8, int8, int4 or fp4); {m.name}'s weights are {m.weight_dtype}"
        )
    group, _ = weight_groups(m.weight_dtype, size)
    if bits is not None and not group:
        raise UserError(
            f"model.weight_scale_bits: {m.name}'s {m.weight_dtype} weights have no quantisation groups "
            f"(weight_group_size {group}: a scale per channel), so nothing reads the bits; give "
            "model.weight_group_size or drop weight_scale_bits"
        )
    return m.with_(weight_group_size=size, weight_scale_bits=bits)


def _trace(path: Path, fmt: str, hash_block_tokens: int, window: tuple | None = None) -> Workload:
    """``load_trace``, kept for the next call with the same file version (``hardware.file_version``),
    name (the workload's ``source`` says it), format, hash block and id window: a sweep or plan reads one trace
    at every point (9 ms each for the Azure conversation trace, a tenth of a plan point)."""
    from llmsim.workload.traces import load_trace  # pandas: only when a trace is read

    try:
        version = file_version(Path(path))
    except (OSError, RuntimeError):
        return load_trace(path, fmt, hash_block_tokens, window)  # (it says what is wrong with the file)
    return _read_trace(str(path), version, fmt, hash_block_tokens, window)


@functools.lru_cache(maxsize=1)
def _read_trace(
    shown: str, version: tuple[str, int, int, int, int, int], fmt: str, hash_block_tokens: int, window: tuple | None
) -> Workload:
    """The last trace read (memory holds one trace at most); ``slice_and_scale`` copies what a run
    uses, so the kept one is never changed."""
    from llmsim.workload.traces import load_trace

    return load_trace(Path(shown), fmt, hash_block_tokens, window)


def _id_window(sc: Scenario) -> tuple | None:
    """The rows of a generic trace with prompt ids that a run keeps, for which alone its content
    ids are made (``load_generic``); None (the whole file, one cache entry for every window) where
    there are none to make."""
    from llmsim.workload.traces import names_prompts

    t = sc.workload.trace
    assert t is not None
    if t.format != "generic" or not names_prompts(sc.path(t.path)):
        return None
    return (t.start_s, t.duration_s, t.max_requests)


def build_workload(sc: Scenario) -> Workload:
    w = sc.workload
    rng = np.random.default_rng(sc.seed)
    origin = sc._origin
    if w.kind == "trace":
        assert w.trace is not None
        t = w.trace
        wl = _trace(sc.path(t.path), t.format, t.hash_block_tokens or sc.kv_cache.block_tokens, _id_window(sc))
        wl = slice_and_scale(wl, t.start_s, t.duration_s, t.max_requests, t.speedup)
        if wl.lora is not None and (wl.lora >= 0).any() and sc.lora is None:
            raise UserError(
                f"{sc.path(t.path)}: column (or field) 'lora' names LoRA adapters; serving them needs a `lora:` section "
                "(max_loras, max_lora_rank)"
            )
    else:
        check_workload_bounds(sc)  # (the seed too; a sweep runs it on every point first)
        if w.dataset is not None:
            wl = _dataset(sc, rng, origin)
            wl.validate(f"workload of {sc.name}")
            return wl
        arrivals = _arrivals(sc, rng, origin)
        if w.shared_prefix is not None:
            s = w.shared_prefix
            shape = (s.num_groups, s.num_prompts_per_group)

            def per_user(key: str, spec: object, name: str) -> np.ndarray:  # one length per user, group by group
                if isinstance(spec, int):
                    return np.full(shape, spec, dtype=np.int64)
                where = f"{origin}: workload.shared_prefix.{name}"
                return np.stack([_lengths(sc, key, rng, shape[1], spec, where) for _ in range(shape[0])])

            q = np.maximum(per_user("prompt_tokens", s.question_len, "question_len"), 1)
            o = np.maximum(per_user("output_tokens", s.output_len, "output_len"), 1)
            _check_shared_prefix_prompt(sc, len(arrivals), q, o, origin)
            wl = gen.shared_prefix(
                rng,
                arrivals,
                s.system_prompt_len,
                q,
                o,
                s.enable_multi_turn_chat,
                sc.kv_cache.block_tokens,
                s.order,
                sc.seed,
            )
        else:
            wl = _synthetic(sc, rng, arrivals)
    wl.validate(f"workload of {sc.name}")
    return wl


def check_workload_bounds(sc: Scenario) -> None:
    """The size bounds ``build_workload`` enforces (tokens per request, requests per run), checked
    without drawing anything: a sweep checks every point with it before the first one runs."""
    if sc.workload.kind == "trace":
        return  # a trace's rows are checked as it is read
    w = sc.workload
    if w.sends_as_vllm_bench and sc.seed >= 2**32:
        raise UserError(
            f"{sc._origin}: seed: {sc.seed} is too large for arrivals: vllm_bench, which seeds numpy's global "
            "generator as vllm bench serve's --seed does (below 2**32)"
        )
    _check_sizes(sc, sc._origin)
    n = _request_count(sc)
    if _drawn_to_horizon(sc, n):
        return  # drawn only up to the horizon, whose own count _arrivals_to_horizon checks
    check_requests(n, _count_key(sc), sc._origin)
    rate = w.rate_rps if w.ramp_up is None else w.ramp_up.start_rps  # (a ramp: its slowest, a bound)
    key = "workload.rate_rps" if w.ramp_up is None else "workload.ramp_up.start_rps"
    if (
        w.kind in ("poisson", "gamma")
        and w.num_requests
        and rate
        and w.rate_profile is None
        and n / rate > MAX_ARRIVAL_S
    ):
        raise UserError(  # (the draw's own check, before drawing: its span is about n / rate)
            f"{sc._origin}: workload.num_requests / {key}: {n:,.0f} requests at {rate:g} req/s arrive "
            f"over ~{n / rate:.3g} s, past {MAX_ARRIVAL_S:.0e} s (~32 years); raise the rate or send fewer"
        )
    spec = w.prompt_tokens
    if w.prompts == "vllm_bench" and w.num_requests and spec is not None:
        # their content ids, before drawing them (the shortest each prompt can be; build_workload
        # checks the drawn ones)
        shortest = (spec.value or spec.min or 0) + (w.system_prompts.tokens if w.system_prompts else 0)
        gen.check_bench_prompt_ids(w.num_requests, shortest)


def _drawn_to_horizon(sc: Scenario, n: float) -> bool:
    """Whether a synthetic workload of ``n`` requests is drawn only up to ``workload.horizon_s``:
    past MAX_REQUESTS, where a horizon is given (not for vllm bench serve's arrivals, which it
    draws whole before it sends, nor a dataset's requests, which it samples whole)."""
    w = sc.workload
    return n > MAX_REQUESTS and w.horizon_s is not None and not w.sends_as_vllm_bench and w.dataset is None


def _request_count(sc: Scenario) -> float:
    """Requests the synthetic workload asks for, as a float: rate x duration may be astronomically large."""
    w = sc.workload
    if w.num_requests:
        return as_float(w.num_requests)  # (inf past the float range: the limit check refuses it)
    seconds = w.duration_s or 0  # seconds of rate_rps traffic in the duration
    if w.rate_profile is not None:
        seconds = float(gen.profile_integral(w.rate_profile, seconds))
    x = (w.rate_rps or 0) * seconds
    return x if not math.isfinite(x) else float(max(1, round(x)))  # round(inf) would raise


def _count_key(sc: Scenario) -> str:
    if sc.workload.num_requests:
        return "workload.num_requests"
    if sc.workload.rate_profile is not None:
        return "workload.rate_rps x workload.rate_profile over workload.duration_s"
    return "workload.rate_rps x workload.duration_s"


def _dataset(sc: Scenario, rng: np.random.Generator, origin: str) -> Workload:
    """The requests of a benchmark's dataset (``workload.dataset``), in the order it sends them,
    at the workload's arrival times; each prompt's token ids hashed into the prefix cache's block
    ids at the scenario's block size (exact, as a trace's token ids are)."""
    from llmsim.workload import custom, sharegpt
    from llmsim.workload.identity import token_block_ids

    w = sc.workload
    d = w.dataset
    assert d is not None
    tokenizer = sc.path(d.tokenizer)  # (a path beside the scenario, else a model id as written)
    args = (
        sc.path(d.path),
        str(tokenizer) if tokenizer.exists() else d.tokenizer,
        int(_request_count(sc)),
        sc.seed,
        d.output_tokens,
        d.shuffle,
        d.oversample,
    )
    where = f"{origin}: workload.dataset"
    if d.name == "custom":
        samples = custom.sample(*args, chat_template=d.chat_template, where=where)
    else:
        samples = sharegpt.sample(*args, where=where)
    # (without oversampling a file may hold fewer: vllm bench sends those, at times drawn for them)
    arrivals = _arrivals(sc, rng, origin, count=len(samples))
    block = sc.kv_cache.block_tokens
    wl = gen.synthetic(
        arrivals,
        np.array([len(s.prompt_ids) for s in samples], dtype=np.int64),
        np.array([s.output_tokens for s in samples], dtype=np.int64),
        source=f"{d.name} {Path(d.path).name} (seed {sc.seed})",
    )
    wl.block_hashes = [token_block_ids(s.prompt_ids, block) for s in samples]
    wl.hash_block_tokens = block
    if w.lora is not None:
        wl.lora = gen.lora_adapters(rng, wl, w.lora.adapters, w.lora.share, w.lora.zipf)
    return wl


def _arrivals(sc: Scenario, rng: np.random.Generator, origin: str, count: int | None = None) -> np.ndarray:
    """Arrival times, drawn whole when the count fits MAX_REQUESTS (unchanged since before the
    limit), else only up to ``workload.horizon_s`` (arrivals after it are never simulated). The
    count's bound is checked first, by ``check_workload_bounds``; ``count``: a smaller one to draw
    (a dataset holding fewer requests than asked)."""
    w = sc.workload
    n = _request_count(sc) if count is None else count
    if _drawn_to_horizon(sc, n):
        return _arrivals_to_horizon(sc, rng, n, w.horizon_s or 0.0, origin)  # (a horizon: _drawn_to_horizon)
    n = int(n)
    # with a profile over a duration, one arrival more is drawn and the n before it are spread
    # so that it falls at the duration's end: the last stretch of traffic is where it should be
    # even where the profile's scale is small (its random end would be stretched by 1 / scale)
    extra = int(w.rate_profile is not None and not w.num_requests)
    ramp = w.ramp_up
    rates = None if ramp is None else gen.ramp_rates(ramp.strategy, ramp.start_rps, ramp.end_rps, n)
    if w.sends_as_vllm_bench:  # (its own generator: see vllm_bench_arrivals)
        burstiness = 1.0 if w.kind == "poisson" else 1.0 / (w.cv * w.cv)
        return gen.vllm_bench_arrivals(sc.seed, w.rate_rps or 0.0, burstiness, n, rates)
    if rates is not None:
        return gen.ramp_arrivals(rng, rates, w.cv if w.kind == "gamma" else 1.0)
    if w.kind == "poisson":
        t = gen.poisson_arrivals(rng, w.rate_rps, n + extra)  # type: ignore[arg-type]
    elif w.kind == "gamma":
        t = gen.gamma_arrivals(rng, w.rate_rps, w.cv, n + extra)  # type: ignore[arg-type]
    else:
        return gen.batch_arrivals(n, w.batch_size, w.batch_interval_s)
    if w.rate_profile is None:
        return t
    if extra:
        end_u = float(gen.profile_integral(w.rate_profile, w.duration_s or 0.0))
        t = t[:n] * (end_u / t[n]) if t[n] > 0 else t[:n]
    return _warped(t, w.rate_profile, origin)


def _warped(u_s: np.ndarray, profile: list[tuple[float, float]], origin: str) -> np.ndarray:
    t = gen.warp_arrivals(u_s, profile)
    if len(t) and not t[-1] <= MAX_ARRIVAL_S:
        raise UserError(
            f"{origin}: workload.rate_profile: its last scale puts arrivals at {t[-1]:.3g} s, past {MAX_ARRIVAL_S:.0e} s "
            "(about 32 years); raise the small scales or give workload.duration_s"
        )
    return t


def _arrivals_to_horizon(sc: Scenario, rng: np.random.Generator, n: float, horizon_s: float, origin: str) -> np.ndarray:
    """The arrivals before the horizon of a workload too large to draw whole; the expected count
    (rate x horizon) is checked first, so the drawing itself stays bounded."""
    w = sc.workload
    if w.kind == "all_at_once":
        batches = math.floor(horizon_s / w.batch_interval_s) + 1 if w.batch_interval_s > 0 else math.inf
        expected = min(n, batches * w.batch_size)
        check_requests(expected, f"{_count_key(sc)} (before workload.horizon_s)", origin)
        return gen.batch_arrivals(int(expected), w.batch_size, w.batch_interval_s)
    rate = float(w.rate_rps or 0)
    profile = w.rate_profile
    horizon_u = horizon_s if profile is None else float(gen.profile_integral(profile, horizon_s))  # at rate_rps
    key = (
        "workload.rate_rps x workload.horizon_s"
        if profile is None
        else "workload.rate_rps x workload.rate_profile over workload.horizon_s"
    )
    check_requests(rate * horizon_u, key, origin)
    if w.kind == "poisson":
        draw = lambda k: rng.exponential(1.0 / rate, size=k)  # noqa: E731 - same draws as poisson_arrivals
    else:
        shape = 1.0 / (w.cv * w.cv)
        draw = lambda k: rng.gamma(shape, 1.0 / (rate * shape), size=k)  # noqa: E731
    t = gen.arrivals_to_horizon(draw, int(min(n, 2**62)), horizon_u, origin)
    return t if profile is None else _warped(t, profile, origin)


def _check_sizes(sc: Scenario, origin: str) -> None:
    """Token bounds of every length spec and system prompt, and the request count of
    conversations, before anything is drawn."""
    w = sc.workload
    specs = [("workload.prompt_tokens", w.prompt_tokens), ("workload.output_tokens", w.output_tokens)]
    for name, c in sorted(w.classes.items()):
        specs += [(f"workload.classes.{name}.prompt_tokens", c.prompt_tokens)]
        specs += [(f"workload.classes.{name}.output_tokens", c.output_tokens)]
    if w.dataset is not None and w.dataset.output_tokens is not None:
        check_tokens(w.dataset.output_tokens, "workload.dataset.output_tokens", origin)
    if w.shared_prefix is not None:
        s = w.shared_prefix
        check_tokens(s.system_prompt_len, "workload.shared_prefix.system_prompt_len", origin)
        check_requests(s.num_groups * s.num_prompts_per_group, "workload.shared_prefix (num_groups x users)", origin)
        for name in ("question_len", "output_len"):
            spec = getattr(s, name)
            if isinstance(spec, int):
                check_tokens(spec, f"workload.shared_prefix.{name}", origin)
            else:
                specs.append((f"workload.shared_prefix.{name}", spec))
    for key, spec in specs:
        for field in ("value", "min", "max", "median") if spec is not None else ():
            if getattr(spec, field) is not None:
                check_tokens(getattr(spec, field), f"{key}.{field}", origin)
    if w.system_prompts is not None:
        check_tokens(w.system_prompts.tokens, "workload.system_prompts.tokens", origin)
        check_requests(w.system_prompts.count, "workload.system_prompts.count", origin)
    if w.conversations is not None:
        c = w.conversations
        key = "workload.num_requests x workload.conversations.turns"
        if c.fanout:
            key = "workload.num_requests x (conversations.turns + fanout x (turns - 1))"
        check_requests(_request_count(sc) * c.calls, key, origin)


def _check_shared_prefix_prompt(sc: Scenario, n: int, q: np.ndarray, o: np.ndarray, origin: str) -> None:
    """The longest prompt shared_prefix will build (multi-turn: the last round's whole chat)."""
    s = sc.workload.shared_prefix
    assert s is not None
    rounds = -(-n // q.size) if s.enable_multi_turn_chat else 1
    longest = s.system_prompt_len + (rounds - 1) * int((q + o).max()) + int(q.max())
    check_tokens(longest, "workload.shared_prefix (system_prompt_len + the longest chat)", origin)


def _synthetic(sc: Scenario, rng: np.random.Generator, arrivals: np.ndarray) -> Workload:
    """Lengths (per class if the workload mixes classes), then conversations and system prompts."""
    w = sc.workload
    n = len(arrivals)
    klass = None
    if w.classes:
        names = sorted(w.classes)
        shares = np.array([w.classes[k].share for k in names])
        pick = rng.choice(len(names), size=n, p=shares / shares.sum())
        klass = np.array(names, dtype=object)[pick]
        prompts = np.zeros(n, dtype=np.int64)
        outputs = np.zeros(n, dtype=np.int64)
        for i, name in enumerate(names):
            sel = pick == i
            c = w.classes[name]
            where = f"{sc._origin}: workload.classes.{name}"
            # a class without its own spec draws from the workload's, reported under the workload's key
            p_where = where + ".prompt_tokens" if c.prompt_tokens else ""
            o_where = where + ".output_tokens" if c.output_tokens else ""
            prompts[sel] = _lengths(sc, "prompt_tokens", rng, int(sel.sum()), c.prompt_tokens, p_where)
            outputs[sel] = _lengths(sc, "output_tokens", rng, int(sel.sum()), c.output_tokens, o_where)
    else:
        prompts = _lengths(sc, "prompt_tokens", rng, n)
        outputs = _lengths(sc, "output_tokens", rng, n)
    wl = gen.synthetic(arrivals, prompts, outputs, source=f"{w.kind} (seed {sc.seed})")
    wl.klass = klass
    if w.conversations is not None:
        c = w.conversations
        if c.closed_loop:
            wl = gen.closed_loop_conversations(rng, wl, c.turns, c.think_s, c.fanout)
        else:
            wl = gen.conversations(rng, wl, c.turns, c.think_s)
    if w.system_prompts is not None:
        s = w.system_prompts
        wl = gen.with_system_prompts(rng, wl, s.count, s.tokens, s.share, s.zipf)
    if w.prompts == "vllm_bench":  # (random lengths are drawn after the count: its prompts are the count's)
        fixed = all(spec is not None and spec.dist == "fixed" for spec in (w.prompt_tokens, w.output_tokens))
        wl = gen.vllm_bench_prompts(wl, sc.seed, by_count=not fixed)
    if w.lora is not None:
        wl.lora = gen.lora_adapters(rng, wl, w.lora.adapters, w.lora.share, w.lora.zipf)
    return wl


def prewarm_prefixes(sc: Scenario) -> tuple[list[list[int]], int]:
    """Prefixes (content ids) to cache before the first arrival, and tokens per id."""
    prefixes = [list(p) for p in sc.kv_cache.prewarm]
    s = sc.workload.system_prompts
    if s is not None and s.prewarm:
        if sc.workload.prompts == "vllm_bench":  # (its one prefix is the seed's)
            prefixes.append(gen.vllm_bench_prefix_ids(sc.seed, s.tokens))
        else:
            prefixes += gen.system_prompt_ids(s.count, s.tokens)
    return prefixes, sc.kv_cache.prewarm_block_tokens or 0


def check_slo_classes(sc: Scenario, w: Workload) -> None:
    """Every class ``slo.classes`` names is some request's (a misspelt one would leave its
    requests judged by the run's own SLO, silently)."""
    if not sc.slo.classes:
        return
    if sc.workload.classes:  # (a synthetic mix: its classes as declared, drawn or not)
        have = sorted(sc.workload.classes)
    else:  # (a trace's class column; a blank cell is no class)
        have = sorted({c for c in w.klass.tolist() if isinstance(c, str) and c}) if w.klass is not None else []
    unknown = [c for c in sc.slo.classes if c not in have]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], have, 1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        listed = (
            ", ".join(f"'{c}'" for c in have[:20]) or "none (workload.classes, or a trace's class column, names them)"
        )
        raise UserError(f"slo.classes: no request is of class '{unknown[0]}'{hint}; the workload's classes: {listed}")


def check_prewarm(sc: Scenario, pools: list[PoolSpec], id_tokens: int) -> None:
    """``kv_cache.prewarm`` within reason, before any replica chains it: every replica serving at
    the start holds its own hashes of every prefix (one per KV block; replicas an autoscaler adds
    start cold), so all of them together are held to MAX_PREFIX_BLOCKS (4 KB of ids asked 11 GB
    of four replicas)."""
    block = sc.kv_cache.block_tokens
    blocks = sum(len(ids) * id_tokens // block for ids in sc.kv_cache.prewarm)
    key = "kv_cache.prewarm"
    s = sc.workload.system_prompts
    if s is not None and s.prewarm:  # (prewarm_prefixes: every system prompt, whole ids)
        count = 1 if sc.workload.prompts == "vllm_bench" else s.count
        blocks += count * (gen.whole_ids(s.tokens) * gen.SYNTH_HASH_TOKENS // block)
        key = "workload.system_prompts.prewarm" if not sc.kv_cache.prewarm else f"{key} + workload.system_prompts"
    replicas = sum(p.replicas for p in pools)
    if blocks * replicas > MAX_PREFIX_BLOCKS:
        raise UserError(
            f"{key}: {blocks:,} KV blocks of {block} tokens on each of {replicas:,} replicas, "
            f"{blocks * replicas:,} hashes, over the limit of {MAX_PREFIX_BLOCKS:,} per run; prewarm fewer or "
            "shorter prefixes"
        )


def _lengths(
    sc: Scenario, key: str, rng: np.random.Generator, n: int, override: object | None = None, where: str = ""
) -> np.ndarray:
    spec = override or getattr(sc.workload, key)
    where = where or f"{sc._origin}: workload.{key}"  # the key a bad draw is reported under
    empirical = None
    if spec.dist == "empirical":
        empirical = _trace_lengths(sc.path(spec.trace), spec.format)[0 if key == "prompt_tokens" else 1]
    return gen.sample_lengths(rng, spec.model_dump(), n, empirical, where)


_TRACE_LENGTHS: dict[tuple[str, str, int, int], tuple[np.ndarray, np.ndarray]] = {}


def _trace_lengths(path: Path, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """A trace's prompt and output lengths (read-only), read once per file version: a scenario
    that draws both lengths from one trace, and every point of a sweep or plan, read it once."""
    from llmsim.workload.traces import check_trace_file, trace_lengths

    check_trace_file(path)  # a missing, special or oversized file: the loader's own message, before stat
    st = path.stat()
    key = (str(path.resolve()), fmt, st.st_mtime_ns, st.st_size)
    if key not in _TRACE_LENGTHS:
        lengths = trace_lengths(path, fmt)  # fresh arrays: ours to freeze
        for a in lengths:
            a.flags.writeable = False
        _TRACE_LENGTHS.clear()  # one trace kept: memory stays bounded across many scenarios
        _TRACE_LENGTHS[key] = lengths
    return _TRACE_LENGTHS[key]


@dataclass
class PoolSpec:
    """Everything one pool of identical replicas needs."""

    name: str
    hw: HardwareProfile
    replicas: int
    tp: int
    pp: int
    cost: CostModel
    kv_blocks: int
    sched: SchedulerConfig
    memory: dict  # the memory budget per device, for reports and errors
    draft_cost: CostModel | None = None  # speculative decoding with a draft model
    moe_jit: MoeJitSpec | None = None  # its fused-MoE kernels compiled at start-up (moejit.py)


def check_moe_keys(sc: Scenario, model: ModelSpec) -> None:
    """The cluster's routing keys name a MoE model's experts: on a dense model they are a mistake."""
    c = sc.cluster
    moe_keys = [k for k in ("expert_skew", "eplb", "redundant_experts") if getattr(c, k)]
    moe_keys += ["expert_routing_exponent"] if c.expert_routing_exponent != 1.0 else []
    if moe_keys and not model.is_moe:
        raise UserError(f"cluster.{moe_keys[0]}: {model.name} is a dense model, with no experts to route to; remove it")


def pool_key(name: str) -> str:
    """Where a pool's keys live in the scenario, as errors name them."""
    return "cluster" if name == "main" else f"cluster.{name}_pool"


def check_pools_parallelism(sc: Scenario, model: ModelSpec) -> None:
    """Each pool's tp and pp against the model (``check_parallelism``), without building a pool:
    what a sweep checks at every point before its first simulation."""
    for name, p in pool_configs(sc):
        check_parallelism(model, p.tp, p.pp, pool_key(name), p.expert_parallel)


def build_pools(sc: Scenario, model: ModelSpec) -> list[PoolSpec]:
    """One pool when colocated; a prefill and a decode pool when disaggregated."""
    c = sc.cluster
    check_moe_keys(sc, model)
    pools = [_pool(sc, model, name, p) for name, p in pool_configs(sc)]
    if c.eplb and all(p.cost.cfg.ep == 1 for p in pools):
        raise UserError(
            "cluster.eplb: EPLB places experts across expert-parallel GPUs; set expert_parallel on a pool "
            "(with tensor-parallel experts every GPU runs a slice of every expert)"
        )
    _check_all2all(sc, pools)
    _check_trtllm(sc, pools)
    return pools


def _check_trtllm(sc: Scenario, pools: list[PoolSpec]) -> None:
    """TensorRT-LLM's chunked context hands out whole KV blocks to a prompt cut short: a step
    budget below one block would never start a prompt longer than the budget (its chunk rounds to
    0); and the dynamic chunk budget is llmsim's chunked policy's, not TensorRT-LLM's."""
    p = sc.policy
    if p.kind != "trtllm":
        return
    if p.chunk_budget == "dynamic":
        raise UserError(
            "policy.chunk_budget: dynamic is llmsim's chunked policy's; trtllm spends max_batch_tokens a step"
        )
    block = sc.kv_cache.block_tokens
    for pool in pools:
        if p.enable_chunked_context and pool.sched.max_batch_tokens < block:
            raise UserError(
                f"policy.max_batch_tokens: {pool.sched.max_batch_tokens} tokens a step is less than one KV block "
                f"({block} tokens, kv_cache.block_tokens), which is what chunked context gives a prompt cut short; "
                "set it to at least one block"
            )


def _check_all2all(sc: Scenario, pools: list[PoolSpec]) -> None:
    """``all2all_backend`` / ``dual_batch_overlap`` where something reads them: DeepEP moves tokens
    between the data-parallel ranks of an expert-parallel group (vLLM ignores the backend otherwise,
    so a scenario naming it where no pool has one is a mistake), on the pools it can run on
    (``comm.deepep_refusal``); dual batch overlap needs DeepEP (docs/design/dbo.md: "Currently DBO
    is only supported with DeepEP")."""
    from llmsim.costmodel.comm import deepep_refusal

    c = sc.cluster
    keys = ("dbo_decode_token_threshold", "dbo_prefill_token_threshold")  # (their defaults are vLLM's)
    unread = [k for k in keys if getattr(c, k) != type(c).model_fields[k].default]
    if unread and not c.dual_batch_overlap:
        raise UserError(f"cluster.{unread[0]}: read only with cluster.dual_batch_overlap: true; remove it or set that")
    for p in pools:  # a pool's own DeepEP must have ranks to move tokens between
        own = getattr(getattr(c, f"{p.name}_pool", None), "all2all_backend", None)
        if own in DEEPEP_BACKENDS and p.cost.cfg.ep <= p.cost.cfg.tp:
            raise UserError(
                f"cluster.{p.name}_pool.all2all_backend: {own} exchanges tokens between the data-parallel ranks "
                "of an expert-parallel group; this pool has none (set its expert_parallel with replicas > 1)"
            )
    deepep = [p for p in pools if p.cost.cfg.all2all_backend in DEEPEP_BACKENDS]
    if not (deepep or c.dual_batch_overlap):
        return
    key = "cluster.all2all_backend" if deepep else "cluster.dual_batch_overlap"
    grouped = [p for p in pools if deepep_ranks(p.cost.cfg.all2all_backend, p.cost.cfg.ep, p.cost.cfg.tp)]
    if not grouped and deepep:
        raise UserError(
            f"{key}: it exchanges tokens between the data-parallel ranks of an expert-parallel group, and no "
            "pool has one; set expert_parallel with replicas > 1 (vLLM --data-parallel-size N --enable-expert-parallel)"
        )
    if c.dual_batch_overlap and not grouped:
        raise UserError(
            "cluster.dual_batch_overlap: vLLM runs it with DeepEP only; set cluster.all2all_backend (or a pool's) to "
            "deepep_low_latency or deepep_high_throughput on expert-parallel data-parallel ranks"
        )
    for p in grouped:
        why = deepep_refusal(p.cost.cfg.tp, p.cost.hw)
        if why:
            raise UserError(f"{key}: {why}")


def all2all_summary(cfg: CostConfig) -> dict:
    """A pool's DeepEP settings for summary.json (``pools[]``), where its ranks exchange tokens with
    DeepEP; {} otherwise."""
    if not deepep_ranks(cfg.all2all_backend, cfg.ep, cfg.tp):
        return {}
    out: dict = {"all2all_backend": cfg.all2all_backend, "dual_batch_overlap": cfg.dual_batch_overlap}
    if cfg.dual_batch_overlap:
        out["dbo_thresholds"] = {"decode": cfg.dbo_decode_tokens, "prefill": cfg.dbo_prefill_tokens}
    return out


def moe_imbalance(sc: Scenario, model: ModelSpec, ep: int, key: str) -> float:
    """The busiest expert-parallel GPU's routed tokens over the mean (eplb.py): 1 without skew or
    expert parallelism."""
    c = sc.cluster
    if ep <= 1 or not (c.expert_skew or c.eplb):
        return 1.0
    from llmsim.eplb import expert_imbalance  # (expert_parallel_degree checked the copies divide)

    k = model.experts_per_token
    return expert_imbalance(model.num_experts, ep, c.expert_skew, sc.seed, c.eplb, c.redundant_experts, k)


def fp8_attention(engine: EngineSpec, hw: HardwareProfile, model: ModelSpec) -> bool | None:
    """Whether attention over an fp8 KV cache runs in fp8, where the engine decides it: an engine
    that quantises its queries (``EngineSpec.fp8_query``, vLLM) does so on a device whose kernels
    take fp8 queries (``HardwareProfile.fp8_attention``) and nowhere else, whatever the compute
    dtype. None leaves the cost model's rule (fp8 with fp8/fp4 compute, ``ops.attention_dtype``),
    as do MLA models (their backends, FlashMLA and CUTLASS MLA, choose their own dtypes) and a
    profile that does not say what its kernels take."""
    if not engine.fp8_query or model.is_mla or hw.fp8_attention is None:  # (a profile that does not say)
        return None
    return hw.fp8_attention.value


def _pool(sc: Scenario, model: ModelSpec, name: str, p: PoolConfig) -> PoolSpec:
    hw = load_profile(p.hardware or sc.hardware, Path(sc.base_dir))
    hw = cpu_subset(hw, sc.cluster.sockets, sc.cluster.cores)  # the whole device unless they are set
    key = pool_key(name)
    engine = for_stages(for_hardware(sc.engine_spec, hw, f"{key}.hardware"), p.pp)
    check_parallelism(model, p.tp, p.pp, key, p.expert_parallel)
    check_groups(sc, model, p.tp, key)
    ep = expert_parallel_degree(model, p, key, sc.cluster.redundant_experts if sc.cluster.eplb else 0)
    if ep > 1 and sc.cluster.expert_routing_exponent == 0:
        raise UserError(
            "cluster.expert_routing_exponent: 0 (every token the same experts) under expert parallelism puts "
            "every token on the GPUs that hold those experts, which llmsim does not price (it spreads the "
            "experts a step reaches evenly over the GPUs); use it without expert parallelism"
        )
    weight_dtype = sc.model.weight_dtype or model.weight_dtype
    all2all = p.all2all_backend or sc.cluster.all2all_backend
    act = sc.model.act_dtype
    if not hw.computes_in(act):
        raise UserError(f"{key}: model.act_dtype {act} needs {act.upper()} matrix units; {hw.name} has none")
    sizes = graph_sizes(engine, p.max_num_seqs or sc.policy.max_num_seqs, step_budget(sc, p, name), p.pp)
    cfg = CostConfig(
        tp=p.tp,
        pp=p.pp,
        ep=ep,
        weight_dtype=weight_dtype,
        weight_group_size=model.weight_group_size,
        weight_scale_bits=model.weight_scale_bits,
        kv_dtype=sc.kv_cache.dtype,
        act_dtype=act,
        attention_kernel=sc.model.attention_kernel,
        lora_rank=sc.lora.max_lora_rank if sc.lora is not None else 0,
        cuda_graphs=bool(sc.cluster.cuda_graphs if engine.cuda_graphs is None else engine.cuda_graphs)
        and not graphs_off_for_deepep(all2all, ep, p.tp)
        and (not engine.cuda_graph_sizes or bool(sizes)),  # (sizes all past the cap: none captured)
        cuda_graph_sizes=sizes,
        cuda_graph_padding=engine.cuda_graph_padding,
        cuda_graph_decode_only=engine.cuda_graph_decode_only,
        numa_aware=sc.cluster.numa_aware,
        moe_imbalance=moe_imbalance(sc, model, ep, "cluster"),
        redundant_experts=sc.cluster.redundant_experts if ep > 1 and sc.cluster.eplb else 0,
        expert_skew=sc.cluster.expert_skew,
        expert_routing_exponent=sc.cluster.expert_routing_exponent,
        fp8_attention=fp8_attention(engine, hw, model),
        all2all_backend=all2all,
        dual_batch_overlap=sc.cluster.dual_batch_overlap,
        dbo_decode_tokens=sc.cluster.dbo_decode_token_threshold,
        dbo_prefill_tokens=sc.cluster.dbo_prefill_token_threshold,
    )
    window, local_window = model.attention_windows()
    sched = SchedulerConfig(
        max_num_seqs=p.max_num_seqs or sc.policy.max_num_seqs,
        max_batch_tokens=p.max_batch_tokens or sc.policy.max_batch_tokens,
        chunk_tokens=sc.policy.chunk_tokens,
        preemption=sc.kv_cache.preemption,
        chunk_budget=sc.policy.chunk_budget,
        tbt_target_s=sc.policy.tbt_target_s or sc.slo.tbt_s or 0.0,
        min_chunk_tokens=sc.policy.min_chunk_tokens,
        prefill_only=name == "prefill",
        first_token_at_prefill=name == "prefill" and engine.first_token_at_prefill,
        queue_order=sc.policy.queue_order,
        max_bypass=sc.policy.max_bypass,
        reserve_full_prompt=sc.policy.reserve_full_prompt,
        long_prefill_token_threshold=sc.policy.long_prefill_token_threshold,
        long_prefill_adaptive=sc.policy.long_prefill_token_threshold_adaptive,
        context_chunking=sc.policy.enable_chunked_context,
        capacity_policy=sc.policy.capacity_scheduler_policy,
        max_model_len=max_model_len(sc, model),
        max_loras=sc.lora.max_loras if sc.lora is not None else 0,
        window=window,
        local_window=local_window,
        spec_as_decode=model.spec_as_decode,
    )
    if sc.lora is not None:
        from llmsim.lora import check_model

        why = check_model(model, "lora")
        if why:
            raise UserError(why)
    draft = None
    spec = sc.speculative
    if spec is not None and name != "prefill":
        context = sched.max_model_len or model.max_position_embeddings
        if spec.k + 1 > context:  # (and its per-position rates stay a bounded list)
            raise UserError(
                f"speculative.k: {spec.k:,} proposals make a verification of {spec.k + 1:,} tokens per "
                f"sequence, longer than the context requests may reach ({context:,} tokens, "
                "policy.max_model_len); vLLM's num_speculative_tokens is a handful"
            )
        sched.speculative = SpecConfig(k=spec.k, acceptance=spec.rates(), seed=sc.seed)
        if spec.method == "draft":
            draft = get_model(spec.draft_model or "").with_(
                weight_dtype=weight_dtype,
                weight_group_size=model.weight_group_size,
                weight_scale_bits=model.weight_scale_bits,
            )
            if draft.vocab_size != model.vocab_size:  # (its proposals are token ids of the target's vocabulary)
                raise UserError(
                    f"speculative.draft_model: {draft.name}'s vocabulary ({draft.vocab_size:,} tokens) is not "
                    f"{model.name}'s ({model.vocab_size:,}); vLLM refuses such a pair (\"Target and draft model "
                    'should have the same vocabulary size", vllm/config/speculative.py); use a draft of the '
                    "target's family"
                )
    step_tokens = step_budget(sc, p, name)
    blocks, memory = kv_blocks(
        sc,
        engine,
        model,
        hw,
        p.tp,
        p.pp,
        weight_dtype,
        step_tokens,
        sched.max_num_seqs,
        key,
        draft=draft,
        ep=ep,
        redundant_experts=cfg.redundant_experts,
        num_blocks=p.num_blocks,
        graph_sizes=cfg.cuda_graph_sizes if cfg.cuda_graphs else (),
    )
    draft_cost = None
    if draft is not None:
        # the draft is small: it runs unsharded next to the target's shard
        # (the routing skew and exponent are the target's, measured on it or its kind: a MoE draft
        # routes its own way, unmeasured, taken as even and independent)
        draft_cfg = replace(
            cfg,
            tp=1,
            pp=1,
            ep=1,
            fp8_attention=fp8_attention(engine, hw, draft),
            expert_skew=0.0,
            expert_routing_exponent=1.0,
        )
        draft_cost = shared_cost_model(draft, hw, draft_cfg, engine)
    cost = shared_cost_model(model, hw, cfg, engine)
    jit = moe_jit_spec(
        engine.moe_jit_compile_s,
        hw.family,
        model.num_experts,
        model.experts_per_token,
        (model.expert_weight_dtype or weight_dtype, act),
        ep,
        p.pp,
        cfg.cuda_graph_sizes if cfg.cuda_graphs else (),
        step_tokens,  # (vLLM's profile run: max_num_batched_tokens tokens)
    )
    return PoolSpec(name, hw, p.replicas, p.tp, p.pp, cost, blocks, sched, memory, draft_cost, jit)


SHARED_COST_MODELS = 16  # cost models (and their price caches) a process keeps for later runs
_cost_models: OrderedDict[str, CostModel] = OrderedDict()


def shared_cost_model(model: ModelSpec, hw: HardwareProfile, cfg: CostConfig, engine: EngineSpec) -> CostModel:
    """The cost model of these four, shared by every run in this process that prices the same: the
    points of a sweep or plan with the same model, hardware, parallelism and engine (replica counts,
    rates, policies) reuse the step prices the earlier ones cached (#18 item 4). Its prices are a
    function of these four alone (the caches fill with the same floats whatever the order), so
    sharing changes no result. Keyed by their reprs (every field, floats exactly); the
    ``SHARED_COST_MODELS`` most recently used are kept."""
    key = repr((model, hw, cfg, engine))
    cost = _cost_models.get(key)
    if cost is None:
        cost = _cost_models[key] = CostModel(model, hw, cfg, engine)
        if len(_cost_models) > SHARED_COST_MODELS:
            _cost_models.popitem(last=False)
    else:
        _cost_models.move_to_end(key)
    return cost


def longest_hashed(pools: list[PoolSpec], router: str) -> float:
    """The most tokens (prompt + output) of a request whose prefix hashes a run makes: one some
    pool serves (the largest max_model_len; inf where a pool sets none), any under
    ``prefix_affinity``, which routes a request by its prefix before a pool turns it away."""
    if router == "prefix_affinity":
        return math.inf
    return max(p.sched.max_model_len or math.inf for p in pools)


def max_model_len(sc: Scenario, model: ModelSpec) -> int:
    """The context limit requests are checked against: ``policy.max_model_len``, by default the
    model's ``max_position_embeddings`` as vLLM derives it (vllm/config/model.py,
    _get_and_verify_max_len). Like vLLM, a limit past the model's context is refused, unless
    ``policy.allow_long_max_model_len`` (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, same function)."""
    limit = sc.policy.max_model_len
    if limit is None:
        return model.max_position_embeddings
    if limit > model.max_position_embeddings and sc.policy.allow_long_max_model_len and model.learned_positions:
        raise UserError(
            f"policy.allow_long_max_model_len: {model.name} learns its positions (a table for "
            f"{model.max_position_embeddings:,} tokens); a request cannot run past it (max_model_len {limit:,})"
        )
    if limit > model.max_position_embeddings and not sc.policy.allow_long_max_model_len:
        raise UserError(
            f"policy.max_model_len: {limit:,} tokens is longer than the context of {model.name} "
            f"({model.max_position_embeddings:,} tokens, max_position_embeddings); set "
            "policy.allow_long_max_model_len: true to run past it (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
        )
    return limit


def step_budget(sc: Scenario, p: PoolConfig, name: str) -> int:
    """Most tokens a step of this pool's policy holds: the chunk budget where prompts are chunked."""
    chunked = sc.policy.kind in ("chunked", "vllm") or (
        name == "prefill" and sc.policy.prefill_pool_policy == "chunked"
    )
    return sc.policy.chunk_tokens if chunked else (p.max_batch_tokens or sc.policy.max_batch_tokens)


def graph_sizes(engine: EngineSpec, max_num_seqs: int, max_batched_tokens: int, pp: int = 1) -> tuple[int, ...]:
    """The CUDA-graph sizes an engine captures for this batch limit: vLLM caps them at
    min(2 x max_num_seqs, 512, max_num_batched_tokens) (vllm/config/vllm.py, 0.32), a list a user
    gives at max_num_batched_tokens alone; TensorRT-LLM
    drops those above min(max_batch_size, max_num_tokens) and, padding, captures that cap in
    their place (``_filter_cuda_graph_batch_sizes``, tensorrt_llm/_torch/pyexecutor/model_engine.py);
    its max_batch_size bounds one micro-batch, a ``pp``-th of the sequences it holds. None left
    (every size past the cap): no graph is captured and every step runs eager (``_pool`` turns
    ``cuda_graphs`` off); a size kept above the batches would pad each of them up to it."""
    sizes = engine.cuda_graph_sizes
    if not sizes or not (engine.defaults == "vllm" or is_trtllm(engine)):
        return sizes
    if is_trtllm(engine):
        cap = min(max(max_num_seqs // pp, 1), max_batched_tokens)
        kept = tuple(s for s in sizes if s <= cap)
        if engine.cuda_graph_padding and kept != sizes and cap not in kept:
            return (*kept, cap)
        return kept
    # vLLM caps its default list at min(2 x max_num_seqs, 512); sizes a user gives only at the token
    # budget (``_set_cudagraph_sizes``: explicit cudagraph_capture_sizes are filtered by
    # max_num_batched_tokens alone)
    default = sizes == VLLM_DEFAULT_SIZES
    cap = min(2 * max_num_seqs, sizes[-1], max_batched_tokens) if default else max_batched_tokens
    return tuple(s for s in sizes if s <= cap)


def check_groups(sc: Scenario, model: ModelSpec, tp: int, key: str) -> None:
    """Group-quantised weights need each linear's input, on each GPU, to be whole groups: vLLM
    refuses a checkpoint otherwise (AWQ / GPTQ linear methods: "The input size is not aligned with
    the quantized weight shape", ``input_size_per_partition % group_size``). The decoder's dense
    linears are checked (a MoE's experts, and MLA's projections, are not); the down projection's
    only for a config.json's sizes (a catalog entry's intermediate size is the base model's, which
    quantised releases pad to split evenly, Qwen2.5-72B's 29,568 to 29,696). The message says
    where the size comes from: the scenario's key, the checkpoint's config, or the dtype's default."""
    group, _ = weight_groups(model.weight_dtype, model.weight_group_size)
    if not group:
        return
    inputs = [("hidden_size (the QKV and MLP inputs)", model.hidden_size)]
    if sc.model.hf_config and not model.is_moe:
        inputs.append((f"intermediate_size / tp {tp} (the down projection's input)", model.intermediate_size // tp))
    if not model.is_mla:
        inputs.append(
            (f"heads x head_dim / tp {tp} (the output projection's input)", model.num_heads * model.head_dim // tp)
        )
    field = (
        "model.weight_group_size"
        if sc.model.weight_group_size is not None
        else "the checkpoint's group_size"
        if model.weight_group_size is not None
        else f"{model.weight_dtype} weights' default group size"
    )
    for what, size in inputs:
        if size % group:
            raise UserError(
                f"{key}: {field} {group}: {model.name}'s {what} is {size:,}, not a whole number "
                f"of groups; vLLM refuses such a checkpoint (input_size_per_partition % group_size)"
            )


def check_parallelism(model: ModelSpec, tp: int, pp: int, key: str, expert_parallel: bool = False) -> None:
    if model.num_heads % tp:
        raise UserError(
            f"{key}.tp: tensor parallelism {tp} does not divide the {model.num_heads} attention heads of {model.name}"
        )
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise UserError(
            f"{key}.tp: tensor parallelism {tp} and the {model.num_kv_heads} KV heads of "
            f"{model.name} do not divide one another"
        )
    width = model.dense_intermediate_size if model.is_moe else model.intermediate_size
    if width and width % tp:  # (vLLM's column- and row-parallel MLP layers split it evenly: divide())
        raise UserError(f"{key}.tp: tensor parallelism {tp} does not divide the {width:,}-wide MLP of {model.name}")
    if model.is_moe and not expert_parallel and model.intermediate_size % tp:
        # (without expert parallelism every expert is split over the TP ranks, and vLLM's
        # FusedMoEConfig asserts it splits evenly: vllm/model_executor/layers/fused_moe/config.py, 0.32.0)
        raise UserError(
            f"{key}.tp: tensor parallelism {tp} does not divide the {model.intermediate_size:,}-wide experts of "
            f"{model.name}; expert_parallel places whole experts on the GPUs instead"
        )
    if pp > model.num_layers:
        raise UserError(
            f"{key}.pp: {pp} pipeline stages for the {model.num_layers} layers of {model.name}: a stage needs one"
        )
    if pp > 1 and model.is_moe and model.dense_layers:
        raise UserError(
            f"{key}.pp: pipeline parallelism ({pp} stages) with the {model.dense_layers} dense-MLP layers of "
            f"{model.name} is not modelled: a step is priced as pp x one stage, and the stages would hold "
            "different shares of the dense layers; use pp 1 (tp or expert_parallel to split it)"
        )


def graphs_off_for_deepep(backend: str, ep: int, tp: int) -> bool:
    """vLLM turns CUDA graphs off for DeepEP's normal kernels between data-parallel ranks: "DeepEP
    high-throughput kernels are optimized for prefill and are incompatible with CUDA Graphs"
    (cudagraph_mode NONE; vllm/config/compilation.py, vllm/platforms/cuda.py before it), so every
    step of such a pool runs eager."""
    return backend == "deepep_high_throughput" and deepep_ranks(backend, ep, tp)


def expert_parallel_degree(model: ModelSpec, p: PoolConfig, key: str, redundant: int = 0) -> int:
    """The expert-parallel degree of a pool: 1 without ``expert_parallel``, else replicas x tp, as
    vLLM sizes its EP group (EP size = DP x TP: ``ParallelConfig.data_parallel_size`` "MoE layers
    will be sharded according to the product of the tensor ... and data parallel sizes",
    vllm/config/parallel.py). Each GPU then holds num_experts / ep whole experts, so ep must divide
    them (vLLM's default linear placement gives every rank the same count when there are no
    redundant experts); with EPLB's ``redundant`` copies the physical experts divide instead (the
    source's 256 + 32 over EP 72, SGLang's large-scale EP)."""
    if not p.expert_parallel:
        return 1
    if not model.is_moe:
        raise UserError(f"{key}.expert_parallel: {model.name} is a dense model (no experts to split); remove it")
    ep = p.replicas * p.tp
    if p.pp > 1 and p.replicas > 1:
        raise UserError(
            f"{key}.expert_parallel: data-parallel ranks (replicas {p.replicas}) with pipeline parallelism "
            f"(pp {p.pp}) are not modelled: the ranks step in lock-step, which pipelined replicas do not; "
            "use pp 1, or replicas 1 (EP over the tp ranks)"
        )
    if redundant and (model.num_experts + redundant) % ep:
        raise UserError(
            f"cluster.redundant_experts: {model.num_experts} experts + {redundant} copies must divide over the "
            f"{ep} expert-parallel GPUs of {key} (vLLM requires it)"
        )
    if not redundant and model.num_experts % ep:
        raise UserError(
            f"{key}.expert_parallel: the expert-parallel degree {ep} (replicas {p.replicas} x tp {p.tp}) does "
            f"not divide the {model.num_experts} experts of {model.name}: vLLM gives the first ranks one expert "
            "more (determine_expert_map), which llmsim does not model (it prices equal shares); choose a degree "
            "that divides them"
        )
    return ep


def forward_body_bytes(model: ModelSpec, step_tokens: int, tp: int, act_dtype: str) -> float:
    """Peak activation memory of one step's forward pass on one device, before the logits: the live
    buffers of one layer's larger half. Grows with the tokens in a step, which is why chunking
    bounds it.

    Both halves hold the residual, the normed input and their output (3 x hidden); the attention
    half also its QKV projection and the attention output, the MLP half its gate/up projection and
    the activation's output (3 x intermediate): the locals of vLLM's LlamaAttention.forward and
    LlamaMLP.forward while their last GEMM runs (vllm/model_executor/models/llama.py). The halves
    run one after the other, so the peak is the larger, not their sum (which overstated vLLM 0.19's
    measured forward peak by 30 % on CodeLlama-7B, benchmarks/vllm_memory.py). vLLM 0.30's start-up
    profile measures exactly this on dense Qwen3 models (data/validation/vllm-memory/v0.30-glyd.csv:
    0.18-0.19 GiB for Qwen3-8B at 2,048 tokens, 0.75 at 8,192, 0.26 for Qwen3-14B at 2,048)."""
    a = DTYPE_BYTES[storage_of(act_dtype)]  # kept 16-bit between quantised GEMMs
    attention = (model.q_size + 2 * model.kv_size) // tp + model.q_size // tp
    mlp = 3 * model.intermediate_size // tp
    return step_tokens * (3 * model.hidden_size + max(attention, mlp)) * a


def logits_bytes(model: ModelSpec, rows: int, tp: int) -> float:
    """fp32 logits of ``rows`` sampled rows on one device (the vocabulary split over TP)."""
    return rows * model.vocab_size // tp * 4


def activation_bytes(model: ModelSpec, step_tokens: int, max_seqs: int, tp: int, act_dtype: str) -> float:
    """Peak activation memory of one step on one device: the forward pass's (``forward_body_bytes``)
    plus fp32 logits of the sampled rows."""
    return forward_body_bytes(model, step_tokens, tp, act_dtype) + logits_bytes(model, min(max_seqs, step_tokens), tp)


def moe_workspace_bytes(model: ModelSpec, step_tokens: int, tp: int, ep: int, act_dtype: str) -> float:
    """Scratch of vLLM's Triton fused-MoE kernel for a step of ``step_tokens``: workspace13 (tokens,
    top-k, max(I, H)) and workspace2 (tokens, top-k, max(2I, H)) in the activation dtype, I the
    expert's intermediate size on this device (split over TP unless experts are placed whole, EP)
    and H the hidden size (TritonExperts.workspace_shapes, vllm/model_executor/layers/fused_moe/
    fused_moe.py); 0 for a dense model."""
    if not model.is_moe:
        return 0.0
    inter = model.intermediate_size if ep > 1 else model.intermediate_size // tp
    h = model.hidden_size
    per_row = max(inter, h) + max(2 * inter, h)
    return float(step_tokens * model.experts_per_token * per_row * DTYPE_BYTES[storage_of(act_dtype)])


@dataclass(frozen=True)
class EngineMemory:
    """The engine's own device memory, per device, as its start-up profile reserves it (bytes)."""

    forward: float  # the forward pass's activations with the sampled rows' fp32 logits (activation_bytes)
    peak: float  # the activation peak reserved: forward or sampler run, with any MoE scratch kept
    sampler: float  # the sampler profile run
    moe: float  # MoE kernels' scratch kept between calls
    non_torch: float  # outside torch's allocator
    graphs: float  # the CUDA-graph estimate subtracted (vLLM >= 0.21)


def engine_memory(
    engine: EngineSpec,
    model: ModelSpec,
    step_tokens: int,
    max_seqs: int,
    tp: int,
    pp: int,
    ep: int,
    act_dtype: str,
    graph_sizes: tuple[int, ...],
) -> EngineMemory:
    """What ``engine`` reserves beside the weights and the KV cache on one device for a step budget of
    ``step_tokens`` and ``max_seqs`` sequences (``EngineSpec.reserved_bytes``), and its estimate of
    the CUDA graphs it captures at ``graph_sizes`` (none: eager) over a device's layers
    (``EngineSpec.cuda_graph_estimate_bytes``). The engine's device terms must be resolved
    (``for_hardware``)."""
    body = forward_body_bytes(model, step_tokens, tp, act_dtype)
    logits = logits_bytes(model, min(max_seqs, step_tokens), tp)
    moe = moe_workspace_bytes(model, step_tokens, tp, ep, act_dtype)
    peak, sampler, kept, non_torch = engine.reserved_bytes(
        body, logits, max_seqs, step_tokens, model.vocab_size, tp, moe
    )
    heads = model.num_heads // tp  # (check_parallelism: tp divides the heads)
    graphs = engine.cuda_graph_estimate_bytes(model.stage_layers(pp), heads, graph_plan(graph_sizes, max_seqs))
    return EngineMemory(body + logits, peak, sampler, kept, non_torch, graphs)


def _engine_memory_note(sampler: float, forward: float, non_torch: float, graphs: float, usable: float) -> str:
    """What a "does not fit" message says of the engine's own memory (the sampler warm-up only
    where it is a real part of the device: a tenth or more)."""
    note = ""
    if sampler > forward and sampler >= 0.1 * usable:
        note += (
            " (the activation peak is the engine's start-up sampler warm-up over min(policy.max_num_seqs, the "
            "step's tokens) rows of the vocabulary, on every TP rank: lower policy.max_num_seqs)"
        )
    if non_torch:
        note += f", {non_torch / 1e9:.1f} GB the engine holds outside torch"
    if graphs:
        note += f", {graphs / 1e9:.1f} GB for its CUDA graphs (less with a smaller max_num_seqs, none with cluster.cuda_graphs: false)"
    return note


def kv_blocks(
    sc: Scenario,
    engine: EngineSpec,
    model: ModelSpec,
    hw: HardwareProfile,
    tp: int,
    pp: int,
    weight_dtype: str,
    step_tokens: int,
    max_seqs: int,
    key: str,
    draft: ModelSpec | None = None,
    ep: int = 1,
    redundant_experts: int = 0,
    num_blocks: int | None = None,
    graph_sizes: tuple[int, ...] = (),
) -> tuple[int, dict]:
    """KV capacity in blocks = (usable memory − weights − activation peak − engine memory − reserve) /
    block bytes, usable memory being ``memory_fraction`` of the device (vLLM, SGLang); or, with
    ``memory_fraction_of: free`` (TensorRT-LLM), ``memory_fraction`` of what is left once the rest
    is placed. A speculative draft model on the same devices adds its weights and its KV per token.
    Under expert parallelism (``ep`` > 1) each device holds the experts / ep and the rest of its
    stage's weights / tp (``ModelSpec.stage_weight_bytes``), which leaves the KV cache more; under
    pipeline parallelism the stage that affords the fewest blocks sizes every stage's cache (its
    weights: the embedding on the first, the LM head on the last; its layers).
    The activation peak is the larger of the forward pass's at the step's tokens and the engine's
    sampler profile run; the engine's memory outside torch is its own (``EngineSpec.reserved_bytes``),
    and so is its estimate of the CUDA graphs it captures at ``graph_sizes`` (none: eager), over the
    layers on a device (``EngineSpec.cuda_graph_estimate_bytes``).
    ``num_blocks`` (the pool's reported count), else ``kv_cache.num_blocks``, replaces the budget."""
    devices = tp * pp
    of_free = sc.kv_cache.memory_fraction_of == "free"
    usable = hw.memory_bytes * (1.0 if of_free else sc.kv_cache.memory_fraction)
    stage_weights = model.stage_weight_bytes(weight_dtype, tp, pp, ep, redundant_experts)
    mem = engine_memory(engine, model, step_tokens, max_seqs, tp, pp, ep, sc.model.act_dtype, graph_sizes)
    act, peak, sampler, moe, non_torch, graphs = mem.forward, mem.peak, mem.sampler, mem.moe, mem.non_torch, mem.graphs
    reserve = sc.kv_cache.reserve_gb * 1e9
    lora = 0.0
    if sc.lora is not None:  # multi-LoRA: the adapters' GPU buffers, allocated before the KV cache
        from llmsim.lora import slots_bytes

        a = DTYPE_BYTES[storage_of(sc.model.act_dtype)]  # vLLM's lora_dtype "auto": the model's
        lora = slots_bytes(model, sc.lora.max_loras, sc.lora.max_lora_rank, tp, pp, a)
        reserve += lora
    per_token = model.kv_bytes_per_token_per_device(sc.kv_cache.dtype, tp, pp)  # MLA: the latent on every TP rank
    weights = stage_weights[0]
    if pp > 1:  # vLLM sizes every rank's cache to the fewest blocks any rank affords (get_kv_cache_configs)
        per_layer = per_token / model.stage_layers(pp)
        room = usable - peak - non_torch - graphs - reserve
        layers = model.stage_split(pp)
        tight = min(range(pp), key=lambda i: (room - stage_weights[i]) / layers[i])
        weights, per_token = stage_weights[tight], per_layer * layers[tight]
    if draft is not None:
        weights += draft.weight_bytes(weight_dtype) / devices
        # its KV heads split over tp as the target's are (MLA: the latent whole on every rank)
        per_token += draft.kv_bytes_per_token_per_device(sc.kv_cache.dtype, tp, 1) / pp
    free = usable - weights - peak - non_torch - graphs - reserve
    if of_free:
        free *= sc.kv_cache.memory_fraction
    explicit = sc.kv_cache.memory_bytes
    if explicit is not None:  # (vLLM's --kv-cache-memory-bytes: the cache's own size, no memory profile)
        placed = weights + peak + non_torch + graphs + reserve
        if placed + explicit > hw.memory_bytes:
            raise UserError(
                f"{key}: kv_cache.memory_bytes {explicit / 2**30:.2f} GiB does not fit on {hw.name}: with the "
                f"{placed / 2**30:.2f} GiB the weights, activations and engine hold per device"
                f"{' (kv_cache.reserve_gb and LoRA slots included)' if reserve else ''} it needs "
                f"{(placed + explicit) / 2**30:.2f} GiB of {hw.memory_bytes / 2**30:.2f}"
            )
        free = float(explicit)
    memory = {
        "device_memory_bytes": hw.memory_bytes,
        "usable_bytes": usable,
        "weights_bytes": weights,
        # every device's, a draft's too (what an autoscaled replica loads)
        "replica_weights_bytes": sum(stage_weights) * tp + (draft.weight_bytes(weight_dtype) if draft else 0.0),
        "activation_bytes": act,  # the forward pass's
        "sampler_profile_bytes": sampler,  # the engine's sampler profile run (the peak is the larger)
        "moe_workspace_bytes": moe,  # kept by the engine between calls (part of the peak)
        "activation_reserved_bytes": peak,  # what the cache is sized without (the run's own peak: summary.memory)
        "non_torch_bytes": non_torch,
        "cuda_graph_estimate_bytes": graphs,  # vLLM >= 0.21's estimate of its graphs, subtracted
        "reserve_bytes": reserve,
        "lora_bytes": lora,  # (part of reserve_bytes)
        "kv_bytes": max(free, 0.0),
        "kv_bytes_per_token": per_token,
    }
    block_bytes = per_token * sc.kv_cache.block_tokens
    blocks = int(free // block_bytes) if free > 0 else 0
    memory["kv_blocks_of_memory"] = blocks  # (what the budget holds, before a reported count replaces it)
    reported = num_blocks if num_blocks is not None else sc.kv_cache.num_blocks  # the pool's, else the scenario's
    if reported is not None:  # as the engine reported it (vLLM: num_gpu_blocks)
        blocks = reported
        memory["kv_bytes"] = blocks * block_bytes
    if explicit is not None:
        memory["kv_bytes_given"] = explicit  # (the cache's size as given: usable_bytes was not read)
        if blocks < 1:
            raise UserError(
                f"{key}: kv_cache.memory_bytes {explicit:,} holds no KV block: one block of "
                f"{sc.kv_cache.block_tokens} tokens takes {block_bytes:,.0f} bytes per device"
            )
    if blocks < 1:
        raise UserError(
            f"{key}: {model.name}{' with its draft ' + draft.name if draft is not None else ''} does not fit on "
            f"{hw.name} x{devices} (tp={tp}, pp={pp}{f', ep={ep}' if ep > 1 else ''}): weights need "
            f"{weights / 1e9:.1f} GB and activations {peak / 1e9:.1f} GB per device"
            f"{_engine_memory_note(sampler, act, non_torch, graphs, usable)}, but only "
            f"{usable / 1e9:.1f} GB is usable ({usable / hw.memory_bytes:.0%} of {hw.memory_bytes / 1e9:.0f} GB)"
            f"{' minus a ' + format(reserve / 1e9, '.1f') + ' GB reserve' if reserve else ''}"
            f"{' (of which ' + format(lora / 1e9, '.1f') + ' GB of LoRA buffers: lora.max_loras x max_lora_rank)' if lora else ''}; "
            "raise tp/pp, quantise the weights, or pick a larger device"
        )
    memory["kv_blocks"] = blocks
    return blocks, memory
