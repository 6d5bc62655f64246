"""Where the text comes from, streamed in chunks, and the content key runs and caches use.

``data.dataset`` is one of:

- a registered name (``DATASETS``): pinned by its sha256, so it adds nothing to the run id;
- a local UTF-8 text file: keyed by the sha256 of its bytes (``sha256_file`` memoises it by
  (path, size, mtime), so asking again is free);
- ``hf:NAME[/CONFIG][:SPLIT]``: a HF ``datasets`` dataset (split default ``train``), keyed by
  its fingerprint. ``NAME`` may be a hub id (``wikitext/wikitext-103-raw-v1``: name/config;
  ``org/name/config``) or a local folder written by ``Dataset.save_to_disk`` or holding data
  files. Rows of its ``text`` column (else its first string column) are joined into one text,
  each row ending in a newline. ablate's ``val/test_fraction`` then split that text as for a
  file. Loading is not streamed (the HF cache holds the Arrow files, memory-mapped).

``iter_text`` yields the text in chunks of about ``CHUNK_CHARS`` characters, each cut after a
newline that is followed by a non-space character (a boundary no tokenizer merges across), so a
multi-GB file is never one Python string (a text with no such boundary in 4 chunks is cut after
a space, or anywhere).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ablate.config import ConfigError
from ablate.data.datasets import DATASETS, KEY, resolve_dataset, sha256_file

HF_PREFIX = "hf:"
CHUNK_CHARS = 8 << 20  # a corpus below this is one chunk: tokenized exactly as a whole string
_READ_BYTES = 4 << 20
_CUT = re.compile(r"\n(?=\S)")


def is_hf(dataset: str) -> bool:
    return str(dataset).startswith(HF_PREFIX)


@dataclass(frozen=True)
class HFSpec:
    name: str
    config: str | None
    split: str


def parse_hf(dataset: str) -> HFSpec:
    """``hf:NAME[/CONFIG][:SPLIT]`` -> its parts (a local folder is taken whole as NAME)."""
    body = dataset[len(HF_PREFIX) :]
    split = "train"
    head, sep, tail = body.rpartition(":")
    if sep and tail and "/" not in tail:
        body, split = head, tail
    if not body:
        raise ConfigError(f"{dataset!r}: expected hf:NAME[/CONFIG][:SPLIT]", key=KEY)
    if Path(body).expanduser().is_dir():
        return HFSpec(str(Path(body).expanduser()), None, split)
    parts = body.split("/")
    if len(parts) == 1:
        return HFSpec(body, None, split)
    if len(parts) == 2:
        return HFSpec(parts[0], parts[1], split)
    return HFSpec("/".join(parts[:-1]), parts[-1], split)


@cache
def load_hf(dataset: str) -> Any:
    """The ``datasets.Dataset`` for an ``hf:`` spec (memoised per process)."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - a dependency
        raise ConfigError("hf: datasets need the 'datasets' package", key=KEY) from None
    spec = parse_hf(dataset)
    try:
        path = Path(spec.name)
        saved = (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()
        if path.is_dir() and saved:
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[spec.split]
        else:
            ds = datasets.load_dataset(spec.name, spec.config, split=spec.split)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - offline, unknown name, bad split: one line
        msg = f"{type(err).__name__}: {err}".splitlines()[0]
        raise ConfigError(f"cannot load {dataset!r} ({msg})", key=KEY) from None
    text_column(ds, dataset)
    return ds


def text_column(ds: Any, dataset: str) -> str:
    features = getattr(ds, "features", {}) or {}
    if "text" in features:
        return "text"
    for name, feat in features.items():
        if getattr(feat, "dtype", None) in ("string", "large_string"):
            return name
    raise ConfigError(f"{dataset!r} has no text column (columns: {', '.join(features)})", key=KEY)


def data_key(dataset: str) -> str | None:
    """Content key of a dataset for run ids and caches; ``None`` for a registered name (pinned
    by checksum) or a path that does not exist (validation reports that)."""
    if dataset in DATASETS:
        return None
    if is_hf(dataset):
        return f"hf:{load_hf(dataset)._fingerprint}"
    path = Path(dataset).expanduser()
    if path.is_file():
        return f"sha256:{sha256_file(path)}"
    return None


def source_key(dataset: str) -> str:
    """Like ``data_key`` but also for registered names (their pinned sha256): a cache key."""
    if dataset in DATASETS:
        return f"sha256:{DATASETS[dataset].sha256}"
    key = data_key(dataset)
    if key is None:
        resolve_dataset(dataset)  # raises the usual one-line error
        raise ConfigError(f"unknown dataset {dataset!r}", key=KEY)
    return key


def iter_text(dataset: str, chunk_chars: int | None = None) -> Iterator[str]:
    """The dataset's text in chunks cut after ``\\n`` + non-space; see the module docstring."""
    chunk_chars = chunk_chars or CHUNK_CHARS
    pieces = _hf_pieces(dataset) if is_hf(dataset) else _file_pieces(resolve_dataset(dataset))
    pending = ""
    for piece in pieces:
        pending += piece
        while len(pending) >= chunk_chars:
            cut = _cut_point(pending, chunk_chars)
            if cut is None:
                break  # no boundary yet: read on
            yield pending[:cut]
            pending = pending[cut:]
    if pending:
        yield pending


def _cut_point(text: str, n: int) -> int | None:
    """End of the last ``\\n`` + non-space boundary within ``text[:n]``; without one, ``None``
    until the text is 4 chunks long, then after the last space (or at ``n``)."""
    cut = None
    for m in _CUT.finditer(text, 0, n + 1):
        cut = m.end()
    if cut is None and len(text) >= 4 * n:
        cut = max(text.rfind(" ", 0, n), text.rfind("\n", 0, n)) + 1 or n
    return cut


def _file_pieces(path: Path) -> Iterator[str]:
    """Strict UTF-8 decoding of ``path`` in blocks (errors name the byte offset)."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0
    try:
        f = path.open("rb")
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}", key=KEY) from None
    with f:
        while True:
            raw = f.read(_READ_BYTES)
            if not raw and offset == 0:
                raise ConfigError(f"{path} is empty", key=KEY)
            try:
                text = decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as err:
                at, byte = offset + err.start, raw[err.start]
                raise ConfigError(
                    f"{path} is not UTF-8 text (invalid byte 0x{byte:02x} at offset {at})",
                    key=KEY,
                ) from None
            if text:
                yield text
            if not raw:
                return
            offset += len(raw)


def _hf_pieces(dataset: str) -> Iterator[str]:
    ds = load_hf(dataset)
    column = text_column(ds, dataset)
    for batch in ds.iter(batch_size=4096):
        rows = batch[column]
        yield "".join(r if r.endswith("\n") else r + "\n" for r in rows if r is not None)
