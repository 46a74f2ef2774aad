"""The saturation verdict where the queue cannot see an overload: an engine that admits everyone.

    python benchmarks/saturation_sweep.py

Llama-3.1-8B on one H100 under vLLM's scheduler with ``max_num_seqs`` 100,000 and an 8,192-token
budget (``admit_everyone`` in tests/test_invariants.py): nothing waits, so an overload shows only
as requests piling up in the engine. For 64-token prompts and 256, 128 or 64 output tokens, 2,000
and 4,000 requests, two seeds and offered rates from 60 to 600 req/s, it prints each run's verdict
and the in-system growth share with its standard error (llmsim/saturation.py); docs/reliability.md
quotes the table.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import llmsim
from llmsim.scenario import scenario_from_dict
from llmsim.tables import table

RATES_RPS = (60, 90, 100, 130, 200, 300, 400, 600)


def scenario(rate_rps: float, output_tokens: int, requests: int, seed: int) -> dict:
    return {
        "name": "admit-everyone",
        "seed": seed,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "policy": {"kind": "vllm", "chunk_tokens": 8192, "max_num_seqs": 100000},
        "workload": {
            "kind": "poisson",
            "rate_rps": rate_rps,
            "num_requests": requests,
            "prompt_tokens": {"dist": "fixed", "value": 64},
            "output_tokens": {"dist": "fixed", "value": output_tokens},
        },
    }


def main() -> int:
    rows = []
    for out, n, seed, rate in itertools.product((256, 128, 64), (2000, 4000), (1, 2), RATES_RPS):
        s = llmsim.run(scenario_from_dict(scenario(rate, out, n, seed), "sweep", Path.cwd())).summary["saturation"]
        share, se = s.get("in_system_growth_share"), s.get("in_system_growth_se")
        rows.append(
            [
                out,
                n,
                seed,
                rate,
                "-" if share is None else f"{share:.2f}",
                "-" if se is None else f"{se:.3f}",
                s["verdict"],
            ]
        )
    print(table(rows, ["output", "requests", "seed", "rate rps", "in-system share", "se", "verdict"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
