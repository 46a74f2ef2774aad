"""How many experts a decode step of random-token prompts reaches: the routing exponent ``llmsim
bench`` sets for vllm bench's random dataset, fitted on one MoE's measured steps and checked on
another MoE's serving passes.

    python benchmarks/moe_routing.py        # ~1 s

1. The fit. data/validation/moe_kernels/routing_steps.csv: vLLM 0.30's graphed decode steps of
   granite-3.1-3b-a800m (40 experts, top-8) on an L4, 1 to 256 sequences of random-vocabulary
   tokens, with the GPU time of the kernels that are neither cuBLAS GEMMs nor attention
   (``other_ms``: the fused-MoE kernels streaming the reached experts' weights, and small
   elementwise ones). At 1-64 sequences (few rows an expert: the weights dominate) that time is
   fitted as ``base + per_expert * reached(B)``, ``reached`` as ``ops.experts_touched`` prices it
   with the exponent ``a``: B sequences reach what B^a independent tokens would. A grid over ``a``
   (0.01 apart), least squares on the relative error for the two linear terms at each.
2. The check. The vLLM 0.30 MoE passes (data/validation/vllm-gpu-bench/: Qwen3-30B-A3B, 128
   experts, on an H100 and an A6000 pair; Qwen3-16B-A3B, 64, on an A100-40GB; random-dataset
   prompts), as ``bench_runs.py``
   builds them (``llmsim bench``'s translation: the exponent set), against the same scenarios with
   independent routing (``cluster.expert_routing_exponent`` 1). Errors are llmsim / real - 1.

Real chat prompts are not measured here: the exponent is set for the random dataset only
(docs/validation.md, "MoE expert kernels").
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "vllm_gpu"))

import bench_runs  # noqa: E402

from llmsim.costmodel.ops import experts_touched  # noqa: E402

STEPS = ROOT / "data" / "validation" / "moe_kernels" / "routing_steps.csv"
# The fit's rows: up to 64 sequences a reached expert gets at most 64 x 8 / 40 = 12.8 rows, so its
# cost is its weights'; from 64 on every expert is reached whatever the exponent, and the time still
# grows (24.3 -> 30.0 ms at 256) with the rows, which the two terms do not price. The streaming rate
# the fit implies checks the choice: 0.89 of the L4's peak, as vLLM's kernel streams on the H100 and
# the A100 (0.94, 0.90; hardware profiles); other rows and forms (sensitivity) need 0.97 and more
FIT_MAX_SEQUENCES = 64
EXPONENTS = np.round(np.arange(0.30, 1.0001, 0.01), 2)


def reached(experts: int, k: int, sequences: np.ndarray, exponent: float) -> np.ndarray:
    return np.array([experts_touched(experts, k, experts, int(b), 0.0, exponent) for b in sequences])


def _terms(rows: pd.DataFrame, exponent: float, per_sequence: bool) -> np.ndarray:
    """The model's terms a row (columns): 1, the experts reached, and the sequences if asked."""
    experts, k = int(rows["E"].iloc[0]), int(rows["topk"].iloc[0])
    b = rows["sequences"].to_numpy()
    terms = [np.ones(len(b)), reached(experts, k, b, exponent)] + ([b.astype(float)] if per_sequence else [])
    return np.c_[tuple(terms)]


def fit_exponent(rows: pd.DataFrame, per_sequence: bool = False) -> tuple[float, float, float, np.ndarray]:
    """(exponent, base ms, ms per expert reached, relative errors) fitted to ``rows`` (one model):
    a grid over the exponent, least squares on the relative error for the linear terms at each
    (none negative). ``per_sequence``: a third term, ms per sequence (the sensitivity's other form)."""
    other = rows["other_ms"].to_numpy()
    best: tuple[float, float, np.ndarray] = (np.inf, 1.0, np.zeros(3))
    for a in EXPONENTS:
        x = _terms(rows, a, per_sequence) / other[:, None]  # relative: each row over its own time
        coef, *_ = np.linalg.lstsq(x, np.ones(len(other)), rcond=None)
        loss = float(np.sum((x @ coef - 1) ** 2))
        if loss < best[0] and (coef >= 0).all():
            best = (loss, float(a), coef)
    _, a, coef = best
    if a in (EXPONENTS[0], EXPONENTS[-1]):
        raise ValueError(f"the exponent ends at its grid's edge ({a}): the rows do not pin it")
    errs = _terms(rows, a, per_sequence) @ coef / other - 1
    return a, float(coef[0]), float(coef[1]), errs


def streaming_fraction(rows: pd.DataFrame, per_expert_ms: float) -> float:
    """The share of the GPU's peak bandwidth that ``per_expert_ms`` a reached expert implies: its
    weights over all layers (gate, up and down projections, 16-bit) streamed in that time."""
    from llmsim.hardware import load_profile

    r = rows.iloc[0]
    expert_bytes = 3 * r["hidden"] * r["expert_intermediate"] * 2 * r["layers"]
    return float(expert_bytes / (per_expert_ms * 1e-3) / load_profile(r["profile"]).bandwidth)


def sensitivity(rows: pd.DataFrame) -> pd.DataFrame:
    """The exponent other selections of the rows and a per-sequence term give, with the streaming
    rate each implies (above 1 is not a physical fit)."""
    out = []
    for most in sorted(rows["sequences"].unique())[3:]:
        mine = rows[rows["sequences"] <= most]
        for per_sequence in (False, True):
            if len(mine) <= 2 + per_sequence:  # (as many terms as rows: no fit)
                continue
            a, _, per_expert, errs = fit_exponent(mine, per_sequence)
            out.append(
                {
                    "sequences": f"1-{most}",
                    "terms": "+ per sequence" if per_sequence else "two",
                    "exponent": a,
                    "of peak bandwidth": round(streaming_fraction(rows, per_expert), 2),
                    "rms error": f"{np.sqrt(np.mean(errs**2)):.1%}",
                }
            )
    return pd.DataFrame(out)


def fit_table() -> float:
    rows = pd.read_csv(STEPS)
    fit_rows = rows[rows["sequences"] <= FIT_MAX_SEQUENCES]
    a, base, per_expert, errs = fit_exponent(fit_rows)
    experts, k = int(rows["E"].iloc[0]), int(rows["topk"].iloc[0])
    out = fit_rows.assign(
        independent=reached(experts, k, fit_rows["sequences"], 1.0).round(1),
        fitted=reached(experts, k, fit_rows["sequences"], a).round(1),
        priced_ms=(base + per_expert * reached(experts, k, fit_rows["sequences"], a)).round(2),
        err=[f"{e:+.1%}" for e in errs],
    )
    print(
        f"{rows['model'].iloc[0]} ({experts} experts, top-{k}) decode steps on an {rows['gpu'].iloc[0]} (routing_steps.csv):"
    )
    print("experts reached by B sequences, independent and at the fitted exponent; the MoE-and-other GPU time, priced:")
    print(out[["sequences", "other_ms", "independent", "fitted", "priced_ms", "err"]].to_string(index=False))
    bw = streaming_fraction(rows, per_expert)
    print(
        f"fitted: exponent {a:.2f}, {base:.2f} ms + {per_expert:.3f} ms per expert reached ({bw:.2f} of peak bandwidth)"
    )
    print("\nthe same fit on other rows, and with a per-sequence term (how well the rows pin it; not used;")
    print("a share of peak bandwidth above 1 is not a physical fit):")
    print(sensitivity(rows).to_string(index=False))
    return a


def serving_table(exponent: float) -> pd.DataFrame:
    import llmsim
    from llmsim.scenario import scenario_from_dict

    out = []
    for run in bench_runs.load_runs():
        if not run["model"].endswith("-A3B"):
            continue
        real = run["results"]
        for label, a in (("independent", 1.0), ("fitted", exponent)):
            d = bench_runs.scenario_dict(run)  # (llmsim bench's translation, its exponent replaced)
            d["cluster"]["expert_routing_exponent"] = a
            s = llmsim.run(scenario_from_dict(d, run["id"], ROOT)).summary
            err = {m: s[f"mean_{m}_ms"] / real[f"mean_{m}_ms"] - 1 for m in ("tpot", "e2el", "ttft")}
            out.append({"run": run["id"], "gpu": bench_runs.hardware(run), "routing": label, **err})
    return pd.DataFrame(out)


def main() -> int:
    a = fit_table()
    rows = serving_table(a)
    wide = rows.pivot_table(index=["run", "gpu"], columns="routing", values=["tpot", "e2el", "ttft"], sort=False)
    wide.columns = [f"{m} {r}" for m, r in wide.columns]
    print(
        f"\nthe vLLM 0.30 MoE passes (Qwen3 A3B models, random-dataset prompts), mean error, independent / exponent {a:.2f}:"
    )
    print(wide.map(lambda v: f"{v:+.1%}").to_string())
    for label, g in rows.groupby("routing", sort=False):
        worst = ", ".join(f"{m.upper()} {np.max(np.abs(g[m])):.1%}" for m in ("tpot", "e2el", "ttft"))
        print(f"worst |error|, {label}: {worst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
