"""One run in the process that trains it, under the lease protocol; every executor calls this.

``execute_run`` skips a finished run, takes the run's lease (or skips when another live process
holds it), re-reads the status under the lease, trains (fresh, resumed or retried) and releases
the lease, so no run is ever trained twice at once.
"""

from __future__ import annotations

import os
from typing import Any

from ablate.config import RunConfig
from ablate.store import FINISHED, RunDir

# outcomes of one attempt at a run
TRAINED = "trained"
SKIPPED = "skipped"  # already finished
LOCKED = "locked"  # another process holds the run
INTERRUPTED = "interrupted"


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS / Windows
        return os.cpu_count() or 1


def job_id() -> str | None:
    """This run's executor job id (Ray task, submitit job), kept across retries and requeues.

    Only set by the executors, once per run (``ABLATE_JOB_ID``): never derived from
    ``SLURM_JOB_ID``, which every process of one allocation shares (a lease with our job id may
    be taken over, see ablate/store/lease.py, so it must name one run's job alone).
    """
    return os.environ.get("ABLATE_JOB_ID") or None


def execute_run(
    cfg: RunConfig,
    run_dir: RunDir,
    meta: dict[str, Any],
    *,
    progress: bool = False,
    lease_grace_s: float | None = None,
) -> tuple[str, dict[str, Any]]:
    """Train one run under the lease protocol; returns ``(outcome, summary)``.

    Every executor calls this in the process that trains. The lease is renewed by a heartbeat
    thread while the run trains. Re-raises KeyboardInterrupt/SystemExit (after train_run saved
    a checkpoint and the lease is released) so the caller can stop the study.
    """
    summary = run_dir.read_summary() or {}
    if summary.get("status") in FINISHED:
        return SKIPPED, summary
    lease_opts = {"grace": lease_grace_s, "job_id": job_id()}
    lease = run_dir.try_lock(**{k: v for k, v in lease_opts.items() if v is not None})
    if lease is None:
        return LOCKED, summary
    try:
        summary = run_dir.read_summary() or {}  # another process may have finished it meanwhile
        if summary.get("status") in FINISHED:
            return SKIPPED, summary
        from ablate.training.train import train_run

        lease.start_heartbeat()
        return TRAINED, train_run(cfg, run_dir, meta, progress=progress and cfg.train.progress)
    finally:
        lease.release()
