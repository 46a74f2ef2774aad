"""The compiled simulator modules (mypyc, llmsim/native.py) and their pure-Python sources agree,
and a stale or missing compilation falls back to the sources instead of running old code."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pandas as pd
import pytest

import llmsim
from llmsim import native

ROOT = Path(__file__).resolve().parent.parent

# one scenario per serving policy, small enough for a subprocess in a second or two
SCENARIOS = {
    "traditional": {"policy": {"kind": "traditional"}},
    "chunked": {"policy": {"kind": "chunked", "chunk_tokens": 256}},
    "disaggregated": {
        "policy": {"kind": "disaggregated"},
        "cluster": {"prefill_pool": {"replicas": 1}, "decode_pool": {"replicas": 2}, "kv_link": {"kind": "nvlink"}},
    },
}

RUN = """
import sys, yaml, llmsim
from llmsim.scenario import scenario_from_dict
spec = yaml.safe_load(sys.stdin.read())
res = llmsim.run(scenario_from_dict(spec, "test", sys.argv[1]))
print(llmsim.native.mode)
res.requests.to_csv(sys.argv[2], index=False)
"""


def _spec(name: str) -> dict:
    spec = {
        "name": name,
        "seed": 3,
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "cluster": {"replicas": 2, "router": "least_outstanding"},
        "workload": {
            "kind": "poisson",
            "rate_rps": 25.0,
            "num_requests": 300,
            "prompt_tokens": {"dist": "lognormal", "median": 900, "sigma": 0.8},
            "output_tokens": {"dist": "lognormal", "median": 200, "sigma": 0.8},
        },
        "kv_cache": {"memory_fraction": 0.3},  # tight: preemptions happen too
        "output": {"steps": "none"},
    }
    spec.update(SCENARIOS[name])
    return spec


def _run(spec: dict, out: Path, pure: bool) -> str:
    import yaml

    env = dict(os.environ)
    env.pop(native.PURE_ENV, None)
    if pure:
        env[native.PURE_ENV] = "1"
    p = subprocess.run(
        [sys.executable, "-c", RUN, str(ROOT), str(out)],
        input=yaml.safe_dump(spec),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return p.stdout.strip()


@pytest.mark.skipif(native.mode != "compiled", reason=f"simulator modules not compiled here: {native.mode}")
@pytest.mark.parametrize("policy", sorted(SCENARIOS))
def test_compiled_and_pure_python_give_identical_requests(policy: str, tmp_path: Path) -> None:
    spec = _spec(policy)
    assert _run(spec, tmp_path / "compiled.csv", pure=False) == "compiled"
    assert _run(spec, tmp_path / "pure.csv", pure=True).startswith("pure Python")
    compiled, pure = pd.read_csv(tmp_path / "compiled.csv"), pd.read_csv(tmp_path / "pure.csv")
    assert len(compiled) == 300 and (compiled["status"] == "finished").mean() > 0.9
    pd.testing.assert_frame_equal(compiled, pure, check_exact=True)  # same floats, bit for bit


def _fake_package(root: Path, ext_age_s: float, missing: int = 0) -> None:
    """Sources of every compiled module, and extensions ``ext_age_s`` older than them."""
    for i, name in enumerate(native.COMPILED):
        src = native.source_path(name, root)
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text("")
        if i < missing:
            continue
        ext = src.with_suffix(EXTENSION_SUFFIXES[0])
        ext.write_text("")
        t = src.stat().st_mtime
        os.utime(ext, (t - ext_age_s, t - ext_age_s))


def test_fresh_compilation_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    _fake_package(tmp_path, ext_age_s=-5.0)  # compiled after the sources were written
    assert native.why_pure(tmp_path) is None


def test_edited_source_falls_back_to_pure_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    _fake_package(tmp_path, ext_age_s=60.0)  # a source edited a minute after the compilation
    assert native.why_pure(tmp_path) == "llmsim/request.py changed since it was compiled"


def test_partial_or_no_compilation_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    _fake_package(tmp_path / "a", ext_age_s=-5.0, missing=1)
    assert native.why_pure(tmp_path / "a") == "compiled modules missing"
    _fake_package(tmp_path / "b", ext_age_s=-5.0, missing=len(native.COMPILED))
    assert native.why_pure(tmp_path / "b") == "not compiled"


def test_environment_variable_forces_pure_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_package(tmp_path, ext_age_s=-5.0)
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert native.why_pure(tmp_path) == f"{native.PURE_ENV} is set"
    monkeypatch.setenv(native.PURE_ENV, "0")
    assert native.why_pure(tmp_path) is None


def test_compiled_list_names_real_modules() -> None:
    for name in native.COMPILED:
        assert native.source_path(name).exists(), name
    assert llmsim.native.mode == native.mode
