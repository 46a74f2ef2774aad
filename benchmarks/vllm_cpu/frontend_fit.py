"""The API server's handling per request, from the bursts ``frontend_burst.py`` measured: for each
burst, when its last request reached the engine core (``EngineCore.add_request``) after the first
send, per request; the bursts of 128 and 256 give ``engine.frontend`` (llmsim/engine.py,
``VLLM_FRONTEND_INGEST``): base seconds and seconds a prompt token, from the median per request at
128 and 1,024 prompt tokens, text prompts (what ``vllm bench serve`` sends).

    .venv/bin/python benchmarks/vllm_cpu/frontend_fit.py                 # the committed runs
    .venv/bin/python benchmarks/vllm_cpu/frontend_fit.py DIR [DIR ...]   # others
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent.parent
RUNS = sorted((ROOT / "data" / "validation" / "vllm-cpu-frontend").glob("run*"))
FIT_BURSTS = 128  # bursts at least this large: the server's own pace, past its start


def bursts(run: Path) -> pd.DataFrame:
    """One row per burst: its size, prompt length and kind, the per-request pace to the engine core
    and the mean wait from send to the engine core (ms)."""
    req = pd.read_csv(run / "requests.csv.gz")
    st = pd.read_csv(run / "stamps.csv.gz", header=None, names=["kind", "request_id", "t_s"])
    st["client_id"] = st["request_id"].str.extract(r"^cmpl-(b\d+-\d+)-0")[0]  # (vLLM's id: cmpl-<header>-0[-suffix])
    core = st[st["kind"] == "core_add"].set_index("client_id")["t_s"]
    req["core_s"] = req["client_id"].map(core)
    rows = []
    for (rep, n, tokens, mode), g in req.groupby(["rep", "n", "prompt_tokens", "mode"]):
        t0 = g["send_s"].min()
        rows.append(
            {
                "run": run.name,
                "rep": rep,
                "n": n,
                "prompt_tokens": tokens,
                "mode": mode,
                "per_request_ms": 1e3 * (g["core_s"].max() - t0) / n,
                "mean_to_core_ms": 1e3 * (g["core_s"] - g["send_s"]).mean(),
            }
        )
    return pd.DataFrame(rows)


def fit(table: pd.DataFrame, mode: str = "text") -> tuple[float, float]:
    """(base seconds, seconds a prompt token) through the medians at the two prompt lengths."""
    big = table[(table["n"] >= FIT_BURSTS) & (table["mode"] == mode)]
    med = big.groupby("prompt_tokens")["per_request_ms"].median()
    (l0, y0), (l1, y1) = list(med.items())[:2]
    per_token = (y1 - y0) / (l1 - l0) / 1e3
    return y0 / 1e3 - per_token * l0, per_token


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path, default=RUNS)
    table = pd.concat([bursts(r) for r in ap.parse_args().runs], ignore_index=True)
    by = table.groupby(["n", "prompt_tokens", "mode"])
    summary = by[["per_request_ms", "mean_to_core_ms"]].median().round(2)
    summary["bursts"] = by.size()
    print(summary.to_string())
    for mode in ("text", "ids"):
        base, per_token = fit(table, mode)
        print(f"{mode} prompts, bursts of {FIT_BURSTS}+: {base * 1e3:.2f} ms + {per_token * 1e6:.2f} us a prompt token")


if __name__ == "__main__":
    main()
