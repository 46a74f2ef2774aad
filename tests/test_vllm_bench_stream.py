"""``llmsim bench``'s requests are the ones vLLM's own benchmark code sends for the same command line
(benchmarks/vllm_bench_stream_check.py, recorded with vLLM 0.32.0's vllm/benchmarks code): send times,
prompt and output lengths, and the prompts' token ids of the sharegpt and custom datasets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import vllm_bench_stream_check as check  # noqa: E402


def test_every_request_is_vllms(tmp_path: Path) -> None:
    expected = json.loads(check.EXPECTED.read_text(encoding="utf-8"))
    rows = check.compare(expected, check.llmsim_streams(tmp_path))
    assert {r["case"] for r in rows} == set(check.CASES)
    for r in rows:
        n = r["requests"]
        assert (r["llmsim_requests"], r["send_time"], r["prompt_tokens"], r["output_tokens"]) == (n, n, n, n), r
        assert r["token_ids"] is not False, r
    assert sum(r["token_ids"] is True for r in rows) == 8  # the sharegpt and custom cases


def test_a_different_stream_is_caught(tmp_path: Path) -> None:
    """The comparison is not vacuous: a late request, a longer answer and other prompts are counted."""
    expected = json.loads(check.EXPECTED.read_text(encoding="utf-8"))
    got = check.llmsim_streams(tmp_path)
    s = got["sharegpt"]
    s["send_s"][3] += 1e-6
    s["output_tokens"][5] += 1
    s["prompt_block_ids_sha256"] = "0" * 64
    row = next(r for r in check.compare(expected, got) if r["case"] == "sharegpt")
    assert (row["send_time"], row["output_tokens"], row["token_ids"]) == (119, 119, False)
