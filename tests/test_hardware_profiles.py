"""The shipped hardware profiles: they load, every number is sourced, and peaks are DENSE.

The datasheet table below holds dense peaks (NVIDIA's headline tensor numbers are 2:4-sparse,
i.e. 2x these), so a profile that copied a sparse figure fails here.
"""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

from llmsim.hardware import Figure, HardwareProfile, available_profiles, load_profile

REQUIRED = [
    "H100-SXM",
    "A100-SXM-80GB",
    "A100-40GB",
    "A100-PCIe-80GB",
    "A40",
    "RTX-A6000",
    "RTX-3090",
    "H100-PCIe",
    "H200",
    "B200",
    "GH200",
    "GB200",
    "L40S",
    "L4",
    "MI300X",
    "TPU-v5e",
    "TPU-v5p",
    "TPU-v6e",
    "Xeon-8480+",
    "EPYC-9654",
]

# Dense datasheet peaks, FLOP/s (docs/reference/hardware_models.md, A.1-A.6).
DENSE_BF16 = {
    "H100-SXM": 989.4e12,
    "A100-SXM-80GB": 312e12,
    "A100-40GB": 312e12,
    "A100-PCIe-80GB": 312e12,
    "A40": 149.7e12,
    "RTX-A6000": 154.8e12,
    "RTX-3090": 71e12,  # FP32 accumulate (GeForce halves it)
    "H100-PCIe": 756e12,
    "H200": 989.4e12,
    "B200": 2250e12,
    "GH200": 989.4e12,  # H100 SXM's GH100
    "GB200": 2500e12,  # Blackwell at 1200 W
    "L40S": 362e12,
    "L4": 121e12,
    "MI300X": 1307.4e12,
    "TPU-v5e": 197e12,
    "TPU-v5p": 459e12,
    "TPU-v6e": 918e12,
    "Xeon-8480+": 2 * 56 * 2.0e9 * 1024,  # AMX BF16, 2 sockets at base clock
}
DENSE_FP32 = {
    "A100-SXM-80GB": 19.5e12,
    "H100-SXM": 66.9e12,
    "MI300X": 163.4e12,
    "Xeon-8480+": 2 * 56 * 2.0e9 * 64,  # AVX-512, 2 sockets
    "EPYC-9654": 2 * 96 * 2.4e9 * 32,  # Zen 4 AVX-512 on 2x256-bit FMA, 2 sockets
}
REL = 0.02  # a sparse (2x) figure is far outside this


def _figures(obj, path=""):
    """Yield (path, Figure) for every Figure anywhere in a profile."""
    if isinstance(obj, Figure):
        yield path, obj
    elif isinstance(obj, BaseModel):
        for name in type(obj).model_fields:
            yield from _figures(getattr(obj, name), f"{path}.{name}" if path else name)
    elif isinstance(obj, dict):
        for key, val in obj.items():
            yield from _figures(val, f"{path}.{key}")
    elif isinstance(obj, list):  # (a link's collective_protocols)
        for i, val in enumerate(obj):
            yield from _figures(val, f"{path}[{i}]")


@pytest.fixture(scope="module")
def profiles() -> dict[str, HardwareProfile]:
    return {name: load_profile(name) for name in available_profiles()}


def test_all_required_profiles_shipped():
    missing = sorted(set(REQUIRED) - set(available_profiles()))
    assert not missing, f"missing hardware profiles: {missing}"


@pytest.mark.parametrize("name", REQUIRED)
def test_profile_loads_and_name_matches_file(name):
    p = load_profile(name)
    assert p.name == name
    assert load_profile(name.lower()).name == name  # lookup is case-insensitive


def test_every_figure_has_a_source(profiles):
    for name, p in profiles.items():
        figs = list(_figures(p))
        # at least: peaks, memory, host link, power, price, efficiency, overheads
        assert len(figs) >= 15, name
        for path, fig in figs:
            assert fig.source.strip(), f"{name}: {path} has an empty source"


def test_capacity_and_bandwidth_positive(profiles):
    for name, p in profiles.items():
        assert p.memory_bytes > 0, name
        assert p.bandwidth > 0, name
        assert p.host_link.bandwidth_bytes_per_s.value > 0, name
        for link in (p.scale_up, p.scale_out):
            if link is not None:
                assert link.bandwidth_bytes_per_s.value > 0, f"{name}: {link.name}"
        assert all(f.value > 0 for f in p.peak_flops.values()), name


@pytest.mark.parametrize("name,expected", sorted(DENSE_BF16.items()))
def test_bf16_peak_is_dense_datasheet(name, expected):
    got = load_profile(name).peak_flops["bf16"].value
    assert got == pytest.approx(expected, rel=REL), f"{name}: bf16 {got:.4g} vs dense {expected:.4g}"


@pytest.mark.parametrize("name,expected", sorted(DENSE_FP32.items()))
def test_fp32_peak_matches_datasheet(name, expected):
    got = load_profile(name).peak_flops["fp32"].value
    assert got == pytest.approx(expected, rel=REL)


def test_accelerator_bf16_sources_say_dense(profiles):
    for name, p in profiles.items():
        if p.family != "cpu":
            assert "dense" in p.peak_flops["bf16"].source.lower(), name


def test_low_precision_not_above_twice_bf16(profiles):
    # fp8/int8 run at most 2x bf16, int4/fp4 at most 4x: a sparse headline would break this
    for name, p in profiles.items():
        bf16 = p.peak("bf16")
        for dt, factor in (("fp8", 2), ("int8", 2), ("int4", 4), ("fp4", 4)):
            if dt in p.peak_flops:
                assert p.peak_flops[dt].value <= factor * bf16 * (1 + REL), f"{name}: {dt}"


def test_dtype_support_matches_hardware(profiles):
    for name in ("H100-SXM", "H100-PCIe", "H200"):
        assert "int4" not in profiles[name].peak_flops, f"{name}: Hopper has no INT4 tensor path"
    assert profiles["A100-SXM-80GB"].peak_flops["int4"].value == pytest.approx(1248e12)
    for name in ("TPU-v5e", "TPU-v5p", "TPU-v6e"):
        assert "fp32" not in profiles[name].peak_flops, f"{name}: no sourced fp32 matrix rate"
    assert "UNCONFIRMED" in profiles["EPYC-9654"].peak_flops["bf16"].source


def test_family_sections(profiles):
    expected_mxu = {"TPU-v5e": 128, "TPU-v5p": 128, "TPU-v6e": 256}
    for name, p in profiles.items():
        if p.family == "tpu":
            assert p.tpu is not None and p.cpu is None, name
            if name in expected_mxu:
                assert p.tpu.mxu_dim == expected_mxu[name]
                assert p.efficiency.gemm_half_m.value == expected_mxu[name]
            assert p.overheads.kernel_launch_s.value == 0.0, name
        elif p.family == "cpu":
            assert p.cpu is not None and p.tpu is None, name
            assert p.cpu.sockets == 2, name
            assert 0 < p.cpu.numa_remote_bandwidth_fraction.value <= 1, name
        else:
            assert p.cpu is None and p.tpu is None, name
    assert profiles["Xeon-8480+"].cpu.cores_per_socket == 56


def test_fractions_in_unit_interval(profiles):
    for name, p in profiles.items():
        e = p.efficiency
        for fig in (
            e.gemm_max_fraction,
            e.memory_fraction,
            e.attention_fraction,
            e.elementwise_memory_fraction,
            e.allreduce_bus_fraction,
        ):
            assert 0 < fig.value <= 1, name
        assert e.gemm_half_m.value > 0, name


def test_prices_are_marked_assumptions(profiles):
    for name, p in profiles.items():
        assert "ASSUMPTION" in p.price_per_hour_usd.source, name
        assert p.price_per_hour_usd.value > 0, name


def _edited(path: str, value: float) -> dict:
    """The H100-SXM profile's data with the figure at ``path`` (dots) set to ``value``."""
    import copy

    data = copy.deepcopy(load_profile("H100-SXM").model_dump(mode="json", exclude_none=True))
    node = data
    *keys, last = path.split(".")
    for key in keys:
        node = node[key]
    node[last] = {"value": value, "source": "test edit"}
    return data


# a figure a user can get wrong -> (value, fragments of the one-line message)
BAD_FIGURES = {
    "peak_flops.bf16": (0, ["peak_flops", "bf16: must be > 0"]),
    "peak_flops.fp8": (1979.0, ["peak_flops", "fp8: 1979 is below 1e+09", "FLOP/s"]),  # TFLOP/s as FLOP/s
    "memory_bandwidth_bytes_per_s": (3.35, ["memory_bandwidth_bytes_per_s", "3.35 is below", "bytes/s"]),
    "memory_capacity_bytes": (0, ["memory_capacity_bytes", "must be > 0"]),
    "scale_up.bandwidth_bytes_per_s": (450, ["scale_up.bandwidth_bytes_per_s", "450 is below"]),  # GB/s
    "scale_up.latency_s": (3, ["scale_up.latency_s", "3 is above 1", "seconds"]),  # us as seconds
    "efficiency.gemm_max_fraction": (80.3, ["efficiency.gemm_max_fraction", "80.3 is above 1"]),
    "efficiency.memory_fraction": (0, ["efficiency.memory_fraction", "must be > 0"]),
    "overheads.step_overhead_s": (1900, ["overheads.step_overhead_s", "1900 is above 1"]),
}


@pytest.mark.parametrize("path", list(BAD_FIGURES))
def test_figures_a_user_gets_wrong_are_refused_by_key(path):
    from llmsim.errors import UserError
    from llmsim.hardware import profile_from_dict

    value, fragments = BAD_FIGURES[path]
    with pytest.raises(UserError) as exc:
        profile_from_dict(_edited(path, value), "edited.yaml")
    message = str(exc.value)
    assert message.startswith("edited.yaml: ") and "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize(
    "path, value",
    [
        ("efficiency.memory_fraction", 1.6),  # a fitted CPU profile: cache-resident streams beat the DRAM copy
        ("efficiency.attention_fraction", 1.2),
        ("overheads.kernel_launch_s", 0.0),  # TPUs, NumPy: no launch gap
        ("power_w", 0.0),  # not measured (local-cpu)
        ("price_per_hour_usd", 0.0),
    ],
)
def test_figures_real_profiles_hold_are_accepted(path, value):
    from llmsim.hardware import profile_from_dict

    profile_from_dict(_edited(path, value), "edited.yaml")


def test_unknown_name_and_path_messages():
    from llmsim.errors import UserError

    with pytest.raises(UserError, match=r"unknown hardware 'h100' \(did you mean one of 'H100-PCIe', 'H100-SXM'\?\)"):
        load_profile("h100")
    with pytest.raises(UserError, match=r"hardware_profiles/H100-SXM: a hardware profile file must end in .yaml"):
        load_profile("hardware_profiles/H100-SXM")


def test_computes_in_narrow_dtypes_only_with_their_own_peak(profiles):
    a100, h100 = profiles["A100-SXM-80GB"], profiles["H100-SXM"]
    assert h100.computes_in("fp8") and not a100.computes_in("fp8")
    assert a100.computes_in("bf16") and a100.computes_in("fp32")
    assert all(p.computes_in("bf16") for p in profiles.values())  # 16 bits falls back to a wider peak


def test_sections_must_match_the_family():
    """A profile copied from another family and half edited: its sections say so, by key."""
    import copy

    from llmsim.errors import UserError
    from llmsim.hardware import profile_from_dict

    tpu = load_profile("TPU-v5e").model_dump(mode="json", exclude_none=True)
    h100 = load_profile("H100-SXM").model_dump(mode="json", exclude_none=True)
    epyc = load_profile("EPYC-9654").model_dump(mode="json", exclude_none=True)
    cases = [
        (lambda d: d.pop("tpu"), tpu, "tpu: required for family 'tpu'"),
        (lambda d: d.update(family="gpu"), tpu, "tpu: a tpu section on a profile of family 'gpu'"),
        (lambda d: d.update(family="gpu"), epyc, "cpu: a cpu section on a profile of family 'gpu'"),
        (lambda d: d["efficiency"].pop("gemm_wave_units"), h100, "efficiency.gemm_wave_exponent: given without"),
        (lambda d: d["cpu"]["numa_remote_bandwidth_fraction"].update(value=0), epyc, "numa_remote_bandwidth_fraction"),
    ]  # fmt: skip
    for edit, base, fragment in cases:
        data = copy.deepcopy(base)
        edit(data)
        with pytest.raises(UserError, match=re.escape(fragment)):
            profile_from_dict(data, "edited.yaml")
