"""The loss of a model that learned nothing, and the run state that says a run ended there.

A model that uses no context can at best predict each token with its frequency in the training
split. Its validation loss is the **unigram cross-entropy**::

    q_v = (c_v + 1) / (N + V)          # c_v: count of token v in the training split, N = sum c_v
    H   = -sum_v p_v ln q_v            # p_v: token v's share of the validation split

(add-one smoothing keeps ``H`` finite where the validation split has a token the training split
lacks; at Tiny Shakespeare's ~1M training characters it moves ``H`` by under 1e-4 nats). A
language model that learns anything from context ends well below it; one that stalls at the
start of training ends at it (Post-LN without warmup at a high learning rate, Xiong et al.
2020: its runs end at the unigram loss, 3.347 nats on Tiny Shakespeare's characters).

A run is in state :data:`LEARNED_NOTHING` when it completed and its final validation loss lies
within :data:`EPSILON` of that ``H``. ``EPSILON = 0.02`` nats: the ten stalled Post-LN seeds of
the archived norm_placement_ladder store end between 0.005 nats below ``H`` and 0.0003 above it
(the evaluation scores full windows, not every validation token, and a stalled model still
wobbles), so 0.02 holds them with four times that spread to spare, while any model that uses
context is far outside it (that ladder's smallest rung ends 0.95 nats below ``H``; the
add-one bigram model of the training split scores 2.48 on the validation split, 0.87 below).
A run whose
loss is higher than ``H + EPSILON`` did not even reach the unigram loss (stopped early, broken):
its loss says so by itself, and its state stays ``completed``.

The state is decided from the store's records and the data on this machine: ``ablate status``
(:mod:`ablate.execution.tables`) and the results layer (:mod:`ablate.results`, columns
:data:`UNIGRAM_COLUMN` and :data:`COLUMN`) both call :func:`unigram_loss` and
:func:`learned_nothing`; without the dataset here (nothing is downloaded) no run is called it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ablate.config import DataConfig

LEARNED_NOTHING = "learned nothing"
"""The run state of a completed run whose final validation loss is the unigram loss."""
EPSILON = 0.02
"""Nats: how close to the unigram cross-entropy a final validation loss counts as at it."""
COLUMN = "learned_nothing"
"""The runs table's column: 1 for a run in state :data:`LEARNED_NOTHING`, else 0."""
UNIGRAM_COLUMN = "unigram_loss"
"""The runs table's column: the unigram cross-entropy of the run's data (NaN: not here)."""


def unigram_cross_entropy(train_counts: np.ndarray, val_counts: np.ndarray) -> float:
    """``H`` of the module doc from per-token counts of the two splits (same vocabulary)."""
    train = np.asarray(train_counts, dtype=np.float64)
    val = np.asarray(val_counts, dtype=np.float64)
    q = (train + 1.0) / (train.sum() + len(train))
    p = val / val.sum()
    seen = p > 0
    return float(-(p[seen] * np.log(q[seen])).sum())


@functools.lru_cache(maxsize=32)
def _unigram_loss(data_json: str) -> float | None:
    from ablate.data.datasets import DATASETS, local_copy
    from ablate.data.token_cache import token_splits

    cfg = DataConfig.model_validate_json(data_json)
    if cfg.dataset in DATASETS and local_copy(cfg.dataset) is None:
        return None
    try:
        splits = token_splits(cfg)
    except Exception:  # noqa: BLE001 - a state for status and reports, never a failure
        return None
    v = splits.tokenizer.vocab_size
    train, val = (splits.tokens[s].numpy() for s in ("train", "val"))
    if not len(train) or not len(val):
        return None
    return unigram_cross_entropy(np.bincount(train, minlength=v), np.bincount(val, minlength=v))


def _built(cfg: DataConfig) -> bool:
    """Whether ``cfg``'s token cache entry exists (so reading it tokenizes nothing)."""
    from ablate.data.datasets import DATASETS, local_copy
    from ablate.data.token_cache import cached_split_sizes

    if cfg.dataset in DATASETS and local_copy(cfg.dataset) is None:
        return False
    try:
        return cached_split_sizes(cfg) is not None
    except Exception:  # noqa: BLE001 - a state for status, never a failure
        return False


def unigram_loss(data: DataConfig | dict[str, Any], build: bool = True) -> float | None:
    """The unigram cross-entropy of ``data`` (a ``DataConfig`` or a run's recorded ``data``
    config), from its token splits on this machine (tokenized once into the token cache; with
    ``build=False`` only from a cache entry already built, as ``ablate status`` reads it);
    None when the dataset is not here or the config cannot be read."""
    try:
        cfg = data if isinstance(data, DataConfig) else DataConfig.model_validate(data)
    except (TypeError, ValueError):
        return None
    if not build and not _built(cfg):
        return None
    return _unigram_loss(cfg.model_dump_json())


def learned_nothing(final_val_loss: Any, unigram: float | None) -> bool:
    """Whether a completed run's final validation loss lies within :data:`EPSILON` of the
    unigram cross-entropy ``unigram`` (False when either is unknown)."""
    if unigram is None or isinstance(final_val_loss, bool):
        return False
    if not isinstance(final_val_loss, int | float) or not math.isfinite(final_val_loss):
        return False
    return abs(final_val_loss - unigram) <= EPSILON
