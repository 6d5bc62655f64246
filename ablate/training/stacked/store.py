"""A stacked member's checkpoint, and the background thread that writes checkpoints.

A member's checkpoint is a ``torch.save`` dict readable by everything that reads a solo run's
Lightning checkpoint for its weights (``select_checkpoint``, ``check_resume``, ``ablate
sample``): ``state_dict`` (``model.<name>``, as ``LitLM.state_dict()``), ``global_step`` and
``optimizer_states`` (``torch.optim.AdamW``'s state_dict over ``decay_groups``), plus
``stacked``: the loop state a bit-exact resume needs (the loss accumulated since the last log,
divergence and early-stopping state, the RNG). A solo run's Lightning checkpoint loads here too
(without ``stacked``: the loss mean after the resume covers fewer steps, as a solo resume does).

Writes never stall training for long: the state is copied off the device at the step (so the
update of the next step cannot change it), and written by one background thread with
``atomic_save`` (same-directory temp file, fsync, rename): a crash at any moment leaves the old
or the new file. At most one snapshot waits: the next checkpoint waits for the previous write.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from ablate.training.checkpoints import atomic_save

LAST = "last.ckpt"


def member_checkpoint(
    tensors: dict[str, torch.Tensor],
    keys: dict[str, str],
    step: int,
    optimizer: dict,
    loop: dict[str, Any],
) -> dict[str, Any]:
    """The checkpoint dict; ``keys`` maps each ``state_dict`` key to its tensor's name
    (tied parameters: two keys, one tensor, as ``LitLM.state_dict()`` has them)."""
    return {
        "state_dict": {key: tensors[name] for key, name in keys.items()},
        "global_step": int(step),
        "epoch": 0,
        "optimizer_states": [optimizer],
        "stacked": loop,
    }


def state_dict_keys(lit: torch.nn.Module) -> dict[str, str]:
    """``LitLM.state_dict()`` key -> parameter/buffer name in the stack (``model.`` cut)."""
    model = lit.model
    ids = {id(t): n for n, t in model.named_parameters()}
    ids.update({id(t): n for n, t in model.named_buffers()})
    out = {}
    for key, t in lit.state_dict(keep_vars=True).items():
        name = key.removeprefix("model.")
        out[key] = ids.get(id(t), name)
    return out


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
