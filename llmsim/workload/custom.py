"""``vllm bench serve --dataset-name custom``: the requests it sends from a JSONL file of prompts,
drawn as vLLM draws them (vllm/benchmarks/datasets/custom.py, ``CustomDataset``, read on main, 2026):

- every line is an object with a ``prompt`` (``pandas.read_json(lines=True)``); the rows are
  shuffled with Python's ``random`` seeded with ``--seed`` (unless ``--disable-shuffle``);
- in that order the first ``--num-prompts`` are taken, with no length check; short of them,
  ``random.choice`` (reseeded) repeats them (unless ``--no-oversample``);
- unless ``--skip-chat-template``, a prompt is sent as the model's chat template renders one user
  message with the generation prompt (``tokenizer.apply_chat_template(..., add_generation_prompt=True,
  tokenize=False)``), and its tokens are counted as ``tokenizer(text)`` counts them;
- every answer asks ``--custom-output-len`` tokens (256 by default).

The chat template is rendered as transformers renders it: jinja2's sandbox with ``trim_blocks`` and
``lstrip_blocks``, the loop controls and the ``{% generation %}`` block, its ``tojson`` filter,
``raise_exception`` and ``strftime_now``, ``tools`` and ``documents`` none, and the tokenizer's special
tokens by name (``bos_token``, ...; ``special_tokens_map.json`` over ``tokenizer_config.json``), from
``chat_template.jinja`` or ``tokenizer_config.json`` beside the ``tokenizer.json``. ``strftime_now``
formats a fixed date (``TEMPLATE_DATE``), not today's: a template that dates its system prompt
(Llama 3.1's) then reads the same every day, so a run does not change with the calendar (a token
or so). A line is read as pandas reads it: control characters inside a text kept, a lone surrogate's
escape dropped. The file is
read as a stream, one line at a time, twice (its rows, then those sampled).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from llmsim.errors import UserError
from llmsim.workload.limits import MAX_TOKENS_PER_REQUEST
from llmsim.workload.tokenizer import Sample, bench_order, dataset_key, load_tokenizer, oversampled, token_ids

DEFAULT_OUTPUT_TOKENS = 256  # vllm bench serve --custom-output-len's default
TEMPLATE_DATE = datetime(2026, 1, 1)  # what a chat template's strftime_now formats (module docstring)
_DECODER = json.JSONDecoder(strict=False)  # (control characters inside a text, as pandas reads them)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_TEMPLATE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def sample(
    path: Path,
    tokenizer_name: str,
    num_requests: int,
    seed: int,
    output_tokens: int | None = None,
    shuffle: bool = True,
    oversample: bool = True,
    chat_template: bool = True,
    where: str = "workload.dataset",
) -> list[Sample]:
    """The requests ``vllm bench serve --dataset-name custom`` sends (module docstring), memoised
    for the life of the process on the file's and the tokenizer's size and time."""
    key = dataset_key(path, tokenizer_name, where)
    folder = Path(key[3]).parent  # (the template's files too: an edited one is sampled again)
    key += tuple((folder / f).stat().st_mtime_ns if (folder / f).is_file() else 0 for f in _TEMPLATE_FILES)
    out = output_tokens or DEFAULT_OUTPUT_TOKENS
    return list(_sample(key, num_requests, seed, out, shuffle, oversample, chat_template, where))


def _rows(path: Path, where: str) -> Iterator[tuple[int, str]]:
    """Each row's line number (from 1) and prompt; a line that is not an object with a ``prompt``
    text is a UserError naming it (pandas fails on the file there, and vLLM with it)."""
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed below, after the last row
    except OSError as exc:
        raise UserError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    with fh:
        try:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = _DECODER.decode(line)
                except ValueError as exc:
                    raise UserError(f"{where}: line {number}: not JSON ({exc})") from None
                prompt = row.get("prompt") if isinstance(row, dict) else None
                if not isinstance(prompt, str):
                    raise UserError(f"{where}: line {number}: expected an object with a `prompt` text")
                yield number, _LONE_SURROGATE.sub("", prompt)
        except UnicodeDecodeError as exc:
            raise UserError(f"{where}: not UTF-8 text ({exc.reason})") from None


def _prompts(path: Path, wanted: set[int], where: str) -> dict[int, tuple[int, str]]:
    """The line numbers and prompts of the rows numbered ``wanted`` (from 0, in the file's order)."""
    out: dict[int, tuple[int, str]] = {}
    for row, (number, prompt) in enumerate(_rows(path, where)):
        if row in wanted:
            out[row] = number, prompt
            if len(out) == len(wanted):
                break
    return out


@lru_cache(maxsize=4)
def _sample(
    key: tuple,
    num_requests: int,
    seed: int,
    output_tokens: int,
    shuffle: bool,
    oversample: bool,
    chat_template: bool,
    where: str,
) -> tuple[Sample, ...]:
    path, tok_path = Path(key[0]), Path(key[3])
    file_where = f"{where}.path {path}"
    tokenizer = load_tokenizer(tok_path, f"{where}.tokenizer")
    render = template_renderer(tok_path, f"{where}.tokenizer") if chat_template else None
    order = bench_order(sum(1 for _ in _rows(path, file_where)), seed, shuffle)
    if not order:
        raise UserError(f'{file_where}: no prompt in it (a JSONL file of {{"prompt": ...}} lines)')
    chosen = order[:num_requests]
    prompts = _prompts(path, set(chosen), file_where)
    texts = [render(prompts[i][1]) if render else prompts[i][1] for i in chosen]
    ids = token_ids(tokenizer, texts)
    for i, prompt in zip(chosen, ids, strict=True):  # (refused here, before its blocks are hashed)
        if len(prompt) > MAX_TOKENS_PER_REQUEST:
            raise UserError(
                f"{file_where}: line {prompts[i][0]}: its prompt is {len(prompt):,} tokens, over the limit of "
                f"{MAX_TOKENS_PER_REQUEST:,} tokens per request"
            )
    samples = [Sample(prompt, output_tokens) for prompt in ids]
    return tuple(oversampled(samples, num_requests, seed) if oversample else samples)


# ---- the chat template ---------------------------------------------------------------------------


def template_renderer(tok_path: Path, where: str) -> Any:
    """A function rendering one user message as the model's chat template does, with the generation
    prompt (``apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
    tokenize=False)``), or a UserError where the tokenizer has no template (as transformers raises)."""
    from jinja2 import TemplateError, ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    folder = tok_path.parent
    config, special = (
        _json_object(folder / name, where) for name in ("tokenizer_config.json", "special_tokens_map.json")
    )
    source = config.get("chat_template")
    if (folder / "chat_template.jinja").is_file():  # (transformers saves the template apart since 4.5x)
        source = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if isinstance(source, list):  # (named templates: the default one, as transformers picks)
        source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(source, str):
        raise UserError(
            f"{where} {tok_path}: the tokenizer has no chat template (tokenizer_config.json's chat_template, or "
            "chat_template.jinja); vllm bench serve fails the same way: pass --skip-chat-template "
            "(workload.dataset.chat_template: false)"
        )

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys: bool = False):  # noqa: ANN001, ANN202
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[ext.loopcontrols, _generation_extension()]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = TEMPLATE_DATE.strftime
    try:
        template = env.from_string(source)
    except TemplateError as exc:
        raise UserError(f"{where} {tok_path}: its chat template does not parse ({exc})") from None
    tokens = {
        k: v.get("content") if isinstance(v, dict) else v
        for k, v in {**config, **special}.items()
        if k.endswith("_token") and isinstance(v, str | dict)
    }

    def render(prompt: str) -> str:
        try:
            message = [{"role": "user", "content": prompt}]
            return template.render(messages=message, tools=None, documents=None, add_generation_prompt=True, **tokens)
        except TemplateError as exc:
            raise UserError(f"{where} {tok_path}: its chat template fails on a prompt ({exc})") from None

    return render


def _json_object(path: Path, where: str) -> dict:
    """A tokenizer folder's JSON object file ({} where it has none)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UserError(f"{where}: {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}: {path}: expected a JSON object")
    return data


def _generation_extension() -> type:
    """transformers' ``{% generation %}`` block (its AssistantTracker marks the assistant's tokens
    for training masks): rendered as its body."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser):  # noqa: ANN001, ANN202 - jinja2's extension protocol
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return Generation
