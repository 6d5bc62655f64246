"""This machine: one run at a time in-process, or a pool of worker processes, GPU-aware.

On a box with G visible GPUs each worker gets its own device through ``CUDA_VISIBLE_DEVICES``
(round-robin), and ``runs_per_gpu = k`` packs k workers on one GPU, each capped at 1/k of its
memory with ``torch.cuda.set_per_process_memory_fraction``. CPU threads are split between the
workers (``max(1, cores // workers)`` unless ``train.threads`` is set), so workers never
oversubscribe the cores. ``--workers auto`` (the default) fills the machine: the GPUs, or on a
CPU one worker per core (per ``train.threads`` cores), see ``auto_workers``.

Ctrl-C: workers ignore the terminal's SIGINT; the parent sends each one SIGUSR1, which stops its
run at the next step boundary (an ``interrupted`` checkpoint, status ``running``), cancels the
queued runs and waits for the workers, so the same command resumes every run.

A driver killed outright (``kill -9``, the OOM killer) cannot do that: its workers would train
their queued runs for nobody and then wait forever on the dead pool, holding their memory (and
GPU). Each worker watches its driver instead (a pipe only the driver holds open); once the
driver is gone it stops its run the same way (checkpoint, lease released) and exits, so the
same command resumes at once.

Start-up costs what the work costs: one run at a time (``--workers 1``, or a study with one run
to train) trains in this process, which imports torch, Lightning and W&B itself and starts no
other process. Only when two runs train at once does the pool start: its workers are forked
from a forkserver that imported those once (``WORKER_IMPORTS``), not once per worker.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from ablate.config import ConfigError
from ablate.execution.executors import (
    ExecutorFailed,
    ExecutorOptions,
    Progress,
    RunTask,
    register_executor,
)
from ablate.execution.worker import cpu_count

POLL_S = 0.5  # how often the wait loop wakes to call progress.poll()
ORPHAN_STOP_S = 60.0  # how long an orphaned worker waits for its run's checkpoint
WORKER_IMPORTS = ("ablate.training.train", "wandb", "wandb.sdk.launch.inputs.internal")
"""What a worker imports before its first run; the forkserver imports it once for all of them
(``executors/preload.py``). W&B imports its launch inputs in every process's first
``wandb.init``, a quarter of a second of CPU."""


DEFAULT_WORKERS_ENV = "ABLATE_DEFAULT_WORKERS"


@register_executor
class LocalOptions(ExecutorOptions):
    """This machine: one run at a time in this process, or a pool of worker processes."""

    executor: Literal["local"] = "local"
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] | None = None
    """Runs trained at once, or ``auto``: every GPU ``runs_per_gpu`` deep on a GPU box; on a
    CPU one worker per ``train.threads`` cores (one per core by default: 2 workers x 1 thread
    beat 1 x 2 on a 2-core CPU, ``reports/bench.md`` section 5). None:
    ``$ABLATE_DEFAULT_WORKERS`` if set (an integer or ``auto``), else ``auto``."""
    runs_per_gpu: int = Field(1, ge=1)
    """Runs packed on one GPU, each capped at 1/k of its memory."""
    max_retries: int = Field(3, ge=0)
    """Fresh pools tried after a worker process died (killed, out of memory) with no run
    finished in between."""

    @field_validator("workers", mode="before")
    @classmethod
    def _count_or_auto(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.strip()
            if v != "auto" and not v.isdigit():
                raise ValueError(f"{v!r} is not a number of workers or auto")
        return v

    def check(self) -> None:
        if self.workers is None:
            default_workers()

    def execute(self, tasks: list[RunTask], progress: Progress) -> None:
        execute(tasks, opts=self, progress=progress)

    def where(self, tasks: Sequence[RunTask]) -> str:
        if not tasks:
            return ""
        slots = plan_workers(tasks, self)
        if len(slots) == 1 and slots[0].memory_fraction is None:
            return ""  # one run at a time, in this process
        gpus = sorted({s.cuda_visible_devices for s in slots if s.cuda_visible_devices})
        if gpus:
            return f"{len(slots)} workers on GPU(s) {','.join(gpus)}"
        return f"{len(slots)} workers" if len(slots) > 1 else ""

    def runs_at_once(self, tasks: Sequence[RunTask]) -> int:
        return len(plan_workers(tasks, self)) if tasks else 1


def default_workers() -> int | Literal["auto"]:
    """What ``--workers`` means when not given: ``$ABLATE_DEFAULT_WORKERS`` (an integer or
    ``auto``; e.g. 1 on a machine shared with others), else ``auto``."""
    value = os.environ.get(DEFAULT_WORKERS_ENV, "auto").strip()
    if value == "auto":
        return "auto"
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(
            f"{value!r} is not a number of workers >= 1 or auto", key=DEFAULT_WORKERS_ENV
        )
    return int(value)


@dataclass(frozen=True)
class Slot:
    """What one worker process trains on."""

    cuda_visible_devices: str | None  # None: leave the environment alone (CPU)
    memory_fraction: float | None  # per-process cap on the GPU's memory; None: no cap


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no CUDA: CPU only
        return []


def assign_devices(gpus: Sequence[str], workers: int, runs_per_gpu: int = 1) -> list[Slot]:
    """One ``Slot`` per worker: worker i gets GPU ``gpus[i mod G]``; k runs share one GPU.

    With G GPUs and k runs per GPU at most ``G * k`` workers fit (more would overcommit a GPU
    past the 1/k memory caps); each worker's memory fraction is ``1 / k`` (None for k = 1: the
    whole GPU). No GPUs: every slot is CPU.
    """
    if workers < 1 or runs_per_gpu < 1:
        raise ValueError("workers and runs_per_gpu must be >= 1")
    if not gpus:
        return [Slot(None, None)] * workers
    if workers > len(gpus) * runs_per_gpu:
        raise ConfigError(
            f"{workers} workers do not fit on {len(gpus)} GPU(s) x {runs_per_gpu} runs per GPU; "
            "raise --runs-per-gpu or lower --workers",
            key="--workers",
        )
    fraction = None if runs_per_gpu == 1 else 1.0 / runs_per_gpu
    return [Slot(gpus[i % len(gpus)], fraction) for i in range(workers)]


def uses_gpu(tasks: Sequence[RunTask]) -> bool:
    return any(t.config.train.accelerator != "cpu" for t in tasks)


def auto_workers(tasks: Sequence[RunTask], gpus: Sequence[str], runs_per_gpu: int) -> int:
    """``--workers auto``: every GPU ``runs_per_gpu`` deep; on a CPU one worker per
    ``train.threads`` cores (the largest the runs ask for; 1 when unset), so ``cores`` workers
    of one thread each: on 2 cores 2 workers x 1 thread train faster than 1 x 2
    (``reports/bench.md`` section 5)."""
    if gpus:
        return len(gpus) * runs_per_gpu
    threads = max((t.config.train.threads or 1 for t in tasks), default=1)
    return max(1, cpu_count() // threads)


def worker_threads(workers: int) -> int:
    """Torch threads of each of ``workers`` pool workers: the cores split between them (a run's
    ``train.threads`` still wins inside it)."""
    return max(1, cpu_count() // workers)


def plan_workers(
    tasks: Sequence[RunTask], opts: LocalOptions, gpus: Sequence[str] | None = None
) -> list[Slot]:
    """The worker slots for this study: GPUs (``visible_gpus()`` unless given) only if its
    runs train on them; at most one worker per task."""
    if not uses_gpu(tasks):
        gpus = []  # a CPU study never asks torch for devices (the driver need not import it)
    gpus = list(visible_gpus() if gpus is None else gpus)
    workers = opts.workers if opts.workers is not None else default_workers()
    if workers == "auto":
        workers = auto_workers(tasks, gpus, opts.runs_per_gpu)
    workers = max(1, min(workers, len(tasks) or 1))
    return assign_devices(gpus, workers, opts.runs_per_gpu)


def pool_context() -> Any:
    """The multiprocessing context of the worker pool: a forkserver that imports
    ``WORKER_IMPORTS`` once, where the platform has one (Linux, macOS), else spawn. A worker
    forked from it starts with them loaded; it imports nothing else from the driver (unlike
    fork), and its environment is the driver's of the moment (``_init_worker``)."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["ablate.execution.executors.preload"])
    return ctx


def execute(tasks: list[RunTask], *, opts: LocalOptions, progress: Progress) -> None:
    if not tasks:
        return
    slots = plan_workers(tasks, opts)
    if len(slots) == 1 and slots[0].memory_fraction is None:
        from ablate.execution.worker import execute_task

        for t in tasks:  # in this process: per-run bars, Ctrl-C straight to the run
            results = execute_task(
                *t.payload(),
                progress=getattr(progress, "run_bars", False),
                lease_grace_s=opts.lease_grace_s,
                workers=t.workers,
            )
            t.report(results, progress)
        return
    _run_pool(tasks, slots, opts, progress)


# --- worker processes --------------------------------------------------------------------------

_in_run = False
_stop_event = None  # set by the parent after a Ctrl-C: queued runs are not started
_orphaned = threading.Event()  # the driver died: start nothing, stop the run, exit


def _stop_handler(signum, frame):  # noqa: ARG001 - signal handler signature
    """SIGUSR1 from the parent after a Ctrl-C: stop the run in progress like a Ctrl-C (at the
    next step boundary while it trains)."""
    if _in_run:
        from ablate.training.trainer import request_stop

        request_stop()


def _init_worker(threads: int, stop_event, slots, driver, env: dict[str, str]) -> None:
    """A pool worker's set-up: ``driver``, the read end of a pipe only the driver holds open
    (its end at EOF: the driver is gone); ``env``, the driver's environment now (a forkserver's
    children inherit the server's, from before the plan)."""
    global _stop_event
    _stop_event = stop_event
    os.environ.clear()
    os.environ.update(env)
    # The terminal's Ctrl-C reaches the whole process group; workers ignore it and are stopped
    # by the parent (SIGUSR1) so each one is interrupted exactly once, while training only.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, _stop_handler)
    threading.Thread(target=_watch_driver, args=(driver,), daemon=True).start()
    slot: Slot = slots.get()  # each worker takes one slot, once, before CUDA starts
    if slot.cuda_visible_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = slot.cuda_visible_devices
    import torch

    torch.set_num_threads(threads)
    if slot.memory_fraction is not None and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(slot.memory_fraction, 0)


def _watch_driver(driver) -> None:
    """Wait until this worker's driver is gone (its end of the ``driver`` pipe closes: not the
    worker's parent, which is the forkserver), then stop like a Ctrl-C: SIGUSR1 to ourselves
    stops the run at its next step boundary (the handler runs on the main thread), and once it
    saved its checkpoint and released its lease, exit."""
    try:
        while not driver.poll(None):  # nothing is ever sent: it returns at EOF
            pass
    except (EOFError, OSError):
        pass
    _orphaned.set()
    if _in_run and hasattr(signal, "SIGUSR1"):
        os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + ORPHAN_STOP_S
    while _in_run and time.monotonic() < deadline:
        time.sleep(0.1)
    os._exit(1)


def _worker_run(
    cfgs, paths: list[str], metas: list[dict[str, Any]], progress: bool, grace: float, workers: int
) -> list[tuple[str, dict[str, Any]]]:
    global _in_run
    from ablate.execution.worker import execute_task, interrupted

    if _orphaned.is_set() or (_stop_event is not None and _stop_event.is_set()):
        return interrupted(paths)  # queued before the Ctrl-C
    _in_run = True
    try:
        return execute_task(
            cfgs, paths, metas, progress=progress, lease_grace_s=grace, workers=workers
        )
    except (KeyboardInterrupt, SystemExit):
        return interrupted(paths)
    finally:
        _in_run = False
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # train_run restores the default handler


def _run_pool(
    tasks: list[RunTask], slots: list[Slot], opts: LocalOptions, progress: Progress
) -> None:
    """Train ``tasks`` on a pool of ``len(slots)`` workers. A worker that dies (``kill -9``, out
    of memory) breaks the pool: the runs not yet reported go to a fresh pool and the dead
    worker's run takes its lease over and resumes. After ``opts.max_retries`` breaks in a row
    with no run finished in between (a run that kills its worker every time), stop with
    :class:`ExecutorFailed` (one line; the same command resumes)."""
    from concurrent.futures.process import BrokenProcessPool

    left = list(tasks)
    breaks = 0
    while True:
        before = len(left)
        try:
            _one_pool(left, slots, opts, progress)
            return
        except BrokenProcessPool:
            breaks = 1 if len(left) < before else breaks + 1  # progress resets the count
            if breaks > opts.max_retries:
                raise ExecutorFailed(
                    f"a worker process died {breaks} times in a row with no run finished "
                    "(killed or out of memory); stopping. Run the same command to resume "
                    "(--max-retries sets how often a fresh pool is tried)"
                ) from None
            progress.write(
                f"a worker process died (killed or out of memory): restarting {len(left)} "
                "unfinished run(s) in a fresh pool"
            )


def _one_pool(
    tasks: list[RunTask], slots: list[Slot], opts: LocalOptions, progress: Progress
) -> None:
    """One pool; ``tasks`` loses each task as it is reported (what is left is unfinished)."""
    stop = pool_context().Event()
    with worker_pool(slots[: len(tasks)], stop) as pool:
        _serve(pool, tasks, opts, progress, stop)


@contextmanager
def worker_pool(slots: list[Slot], stop: Any) -> Iterator[ProcessPoolExecutor]:
    """A pool of one worker per slot (``_init_worker``: each takes one slot, the driver's
    environment of now, ``cores // workers`` torch threads), forked from the warm forkserver;
    ``stop`` (an Event of :func:`pool_context`) set: queued runs do not start."""
    ctx = pool_context()
    slot_queue = ctx.Queue()
    for slot in slots:
        slot_queue.put(slot)
    driver, alive = ctx.Pipe(duplex=False)  # `alive` stays here: EOF in a worker = we are gone
    try:
        yield ProcessPoolExecutor(
            max_workers=len(slots),
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(worker_threads(len(slots)), stop, slot_queue, driver, dict(os.environ)),
        )
    finally:
        alive.close()
        driver.close()


def _serve(
    pool: ProcessPoolExecutor, tasks: list[RunTask], opts: LocalOptions, progress: Progress, stop
) -> None:
    """Submit ``tasks`` to ``pool`` and report each as it finishes; a Ctrl-C stops the pool."""
    from concurrent.futures.process import BrokenProcessPool

    futures: dict[Future, RunTask] = {}
    try:
        for t in tasks:
            f = pool.submit(_worker_run, *t.payload(), False, opts.lease_grace_s, t.workers)
            futures[f] = t
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            progress.poll()
            for f in finished:
                if isinstance(f.exception(), BrokenProcessPool):
                    raise f.exception()
                tasks.remove(futures[f])
                if futures[f].report(f.result(), progress):  # stopped from outside
                    raise KeyboardInterrupt
    except BrokenProcessPool:
        pool.shutdown(wait=True, cancel_futures=True)  # the others were stopped with it
        raise
    except BaseException:
        stop.set()
        progress.close()  # a clean screen before "stopping workers"
        _stop_pool(pool, futures)
        raise
    pool.shutdown(wait=True)


def _stop_pool(pool: ProcessPoolExecutor, futures: dict[Future, RunTask]) -> None:
    """Cancel queued runs, interrupt running ones (they checkpoint), wait for the workers."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not orphan them
    try:
        for f in futures:
            f.cancel()
        for pid in list(getattr(pool, "_processes", {}) or {}):
            try:
                os.kill(pid, getattr(signal, "SIGUSR1", signal.SIGTERM))
            except (ProcessLookupError, OSError):
                pass
        print("stopping workers (saving checkpoints) ...", flush=True)
        pool.shutdown(wait=True, cancel_futures=True)
    finally:
        signal.signal(signal.SIGINT, old)
