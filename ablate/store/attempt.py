"""One attempt at training a run (a fresh start, a resume, a retry): the one writer of its
directory while it trains, for a solo run (``training.train.train_run``) and a stacked member
(``training.train.train_group``) alike.

``RunAttempt.start`` writes ``run.yaml`` (a new run, or one whose file is damaged) and the
``running`` summary of this attempt, keeping the attempts before it; training fills in
``attempt.summary`` and ``write`` stores it. The attempt also records a resume (metrics after
the checkpoint's step dropped, set-aside checkpoints), the tokenizer for ``ablate sample``, a
failure's traceback (``error.log``) and the wall time, which goes on from earlier attempts of
an interrupted run. A write that fails with an OS error (a full disk) is a
:class:`StoreWriteError` with one line naming the file.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from typing import Any

from ablate.config import RunConfig
from ablate.store.provenance import provenance
from ablate.store.rundir import (
    TOKENIZER_FILE,
    RunDir,
    StoreWriteError,
    atomic_write_text,
    describe_os_error,
)

log = logging.getLogger("ablate")

LAUNCHED = "launched"
"""The meta key (and attempt field): when the process that started the attempt was launched."""


class RunAttempt:
    """``run_dir`` trained by this process since ``t0``: ``summary`` is this attempt's summary,
    ``prior`` what the store said before it, ``meta`` the run's meta (provenance included)."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: RunDir,
        meta: dict[str, Any],
        t0: float,
        launched: float | None = None,
    ):
        """Reads the prior summary and builds the ``running`` one; writes nothing (``start``).
        ``launched``: when the process that started this attempt (``ablate run``) was launched,
        recorded beside the attempt's own start."""
        self.run_dir, self.meta, self.t0 = run_dir, meta, t0
        self.prior: dict[str, Any] = run_dir.read_summary() or {}
        prior = self.prior
        wall = prior.get("wall_time_s") if prior.get("status") == "running" else 0.0
        # an interrupted run's clock goes on; a damaged value counts as 0
        self.base_wall = float(wall) if isinstance(wall, int | float) else 0.0
        attempts = prior.get("attempts") if isinstance(prior.get("attempts"), list) else []
        self.summary: dict[str, Any] = {
            "status": "running",
            "name": meta.get("name", run_dir.run_id),
            "variant": meta.get("variant"),
            "seed": cfg.train.seed,
            "axes": meta.get("axes") or {},
            "run_id": run_dir.run_id,
            "study": meta["study"],
            **({"confirm": True} if meta.get("confirm") is True else {}),  # ablate run confirm
            # one entry per start (fresh, resumed, retried): which process trained the run when
            "attempts": [
                *attempts,
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started": round(t0, 3),
                    **({"launched": launched} if launched is not None else {}),
                },
            ],
        }

    @classmethod
    def start(
        cls,
        cfg: RunConfig,
        run_dir: RunDir,
        meta: dict[str, Any] | None,
        t0: float,
        *,
        inputs: dict[str, Any],
    ) -> RunAttempt:
        """Begin an attempt: ``run.yaml`` written if missing or damaged, then the ``running``
        summary. ``inputs``: what the run reads besides the code (its data key and plugin
        digests, from the caller: the store imports neither the data nor the model), recorded
        in the meta with the code's provenance. The meta's ``launched`` (the launching
        process's start, per command) goes into this attempt's entry, not ``run.yaml``."""
        meta = {"run_id": run_dir.run_id, "study": run_dir.study, **(meta or {})}
        launched = meta.pop(LAUNCHED, None)
        meta.update(provenance(inputs))
        if not run_dir.exists() or not run_dir.read_run()["config"]:
            try:
                run_dir.write_run(cfg.to_dict(), meta)
            except OSError as err:
                msg = f"cannot write {run_dir.run_file}: {err}"
                raise StoreWriteError(err.errno, msg) from None
        attempt = cls(cfg, run_dir, meta, t0, launched)
        attempt.write()
        return attempt

    def trains(self, way: dict[str, Any]) -> None:
        """Record how this attempt trains the run (``training.train.training_way``: stack size,
        compile and its mode, CUDA graphs; none of it in the run id), in the summary's
        ``training`` and in this attempt's entry of ``attempts``, and store it."""
        self.summary["attempts"][-1]["training"] = way
        self.write(training=way)

    def wall_time(self, wait: float = 0.0) -> float:
        """Seconds the run has trained, earlier attempts included (``wait``: time not spent
        training, e.g. waiting for W&B)."""
        return self.base_wall + time.time() - self.t0 - wait

    def write(self, **fields: Any) -> dict[str, Any]:
        """Update the summary with ``fields`` and store it (atomically); returns it."""
        self.summary.update(fields)
        try:
            self.run_dir.write_summary(self.summary)
        except OSError as err:
            raise StoreWriteError(
                err.errno,
                f"cannot write {self.run_dir.summary_file}: {describe_os_error(err)}; stopping "
                "(free space, then run the same command again to resume)",
            ) from None
        return self.summary

    def interrupted(self, wait: float = 0.0) -> None:
        """Stopped from outside with a checkpoint: the run stays ``running`` so the next
        ``ablate run`` resumes it."""
        self.write(status="running", wall_time_s=self.wall_time(wait))

    def failed(self, err: BaseException) -> None:
        """Mark the summary ``failed`` with the error's line and keep the traceback of the
        exception being handled in ``error.log`` (the caller writes the summary); a full disk
        must not hide the run's own error."""
        self.summary.update(status="failed", error=f"{type(err).__name__}: {err}")
        try:
            atomic_write_text(self.run_dir.error_file, traceback.format_exc())
        except OSError:
            log.error("cannot write %s", self.run_dir.error_file)

    def restore(self) -> None:
        """Put back the summary the store had before this attempt (it must not count, e.g. a
        resume refused as bad input)."""
        if self.prior:
            self.run_dir.write_summary(self.prior)

    def resume(self, step: int | None, set_aside: list[str]) -> None:
        """Record where this attempt starts: from a checkpoint at ``step`` (metrics logged after
        it are dropped: the run logs them again) or afresh (``None``: every metric dropped);
        ``set_aside``: checkpoints renamed ``*.corrupt``."""
        if set_aside:
            before = self.prior.get("corrupt_checkpoints") or []
            self.summary["corrupt_checkpoints"] = [*before, *set_aside]
        if step is not None:
            self.run_dir.truncate_metrics_after(step)
            self.summary["resumed_from_step"] = step
        elif self.run_dir.metrics_file.exists():
            self.run_dir.truncate_metrics_after(-1)

    def save_tokenizer(self, tokenizer: Any) -> None:
        """Keep the run's tokenizer beside it (``ablate sample`` reads it), once."""
        path = self.run_dir.path / TOKENIZER_FILE
        if not path.is_file():
            tokenizer.save(path)
