"""A benchmark dataset's tokens as vLLM's benchmark counts them: the model's ``tokenizer.json``
found as huggingface_hub finds it, read with the ``tokenizers`` package (the fast tokenizer
``AutoTokenizer`` loads), and what the dataset samplers share (``Sample``, oversampling, the
memo key of a dataset file and its tokenizer)."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.errors import UserError
from llmsim.workload.limits import MAX_REQUESTS


@dataclass(frozen=True)
class Sample:
    """One request of a sample: its prompt's token ids and the tokens it asks for."""

    prompt_ids: np.ndarray  # int64
    output_tokens: int


def bench_order(n: int, seed: int, shuffle: bool = True) -> list[int]:
    """The order vllm bench serve's datasets send their ``n`` listed requests in: ``random.seed(seed)``
    then ``random.shuffle`` of the list (the permutation depends on the length only, so shuffling the
    positions gives it), or as listed (``--disable-shuffle``)."""
    order = list(range(n))
    if shuffle:
        random.Random(seed).shuffle(order)
    return order


def oversampled(samples: list[Sample], num_requests: int, seed: int) -> list[Sample]:
    """``samples`` repeated up to ``num_requests`` as vLLM's ``maybe_oversample_requests`` does:
    ``random.choice`` of the sample, the generator reseeded with the seed first."""
    if len(samples) >= num_requests:
        return samples
    assert num_requests <= MAX_REQUESTS  # (the workload's bound, checked before sampling: build)
    pick = random.Random(seed)
    return samples + [pick.choice(samples) for _ in range(num_requests - len(samples))]


def dataset_key(path: Path, tokenizer_name: str, where: str) -> tuple:
    """A dataset file and its tokenizer, checked, as the key a sample is memoised on for the life of
    the process (their sizes and times: a sweep samples once, an edited file again)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise UserError(f"{where}.path {path}: cannot read it ({exc.strerror or exc})") from None
    if not path.is_file():  # (a pipe or a device: it is read twice, and /dev/zero never ends)
        raise UserError(f"{where}.path {path}: not a regular file (the dataset's file)")
    tok_path = tokenizer_file(tokenizer_name, f"{where}.tokenizer")
    return (str(path), stat.st_size, stat.st_mtime_ns, str(tok_path), tok_path.stat().st_mtime_ns)


def hf_cache_dirs() -> list[Path]:
    """Where huggingface_hub keeps downloaded models (its constants.py): $HF_HUB_CACHE, else the
    older $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, $HF_HOME defaulting to $XDG_CACHE_HOME/huggingface
    and that to ~/.cache/huggingface; ``~`` expanded as it expands it."""
    env = os.environ
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if hub:
        return [Path(hub).expanduser()]
    xdg = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return [Path(env.get("HF_HOME") or xdg / "huggingface").expanduser() / "hub"]


def tokenizer_file(name: str, where: str) -> Path:
    """The ``tokenizer.json`` of ``name``: the file itself, a folder holding it, or a model id
    downloaded to the Hugging Face cache (its ``refs/main`` snapshot, else the newest)."""
    given = Path(name).expanduser()
    if given.is_absolute() and given.is_file():  # (a relative name is a model id: a path is made absolute
        return given  # where it was given, beside the scenario or the command's directory)
    if given.is_absolute() and given.is_dir():
        if (given / "tokenizer.json").is_file():
            return given / "tokenizer.json"
        raise UserError(f"{where} {name}: the folder has no tokenizer.json (a fast tokenizer's file)")
    looked = []
    for cache in hf_cache_dirs():
        repo = cache / ("models--" + name.replace("/", "--"))
        looked.append(str(repo))
        ref = repo / "refs" / "main"
        snapshots = [repo / "snapshots" / ref.read_text().strip()] if ref.is_file() else []
        found = [p for p in (repo / "snapshots").glob("*") if p.exists()]  # (a broken link left out)
        snapshots += sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
        for snap in snapshots:
            if (snap / "tokenizer.json").is_file():
                return snap / "tokenizer.json"
    raise UserError(
        f"{where} {name}: no tokenizer.json: not a file or folder there, nor a model in the Hugging Face cache "
        f"({', '.join(looked)}); give the path of the model's tokenizer.json or of its folder (vllm bench serve: --tokenizer)"
    )


def load_tokenizer(path: Path, where: str) -> Any:
    """A ``tokenizers.Tokenizer`` read from ``path``."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError(
            f"{where}: tokenising the dataset needs the `tokenizers` package (pip install 'llmsim[sharegpt]', or tokenizers)"
        ) from None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # (the Rust side raises its own exception type)
        raise UserError(f"{where} {path}: not a tokenizer.json that `tokenizers` reads ({exc})") from None


# characters tokenised at once: an encoding holds each token's text and offsets (~200 bytes a token),
# so texts go to the tokenizer in batches of about this much, and a longer one in pieces
PIECE_CHARS = 1 << 20


def token_ids(tokenizer: Any, texts: list[str]) -> list[np.ndarray]:
    """Each text's token ids, special tokens added as ``tokenizer(text)`` adds them; memory stays
    bounded by ``PIECE_CHARS`` whatever the texts' lengths (``_long_ids``)."""
    out: list[np.ndarray] = []
    batch: list[str] = []
    size = 0
    for text in [*texts, None]:
        if batch and (text is None or size + len(text) > PIECE_CHARS):
            out += [np.asarray(e.ids, dtype=np.int64) for e in tokenizer.encode_batch(batch)]
            batch, size = [], 0
        if text is None:
            break
        if len(text) > PIECE_CHARS:
            out.append(_long_ids(tokenizer, text))
        else:
            batch.append(text)
            size += len(text)
    return out


def _long_ids(tokenizer: Any, text: str) -> np.ndarray:
    """The ids of a text longer than ``PIECE_CHARS``, tokenised a piece at a time, each cut before
    a space that starts a word (where a byte-level pre-tokenizer starts a word's token, so the
    pieces' ids are the whole text's), then the special tokens added around them. Whole where
    cutting would change the ids: a tokenizer with a normalizer (SentencePiece's prepends a "▁" to
    every piece it is given). A piece without such a space (CJK, base64) is cut where it ends: its
    ids may differ from the whole text's by a token or so at the cut, and memory stays bounded."""
    if tokenizer.normalizer is not None:
        return np.asarray(tokenizer.encode(text).ids, dtype=np.int64)
    pieces = []
    start = 0
    while start < len(text):
        end = min(start + PIECE_CHARS, len(text))
        if end < len(text):
            cut = text.rfind(" ", start + 1, end)
            while cut > start and text[cut + 1].isspace():  # (not inside a run of spaces)
                cut = text.rfind(" ", start + 1, cut)
            end = cut if cut > start else end
        pieces.append(np.asarray(tokenizer.encode(text[start:end], add_special_tokens=False).ids, dtype=np.int64))
        start = end
    head, tail = _special_ends(tokenizer)
    return np.concatenate([head, *pieces, tail])


def _special_ends(tokenizer: Any) -> tuple[np.ndarray, np.ndarray]:
    """The ids the tokenizer's post-processor puts before and after a text (a BOS, an EOS)."""
    plain = tokenizer.encode("a", add_special_tokens=False).ids
    full = tokenizer.encode("a", add_special_tokens=True).ids
    at = next((i for i in range(len(full) - len(plain) + 1) if full[i : i + len(plain)] == plain), 0)
    return np.asarray(full[:at], dtype=np.int64), np.asarray(full[at + len(plain) :], dtype=np.int64)
