"""Replay a measured serving run in the simulator and score it (``llmsim twin --engine vllm``).

The run's own engine configuration (``meta.json: resolved``: token budget, sequence cap, block
size, KV blocks, prefix caching, async scheduling) and its exact requests (``workload.jsonl.gz``:
arrival, token ids, output length) become a scenario; the simulator prices it with a hardware
profile and an engine profile (from ``calibrate --serving`` on the calibration runs), and the
predicted requests are compared with the measured ones (``llmsim.accuracy``).
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from pathlib import Path

import pandas as pd

from llmsim.calibration.serving import ServingRun, meta_flag, read_run, run_dtype
from llmsim.errors import NUMBER_TOO_LONG, UserError

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "data" / "validation" / "vllm-cpu"
MODEL_CONFIG = ROOT / "benchmarks" / "vllm_cpu" / "model" / "config.json"
HOST_PROFILE = DATA / "engine-fit" / "hardware.yaml"  # written by calibrate --serving --fit-hardware
ENGINE_PROFILE = DATA / "engine-fit" / "engine.yaml"


def workload_file(run: ServingRun) -> Path:
    """The run's workload: its own, or its base run's for a repeat (``-repN``: the same requests)."""
    own = run.folder / "workload.jsonl.gz"
    if own.exists():
        return own
    base = run.folder.parent / re.sub(r"-rep\d+$", "", run.name) / "workload.jsonl.gz"
    if base.exists():
        return base
    raise UserError(f"{run.folder}: no workload.jsonl.gz (nor in its base run {base.parent.name})")


def to_llmservingsim(src: Path, dst: Path) -> list[tuple[int, int]]:
    """The harness's workload lines as LLMServingSim JSONL (the trace format llmsim reads), and each
    request's (prompt, output) tokens; a line that is not one request (``arrival_s``,
    ``output_tokens``, ``prompt_token_ids``), a cut or corrupt gzip stream, a line longer than one
    request's token ids can be, or more text than a trace may hold is refused, naming the file and line."""
    import zlib

    from llmsim.workload.limits import MAX_TOKENS_PER_REQUEST, MAX_TRACE_BYTES

    longest = 12 * MAX_TOKENS_PER_REQUEST  # (characters: an id of up to 10 digits and its ", ", and the rest)
    written = 0
    no = 0
    lens: list[tuple[int, int]] = []
    try:
        with gzip.open(src, "rt", encoding="utf-8") as fh, dst.open("w") as out:
            while line := fh.readline(longest + 1):  # (a line is read at most this far: memory stays bounded)
                no += 1
                if len(line) > longest:
                    raise UserError(
                        f"{src}: line {no}: longer than {longest:,} characters, more than one request holds"
                    )
                written += len(line)
                if written > MAX_TRACE_BYTES:
                    raise UserError(
                        f"{src}: more than {MAX_TRACE_BYTES:,} bytes once decompressed, more than a trace may hold"
                    )
                if line.strip():
                    row = _request_row(json.loads(line), src, no)
                    lens.append((row["input_toks"], row["output_toks"]))
                    out.write(json.dumps(row) + "\n")
    except json.JSONDecodeError as exc:
        raise UserError(f"{src}: line {no}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise UserError(f"{src}: line {no}: JSON nested too deeply to read") from None
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as exc:  # gzip.BadGzipFile is an OSError
        raise UserError(f"{src}: not a readable gzip-compressed JSONL workload (line {no}): {exc}") from None
    except ValueError:  # (after JSONDecodeError and UnicodeDecodeError, ValueErrors too): the digit limit
        raise UserError(f"{src}: line {no}: {NUMBER_TOO_LONG}") from None
    return lens


def check_measured(run: ServingRun, src: Path, lens: list[tuple[int, int]]) -> None:
    """The measured requests are the workload's: as many, each ``r<i>`` the workload's i-th request
    with its prompt and output tokens (the comparison matches them by that id); another run's
    requests.csv or workload is named, not scored."""
    req = run.requests
    path = run.folder / "requests.csv"
    if len(req) != len(lens):
        raise UserError(f"{path}: {len(req):,} requests, where the workload ({src}) sends {len(lens):,}")
    for row, (rid, prompt, output) in enumerate(
        zip(req["id"], req["prompt_tokens"], req["output_tokens"], strict=True)
    ):
        text = str(rid)
        index = int(text[1:]) if text[:1] == "r" and text[1:].isdigit() else -1
        if not 0 <= index < len(lens):
            raise UserError(
                f"{path}: row {row + 2}, column 'id': {text!r} is not one of the workload's r0..r{len(lens) - 1}"
            )
        if (prompt, output) != lens[index]:
            raise UserError(
                f"{path}: row {row + 2}: {text} has {prompt:g} prompt and {output:g} output tokens, where the workload "
                f"({src}) gives it {lens[index][0]} and {lens[index][1]}"
            )


def _request_row(r: object, src: Path, no: int) -> dict:
    """One harness workload line as an LLMServingSim request."""
    try:
        if not isinstance(r, dict):
            raise TypeError(f"expected an object, got {type(r).__name__}")
        ids = r["prompt_token_ids"]
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise TypeError("prompt_token_ids: expected a list of integer token ids")
        out = int(r["output_tokens"])
        arrival = float(r["arrival_s"])
        if not ids or out < 1 or not 0.0 <= arrival < 1e9:
            raise ValueError(
                f"expected a non-empty prompt, output_tokens >= 1 and 0 <= arrival_s < 1e9, got {len(ids)} ids, {out}, {arrival}"
            )
    except KeyError as exc:
        raise UserError(f"{src}: line {no}: missing key {exc.args[0]!r}") from None
    except (TypeError, ValueError, OverflowError) as exc:  # (OverflowError: float() of a 400-digit int)
        raise UserError(f"{src}: line {no}: {exc}") from None
    return {
        "input_toks": len(ids),
        "output_toks": out,
        "arrival_time_ns": int(round(arrival * 1e9)),
        "input_tok_ids": ids,
    }


def scenario_dict(run: ServingRun, trace: Path, hardware: Path, engine: Path, model_config: Path) -> dict:
    """The scenario of a measured run, from its resolved engine configuration."""
    res = run.meta.get("resolved")
    if not isinstance(res, dict) or "scheduler" not in res or "cache" not in res:
        raise UserError(f"{run.folder}/meta.json: no resolved engine configuration (resolved.scheduler/cache)")
    sch, cache = res["scheduler"], res["cache"]
    where = f"{run.folder}/meta.json: resolved"
    for key, section in (("scheduler", sch), ("cache", cache)):
        if not isinstance(section, dict):
            raise UserError(f"{where}.{key}: expected a mapping, got {type(section).__name__}")

    def whole(section: dict, name: str, key: str, default: int | None = None) -> int:
        """``section[key]`` as a whole number >= 0; a missing or null value is ``default``."""
        value = section.get(key)
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
            raise UserError(f"{where}{name}.{key}: expected a whole number >= 0, got {value!r}")
        return int(value)

    watermark = sch.get("watermark") or 0.0
    if isinstance(watermark, bool) or not isinstance(watermark, int | float) or not 0 <= watermark < 1:
        raise UserError(f"{where}.scheduler.watermark: expected a fraction from 0 to 1, got {watermark!r}")
    model = res.get("model")
    limit = model.get("max_model_len") if isinstance(model, dict) else None
    if limit is not None:
        ok = isinstance(limit, int | float) and not isinstance(limit, bool) and limit == int(limit) and limit >= 1
        if not ok or limit > 2**31:
            raise UserError(f"{where}.model.max_model_len: expected a whole number of tokens >= 1, got {limit!r}")
    blocks = whole(res, "", "num_kv_blocks", 0) or whole(cache, ".cache", "num_gpu_blocks", 0)
    if blocks < 2:
        raise UserError(f"{run.folder}/meta.json: no KV block count (resolved.num_kv_blocks)")
    budget = whole(sch, ".scheduler", "max_num_batched_tokens")
    dtype = run_dtype(run)  # (as calibrate --serving reads it; the KV cache in it, vLLM's auto)
    return {
        "name": f"replay-{run.name}",
        "seed": 0,
        "model": {"hf_config": str(model_config), "weight_dtype": dtype, "act_dtype": dtype},
        "hardware": str(hardware),
        "engine": {
            "profile": str(engine),
            "async_scheduling": meta_flag(sch, "async_scheduling", False, f"{where}.scheduler"),
        },
        "policy": {
            "kind": "vllm",
            "chunk_tokens": budget,
            "max_batch_tokens": budget,
            "max_num_seqs": whole(sch, ".scheduler", "max_num_seqs"),
            "long_prefill_token_threshold": whole(sch, ".scheduler", "long_prefill_token_threshold", 0),
            "reserve_full_prompt": meta_flag(
                sch, "scheduler_reserve_full_isl", True, f"{where}.scheduler"
            ),  # vLLM 0.32's default
            **_max_model_len(res),
        },
        "kv_cache": {
            "block_tokens": whole(cache, ".cache", "block_size"),
            "num_blocks": blocks - 1,  # vLLM's block 0 is the null block (v1/core/block_pool.py)
            "prefix_caching": meta_flag(cache, "enable_prefix_caching", False, f"{where}.cache"),
            "watermark": float(watermark),
            "dtype": dtype,
        },
        "workload": {"kind": "trace", "trace": {"path": str(trace), "format": "llmservingsim"}},
        "output": {"steps": "none"},
    }


def _max_model_len(resolved: dict) -> dict:
    """policy.max_model_len from the run's resolved model config, where it recorded one. vLLM
    served with it, so a limit past the model's context was allowed there
    (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1): the replay allows it too."""
    model = resolved.get("model")
    limit = model.get("max_model_len") if isinstance(model, dict) else None
    return {"max_model_len": int(limit), "allow_long_max_model_len": True} if limit else {}


def replay(
    folder: Path,
    hardware: Path = HOST_PROFILE,
    engine: Path = ENGINE_PROFILE,
    model_config: Path = MODEL_CONFIG,
    overrides: dict | None = None,
) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(scores, measured requests, predicted requests) of one run."""
    import llmsim
    from llmsim.accuracy import compare
    from llmsim.scenario import scenario_from_dict, set_path

    run = read_run(folder)
    if run.requests.empty:
        raise UserError(f"{folder}: a step profile, not a serving run (no requests.csv)")
    with tempfile.TemporaryDirectory(prefix="llmsim-replay-") as tmp:
        trace = Path(tmp) / "workload.jsonl"
        source = workload_file(run)
        check_measured(run, source, to_llmservingsim(source, trace))
        data = scenario_dict(run, trace, hardware, engine, model_config)
        for k, v in (overrides or {}).items():
            set_path(data, k, v)
        res = llmsim.run(scenario_from_dict(data, f"replay of {folder}", Path(tmp)))
    sim = res.requests.copy()
    sim["id"] = [f"r{i}" for i in range(len(sim))]  # the harness numbers requests in arrival order
    scores = compare(run.requests, sim)
    scores["run"] = run.name  # type: ignore[assignment]
    scores.update(res.summary["accuracy_like"])  # the kind of run (devices, moe): twin --record's tags
    return scores, run.requests, sim


def split(campaign: Path = DATA) -> dict[str, list[str]]:
    """A campaign's ``split.json``: its calibration and validation runs (and the repeats of the
    validation workloads), fixed before it was measured; {} where the folder has none."""
    path = campaign / "split.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path}: not a readable JSON split ({exc})") from None
    repeats = data.get("validation_repeats", {}) if isinstance(data, dict) else None
    lists = {
        "calibration": data.get("calibration", []) if isinstance(data, dict) else None,
        "validation": data.get("validation", []) if isinstance(data, dict) else None,
        "repeat": repeats.get("runs", []) if isinstance(repeats, dict) else None,
    }
    for key, names in lists.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UserError(
                f"{path}: expected an object whose calibration, validation and validation_repeats.runs "
                f"are lists of run folder names ({key}: {names!r})"
            )
    return lists


def campaign_fit(folder: Path) -> tuple[Path, Path] | None:
    """(hardware, engine) profiles of the run's own campaign: the ``engine-fit/`` beside it, written by
    ``calibrate --serving --fit-hardware`` on that campaign's calibration runs (each campaign ran on
    its own machine); None where there is none. A fit folder missing one of the two is an error."""
    fit = folder.resolve().parent / "engine-fit"
    own = fit / "hardware.yaml", fit / "engine.yaml"
    if all(p.is_file() for p in own):
        return own
    if fit.exists():
        missing = ", ".join(p.name for p in own if not p.is_file())
        raise UserError(
            f"{fit}: a campaign's fit holds hardware.yaml and engine.yaml ({missing} missing); rerun calibrate --serving --fit-hardware --out {fit}"
        )
    return None


def split_of(folder: Path) -> str:
    """calibration, validation, repeat or other: the run's role in its campaign's split."""
    folder = folder.resolve()
    sp = split(folder.parent)
    for role in ("validation", "calibration", "repeat"):
        if folder.name in sp.get(role, ()):
            return role
    return "other"
