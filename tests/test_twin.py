"""The twin's plumbing on a tiny model: engine and simulator see the same workload and scheduler,
the comparison frame and files are well formed, and the profile `llmsim calibrate --local-cpu` writes is valid.
(Timing accuracy is a benchmark: benchmarks/bench_twin.py, i.e. `llmsim twin`.)"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from llmsim.calibration import enginefit, localcpu, microbench, steptimes
from llmsim.calibration.enginefit import FP32
from llmsim.errors import UserError
from llmsim.hardware import load_profile
from llmsim.models import ModelSpec
from llmsim.reference import twin, twin_report
from llmsim.reference.engine import ReferenceEngine, SpeedProbe
from llmsim.reference.generate import greedy_generate
from llmsim.reference.model import Model
from llmsim.reference.paged_kv import PagedKVCache
from llmsim.reference.timing import TWIN_SPEC
from llmsim.reference.twin_compare import METRICS
from llmsim.reference.weights import init_weights
from llmsim.schedulers import SchedulerConfig

TINY = ModelSpec("tiny", 32, 64, 2, 4, 2, 8, 61, weight_dtype="fp32")


@pytest.mark.parametrize("policy", ["traditional", "chunked"])
def test_engine_emits_plain_greedy_tokens_under_its_scheduler(policy):
    """Whatever the scheduler does (batching, chunking, preemption by recompute), every request
    gets exactly the tokens greedy decoding of its prompt alone gives."""
    w = init_weights(TINY, 0, np.float64)
    eng = ReferenceEngine(w, policy, SchedulerConfig(max_num_seqs=4, chunk_tokens=16), 24, 4, clock="cpu")
    rng = np.random.default_rng(0)
    reqs = [eng.new_request(i, i * 1e-4, int(rng.integers(5, 30)), int(rng.integers(1, 10))) for i in range(12)]
    prompts = [list(r.payload) for r in reqs]
    out = eng.run(reqs)
    assert sum(r.preemptions for r in reqs) > 0  # the small cache forces preemptions
    for r, p in zip(reqs, prompts, strict=True):
        assert r.status == "finished"
        assert r.payload[len(p) :] == greedy_generate(Model(w, PagedKVCache(TINY, 4, np.float64)), p, r.output_tokens)
        assert r.arrival_s <= r.first_token_s <= r.finish_s
    assert (out.steps["duration_s"] >= out.steps["forward_s"]).all()
    assert out.steps["prefill_tokens"].sum() >= sum(r.prompt_tokens for r in reqs)
    assert eng.kv.used == 0


class FakeMachine:
    """A clock that only moves when the engine executes a plan: each step takes ``work_s(plan)``
    times the machine's current slowness, which turns 2x at step ``slow_from``. Its probe reads
    ``PROBE_REF_S`` times the slowness the next step will run at."""

    PROBE_REF_S = 0.01

    def __init__(self, slow_from: int | None) -> None:
        self.now, self.steps, self.slow_from = 0.0, 0, slow_from

    def slowness(self) -> float:
        return 2.0 if self.slow_from is not None and self.steps >= self.slow_from else 1.0

    def clock(self) -> float:
        return self.now

    def probe(self) -> float:
        return self.PROBE_REF_S * self.slowness()

    def attach(self, eng: ReferenceEngine) -> None:
        execute = eng.execute

        def timed(plan):  # noqa: ANN001, ANN202
            execute(plan)
            self.now += 1e-3 * (1 + plan.prefill_tokens + len(plan.decode)) * self.slowness()
            self.steps += 1

        eng.execute = timed  # type: ignore[method-assign]


def _fake_run(slow_from: int | None, window: int) -> tuple[ReferenceEngine, object]:
    machine = FakeMachine(slow_from)
    probe = SpeedProbe(machine.probe, FakeMachine.PROBE_REF_S, interval_s=0.0, window=window)
    eng = ReferenceEngine(init_weights(TINY, 0, np.float32), "chunked", SchedulerConfig(max_num_seqs=4, chunk_tokens=16),
                          64, 4, clock=machine.clock, probe=probe)  # fmt: skip
    machine.attach(eng)
    rng = np.random.default_rng(1)
    reqs = [eng.new_request(i, i * 0.01, int(rng.integers(5, 30)), int(rng.integers(2, 8))) for i in range(10)]
    return eng, eng.run(reqs)


def test_normalised_clock_removes_a_machine_slowdown():
    """The machine runs 2x slower from the middle of the run: raw step times double, the normalised
    ones (probe every step, no smoothing) and every request's times equal those of a steady machine."""
    _, steady = _fake_run(None, window=1)
    n = len(steady.steps)
    _, slowed = _fake_run(n // 2, window=1)
    st, ref = slowed.steps, steady.steps
    assert (
        len(st) == n
        and (st["speed_factor"].iloc[n // 2 :] == 2.0).all()
        and (st["speed_factor"].iloc[: n // 2] == 1.0).all()
    )
    assert np.allclose(st["raw_duration_s"].iloc[n // 2 :], 2 * ref["raw_duration_s"].iloc[n // 2 :])
    assert np.allclose(st["duration_s"], ref["duration_s"])
    assert np.allclose(st["duration_s"], st["raw_duration_s"] / st["speed_factor"])
    for a, b in zip(slowed.requests, steady.requests, strict=True):
        assert (a.first_token_s, a.finish_s) == pytest.approx((b.first_token_s, b.finish_s))
    # on the raw clock the same run finishes later, and no request is served before it arrives
    raw_finish = slowed.raw_times([r.finish_s for r in slowed.requests])
    raw_first = slowed.raw_times([r.first_token_s for r in slowed.requests])
    assert raw_finish.max() > max(r.finish_s for r in slowed.requests)
    assert all(f >= r.arrival_s for f, r in zip(raw_first, slowed.requests, strict=True))


def test_smoothed_factor_follows_the_slowdown_after_the_window():
    """With the median of the last 3 probes the factor turns 2 two probes after the slowdown; from
    then on normalised steps equal the steady machine's."""
    _, steady = _fake_run(None, window=3)
    n = len(steady.steps)
    _, slowed = _fake_run(n // 2, window=3)
    f = slowed.steps["speed_factor"].to_numpy()
    assert (f[: n // 2 + 1] == 1.0).all() and (f[n // 2 + 2 :] == 2.0).all()
    assert np.allclose(slowed.steps["duration_s"].iloc[n // 2 + 2 :], steady.steps["duration_s"].iloc[n // 2 + 2 :])
    assert len(slowed.probes) == n + 3  # interval 0: one probe before every step, after 3 filling the window


class SplitMachine(FakeMachine):
    """From step ``slow_from`` on, only steps that prefill run 2x slower (a neighbour contending for
    compute, say); the decode probe keeps reading 1x, the prefill probe reads 2x."""

    def __init__(self, slow_from: int | None) -> None:
        super().__init__(slow_from)
        self.prefilling = False

    def slowness(self) -> float:
        return super().slowness() if self.prefilling else 1.0

    def probe(self) -> float:
        return self.PROBE_REF_S

    def prefill_probe(self) -> float:
        self.prefilling = True
        try:
            return self.PROBE_REF_S * self.slowness()
        finally:
            self.prefilling = False

    def attach(self, eng: ReferenceEngine) -> None:
        execute = eng.execute

        def timed(plan):  # noqa: ANN001, ANN202
            self.prefilling = plan.prefill_tokens > 0
            execute(plan)
            self.now += 1e-3 * (1 + plan.prefill_tokens + len(plan.decode)) * self.slowness()
            self.steps += 1
            self.prefilling = False

        eng.execute = timed  # type: ignore[method-assign]


def _split_run(slow_from: int | None):  # noqa: ANN202
    machine = SplitMachine(slow_from)
    probe = SpeedProbe(machine.probe, FakeMachine.PROBE_REF_S, interval_s=0.0, window=1)
    prefill_probe = SpeedProbe(machine.prefill_probe, FakeMachine.PROBE_REF_S, interval_s=0.0, window=1)
    eng = ReferenceEngine(init_weights(TINY, 0, np.float32), "chunked", SchedulerConfig(max_num_seqs=4, chunk_tokens=16),
                          64, 4, clock=machine.clock, probe=probe, prefill_probe=prefill_probe)  # fmt: skip
    machine.attach(eng)
    rng = np.random.default_rng(1)
    reqs = [eng.new_request(i, i * 0.01, int(rng.integers(5, 30)), int(rng.integers(2, 8))) for i in range(10)]
    return eng.run(reqs)


def test_prefill_probe_scales_only_the_steps_that_prefill():
    """Only prefilling steps slow down: the prefill probe's factor (2) applies to them, the decode
    probe's (1) to decode-only steps, and the normalised run equals the steady machine's."""
    steady = _split_run(None)
    n = len(steady.steps)
    slowed = _split_run(n // 2)
    st = slowed.steps.iloc[n // 2 :]
    prefills = st["prefill_tokens"] > 0
    assert prefills.any() and (~prefills).any()
    assert (st.loc[prefills, "speed_factor"] == 2.0).all() and (st.loc[~prefills, "speed_factor"] == 1.0).all()
    assert np.allclose(slowed.steps["duration_s"], steady.steps["duration_s"])
    for a, b in zip(slowed.requests, steady.requests, strict=True):
        assert (a.first_token_s, a.finish_s) == pytest.approx((b.first_token_s, b.finish_s))
    assert len(slowed.prefill_probes) == len(slowed.probes) > 0


def fake_profile(tmp_path: Path) -> Path:
    """A local-cpu-shaped profile with made-up efficiencies (no benchmarking in unit tests)."""
    data = yaml.safe_load(Path("hardware_profiles/EPYC-9654.yaml").read_text())
    data["name"] = "local-cpu-test"
    data["memory_capacity_bytes"]["value"] = 4e9  # a small KV pool: the block manager lists every block
    data["calibration"] = {
        "probe_step": {"step": "decode b=8 ctx=256", "measured_s": 0.014},
        "probe_prefill_step": {"step": "prefill 128", "measured_s": 0.04},
    }
    path = tmp_path / "local-cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_twin_compares_the_same_requests(tmp_path, monkeypatch):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "vocab_size": 61, "torch_dtype": "float32"}))  # fmt: skip
    sc = yaml.safe_load(Path("scenarios/twin_small.yaml").read_text())
    sc["model"]["hf_config"] = str(cfg)
    sc["workload"]["num_requests"] = 6
    sc["workload"]["prompt_tokens"] = {"dist": "uniform", "min": 4, "max": 20}
    sc["workload"]["output_tokens"] = {"dist": "uniform", "min": 2, "max": 6}
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(sc))
    result = twin.run_twin(path, fake_profile(tmp_path))
    f = result.requests
    assert len(f) == 6 and f["id"].tolist() == list(range(6))
    for m in METRICS:
        assert (f[f"{m}_meas"].dropna() > 0).all()
        assert np.allclose(f[f"{m}_err"], f[f"{m}_pred"] / f[f"{m}_meas"] - 1, equal_nan=True)
    assert set(result.summary["error"]) <= set(METRICS)
    # both clocks are reported: the engine ran on the normalised clock, the raw one is the same run unscaled
    s = result.summary
    assert s["normalised"] and s["speed_factor"]["probes"] >= 1
    assert s["prefill_speed_factor"]["probes"] == s["speed_factor"]["probes"]  # the profile has both references
    assert "e2e_s" in s["error"] and "e2e_s" in s["error_raw"]
    assert np.allclose(f["e2e_s_err_raw"], f["e2e_s_pred"] / f["e2e_s_meas_raw"] - 1)
    st = result.steps
    assert np.allclose(st["duration_s"] * st["speed_factor"], st["raw_duration_s"])
    assert s["engine_step_error_raw"]["median_abs"] >= 0
    steps = pd.DataFrame({"step": ["a"], "predicted_s": [1.1], "measured_s": [1.0], "error": [0.1]})
    paths = twin_report.write(tmp_path / "out", result, steps)
    assert all(p.exists() for p in paths)
    summary = json.loads((tmp_path / "out" / "twin_summary.json").read_text())
    assert summary["steps"]["median_abs_error"] == pytest.approx(0.1)


@pytest.mark.parametrize("policy", ["traditional", "chunked", "chunked-dynamic"])
def test_engine_on_the_cost_models_clock_reproduces_the_simulator(tmp_path, policy):
    """Every difference between the twin's two sides comes from step times: an engine whose clock
    advances by the cost model's price of each step takes exactly the simulator's steps and gives
    every request the simulator's times (the scenario's scheduler, KV pool and workload; a tiny model).
    With ``chunk_budget: dynamic`` the engine's scheduler predicts step times as the simulator's
    does (``twin.twin_engine`` passes the cost model): before, the engine ran a fixed budget."""
    import llmsim.api
    from llmsim.build import build_model, build_pools, build_workload
    from llmsim.scenario import load_scenario

    sc_data = yaml.safe_load(Path("scenarios/twin_small.yaml").read_text())
    sc_data["model"]["hf_config"] = str(Path("scenarios/twin_small_config.json").resolve())
    sc_data["policy"]["kind"] = policy.removesuffix("-dynamic")
    if policy.endswith("-dynamic"):  # every step's prediction misses the target: chunks shrink to the floor
        sc_data["policy"].update(chunk_budget="dynamic", tbt_target_s=1e-9, min_chunk_tokens=32)
    sc_data["workload"]["num_requests"] = 16
    sc_data["hardware"] = str(fake_profile(tmp_path))
    sc_data["engine"] = {"preset": "vllm-v1", "output_delay_s": 0.0}  # the engine's own stamps: no client
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(sc_data))
    sc = load_scenario(path)
    pool = build_pools(sc, build_model(sc))[0]
    wl = build_workload(sc)
    sim = llmsim.api.run(sc, exact_steps=True)
    now = [0.0]
    eng = twin.twin_engine(sc, pool, init_weights(TINY, 0, np.float32), clock=lambda: now[0])
    execute = eng.execute

    def priced(plan):  # noqa: ANN001, ANN202
        execute(plan)
        now[0] += pool.cost.step_time(plan.shape(*eng.windows, eng.spec_as_decode))

    eng.execute = priced  # type: ignore[method-assign]
    reqs = [eng.new_request(i, float(wl.arrival_s[i]), int(wl.prompt_tokens[i]), int(wl.output_tokens[i])) for i in range(len(wl))]  # fmt: skip
    out = eng.run(reqs)
    cols = ["prefill_tokens", "decode_tokens", "batch_size"]
    assert len(out.steps) == len(sim.steps) > 16
    assert (out.steps[cols].to_numpy() == sim.steps[cols].to_numpy()).all()
    assert np.allclose(out.steps["start_s"], sim.steps["start_s"], rtol=1e-9, atol=1e-12)
    assert np.allclose([r.finish_s for r in out.requests], sim.requests["finish_s"], rtol=1e-9)
    if policy.endswith("-dynamic"):
        assert out.steps["prefill_tokens"].max() <= 32 < pool.sched.chunk_tokens
    assert np.allclose([r.first_token_s for r in out.requests], sim.requests["first_token_s"], rtol=1e-9)


def test_twin_rejects_unsupported_policy(tmp_path):
    sc = yaml.safe_load(Path("scenarios/twin_small.yaml").read_text())
    sc["model"]["hf_config"] = str(Path("scenarios/twin_small_config.json").resolve())
    sc["policy"]["kind"] = "static"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(sc))
    with pytest.raises(UserError, match="traditional and chunked"):
        twin.run_twin(path, fake_profile(tmp_path))


def test_fit_gemm_recovers_a_known_roofline():
    """Times generated from a roofline with known half_m and memory rate are fitted back."""
    peak, bw, half, frac = 1e11, 1e10, 24.0, 0.5
    rows = []
    for m in (1, 2, 4, 8, 16, 64, 256, 1024):
        for n, k in ((512, 512), (2048, 512)):
            t = max(2 * m * n * k / (peak * m / (m + half)), 4 * (m * k + k * n + m * n) / (bw * frac))
            rows.append({"m": m, "n": n, "k": k, "s": t})
    rows.append({"m": 4096, "n": 4096, "k": 4096, "s": 2 * 4096**3 / peak})  # the best shape sets the peak
    got_peak, got_half, got_frac = microbench.fit_gemm(rows, bw)
    assert got_peak == pytest.approx(peak)
    assert got_half == pytest.approx(half, rel=0.1)
    assert got_frac == pytest.approx(frac, rel=0.1)


def test_profile_section_values_are_replaced_not_their_sources():
    prof = {
        "efficiency": {"gemm_half_m": {"value": 1.0, "source": "x"}},
        "overheads": {"kernel_fixed_s": {"value": 2.0, "source": "y"}},
    }
    out = enginefit.with_values(prof, {"gemm_half_m": 5.0, "kernel_fixed_s": 3.0})
    assert out["efficiency"]["gemm_half_m"] == {"value": 5.0, "source": "x"}
    assert out["overheads"]["kernel_fixed_s"]["value"] == 3.0
    assert prof["efficiency"]["gemm_half_m"]["value"] == 1.0  # the input is not mutated


@pytest.mark.slow
def test_measure_and_write_produces_a_valid_local_cpu_profile(tmp_path):
    path, _ = localcpu.measure_and_write(tmp_path / "local-cpu.yaml", quick=True)
    prof = load_profile(path)
    assert prof.name == "local-cpu" and prof.family == "cpu"
    assert all("measured by llmsim calibrate --local-cpu on" in f.source for f in [prof.peak_flops["fp32"]])
    assert "measured by llmsim calibrate --local-cpu" in prof.efficiency.gemm_half_m.source
    table = prof.efficiency.gemm_small_m  # m = 1..SMALL_M measured; it covers m = 1, so no GEMV figure
    assert len(table.value) == microbench.SMALL_M and all(0 < v <= 1.5 for v in table.value)
    assert "measured by llmsim calibrate --local-cpu" in table.source
    assert prof.calibration["probe_prefill_step"]["step"] == "prefill 128"  # both drift probes' references
    assert prof.calibration["probe_prefill_step"]["measured_s"] > 0 and prof.calibration["probe_step"]["measured_s"] > 0
    assert prof.efficiency.gemv_memory_fraction is None


def test_calibration_samples_are_rescaled_to_the_probes_reference_speed():
    # a machine 1.5x slower in the second of three rounds, and the prefill kind 1.2x slower again in
    # the third: each sample divided by its probes' factor gives every case its steady time back
    cases = [([128], []), ([], [(8, 256)]), ([64], [(4, 512)])]
    steady = [0.040, 0.015, 0.030]
    slow = {"decode": [1.0, 1.5, 1.0], "prefill": [1.0, 1.5, 1.2]}
    refs = {"decode": 0.016, "prefill": 0.036}
    samples, readings = [], {"decode": [], "prefill": []}
    for i in range(3):
        row = []
        for j, (chunks, _) in enumerate(cases):
            for kind in readings:
                readings[kind].append(refs[kind] * slow[kind][i])
            row.append(steady[j] * slow["prefill" if chunks else "decode"][i])
        samples.append(row)
    got = steptimes.normalised_medians(cases, samples, readings, refs)
    assert got == pytest.approx(steady, rel=1e-12)
    # the raw medians are off: the slow round is the median for the prefill kind
    assert np.median([row[0] for row in samples]) == pytest.approx(0.048)


def test_spread_contexts_have_the_requested_batch_and_mean():
    ctx = enginefit.spread_contexts(12, 600)
    assert len(ctx) == 12 and abs(np.mean(ctx) - 600) < 1 and min(ctx) < 300 < 1200 < max(ctx)


def _cpu_profile(tmp_path: Path, **extra: float):
    """fake_profile, plus optional efficiency figures (the local-cpu regimes)."""
    data = yaml.safe_load(fake_profile(tmp_path).read_text())
    for k, v in extra.items():
        data["efficiency"][k] = {"value": v, "source": "test"}
    path = tmp_path / f"p{len(extra)}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_profile(path)


def test_cpu_regimes_price_only_their_ops(tmp_path):
    """gemv_memory_fraction prices m = 1 GEMMs only, decode_attention_fraction decode attention only;
    without them (every shipped profile) pricing is unchanged."""
    from llmsim.costmodel import CostModel
    from llmsim.costmodel.ops import batch_shape

    plain = CostModel(TWIN_SPEC, _cpu_profile(tmp_path), FP32)
    cpu = CostModel(TWIN_SPEC, _cpu_profile(tmp_path, gemv_memory_fraction=2.0, decode_attention_fraction=0.01),
                    FP32)  # fmt: skip
    for shape in (batch_shape([], [300]), batch_shape([], [300] * 4), batch_shape([(64, 0)], [200, 500])):
        for a, b in zip(plain.priced(shape), cpu.priced(shape), strict=True):
            if a.op.kind == "gemm" and a.op.m == 1:
                assert b.memory_s == pytest.approx(a.memory_s * plain._bw / (plain.hw.bandwidth * 2.0))
                assert b.compute_s < a.compute_s  # no tile-fill penalty on a GEMV
            elif a.op.name.startswith("attention_decode"):
                assert b.compute_s == pytest.approx(a.compute_s * plain.hw.efficiency.attention_fraction.value / 0.01)
                assert b.memory_s == a.memory_s
            else:
                assert (a.compute_s, a.memory_s) == (b.compute_s, b.memory_s)


def test_fastpath_stays_exact_with_cpu_regimes(tmp_path):
    """Both regimes depend on the batch only (m, op name), not the context: the vectorised
    pricing of a decode run equals pricing each step."""
    from llmsim.costmodel import CostModel
    from llmsim.costmodel.ops import batch_shape

    prof = _cpu_profile(tmp_path, gemv_memory_fraction=0.8, decode_attention_fraction=0.03)
    for ctxs in ([100], [100, 700, 2000]):
        cost = CostModel(TWIN_SPEC, prof, FP32)
        got = cost.decode_steps_s(batch_shape([], ctxs), 50)
        want = [cost.step_time(batch_shape([], [c + i for c in ctxs])) for i in range(50)]
        assert np.allclose(got, want, rtol=1e-9)


def test_length_groups_cover_every_sequence_and_bound_the_padding():
    from llmsim.reference.model import _length_groups

    lengths = [int(x) for x in np.random.default_rng(0).lognormal(6, 0.8, 40)]
    groups = _length_groups(lengths, pad_rows=256)
    assert sorted(i for g in groups for i in g) == list(range(40))
    for g in groups:  # sorted by length; each member added at most pad_rows padded rows
        assert all(lengths[a] <= lengths[b] for a, b in zip(g, g[1:], strict=False))
        assert all((lengths[g[j]] - lengths[g[j - 1]]) * j <= 256 for j in range(1, len(g)))
    assert len(_length_groups([500] * 10)) == 1


def test_twin_spec_matches_the_shipped_config() -> None:
    """TWIN_SPEC (used by the calibration and the twin) and scenarios/twin_small_config.json describe one model."""
    from llmsim.models import from_hf_config

    shipped = from_hf_config(Path(__file__).resolve().parents[1] / "scenarios" / "twin_small_config.json")
    fields = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size")
    assert {f: getattr(shipped, f) for f in fields} == {f: getattr(TWIN_SPEC, f) for f in fields}


def test_a_serving_run_that_cannot_be_read_is_one_line(tmp_path):
    """read_run (llmsim twin --engine vllm, llmsim calibrate --serving) names the file it cannot parse."""
    from llmsim.calibration.serving import read_run

    src = Path("data/validation/vllm-cpu/budget-512")
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_bytes((src / "meta.json").read_bytes())
    (run / "requests.csv").write_bytes((src / "steps.csv.gz").read_bytes()[:300])  # gzip under a plain name
    with pytest.raises(UserError, match=r"requests.csv: not a readable CSV table"):
        read_run(run)
    lines = (src / "requests.csv").read_text().splitlines()[:4]
    (run / "requests.csv").write_text("\n".join([*lines, "r3,nan" + lines[3][lines[3].index(",", 3) :]]) + "\n")
    with pytest.raises(UserError, match=r"row 5, column 'arrival_s': expected a finite number"):
        read_run(run)


def test_vllm_replay_resolves_a_relative_profile_path_from_the_working_directory(tmp_path, monkeypatch):
    """The replay's scenario lives in a temporary folder: --hardware must reach it as an absolute path."""
    from llmsim.calibration import replay
    from llmsim.cli import main

    (tmp_path / "host.yaml").write_text(Path("hardware_profiles/EPYC-9654.yaml").read_text())
    seen = []

    def fake_replay(folder, hardware, engine):  # noqa: ANN001, ANN202
        seen.append(hardware)
        raise UserError("stop here")

    monkeypatch.setattr(replay, "replay", fake_replay)
    run = Path("data/validation/vllm-cpu/budget-512").resolve()
    monkeypatch.chdir(tmp_path)
    assert main(["twin", "--engine", "vllm", str(run), "--hardware", "host.yaml", "--quiet"]) == 2
    assert seen == [tmp_path / "host.yaml"]


def test_vllm_replay_prices_each_run_with_its_own_campaigns_fit(monkeypatch, capsys):
    """Runs of two campaigns (two machines) in one call: each folder's engine-fit/ prices it, and
    an explicit --hardware still wins for every run."""
    from llmsim.calibration import replay
    from llmsim.cli import main

    seen = []

    def fake_replay(folder, hardware, engine):  # noqa: ANN001, ANN202
        seen.append((folder.parent.name, hardware.parent.parent.name, engine.parent.parent.name))
        return real(folder, hardware, engine)

    real = replay.replay
    monkeypatch.setattr(replay, "replay", fake_replay)
    runs = [Path("data/validation/vllm-cpu/poisson-light"), Path("data/validation/vllm-cpu-xeon/poisson-light-b")]
    assert main(["twin", "--engine", "vllm", *map(str, runs)]) == 0
    assert seen == [("vllm-cpu", "vllm-cpu", "vllm-cpu"), ("vllm-cpu-xeon", "vllm-cpu-xeon", "vllm-cpu-xeon")]
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[2:4]}
    assert rows == {"poisson-light": "validation", "poisson-light-b": "calibration"}


def _copied_run(tmp_path: Path, name: str = "poisson-light") -> Path:
    import shutil

    dst = tmp_path / "campaign" / name
    shutil.copytree(Path("data/validation/vllm-cpu-xeon") / name, dst)
    return dst


@pytest.mark.parametrize(
    ("split", "needle"),
    [("[]", "lists of run folder names"), ('{"validation": 5}', "validation: 5"), ("{", "not a readable JSON split")],
)
def test_a_malformed_split_file_is_one_line(tmp_path, capsys, split, needle):
    from llmsim.cli import main

    run = _copied_run(tmp_path)
    (run.parent / "split.json").write_text(split)
    assert main(["twin", "--engine", "vllm", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "split.json" in err and needle in err and "Traceback" not in err


def test_a_run_outside_its_campaign_is_priced_with_a_note_and_a_half_fit_is_refused(tmp_path, capsys):
    from llmsim.cli import main

    run = _copied_run(tmp_path)
    assert main(["twin", "--engine", "vllm", str(run)]) == 0
    out = capsys.readouterr().out
    assert "note: no engine-fit/ beside" in out and "first campaign's fit" in out
    (run.parent / "engine-fit").mkdir()
    (run.parent / "engine-fit" / "engine.yaml").write_text("name: x\n")
    assert main(["twin", "--engine", "vllm", str(run), "--quiet"]) == 2
    assert "hardware.yaml missing" in capsys.readouterr().err


def test_runs_of_two_campaigns_with_one_name_keep_their_campaigns(tmp_path, monkeypatch, capsys):
    """Labels and --out files say which campaign; ``.`` names the run it is."""
    from llmsim.cli import main

    a = Path("data/validation/vllm-cpu-xeon/poisson-light").resolve()
    b = Path("data/validation/vllm-cpu-xeon-cold/poisson-light").resolve()
    assert main(["twin", "--engine", "vllm", str(a), str(b), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "vllm-cpu-xeon/poisson-light " in out and "vllm-cpu-xeon-cold/poisson-light " in out
    names = sorted(p.name for p in (tmp_path / "o" / "bench").iterdir())
    assert "vllm-cpu-xeon--poisson-light.measured.json" in names
    assert "vllm-cpu-xeon-cold--poisson-light.measured.json" in names
    monkeypatch.chdir(a)
    assert main(["twin", "--engine", "vllm", "."]) == 0
    row = capsys.readouterr().out.splitlines()[2].split()
    assert row[:2] == ["poisson-light", "validation"]


def test_vllm_replay_prices_a_run_in_the_dtype_it_served(tmp_path):
    """Every replay was priced in fp32 whatever the run's engine_args.dtype (vLLM's CPU backend
    serves bf16 on AMX machines): a bf16 run read at twice its weight bytes."""
    from llmsim.calibration.replay import scenario_dict
    from llmsim.calibration.serving import read_run

    run = _copied_run(tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    meta["engine_args"]["dtype"] = "bfloat16"
    (run / "meta.json").write_text(json.dumps(meta))
    d = scenario_dict(
        read_run(run), tmp_path / "t.jsonl", tmp_path / "h.yaml", tmp_path / "e.yaml", tmp_path / "c.json"
    )
    assert (d["model"]["weight_dtype"], d["model"]["act_dtype"], d["kv_cache"]["dtype"]) == ("bf16",) * 3
