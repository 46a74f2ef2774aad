"""``llmsim models``: the model catalog with derived parameter counts and KV bytes per token
(``llmsim models NAME``: one catalog model or HuggingFace config.json, with where it came from)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from llmsim.errors import UserError
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
    p.add_argument("name", nargs="?", help="show one model: a catalog name or a HuggingFace config.json")
    p.add_argument("--json", action="store_true", help="print JSON: every figure of the table, unrounded")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors and what --json asks for")
    p.set_defaults(func=cmd_models)


def model_arg(text: str) -> ModelSpec:
    """A command line's model (``--model``, ``llmsim models NAME``): a catalog name or a
    HuggingFace config.json. A folder is refused by name here: the catalog lookup would call it
    an unknown model, and a folder named ``*.json`` would fail to open as a file."""
    from llmsim.models import get_model

    path = Path(text)
    if path.is_dir():
        hint = f"; give its config.json ({path / 'config.json'})" if (path / "config.json").is_file() else ""
        raise UserError(f"{text}: is a folder, expected a catalog model name or a HuggingFace config.json{hint}")
    return get_model(text)


def cmd_models(args: argparse.Namespace) -> int:
    from llmsim.models import CATALOG

    say = printer(args.quiet)
    if args.name:
        m = model_arg(args.name)
        one = {**entry(m), "source": m.source}
        if args.json:
            print(to_json(one))
            return 0
        say(table([row(one)], HEADERS))
        if m.source:
            say(f"\nsource: {m.source}")
        return 0
    entries = [entry(m) for m in CATALOG.values()]
    if args.json:
        print(to_json({"models": entries, "note": NOTE}))
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
        "sparse_attention_topk": m.index_topk or None,  # DeepSeek sparse attention: keys kept per query
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
        e["sliding_window_tokens"]
        or (f"top {e['sparse_attention_topk']} (DSA)" if e["sparse_attention_topk"] else "-"),
    ]
