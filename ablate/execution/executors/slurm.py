"""SLURM through submitit: one job array per study, one array task per run.

Each task runs ``execute_group`` (lease, resume, store) on its node; the store must be a path every
node sees. A job that is preempted or reaches its ``time`` gets submitit's signal, its run
saves an ``interrupted`` checkpoint, and ``RunJob.checkpoint`` requeues the same task, which
takes its own lease over (same SLURM job id) and resumes from that checkpoint.

SLURM is never guessed: without the ``cluster`` option the jobs go to SLURM, and SLURM's client
commands must be on PATH (``check``); submitit's own fallback to local processes is not used.
``--executor-opt cluster=local`` runs the same jobs as local processes (submitit's local
executor), on purpose: that is how the tests exercise this module without a cluster. A driver
stopped with Ctrl-C or SIGTERM cancels its jobs (SLURM's and local ones alike) before it exits.

The driver learns that a task ended from its result file, and otherwise from ``squeue``, which
answers on every cluster; ``sacct`` needs accounting (slurmdbd), which many small clusters lack
(submitit's own polling warns twice on every poll there).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import submitit
from pydantic import Field, field_validator

from ablate.config import ConfigError
from ablate.execution.executors import (
    OPT_FLAG,
    ExecutorOptions,
    Progress,
    RunTask,
    register_executor,
)

log = logging.getLogger("ablate")

POLL_S = 0.5
SQUEUE_EVERY_S = 5.0
"""How often the driver asks ``squeue`` about tasks that have no result yet."""
RESULT_GRACE_S = 15.0
"""A task that left the queue may still be writing its result (shared file systems lag)."""
STOP_WAIT_S = 30.0
"""How long a stopped driver waits for its local jobs to exit."""
COMMANDS = ("sbatch", "squeue", "scancel")
"""SLURM's client commands the driver runs (submit, follow, cancel)."""
ACTIVE = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "STOPPED",
    "PREEMPTED",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "RESV_DEL_HOLD",
    "SIGNALING",
    "STAGE_OUT",
    "SPECIAL_EXIT",
}
"""squeue states of a task that will still run (or is being requeued): not ended. A state that
may be either (PREEMPTED) counts as running: a task that really ended is caught when it leaves
the queue, a live one is never reported ended."""


@register_executor
class SlurmOptions(ExecutorOptions):
    """SLURM through submitit: one job array per study, one array task per run (or group)."""

    executor: Literal["slurm"] = "slurm"
    partition: str | None = None
    """The partition the jobs go to (default: the cluster's)."""
    time: int = Field(60, ge=1)
    """Minutes per job (or H:MM:SS, D-HH:MM:SS) before it is requeued; it resumes from its
    checkpoint."""
    array_parallelism: int = Field(64, ge=1)
    """Array tasks running at once."""
    gpus_per_run: int = Field(1, ge=0)
    """GPUs one run uses; 0 trains on CPU."""
    sbatch: dict[str, str] = Field(default_factory=dict)
    """Extra ``#SBATCH`` options, one key each: ``sbatch.account=abc``, ``sbatch.qos=high``."""
    cluster: Literal["slurm", "local", "debug"] | None = None
    """submitit's cluster (None: SLURM, whose ``sbatch`` must be on PATH); ``local`` runs the
    jobs as local processes of this machine, ``debug`` in this process."""
    folder: str | None = None
    """Where submitit keeps job scripts and logs (default: ``<store>/<study>/.submitit``)."""

    extra: ClassVar[str | None] = "slurm"

    @field_validator("time", mode="before")
    @classmethod
    def _minutes(cls, v: Any) -> Any:
        """``90``, ``"90"``, ``"1:30:00"`` or ``"2-00:00:00"`` (days-hours:min:s) -> minutes."""
        if not isinstance(v, str) or v.strip().isdigit():
            return v
        days, _, hms = v.strip().rpartition("-")
        try:
            parts = [int(p) for p in hms.split(":")]
            if len(parts) != 3 or (days and not days.isdigit()):
                raise ValueError
        except ValueError:
            raise ValueError(f"{v!r} is not minutes, H:MM:SS or D-HH:MM:SS") from None
        h, m, s = parts
        return max(1, (int(days or 0) * 24 + h) * 60 + m + (1 if s else 0))

    @field_validator("sbatch", mode="before")
    @classmethod
    def _option_names(cls, v: Any) -> Any:
        """``mem-per-cpu`` or ``--mem-per-cpu`` as submitit names it: ``mem_per_cpu``."""
        if not isinstance(v, dict):
            return v
        return {str(k).strip().lstrip("-").replace("-", "_"): val for k, val in v.items()}

    def check(self) -> None:
        super().check()
        check(self)

    def execute(self, tasks: list[RunTask], progress: Progress) -> None:
        execute(tasks, opts=self, progress=progress)

    def where(self, tasks: Sequence[RunTask]) -> str:
        name = submitit_cluster(self)
        return "on SLURM" if name == "slurm" else f"on submitit's {name} executor"


def submitit_cluster(opts: SlurmOptions) -> str:
    """The submitit cluster the jobs go to: ``slurm`` unless ``cluster`` says otherwise."""
    return opts.cluster or "slurm"


def check(opts: SlurmOptions) -> None:
    """SLURM's client commands must be here: submitit would otherwise run the jobs locally."""
    if submitit_cluster(opts) != "slurm":
        return
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise ConfigError(
            f"SLURM's {', '.join(missing)} not found on PATH (is this a SLURM login node?); "
            f"{OPT_FLAG} cluster=local runs the jobs as local processes",
            key="--executor slurm",
        )


class RunJob(submitit.helpers.Checkpointable):
    """One run as a submitit job; ``checkpoint`` (inherited) resubmits it with the same
    arguments when the job is preempted or times out, and the run resumes from its checkpoint."""

    def __call__(
        self, cfg, path, meta, grace: float | None, workers: int = 1
    ) -> tuple[str, dict] | list:
        """One run (``cfg``, ``path``, ``meta``) or a stacked group (lists of them: the result
        is then a list of ``(outcome, summary)``, one per member)."""
        import torch

        from ablate.execution.worker import INTERRUPTED, execute_task, interrupted

        env = submitit.JobEnvironment()
        os.environ["ABLATE_JOB_ID"] = f"submitit:{env.job_id}"  # kept across requeues
        try:
            threads = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - macOS
            threads = os.cpu_count() or 1
        group = isinstance(cfg, list)
        cfgs, paths, metas = (cfg, path, meta) if group else ([cfg], [path], [meta])
        torch.set_num_threads(cfgs[0].train.threads or threads)
        try:
            results = execute_task(cfgs, paths, metas, lease_grace_s=grace, workers=workers)
        except KeyboardInterrupt:  # cancelled (scancel / Ctrl-C of a local job)
            results = interrupted(paths)
            if not group:
                return INTERRUPTED, results[0][1]
        return results if group else results[0]


def make_executor(tasks: list[RunTask], opts: SlurmOptions) -> submitit.AutoExecutor:
    folder = opts.folder or str(Path(tasks[0].path).parent / ".submitit" / "%j")
    check(opts)  # never let submitit pick its local executor for a missing SLURM
    ex = submitit.AutoExecutor(folder=folder, cluster=submitit_cluster(opts))
    gpu = any(t.config.train.accelerator != "cpu" for t in tasks)
    params: dict[str, Any] = {
        "name": f"ablate-{Path(tasks[0].path).parent.name}",
        "timeout_min": opts.time,
        "gpus_per_node": opts.gpus_per_run if gpu else 0,
        "cpus_per_task": max(t.config.train.threads or 1 for t in tasks),
        "slurm_array_parallelism": opts.array_parallelism,
    }
    if opts.partition:
        params["slurm_partition"] = opts.partition
    if opts.sbatch:
        params["slurm_additional_parameters"] = dict(opts.sbatch)
    try:
        ex.update_parameters(**params)
    except (NameError, AssertionError, ValueError) as err:
        raise ConfigError(str(err).splitlines()[0], key=f"{OPT_FLAG} sbatch") from None
    return ex


def submit(tasks: list[RunTask], opts: SlurmOptions) -> list[submitit.Job]:
    """Submit one job array (one task per run); returns the jobs in task order."""
    ex = make_executor(tasks, opts)
    job = RunJob()
    with ex.batch():
        jobs = [ex.submit(job, *_args(t), opts.lease_grace_s, t.workers) for t in tasks]
    return jobs


def _args(t: RunTask) -> tuple:
    """A run's job arguments (as before groups existed), or a group's lists."""
    return (t.config, t.path, t.meta) if not t.members else t.payload()


def execute(tasks: list[RunTask], *, opts: SlurmOptions, progress: Progress) -> None:
    if not tasks:
        return
    with _sigterm_stops():
        jobs = submit(tasks, opts)
        runs = sum(len(t.runs()) for t in tasks)
        what = f"{len(jobs)} runs" if runs == len(jobs) else f"{len(jobs)} tasks, {runs} runs"
        progress.write(f"submitted job array {jobs[0].job_id.split('_')[0]} ({what})")
        wait(jobs, tasks, progress)


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[None]:
    """SIGTERM stops the driver like Ctrl-C does (``wait`` then cancels its jobs); by default it
    would kill the driver at once and leave local jobs training for nobody."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Queue:
    """Which SLURM array tasks have ended: their result file, else ``squeue`` (no ``sacct``)."""

    def __init__(self, jobs: list[submitit.Job]) -> None:
        self.arrays = sorted({j.job_id.split("_")[0] for j in jobs})
        self.states: dict[str, str] | None = None
        self.asked = float("-inf")
        self.gone_since: dict[str, float] = {}

    def refresh(self) -> None:
        if time.monotonic() - self.asked < SQUEUE_EVERY_S:
            return
        self.asked = time.monotonic()
        cmd = ["squeue", "--noheader", "--array", "--states=all", "--format=%i %T"]
        try:
            out = subprocess.run(
                [*cmd, "--jobs", ",".join(self.arrays)],
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError) as err:
            log.debug("squeue: %s", err)
            self.states = None  # no answer: nothing is decided on this poll
            return
        if out.returncode != 0 and "Invalid job id" not in out.stderr:  # ids purged: none left
            log.debug("squeue: %s", out.stderr.strip())
            self.states = None
            return
        self.states = dict(
            line.split(maxsplit=1) for line in out.stdout.splitlines() if len(line.split()) == 2
        )

    def ended(self, job: submitit.Job) -> str | None:
        """None while the task may still run; ``""`` once it has a result; else the state it
        ended in without one (``FAILED``, ``CANCELLED``, ``TIMEOUT``, ``OUT_OF_MEMORY``...)."""
        if job.paths.result_pickle.exists():
            return ""
        if self.states is None:
            return None
        state = self.states.get(job.job_id, "GONE").split()[0].rstrip("+")
        if state in ACTIVE:
            self.gone_since.pop(job.job_id, None)
            return None
        since = self.gone_since.setdefault(job.job_id, time.monotonic())
        return state if time.monotonic() - since >= RESULT_GRACE_S else None


def _ended_without_result(job: submitit.Job, state: str) -> str:
    """One line for a task that ended without a result: its state and its log's last line."""
    try:
        lines = [ln.strip() for ln in (job.stderr() or "").splitlines() if ln.strip()]
    except OSError:
        lines = []
    why = f": {lines[-1]}" if lines else ""
    where = "left the queue" if state == "GONE" else f"ended {state}"
    return f"job {job.job_id} {where} without a result{why} (log: {job.paths.stderr})"


def wait(jobs: list[submitit.Job], tasks: list[RunTask], progress: Progress) -> None:
    """Report each job as it ends; a stop (Ctrl-C, SIGTERM) cancels the jobs still queued or
    running, and waits for local ones to exit."""
    pending = dict(zip(jobs, tasks, strict=True))
    queue = Queue(jobs) if isinstance(jobs[0], submitit.SlurmJob) else None
    try:
        while pending:
            progress.poll()
            if queue is not None:
                queue.refresh()
            for job in list(pending):
                state = queue.ended(job) if queue is not None else ("" if job.done() else None)
                if state is None:
                    continue
                t = pending.pop(job)
                if state:
                    results = t.failed(_ended_without_result(job, state))
                else:
                    try:
                        results = job.result()
                    except Exception as err:  # noqa: BLE001 - the job died: report, go on
                        lines = [ln for ln in str(err).splitlines() if ln.strip()]
                        error = f"job {job.job_id}: {lines[-1] if lines else type(err).__name__}"
                        results = t.failed(error)
                if t.report(results, progress):
                    raise KeyboardInterrupt
            if pending:
                time.sleep(POLL_S)
    except BaseException:
        _cancel(list(pending))
        raise


def _cancel(jobs: list[submitit.Job]) -> None:
    """Cancel ``jobs``; local ones (processes of this machine) are waited for: submitit's local
    controller passes the stop on to its task (SIGINT, then SIGKILL a second later) and exits."""
    with _ignoring_stops():
        for job in jobs:
            try:
                job.cancel(check=False)
            except Exception as err:  # noqa: BLE001 - already gone
                log.debug("cancel %s: %s", job.job_id, err)
        local = [j for j in jobs if isinstance(j, submitit.local.local.LocalJob)]
        deadline = time.monotonic() + STOP_WAIT_S
        while local and time.monotonic() < deadline:
            local = [j for j in local if not j.done()]
            if local:
                time.sleep(0.1)
        for job in local:
            log.warning("job %s did not stop within %.0f s", job.job_id, STOP_WAIT_S)


@contextlib.contextmanager
def _ignoring_stops() -> Iterator[None]:
    """A second Ctrl-C/SIGTERM while the jobs are being cancelled must not orphan them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
