"""A study's W&B dashboards as code (``wandb-workspaces``, pinned: its API is a public preview).

Built from a :class:`StudyView` (the study in plain values; the report reads it from the store,
``ablate.report.dashboards``), never from W&B. Both views show the study's runs as the report
read them: the run set is the study's group, job type ``train``, and exactly the W&B ids of
the runs in the store (so a run retrained with ``--rerun-stale``, whose earlier W&B run stays
in W&B with the same group, enters no view twice); runs are grouped by variant
(``meta.variant``) and then by the summary's ``status``, so a diverged or interrupted run is a
group of its own, never inside its variant's seed band. Every panel, column and filter names a
key the runs log (``tests/tracking/test_dashboards.py`` decodes real offline runs to check it):

* a saved **workspace** (:func:`workspace_spec`): the loss curves (mean line, min-max band over
  seeds) and final-loss bars; parallel coordinates where two or more axes vary; a section for
  each other logged metric family (validation perplexity and bits, learning rate, throughput,
  gradient norms, and any other prefix); the length-extrapolation bars where the runs have
  them. The x axis is ``trainer/global_step``, or the training tokens seen (``tokens``) when
  the runs differ in tokens per step (e.g. a batch-size axis). A panel shows up to as many
  runs/groups as the study has runs (W&B's default, 10, would cut groups silently). The run
  table pins the axes, seed, status, W&B state, final and best loss and tags.
* a W&B **Report** (:func:`report_spec`) of the report's blocks (:class:`Item`): its text as
  Markdown, the runs' figures as live panel grids over the study's runs (loss curves by
  variant with seed bands, final-loss bars with their seed range, parallel coordinates,
  length extrapolation; other figures as the report run's images), the claims and verdicts as
  the report run's W&B Tables, the run table (axes, seed, status, final loss). Its run sets
  name the entity and project; serializing a ``Runset`` that names them asks the server for
  the project's internal id, so the spec is built without and the names are set on the
  serialized model (``ablate dashboard`` saves it, and the library looks the id up then).

``ablate report`` writes both as JSON beside ``report.md`` (:func:`write_specs`): the models'
own serialization, the same payload a save sends, with fixed panel and run-set ids so that two
reports of the same store give the same files. ``ablate dashboard`` (``views``) saves them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.tracking.ids import REPORT_JOB_TYPE, SEED, STEP, TRAIN_JOB_TYPE, VARIANT

WORKSPACE_FILE = "wandb_workspace.json"
REPORT_FILE = "wandb_report.json"
BAND = {"groupby_aggfunc": "mean", "groupby_rangefunc": "minmax"}
STATUS = "status"
"""The summary key of how a run (or its last attempt) ended: ``running``, ``completed``,
``diverged``, ``failed``, ``interrupted`` (``ablate.tracking.runs``)."""
MIN_RUNS = 10
"""W&B's default number of runs (or groups) a panel shows."""
FAMILY_TITLES = {
    "val": "Validation perplexity and bits",
    "lr": "Learning rate",
    "perf": "Throughput",
    "grad_norm": "Gradient norms",
}
"""Section titles of the metric families a run logs (the key's first ``/`` part); another
family is titled by its prefix."""
LOSSES = ("val/loss", "train/loss")


@dataclass(frozen=True)
class StudyView:
    """What the views show of a study, in plain values."""

    name: str
    entity: str
    """The W&B entity its runs log to; empty: the login's default, filled in when saved."""
    project: str
    axes: list[str]
    """The axis keys (dotted config keys, e.g. ``model.norm_placement``, or ``variant`` for a
    study of named variants), in the report's order."""
    varying: list[str] = field(default_factory=list)
    """The axes with more than one value among the runs."""
    axis_names: dict[str, str] = field(default_factory=dict)
    """An axis key -> its display name (default: the key)."""
    loss_unit: str = "nats"
    run_ids: list[str] = field(default_factory=list)
    """The W&B ids of the study's runs in the store: the run set of every view."""
    report_run_id: str = ""
    """The W&B id of the study's report run (its W&B Tables and images)."""
    metrics: list[str] = field(default_factory=list)
    """Every metric the runs logged (``metrics.csv`` names; W&B gets the same rows)."""
    x_axis: str = STEP
    """``trainer/global_step``, or ``tokens`` when the runs differ in tokens per step."""
    lengths: list[str] = field(default_factory=list)
    """The runs' ``val_loss_at_<k>x`` summary keys, in length order."""
    description: str = ""

    @property
    def max_runs(self) -> int:
        """Runs (or groups) a panel shows: every run of the study, at least W&B's default."""
        return max(MIN_RUNS, len(self.run_ids))


@dataclass(frozen=True)
class Item:
    """One block of the Report: ``h1``/``h2`` (a heading), ``markdown`` (text, a table as
    Markdown), ``figure`` (a figure of the report, ``figure`` its file stem, ``text`` its
    caption), ``table`` (the report run's W&B Table ``table``, ``text`` its caption) or ``runs``
    (the study's run table)."""

    kind: str
    text: str = ""
    figure: str = ""
    table: str = ""


# --- keys -----------------------------------------------------------------------------------


def axis_config_key(axis: str) -> str:
    """The config key of an axis: a dotted config key itself; ``variant`` (a study of named
    variants) is ``meta.variant``; another name ``meta.axes.<name>``."""
    if "." in axis:
        return axis
    return VARIANT if axis == "variant" else f"meta.axes.{axis}"


def config_column(key: str) -> str:
    """The run-table column of a dotted config key: W&B keeps a nested config as
    ``{"model": {"value": {...}}}``, so ``model.norm_placement`` is
    ``config:model.value.norm_placement`` (the path a parallel-coordinates axis gets too)."""
    top, _, rest = key.partition(".")
    return f"config:{top}.value.{rest}" if rest else f"config:{top}.value"


def run_columns(view: StudyView) -> list[str]:
    """The run table's pinned columns: the axes, seed, status and W&B state, final and best
    loss, tags."""
    axes = [config_column(axis_config_key(a)) for a in view.axes]
    return [
        *axes,
        config_column(SEED),
        f"summary:{STATUS}",
        "run:state",
        "summary:final_val_loss",
        "summary:best_val_loss",
        "tags:__ALL__",
    ]


def study_filters(view: StudyView) -> list:
    """The run set of the study's runs: its group, job type ``train``, its runs' W&B ids."""
    from wandb_workspaces import expr

    filters = [expr.Metric("Group") == view.name, expr.Metric("JobType") == TRAIN_JOB_TYPE]
    if view.run_ids:
        filters.append(expr.Metric("ID").isin(sorted(view.run_ids)))
    return filters


# --- panels ---------------------------------------------------------------------------------


def _line(view: StudyView, title: str, keys: list[str]):
    import wandb_workspaces.reports.v2 as wr

    return wr.LinePlot(
        title=title, x=view.x_axis, y=list(keys), max_runs_to_show=view.max_runs, **BAND
    )


def _bar(view: StudyView, title: str, keys: list[str], orientation: str = "h"):
    import wandb_workspaces.reports.v2 as wr

    return wr.BarPlot(
        title=title,
        metrics=list(keys),  # a bar chart plots each run's summary value
        orientation=orientation,
        max_runs_to_show=view.max_runs,
        max_bars_to_show=view.max_runs,
        **BAND,
    )


def loss_panels(view: StudyView) -> list:
    """``val/loss`` and ``train/loss`` against the x axis, mean and min-max over the seeds of
    each (variant, status) group."""
    unit = view.loss_unit
    titles = {
        "val/loss": f"val/loss ({unit}) on train.eval_batches batches per point",
        "train/loss": f"train/loss ({unit})",
    }
    return [_line(view, titles[k], [k]) for k in LOSSES if k in view.metrics]


def final_loss_panel(view: StudyView):
    return _bar(
        view,
        "final_val_loss per variant, mean and min-max over its seeds (measured once at the "
        "end, final_val_loss_on says on what; not the curve's last point)",
        ["final_val_loss"],
    )


def parallel_panel(view: StudyView):
    """Parallel coordinates over the varying axes, then ``final_val_loss``; None with fewer
    than two varying axes (one axis would repeat the bar chart)."""
    import wandb_workspaces.reports.v2 as wr

    if len(view.varying) < 2:
        return None
    names = view.axis_names
    columns = [
        wr.ParallelCoordinatesPlotColumn(
            metric=wr.Config(axis_config_key(a)), display_name=names.get(a, a)
        )
        for a in view.varying
    ]
    columns.append(wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric("final_val_loss")))
    return wr.ParallelCoordinatesPlot(title="axes -> final_val_loss", columns=columns)


def lengths_panel(view: StudyView):
    if not view.lengths:
        return None
    return _bar(
        view,
        "validation loss at each evaluation length (multiples of seq_len)",
        list(view.lengths),
        orientation="v",
    )


def family_panels(view: StudyView) -> dict[str, list]:
    """Section title -> line plots of one metric family (module doc), in the order of
    :data:`FAMILY_TITLES`, then the other families by name."""
    families: dict[str, list[str]] = {}
    for key in view.metrics:
        if key not in LOSSES:
            families.setdefault(key.split("/")[0], []).append(key)
    order = [f for f in FAMILY_TITLES if f in families] + sorted(set(families) - {*FAMILY_TITLES})
    out = {}
    for family in order:
        keys = sorted(families[family])
        if family == "grad_norm":
            groups = [
                ("gradient norm (before clipping)", [k for k in keys if k.endswith("/global")]),
                ("gradient norm per layer", [k for k in keys if "/layer_" in k]),
                ("gradient norm of each FFN output weight", [k for k in keys if "/ffn_out_" in k]),
            ]
            rest = [k for k in keys if not any(k in g for _, g in groups)]
            groups += [(k, [k]) for k in rest]
            panels = [_line(view, title, ks) for title, ks in groups if ks]
        else:
            panels = [_line(view, k, [k]) for k in keys]
        out[FAMILY_TITLES.get(family, family)] = panels
    return out


def _sections(view: StudyView) -> dict[str, list]:
    """Section name -> panels of the workspace (module doc), in the order they appear."""
    sections: dict[str, list] = {
        "Loss curves (mean, min-max band over the seeds of each variant)": loss_panels(view),
        "Final loss per variant": [final_loss_panel(view)],
    }
    if (parallel := parallel_panel(view)) is not None:
        sections["Axes"] = [parallel]
    if (lengths := lengths_panel(view)) is not None:
        sections["Length extrapolation"] = [lengths]
    sections.update(family_panels(view))
    return {name: panels for name, panels in sections.items() if panels}


def _fix_ids(panels: list, prefix: str) -> None:
    # panel ids are random by default: fixed ones keep the spec the same for the same store
    for i, panel in enumerate(panels):
        panel._id = f"{prefix}-{i}"


# --- the workspace --------------------------------------------------------------------------


def workspace_spec(view: StudyView):
    """The study's saved workspace (module doc), a ``wandb_workspaces`` ``Workspace``."""
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces import expr

    sections = []
    for i, (name, panels) in enumerate(_sections(view).items()):
        _fix_ids(panels, f"{view.name}-{i}")
        sections.append(
            ws.Section(
                name=name,
                panels=panels,
                is_open=True,
                panel_settings=ws.SectionPanelSettings(x_axis=view.x_axis),
            )
        )
    return ws.Workspace(
        entity=view.entity,
        project=view.project,
        name=f"ablate: {view.name}",
        sections=sections,
        settings=ws.WorkspaceSettings(x_axis=view.x_axis, max_runs=view.max_runs),
        runset_settings=ws.RunsetSettings(
            filters=study_filters(view),
            groupby=[expr.Config(VARIANT), expr.Summary(STATUS)],
            order=[expr.Ordering(expr.Summary("final_val_loss"), ascending=True)],
            pinned_columns=run_columns(view),
        ),
    )


# --- the Report -----------------------------------------------------------------------------

LIVE_FIGURES = ("val_loss_curves", "final_val_loss", "length_extrapolation")
"""The report's figures of the runs' own numbers, which the Report shows as live panels."""


def study_runset(view: StudyView, rid: str):
    """A Report run set of the study's runs (module doc), with the id ``rid``."""
    import wandb_workspaces.reports.v2 as wr

    runset = wr.Runset(
        name=f"{view.name} runs",
        filters=study_filters(view),
        groupby=[f"config.{VARIANT}", f"summary.{STATUS}"],
        order=[wr.OrderBy(wr.SummaryMetric("final_val_loss"), ascending=True)],
        pinned_columns=run_columns(view),
    )
    runset._id = rid  # random by default, like panel ids
    return runset


def report_runset(view: StudyView, rid: str):
    """A Report run set of the study's report run, with the id ``rid``."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    runset = wr.Runset(
        name=f"{view.name} report run",
        filters=[
            expr.Metric("Group") == view.name,
            expr.Metric("JobType") == REPORT_JOB_TYPE,
            expr.Metric("ID") == view.report_run_id,
        ],
    )
    runset._id = rid
    return runset


def _grid(view: StudyView, of: str, panels: list, prefix: str, *, hide_run_sets=False):
    """A panel grid of ``panels`` over the study's runs (``of="runs"``) or its report run."""
    import wandb_workspaces.reports.v2 as wr

    _fix_ids(panels, prefix)
    make = study_runset if of == "runs" else report_runset
    runset = make(view, f"{prefix}-{of}")
    return wr.PanelGrid(runsets=[runset], panels=panels, hide_run_sets=hide_run_sets)


def _figure_blocks(view: StudyView, item: Item) -> list:
    import wandb_workspaces.reports.v2 as wr

    stem, prefix = item.figure, f"{view.name}-fig-{item.figure}"
    if stem == "val_loss_curves" and loss_panels(view):
        text = (
            "Live: the loss curves of every run, grouped by variant (mean line, min-max band "
            "over its seeds); a run that diverged or was interrupted is a group of its own, "
            "outside the band. Hover for values, pick runs in the run set below. "
            "report.md's figure shows the 95% t-interval instead."
        )
        return [_grid(view, "runs", loss_panels(view), prefix), wr.MarkdownBlock(text=text)]
    if stem == "final_val_loss":
        panels = [final_loss_panel(view)]
        if (parallel := parallel_panel(view)) is not None:
            panels.append(parallel)
        text = (
            "Live: final_val_loss per variant, mean bar and min-max over its seeds (each seed's "
            "number is in the run table below)"
            + (", and each run across the varying axes" if len(panels) > 1 else "")
            + ". report.md's figure shows the 95% t-interval instead."
        )
        return [_grid(view, "runs", panels, prefix), wr.MarkdownBlock(text=text)]
    if stem == "length_extrapolation" and (lengths := lengths_panel(view)) is not None:
        text = (
            "Live: the validation loss at each evaluation length (multiples of the training "
            "length) per variant, mean bar and min-max over its seeds. report.md's figure "
            "shows the 95% t-interval instead."
        )
        return [_grid(view, "runs", [lengths], prefix), wr.MarkdownBlock(text=text)]
    panel = wr.MediaBrowser(title=stem, media_keys=[f"figures/{stem}"], num_columns=1)
    return [_grid(view, "report", [panel], prefix), wr.MarkdownBlock(text=item.text)]


def _report_blocks(view: StudyView, item: Item) -> list:
    import wandb_workspaces.reports.v2 as wr

    if item.kind == "h1":
        return [wr.H1(text=item.text)]
    if item.kind == "h2":
        return [wr.H2(text=item.text)]
    if item.kind == "figure":
        return _figure_blocks(view, item)
    if item.kind == "table":
        panel = wr.WeavePanelSummaryTable(table_name=item.table, layout=wr.Layout(w=24, h=12))
        prefix = f"{view.name}-table-{item.table}"
        grid = _grid(view, "report", [panel], prefix, hide_run_sets=True)
        return [grid, wr.MarkdownBlock(text=item.text)] if item.text else [grid]
    if item.kind == "runs":
        grid = _grid(view, "runs", [], f"{view.name}-runs")
        return [grid, wr.MarkdownBlock(text=item.text)] if item.text else [grid]
    return [wr.MarkdownBlock(text=item.text)]


def report_spec(view: StudyView, items: list[Item]):
    """The W&B Report of ``items`` (module doc), a ``wandb_workspaces`` ``Report``; its run
    sets name no project (:func:`report_model` sets them)."""
    import wandb_workspaces.reports.v2 as wr

    body = [block for item in items for block in _report_blocks(view, item)]
    return wr.Report(
        entity=view.entity,
        project=view.project,
        title=f"ablate: {view.name}",
        description=(view.description.splitlines() or [""])[0][:250],
        blocks=body,
    )


def report_model(view: StudyView, items: list[Item]):
    """The Report's ``ReportViewspec`` model, every run set naming the study's entity and
    project (module doc: set on the model, so that nothing asks a server)."""
    from wandb_workspaces.reports.v2 import internal

    model = report_spec(view, items)._to_model()
    for block in model.spec.blocks:
        if isinstance(block, internal.PanelGrid):
            for runset in block.metadata.run_sets:
                runset.project = internal.Project(name=view.project, entity_name=view.entity)
    return model


def workspace_json(view: StudyView) -> dict[str, Any]:
    """The workspace as its ``View`` model serializes (what ``Workspace.save`` sends)."""
    model = workspace_spec(view)._to_model()
    return json.loads(model.model_dump_json(by_alias=True, exclude_none=True))


def report_json(view: StudyView, items: list[Item]) -> dict[str, Any]:
    """The Report as its ``ReportViewspec`` model serializes (what ``Report.save`` sends)."""
    model = report_model(view, items)
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
