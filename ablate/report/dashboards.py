"""A study's W&B dashboards as code (``wandb-workspaces``, pinned: its API is a public preview).

Built from the study as the report reads it from the store, never from W&B:

* a saved **workspace** (:func:`workspace_spec`): the study's runs without the report run,
  grouped by variant (the runs' job type); loss curves against ``trainer/global_step`` with the
  mean and the min-max band over seeds; a bar of ``final_val_loss`` per variant; parallel
  coordinates over the axes of a grid study; the study's special panels where it has them
  (length extrapolation, per-layer gradient norms); run-table columns for the axes, final and
  best loss and state;
* a W&B **Report** (:func:`report_spec`) that mirrors ``report.md`` block by block (question,
  claims and verdicts, tables as Markdown), its figures taken from the report run's images.

``ablate report`` writes both as JSON beside ``report.md`` (:func:`write_specs`): the models'
own serialization, the same payload a save sends, with fixed panel ids so that two reports of
the same store give the same files. ``ablate dashboard`` (``wandb_views``) saves them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.names import LENGTH_PREFIX, display_names, loss_unit
from ablate.report.render import Block, md_table
from ablate.report.wandb_report import REPORT_JOB_TYPE, study_tracking
from ablate.study import read_study_yaml
from ablate.study.results import StudyData

WORKSPACE_FILE = "wandb_workspace.json"
REPORT_FILE = "wandb_report.json"
STEP = "trainer/global_step"  # Lightning's W&B step metric, also the stacked members'
BAND = {"groupby_aggfunc": "mean", "groupby_rangefunc": "minmax"}


def destination(study: StudyData) -> tuple[str, str]:
    """(entity, project) the study's runs log to: its tracking config, then ``$WANDB_*``;
    an empty entity means the login's default, filled in when the view is saved."""
    cfg = study_tracking(study)
    entity = cfg.entity or os.environ.get("WANDB_ENTITY") or ""
    return entity, cfg.project or os.environ.get("WANDB_PROJECT") or "ablate"


def is_grid(study: StudyData) -> bool:
    """A study whose YAML has a ``grid:``, or whose runs vary more than one axis."""
    if study.yaml_path is not None and Path(study.yaml_path).is_file():
        if read_study_yaml(Path(study.yaml_path)).get("grid"):
            return True
    return len(study.varying_axes) > 1


def _metric_names(study: StudyData, prefix: str) -> list[str]:
    if study.metrics.empty:
        return []
    names = study.metrics["metric"].drop_duplicates()
    return sorted(n for n in names if n.startswith(prefix))


def length_columns(study: StudyData) -> list[str]:
    """``val_loss_at_1x``, ``val_loss_at_2x``, ...: the runs' summary keys, in length order."""
    cols = [c for c in study.runs.columns if str(c).startswith(LENGTH_PREFIX)]
    return sorted(cols, key=lambda c: float(c[len(LENGTH_PREFIX) : -1]))


def _panels(study: StudyData) -> dict[str, list]:
    """Section name -> panels (module doc), in the order they appear."""
    import wandb_workspaces.reports.v2 as wr

    unit = loss_unit(study)
    names = display_names(study.axes)
    sections: dict[str, list] = {
        "Loss curves (mean, min-max band over seeds, per variant)": [
            wr.LinePlot(
                title=f"val/loss ({unit}) on train.eval_batches batches per point",
                x=STEP,
                y=["val/loss"],
                **BAND,
            ),
            wr.LinePlot(title=f"train/loss ({unit})", x=STEP, y=["train/loss"], **BAND),
        ],
        "Final loss per variant": [
            wr.BarPlot(
                title="final_val_loss, measured once at the end (final_val_loss_on says on "
                "what); not the curve's last point",
                metrics=["final_val_loss"],  # a bar chart plots each run's summary value
                orientation="h",
                **BAND,
            ),
        ],
    }
    if is_grid(study) and study.axes:
        columns = [
            wr.ParallelCoordinatesPlotColumn(metric=wr.Config(a), display_name=names.get(a, a))
            for a in study.axes
        ]
        columns.append(wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric("final_val_loss")))
        sections["Grid"] = [
            wr.ParallelCoordinatesPlot(title="axes -> final_val_loss", columns=columns)
        ]
    lengths = length_columns(study)
    if lengths:
        sections["Length extrapolation"] = [
            wr.BarPlot(
                title="validation loss at each evaluation length (multiples of seq_len)",
                metrics=lengths,
                orientation="v",
                **BAND,
            )
        ]
    layers = _metric_names(study, "grad_norm/layer_")
    ffn = _metric_names(study, "grad_norm/ffn_out_")
    if layers or ffn:
        sections["Gradient norms per layer"] = [
            wr.LinePlot(title=title, x=STEP, y=keys, **BAND)
            for title, keys in (
                ("gradient norm per layer", layers),
                ("gradient norm of each FFN output weight", ffn),
            )
            if keys
        ]
    return sections


def _fix_ids(panels: list, prefix: str) -> None:
    # panel ids are random by default: fixed ones keep the spec the same for the same store
    for i, panel in enumerate(panels):
        panel._id = f"{prefix}-{i}"


def config_column(axis: str) -> str:
    """The run-table column of a dotted config key: W&B keeps a nested config as
    ``{"model": {"value": {...}}}``, so ``model.norm_placement`` is
    ``config:model.value.norm_placement`` (the path a parallel-coordinates axis gets too)."""
    top, _, rest = axis.partition(".")
    return f"config:{top}.value.{rest}" if rest else f"config:{top}"


def run_columns(study: StudyData) -> list[str]:
    """The run table's pinned columns: the axes, final and best loss, state, tags."""
    axes = [config_column(a) for a in study.axes]
    return [*axes, "summary:final_val_loss", "summary:best_val_loss", "run:state", "run:tags"]


def workspace_spec(study: StudyData):
    """The study's saved workspace (module doc), a ``wandb_workspaces`` ``Workspace``."""
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces import expr

    entity, project = destination(study)
    sections = []
    for i, (name, panels) in enumerate(_panels(study).items()):
        _fix_ids(panels, f"{study.name}-{i}")
        sections.append(ws.Section(name=name, panels=panels, is_open=True))
    return ws.Workspace(
        entity=entity,
        project=project,
        name=f"ablate: {study.name}",
        sections=sections,
        settings=ws.WorkspaceSettings(x_axis=STEP),
        runset_settings=ws.RunsetSettings(
            filters=[
                expr.Metric("Group") == study.name,
                expr.Metric("JobType") != REPORT_JOB_TYPE,
            ],
            groupby=[expr.Metric("JobType")],
            order=[expr.Ordering(expr.Summary("final_val_loss"), ascending=True)],
            pinned_columns=run_columns(study),
        ),
    )


def _report_block(block: Block, figures: dict[str, Any]):
    import wandb_workspaces.reports.v2 as wr

    if block.kind == "h1":
        return [wr.H1(text=str(block.content))]
    if block.kind == "h2":
        return [wr.H2(text=str(block.content))]
    if block.kind == "p":
        return [wr.MarkdownBlock(text=str(block.content))]
    if block.kind == "note":
        return [wr.MarkdownBlock(text=f"> {block.content}")]
    if block.kind == "ul":
        return [wr.MarkdownBlock(text="\n".join(f"- {item}" for item in block.content))]
    if block.kind == "table":
        table = block.content
        text = md_table(table) if isinstance(table, pd.DataFrame) and len(table) else "(no rows)"
        return [wr.MarkdownBlock(text=text + (f"\n\n{block.caption}" if block.caption else ""))]
    if block.kind == "fig":
        stem = Path(str(getattr(block.content, "path", block.content))).stem
        return [figures[stem], wr.MarkdownBlock(text=block.caption or "")]
    return [wr.MarkdownBlock(text=str(block.content))]


def report_spec(study: StudyData, blocks: list[Block]):
    """The W&B Report mirroring ``report.md`` (module doc), a ``wandb_workspaces`` ``Report``.

    A figure is the report run's logged image ``figures/<name>`` in a panel grid whose run set
    is the study's report run; the run set names no project (serializing one that does asks
    the server), so a saved Report shows the project it is saved in.
    """
    import wandb_workspaces.reports.v2 as wr

    entity, project = destination(study)
    runset = wr.Runset(
        name=f"{study.name} report run",
        filters=f"Group = '{study.name}' and JobType = '{REPORT_JOB_TYPE}'",
    )
    runset._id = f"{study.name}-report-run"  # random by default, like panel ids
    figures = {}
    for b in blocks:
        if b.kind == "fig":
            stem = Path(str(getattr(b.content, "path", b.content))).stem
            panel = wr.MediaBrowser(title=stem, media_keys=[f"figures/{stem}"], num_columns=1)
            _fix_ids([panel], f"{study.name}-fig-{stem}")
            figures[stem] = wr.PanelGrid(runsets=[runset], panels=[panel])
    body = [block for b in blocks for block in _report_block(b, figures)]
    return wr.Report(
        entity=entity,
        project=project,
        title=f"ablate: {study.name}",
        description=(study.description.splitlines() or [""])[0][:250],
        blocks=body,
    )


def workspace_json(study: StudyData) -> dict[str, Any]:
    """The workspace as its ``View`` model serializes (what ``Workspace.save`` sends)."""
    model = workspace_spec(study)._to_model()
    return json.loads(model.model_dump_json(by_alias=True, exclude_none=True))


def report_json(study: StudyData, blocks: list[Block]) -> dict[str, Any]:
    """The Report as its ``ReportViewspec`` model serializes (what ``Report.save`` sends)."""
    model = report_spec(study, blocks)._to_model()
    return json.loads(model.model_dump_json(by_alias=True, exclude_none=True))


def write_specs(study: StudyData, blocks: list[Block], folder: Path) -> list[Path]:
    """Write ``wandb_workspace.json`` and ``wandb_report.json`` into ``folder``."""
    out = []
    for name, spec in (
        (WORKSPACE_FILE, workspace_json(study)),
        (REPORT_FILE, report_json(study, blocks)),
    ):
        path = Path(folder) / name
        path.write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n")
        out.append(path)
    return out
