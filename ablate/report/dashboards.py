"""The study's W&B views from the report's side: the study read from the store as the plain
:class:`~ablate.tracking.specs.StudyView` the specs are built from, and the report's blocks as
the Report's items (``ablate.tracking.specs`` builds and writes the specs; module doc there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ablate.names import display_names, loss_unit
from ablate.report.render import Block, md_table
from ablate.study import read_study_yaml
from ablate.study.results import StudyData
from ablate.tracking import specs
from ablate.tracking.mode import destination, study_tracking
from ablate.tracking.specs import Item, StudyView


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


def study_view(study: StudyData) -> StudyView:
    """What the views show of ``study``; the destination is its runs' tracking config."""
    entity, project = destination(study_tracking(study.path, study.runs["run_id"]))
    return StudyView(
        name=study.name,
        entity=entity,
        project=project,
        axes=list(study.axes),
        axis_names=display_names(study.axes),
        loss_unit=loss_unit(study),
        grid=is_grid(study),
        lengths=study.length_columns,
        layer_norms=_metric_names(study, "grad_norm/layer_"),
        ffn_norms=_metric_names(study, "grad_norm/ffn_out_"),
        description=study.description,
    )


def report_item(block: Block) -> Item:
    """A report block as the Report shows it: a heading, Markdown, or a figure."""
    if block.kind in ("h1", "h2"):
        return Item(block.kind, str(block.content))
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


def workspace_json(study: StudyData) -> dict[str, Any]:
    """The study's workspace spec as JSON (``ablate.tracking.specs.workspace_json``)."""
    return specs.workspace_json(study_view(study))


def write_specs(study: StudyData, blocks: list[Block], folder: Path) -> list[Path]:
    """Write the study's ``wandb_workspace.json`` and ``wandb_report.json`` (mirroring
    ``blocks``, the report's) into ``folder``."""
    return specs.write_specs(study_view(study), [report_item(b) for b in blocks], folder)
