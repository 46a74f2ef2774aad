"""``vllm bench serve --dataset-name sharegpt``: the requests it sends, drawn from the user's file
as vLLM draws them, so a run can be simulated before it is made.

vLLM (``vllm/benchmarks/datasets/sharegpt.py`` and ``utils.py``, read on main, 2026; the same
rules since ``benchmark_serving.py``'s ``sample_sharegpt_requests``):
- the file is a JSON array of conversations; the entries whose ``conversations`` has two items or
  more are kept (``_kept``: whatever its type; an entry is read further only if sampled), then
  shuffled with Python's ``random`` seeded with ``--seed`` (unless ``--disable-shuffle``);
- in that order, a conversation's first turn is the prompt and its second the expected answer,
  both tokenised with the benchmark's tokenizer (``tokenizer(text).input_ids``: special tokens
  added, a BOS where the tokenizer adds one); ``--sharegpt-output-len`` replaces the answer's length;
- ``is_valid_sequence`` drops a pair whose prompt has under 4 tokens, whose answer has under 4
  (unless the length was given), whose prompt has over 1,024, or whose two have over 2,048 together;
  a pair that passes with an ``image`` or ``video`` is a multimodal request (refused here);
- sampling stops at ``--num-prompts``; short of it, ``random.choice`` (reseeded with the seed)
  repeats sampled requests until there are enough (unless ``--no-oversample``).

The prompt's token ids are kept (hashed into the prefix cache's block ids by the caller), so a
repeated prompt hits the cache as it does in vLLM. A ShareGPT file is hundreds of MB, so it is read
as a stream, one conversation at a time, and read again for the conversations the sample needs:
memory holds the sample, never the file. Tokenising needs the ``tokenizers`` package and the
model's ``tokenizer.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.errors import UserError
from llmsim.workload.tokenizer import Sample, bench_order, dataset_key, load_tokenizer, oversampled, token_ids

# vllm/benchmarks/datasets/utils.py is_valid_sequence's defaults
MIN_TOKENS, MAX_PROMPT_TOKENS, MAX_TOTAL_TOKENS = 4, 1024, 2048
_CHUNK_CHARS = 1 << 20  # characters read from the file at a time
_ENCODE_BATCH = 256  # conversations tokenised at a time
_CUT_CHARS = 8  # a JSON token cut within this many characters of the buffer's end may read wrong ("fals", "-1.5e")


def is_valid(prompt_tokens: int, output_tokens: int, output_given: bool) -> bool:
    """vLLM's ``is_valid_sequence`` at its defaults."""
    return not (
        prompt_tokens < MIN_TOKENS
        or (not output_given and output_tokens < MIN_TOKENS)
        or prompt_tokens > MAX_PROMPT_TOKENS
        or prompt_tokens + output_tokens > MAX_TOTAL_TOKENS
    )


# ---- the file, as a stream of conversations ------------------------------------------------------


def iter_array(path: Path, where: str, chunk_chars: int = _CHUNK_CHARS) -> Iterator[Any]:
    """The elements of the JSON array in ``path``, one at a time, holding at most one element (and
    a chunk) in memory. A file that is not an array, or an element that is not JSON, is a UserError
    naming the element."""
    decoder = json.JSONDecoder()
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed below, after the generator's last element
    except OSError as exc:
        raise UserError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    with fh:
        buf, pos, eof, index = "", 0, False, 0  # (index: the element being read)

        def more(need: int) -> bool:
            """Read at least ``need`` characters more (False at the end of the file)."""
            nonlocal buf, pos, eof
            if eof:
                return False
            try:
                text = fh.read(max(need, chunk_chars))
            except UnicodeDecodeError as exc:
                raise UserError(
                    f"{where}: not UTF-8 text ({exc.reason}, at element {index} or the space after it)"
                ) from None
            if not text:
                eof = True
                return False
            buf = buf[pos:] + text
            pos = 0
            return True

        def skip_space() -> str:
            """The next character that is not white space ("" at the end of the file)."""
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buf):
                    return buf[pos]
                if not more(chunk_chars):
                    return ""

        if skip_space() != "[":
            raise UserError(f"{where}: expected a JSON array of conversations (ShareGPT's format: [{{...}}, ...])")
        pos += 1

        def closed() -> None:
            """The array's ']' is the file's last word (json.load refuses "Extra data" after it)."""
            nonlocal pos
            pos += 1
            rest = skip_space()
            if rest:
                raise UserError(f"{where}: {rest!r} after the array's closing ']': expected the end of the file")

        if skip_space() == "]":
            closed()
            return
        while True:
            while True:  # one element; read on while the buffer's end may cut it off
                try:
                    element, end = decoder.raw_decode(buf, pos)
                except RecursionError:
                    raise UserError(f"{where}: element {index}: nested too deeply to read") from None
                except json.JSONDecodeError as exc:
                    # where the buffer's end may cut it off (the error within a literal's, a number's or
                    # an escape's length of the end, or a string still open), read on, doubling, so an
                    # element of any size is decoded a few times at most; an error further inside is the
                    # element's own, named without reading the rest of the file
                    open_string = exc.msg.startswith("Unterminated string")
                    if (open_string or exc.pos >= len(buf) - _CUT_CHARS) and more(len(buf) - pos):
                        continue
                    if open_string or exc.pos >= len(buf):
                        raise UserError(f"{where}: the file ends inside element {index}") from None
                    raise UserError(f"{where}: element {index}: not JSON ({exc.msg})") from None
                # (a number cut by the buffer's end decodes as its first digits, "-1." as -1: decode again with more)
                if end >= len(buf) - _CUT_CHARS and more(len(buf) - pos):
                    continue
                break
            pos = end
            yield element
            index += 1
            sep = skip_space()
            if sep == "]":
                closed()
                return
            if sep != ",":
                raise UserError(f"{where}: after element {index - 1}: expected ',' or ']', got {sep or 'the end'!r}")
            pos += 1
            skip_space()


def _kept(entry: Any, index: int, where: str) -> bool:
    """Whether vLLM keeps an element for its shuffle: ``"conversations" in entry and
    len(entry["conversations"]) >= 2``, whatever the value's type (a text or an object of two keys
    counts, and fails only if sampled). Where that expression itself fails in vLLM (a number, or
    a text or list holding the word), so does this, naming the element."""
    if isinstance(entry, str | list):
        if "conversations" in entry:  # (vLLM then indexes a text or a list by a string)
            raise UserError(f"{where}: element {index}: expected an object with a `conversations` list")
        return False
    if not isinstance(entry, dict):
        raise UserError(f"{where}: element {index}: expected an object with a `conversations` list, got {entry!r:.40}")
    if "conversations" not in entry:
        return False
    turns = entry["conversations"]
    if not isinstance(turns, str | list | dict):
        raise UserError(f"{where}: element {index}: conversations: expected a list of turns, got {turns!r:.40}")
    return len(turns) >= 2


def _turns(entry: dict, index: int, where: str) -> tuple[str, str, UserError | None]:
    """A sampled conversation's first two turns' texts (what vLLM reads of it: ``[0]["value"]`` and
    ``[1]["value"]``), and for one with an ``image`` or ``video`` the refusal raised if it passes
    the length check (vLLM sends those as multimodal requests: process_image / process_video)."""
    media = [k for k in ("image", "video") if entry.get(k)]
    multimodal = None
    if media:
        multimodal = UserError(
            f"{where}: element {index}: {media[0]}: a multimodal request, which llmsim does not model"
        )
    turns = entry["conversations"]
    texts = []
    for k in (0, 1):
        turn = turns[k] if isinstance(turns, list) else None
        value = turn.get("value") if isinstance(turn, dict) else None
        if not isinstance(value, str):
            raise UserError(f"{where}: element {index}: conversations[{k}]: expected an object with a `value` text")
        texts.append(value)
    return texts[0], texts[1], multimodal


def _pairs(path: Path, wanted: set[int], where: str) -> dict[int, tuple[int, str, str, UserError | None] | UserError]:
    """The element number and first two turns of the kept conversations numbered ``wanted``, or why
    they cannot be read (raised only if the sample reaches them, as vLLM fails only there)."""
    out: dict[int, tuple[int, str, str, UserError | None] | UserError] = {}
    kept = 0
    for index, entry in enumerate(iter_array(path, where)):
        if not _kept(entry, index, where):
            continue
        if kept in wanted:
            try:
                out[kept] = (index, *_turns(entry, index, where))
            except UserError as exc:
                out[kept] = exc
            if len(out) == len(wanted):
                break
        kept += 1
    return out


def _count(path: Path, where: str) -> int:
    """How many elements vLLM keeps (``_kept``), each checked on the way."""
    return sum(_kept(entry, index, where) for index, entry in enumerate(iter_array(path, where)))


def _encoded(tokenizer: Any, group: list, turns: int, where: str) -> list[list[np.ndarray] | None]:
    """The token ids of each pair's first ``turns`` texts (None for a pair that could not be read),
    the group at once; where the tokenizer refuses one (a lone surrogate's escape), pair by pair,
    the refusal raised as the pair's own UserError in its place (raised if the sample reaches it)."""
    texts = [list(pair[1 : 1 + turns]) for pair in group if not isinstance(pair, UserError)]
    try:
        ids = iter(token_ids(tokenizer, [t for pair in texts for t in pair]))
        return [None if isinstance(pair, UserError) else [next(ids) for _ in range(turns)] for pair in group]
    except Exception:  # (the Rust side's own type: which text it was is found one by one)
        out: list[list[np.ndarray] | None] = []
        for k, pair in enumerate(group):
            if isinstance(pair, UserError):
                out.append(None)
                continue
            try:
                out.append(token_ids(tokenizer, list(pair[1 : 1 + turns])))
            except Exception as exc:
                lone = [c for text in pair[1:3] for c in text if 0xD800 <= ord(c) <= 0xDFFF]
                why = f"a lone surrogate, \\u{ord(lone[0]):04x}" if lone else str(exc).splitlines()[0][:80]
                group[k] = UserError(f"{where}: element {pair[0]}: the tokenizer cannot read its turns ({why})")
                out.append(None)
        return out


# ---- the sample ----------------------------------------------------------------------------------


def sample(
    path: Path,
    tokenizer_name: str,
    num_requests: int,
    seed: int,
    output_tokens: int | None = None,
    shuffle: bool = True,
    oversample: bool = True,
    where: str = "workload.dataset",
) -> list[Sample]:
    """The requests ``vllm bench serve --dataset-name sharegpt`` sends (module docstring), memoised
    for the life of the process on the file's size and time (a sweep samples once)."""
    key = dataset_key(path, tokenizer_name, where)
    return list(_sample(key, num_requests, seed, output_tokens, shuffle, oversample, where))


@lru_cache(maxsize=4)
def _sample(
    key: tuple, num_requests: int, seed: int, output_tokens: int | None, shuffle: bool, oversample: bool, where: str
) -> tuple[Sample, ...]:
    path, tok_path = Path(key[0]), Path(key[3])
    file_where = f"{where}.path {path}"
    tokenizer = load_tokenizer(tok_path, f"{where}.tokenizer")
    order = bench_order(_count(path, file_where), seed, shuffle)
    samples: list[Sample] = []
    # (the answers' lengths only where the dataset sets them: vLLM tokenises them anyway, unused)
    turns = 1 if output_tokens is not None else 2
    start, batch = 0, num_requests + num_requests // 2 + 64  # (most ShareGPT pairs pass the length check)
    while len(samples) < num_requests and start < len(order):
        chosen = order[start : start + batch]
        pairs = _pairs(path, set(chosen), file_where)
        for k in range(0, len(chosen), _ENCODE_BATCH):
            group = [pairs.pop(i) for i in chosen[k : k + _ENCODE_BATCH]]
            encoded = _encoded(tokenizer, group, turns, file_where)  # (a refused text: its pair becomes the error)
            for pair, ids in zip(group, encoded, strict=True):
                if len(samples) == num_requests:
                    break
                if isinstance(pair, UserError) or ids is None:  # (reached: vLLM fails here too)
                    raise pair if isinstance(pair, UserError) else AssertionError(pair)
                out = len(ids[1]) if output_tokens is None else output_tokens
                if is_valid(len(ids[0]), out, output_tokens is not None):
                    if pair[3] is not None:  # (an image or video beside a valid pair: multimodal in vLLM)
                        raise pair[3]
                    samples.append(Sample(ids[0], out))
        start, batch = start + batch, 2 * batch
    if not samples:
        given = "" if output_tokens is None else f"; the answers' length is set to {output_tokens:,}"
        raise UserError(
            f"{file_where}: no conversation passes vLLM's length check (a prompt of {MIN_TOKENS}-{MAX_PROMPT_TOKENS} "
            f"tokens, an answer of {MIN_TOKENS} or more, {MAX_TOTAL_TOKENS} together at most{given})"
        )
    return tuple(oversampled(samples, num_requests, seed) if oversample else samples)
