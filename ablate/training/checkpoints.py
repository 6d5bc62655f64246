"""Checkpoints that are whole or absent: atomic writes, verified loads, a final save.

* :func:`atomic_save` writes each checkpoint to a temporary file *in the checkpoint's own
  directory*, fsyncs it and renames it over the old one. Lightning's default writes through an
  fsspec transaction, which stages the file in ``$TMPDIR`` and *copies* it into place when that
  is another filesystem: a kill or a full disk mid-copy leaves a truncated ``last.ckpt``. Here
  a failed write leaves the previous checkpoint untouched and raises
  :class:`CheckpointWriteError`, whose message names the file and says "disk full" for ENOSPC.
* :func:`select_checkpoint` tries checkpoints newest first; one that does not load is renamed to
  ``*.corrupt`` (with a warning naming it) and the next older one is tried, down to a fresh start.
* :class:`ExceptionCheckpoint` saves ``interrupted.ckpt`` when training stops on an exception.
* :class:`MetricsFirst` fsyncs the runs' ``metrics.csv`` before each checkpoint is written and
  at the end of a fit, so the log steps themselves need no fsync.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO
from pytorch_lightning.callbacks import Checkpoint

from ablate.store import RunDir, describe_os_error, file_mode

log = logging.getLogger("ablate")

CORRUPT_SUFFIX = ".corrupt"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (the previous one, if any, is intact)."""

    def __str__(self) -> str:
        return str(self.strerror)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _write_checkpoint(checkpoint: dict[str, Any], f) -> None:
    """Serialize ``checkpoint`` into the open binary file ``f`` (one place to fault-inject)."""
    torch.save(checkpoint, f)


def atomic_save(checkpoint: dict[str, Any], path: str | Path) -> None:
    """Write ``checkpoint`` to ``path`` via a same-directory temp file, fsync and rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            _write_checkpoint(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
        _fsync_dir(path.parent)  # the rename itself survives a power cut
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise CheckpointWriteError(
            err.errno, f"cannot write checkpoint {path}: {describe_os_error(err)}"
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class MetricsFirst(CheckpointIO):
    """``io`` (the fit's checkpoint writer), with the ``metrics.csv`` of ``run_dirs`` fsynced
    before each checkpoint and when the fit ends (its teardown, also after an exception).

    A checkpoint at step N promises that a resume from it finds every row up to N (it drops
    the later ones and logs them again), and a finished run's summary that all its rows are
    there: a power cut must not keep a checkpoint or a summary whose rows it lost. The sync is
    here, not in a callback, because Lightning calls the module's ``on_save_checkpoint`` (which
    logs what a log step still holds) after the callbacks' and before this writer."""

    def __init__(self, io: CheckpointIO, run_dirs: list[RunDir]) -> None:
        self.io, self.run_dirs = io, list(run_dirs)

    def sync(self) -> None:
        for run_dir in self.run_dirs:
            run_dir.sync_metrics()

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        self.sync()
        self.io.save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.io.load_checkpoint(path, *args, **kwargs)  # Lightning's arguments, as given

    def remove_checkpoint(self, path: Any) -> None:
        self.io.remove_checkpoint(path)

    def teardown(self) -> None:
        try:
            self.sync()
        finally:
            self.io.teardown()


def _load_ok(path: Path) -> tuple[int | None, str | None]:
    """``(global_step, None)`` when ``path`` loads as a Lightning checkpoint, else
    ``(None, reason)``."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - any failure to load makes it unusable
        return None, f"{type(err).__name__}: {err}".splitlines()[0]
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "global_step" not in ckpt:
        return None, "not a Lightning checkpoint (no state_dict/global_step)"
    return int(ckpt["global_step"]), None


def _set_aside(path: Path) -> Path:
    dest = path.with_name(path.name + CORRUPT_SUFFIX)
    n = 1
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}{CORRUPT_SUFFIX}{n}")
    os.replace(path, dest)
    return dest


def select_checkpoint(ckpt_dir: str | Path) -> tuple[Path | None, int | None, list[dict[str, str]]]:
    """The newest checkpoint in ``ckpt_dir`` that loads: ``(path, global_step, set_aside)``.

    Checkpoints are tried newest first (by modification time). One that fails to load is
    renamed to ``<name>.corrupt`` with a warning naming it, and listed in ``set_aside`` as
    ``{"file", "moved_to", "reason"}``; ``(None, None, set_aside)`` when none loads (a fresh
    start). Stale temp files of an interrupted save are removed.
    """
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return None, None, []
    for tmp in ckpt_dir.glob(".*.ckpt.*.tmp"):
        tmp.unlink(missing_ok=True)  # a save killed before its rename: never a checkpoint
    ckpts = sorted(ckpt_dir.glob("*.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True)
    set_aside: list[dict[str, str]] = []
    for path in ckpts:
        step, reason = _load_ok(path)
        if reason is None:
            return path, step, set_aside
        moved = _set_aside(path)
        log.warning("checkpoint %s does not load (%s); moved to %s", path, reason, moved.name)
        set_aside.append({"file": str(path), "moved_to": str(moved), "reason": reason})
    return None, None, set_aside


class ExceptionCheckpoint(Checkpoint):
    """Save ``<dirpath>/<filename>.ckpt`` when training stops on an exception (Ctrl-C, a
    crash), and remove it when a later fit ends normally: Lightning's ``OnExceptionCheckpoint``
    without its side effect on ``fit(ckpt_path=None)``, which then resumes from any checkpoint
    it finds in the directory. ablate always names the checkpoint a run resumes from
    (``select_checkpoint``), and a stacked group's fits resume from none (their members' are
    read by the group). It keeps the original error in view: after a failed write (a full disk)
    it does not try another save, and a save that fails here is logged rather than raised over
    the exception that stopped training."""

    def __init__(self, dirpath: str | Path, filename: str = "interrupted"):
        super().__init__()
        self.ckpt_path = str(Path(dirpath) / f"{filename}.ckpt")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception) -> None:
        full = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
        if isinstance(exception, CheckpointWriteError) or (
            isinstance(exception, OSError) and exception.errno in full
        ):
            return  # the disk just refused a checkpoint: the last good one stays the newest
        try:
            trainer.save_checkpoint(self.ckpt_path)
        except CheckpointWriteError as err:
            log.error("%s", err)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        trainer.strategy.remove_checkpoint(self.ckpt_path)  # the fit ended: it is stale
