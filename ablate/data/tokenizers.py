"""Tokenizers behind one small interface: ``encode``, ``decode``, ``vocab_size``, ``save``/``load``.

- ``char``: one id per character, vocabulary = sorted set of the characters of the whole text
  (tiny shakespeare: 65).
- ``word``: the classic word-level LM tokenization: each line is split on whitespace and
  followed by ``<eos>``; ids are assigned in order of first occurrence (``Dictionary``).
- ``bpe``: byte-level BPE trained with HF ``tokenizers``; the 256-byte alphabet is always in
  the vocabulary, so any text encodes without unknown tokens and decodes back exactly.

Which text each is built on (``LMDataModule`` makes this choice): char and word vocabularies
are built on the WHOLE text, so the validation/test splits have no out-of-vocabulary symbols
(a vocabulary is a set of symbols, not a fitted model: seeing val's symbols leaks nothing
about their frequencies). BPE merges are learned statistics, so BPE is trained on the TRAIN
split only and cached on disk (``cached_bpe``).

Every tokenizer saves to JSON with a ``"kind"`` field; ``load_tokenizer`` reads any of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

EOS = "<eos>"


class BaseTokenizer(ABC):
    """Common interface. Subclasses set ``kind`` and implement the abstract methods."""

    kind: ClassVar[str]

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: list[int]) -> str: ...

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable state, including ``"kind"``."""

    @classmethod
    @abstractmethod
    def from_dict(cls, state: dict[str, Any]) -> BaseTokenizer: ...

    def save(self, path: str | Path) -> None:
        """Write ``to_dict()`` as JSON, atomically (a reader never sees a half-written file)."""
        _atomic_write_text(Path(path), json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> BaseTokenizer:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
        if state.get("kind") != cls.kind:
            raise ValueError(f"{path} holds a {state.get('kind')!r} tokenizer, not {cls.kind!r}")
        return cls.from_dict(state)


# --- char ----------------------------------------------------------------------------------------


class CharTokenizer(BaseTokenizer):
    """One id per character; ``id = rank of the character in the sorted vocabulary``."""

    kind = "char"

    def __init__(self, chars: list[str]):
        self.chars = list(chars)
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def fit(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError as err:
            raise ValueError(f"character {err.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "chars": self.chars}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> CharTokenizer:
        return cls(state["chars"])


# --- word ----------------------------------------------------------------------------------------


class Dictionary:
    """Bidirectional word <-> id map; ids are assigned in order of first ``add_word``."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        """The id of ``word``, adding it with the next free id if new."""
        idx = self.word2idx.get(word)
        if idx is None:
            idx = self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return idx

    def __len__(self) -> int:
        return len(self.idx2word)


def word_tokens(text: str) -> list[str]:
    """Lines split on whitespace, each followed by ``<eos>`` (an empty line is just ``<eos>``).

    Lines are what iterating a text file yields: split at ``\\n``; a final newline does not
    start another line. (``str.splitlines`` would also split at form feeds and other Unicode
    separators.)
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # "a\\n" is one line, and "" is none
    out: list[str] = []
    for line in lines:
        out.extend(line.split())
        out.append(EOS)
    return out


class WordTokenizer(BaseTokenizer):
    """Whitespace words plus ``<eos>`` per line (the word-level LM corpus convention).

    ``decode`` joins a line's words with single spaces and turns ``<eos>`` into a newline, so
    ``encode(decode(ids)) == ids`` for any ids ending in ``<eos>`` (e.g. from ``encode``),
    while the text itself round-trips only up to whitespace.
    """

    kind = "word"

    def __init__(self, dictionary: Dictionary):
        self.dictionary = dictionary

    @classmethod
    def fit(cls, text: str) -> WordTokenizer:
        d = Dictionary()
        for w in word_tokens(text):
            d.add_word(w)
        d.add_word(EOS)  # present even for an empty text, so decode/encode always know it
        return cls(d)

    def encode(self, text: str) -> list[int]:
        w2i = self.dictionary.word2idx
        try:
            return [w2i[w] for w in word_tokens(text)]
        except KeyError as err:
            raise ValueError(f"word {err.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: list[int]) -> str:
        words = self.dictionary.idx2word
        parts: list[str] = []
        at_line_start = True
        for i in ids:
            w = words[i]
            if w == EOS:
                parts.append("\n")
                at_line_start = True
            else:
                parts.append(w if at_line_start else " " + w)
                at_line_start = False
        return "".join(parts)

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "idx2word": self.dictionary.idx2word}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> WordTokenizer:
        d = Dictionary()
        for w in state["idx2word"]:
            d.add_word(w)
        return cls(d)


# --- byte-level BPE ------------------------------------------------------------------------------


class BPETokenizer(BaseTokenizer):
    """Byte-level BPE (HF ``tokenizers``): lossless, no unknown tokens, vocabulary >= 256."""

    kind = "bpe"

    def __init__(self, hf_tokenizer: Any):
        self.hf = hf_tokenizer

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(list(ids))

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "hf": json.loads(self.hf.to_str())}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> BPETokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_str(json.dumps(state["hf"])))


def train_bpe(text: str, vocab_size: int) -> BPETokenizer:
    """``train_bpe_iter([text], vocab_size)``."""
    return train_bpe_iter([text], vocab_size)


def train_bpe_iter(texts: Iterable[str], vocab_size: int) -> BPETokenizer:
    """Train byte-level BPE on ``text`` up to ``vocab_size`` tokens (fewer if merges run out).

    The initial alphabet is all 256 byte symbols, so the vocabulary is at least 256 whatever
    ``vocab_size`` says, and text never seen in training still encodes.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    # whole strings (a corpus, or chunks cut after a newline), not lines: the pre-tokenizer
    # groups runs of newlines, and training must see the pieces that encoding will produce
    tok.train_from_iterator(texts, trainer=trainer)
    return BPETokenizer(tok)


def bpe_cache_path(train_text: str, vocab_size: int, cache_dir: str | Path) -> Path:
    """``<cache_dir>/tokenizers/bpe-v<vocab_size>-<sha256(train_text)[:16]>.json``.

    Keyed on the exact training text rather than the dataset file: the text is the dataset
    restricted to its train split, so this key also changes with ``val/test_fraction``.
    """
    return bpe_cache_path_for(
        hashlib.sha256(train_text.encode("utf-8")).hexdigest(), vocab_size, cache_dir
    )


def bpe_cache_path_for(digest: str, vocab_size: int, cache_dir: str | Path) -> Path:
    """``bpe_cache_path`` from the hex sha256 of the train text (hashed while streaming)."""
    return Path(cache_dir) / "tokenizers" / f"bpe-v{vocab_size}-{digest[:16]}.json"


def cached_bpe(train_text: str, vocab_size: int, cache_dir: str | Path) -> BPETokenizer:
    """Load the BPE tokenizer for (train text, vocab size) from the cache, else train and save."""
    path = bpe_cache_path(train_text, vocab_size, cache_dir)
    if path.is_file():
        try:
            return BPETokenizer.load(path)
        except Exception:  # truncated/incompatible cache entry: retrain and overwrite it
            pass
    tok = train_bpe(train_text, vocab_size)
    tok.save(path)
    return tok


# --- dispatch ------------------------------------------------------------------------------------

TOKENIZERS: dict[str, type[BaseTokenizer]] = {
    "char": CharTokenizer,
    "word": WordTokenizer,
    "bpe": BPETokenizer,
}


def load_tokenizer(path: str | Path) -> BaseTokenizer:
    """Any tokenizer saved with ``save``, by its ``"kind"`` field."""
    state = json.loads(Path(path).read_text(encoding="utf-8"))
    kind = state.get("kind")
    if kind not in TOKENIZERS:
        raise ValueError(f"{path}: unknown tokenizer kind {kind!r}; valid: {', '.join(TOKENIZERS)}")
    return TOKENIZERS[kind].from_dict(state)


def build_tokenizer(
    kind: str,
    text: str,
    train_text: str | None = None,
    *,
    bpe_vocab_size: int = 1024,
    cache_dir: str | Path | None = None,
) -> BaseTokenizer:
    """The ``kind`` tokenizer: char/word fitted on ``text``; bpe trained on ``train_text``.

    ``train_text`` defaults to ``text``; bpe is cached under ``cache_dir`` when one is given.
    """
    if kind == "char":
        return CharTokenizer.fit(text)
    if kind == "word":
        return WordTokenizer.fit(text)
    if kind == "bpe":
        source = text if train_text is None else train_text
        if cache_dir is None:
            return train_bpe(source, bpe_vocab_size)
        return cached_bpe(source, bpe_vocab_size, cache_dir)
    raise ValueError(f"unknown tokenizer {kind!r}; valid: {', '.join(TOKENIZERS)}")


def _atomic_write_text(path: Path, text: str) -> None:
    """Write to a temp file in the same directory, then ``os.replace`` it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
