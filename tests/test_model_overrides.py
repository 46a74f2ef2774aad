"""A scenario's model section changes the catalog model as the engine runs it: the weights'
quantisation groups and the attention window."""

from __future__ import annotations

from pathlib import Path

import llmsim
from llmsim.build import build_model, build_pools
from llmsim.models import ModelSpec
from llmsim.scenario import scenario_from_dict

WORKLOAD = {
    "kind": "all_at_once",
    "num_requests": 16,
    "prompt_tokens": {"dist": "fixed", "value": 12000},
    "output_tokens": {"dist": "fixed", "value": 32},
}


def _scenario(**model: object) -> dict:
    return {
        "name": "overrides",
        "model": {"name": "mistral-7b", **model},
        "hardware": "H100-SXM",
        "workload": WORKLOAD,
        "output": {"steps": "none", "trace": "none"},
    }


def _built(**model: object) -> ModelSpec:
    return build_model(scenario_from_dict(_scenario(**model), "test", Path(".")))


def test_sliding_window_zero_attends_over_the_whole_context():
    """Mistral-7B keeps a 4,096-token window; 0 is an engine that ignores it (TensorRT-LLM
    without max_attention_window_size), a number another window. Longer windows read more KV."""
    models = {w: _built(sliding_window=w) for w in (0, 1024)}
    assert _built().attention_windows() == (4096, None)
    assert models[0].attention_windows() == (None, None)
    assert models[1024].attention_windows() == (1024, None)
    tput = {w: llmsim.run(_scenario(**({} if w is None else {"sliding_window": w}))).summary for w in (0, None, 1024)}
    assert tput[0]["mean_tpot_ms"] > tput[None]["mean_tpot_ms"] > tput[1024]["mean_tpot_ms"]


def test_weight_groups_reach_the_model_and_the_report():
    sc = scenario_from_dict(_scenario(weight_dtype="int4", weight_group_size=32, weight_scale_bits=32), "t", Path("."))
    model = build_model(sc)
    assert (model.weight_group_size, model.weight_scale_bits) == (32, 32.0)
    cfg = build_pools(sc, model)[0].cost.cfg  # the GEMMs' weight streams carry them too
    assert (cfg.weight_dtype, cfg.weight_group_size, cfg.weight_scale_bits) == ("int4", 32, 32.0)
    assert model.weight_format() == "int4, 5 bits a weight with its group scales"
    assert _built().weight_format() == "bf16"


def test_the_report_names_the_window_the_run_used(tmp_path):
    """A windowed model's report says its window; model.sliding_window: 0 says there was none."""
    import yaml

    from llmsim.cli import main

    for window, expect in (
        (None, "| attention window | 4,096 tokens |"),
        (0, "| attention window | none: full attention |"),
    ):
        sc = _scenario(**({} if window is None else {"sliding_window": window}))
        sc["workload"] = {**WORKLOAD, "num_requests": 2, "prompt_tokens": {"dist": "fixed", "value": 16}}
        path, out = tmp_path / f"w{window}.yaml", tmp_path / f"w{window}"
        path.write_text(yaml.safe_dump(sc))
        assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
        assert expect in (out / "report.md").read_text()
