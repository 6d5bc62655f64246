"""The training side of the live progress: a Lightning callback writing ``progress.json``, and
the run's own progress bar.

Kept apart from :mod:`ablate.execution.progress` (the driver side) so that the driver, which
validates input before anything heavy is imported, never imports Lightning just to draw a line.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import TQDMProgressBar

from ablate.store.rundir import PROGRESS_FILE, write_progress


class ProgressFile(pl.Callback):
    """Writes ``progress.json`` into the run directory at the start, every ``every`` steps, at
    the end of training (phase ``final eval``), from the process that trains the run;
    ``member``: the run's index among the members the module trains (a stacked group's)."""

    def __init__(self, run_path: Path, every: int, member: int = 0) -> None:
        self.path = Path(run_path) / PROGRESS_FILE
        self.every = max(1, int(every))
        self.member = member
        self.record: dict[str, Any] = {}

    def _write(self, **fields: Any) -> None:
        self.record.update(fields, updated=time.time())
        try:
            write_progress(self.path, self.record)
        except OSError:  # a display hint must never fail a run
            pass

    def on_train_start(self, trainer, pl_module) -> None:
        step = int(trainer.global_step)  # > 0 when resumed from a checkpoint
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        now = time.time()
        self.record = {"pid": os.getpid(), "started": now, "start_step": step}
        self._write(step=step, total=total, loss=None, phase="train")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = int(trainer.global_step)
        # the end of start-up: `ablate bench --section startup` times `ablate run` to here
        self.record.setdefault("first_step", time.time())
        if step % self.every and step != trainer.max_steps:
            return
        # the module's log step: the mean loss since the last one, read from the device once
        # for the metrics and this line together (this hook runs before the module's)
        self._write(step=step, loss=pl_module.log_step(self.member), phase="train")

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.record:
            self._write(phase="eval")

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.record:
            self._write(phase="train")

    def on_train_end(self, trainer, pl_module) -> None:
        if self.record:
            self._write(step=int(trainer.global_step), phase="final eval")


class LossBar(TQDMProgressBar):
    """Lightning's progress bar showing the losses the module read at its last log step and
    evaluation (``train_loss``, ``val_loss`` of a solo run: member 0). Lightning's own bar shows
    values logged with ``self.log``, which Lightning reads back from the device at every step."""

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        losses = (("train/loss", pl_module.train_loss[0]), ("val/loss", pl_module.val_loss[0]))
        for name, value in losses:
            if value is not None:
                items[name] = value
        return items
