"""``llmsim hardware``: the shipped device profiles as a table."""

from __future__ import annotations

import argparse

from llmsim.tables import table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hardware", help="list hardware profiles")
    p.add_argument("name", nargs="?", help="show one profile with every figure's source")
    p.set_defaults(func=cmd_hardware)


def cmd_hardware(args: argparse.Namespace) -> int:
    from llmsim.hardware import available_profiles, load_profile

    if args.name:
        hw = load_profile(args.name)
        rows = [[f"peak {k}", f"{v.value / 1e12:.1f} TFLOP/s", v.source] for k, v in hw.peak_flops.items()]
        rows += [
            ["memory", f"{hw.memory_bytes / 1e9:.0f} GB", hw.memory_capacity_bytes.source],
            ["bandwidth", f"{hw.bandwidth / 1e12:.2f} TB/s", hw.memory_bandwidth_bytes_per_s.source],
        ]
        for key in ("scale_up", "scale_out", "host_link"):
            link = getattr(hw, key)
            if link:
                rows.append(
                    [
                        f"{key} ({link.name})",
                        f"{link.bandwidth_bytes_per_s.value / 1e9:.0f} GB/s",
                        link.bandwidth_bytes_per_s.source,
                    ]
                )
        for section in ("efficiency", "overheads"):
            for name, fig in getattr(hw, section):
                if fig is not None:  # optional shape terms may be absent
                    rows.append([f"{section}.{name}", f"{fig.value:g}", fig.source])
        rows += [
            ["power", f"{hw.power_w.value:.0f} W", hw.power_w.source],
            ["price", f"${hw.price_per_hour_usd.value:.2f}/h", hw.price_per_hour_usd.source],
        ]
        print(f"{hw.name} ({hw.family}, {hw.vendor}): {hw.description}")
        print(table(rows, ["figure", "value", "source"], "lrl"))
        return 0
    rows = []
    for stem in available_profiles():
        hw = load_profile(stem)
        bf16 = hw.peak("bf16") / 1e12
        fp8 = hw.peak_flops.get("fp8")
        link = hw.scale_up.bandwidth_bytes_per_s.value / 1e9 if hw.scale_up else None
        rows.append(
            [
                stem,
                hw.family,
                f"{bf16:.0f}",
                f"{fp8.value / 1e12:.0f}" if fp8 else "-",
                f"{hw.memory_bytes / 1e9:.0f}",
                f"{hw.bandwidth / 1e12:.2f}",
                f"{link:.0f}" if link else "-",
                f"{hw.power_w.value:.0f}",
                f"{hw.price_per_hour_usd.value:.2f}",
            ]
        )
    print(
        table(
            rows,
            [
                "name",
                "family",
                "bf16 TFLOP/s",
                "fp8 TFLOP/s",
                "memory GB",
                "HBM TB/s",
                "scale-up GB/s",
                "power W",
                "$/hour*",
            ],
        )
    )
    print("\nDense peaks (no sparsity). * prices are editable assumptions. `llmsim hardware NAME` shows sources.")
    return 0
