"""benchmarks/published_points.py: every published point parses, maps to a scenario llmsim accepts or
to a stated reason, a few representative points simulate, and one static-batch mapping is checked by
hand against its source settings. No accuracy thresholds: the cost model is still changing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from script_module import load_script

from llmsim.hardware import load_profile

ROOT = Path(__file__).resolve().parents[1]


pp = load_script("published_points", ROOT / "benchmarks" / "published_points.py")
POINTS = pp.load_points()
BY_ID = {p["id"]: p for p in POINTS}
# one point per mode, each fast to simulate
REPRESENTATIVE = [
    "trtllm10-llama31-8b-h100-tp1-fp8-1000-1000",  # max_throughput, trtllm-bench heuristic
    "trtllm09-llama2-7b-a100-fp16-bs256-128-128",  # static_batch
    "trtllm09-llama2-7b-h100-fp8-bs1-128-ftl",  # batch1_latency
    "trtllm014-online-llama31-8b-h100-tp1-202-214-qps16-itl",  # online, Poisson
    "vllm010-rocm-llama31-70b-mi300x-tp8-fp8-bs1-128-2048-lat",  # vLLM engine, e2e latency
]


def test_every_point_parses_with_source_quote_value_and_unit():
    assert len(POINTS) == 109
    assert len(BY_ID) == len(POINTS), "ids are unique"
    for p in POINTS:
        assert str(p["source"]["url"]).startswith("https://"), p["id"]
        assert str(p["quote"]).strip(), p["id"]
        assert isinstance(p["value"], int | float) and math.isfinite(p["value"]) and p["value"] > 0, p["id"]
        assert str(p["unit"]).strip(), p["id"]
        assert p["mode"] in ("static_batch", "batch1_latency", "max_throughput", "online"), p["id"]
        assert pp.metric_key(p) in pp.METRICS, p["id"]


@pytest.mark.parametrize("pid", sorted(BY_ID))
def test_every_point_maps_to_a_valid_scenario_or_a_reason(pid):
    mp = pp.map_point(BY_ID[pid])
    if mp.scenario is None:
        assert mp.reasons and all(r.strip() for r in mp.reasons), pid
        return
    assert not mp.reasons
    sc = pp.validate(mp)
    if sc is None:  # llmsim refused the scenario: only for what it cannot price yet, said in its words
        assert len(mp.reasons) == 1 and mp.reasons[0].startswith("llmsim refuses: "), mp.reasons
        assert "dtype" in mp.reasons[0], mp.reasons
        return
    assert sc.name == pid
    figures = ("output_throughput", "input_throughput", "decode_throughput")
    assert mp.figure in (*figures, "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "duration")
    assert sc.output.steps == ("all" if mp.figure == "decode_throughput" else "none") and sc.output.trace == "none"
    devices = sc.cluster.tp * sc.cluster.pp * sc.cluster.replicas
    cpu = load_profile(sc.hardware).cpu
    if cpu is not None and sc.cluster.sockets:  # a CPU point counts the sockets of its one node
        devices *= sc.cluster.sockets
    assert devices == BY_ID[pid]["hardware"]["count"], "the parallel layout uses the point's devices"


def test_not_expressible_reasons_are_the_expected_kinds():
    """Nothing falls through silently: each unmapped point names a known kind of reason."""
    kinds = set()
    for p in POINTS:
        mp = pp.map_point(p)
        if mp.scenario is not None:
            pp.validate(mp)
        kinds |= {pp._reason_kind(r) for r in mp.reasons}
    known = {
        "model not in llmsim's catalog",
        "model not priceable",
        "no hardware profile",
        "hardware mismatch",
        "parallel degree not stated",
        "expert parallelism not mapped",
        "precision ambiguous",
        "lengths not stated",
        "ShareGPT lengths not available",
        "past the model's context",
        "multi-step scheduling not modelled",
        "closed-loop concurrency not modelled",
    }
    assert {k for k in kinds if not k.startswith("llmsim refuses")} <= known


@pytest.mark.parametrize("pid", REPRESENTATIVE)
def test_representative_points_simulate(pid):
    row = pp.run_point(BY_ID[pid])
    assert row.status in ("ok", "miss"), (row.status, row.notes)
    assert row.simulated is not None and math.isfinite(row.simulated) and row.simulated > 0
    assert row.error == pytest.approx(row.simulated / row.published - 1)


def test_static_batch_mapping_by_hand():
    """trtllm09-llama2-70b-h100-tp2-fp8-bs1024-128-128, against the v0.9.0 perf table's settings:
    gptSessionBenchmark --batch_size 1024 --input_output_len 128,128, FP8 weights and KV cache
    (quant_algo FP8, kv_cache_quant_algo FP8), TP2 on H100 SXM, 'tokens/s per GPU' = B x OSL /
    end-to-end time / GPUs (a static batch: one prefill of all 1024 prompts, then 127 decodes)."""
    pid = "trtllm09-llama2-70b-h100-tp2-fp8-bs1024-128-128"
    p = BY_ID[pid]
    assert p["settings"] == {"batch_size": 1024, "input_len": 128, "output_len": 128}
    mp = pp.map_point(p)
    assert mp.scenario == {
        "name": pid,
        "model": {"name": "llama-2-70b", "weight_dtype": "fp8", "act_dtype": "fp8"},
        "hardware": "H100-SXM",
        "cluster": {"tp": 2, "pp": 1, "replicas": 1},
        "policy": {"kind": "static", "max_num_seqs": 1024, "max_batch_tokens": 1024 * 128},
        "kv_cache": {"dtype": "fp8", "memory_fraction_of": "free", "watermark": 0.0, "memory_fraction": 0.9},
        "workload": {
            "kind": "all_at_once",
            "num_requests": 1024,
            "prompt_tokens": {"dist": "fixed", "value": 128},
            "output_tokens": {"dist": "fixed", "value": 128},
            "horizon_s": pp.HORIZON_S,
        },
        "engine": "ideal",
        "output": {"steps": "none", "trace": "none"},
    }
    assert (mp.figure, mp.per_gpus) == ("output_throughput", 2)
    sc = pp.validate(mp)
    assert sc is not None and sc.policy.kind == "static"
    import llmsim

    res = llmsim.run(sc)
    req = res.requests
    assert (req["status"] == "finished").all() and (req["output_tokens"] == 128).all()
    assert req["first_token_s"].nunique() == 1, "one prefill step for the whole batch"
    by_hand = 1024 * 128 / req["finish_s"].max() / 2  # B x OSL / end-to-end time / GPUs
    assert pp.simulate(pp.map_point(p), sc) == pytest.approx(by_hand, rel=1e-9)


def test_trtllm_bench_heuristic_by_hand():
    """Llama-3.1-8B FP8 on one H100, 1000/1000, free fraction 0.95: (79.2 GiB - 8.03e9 B of weights)
    x 0.95 / (64 KiB per token x 2000 tokens) = 557 requests -> max_batch_size 128 x ceil(557 / 128)
    = 640; 557 x (1 + 1000/1000) = 1114 tokens -> the 2048 floor."""
    assert pp.trtllm_bench_limits("llama-3.1-8b", "H100-SXM", 1, 1, 1000, 1000, "fp8", "fp8", 0.95) == (640, 2048)


def test_request_cap_keeps_several_batches():
    mp = pp.map_point(BY_ID["trtllm10-llama31-8b-h100-tp1-fp8-128-128"])  # 30000 published, batch limit 4096
    assert mp.scenario["workload"]["num_requests"] == pp.WAVES * 4096
    mp = pp.map_point(BY_ID["trtllm10-llama31-8b-h100-tp1-fp8-1000-1000"])  # 3000 published
    assert mp.scenario["workload"]["num_requests"] == 3000


def test_cli_writes_csv(tmp_path, capsys):
    out = tmp_path / "rows.csv"
    ids = "trtllm09-llama2-7b-h100-fp8-bs1-128-ftl,jetstream-pt-gemma-2b-v5e8-bf16-bs512"
    assert pp.main(["--ids", ids, "--write", str(out)]) == 0
    text = capsys.readouterr().out
    assert "expressible points: 1 of 2" in text and "not expressible" in text
    lines = out.read_text().splitlines()
    assert lines[0].startswith("id,hardware,model,mode,metric,published,simulated,error,status,notes")
    assert len(lines) == 3


@pytest.mark.slow
def test_every_point_simulates():
    rows = [pp.run_point(p) for p in POINTS]
    assert not [r.id for r in rows if r.status == "error"], [(r.id, r.notes) for r in rows if r.status == "error"]
    for r in rows:
        if r.status in ("ok", "miss"):
            assert r.simulated is not None and math.isfinite(r.simulated) and r.simulated > 0, r.id
    assert "expressible points" in pp.summary_line(rows)


def test_a_one_socket_intel_point_runs_on_one_socket():
    """Intel's ITREX rows ran on one 8480+ socket, 32 of its 56 cores (numactl -C 0-31):
    the scenario says so (cluster.sockets / cluster.cores), on the two-socket profile."""
    point = next(p for p in POINTS if p["id"] == "itrex-llama2-7b-chat-int4-g128-in32-c32-next")
    mp = pp.map_point(point)
    assert mp.scenario is not None, mp.reasons
    assert mp.scenario["hardware"] == "Xeon-8480+"
    assert (mp.scenario["cluster"]["sockets"], mp.scenario["cluster"]["cores"]) == (1, 32)


def test_a_stated_group_size_gets_its_runtimes_scales():
    """ITREX writes an fp32 scale per group (quantize.py's default, symmetric); its GGML baseline
    is llama.cpp's Q4_0, an fp16 scale per 32. Points that state no group keep the dtype's format."""
    model = pp.map_point(BY_ID["itrex-llama2-7b-chat-int4-g32-in32-c56-next"]).scenario["model"]
    assert (model["weight_group_size"], model["weight_scale_bits"]) == (32, 32)
    model = pp.map_point(BY_ID["itrex-ggml-llama2-7b-chat-int4-g32-in1024-c32-next"]).scenario["model"]
    assert (model["weight_group_size"], model["weight_scale_bits"]) == (32, 16)
    model = pp.map_point(BY_ID["trtllm10-llama31-405b-b200-tp4-fp4-1000-1000"]).scenario["model"]
    assert "weight_group_size" not in model  # NVFP4, fp4's default


def test_pipeline_parallel_trtllm_holds_a_batch_per_micro_batch():
    """TensorRT-LLM's PyTorch executor bounds each of its pp micro-batches by max_batch_size and
    holds max_batch_size x pp sequences; llmsim's max_num_seqs counts the whole replica."""
    point = BY_ID["trtllm10-llama33-70b-rtx6000pro-tp1pp8-fp4-1000-1000"]
    bs, _ = pp.trtllm_bench_limits("llama-3.1-70b", "RTX-PRO-6000", 1, 8, 1000, 1000, "fp4", "fp8", 0.95)
    mp = pp.map_point(point)
    assert mp.scenario["policy"]["max_num_seqs"] == bs * 8
    solo = pp.map_point(BY_ID["trtllm10-llama33-70b-rtx6000pro-tp1pp1-fp4-1000-1000"])
    assert (
        solo.scenario["policy"]["max_num_seqs"]
        == pp.trtllm_bench_limits("llama-3.1-70b", "RTX-PRO-6000", 1, 1, 1000, 1000, "fp4", "fp8", 0.95)[0]
    )


def test_every_cell_of_the_trtllm_tables_maps_to_a_scenario():
    """The 373 cells of TensorRT-LLM 0.17's throughput table and the 146 of v1.0's dense models:
    each GPU column has its template record, each model its catalog entry, and every cell maps
    to a scenario llmsim accepts."""
    tt = load_script("trtllm_table", ROOT / "benchmarks" / "trtllm_table.py")
    for name, count in (("0.17", 373), ("1.0", 146)):
        cells = tt.load_cells(name)
        assert len(cells) == count
        tab = tt.TABLES[name]
        assert {c["gpu"] for c in cells} == set(tab.templates) and {c["model"] for c in cells} == set(tab.models)
        for cell in cells:
            mp = pp.map_point(tt.cell_point(cell, BY_ID))
            assert mp.scenario is not None and not mp.reasons, (cell, mp.reasons)
    # a cell that is also a points.yaml record maps as that record does (but for its name)
    for name, key, record_id in (
        (
            "0.17",
            ("LLaMA v3.1 70B", "4", "1", "2048", "2048", "H100 80GB HBM3"),
            "trtllm017-llama31-70b-h100-tp4-fp8-2048-2048",
        ),
        (
            "1.0",
            ("Llama 3.3 70B", "1", "8", "1000", "1000", "RTX6000Pro"),
            "trtllm10-llama33-70b-rtx6000pro-tp1pp8-fp4-1000-1000",
        ),
    ):
        fields = ("model", "tp", "pp", "input_len", "output_len", "gpu")
        cell = next(c for c in tt.load_cells(name) if tuple(c[f] for f in fields) == key)
        record = BY_ID[record_id]
        mine, theirs = pp.map_point(tt.cell_point(cell, BY_ID)).scenario, pp.map_point(record).scenario
        assert {**mine, "name": ""} == {**theirs, "name": ""}
        assert float(cell["output_tokens_per_s"]) == record["value"]


def test_tensorrt_engines_attend_over_the_whole_context():
    """TensorRT-LLM 0.17's engine flow runs Mistral without its window (none was passed at run
    time); other flows keep the model's."""
    mp = pp.map_point(BY_ID["trtllm017-mistral-7b-h100-tp1-fp8-500-2000"])
    assert mp.scenario["model"]["sliding_window"] == 0
    assert any("full attention" in n for n in mp.notes)
    pytorch = {**BY_ID["trtllm017-mistral-7b-h100-tp1-fp8-500-2000"], "engine_version": "1.0 (PyTorch backend)"}
    assert pp.engine_flow(pytorch) == "trtllm-pytorch"
    assert "sliding_window" not in pp.map_point(pytorch).scenario["model"]


def test_vllm_before_0_14_runs_without_async_scheduling():
    """vLLM's async scheduling is its default from v0.14.0 (release notes, PR #27614): the 0.10 points
    run without it, the SGLang points (their own flow) keep the preset's, and a vLLM point whose
    version cannot be read is refused rather than guessed."""
    for p in POINTS:
        if p["engine"] in ("vllm", "sglang") and "not expressible" not in str(p.get("status", "")):
            mp = pp.map_point(p)
            engine = mp.scenario.get("engine") if mp.scenario else None
            if p["id"].startswith("vllm010-"):
                assert engine["async_scheduling"] is False, p["id"]
            elif p["engine"] == "sglang" and isinstance(engine, dict):
                assert "async_scheduling" not in engine, p["id"]
    assert pp._version("0.10.0 (ROCm build)") == (0, 10, 0) < pp.VLLM_ASYNC_DEFAULT <= pp._version("0.14.0")
    newer = {**BY_ID["vllm010-rocm-llama31-70b-mi300x-tp8-fp8-bs1-128-2048-lat"], "engine_version": "0.14.0"}
    assert "async_scheduling" not in pp.map_point(newer).scenario["engine"]
    unknown = {**newer, "engine_version": "not stated"}
    with pytest.raises(ValueError, match="needs its version"):
        pp.map_point(unknown)


def test_large_scale_expert_parallel_points_map_to_deepep_and_dual_batch_overlap():
    """SGLang's DeepSeek-V3 on 32 / 72 H100s: DP attention over the EP ranks (replicas = EP), DeepEP's
    normal kernels for the prefill figures and its low-latency ones for decode, two-batch overlap as
    dual batch overlap, EPLB's 288 slots (EP72 needs them); the prefill read per node from the input
    throughput, the decode from its decode-only steps at the full batch."""
    prefill = pp.map_point(BY_ID["sglang-ep-deepseek-v3-prefill-h100x32-ep32-4k"])
    decode = pp.map_point(BY_ID["sglang-ep-deepseek-v3-decode-h100x72-ep72-bs256-kv2000"])
    for mp, ranks, backend in ((prefill, 32, "deepep_high_throughput"), (decode, 72, "deepep_low_latency")):
        c = mp.scenario["cluster"]
        assert (c["replicas"], c["tp"], c["expert_parallel"], c["all2all_backend"]) == (ranks, 1, True, backend)
        assert c["dual_batch_overlap"] and c["eplb"] and c["redundant_experts"] == 32
        assert mp.per_gpus == ranks / 8  # per 8-GPU node
    assert prefill.figure == "input_throughput" and prefill.lengths == (4096, 1)
    assert prefill.scenario["policy"]["max_batch_tokens"] == 16384
    assert decode.figure == "decode_throughput" and decode.scenario["workload"]["num_requests"] == 256 * 72
    row = pp.run_point(BY_ID["sglang-ep-deepseek-v3-decode-h100x72-ep72-bs256-kv2000"])
    assert row.status in ("ok", "miss") and row.simulated > 0, row.notes


def test_trtllm_dynamic_batch_tuner_buckets_as_tensorrt_llm_s_own_test():
    """TensorRT-LLM's DynamicBatchConfig.RuntimeBatchSize test (cpp/tests/.../dynamicBatchTunerTest):
    the capacity's bucket from kDefaultBatchSizeTable, else a multiple of 512 within 128 of it."""
    cases = {143: 128, 335: 256, 671: 512, 831: 768, 1279: 1024, 1663: 1536, 2049: 2048, 1665: 1665}
    assert {c: pp.trtllm_runtime_batch(c) for c in cases} == cases
    assert pp.trtllm_runtime_batch(12) == 128  # (a KV cache of a dozen whole requests still runs 128)


def test_every_row_of_the_trtllm_online_table_maps_and_splits_before_fitting():
    """The 72 rows of TensorRT-LLM 0.14's online table: each maps to a scenario under the
    trtllm-engine preset; the 8B rows at a finite QPS fit its two terms, the 70B rows check them,
    the INF rows stand apart; a row that is also a points.yaml record maps as that record does."""
    to = load_script("trtllm_online", ROOT / "benchmarks" / "trtllm_online.py")
    rows = to.load_rows()
    assert len(rows) == 72
    sets = [to.row_set(r) for r in rows]
    assert (sets.count("fit"), sets.count("check"), sets.count("INF")) == (30, 30, 12)
    assert all(r["model"] == to.FIT_MODEL for r, s in zip(rows, sets, strict=True) if s == "fit")
    for row in rows:
        mp = pp.map_point(to.row_point(row, BY_ID))
        assert mp.scenario is not None and not mp.reasons, (row, mp.reasons)
        assert mp.scenario["engine"] == "trtllm-engine"
    record = BY_ID["trtllm014-online-llama31-8b-h100-tp1-202-214-qps16-ttft"]
    fields = ("model", "gpu", "input_len", "output_len", "qps")
    row = next(r for r in rows if tuple(r[f] for f in fields) == ("LLaMA 3.1 8B", "H100 80GB HBM3", "202", "214", "16"))
    mine, theirs = pp.map_point(to.row_point(row, BY_ID)).scenario, pp.map_point(record).scenario
    assert {**mine, "name": ""} == {**theirs, "name": ""}
    assert float(row["mean_ttft_ms"]) == record["value"]


def test_the_trtllm_engine_intervals_are_its_held_out_rows():
    """accuracy.json holds the trtllm-engine preset's errors on the online table's rows its fit did
    not see (trtllm_online.py --record): no fit row among them, and only that preset reports them."""
    from llmsim.accuracy import validated

    to = load_script("trtllm_online", ROOT / "benchmarks" / "trtllm_online.py")
    rec = validated("trtllm-engine")
    assert rec is not None and set(rec) == {to.RECORD_KIND}
    runs = rec[to.RECORD_KIND]["runs"]
    assert len(runs) == 42 and not any(r.startswith(to.FIT_MODEL) and not r.endswith("QPS INF") for r in runs)
    assert to.RECORD_KIND not in (validated("vllm-v1") or {})


def test_the_trtllm_engine_terms_are_the_fit_s_minimum_and_its_intervals_current():
    """The preset's two fitted numbers are the grid's best on the fit rows (each neighbour on the
    grid scores worse), and accuracy.json's record is what the preset gives today on the held-out
    rows (a cost-model change that moves them shows here, not in a stale interval)."""
    from llmsim.accuracy import RECORD
    from llmsim.engine import PRESETS

    to = load_script("trtllm_online", ROOT / "benchmarks" / "trtllm_online.py")
    spec = PRESETS["trtllm-engine"]
    step, front = spec.prepare.base_s, spec.output_delay_s
    assert step in to.STEP_GRID_S and front in to.FRONTEND_GRID_S
    fit_rows = [r for r in to.load_rows() if to.row_set(r) == "fit"]

    def fit_score(step_s: float, front_s: float) -> float:
        engine = {"preset": "trtllm-engine", "prepare": {"base_s": step_s}, "output_delay_s": front_s}
        return to.score([to.simulate_row(r, BY_ID, engine) for r in fit_rows])

    best = fit_score(step, front)
    for ds, df in ((0.25e-3, 0), (-0.25e-3, 0), (0, 1e-3), (0, -1e-3)):
        assert fit_score(step + ds, front + df) > best
    held = [to.simulate_row(r, BY_ID) for r in to.load_rows() if to.row_set(r) != "fit"]
    stored = {r["run"]: r for r in json.loads(RECORD.read_text())[to.RECORD_KIND]["per_run"]}
    for score in to.held_out_scores(held):
        rec = stored[score["run"]]
        assert (rec["devices"], rec["moe"]) == (score["devices"], score["moe"])
        for key, err in rec["errors"].items():
            assert score[f"err_{key}"] == pytest.approx(err, rel=1e-9, abs=1e-12)
