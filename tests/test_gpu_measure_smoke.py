"""Smoke test of benchmarks/gpu/measure.py: pure shape/CSV code always; a --tiny CPU run when torch exists."""

import csv
import itertools
import json
from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "measure.py"


@pytest.fixture(scope="module")
def measure():
    return load_script("gpu_measure", SCRIPT)


def test_import_does_not_need_torch(measure):
    src = SCRIPT.read_text()
    top = src.split("\ndef ", 1)[0]
    assert "import torch" not in top


def test_model_constants(measure):
    m8, m70 = measure.MODELS["llama-3.1-8b"], measure.MODELS["llama-3.1-70b"]
    assert (m8["hidden"], m8["intermediate"], m8["layers"], m8["heads"], m8["kv_heads"]) == (
        4096,
        14336,
        32,
        32,
        8,
    )
    assert (m70["hidden"], m70["intermediate"], m70["heads"], m70["kv_heads"]) == (8192, 28672, 64, 8)
    assert m8["head_dim"] == m70["head_dim"] == 128
    assert m8["vocab"] == m70["vocab"] == 128256


def test_m_grid(measure):
    g = measure.M_GRID
    assert g[0] == 1 and g[-1] == 8192
    assert g == sorted(set(g))
    assert all(b / a <= 2 for a, b in itertools.pairwise(g))  # log-ish: no gap wider than 2x
    assert measure.PREFILL_LENS[0] == 128 and measure.PREFILL_LENS[-1] == 8192
    assert measure.DECODE_BATCHES[0] == 1 and measure.DECODE_BATCHES[-1] == 256
    assert measure.DECODE_CTXS[0] == 128 and measure.DECODE_CTXS[-1] == 8192


def test_tp_shards_divide(measure):
    for cfg in measure.MODELS.values():
        for tp in measure.TPS:
            measure.check_tp(cfg, tp)
    with pytest.raises(ValueError):
        measure.check_tp(measure.MODELS["llama-3.1-8b"], 3)


def test_gemm_shapes_match_model_dims(measure):
    rows = measure.gemm_shapes(measure.MODELS, measure.TPS, measure.M_GRID)
    assert {r["op"] for r in rows} == set(measure.GEMM_OPS)
    assert {r["m"] for r in rows} == set(measure.M_GRID)
    keys = {(r["op"], r["m"], r["n"], r["k"]) for r in rows}
    assert len(keys) == len(rows)  # deduplicated
    for name, c in measure.MODELS.items():
        h, d = c["hidden"], c["head_dim"]
        for tp in measure.TPS:
            expect = {
                "attn_pre_proj": ((c["heads"] + 2 * c["kv_heads"]) * d // tp, h),
                "attn_post_proj": (h, c["heads"] * d // tp),
                "mlp_up_proj": (2 * c["intermediate"] // tp, h),
                "mlp_down_proj": (h, c["intermediate"] // tp),
                "lm_head": (c["vocab"] // tp, h),
            }
            for op, (n, k) in expect.items():
                for m in measure.M_GRID:
                    assert (op, m, n, k) in keys, (name, tp, op, m)
                    row = next(r for r in rows if (r["op"], r["m"], r["n"], r["k"]) == (op, m, n, k))
                    assert f"{name}/tp{tp}" in row["_models"]
    # spot values: Llama-3.1-8B at TP 2
    nk = measure.gemm_nk(measure.MODELS["llama-3.1-8b"], 2)
    assert nk["attn_pre_proj"] == (3072, 4096)
    assert nk["mlp_up_proj"] == (14336, 4096)
    assert nk["mlp_down_proj"] == (4096, 7168)
    assert nk["lm_head"] == (64128, 4096)


def test_attention_and_elementwise_shapes(measure):
    rows = measure.attention_shapes(
        measure.MODELS, measure.TPS, measure.PREFILL_LENS, measure.DECODE_BATCHES, measure.DECODE_CTXS
    )
    heads = {(r["n_q_heads"], r["n_kv_heads"]) for r in rows}
    assert {(32 // tp, 8 // tp) for tp in measure.TPS} <= heads
    assert {(64 // tp, 8 // tp) for tp in measure.TPS} <= heads
    for r in rows:
        assert r["head_dim"] == 128
        if r["op"] == "attention_prefill":
            assert r["batch"] == 1 and r["q_len"] == r["kv_len"]
        else:
            assert r["op"] == "attention_decode" and r["q_len"] == 1
    ew = measure.elementwise_shapes(measure.MODELS, measure.TPS, measure.M_GRID)
    assert {r["hidden"] for r in ew if r["op"] == "input_layernorm"} == {4096, 8192}
    assert {r["hidden"] for r in ew if r["op"] == "mlp_act"} == {1792, 3584, 7168, 14336, 28672}
    layer = measure.layer_shapes("llama-3.1-8b", [128, 8192], [1, 256], [512, 8192])
    assert {r["op"] for r in layer} == {"layer_prefill", "layer_decode"}
    assert all(r["model"] == "llama-3.1-8b" and r["tp"] == 1 for r in layer)


def test_coarse_to_fine_keeps_ends_first(measure):
    rows = measure.gemm_shapes(measure.MODELS, (1,), measure.M_GRID)
    ordered = measure.coarse_to_fine(rows, ["m"])
    assert len(ordered) == len(rows)
    first = {r["m"] for r in ordered[: 2 * len(measure.GEMM_OPS) * 2]}
    assert {1, 8192} <= first
    plan = measure.plan(tiny=False)
    assert set(plan) == {
        "copy/bf16",
        "gemm/bf16",
        "gemm/fp8",
        "attention/bf16",
        "elementwise/bf16",
        "layer/bf16",
    }


def test_write_rows_roundtrip(measure, tmp_path):
    rows = [
        {
            "op": "mlp_up_proj",
            "kind": "gemm",
            "dtype": "bf16",
            "m": 512,
            "n": 28672,
            "k": 4096,
            "seconds": 4.12e-4,
        },
        {
            "op": "attention_decode",
            "kind": "attention",
            "dtype": "bf16",
            "batch": 64,
            "q_len": 1,
            "kv_len": 2048,
            "n_q_heads": 32,
            "n_kv_heads": 8,
            "head_dim": 128,
            "seconds": 9.5e-5,
            "source": "test",
            "_models": ["x"],
        },
    ]
    path = measure.write_rows(tmp_path / "sub" / "t.csv", rows)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        got = list(reader)
        header = reader.fieldnames
    assert header == list(measure.COLUMNS)
    for c in ("op", "kind", "seconds", "dtype", "source", "m", "n", "k", "tokens", "hidden", "bytes"):
        assert c in header
    assert got[0]["op"] == "mlp_up_proj" and got[0]["m"] == "512" and got[0]["batch"] == ""
    assert float(got[0]["seconds"]) == pytest.approx(4.12e-4)
    assert got[1]["kv_len"] == "2048" and got[1]["m"] == "" and got[1]["source"] == "test"
    assert float(got[1]["seconds"]) == pytest.approx(9.5e-5)


def test_budget_guard(measure):
    # inside the phase's deadline: go on
    assert not measure.over_budget(10.0, 20.0, 100.0, 5)
    # past the phase's deadline: stop, unless the phase has measured nothing yet
    assert measure.over_budget(30.0, 20.0, 100.0, 1)
    assert not measure.over_budget(30.0, 20.0, 100.0, 0)
    # past the whole run's budget: always stop
    assert measure.over_budget(101.0, 20.0, 100.0, 0)


def test_summary_table(measure):
    rows = {
        "gemm": [
            {
                "op": "lm_head",
                "kind": "gemm",
                "dtype": "bf16",
                "m": 1024,
                "n": 1024,
                "k": 1024,
                "seconds": 1e-3,
            }
        ]
    }
    text = measure.summarize(rows, {"gemm/bf16": 3})
    assert "gemm" in text and "2.1 TFLOP/s" in text


def test_tiny_cpu_end_to_end(measure, tmp_path):
    pytest.importorskip("torch")
    rc = measure.main(["--tiny", "--device", "cpu", "--out", str(tmp_path), "--budget-s", "120"])
    assert rc == 0
    for kind in measure.KINDS:
        path = tmp_path / f"{kind}.csv"
        assert path.exists(), kind
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        assert rows, kind
        for r in rows:
            assert r["kind"] == kind
            assert float(r["seconds"]) > 0
    info = json.loads((tmp_path / "device.json").read_text())
    for key in ("torch_version", "date_utc", "name", "fp8", "rows"):
        assert key in info
    assert info["n_failures"] == 0, info["failures"]
