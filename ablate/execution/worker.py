"""One task in the process that trains it, under the lease protocol; every executor calls this.

``execute_run`` skips a finished run, takes the run's lease (or skips when another live process
holds it), re-reads the status under the lease, trains (fresh, resumed or retried) and releases
the lease, so no run is ever trained twice at once.

``execute_group`` does the same for a stacked group (``train.stack``): it takes every member's
lease (a member another live process holds is left out, a finished one skipped), trains the
rest as one stacked model (``ablate.training.stacked.group.train_group``) and releases the leases.
``execute_task`` is either, for executors that ship lists (one run: a list of one).

A run whose newest checkpoint was written by a stacked group (a study started with
``train.stack`` and resumed with ``off``) resumes as a group of one member (the same Lightning
loop), which reads that member's checkpoint and continues bit-exact to the group it came from.
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


def execute_run(
    cfg: RunConfig,
    run_dir: RunDir,
    meta: dict[str, Any],
    *,
    progress: bool = False,
    lease_grace_s: float | None = None,
    workers: int = 1,
) -> tuple[str, dict[str, Any]]:
    """Train one run under the lease protocol; returns ``(outcome, summary)``. ``workers``:
    how many of the study's tasks train at once (recorded in the run's environment).

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
        lease.start_heartbeat()
        if stacked_checkpoint(run_dir):
            from ablate.training.stacked.group import train_group

            return TRAINED, train_group([cfg], [run_dir], [meta], workers=workers)[0]
        from ablate.training.train import train_run

        progress = progress and cfg.train.progress
        return TRAINED, train_run(cfg, run_dir, meta, progress=progress, workers=workers)
    finally:
        lease.release()


def stacked_checkpoint(run_dir: RunDir) -> bool:
    """Whether the run's newest checkpoint was written by a stacked group."""
    path = run_dir.last_checkpoint()
    if path is None:
        return False
    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception:  # noqa: BLE001 - a corrupt file: train_run sets it aside
        return False
    return isinstance(ckpt, dict) and "stacked" in ckpt


def execute_group(
    cfgs: list[RunConfig],
    run_dirs: list[RunDir],
    metas: list[dict[str, Any]],
    *,
    lease_grace_s: float | None = None,
    workers: int = 1,
) -> list[tuple[str, dict[str, Any]]]:
    """Train the runs of one stacked group under the lease protocol; one ``(outcome, summary)``
    per member, in order. Re-raises KeyboardInterrupt/SystemExit after the members saved their
    checkpoints and the leases are released."""
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
            from ablate.training.stacked.group import train_group

            out = train_group(
                [cfgs[i] for i in train],
                [run_dirs[i] for i in train],
                [metas[i] for i in train],
                workers=workers,
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
    if len(cfgs) == 1:
        grace = lease_grace_s
        run = execute_run(
            cfgs[0], dirs[0], metas[0], progress=progress, lease_grace_s=grace, workers=workers
        )
        return [run]
    return execute_group(cfgs, dirs, metas, lease_grace_s=lease_grace_s, workers=workers)


def interrupted(paths: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The results of a task stopped from outside: each member as its store says (finished
    members count as trained)."""
    out = []
    for p in paths:
        summary = RunDir(Path(p)).read_summary() or {}
        out.append((TRAINED if summary.get("status") in FINISHED else INTERRUPTED, summary))
    return out
