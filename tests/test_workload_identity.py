"""Workloads with identity: token ids and prompt ids become chained block ids (vLLM's prefix-cache
hashing: full blocks only, each chained on its parent), so the prefix cache acts on real reuse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import llmsim
from llmsim.build import build_workload
from llmsim.errors import UserError
from llmsim.kvcache import chain_hashes
from llmsim.scenario import scenario_from_dict
from llmsim.workload.identity import segment_block_ids, segment_key, token_block_ids
from llmsim.workload.traces import load_trace

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "validation" / "vllm_runs_llmservingsim" / "workloads"
SYSTEM = list(range(1000, 1100))  # a 100-token system prompt


def _scenario(workload: dict, kv: dict | None = None) -> object:
    return scenario_from_dict(
        {
            "name": "identity",
            "model": "llama-3.1-8b",
            "hardware": "H100-SXM",
            "policy": {"kind": "chunked", "chunk_tokens": 2048},
            "kv_cache": {"prefix_caching": True, **(kv or {})},
            "workload": workload,
            "output": {"steps": "none"},
        },
        "identity.yaml",
        ROOT,
    )


def _leading_equal(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _two_requests_jsonl(tmp_path: Path) -> Path:
    """Two requests 5 s apart sharing the system prompt, each with its own 30-token question."""
    path = tmp_path / "two.jsonl"
    rows = [
        {"input_toks": 130, "output_toks": 4, "arrival_time_ns": 0, "input_tok_ids": SYSTEM + [7] * 30},
        {"input_toks": 130, "output_toks": 4, "arrival_time_ns": 5_000_000_000, "input_tok_ids": SYSTEM + [9] * 30},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_token_ids_hash_full_blocks_chained_on_their_parent() -> None:
    a = token_block_ids(np.array(SYSTEM + [7] * 30), 16)
    b = token_block_ids(np.array(SYSTEM + [9] * 30), 16)
    assert len(a) == len(b) == 130 // 16  # full blocks only: 8 ids, the last 2 tokens unhashed
    assert _leading_equal(a, b) == 100 // 16  # tokens 0..95 shared; block 6 (96..111) mixes questions
    # chained: the same block content after a different prefix gets a different id
    c = token_block_ids(np.array([1] * 16 + SYSTEM[16:]), 16)
    assert c[1] != a[1] and _leading_equal(a, c) == 0
    assert token_block_ids(np.array(SYSTEM), 16) == a[:6]  # deterministic, prefix-stable


def test_a_shared_100_token_system_prompt_is_a_cache_hit(tmp_path: Path) -> None:
    path = _two_requests_jsonl(tmp_path)
    sc = _scenario({"kind": "trace", "trace": {"path": str(path), "format": "llmservingsim"}})
    w = build_workload(sc)
    assert _leading_equal(*w.block_hashes) == 6
    res = llmsim.run(sc)
    # by hand: 6 full 16-token blocks of the system prompt (96 tokens) are cached when the second
    # request arrives; the 7th block holds 4 system-prompt tokens and 12 of the first question
    assert res.requests["cached_tokens"].tolist() == [0, 96]
    assert res.summary["prefix_cache"]["saved_prefill_tokens"] == 96
    off = llmsim.run(
        _scenario({"kind": "trace", "trace": {"path": str(path), "format": "llmservingsim"}}, {"prefix_caching": False})
    )
    assert off.requests["cached_tokens"].tolist() == [0, 0]


def test_the_generic_format_names_prompts_and_prefix_groups(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text(
        "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens,prompt_id\n"
        "0,130,4,support,100,\n"  # system prompt 'support' + its own question
        "5,130,4,support,100,\n"  # the same system prompt, another question
        "10,300,4,,,doc7\n"  # a whole prompt named doc7
        "15,200,4,,,doc7\n"  # a shorter doc7: the first 200 tokens of the same text
        "20,130,4,,,\n"  # nothing shared
    )
    w = load_trace(csv, "generic", 16)
    h = w.block_hashes
    assert [len(x) for x in h] == [8, 8, 18, 12, 8]
    assert _leading_equal(h[0], h[1]) == 6 and h[0][6] != h[1][6]
    assert h[3] == h[2][:12]
    assert _leading_equal(h[4], h[0]) == 0 and _leading_equal(h[4], h[2]) == 0
    res = llmsim.run(_scenario({"kind": "trace", "trace": {"path": str(csv), "format": "generic"}}))
    # by hand: 96 (6 system-prompt blocks), then doc7's 200 tokens minus the one recomputed: 12 blocks
    assert res.requests["cached_tokens"].tolist() == [0, 96, 0, 192, 0]
    plain = tmp_path / "plain.csv"
    plain.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,1\n")
    assert load_trace(plain, "generic").block_hashes is None  # no identity columns, no identity


def test_names_are_text_in_both_formats(tmp_path: Path) -> None:
    """An id or label is the text written: ids past 2**53 beside an empty cell (pandas reads such a
    column as floats, and the two ids round to one), "007" against "7", stay apart; an integer a
    float column wrote ("7.0") is that integer; CSV and JSONL read a class alike."""
    big, bigger = 9007199254740992, 9007199254740993
    csv = tmp_path / "big.csv"
    csv.write_text(f"arrival_s,prompt_tokens,output_tokens,prompt_id\n0,64,1,{bigger}\n1,64,1,{big}\n2,64,1,\n")
    jsonl = tmp_path / "big.jsonl"
    rows = [{"prompt_id": bigger}, {"prompt_id": big}, {"prompt_id": None}]
    jsonl.write_text(
        "".join(
            json.dumps({"arrival_s": i, "prompt_tokens": 64, "output_tokens": 1, **r}) + "\n"
            for i, r in enumerate(rows)
        )
    )
    for path in (csv, jsonl):
        h = load_trace(path, "generic", 16).block_hashes
        assert h[0][0] != h[1][0], path
    ids = tmp_path / "ids.csv"
    ids.write_text(
        "arrival_s,prompt_tokens,output_tokens,prompt_id,class\n0,64,1,007, chat\n1,64,1,7,chat\n2,64,1,7.0,\n"
    )
    w = load_trace(ids, "generic", 16)
    assert w.block_hashes[0][0] != w.block_hashes[1][0] and w.block_hashes[1] == w.block_hashes[2]
    assert w.klass.tolist() == ["chat", "chat", ""]
    na = tmp_path / "na.csv"  # (R's write.csv marks a missing id NA: two such rows share no prompt)
    na.write_text(
        "arrival_s,prompt_tokens,output_tokens,prompt_id,prefix_group,prefix_tokens\n0,64,1,NA,NA,NA\n1,64,1,NA,NA,NA\n"
    )
    h = load_trace(na, "generic", 16).block_hashes
    assert h[0][0] != h[1][0]
    as_json = tmp_path / "ids.jsonl"
    as_json.write_text(json.dumps({"arrival_s": 0, "prompt_tokens": 64, "output_tokens": 1, "class": " chat"}) + "\n")
    assert load_trace(as_json, "generic", 16).klass.tolist() == ["chat"]


@pytest.mark.parametrize("hash_at", [16, 32])
def test_block_size_16_vs_32(tmp_path: Path, hash_at: int) -> None:
    toks = [np.array(SYSTEM + [7] * 30), np.array(SYSTEM + [9] * 30)]
    h16 = [token_block_ids(t, 16) for t in toks]
    h32 = [token_block_ids(t, 32) for t in toks]
    assert [len(x) for x in h32] == [4, 4] and _leading_equal(*h32) == 3  # 96 tokens shared either way
    # 16-token ids onto 32-token KV blocks (vLLM's BlockHashListWithBlockSize): one key per two ids
    kv32 = [chain_hashes(x, 16, 32, 130) for x in h16]
    assert [len(x) for x in kv32] == [4, 4] and _leading_equal(*kv32) == 3
    kv64 = [chain_hashes(x, 16, 64, 130) for x in h16]
    assert _leading_equal(*kv64) == 1  # a 64-token block: only tokens 0..63 lie wholly in the prompt
    # end to end with 32-token KV blocks, content hashed at 16 or at 32: 3 blocks = 96 tokens hit
    path = _two_requests_jsonl(tmp_path)
    trace = {"path": str(path), "format": "llmservingsim", "hash_block_tokens": hash_at}
    res = llmsim.run(_scenario({"kind": "trace", "trace": trace}, {"block_tokens": 32}))
    assert res.requests["cached_tokens"].tolist() == [0, 96]


def test_segment_streams_share_exactly_their_common_tokens() -> None:
    sys_a, q1, q2 = segment_key("system", 0), segment_key("q", 1), segment_key("q", 2)
    a = segment_block_ids([(sys_a, 100), (q1, 50)], 16)
    b = segment_block_ids([(sys_a, 100), (q2, 50)], 16)
    assert len(a) == 9 and _leading_equal(a, b) == 6
    longer = [(sys_a, 100), (q1, 50), (q2, 70)]
    assert segment_block_ids(longer, 16, known=a) == segment_block_ids(longer, 16)  # resuming is exact
    assert segment_block_ids(longer, 16)[:9] == a


def test_segment_ids_are_the_ones_they_were() -> None:
    """The ids of a stream are pinned: a block within one segment and one across two (20 + 30
    tokens in 16-token blocks: the second block spans both), the first and a resumed call alike.
    They name content in every cached trace and plan, so a faster hashing loop (one hasher
    copied per block, 2x) must give them bit for bit (values from the loop before it)."""
    segments = [(segment_key("group", "g"), 20), (segment_key("prompt", "p"), 30)]
    want = [6113216178302664, 6223519603086071797, 1610834913673781994]
    assert segment_block_ids(segments, 16) == want
    assert segment_block_ids(segments, 16, want[:1]) == want


def test_shared_prefix_single_turn_counts_and_hits_by_hand() -> None:
    spec = {"num_groups": 2, "num_prompts_per_group": 3, "system_prompt_len": 100, "question_len": 50, "output_len": 20}
    sc = _scenario(
        {"kind": "all_at_once", "num_requests": 12, "batch_size": 1, "batch_interval_s": 5, "shared_prefix": spec}
    )
    w = build_workload(sc)
    assert w.prompt_tokens.tolist() == [150] * 12 and w.output_tokens.tolist() == [20] * 12
    prompts = {tuple(h) for h in w.block_hashes}
    assert len(prompts) == 6  # 2 system prompts x 3 users, each asked twice
    assert all(len(h) == 150 // 16 for h in w.block_hashes)
    assert len({h[:6] for h in prompts}) == 2  # one 96-token shared head per group
    res = llmsim.run(sc)
    # by hand (arrivals 5 s apart, nothing evicted): the first 6 requests are the 6 prompts once:
    # per group 0 + 96 + 96; the next 6 repeat a prompt: 144 each (9 blocks; 150 - 1 tokens to compute)
    assert res.summary["prefix_cache"]["saved_prefill_tokens"] == 2 * 192 + 6 * 144 == 1248


def test_shared_prefix_multi_turn_grows_each_users_chat() -> None:
    spec = {
        "num_unique_system_prompts": 1,  # inference-perf's names work too
        "num_users_per_system_prompt": 2,
        "system_prompt_len": 100,
        "question_len": 50,
        "output_len": 20,
        "enable_multi_turn_chat": True,
    }
    sc = _scenario(
        {"kind": "all_at_once", "num_requests": 6, "batch_size": 1, "batch_interval_s": 5, "shared_prefix": spec}
    )
    w = build_workload(sc)
    # round r of a user: 100 + r x (50 + 20) + 50 tokens
    assert w.prompt_tokens.tolist() == [150, 150, 220, 220, 290, 290]
    assert w.block_hashes[2][:9] == w.block_hashes[0][:9] or w.block_hashes[2][:9] == w.block_hashes[1][:9]
    res = llmsim.run(sc)
    # by hand: user A 0, user B 96 (system prompt); round 1 reuses the previous round's full blocks,
    # its answer's included as vLLM caches them: 150 + 20 tokens, the last one's KV never computed,
    # 169 -> 10 blocks (160); round 2 the previous 220 + 20: 239 -> 14 blocks (224). Prompt blocks
    # alone would give 144 and 208.
    assert res.requests["cached_tokens"].tolist() == [0, 96, 160, 160, 224, 224]


def test_shared_prefix_draws_lengths_per_user() -> None:
    spec = {
        "num_groups": 3,
        "num_prompts_per_group": 4,
        "system_prompt_len": 64,
        "question_len": {"dist": "uniform", "min": 10, "max": 90},
        "output_len": 8,
    }
    sc = _scenario({"kind": "poisson", "rate_rps": 2, "num_requests": 48, "shared_prefix": spec})
    w = build_workload(sc)
    by_prompt: dict[tuple, set] = {}
    for h, p in zip(w.block_hashes, w.prompt_tokens.tolist(), strict=True):
        by_prompt.setdefault(tuple(h), set()).add(p)
    assert all(len(v) == 1 for v in by_prompt.values())  # a user's prompt always has its length
    assert ((w.prompt_tokens >= 74) & (w.prompt_tokens <= 154)).all() and (w.output_tokens == 8).all()


def test_shared_prefix_refuses_the_keys_it_replaces() -> None:
    with pytest.raises(UserError, match="shared_prefix"):
        _scenario(
            {
                "kind": "poisson",
                "rate_rps": 1,
                "num_requests": 4,
                "prompt_tokens": {"dist": "fixed", "value": 10},
                "shared_prefix": {"num_groups": 1},
            }
        )


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"dist": "uniform", "min": 10, "max": 5}, "question_len: min (10) must be <= max (5)"),
        (-3, "question_len: Input should be greater than 0 (got -3)"),
        ({"dist": "fixed", "value": 0}, "question_len.value: Input should be greater than 0"),
    ],
)
def test_a_token_count_or_length_spec_is_one_error_not_both_branches(value: object, said: str) -> None:
    # a plain int | LengthSpec union reported both branches ("constrained-int: ...; function-after[...]")
    with pytest.raises(UserError) as err:
        _scenario({"kind": "poisson", "rate_rps": 1, "num_requests": 4, "shared_prefix": {"question_len": value}})
    msg = str(err.value)
    assert f"workload.shared_prefix.{said}" in msg and msg.count("question_len") == 1
    assert "constrained-int" not in msg and "function-after" not in msg and "~" not in msg


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (LLMServingSim workloads) is not present")
def test_the_llmservingsim_sharegpt_workload_loads_with_its_prefix_reuse() -> None:
    path = SHARED / "sharegpt-llama-3.1-8b-300-sps10.jsonl"
    w = load_trace(path, "llmservingsim", 16)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(w) == len(rows) == 300
    assert w.prompt_tokens.tolist() == [r["input_toks"] for r in rows]
    assert [len(h) for h in w.block_hashes] == [r["input_toks"] // 16 for r in rows]
    # the reuse the token ids imply (an unbounded cache, hashed independently here with tuples)
    seen: set = set()
    implied = 0
    for r in rows:
        t, parent, chain = r["input_tok_ids"], None, []
        for i in range(len(t) // 16):
            parent = hash((parent, tuple(t[i * 16 : (i + 1) * 16])))
            chain.append(parent)
        k = 0
        while k < min(len(chain), (len(t) - 1) // 16) and chain[k] in seen:
            k += 1
        implied += 16 * k
        seen.update(chain)
    assert implied == 19520  # 7.6% of the 257,239 prompt tokens, in 32 requests
    sc = _scenario({"kind": "trace", "trace": {"path": str(path), "format": "llmservingsim"}})
    res = llmsim.run(sc)
    saved = res.summary["prefix_cache"]["saved_prefill_tokens"]
    assert 0.9 * implied <= saved <= implied


def test_the_shipped_shared_prefix_scenario_saves_what_the_hand_count_says() -> None:
    res = llmsim.run(ROOT / "scenarios" / "shared_prefix.yaml", {"output.steps": "none", "workload.num_requests": 600})
    # 512 users (16 groups x 32); the first request of each user saves its group's 2,000-token
    # system prompt (125 full blocks) unless it is the group's first; the other 88 requests
    # repeat a 2,200-token prompt and save 137 blocks (2,192 tokens)
    assert res.summary["prefix_cache"]["saved_prefill_tokens"] == 496 * 2000 + 88 * 2192


def test_every_trace_format_has_a_loader_and_a_scenario_name():
    import typing

    from llmsim.scenario import TraceFormat
    from llmsim.workload.traces import FORMATS

    assert set(typing.get_args(TraceFormat)) == set(FORMATS)


def test_a_misspelt_optional_column_is_refused_and_others_are_left_alone(tmp_path):
    """`clas` for `class` would lose every request's class without a word; a request id is not read."""
    from llmsim.errors import UserError
    from llmsim.workload.traces import load_generic

    bad = tmp_path / "t.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens,Prefix_Grup\n0,10,5,a\n")
    with pytest.raises(UserError, match=r"t.csv: column 'Prefix_Grup' is not read \(did you mean 'prefix_group'\?\)"):
        load_generic(bad)
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5, "promt_id": 3}\n')
    with pytest.raises(UserError, match="did you mean 'prompt_id'"):
        load_generic(jsonl)
    ok = tmp_path / "ok.csv"
    ok.write_text("arrival_s,prompt_tokens,output_tokens,request_id,input_tokens,user\n0,10,5,r1,10,u\n")
    assert len(load_generic(ok).arrival_s) == 1
