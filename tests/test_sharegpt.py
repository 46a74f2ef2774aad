"""vllm bench serve's ShareGPT dataset (llmsim/workload/sharegpt.py): the sample vLLM draws from a
user's file, read as a stream; `workload.dataset` in a scenario; `llmsim bench --dataset-name sharegpt`."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from llmsim.cli import main
from llmsim.errors import UserError
from llmsim.scenario import scenario_from_dict
from llmsim.vllmcli import parse_bench, parse_serve, scenario_dict
from llmsim.workload import sharegpt, tokenizer

tokenizers = pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(300)]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    """A word-level tokenizer that adds a BOS (as Llama's does) and a ShareGPT-shaped file whose
    conversations have 1-3 turns of 2 to 1,200 words: some too short, some too long."""
    d = tmp_path_factory.mktemp("sharegpt")
    vocab = {"<unk>": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.post_processor = tokenizers.processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(d / "tokenizer.json"))
    rng = random.Random(1)
    data = []
    for i in range(240):
        turns = [
            {
                "from": ("human", "gpt")[t % 2],
                "value": " ".join(rng.choices(WORDS, k=rng.choice([2, 5, 20, 90, 700, 1200]))),
            }
            for t in range(rng.choice([1, 2, 2, 3]))
        ]
        data.append({"id": str(i), "conversations": turns})
    (d / "sg.json").write_text(json.dumps(data, indent=1))
    return d / "sg.json", d / "tokenizer.json"


def vllm_sample(path: Path, tok_path: Path, n: int, seed: int, output_len=None, shuffle=True, oversample=True):
    """vLLM's ShareGPTDataset.load_data + sample + maybe_oversample_requests, transcribed (the whole
    file in memory, the global `random`), with the fast tokenizer's `encode` for `tokenizer(text)`."""
    tok = tokenizers.Tokenizer.from_file(str(tok_path))
    data = [
        e for e in json.loads(path.read_text()) if "conversations" in e and len(e["conversations"]) >= 2
    ]  # (vLLM's)
    random.seed(seed)
    if shuffle:
        random.shuffle(data)
    out = []
    for e in data:
        if len(out) >= n:
            break
        prompt = tok.encode(e["conversations"][0]["value"]).ids
        completion = tok.encode(e["conversations"][1]["value"]).ids
        o = len(completion) if output_len is None else output_len
        p = len(prompt)
        if p < 4 or (output_len is None and o < 4) or p > 1024 or p + o > 2048:
            continue
        out.append((tuple(prompt), o))
    if oversample and len(out) < n:
        random.seed(seed)
        out += [random.choice(out) for _ in range(n - len(out))]
    return out


@pytest.mark.parametrize(
    "n, seed, output_len, shuffle, oversample",
    [(10, 0, None, True, True), (60, 3, None, True, True), (300, 0, None, True, True), (300, 7, 64, True, True)]
    + [(40, 0, None, False, True), (300, 1, None, True, False)],
)
def test_the_sample_is_vllms(files, n, seed, output_len, shuffle, oversample):
    path, tok = files
    got = sharegpt.sample(path, str(tok), n, seed, output_len, shuffle, oversample)
    want = vllm_sample(path, tok, n, seed, output_len, shuffle, oversample)
    assert [(tuple(s.prompt_ids.tolist()), s.output_tokens) for s in got] == want
    assert len(got) == (n if oversample else len(want))
    assert len(want) < 300 or oversample  # (the file holds fewer valid pairs than 300: the last cases oversample)


def test_the_stream_reads_any_array_whatever_its_chunks(files, tmp_path):
    path, _ = files
    assert list(sharegpt.iter_array(path, "f", chunk_chars=7)) == json.loads(path.read_text())
    rng = random.Random(0)
    scalars = [True, False, None, -1.5e3, 12345678901234567890, 1.0e-5, 'a"\\é\n', ""]
    for _ in range(100):
        arr = [rng.choice([rng.choice(scalars), {"k": [rng.choice(scalars)]}, []]) for _ in range(rng.randrange(5))]
        text = json.dumps(arr, indent=rng.choice([None, 1]))
        (tmp_path / "t.json").write_text(text)
        for chunk in (1, 2, 5):  # (a token cut anywhere: "fals", "-1.5e", "\\u00")
            assert list(sharegpt.iter_array(tmp_path / "t.json", "t", chunk_chars=chunk)) == arr


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"conversations": []}', "expected a JSON array of conversations"),
        ("", "expected a JSON array"),
        ('[{"a": 1}, {"a": x}]', "element 1: not JSON (Expecting value)"),
        ('[{"a": 1}, {"a": "open', "the file ends inside element 1"),
        ("[1, 2,]", "element 2: not JSON"),
        ("[1 2]", "after element 0: expected ',' or ']', got '2'"),
        ("[1, 2", "after element 1: expected ',' or ']', got 'the end'"),
    ],
)
def test_a_broken_file_is_named_at_its_element(tmp_path, text, message):
    (tmp_path / "bad.json").write_text(text)
    for chunk in (1, 3, 1 << 20):
        with pytest.raises(UserError, match="bad.json") as err:
            list(sharegpt.iter_array(tmp_path / "bad.json", str(tmp_path / "bad.json"), chunk_chars=chunk))
        assert message in str(err.value)


@pytest.mark.parametrize(
    "data, message",
    [
        ([5], "element 0: expected an object with a `conversations` list"),
        ([{"conversations": [{"value": "a b c d"}, {"value": 7}]}], "element 0: conversations[1]: expected an object"),
        (
            [{"conversations": [{"value": "w1"}, {"value": "w2 w3 w4 w5"}]}],
            "no conversation passes vLLM's length check",
        ),
    ],
)
def test_bad_conversations_are_named(files, tmp_path, data, message):
    (tmp_path / "d.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="d.json") as err:
        sharegpt.sample(tmp_path / "d.json", str(files[1]), 5, 0)
    assert message in str(err.value)


def test_the_tokenizer_is_found_as_a_file_a_folder_or_in_the_hf_cache(files, tmp_path, monkeypatch):
    tok = files[1]
    assert tokenizer.tokenizer_file(str(tok), "t") == tok
    assert tokenizer.tokenizer_file(str(tok.parent), "t") == tok
    snap = tmp_path / "hub" / "models--org--name" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "tokenizer.json").write_text(tok.read_text())
    (tmp_path / "hub" / "models--org--name" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--name" / "refs" / "main").write_text("abc\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert tokenizer.tokenizer_file("org/name", "t") == snap / "tokenizer.json"
    with pytest.raises(
        UserError, match="org/other: no tokenizer.json: not a file or folder there, nor a model .*models--org--other"
    ):
        tokenizer.tokenizer_file("org/other", "t")
    with pytest.raises(UserError, match="the folder has no tokenizer.json"):
        tokenizer.tokenizer_file(str(tmp_path / "hub"), "t")
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(UserError, match="not a tokenizer.json that `tokenizers` reads"):
        tokenizer.load_tokenizer(tmp_path / "junk.json", "t")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # (not installed)
    with pytest.raises(UserError, match="needs the `tokenizers` package"):
        tokenizer.load_tokenizer(tok, "t")


def scenario(files, **workload) -> dict:
    path, tok = files
    return {
        "name": "sharegpt",
        "model": "llama-3.1-8b",
        "hardware": "H100-SXM",
        "workload": {
            "kind": "poisson",
            "rate_rps": 8,
            "num_requests": 300,
            "arrivals": "vllm_bench",
            "dataset": {"name": "sharegpt", "path": str(path), "tokenizer": str(tok)},
            **workload,
        },
        "output": {"steps": "none"},
    }


def test_a_scenario_serves_the_sample_and_its_repeats_hit_the_cache(files):
    import llmsim
    from llmsim.build import build_workload

    sc = scenario_from_dict(scenario(files), "t", ROOT)
    wl = build_workload(sc)
    want = vllm_sample(*files, 300, 0)
    assert wl.prompt_tokens.tolist() == [len(p) for p, _ in want]
    assert wl.output_tokens.tolist() == [o for _, o in want]
    res = llmsim.run(sc)
    assert (
        res.summary["prefix_cache"]["saved_prefill_tokens"] > 0
    )  # (the oversampled repeats: vLLM's cache hits them too)
    again = llmsim.run(scenario_from_dict(scenario(files), "t", ROOT))
    assert again.requests["finish_s"].tolist() == res.requests["finish_s"].tolist()
    fewer = build_workload(
        scenario_from_dict(
            scenario(files, dataset={**scenario(files)["workload"]["dataset"], "oversample": False}), "t", ROOT
        )
    )
    valid = len(vllm_sample(*files, 300, 0, oversample=False))
    assert len(fewer) == valid < 300
    assert fewer.arrival_s[-1] == pytest.approx(valid / 8)  # (vllm bench's times, drawn for the requests it has)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"prompt_tokens": {"dist": "fixed", "value": 5}}, "`dataset` gives every request its prompt"),
        ({"prompts": "vllm_bench"}, "prompts: vllm_bench"),
        ({"conversations": {"turns": 2}}, "conversations"),
    ],
)
def test_a_dataset_takes_no_lengths_of_its_own(files, extra, message):
    with pytest.raises(Exception, match=message):
        scenario_from_dict(scenario(files, **extra), "t", ROOT)
    trace = {"kind": "trace", "trace": {"path": "x.csv"}, "dataset": scenario(files)["workload"]["dataset"]}
    with pytest.raises(Exception, match="`dataset` reshapes synthetic requests"):
        scenario_from_dict({**scenario(files), "workload": trace}, "t", ROOT)


def test_bench_reads_vllm_bench_serves_sharegpt_flags(files, tmp_path, monkeypatch, capsys):
    path, tok = files
    monkeypatch.chdir(path.parent)
    line = (
        f"vllm bench serve --dataset-name sharegpt --dataset-path {path.name} --num-prompts 50 --request-rate 5 "
        "--sharegpt-output-len 32 --disable-shuffle --no-oversample --random-input-len 10"
    )
    bench, _ = parse_bench(line)
    d = scenario_dict("H100-SXM", parse_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct"), bench)["workload"]
    assert d["dataset"] == {
        "name": "sharegpt",
        "path": str(path),  # (absolute: a scenario written elsewhere still finds it)
        "tokenizer": "meta-llama/Llama-3.1-8B-Instruct",  # (vllm bench's default: the model's)
        "output_tokens": 32,
        "shuffle": False,
        "oversample": False,
    }
    assert "prompt_tokens" not in d and d["arrivals"] == "vllm_bench"
    serve = "vllm serve meta-llama/Llama-3.1-8B-Instruct"
    assert main(["bench", "--hardware", "H100-SXM", "--serve", serve, "--bench", f"{line} --tokenizer {tok}"]) == 0
    out = capsys.readouterr().out
    assert "vllm bench's ShareGPT sample of" in out and "--random-input-len (the random dataset's)" in out
    assert "Successful requests:" in out
    for bad, message in [
        ("--dataset-name sharegpt", "needs --dataset-path"),
        ("--dataset-name sharegpt --dataset-path x.json --sharegpt-output-len 0", "expected a whole number, 1 or more"),
        (
            f"--dataset-name sharegpt --dataset-path {path.name} --tokenizer nobody/none",
            "nobody/none: no tokenizer.json",
        ),
    ]:
        assert main(["bench", "--hardware", "H100-SXM", "--serve", serve, "--bench", bad]) == 2
        assert message in capsys.readouterr().err


def test_bench_compares_a_sharegpt_run_s_result_with_its_sample(files, tmp_path, capsys):
    """A saved result without its requests (no --save-detailed): the requests are drawn from the
    file, and the run's own figures are set beside llmsim's (no random lengths asked for)."""
    path, tok = files
    result = tmp_path / "result.json"
    figures = {"duration": 12.0, "completed": 50, "request_throughput": 4.2, "mean_ttft_ms": 30.0, "mean_tpot_ms": 7.0}
    result.write_text(json.dumps({"model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 50, **figures}))
    bench = f"--dataset-name sharegpt --dataset-path {path} --tokenizer {tok} --request-rate 5"
    argv = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve meta-llama/Llama-3.1-8B-Instruct"]
    assert main([*argv, "--bench", bench, "--result", str(result)]) == 0
    out = capsys.readouterr().out
    assert "vllm bench's ShareGPT sample of" in out and "result.json" in out.split("===")[-1]


def test_the_second_review_s_files(files, tmp_path, monkeypatch):
    """A review's findings (2026-12-07): vLLM's shuffle counts any entry whose `conversations` has
    two items (a text, an object), and fails only on those it samples; what json.load refuses is refused."""
    path, tok = files
    good = json.loads(path.read_text())
    odd = [{"conversations": "ab"}, {"conversations": {"a": 1, "b": 2}}, "a text", ["a list"], {"other": 1}]
    mixed = good[:60] + odd + good[60:]
    (tmp_path / "mixed.json").write_text(json.dumps(mixed))
    outcomes = set()
    for seed in range(12):  # (the odd entries shift the permutation where vLLM counts them)
        data = [e for e in mixed if "conversations" in e and len(e["conversations"]) >= 2]
        random.seed(seed)
        random.shuffle(data)
        try:
            want = vllm_sample_of(data, tok, 5)
        except (TypeError, KeyError):  # (vLLM reached an odd one: it fails, and so does llmsim)
            with pytest.raises(UserError, match="mixed.json: element 6[01]: conversations"):
                sharegpt.sample(tmp_path / "mixed.json", str(tok), 5, seed)
            outcomes.add("fails")
            continue
        got = sharegpt.sample(tmp_path / "mixed.json", str(tok), 5, seed)
        assert [(tuple(s.prompt_ids.tolist()), s.output_tokens) for s in got] == want
        outcomes.add("samples")
    assert outcomes == {"fails", "samples"}
    bad = {
        "surrogate.json": (
            '[{"conversations": [{"value": "\\ud800 w1 w2 w3 w4"}, {"value": "w1 w2 w3 w4"}]}]',
            "element 0: the tokenizer cannot read its turns (a lone surrogate, \\ud800)",
        ),
        "deep.json": ("[" + "[" * 3000 + "]" * 3000 + "]", "element 0: nested too deeply"),
        "extra.json": ('[{"a": 1}] garbage', "'g' after the array's closing ']'"),
        "twice.json": ("[][]", "'[' after the array's closing ']'"),
        "image.json": (
            '[{"image": "x.png", "conversations": [{"value": "w1 w2 w3 w4"}, {"value": "w1 w2 w3 w4"}]}]',
            "image: a multimodal request",
        ),
        "number.json": ("[5]", "element 0: expected an object"),
    }
    for name, (text, message) in bad.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(UserError, match=name) as err:
            sharegpt.sample(tmp_path / name, str(tok), 3, 0)
        assert message in str(err.value), (name, str(err.value))
    # an entry vLLM never samples is not read (vLLM reads only what it reaches)
    (tmp_path / "late.json").write_text(json.dumps(good + [{"conversations": [{"from": "human"}, {"value": 3}]}]))
    assert len(sharegpt.sample(tmp_path / "late.json", str(tok), 3, 0, shuffle=False)) == 3
    with pytest.raises(UserError, match="not a regular file"):
        sharegpt.sample(Path("/dev/null"), str(tok), 3, 0)
    # huggingface_hub's cache as it finds it: XDG_CACHE_HOME, the older variable, ~, broken links skipped
    snap = tmp_path / "xdg" / "huggingface" / "hub" / "models--o--m" / "snapshots"
    (snap / "good").mkdir(parents=True)
    (snap / "good" / "tokenizer.json").write_text(tok.read_text())
    (snap / "gone").symlink_to(tmp_path / "nowhere")
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tokenizer.tokenizer_file("o/m", "t") == snap / "good" / "tokenizer.json"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", "~/xdg/huggingface/hub")
    assert tokenizer.tokenizer_file("o/m", "t") == snap / "good" / "tokenizer.json"
    # a relative name is a model id, never a file of the directory the command runs in
    monkeypatch.chdir(tok.parent)
    with pytest.raises(UserError, match="tokenizer.json: no tokenizer.json: not a file or folder there"):
        tokenizer.tokenizer_file("tokenizer.json", "t")


def vllm_sample_of(data: list, tok_path: Path, n: int) -> list:
    """vLLM's sample loop over an already shuffled list (``vllm_sample`` without the loading)."""
    tok = tokenizers.Tokenizer.from_file(str(tok_path))
    out = []
    for e in data:
        if len(out) >= n:
            break
        p = tok.encode(e["conversations"][0]["value"]).ids
        o = len(tok.encode(e["conversations"][1]["value"]).ids)
        if 4 <= len(p) <= 1024 and o >= 4 and len(p) + o <= 2048:
            out.append((tuple(p), o))
    return out


def test_bench_reads_output_len_and_refuses_what_vllm_bench_refuses(files, capsys):
    path, tok = files
    serve = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve meta-llama/Llama-3.1-8B-Instruct"]
    line = f"--dataset-name sharegpt --dataset-path {path} --tokenizer {tok} --num-prompts 20 --output-len 100"
    bench, _ = parse_bench(line)
    d = scenario_dict("H100-SXM", parse_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct"), bench)["workload"]
    assert d["dataset"]["output_tokens"] == 100  # (vllm bench serve: args.sharegpt_output_len = args.output_len)
    assert main([*serve, "--bench", line]) == 0
    out = capsys.readouterr().out
    assert "Total generated tokens:                  2000" in out and "--random-output-len" not in out
    for bench_line, message in [
        (f"--dataset-path {path} --num-prompts 2", "Cannot use 'random' dataset with --dataset-path"),
        (
            f"--dataset-name sharegpt --dataset-path {path} --tokenizer {tok} --tokenizer-mode slow",
            "--tokenizer-mode slow",
        ),
    ]:
        assert main([*serve, "--bench", bench_line]) == 2
        assert message in capsys.readouterr().err


def test_a_dataset_counts_against_the_request_limit_before_it_is_read(files):
    from llmsim.build import build_workload

    huge = scenario(files, num_requests=10**9, horizon_s=5)
    with pytest.raises(UserError, match="workload.num_requests"):
        build_workload(scenario_from_dict(huge, "t", ROOT))


def test_prefix_repetition_is_vllm_bench_s_order_request_for_request():
    """vllm bench serve --dataset-name prefix_repetition: K prefixes x N // K suffixes, the requests
    listed prefix by prefix then shuffled with Python's random seeded with --seed."""
    from llmsim.build import build_workload

    bench, _ = parse_bench(
        "--dataset-name prefix_repetition --prefix-repetition-prefix-len 64 --prefix-repetition-suffix-len 32 "
        "--prefix-repetition-num-prefixes 3 --num-prompts 20 --request-rate 4 --seed 5 --output-len 16"
    )
    data = scenario_dict("H100-SXM", parse_serve("vllm serve Qwen/Qwen3-8B"), bench)
    assert data["workload"]["num_requests"] == 18  # (3 x 20 // 3: vLLM makes no more)
    assert data["workload"]["shared_prefix"]["output_len"] == 16  # (--output-len wins)
    wl = build_workload(scenario_from_dict(data, "t", ROOT))
    groups = [g for g in range(3) for _ in range(6)]  # vLLM's list, then random.seed(5); random.shuffle
    random.seed(5)
    random.shuffle(groups)
    first = {}  # each request's first content id names its prefix
    assert [first.setdefault(ids[0], g) for ids, g in zip(wl.block_hashes, groups, strict=True)] == groups
    assert len(first) == 3 and wl.prompt_tokens.tolist() == [96] * 18 and (wl.output_tokens == 16).all()
    fixed, _ = parse_bench(
        "--dataset-name prefix_repetition --prefix-repetition-num-prefixes 2 --num-prompts 4 --disable-shuffle"
    )
    assert (
        scenario_dict("H100-SXM", parse_serve("Qwen/Qwen3-8B"), fixed)["workload"]["shared_prefix"]["order"] == "fixed"
    )
    with pytest.raises(UserError, match="--prefix-repetition-suffix-len 0: expected a whole number, 1 or more"):
        parse_bench("--dataset-name prefix_repetition --prefix-repetition-suffix-len 0")


def test_the_final_review_s_findings(files, tmp_path, capsys):
    """A review of the session (2026-12-07): flags a run does not read are listed, not dropped;
    vLLM's own refusals and bounds; a printout's prefix_repetition run of other lengths refused."""
    path, tok = files
    serve = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve Qwen/Qwen3-8B"]
    assert main([*serve, "--bench", "--num-prompts 4 --tokenizer foo --disable-shuffle --sharegpt-output-len 5"]) == 0
    out = capsys.readouterr().out
    for flag in ("--tokenizer", "--disable-shuffle", "--sharegpt-output-len"):
        assert f"{flag} (not read for the random dataset)" in out
    line = f"--dataset-name sharegpt --dataset-path {path} --tokenizer {tok} --num-prompts 4 --input-len 9"
    assert main([*serve, "--bench", line]) == 0
    assert "--input-len (the random dataset's)" in capsys.readouterr().out
    assert main([*serve, "--bench", f"--dataset-name prefix_repetition --dataset-path {path} --num-prompts 20"]) == 2
    assert "Cannot use 'prefix_repetition' dataset with --dataset-path" in capsys.readouterr().err
    spec = "workload.shared_prefix.question_len={dist: uniform, min: 10, max: 20}"
    assert main([*serve, "--bench", "--dataset-name prefix_repetition --num-prompts 20", "--set", spec]) == 0
    assert "suffixes of drawn" in capsys.readouterr().out
    bench, _ = parse_bench(
        "--dataset-name prefix_repetition --prefix-repetition-prefix-len 0 --num-prompts 20 --request-rate 2"
    )
    w = scenario_dict("H100-SXM", parse_serve("Qwen/Qwen3-8B"), bench)["workload"]
    assert w["shared_prefix"]["system_prompt_len"] == 0 and "arrivals" not in w  # (vLLM's generator is drawn first)
    printout = tmp_path / "run.txt"  # a saved console printout whose Namespace keeps no --prefix-repetition-*
    printout.write_text(
        "Namespace(dataset_name='prefix_repetition', num_prompts=20, request_rate=inf, model='Qwen/Qwen3-8B')\n"
        "============ Serving Benchmark Result ============\nSuccessful requests:                     20\n"
        "Benchmark duration (s):                  10.0\nTotal input tokens:                      61440\n"
        "Total generated tokens:                  320\nRequest throughput (req/s):              2.00\n"
        "==================================================\n"
    )
    assert main([*serve, "--result", str(printout)]) == 2
    assert "give the run's own --bench line" in capsys.readouterr().err


def test_an_image_conversation_that_fails_the_length_check_is_skipped_as_vllm_skips_it(files, tmp_path):
    path, tok = files
    short = {"image": "x.png", "conversations": [{"value": "w1"}, {"value": "w1 w2 w3 w4"}]}  # (a 2-token prompt)
    (tmp_path / "img.json").write_text(json.dumps([short, *json.loads(path.read_text())]))
    assert len(sharegpt.sample(tmp_path / "img.json", str(tok), 3, 0, shuffle=False)) == 3


def test_a_sharegpt_run_after_the_same_run_finds_its_prompts_cached(files, capsys):
    """--after with ShareGPT: the same seed samples the same prompts, whose token ids the server's
    prefix cache kept (vLLM's second pass of a benchmark on one server)."""
    path, tok = files
    line = f"--dataset-name sharegpt --dataset-path {path} --tokenizer {tok} --num-prompts 60 --request-rate 4"
    argv = [
        "bench",
        "--hardware",
        "H100-SXM",
        "--serve",
        "vllm serve meta-llama/Llama-3.1-8B-Instruct",
        "--bench",
        line,
    ]
    assert main([*argv, "--json"]) == 0
    cold = json.loads(capsys.readouterr().out)["prefix_cache"]["hit_rate"]
    assert main([*argv, "--after", line, "--json"]) == 0
    warm = json.loads(capsys.readouterr().out)
    assert warm["prefix_cache"]["hit_rate"] > cold + 0.5 and warm["history"]["not_simulated"] is None


TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


def test_vllm_bench_s_custom_dataset_with_and_without_the_chat_template(files, tmp_path, capsys):
    """--dataset-name custom: JSONL prompts shuffled with the seed, the first --num-prompts taken
    (no length check), each rendered by the model's chat template unless --skip-chat-template."""
    from llmsim.workload import custom

    _, tok = files
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(tok.read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "bos_token": "<s>"}))
    rng = random.Random(3)
    rows = [{"prompt": " ".join(rng.choices(WORDS, k=rng.randrange(1, 40)))} for _ in range(30)]
    data = tmp_path / "prompts.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    t = tokenizers.Tokenizer.from_file(str(tok))
    order = list(range(30))
    random.seed(7)
    random.shuffle(order)  # (vLLM's random.seed(seed); random.shuffle(data))
    plain = custom.sample(data, str(folder), 10, 7, chat_template=False)
    assert [s.prompt_ids.tolist() for s in plain] == [t.encode(rows[i]["prompt"]).ids for i in order[:10]]
    assert {s.output_tokens for s in plain} == {256}  # (--custom-output-len's default)
    templated = custom.sample(data, str(folder), 40, 7, output_tokens=64)  # (past the file: oversampled)
    first = f"<s>[user] {rows[order[0]]['prompt']}\n[assistant]"
    assert templated[0].prompt_ids.tolist() == t.encode(first).ids and len(templated) == 40
    (folder / "tokenizer_config.json").write_text("{}")
    with pytest.raises(UserError, match="has no chat template .*--skip-chat-template"):
        custom.sample(data, str(folder), 5, 8)
    (tmp_path / "bad.jsonl").write_text('{"prompt": "w1"}\n{"text": "w2"}\n')
    with pytest.raises(UserError, match="bad.jsonl: line 2: expected an object with a `prompt` text"):
        custom.sample(tmp_path / "bad.jsonl", str(folder), 5, 0, chat_template=False)
    serve = ["bench", "--hardware", "H100-SXM", "--serve", "vllm serve meta-llama/Llama-3.1-8B-Instruct"]
    line = f"--dataset-name custom --dataset-path {data} --tokenizer {folder} --num-prompts 12 --skip-chat-template"
    bench, _ = parse_bench(f"{line} --custom-output-len 32")
    d = scenario_dict("H100-SXM", parse_serve("meta-llama/Llama-3.1-8B-Instruct"), bench)["workload"]["dataset"]
    assert d["name"] == "custom" and d["chat_template"] is False and d["output_tokens"] == 32
    assert main([*serve, "--bench", line]) == 0
    out = capsys.readouterr().out
    assert "custom sample of" in out and "as written (--skip-chat-template)" in out
    assert "Total generated tokens:                  3072" in out  # (12 x 256)
    assert main([*serve, "--bench", f"--dataset-name custom --dataset-path {tok} --num-prompts 2"]) == 2
    assert "from a .jsonl file only" in capsys.readouterr().err
    with pytest.raises(UserError, match="--custom-output-len -1"):
        parse_bench("--dataset-name custom --custom-output-len -1")


def test_the_custom_review_s_templates_and_lines(files, tmp_path):
    """(A review, 2026-12-07.) strftime_now, tools / documents none, {% generation %},
    special_tokens_map.json; a raw tab inside a prompt and a lone surrogate read as pandas reads them."""
    from llmsim.workload import custom

    _, tok = files
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(tok.read_text())
    (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": {"content": "<s>"}}))
    for template, want in [
        ("{{ strftime_now('%d %b %Y') }} {{ messages[0].content }}", "01 Jan 2026 w1 w2"),
        ("{% if tools is not none %}T {% endif %}{{ messages[0].content }}", "w1 w2"),
        ("{% for m in messages %}{{ m.content }}{% generation %} w3{% endgeneration %}{% endfor %}", "w1 w2 w3"),
        ("{{ bos_token }} {{ messages[0].content }}", "<s> w1 w2"),
    ]:
        (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
        assert custom.template_renderer(folder / "tokenizer.json", "t")("w1 w2") == want
    (folder / "tokenizer_config.json").write_text("[]")
    with pytest.raises(UserError, match="tokenizer_config.json: expected a JSON object"):
        custom.template_renderer(folder / "tokenizer.json", "t")
    (tmp_path / "odd.jsonl").write_text('{"prompt": "w1\tw2"}\n{"prompt": "w3 \\ud800 w4"}\n')
    got = custom.sample(tmp_path / "odd.jsonl", str(folder), 2, 0, chat_template=False, shuffle=False)
    t = tokenizers.Tokenizer.from_file(str(tok))
    assert [s.prompt_ids.tolist() for s in got] == [t.encode("w1\tw2").ids, t.encode("w3  w4").ids]
