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
    """Writes ``progress.json`` into each run directory of ``run_paths`` (a solo run's, or a
    stacked group's members' in the module's order) at the start, every ``every`` steps, at the
    end of training (phase ``final eval``), from the process that trains the runs. One callback
    for every member: a step that writes nothing costs the same whatever their number."""

    def __init__(self, run_paths: list[Path], every: int) -> None:
        self.paths = [Path(p) / PROGRESS_FILE for p in run_paths]
        self.every = max(1, int(every))
        self.records: list[dict[str, Any]] = []

    def _write(self, **fields: Any) -> None:
        now = time.time()
        for path, record in zip(self.paths, self.records, strict=True):
            record.update(fields, updated=now)
            try:
                write_progress(path, record)
            except OSError:  # a display hint must never fail a run
                pass

    def on_train_start(self, trainer, pl_module) -> None:
        step = int(trainer.global_step)  # > 0 when resumed from a checkpoint
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        now = time.time()
        self.records = [
            {"pid": os.getpid(), "started": now, "start_step": step} for _ in self.paths
        ]
        self._write(step=step, total=total, loss=None, phase="train")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = int(trainer.global_step)
        # the end of start-up: `ablate bench --section startup` times `ablate run` to here
        if self.records and "first_step" not in self.records[0]:
            for record in self.records:
                record["first_step"] = time.time()
        if step % self.every and step != trainer.max_steps:
            return
        # the module's log step: the mean losses since the last one, read from the device once
        # for the metrics and these lines together (this hook runs before the module's)
        for record, loss in zip(self.records, pl_module.log_step(), strict=True):
            record["loss"] = loss
        self._write(step=step, phase="train")

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.records:
            self._write(phase="eval")

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.records:
            self._write(phase="train")

    def on_train_end(self, trainer, pl_module) -> None:
        if self.records:
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
