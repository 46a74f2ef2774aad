"""Where the twin's decode steps are priced short: the step after the running batch changed.

Prices every decode-only step of a campaign's runs (no prompt tokens in it) with the campaign's own
fit (``engine-fit/``: its kernel model and ``prepare`` term, what ``llmsim twin`` uses) and groups
the error by what the step before did:

- steps since the last step that carried prompt tokens (1 = the step right after a prefill, when
  the request that finished its prompt decodes for the first time);
- whether a request left the batch in the step before ("shrank": fewer sequences than before),
  by batch size.

    python benchmarks/vllm_cpu/batch_change.py data/validation/vllm-cpu-xeon   # or vllm-cpu, ...

The steps a campaign recorded are real vLLM; nothing here is fitted. ``extra_ms`` is the measured
time the fit does not price, per step (positive: llmsim is short).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from llmsim.calibration.replay import MODEL_CONFIG
from llmsim.calibration.serving import parse_batch, read_run, run_dtype, step_phases
from llmsim.costmodel import CostConfig, CostModel
from llmsim.costmodel.ops import model_batch_shape
from llmsim.engine import EngineSpec, HostTerm
from llmsim.hardware import load_profile
from llmsim.models import from_hf_config


def _runs(split: dict) -> list[tuple[str, str]]:
    """(split, run) of the campaign's calibration and validation runs and their repeats."""
    repeats = split.get("validation_repeats", [])
    repeats = repeats.get("runs", []) if isinstance(repeats, dict) else repeats
    return [(kind, name) for kind in ("calibration", "validation") for name in split[kind]] + [
        ("repeat", name) for name in repeats
    ]


def decode_steps(campaign: Path) -> pd.DataFrame:
    """Every decode-only step of the campaign's calibration and validation runs and their repeats
    (split ``repeat``: the same validation workloads run again), measured and priced."""
    split = json.loads((campaign / "split.json").read_text())
    hw = load_profile(str(campaign / "engine-fit" / "hardware.yaml"))
    prepare = HostTerm(**yaml.safe_load((campaign / "engine-fit" / "engine.yaml").read_text())["prepare"])
    spec = from_hf_config(MODEL_CONFIG)
    frames = []
    for kind, name in _runs(split):
        if not (campaign / name / "steps.csv.gz").exists():
            continue  # (the step profiles' folders hold no serving steps)
        run = read_run(campaign / name)
        dt = run_dtype(run)
        cfg = CostConfig(weight_dtype=dt, kv_dtype=dt, act_dtype=dt, attention_kernel="flash")
        cost = CostModel(spec, hw, cfg, EngineSpec("device only", "no host terms"))
        ph = step_phases(run.steps)
        parsed = [parse_batch(b) for b in ph.batch]
        prompt = np.array([sum(c for c, _ in chunks) for chunks, _ in parsed])
        since, k = [], 10**6
        for p in prompt:  # steps since the last one with prompt tokens (1 = right after it)
            since.append(k + 1)
            k = 0 if p > 0 else k + 1
        ph["since"] = since
        ph["shrank"] = ph.seqs < ph.seqs.shift(1).fillna(0)
        keep = (ph.exec_s > 0).to_numpy() & (prompt == 0)
        ph = ph[keep].copy()
        ph["priced_s"] = [cost.step_time(model_batch_shape(spec, *p)) for p, k in zip(parsed, keep, strict=True) if k]
        ph["priced_s"] += prepare.seconds(ph.seqs, ph.tokens)
        ph["split"] = kind
        ph["run"] = name
        frames.append(ph)
    return pd.concat(frames, ignore_index=True)


def table(steps: pd.DataFrame, by: list) -> pd.DataFrame:
    g = steps.groupby(by, observed=True)
    return pd.DataFrame(
        {
            "steps": g.size(),
            "seqs": g.seqs.mean().round(1),
            "error": (g.priced_s.sum() / g.exec_s.sum() - 1).map("{:+.1%}".format),
            "extra_ms": ((g.exec_s.sum() - g.priced_s.sum()) / g.size() * 1e3).round(2),
        }
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[0] + "\nusage: batch_change.py CAMPAIGN_FOLDER", file=sys.stderr)
        return 2
    steps = decode_steps(Path(argv[0]))
    since = pd.cut(steps.since, [0, 1, 2, 3, 5, 9, 17, 10**7], labels=["1", "2", "3", "4-5", "6-9", "10-17", "18+"])
    seqs = pd.cut(steps.seqs, [0, 4, 8, 16, 32, 64])
    settled = steps[steps.since > 3]  # (away from a prefill)
    for split in ("calibration", "validation"):
        mine = steps.split == split
        print(f"{split}: decode-only steps with >= 4 sequences, by steps since the last prompt-carrying step")
        print(table(steps[mine & (steps.seqs >= 4)], [since[mine & (steps.seqs >= 4)]]).to_string(), "\n")
        sub = settled[settled.split == split]
        print(f"{split}: steps 4+ after a prefill, by whether a request left the batch the step before")
        print(table(sub, [sub.shrank.map({True: "shrank", False: "same"}), seqs[sub.index]]).to_string(), "\n")
    calm = steps[(steps.since >= 10) & ~steps.shrank]  # settled: nothing changed the batch for 10 steps
    print("settled decode steps (10+ after a prefill, no request left), every run and its repeats:")
    print(table(calm, [calm.run.str.replace(r"-rep[23]$", "", regex=True), calm.run]).to_string(), "\n")
    print("settled decode steps of every run, by batch size:")
    print(table(calm, [pd.cut(calm.seqs, [0, 1, 2, 3, 4, 8, 16, 32, 64])]).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
