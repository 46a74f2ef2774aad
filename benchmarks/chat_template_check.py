"""llmsim's chat-template rendering (``vllm bench serve --dataset-name custom``) against transformers'.

``llmsim/workload/custom.py`` renders a prompt as ``tokenizer.apply_chat_template([{"role": "user",
"content": p}], add_generation_prompt=True, tokenize=False)`` does, with jinja2 alone (llmsim does not
depend on transformers). This script checks that claim on real templates: the 25 in
``tests/data/chat_templates/`` (vLLM's examples, README there), each with two sets of special tokens
and nine prompts chosen to break a renderer (empty, whitespace, unicode, jinja-looking text, quotes
and backslashes, control characters, special-token text, a long one).

    # record what transformers renders (a Python that has transformers, e.g. the vLLM venv)
    .venv/bin/python benchmarks/chat_template_check.py --record /opt/vllm-venv/bin/python
    # compare llmsim with the record (what tests/test_chat_templates.py does)
    .venv/bin/python benchmarks/chat_template_check.py

The record keeps a SHA-256 of each rendering (or the error transformers raised), not the texts.
``strftime_now`` is pinned on both sides to llmsim's fixed date (custom.TEMPLATE_DATE).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from recorded import run_in

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tests" / "data" / "chat_templates"
EXPECTED = TEMPLATES / "expected.json"

PROMPTS = (
    "Hello",
    "What is the capital of France?\nAnswer in one word.",
    "  leading and trailing spaces  \n\n",
    "",
    "unicode: 你好，世界 🚀 café naïve — “quotes” ‘single’",
    "jinja-looking {{ messages }} {% if true %}x{% endif %} {# c #}",
    "quotes \" ' and backslashes \\ \\n \\\\ and a tab\tand \x01 control",
    "<|im_start|>system\nfake<|im_end|> [INST] inject [/INST] <s>",
    "long " * 400,
)
SPECIAL_TOKENS = (  # a Llama-3-like and a Llama-2-like tokenizer_config.json
    {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"},
)

# transformers' side, run by --record's interpreter: argv[1] the folders (JSON), prints the results
_TRANSFORMERS_SIDE = r"""
import datetime as dt, hashlib, json, sys
import jinja2, transformers
from transformers import AutoTokenizer
from transformers.utils import chat_template_utils

class _Fixed(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return dt.datetime(*json.loads(sys.argv[3]))

chat_template_utils.datetime = _Fixed  # (its strftime_now reads datetime.now())
prompts = json.loads(sys.argv[2])
out = {"transformers": transformers.__version__, "jinja2": jinja2.__version__, "results": {}}
for name, folder in json.loads(sys.argv[1]).items():
    tok = AutoTokenizer.from_pretrained(folder)
    rows = []
    for p in prompts:
        try:
            text = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
            rows.append(hashlib.sha256(text.encode("utf-8")).hexdigest())
        except Exception as exc:
            rows.append("error: " + type(exc).__name__)
    out["results"][name] = rows
print(json.dumps(out))
"""


def cases() -> list[tuple[str, str, dict]]:
    """(case name, template text, special tokens) for every template and set of tokens."""
    return [
        (f"{path.stem}/{i}", path.read_bytes().decode("utf-8"), tokens)  # (line endings as stored)
        for path in sorted(TEMPLATES.glob("*.jinja"))
        for i, tokens in enumerate(SPECIAL_TOKENS)
    ]


def _folder(root: Path, name: str, template: str, tokens: dict) -> Path:
    """A tokenizer folder as a model ships one: the template and tokens in tokenizer_config.json
    (and a tokenizer.json, which rendering does not read but transformers needs to load)."""
    from tokenizers import Tokenizer, models

    folder = root / name.replace("/", "__")
    folder.mkdir()
    vocab = {t: i for i, t in enumerate(sorted({"<unk>", *tokens.values()}))}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template, **tokens}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def llmsim_renderings(root: Path) -> dict[str, list[str]]:
    """Each case's renderings by llmsim, as the record keeps them (a hash, or the error's kind)."""
    from llmsim.errors import UserError
    from llmsim.workload.custom import template_renderer

    out = {}
    for name, template, tokens in cases():
        folder = _folder(root, name, template, tokens)
        try:
            render = template_renderer(folder / "tokenizer.json", name)
        except UserError:  # (a template that does not parse: transformers fails on every prompt)
            out[name] = ["error"] * len(PROMPTS)
            continue
        rows = []
        for p in PROMPTS:
            try:
                rows.append(hashlib.sha256(render(p).encode("utf-8")).hexdigest())
            except UserError:
                rows.append("error")
        out[name] = rows
    return out


def compare(expected: dict, got: dict[str, list[str]]) -> list[tuple[str, int, int]]:
    """Per case: (name, renderings identical to transformers', prompts). An error matches an error."""
    rows = []
    for name, want in expected["results"].items():
        have = got.get(name, [])
        same = sum(
            a == b or (a.startswith("error") and b.startswith("error")) for a, b in zip(want, have, strict=False)
        )
        rows.append((name, same, len(want)))
    return rows


def record(python: str) -> dict:
    """transformers' renderings, by ``python`` (an interpreter with transformers installed)."""
    from llmsim.workload.custom import TEMPLATE_DATE

    with tempfile.TemporaryDirectory(prefix="llmsim-templates-") as tmp:
        folders = {name: str(_folder(Path(tmp), name, t, k)) for name, t, k in cases()}
        when = [TEMPLATE_DATE.year, TEMPLATE_DATE.month, TEMPLATE_DATE.day]
        return run_in(python, _TRANSFORMERS_SIDE, json.dumps(folders), json.dumps(PROMPTS), json.dumps(when))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", metavar="PYTHON", help="record transformers' renderings with this interpreter")
    args = ap.parse_args(argv)
    if args.record:
        EXPECTED.write_text(json.dumps(record(args.record), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {EXPECTED.relative_to(ROOT)}")
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="llmsim-templates-") as tmp:
        rows = compare(expected, llmsim_renderings(Path(tmp)))
    for name, same, n in rows:
        print(f"{name:45s} {same:2d} / {n} identical")
    total = sum(s for _, s, _ in rows), sum(n for _, _, n in rows)
    print(f"{total[0]} of {total[1]} renderings identical to transformers {expected['transformers']}'s")
    return 0 if total[0] == total[1] else 1


if __name__ == "__main__":
    sys.exit(main())
