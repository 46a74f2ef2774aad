"""``llmsim calibrate --local-cpu``: measure this machine as the NumPy reference engine sees it and
write a ``local-cpu`` hardware profile.

Two stages (docs/reference.md section 3): the micro-benchmarks (``microbench``) give every
figure a first value, then the fit to the engine's own steps (``enginefit``) refines the shape
parameters; each figure's ``source`` says which measurement it is and its micro-benchmark value,
and the profile's ``calibration`` section keeps the drift probes' references and the fit's
residual on every calibration step.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from threadpoolctl import threadpool_limits

from llmsim.calibration.enginefit import fit_to_engine, step_label, with_values
from llmsim.calibration.microbench import (
    SMALL_M,
    SMALL_M_CTX,
    attention_fraction,
    elementwise_fraction,
    engine_gemm_table,
    fit_gemm,
    gemm_table,
    overheads,
    small_m_table,
    stream_bandwidth,
)
from llmsim.hardware import HardwareProfile, dump_profile
from llmsim.models import ModelSpec
from llmsim.reference.timing import BLAS_THREADS, PREFILL_PROBE, PROBE, TWIN_SPEC


@dataclass
class MicroBench:
    """What the micro-benchmarks measured: the profile's figures before the fit to the engine."""

    ms: list[int]  # GEMM rows timed on the model's weight shapes
    small_reps: int  # decode steps per m the small-m table is the median of
    bw: float  # streaming bandwidth, bytes/s
    gemm_rows: list[dict]
    peak: float  # fp32 FLOP/s
    half_m: float
    mem_frac: float
    small_rows: list[dict]
    small: list[float]  # gemm_small_m, m = 1..SMALL_M
    attn: float
    dec_attn: float
    attn_rows: list[dict]
    elem: float
    launch_s: float  # per NumPy call
    step_s: float  # per engine step, around the forward


STAGES = ("bandwidth", "GEMMs", "small-m GEMMs", "attention", "elementwise", "overheads", "engine fit")


def run_microbench(spec: ModelSpec, quick: bool, stage: Callable[[str], None] = lambda _: None) -> MicroBench:
    """Every micro-benchmark, in this order, on ``BLAS_THREADS`` BLAS threads; ``stage(name)`` is
    told as each of ``STAGES`` ends (a progress bar)."""
    min_s = 0.02 if quick else 0.08
    ms = [1, 24, 64, 256, 1024] if quick else [1, 2, 4, 8, 16, 20, 24, 32, 48, 64, 128, 256, 512, 1024, 2048]
    small_reps = 3 if quick else 9
    with threadpool_limits(BLAS_THREADS, "blas"):
        bw = stream_bandwidth(min_s, 256 if quick else 1024)
        stage(STAGES[0])
        rows = gemm_table(spec, ms, 5 if quick else 15)
        peak, half_m, mem_frac = fit_gemm(rows, bw, min_m=SMALL_M + 1)
        stage(STAGES[1])
        small_rows = engine_gemm_table(spec, list(range(1, SMALL_M + 1)), small_reps)
        small = small_m_table(small_rows, peak, SMALL_M)
        stage(STAGES[2])
        attn, dec_attn, attn_rows = attention_fraction(spec, peak, bw * mem_frac, min_s, quick)
        stage(STAGES[3])
        elem = elementwise_fraction(spec, bw, min_s)
        stage(STAGES[4])
        launch, step = overheads(spec, min_s)
        stage(STAGES[5])
    return MicroBench(
        ms,
        small_reps,
        bw,
        rows,
        peak,
        half_m,
        mem_frac,
        small_rows,
        small,
        attn,
        dec_attn,
        attn_rows,
        elem,
        launch,
        step,
    )


def profile_data(spec: ModelSpec, mb: MicroBench, quick: bool) -> dict:
    """The ``local-cpu`` profile's data with the micro-benchmarks' figures, each with its source."""
    date = _dt.date.today().isoformat()
    cpu = _cpu_name()

    def src(what: str) -> str:
        return f"measured by llmsim calibrate --local-cpu on {date}, {what} ({cpu}, {BLAS_THREADS} BLAS thread)"

    fig = lambda v, what: {"value": float(v), "source": src(what)}  # noqa: E731
    mem_bytes = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    shapes = f"NumPy fp32 GEMM on {spec.name} weight shapes, m in {mb.ms[0]}..{mb.ms[-1]}"
    curve_shapes = f"NumPy fp32 GEMM on {spec.name} weight shapes, m in {SMALL_M + 1}..{mb.ms[-1]}"
    return {
        "name": "local-cpu",
        "family": "cpu",
        "vendor": platform.machine(),
        "description": f"this machine as the NumPy reference engine sees it: {cpu}, {BLAS_THREADS} BLAS thread",
        "peak_flops": {"fp32": fig(mb.peak, f"best {shapes}")},
        "memory_capacity_bytes": fig(mem_bytes, "os.sysconf physical pages x page size"),
        "memory_bandwidth_bytes_per_s": fig(
            mb.bw, "np.copyto (read + write) of a buffer larger than the last-level cache"
        ),
        "host_link": {
            "name": "memcpy (host memory is device memory)",
            "bandwidth_bytes_per_s": fig(mb.bw / 2, "half the streaming read rate (a copy reads and writes)"),
            "latency_s": fig(mb.launch_s, "one NumPy call, see kernel_launch_s"),
        },
        "power_w": {"value": 0.0, "source": "not measured: no power counter read by the benchmark"},
        "price_per_hour_usd": {"value": 0.0, "source": "ASSUMPTION: a local machine, no hourly price"},
        "efficiency": {
            "gemm_max_fraction": {"value": 1.0, "source": src("1 by construction: the fp32 peak is the best GEMM")},
            "gemm_half_m": fig(mb.half_m, f"least-squares fit of the roofline GEMM time to {curve_shapes}"),
            "memory_fraction": fig(
                mb.mem_frac, f"same fit: weight-streaming rate of small-m GEMMs / bandwidth, {curve_shapes}"
            ),
            "gemm_small_m": {
                "value": [float(v) for v in mb.small],
                "source": src(
                    f"GEMM FLOP/s / peak of reference-engine decode steps of m = 1..{SMALL_M} sequences at context "
                    f"{SMALL_M_CTX}, each GEMM call timed inside the forward pass ({spec.name}, median of "
                    f"{mb.small_reps} steps)"
                ),
            },
            "attention_fraction": fig(mb.attn, "roofline fit to the reference model's prefill attention"),
            "decode_attention_fraction": fig(
                mb.dec_attn, "roofline fit to the reference model's paged decode attention (gather + small matmuls)"
            ),
            "elementwise_memory_fraction": fig(
                mb.elem, "median bytes/s of RMSNorm, add and SiLU·up passes / bandwidth"
            ),
            "allreduce_bus_fraction": {"value": 1.0, "source": "not applicable: one process, no collectives"},
        },
        "overheads": {
            "kernel_launch_s": {
                "value": 0.0,
                "source": "NumPy calls are synchronous: nothing overlaps, the per-call cost is kernel_fixed_s",
            },
            "kernel_fixed_s": fig(mb.launch_s, "forward of a width-8, 1-token copy of the model / its op count"),
            "step_overhead_s": fig(mb.step_s, "median engine schedule + token bookkeeping + complete around a forward"),
        },
        "cpu": {
            "sockets": 1,
            "cores_per_socket": max(1, os.cpu_count() or 1),
            "numa_remote_bandwidth_fraction": {"value": 1.0, "source": "not applicable: one socket"},
        },
        "calibration": {
            "tool": "llmsim calibrate --local-cpu",
            "date": date,
            "quick": quick,
            "blas_threads": BLAS_THREADS,
            "model_shapes": spec.name,
        },
    }


def apply_engine_fit(data: dict, fitted: dict, cal_rows: list[dict], references: dict[str, float]) -> None:
    """Write the engine fit into ``data``: the refined figures (their sources say the micro-benchmark
    value), the drift probes' references and the fit's residual on every calibration step."""
    cal = "; refined by a least-squares fit to the reference engine's step times " + (
        f"({len(cal_rows)} calibration steps, kept apart from the twin's validation grid), micro-benchmark value {{:.4g}}"
    )
    # the drift probes' references: probe_timer readings throughout the calibration (median); the
    # same step's calibration-step median (calibration_step_s) is kept for comparison
    for key, step, ref in (("probe_step", PROBE, "decode"), ("probe_prefill_step", PREFILL_PROBE, "prefill")):
        row = next(r for r in cal_rows if r["step"] == step_label(*step))
        data["calibration"][key] = {
            "step": row["step"],
            "measured_s": references[ref],
            "calibration_step_s": row["raw_s"],
        }
    data["calibration"]["fit_steps"] = cal_rows  # the fit's residuals, step by step
    fitted = dict(fitted)
    scale = fitted.pop("gemm_small_m")  # the table's level, refined like the figures below
    data.update(with_values(data, {"gemm_small_m": scale}))
    data["efficiency"]["gemm_small_m"]["source"] += cal.replace("micro-benchmark value", "scaled as a whole by").format(
        scale
    )
    for k, v in fitted.items():
        section = "overheads" if k.endswith("_s") else "efficiency"
        old = data[section][k]
        data[section][k] = {"value": v, "source": old["source"] + cal.format(old["value"])}


def measure(
    quick: bool = False, spec: ModelSpec = TWIN_SPEC, stage: Callable[[str], None] = lambda _: None
) -> tuple[HardwareProfile, dict]:
    """Run every benchmark and the fit; return the profile and the raw measurements."""
    mb = run_microbench(spec, quick, stage)
    data = profile_data(spec, mb, quick)
    start = {"gemm_half_m": mb.half_m, "memory_fraction": mb.mem_frac}
    start.update({"attention_fraction": mb.attn, "decode_attention_fraction": mb.dec_attn})
    start.update({"elementwise_memory_fraction": mb.elem, "kernel_fixed_s": mb.launch_s, "gemm_small_m": 1.0})
    start["profile"] = data
    with threadpool_limits(BLAS_THREADS, "blas"):
        fitted, cal_rows, references = fit_to_engine(spec, start, quick)
    apply_engine_fit(data, fitted, cal_rows, references)
    stage(STAGES[6])
    raw = {
        "gemm": mb.gemm_rows,
        "gemm_small_m": mb.small_rows,
        "attention": mb.attn_rows,
        "bandwidth_bytes_per_s": mb.bw,
        "calibration_steps": cal_rows,
    }
    return HardwareProfile.model_validate(data), raw


def measure_and_write(
    out_path: Path, quick: bool, stage: Callable[[str], None] = lambda _: None
) -> tuple[Path, HardwareProfile]:
    """Measure this machine and write the ``local-cpu`` profile YAML to ``out_path``."""
    profile, _ = measure(quick, stage=stage)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    dump_profile(profile, out_path)
    return out_path, profile


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
