"""The study's W&B views from the report's side: the study read from the store as the plain
:class:`~ablate.tracking.specs.StudyView` the specs are built from, and the report's blocks as
the Report's items (``ablate.tracking.specs`` builds and writes the specs; module doc there).

The Report shows the report's text and its provenance, with three tables replaced by what
W&B shows live (each known by its block's ``tag``): the Answer's table and the exploratory
comparisons in full as the report run's W&B Tables ``claims`` and ``verdicts``
(``ablate.report.wandb_report`` logs them), and the table of every run as the study's run
table; the figures of the runs' numbers become panel grids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ablate.names import RESERVED, axis_column, display_names, loss_unit
from ablate.report.render import Block, md_table
from ablate.results import StudyData
from ablate.store import RunDir
from ablate.tracking import specs
from ablate.tracking.ids import STEP, TOKENS, report_run_id, wandb_run_id
from ablate.tracking.mode import destination, study_tracking
from ablate.tracking.specs import Item, StudyView

TABLES = {"answer": "claims", "verdicts": "verdicts"}
"""A report table's tag -> the report run's W&B Table it is (the same claims, the same rows)."""
RUNS = "runs"
"""The tag of the report's table of every run: the Report shows the live run table."""


def _metric_names(study: StudyData) -> list[str]:
    if study.metrics.empty:
        return []
    return sorted(study.metrics["metric"].drop_duplicates())


def x_axis(study: StudyData) -> str:
    """``tokens`` when the runs consume different numbers of tokens per step (a batch-size or
    sequence-length axis: loss per step would compare unequal amounts of training), else the
    step."""
    runs = study.runs
    if not {"cfg.batch_size", "cfg.seq_len"} <= set(runs.columns) or runs.empty:
        return STEP
    per_step = pd.to_numeric(runs["cfg.batch_size"]) * pd.to_numeric(runs["cfg.seq_len"])
    return TOKENS if per_step.nunique(dropna=True) > 1 else STEP


def axis_key(column: str) -> str:
    """The axis key of a runs-table axis column (``axis.variant`` is the ``variant`` axis:
    :func:`ablate.names.axis_column`)."""
    key = column.removeprefix("axis.")
    return key if key in RESERVED and axis_column(key) == column else column


def study_view(study: StudyData) -> StudyView:
    """What the views show of ``study``; the destination is its runs' tracking config (then
    ``$WANDB_*``, then the user's W&B settings)."""
    entity, project = destination(study_tracking(study.path, study.runs["run_id"]))
    return StudyView(
        name=study.name,
        entity=entity,
        project=project,
        axes=[axis_key(a) for a in study.axes],
        varying=[axis_key(a) for a in study.varying_axes],
        axis_names={axis_key(a): n for a, n in display_names(study.axes).items()},
        loss_unit=loss_unit(study),
        run_ids=[wandb_run_id(RunDir(study.path / str(r))) for r in study.runs["run_id"]],
        report_run_id=report_run_id(study.name),
        metrics=_metric_names(study),
        x_axis=x_axis(study),
        lengths=study.length_columns,
        description=study.description,
    )


def report_item(block: Block) -> Item:
    """A report block as the Report shows it: a heading, Markdown, or a figure."""
    if block.kind in ("h1", "h2"):
        return Item(block.kind, str(block.content))
    if block.kind == "h3":
        return Item("markdown", f"### {block.content}")
    if block.kind == "note":
        return Item("markdown", f"> {block.content}")
    if block.kind == "ul":
        return Item("markdown", "\n".join(f"- {item}" for item in block.content))
    if block.kind == "table":
        table = block.content
        text = md_table(table) if isinstance(table, pd.DataFrame) and len(table) else "(no rows)"
        return Item("markdown", text + (f"\n\n{block.caption}" if block.caption else ""))
    if block.kind == "fig":
        stem = Path(str(getattr(block.content, "path", block.content))).stem
        return Item("figure", block.caption or "", figure=stem)
    return Item("markdown", str(block.content))


def report_items(study: StudyData, blocks: list[Block]) -> list[Item]:
    """The Report's items of the report's ``blocks`` (module doc): each block as
    :func:`report_item`, but the Answer's table as the ``claims`` W&B Table, the comparisons
    as the ``verdicts`` one, the runs as the live run table."""
    items: list[Item] = []
    for block in blocks:
        if block.kind == "table" and block.tag in TABLES:
            text = block.caption or "The claims and their outcomes: the report run's W&B Table."
            items.append(Item("table", text, table=TABLES[block.tag]))
        elif block.kind == "table" and block.tag == RUNS:
            text = "Every run of the study, live from W&B: axes, seed, status, final loss."
            items.append(Item("runs", text))
        else:
            items.append(report_item(block))
    return items


def workspace_json(study: StudyData) -> dict[str, Any]:
    """The study's workspace spec as JSON (``ablate.tracking.specs.workspace_json``)."""
    return specs.workspace_json(study_view(study))


def report_json(study: StudyData, blocks: list[Block]) -> dict[str, Any]:
    """The study's Report spec as JSON (``ablate.tracking.specs.report_json``)."""
    return specs.report_json(study_view(study), report_items(study, blocks))


def write_specs(study: StudyData, blocks: list[Block], folder: Path) -> list[Path]:
    """Write the study's ``wandb_workspace.json`` and ``wandb_report.json`` (mirroring
    ``blocks``, the report's) into ``folder``."""
    return specs.write_specs(study_view(study), report_items(study, blocks), folder)
