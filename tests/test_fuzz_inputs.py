"""A fuzzer of user inputs (issue #19): valid scenarios, traces and HuggingFace configs, mutated
(wrong types, extreme numbers, NaN and infinity, missing, unknown and duplicated keys, truncated
files), through the real CLI. Every case must end in exit 0 (the run's invariants are checked
inside it: a violation exits 3) or exit 2 with an ``llmsim: error:`` message, never a traceback,
never past a time limit, never past a memory limit.

200 cases in ``make test`` (derandomised: the same cases every run, so CI is reproducible);
``HYPOTHESIS_PROFILE=long`` runs 10,000 (``make test-props-long``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import resource
import signal
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llmsim.cli import main

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
CASE_LIMIT_S = 30  # a small scenario runs in well under a second; more is a hang
MAX_RSS_BYTES = 3 * 2**30  # the test process's peak memory, all cases together (a few hundred MB today)

BASE = {
    "name": "fuzz",
    "seed": 1,
    "model": {"name": "llama-3.1-8b"},
    "hardware": "H100-SXM",
    "cluster": {"replicas": 1, "tp": 1},
    "policy": {"kind": "chunked", "chunk_tokens": 256, "max_num_seqs": 16},
    "kv_cache": {"block_tokens": 16},
    "workload": {
        "kind": "poisson",
        "rate_rps": 20.0,
        "num_requests": 8,
        "prompt_tokens": {"dist": "uniform", "min": 16, "max": 300},
        "output_tokens": {"dist": "fixed", "value": 8},
    },
    "slo": {"ttft_s": 1.0, "tbt_s": 0.1},
    "output": {"steps": "all", "trace": "sample"},
}
PATHS = [
    ("seed",),
    ("model", "name"),
    ("model", "weight_dtype"),
    ("hardware",),
    ("engine",),
    ("cluster", "replicas"),
    ("cluster", "tp"),
    ("cluster", "pp"),
    ("cluster", "router"),
    ("policy", "kind"),
    ("policy", "chunk_tokens"),
    ("policy", "max_num_seqs"),
    ("policy", "max_queue"),
    ("kv_cache", "block_tokens"),
    ("kv_cache", "memory_fraction"),
    ("kv_cache", "prefix_caching"),
    ("kv_cache", "num_blocks"),
    ("workload", "kind"),
    ("workload", "rate_rps"),
    ("workload", "num_requests"),
    ("workload", "horizon_s"),
    ("workload", "cv"),
    ("workload", "prompt_tokens"),
    ("workload", "prompt_tokens", "dist"),
    ("workload", "prompt_tokens", "min"),
    ("workload", "prompt_tokens", "max"),
    ("workload", "output_tokens", "value"),
    ("slo", "ttft_s"),
    ("slo", "tbt_s"),
    ("slo", "attainment"),
    ("output", "percentiles"),
    ("output", "trace"),
    ("output", "format"),
    ("output", "steps"),
]
# hostile values: types, signs and magnitudes a user (or a broken generator) may write; no
# mid-sized counts, so that a valid case stays a small run
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, -1, 2, 3, 7, 10**12, 10**18, 2**63, -(2**63)]),
    st.sampled_from([0.5, -0.5, 0.0, float("nan"), float("inf"), float("-inf"), 1e308, 1e-308, 2.5]),
    st.sampled_from(["", "x", "chunked", "vllm", "ideal", "1e9", "H100-SXM", "gpt2", "∞", "null"]),
    st.lists(st.sampled_from([0, 50, 99, 100, -1, 2.5]), max_size=3),
    st.dictionaries(st.sampled_from(["a", "dist", "value", "kind"]), st.integers(-2, 3), max_size=2),
)


def _set(d: dict, path: tuple[str, ...], value: object) -> None:
    for k in path[:-1]:
        if not isinstance(d.get(k), dict):
            d[k] = {}
        d = d[k]
    d[path[-1]] = value


def _delete(d: dict, path: tuple[str, ...]) -> None:
    for k in path[:-1]:
        d = d.get(k) if isinstance(d.get(k), dict) else {}
    d.pop(path[-1], None)


@st.composite
def mutated_scenario(draw: st.DrawFn) -> str:
    """The base scenario's YAML text with one to three mutations."""
    d = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        op, path = draw(st.sampled_from(["set", "set", "set", "delete", "unknown"])), draw(st.sampled_from(PATHS))
        if op == "set":
            _set(d, path, draw(VALUES))
        elif op == "delete":
            _delete(d, path)
        else:
            _set(d, (*path[:-1], path[-1] + "_x"), draw(VALUES))
    text = yaml.safe_dump(d, sort_keys=False, allow_unicode=True)
    lines = text.splitlines(keepends=True)
    tail = draw(st.sampled_from(["none", "none", "truncate", "duplicate"]))
    if tail == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif tail == "duplicate" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        text = "".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])
    return text


CELLS = st.sampled_from(["0", "1", "5", "16", "-1", "2.5", "1e30", "nan", "inf", "", "x", "  ", "3.0"])


@st.composite
def mutated_trace(draw: st.DrawFn) -> str:
    """A generic CSV trace: a header (sometimes missing a column or with an extra one), rows of
    valid and hostile cells, sometimes cut mid-row."""
    cols = ["arrival_s", "prompt_tokens", "output_tokens"]
    header = draw(st.sampled_from([cols, cols[:2], [*cols, "prompt_id"], ["arrival_s", "prompt_tokens", "output"]]))
    rows = []
    t = 0.0
    for _ in range(draw(st.integers(0, 6))):
        t += 0.1
        good = [f"{t:.3f}", "32", "4", "p"][: len(header)]
        row = [draw(st.one_of(st.just(v), CELLS)) for v in good]
        rows.append(",".join(row))
    text = ",".join(header) + "\n" + "\n".join(rows) + "\n"
    if draw(st.booleans()) and len(text) > 2:
        text = text[: draw(st.integers(1, len(text)))]
    return text


HF_BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
}
HF_KEYS = [*HF_BASE, "head_dim", "num_local_experts", "num_experts_per_tok", "sliding_window", "kv_lora_rank"]


@st.composite
def mutated_hf_config(draw: st.DrawFn) -> str:
    cfg = dict(HF_BASE)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(HF_KEYS))
        if draw(st.integers(0, 3)) == 0:
            cfg.pop(key, None)
        else:
            cfg[key] = draw(VALUES)
    text = json.dumps(cfg)  # NaN and Infinity as Python writes them (other JSON parsers refuse them)
    if draw(st.integers(0, 4)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


class _Hang(Exception):
    pass


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``llmsim`` in-process: (exit code, stderr); a case past ``CASE_LIMIT_S`` raises ``_Hang``."""

    def alarm(*_: object) -> None:
        raise _Hang(f"no answer within {CASE_LIMIT_S} s: {argv}")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(CASE_LIMIT_S)
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own exits
                code = int(exc.code or 0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, err.getvalue()


def assert_clean(code: int, err: str, text: str) -> None:
    assert "Traceback" not in err, f"traceback for input:\n{text}\n{err}"
    assert code in (0, 2), f"exit {code} for input:\n{text}\n{err}"
    event(f"exit {code}")  # (pytest --hypothesis-show-statistics: how many ran, how many were refused)
    if code == 2:
        assert err.startswith("llmsim: error: "), f"no one-line error for input:\n{text}\n{err}"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # (KiB on Linux)
    assert peak < MAX_RSS_BYTES, f"peak memory {peak / 2**30:.1f} GiB after input:\n{text}"


def _run(scenario_text: str, extra: dict[str, str] | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="llmsim-fuzz-") as tmp:
        for name, content in (extra or {}).items():
            Path(tmp, name).write_text(content)
        path = Path(tmp, "scenario.yaml")
        path.write_text(scenario_text)
        code, err = run_cli(["run", str(path), "--out", str(Path(tmp, "out")), "--quiet", "--no-report"])
        assert_clean(code, err, scenario_text + "".join(f"\n--- {k}:\n{v}" for k, v in (extra or {}).items()))


_FUZZ = {"deadline": None, "derandomize": not LONG, "suppress_health_check": list(HealthCheck)}


@settings(max_examples=6000 if LONG else 120, **_FUZZ)
@given(mutated_scenario())
def test_mutated_scenarios_exit_0_or_2_with_one_message(text: str) -> None:
    _run(text)


@settings(max_examples=2000 if LONG else 40, **_FUZZ)
@given(mutated_trace())
def test_mutated_traces_exit_0_or_2_with_one_message(trace: str) -> None:
    d = copy.deepcopy(BASE)
    d["workload"] = {"kind": "trace", "trace": {"path": "trace.csv", "format": "generic"}}
    _run(yaml.safe_dump(d), {"trace.csv": trace})


@settings(max_examples=2000 if LONG else 40, **_FUZZ)
@given(mutated_hf_config())
def test_mutated_hf_configs_exit_0_or_2_with_one_message(config: str) -> None:
    d = copy.deepcopy(BASE)
    d["model"] = {"hf_config": "config.json"}
    _run(yaml.safe_dump(d), {"config.json": config})
