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
protocol for one run is ``worker.execute_run``; *where* runs train is the executor's business
(executors/: local, ray, slurm); this module plans, skips finished runs, hands the rest to the
executor and prints the summary table (tables.py).
Ctrl-C stops cleanly: the run in progress saves an ``interrupted`` checkpoint and stays
``running``, so the same command resumes it.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape

from ablate.claims.registration import registration_path
from ablate.execution.executors import ExecutorFailed, ExecutorOptions, RunTask, check, execute
from ablate.execution.executors.local import start_early
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
from ablate.store.provenance import study_git
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


def resume_command(
    study_path: str | Path,
    profile: str | None,
    overrides: Sequence[str],
    store: str | Path,
    executor: ExecutorOptions | None = None,
) -> str:
    args = [*invoked_as(), "run", str(study_path)]
    if profile:
        args += ["--profile", profile]
    for o in overrides:
        args += ["--set", o]
    if Path(store) != Path("runs"):
        args += ["--store", str(store)]
    if executor is not None:
        args += executor.cli_args()
    return shlex.join(args)


def run_study(
    study_path: str | Path,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    store: str | Path = "runs",
    workers: int | Literal["auto"] | None = None,
    progress: bool = True,
    executor: ExecutorOptions | None = None,
    plugins: Sequence[str] = (),
    rerun_stale: bool = False,
    extra_seeds: dict[str, Sequence[int]] | None = None,
    confirm_seeds: dict[str, Sequence[int]] | None = None,
    registration: str | None = None,
) -> list[dict[str, Any]]:
    """Train every unfinished run of a study; returns the summaries of all its runs.

    The study and the executor options are fully validated first (``ConfigError``; nothing is
    written). ``workers`` is shorthand for ``ExecutorOptions(workers=...)``. Ctrl-C stops the
    study, prints how to resume and re-raises ``KeyboardInterrupt``. ``rerun_stale``: runs made
    by other model/training code are moved aside (``ablate.store.provenance``) and trained again.
    ``extra_seeds`` (variant label -> seeds) adds runs beyond the study's seeds
    (``--until-decided``, :mod:`ablate.execution.decide`). ``confirm_seeds`` (variant label ->
    seeds, ``--confirm``, :mod:`ablate.execution.confirm`): only these runs are planned, each
    marked ``confirm: true`` in its meta and summary, with ``registration`` (the commit of the
    study's registration it runs under, or ``"unregistered"``).

    Before any run trains, the store keeps a copy of the study file (``study.yaml``), so a
    report finds the study's claims from any directory.
    """
    opts = executor or ExecutorOptions()
    if workers is not None:
        opts = opts.model_copy(update={"workers": workers})
    start_early(opts)  # the workers' imports (seconds) run while the study is planned
    study = plan_runs(study_path, profile, overrides, plugins, extra_seeds, confirm_seeds)
    check(opts)
    runs_store = RunStore(store)
    console = make_console()
    dirs = _prepare_store(study, runs_store, console, rerun_stale=rerun_stale)
    runs_store.keep_spec(study.name, study.path)  # the report reads claims from it anywhere
    # `ablate status` lists the planned runs that have not started beside the others
    runs_store.keep_plan(
        study.name,
        [{"run_id": r.run_id, "name": r.name, "profile": study.profile} for r in study.runs],
    )
    done = sum(1 for r in study.runs if dirs[r.run_id].status in FINISHED)
    todo = [r for r in study.runs if dirs[r.run_id].status not in FINISHED]
    resuming = sum(1 for r in todo if dirs[r.run_id].last_checkpoint() is not None)
    # the study's repository (where its registration is committed): git proves the order there
    repo = study_git(
        [Path(study.path), registration_path(study.path, study.profile), *map(Path, study.plugins)]
    )
    tasks = [
        RunTask(
            r,
            r.config,
            str(dirs[r.run_id].path),
            _meta(study, r, dirs, confirm_seeds, registration) | repo,
        )
        for r in todo
    ]
    tasks = group_tasks(tasks)  # train.stack: a stacked group is one task
    stacked = sum(len(t.members) for t in tasks if t.members)
    where = _where(opts, tasks)
    # recorded in each run's summary (environment): how many runs trained at once
    os.environ["ABLATE_WORKERS"] = str(_n_workers(opts, tasks))
    groups = sum(1 for t in tasks if t.members)
    console.print(
        f"[bold]{study.name}[/]{profile_text(study)}: "
        f"{len(study.runs)} runs, {done} finished, {len(todo)} to train"
        + (f" ({resuming} resume from a checkpoint)" if resuming else "")
        + " -> "
        f"{escape(str(runs_store.root / study.name))}"
        + (f", {where}" if where else "")
        + (f", {stacked} as {groups} stacked groups" if stacked else "")
    )
    # live lines only on a terminal: in a log file the per-run lines say it all. Every run's
    # line comes from its progress.json (ablate.execution.progress), whatever the executor, so
    # Lightning's own bar stays off; the serial path polls from a thread while this process trains.
    serial = opts.executor == "local" and not where
    bar = LiveProgress.for_study(
        study, dirs, enabled=progress, background=serial, describe=_describe
    )
    t0 = time.time()
    try:
        execute(tasks, opts=opts, progress=bar)
    except (KeyboardInterrupt, SystemExit, ExecutorFailed) as err:
        bar.close()
        results = _collect(study, dirs)
        print_summary(study, results, console, elapsed=time.time() - t0)
        resume = resume_command(study_path, study.profile, overrides, store, opts)
        _print_resume(
            console, results, resume + "".join(f" --plugin {shlex.quote(p)}" for p in plugins)
        )
        if isinstance(err, ExecutorFailed):
            raise
        raise KeyboardInterrupt from None
    bar.close()
    results = _collect(study, dirs)
    print_summary(study, results, console, elapsed=time.time() - t0)
    return results


def plan_runs(
    study_path: str | Path,
    profile: str | None,
    overrides: Sequence[str],
    plugins: Sequence[str],
    extra_seeds: dict[str, Sequence[int]] | None,
    confirm_seeds: dict[str, Sequence[int]] | None,
) -> Study:
    """The study's planned runs, with ``extra_seeds``; with ``confirm_seeds`` only those runs."""
    extra = _merge_seeds(extra_seeds, confirm_seeds)
    study = load_study(study_path, profile, overrides, plugins=plugins, extra_seeds=extra)
    if confirm_seeds is None:
        return study
    runs = [r for r in study.runs if r.seed in confirm_seeds.get(r.variant, ())]
    return dataclasses.replace(study, runs=runs)


def _print_resume(console: Console, results: list[dict[str, Any]], resume: str) -> None:
    finished = sum(r["status"] in FINISHED for r in results)
    console.print(
        f"[yellow]Interrupted[/]: {finished} of {len(results)} runs finished; an interrupted "
        f"run resumes from its last checkpoint. Resume with:\n  {escape(resume)}",
        soft_wrap=True,
    )


def _merge_seeds(
    *parts: dict[str, Sequence[int]] | None,
) -> dict[str, Sequence[int]] | None:
    """Extra seeds per variant from several sources, each seed once, in order."""
    out: dict[str, list[int]] = {}
    for part in parts:
        for variant, seeds in (part or {}).items():
            have = out.setdefault(variant, [])
            have += [s for s in seeds if s not in have]
    return out or None


def _meta(
    study: Study,
    run: PlannedRun,
    dirs: dict[str, RunDir],
    confirm_seeds: dict[str, Sequence[int]] | None,
    registration: str | None = None,
) -> dict[str, Any]:
    """The run's meta; ``confirm: true`` for a confirmation run (asked for now, or recorded so
    in its ``run.yaml`` by an earlier ``--confirm`` and resumed by another command) with the
    registration it runs under (the one recorded first wins: a run keeps its attempt)."""
    meta = study.meta(run)
    before = dirs[run.run_id].read_run()["meta"]
    if run.seed in (confirm_seeds or {}).get(run.variant, ()) or before.get("confirm") is True:
        meta["confirm"] = True
        tag = before.get("registration") or registration
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


def _n_workers(opts: ExecutorOptions, tasks: list[RunTask]) -> int:
    """Runs training at once on this machine (1 for Ray/SLURM, whose layout is the cluster's)."""
    if opts.executor != "local" or not tasks:
        return 1
    from ablate.execution.executors.local import plan_workers

    return len(plan_workers(tasks, opts))


def _where(opts: ExecutorOptions, tasks: list[RunTask]) -> str:
    """How the runs are spread, for the header line ('' for one run at a time, here)."""
    if opts.executor == "ray":
        return f"on Ray ({opts.ray_address or 'local'})"
    if opts.executor == "slurm":
        cluster = opts.slurm_cluster or "slurm"
        return "on SLURM" if cluster == "slurm" else f"on submitit's {cluster} executor"
    if not tasks:
        return ""
    from ablate.execution.executors.local import plan_workers

    slots = plan_workers(tasks, opts)
    if len(slots) == 1 and slots[0].memory_fraction is None:
        return ""  # one run at a time, in this process
    gpus = sorted({s.cuda_visible_devices for s in slots if s.cuda_visible_devices is not None})
    if gpus:
        return f"{len(slots)} workers on GPU(s) {','.join(gpus)}"
    return f"{len(slots)} workers" if len(slots) > 1 else ""


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
