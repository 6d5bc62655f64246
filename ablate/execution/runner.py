"""Execute a study: train every planned run that is not finished, safely, resumably, anywhere.

The run store is the only coordination between processes. For each run::

    status completed/diverged  -> skip
    try_lock() fails           -> skip: another live process holds the run's lease (never wait)
    re-read status after lease -> skip if another process finished it meanwhile
    else train_run()           -> fresh, resumed from the last checkpoint (status running)
                                  or retried (status failed); release the lease at the end

So two ``ablate run`` processes (or workers, Ray tasks, SLURM jobs) on one study never train a
run twice, and a killed process leaves its run resumable: its lease stops being renewed and is
taken over (at once on the same host, after the grace period elsewhere; store/lease.py). The
protocol for a task is ``worker.execute_group``; *where* runs train is the executor's business
(executors/: local, ray, slurm); this module plans, skips finished runs, hands the rest to the
executor and prints the summary table (tables.py), in three steps: ``plan_runs`` (the study
file -> a :class:`~ablate.study.Study`), ``execute_study`` (the unfinished runs -> the
executor), ``summarize`` (the store -> the summary table). ``run confirm`` and
``run until-decided`` plan their own runs and hand the study they chose to ``train_planned``.
Ctrl-C stops cleanly: the run in progress saves an ``interrupted`` checkpoint and stays
``running``, so the same command resumes it.
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ablate.claims.registration import registration_path
from ablate.execution.executors import ExecutorFailed, ExecutorOptions, RunTask, execute
from ablate.execution.executors.local import LocalOptions
from ablate.execution.groups import group_tasks
from ablate.execution.progress import LiveProgress, fmt_duration
from ablate.execution.tables import make_console, print_summary, profile_text
from ablate.execution.worker import INTERRUPTED, LOCKED, TRAINED
from ablate.store import (
    DAMAGED,
    FINISHED,
    RunDir,
    RunStore,
    run_damage,
    run_state,
)
from ablate.store.attempt import LAUNCHED
from ablate.store.provenance import process_started, study_git
from ablate.study import PlannedRun, Study, load_study


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
        parts.append(fmt_duration(s["wall_time_s"]))
    if s.get("error"):
        parts.append(f"error: {s['error']}")
    return ", ".join(parts)


def invoked_as(argv: Sequence[str] | None = None, orig: Sequence[str] | None = None) -> list[str]:
    """How the user started ablate, for a command printed back to them: the script as typed
    (``.venv/bin/ablate``; ``ablate`` when that is what ``PATH`` finds), ``<python> -m ablate``,
    else ``ablate`` (called from Python, e.g. a test). ``argv``/``orig``: ``sys.argv`` and
    ``sys.orig_argv`` (the interpreter's own command line)."""
    argv = sys.argv if argv is None else argv
    orig = sys.orig_argv if orig is None else orig
    if list(orig[1:3]) == ["-m", "ablate"]:
        return [orig[0], "-m", "ablate"]
    script = Path(argv[0]) if argv else None
    if script is None or script.name != "ablate":
        return ["ablate"]
    on_path = shutil.which("ablate")
    if on_path and script.is_file() and Path(on_path).resolve() == script.resolve():
        return ["ablate"]
    return [str(script)]


@dataclass(frozen=True)
class StudyArgs:
    """What a study's runs are planned from: the file and how ``ablate run`` resolves it."""

    path: Path
    profile: str | None = None
    """``--profile`` (None: the study's default)."""
    overrides: tuple[str, ...] = ()
    """``--set key=value``, in order."""
    plugins: tuple[str, ...] = ()
    """``--plugin`` modules or paths, imported before the study validates."""


@dataclass(frozen=True)
class Execution:
    """How a planned study trains: its store, the executor, and what the user sees."""

    store: Path = Path("runs")
    executor: ExecutorOptions = field(default_factory=LocalOptions)
    progress: bool = True
    rerun_stale: bool = False
    """Runs made by other model/training code are moved aside and trained again."""
    confirmation: str | None = None
    """None: the study's runs as they are; else every run is a confirmation run under this
    registration (its commit, or ``unregistered``): ``confirm: true`` and the registration in
    its meta and summary."""
    mode: tuple[str, ...] = ()
    """The ``ablate run`` mode and its options (``("confirm", "--unregistered")``), for the
    command that resumes the study after a stop."""


def run_options(
    study_path: str | Path,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    store: str | Path = "runs",
    progress: bool = True,
    executor: ExecutorOptions | None = None,
    plugins: Sequence[str] = (),
    rerun_stale: bool = False,
) -> tuple[StudyArgs, Execution]:
    """The keyword arguments of :func:`run_study` (and of ``run_confirm``,
    ``run_until_decided``) as what to plan and how it trains."""
    args = StudyArgs(Path(study_path), profile, tuple(overrides), tuple(plugins))
    how = Execution(Path(store), executor or LocalOptions(), progress, rerun_stale)
    return args, how


def resume_command(args: StudyArgs, how: Execution) -> str:
    """The command that resumes the study where it stopped (the same mode, study, profile,
    overrides, store, executor options and plugins)."""
    mode, mode_options = how.mode[:1], how.mode[1:]
    out = [*invoked_as(), "run", *mode, str(args.path)]
    if args.profile:
        out += ["--profile", args.profile]
    for o in args.overrides:
        out += ["--set", o]
    if how.store != Path("runs"):
        out += ["--store", str(how.store)]
    out += how.executor.cli_args()
    out += [a for p in args.plugins for a in ("--plugin", p)]
    return shlex.join([*out, *mode_options])


def run_study(study_path: str | Path, **options: Any) -> list[dict[str, Any]]:
    """Train every unfinished run of a study; returns the summaries of all its runs:
    :func:`plan_runs`, then :func:`train_planned` (:func:`execute_study`, :func:`summarize`).

    ``options`` are :func:`run_options`' (profile, overrides, store, progress, executor,
    plugins, rerun_stale). The study and the executor options are fully validated first
    (``ConfigError``; nothing is written). Ctrl-C stops the study, prints how to resume and
    re-raises ``KeyboardInterrupt``.
    """
    args, how = run_options(study_path, **options)
    return train_planned(plan_runs(args), args, how)


def plan_runs(args: StudyArgs, extra_seeds: dict[str, Sequence[int]] | None = None) -> Study:
    """The study's planned runs, with ``extra_seeds`` (variant label -> seeds beyond the
    study's own, ``run until-decided``)."""
    return load_study(
        args.path, args.profile, args.overrides, plugins=args.plugins, extra_seeds=extra_seeds
    )


def only_seeds(study: Study, seeds: dict[str, Sequence[int]]) -> Study:
    """The study with only the runs of ``seeds`` (variant label -> seeds): what a
    confirmation trains."""
    runs = [r for r in study.runs if r.seed in seeds.get(r.variant, ())]
    return dataclasses.replace(study, runs=runs)


def train_planned(study: Study, args: StudyArgs, how: Execution) -> list[dict[str, Any]]:
    """Train a planned study (every run not finished), then summarize it; ``args`` say how it
    was planned (for the resume hint). What ``run_study``, ``run confirm`` and
    ``run until-decided`` (with their own seeds) all end in."""
    how.executor.check()
    console = make_console()
    runs_store = RunStore(how.store)
    dirs = _prepare_store(study, runs_store, console, rerun_stale=how.rerun_stale)
    runs_store.keep_spec(study.name, study.path)  # the report reads claims from it anywhere
    # `ablate status` lists the planned runs that have not started beside the others
    runs_store.keep_plan(
        study.name,
        [{"run_id": r.run_id, "name": r.name, "profile": study.profile} for r in study.runs],
    )
    t0 = time.time()
    try:
        execute_study(study, dirs, how, console)
    except (KeyboardInterrupt, SystemExit, ExecutorFailed) as err:
        results = summarize(study, dirs, console, time.time() - t0)
        _print_resume(console, results, resume_command(args, how))
        if isinstance(err, ExecutorFailed):
            raise
        raise KeyboardInterrupt from None
    return summarize(study, dirs, console, time.time() - t0)


def execute_study(study: Study, dirs: dict[str, RunDir], how: Execution, console: Console) -> None:
    """Hand the unfinished runs (``dirs``: every planned run's directory) to the executor,
    grouped into stacks, after a header line; live progress lines while they train."""
    done = sum(1 for r in study.runs if dirs[r.run_id].status in FINISHED)
    todo = [r for r in study.runs if dirs[r.run_id].status not in FINISHED]
    resuming = sum(1 for r in todo if dirs[r.run_id].last_checkpoint() is not None)
    # train.stack: a stacked group is one task
    tasks = group_tasks(_tasks(study, todo, dirs, how.confirmation))
    workers = how.executor.runs_at_once(tasks)  # recorded in each run's summary (environment)
    tasks = [dataclasses.replace(t, workers=workers) for t in tasks]
    stacked = sum(len(t.members) for t in tasks if t.members)
    where = how.executor.where(tasks)
    console.print(
        f"[bold]{study.name}[/]{profile_text(study)}: "
        f"{len(study.runs)} runs, {done} finished, {len(todo)} to train"
        + (f" ({resuming} resume from a checkpoint)" if resuming else "")
        + f" -> {escape(str(Path(how.store) / study.name))}"
        + (f", {where}" if where else "")
        + (f", {stacked} as {sum(1 for t in tasks if t.members)} stacked groups" if stacked else "")
    )
    # live lines only on a terminal: in a log file the per-run lines say it all. Every run's
    # line comes from its progress.json (ablate.execution.progress), whatever the executor, so
    # Lightning's own bar stays off; the serial path polls from a thread while this process trains.
    serial = how.executor.executor == "local" and not where
    bar = LiveProgress.for_study(
        study, dirs, enabled=how.progress, background=serial, describe=_describe
    )
    try:
        execute(tasks, opts=how.executor, progress=bar)
    finally:
        bar.close()


def summarize(
    study: Study, dirs: dict[str, RunDir], console: Console, elapsed: float
) -> list[dict[str, Any]]:
    """Every planned run's summary now (in plan order, its state from the store), printed as
    the study's table."""
    results = _collect(study, dirs)
    print_summary(study, results, console, elapsed=elapsed)
    return results


def _tasks(
    study: Study, todo: list[PlannedRun], dirs: dict[str, RunDir], confirmation: str | None
) -> list[RunTask]:
    """One task per run to train, with its meta, the git state of the study's repository
    (where its registration is committed: git proves the order there) and when this process
    was launched (each attempt records it: time to a loss from the command, start-up included)."""
    repo = study_git(
        [Path(study.path), registration_path(study.path, study.profile), *map(Path, study.plugins)]
    )
    launched = process_started()
    repo |= {LAUNCHED: launched} if launched is not None else {}
    return [
        RunTask(r, r.config, str(dirs[r.run_id].path), _meta(study, r, dirs, confirmation) | repo)
        for r in todo
    ]


def _print_resume(console: Console, results: list[dict[str, Any]], resume: str) -> None:
    finished = sum(r["status"] in FINISHED for r in results)
    console.print(
        f"[yellow]Interrupted[/]: {finished} of {len(results)} runs finished; an interrupted "
        f"run resumes from its last checkpoint. Resume with:\n  {escape(resume)}",
        soft_wrap=True,
    )


def _meta(study: Study, run: PlannedRun, dirs: dict[str, RunDir], confirmation: str | None) -> dict:
    """The run's meta; ``confirm: true`` for a confirmation run (asked for now:
    ``confirmation``, the registration it runs under; or recorded so in its ``run.yaml`` by an
    earlier confirmation and resumed by another command) with its registration (the one
    recorded first wins: a run keeps its attempt)."""
    meta = study.meta(run)
    before = dirs[run.run_id].read_run()["meta"]
    if confirmation is not None or before.get("confirm") is True:
        meta["confirm"] = True
        tag = before.get("registration") or confirmation
        if tag:
            meta["registration"] = tag
    return meta


def _prepare_store(
    study: Study, runs_store: RunStore, console: Console, *, rerun_stale: bool
) -> dict[str, RunDir]:
    """Each planned run's directory, after the checks that must pass before any run starts:
    ``train.compile`` can work here, the registered datasets are fetched; with ``rerun_stale``
    runs made by other model/training code are moved aside to be trained again."""
    from ablate.study.preflight import check_compile

    check_compile([r.config for r in study.runs], study.path)
    dirs = {r.run_id: runs_store.run(study.name, r.run_id) for r in study.runs}
    from ablate.data import fetch_registered

    todo = [r for r in study.runs if rerun_stale or dirs[r.run_id].status not in FINISHED]
    fetch_registered({r.config.data.dataset for r in todo}, source=study.path)
    if rerun_stale:
        from ablate.store.provenance import archive_stale

        moved = [p for d in dirs.values() if not d.is_locked() and (p := archive_stale(d))]
        if moved:
            console.print(f"{len(moved)} stale runs moved to {escape(str(moved[0].parent))}")
    return dirs


def _collect(study: Study, dirs: dict[str, RunDir]) -> list[dict[str, Any]]:
    """The current summary of every planned run, in plan order, its state from run_state."""
    out = []
    for run in study.runs:
        d = dirs[run.run_id]
        reason = run_damage(d) if d.path.is_dir() else None
        if reason is not None:  # a finished run with a damaged file: shown, not retrained
            out.append(
                {"name": run.name, "run_id": run.run_id, "variant": run.variant}
                | {"status": DAMAGED, "error": reason}
            )
            continue
        s = d.read_summary() or {}
        out.append(
            {
                **s,
                "name": run.name,
                "run_id": run.run_id,
                "variant": run.variant,
                "status": run_state(d),
                "path": str(d.path),
            }
        )
    return out
