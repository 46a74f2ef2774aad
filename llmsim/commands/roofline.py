"""``llmsim roofline``: the op table of one batch step and a roofline chart of its ops."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from llmsim.errors import UserError, atomic_write, os_reason
from llmsim.progress import printer, to_json
from llmsim.tables import table

if TYPE_CHECKING:
    from llmsim.engine import EngineSpec
    from llmsim.hardware import HardwareProfile
    from llmsim.models import ModelSpec


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("roofline", help="op table (FLOPs, bytes, bound, time) and roofline chart of one step")
    p.add_argument("--model", required=True, help="catalog name or HuggingFace config.json")
    p.add_argument("--hardware", required=True, help="profile name or YAML path")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument(
        "--ep",
        type=int,
        default=1,
        help="expert-parallel degree of a MoE model (default 1): the experts split over ep GPUs, ep/tp "
        "data-parallel ranks each carrying this step (a scenario's cluster.expert_parallel)",
    )
    p.add_argument(
        "--all2all-backend",
        choices=["allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency"],
        default="allgather_reducescatter",
        help="how expert parallelism's data-parallel ranks exchange tokens (vLLM --all2all-backend; a "
        "scenario's cluster.all2all_backend): DeepEP's kernels need --ep above --tp, at --tp 1",
    )
    p.add_argument(
        "--dual-batch-overlap",
        action="store_true",
        help="vLLM --enable-dbo (with a DeepEP backend): a step above its thresholds runs as two micro-batches",
    )
    p.add_argument("--prefill-tokens", type=int, default=0, help="prompt tokens prefilled in the step (one sequence)")
    p.add_argument("--decode-batch", type=int, default=0, help="sequences decoding one token each")
    p.add_argument("--context", type=int, default=1024, help="cached tokens of each decoding sequence")
    p.add_argument("--weight-dtype", default=None, help="weight dtype (default: the model's)")
    p.add_argument("--kv-dtype", default=None, help="KV cache dtype (default: the checkpoint's, else bf16)")
    p.add_argument(
        "--act-dtype",
        default=None,
        help="activation/compute dtype (fp8 for W8A8; default: the checkpoint's where the device computes in it, else bf16)",
    )
    p.add_argument("--attention-kernel", choices=["flash", "naive"], default="flash")
    p.add_argument(
        "--engine",
        default="ideal",
        help="engine preset or engine profile (.yaml) whose host terms, CUDA graphs and kernel choices price the "
        "step (default ideal: the hardware alone; vllm-v1 as `llmsim run` uses it, e.g. its fp8 attention over an "
        "fp8 KV cache)",
    )
    p.add_argument(
        "--out",
        default="roofline.png",
        help="chart path (.png, .svg or .pdf; default ./roofline.png, written with --json and --quiet too); '-' for none",
    )
    p.add_argument("--json", action="store_true", help="print JSON: the step, every op's figures, the overheads")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="print nothing but errors and what --json asks for (the chart is still written)",
    )
    p.set_defaults(func=cmd_roofline)


# A step's context per sequence: no model llmsim prices reads more than ~10M cached tokens
MAX_CONTEXT = 2**24


def checkpoint_dtypes(args: argparse.Namespace, model: ModelSpec, hw: HardwareProfile) -> None:
    """--act-dtype and --kv-dtype left unset: a quantised checkpoint's own (its quantization_config,
    as `llmsim run` takes them: scenario.apply_checkpoint), the compute dtype only where the device
    has those units and the weights are the checkpoint's; else bf16."""
    if args.act_dtype is None:
        args.act_dtype = model.checkpoint_compute(args.weight_dtype, [hw]) or "bf16"
    if args.kv_dtype is None:
        args.kv_dtype = model.checkpoint_kv_dtype or "bf16"


def check_sizes(args: argparse.Namespace) -> None:
    """Every size >= 0 and within the scenario's own bounds (llmsim/scenario.py): the decode batch
    is materialised as one context per sequence, so 10**12 sequences would exhaust memory."""
    from llmsim.scenario import MAX_SEQS, MAX_STEP_TOKENS

    limits = [
        ("--prefill-tokens", args.prefill_tokens, MAX_STEP_TOKENS, "the bound on policy.max_batch_tokens"),
        ("--decode-batch", args.decode_batch, MAX_SEQS, "the bound on policy.max_num_seqs"),
        ("--context", args.context, MAX_CONTEXT, "above any model's context length"),
    ]
    for flag, value, limit, why in limits:
        if value < 0:
            raise UserError(f"{flag} {value}: must be >= 0")
        if value > limit:
            raise UserError(f"{flag} {value}: must be at most {limit:,} ({why})")


def check_step(args: argparse.Namespace, model: ModelSpec, hw: HardwareProfile) -> None:
    """The step must be one the devices can run: TP splits the heads as a scenario's must
    (``build.check_parallelism``), the dtypes exist and the device computes in ``--act-dtype``,
    no sequence is longer than the model's context, and one device holds its share of the weights."""
    from llmsim.build import check_parallelism

    if args.tp < 1:
        raise UserError(f"--tp {args.tp}: must be >= 1 (the devices the step's tensors are split over)")
    if args.ep != 1:  # the rules of build.expert_parallel_degree, with ep given instead of replicas x tp
        if not model.is_moe:
            raise UserError(f"--ep {args.ep}: {model.name} is a dense model (no experts to split); drop --ep")
        if args.ep < 1 or args.ep % args.tp or model.num_experts % args.ep:
            raise UserError(
                f"--ep {args.ep}: must be a multiple of --tp {args.tp} (ep = data-parallel ranks x tp) that "
                f"divides the {model.num_experts} experts of {model.name} (vLLM gives the first ranks of an uneven "
                "split one expert more, which llmsim does not model)"
            )
    from llmsim.costmodel.comm import deepep_refusal

    deepep = args.all2all_backend != "allgather_reducescatter"
    flag = f"--all2all-backend {args.all2all_backend}"
    if deepep and args.ep <= args.tp:
        raise UserError(f"{flag}: DeepEP moves tokens between data-parallel ranks: give --ep above --tp ({args.tp})")
    why = deepep_refusal(args.tp, hw) if deepep else None
    if why:
        raise UserError(f"{flag}: {why}")
    if args.dual_batch_overlap and not deepep:
        raise UserError("--dual-batch-overlap: vLLM runs it with DeepEP only; give --all2all-backend deepep_...")
    try:
        check_parallelism(model, args.tp, 1, "cluster", args.ep > 1)
    except UserError as exc:  # the same rule, worded for the flag: "cluster.tp: tensor ..." -> "--tp 3: tensor ..."
        raise UserError(f"--tp {args.tp}: {str(exc).split(': ', 1)[1]}") from None
    from typing import get_args

    from llmsim.scenario import Dtype, KVCacheConfig, ModelConfig

    # the values a scenario takes for each (DTYPE_BYTES also names storage-only formats: mxfp4)
    allowed = {
        "weight_dtype": get_args(Dtype),
        "kv_dtype": get_args(KVCacheConfig.model_fields["dtype"].annotation),
        "act_dtype": get_args(ModelConfig.model_fields["act_dtype"].annotation),
    }
    for flag in ("weight_dtype", "kv_dtype", "act_dtype"):
        value = getattr(args, flag) or model.weight_dtype
        if value not in allowed[flag]:
            raise UserError(f"--{flag.replace('_', '-')} {value!r}: expected one of {sorted(allowed[flag])}")
    if not hw.computes_in(args.act_dtype):
        raise UserError(
            f"--act-dtype {args.act_dtype}: {hw.name} has no {args.act_dtype} matmul units (peaks for "
            f"{', '.join(hw.peak_flops)}); use --weight-dtype {args.act_dtype} for weight-only quantisation"
        )
    limit = model.max_position_embeddings  # what a scenario's policy.max_model_len defaults to
    for flag, tokens in (
        ("--prefill-tokens", args.prefill_tokens),
        ("--context", args.context if args.decode_batch else 0),
    ):
        if tokens > limit:
            raise UserError(
                f"{flag} {tokens}: longer than the context of {model.name} ({limit:,} tokens, max_position_embeddings)"
            )
    weights = model.weight_bytes_per_device(args.weight_dtype or model.weight_dtype, args.tp, 1, args.ep)
    if weights > hw.memory_bytes:
        raise UserError(
            f"--model {args.model} does not fit on {hw.name} at --tp {args.tp}{f' --ep {args.ep}' if args.ep > 1 else ''}: "
            "its weights need "
            f"{weights / 1e9:.1f} GB per device, the device holds {hw.memory_bytes / 1e9:.1f} GB; raise --tp, "
            "quantise the weights (--weight-dtype) or pick a larger device"
        )


CHART_SUFFIXES = (".png", ".svg", ".pdf")


def check_chart_path(out: str) -> Path | None:
    """``--out`` as a chart file that can be written, checked before any work: matplotlib would
    append .png to a name without a suffix (so the file written is not the one named) and fail
    late, with a traceback, on a folder or an unknown suffix."""
    if out == "-":
        return None
    path = Path(out)
    if path.is_dir():
        raise UserError(f"--out {out}: is a directory, expected a chart file path")
    if path.suffix.lower() not in CHART_SUFFIXES:
        raise UserError(f"--out {out}: expected a chart file ending in {', '.join(CHART_SUFFIXES)}, or '-' for none")
    from llmsim.commands.calibrate import check_out_parent

    check_out_parent(path)
    return path


def engine_arg(name: str, hw: HardwareProfile) -> EngineSpec:
    """``--engine``: a preset or an engine profile file, as it runs on ``hw`` (engine.for_hardware)."""
    from llmsim.engine import PRESETS, for_hardware, load_engine

    if name not in PRESETS and not name.endswith((".yaml", ".yml")):
        raise UserError(f"--engine {name!r}: expected one of {', '.join(PRESETS)}, or an engine profile (.yaml)")
    return for_hardware(load_engine(name, Path.cwd(), "--engine"), hw, f"--engine {name}")


def cmd_roofline(args: argparse.Namespace) -> int:
    from llmsim.build import fp8_attention, graphs_off_for_deepep
    from llmsim.commands.models import model_arg
    from llmsim.costmodel.ops import model_batch_shape
    from llmsim.costmodel.roofline import CostConfig, CostModel
    from llmsim.hardware import load_profile

    check_sizes(args)
    if args.prefill_tokens == 0 and args.decode_batch == 0:
        raise UserError("nothing to price: give --prefill-tokens and/or --decode-batch")
    chart_path = check_chart_path(args.out)
    model, hw = model_arg(args.model), load_profile(args.hardware)
    checkpoint_dtypes(args, model, hw)
    check_step(args, model, hw)
    engine = engine_arg(args.engine, hw)
    cfg = CostConfig(
        tp=args.tp,
        ep=args.ep,
        weight_dtype=args.weight_dtype or model.weight_dtype,
        kv_dtype=args.kv_dtype,
        act_dtype=args.act_dtype,
        attention_kernel=args.attention_kernel,
        # (vLLM turns CUDA graphs off under DeepEP's normal kernels, as build does for a run)
        cuda_graphs=bool(engine.cuda_graphs) and not graphs_off_for_deepep(args.all2all_backend, args.ep, args.tp),
        cuda_graph_sizes=engine.cuda_graph_sizes,
        cuda_graph_padding=engine.cuda_graph_padding,
        cuda_graph_decode_only=engine.cuda_graph_decode_only,
        fp8_attention=fp8_attention(engine, hw, model),
        all2all_backend=args.all2all_backend,
        dual_batch_overlap=args.dual_batch_overlap,
    )
    cm = CostModel(model, hw, cfg, engine)
    chunks = [(args.prefill_tokens, 0)] if args.prefill_tokens else []
    shape = model_batch_shape(model, chunks, [args.context] * args.decode_batch)
    rows = op_rows(cm, shape)
    step = cm.step_time(shape)
    overheads = {k: v for k, v in cm.breakdown(shape).items() if k in _OVERHEADS and v}
    chart = None
    if chart_path is not None:
        chart = save_chart(cm, rows, chart_path, f"{model.name} on {hw.name} (tp={args.tp})")
    say = printer(args.quiet)
    if args.json:
        print(to_json(step_json(args, model.name, hw.name, step, rows, overheads, chart, model.weight_dtype)))
        return 0
    parts = [f"prefill {args.prefill_tokens} tokens"] if args.prefill_tokens else []
    parts += [f"decode {args.decode_batch} x context {args.context}"] if args.decode_batch else []
    by = f" under {args.engine}" if args.engine != "ideal" else ""  # (the default says nothing, as before)
    weights = args.weight_dtype or model.weight_dtype
    dtypes = f"{weights} weights, {args.act_dtype} compute, {args.kv_dtype} KV"
    say(
        f"{model.name} on {hw.name} tp={args.tp}{f' ep={args.ep}' if args.ep > 1 else ''}{by} ({dtypes}): "
        f"{' + '.join(parts)}; step {step * 1e3:.3f} ms"
    )
    say(table([op_cells(r, step) for r in rows], ["op", "calls", "GFLOP", "MB", "FLOP/B", "bound", "time us", "share"]))
    for k, v in overheads.items():
        say(f"{k:24s} {v * 1e6:10.1f} us  {v / step:6.1%}")
    if chart is not None:
        say(f"wrote {chart}")
    return 0


def op_cells(r: dict, step: float) -> list:
    """One op's table row (``op_rows`` entry, formatted)."""
    return [
        r["op"],
        r["count"],
        f"{r['gflops']:.3g}",
        f"{r['mbytes']:.3g}",
        f"{r['intensity']:.3g}",
        r["bound"],
        f"{r['time_s'] * 1e6:.1f}",
        f"{r['time_s'] / step:.1%}",
    ]


def step_json(
    args: argparse.Namespace,
    model: str,
    hw: str,
    step: float,
    rows: list[dict],
    overheads: dict,
    chart: Path | None,
    weight_dtype: str = "",
) -> dict:
    """The table's figures, unrounded, in SI units (an op that moves no bytes has intensity null)."""
    ops = [
        {
            "op": r["op"],
            "kind": r["kind"],
            "calls": r["count"],
            "flops": r["flops"],
            "bytes": r["bytes"],
            "intensity_flop_per_byte": r["intensity"],
            "bound": r["bound"],
            "time_s": r["time_s"],
            "compute_s": r["compute_s"],
            "memory_s": r["memory_s"],
            "share": r["time_s"] / step,
        }
        for r in rows
    ]
    return {
        "model": model,
        "hardware": hw,
        "tp": args.tp,
        "engine": args.engine,
        "prefill_tokens": args.prefill_tokens,
        "decode_batch": args.decode_batch,
        "context_tokens": args.context,
        "weight_dtype": args.weight_dtype or weight_dtype,
        "act_dtype": args.act_dtype,
        "kv_dtype": args.kv_dtype,
        "step_s": step,
        "ops": ops,
        "overheads": {k: {"time_s": v, "share": v / step} for k, v in overheads.items()},
        "chart": str(chart) if chart is not None else None,
    }


_OVERHEADS = (
    "kernel_launch_overhead",
    "kernel_fixed_latency",
    "pp_send",
    "step_overhead",
    "cuda_graph_padding",  # a decode batch padded up to its captured size (engine.cuda_graph_sizes)
    "dual_batch_overlap",  # what splitting the step into two micro-batches changes it by (negative: hidden transfers)
    # an engine's host terms (EngineSpec.host_breakdown) and the part of them async scheduling hides
    "engine_schedule",
    "engine_prepare",
    "engine_output",
    "engine_batch_change",
    "engine_async_overlap",
)


def op_rows(cm: object, shape: object) -> list[dict]:
    """One row per op name (summed over its calls): FLOPs, bytes, intensity, bound and time."""
    merged: dict[str, dict] = {}
    for t in cm.priced(shape):  # type: ignore[attr-defined]
        r = merged.setdefault(
            t.op.name,
            {
                "op": t.op.name,
                "count": 0,
                "flops": 0.0,
                "bytes": 0.0,
                "time_s": 0.0,
                "compute_s": 0.0,
                "memory_s": 0.0,
                "kind": t.op.kind,
            },
        )
        n = t.op.count
        r["count"] += n
        r["flops"] += t.op.flops * n
        r["bytes"] += t.op.bytes * n
        r["time_s"] += max(t.compute_s, t.memory_s) * n
        r["compute_s"] += t.compute_s * n
        r["memory_s"] += t.memory_s * n
    for r in merged.values():
        r["gflops"], r["mbytes"] = r["flops"] / 1e9, r["bytes"] / 1e6
        r["intensity"] = r["flops"] / r["bytes"] if r["bytes"] else float("inf")
        r["bound"] = "network" if r["kind"] == "comm" else ("compute" if r["compute_s"] >= r["memory_s"] else "memory")
    return list(merged.values())


def save_chart(cm: object, rows: list[dict], path: Path, title: str) -> Path:
    """Ops as points (intensity, achieved FLOP/s) under the device's peak and bandwidth ceilings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    hw = cm.hw  # type: ignore[attr-defined]
    peak = hw.peak(cm.cfg.act_dtype)  # type: ignore[attr-defined]
    bw = hw.bandwidth
    x = np.logspace(-1, 4, 200)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.loglog(x, np.minimum(peak, x * bw), "k-", label=f"datasheet: {peak / 1e12:.0f} TFLOP/s, {bw / 1e12:.2f} TB/s")
    achievable = np.minimum(
        peak * hw.efficiency.gemm_fraction(cm.cfg.act_dtype), x * bw * hw.efficiency.memory_fraction.value
    )
    ax.loglog(x, achievable, "k--", label="achievable (profile efficiencies)")
    for r in rows:
        if r["kind"] == "comm" or not r["flops"] or not r["time_s"]:
            continue
        ax.scatter(r["intensity"], r["flops"] / r["time_s"], s=30)
        ax.annotate(
            r["op"], (r["intensity"], r["flops"] / r["time_s"]), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s (predicted)")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    try:  # written whole or not at all: a full disk or a read-only folder leaves no half a PNG
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, bbox_inches="tight", format=path.suffix[1:].lower()))
    except OSError as exc:
        raise UserError(f"--out {path}: could not write the chart ({os_reason(exc)})") from None
    finally:
        plt.close(fig)
    return path
