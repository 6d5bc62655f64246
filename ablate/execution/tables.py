"""The tables a user reads: a study's plan (``ablate plan``), the store's status (``ablate
status``) and the summary printed when ``ablate run`` ends, one row per run, each readable at 80
columns.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ablate.config import ConfigError
from ablate.execution.progress import fmt_duration
from ablate.store import DAMAGED, RunStore, run_damage, run_state
from ablate.store.rundir import ERROR_FILE
from ablate.study import Study, load_study

MAX_ERROR_LOGS = 5  # error.log paths listed under the summary table; the rest are alike


def make_console() -> Console:
    # a log file or a pipe gets wide tables rather than rich's 80 columns
    return Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)


_STYLE = {
    "completed": "green",
    "diverged": "magenta",
    "failed": "red",
    "damaged": "red",
    "running": "cyan",
    "interrupted": "yellow",
    "pending": "dim",
}


def fmt_loss(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.{digits}f}"


def status_cell(status: str) -> str:
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
        # one line per run, cut to the width left: a long error would otherwise fold into a
        # column of word fragments; the whole error is in the run's error.log (printed below)
        ("note", {"no_wrap": True, "overflow": "ellipsis", "min_width": 12}),
    ):
        table.add_column(col, **kw)
    for r in results:
        note = ""
        if r.get("diverged_step") is not None:
            note = f"diverged at step {r['diverged_step']}"
        elif r.get("error"):
            note = str(r["error"]).strip().splitlines()[0] if str(r["error"]).strip() else "?"
        elif r["status"] == "running":
            note = "another process is training it"
        elif r["status"] == "interrupted":
            note = "resumes from its last checkpoint"
        table.add_row(
            escape(r["name"]),
            status_cell(r["status"]),
            fmt_loss(r.get("best_val_loss")),
            fmt_loss(r.get("final_val_loss")),
            str(r.get("steps", "")) if r.get("steps") is not None else "-",
            fmt_duration(r.get("wall_time_s"), missing="-"),
            escape(note),
        )
    console.print(table)
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
        _print_plan(study, RunStore(store), make_console())
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
    from ablate.execution.groups import plan_labels

    groups, stack_lines = plan_labels(study.runs)
    table.add_column("#", justify="right")
    for col in ("name", "run id", "status", *(["stack"] if groups else [])):
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
            status_cell(run_state(runs_store.run(study.name, run.run_id))),
            *([groups.get(run.run_id, "-")] if groups else []),
            f"{counts[run.run_id]:,}" if counts.get(run.run_id) is not None else "?",
            str(c.train.max_steps),
            f"{c.data.batch_size} x {c.data.seq_len}",
            f"{c.lr:.3g}",
        )
    console.print(table)
    for line in stack_lines:
        console.print(escape(line), soft_wrap=True)


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
    console = make_console()
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
                status_cell(status) + stale,
                str(s.get("steps", "-")),
                fmt_loss(s.get("final_val_loss")),
                fmt_duration(s.get("wall_time_s"), missing="-"),
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
