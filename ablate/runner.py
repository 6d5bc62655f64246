"""Execute a study: train every planned run that is not finished, safely, resumably, in parallel.

The run store is the only coordination between processes. For each run::

    status completed/diverged  -> skip
    try_lock() fails           -> skip: another process is training it (never wait on it)
    re-read status after lock  -> skip if another process finished it meanwhile
    else train_run()           -> fresh, resumed from the last checkpoint (status running)
                                  or retried (status failed); release the lock at the end

So two ``ablate run`` processes (or the ``--workers`` pool) on one study never train a run
twice, a killed process leaves its run resumable (a lock dies with its process), and a failed or
diverged run never stops the study. ``--workers N`` trains N runs at once in separate processes
(spawned), each with ``max(1, cores // N)`` torch threads unless ``train.threads`` is set.
Ctrl-C stops cleanly: the run in progress saves an ``interrupted`` checkpoint and stays
``running``, so the same command resumes it.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ablate.config import RunConfig
from ablate.store import FINISHED, RunDir, RunStore
from ablate.study import PlannedRun, Study, load_study

# outcomes of one attempt at a run
TRAINED = "trained"
SKIPPED = "skipped"  # already finished
LOCKED = "locked"  # another process holds the run
INTERRUPTED = "interrupted"


def _console() -> Console:
    # a log file or a pipe gets wide tables rather than rich's 80 columns
    return Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS / Windows
        return os.cpu_count() or 1


# --- one run -----------------------------------------------------------------------------------


def execute_run(
    cfg: RunConfig, run_dir: RunDir, meta: dict[str, Any], *, progress: bool = False
) -> tuple[str, dict[str, Any]]:
    """Train one run under the lock protocol; returns ``(outcome, summary)``.

    Re-raises KeyboardInterrupt/SystemExit (after train_run saved a checkpoint and the lock is
    released) so the caller can stop the study.
    """
    summary = run_dir.read_summary() or {}
    if summary.get("status") in FINISHED:
        return SKIPPED, summary
    lock = run_dir.try_lock()
    if lock is None:
        return LOCKED, summary
    try:
        summary = run_dir.read_summary() or {}  # another process may have finished it meanwhile
        if summary.get("status") in FINISHED:
            return SKIPPED, summary
        from ablate.train import train_run

        return TRAINED, train_run(cfg, run_dir, meta, progress=progress and cfg.train.progress)
    finally:
        lock.release()


# --- worker processes --------------------------------------------------------------------------

_in_run = False
_stop_event = None  # set by the parent after a Ctrl-C: queued runs are not started


def _stop_handler(signum, frame):  # noqa: ARG001 - signal handler signature
    """SIGUSR1 from the parent after a Ctrl-C: stop the run in progress like a Ctrl-C (at the
    next step boundary while it trains)."""
    if _in_run:
        from ablate.train import request_stop

        request_stop()


def _init_worker(threads: int, stop_event) -> None:
    global _stop_event
    _stop_event = stop_event
    # The terminal's Ctrl-C reaches the whole process group; workers ignore it and are stopped
    # by the parent (SIGUSR1) so each one is interrupted exactly once, while training only.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, _stop_handler)
    import torch

    torch.set_num_threads(threads)


def _worker_run(
    cfg: RunConfig, path: str, meta: dict[str, Any], progress: bool
) -> tuple[str, dict[str, Any]]:
    global _in_run
    run_dir = RunDir(Path(path))
    if _stop_event is not None and _stop_event.is_set():
        return INTERRUPTED, run_dir.read_summary() or {}  # queued before the Ctrl-C
    _in_run = True
    try:
        return execute_run(cfg, run_dir, meta, progress=progress)
    except (KeyboardInterrupt, SystemExit):
        return INTERRUPTED, run_dir.read_summary() or {}
    finally:
        _in_run = False
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # train_run restores the default handler


# --- the study ---------------------------------------------------------------------------------


class StudyProgress:
    """The study-level bar (runs done / total, ETA) and one line per finished run."""

    def __init__(self, study: Study, done: int, *, enabled: bool, below: bool):
        self.total = len(study.runs)
        self.done = done
        self.bar = None
        if enabled and sys.stdout.isatty():  # in a log file, the per-run lines say it all
            from tqdm.auto import tqdm

            # ``below``: Lightning's per-run bars use lines 0-1 (train, validation) of the
            # terminal, so the study bar sits under them on line 2
            self.bar = tqdm(
                total=self.total,
                initial=done,
                desc=study.name,
                unit="run",
                position=2 if below else 0,
                leave=False,  # closed before the summary table, which says it all
                dynamic_ncols=True,
                file=sys.stdout,
                smoothing=0,
            )

    def write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def finished(self, run: PlannedRun, outcome: str, summary: dict[str, Any]) -> None:
        if outcome in (TRAINED, SKIPPED):
            self.done += 1
            if self.bar is not None:
                self.bar.update(1)
        self.write(f"[{self.done}/{self.total}] {run.name}: {_describe(outcome, summary)}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
            sys.stdout.write("\r\x1b[2K")  # a closed bar leaves the cursor mid-line
            sys.stdout.flush()


def _describe(outcome: str, s: dict[str, Any]) -> str:
    if outcome == LOCKED:
        return "skipped, another process is training it"
    if outcome == INTERRUPTED:
        return "interrupted (resumable)"
    status = s.get("status", "?")
    parts = [status if outcome == TRAINED else f"already {status}"]
    if s.get("final_val_loss") is not None:
        parts.append(f"val loss {s['final_val_loss']:.4f}")
    if s.get("diverged_step") is not None:
        parts.append(f"diverged at step {s['diverged_step']}")
    if s.get("steps") is not None:
        parts.append(f"{s['steps']} steps")
    if outcome == TRAINED and s.get("wall_time_s") is not None:
        parts.append(_duration(s["wall_time_s"]))
    if s.get("error"):
        parts.append(f"error: {s['error']}")
    return ", ".join(parts)


def resume_command(
    study_path: str | Path,
    profile: str | None,
    overrides: Sequence[str],
    store: str | Path,
    workers: int,
) -> str:
    args = ["ablate", "run", str(study_path)]
    if profile:
        args += ["--profile", profile]
    for o in overrides:
        args += ["--set", o]
    if Path(store) != Path("runs"):
        args += ["--store", str(store)]
    if workers > 1:
        args += ["--workers", str(workers)]
    return shlex.join(args)


def run_study(
    study_path: str | Path,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    store: str | Path = "runs",
    workers: int = 1,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Train every unfinished run of a study; returns the summaries of all its runs.

    The study is fully validated first (``ConfigError``; nothing is written). Ctrl-C stops the
    study, prints how to resume and re-raises ``KeyboardInterrupt``.
    """
    study = load_study(study_path, profile, overrides)
    from ablate.smoke import check_compile

    check_compile(study)  # train.compile without a C++ compiler: one line now, not per run
    runs_store = RunStore(store)
    console = _console()
    dirs = {r.run_id: runs_store.run(study.name, r.run_id) for r in study.runs}
    done = sum(1 for r in study.runs if dirs[r.run_id].status in FINISHED)
    todo = [r for r in study.runs if dirs[r.run_id].status not in FINISHED]
    workers = max(1, min(workers, len(todo) or 1))
    profile_txt = f" (profile {study.profile})" if study.profile else ""
    console.print(
        f"[bold]{study.name}[/]{profile_txt}: {len(study.runs)} runs, {done} finished, "
        f"{len(todo)} to train -> {escape(str(runs_store.root / study.name))}"
        + (f", {workers} workers" if workers > 1 else "")
    )
    # bars only on a terminal: in a log file they are thousands of carriage-return lines
    progress = progress and sys.stdout.isatty()
    bar = StudyProgress(study, done, enabled=progress, below=progress and workers == 1)
    t0 = time.time()
    try:
        if workers == 1:
            for run in todo:
                outcome, summary = execute_run(
                    run.config, dirs[run.run_id], study.meta(run), progress=progress
                )
                bar.finished(run, outcome, summary)
        else:
            _run_pool(study, todo, dirs, workers, bar)
    except (KeyboardInterrupt, SystemExit):
        bar.close()
        results = _collect(study, dirs)
        print_summary(study, results, console, elapsed=time.time() - t0)
        finished = sum(r["status"] in FINISHED for r in results)
        console.print(
            f"[yellow]Interrupted[/]: {finished} of {len(results)} runs finished; an interrupted "
            "run resumes from its last checkpoint. Resume with:\n  "
            + escape(resume_command(study_path, study.profile, overrides, store, workers)),
            soft_wrap=True,
        )
        raise KeyboardInterrupt from None
    bar.close()
    results = _collect(study, dirs)
    print_summary(study, results, console, elapsed=time.time() - t0)
    return results


def _run_pool(
    study: Study,
    todo: list[PlannedRun],
    dirs: dict[str, RunDir],
    workers: int,
    bar: StudyProgress,
) -> None:
    import multiprocessing as mp

    threads = max(1, cpu_count() // workers)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(threads, stop),
    )
    futures: dict[Future, PlannedRun] = {}
    try:
        for run in todo:
            f = pool.submit(
                _worker_run, run.config, str(dirs[run.run_id].path), study.meta(run), False
            )
            futures[f] = run
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                outcome, summary = f.result()
                bar.finished(futures[f], outcome, summary)
                if outcome == INTERRUPTED:  # a worker was stopped from outside
                    raise KeyboardInterrupt
    except BaseException:
        stop.set()
        _stop_pool(pool, futures)
        raise
    pool.shutdown(wait=True)


def _stop_pool(pool: ProcessPoolExecutor, futures: dict[Future, PlannedRun]) -> None:
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


def _collect(study: Study, dirs: dict[str, RunDir]) -> list[dict[str, Any]]:
    """The current summary of every planned run, in plan order."""
    out = []
    for run in study.runs:
        d = dirs[run.run_id]
        s = d.read_summary() or {}
        status = s.get("status") or "pending"
        if status == "running" and d.path.is_dir() and not d.is_locked():
            status = "interrupted"
        out.append(
            {**s, "name": run.name, "run_id": run.run_id, "variant": run.variant, "status": status}
        )
    return out


# --- tables ------------------------------------------------------------------------------------

_STYLE = {
    "completed": "green",
    "diverged": "magenta",
    "failed": "red",
    "running": "cyan",
    "interrupted": "yellow",
    "pending": "dim",
    "new": "dim",
}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _num(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.{digits}f}"


def _status_cell(status: str) -> str:
    return f"[{_STYLE.get(status, 'white')}]{status}[/]"


def print_summary(
    study: Study, results: list[dict[str, Any]], console: Console, *, elapsed: float
) -> None:
    table = Table(title=f"{study.name}: {len(results)} runs", title_justify="left")
    for col, kw in (
        ("name", {}),
        ("status", {}),
        ("best val loss", {"justify": "right"}),
        ("final val loss", {"justify": "right"}),
        ("steps", {"justify": "right"}),
        ("wall time", {"justify": "right"}),
        ("note", {"overflow": "fold"}),
    ):
        table.add_column(col, **kw)
    for r in results:
        note = ""
        if r.get("diverged_step") is not None:
            note = f"diverged at step {r['diverged_step']}"
        elif r.get("error"):
            note = str(r["error"])[:120]
        elif r["status"] == "running":
            note = "another process is training it"
        table.add_row(
            escape(r["name"]),
            _status_cell(r["status"]),
            _num(r.get("best_val_loss")),
            _num(r.get("final_val_loss")),
            str(r.get("steps", "")) if r.get("steps") is not None else "-",
            _duration(r.get("wall_time_s")) or "-",
            escape(note),
        )
    console.print(table)
    counts = Counter(r["status"] for r in results)
    console.print(
        ", ".join(f"{n} {s}" for s, n in counts.most_common())
        + f"  (this session: {_duration(elapsed)})"
    )


def plan_study(
    study_path: str | Path,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    store: str | Path = "runs",
) -> Study:
    """Print the expanded runs of a study without training (or writing) anything."""
    study = load_study(study_path, profile, overrides)
    runs_store = RunStore(store)
    console = _console()
    header = f"[bold]{study.name}[/]"
    if study.profile:
        header += f" (profile {study.profile}; profiles: {', '.join(study.profiles)})"
    console.print(header)
    if study.description:
        console.print(escape(study.description.splitlines()[0]), soft_wrap=True)
    table = Table(
        title_justify="left", title=escape(f"{len(study.runs)} runs -> {runs_store.root}")
    )
    table.add_column("#", justify="right")
    for col in ("name", "run id", "status"):
        table.add_column(col)
    for col in ("params (non-emb)", "steps", "batch x seq", "lr"):
        table.add_column(col, justify="right")
    counts = _non_embedding_params(study)
    for i, run in enumerate(study.runs, 1):
        c = run.config
        table.add_row(
            str(i),
            escape(run.name),
            run.run_id,
            _status_cell(_store_status(runs_store.run(study.name, run.run_id))),
            f"{counts[run.run_id]:,}" if counts.get(run.run_id) is not None else "?",
            str(c.train.max_steps),
            f"{c.data.batch_size} x {c.data.seq_len}",
            f"{c.lr:.3g}",
        )
    console.print(table)
    return study


def _store_status(d: RunDir) -> str:
    """The status of a run in the store, without creating anything."""
    if not d.path.is_dir():
        return "new"
    s = d.read_summary() or {}
    status = s.get("status") or "new"
    if status == "running" and not d.is_locked():
        return "interrupted"
    return status


def _non_embedding_params(study: Study) -> dict[str, int | None]:
    """Non-embedding parameter counts, built on the meta device (no memory, no data)."""
    try:
        import torch

        from ablate.model import build_model
    except Exception:  # noqa: BLE001 - the plan is still useful without counts
        return {}
    by_model: dict[str, int | None] = {}
    out: dict[str, int | None] = {}
    for run in study.runs:
        key = run.config.model.model_dump_json()
        if key not in by_model:
            try:
                with torch.device("meta"):
                    model = build_model(run.config.model, 256)
                by_model[key] = model.param_counts()["non_embedding"]
            except Exception:  # noqa: BLE001
                by_model[key] = None
        out[run.run_id] = by_model[key]
    return out


def store_status(store: str | Path = "runs", study: str | None = None) -> dict[str, Counter]:
    """Print each study in the store with per-status counts and one line per run."""
    runs_store = RunStore(store)
    console = _console()
    names = runs_store.studies()
    if study is not None:
        names = [n for n in names if n == study]
    if not names:
        where = f"no runs in {runs_store.root}" + (f" for study {study!r}" if study else "")
        console.print(escape(where))
        return {}
    totals: dict[str, Counter] = {}
    for name in names:
        table = Table(title=f"{name}", title_justify="left")
        for col in ("name", "run id", "profile", "status"):
            table.add_column(col)
        for col in ("steps", "final val loss", "wall time"):
            table.add_column(col, justify="right")
        counts: Counter = Counter()
        runs = sorted(
            ((d.read_run()["meta"], d) for d in runs_store.runs(name)),
            key=lambda md: (str(md[0].get("profile")), str(md[0].get("name", md[1].run_id))),
        )
        for meta, d in runs:
            s = d.read_summary() or {}
            status = _store_status(d)
            counts[status] += 1
            table.add_row(
                escape(str(meta.get("name", d.run_id))),
                d.run_id,
                str(meta.get("profile") or "-"),
                _status_cell(status),
                str(s.get("steps", "-")),
                _num(s.get("final_val_loss")),
                _duration(s.get("wall_time_s")) or "-",
            )
        console.print(table)
        console.print(", ".join(f"{n} {s}" for s, n in counts.most_common()))
        totals[name] = counts
    return totals
