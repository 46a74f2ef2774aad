"""Capacity planning: goodput search and the cheapest configurations that meet the SLOs.

* ``goodput_search`` finds the highest arrival rate at which SLO attainment stays at or above
  the target, by bracketing (doubling/halving) and then bisection on the rate. The workload's
  shape is kept: a trace is replayed faster or slower (``workload.trace.speedup``), a synthetic
  workload changes only ``workload.rate_rps``.
* ``capacity_plan`` walks the candidates of a scenario's ``plan:`` section (hardware, tp,
  replicas, policies, chunk sizes, prefill:decode ratios) at a target rate, keeps the
  configurations that meet the SLOs, ranks them by price, draws the cost-latency Pareto front,
  says why the others fail (memory, latency, overload), and re-runs the winners with every
  efficiency ±15% to show whether the choice holds.

Every point is one ``llmsim.run``; the points of a round run in parallel through
``llmsim.sweep.run_points`` (local processes or Dask).
"""

from __future__ import annotations

import copy
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmsim.errors import UserError, load_yaml_file, pydantic_message
from llmsim.scenario import Scenario, scenario_from_dict, set_path
from llmsim.sweep import run_point, run_points


class PlanConfig(BaseModel):
    """The ``plan:`` section of a scenario: the search space and what to report."""

    model_config = ConfigDict(extra="forbid")

    target_rps: float | None = Field(None, gt=0)  # default: the workload's own mean rate
    hardware: list[str] = []  # default: the scenario's hardware
    tp: list[int] = []  # default: the scenario's cluster.tp
    replicas: list[int] = [1, 2, 4, 8]  # tried in increasing order until the SLOs are met
    policies: list[str] = []  # default: the scenario's policy.kind
    chunk_tokens: list[int] = []  # chunked policy only; default: the scenario's
    pd_ratios: list[str] = ["1:1"]  # disaggregated policy only: prefill:decode replicas per unit
    top: int = Field(5, gt=0)  # winners listed
    sensitivity: float = Field(0.15, ge=0, lt=1)  # efficiencies scaled by 1 ± this for the winners
    goodput_search: bool = True  # search the winner's goodput (also gives the load curves)


@dataclass
class Base:
    """A scenario as plain data (what worker processes receive), its folder and its name for errors."""

    data: dict
    base_dir: str
    origin: str

    @classmethod
    def from_path(cls, path: str | Path, overrides: dict[str, object] | None = None) -> Base:
        path = Path(path)
        data = load_yaml_file(path)
        if not isinstance(data, dict):
            raise UserError(f"{path}: expected a mapping of sections")
        for key, value in (overrides or {}).items():
            set_path(data, key, value)
        return cls(data, str(path.resolve().parent), str(path))

    @classmethod
    def from_scenario(cls, sc: Scenario) -> Base:
        return cls(sc.model_dump(exclude={"base_dir"}), sc.base_dir, sc.name)

    def scenario(self, overrides: dict[str, object] | None = None) -> Scenario:
        d = copy.deepcopy(self.data)
        for key, value in (overrides or {}).items():
            set_path(d, key, value)
        return scenario_from_dict(d, self.origin, Path(self.base_dir))

    def plan_config(self) -> PlanConfig:
        try:
            return PlanConfig.model_validate(self.data.get("plan") or {})
        except ValidationError as exc:
            raise UserError(pydantic_message(exc, f"{self.origin}: plan")) from None


# ---------------------------------------------------------------- arrival rate, shape kept


def rate_knob(base: Base) -> tuple[str, float]:
    """(key to override, rate in req/s per unit of that key). Trace: speedup; synthetic: rate_rps."""
    from llmsim.build import build_workload

    sc = base.scenario()
    w = sc.workload
    if w.kind in ("poisson", "gamma"):
        return "workload.rate_rps", 1.0
    if w.kind == "trace":
        assert w.trace is not None
        unit = base.scenario({"workload.trace.speedup": 1.0})
        stats = build_workload(unit).stats()
        if not math.isfinite(stats["mean_rate_rps"]):
            raise UserError(f"{base.origin}: workload.trace: needs at least two arrivals at different times")
        return "workload.trace.speedup", stats["mean_rate_rps"]
    raise UserError(
        f"{base.origin}: workload.kind {w.kind!r} has no arrival rate to scale; use poisson, gamma or trace"
    )


def rate_overrides(base: Base, rate_rps: float, knob: tuple[str, float] | None = None) -> dict[str, object]:
    key, per_unit = knob or rate_knob(base)
    return {key: rate_rps / per_unit}


def offered_rate(base: Base, knob: tuple[str, float] | None = None) -> float:
    """The scenario's own arrival rate (nominal for synthetic, measured for a trace)."""
    key, per_unit = knob or rate_knob(base)
    sc = base.scenario()
    if key == "workload.rate_rps":
        return float(sc.workload.rate_rps or 0.0)
    assert sc.workload.trace is not None
    return sc.workload.trace.speedup * per_unit


# ---------------------------------------------------------------- goodput search


@dataclass
class GoodputResult:
    """The highest rate found meeting the attainment target, and the lowest found missing it."""

    rate_rps: float  # highest rate that met the target (0 if none did)
    fail_rps: float | None  # lowest rate that missed it (None: never missed up to the last doubling)
    target: float
    attainment: float | None  # at rate_rps
    verdict: str | None  # saturation verdict at rate_rps
    evaluations: list[dict] = field(default_factory=list)  # one sweep row per run, with its rate

    @property
    def step_rps(self) -> float | None:
        return None if self.fail_rps is None else self.fail_rps - self.rate_rps

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.evaluations).sort_values("rate_rps").reset_index(drop=True)


def goodput_search(
    base: Base | Scenario | str | Path,
    overrides: dict[str, object] | None = None,
    target: float | None = None,
    start_rps: float | None = None,
    rel_tol: float = 0.05,
    max_runs: int = 24,
) -> GoodputResult:
    """Bracket then bisect the arrival rate until the bracket is within ``rel_tol`` of its top."""
    base = _as_base(base)
    overrides = dict(overrides or {})
    knob = rate_knob(base)
    sc = base.scenario(overrides)
    target = sc.slo.attainment if target is None else target
    rate = start_rps or offered_rate(base, knob)
    evals: list[dict] = []

    def ok(r: float) -> bool:
        row = run_point(base.data, base.base_dir, base.origin, {**overrides, **rate_overrides(base, r, knob)})
        if row["error"]:
            raise UserError(str(row["error"]))
        evals.append({"rate_rps": r, **row})
        return bool(row["slo_attainment"] is not None and row["slo_attainment"] >= target)

    lo, hi = 0.0, None
    if ok(rate):
        lo = rate
        for _ in range(10):
            if not ok(lo * 2):
                hi = lo * 2
                break
            lo *= 2
    else:
        hi = rate
        for _ in range(10):
            if ok(hi / 2):
                lo = hi / 2
                break
            hi /= 2
    while hi is not None and lo > 0 and hi - lo > rel_tol * hi and len(evals) < max_runs:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    at = next((e for e in evals if e["rate_rps"] == lo), None)
    return GoodputResult(
        rate_rps=lo,
        fail_rps=hi,
        target=target,
        attainment=None if at is None else at["slo_attainment"],
        verdict=None if at is None else at["verdict"],
        evaluations=evals,
    )


def _as_base(x: Base | Scenario | str | Path) -> Base:
    if isinstance(x, Base):
        return x
    if isinstance(x, Scenario):
        return Base.from_scenario(x)
    return Base.from_path(x)


# ---------------------------------------------------------------- capacity plan


@dataclass
class Candidate:
    """One configuration of the search space (before choosing the replica count)."""

    hardware: str
    tp: int
    policy: str
    chunk_tokens: int | None
    pd_ratio: str | None

    @property
    def label(self) -> str:
        extra = f" chunk{self.chunk_tokens}" if self.chunk_tokens else ""
        extra += f" P:D {self.pd_ratio}" if self.pd_ratio else ""
        return f"{self.hardware} tp{self.tp} {self.policy}{extra}"

    def overrides(self, replicas: int) -> dict[str, object]:
        out: dict[str, object] = {"hardware": self.hardware, "policy.kind": self.policy}
        if self.chunk_tokens:
            out["policy.chunk_tokens"] = self.chunk_tokens
        if self.pd_ratio:
            p, d = (int(x) for x in self.pd_ratio.split(":"))
            out["cluster.prefill_pool"] = {"hardware": self.hardware, "replicas": p * replicas, "tp": self.tp}
            out["cluster.decode_pool"] = {"hardware": self.hardware, "replicas": d * replicas, "tp": self.tp}
        else:
            out["cluster.replicas"] = replicas
            out["cluster.tp"] = self.tp
        return out

    def devices(self, replicas: int) -> int:
        if self.pd_ratio:
            p, d = (int(x) for x in self.pd_ratio.split(":"))
            return (p + d) * replicas * self.tp
        return replicas * self.tp


def candidates(base: Base, cfg: PlanConfig) -> list[Candidate]:
    sc = base.scenario()
    out = []
    for hw in cfg.hardware or [sc.hardware]:
        for tp in cfg.tp or [sc.cluster.tp]:
            for policy in cfg.policies or [sc.policy.kind]:
                chunks = (cfg.chunk_tokens or [sc.policy.chunk_tokens]) if policy == "chunked" else [None]
                ratios = cfg.pd_ratios if policy == "disaggregated" else [None]
                for chunk in chunks:
                    for ratio in ratios:
                        if ratio is not None and not _valid_ratio(ratio):
                            raise UserError(f"{base.origin}: plan.pd_ratios: {ratio!r} is not like '1:2'")
                        out.append(Candidate(hw, tp, policy, chunk, ratio))
    return out


def _valid_ratio(r: str) -> bool:
    parts = r.split(":")
    return len(parts) == 2 and all(p.strip().isdigit() and int(p) > 0 for p in parts)


PLAN_COLUMNS = [
    "config",
    "hardware",
    "tp",
    "replicas",
    "policy",
    "chunk_tokens",
    "pd_ratio",
    "devices",
    "usd_per_hour",
    "usd_per_mtok",
    "power_w",
    "j_per_token",
    "slo_attainment",
    "ttft_p99_s",
    "tbt_p99_s",
    "e2e_p99_s",
    "throughput_rps",
    "verdict",
    "feasible",
    "reason",
]


@dataclass
class Plan:
    target_rps: float
    target_attainment: float
    table: pd.DataFrame  # every evaluated point (PLAN_COLUMNS)
    winners: pd.DataFrame  # feasible, cheapest first
    pareto: pd.DataFrame  # feasible, not dominated in (usd_per_hour, ttft_p99_s)
    infeasible: pd.DataFrame  # one row per candidate that never met the SLOs, with its reason
    sensitivity: pd.DataFrame = field(default_factory=pd.DataFrame)
    goodput: GoodputResult | None = None
    recommendation: str = ""


def capacity_plan(
    base: Base | Scenario | str | Path,
    target_rps: float | None = None,
    workers: int | None = None,
    dask: str | object | None = None,
    progress: bool = True,
) -> Plan:
    """Search the ``plan:`` candidates at ``target_rps``; the cheapest SLO-meeting configs win."""
    from llmsim.hardware import load_profile

    base = _as_base(base)
    cfg = base.plan_config()
    sc = base.scenario()
    knob = rate_knob(base)
    target_rps = target_rps or cfg.target_rps or offered_rate(base, knob)
    rate = rate_overrides(base, target_rps, knob)
    cands = candidates(base, cfg)
    replicas = sorted(set(cfg.replicas))
    power = {c.hardware: load_profile(c.hardware, Path(base.base_dir)).power_w.value for c in cands}
    rows: list[dict] = []
    open_ = list(range(len(cands)))  # candidates still looking for a replica count that works
    for n in replicas:
        points = [{**cands[i].overrides(n), **rate} for i in open_]
        results = run_points(base.data, base.base_dir, base.origin, points, workers, dask, progress, f"plan x{n}")
        still = []
        for i, res in zip(open_, results, strict=True):
            row = _plan_row(cands[i], n, res, power[cands[i].hardware], sc.slo.attainment)
            rows.append(row)
            if not row["feasible"] and not row["reason"].startswith(("memory", "invalid")):
                still.append(i)
        open_ = still
        if not open_:
            break
    table = pd.DataFrame(rows, columns=PLAN_COLUMNS)
    feasible = table[table["feasible"]].sort_values(["usd_per_hour", "ttft_p99_s"], kind="stable")
    winners = feasible.head(cfg.top).reset_index(drop=True)
    plan = Plan(
        target_rps=target_rps,
        target_attainment=sc.slo.attainment,
        table=table,
        winners=winners,
        pareto=pareto_front(feasible, "usd_per_hour", "ttft_p99_s"),
        infeasible=_infeasible(table),
    )
    if not winners.empty and cfg.sensitivity > 0:
        plan.sensitivity = sensitivity(base, cands, winners.head(3), rate, cfg.sensitivity, workers, progress)
    if not winners.empty and cfg.goodput_search:
        best = _candidate_of(cands, winners.iloc[0])
        plan.goodput = goodput_search(base, best.overrides(int(winners.iloc[0]["replicas"])), start_rps=target_rps)
    plan.recommendation = recommend(plan)
    return plan


def _plan_row(c: Candidate, replicas: int, res: dict, power_w: float, target: float) -> dict:
    devices = c.devices(replicas)
    tok_s = (res.get("input_tok_s") or 0.0) + (res.get("output_tok_s") or 0.0)
    row = {
        "config": f"{replicas}x {c.label}",
        "hardware": c.hardware,
        "tp": c.tp,
        "replicas": replicas,
        "policy": c.policy,
        "chunk_tokens": c.chunk_tokens,
        "pd_ratio": c.pd_ratio,
        "devices": devices,
        "power_w": power_w * devices,
        "j_per_token": power_w * devices / tok_s if tok_s else None,
        **{k: res.get(k) for k in PLAN_COLUMNS if k in res},
    }
    err = res.get("error")
    if err:
        kind = "memory" if "does not fit" in err else "invalid"
        row.update(feasible=False, reason=f"{kind}: {err}")
    elif res.get("slo_met"):
        row.update(feasible=True, reason="meets SLOs")
    elif res.get("verdict") == "overloaded":
        row.update(
            feasible=False,
            reason=f"overload: the queue grows by {res['queue_growth_share']:.0%} of the offered load; "
            f"attainment {res['slo_attainment']:.1%} < {target:.0%}",
        )
    else:
        row.update(
            feasible=False,
            reason=f"latency: not overloaded ({res['verdict']}) but too slow per step: attainment "
            f"{res['slo_attainment']:.1%} < {target:.0%} (TTFT p99 {_ms(res['ttft_p99_s'])}, "
            f"TBT p99 {_ms(res['tbt_p99_s'])})",
        )
    return row


def _ms(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1e3:.0f} ms"


def _infeasible(table: pd.DataFrame) -> pd.DataFrame:
    """Per candidate that never met the SLOs: its last (largest) evaluated point and why."""
    if table.empty:
        return table
    key = table["config"].str.split(" ", n=1).str[1]  # the candidate's label, without the replica count
    bad = table[~key.isin(set(key[table["feasible"].astype(bool)]))]
    return bad[~key[bad.index].duplicated(keep="last")].reset_index(drop=True)


def pareto_front(df: pd.DataFrame, cost: str, latency: str) -> pd.DataFrame:
    """Rows no other row beats on both cost and latency (lower is better for both)."""
    d = df.dropna(subset=[cost, latency]).sort_values([cost, latency], kind="stable")
    keep, best = [], math.inf
    for idx, v in zip(d.index, d[latency], strict=True):
        if v < best:
            keep.append(idx)
            best = v
    return d.loc[keep].reset_index(drop=True)


def _candidate_of(cands: list[Candidate], row: pd.Series) -> Candidate:
    for c in cands:
        if f"{int(row['replicas'])}x {c.label}" == row["config"]:
            return c
    raise KeyError(row["config"])  # pragma: no cover - rows come from these candidates


def scaled_profile(name: str, base_dir: str, factor: float, out_dir: Path) -> str:
    """Write a copy of a hardware profile with every efficiency fraction scaled (capped at 1)."""
    from llmsim.hardware import dump_profile, load_profile

    hw = load_profile(name, Path(base_dir))
    update = {}
    for key in ("gemm_max_fraction", "memory_fraction", "attention_fraction", "elementwise_memory_fraction"):
        fig = getattr(hw.efficiency, key)
        if fig is not None:
            value = min(1.0, fig.value * factor)
            update[key] = fig.model_copy(update={"value": value, "source": f"{fig.source} (x{factor:.2f})"})
    hw2 = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update=update)})
    path = out_dir / f"{hw.name}_eff{factor:.2f}.yaml"
    dump_profile(hw2, path)
    return str(path)


def sensitivity(
    base: Base,
    cands: list[Candidate],
    winners: pd.DataFrame,
    rate: dict,
    frac: float,
    workers: int | None,
    progress: bool,
) -> pd.DataFrame:
    """Re-run each winner with every efficiency at (1 - frac) and (1 + frac).

    The scaled profiles are temporary files on this machine, so these few runs stay on local
    processes even when the plan itself runs on Dask."""
    with tempfile.TemporaryDirectory(prefix="llmsim_sens_") as tmp:
        return _sensitivity(base, cands, winners, rate, frac, Path(tmp), workers, progress)


def _sensitivity(
    base: Base,
    cands: list[Candidate],
    winners: pd.DataFrame,
    rate: dict,
    frac: float,
    out_dir: Path,
    workers: int | None,
    progress: bool,
) -> pd.DataFrame:
    points, labels = [], []
    for _, w in winners.iterrows():
        c = _candidate_of(cands, w)
        for factor in (1 - frac, 1 + frac):
            hw_path = scaled_profile(c.hardware, base.base_dir, factor, out_dir)
            ov = {**c.overrides(int(w["replicas"])), **rate, "hardware": hw_path}
            for pool in ("cluster.prefill_pool", "cluster.decode_pool"):
                if pool in ov:
                    ov[pool] = {**ov[pool], "hardware": hw_path}  # type: ignore[dict-item]
            points.append(ov)
            labels.append((w["config"], factor, w["slo_attainment"]))
    rows = run_points(base.data, base.base_dir, base.origin, points, workers, None, progress, "sensitivity")
    return pd.DataFrame(
        [
            {
                "config": cfg,
                "efficiency_factor": factor,
                "slo_attainment_nominal": nominal,
                "slo_attainment": r["slo_attainment"],
                "ttft_p99_s": r["ttft_p99_s"],
                "tbt_p99_s": r["tbt_p99_s"],
                "verdict": r["verdict"],
                "meets_slos": bool(r["slo_met"]),
            }
            for (cfg, factor, nominal), r in zip(labels, rows, strict=True)
        ]
    )


def recommend(plan: Plan) -> str:
    """A plain-language recommendation built only from the plan's own numbers."""
    lines = []
    if plan.winners.empty:
        reasons = plan.infeasible["reason"].str.split(":").str[0].value_counts()
        lines.append(
            f"No candidate meets the SLOs at {plan.target_rps:.2f} req/s "
            f"(target attainment {plan.target_attainment:.0%}). Why: "
            + ", ".join(f"{n} failed on {k}" for k, n in reasons.items())
            + ". Widen the search (more replicas, larger tp, other hardware) or relax the SLOs."
        )
        return " ".join(lines)
    w = plan.winners.iloc[0]
    lines.append(
        f"Deploy {w['config']} ({int(w['devices'])} devices): it meets the SLOs for "
        f"{w['slo_attainment']:.1%} of requests at {plan.target_rps:.2f} req/s, for ${w['usd_per_hour']:.2f}/hour, "
        f"${w['usd_per_mtok']:.3f} per million tokens and {w['j_per_token']:.3f} J per token at TDP."
    )
    if len(plan.winners) > 1:
        r = plan.winners.iloc[1]
        lines.append(f"Runner-up: {r['config']} at ${r['usd_per_hour']:.2f}/hour.")
    if plan.goodput is not None:
        g = plan.goodput
        head = g.rate_rps / plan.target_rps - 1 if plan.target_rps else 0.0
        lines.append(
            f"Its goodput is {g.rate_rps:.2f} req/s ({head:+.0%} headroom over the target; verdict there: {g.verdict})."
        )
        if g.verdict == "overloaded":
            lines.append(
                "That rate is overloaded: the queue grows, and the SLOs hold only because the workload ends "
                "first; replay a longer slice before relying on the headroom."
            )
    if not plan.sensitivity.empty:
        s = plan.sensitivity[plan.sensitivity["config"] == w["config"]]
        low = s[s["efficiency_factor"] < 1]
        holds = bool(low["meets_slos"].all())
        lines.append(
            "With every efficiency 15% lower it "
            + ("still meets the SLOs" if holds else "MISSES the SLOs")
            + f" (attainment {low['slo_attainment'].iloc[0]:.1%})"
            + ("; the choice holds." if holds else "; budget one more replica or re-check the efficiencies.")
        )
    n_bad = len(plan.infeasible)
    if n_bad:
        kinds = plan.infeasible["reason"].str.split(":").str[0].value_counts()
        lines.append(
            f"{n_bad} candidate(s) never met the SLOs: " + ", ".join(f"{n} {k}" for k, n in kinds.items()) + "."
        )
    return " ".join(lines)


def write_plan(plan: Plan, base: Base, out_dir: Path, progress: bool = True) -> list[Path]:
    """Tables (Parquet + CSV), plan.json, and the winner's full run (requests/steps/summary) for the report."""
    import json

    from llmsim.api import run
    from llmsim.errors import atomic_write_text
    from llmsim.report import write_scenario
    from llmsim.sweep import write_table

    out_dir = Path(out_dir)
    written = write_table(plan.table, out_dir, "plan")
    for name, df in (("winners", plan.winners), ("pareto", plan.pareto), ("sensitivity", plan.sensitivity)):
        atomic_write_text(out_dir / f"{name}.csv", df.to_csv(index=False, float_format="%.9g"))
        written.append(out_dir / f"{name}.csv")
    if plan.goodput is not None:
        atomic_write_text(out_dir / "load.csv", plan.goodput.frame().to_csv(index=False, float_format="%.9g"))
        written.append(out_dir / "load.csv")
    meta = {
        "target_rps": plan.target_rps,
        "target_attainment": plan.target_attainment,
        "recommendation": plan.recommendation,
        "winner": None if plan.winners.empty else plan.winners.iloc[0]["config"],
        "goodput": None
        if plan.goodput is None
        else {
            "rate_rps": plan.goodput.rate_rps,
            "fail_rps": plan.goodput.fail_rps,
            "attainment": plan.goodput.attainment,
            "verdict": plan.goodput.verdict,
        },
    }
    atomic_write_text(out_dir / "plan.json", json.dumps(meta, indent=2, default=str) + "\n")
    written.append(out_dir / "plan.json")
    if not plan.winners.empty:
        cands = candidates(base, base.plan_config())
        w = plan.winners.iloc[0]
        ov = {**_candidate_of(cands, w).overrides(int(w["replicas"])), **rate_overrides(base, plan.target_rps)}
        sc = base.scenario(ov)
        written += run(sc).write(out_dir)
        written.append(write_scenario(sc, out_dir))
    return written
