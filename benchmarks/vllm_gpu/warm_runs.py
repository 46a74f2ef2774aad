"""Real vLLM 0.30 passes on a warm server, replayed with the server's history.

`data/validation/vllm-gpu-bench/warm_runs.yaml` holds 11 `vllm serve` processes and the 32 passes of
`vllm bench serve` each ran, in order: every pass drew the random dataset with `--seed 0`, so a later
pass repeats the earlier passes' first prompts and finds what the prefix cache kept of them (the
passes runs.yaml leaves out for that reason, and the 2xA6000 server's three it keeps). Each pass is
simulated twice through `llmsim bench`'s translation (benchmarks/vllm_gpu/bench_runs.py): cold, as a
pass alone on a fresh server (what `llmsim bench` does without `--after`), and warm, on the caches the
server's earlier passes left (api.run server_cache: what `llmsim bench --after` does). Nothing is
fitted to these passes.

The server log's "Prefix cache hit rate" (vLLM's running aggregate since the server started) is set
beside llmsim's over the same requests: where a pass ends with no later log line, the real one is
the last read during the pass, so it counts fewer of that pass's requests.

    python benchmarks/vllm_gpu/warm_runs.py          # per-pass table and the summary (~10 s)
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from llmsim.results import ServerCache

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_runs  # noqa: E402  (the 43 passes' translation, shared)

ROOT = HERE.parent.parent
WARM = ROOT / "data" / "validation" / "vllm-gpu-bench" / "warm_runs.yaml"
FIGURES = ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_e2el_ms")
TABLED = ("mean_ttft_ms", "median_ttft_ms", "mean_e2el_ms")  # (TPOT in the summary only)


def load_servers(path: Path = WARM) -> dict[str, list[dict]]:
    """The passes of each server process, in the order they ran."""
    servers: dict[str, list[dict]] = defaultdict(list)
    for run in yaml.safe_load(path.read_text())["runs"]:
        servers[run["server_start"]].append(run)
    return {k: sorted(v, key=lambda r: r["pass_index"]) for k, v in servers.items()}


def _run(run: dict, cache: ServerCache | None, keep: bool) -> tuple[dict, ServerCache | None]:
    import llmsim
    from llmsim.scenario import scenario_from_dict

    data = bench_runs.scenario_dict(run)
    res = llmsim.run(scenario_from_dict(data, run["id"], ROOT), server_cache=cache, keep_server_cache=keep)
    return res.summary, res.server_cache


def score_server(passes: list[dict]) -> list[dict]:
    """Each pass cold and warm, with the running hit rates (real: the log's; llmsim: its own)."""
    rows, cache, hit, query = [], None, 0, 0
    for run in passes:
        cold, _ = _run(run, None, keep=False)
        warm, cache = _run(run, cache, keep=True)
        pc = warm.get("prefix_cache", {})
        queried = pc.get("queried_prompt_tokens", 0)  # (new requests' lookups, as vLLM's hit rate counts)
        hit, query = hit + pc.get("hit_rate", 0.0) * queried, query + queried
        log = run.get("prefix_cache_hit_rate_log") or {}
        row = {
            "pass": run["id"],
            "gpu": bench_runs.hardware(run),
            "rate": run["bench"]["request_rate"],
            "prompts": run["bench"]["num_prompts"],
            "hit_log_pct": log.get("value_pct"),
            "hit_llmsim_pct": 100.0 * hit / query if query else 0.0,
            "pass_hit_pct": 100.0 * pc.get("hit_rate", 0.0),
        }
        for f in FIGURES:
            real = run["results"].get(f)
            row[f] = real
            for name, sim in (("cold", cold), ("warm", warm)):
                row[f"{f}_{name}"] = sim[f] / real - 1 if real else math.nan
        rows.append(row)
    return rows


def summary_lines(rows: list[dict]) -> list[str]:
    later = [r for r in rows if r["pass_hit_pct"] > 0]
    out = [f"{len(rows)} passes on {len({r['pass'].rsplit('/', 1)[0] for r in rows})} servers; {len(later)} find hits:"]
    for f in FIGURES:
        for name in ("cold", "warm"):
            errs = [abs(r[f"{f}_{name}"]) for r in later if not math.isnan(r[f"{f}_{name}"])]
            med = statistics.median(errs) if errs else math.nan
            w10 = sum(e <= 0.10 for e in errs)
            w20 = sum(e <= 0.20 for e in errs)
            out.append(
                f"  {f:15s} {name}: median |error| {med:6.1%}, within 10 % {w10}/{len(errs)}, "
                f"within 20 % {w20}/{len(errs)}, worst {max(errs, default=math.nan):6.1%}"
            )
    return out


def main() -> int:
    import pandas as pd

    rows = [row for passes in load_servers().values() for row in score_server(passes)]
    print("each pass alone (cold) and after the server's earlier passes (warm), llmsim's error against the real pass;")
    print("hit: the server log's prefix-cache hit rate since it started, and llmsim's over the same requests")
    frame = pd.DataFrame(rows).set_index("pass")
    frame["rate"] = frame["rate"].map(lambda r: f"{float(r):g}")
    shown = ["gpu", "rate", "prompts", "hit_log_pct", "hit_llmsim_pct"]
    for f in TABLED:
        shown += [f, f"{f}_cold", f"{f}_warm"]
    pct = {"hit_log_pct": "{:.1f}".format, "hit_llmsim_pct": "{:.1f}".format}
    errs = {f"{f}_{k}": "{:+.1%}".format for f in TABLED for k in ("cold", "warm")}
    reals = {f: "{:,.1f}".format for f in TABLED}
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        text = frame[shown].to_string(formatters={**pct, **errs, **reals})
    print(text)
    print()
    print("\n".join(summary_lines(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
