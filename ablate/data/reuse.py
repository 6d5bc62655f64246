"""How much a run reuses its training data: windows drawn per distinct window, passes over the
training tokens. One pure function (:func:`data_reuse`) that ``ablate plan`` and every report's
scale line compute it with, from a resolved ``DataConfig``, the steps and the split's size.

A *window* is one training sequence of ``seq_len`` tokens (its targets one token later). Which
windows exist depends on ``data.order`` (see :mod:`ablate.data.module`):

- ``rows``: the split cut into ``batch_size`` rows of ``tps = n // batch_size`` tokens, windows
  at ``window_starts(tps, seq_len, stride)`` in every row: ``batch_size * ceil((tps - seq_len) /
  stride)``.
- ``tokens``: one row of ``n`` tokens, windows at ``window_starts(n, seq_len, stride)``.
- ``random``: every offset is a window: ``n - seq_len``.

A run draws ``steps * batch_size`` windows. Drawn per distinct window above 1 means the run sees
the same sequences again (at stride = seq_len, each again at the same positions); passes over
the tokens (``steps * batch_size * seq_len / n``) can be far above 1 with every window fresh,
which is nanoGPT's regime (random offsets, ~82 passes at its shakespeare-char GPU config).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from ablate.config import DataConfig
from ablate.data.batching import window_starts


@dataclass(frozen=True)
class DataReuse:
    """One run's reuse of its training split."""

    train_tokens: int
    """Tokens in the training split."""
    distinct: int
    """Distinct training windows the run's ``data.order`` can draw."""
    drawn: int
    """Windows the run draws: steps x batch size."""
    passes: float
    """Tokens trained on over the split's tokens."""

    @property
    def per_window(self) -> float:
        """Windows drawn per distinct window (above 1: sequences repeat)."""
        return self.drawn / self.distinct


def distinct_windows(data: DataConfig, train_tokens: int) -> int:
    """The distinct training windows of ``data`` over a split of ``train_tokens`` tokens (0
    when not one fits)."""
    t = data.seq_len

    def count(n: int, stride: int) -> int:
        return len(window_starts(n, t, stride)) if n >= t + 1 else 0

    if data.order == "random":
        return count(train_tokens, 1)
    if data.order == "tokens":
        return count(train_tokens, data.window_stride)
    return data.batch_size * count(train_tokens // data.batch_size, data.window_stride)


def data_reuse(data: DataConfig, steps: int, train_tokens: int) -> DataReuse:
    """The reuse of a run of ``steps`` steps on ``data`` whose training split holds
    ``train_tokens`` tokens (``ValueError`` when no window fits)."""
    distinct = distinct_windows(data, train_tokens)
    if distinct < 1:
        raise ValueError(f"no window of {data.seq_len} tokens fits {train_tokens} tokens")
    drawn = steps * data.batch_size
    return DataReuse(train_tokens, distinct, drawn, drawn * data.seq_len / train_tokens)


def _span(values: Sequence[float], fmt: str) -> str:
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def describe(reuses: Sequence[DataReuse]) -> str:
    """One phrase for some runs' reuse, each figure or its range over the runs: ``'0.32
    windows drawn per distinct window (320,000 of 1,003,598), 81.6 passes over the 1,003,854
    training tokens'``."""
    if not reuses:
        raise ValueError("no runs to describe")
    r = reuses
    return (
        f"{_span([x.per_window for x in r], '{:.2f}')} windows drawn per distinct window "
        f"({_span([x.drawn for x in r], '{:,}')} of {_span([x.distinct for x in r], '{:,}')}), "
        f"{_span([x.passes for x in r], '{:.1f}')} passes over the "
        f"{_span([x.train_tokens for x in r], '{:,}')} training tokens"
    )


@functools.lru_cache(maxsize=32)
def _split_sizes(data_json: str) -> tuple[int, int, int] | None:
    from ablate.data.datasets import DATASETS, local_copy
    from ablate.data.token_cache import token_splits

    cfg = DataConfig.model_validate_json(data_json)
    if cfg.dataset in DATASETS and local_copy(cfg.dataset) is None:
        return None
    try:
        splits = token_splits(cfg)
    except Exception:  # noqa: BLE001 - sizes are a plan's and a report's extra, never a failure
        return None
    tokens = splits.tokens
    return splits.tokenizer.vocab_size, int(tokens["train"].numel()), int(tokens["val"].numel())


def split_sizes(data: DataConfig) -> tuple[int, int, int] | None:
    """``(vocab size, train tokens, val tokens)`` of ``data`` on this machine (tokenized once
    into the token cache); ``None`` when the dataset is not here: nothing is downloaded."""
    return _split_sizes(data.model_dump_json())
