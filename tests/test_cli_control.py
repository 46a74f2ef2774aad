"""Progress and control on the command line: ``--version``, ``--quiet`` (nothing on stdout, no
bar), ``--json`` (strict JSON carrying the text's figures) and progress bars on stderr only when
asked for (``LLMSIM_PROGRESS=1``) or when stderr is a terminal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmsim import progress
from llmsim.cli import _pyproject_version, main, version

ROOT = Path(__file__).resolve().parent.parent
VIDUR_MLP = ROOT / "data/calibration/vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
VLLM_RUN = ROOT / "data/validation/vllm-cpu/poisson-light"
VLLM_HOST = ROOT / "data/validation/vllm-cpu/host-cpu.yaml"
VLLM_MODEL = ROOT / "benchmarks/vllm_cpu/model/config.json"
ROOFLINE = ["roofline", "--model", "llama-2-7b", "--hardware", "A100-SXM-80GB", "--decode-batch", "8", "--out", "-"]
VALIDATE = ["validate", "--hardware", "A100-SXM-80GB", "--model", "llama-2-7b", "--profile", str(VIDUR_MLP)]
BAR = re.compile(r"\d+%\|")  # tqdm's "42%|" (a drawn bar), never in a command's own output


def strict_json(text: str) -> object:
    """Parse as any JSON reader would: a bare NaN or Infinity is an error, not a float."""

    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(autouse=True)
def _no_forced_progress(monkeypatch):
    """Each test chooses its own LLMSIM_PROGRESS; the developer's shell does not leak in."""
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)


@pytest.fixture
def tiny_twin(tmp_path) -> list[str]:
    """`llmsim twin` on a 2-layer, 32-wide model, 4 short requests, no step grid, a made-up
    local-cpu profile: the reference engine's whole path in a few seconds."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "vocab_size": 61, "torch_dtype": "float32"}))  # fmt: skip
    sc = yaml.safe_load((ROOT / "scenarios/twin_small.yaml").read_text())
    sc["model"]["hf_config"] = str(cfg)
    sc["workload"] |= {"num_requests": 4, "prompt_tokens": {"dist": "uniform", "min": 4, "max": 12}}
    sc["workload"]["output_tokens"] = {"dist": "uniform", "min": 2, "max": 4}
    (tmp_path / "twin.yaml").write_text(yaml.safe_dump(sc))
    hw = yaml.safe_load((ROOT / "hardware_profiles/EPYC-9654.yaml").read_text())
    hw["name"], hw["memory_capacity_bytes"]["value"] = "local-cpu-test", 4e9
    hw["calibration"] = {
        "probe_step": {"step": "decode b=8 ctx=256", "measured_s": 0.014},
        "probe_prefill_step": {"step": "prefill 128", "measured_s": 0.04},
    }
    (tmp_path / "cpu.yaml").write_text(yaml.safe_dump(hw))
    twin = ["twin", str(tmp_path / "twin.yaml"), "--skip-grid", "--profile", str(tmp_path / "cpu.yaml")]
    # one speed probe (its reference step is the full twin model's) instead of one per 0.1 s
    return [*twin, "--probe-interval", "100", "--out", str(tmp_path / "twin-out")]


# ---- --version -------------------------------------------------------------------------------


def test_version_prints_name_and_version_and_exits_0(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"llmsim \d+\.\d+\.\d+\S*\n", out)
    assert out == f"llmsim {version()}\n"


def test_version_falls_back_to_pyproject() -> None:
    declared = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared and _pyproject_version() == declared.group(1)


# ---- --quiet ---------------------------------------------------------------------------------


def quiet_commands(tmp: Path) -> dict[str, list[str]]:
    return {
        "hardware": ["hardware"],
        "hardware NAME": ["hardware", "H100-SXM"],
        "hardware --json": ["hardware", "--json"],
        "models": ["models"],
        "roofline": ROOFLINE,
        "validate": VALIDATE,
        "validate --json": [*VALIDATE, "--json"],
        "models --json": ["models", "--json"],
        "roofline --json": [*ROOFLINE, "--json"],
        "calibrate": [
            "calibrate",
            "--hardware",
            "A100-SXM-80GB",
            "--profile",
            str(VIDUR_MLP),
            "--out",
            str(tmp / "c.yaml"),
        ],
        "calibrate --serving": [
            "calibrate",
            "--serving",
            str(VLLM_RUN),
            "--hardware",
            str(VLLM_HOST),
            "--model",
            str(VLLM_MODEL),
            "--out",
            str(tmp / "fit"),
        ],  # fmt: skip
        "twin --engine vllm": ["twin", "--engine", "vllm", str(VLLM_RUN)],
    }


@pytest.mark.parametrize("name", list(quiet_commands(Path("."))))
def test_quiet_prints_nothing_but_the_json_asked_for_and_draws_no_bar(name, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")  # bars forced on: --quiet must still win
    args = [*quiet_commands(tmp_path)[name], "--quiet"]
    assert main(args) == 0
    captured = capsys.readouterr()
    if "--json" in args:  # what the caller asked for is printed, and nothing else
        json.loads(captured.out)
    else:
        assert captured.out == ""
    assert not BAR.search(captured.err)


def test_quiet_twin_reference_prints_nothing(tiny_twin, capsys, monkeypatch) -> None:
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    assert main([*tiny_twin, "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and not BAR.search(captured.err)
    assert (Path(tiny_twin[-1]) / "twin_runs.csv").exists()  # quiet, not idle: the files are written


def test_quiet_still_reports_bad_input_in_one_line(capsys) -> None:
    assert main(["hardware", "no-such-device", "--json", "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("llmsim: error:") == 1 and "no-such-device" in captured.err


# ---- --json ----------------------------------------------------------------------------------


def text_and_json(args: list[str], capsys) -> tuple[str, object]:
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    return text, strict_json(capsys.readouterr().out)


def table_row(text: str, first: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.split()[:1] == [first])


def test_hardware_json_carries_the_tables_figures(capsys) -> None:
    text, data = text_and_json(["hardware"], capsys)
    h100 = next(p for p in data["profiles"] if p["name"] == "H100-SXM")
    row = table_row(text, "H100-SXM")
    assert row[2] == f"{h100['peak_bf16_tflops']:.0f}" == "989"
    assert row[3] == f"{h100['peak_fp8_tflops']:.0f}"
    assert row[5] == f"{h100['hbm_bandwidth_gb_s'] / 1e3:.2f}" == "3.35"
    assert row[6] == f"{h100['scale_up_gb_s']:.0f}"
    assert len(data["profiles"]) == len(text.split("\n\n")[0].splitlines()) - 2  # header and rule
    no_fp8 = next(p for p in data["profiles"] if p["name"] == "A100-SXM-80GB")
    assert no_fp8["peak_fp8_tflops"] is None and table_row(text, "A100-SXM-80GB")[3] == "-"


def test_hardware_name_json_is_the_raw_profile_with_sources(capsys) -> None:
    text, data = text_and_json(["hardware", "H100-SXM"], capsys)
    bf16 = data["peak_flops"]["bf16"]
    assert f"peak bf16 {bf16['value'] / 1e12:.1f} TFLOP/s" in re.sub(r" +", " ", text)  # table padding aside
    assert bf16["source"] in text
    assert f"{data['memory_bandwidth_bytes_per_s']['value'] / 1e12:.2f} TB/s" in text
    assert data["price_per_hour_usd"]["source"].startswith("ASSUMPTION")


def test_models_json_carries_the_tables_figures(capsys) -> None:
    text, data = text_and_json(["models"], capsys)
    m = next(e for e in data["models"] if e["name"] == "llama-2-7b")
    row = table_row(text, "llama-2-7b")
    assert row[1] == f"{m['total_params'] / 1e9:.2f}"
    assert row[8] == f"{m['kv_bytes_per_token_bf16'] / 1024:.0f}" == "512"
    assert m["sliding_window_tokens"] is None and row[9] == "-"


def test_validate_json_carries_the_reports_figures(capsys) -> None:
    text, data = text_and_json(VALIDATE, capsys)
    assert f"overall MAPE {data['overall_mape']:.1%}" in text
    up = data["ops"]["mlp_up_proj"]
    assert table_row(text, "mlp_up_proj")[1:5] == [
        f"{up['mape']:.1%}",
        f"{up['p90']:.1%}",
        f"{up['worst']:.1%}",
        "1,044",  # tables group thousands
    ]
    assert data["measured_kernels"] == 10 * 1044  # 4 linear and 6 elementwise ops per row
    worst = data["worst_cases"][0]  # (an elementwise kernel of a few tokens, on the default profile)
    assert f"{worst['tokens']} tok, H {worst['hidden']}" in text and f"{worst['error']:.1%}" in text
    assert set(data["mape_per_tp"]["mlp_up_proj"]) == {"tp1", "tp2", "tp4", "tp8"}


def test_roofline_json_carries_the_tables_figures(capsys) -> None:
    text, data = text_and_json(ROOFLINE, capsys)
    assert f"step {data['step_s'] * 1e3:.3f} ms" in text
    by_op = {o["op"]: o for o in data["ops"]}
    attn = by_op["attention_decode"]
    row = table_row(text, "attention_decode")
    assert row[1:4] == [str(attn["calls"]), f"{attn['flops'] / 1e9:.3g}", f"{attn['bytes'] / 1e6:.3g}"]
    assert row[5:] == [attn["bound"], f"{attn['time_s'] * 1e6:.1f}", f"{attn['share']:.1%}"]
    assert set(data["overheads"]) <= {line.split()[0] for line in text.splitlines()}
    assert data["chart"] is None  # --out -


def test_to_json_writes_null_for_nan_and_infinity() -> None:
    import numpy as np

    out = strict_json(progress.to_json({"a": float("nan"), "b": [np.float64("inf"), np.int64(3)], "c": np.nan}))
    assert out == {"a": None, "b": [None, 3], "c": None}


# ---- progress bars ---------------------------------------------------------------------------


def test_progress_on_stderr_when_forced(capsys, monkeypatch) -> None:
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    assert main(["twin", "--engine", "vllm", str(VLLM_RUN)]) == 0
    captured = capsys.readouterr()
    assert "twin" in captured.err and BAR.search(captured.err)
    assert "poisson-light" in captured.out and not BAR.search(captured.out)  # stdout is the table alone


def test_validate_json_stays_pure_with_a_bar(capsys, monkeypatch) -> None:
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    assert main([*VALIDATE, "--json"]) == 0
    captured = capsys.readouterr()
    assert BAR.search(captured.err)
    strict_json(captured.out)


def test_twin_reference_bar_and_run_lines(tiny_twin, capsys, monkeypatch) -> None:
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    assert main(tiny_twin) == 0
    captured = capsys.readouterr()
    assert BAR.search(captured.err)
    assert "run 1/1 chunked: median |E2E err|" in captured.out  # each run's line still on stdout


def test_no_bar_without_a_terminal_unless_forced(capsys, monkeypatch) -> None:
    assert isinstance(progress.bar(3, "x"), progress.NoBar)  # capsys: stderr is not a terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert not isinstance(progress.bar(3, "x"), progress.NoBar)
    assert isinstance(progress.bar(3, "x", enabled=False), progress.NoBar)  # --quiet
    monkeypatch.setenv(progress.PROGRESS_ENV, "0")
    assert isinstance(progress.bar(3, "x"), progress.NoBar)  # forced off on a terminal too


def test_sweep_bars_come_from_the_progress_module(monkeypatch) -> None:
    from llmsim.sweep import _bar

    assert isinstance(_bar(2, True, "sweep"), progress.NoBar)  # not a terminal, not forced
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    with _bar(2, True, "sweep") as b:
        assert not isinstance(b, progress.NoBar)


def test_no_bar_still_prints_lines_written_through_it(capsys) -> None:
    with progress.bar(2, "x") as b:
        b.write("a line")
        b.update()
    assert capsys.readouterr().out == "a line\n"


def test_import_does_not_load_tqdm() -> None:
    code = "import sys, llmsim, llmsim.cli, llmsim.progress; llmsim.cli.build_parser(); print('tqdm' in sys.modules)"
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


HEAVY = ("pandas", "matplotlib", "simpy", "pyarrow", "scipy")


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["hardware"], ["hardware", "H100-SXM"], ["models", "llama-3.1-8b"], ["run", "--help"], ROOFLINE],
)
def test_table_commands_import_no_heavy_library(argv) -> None:
    """A command that prints from a profile or the catalog starts in a tenth of a second: it
    imports none of pandas, matplotlib, SimPy (each a few hundred ms; benchmarks/bench_startup.py)."""
    code = (
        "import sys, contextlib, io, llmsim.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    llmsim.cli.main({argv!r})\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_twin_on_the_raw_clock_prints_its_table(tiny_twin, capsys) -> None:
    # --raw-clock applies no speed factor: the runs table shows "-" for it (it used to crash)
    assert main([*tiny_twin, "--raw-clock"]) == 0
    assert "applied speed factor" in capsys.readouterr().out


def test_hardware_detail_shows_a_table_figure_by_its_range(tmp_path, capsys) -> None:
    # a measured local-cpu profile carries gemm_small_m as a table per m: shown as its range
    hw = yaml.safe_load((ROOT / "hardware_profiles/EPYC-9654.yaml").read_text())
    hw["name"] = "table-figure"
    hw["efficiency"]["gemm_small_m"] = {"value": [0.1, 0.25, 0.5], "source": "test"}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(hw))
    assert main(["hardware", str(tmp_path / "t.yaml")]) == 0
    assert "3 values 0.1..0.5" in capsys.readouterr().out
