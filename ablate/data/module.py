"""``LMDataModule``: text -> tokenizer -> splits -> batchified tensors -> window loaders.

Pipeline (``prepare()``, also run by ``setup()``; idempotent, so the trainer can call it early
to learn ``vocab_size`` and Lightning's own ``setup("fit")`` is then free):

1-2. ``token_splits`` (``ablate.data.token_cache``): stream the text (download/verify, strict
   UTF-8), split and tokenize once into a memory-mapped token file, cached by data content.
   Where the split happens is chosen per tokenizer:
   - char, bpe: the TEXT is split at character positions (``split_sequence``), then each part is
     encoded on its own. For char this is identical to splitting the token stream (one token per
     character: nanoGPT's 90/10); bpe must split first because it is trained on train only.
   - word: the whole text is tokenized and the TOKEN stream is split (a character split would
     cut words and lines in half and create words the vocabulary never saw).
   Char/word vocabularies come from the whole text (no OOV in val/test); bpe is trained on
   the train split and cached on disk (see ``ablate.data.tokenizers``);
3. ``batchify``: train with ``batch_size`` rows (one row under ``data.order: tokens`` and
   ``random``), val/test with ``eval_bs`` rows.

Loaders yield ready-made ``(x, y)`` batches of shape ``(rows, seq_len)`` (``get_batch`` windows),
so each DataLoader uses ``batch_size=None`` over a dataset of window offsets:

- train: offsets ``window_starts(tps, seq_len, stride)`` visited in a seeded permutation per
  epoch (``window_order``; in order when ``shuffle`` is off). The permutation depends only on
  (seed, epoch), and a loader created by a Lightning trainer that resumed at ``global_step``
  starts at batch ``global_step * accumulate_grad_batches`` of that stream of epochs
  (``WindowSampler``), so a resumed run sees exactly the batches an uninterrupted one would
  (exact when ``accumulate_grad_batches`` is 1 or divides the batches per epoch).
- train under ``data.order: tokens``: the split stays one row; its windows are visited in the
  same seeded per-epoch permutation, and batch ``k`` is windows ``k*B .. k*B + B - 1`` of that
  stream of epochs (``TokenOrderSampler``). The stream does not depend on ``B``, so at one seed
  batch 8 and batch 64 see the same tokens in the same order (8 batches of 8 = one of 64).
- train under ``data.order: random`` (nanoGPT's ``get_batch``): the split stays one row and
  every sequence is a window at an offset drawn uniformly from every valid offset
  ``[0, n - seq_len)``, by generators seeded from the seed and the sequence's place in the
  stream alone (``random_offsets``); batch ``k`` is sequences ``kB .. kB + B - 1``. A batch is
  a pure function of its index, so the stream is the same whatever loads it (workers, a
  stacked group), a run resumed at step s draws exactly the batches from s on
  (``RandomOffsetSampler``), and, as under ``tokens``, every batch size sees the same sequences
  in the same order at one seed. Lightning's epochs are a nominal pass over the tokens.
- val/test: non-overlapping windows (stride = seq_len) in order over the whole split (only full
  windows: the last ``< seq_len`` targets of each row are not scored).

Bits per character: a char token is one character, so bpc = loss / ln 2 (``is_char``).
``bits_per_char_factor`` generalises it: bpc = loss (nats/token) * factor, with
factor = (tokens / characters of the val split) / ln 2 (for word, the whole text's ratio).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ablate.config import ConfigError, DataConfig
from ablate.data.batching import batchify, get_batch, stack_windows, window_starts
from ablate.data.datasets import resolve_dataset
from ablate.data.source import is_hf, load_hf
from ablate.data.token_cache import token_splits
from ablate.data.tokenizers import BaseTokenizer

SPLITS = ("train", "val", "test")


def unigram_entropy(tokens: torch.Tensor, vocab_size: int | None = None) -> float:
    """Entropy in nats of the unigram distribution of ``tokens``: ``-sum_v p_v ln p_v``.

    ``p_v = count(v) / len(tokens)``. The cross-entropy of the best context-free model on its
    own training data: any LM that uses context should get below it.
    """
    counts = torch.bincount(tokens.reshape(-1).long(), minlength=vocab_size or 0).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


def _mix_seed(seed: int, epoch: int, stream: str = "window_order") -> int:
    """A 63-bit generator seed from (seed, epoch) for ``stream``.

    Hashed rather than ``seed + epoch`` so that seed 1 is not seed 0 shifted by one epoch.
    """
    digest = hashlib.sha256(f"ablate.{stream}:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


OFFSET_BLOCK = 64
"""Sequences whose offsets one generator draws under ``data.order: random``."""


def random_offsets(n: int, seed: int, first: int, count: int) -> np.ndarray:
    """The window offsets of sequences ``first .. first + count - 1`` of a seed's stream under
    ``data.order: random``: independent uniform draws from ``[0, n)`` (numpy's ``integers``),
    sequence ``j``'s made by a generator seeded from (seed, ``j // OFFSET_BLOCK``) alone. So
    any batch is drawn without the ones before it, and batch ``k`` of size ``B`` is sequences
    ``kB .. kB + B - 1`` of one stream whatever ``B`` is (as under ``tokens``). numpy, not
    torch: a batch is cut without reading a tensor back to Python."""
    lo, hi = first // OFFSET_BLOCK, (first + count - 1) // OFFSET_BLOCK
    blocks = [
        np.random.default_rng(_mix_seed(seed, b, "random_offsets")).integers(0, n, OFFSET_BLOCK)
        for b in range(lo, hi + 1)
    ]
    skip = first - lo * OFFSET_BLOCK
    return np.concatenate(blocks)[skip : skip + count]


def window_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> torch.Tensor:
    """Order in which epoch ``epoch`` visits ``n`` windows: a permutation fixed by (seed, epoch).

    ``torch.randperm(n)`` under a CPU generator seeded with ``_mix_seed(seed, epoch)``, or
    ``arange(n)`` when not shuffling.
    """
    if not shuffle:
        return torch.arange(n)
    g = torch.Generator().manual_seed(_mix_seed(seed, epoch))
    return torch.randperm(n, generator=g)


class WindowSampler(Sampler[int]):
    """Window indices from the endless stream ``window_order(n, seed, e)`` for e = 0, 1, ...

    ``position`` is the global index in that stream of the next batch (``epoch * n + k``); it
    starts at ``start``. One pass (``iter``) yields the rest of the current epoch, from ``k`` to
    ``n``, and moves ``position`` to the next epoch's start, so consecutive passes are
    consecutive epochs and a sampler built with ``start = batches already consumed`` continues
    exactly where an earlier run stopped.

    There is deliberately no ``set_epoch``: Lightning's epoch counter can disagree with the
    batch stream after a resume (a checkpoint written when ``max_steps`` ended ``fit``
    mid-epoch restores as the start of the next epoch), so the sampler keeps its own.
    """

    BLOCK = 1 << 16

    def __init__(self, n: int, seed: int, shuffle: bool, *, start: int = 0):
        if n < 1:
            raise ValueError(f"need at least one window, got n={n}")
        self.n, self.seed, self.shuffle = n, seed, shuffle
        self.position = start

    @property
    def epoch(self) -> int:
        """The epoch the next pass visits."""
        return self.position // self.n

    def __len__(self) -> int:
        # nominal epoch length (Lightning derives batches-per-epoch from it); only a pass that
        # starts mid-epoch is shorter
        return self.n

    def __iter__(self) -> Iterator[int]:
        epoch, skip = divmod(self.position, self.n)
        self.position = (epoch + 1) * self.n  # advance now: an abandoned pass still counts
        order = window_order(self.n, self.seed, epoch, self.shuffle)
        # as Python ints a block at a time: a list of every window of a big corpus (sliding
        # windows: one per token) would take ~36 bytes per window
        for lo in range(skip, self.n, self.BLOCK):
            yield from order[lo : lo + self.BLOCK].tolist()


class WindowDataset(Dataset):
    """Item ``k`` is the batch ``get_batch(source, starts[k], seq_len)`` (copied, contiguous)."""

    def __init__(self, source: torch.Tensor, starts: Sequence[int], seq_len: int):
        self.source, self.starts, self.seq_len = source, starts, seq_len

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = get_batch(self.source, self.starts[k], self.seq_len)
        # int64 copies: the split is a uint16/uint32 memmap, and a consumer that edits a batch
        # in place must not corrupt it
        return x.to(torch.long, copy=True), y.to(torch.long, copy=True)


class TokenOrderSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` window indices cut from one seeded stream of windows.

    The stream is the epochs' permutations (``window_order``) one after another; batch ``k``
    is its positions ``[k*B, (k+1)*B)``, so a batch may straddle two epochs and the stream is
    the same for every ``B``. ``start`` is a batch index (the resume point); Lightning's epochs
    are a nominal ``n // B`` batches (``len``), and a pass ends at the next such boundary.
    """

    def __init__(self, n: int, batch_size: int, seed: int, shuffle: bool, *, start: int = 0):
        if n < 1 or batch_size < 1:
            raise ValueError(f"need windows and a batch size, got n={n}, B={batch_size}")
        self.n, self.batch_size, self.seed, self.shuffle = n, batch_size, seed, shuffle
        self.position = start
        self._orders: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return max(1, self.n // self.batch_size)

    def _window(self, j: int) -> int:
        """Window index at stream position ``j``."""
        epoch, k = divmod(j, self.n)
        if epoch not in self._orders:  # keep only the previous and the current epoch's permutation
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = window_order(self.n, self.seed, epoch, self.shuffle)
        return int(self._orders[epoch][k])

    def __iter__(self) -> Iterator[list[int]]:
        # a pass ends at the next multiple of len(self), as an uninterrupted run's would (a
        # resumed pass is shorter), so Lightning's epoch counter stays in step
        first = self.position
        self.position = (first // len(self) + 1) * len(self)  # an abandoned pass still counts
        for batch in range(first, self.position):
            lo = batch * self.batch_size
            yield [self._window(j) for j in range(lo, lo + self.batch_size)]


class TokenWindowDataset(Dataset):
    """Item ``[k1, k2, ...]`` is the batch of windows ``starts[k1], starts[k2], ...`` of a
    one-row ``source`` (``stack_windows``)."""

    def __init__(self, source: torch.Tensor, starts: range, seq_len: int):
        self.source, self.starts, self.seq_len = source, starts, seq_len

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, ks: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = torch.tensor([self.starts[k] for k in ks], dtype=torch.long)
        return stack_windows(self.source, offsets, self.seq_len)


class RandomOffsetSampler(Sampler[int]):
    """Training batch indices ``start, start + 1, ...`` under ``data.order: random``.

    ``len`` is a nominal epoch (Lightning needs one): ``batches`` per pass. A pass ends at the
    next multiple of it, as an uninterrupted run's would (a resumed pass is shorter), and the
    next pass goes on from there, so the indices never repeat.
    """

    def __init__(self, batches: int, *, start: int = 0):
        if batches < 1:
            raise ValueError(f"need at least one batch per epoch, got {batches}")
        self.batches, self.position = batches, start

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[int]:
        first = self.position
        self.position = (first // self.batches + 1) * self.batches  # an abandoned pass counts
        yield from range(first, self.position)


class RandomOffsetDataset(Dataset):
    """Item ``k`` is training batch ``k`` of a one-row ``source``: ``batch_size`` windows at
    ``random_offsets(n - seq_len, seed, k * batch_size, batch_size)``, int64 copies."""

    def __init__(self, source: torch.Tensor, seq_len: int, batch_size: int, seed: int):
        self.tokens = source[0].numpy()  # the split (a memmap), indexed by numpy every step
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed
        self.offsets = len(window_starts(source.size(1), seq_len, 1, key="data.seq_len"))

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.batch_size
        starts = random_offsets(self.offsets, self.seed, k * b, b)
        idx = starts[:, None] + np.arange(self.seq_len + 1)  # (B, seq_len + 1)
        rows = torch.from_numpy(self.tokens[idx].astype(np.int64))
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


class ResumableLoader(DataLoader):
    """The training DataLoader; its ``WindowSampler`` was positioned at the resume point.

    ``state_dict``/``load_state_dict`` carry nothing (the position comes from the trainer's
    ``global_step`` when the loader is built); they exist so Lightning recognises a loader
    that resumes mid-epoch instead of warning that it repeats data.
    """

    def state_dict(self) -> dict[str, int]:
        return {}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        pass


class LMDataModule(pl.LightningDataModule):
    """Token splits and window loaders for one ``DataConfig``; see the module docstring."""

    def __init__(self, cfg: DataConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.seed = seed
        self._tokenizer: BaseTokenizer | None = None
        self._tokens: dict[str, torch.Tensor] = {}
        self._batched: dict[str, torch.Tensor] = {}
        self._chars: dict[str, int] = {}

    # --- building -------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        """Lightning hook (once per node): make sure the dataset is present."""
        if is_hf(self.cfg.dataset):
            load_hf(self.cfg.dataset)
        else:
            resolve_dataset(self.cfg.dataset)

    def setup(self, stage: str | None = None) -> None:
        self.prepare()

    def prepare(self) -> LMDataModule:
        """Build tokenizer, splits and batchified tensors; later calls do nothing."""
        if self._tokenizer is not None:
            return self
        c = self.cfg
        # tokenized once into a memory-mapped file per (data content, tokenizer, splits)
        splits = token_splits(c)
        tok, self._tokens, self._chars = splits.tokenizer, splits.tokens, splits.chars
        train_rows = c.batch_size if c.order == "rows" else 1
        batched = {"train": self._batchify("train", train_rows, "data.batch_size")}
        eval_key = "data.eval_batch_size" if c.eval_batch_size else "data.batch_size"
        batched["val"] = self._batchify("val", c.eval_bs, eval_key)
        if c.test_fraction > 0:
            batched["test"] = self._batchify("test", c.eval_bs, eval_key)
        # fail now, not at the first batch: every split must hold at least one window
        for split, source in batched.items():
            stride = c.window_stride if split == "train" else c.seq_len
            n = len(self._starts(split, c.seq_len, stride, source=source))
            if split == "train" and c.order == "tokens" and n < c.batch_size:
                raise ConfigError(
                    f"the train split holds {n} windows of {c.seq_len} tokens, fewer than one "
                    f"batch of {c.batch_size} (data.order: tokens)",
                    key="data.batch_size",
                )
        self._batched, self._tokenizer = batched, tok
        return self

    def _batchify(self, split: str, rows: int, key: str) -> torch.Tensor:
        ids = self._tokens[split]
        if ids.numel() < 2 * rows:
            raise ConfigError(
                f"the {split} split has {ids.numel()} tokens, too few for {rows} rows of at "
                f"least 2 tokens; use a larger split or dataset, or fewer rows",
                key=key,
            )
        return batchify(ids, rows)

    def _starts(
        self,
        split: str,
        seq_len: int,
        stride: int,
        key: str = "data.seq_len",
        source: torch.Tensor | None = None,
    ) -> range:
        """``window_starts`` for ``split``, with the split named in the error."""
        source = self.batched(split) if source is None else source
        try:
            return window_starts(source.size(1), seq_len, stride, key=key)
        except ConfigError as err:
            raise ConfigError(
                f"{err.message} (the {split} split, batchified into {source.size(0)} rows)",
                key=key,
            ) from None

    # --- what the model and the trainer need ----------------------------------------------------
    @property
    def tokenizer(self) -> BaseTokenizer:
        self.prepare()
        assert self._tokenizer is not None
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def is_char(self) -> bool:
        """One token = one character, so bits per character = loss / ln 2."""
        return self.cfg.tokenizer == "char"

    @property
    def bits_per_char_factor(self) -> float:
        """bpc = loss (nats per token) * factor; factor = (val tokens / val chars) / ln 2."""
        self.prepare()
        return self._tokens["val"].numel() / self._chars["val"] / math.log(2)

    @property
    def tokens_per_batch(self) -> int:
        """Tokens in one training batch: ``batch_size * seq_len``."""
        return self.cfg.batch_size * self.cfg.seq_len

    def tokens(self, split: str) -> torch.Tensor:
        """The 1-D token ids of ``split`` (before batchify drops each split's remainder)."""
        self.prepare()
        if split not in self._tokens:
            raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        return self._tokens[split]

    @property
    def train_tokens(self) -> torch.Tensor:
        return self.tokens("train")

    def batched(self, split: str) -> torch.Tensor:
        """``split`` batchified: ``(batch_size, tps)`` for train (``(1, n)`` under ``data.order:
        tokens`` and ``random``), ``(eval_bs, tps)`` otherwise."""
        self.prepare()
        if split not in self._batched:
            if split == "test":
                raise ConfigError(
                    "there is no test split (data.test_fraction is 0)", key="data.test_fraction"
                )
            raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        return self._batched[split]

    @property
    def num_train_windows(self) -> int:
        """Training batches per epoch (under ``data.order: tokens`` and ``random``, windows of
        ``seq_len`` at stride ``seq_len`` // batch_size: a nominal pass over the tokens)."""
        c = self.cfg
        stride = c.seq_len if c.order == "random" else c.window_stride
        n = len(self._starts("train", c.seq_len, stride))
        return n if c.order == "rows" else max(1, n // c.batch_size)

    # --- loaders --------------------------------------------------------------------------------
    def _loader(
        self, dataset: Dataset, sampler: Sampler[int] | None = None, cls: type = DataLoader
    ) -> DataLoader:
        # items are whole batches already, hence batch_size=None; workers would only add
        # overhead to slicing a tensor that is already in memory
        return cls(
            dataset,
            batch_size=None,
            sampler=sampler,
            num_workers=0,
            # always on CUDA: Lightning copies batches with non_blocking=True, which only
            # runs beside the GPU from pinned memory (pinning changes no result)
            pin_memory=self.cfg.pin_memory or torch.cuda.is_available(),
            # each pass over a loader draws a seed for its workers: from a generator of its
            # own, not torch's global one, which drives dropout (an evaluation between a
            # checkpoint and the next step would otherwise change the masks a resume draws)
            generator=torch.Generator(),
        )

    def _resume_position(self) -> int:
        """Batches consumed so far by an attached Lightning trainer (0 when none)."""
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return 0
        return int(trainer.global_step) * int(getattr(trainer, "accumulate_grad_batches", 1))

    def train_dataloader(self, start: int | None = None) -> DataLoader:
        """Training windows in a seeded per-epoch order, starting at global batch ``start``.

        ``start`` defaults to the attached trainer's position (``global_step *
        accumulate_grad_batches``), which is 0 for a fresh run and the resume point otherwise.
        """
        c = self.cfg
        start = self._resume_position() if start is None else start
        if c.order == "random":
            sampler = RandomOffsetSampler(self.num_train_windows, start=start)
            dataset = RandomOffsetDataset(self.batched("train"), c.seq_len, c.batch_size, self.seed)
            return self._loader(dataset, sampler, ResumableLoader)
        starts = self._starts("train", c.seq_len, c.window_stride)
        if c.order == "tokens":
            sampler = TokenOrderSampler(
                len(starts), c.batch_size, self.seed, c.shuffle, start=start
            )
            dataset = TokenWindowDataset(self.batched("train"), starts, c.seq_len)
            return self._loader(dataset, sampler, ResumableLoader)
        sampler = WindowSampler(len(starts), self.seed, c.shuffle, start=start)
        dataset = WindowDataset(self.batched("train"), starts, c.seq_len)
        return self._loader(dataset, sampler, ResumableLoader)

    def eval_dataloader(
        self, split: str = "val", seq_len: int | None = None, *, key: str = "data.seq_len"
    ) -> DataLoader:
        """Non-overlapping ``seq_len`` windows (default ``cfg.seq_len``) over ``split``, in order.

        Raises ``ConfigError`` naming ``key`` right away when the split's rows are shorter
        than ``seq_len + 1``.
        """
        seq_len = seq_len or self.cfg.seq_len
        starts = self._starts(split, seq_len, seq_len, key=key)
        return self._loader(WindowDataset(self.batched(split), starts, seq_len))

    def val_dataloader(self) -> DataLoader:
        return self.eval_dataloader("val")

    def test_dataloader(self) -> DataLoader:
        return self.eval_dataloader("test")

    def eval_windows(
        self, split: str, seq_len: int, *, key: str = "train.eval_lengths"
    ) -> DataLoader:
        """``(x, y)`` batches of ``split`` at another ``seq_len`` (length extrapolation).

        ``eval_dataloader`` with the error keyed to ``train.eval_lengths``; the size check
        happens at this call, not lazily at the first batch.
        """
        return self.eval_dataloader(split, seq_len, key=key)
