"""``llmsim bench``: a ``vllm serve`` deployment under a ``vllm bench serve`` run, given as the two
command lines (llmsim/vllmcli.py), printed as the benchmark prints its result; with ``--result``
(the real run's saved file or printout, llmsim/vllmresult.py) its figures are set beside llmsim's,
and a detailed file's requests replayed."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim.errors import UserError
    from llmsim.results import Results, ServerCache
    from llmsim.scenario import Scenario
    from llmsim.vllmcli import Bench, Serve
    from llmsim.vllmresult import Result

# the settings a detailed result's own requests stand in for
REQUEST_SETTINGS = ("dataset_name", "random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len")


def add_parser(sub: argparse._SubParsersAction) -> None:
    from llmsim.commands.run import add_set_option

    p = sub.add_parser(
        "bench",
        help="simulate `vllm serve` under `vllm bench serve`, given as their command lines; print its result",
        description=(
            "Translate a `vllm serve` command and a `vllm bench serve` command into a scenario, simulate "
            "it and print the result as vllm bench serve prints its own. With --result, the real run (the "
            "file vllm bench serve --save-result wrote, or its console printout) is compared, and a "
            "--save-detailed file's very requests are replayed. docs/scenario.md, '`llmsim bench`'."
        ),
    )
    p.add_argument("--hardware", required=True, help="the GPU's hardware profile (`llmsim hardware` lists them)")
    p.add_argument("--serve", required=True, metavar="'vllm serve MODEL ...'", help="the server's command line")
    p.add_argument(
        "--bench", metavar="'vllm bench serve ...'", help="the benchmark's command line (default: its defaults)"
    )
    p.add_argument(
        "--result",
        metavar="FILE",
        help="the real run to compare with: vllm bench serve --save-result's JSON, or the benchmark's console printout",
    )
    p.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="'vllm bench serve ...'",
        help=(
            "an earlier `vllm bench serve` run against the same server, whose prompts stay in its prefix "
            "cache (repeatable, oldest first): the random dataset's prompts repeat with their --seed"
        ),
    )
    add_set_option(
        p,
        "override a key of the translated scenario, e.g. --set cluster.expert_routing_exponent=1 "
        "(repeatable; with --after, of every run)",
    )
    p.add_argument("--scenario-out", metavar="FILE.yaml", help="also write the translated scenario (for `llmsim run`)")
    p.add_argument("--json", action="store_true", help="print summary.json (with a `compared` list) and nothing else")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors and what --json asks for")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    import tempfile

    from llmsim import vllmcli, vllmresult
    from llmsim.commands.run import moe_jit_line, parse_overrides
    from llmsim.errors import UserError
    from llmsim.hardware import load_profile
    from llmsim.scenario import with_overrides

    for name in ("result", "scenario_out"):
        if getattr(args, name) == "":
            raise UserError(f"--{name.replace('_', '-')} '': expected a path")
    family = load_profile(args.hardware).family
    if family != "gpu":  # (named before anything else is read)
        backend = {"cpu": "vLLM's CPU backend", "tpu": "a TPU"}.get(family, family)
        raise UserError(
            f"--hardware {args.hardware}: not a GPU; llmsim bench reads vLLM's GPU serving flags (for {backend}, "
            "write a scenario: docs/scenario.md)"
        )
    out = Path(args.scenario_out) if args.scenario_out else None
    if out is not None:
        check_scenario_out(out, Path(args.result) if args.result else None)
    serve = vllmcli.parse_serve(args.serve)
    if args.bench is not None and not args.bench.strip():  # (an unset shell variable: not vllm's defaults)
        raise UserError(
            f"--bench {args.bench!r}: an empty command line (leave --bench out for vllm bench serve's defaults)"
        )
    bench, bench_model = vllmcli.parse_bench(args.bench or "")
    check_same_model("--bench --model", bench_model, serve)
    overrides = parse_overrides(args.set)
    if isinstance(overrides.get("cluster.expert_parallel"), bool):  # (as --enable-expert-parallel: the rules
        serve = replace(serve, expert_parallel=overrides["cluster.expert_parallel"])  # that read it see it)
    typed = " ".join([args.serve, args.bench or "", *args.after])  # (the flags the user gave, to blame)
    owned = [
        k for k in overrides if k == "model" or k.startswith("model.") and k.split(".")[1] in ("name", "hf_config")
    ]
    if owned:  # (the header names --serve's model: a --set one would be simulated under its name)
        raise UserError(f"--set {owned[0]}: the served model is --serve's (vllm serve MODEL); name it there")
    result = vllmresult.load_result(args.result) if args.result else None
    if result is not None:
        check_same_model(str(result.path), result.model_id, serve)
        bench = vllmcli.with_settings(bench, result.settings, str(result.path))
        vllmcli.check_lengths(result, bench)
    slo_keys = [k for k in overrides if k == "slo" or k.startswith("slo.")]
    if bench.goodput and slo_keys:  # (the printout's goodput line would be --set's, read as vLLM's)
        raise UserError(
            f"--set {slo_keys[0]}: the run's --goodput sets the SLOs its request goodput counts; give them there"
        )
    earlier = [earlier_run(text, serve, after_label(k, len(args.after))) for k, text in enumerate(args.after, 1)]
    if earlier:
        check_history(bench, result, out)
    with tempfile.TemporaryDirectory(prefix="llmsim-bench-") as tmp:
        trace = None
        if result is not None and result.sent is not None:
            trace = Path(tmp) / "requests.csv"
            write_trace(trace, vllmcli.sent_requests(result, bench))
        translated = vllmcli.scenario_dict(args.hardware, serve, bench, trace_csv=str(trace) if trace else None)
        if result is not None:  # every percentile the real run reports, compared
            translated["output"]["percentiles"] = sorted({*bench.metric_percentiles, *result.percentiles()})
        set_keys = frozenset(overrides)
        auto_len = serve.max_model_len == vllmcli.MAX_MODEL_LEN_AUTO and "policy.max_model_len" not in set_keys
        data = with_overrides(translated, overrides)
        no_content = vllmcli.settle_prompts(data, set_keys)  # (on the scenario as --set left it)
        # every run's scenario is read and checked before any is simulated
        runs = []
        for k, b in enumerate(earlier, 1):
            label = after_label(k, len(earlier))
            before = with_overrides(vllmcli.scenario_dict(args.hardware, serve, b), overrides)
            why = vllmcli.settle_prompts(before, set_keys)
            runs.append(EarlierRun(b, label, translate(before, label, set_keys, typed, auto_len), why))
        sc = translate(data, "--bench", set_keys, typed, auto_len)
        if serve.ray_v1 and sc.engine_spec.async_scheduling:
            raise UserError(
                "--set engine.async_scheduling: vLLM's first ray executor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0) "
                "cannot schedule asynchronously; vLLM turns it off there and refuses --async-scheduling"
            )
        if sc.policy.max_model_len is not None:  # (--max-model-len auto: as fitted, in the scenario written)
            data["policy"]["max_model_len"] = sc.policy.max_model_len
        skipped = why_history_skipped(sc, no_content) if earlier else None
        # a MoE server's earlier runs compiled its fused-MoE kernels (moejit.py), whatever its prefix cache
        kernels = skipped is not None and tracks_kernels(sc)  # (they leave kernels all the same)
        cache = None  # the server's prefix caches and compiled kernels, run after run
        if skipped is None or kernels:
            for h in runs:
                res = simulate(h.scenario, cache, keep=True)
                cache, h.summary = res.server_cache, res.summary
        summary = simulate(sc, cache).summary
        if earlier:
            summary["history"] = history_summary(runs, None if kernels else skipped)
        if out is not None:
            write_scenario_files(out, data, trace)
    compared = vllmresult.comparison_rows(summary, result.figures) if result is not None else []
    if args.json:
        from llmsim.progress import to_json

        print(to_json({**summary, "compared": compared}))
        return 0
    if args.quiet:
        return 0
    # the percentiles and rate the run was given (a --set that changes them shows)
    set_percentiles = sc.output.percentiles != translated["output"]["percentiles"]
    percentiles = sc.output.percentiles if set_percentiles else bench.metric_percentiles
    rate = (
        None if sc.workload.kind == "all_at_once" else bench.request_rate if trace is not None else sc.workload.rate_rps
    )
    exponent = translated["cluster"].get("expert_routing_exponent", 1.0)
    print(notes(sc, serve, bench, result, exponent, no_content, auto_len), end="")
    if earlier:
        print(history_note(runs, skipped, summary, set_keys, kernels))
    print()
    print(vllmresult.result_block(summary, bench.percentile_metrics, percentiles, rate, sc.workload.max_concurrency))
    if result is not None and compared:
        print("\n" + vllmresult.comparison_table(compared, result.path))
    from llmsim.accuracy import interval_line

    jit = moe_jit_line(summary, served_before=bool(earlier))
    if jit:
        print(f"\nkernels  {jit}")
    print(f"\naccuracy {interval_line(summary.get('accuracy'), summary.get('accuracy_like'))}")
    print(f"verdict  {summary['saturation']['verdict'].upper()}: {summary['saturation']['explanation']}")
    return 0


def routing_note(exponent: float, translated: float, bench: Bench, result: Result | None) -> str:
    """How a MoE model's tokens reach its experts, and why (docs/validation.md, "vLLM 0.30 GPU runs");
    a second line indented as the notes' continuations are."""
    from llmsim.vllmcli import DUMMY_WEIGHTS_NOTE

    key = f"cluster.expert_routing_exponent {exponent:.10g}"
    if exponent != translated:
        return f"{key} (--set)"
    if exponent == 0.0:
        return f"{key}: {DUMMY_WEIGHTS_NOTE}"
    if exponent != 1.0:
        return (
            f"{key}: vllm bench's random-token prompts route alike\n         (fitted to another MoE's "
            "decode steps; docs/validation.md); --set cluster.expert_routing_exponent=1 for independent routing"
        )
    if bench.dataset_name == "random" and result is not None and result.sent is not None:
        return (
            f"{key}, independent: {result.path} does not say which dataset its requests came from\n"
            "         (for vllm bench's random dataset, whose tokens route alike: --bench '--dataset-name random')"
        )
    return f"{key}, independent (--dataset-name {bench.dataset_name}: its routing is not measured)"


def check_same_model(where: str, model_id: str | None, serve: Serve) -> None:
    """A run named for a model (a result's model_id, --bench --model) is of the model served: where
    the name is a catalog model, it is --serve's (or one of its --served-model-name)."""
    from llmsim.errors import UserError
    from llmsim.vllmcli import model_entry

    if model_id is None or model_id in (serve.model, *serve.served_names):
        return
    try:
        theirs = model_entry(model_id)[0]
    except UserError:
        return  # (a path on the machine that ran it, or a model llmsim does not know: nothing to compare)
    if theirs != model_entry(serve.model)[0]:
        raise UserError(f"{where}: the run is of {model_id}, where --serve serves {serve.model}")


def check_scenario_out(path: Path, result: Path | None) -> None:
    """--scenario-out names a YAML file whose folder can be made, its requests' file beside it too,
    neither of them the --result file read (checked before simulating)."""
    from llmsim.commands.calibrate import check_out_parent
    from llmsim.errors import UserError

    for p in (path, requests_path(path)):
        if p.is_dir():
            raise UserError(f"--scenario-out {path}: {p} is a directory, expected a file path")
        if result is not None and p.exists() and result.exists() and p.samefile(result):
            raise UserError(f"--scenario-out {path}: would overwrite the --result file {result}")
    if path.suffix not in (".yaml", ".yml"):
        raise UserError(f"--scenario-out {path}: expected a path ending in .yaml or .yml (what `llmsim run` reads)")
    check_out_parent(path, "--scenario-out")


def requests_path(path: Path) -> Path:
    return path.with_name(path.stem + ".requests.csv")


def after_label(k: int, n: int) -> str:
    """How an --after run is named in a message: by its place where there are several."""
    return "--after" if n == 1 else f"--after #{k}"


def earlier_run(text: str, serve: Serve, label: str) -> Bench:
    """An --after run: a `vllm bench serve` command line of the random or sharegpt dataset, of the model served."""
    from llmsim.errors import UserError
    from llmsim.vllmcli import parse_bench

    if not text.strip():
        raise UserError(
            f"{label} {text!r}: an empty command line (a run of vllm bench serve's defaults is "
            f"{label} 'vllm bench serve')"
        )
    bench, model = parse_bench(text, label)
    check_same_model(f"{label} --model", model, serve)
    check_random_dataset(label, bench)
    return bench


def check_random_dataset(where: str, bench: Bench) -> None:
    """A run of a server's history (--after, or the --bench after them) draws prompts whose content
    llmsim knows as vLLM's: the random dataset's (it repeats with the seed) or a ShareGPT or custom
    sample's (its token ids). prefix_repetition's prefixes are named, not drawn: a run of another seed would
    match them where vLLM's differ."""
    from llmsim.errors import UserError, cut

    if bench.dataset_name not in ("random", "sharegpt", "custom"):
        raise UserError(
            f"{where} --dataset-name {cut(bench.dataset_name)}: a server's history is replayed for the random, "
            "sharegpt and custom datasets only, whose prompts' content llmsim draws as vLLM does"
        )


@dataclass
class EarlierRun:
    """An --after run: its command line's settings, label, translated scenario, why its prompts carry
    no content (None: they do), and its summary once simulated."""

    bench: Bench
    label: str
    scenario: Scenario
    no_content: str | None
    summary: dict | None = None


def why_history_skipped(sc: Scenario, no_content: str | None) -> str | None:
    """Why earlier runs would leave this run nothing to find (and are not simulated), or None."""
    if not sc.kv_cache.prefix_caching:
        return "the prefix cache is off"
    if sc.workload.prompts != "vllm_bench" and sc.workload.dataset is None:  # (a dataset's carry their token ids)
        return f"this run's prompts carry no content ({no_content or 'workload.prompts llmsim'})"
    return None


def tracks_kernels(sc: Scenario) -> bool:
    """Does a run of ``sc`` compile fused-MoE kernels that an earlier run would leave (moejit.py)?"""
    from llmsim.build import build_model, build_pools

    return sc.engine_spec.moe_jit_compile_s > 0 and any(p.moe_jit is not None for p in build_pools(sc, build_model(sc)))


def history_note(
    runs: list[EarlierRun], skipped: str | None, summary: dict, set_keys: frozenset[str], kernels: bool = False
) -> str:
    """The printout's lines on the --after runs: what this run found cached, what each earlier run
    could not leave, and the flags they named that change no timing or that --set replaced
    (``kernels``: they were simulated for the MoE kernels they compiled, moejit.py)."""
    n = len(runs)
    what = f"{n} earlier run{'s' * (n > 1)} on the server (--after)"
    they = "they leave" if n > 1 else "it leaves"
    if skipped is not None and not kernels:
        return f"history  {what} not simulated: {skipped}, so {they} nothing this run could find"
    if skipped is not None:
        return (
            f"history  {what}, simulated first for the fused-MoE kernels {'they' if n > 1 else 'it'} compiled; "
            f"{skipped}, so {they} no prompt this run could find"
        )
    hit = summary.get("prefix_cache", {}).get("hit_rate", 0.0)
    lines = [
        f"history  {what}, simulated first: {hit:.1%} of this run's prompt tokens found cached (theirs or its own)"
    ]
    for h in runs:
        if h.no_content is not None:
            lines.append(f"         {h.label}: no content, the cache after it taken as empty ({h.no_content})")
        done, sent = (h.summary or {}).get("completed", 0), h.scenario.workload.num_requests
        if sent and done < sent:
            lines.append(f"         {h.label}: {done:,} of its {sent:,} requests finished")
    ignored = sorted({flag for h in runs for flag in h.bench.ignored})
    if ignored:
        lines.append(f"         ignored there: {', '.join(ignored)}")
    replaced = sorted(k for k in set_keys if k == "seed" or k.startswith("workload."))
    if replaced:
        lines.append(f"         --set {', '.join(replaced)}: applied to them too")
    return "\n".join(lines)


def history_summary(runs: list[EarlierRun], skipped: str | None) -> dict:
    """summary.json's ``history`` (--json): each --after run's requests and prefix-cache hit rate."""
    return {
        "not_simulated": skipped,
        "runs": [
            {
                "run": h.label,
                "requests": h.scenario.workload.num_requests,
                "completed": None if h.summary is None else h.summary.get("completed"),
                "prefix_cache_hit_rate": None
                if h.summary is None
                else h.summary.get("prefix_cache", {}).get("hit_rate"),
                "prompts_without_content": h.no_content,
            }
            for h in runs
        ],
    }


def check_history(bench: Bench, result: Result | None, out: Path | None) -> None:
    """--after needs prompts whose content llmsim draws (the random or sharegpt dataset's) and a
    result that says nothing of them; a scenario file cannot carry a server's history."""
    from llmsim.errors import UserError

    if result is not None and result.sent is not None:
        raise UserError(
            f"--after: the requests replayed from {result.path} carry no prompt content to match the earlier "
            "runs' (give the run's random-dataset flags in --bench and its printout or a file saved without "
            "--save-detailed as --result)"
        )
    check_random_dataset("--after: --bench", bench)
    if out is not None:
        raise UserError(
            "--scenario-out with --after: a scenario cannot carry the server's history (`llmsim run` starts on a "
            "cold cache); write it without --after"
        )


def _named(exc: UserError, set_keys: frozenset[str] = frozenset(), typed: str = "") -> UserError:
    """The error, with where the first scenario key it names came from ("cluster.tp: ...",
    "policy.x 100 ..."): the --set item that set it or a section above it, else the flag the
    command lines ``typed`` give for the first key it names; none where no flag given set one (a
    default, or a --result file's own setting, is not the user's doing)."""
    import re

    from llmsim.errors import UserError
    from llmsim.vllmcli import KEY_FLAGS

    text = str(exc)

    def at(key: str) -> int | None:  # (a key as a key: "policy.x: ", not inside "(seed 0)")
        m = re.search(rf"(?<![\w.(]){re.escape(key)}[:. ]", text)
        return m.start() if m else None

    by_set = sorted((i, k) for k in set_keys if (i := at(k)) is not None)
    if by_set:
        return UserError(f"{text} (from --set {by_set[0][1]})")
    found = sorted(
        (not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", typed), i, f)
        for k, f in KEY_FLAGS.items()
        if (i := at(k)) is not None
    )
    typed_first = found[0] if found and not found[0][0] else None  # (a flag not given set nothing: a default did)
    return UserError(text + (f" (from {typed_first[2]})" if typed_first else ""))


def translate(
    data: dict, label: str, set_keys: frozenset[str] = frozenset(), typed: str = "", auto_len: bool = False
) -> Scenario:
    """The translated scenario of the run ``label`` names (--bench, --after #k), read and checked
    without simulating: a key it refuses is named with the flag it came from; a token budget below
    the sequences it must hold is refused, as vLLM does, and so is a KV cache that cannot hold one
    request of max_model_len tokens (``kv_start``; ``auto_len``: --max-model-len auto, which fits the
    length to the cache instead)."""
    from llmsim.build import check_workload_bounds
    from llmsim.engine import is_trtllm
    from llmsim.errors import UserError
    from llmsim.scenario import scenario_from_dict

    try:
        origin = f"the scenario made of --serve/{label}/--set"
        sc = scenario_from_dict(data, origin, Path.cwd())
        if is_trtllm(sc.engine_spec):
            raise UserError(
                f"{origin}: engine: {sc.engine_spec.name} runs as TensorRT-LLM, and llmsim bench simulates "
                "vllm serve; write a scenario with engine: trtllm (1.x) or trtllm-engine (0.x behind Triton) and run it "
                "with llmsim run"
            )
        budget, seqs = sc.policy.chunk_tokens, sc.policy.max_num_seqs
        if budget < seqs:
            raise UserError(
                f"policy.chunk_tokens {budget} is below policy.max_num_seqs {seqs} (each vLLM's default for this GPU "
                "unless --max-num-batched-tokens / --max-num-seqs says): vLLM refuses a token budget below its sequences"
            )
        check_workload_bounds(sc)
        start = kv_start(sc, auto_len, "policy.max_model_len" in set_keys)
        if start.refusal:
            raise UserError(start.refusal)
        if start.fitted is not None:  # (--max-model-len auto: the length vLLM's start-up fitted to the cache)
            data = {**data, "policy": {**data.get("policy", {}), "max_model_len": start.fitted}}
            sc = scenario_from_dict(data, origin, Path.cwd())
        return sc
    except UserError as exc:
        raise _named(exc, set_keys, typed) from None


# llmsim's KV capacity from memory is within 10 % of the capacity vLLM logged on 38 of the 43 vLLM
# 0.30 passes (docs/validation.md, "vLLM 0.30 GPU runs"): an estimate short of one request by less
# than this is said, not refused as vLLM refuses its own measure
KV_ESTIMATE_BAND = 0.10


@dataclass
class KvStart:
    """What vLLM's start-up check of its KV cache makes of a server (``kv_start``)."""

    fitted: int | None = None  # --max-model-len auto: the length fitted, where below the model's
    refusal: str | None = None  # the server would not start
    note: str | None = None  # short of one request by less than llmsim's estimate can tell


def kv_start(sc: Scenario, auto_len: bool, len_set: bool = False) -> KvStart:
    """vLLM's start-up check of its KV cache (check_enough_kv_cache_memory, vllm/v1/core/
    kv_cache_utils.py, 0.19-0.32): the cache its memory profile leaves, less the null block, must
    hold one request of max_model_len tokens, or `vllm serve` stops ("To serve at least one request
    with the models's max seq len ..."); --num-gpu-blocks-override applies after it. With
    --max-model-len auto the length is fitted to that cache instead (_auto_fit_max_model_len). The
    cache is llmsim's estimate of vLLM's (``KV_ESTIMATE_BAND``). Not checked for a model with
    sliding-window layers, whose need vLLM counts by layer kind (their window) and llmsim does not.
    ``len_set``: the length came from --set policy.max_model_len (the message names that)."""
    from llmsim.build import build_model, build_pools, max_model_len
    from llmsim.errors import UserError

    try:
        model = build_model(sc)
        window, local = model.attention_windows()
        if window is not None or (local is not None and not model.is_dsa):
            if auto_len:  # (a fit on llmsim's count would claim a context the cache cannot hold)
                return KvStart(
                    refusal="--max-model-len auto: not fitted for a model with sliding-window layers (vLLM counts "
                    "their KV need by layer kind, llmsim does not); give --max-model-len a length"
                )
            return KvStart()
        pool = build_pools(sc, model)[0]
    except UserError as exc:  # (worded as llmsim.run words a scenario's build errors: its origin first)
        raise UserError(f"{sc._origin}: {exc}") from None
    block = sc.kv_cache.block_tokens
    holds = max(pool.memory["kv_blocks_of_memory"] - 1, 0) * block  # (the null block apart)
    want = max_model_len(sc, model)
    if auto_len:
        if holds <= 0:
            return KvStart(refusal="vllm serve would not start: --max-model-len auto finds no KV cache left to fit")
        return KvStart(fitted=holds if holds < want else None)
    if holds >= want:
        return KvStart()
    gib = pool.memory["kv_bytes_per_token"] / 2**30  # (per GPU, as vLLM checks each worker)
    need = -(-want // block) * block  # (whole blocks, as vLLM counts them)
    # (where the length came from: --set policy.max_model_len (``len_set``), --max-model-len, or the model)
    flag = "--set policy.max_model_len" if len_set else "--max-model-len"
    given = flag if sc.policy.max_model_len is not None else "the model's context, no --max-model-len"
    band = 0.0 if sc.kv_cache.memory_bytes is not None else KV_ESTIMATE_BAND  # (a size given is no estimate)
    where, grow = (
        ("as --kv-cache-memory-bytes sizes it", "--kv-cache-memory-bytes")
        if band == 0.0
        else ("in llmsim's estimate of vLLM's memory", "--gpu-memory-utilization")
    )
    short = (
        f"one request of max_model_len {want:,} tokens ({given}) needs {need * gib:.2f} GiB of KV cache per GPU "
        f"({need:,} tokens), and {holds * gib:.2f} GiB ({holds:,} tokens) is left for it"
    )
    if holds >= want * (1 - band):
        return KvStart(
            note=f"{short} in llmsim's estimate: vLLM refuses to start when its own measure is short "
            f"(check_enough_kv_cache_memory), and llmsim's is within {KV_ESTIMATE_BAND:.0%} of vLLM's on 38 of 43 "
            f"real servers; --max-model-len {holds} or less starts either way"
        )
    return KvStart(
        refusal=f"vllm serve would not start: {short} {where}: vLLM checks this at "
        f"start-up (check_enough_kv_cache_memory) and stops; {'set policy.max_model_len' if len_set else 'pass --max-model-len'} "
        f"{holds} or less{'' if len_set else ', or auto,'} or raise {grow}"
    )


def simulate(sc: Scenario, cache: ServerCache | None = None, keep: bool = False) -> Results:
    """Run a translated scenario, on the prefix caches an earlier run on the server left (``cache``;
    ``keep``: keep this run's for the next). Errors as ``translate``'s."""
    from llmsim.api import run
    from llmsim.errors import UserError

    try:
        return run(sc, server_cache=cache, keep_server_cache=keep)
    except UserError as exc:
        raise _named(exc) from None


def write_trace(path: Path, rows: list[tuple[float, int, int]]) -> None:
    """The requests a detailed result file sent, as llmsim's generic trace."""
    lines = ["arrival_s,prompt_tokens,output_tokens"] + [f"{t!r},{p},{o}" for t, p, o in rows]
    path.write_text("\n".join(lines) + "\n")


def write_scenario_files(path: Path, data: dict, trace: Path | None) -> None:
    """The scenario as YAML and, for a replayed result, its requests beside it (``<stem>.requests.csv``,
    named relative to the scenario); each file whole or not at all."""
    import copy

    import yaml

    from llmsim.errors import UserError, atomic_write_text

    data = copy.deepcopy(data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if trace is not None:
            atomic_write_text(requests_path(path), trace.read_text())
            data["workload"]["trace"]["path"] = requests_path(path).name
        atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
    except OSError as exc:
        raise UserError(f"--scenario-out {path}: cannot write it ({exc.strerror or exc})") from None


def notes(
    sc: Scenario,
    serve: Serve,
    bench: Bench,
    result: Result | None,
    translated_exponent: float = 1.0,
    no_content: str | None = None,
    auto_len: bool = False,
) -> str:
    """What the translation read: the GPUs, the model, the flags it ignored, where the requests came
    from, how a MoE model's tokens route (``translated_exponent``: the translation's own value), why
    the drawn prompts carry no content where llmsim withholds it (``no_content``), the length
    --max-model-len auto fitted (``auto_len``) and a KV cache short of one request by less than
    llmsim's estimate can tell (``kv_start``)."""
    import math

    from llmsim.vllmcli import (
        SERVE_UNMODELLED,
        all2all_ignored,
        dense_ignored,
        dummy_routing,
        flag_of,
        has_experts,
        model_entry,
        model_spec,
        replays_own_send_times,
    )
    from llmsim.workload.generators import SYNTH_HASH_TOKENS

    c = sc.cluster
    entry, shown = model_entry(serve.model)
    moe = has_experts(entry)
    lines = [f"hardware {sc.hardware} x{c.tp * c.pp * c.replicas}", f"model    {shown}"]
    ignored = [*serve.ignored, *bench.ignored, *(f"{f} (a dense model)" for f in dense_ignored(serve))]
    why = "a dense model" if dense_ignored(serve) else "no expert-parallel data-parallel ranks, or no --enable-dbo"
    ignored += [f"{f} ({why})" for f in all2all_ignored(serve)]
    if serve.executor_backend is not None and not serve.ray_v1:
        ignored.append(
            f"--distributed-executor-backend {serve.executor_backend} (async scheduling kept: vLLM's mp, uni and "
            "ray v2 executors all schedule asynchronously)"
        )
    dummy = dummy_routing(serve.load_format, False, model_spec(entry))  # (biased router, dummy weights: at any EP)
    if serve.load_format is not None and translated_exponent != 0.0 and not dummy:
        ignored.append(
            f"--load-format {serve.load_format} (the weights' values: "
            + (
                "random weights' routing is known only behind a router with a correction bias)"
                if serve.load_format == "dummy"
                else "real ones, as llmsim prices them)"
            )
        )
    if result is not None and result.sent is not None:
        # (a MoE model's --dataset-name still says how its tokens route: routing_note)
        replaced = [k for k in REQUEST_SETTINGS if k in bench.given and not (moe and k == "dataset_name")]
        ignored += [f"{flag_of(k)} (the file's requests)" for k in replaced]
        if replays_own_send_times(result, bench):
            ignored += [f"{flag_of(k)} (the file's send times)" for k in ("burstiness", "seed") if k in bench.given]
    from_file = result is not None and result.sent is not None
    flags = bench.dataset
    if bench.dataset_name != "random" and not from_file:  # (vllm bench reads these for the random dataset only)
        for k in REQUEST_SETTINGS[1:]:
            general = {"random_input_len": flags.input_len, "random_output_len": flags.output_len}.get(k)
            if k in bench.given and not (k == "random_output_len" and general is not None):  # (--output-len: read)
                ignored.append(f"{'--input-len' if general is not None else flag_of(k)} (the random dataset's)")
    ignored += flags.unread(None if from_file else bench.dataset_name)
    unpriced = [f for f in ignored if f in SERVE_UNMODELLED]
    ignored = [f for f in ignored if f not in SERVE_UNMODELLED]
    if ignored:
        lines.append(f"ignored  {', '.join(ignored)} (no effect on timing)")
    if unpriced:
        lines.append(f"unpriced {', '.join(f'{f} ({SERVE_UNMODELLED[f]})' for f in unpriced)}")
    if serve.ray_v1:
        lines.append(
            "engine   vLLM's first ray executor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0): no async scheduling, "
            "as vLLM turns it off there"
        )
    if moe:
        lines.append(f"routing  {routing_note(c.expert_routing_exponent, translated_exponent, bench, result)}")
        if dummy and translated_exponent != 0.0:  # (under expert parallelism: vllmcli.dummy_routing)
            lines.append(
                "         --load-format dummy sends every token to the same experts, whose GPUs then carry all "
                "of them under expert parallelism: not priced, so the run reads fast"
            )
    if auto_len:
        fitted = sc.policy.max_model_len
        lines.append(
            f"context  --max-model-len auto: {fitted:,} tokens, the longest request the KV cache holds, as vLLM fits it"
            if fitted is not None
            else "context  --max-model-len auto: the model's whole context fits in the KV cache"
        )
    kv = kv_start(sc, auto_len=False).note
    if kv:
        lines.append(f"kv       {kv}")
    if no_content and sc.kv_cache.prefix_caching:  # (past the content limit)
        lines.append(f"prompts  drawn without their content: {no_content}")
    prefix = bench.random_prefix_len if bench.dataset_name == "random" and not from_file else 0
    if prefix % SYNTH_HASH_TOKENS:
        whole = -(-prefix // SYNTH_HASH_TOKENS) * SYNTH_HASH_TOKENS
        lines.append(
            f"prompts  --random-prefix-len {prefix:,} simulated as {whole:,} tokens (whole {SYNTH_HASH_TOKENS}-token "
            f"content ids): each prompt {whole - prefix} tokens longer than vLLM's, Total input tokens too"
        )
    d, sp = sc.workload.dataset, sc.workload.shared_prefix
    if d is not None and d.name == "sharegpt":
        lines.append(
            f"requests vllm bench's ShareGPT sample of {d.path} (seed {sc.seed}, tokenizer {d.tokenizer}): the "
            "prompts' tokens as a completions\n         endpoint counts them (a chat endpoint adds its template's), "
            "each answer run to its dataset length as with\n         --ignore-eos (a real model may stop sooner)"
        )
    elif d is not None:
        from llmsim.workload.custom import DEFAULT_OUTPUT_TOKENS

        prompts = "as the chat template renders them" if d.chat_template else "as written (--skip-chat-template)"
        lines.append(
            f"requests vllm bench's custom sample of {d.path} (seed {sc.seed}, tokenizer {d.tokenizer}): prompts "
            f"{prompts} (a chat endpoint\n         would apply its template again), each answer "
            f"{d.output_tokens or DEFAULT_OUTPUT_TOKENS:,} tokens as with --ignore-eos (a real model may stop sooner)"
        )
    elif sp is not None and bench.dataset_name == "prefix_repetition" and not from_file:

        def tokens(v: object) -> str:  # (a --set length spec in place of a count)
            return f"{v:,}" if isinstance(v, int) else "drawn"

        shuffled = {"vllm_bench": "shuffled as vLLM shuffles them", "fixed": "prefix by prefix"}
        lines.append(
            f"requests vllm bench's prefix_repetition: {sp.num_groups} prefixes of {tokens(sp.system_prompt_len)} "
            f"tokens x {sp.num_prompts_per_group:,} suffixes of {tokens(sp.question_len)} ({sc.workload.num_requests:,} "
            f"requests, {shuffled.get(sp.order, 'in llmsim order')}), each answer\n         {tokens(sp.output_len)} "
            "tokens as with --ignore-eos (a real model may stop sooner; the tokenizer's BOS not counted); arrivals "
            "llmsim's\n         Poisson draw, not vLLM's (its generator draws the prompts' tokens first)"
        )
    if result is not None and result.sent is not None:
        if replays_own_send_times(result, bench):
            source = "their send times"
        else:
            source = "all at once" if math.isinf(bench.request_rate) else "vllm bench's draws at the rate and seed"
        lines.append(f"requests {len(result.sent.index):,} from {result.path} (their lengths; arrivals: {source})")
        if result.sent.empty:
            lines.append(f"         ({result.sent.empty:,} that succeeded with no prompt or output token left out)")
    if result is not None and "request_goodput" in result.figures and not bench.goodput:
        lines.append(
            f"goodput  {result.path}'s request_goodput not compared: its SLOs are not recorded; give the run's "
            "--goodput in --bench"
        )
    return "\n".join(lines) + "\n"
