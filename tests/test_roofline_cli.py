"""``llmsim roofline``: the op table adds up to the step and the chart is a real PNG."""

from __future__ import annotations

import pytest

from llmsim.cli import main


def test_roofline_table_and_png(tmp_path, capsys) -> None:
    png = tmp_path / "r.png"
    args = ["roofline", "--model", "llama-2-7b", "--hardware", "A100-SXM-80GB", "--tp", "2"]
    args += ["--prefill-tokens", "1024", "--decode-batch", "16", "--context", "2048", "--out", str(png)]
    assert main(args) == 0
    out = capsys.readouterr().out
    for word in ("attn_pre_proj", "attention_prefill", "attention_decode", "tp_all_reduce", "compute", "memory"):
        assert word in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # op shares plus named overheads cover the whole step
    shares = [float(line.split()[-1].rstrip("%")) for line in out.splitlines() if line.strip().endswith("%")]
    assert sum(shares) == pytest.approx(100.0, abs=1.5)


def test_roofline_rejects_bad_input(capsys) -> None:
    assert main(["roofline", "--model", "llama-2-7b", "--hardware", "A100-SXM-80GB", "--out", "-"]) == 2
    assert "nothing to price" in capsys.readouterr().err
    bad_tp = ["roofline", "--model", "llama-2-7b", "--hardware", "L4", "--tp", "3", "--decode-batch", "1", "--out", "-"]
    assert main(bad_tp) == 2
