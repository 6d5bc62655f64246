"""The tables a user reads: a study's plan (``ablate plan``), the store's status (``ablate
status``) and the summary printed when ``ablate run`` ends, one row per run, each readable at 80
columns.

A run's name and id are never cut (ids are what ``ablate sample`` takes), and a number never
breaks across lines: when the table is wider than the terminal, the least useful columns are
left out (a line says which), and when even name, id and status do not fit, each run is
printed as two lines instead (:func:`print_rows`). A pipe or a log file gets 160 columns, or
``$COLUMNS`` when set.
"""

from __future__ import annotations

import math
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ablate.config import ConfigError
from ablate.data.baseline import LEARNED_NOTHING, learned_nothing, unigram_loss
from ablate.execution.progress import fmt_duration
from ablate.store import DAMAGED, FINISHED, RunDir, RunStore, run_damage, run_state
from ablate.store.rundir import ERROR_FILE
from ablate.study import Study, load_study

MAX_ERROR_LOGS = 5  # error.log paths listed under the summary table; the rest are alike


def make_console() -> Console:
    # a log file or a pipe gets wide tables rather than rich's 80 columns, unless $COLUMNS says
    wide = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    return Console(file=sys.stdout, highlight=False, width=None if wide else 160)


@dataclass(frozen=True)
class Col:
    """A column of a run table. ``drop``: 0 = always shown (name, run id, status); otherwise
    the higher, the sooner it is left out of a table too wide for the terminal. ``prose``: a
    note or error, cut with an ellipsis to the width left (its full text is printed elsewhere)."""

    header: str
    drop: int = 0
    justify: str = "left"
    prose: bool = False


PROSE_MIN = 12  # a note or error column is never narrower than this


def _needed(col: Col, cells: list[str]) -> int:
    width = max([cell_len(col.header), *(Text.from_markup(c).cell_len for c in cells)])
    return min(width, max(PROSE_MIN, cell_len(col.header))) if col.prose else width


def print_rows(console: Console, title: str, cols: list[Col], rows: list[list[str]]) -> list[str]:
    """Print ``rows`` (cells in rich markup) as a table that fits ``console.width``; returns
    the headers left out. Columns go in ``drop`` order until the rest fits; if that would leave
    out all of them, or the columns always shown do not fit, each row becomes two lines
    instead: its first cell whole, then the others with their headers (wrapped between cells,
    so a number never breaks)."""
    need = [_needed(c, [r[i] for r in rows]) for i, c in enumerate(cols)]
    droppable = sorted((i for i, c in enumerate(cols) if c.drop), key=lambda i: -cols[i].drop)
    shown = list(range(len(cols)))
    for i in droppable:
        if sum(need[j] for j in shown) + 3 * len(shown) + 1 <= console.width:
            break
        shown.remove(i)
    too_wide = sum(need[j] for j in shown) + 3 * len(shown) + 1 > console.width
    if too_wide or (droppable and not set(droppable) & set(shown)):
        console.print(title, soft_wrap=True)
        for r in rows:
            console.print(r[0], soft_wrap=True)  # a long name wraps on screen, never cut
            rest = [
                _cut(f"{c.header} {r[i]}", console.width - 2) if c.prose else f"{c.header} {r[i]}"
                for i, c in enumerate(cols)
                if i and r[i] not in ("", "-")
            ]
            _print_packed(console, rest)
        return []
    spare = console.width - (sum(need[j] for j in shown) + 3 * len(shown) + 1)
    table = Table(title=title, title_justify="left")
    for i in shown:
        c = cols[i]
        table.add_column(
            c.header,
            justify=c.justify,  # type: ignore[arg-type]
            no_wrap=True,
            overflow="ellipsis" if c.prose else "fold",
            min_width=None if c.prose else need[i],
            max_width=need[i] + spare if c.prose else None,
        )
    for r in rows:
        table.add_row(*(r[i] for i in shown))
    console.print(table)
    hidden = [cols[i].header for i in range(len(cols)) if i not in shown]
    if hidden:
        console.print(
            escape(f"(left out at {console.width} columns: {', '.join(hidden)})"), style="dim"
        )
    return hidden


def _cut(markup: str, width: int) -> str:
    """``markup`` cut to ``width`` cells with an ellipsis (prose: its full text is elsewhere)."""
    text = Text.from_markup(markup)
    text.truncate(max(width, 1), overflow="ellipsis")
    return text.markup


def _print_packed(console: Console, units: list[str]) -> None:
    """``units`` (markup) on indented lines of at most the console's width, never split."""
    line, used = "  ", 2
    for unit in units:
        n = Text.from_markup(unit).cell_len
        if used > 2 and used + 2 + n > console.width:
            console.print(line, soft_wrap=True)
            line, used = "  ", 2
        line, used = line + ("  " if used > 2 else "") + unit, used + (2 if used > 2 else 0) + n
    console.print(line, soft_wrap=True)


def saved_step(run_dir: RunDir) -> int | None:
    """The step of the checkpoint an unfinished run resumes from; None without one."""
    path = run_dir.last_checkpoint()
    if path is None:
        return None
    try:
        import torch

        ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        return int(ckpt["global_step"])
    except Exception:  # noqa: BLE001 - unreadable: the resume sets it aside and says so
        return None


def steps_cell(summary: dict[str, Any], status: str, run_dir: RunDir | None) -> str:
    """Steps trained; for an interrupted or failed run the step its checkpoint saved."""
    if summary.get("steps") is not None:
        return str(summary["steps"])
    if status in ("interrupted", "failed", "running") and run_dir is not None:
        step = saved_step(run_dir)
        if step is not None:
            return f"{step} saved"
    return "-"


_STYLE = {
    "completed": "green",
    "diverged": "magenta",
    LEARNED_NOTHING: "magenta",
    "failed": "red",
    "damaged": "red",
    "running": "cyan",
    "interrupted": "yellow",
    "pending": "dim",
}


def profile_text(study: Study) -> str:
    """`` (profile cpu: default_profile auto: no CUDA device visible)`` after a study's name;
    nothing for a study without profiles."""
    return f" (profile {study.profile}: {study.profile_reason})" if study.profile else ""


def fmt_loss(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.{digits}f}"


def status_cell(status: str) -> str:
    return f"[{_STYLE.get(status, 'white')}]{status}[/]"


def print_summary(
    study: Study, results: list[dict[str, Any]], console: Console, *, elapsed: float
) -> None:
    cols = [
        Col("name"),
        Col("run id"),
        Col("status"),
        Col("best val loss", 4, "right"),
        Col("final val loss", 2, "right"),
        Col("steps", 3, "right"),
        Col("wall time", 5, "right"),
        # one line per run, cut to the width left: a long error would otherwise fold into a
        # column of word fragments; the whole error is in the run's error.log (printed below)
        Col("note", 1, prose=True),
    ]
    rows = []
    for r in results:
        run_dir = RunDir(Path(r["path"])) if r.get("path") else None
        steps = steps_cell(r, r["status"], run_dir)
        note = ""
        if r.get("diverged_step") is not None:
            note = f"diverged at step {r['diverged_step']}"
        elif r.get("error"):
            note = str(r["error"]).strip().splitlines()[0] if str(r["error"]).strip() else "?"
        elif r["status"] == "running":
            note = "another process is training it"
        elif r["status"] == "interrupted":
            saved = steps.removesuffix(" saved")
            at = f"step {saved}" if saved.isdigit() else "its last checkpoint"
            note = f"resumes from {at}"
        rows.append(
            [
                escape(r["name"]),
                escape(str(r.get("run_id", "-"))),
                status_cell(r["status"]),
                fmt_loss(r.get("best_val_loss")),
                fmt_loss(r.get("final_val_loss")),
                steps,
                fmt_duration(r.get("wall_time_s"), missing="-"),
                escape(note),
            ]
        )
    print_rows(console, f"{study.name}: {len(results)} runs", cols, rows)
    counts = Counter(r["status"] for r in results)
    console.print(
        ", ".join(f"{n} {s}" for s, n in counts.most_common())
        + f"  (this session: {fmt_duration(elapsed)})"
    )
    logs = [
        Path(r["path"]) / ERROR_FILE for r in results if r["status"] == "failed" and r.get("path")
    ]
    for log in [p for p in logs if p.is_file()][:MAX_ERROR_LOGS]:
        console.print(escape(f"full error: {log}"), soft_wrap=True)


def plan_study(
    study_path: str | Path,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    store: str | Path = "runs",
    plugins: Sequence[str] = (),
    estimate: bool = True,
) -> Study:
    """Print the expanded runs of a study without training (or writing) anything."""
    return plan_studies(
        [study_path],
        profile=profile,
        overrides=overrides,
        store=store,
        plugins=plugins,
        estimate=estimate,
    )[0]


def plan_studies(
    study_paths: Sequence[str | Path],
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    store: str | Path = "runs",
    plugins: Sequence[str] = (),
    estimate: bool = True,
    workers: str | int | None = None,
    remeasure: bool = False,
) -> list[Study]:
    """Print the expanded runs of each study, and with ``estimate`` how long they take here
    with the workers ``ablate run --workers`` would use (:mod:`ablate.execution.estimate`).
    Every study is validated first, its registered datasets fetched as ``ablate run`` does
    (``ConfigError`` when one cannot be)."""
    studies = [load_study(p, profile, overrides, plugins=plugins) for p in study_paths]
    show_plans([(s, None) for s in studies], store, estimate, workers, remeasure)
    return studies


def show_plans(
    plans: Sequence[tuple[Study, str | None]],
    store: str | Path,
    estimate: bool,
    workers: str | int | None,
    remeasure: bool,
) -> None:
    """Print each planned study (with its note under the header), after fetching the
    registered datasets of all of them."""
    from ablate.execution.executors import parse_options

    opts = parse_options("local", workers=workers)
    from ablate.data import fetch_registered  # loads torch: after the studies validate

    for study, _ in plans:
        fetch_registered({r.config.data.dataset for r in study.runs}, source=study.path)
    timing = {"opts": opts, "remeasure": remeasure} if estimate else None
    for study, note in plans:
        _print_plan(study, RunStore(store), make_console(), timing=timing, note=note)


def _plan_workers(study: Study, runs_store: RunStore, opts) -> int:
    """The workers ``ablate run`` would start for the study's unfinished runs."""
    from ablate.execution.executors import RunTask
    from ablate.execution.executors.local import plan_workers
    from ablate.execution.groups import group_tasks

    todo = [r for r in study.runs if runs_store.run(study.name, r.run_id).status not in FINISHED]
    tasks = group_tasks([RunTask(r, r.config, "", {}) for r in todo or study.runs])
    return len(plan_workers(tasks, opts)) if tasks else 1


PLAN_COLUMNS = [
    Col("#", 9, "right"),
    Col("name"),
    Col("run id"),
    Col("status"),
    Col("stack", 8),
    Col("params (non-emb)", 5, "right"),
    Col("steps", 4, "right"),
    Col("batch x seq", 6, "right"),
    Col("lr", 3, "right"),
    Col("time", 2, "right"),
]


def _print_plan(
    study: Study,
    runs_store: RunStore,
    console: Console,
    *,
    timing: dict[str, Any] | None,
    note: str | None = None,
) -> None:
    from ablate.execution.estimate import estimate_runs, total_line
    from ablate.execution.flops import reuse_line
    from ablate.execution.groups import plan_labels

    header = f"[bold]{study.name}[/]"
    if study.profile:
        header += f" (profile {study.profile}: {study.profile_reason}; profiles: "
        header += f"{', '.join(study.profiles)})"
    console.print(header)
    if study.description:
        console.print(escape(study.description.splitlines()[0]), soft_wrap=True)
    if note:
        console.print(escape(note), soft_wrap=True)
    groups, stack_lines = plan_labels(study.runs)
    counts = _non_embedding_params(study)
    est = None
    if timing is not None:
        est = estimate_runs(
            {r.run_id: r.config for r in study.runs},
            workers=_plan_workers(study, runs_store, timing["opts"]),
            store=runs_store.root,
            remeasure=timing["remeasure"],
        )
    cols = [c for c in PLAN_COLUMNS if (groups or c.header != "stack")]
    cols = [c for c in cols if (est or c.header != "time")]
    rows, todo = [], []
    for i, run in enumerate(study.runs, 1):
        c = run.config
        status = run_state(runs_store.run(study.name, run.run_id))
        if status not in ("completed", "diverged"):
            todo.append(run.run_id)
        seconds = est.seconds[run.run_id] if est else None
        cells = {
            "#": str(i),
            "name": escape(run.name),
            "run id": run.run_id,
            "status": status_cell(status),
            "stack": groups.get(run.run_id, "-"),
            "params (non-emb)": f"{n:,}" if (n := counts.get(run.run_id)) is not None else "?",
            "steps": str(c.train.max_steps),
            "batch x seq": f"{c.data.batch_size} x {c.data.seq_len}",
            "lr": f"{c.lr:.3g}",
            "time": fmt_duration(seconds, missing="?"),
        }
        rows.append([cells[col.header] for col in cols])
    title = escape(f"{len(study.runs)} runs -> {runs_store.root}")
    print_rows(console, title, cols, rows)
    if study.ladder is not None:
        # the rung table costs the runs' FLOPs (torch): imported only for a ladder
        from ablate.execution.ladder import print_ladder

        print_ladder(study, console)
    for line in stack_lines:
        console.print(escape(line), soft_wrap=True)
    console.print(escape(reuse_line(study)), soft_wrap=True)
    if study.claims:  # reads the store and the registration's git history: only then
        from ablate.execution.design import design_lines

        for line in design_lines(study, runs_store.root):
            console.print(escape(line), soft_wrap=True)
    if est:
        console.print(escape(total_line(est, todo, fmt_duration)))


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


def plan_flops(
    paths: Sequence[Path],
    profile: str | None,
    overrides: Sequence[str],
    plugins: Sequence[str],
    tflops: float | None,
) -> None:
    """``ablate plan --flops``: every study validated as for a run except for the device (a
    gpu profile is costed on a laptop), then one FLOPs table in minutes at a measured rate
    (``tflops``: one given), with each tier's total and each study's data reuse."""
    from ablate.execution.flops import Rate, measured_rate, print_flops

    planned = [
        load_study(p, profile, overrides, plugins=plugins, check_device=False) for p in paths
    ]
    rate = Rate(tflops * 1e12, "--tflops") if tflops else measured_rate()
    print_flops(planned, rate=rate, console=make_console())


def store_status(
    store: str | Path = "runs", studies: str | Sequence[str] | None = None
) -> dict[str, Counter]:
    """Print each study in the store (or only ``studies``: names or study YAMLs) with per-state
    counts and one line per run; a completed run at its data's unigram loss reads ``learned
    nothing`` (:mod:`ablate.data.baseline`)."""
    runs_store = RunStore(store)
    console = make_console()
    present = runs_store.studies(planned=True)  # `ablate run` planned, nothing started yet
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
        rows, counts, damaged = _status_rows(runs_store, name)
        print_rows(console, escape(name), STATUS_COLUMNS, rows)
        console.print(", ".join(f"{n} {s}" for s, n in counts.most_common()))
        for reason in damaged:
            console.print(escape(f"damaged: {reason}"), soft_wrap=True)
        totals[name] = counts
    return totals


STATUS_COLUMNS = [
    Col("name"),
    Col("run id"),
    Col("profile", 4),
    Col("status"),
    Col("steps", 2, "right"),
    Col("final val loss", 1, "right"),
    Col("wall time", 3, "right"),
]


def _status_order(meta: dict, run_id: str) -> tuple:
    """Profile, then variant, then seed as a number (seed=2 before seed=10)."""
    seed = meta.get("seed")
    number = seed if isinstance(seed, int) and not isinstance(seed, bool) else float("inf")
    return (
        str(meta.get("profile")),
        str(meta.get("variant", "")),
        number,
        str(meta.get("name", run_id)),
    )


def _status_rows(runs_store: RunStore, name: str) -> tuple[list[list[str]], Counter, list[str]]:
    """(one row of :data:`STATUS_COLUMNS` per run, counts per state, damage reasons)."""
    from ablate.store.provenance import is_stale

    counts: Counter = Counter()
    runs = sorted(
        ((d.read_run()["meta"], d) for d in runs_store.runs(name)),
        key=lambda md: _status_order(md[0], md[1].run_id),
    )
    damaged, rows = [], []
    for meta, d in runs:
        s = d.read_summary() or {}
        status = run_state(d)
        if status == DAMAGED:  # shown, never a crash: the rest of the study still lists
            s = {}
            damaged.append(run_damage(d))
        elif status == "completed":  # at its data's unigram loss (token cache already built)
            unigram = unigram_loss(d.read_run()["config"].get("data") or {}, build=False)
            status = (
                LEARNED_NOTHING if learned_nothing(s.get("final_val_loss"), unigram) else status
            )
        counts[status] += 1
        # made by other model/training code than the current one
        stale = " [yellow](stale code)[/]" if is_stale(d) else ""
        rows.append(
            [
                escape(str(meta.get("name", d.run_id))),
                d.run_id,
                str(meta.get("profile") or "-"),
                status_cell(status) + stale,
                steps_cell(s, status, d),
                fmt_loss(s.get("final_val_loss")),
                fmt_duration(s.get("wall_time_s"), missing="-"),
            ]
        )
    started = {d.run_id for _, d in runs}
    for plan in runs_store.planned(name):  # planned by the last `ablate run`, not started
        if plan["run_id"] not in started:
            counts["pending"] += 1
            rows.append(
                [escape(str(plan.get("name") or plan["run_id"])), plan["run_id"]]
                + [str(plan.get("profile") or "-"), status_cell("pending"), "-", "-", "-"]
            )
    return rows, counts, damaged


def _study_name(arg: str) -> str:
    """A study name, or the name a study YAML stores its runs under (``name:``, else the stem)."""
    if not arg.endswith((".yaml", ".yml")):
        return arg
    from ablate.study import read_study_yaml

    return str(read_study_yaml(Path(arg)).get("name") or Path(arg).stem)
