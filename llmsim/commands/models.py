"""``llmsim models``: the model catalog with derived parameter counts and KV bytes per token."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from llmsim.progress import printer, to_json
from llmsim.tables import table

if TYPE_CHECKING:
    from llmsim.models import ModelSpec

NOTE = "Any HuggingFace config.json works too: `model: {hf_config: path/to/config.json}`."
HEADERS = [
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
]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list catalog models")
    p.add_argument("--json", action="store_true", help="print JSON: every figure of the table, unrounded")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=cmd_models)


def cmd_models(args: argparse.Namespace) -> int:
    from llmsim.models import CATALOG

    say = printer(args.quiet)
    entries = [entry(m) for m in CATALOG.values()]
    if args.json:
        say(to_json({"models": entries, "note": NOTE}))
        return 0
    say(table([row(e) for e in entries], HEADERS))
    say("\n" + NOTE)
    return 0


def entry(m: ModelSpec) -> dict:
    """One model's figures: counts as integers, KV in bytes (the table shows billions and KiB)."""
    return {
        "name": m.name,
        "total_params": m.total_params(),
        "active_params": m.active_params(),
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "num_heads": m.num_heads,
        "num_kv_heads": m.num_kv_heads,
        "num_experts": m.num_experts,  # 0: a dense MLP
        "experts_per_token": m.experts_per_token,
        "vocab_size": m.vocab_size,
        "kv_bytes_per_token_bf16": m.kv_bytes_per_token(),
        "sliding_window_tokens": m.sliding_window,  # None: full attention
    }


def row(e: dict) -> list:
    moe = f"{e['num_experts']}x top{e['experts_per_token']}" if e["num_experts"] > 0 else "-"
    return [
        e["name"],
        f"{e['total_params'] / 1e9:.2f}",
        f"{e['active_params'] / 1e9:.2f}",
        e["num_layers"],
        e["hidden_size"],
        f"{e['num_heads']}/{e['num_kv_heads']}",
        moe,
        e["vocab_size"],
        f"{e['kv_bytes_per_token_bf16'] / 1024:.0f}",
        e["sliding_window_tokens"] or "-",
    ]
