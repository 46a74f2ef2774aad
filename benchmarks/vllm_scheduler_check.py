"""llmsim's ``vllm`` scheduling policy against vLLM's own v1 scheduler, step by step.

vLLM's side is its ``Scheduler`` class itself (vllm/v1/core/sched/scheduler.py, with its KV cache
manager and prefix caching), not a transcription: it is built from a ``VllmConfig`` (a tiny Llama,
16-token blocks, the case's ``num_blocks``, ``max_num_seqs``, ``max_num_batched_tokens``,
``long_prefill_token_threshold``, prefix caching on or off) and driven as the engine drives it,
``schedule()`` then ``update_from_output()`` with a model runner output in which every request
whose prompt is done samples one token, its own (``ignore_eos``, ``max_tokens`` the answer length). Requests
arrive at given step indices, with token ids (shared system prompts among them). llmsim's side is
``make_scheduler("vllm", ...)`` over a ``BlockManager`` of ``num_blocks - 1`` blocks (vLLM's null
block), the prompts' chained block hashes from the same ids, driven the same way. Each step is
compared: which requests it schedules, with how many tokens, and which it preempts.

    # record vLLM's decisions (a Python with vllm, e.g. the vLLM CPU venv)
    .venv/bin/python benchmarks/vllm_scheduler_check.py --record /opt/vllm-venv/bin/python
    # compare llmsim with the record (what tests/test_vllm_scheduler_check.py does)
    .venv/bin/python benchmarks/vllm_scheduler_check.py
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import tempfile
from pathlib import Path

from recorded import run_in

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = ROOT / "tests" / "data" / "vllm_scheduler" / "expected.json.gz"
BLOCK_TOKENS = 16

# vLLM's side, run by --record's interpreter: argv[1] a model folder, the cases (JSON) on stdin
_VLLM_SIDE = r"""
import json, sys
import torch, vllm
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

def scheduler(model, case):
    sched = SchedulerConfig(max_num_seqs=case["max_num_seqs"], max_num_batched_tokens=case["budget"],
                            max_model_len=case["max_model_len"], long_prefill_token_threshold=case["threshold"],
                            long_prefill_token_threshold_adaptive=case.get("adaptive", False),
                            enable_chunked_prefill=True, async_scheduling=False, is_encoder_decoder=False)
    config = VllmConfig(scheduler_config=sched,
                        model_config=ModelConfig(model=model, dtype="float32", seed=0, skip_tokenizer_init=True,
                                                 max_model_len=case["max_model_len"]),
                        cache_config=CacheConfig(block_size=16, enable_prefix_caching=case["prefix_caching"]))
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=case["num_blocks"], kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    config.cache_config.num_gpu_blocks = case["num_blocks"]
    return Scheduler(vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
                     block_size=16, log_stats=True)

def run(model, case):
    s = scheduler(model, case)
    hasher = get_request_block_hasher(16, sha256)
    pending = sorted(case["requests"], key=lambda r: (r["step"], r["id"]))
    steps = []
    while pending or s.has_unfinished_requests():
        while pending and pending[0]["step"] <= len(steps):
            r = pending.pop(0)
            params = SamplingParams(max_tokens=r["output"], ignore_eos=True)
            s.add_request(Request(request_id=str(r["id"]), prompt_token_ids=r["ids"], sampling_params=params,
                                  pooling_params=None, block_hasher=hasher))
        out = s.schedule()
        ids = list(out.num_scheduled_tokens)
        # each request samples a token of its own: answers differ, as sampled ones do (one token for
        # all made identical prompts' answers identical, blocks vLLM then shares and llmsim cannot know)
        done = [[100 + int(i) % 800] if s.requests[i].num_computed_tokens >= s.requests[i].num_tokens else []
                for i in ids]
        s.update_from_output(out, ModelRunnerOutput(req_ids=ids, req_id_to_index={i: k for k, i in enumerate(ids)},
                                                    sampled_token_ids=done))
        steps.append([sorted([int(i), n] for i, n in out.num_scheduled_tokens.items()),
                      sorted(int(i) for i in out.preempted_req_ids or [])])
    return steps

init_none_hash(sha256)
model, cases = sys.argv[1], json.loads(sys.stdin.read())
print(json.dumps({"vllm": vllm.__version__, "steps": {name: run(model, c) for name, c in cases.items()}}))
"""


def cases() -> dict[str, dict]:
    """The workloads (seeded: the same every time): bursts and staggered arrivals, KV caches from
    ample to tight enough to preempt, shared system prompts, token budgets from 64 to 2,048."""
    rng = random.Random(3)

    def prompt(n: int, prefix: list[int] | None = None) -> list[int]:
        return (prefix or []) + [rng.randrange(100, 900) for _ in range(n)]

    def case(requests: list[dict], seqs: int, budget: int, blocks: int, max_len: int = 2048, **kw: object) -> dict:
        return {"max_num_seqs": seqs, "budget": budget, "max_model_len": max_len, "num_blocks": blocks,
                "threshold": kw.get("threshold", 0), "prefix_caching": kw.get("prefix_caching", True),
                **({"adaptive": True} if kw.get("adaptive") else {}), "requests": requests}  # fmt: skip

    burst = [
        {"id": i, "step": 0, "ids": prompt(rng.randint(40, 700)), "output": rng.randint(10, 60)} for i in range(12)
    ]
    spread = [
        {"id": i, "step": rng.randint(0, 60), "ids": prompt(rng.randint(20, 400)), "output": rng.randint(5, 80)}
        for i in range(30)
    ]
    systems = [prompt(rng.choice([32, 48, 100])) for _ in range(3)]
    shared = [
        {"id": i, "step": rng.randint(0, 40), "ids": prompt(rng.randint(5, 150), rng.choice(systems)), "output": rng.randint(5, 40)}
        for i in range(25)
    ]  # fmt: skip
    long_answers = [
        {"id": i, "step": rng.randint(0, 20), "ids": prompt(rng.randint(30, 300)), "output": rng.randint(100, 300)}
        for i in range(20)
    ]
    small = [
        {"id": i, "step": rng.randint(0, 100), "ids": prompt(rng.randint(1, 60), rng.choice(systems) if rng.random() < 0.5 else None), "output": rng.randint(1, 30)}
        for i in range(80)
    ]  # fmt: skip
    same = [{"id": i, "step": i // 3, "ids": systems[2] + [5] * (i % 4) * 16, "output": 12} for i in range(24)]
    return {
        "burst": case(burst, 8, 512, 2000),
        "burst-tight-kv": case(burst, 16, 512, 90),
        "staggered": case(spread, 6, 256, 400),
        "staggered-threshold": case(spread, 10, 256, 400, threshold=64),
        "shared-prefix": case(shared, 8, 256, 300),
        "shared-prefix-tight": case(shared, 8, 256, 40),
        "shared-prefix-off": case(shared, 8, 256, 300, prefix_caching=False),
        "preempt-heavy": case(long_answers, 16, 512, 60),
        "preempt-heavy-small-budget": case(long_answers, 32, 64, 45, max_len=1024, threshold=32),
        "many-small": case(small, 4, 128, 100, max_len=512),
        "many-small-tight": case(small, 64, 2048, 25, max_len=512),
        "identical-prompts": case(same, 8, 256, 80, max_len=512),
        # vLLM 0.32's --long-prefill-token-threshold-adaptive: the cap floored at budget / requests
        "staggered-adaptive": case(spread, 10, 256, 400, threshold=16, adaptive=True),
        "preempt-adaptive": case(long_answers, 32, 128, 45, max_len=1024, threshold=8, adaptive=True),
        # random ones, the four of 100 that found blocks computed twice at once (with a threshold)
        **{f"random-{seed}": random_case(seed) for seed in (1002, 1013, 1015, 1029)},
    }


def random_case(seed: int) -> dict:
    """A random workload: 10-60 requests over 80 steps, 40 % of them behind one of three system
    prompts, a budget, sequence cap, threshold and KV cache drawn (the cache from just enough for
    the longest request to 120 blocks more), prefix caching on four times in five."""
    rng = random.Random(seed)
    systems = [[rng.randrange(100, 900) for _ in range(rng.choice([16, 32, 48, 100]))] for _ in range(3)]
    requests = []
    for i in range(rng.randint(10, 60)):
        head = rng.choice(systems) if rng.random() < 0.4 else []
        step = rng.randint(0, 80)
        ids = head + [rng.randrange(100, 900) for _ in range(rng.randint(1, 500))]
        requests.append({"id": i, "step": step, "ids": ids, "output": rng.randint(1, 150)})
    budget = rng.choice([32, 64, 128, 256, 512, 2048])
    seqs = min(rng.choice([2, 4, 8, 16, 64]), budget)
    longest = max(-(-(len(r["ids"]) + r["output"]) // BLOCK_TOKENS) for r in requests)
    blocks = rng.randint(longest + 2, longest + 120)
    threshold = rng.choice([0, 0, 16, 32, 100])
    return {"max_num_seqs": seqs, "budget": budget, "max_model_len": 2048, "num_blocks": blocks,
            "threshold": threshold, "prefix_caching": rng.random() < 0.8, "requests": requests}  # fmt: skip


def llmsim_steps(case: dict, policy: str = "vllm", columnar: bool = False) -> list[list]:
    """llmsim's decisions for ``case``, one [[[request, tokens], ...], [preempted, ...]] a step;
    with ``columnar``, the decoding requests held as the simulator holds them without prefix
    caching (``decodeset.DecodeSet``)."""
    import numpy as np

    from llmsim.decodeset import DecodeSet
    from llmsim.kvcache import BlockManager, chain_hashes
    from llmsim.request import Request
    from llmsim.schedulers import SchedulerConfig, make_scheduler
    from llmsim.workload.identity import token_block_ids

    # (columnar decoders hold blocks by count, as the simulator's replicas without prefix caching do)
    caching = case["prefix_caching"]
    kv = BlockManager(case["num_blocks"] - 1, BLOCK_TOKENS, 0.0, caching, track_ids=not columnar, partial_first=True)
    cfg = SchedulerConfig(
        max_num_seqs=case["max_num_seqs"],
        max_batch_tokens=case["budget"],
        chunk_tokens=case["budget"],
        long_prefill_token_threshold=case["threshold"],
        long_prefill_adaptive=case.get("adaptive", False),
        max_model_len=case["max_model_len"],
    )
    columns = DecodeSet(kv, None) if columnar else None
    sched = make_scheduler(policy, cfg, kv, columns=columns)
    pending = sorted(case["requests"], key=lambda r: (r["step"], r["id"]))
    steps: list[list] = []
    while pending or sched.has_work():
        while pending and pending[0]["step"] <= len(steps):
            r = pending.pop(0)
            ids = np.asarray(r["ids"], dtype=np.int64)
            req = Request(r["id"], 0.0, len(ids), r["output"], block_hashes=token_block_ids(ids, BLOCK_TOKENS))
            req.prefix_chain = chain_hashes(req.block_hashes, BLOCK_TOKENS, BLOCK_TOKENS, len(ids))
            sched.add(req)
        plan = sched.schedule()
        decoding = [r.id for r in plan.decode] + (columns.member_ids() if plan.decode_set is not None else [])
        planned = sorted([[r.id, c] for r, c in plan.prefill] + [[i, 1] for i in decoding])
        steps.append([planned, sorted(r.id for r in plan.preempted)])
        sched.complete(plan, float(len(steps)))
    return steps


def compare(expected: dict[str, list], got: dict[str, list]) -> list[dict]:
    """Per case: steps, those identical to vLLM's at the same index, the first that is not, tokens
    scheduled and preemptions on both sides."""
    rows = []
    for name, want in expected.items():
        have = got[name]
        same = [a == b for a, b in zip(want, have, strict=False)]
        first = same.index(False) if False in same else (None if len(want) == len(have) else len(same))
        rows.append(
            {
                "case": name,
                "vllm_steps": len(want),
                "llmsim_steps": len(have),
                "identical": sum(same),
                "first_difference": first,
                "vllm_tokens": sum(n for step in want for _, n in step[0]),
                "llmsim_tokens": sum(n for step in have for _, n in step[0]),
                "vllm_preemptions": sum(len(step[1]) for step in want),
                "llmsim_preemptions": sum(len(step[1]) for step in have),
            }
        )
    return rows


def record(python: str) -> dict:
    """vLLM's decisions for every case, by ``python`` (an interpreter with vllm installed)."""
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "intermediate_size": 384,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
        "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "vocab_size": 1000,
        "torch_dtype": "float32",
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="llmsim-sched-") as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config), encoding="utf-8")
        return run_in(python, _VLLM_SIDE, tmp, stdin=json.dumps(cases()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", metavar="PYTHON", help="record vLLM's decisions with this interpreter")
    args = ap.parse_args(argv)
    if args.record:
        EXPECTED.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(record(args.record), separators=(",", ":")).encode()
        EXPECTED.write_bytes(gzip.compress(data, mtime=0))
        print(f"wrote {EXPECTED.relative_to(ROOT)}")
    expected = json.loads(gzip.decompress(EXPECTED.read_bytes()))
    rows = compare(expected["steps"], {name: llmsim_steps(c) for name, c in cases().items()})
    from llmsim.tables import table

    print(table([[("-" if v is None else v) for v in r.values()] for r in rows], list(rows[0])))
    exact = sum(r["identical"] == r["vllm_steps"] == r["llmsim_steps"] for r in rows)
    print(f"{exact} of {len(rows)} cases identical to vLLM {expected['vllm']}'s scheduler, step for step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
