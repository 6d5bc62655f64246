"""A study's W&B dashboards as code (``wandb-workspaces``, pinned: its API is a public preview).

Built from a :class:`StudyView` (the study in plain values; the report reads it from the store,
``ablate.report.dashboards``), never from W&B:

* a saved **workspace** (:func:`workspace_spec`): the study's runs without the report run,
  grouped by variant (the runs' job type); loss curves against ``trainer/global_step`` with the
  mean and the min-max band over seeds; a bar of ``final_val_loss`` per variant; parallel
  coordinates over the axes of a grid study; the study's special panels where it has them
  (length extrapolation, per-layer gradient norms); run-table columns for the axes, final and
  best loss and state;
* a W&B **Report** (:func:`report_spec`) from the report's blocks (:class:`Item`: headings,
  Markdown, figures), its figures taken from the report run's images.

``ablate report`` writes both as JSON beside ``report.md`` (:func:`write_specs`): the models'
own serialization, the same payload a save sends, with fixed panel ids so that two reports of
the same store give the same files. ``ablate dashboard`` (``views``) saves them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.tracking.ids import REPORT_JOB_TYPE, STEP

WORKSPACE_FILE = "wandb_workspace.json"
REPORT_FILE = "wandb_report.json"
BAND = {"groupby_aggfunc": "mean", "groupby_rangefunc": "minmax"}


@dataclass(frozen=True)
class StudyView:
    """What the views show of a study, in plain values."""

    name: str
    entity: str
    """The W&B entity its runs log to; empty: the login's default, filled in when saved."""
    project: str
    axes: list[str]
    """The axis keys (dotted config keys, e.g. ``model.norm_placement``), in the report's order."""
    axis_names: dict[str, str] = field(default_factory=dict)
    """An axis key -> its display name (default: the key)."""
    loss_unit: str = "nats"
    grid: bool = False
    """A grid study: the workspace gets parallel coordinates over the axes."""
    lengths: list[str] = field(default_factory=list)
    """The runs' ``val_loss_at_<k>x`` summary keys, in length order."""
    layer_norms: list[str] = field(default_factory=list)
    """The logged ``grad_norm/layer_<i>`` metrics."""
    ffn_norms: list[str] = field(default_factory=list)
    """The logged ``grad_norm/ffn_out_<i>`` metrics."""
    description: str = ""


@dataclass(frozen=True)
class Item:
    """One block of the Report: ``h1``/``h2`` (a heading), ``markdown`` (text, a table as
    Markdown) or ``figure`` (the report run's image ``figures/<figure>``, ``text`` its caption)."""

    kind: str
    text: str = ""
    figure: str = ""


def _panels(view: StudyView) -> dict[str, list]:
    """Section name -> panels (module doc), in the order they appear."""
    import wandb_workspaces.reports.v2 as wr

    unit, names = view.loss_unit, view.axis_names
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
    if view.grid and view.axes:
        columns = [
            wr.ParallelCoordinatesPlotColumn(metric=wr.Config(a), display_name=names.get(a, a))
            for a in view.axes
        ]
        columns.append(wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric("final_val_loss")))
        sections["Grid"] = [
            wr.ParallelCoordinatesPlot(title="axes -> final_val_loss", columns=columns)
        ]
    if view.lengths:
        sections["Length extrapolation"] = [
            wr.BarPlot(
                title="validation loss at each evaluation length (multiples of seq_len)",
                metrics=list(view.lengths),
                orientation="v",
                **BAND,
            )
        ]
    if view.layer_norms or view.ffn_norms:
        sections["Gradient norms per layer"] = [
            wr.LinePlot(title=title, x=STEP, y=list(keys), **BAND)
            for title, keys in (
                ("gradient norm per layer", view.layer_norms),
                ("gradient norm of each FFN output weight", view.ffn_norms),
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


def run_columns(view: StudyView) -> list[str]:
    """The run table's pinned columns: the axes, final and best loss, state, tags."""
    axes = [config_column(a) for a in view.axes]
    return [*axes, "summary:final_val_loss", "summary:best_val_loss", "run:state", "run:tags"]


def workspace_spec(view: StudyView):
    """The study's saved workspace (module doc), a ``wandb_workspaces`` ``Workspace``."""
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces import expr

    sections = []
    for i, (name, panels) in enumerate(_panels(view).items()):
        _fix_ids(panels, f"{view.name}-{i}")
        sections.append(ws.Section(name=name, panels=panels, is_open=True))
    return ws.Workspace(
        entity=view.entity,
        project=view.project,
        name=f"ablate: {view.name}",
        sections=sections,
        settings=ws.WorkspaceSettings(x_axis=STEP),
        runset_settings=ws.RunsetSettings(
            filters=[
                expr.Metric("Group") == view.name,
                expr.Metric("JobType") != REPORT_JOB_TYPE,
            ],
            groupby=[expr.Metric("JobType")],
            order=[expr.Ordering(expr.Summary("final_val_loss"), ascending=True)],
            pinned_columns=run_columns(view),
        ),
    )


def _report_block(item: Item, figures: dict[str, Any]):
    import wandb_workspaces.reports.v2 as wr

    if item.kind == "h1":
        return [wr.H1(text=item.text)]
    if item.kind == "h2":
        return [wr.H2(text=item.text)]
    if item.kind == "figure":
        return [figures[item.figure], wr.MarkdownBlock(text=item.text)]
    return [wr.MarkdownBlock(text=item.text)]


def report_spec(view: StudyView, items: list[Item]):
    """The W&B Report of ``items`` (module doc), a ``wandb_workspaces`` ``Report``.

    A figure is the report run's logged image ``figures/<name>`` in a panel grid whose run set
    is the study's report run; the run set names no project (serializing one that does asks
    the server), so a saved Report shows the project it is saved in.
    """
    import wandb_workspaces.reports.v2 as wr

    runset = wr.Runset(
        name=f"{view.name} report run",
        filters=f"Group = '{view.name}' and JobType = '{REPORT_JOB_TYPE}'",
    )
    runset._id = f"{view.name}-report-run"  # random by default, like panel ids
    figures = {}
    for item in items:
        if item.kind == "figure":
            stem = item.figure
            panel = wr.MediaBrowser(title=stem, media_keys=[f"figures/{stem}"], num_columns=1)
            _fix_ids([panel], f"{view.name}-fig-{stem}")
            figures[stem] = wr.PanelGrid(runsets=[runset], panels=[panel])
    body = [block for item in items for block in _report_block(item, figures)]
    return wr.Report(
        entity=view.entity,
        project=view.project,
        title=f"ablate: {view.name}",
        description=(view.description.splitlines() or [""])[0][:250],
        blocks=body,
    )


def workspace_json(view: StudyView) -> dict[str, Any]:
    """The workspace as its ``View`` model serializes (what ``Workspace.save`` sends)."""
    model = workspace_spec(view)._to_model()
    return json.loads(model.model_dump_json(by_alias=True, exclude_none=True))


def report_json(view: StudyView, items: list[Item]) -> dict[str, Any]:
    """The Report as its ``ReportViewspec`` model serializes (what ``Report.save`` sends)."""
    model = report_spec(view, items)._to_model()
    return json.loads(model.model_dump_json(by_alias=True, exclude_none=True))


def write_specs(view: StudyView, items: list[Item], folder: Path) -> list[Path]:
    """Write ``wandb_workspace.json`` and ``wandb_report.json`` into ``folder``."""
    out = []
    for name, spec in (
        (WORKSPACE_FILE, workspace_json(view)),
        (REPORT_FILE, report_json(view, items)),
    ):
        path = Path(folder) / name
        path.write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n")
        out.append(path)
    return out
