"""A run's checkpoint, and the Lightning ``CheckpointIO`` that writes them.

Every run, solo (a group of one) or a member of a stacked group, writes one format: a
``torch.save`` dict with ``state_dict`` (``model.<name>``, in a one-member model's layout:
``ablate.model.member_state_dict``), ``global_step`` and ``optimizer_states``
(``torch.optim.AdamW``'s state_dict over ``decay_groups``), plus ``stacked``: the loop state a
bit-exact resume needs (``LitRuns.loop_state``: the loss accumulated since the last log, the
first non-finite step, the RNG). So a run written solo resumes in a stack and back.
``load_member_checkpoint`` also reads the Lightning checkpoints runs wrote before this format
(their loop state under ``loop``, a compiled model's keys with ``_orig_mod.``); it holds no
Lightning loop state, and none is needed: a fit counts its members' steps itself.

The module decides when to save (``LitRuns.end_step``: the interval, the end of a fit;
``trainer.make_trainer``: an exception); ``MemberCheckpointIO`` writes each member's part of
what it saves (``LitStack.save_members``) into the member's own directory, under the file name
given. Writes never stall training for long: the state is copied off the device at the step
(so the update of the next step cannot change it), and written by one background thread with
``atomic_save`` (same-directory temp file, fsync, rename): a crash at any moment leaves the old
or the new file. At most one snapshot waits: the next checkpoint waits for the previous write,
and the end of a fit (Lightning's teardown) for the last one.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO

from ablate.training.checkpoints import atomic_save

LAST = "last.ckpt"


def member_loop(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The loop state in ``checkpoint`` (``stacked``; an older solo Lightning checkpoint's
    ``loop``), or ``{}`` (a checkpoint from before it was kept: the first log interval after the
    resume then averages fewer steps)."""
    return checkpoint.get("stacked") or checkpoint.get("loop") or {}


def load_member_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint at ``path`` on the CPU, its ``state_dict`` keys in the eager model's form
    (a ``torch.compile(model)`` wrapper's ``_orig_mod.`` segment removed)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    state = ckpt.get("state_dict") or {}
    if any("._orig_mod." in k or k.startswith("_orig_mod.") for k in state):
        ckpt["state_dict"] = {
            k.replace("._orig_mod.", ".").removeprefix("_orig_mod."): v for k, v in state.items()
        }
    return ckpt


def member_checkpoint(
    state: dict[str, torch.Tensor], step: int, optimizer: dict, loop: dict[str, Any]
) -> dict[str, Any]:
    """The checkpoint dict of a member whose tensors are ``state`` (a solo layout,
    ``ablate.model.member_state_dict``), copied to the CPU here."""
    return {
        "state_dict": {
            f"model.{name}": t.detach().to("cpu", copy=True, memory_format=torch.contiguous_format)
            for name, t in state.items()
        },
        "global_step": int(step),
        "epoch": 0,
        "optimizer_states": [optimizer],
        "stacked": loop,
    }


class CheckpointWriter:
    """One background thread writing checkpoints; ``wait`` re-raises a failed write."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ablate-ckpt")
        self._pending: Future | None = None

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def submit(self, jobs: list[tuple[dict[str, Any], Path]], done: Callable | None = None):
        """Write each ``(checkpoint, path)`` in the background, after the previous batch."""
        self.wait()

        def write() -> None:
            for ckpt, path in jobs:
                atomic_save(ckpt, path)
            if done is not None:
                done()

        self._pending = self._pool.submit(write)

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)


class MemberCheckpointIO(CheckpointIO):
    """Lightning's checkpoint IO for a group of runs: the checkpoint Lightning saves as
    ``<dir>/<name>`` becomes each member's ``checkpoint["members"][i]`` in
    ``checkpoint_dirs[i]/<name>``, written in the background (``CheckpointWriter``)."""

    def __init__(self, checkpoint_dirs: list[Path]) -> None:
        self.dirs = [Path(d) for d in checkpoint_dirs]
        self.writer = CheckpointWriter()

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError("MemberCheckpointIO takes no storage_options")
        name = Path(path).name
        members = checkpoint["members"]
        self.writer.submit([(c, d / name) for c, d in zip(members, self.dirs, strict=True)])

    def load_checkpoint(self, path: Any, map_location: Any | None = None) -> dict[str, Any]:
        return load_member_checkpoint(path)  # one member's (the group opens each: ``member``)

    def remove_checkpoint(self, path: Any) -> None:
        name = Path(path).name
        for d in self.dirs:
            (d / name).unlink(missing_ok=True)

    def teardown(self) -> None:
        """The end of a fit: every checkpoint is on disk before a member's summary says so."""
        self.writer.close()
