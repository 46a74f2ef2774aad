"""The bad-input catalogue (docs/reliability.md): every user mistake in tests/bad_inputs/ gets one
clear message naming the file, key or row, exit code 2, no traceback, and no result files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmsim.cli import main

BAD = Path(__file__).parent / "bad_inputs"

# sizes that would exhaust memory: refused by key and limit before any array is allocated
HOSTILE_SIZES = {
    "huge_rate_duration.yaml": ["workload.rate_rps x workload.duration_s", "1e+18 requests", "limit of 10,000,000"],
    "huge_rate_horizon.yaml": ["workload.rate_rps x workload.horizon_s", "60,000,000,000", "limit of 10,000,000"],
    "huge_num_requests.yaml": ["workload.num_requests", "1,000,000,000,000 requests", "limit of 10,000,000"],
    "huge_lognormal_median.yaml": ["workload.prompt_tokens.median", "1e+308 tokens", "limit of 10,000,000"],
    "huge_system_prompt_len.yaml": ["workload.shared_prefix.system_prompt_len", "2,000,000,000", "10,000,000"],
}

# file -> fragments the message must contain (the file, key path or row, and what is wrong)
RUN_CATALOGUE = {
    "malformed_yaml.yaml": ["malformed_yaml.yaml", "malformed YAML", "line 4"],
    "unknown_key.yaml": ["unknown_key.yaml", "policy.chunk_token", "did you mean 'chunk_tokens'"],
    "wrong_type.yaml": ["wrong_type.yaml", "cluster.replicas", "valid integer", "'two'"],
    "wrong_unit.yaml": ["wrong_unit.yaml", "kv_cache.memory_fraction", "less than or equal to 1", "90"],
    "zero_size.yaml": ["zero_size.yaml", "kv_cache.block_tokens", "greater than 0", "got 0"],
    "negative_size.yaml": ["negative_size.yaml", "cluster.replicas", "greater than 0", "-2"],
    "model_does_not_fit.yaml": ["llama-3.1-405b does not fit on L4", "weights need 811.7 GB", "21.2 GB is usable"],
    "tp_does_not_divide_heads.yaml": ["cluster.tp", "tensor parallelism 8 does not divide the 12 attention heads"],
    "python_object_tag.yaml": ["python_object_tag.yaml", "line 2", "refused YAML tag", "python/object"],
    "missing_file.yaml": ["missing_file.yaml", "workload.trace.path", "file not found", "no_such_trace.csv"],
    "trace_missing_columns.yaml": ["missing_columns.csv", "missing column(s) ['output_tokens']"],
    "trace_non_numeric_tokens.yaml": ["non_numeric_tokens.csv", "row 3", "'prompt_tokens'", "'many'"],
    "trace_negative_tokens.yaml": ["negative_tokens.csv", "row 4", "'output_tokens'", "must be >= 0"],
    "trace_unsorted_timestamps.yaml": ["unsorted_timestamps.csv", "row 4", "not sorted"],
    "trace_empty_trace.yaml": ["empty_trace.csv", "no rows"],
    "trace_llmservingsim_malformed.yaml": ["llmservingsim_malformed.jsonl", "line 2", "not valid JSON"],
    "trace_llmservingsim_missing_field.yaml": ["llmservingsim_missing_field.jsonl", "line 1", "['output_toks']"],
    "trace_llmservingsim_bad_token_id.yaml": ["llmservingsim_bad_token_id.jsonl", "line 2", "input_tok_ids[1]", "2.5"],
    "trace_llmservingsim_token_count.yaml": [
        "llmservingsim_token_count.jsonl",
        "line 1",
        "has 4 ids",
        "input_toks is 5",
    ],
    "trace_prefix_longer_than_prompt.yaml": [
        "prefix_longer_than_prompt.csv",
        "row 3",
        "prefix_tokens (100)",
        "80 tokens",
    ],
    "trace_nan_timestamp.yaml": ["nan_timestamp.csv", "row 3", "arrival_s", "an empty or NA cell"],
    "trace_nan_timestamp_mooncake.yaml": ["nan_timestamp_mooncake.jsonl", "line 2", "timestamp", "finite", "nan"],
    "trace_fractional_tokens.yaml": ["fractional_tokens.csv", "row 3", "'prompt_tokens'", "whole number", "10.5"],
    "trace_huge_tokens.yaml": ["huge_tokens.csv", "row 4", "'output_tokens'", "1e+30", "limit of 10,000,000"],
    "trace_jsonl_line_number.yaml": ["jsonl_line_number.jsonl", "line 3", "'prompt_tokens'", "must be >= 0"],
    "trace_directory.yaml": ["trace_dir.csv", "is a directory"],
    "trace_gzipped_trace.yaml": ["gzipped_trace.csv", "gzip-compressed"],
    "trace_surplus_fields.yaml": ["surplus_fields.csv", "more fields than the header's 3 column names"],
    "trace_jsonl_too_deep.yaml": ["jsonl_too_deep.jsonl", "line 2", "nested too deeply"],
    "trace_llmservingsim_ragged_ids.yaml": ["llmservingsim_ragged_ids.jsonl", "line 1", "input_tok_ids[0]", "[1, 2]"],
    "trace_burstgpt_all_failed.yaml": ["burstgpt_all_failed.csv", "no requests left", "failed request"],
    "trace_azure_unix_seconds.yaml": ["azure_unix_seconds.csv", "'TIMESTAMP'", "numbers (1700000000", "date-times"],
    **HOSTILE_SIZES,
    "does_not_exist.yaml": ["does_not_exist.yaml", "file not found"],
    "duplicate_key.yaml": ["duplicate_key.yaml", "line 8", "key 'rate_rps' given twice", "first on line 6"],
    "infinite_rate.yaml": ["infinite_rate.yaml", "workload.rate_rps", "finite number", "inf"],
    "nan_slo.yaml": ["nan_slo.yaml", "slo.ttft_s", "finite number", "nan"],
    "alias_bomb.yaml": ["alias_bomb.yaml", "more than 1,000,000 values", "alias"],
    "hf_negative_kv_heads.yaml": ["hf_bad_kv_heads/config.json", "num_key_value_heads", "positive integer", "-2"],
    "hf_unsupported_architecture.yaml": ["hf_qwen3_next/config.json", "model_type", "'qwen3_next'", "supported:"],
    "vllm_two_budgets.yaml": ["vllm_two_budgets.yaml", "one token budget", "chunk_tokens is 2048", "8192"],
    "static_speculative.yaml": ["static_speculative.yaml", "speculative", "policy 'static' is not modelled"],
}


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_clear_error(code: int, err: str, fragments: list[str]) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("llmsim: error:") == 1, err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} missing from: {err}"


def test_every_bad_input_file_is_in_the_catalogue():
    files = {p.name for p in BAD.glob("*.yaml")}
    assert files == (set(RUN_CATALOGUE) - {"does_not_exist.yaml"}) | {"unwritable_output.yaml"}


@pytest.mark.parametrize("name", sorted(RUN_CATALOGUE))
def test_run_on_bad_input_gives_one_clear_message(name, tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, err = run_cli(["run", str(BAD / name), "--out", str(out), "--quiet", "--no-report"], capsys)
    assert_one_clear_error(code, err, RUN_CATALOGUE[name])
    assert stdout == ""
    # nothing half-written: the output folder holds no file
    assert not out.exists() or not any(out.iterdir())


def test_unwritable_output_directory(capsys):
    # output.dir lies under a regular file, so it can't be created (works even as root)
    code, _, err = run_cli(["run", str(BAD / "unwritable_output.yaml"), "--quiet", "--no-report"], capsys)
    assert_one_clear_error(
        code,
        err,
        ["output directory", "unwritable_output.yaml/results", "unwritable_output.yaml is a file, not a directory"],
    )


def test_unwritable_out_flag(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run_cli(["run", str(BAD / "wrong_type.yaml"), "--out", str(blocker / "x")], capsys)
    assert code == 2 and "Traceback" not in err  # the scenario error comes first, still one message


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_profile_csv_in_the_wrong_format(command, tmp_path, capsys):
    csv = str(BAD / "wrong_format_profile.csv")
    argv = {
        "validate": ["validate", "--hardware", "H100-SXM", "--model", "gpt2", "--profile", csv],
        "calibrate": ["calibrate", "--hardware", "H100-SXM", "--profile", csv, "--out", str(tmp_path / "p.yaml")],
    }[command]
    code, _, err = run_cli(argv, capsys)
    assert_one_clear_error(code, err, ["wrong_format_profile.csv", "unknown profile format"])
    assert not any(tmp_path.iterdir())


def test_cli_subprocess_prints_no_traceback_and_runs_no_yaml_code(tmp_path):
    """The real console entry point on the worst input: a YAML tag that would run a shell command."""
    proc = subprocess.run(
        [sys.executable, "-m", "llmsim.cli", "run", str(BAD / "python_object_tag.yaml"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "refused YAML tag" in proc.stderr
    assert "pwned" not in proc.stdout


def test_hostile_scenario_name_stays_inside_the_output_dir_and_is_escaped(tmp_path, capsys):
    name = "../../escape <script>alert(1)</script>"
    sc = tmp_path / "hostile.yaml"
    sc.write_text(
        "name: " + repr(name) + "\nmodel: gpt2\nhardware: H100-SXM\n"
        "workload: {kind: all_at_once, num_requests: 3, prompt_tokens: {dist: fixed, value: 8},"
        " output_tokens: {dist: fixed, value: 2}}\n"
    )
    out = tmp_path / "a" / "b" / "out"
    before = {p for p in tmp_path.rglob("*")}
    assert main(["run", str(sc), "--out", str(out), "--quiet"]) == 0
    created = {p for p in tmp_path.rglob("*")} - before
    assert created and all(p == out or out in p.parents or p in out.parents for p in created)
    html = (out / "report.html").read_text()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;" in html


_LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # 2 GiB of address space
from llmsim.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("name", sorted(HOSTILE_SIZES))
def test_hostile_size_is_refused_under_a_memory_limit(name, tmp_path):
    """Not a MemoryError, not the OOM killer: the real CLI under 2 GiB says which key is too big."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _LIMITED,
            "run",
            str(BAD / name),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--no-report",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},  # BLAS thread stacks would eat the address space
    )
    assert_one_clear_error(proc.returncode, proc.stderr, HOSTILE_SIZES[name])
    assert "MemoryError" not in proc.stderr


def test_a_workload_too_large_to_draw_whole_is_drawn_to_the_horizon():
    """rate x duration far over the limit, but a horizon that lets through ~10k arrivals: only
    those are generated (the later ones are never simulated)."""
    from llmsim.build import build_workload
    from llmsim.scenario import scenario_from_dict

    sc = scenario_from_dict(
        {
            "name": "h",
            "model": "gpt2",
            "hardware": "H100-SXM",
            "workload": {
                "kind": "poisson",
                "rate_rps": 1e9,
                "duration_s": 1e9,
                "horizon_s": 1e-5,
                "prompt_tokens": {"dist": "fixed", "value": 16},
                "output_tokens": {"dist": "fixed", "value": 4},
            },
        },
        "h.yaml",
        BAD,
    )
    w = build_workload(sc)
    assert 9_000 < len(w) < 11_000
    assert w.arrival_s[0] == 0.0 and w.arrival_s[-1] <= 1e-5


def test_a_trace_past_the_size_bound_is_refused_before_it_is_read(tmp_path, capsys):
    """A (sparse) 4 GiB + 1 trace file is refused by its size, not read into memory."""
    trace = tmp_path / "huge.csv"
    with trace.open("wb") as fh:
        fh.truncate(4 * 2**30 + 1)
    sc = tmp_path / "s.yaml"
    sc.write_text(
        "name: t\nmodel: gpt2\nhardware: H100-SXM\n"
        f"workload: {{kind: trace, trace: {{path: {trace}, format: generic}}}}\n"
    )
    code, _, err = run_cli(["run", str(sc), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert_one_clear_error(code, err, ["huge.csv", "4,294,967,297 bytes", "more than a trace may hold"])


def test_a_key_named_without_its_unit_is_pointed_to_the_key_with_it():
    """'rate' for 'rate_rps': the unit-suffixed key wins over a closer-spelled look-alike ('trace')."""
    from llmsim.errors import did_you_mean

    assert did_you_mean("rate", ["trace", "rate_rps", "kind"]) == " (did you mean 'rate_rps'?)"
    assert did_you_mean("chunk", ["chunk_tokens", "chunk_budget"]) == " (did you mean 'chunk_tokens'?)"
    assert did_you_mean("chunk_token", ["chunk_tokens", "chunk_budget"]) == " (did you mean 'chunk_tokens'?)"


ROOT = Path(__file__).resolve().parents[1]


def _first_error(data: dict) -> str:
    from llmsim.errors import UserError
    from llmsim.scenario import scenario_from_dict

    try:
        scenario_from_dict(data, "s.yaml", ROOT)
    except UserError as exc:
        return str(exc)
    raise AssertionError("accepted")


def test_an_unknown_key_s_hint_never_points_at_a_key_that_means_something_else():
    """A close sibling first, then the key's place in a first-level section (a length distribution's
    or a generator's key of the same name is another thing), then a loose sibling; a dotted key is
    --set's syntax; a hostile key is cut short."""
    import yaml

    base = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())

    def with_(section: str | None, key: str, value: object = 1) -> str:
        data = yaml.safe_load(yaml.safe_dump(base))
        (data if section is None else data.setdefault(section, {}))[key] = value
        return _first_error(data)

    assert "(set cluster.tp or a pool's cluster.prefill_pool/decode_pool.tp instead)" in with_(None, "TP")
    assert "(set workload.rate_rps instead)" in with_(None, "rate")
    assert "(did you mean 'rate_rps'?)" in with_("workload", "rate")
    assert "(did you mean 'ttft_s' (seconds)?)" in with_("slo", "ttft_ms")
    assert "output_len" in (msg := with_("workload", "output_len")) and "shared_prefix" not in msg
    assert "prompt_tokens.max" not in with_("policy", "max")
    assert "(write it nested, cluster: {tp: ...}; dotted keys are for --set)" in with_(None, "cluster.tp")
    assert len(with_(None, "k" * 5000)) < 400
    assert with_("cluster", "base_dir").endswith("unknown key 'base_dir'")  # (llmsim sets it: no hint)


def test_a_profile_hint_offers_only_its_family_s_sections():
    """A GPU profile's stray `sockets` is not sent to a cpu section it may not have."""
    from llmsim.errors import UserError
    from llmsim.hardware import load_profile, profile_from_dict

    data = load_profile("H100-SXM").model_dump(mode="json", exclude_none=True)
    data["sockets"] = 2
    with pytest.raises(UserError, match=r"unknown key 'sockets'$"):
        profile_from_dict(data, "p.yaml")
