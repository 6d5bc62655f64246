"""SLURM through submitit: one job array per study, one array task per run.

Each task runs ``execute_run`` (lease, resume, store) on its node; the store must be a path every
node sees. A job that is preempted or reaches ``--slurm-time`` gets submitit's signal, its run
saves an ``interrupted`` checkpoint, and ``RunJob.checkpoint`` requeues the same task, which
takes its own lease over (same SLURM job id) and resumes from that checkpoint.

``--slurm-cluster local`` runs the same jobs as local processes (submitit's local executor):
that is how the tests exercise this module without a SLURM cluster.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import submitit

from ablate.config import ConfigError
from ablate.execution.executors import ExecutorOptions, Progress, RunTask
from ablate.store import RunDir

log = logging.getLogger("ablate")

POLL_S = 0.5


class RunJob(submitit.helpers.Checkpointable):
    """One run as a submitit job; ``checkpoint`` (inherited) resubmits it with the same
    arguments when the job is preempted or times out, and the run resumes from its checkpoint."""

    def __call__(self, cfg, path: str, meta: dict, grace: float | None) -> tuple[str, dict]:
        import torch

        from ablate.execution.worker import INTERRUPTED, execute_run

        env = submitit.JobEnvironment()
        os.environ["ABLATE_JOB_ID"] = f"submitit:{env.job_id}"  # kept across requeues
        try:
            threads = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - macOS
            threads = os.cpu_count() or 1
        torch.set_num_threads(cfg.train.threads or threads)
        run_dir = RunDir(Path(path))
        try:
            return execute_run(cfg, run_dir, meta, lease_grace_s=grace)
        except KeyboardInterrupt:  # cancelled (scancel / Ctrl-C of a local job)
            return INTERRUPTED, run_dir.read_summary() or {}


def make_executor(tasks: list[RunTask], opts: ExecutorOptions) -> submitit.AutoExecutor:
    folder = opts.slurm_folder or str(Path(tasks[0].path).parent / ".submitit" / "%j")
    ex = submitit.AutoExecutor(folder=folder, cluster=opts.slurm_cluster)
    gpu = any(t.config.train.accelerator != "cpu" for t in tasks)
    params: dict[str, Any] = {
        "name": f"ablate-{Path(tasks[0].path).parent.name}",
        "timeout_min": opts.slurm_time,
        "gpus_per_node": opts.gpus_per_run if gpu else 0,
        "cpus_per_task": max(t.config.train.threads or 1 for t in tasks),
        "slurm_array_parallelism": opts.slurm_array_parallelism,
    }
    if opts.slurm_partition:
        params["slurm_partition"] = opts.slurm_partition
    if opts.slurm_opts:
        params["slurm_additional_parameters"] = dict(opts.slurm_opts)
    try:
        ex.update_parameters(**params)
    except (NameError, AssertionError, ValueError) as err:
        raise ConfigError(str(err).splitlines()[0], key="--slurm-opt") from None
    return ex


def submit(tasks: list[RunTask], opts: ExecutorOptions) -> list[submitit.Job]:
    """Submit one job array (one task per run); returns the jobs in task order."""
    ex = make_executor(tasks, opts)
    job = RunJob()
    with ex.batch():
        jobs = [ex.submit(job, t.config, t.path, t.meta, opts.lease_grace_s) for t in tasks]
    return jobs


def execute(tasks: list[RunTask], *, opts: ExecutorOptions, progress: Progress) -> None:
    if not tasks:
        return
    jobs = submit(tasks, opts)
    progress.write(f"submitted job array {jobs[0].job_id.split('_')[0]} ({len(jobs)} runs)")
    wait(jobs, tasks, progress)


def wait(jobs: list[submitit.Job], tasks: list[RunTask], progress: Progress) -> None:
    """Report each job as it ends; Ctrl-C cancels the jobs still queued or running."""
    from ablate.execution.worker import INTERRUPTED, TRAINED

    pending = dict(zip(jobs, tasks, strict=True))
    try:
        while pending:
            progress.poll()
            for job in [j for j in pending if j.done()]:
                t = pending.pop(job)
                try:
                    outcome, summary = job.result()
                except Exception as err:  # noqa: BLE001 - the job died: report, go on
                    summary = RunDir(Path(t.path)).read_summary() or {}
                    lines = [ln for ln in str(err).splitlines() if ln.strip()]
                    error = f"job {job.job_id}: {lines[-1] if lines else type(err).__name__}"
                    outcome, summary = TRAINED, {**summary, "status": "failed", "error": error}
                progress.finished(t.run, outcome, summary)
                if outcome == INTERRUPTED:
                    raise KeyboardInterrupt
            if pending:
                time.sleep(POLL_S)
    except BaseException:
        for job in pending:
            try:
                job.cancel(check=False)
            except Exception as err:  # noqa: BLE001 - already gone
                log.debug("cancel %s: %s", job.job_id, err)
        raise
