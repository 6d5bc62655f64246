"""Batching of a 1-D token stream into language-model windows (the course definition).

The stream is cut into ``batch_size`` contiguous rows (``batchify``); a batch is then the same
``seq_len``-wide column window of every row, with targets shifted one position to the right
(``get_batch``). Each row is a separate, contiguous piece of text, so the ``batch_size``
sequences of one batch never overlap each other. ``window_starts`` lists the valid window
offsets for a given stride (1 = sliding window, ``seq_len`` = non-overlapping).

``data.order: tokens`` cuts batches differently: the stream stays one row, its windows are
visited in one seeded order, and a batch is the next ``batch_size`` of them (``stack_windows``),
so the token order of a seed does not depend on the batch size.

All functions are pure; ``batchify`` and ``get_batch`` return views of their input (no copy).
"""

from __future__ import annotations

import torch

from ablate.config import ConfigError


def batchify(data: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Arrange a 1-D token stream into ``batch_size`` contiguous rows.

    ``tps = len(data) // batch_size`` (tokens per stream) and ``out[r, t] = data[r * tps + t]``
    for ``0 <= r < batch_size``, ``0 <= t < tps``: row ``r`` holds tokens ``[r*tps, (r+1)*tps)``.
    The last ``len(data) - batch_size * tps`` tokens are dropped.

    Raises ``ConfigError`` (a ``ValueError``) when ``tps < 2``: a row needs at least one input
    and one target token.
    """
    if data.dim() != 1:
        raise ValueError(f"batchify expects a 1-D token tensor, got shape {tuple(data.shape)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    tps = data.numel() // batch_size
    if tps < 2:
        raise ConfigError(
            f"{data.numel()} tokens cannot fill {batch_size} rows of at least 2 tokens "
            f"(need >= {2 * batch_size})",
            key="data.batch_size",
        )
    return data[: batch_size * tps].reshape(batch_size, tps)


def get_batch(source: torch.Tensor, i: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The window at column ``i`` of a batchified ``source`` (shape ``(batch_size, tps)``).

    ``x = source[:, i : i + seq_len]`` and ``y = source[:, i + 1 : i + 1 + seq_len]``: every
    target is the token following its input. Only full windows exist, so
    ``0 <= i`` and ``i + seq_len + 1 <= tps`` (last valid ``i`` is ``tps - seq_len - 1``);
    anything else raises ``ValueError``.
    """
    if source.dim() != 2:
        raise ValueError(f"get_batch expects (batch_size, tps), got shape {tuple(source.shape)}")
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    tps = source.size(1)
    if i < 0 or i + seq_len + 1 > tps:
        raise ValueError(
            f"window i={i}, seq_len={seq_len} does not fit in rows of {tps} tokens "
            f"(need 0 <= i <= tps - seq_len - 1 = {tps - seq_len - 1})"
        )
    return source[:, i : i + seq_len], source[:, i + 1 : i + 1 + seq_len]


def window_starts(tps: int, seq_len: int, stride: int, *, key: str = "data.seq_len") -> range:
    """Valid window offsets ``i`` for ``get_batch``: ``range(0, tps - seq_len, stride)``.

    The last usable offset is ``tps - seq_len - 1`` (its target ends at the last token), so
    there are ``ceil((tps - seq_len) / stride)`` windows; with ``stride = seq_len`` that is
    ``(tps - 1) // seq_len`` non-overlapping windows. Raises ``ConfigError`` naming ``key``
    when not even one window fits (``seq_len + 1 > tps``).
    """
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if seq_len + 1 > tps:
        raise ConfigError(
            f"seq_len {seq_len} does not fit: a window needs seq_len + 1 = {seq_len + 1} "
            f"tokens per row but each row has {tps}",
            key=key,
        )
    return range(0, tps - seq_len, stride)


def stack_windows(
    source: torch.Tensor, starts: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The windows of a one-row ``source`` (shape ``(1, n_tokens)``) at offsets ``starts``,
    stacked: ``x[b] = source[0, starts[b] : starts[b] + seq_len]`` and ``y[b]`` the same one
    token later; shapes ``(len(starts), seq_len)``, int64 copies."""
    if source.dim() != 2 or source.size(0) != 1:
        raise ValueError(f"stack_windows expects one row (1, n), got {tuple(source.shape)}")
    idx = starts.reshape(-1, 1) + torch.arange(seq_len + 1)  # (B, seq_len + 1)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= source.size(1)):
        raise ValueError(f"a window of {seq_len + 1} tokens at {starts.tolist()} leaves the row")
    # gather from a numpy view: a uint16 memmap cannot be indexed by torch on every version
    rows = torch.from_numpy(source[0].numpy()[idx.numpy()].astype("int64"))
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
