"""The custom dataset's chat-template rendering is transformers' (tests/data/chat_templates/README.md):
25 real templates, two sets of special tokens, nine hostile prompts, against transformers 5.19.0's
recorded renderings (benchmarks/chat_template_check.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import chat_template_check as check  # noqa: E402


def test_every_rendering_is_transformers(tmp_path: Path) -> None:
    expected = json.loads(check.EXPECTED.read_text(encoding="utf-8"))
    rows = check.compare(expected, check.llmsim_renderings(tmp_path))
    assert len(rows) == 50  # 25 templates x 2 sets of special tokens
    assert [name for name, same, n in rows if same != n] == []
    assert sum(n for *_, n in rows) == 450


def test_a_different_rendering_is_caught(tmp_path: Path) -> None:
    """The comparison is not vacuous: one changed rendering is counted as different."""
    expected = json.loads(check.EXPECTED.read_text(encoding="utf-8"))
    got = check.llmsim_renderings(tmp_path)
    name = "template_llama3/0"
    got[name] = ["0" * 64, *got[name][1:]]
    rows = dict((n, s) for n, s, _ in check.compare(expected, got))
    assert rows[name] == len(check.PROMPTS) - 1
