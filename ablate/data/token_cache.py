"""Tokenize a dataset once into a memory-mapped token file; hand out 1-D token tensors.

``token_splits(cfg)`` returns the tokenizer and, per split, a 1-D tensor backed by
``np.memmap`` (``uint16`` when the vocabulary fits, else ``uint32``): the corpus is never held as
Python objects, and windows are read from the page cache. Consumers convert the windows they
take to ``long`` (``WindowDataset`` does).

Cache: ``<ablate cache>/tokens/<key>/`` with ``tokens.bin`` (all splits, concatenated) and
``meta.json`` (tokenizer, dtype, split offsets, characters per split), keyed by sha256 of
(dataset content key, tokenizer, BPE vocabulary size, split fractions, format version): a
changed file is a new key and never touches the old entry. The folder is built under a temp
name and renamed into place, so a crash never leaves a half-written entry.

The splits follow ``LMDataModule``'s rules exactly (see its docstring): char/bpe split the TEXT
at ``split_bounds`` of its character count and encode each part (BPE trained on train, cached
by ``cached_bpe``'s key); word encodes the whole text and splits the TOKEN stream. Text is
streamed in chunks (``iter_text``); a corpus shorter than one chunk is tokenized exactly as one
string, and longer ones are cut only after a newline followed by a non-space character.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from ablate.config import DataConfig
from ablate.data.datasets import cache_dir, split_bounds
from ablate.data.source import iter_text, source_key
from ablate.data.tokenizers import (
    EOS,
    BaseTokenizer,
    BPETokenizer,
    CharTokenizer,
    Dictionary,
    WordTokenizer,
    bpe_cache_path_for,
    load_tokenizer,
    train_bpe_iter,
    word_tokens,
)

if TYPE_CHECKING:
    import torch

SPLITS = ("train", "val", "test")
FORMAT = 1
_CHAR_SLICE = 1 << 20


@dataclass
class TokenSplits:
    tokenizer: BaseTokenizer
    tokens: dict[str, torch.Tensor]
    """1-D memmap-backed token ids per split."""
    chars: dict[str, int]
    """Characters per split (word: the whole text's chars/token ratio times its tokens)."""
    path: Path


def cache_key(cfg: DataConfig) -> str:
    parts = {
        "format": FORMAT,
        "data": source_key(cfg.dataset),
        "tokenizer": cfg.tokenizer,
        "vocab": cfg.bpe_vocab_size if cfg.tokenizer == "bpe" else None,
        "val": cfg.val_fraction,
        "test": cfg.test_fraction,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def token_splits(cfg: DataConfig, root: Path | None = None) -> TokenSplits:
    """The tokenizer and memmap-backed token splits of ``cfg`` (built once, then cached)."""
    folder = (root or cache_dir()) / "tokens" / cache_key(cfg)
    if not (folder / "meta.json").is_file():
        _build(cfg, folder)
    return _open(folder)


def cached_split_sizes(cfg: DataConfig, root: Path | None = None) -> dict[str, int] | None:
    """Tokens per split of ``cfg``'s cache entry if it is built (reads ``meta.json`` only);
    ``None`` when it is not built yet. Costs the dataset's content key (a local file's
    sha256, streamed and memoised: the run id needs it anyway)."""
    meta = (root or cache_dir()) / "tokens" / cache_key(cfg) / "meta.json"
    try:
        offsets = json.loads(meta.read_text())["offsets"]
    except (OSError, ValueError, KeyError):
        return None
    return {s: hi - lo for s, (lo, hi) in offsets.items()}


def _open(folder: Path) -> TokenSplits:
    import torch  # the plan reads only the sizes (cached_split_sizes): no torch before training

    meta = json.loads((folder / "meta.json").read_text())
    tok = load_tokenizer(folder / "tokenizer.json")
    path = folder / "tokens.bin"
    if path.stat().st_size == 0:  # np.memmap cannot map an empty file
        data = torch.zeros(0, dtype=getattr(torch, meta["dtype"]))
    else:
        array = np.memmap(path, dtype=meta["dtype"], mode="r")
        with warnings.catch_warnings():  # read-only memmap: torch warns that it is not writable
            warnings.simplefilter("ignore", UserWarning)
            data = torch.from_numpy(array)
    tokens = {s: data[lo:hi] for s, (lo, hi) in meta["offsets"].items()}
    return TokenSplits(tok, tokens, {s: int(n) for s, n in meta["chars"].items()}, folder)


def _dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


class _Writer:
    """Append token ids to ``tokens.bin`` and record where each split starts and ends."""

    def __init__(self, f: BinaryIO, dtype: str):
        self.f, self.dtype, self.n = f, dtype, 0
        self.offsets: dict[str, list[int]] = {}

    def write(self, ids: Any) -> None:
        arr = np.asarray(ids, dtype=self.dtype)
        self.f.write(arr.tobytes())
        self.n += arr.size

    def mark(self, split: str, start: int) -> None:
        self.offsets[split] = [start, self.n]


def _build(cfg: DataConfig, folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        with open(tmp / "tokens.bin", "wb") as f:
            if cfg.tokenizer == "word":
                tok, offsets, chars, dtype = _build_word(cfg, f)
            else:
                tok, offsets, chars, dtype = _build_split_text(cfg, f)
            f.flush()
            os.fsync(f.fileno())
        tok.save(tmp / "tokenizer.json")
        meta = {"dtype": dtype, "offsets": offsets, "chars": chars, "dataset": cfg.dataset}
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            os.replace(tmp, folder)
        except OSError:  # another process built it first: theirs is as good as ours
            if not (folder / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- char and bpe: split the text, encode each part --------------------------------------------


def _parts(cfg: DataConfig, n_chars: int) -> Iterator[tuple[str, str]]:
    """``(split, text piece)`` in order, cutting the streamed text at the split boundaries."""
    a, b = split_bounds(n_chars, cfg.val_fraction, cfg.test_fraction)
    bounds = {"train": (0, a), "val": (a, b), "test": (b, n_chars)}
    pos = 0
    for chunk in iter_text(cfg.dataset):
        end = pos + len(chunk)
        for split, (lo, hi) in bounds.items():
            s, e = max(lo, pos), min(hi, end)
            if s < e:
                yield split, chunk[s - pos : e - pos]
        pos = end


def _char_scan(dataset: str) -> tuple[int, list[str]]:
    """Characters and the sorted character set of the whole text, in one streaming pass."""
    n, seen = 0, np.zeros(0, dtype=np.uint32)
    for chunk in iter_text(dataset):
        n += len(chunk)
        for i in range(0, len(chunk), _CHAR_SLICE):
            seen = np.union1d(seen, np.unique(_codepoints(chunk[i : i + _CHAR_SLICE])))
    return n, [chr(c) for c in seen.tolist()]


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def _build_split_text(cfg: DataConfig, f: BinaryIO):
    n_chars, charset = _char_scan(cfg.dataset)
    chars = dict(zip(SPLITS, _split_sizes(n_chars, cfg), strict=True))
    if cfg.tokenizer == "char":
        tok: BaseTokenizer = CharTokenizer(charset)
        table = np.array([ord(c) for c in charset], dtype=np.uint32)

        def encode(text: str) -> np.ndarray:
            return np.searchsorted(table, _codepoints(text))  # id = rank in the sorted set
    else:
        tok = _bpe(cfg, n_chars)

        def encode(text: str) -> list[int]:
            return tok.encode(text)

    dtype = _dtype(tok.vocab_size)
    w = _Writer(f, dtype)
    starts = {s: None for s in SPLITS}
    # char ids are per character, so encode in small slices (bounded memory); bpe needs the
    # whole piece (cut only at boundaries ``iter_text`` chose)
    step = _CHAR_SLICE if cfg.tokenizer == "char" else max(1, n_chars)
    for split, piece in _parts(cfg, n_chars):
        if starts[split] is None:
            starts[split] = w.n
        for i in range(0, len(piece), step):
            w.write(encode(piece[i : i + step]))
        w.mark(split, starts[split])
    for split in SPLITS:
        w.offsets.setdefault(split, [w.n, w.n])
    return tok, w.offsets, chars, dtype


def _split_sizes(n: int, cfg: DataConfig) -> tuple[int, int, int]:
    a, b = split_bounds(n, cfg.val_fraction, cfg.test_fraction)
    return a, b - a, n - b


def _bpe(cfg: DataConfig, n_chars: int) -> BPETokenizer:
    """BPE trained on the train part, shared with ``cached_bpe``'s cache (same key)."""
    h = hashlib.sha256()
    for split, piece in _parts(cfg, n_chars):
        if split == "train":
            h.update(piece.encode("utf-8"))
    root = cache_dir()
    path = bpe_cache_path_for(h.hexdigest(), cfg.bpe_vocab_size, root)
    if path.is_file():
        try:
            return BPETokenizer.load(path)
        except Exception:  # noqa: BLE001 - a bad cache entry: retrain and overwrite it
            pass
    train = (piece for split, piece in _parts(cfg, n_chars) if split == "train")
    tok = train_bpe_iter(train, cfg.bpe_vocab_size)
    tok.save(path)
    return tok


# --- word: encode everything, split the token stream -------------------------------------------


def _build_word(cfg: DataConfig, f: BinaryIO):
    d, n_ids, n_chars = Dictionary(), 0, 0
    for chunk in iter_text(cfg.dataset):
        n_chars += len(chunk)
        for w in word_tokens(chunk):
            d.add_word(w)
            n_ids += 1
    d.add_word(EOS)
    tok = WordTokenizer(d)
    dtype = _dtype(tok.vocab_size)
    w = _Writer(f, dtype)
    for chunk in iter_text(cfg.dataset):
        w.write(tok.encode(chunk))
    a, b = split_bounds(w.n, cfg.val_fraction, cfg.test_fraction)
    offsets = {"train": [0, a], "val": [a, b], "test": [b, w.n]}
    chars = {s: round((hi - lo) * n_chars / max(1, w.n)) for s, (lo, hi) in offsets.items()}
    return tok, offsets, chars, dtype
