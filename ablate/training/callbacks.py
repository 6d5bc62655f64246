"""The training side of the live progress: the writer of ``progress.json``, and the run's own
progress bar.

Kept apart from :mod:`ablate.execution.progress` (the driver side) so that the driver, which
validates input before anything heavy is imported, never imports Lightning just to draw a line.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pytorch_lightning.callbacks import TQDMProgressBar

from ablate.store.rundir import PROGRESS_FILE, write_progress


class ProgressFile:
    """Writes ``progress.json`` into each run directory of ``run_paths`` (a group's members, in
    the module's order; one for a solo run) from the process that trains them: at the start of
    a fit, at every log step with the losses the module read, around evaluations (phase
    ``eval``) and at the end of training (phase ``final eval``). The module calls it
    (``LitRuns``); a step that writes nothing costs the same whatever the members' number."""

    def __init__(self, run_paths: list[Path]) -> None:
        self.paths = [Path(p) / PROGRESS_FILE for p in run_paths]
        self.records: list[dict[str, Any]] = []

    def _write(self, **fields: Any) -> None:
        now = time.time()
        for path, record in zip(self.paths, self.records, strict=True):
            record.update(fields, updated=now)
            try:
                write_progress(path, record)
            except OSError:  # a display hint must never fail a run
                pass

    def start(self, step: int, total: int) -> None:
        """A fit starts at ``step`` (> 0 when resumed) of ``total``."""
        now = time.time()
        self.records = [
            {"pid": os.getpid(), "started": now, "start_step": step} for _ in self.paths
        ]
        self._write(step=step, total=total, loss=None, phase="train")

    def log(self, step: int, losses: list[float | None]) -> None:
        """A log step: each member's mean training loss since the last one."""
        # the end of start-up: `ablate bench --section startup` times `ablate run` to here
        if self.records and "first_step" not in self.records[0]:
            for record in self.records:
                record["first_step"] = time.time()
        for record, loss in zip(self.records, losses, strict=True):
            record["loss"] = loss
        self._write(step=step, phase="train")

    def phase(self, phase: str) -> None:
        if self.records:
            self._write(phase=phase)

    def end(self, step: int) -> None:
        if self.records:
            self._write(step=step, phase="final eval")


class LossBar(TQDMProgressBar):
    """Lightning's progress bar showing the losses the module read at its last log step and
    evaluation (member 0's ``MemberMetrics``: a solo run's). Lightning's own bar shows
    values logged with ``self.log``, which Lightning reads back from the device at every step."""

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        first = pl_module.metrics[0]
        losses = (("train/loss", first.train_loss), ("val/loss", first.val_loss))
        for name, value in losses:
            if value is not None:
                items[name] = value
        return items
