"""Live progress through the run store, whatever the executor.

The training process writes ``<run dir>/progress.json`` (step, total steps, last train loss,
timestamps) at the log interval (``ablate.training.callbacks.ProgressFile``, writing through
``ablate.store.rundir.write_progress``). The driver
(``ablate run``, ``ablate train``) polls the progress files of the runs in flight and shows one
live line per run under the study line (:class:`LiveProgress`). Local worker processes, Ray
actors and SLURM jobs all write into the store, so the driver needs nothing from the executor
but a call to :meth:`LiveProgress.poll` in its wait loop (at least once a second).

The study's ETA comes from the steps still to train and the rate at which steps were trained
in this session (all runs together), not from runs done: runs take minutes each, so a
runs-based ETA says nothing until the first one finishes. A resumed run's line starts at its
resumed step with its known total, and its rate counts only the steps trained since.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.store.rundir import PROGRESS_FILE, read_progress

# --- the driver side -------------------------------------------------------------------------


NAME_WIDTH = 44  # a run name longer than this is cut (…) so the bar and numbers still fit


def clip(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def fmt_duration(seconds: float | None, missing: str = "?") -> str:
    """``42s``, ``3m07s``, ``2h05m``; ``missing`` for an unknown (None, NaN, inf) duration."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return missing
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    m, s = divmod(seconds, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


@dataclass
class RunLine:
    """What one run's live line shows, from its latest progress record."""

    name: str
    step: int
    total: int | None
    loss: float | None
    phase: str
    start_step: int
    started: float
    updated: float

    @classmethod
    def from_record(cls, name: str, rec: dict[str, Any]) -> RunLine:
        step = int(rec["step"])
        return cls(
            name=name,
            step=step,
            total=rec.get("total"),
            loss=rec.get("loss"),
            phase=str(rec.get("phase") or "train"),
            start_step=int(rec.get("start_step", step)),
            started=float(rec.get("started") or rec.get("updated") or time.time()),
            updated=float(rec.get("updated") or time.time()),
        )

    @property
    def trained(self) -> int:
        """Steps trained in this attempt (a resumed run's earlier steps are not counted)."""
        return max(0, self.step - self.start_step)

    def rate(self) -> float | None:
        """Steps per second of this attempt."""
        dt = self.updated - self.started
        return self.trained / dt if self.trained and dt > 0 else None

    def eta(self, now: float | None = None) -> float | None:
        if self.total is None:
            return None
        if self.step >= self.total:
            return 0.0
        rate = self.rate()
        if rate is None:
            return None
        since = max(0.0, (now or time.time()) - self.updated)
        return max(0.0, (self.total - self.step) / rate - since)

    def info(self, now: float | None = None) -> str:
        parts = []
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        if self.phase != "train":
            parts.append(self.phase)
        elif self.total is not None:
            parts.append(f"ETA {fmt_duration(self.eta(now))}")
        return "  ".join(parts)


def study_eta(total_steps: int, done_steps: int, trained: int, elapsed: float) -> float | None:
    """Seconds left: steps still to train over this session's rate (steps trained / elapsed)."""
    if done_steps >= total_steps:
        return 0.0
    if trained <= 0 or elapsed <= 0:
        return None
    return (total_steps - done_steps) / (trained / elapsed)


@contextmanager
def _sigint_deferred(reraise: bool = True) -> Iterator[None]:
    """Hold a Ctrl-C until the block is done drawing, then deliver it (``reraise``) or drop it.

    rich redraws from the calling thread on ``add_task`` and ``print``; a KeyboardInterrupt in
    the middle of a redraw leaves rich's idea of the screen out of step with the screen, and the
    bars it then clears are not the ones drawn (a stale line above the summary table)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and reraise:
            if callable(previous):
                previous(signal.SIGINT, received[0])
            elif previous == signal.SIG_DFL:
                raise KeyboardInterrupt


@dataclass
class _Tracked:
    name: str
    path: Path  # the run directory
    total: int  # planned steps
    line: RunLine | None = None
    task: Any = None  # the rich task id while the run has a live line
    mtime: float = 0.0
    done: bool = False


class LiveProgress:
    """The study line (runs done, steps done / total, study ETA) and one live line per run in
    flight, read from the runs' ``progress.json``; one printed line per finished run.

    Drop-in for the runner: ``finished(run, outcome, summary)``, ``write(line)``, ``close()``,
    plus ``poll()`` for the executor's wait loop. ``background=True`` polls from a thread (the
    serial path, where the driver itself trains). Disabled (not a terminal, ``--no-progress``):
    only the printed lines.
    """

    def __init__(
        self,
        title: str,
        runs: Mapping[str, tuple[str, Path, int]],
        *,
        finished_steps: int = 0,
        finished_runs: int = 0,
        enabled: bool = True,
        background: bool = False,
        describe=None,
        console=None,
    ) -> None:
        """``runs``: run id -> (name, run directory, planned steps) of the runs to train, beside
        ``finished_runs`` runs of ``finished_steps`` planned steps already finished;
        ``console``: a rich Console to draw on (default: stdout, when it is a terminal)."""
        self.title = title
        self.t0 = time.time()
        self.tracked = {rid: _Tracked(n, Path(p), int(t)) for rid, (n, p, t) in runs.items()}
        self.total_runs = finished_runs + len(runs)
        self.done = finished_runs
        self.done_steps = finished_steps  # planned steps of finished runs
        self.total_steps = finished_steps + sum(t.total for t in self.tracked.values())
        self.trained_done = 0  # steps trained this session by runs no longer live
        # when the first run of this session started training: the rate leaves out the
        # start-up before it (spawning workers, loading data), which a study pays once
        self.first_started: float | None = None
        self.describe = describe or (lambda outcome, summary: outcome)
        self._lock = threading.RLock()
        self._progress = None
        self._study_task = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        if enabled and (console is not None or sys.stdout.isatty()):
            with _sigint_deferred():
                self._start(background, console)

    @classmethod
    def for_study(
        cls, study, dirs: Mapping[str, Any], *, enabled: bool, background: bool, describe=None
    ) -> LiveProgress:
        """The display of ``study`` (a ``Study``) whose run directories are ``dirs`` (run id ->
        ``RunDir``): finished runs count as done, every other one is watched."""
        from ablate.store import FINISHED

        todo, done_runs, done_steps = {}, 0, 0
        for run in study.runs:
            steps = int(run.config.train.max_steps)
            if dirs[run.run_id].status in FINISHED:
                done_runs, done_steps = done_runs + 1, done_steps + steps
            else:
                todo[run.run_id] = (run.name, dirs[run.run_id].path, steps)
        return cls(
            study.name,
            todo,
            finished_steps=done_steps,
            finished_runs=done_runs,
            enabled=enabled,
            background=background,
            describe=describe,
        )

    # --- display --------------------------------------------------------------------------
    def _start(self, background: bool, console=None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        console = console or Console(file=sys.stdout, highlight=False)
        self._progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[count]}", markup=False),
            TextColumn("{task.fields[info]}", markup=False),
            console=console,
            transient=True,  # closed bars leave the screen: the printed lines say it all
            refresh_per_second=2,
        )
        self._study_task = self._progress.add_task(
            clip(self.title), total=max(1, self.total_steps), count="", info=""
        )
        self._progress.start()
        self._update_study()
        if background:
            self._thread = threading.Thread(target=self._poll_loop, daemon=True)
            self._thread.start()

    def _poll_loop(self) -> None:
        while not self._stop.wait(0.5):
            self.poll()

    def study_line(self, now: float | None = None) -> tuple[int, str, str]:
        """(steps done, count text, info text) of the study line."""
        now = now or time.time()
        live = [t.line for t in self.tracked.values() if t.line is not None and not t.done]
        done = self.done_steps + sum(min(ln.step, t) for ln, t in self._live_totals(live))
        trained = self.trained_done + sum(ln.trained for ln in live)
        eta = study_eta(self.total_steps, done, trained, now - (self.first_started or self.t0))
        count = f"{self.done}/{self.total_runs} runs"
        info = f"{done:,}/{self.total_steps:,} steps  ETA {fmt_duration(eta)}"
        return done, count, info

    def _live_totals(self, live: list[RunLine]):
        return [(ln, ln.total if ln.total is not None else ln.step) for ln in live]

    def _update_study(self) -> None:
        if self._progress is None:
            return
        done, count, info = self.study_line()
        self._progress.update(self._study_task, completed=done, count=count, info=info)

    # --- polling --------------------------------------------------------------------------
    def poll(self) -> None:
        """Read the progress files of the runs not yet finished and refresh their lines."""
        with _sigint_deferred(), self._lock:
            for t in self.tracked.values():
                if not t.done:
                    self._poll_one(t)
            self._update_study()

    def _poll_one(self, t: _Tracked) -> None:
        path = t.path / PROGRESS_FILE
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return
        if mtime == t.mtime or mtime < self.t0 - 1:  # unchanged, or left by an earlier session
            return
        rec = read_progress(path)
        if rec is None:
            return
        t.mtime = mtime
        t.line = RunLine.from_record(t.name, rec)
        if self.first_started is None or t.line.started < self.first_started:
            self.first_started = t.line.started
        if self._progress is None:
            return
        total = t.line.total or t.total
        fields = {"count": f"{t.line.step}/{total}", "info": t.line.info()}
        if t.task is None:
            t.task = self._progress.add_task(
                f"  {clip(t.name)}", total=total, completed=t.line.step, **fields
            )
        else:
            self._progress.update(t.task, total=total, completed=t.line.step, **fields)

    # --- the runner's interface ------------------------------------------------------------
    def finished(self, run, outcome: str, summary: dict[str, Any]) -> None:
        """A run ended (trained, skipped, locked by another process, interrupted)."""
        with _sigint_deferred(), self._lock:
            t = self.tracked.get(run.run_id)
            if t is not None and not t.done:
                self._poll_one(t)  # its last record: the steps it trained count for the rate
                t.done = True
                if t.line is not None:
                    self.trained_done += t.line.trained
                if t.task is not None and self._progress is not None:
                    self._progress.remove_task(t.task)
                    t.task = None
                if outcome in ("trained", "skipped"):
                    self.done_steps += t.total
            if outcome in ("trained", "skipped"):
                self.done += 1
            self._update_study()
        self.write(f"[{self.done}/{self.total_runs}] {run.name}: {self.describe(outcome, summary)}")

    def write(self, line: str) -> None:
        if self._progress is not None:
            with _sigint_deferred():
                self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, flush=True)

    def close(self) -> None:
        """Stop the display and clear it, before anything else is printed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        # a second Ctrl-C while the bars are cleared is dropped: the caller is already stopping
        with _sigint_deferred(reraise=False), self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
        sys.stdout.flush()

    def __enter__(self) -> LiveProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
