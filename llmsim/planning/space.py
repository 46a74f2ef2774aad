"""The search space: every ``Candidate`` a ``plan:`` section names, and a ``Point`` (a candidate at a replica count).

A ``Point`` is what one row of the plan table describes; the planner carries it beside the row, so
nothing has to find a candidate again from the row's ``config`` text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmsim.errors import UserError, reason
from llmsim.planning.base import Base, PlanConfig
from llmsim.scenario import Scenario
from llmsim.sweep import MAX_POINTS


@dataclass(frozen=True)
class Candidate:
    """One configuration of the search space (before choosing the replica count)."""

    hardware: str
    tp: int
    policy: str
    chunk_tokens: int | None
    pd_ratio: str | None
    pp: int = 1  # the scenario's cluster.pp (a colocated candidate's replicas are pipelined so)
    # MoE: the scenario's expert parallelism (colocated: its replicas are one EP group; disaggregated:
    # each pool is one), carried to whichever layout the candidate has
    expert_parallel: bool = False
    engine: str | None = None  # plan.engines' (None: the scenario's own engine)

    @property
    def label(self) -> str:
        extra = f" chunk{self.chunk_tokens}" if self.chunk_tokens else ""
        extra += f" P:D {self.pd_ratio}" if self.pd_ratio else ""
        extra += f" on {self.engine}" if self.engine else ""
        pipeline = f" pp{self.pp}" if self.pp > 1 else ""
        return f"{self.hardware} tp{self.tp}{pipeline} {self.policy}{extra}"

    def overrides(self, replicas: int) -> dict[str, object]:
        out: dict[str, object] = {"hardware": self.hardware, "policy.kind": self.policy}
        if self.engine:
            out["engine"] = self.engine
        if self.chunk_tokens:
            out["policy.chunk_tokens"] = self.chunk_tokens
            if self.policy == "vllm":  # vLLM's one budget (--max-num-batched-tokens): both keys say it
                out["policy.max_batch_tokens"] = self.chunk_tokens
        if self.pd_ratio:
            p, d = (int(x) for x in self.pd_ratio.split(":"))
            ep = {"expert_parallel": True} if self.expert_parallel else {}
            out["cluster.prefill_pool"] = {"hardware": self.hardware, "replicas": p * replicas, "tp": self.tp, **ep}
            out["cluster.decode_pool"] = {"hardware": self.hardware, "replicas": d * replicas, "tp": self.tp, **ep}
            # the pools size it: a base scenario's colocated sizing is reset (a disaggregated
            # scenario refuses it rather than read past it), its pipeline too (the pools run unpipelined)
            out["cluster.replicas"], out["cluster.tp"], out["cluster.pp"] = 1, 1, 1
            out["cluster.expert_parallel"] = False
        else:
            out["cluster.replicas"] = replicas
            out["cluster.tp"] = self.tp
            out["cluster.expert_parallel"] = self.expert_parallel
            # a colocated candidate on a disaggregated base scenario: its pools do not apply
            out["cluster.prefill_pool"] = out["cluster.decode_pool"] = None
        return out

    def devices(self, replicas: int) -> int:
        if self.pd_ratio:
            p, d = (int(x) for x in self.pd_ratio.split(":"))
            return (p + d) * replicas * self.tp
        return replicas * self.tp * self.pp


@dataclass(frozen=True)
class Point:
    """A candidate at a replica count (for disaggregated candidates: units of ``pd_ratio``)."""

    candidate: Candidate
    replicas: int

    @property
    def label(self) -> str:
        """The plan table's ``config`` cell."""
        return f"{self.replicas}x {self.candidate.label}"

    def overrides(self) -> dict[str, object]:
        return self.candidate.overrides(self.replicas)

    def devices(self) -> int:
        return self.candidate.devices(self.replicas)


MAX_PLAN_POINTS = MAX_POINTS  # candidates x replica counts: the points a plan may search


def candidates(base: Base, cfg: PlanConfig) -> tuple[list[Candidate], list[str]]:
    """Every combination of the ``plan:`` lists, defaulting each to the scenario's own value, and
    the hardware-engine pairs left out because the engine does not run there (said, not searched)."""
    if cfg.engines:
        _check_own_engine(base)
        _check_engine_files(base, cfg.engines)
    sc = base.scenario()
    out, left_out = [], []
    for hw in cfg.hardware or [sc.hardware]:
        for engine in cfg.engines or [None]:
            if engine is not None and (why := _refused(base, engine, hw)):
                left_out.append(f"{hw} on {engine}: {why}")
                continue
            out += _pair_candidates(base, sc, cfg, hw, engine)
    if not out:
        raise UserError(
            f"{base.origin}: plan.engines: no engine runs on any device of the plan ({'; '.join(left_out)}); "
            "add an NVIDIA GPU to plan.hardware or a vLLM engine to plan.engines"
        )
    return out, left_out


def _pair_candidates(base: Base, sc: Scenario, cfg: PlanConfig, hw: str, engine: str | None) -> list[Candidate]:
    """The candidates of one device and engine (None: the scenario's): every tp, policy, chunk size
    and P:D ratio the plan lists, each defaulting to what the scenario (``sc``, ``base`` resolved)
    gives on that device under that engine (its own policy; its budget for that device, as vLLM's
    differs by device)."""
    c = sc.cluster
    pools = [p for p in (c.prefill_pool, c.decode_pool) if p is not None]
    # a disaggregated base is sized by its pools: their tp (and expert parallelism) are its defaults
    tps = sorted({p.tp for p in pools}) if pools else [c.tp]
    expert_parallel = any(p.expert_parallel for p in pools) if pools else c.expert_parallel
    on: dict[str, object] = {"hardware": hw, **({"engine": engine} if engine is not None else {})}
    policies = cfg.policies or [_resolved(base, on, engine).policy.kind]
    out = []
    for tp in cfg.tp or tps:
        for policy in policies:
            chunks: list[int | None] = [None]
            if policy in ("chunked", "vllm"):
                # the budget this candidate gets where the plan names none (as laid out at one replica)
                bare = Candidate(hw, tp, policy, None, None, c.pp, expert_parallel, engine)
                chunks = list(cfg.chunk_tokens or [_resolved(base, bare.overrides(1), engine).policy.chunk_tokens])
            for chunk in chunks:
                for ratio in cfg.pd_ratios if policy == "disaggregated" else [None]:
                    if ratio is not None and not _valid_ratio(ratio):
                        raise UserError(f"{base.origin}: plan.pd_ratios: {ratio!r} is not like '1:2'")
                    pp = 1 if ratio else c.pp  # (a disaggregated candidate's pools are not pipelined)
                    out.append(Candidate(hw, tp, policy, chunk, ratio, pp, expert_parallel, engine))
    return out


def _resolved(base: Base, overrides: dict[str, object], engine: str | None) -> Scenario:
    """The scenario with ``overrides`` (a device, an engine, a policy): its defaults filled as a run fills them."""
    try:
        return base.scenario(overrides)
    except UserError as exc:
        on = f" on {engine}" if engine else ""
        raise UserError(f"{base.origin}: plan: {overrides['hardware']}{on}: {reason(exc, base.origin)}") from None


def _check_engine_files(base: Base, engines: list[str]) -> None:
    """One profile file named twice (``a.yaml``, ``./a.yaml``, its absolute path) would be searched
    twice under two labels: refused as the same entry given twice."""
    from llmsim.engine import profile_path

    seen: dict[Path, str] = {}
    for name in engines:
        path = profile_path(name, Path(base.base_dir))
        if path is None:
            continue
        key = path.resolve()
        if key in seen:
            raise UserError(f"{base.origin}: plan.engines: {seen[key]!r} and {name!r} are the same file {key}")
        seen[key] = name


def _check_own_engine(base: Base) -> None:
    """plan.engines replaces the scenario's ``engine:``; settings it adds to its preset would be lost
    on every candidate: refused, so that nothing the user wrote is dropped unsaid."""
    own = base.data.get("engine")
    if isinstance(own, dict) and set(own) - {"preset", "profile"}:
        extra = ", ".join(sorted(set(own) - {"preset", "profile"}))
        raise UserError(
            f"{base.origin}: plan.engines replaces the scenario's engine, whose own settings ({extra}) no listed "
            "engine would keep; put them in an engine profile file and list it, or drop plan.engines"
        )


def _refused(base: Base, engine: str, hardware: str) -> str:
    """Why ``engine`` (a plan.engines entry) does not run on ``hardware`` ("" where it does)."""
    from llmsim.engine import load_engine, refused_on
    from llmsim.hardware import load_profile

    try:
        spec = load_engine(engine, Path(base.base_dir), base.origin)
    except UserError as exc:
        raise UserError(f"{base.origin}: plan.engines: {engine!r}: {reason(exc, base.origin)}") from None
    return refused_on(spec, load_profile(hardware, Path(base.base_dir)))


def _valid_ratio(r: str) -> bool:
    parts = r.split(":")
    return len(parts) == 2 and all(p.strip().isdigit() and int(p) > 0 for p in parts)


def checked_space(base: Base) -> tuple[PlanConfig, list[Candidate], list[str]]:
    """The ``plan:`` section, its candidates and the hardware-engine pairs left out, every candidate
    validated before any search (a one-line ``UserError`` naming the plan key or candidate): a bad
    plan fails in milliseconds, not after the rounds before it ran."""
    from llmsim.hardware import load_profile, profile_file

    cfg = base.plan_config()
    seen: dict[Path, str] = {}
    for name in cfg.hardware or []:  # named here, before the candidates' scenarios would say `hardware:`
        try:
            load_profile(name, Path(base.base_dir))
        except UserError as exc:
            raise UserError(f"{base.origin}: plan.hardware: {exc}") from None
        key = profile_file(name, Path(base.base_dir)).resolve()  # (H100-SXM and h100-sxm: one profile)
        if key in seen:
            raise UserError(f"{base.origin}: plan.hardware: {seen[key]!r} and {name!r} are the same profile {key}")
        seen[key] = name
    _check_policy_names(base, cfg)
    cands, left_out = candidates(base, cfg)
    points = len(cands) * len(cfg.replicas)
    if points > MAX_PLAN_POINTS:  # (each point is at least one simulation; 9M of them ran for days)
        raise UserError(
            f"{base.origin}: plan: {len(cands):,} candidates x {len(cfg.replicas):,} replica counts = {points:,} "
            f"points; a plan searches at most {MAX_PLAN_POINTS:,} (a sweep's limit): narrow its lists"
        )
    _check_unused_lists(base, cfg, cands)
    for c in cands:
        # the smallest and the largest replica count: a count past the scenario's limits would
        # otherwise show up only as an `invalid` finding of the last round
        for replicas in dict.fromkeys((min(cfg.replicas), max(cfg.replicas))):
            try:
                sc = base.scenario(c.overrides(replicas))
            except UserError as exc:
                raise UserError(
                    f"{base.origin}: plan: candidate {replicas}x {c.label}: {reason(exc, base.origin)}"
                ) from None
        if c is cands[0]:
            _check_routing(base, sc)
        _check_parallelism(base, sc, c)
    return cfg, cands, left_out


def _check_routing(base: Base, sc: Scenario) -> None:
    """Routing keys on a dense model are the base scenario's mistake, every candidate's alike: named
    once, before any search (llmsim.build.check_moe_keys, the rule a run applies)."""
    from llmsim.build import build_model, check_moe_keys

    try:
        check_moe_keys(sc, build_model(sc))
    except UserError as exc:
        raise UserError(f"{base.origin}: {exc}") from None


def _check_parallelism(base: Base, sc: Scenario, c: Candidate) -> None:
    """A tp that does not divide the model's heads is a mistake of the plan, not one of its findings:
    no replica count fixes it (llmsim.build.check_parallelism, the rule a run applies)."""
    from llmsim.build import build_model, check_parallelism

    try:
        model = build_model(sc)
        check_parallelism(model, c.tp, 1, "plan", c.expert_parallel)  # plan.tp
        check_parallelism(model, 1, c.pp, "cluster")  # the scenario's cluster.pp
    except UserError as exc:
        raise UserError(f"{base.origin}: plan: candidate {c.label}: {exc}") from None


def _check_policy_names(base: Base, cfg: PlanConfig) -> None:
    """An unknown policy named as itself, before the lists that depend on the policies are checked
    against it (``chunk_tokens`` would otherwise blame the chunk sizes)."""
    from llmsim.scenario import check_policy_kind

    for name in cfg.policies or []:
        try:
            check_policy_kind(name)
        except ValueError as exc:
            raise UserError(f"{base.origin}: plan.policies: {exc}") from None


def _check_unused_lists(base: Base, cfg: PlanConfig, cands: list[Candidate]) -> None:
    """A list the plan states but no candidate uses (``chunk_tokens`` with no chunked policy,
    ``pd_ratios`` with no disaggregated one) would be silently ignored: the user meant to search it."""
    if cfg.chunk_tokens and not any(c.chunk_tokens for c in cands):
        raise UserError(
            f"{base.origin}: plan.chunk_tokens: only the chunked and vllm policies take a chunk size, and the "
            f"plan's policies are {', '.join(sorted({c.policy for c in cands}))}; add one to plan.policies or "
            "drop chunk_tokens"
        )
    if "pd_ratios" in cfg.model_fields_set and not any(c.pd_ratio for c in cands):
        raise UserError(
            f"{base.origin}: plan.pd_ratios: only the disaggregated policy takes a prefill:decode ratio, and "
            f"the plan's policies are {', '.join(sorted({c.policy for c in cands}))}; add it to plan.policies "
            "or drop pd_ratios"
        )
