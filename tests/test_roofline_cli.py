"""``llmsim roofline``: the op table adds up to the step and the chart is a real PNG."""

from __future__ import annotations

from pathlib import Path

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


ARGS = ["roofline", "--model", "llama-3.1-8b", "--hardware", "H100-SXM", "--decode-batch", "8", "--quiet"]


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--hardware", "A100-SXM-80GB", "--act-dtype", "fp8"], "A100-SXM-80GB has no fp8 matmul units"),
        (["--tp", "0"], "--tp 0: must be >= 1"),
        (["--tp", "16", "--model", "qwen2.5-7b"], "--tp 16: tensor parallelism 16 does not divide the 28"),
        (["--model", "llama-3.1-405b", "--hardware", "L4"], "does not fit on L4 at --tp 1"),
        (["--model", "gpt2", "--context", "2048"], "--context 2048: longer than the context of gpt2"),
        (["--out", "chart.txt"], "--out chart.txt: expected a chart file ending in .png, .svg, .pdf"),
    ],
)
def test_roofline_refuses_steps_no_device_runs(flags, fragment, tmp_path, capsys) -> None:
    assert main([*ARGS, "--out", str(tmp_path / "r.png"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("llmsim: error: ") and fragment in err, err
    assert list(tmp_path.iterdir()) == []


def test_roofline_chart_is_written_whole_or_not_at_all(tmp_path, monkeypatch, capsys) -> None:
    """An SVG is an SVG; a write that fails (a full disk) is one message and leaves no file."""
    assert main([*ARGS, "--out", str(tmp_path / "r.svg")]) == 0
    assert (tmp_path / "r.svg").read_text().lstrip().startswith("<?xml")
    import errno

    import matplotlib.figure

    def full_disk(self: object, fname: object, **kwargs: object) -> None:
        open(fname, "wb").write(b"\x89PNG half")  # noqa: SIM115 - half a file, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full_disk)
    assert main([*ARGS, "--out", str(tmp_path / "r.png")]) == 2
    assert "could not write the chart (No space left on device (ENOSPC))" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.svg"]


def test_roofline_ep_shows_the_dispatch_and_combine(capsys) -> None:
    """--ep prices a step as a scenario's cluster.expert_parallel does: E/ep experts per GPU and the
    all-gather / reduce-scatter of every rank's tokens, named in the table."""
    args = ["roofline", "--model", "qwen3-30b-a3b-instruct-2507", "--hardware", "RTX-PRO-6000"]
    args += ["--decode-batch", "128", "--context", "1000", "--out", "-"]
    assert main([*args, "--ep", "2"]) == 0
    ep = capsys.readouterr().out
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert "ep=2" in ep and "moe_dispatch" in ep and "moe_combine" in ep
    assert "moe_dispatch" not in plain

    def step_ms(out: str) -> float:
        return float(out.splitlines()[0].rsplit("step ", 1)[1].split()[0])

    assert step_ms(ep) < step_ms(plain)  # half the expert weights read per GPU outweighs the collectives


def test_roofline_prices_a_step_as_the_engine_runs_it(capsys) -> None:
    """``--engine vllm-v1`` prices the step as `llmsim run` does under it: an fp8 KV cache on an H100
    makes attention fp8 (FlashAttention-3), and the engine's host terms, overlapped by async
    scheduling, are listed; the default (ideal) keeps the cost model's rule and the profile's step
    overhead. The op shares and the listed terms still add up to the step."""
    base = ["roofline", "--model", "llama-3.1-8b", "--hardware", "H100-SXM", "--prefill-tokens", "4096"]
    base += ["--kv-dtype", "fp8", "--out", "-", "--json"]
    import json

    steps = {}
    for engine in ("ideal", "vllm-v1"):
        assert main([*base, "--engine", engine]) == 0
        data = json.loads(capsys.readouterr().out)
        ops = {op["op"]: op for op in data["ops"]}
        steps[engine] = ops["attention_prefill"]["time_s"]
        if engine == "vllm-v1":
            assert "engine_prepare" in data["overheads"] and "step_overhead" not in data["overheads"]
    assert steps["vllm-v1"] < 0.7 * steps["ideal"]  # fp8 against bf16 MMAs: 2 x 0.709 / 0.803
    # a decode batch of 3 pads to the captured size 4: the padding is a listed term, and all add up
    padded = ["roofline", "--model", "llama-3.1-8b", "--hardware", "H100-SXM", "--decode-batch", "3"]
    assert main([*padded, "--context", "8192", "--engine", "vllm-v1", "--out", "-", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["overheads"]["cuda_graph_padding"]["time_s"] > 0
    total = sum(op["time_s"] for op in data["ops"]) + sum(o["time_s"] for o in data["overheads"].values())
    assert total == pytest.approx(data["step_s"], rel=1e-9)
    assert main([*base[:-1], "--engine", "nope"]) == 2
    assert "--engine 'nope': expected one of ideal, vllm-v1" in capsys.readouterr().err
    # an engine profile file prices the step with its own host terms, as a scenario's engine.profile does
    profile = Path(__file__).resolve().parent.parent / "data" / "validation" / "vllm-cpu" / "engine-fit" / "engine.yaml"
    assert main([*padded, "--engine", str(profile), "--out", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overheads"]["engine_schedule"]["time_s"] > 0
    assert main([*padded, "--engine", "no/such/engine.yaml", "--out", "-"]) == 2
    err = capsys.readouterr().err
    assert "--engine: engine.profile: " in err and "no/such/engine.yaml: file not found" in err
