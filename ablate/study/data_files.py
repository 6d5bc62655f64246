"""The plan-time reads of data files: the one check of a study that opens files.

A run's data file (local, or registered and already fetched: nothing is downloaded) must be
non-empty UTF-8 text long enough for one window of ``seq_len + 1`` tokens per row of
``batch_size`` in every split. Memory and time do not grow with the file: a file whose token
cache exists is checked by its exact token counts (no text read); otherwise its first
``PREFIX_BYTES`` are decoded (the whole file when it fits: exact char/word counts, UTF-8 bytes
bound BPE's; a larger file bounds every split by its size), once per check however many runs
use it. ``tokenize=True`` builds the token cache first, so the count is exact (``ablate
train`` trains next in the same process, so that costs nothing extra).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ablate.config import ConfigError, DataConfig, RunConfig

PREFIX_BYTES = 4 << 20
"""A data file not tokenized yet is checked on its first 4 MiB (strict UTF-8, and the exact
token counts of a file that fits); the token cache checks the rest as it streams the file."""
KEY = "data.dataset"
SPLITS = ("train", "val", "test")

Where = Callable[[str], str]
"""Config key -> where the study set it (the study's key path, for error messages)."""


@dataclass
class TextScan:
    """What the plan-time check read of a data file: its size, and its whole text when it
    fits in ``PREFIX_BYTES`` (else only its first ``PREFIX_BYTES`` were checked)."""

    path: Path
    size: int
    text: str | None


def read_prefix(path: Path) -> TextScan:
    """Strict UTF-8 check of the first ``PREFIX_BYTES`` of ``path`` (the whole file when it
    is that small); the one-line errors of ``read_text``."""
    try:
        with path.open("rb") as f:
            raw = f.read(PREFIX_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}", key=KEY) from None
    if not raw:
        raise ConfigError(f"{path} is empty", key=KEY)
    whole = len(raw) <= PREFIX_BYTES
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:  # a prefix may end inside a character: final=False keeps those bytes pending
        text = decoder.decode(raw[:PREFIX_BYTES], final=whole)
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path} is not UTF-8 text (invalid byte 0x{raw[err.start]:02x} at offset {err.start})",
            key=KEY,
        ) from None
    return TextScan(path, path.stat().st_size, text if whole else None)


def token_bounds(cfg: RunConfig, scan: TextScan) -> dict[str, int]:
    """At most how many tokens each split can hold, from the text read at plan time: exact
    for char and word, UTF-8 bytes of each part for BPE; every split is bounded by the file's
    size (+1 for word's last ``<eos>``) when only a prefix was read."""
    d = cfg.data
    if scan.text is None:
        return dict.fromkeys(SPLITS, scan.size + 1)
    text = scan.text
    if d.tokenizer == "word":  # splits the token stream
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return split_sizes(sum(len(line.split()) + 1 for line in lines), d)  # + <eos> per line
    chars = split_sizes(len(text), d)  # char and bpe split the text
    if d.tokenizer == "char":
        return chars
    out, pos = {}, 0
    for split, n in chars.items():
        out[split] = len(text[pos : pos + n].encode("utf-8"))
        pos += n
    return out


def split_sizes(n: int, d: DataConfig) -> dict[str, int]:
    from ablate.data import split_bounds

    a, b = split_bounds(n, d.val_fraction, d.test_fraction)
    return {"train": a, "val": b - a, "test": n - b}


def check_length(
    cfg: RunConfig,
    tokens: dict[str, int],
    exact: bool,
    path: Path,
    where: Where,
    source: Path | None,
) -> None:
    """Every split must hold one window of ``seq_len + 1`` tokens in each of its rows."""
    d = cfg.data
    splits = [("train", d.batch_size, "data.batch_size"), ("val", d.eval_bs, None)]
    if d.test_fraction > 0:
        splits.append(("test", d.eval_bs, None))
    for split, rows, rows_key in splits:
        if tokens[split] // rows < d.seq_len + 1:
            rows_key = rows_key or (
                "data.eval_batch_size" if d.eval_batch_size else "data.batch_size"
            )
            has = "has" if exact else "has at most"
            raise ConfigError(
                f"{path} is too short: its {split} split {has} {tokens[split]} "
                f"{d.tokenizer} tokens, fewer than {rows} rows ({rows_key}) x {d.seq_len + 1} "
                "(seq_len + 1)",
                key=where("data.seq_len"),
                source=source,
            )


def local_file(name: str) -> Path | None:
    """The file ``data.dataset`` names, without downloading anything: ``None`` for a remote
    or plugin source, or a registered dataset not fetched yet (its sha256 pins it)."""
    from ablate.data import DATASETS, resolve_dataset
    from ablate.data.datasets import local_copy

    if name in DATASETS:
        return resolve_dataset(name) if local_copy(name) else None  # verifies the sha256
    if ":" in name and not Path(name).expanduser().exists():
        return None
    return resolve_dataset(name)


def check_data_file(
    cfg: RunConfig,
    where: Where,
    source: Path | None,
    scans: dict[str, TextScan | None],
    tokenize: bool,
) -> None:
    """Check the data file of ``cfg`` (``data.dataset``) when it is on this machine: read once
    per dataset (``scans`` keeps what was read), its exact token counts when its token cache
    exists or ``tokenize`` builds it, else its bounds from the text read."""
    name = cfg.data.dataset
    try:
        if name not in scans:
            path = local_file(name)
            scans[name] = read_prefix(path) if path is not None else None
        scan = scans[name]
        if scan is None:
            return
        from ablate.data.token_cache import cached_split_sizes, token_splits

        tokens = cached_split_sizes(cfg.data)
        if tokens is None and tokenize:
            tokens = {s: t.numel() for s, t in token_splits(cfg.data).tokens.items()}
    except ConfigError as err:
        raise ConfigError(err.message, key=where("data.dataset"), source=source) from None
    exact = tokens is not None
    tokens = tokens if tokens is not None else token_bounds(cfg, scan)
    check_length(cfg, tokens, exact, scan.path, where, source)
