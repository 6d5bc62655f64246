"""Execute a study: train every planned run that is not finished, safely, resumably, anywhere.

The run store is the only coordination between processes. For each run::

    status completed/diverged  -> skip
    try_lock() fails           -> skip: another live process holds the run's lease (never wait)
    re-read status after lease -> skip if another process finished it meanwhile
    else train_run()           -> fresh, resumed from the last checkpoint (status running)
                                  or retried (status failed); release the lease at the end

So two ``ablate run`` processes (or workers, Ray tasks, SLURM jobs) on one study never train a
run twice, and a killed process leaves its run resumable: its lease stops being renewed and is
taken over (at once on the same host, after the grace period elsewhere; ablate/lease.py).
*Where* runs train is the executor's business (ablate/executors: local, ray, slurm); this module
plans, skips finished runs, hands the rest to the executor and prints the summary table.
Ctrl-C stops cleanly: the run in progress saves an ``interrupted`` checkpoint and stays
``running``, so the same command resumes it.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ablate.config import ConfigError
from ablate.execution.executors import ExecutorFailed, ExecutorOptions, RunTask, check, execute
from ablate.execution.progress import LiveProgress
from ablate.execution.worker import INTERRUPTED, LOCKED, TRAINED
from ablate.store import DAMAGED, FINISHED, RunDir, RunStore, run_damage, run_state
from ablate.study import Study, load_study


def _console() -> Console:
    # a log file or a pipe gets wide tables rather than rich's 80 columns
    return Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)


# --- the study ---------------------------------------------------------------------------------


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
    executor: ExecutorOptions | None = None,
) -> str:
    args = ["ablate", "run", str(study_path)]
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
    workers: int | None = None,
    progress: bool = True,
    executor: ExecutorOptions | None = None,
    plugins: Sequence[str] = (),
    rerun_stale: bool = False,
    extra_seeds: dict[str, Sequence[int]] | None = None,
) -> list[dict[str, Any]]:
    """Train every unfinished run of a study; returns the summaries of all its runs.

    The study and the executor options are fully validated first (``ConfigError``; nothing is
    written). ``workers`` is shorthand for ``ExecutorOptions(workers=...)``. Ctrl-C stops the
    study, prints how to resume and re-raises ``KeyboardInterrupt``. ``rerun_stale``: runs made
    by other model/training code are moved aside (``ablate.store.provenance``) and trained again.
    ``extra_seeds`` (variant label -> seeds) adds runs beyond the study's seeds
    (``--until-decided``, :mod:`ablate.execution.decide`).
    """
    opts = executor or ExecutorOptions()
    if workers is not None:
        opts = opts.model_copy(update={"workers": workers})
    study = load_study(study_path, profile, overrides, plugins=plugins, extra_seeds=extra_seeds)
    check(opts)
    from ablate.execution.smoke import check_compile

    check_compile(study)  # train.compile without a C++ compiler: one line now, not per run
    runs_store = RunStore(store)
    console = _console()
    dirs = {r.run_id: runs_store.run(study.name, r.run_id) for r in study.runs}
    fetch_datasets(
        [r for r in study.runs if rerun_stale or dirs[r.run_id].status not in FINISHED],
        source=study.path,
    )
    if rerun_stale:
        from ablate.store.provenance import archive_stale

        moved = [p for d in dirs.values() if not d.is_locked() and (p := archive_stale(d))]
        if moved:
            console.print(f"{len(moved)} stale runs moved to {escape(str(moved[0].parent))}")
    done = sum(1 for r in study.runs if dirs[r.run_id].status in FINISHED)
    todo = [r for r in study.runs if dirs[r.run_id].status not in FINISHED]
    tasks = [RunTask(r, r.config, str(dirs[r.run_id].path), study.meta(r)) for r in todo]
    where = _where(opts, tasks)
    # recorded in each run's summary (environment): how many runs trained at once
    os.environ["ABLATE_WORKERS"] = str(_n_workers(opts, tasks))
    profile_txt = f" (profile {study.profile})" if study.profile else ""
    console.print(
        f"[bold]{study.name}[/]{profile_txt}: {len(study.runs)} runs, {done} finished, "
        f"{len(todo)} to train -> {escape(str(runs_store.root / study.name))}"
        + (f", {where}" if where else "")
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
        finished = sum(r["status"] in FINISHED for r in results)
        console.print(
            f"[yellow]Interrupted[/]: {finished} of {len(results)} runs finished; an interrupted "
            "run resumes from its last checkpoint. Resume with:\n  "
            + escape(
                resume_command(study_path, study.profile, overrides, store, opts)
                + "".join(f" --plugin {shlex.quote(p)}" for p in plugins)
            ),
            soft_wrap=True,
        )
        if isinstance(err, ExecutorFailed):
            raise
        raise KeyboardInterrupt from None
    bar.close()
    results = _collect(study, dirs)
    print_summary(study, results, console, elapsed=time.time() - t0)
    return results


def fetch_datasets(runs: Sequence[Any], source: Path | None = None) -> None:
    """Fetch the registered datasets ``runs`` need once, here, before any run starts: without a
    network (or with a bad checksum) that is one ``ConfigError`` naming the study, not every run
    failing with it in its worker."""
    from ablate.data import DATASETS, resolve_dataset

    for name in sorted({r.config.data.dataset for r in runs} & set(DATASETS)):
        try:
            resolve_dataset(name)
        except ConfigError as err:
            raise ConfigError(err.message, key=err.key, source=source) from None


def _n_workers(opts: ExecutorOptions, tasks: list[RunTask]) -> int:
    """Runs training at once on this machine (1 for Ray/SLURM, whose layout is the cluster's)."""
    if opts.executor != "local" or not tasks:
        return 1
    from ablate.execution.executors.local import plan_workers, visible_gpus

    return len(plan_workers(tasks, opts, visible_gpus()))


def _where(opts: ExecutorOptions, tasks: list[RunTask]) -> str:
    """How the runs are spread, for the header line ('' for one run at a time, here)."""
    if opts.executor == "ray":
        return f"on Ray ({opts.ray_address or 'local'})"
    if opts.executor == "slurm":
        cluster = opts.slurm_cluster or "slurm"
        return "on SLURM" if cluster == "slurm" else f"on submitit's {cluster} executor"
    if not tasks:
        return ""
    from ablate.execution.executors.local import plan_workers, visible_gpus

    slots = plan_workers(tasks, opts, visible_gpus())
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
            }
        )
    return out


# --- tables ------------------------------------------------------------------------------------

_STYLE = {
    "completed": "green",
    "diverged": "magenta",
    "failed": "red",
    "damaged": "red",
    "running": "cyan",
    "interrupted": "yellow",
    "pending": "dim",
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
        elif r["status"] == "interrupted":
            note = "resumes from its last checkpoint"
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
    plugins: Sequence[str] = (),
) -> Study:
    """Print the expanded runs of a study without training (or writing) anything."""
    return plan_studies(
        [study_path], profile=profile, overrides=overrides, store=store, plugins=plugins
    )[0]


def plan_studies(
    study_paths: Sequence[str | Path],
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    store: str | Path = "runs",
    plugins: Sequence[str] = (),
) -> list[Study]:
    """Print the expanded runs of each study; every study is validated before anything prints."""
    studies = [load_study(p, profile, overrides, plugins=plugins) for p in study_paths]
    for study in studies:
        _print_plan(study, RunStore(store), _console())
    return studies


def _print_plan(study: Study, runs_store: RunStore, console: Console) -> None:
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
            _status_cell(run_state(runs_store.run(study.name, run.run_id))),
            f"{counts[run.run_id]:,}" if counts.get(run.run_id) is not None else "?",
            str(c.train.max_steps),
            f"{c.data.batch_size} x {c.data.seq_len}",
            f"{c.lr:.3g}",
        )
    console.print(table)


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


def store_status(
    store: str | Path = "runs", studies: str | Sequence[str] | None = None
) -> dict[str, Counter]:
    """Print each study in the store (or only ``studies``: names or study YAMLs) with per-state
    counts and one line per run."""
    runs_store = RunStore(store)
    console = _console()
    present = runs_store.studies()
    wanted = [studies] if isinstance(studies, str) else list(studies or [])
    names = [_study_name(s) for s in wanted] or present
    missing = [n for n in names if n not in present]
    if missing:  # a typo must not look like an empty study: exit 2
        raise ConfigError(
            f"no study {', '.join(map(repr, missing))} in the store; studies present: "
            f"{', '.join(present) or 'none'}",
            source=runs_store.root,
        )
    if not names:
        console.print(escape(f"no runs in {runs_store.root}"))
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
        damaged = []
        from ablate.store.provenance import is_stale

        for meta, d in runs:
            s = d.read_summary() or {}
            status = run_state(d)
            if status == DAMAGED:  # shown, never a crash: the rest of the study still lists
                s = {}
                damaged.append(run_damage(d))
            counts[status] += 1
            # made by other model/training code than the current one
            stale = " [yellow](stale code)[/]" if is_stale(d) else ""
            table.add_row(
                escape(str(meta.get("name", d.run_id))),
                d.run_id,
                str(meta.get("profile") or "-"),
                _status_cell(status) + stale,
                str(s.get("steps", "-")),
                _num(s.get("final_val_loss")),
                _duration(s.get("wall_time_s")) or "-",
            )
        console.print(table)
        console.print(", ".join(f"{n} {s}" for s, n in counts.most_common()))
        for reason in damaged:
            console.print(escape(f"damaged: {reason}"), soft_wrap=True)
        totals[name] = counts
    return totals


def _study_name(arg: str) -> str:
    """A study name, or the name a study YAML stores its runs under (``name:``, else the stem)."""
    if not arg.endswith((".yaml", ".yml")):
        return arg
    from ablate.study import read_study_yaml

    return str(read_study_yaml(Path(arg)).get("name") or Path(arg).stem)
