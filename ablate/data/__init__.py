"""Data: datasets, tokenizers, batching and the Lightning data module.

Public API (see each module for the formulas):

- baseline: ``unigram_loss``, ``learned_nothing`` (a run that ended at the unigram loss)
- batching: ``batchify``, ``get_batch``, ``window_starts``
- tokenizers: ``BaseTokenizer``, ``CharTokenizer``, ``WordTokenizer``, ``Dictionary``,
  ``BPETokenizer``, ``build_tokenizer``, ``load_tokenizer``, ``train_bpe``, ``cached_bpe``
- datasets: ``DatasetSpec``, ``DATASETS``, ``resolve_dataset``, ``fetch_registered``,
  ``read_text``, ``download``, ``split_bounds``, ``split_sequence``, ``sha256_file``,
  ``data_dir``, ``cache_dir``
- module: ``LMDataModule``, ``unigram_entropy``, ``window_order``, ``WindowSampler``,
  ``TokenOrderSampler``, ``WindowDataset``, ``random_offsets``, ``RandomOffsetSampler``,
  ``RandomOffsetDataset``
- reuse: ``DataReuse``, ``data_reuse``, ``distinct_windows``, ``split_sizes``
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each name is imported from its module on first use (PEP 562): the datasets and tokenizers
# need neither torch nor Lightning, so ``ablate run`` checks a study's data without importing
# them; the worker that trains imports the data module, and with it Lightning, itself.
_MODULES = {
    "baseline": ("learned_nothing", "unigram_loss"),
    "batching": ("batchify", "get_batch", "window_starts"),
    "datasets": (
        "DATASETS", "DatasetSpec", "cache_dir", "data_dir", "download", "fetch_registered",
        "read_text", "resolve_dataset", "sha256_file", "split_bounds", "split_sequence",
    ),
    "module": (
        "LMDataModule", "RandomOffsetDataset", "RandomOffsetSampler", "TokenOrderSampler",
        "WindowDataset", "WindowSampler", "random_offsets", "unigram_entropy", "window_order",
    ),
    "reuse": ("DataReuse", "data_reuse", "distinct_windows", "split_sizes"),
    "tokenizers": (
        "EOS", "TOKENIZERS", "BaseTokenizer", "BPETokenizer", "CharTokenizer", "Dictionary",
        "WordTokenizer", "build_tokenizer", "cached_bpe", "load_tokenizer", "train_bpe",
        "word_tokens",
    ),
}  # fmt: skip
_HOME = {name: module for module, names in _MODULES.items() for name in names}

if TYPE_CHECKING:
    from ablate.data.baseline import learned_nothing, unigram_loss
    from ablate.data.batching import batchify, get_batch, window_starts
    from ablate.data.datasets import (
        DATASETS,
        DatasetSpec,
        cache_dir,
        data_dir,
        download,
        fetch_registered,
        read_text,
        resolve_dataset,
        sha256_file,
        split_bounds,
        split_sequence,
    )
    from ablate.data.module import (
        LMDataModule,
        RandomOffsetDataset,
        RandomOffsetSampler,
        TokenOrderSampler,
        WindowDataset,
        WindowSampler,
        random_offsets,
        unigram_entropy,
        window_order,
    )
    from ablate.data.reuse import DataReuse, data_reuse, distinct_windows, split_sizes
    from ablate.data.tokenizers import (
        EOS,
        TOKENIZERS,
        BaseTokenizer,
        BPETokenizer,
        CharTokenizer,
        Dictionary,
        WordTokenizer,
        build_tokenizer,
        cached_bpe,
        load_tokenizer,
        train_bpe,
        word_tokens,
    )


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'ablate.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ablate.data.{_HOME[name]}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "DATASETS",
    "EOS",
    "TOKENIZERS",
    "BPETokenizer",
    "BaseTokenizer",
    "CharTokenizer",
    "DatasetSpec",
    "Dictionary",
    "DataReuse",
    "LMDataModule",
    "RandomOffsetDataset",
    "RandomOffsetSampler",
    "WindowDataset",
    "TokenOrderSampler",
    "WindowSampler",
    "WordTokenizer",
    "batchify",
    "build_tokenizer",
    "cache_dir",
    "cached_bpe",
    "data_dir",
    "data_reuse",
    "distinct_windows",
    "download",
    "get_batch",
    "learned_nothing",
    "load_tokenizer",
    "random_offsets",
    "read_text",
    "fetch_registered",
    "resolve_dataset",
    "sha256_file",
    "split_bounds",
    "split_sequence",
    "split_sizes",
    "train_bpe",
    "unigram_entropy",
    "unigram_loss",
    "window_order",
    "window_starts",
    "word_tokens",
]
