"""One task in the process that trains it, under the lease protocol; every executor calls this.

A task is a group of runs (one run: a group of one; a stacked group, ``train.stack``: several).
``execute_group`` skips a finished run, takes each run's lease (or leaves the run out when
another live process holds it), re-reads its status under the lease, trains the rest as one
group (``ablate.training.train.train_group``: fresh, resumed or retried) and releases the
leases, so no run is ever trained twice at once. Every run writes one checkpoint format, so a
run resumes in whatever group the next attempt gives it (a stack, or alone) bit-exact.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
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


def execute_group(
    cfgs: list[RunConfig],
    run_dirs: list[RunDir],
    metas: list[dict[str, Any]],
    *,
    lease_grace_s: float | None = None,
    workers: int = 1,
    progress: bool = False,
) -> list[tuple[str, dict[str, Any]]]:
    """Train the runs of one task under the lease protocol; one ``(outcome, summary)`` per run,
    in order. The leases are renewed by a heartbeat thread while the runs train. Re-raises
    KeyboardInterrupt/SystemExit after the runs saved their checkpoints and the leases are
    released, so the caller can stop the study. ``workers``: how many of the study's tasks
    train at once (recorded in each run's environment); ``progress``: a progress bar."""
    results: list[tuple[str, dict[str, Any]] | None] = [None] * len(cfgs)
    lease_opts = {"grace": lease_grace_s, "job_id": job_id()}
    lease_opts = {k: v for k, v in lease_opts.items() if v is not None}
    with ExitStack() as held:
        train = []
        for i, rd in enumerate(run_dirs):
            summary = rd.read_summary() or {}
            if summary.get("status") in FINISHED:
                results[i] = (SKIPPED, summary)
                continue
            lease = rd.try_lock(**lease_opts)
            if lease is None:
                results[i] = (LOCKED, summary)
                continue
            held.callback(lease.release)
            summary = rd.read_summary() or {}  # finished by another process meanwhile?
            if summary.get("status") in FINISHED:
                results[i] = (SKIPPED, summary)
                continue
            lease.start_heartbeat()
            train.append(i)
        if train:
            from ablate.training.train import train_group

            out = train_group(
                [cfgs[i] for i in train],
                [run_dirs[i] for i in train],
                [metas[i] for i in train],
                workers=workers,
                progress=progress and all(cfgs[i].train.progress for i in train),
            )
            for i, summary in zip(train, out, strict=True):
                results[i] = (TRAINED, summary)
    return [r for r in results if r is not None]


def execute_task(
    cfgs: list[RunConfig],
    paths: list[str],
    metas: list[dict[str, Any]],
    *,
    progress: bool = False,
    lease_grace_s: float | None = None,
    workers: int = 1,
) -> list[tuple[str, dict[str, Any]]]:
    """One executor task: a run (lists of one) or a stacked group; results in member order.
    ``workers`` (the task's own: runs of the study training at once, so it reaches a Ray
    worker or a SLURM node as it reaches a local one) is recorded in each run's summary, as
    this process's threads are."""
    dirs = [RunDir(Path(p)) for p in paths]
    return execute_group(
        cfgs, dirs, metas, lease_grace_s=lease_grace_s, workers=workers, progress=progress
    )


def interrupted(paths: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The results of a task stopped from outside: each member as its store says (finished
    members count as trained)."""
    out = []
    for p in paths:
        summary = RunDir(Path(p)).read_summary() or {}
        out.append((TRAINED if summary.get("status") in FINISHED else INTERRUPTED, summary))
    return out
