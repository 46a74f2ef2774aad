"""vLLM's MoE decode as two parts: the fused kernel's fixed cost a call, and how many experts a step's
tokens reach. A trial of both together (nothing here changes a profile or a default).

    python benchmarks/moe_routing.py

1. The kernel. vLLM's fused_experts timings at small calls (data/validation/moe_kernels/fused_moe.csv,
   1-96 tokens, BF16) fit a fixed cost a call (``overheads.moe_call_fixed_s``: the routing's top-k,
   the token sort, the top-k sum) plus the touched experts' weights streamed at
   ``efficiency.moe_memory_fraction``: both fitted per GPU on its pull-request rows, the least
   squared log error (the fixed cost is the one that best fits at each fraction). Checked on the
   held-out whole-layer tables (layer_tables.csv).
2. Serving. The vLLM 0.30 MoE passes of data/validation/vllm-gpu-bench/ on the GPUs fitted in 1
   (H100, A100-40GB), priced with the shipped profile and with the fitted kernel, each at
   ``cluster.expert_skew`` 0 (uniform routing, the default) to 1.2 (Zipf-popular experts: fewer
   reached a step). Errors are llmsim / real - 1 of mean TPOT, mean E2EL and mean TTFT.

The passes' prompts are random token ids (vllm bench serve's random dataset): a skew that fits them
is a property of that workload and model, not a default (docs/validation.md, "MoE expert kernels").
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "vllm_gpu"))

import bench_runs  # noqa: E402
import moe_kernels  # noqa: E402
from fitting import with_efficiency  # noqa: E402

from llmsim.hardware import HardwareProfile, load_profile  # noqa: E402

SMALL_M = 96  # the small calls: the fixed cost is visible up to here, the rows above stream whole
KERNEL_GPUS = ("H100-SXM", "A100-40GB", "B200")  # GPUs with BF16 pull-request rows at 1-96 tokens
SERVING_GPUS = ("H100-SXM", "A100-40GB")  # ... and vLLM 0.30 MoE passes
SKEWS = (0.0, 0.6, 0.8, 1.0, 1.2)
SOURCE = "benchmarks/moe_routing.py trial"


def with_kernel(hw: HardwareProfile, call_s: float, fraction: float) -> HardwareProfile:
    """``hw`` with a fixed cost a fused-MoE call and its experts' streaming fraction."""
    data = with_efficiency(hw, "moe_memory_fraction", fraction, SOURCE).model_dump()
    data["overheads"]["moe_call_fixed_s"] = {"value": round(call_s, 9), "source": SOURCE}
    return HardwareProfile.model_validate(data)


def fit_kernel(rows: pd.DataFrame, hw: HardwareProfile) -> tuple[float, float, float]:
    """(fixed seconds a call, streaming fraction, MAPE) with the least squared log error on ``rows``:
    a grid over the fraction, and at each the fixed cost that best fits (a 1-D search)."""
    measured = moe_kernels.measured_us(rows).to_numpy() * 1e-6

    def loss(call_s: float, fraction: float) -> float:
        priced = moe_kernels.priced_us(rows, with_kernel(hw, call_s, fraction)) * 1e-6
        return float(np.sum(np.log(priced / measured) ** 2))

    best = (float("inf"), 0.0, 0.0)
    for fraction in np.arange(0.60, 1.0001, 0.01):
        calls = np.arange(0.0, 80e-6, 2e-6)
        errs = [loss(c, fraction) for c in calls]
        i = int(np.argmin(errs))
        if errs[i] < best[0]:
            best = (errs[i], float(calls[i]), float(fraction))
    call_s, fraction = best[1], best[2]
    if round(fraction, 2) in (0.6, 1.0) or call_s >= 78e-6:  # (a best value at the grid's edge fits nothing)
        print(f"warning: the fit ends at its grid's edge ({call_s * 1e6:.0f} us, {fraction:.2f})", file=sys.stderr)
    priced = moe_kernels.priced_us(rows, with_kernel(hw, call_s, fraction)) * 1e-6
    return call_s, round(fraction, 3), float(np.mean(np.abs(priced / measured - 1)))


def kernel_table() -> dict[str, HardwareProfile]:
    """Print the fits and the held-out layer rows; return each fitted GPU's trial profile."""
    data = pd.read_csv(moe_kernels.DATA)
    trials, lines = {}, []
    for gpu in KERNEL_GPUS:
        rows = data[(data["profile"] == gpu) & (data["dtype"] == "bf16") & (data["M"] <= SMALL_M)]
        shipped = load_profile(gpu)
        call_s, fraction, mape = fit_kernel(rows, shipped)
        trials[gpu] = with_kernel(shipped, call_s, fraction)
        before = moe_kernels.priced_us(rows, shipped)
        meas = moe_kernels.measured_us(rows).to_numpy()
        lines.append(
            {
                "profile": gpu,
                "rows": len(rows),
                "moe_call_fixed_s (us)": round(call_s * 1e6, 1),
                "moe_memory_fraction": fraction,
                "MAPE fitted": f"{mape:.1%}",
                "MAPE shipped": f"{np.mean(np.abs(before / meas - 1)):.1%}",
            }
        )
    print(f"the fused-MoE kernel at 1-{SMALL_M} tokens (pull-request rows, BF16), fitted per GPU:")
    print(pd.DataFrame(lines).to_string(index=False, formatters={"moe_memory_fraction": "{:.3f}".format}))
    layers = pd.read_csv(moe_kernels.LAYERS)
    out = []
    for gpu, g in layers.groupby("profile"):
        if gpu not in trials:
            continue
        shipped, trial = moe_kernels.priced_us(g, load_profile(gpu)), moe_kernels.priced_us(g, trials[gpu])
        for r, s, t in zip(g.itertuples(), shipped, trial, strict=True):
            out.append((gpu, r.M, r.layer_us, f"{s / r.layer_us - 1:+.1%}", f"{t / r.layer_us - 1:+.1%}"))
    print("\nheld out: whole fused-MoE layers in a CUDA graph (layer_tables.csv), error shipped / fitted kernel:")
    print(pd.DataFrame(out, columns=["profile", "M", "layer_us", "shipped", "fitted"]).to_string(index=False))
    return trials


def serving_rows(trials: dict[str, HardwareProfile]) -> pd.DataFrame:
    """Every MoE pass on a fitted GPU, shipped and fitted kernel, at each skew."""
    import llmsim
    from llmsim.scenario import scenario_from_dict

    paths = {}  # each fitted GPU's trial profile, as a file a scenario can name
    for gpu in SERVING_GPUS:
        paths[gpu] = ROOT / "results" / "moe_routing" / f"{gpu}.yaml"
        paths[gpu].parent.mkdir(parents=True, exist_ok=True)
        paths[gpu].write_text(yaml.safe_dump(trials[gpu].model_dump(mode="json", exclude_none=True)))
    out = []
    for run in bench_runs.load_runs():
        gpu = bench_runs.hardware(run)
        if not run["model"].endswith("-A3B") or gpu not in SERVING_GPUS:
            continue
        real = run["results"]
        for kernel in ("shipped", "fitted"):
            for skew in SKEWS:
                d = bench_runs.scenario_dict(run)
                d["cluster"]["expert_skew"] = skew
                if kernel == "fitted":
                    d["hardware"] = str(paths[gpu])
                s = llmsim.run(scenario_from_dict(d, run["id"], ROOT)).summary
                err = {k: s[f"mean_{k}_ms"] / real[f"mean_{k}_ms"] - 1 for k in ("tpot", "e2el", "ttft")}
                out.append({"run": run["id"], "kernel": kernel, "skew": skew, **err})
    return pd.DataFrame(out)


def main() -> int:
    trials = kernel_table()
    rows = serving_rows(trials)
    for metric in ("tpot", "e2el", "ttft"):
        wide = rows.pivot_table(index=["run"], columns=["kernel", "skew"], values=metric, sort=False)
        print(f"\nmean {metric.upper()} error by kernel and expert_skew (vLLM 0.30 MoE passes, logged KV):")
        print(wide.map(lambda v: f"{v:+.1%}").to_string())
        spread = rows.groupby(["kernel", "skew"])[metric].apply(lambda e: np.max(np.abs(e)))
        print("worst |error|: " + ", ".join(f"{k} {s:g}: {v:.1%}" for (k, s), v in spread.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
