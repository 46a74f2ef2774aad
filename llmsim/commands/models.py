"""``llmsim models``: the model catalog with derived parameter counts and KV bytes per token."""

from __future__ import annotations

import argparse

from llmsim.tables import table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list catalog models")
    p.set_defaults(func=cmd_models)


def cmd_models(args: argparse.Namespace) -> int:
    from llmsim.models import CATALOG

    rows = []
    for m in CATALOG.values():
        moe = f"{m.num_experts}x top{m.experts_per_token}" if m.is_moe else "-"
        rows.append(
            [
                m.name,
                f"{m.total_params() / 1e9:.2f}",
                f"{m.active_params() / 1e9:.2f}",
                m.num_layers,
                m.hidden_size,
                f"{m.num_heads}/{m.num_kv_heads}",
                moe,
                m.vocab_size,
                f"{m.kv_bytes_per_token() / 1024:.0f}",
                m.sliding_window or "-",
            ]
        )
    print(
        table(
            rows,
            [
                "name",
                "params B",
                "active B",
                "layers",
                "hidden",
                "heads q/kv",
                "MoE",
                "vocab",
                "KV KiB/token (bf16)",
                "window",
            ],
        )
    )
    print("\nAny HuggingFace config.json works too: `model: {hf_config: path/to/config.json}`.")
    return 0
