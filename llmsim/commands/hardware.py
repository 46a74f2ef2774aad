"""``llmsim hardware``: the shipped device profiles as a table (``--json``: the same figures)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from llmsim.progress import printer, to_json
from llmsim.tables import table

if TYPE_CHECKING:  # the profile models load pydantic: only when a command runs
    from llmsim.hardware import HardwareProfile

LIST_NOTE = "Dense peaks (no sparsity). * prices are editable assumptions. `llmsim hardware NAME` shows sources."


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hardware", help="list hardware profiles")
    p.add_argument("name", nargs="?", help="show one profile with every figure's source")
    p.add_argument("--json", action="store_true", help="print JSON: the list's figures, or one profile's raw values")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors and what --json asks for")
    p.set_defaults(func=cmd_hardware)


def cmd_hardware(args: argparse.Namespace) -> int:
    from llmsim.hardware import available_profiles, load_profile

    say = printer(args.quiet)
    if args.name:
        hw = load_profile(args.name)
        if args.json:  # the raw profile: every value in SI units (key names say which) with its source
            print(to_json(hw.model_dump(mode="json", exclude_none=True)))
            return 0
        say(f"{hw.name} ({hw.family}, {hw.vendor}): {hw.description}")
        say(table(detail_rows(hw), ["figure", "value", "source"], "lrl"))
        return 0
    profiles = [list_entry(stem, load_profile(stem)) for stem in available_profiles()]
    if args.json:
        print(to_json({"profiles": profiles, "note": LIST_NOTE}))
        return 0
    say(table([list_row(e) for e in profiles], LIST_HEADERS))
    say("\n" + LIST_NOTE)
    return 0


def detail_rows(hw: HardwareProfile) -> list[list[str]]:
    """``llmsim hardware NAME``: one row per figure, formatted, with its source."""
    rows = [[f"peak {k}", f"{v.value / 1e12:.1f} TFLOP/s", v.source] for k, v in hw.peak_flops.items()]
    rows += [
        ["memory", f"{hw.memory_bytes / 1e9:.0f} GB", hw.memory_capacity_bytes.source],
        ["bandwidth", f"{hw.bandwidth / 1e12:.2f} TB/s", hw.memory_bandwidth_bytes_per_s.source],
    ]
    for key in ("scale_up", "scale_out", "host_link"):
        link = getattr(hw, key)
        if link:
            bw = link.bandwidth_bytes_per_s
            rows.append([f"{key} ({link.name})", f"{bw.value / 1e9:.0f} GB/s", bw.source])
            rows.append([f"{key}.latency_s", _figure_text(link.latency_s.value), link.latency_s.source])
            if link.max_devices is not None:
                rows.append([f"{key}.max_devices", f"{link.max_devices.value:g}", link.max_devices.source])
            for proto in link.collective_protocols or ():
                for term in ("base_s", "hop_s", "bus_fraction"):
                    fig = getattr(proto, term)
                    rows.append([f"{key}.{proto.name}.{term}", _figure_text(fig.value), fig.source])
    if hw.fp8_attention is not None:
        cap = hw.fp8_attention
        rows.append(["fp8_attention", "yes" if cap.value else "no", cap.source])
    for section in ("efficiency", "overheads"):
        for name, fig in getattr(hw, section):
            if isinstance(fig, dict):  # one figure per dtype (efficiency.gemm_dtype_fraction)
                rows += [[f"{section}.{name}.{d}", _figure_text(f.value), f.source] for d, f in fig.items()]
            elif fig is not None:  # optional shape terms may be absent
                rows.append([f"{section}.{name}", _figure_text(fig.value), fig.source])
    rows += [
        ["power", f"{hw.power_w.value:.0f} W", hw.power_w.source],
        ["price", f"${hw.price_per_hour_usd.value:.2f}/h", hw.price_per_hour_usd.source],
    ]
    return rows


def _figure_text(value: object) -> str:
    """A number as ``%g``; a table of them (e.g. the GEMM efficiency per small m) by its range."""
    if isinstance(value, list):
        nums = [float(v) for v in value]
        return f"{len(nums)} values {min(nums):g}..{max(nums):g}" if nums else "[]"
    return f"{value:g}"


LIST_HEADERS = [
    "name",
    "family",
    "bf16 TFLOP/s",
    "fp8 TFLOP/s",
    "memory GB",
    "HBM TB/s",
    "scale-up GB/s",
    "power W",
    "$/hour*",
]


def list_entry(stem: str, hw: HardwareProfile) -> dict:
    """The list's figures of one profile, unrounded, in the units the key names say (``None``: the
    device has no such figure, shown as ``-`` in the table)."""
    fp8 = hw.peak_flops.get("fp8")
    scale_up = hw.scale_up
    return {
        "name": stem,
        "family": hw.family,
        "peak_bf16_tflops": hw.peak("bf16") / 1e12,
        "peak_fp8_tflops": fp8.value / 1e12 if fp8 else None,
        "memory_gb": hw.memory_bytes / 1e9,
        "hbm_bandwidth_gb_s": hw.bandwidth / 1e9,
        "scale_up_gb_s": scale_up.bandwidth_bytes_per_s.value / 1e9 if scale_up else None,
        "power_w": hw.power_w.value,
        "price_usd_per_hour": hw.price_per_hour_usd.value,
    }


def list_row(e: dict) -> list[str]:
    """The table row of ``list_entry``: the table shows HBM in TB/s, the JSON in GB/s like the links."""

    def num(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    return [
        e["name"],
        e["family"],
        f"{e['peak_bf16_tflops']:.0f}",
        num(e["peak_fp8_tflops"], ".0f"),
        f"{e['memory_gb']:.0f}",
        f"{e['hbm_bandwidth_gb_s'] / 1e3:.2f}",
        num(e["scale_up_gb_s"], ".0f"),
        f"{e['power_w']:.0f}",
        f"{e['price_usd_per_hour']:.2f}",
    ]
