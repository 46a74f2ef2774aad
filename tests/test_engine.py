"""The engine model: presets, vLLM's defaults and scheduler rules, async scheduling, host terms,
CUDA graphs, and its calibration and validation on the committed real vLLM runs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import llmsim
from llmsim.costmodel import CostConfig, CostModel, batch_shape
from llmsim.engine import PRESETS, vllm_capture_sizes
from llmsim.errors import UserError
from llmsim.hardware import load_profile
from llmsim.kvcache import BlockManager
from llmsim.models import CATALOG
from llmsim.request import Request
from llmsim.scenario import scenario_from_dict
from llmsim.schedulers import SchedulerConfig, make_scheduler

DATA = Path(__file__).resolve().parent.parent / "data" / "validation" / "vllm-cpu"


def _sc(**over: object) -> llmsim.Scenario:
    d: dict = {
        "name": "eng",
        "seed": 1,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "workload": {
            "kind": "poisson",
            "rate_rps": 4.0,
            "num_requests": 40,
            "prompt_tokens": {"dist": "uniform", "min": 64, "max": 1024},
            "output_tokens": {"dist": "uniform", "min": 8, "max": 128},
        },
        "output": {"steps": "all"},
    }
    d.update(over)
    return scenario_from_dict(d, "test", Path("."))


def test_default_engine_is_vllm_v1_with_vllms_defaults_for_the_device() -> None:
    sc = _sc()
    assert sc.engine_spec.name == "vllm-v1"
    # vllm/engine/arg_utils.py: >= 70 GiB and not an A100 -> 8192 tokens, 1024 sequences
    assert (sc.policy.kind, sc.policy.chunk_tokens, sc.policy.max_num_seqs) == ("vllm", 8192, 1024)
    assert (sc.kv_cache.watermark, sc.kv_cache.prefix_caching, sc.kv_cache.block_tokens) == (0.0, True, 16)
    a100 = _sc(hardware="A100-SXM-80GB")
    assert (a100.policy.chunk_tokens, a100.policy.max_num_seqs) == (2048, 256)
    cpu = _sc(hardware="Xeon-8480+")
    assert (cpu.policy.chunk_tokens, cpu.policy.max_num_seqs, cpu.kv_cache.block_tokens) == (2048, 128, 128)
    assert not cpu.engine_spec.async_scheduling  # vllm/platforms/cpu.py forces it off
    # keys the scenario sets win over the engine's defaults
    own = _sc(policy={"kind": "chunked", "chunk_tokens": 512}, kv_cache={"watermark": 0.02})
    assert (own.policy.kind, own.policy.chunk_tokens, own.kv_cache.watermark) == ("chunked", 512, 0.02)


def test_ideal_engine_keeps_llmsims_own_defaults() -> None:
    sc = _sc(engine="ideal")
    assert (sc.policy.kind, sc.policy.chunk_tokens, sc.kv_cache.watermark) == ("traditional", 512, 0.01)
    assert not sc.kv_cache.prefix_caching


@pytest.mark.parametrize(
    ("engine", "needle"),
    [("vllm-v9", "engine.preset 'vllm-v9' is unknown"), ({"cuda_graph_sizes": [0]}, "cuda_graph_sizes")],
)
def test_bad_engine_is_a_clear_error(engine: object, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        _sc(engine=engine)
    with pytest.raises(UserError, match="unknown key"):
        _sc(engine={"preset": "vllm-v1", "shedule": {}})


def _cost(engine: str, hw: str = "H100-SXM") -> CostModel:
    spec = PRESETS[engine]
    cfg = CostConfig(cuda_graphs=True, cuda_graph_sizes=spec.cuda_graph_sizes)
    return CostModel(CATALOG["llama-3.1-8b"], load_profile(hw), cfg, spec)


@pytest.mark.parametrize("engine", ["ideal", "vllm-v1"])
def test_breakdown_names_the_engine_terms_and_sums_to_the_step(engine: str) -> None:
    cm = _cost(engine)
    for shape in (batch_shape([], [500] * 5), batch_shape([(300, 0)], [800] * 40), batch_shape([(4000, 0)], [])):
        parts = cm.breakdown(shape)
        assert sum(parts.values()) == pytest.approx(cm.step_time(shape), rel=1e-12)
        if engine == "vllm-v1":
            assert {"engine_schedule", "engine_prepare", "engine_output", "engine_async_overlap"} <= set(parts)
        else:
            assert "step_overhead" in parts


def test_async_scheduling_hides_host_work_under_the_device() -> None:
    sync = PRESETS["vllm-v1"].__class__(**{**PRESETS["vllm-v1"].__dict__, "async_scheduling": False})
    cfg = CostConfig(cuda_graphs=True, cuda_graph_sizes=sync.cuda_graph_sizes)
    cm_sync = CostModel(CATALOG["llama-3.1-8b"], load_profile("H100-SXM"), cfg, sync)
    cm_async = _cost("vllm-v1")
    shape = batch_shape([], [1000] * 64)
    host = cm_async.host_s(64, 64)
    assert cm_sync.step_time(shape) == pytest.approx(cm_async.step_time(shape) + host, rel=1e-12)
    tiny = batch_shape([], [10])  # a tiny step: the host is the longer one and sets the pace
    assert cm_async.step_time(tiny) >= host


def test_cuda_graphs_pad_decode_batches_to_the_captured_size() -> None:
    cm = _cost("vllm-v1")
    sizes = vllm_capture_sizes(512)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-1] == 512 and 272 in sizes
    assert cm.graph_view(5, True) == (8, True, True)  # full graph, padded
    assert cm.graph_view(300, False) == (304, True, False)  # piecewise: attention eager
    assert cm.graph_view(600, True) == (600, False, False)  # beyond the largest size: eager
    # any capture list is accepted: one reaching a billion tokens pads alike, with no table that size
    huge = CostModel(
        CATALOG["llama-3.1-8b"], load_profile("H100-SXM"), CostConfig(cuda_graphs=True, cuda_graph_sizes=(1, 8, 10**9))
    )
    assert huge.graph_view(5, True) == (8, True, True) and huge.graph_view(10**6, True) == (10**9, True, True)
    # a batch of 300 runs the graph of 304: the padded rows' GEMM time is a named term
    parts = cm.breakdown(batch_shape([], [100] * 300))
    assert parts["cuda_graph_padding"] > 0
    assert parts["kernel_launch_overhead"] == 0.0


def _trace_run(rows: list[tuple[float, int, int]], async_scheduling: bool, tmp: Path) -> llmsim.Results:
    trace = tmp / f"t{len(rows)}{async_scheduling}.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a:.9f},{p},{o}\n" for a, p, o in rows))
    engine = {"preset": "vllm-v1", "async_scheduling": async_scheduling}
    return llmsim.run(
        _sc(engine=engine, workload={"kind": "trace", "trace": {"path": str(trace), "format": "generic"}})
    )


def _steps_until_planned(async_scheduling: bool, tmp: Path) -> int:
    """Steps that start between a request's arrival (mid-step of another's decode) and the step
    that prefills it."""
    steps = _trace_run([(0.0, 64, 400)], async_scheduling, tmp).steps
    at = float(steps["start_s"].iloc[100] + 0.5 * steps["duration_s"].iloc[100])
    steps = _trace_run([(0.0, 64, 400), (at, 64, 4)], async_scheduling, tmp).steps
    after = steps[steps["start_s"] > at].reset_index(drop=True)
    return int(after.index[after["prefill_tokens"] > 0][0])


def test_async_scheduling_plans_an_arrival_one_step_later(tmp_path: Path) -> None:
    # vLLM's batch queue: step N+1 was planned when step N started, so a request arriving during
    # N is first scheduled in N+2 (vllm/v1/engine/core.py step_with_batch_queue); synchronous
    # engines schedule it in N+1
    assert _steps_until_planned(False, tmp_path) == 0
    assert _steps_until_planned(True, tmp_path) == 1


def test_output_delay_shifts_every_client_time() -> None:
    base = llmsim.run(_sc(engine={"preset": "vllm-v1", "output_delay_s": 0.0})).requests
    late = llmsim.run(_sc()).requests  # the preset's 10 ms (its API server and stream)
    assert (late["ttft_s"] - base["ttft_s"]).to_numpy() == pytest.approx(0.010)
    assert (late["e2e_s"] - base["e2e_s"]).to_numpy() == pytest.approx(0.010)
    assert late["tpot_s"].to_numpy() == pytest.approx(base["tpot_s"].to_numpy(), nan_ok=True)


def _vllm_sched(blocks: int, **cfg: object):  # noqa: ANN202
    kv = BlockManager(blocks, 16, 0.0, False, True)
    return make_scheduler("vllm", SchedulerConfig(chunk_tokens=64, max_num_seqs=8, **cfg), kv), kv


def test_vllm_admits_a_prompt_only_when_all_of_it_fits() -> None:
    # scheduler_reserve_full_isl: a 320-token prompt (20 blocks) waits while only 10 blocks are free
    for reserve, admitted in ((True, False), (False, True)):
        sched, kv = _vllm_sched(10, reserve_full_prompt=reserve)
        sched.add(Request(0, 0.0, 320, 10))
        plan = sched.schedule()
        assert bool(plan.prefill) is admitted
    sched, _ = _vllm_sched(40)
    sched.add(Request(0, 0.0, 320, 10))
    assert sched.schedule().prefill[0][1] == 64  # fits: chunked by the budget


def test_vllm_caps_a_prompts_tokens_per_step() -> None:
    sched, _ = _vllm_sched(100, long_prefill_token_threshold=48)
    sched.add(Request(0, 0.0, 320, 10))
    sched.add(Request(1, 0.0, 320, 10))
    assert [c for _, c in sched.schedule().prefill] == [48, 16]  # (a 64-token budget)
    # alone, nobody to starve: vLLM 0.32 lifts the cap (scheduler.py, num_eligible_reqs > 1)
    sched, _ = _vllm_sched(100, long_prefill_token_threshold=48)
    sched.add(Request(0, 0.0, 320, 10))
    assert sched.schedule().prefill[0][1] == 64


def test_the_vllm_cpu_twin_validates_on_the_committed_runs() -> None:
    # the committed fit (calibration runs only) replayed on validation runs, as docs/validation.md
    # reports them: per-request E2E median error <= 10 %, TTFT mean <= 15 %, ITL mean <= 10 %
    from llmsim.calibration.replay import replay

    passed = []
    # (preempt met it too, at -14.9 % TTFT, until blocks were freed tail first as vLLM v1 frees
    # them; it is at -16.5 % now, within its repeats' spread: docs/validation.md)
    for name in ("poisson-light", "poisson-high", "gamma-bursty", "shared-prefix", "budget-512"):
        s, _, _ = replay(DATA / name)
        ok = s["e2el_request_median_abs_err"] <= 0.10 and abs(s["err_mean_ttft_ms"]) <= 0.15
        passed.append(ok and abs(s["err_mean_itl_ms"]) <= 0.10)
    assert all(passed), passed


def test_the_twin_validates_on_the_second_machines_warm_campaign() -> None:
    # the Intel Xeon VM's campaign with the whole-budget warm-up (data/validation/vllm-cpu-xeon), each
    # run replayed with that campaign's own fit, as docs/validation.md reports: 8 of 11 validation runs
    # meet all three bars, from 0.25x capacity to overloaded (poisson-overload 1.5x, seqcap-overload)
    from llmsim.calibration.replay import campaign_fit, replay, split_of

    xeon = DATA.parent / "vllm-cpu-xeon"
    passed = {}
    for name in (
        "poisson-light",
        "poisson-overload",
        "gamma-bursty",
        "shared-prefix-b32",
        "preempt",
        "poisson-high-long",
        "budget-512",
        "seqcap-overload",
    ):
        assert split_of(xeon / name) == "validation"
        s, _, _ = replay(xeon / name, *campaign_fit(xeon / name))
        ok = s["e2el_request_median_abs_err"] <= 0.10 and abs(s["err_mean_ttft_ms"]) <= 0.15
        passed[name] = ok and abs(s["err_mean_itl_ms"]) <= 0.10
    assert all(passed.values()), passed


def test_a_run_is_replayed_with_its_own_campaigns_fit_and_labelled_by_its_split() -> None:
    from llmsim.calibration.replay import ENGINE_PROFILE, HOST_PROFILE, campaign_fit, split_of

    xeon = DATA.parent / "vllm-cpu-xeon"
    assert campaign_fit(xeon / "poisson-mid") == (
        xeon / "engine-fit" / "hardware.yaml",
        xeon / "engine-fit" / "engine.yaml",
    )
    assert campaign_fit(DATA / "poisson-mid") == (HOST_PROFILE, ENGINE_PROFILE)
    assert [split_of(xeon / n) for n in ("poisson-mid", "poisson-mid-b", "poisson-mid-rep3", "profile")] == [
        "validation",
        "calibration",
        "repeat",
        "calibration",
    ]


def test_calibrate_serving_fits_the_measured_host_terms() -> None:
    from llmsim.calibration.serving import fit_serving, read_run
    from llmsim.models import get_model

    run = read_run(DATA / "poisson-light-b")
    model = get_model(str(DATA.parent.parent.parent / "benchmarks" / "vllm_cpu" / "model" / "config.json"))
    hw = load_profile(str(DATA / "engine-fit" / "hardware.yaml"))
    engine, fitted_hw, report = fit_serving([run], model, hw.model_dump(mode="json"), fit_hardware=False)
    assert fitted_hw is None
    # Scheduler.schedule on this machine takes ~0.1-0.4 ms a step (steps.csv medians)
    assert 5e-5 < engine["schedule"]["base_s"] + engine["schedule"]["per_seq_s"] * 4 < 5e-4
    assert report["mape"]["exec"] < 0.3
    with pytest.raises(UserError, match="not a serving run"):
        read_run(DATA)


def test_calibrate_serving_refuses_steps_it_cannot_fit(tmp_path) -> None:
    """A steps.csv.gz with a header only (or no step with its stamps in order) is one clear error,
    not numpy's 'zero-size array' from the least squares."""
    import gzip
    import shutil

    from llmsim.calibration.serving import fit_serving, read_run
    from llmsim.models import get_model

    run_dir = tmp_path / "header-only"
    shutil.copytree(DATA / "poisson-light-b", run_dir)
    with gzip.open(run_dir / "steps.csv.gz", "rt") as fh:
        header = fh.readline()
    with gzip.open(run_dir / "steps.csv.gz", "wt") as fh:
        fh.write(header)
    model = get_model(str(DATA.parent.parent.parent / "benchmarks" / "vllm_cpu" / "model" / "config.json"))
    hw = load_profile(str(DATA / "engine-fit" / "hardware.yaml"))
    with pytest.raises(UserError, match="of the 0 steps in header-only's steps.csv.gz none has positive"):
        fit_serving([read_run(run_dir)], model, hw.model_dump(mode="json"), fit_hardware=False)


def test_a_serving_fit_replaces_an_earlier_fits_hardware_profile(tmp_path, capsys) -> None:
    """Two fits into one folder, with --fit-hardware and then without: the first's hardware.yaml
    would sit beside the second's engine.yaml (twin reads them together); it is removed and said.
    An --out naming a .yaml file is refused (it became a folder of that name)."""
    from llmsim.cli import main

    root = Path(__file__).resolve().parent.parent
    common = ["calibrate", "--serving", str(DATA / "poisson-light-b"), "--hardware", str(DATA / "host-cpu.yaml")]
    common += ["--model", str(root / "benchmarks" / "vllm_cpu" / "model" / "config.json")]
    out = tmp_path / "fit"
    assert main([*common, "--fit-hardware", "--out", str(out), "--quiet"]) == 0
    assert (out / "hardware.yaml").is_file()
    assert main([*common, "--out", str(out)]) == 0
    assert not (out / "hardware.yaml").exists() and (out / "engine.yaml").is_file()
    assert "removed " in capsys.readouterr().out
    assert main([*common, "--out", str(tmp_path / "engine.yaml"), "--quiet"]) == 2
    assert "names a file; with --serving --out is a folder" in capsys.readouterr().err


def test_running_out_of_memory_is_one_line_and_exit_2(monkeypatch, capsys) -> None:
    from llmsim import cli
    from llmsim.commands import run as run_command

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(run_command, "cmd_run", exhausted)  # (the parser is built at each main())
    code = cli.main(["run", str(Path(__file__).parent.parent / "scenarios" / "quickstart.yaml"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.startswith("llmsim: error: ran out of memory; simulate fewer requests")


def test_vllm_v1_host_terms_are_the_campaigns_engine_core_fits() -> None:
    """The preset's schedule term is the campaign fit's; its output term the same non-negative
    least squares over the same calibration runs of ``update_from_output`` alone (the rest of the
    harness's in-process interval is the API server's work under ``vllm serve``)."""
    import json

    import numpy as np
    import yaml

    from llmsim.calibration.serving import nnls_term, read_run

    fit = yaml.safe_load((DATA / "engine-fit" / "engine.yaml").read_text())
    preset = PRESETS["vllm-v1"]
    got = (preset.schedule.base_s, preset.schedule.per_seq_s, preset.schedule.per_token_s)
    want = (fit["schedule"]["base_s"], fit["schedule"]["per_seq_s"], fit["schedule"]["per_token_s"])
    assert got == pytest.approx(want, rel=1e-3)
    seqs, tokens, update = [], [], []
    for name in json.loads((DATA / "split.json").read_text())["calibration"]:
        steps = read_run(DATA / name).steps
        keep = (steps["update_end_s"] > steps["update_start_s"]) & (steps["step_end_s"] > steps["update_end_s"])
        steps = steps[keep]
        seqs += steps["num_scheduled_reqs"].tolist()
        tokens += steps["num_scheduled_tokens"].tolist()
        update += (steps["update_end_s"] - steps["update_start_s"]).tolist()
    coef, _ = nnls_term(np.array(seqs), np.array(tokens), np.array(update))
    out = preset.output
    assert (out.base_s, out.per_seq_s, out.per_token_s) == pytest.approx(coef, rel=1e-3)


def test_simultaneous_arrivals_at_an_idle_replica_share_its_next_step(tmp_path: Path) -> None:
    # an idle engine plans at once: all of a burst lands in one plan, async or not
    rows = [(0.0, 64, 4)] + [(1.0, 64, 4)] * 4
    for async_scheduling in (True, False):
        ttft = _trace_run(rows, async_scheduling, tmp_path).requests["ttft_s"].to_numpy()[1:]
        assert ttft.max() == pytest.approx(ttft.min())


def test_vllm_defaults_leave_other_policies_their_own_step_budget() -> None:
    # vLLM's 2048-token budget is a chunked-prefill budget: a prefill-first policy keeps 8192
    sc = _sc(hardware="A100-40GB", policy={"kind": "traditional"})
    assert (sc.policy.max_batch_tokens, sc.policy.max_num_seqs) == (8192, 256)
    assert _sc(hardware="A100-40GB").policy.max_batch_tokens == 2048


def test_the_scenarios_own_cuda_graph_switch_wins() -> None:
    assert _sc(cluster={"cuda_graphs": False}).engine_spec.cuda_graphs is False
    assert _sc().engine_spec.cuda_graphs is True


@pytest.mark.parametrize("hardware", ["Xeon-8480+", "TPU-v5e"])
@pytest.mark.parametrize("engine", ["vllm-v1", "vllm-2024", "distserve-2024", "ideal"])
def test_no_engine_runs_cuda_graphs_off_a_gpu(hardware: str, engine: str) -> None:
    """CUDA graphs are a CUDA GPU's: not on a CPU or a TPU, whatever the preset or the scenario
    asks (on a CPU they would also waive the per-operator host cost of every decode step)."""
    from llmsim.build import build_model, build_pools

    sc = _sc(hardware=hardware, engine=engine, model="llama-3.2-1b", cluster={"cuda_graphs": True})
    cfg = build_pools(sc, build_model(sc))[0].cost.cfg
    assert cfg.cuda_graphs is False
    assert cfg.cuda_graph_sizes == ()


@pytest.mark.parametrize(
    ("engine", "needle"),
    [
        ({"async_scheduling": "yes"}, "engine.async_scheduling must be true or false"),
        ({"schedule": {"base_s": float("nan")}}, "engine.schedule.base_s must be a number of seconds from 0 to 60"),
        ({"output_delay_s": 1e308}, "engine.output_delay_s must be a number of seconds from 0 to 60, got 1e"),
        ({"cuda_graph_sizes": [True, 8]}, "engine.cuda_graph_sizes must be a non-empty list"),
        ({"cuda_graph_sizes": [8, 10**30]}, "batch sizes from 1 to 16,777,216"),
        ({"defaults": "sglang"}, "engine.defaults must be one of"),
        ({"preset": "ideal", "profile": "x.yaml"}, "a preset or a profile, not both"),
        ({"profile": "/nonexistent/engine.yaml"}, "engine.profile: /nonexistent/engine.yaml: file not found"),
        ({"profile": "/dev/null"}, "engine.profile: /dev/null: not a regular file"),
        ({"non_torch_bytes": 1e300}, r"engine.non_torch_bytes must be a number of bytes from 0 to 2\*\*50"),
        (5, "expected a preset name"),
    ],
)
def test_engine_fields_are_checked(engine: object, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        _sc(engine=engine)


def test_a_presets_name_on_another_engine_is_refused() -> None:
    with pytest.raises(UserError, match=r"engine.name: 'vllm-v1' is a preset's name, and this engine differs"):
        _sc(engine={"preset": "ideal", "name": "vllm-v1"})
    assert _sc(engine={"preset": "ideal", "name": "mine"}).engine_spec.name == "mine"
    assert _sc(engine={"preset": "vllm-v1", "name": "vllm-v1"}).engine_spec.name == "vllm-v1"


def test_a_modified_preset_is_not_reported_as_validated() -> None:
    from llmsim.accuracy import validated

    sc = _sc(engine={"preset": "vllm-v1", "async_scheduling": False})
    assert sc.engine_spec.name.startswith("vllm-v1 (modified")
    assert validated(sc.engine_spec.name) is None
    assert validated("vllm-v1") is not None


def test_a_plan_point_on_other_hardware_gets_that_hardwares_vllm_defaults() -> None:
    from llmsim.planning.base import as_base

    point = as_base(_sc()).scenario({"hardware": "A100-40GB"})  # from an H100 scenario
    assert (point.policy.chunk_tokens, point.policy.max_num_seqs) == (2048, 256)


@pytest.mark.parametrize("key", ["chunk_tokens", "max_batch_tokens"])
def test_vllms_one_token_budget_follows_either_key(key: str) -> None:
    # vLLM's --max-num-batched-tokens is one knob; a user who maps it to either key gets that budget
    # (max_batch_tokens alone used to leave an H100's budget at vLLM's default 8192)
    sc = _sc(policy={"kind": "vllm", key: 2048})
    assert (sc.policy.chunk_tokens, sc.policy.max_batch_tokens) == (2048, 2048)
    # a copy validated again (planning/base.py) keeps it; other policies keep their two keys
    again = scenario_from_dict(sc.model_dump(mode="json", exclude_unset=True), "t", Path("."))
    assert (again.policy.chunk_tokens, again.policy.max_batch_tokens) == (2048, 2048)
    other = _sc(policy={"kind": "chunked", key: 256})
    assert (other.policy.chunk_tokens, other.policy.max_batch_tokens) != (256, 256)
    with pytest.raises(UserError, match="one token budget per step"):
        _sc(policy={"kind": "vllm", "chunk_tokens": 512, "max_batch_tokens": 1024})


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_changed_batch_pays_the_batch_change_term_and_breakdown_names_it(async_scheduling: bool) -> None:
    from dataclasses import replace

    from llmsim.engine import HostTerm

    term = HostTerm(base_s=1e-3, per_seq_s=5e-5)
    spec = replace(PRESETS["vllm-v1"], batch_change=term, async_scheduling=async_scheduling)
    cm = CostModel(CATALOG["llama-3.1-8b"], load_profile("H100-SXM"), CostConfig(), spec)
    shape = batch_shape([(300, 0)], [800] * 40)
    for changed in (False, True):
        parts = cm.breakdown(shape, changed)
        assert sum(parts.values()) == pytest.approx(cm.step_time(shape, changed), rel=1e-12)
        assert ("engine_batch_change" in parts) == changed
    if not async_scheduling:  # (added to the host work, which follows the device)
        assert cm.step_time(shape, True) - cm.step_time(shape, False) == pytest.approx(term.seconds(41, 340))
    # the presets leave a changed step as it was
    plain = _cost("vllm-v1")
    assert plain.step_time(shape, True) == plain.step_time(shape, False)


def test_batch_changed_reads_the_step_before() -> None:
    import pandas as pd

    from llmsim.calibration.serving import batch_changed

    # steps: a prompt, its first decode, a settled decode, a request left, another starts (its
    # prompt: the step after it changed), its first decode, then settled again
    batch = pd.Series(["100@0 1@50", "1@100 1@51", "1@101 1@52", "1@102", "1@103 40@0", "1@104 1@40", "1@105 1@41"])
    seqs = pd.Series([2, 2, 2, 1, 2, 2, 2])
    assert batch_changed(batch, seqs).tolist() == [False, True, False, True, False, True, False]


def test_calibrate_serving_fits_the_batch_change_term_when_asked() -> None:
    from llmsim.calibration.serving import fit_serving, read_run
    from llmsim.models import get_model

    xeon = DATA.parent / "vllm-cpu-xeon"
    runs = [read_run(xeon / n) for n in ("burst-all", "poisson-light-b", "poisson-mid-b", "poisson-high-b")]
    model = get_model(str(DATA.parent.parent.parent / "benchmarks" / "vllm_cpu" / "model" / "config.json"))
    hw = load_profile(str(xeon / "engine-fit" / "hardware.yaml")).model_dump(mode="json")
    plain, _, without = fit_serving(runs, model, hw, fit_hardware=False)
    engine, _, with_it = fit_serving(runs, model, hw, fit_hardware=False, fit_batch_change=True)
    assert "batch_change" not in plain
    term = engine["batch_change"]
    # benchmarks/vllm_cpu/batch_change.py reads 0.4-2.0 ms more in such steps of 2-30 sequences
    assert 3e-4 < term["base_s"] + 10 * term["per_seq_s"] < 3e-3, term
    assert with_it["mape"]["exec"] < without["mape"]["exec"]


def _pool_cfg(hardware: str, engine: str, kv: str = "fp8", act: str = "bf16", model: str = "llama-3.1-8b"):
    from llmsim.build import build_pools
    from llmsim.models import get_model

    sc = _sc(hardware=hardware, engine=engine, model={"name": model, "act_dtype": act}, kv_cache={"dtype": kv})
    (pool,) = build_pools(sc, get_model(model))
    return pool.cost


@pytest.mark.parametrize(
    ("hardware", "engine", "act", "want"),
    [
        ("H100-SXM", "vllm-v1", "bf16", "fp8"),  # FA3: vLLM quantises the queries whatever the compute dtype
        ("H200", "vllm-v1", "fp8", "fp8"),
        ("L40S", "vllm-v1", "fp8", "bf16"),  # SM89: no FA3, the cache is converted as it loads
        ("B200", "vllm-v1", "bf16", "fp8"),  # SM100: FlashInfer quantises the queries for trtllm-gen
        ("MI300X", "vllm-v1", "fp8", "fp8"),  # a profile that does not say: the cost model's rule
        ("H100-SXM", "ideal", "bf16", "bf16"),  # TensorRT-LLM's rule: fp8 attention with fp8 compute only
        ("H100-SXM", "ideal", "fp8", "fp8"),
        ("L40S", "ideal", "fp8", "fp8"),
    ],
)
def test_an_fp8_kv_cache_runs_attention_as_the_engine_and_device_decide(hardware, engine, act, want) -> None:
    from llmsim.costmodel.ops import attention_dtype, model_batch_shape

    cost = _pool_cfg(hardware, engine, act=act)
    assert attention_dtype(cost.cfg) == want
    shape = model_batch_shape(cost.model, [(512, 0)], [300, 900])
    priced = {op.op.name: op for op in cost.priced(shape)}
    assert priced["attention_prefill"].op.dtype == priced["attention_decode"].op.dtype == want


def test_fp8_attention_speeds_up_long_prefills_under_vllm_on_hopper_only_with_an_fp8_cache() -> None:
    from llmsim.costmodel.ops import model_batch_shape

    def attention_ms(kv: str, engine: str) -> float:
        cost = _pool_cfg("H100-SXM", engine, kv=kv)
        return cost.breakdown(model_batch_shape(cost.model, [(8192, 0)], []))["attention_prefill"] * 1e3

    bf16, fp8_vllm, fp8_ideal = (
        attention_ms("bf16", "vllm-v1"),
        attention_ms("fp8", "vllm-v1"),
        attention_ms("fp8", "ideal"),
    )
    # the fp8 peak is twice bf16's; H100's FP8 GEMM fraction is 0.689 against bf16's 0.780 (MAMF's ratio)
    assert fp8_vllm == pytest.approx(bf16 * 0.780 / (2 * 0.689), rel=0.02)
    assert fp8_ideal == pytest.approx(bf16, rel=0.01)  # 16-bit MMAs; the cache's fp8 bytes are a sliver of a prefill's


def test_mla_models_keep_their_backends_rule_under_vllm() -> None:
    from llmsim.build import fp8_attention
    from llmsim.models import get_model

    h100 = load_profile("H100-SXM")
    assert fp8_attention(PRESETS["vllm-v1"], h100, get_model("deepseek-v3")) is None
    assert fp8_attention(PRESETS["vllm-v1"], h100, get_model("llama-3.1-8b")) is True
    assert fp8_attention(PRESETS["ideal"], h100, get_model("llama-3.1-8b")) is None


def test_a_vllm_engine_profile_keeps_vllms_query_quantisation(tmp_path) -> None:
    from llmsim.engine import load_engine

    (tmp_path / "e.yaml").write_text("name: fitted\nsource: a fit\ndefaults: vllm\n")
    assert load_engine("e.yaml", tmp_path, "test").fp8_query is True
    (tmp_path / "o.yaml").write_text("name: other\nsource: another engine\n")
    assert load_engine("o.yaml", tmp_path, "test").fp8_query is False


def test_the_report_names_the_attention_dtype_of_an_fp8_cache(tmp_path) -> None:
    """An fp8 KV cache's run says how its attention computed: fp8 under vLLM on an H100 (FA3),
    16-bit over the converted cache on an L40S; a 16-bit cache's run has no such row."""
    import yaml

    from llmsim.cli import main

    small = {
        "kind": "all_at_once",
        "num_requests": 2,
        "prompt_tokens": {"dist": "fixed", "value": 16},
        "output_tokens": {"dist": "fixed", "value": 2},
    }
    for hardware, kv, expect in (
        ("H100-SXM", "fp8", "| attention compute dtype | fp8 |"),
        ("L40S", "fp8", "| attention compute dtype | bf16 |"),
        ("H100-SXM", "bf16", None),
    ):
        sc = {"name": "r", "model": "llama-3.1-8b", "hardware": hardware, "kv_cache": {"dtype": kv}, "workload": small}
        path, out = tmp_path / f"{hardware}{kv}.yaml", tmp_path / f"{hardware}{kv}"
        path.write_text(yaml.safe_dump(sc))
        assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
        report = (out / "report.md").read_text()
        assert (expect in report) if expect else ("attention compute dtype" not in report)


def test_the_report_names_an_mla_models_prefill_and_decode_attention_dtypes() -> None:
    """MLA's prefill kernel runs 16-bit whatever the cache (ops.mla_prefill_dtype); its absorbed decode
    runs fp8 with fp8 compute and an fp8 cache: the report's row says both."""
    from llmsim.build import build_model, build_pools
    from llmsim.report import attention_dtypes

    sc = _sc(
        model={"name": "deepseek-v3", "act_dtype": "fp8", "weight_dtype": "fp8"},
        hardware="H200",
        cluster={"tp": 8},
        kv_cache={"dtype": "fp8"},
    )
    assert attention_dtypes(build_pools(sc, build_model(sc))) == "prefill bf16, decode fp8"


def test_a_field_set_to_the_presets_own_value_keeps_it_validated() -> None:
    sc = _sc(engine={"preset": "vllm-v1", "async_scheduling": True, "first_token_at_prefill": False})
    assert sc.engine_spec.name == "vllm-v1"


def test_a_vllm_engine_profile_keeps_vllms_moe_padding_skip(tmp_path) -> None:
    """A profile of a vLLM deployment (calibrate --serving writes defaults: vllm) routes CUDA-graph
    padding as vLLM does unless it says otherwise, as it keeps vLLM's memory terms."""
    profile = tmp_path / "engine.yaml"
    profile.write_text("defaults: vllm\ncuda_graphs: true\n")
    assert _sc(engine={"profile": str(profile)}).engine_spec.moe_skip_padding is True
    profile.write_text("defaults: vllm\nmoe_skip_padding: false\n")
    assert _sc(engine={"profile": str(profile)}).engine_spec.moe_skip_padding is False


def test_an_engine_profile_cannot_name_a_preset(tmp_path) -> None:
    """A profile file is a list of fields; a `preset:` in it would be read past and the file
    priced as a blank engine, so it is refused with where the key belongs."""
    profile = tmp_path / "engine.yaml"
    profile.write_text("preset: vllm-2024\n")
    with pytest.raises(UserError, match="cannot name a preset to start from"):
        _sc(engine={"profile": str(profile)})
    profile.write_text("model: llama-3.1-8b\nhardware: H100-SXM\n")  # a scenario where the engine belongs
    with pytest.raises(UserError, match="a scenario, not an engine profile"):
        _sc(engine={"profile": str(profile)})


def test_engine_numbers_written_as_yaml_1_1_reads_1e_3() -> None:
    """YAML 1.1 reads ``1e-3`` (no dot) as text; the engine section takes it as the number, as the
    scenario's other sections do, and still refuses text that is no number."""
    from llmsim.engine import engine_from_dict

    spec = engine_from_dict({"preset": "vllm-v1", "output_delay_s": "1e-3", "non_torch_bytes": "2e9"}, "t.yaml")
    assert spec.output_delay_s == 1e-3 and spec.non_torch_bytes == 2e9
    for bad in ("abc", "nan", "1e9"):
        with pytest.raises(UserError, match="engine.output_delay_s|output_delay_s"):
            engine_from_dict({"preset": "vllm-v1", "output_delay_s": bad}, "t.yaml")


def test_the_trtllm_preset_fills_tensorrt_llms_defaults_and_overlaps_the_host() -> None:
    """tensorrt_llm/llmapi/llm_args.py: 2048 sequences and 8192 tokens a step, 32-token blocks,
    0.9 of free memory, block reuse on, GUARANTEED_NO_EVICT without chunking, the overlap scheduler."""
    sc = _sc(engine="trtllm")
    p, kv, spec = sc.policy, sc.kv_cache, sc.engine_spec
    assert (p.kind, p.max_num_seqs, p.max_batch_tokens, p.enable_chunked_context) == ("trtllm", 2048, 8192, False)
    assert (kv.block_tokens, kv.memory_fraction, kv.memory_fraction_of, kv.prefix_caching) == (32, 0.9, "free", True)
    assert spec.async_scheduling and sc.cluster.cuda_graphs
    # keys the scenario sets win; another policy keeps its own step budget
    own = _sc(engine="trtllm", policy={"kind": "trtllm", "max_num_seqs": 64}, kv_cache={"block_tokens": 64})
    assert (own.policy.max_num_seqs, own.policy.max_batch_tokens, own.kv_cache.block_tokens) == (64, 8192, 64)
    chunked = _sc(engine="trtllm", policy={"kind": "chunked", "chunk_tokens": 512})
    assert (chunked.policy.kind, chunked.policy.chunk_tokens, chunked.policy.max_num_seqs) == ("chunked", 512, 2048)
    assert llmsim.run(sc).summary["requests"]["finished"] == 40


def test_trtllm_graphs_take_decode_only_batches_of_a_captured_size() -> None:
    """CudaGraphConfig's defaults: graphs for decode-only batches of 1-31, 32, 64 and 128, no
    padding: a decode batch of 40 and every mixed step run eager (vLLM would pad 40 to 40 and run
    mixed steps piecewise)."""
    from llmsim.engine import trtllm_graph_sizes

    assert trtllm_graph_sizes() == (*range(1, 33), 64, 128)
    assert trtllm_graph_sizes(8192)[-6:] == (256, 512, 1024, 2048, 4096, 8192)  # its powers of two, then the max
    spec = PRESETS["trtllm"]
    cfg = CostConfig(
        cuda_graphs=True,
        cuda_graph_sizes=spec.cuda_graph_sizes,
        cuda_graph_padding=spec.cuda_graph_padding,
        cuda_graph_decode_only=spec.cuda_graph_decode_only,
    )
    cm = CostModel(CATALOG["llama-3.1-8b"], load_profile("H100-SXM"), cfg, spec)
    assert cm.graph_view(31, True) == (31, True, True)
    assert cm.graph_view(40, True) == (40, False, False)  # no graph of 40, no padding: eager
    assert cm.graph_view(64, False) == (64, False, False)  # a mixed step: eager
    assert cm.graph_view(200, True) == (200, False, False)
    assert "cuda_graph_padding" not in cm.breakdown(batch_shape([], [500] * 40))
    padded = CostModel(cm.model, cm.hw, replace(cfg, cuda_graph_padding=True), spec)
    assert padded.graph_view(40, True) == (64, True, True) and padded.graph_view(40, False) == (40, False, False)


@pytest.mark.parametrize("hardware", ["MI300X", "Xeon-8480+", "TPU-v5e"])
def test_the_trtllm_engine_refuses_devices_tensorrt_llm_does_not_run_on(hardware: str) -> None:
    with pytest.raises(UserError, match=f"runs on NVIDIA GPUs, not on {hardware}"):
        _sc(engine="trtllm", hardware=hardware)


def test_the_trtllm_engine_overlaps_its_host_only_without_pipeline_stages() -> None:
    """TensorRT-LLM's PyExecutor runs _executor_loop_pp for pp_size > 1, whatever
    disable_overlap_scheduler says: no overlap scheduler there."""
    from llmsim.build import build_model, build_pools

    for pp, overlap in ((1, True), (2, False)):
        sc = _sc(engine="trtllm", cluster={"tp": 1, "pp": pp})
        (pool,) = build_pools(sc, build_model(sc))
        assert pool.cost.engine.async_scheduling is overlap and sc.engine_spec.async_scheduling is overlap


def test_trtllm_scheduler_keys_need_no_kind_under_the_trtllm_engine() -> None:
    """The engine makes the kind trtllm; the keys were checked against llmsim's default kind first."""
    sc = _sc(engine="trtllm", policy={"enable_chunked_context": True, "capacity_scheduler_policy": "max_utilization"})
    assert (sc.policy.kind, sc.policy.enable_chunked_context) == ("trtllm", True)
    with pytest.raises(UserError, match="enable_chunked_context applies to kind: trtllm only"):
        _sc(engine="vllm-v1", policy={"enable_chunked_context": True})


def test_the_nvidia_check_follows_trtllm_defaults_whatever_the_name(tmp_path) -> None:
    """``defaults: trtllm`` is what makes an engine run as TensorRT-LLM (its name is the user's to set)."""
    with pytest.raises(UserError, match="runs as TensorRT-LLM"):
        _sc(engine={"preset": "vllm-v1", "defaults": "trtllm"}, hardware="MI300X")
    with pytest.raises(UserError, match="runs as TensorRT-LLM"):
        _sc(engine={"preset": "trtllm", "name": "mytrt"}, hardware="MI300X")
    assert _sc(engine={"preset": "trtllm", "defaults": "vllm"}, hardware="MI300X").policy.kind == "vllm"
    own = tmp_path / "my-h100.yaml"  # a user's profile spells its vendor as it likes
    own.write_text((Path(__file__).resolve().parent.parent / "hardware_profiles/H100-SXM.yaml").read_text()
                   .replace("vendor: NVIDIA", "vendor: nvidia").replace("name: H100-SXM", "name: my-h100"))  # fmt: skip
    assert _sc(engine="trtllm", hardware=str(own)).engine_spec.name == "trtllm"


def test_trtllm_padding_brings_its_own_capture_sizes_and_pp_its_sequences() -> None:
    spec = _sc(engine={"preset": "trtllm", "cuda_graph_padding": True}).engine_spec
    assert (
        spec.cuda_graph_sizes[:5] == (1, 2, 4, 8, 16)
        and 40 in spec.cuda_graph_sizes
        and 31 not in spec.cuda_graph_sizes
    )
    # max_batch_size bounds a micro-batch, pp of them in flight (py_executor_creator.py)
    assert _sc(engine="trtllm", cluster={"pp": 2}).policy.max_num_seqs == 4096


def test_disaggregated_pools_on_nvidia_run_trtllm_whatever_the_top_level_device() -> None:
    """Pools that each name their hardware run nothing on the top-level one (it was refused)."""
    pools = {"prefill_pool": {"hardware": "H100-SXM"}, "decode_pool": {"hardware": "A100-SXM-80GB"}}
    sc = _sc(engine="trtllm", hardware="MI300X", policy={"kind": "disaggregated"}, cluster=pools)
    assert sc.engine_spec.defaults == "trtllm"
    with pytest.raises(UserError, match="cluster.decode_pool.hardware: .*not on MI300X"):
        bad = {**pools, "decode_pool": {"hardware": "MI300X"}}
        llmsim.run(_sc(engine="trtllm", hardware="MI300X", policy={"kind": "disaggregated"}, cluster=bad))


def test_the_trtllm_engine_preset_runs_the_0x_executor_as_triton_serves_it() -> None:
    """tensorrtllm_backend docs/model_config.md: GUARANTEED_NO_EVICT, chunked context off, no CUDA
    graphs, KV reuse off, 0.9 of free memory; no overlap of steps (enable_trt_overlap removed).
    Its step host time runs in series with the device, and Triton's frontend delays every token."""
    sc = _sc(engine="trtllm-engine")
    p, kv, spec = sc.policy, sc.kv_cache, sc.engine_spec
    assert (p.kind, p.max_num_seqs, p.max_batch_tokens, p.enable_chunked_context) == ("trtllm", 2048, 8192, False)
    assert (kv.block_tokens, kv.memory_fraction, kv.memory_fraction_of, kv.prefix_caching) == (32, 0.9, "free", False)
    assert not spec.async_scheduling and not sc.cluster.cuda_graphs
    assert spec.prepare.base_s > 0 and spec.output_delay_s > 0 and "fitted" in spec.prepare.source
    with pytest.raises(UserError, match="runs on NVIDIA GPUs, not on MI300X"):
        _sc(engine="trtllm-engine", hardware="MI300X")
    one = {
        "kind": "poisson",
        "rate_rps": 1.0,
        "num_requests": 1,
        "prompt_tokens": {"dist": "fixed", "value": 200},
        "output_tokens": {"dist": "fixed", "value": 4},
    }
    base = llmsim.run(_sc(engine="trtllm-engine", workload=one))
    quiet = llmsim.run(_sc(engine={"preset": "trtllm-engine", "output_delay_s": 0.0}, workload=one))
    assert base.summary["mean_ttft_ms"] - quiet.summary["mean_ttft_ms"] == pytest.approx(spec.output_delay_s * 1e3)
    # each step lasts its device time plus the host's (no overlap)
    cm = _cost("trtllm-engine")
    parts = cm.breakdown(batch_shape([], [500] * 8))
    assert parts["engine_prepare"] == spec.prepare.base_s and "engine_async_overlap" not in parts
    assert sum(parts.values()) == pytest.approx(cm.step_time(batch_shape([], [500] * 8)), rel=1e-12)


def test_padding_on_the_trtllm_engine_keeps_its_graph_sizes() -> None:
    """TensorRT-LLM 1.x's padded capture list belongs to that preset; the 0.x executor's graphs (off
    by default) keep every size, whatever its padding switch says."""
    for padding in (False, True):
        spec = _sc(engine={"preset": "trtllm-engine", "cuda_graph_padding": padding}).engine_spec
        assert spec.cuda_graph_sizes == () and spec.cuda_graph_padding is padding
    assert _sc(engine={"preset": "trtllm", "cuda_graph_padding": True}).engine_spec.cuda_graph_sizes[:3] == (1, 2, 4)
