"""``ablate dashboard STUDY``: save the study's W&B workspace and Report, then update them.

It saves the specs ``ablate report`` wrote (``reports/<study>/wandb_workspace.json`` and
``wandb_report.json``: what was read and diffed is what is saved), with the login's default
entity where the study (or a Report run set) names none. The Report's run sets name their
project, whose internal id the library asks the server for while saving; the project is made
first if no run was synced to it yet. A save of a new view creates a new one every time, so the
saved views' ids and URLs are recorded in the store (``<store>/<study>/wandb_views.json``) and
the next ``ablate dashboard`` updates those views instead of making duplicates.

The server must answer within ``$ABLATE_WANDB_TIMEOUT_S`` first (``mode.check_server``: one
line saying nothing was saved and how to retry), and every API request waits that long at most
(``WANDB_HTTP_TIMEOUT``, W&B's own setting, unless the user set it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ablate.config import ConfigError
from ablate.store.rundir import atomic_write_json, read_json
from ablate.tracking.mode import check_server, wandb_logged_in, wandb_timeout
from ablate.tracking.specs import REPORT_FILE, WORKSPACE_FILE

VIEWS_FILE = "wandb_views.json"


def _spec(reports: Path, study: str, name: str) -> dict[str, Any]:
    path = Path(reports) / study / name
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"no dashboard spec: run `ablate report {study}` first", source=path
        ) from None
    except ValueError as err:
        raise ConfigError(f"not a JSON spec ({err})", source=path) from None


def _save_workspace(spec: dict[str, Any], entity: str, saved: dict[str, Any]) -> dict[str, Any]:
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces.workspaces import internal

    view = internal.View.model_validate({**spec, "entity": spec.get("entity") or entity})
    workspace = ws.Workspace._from_model(view)
    if saved.get("id"):  # an update of the view saved before, not a new one
        workspace._internal_name, workspace._internal_id = saved["name"], saved["id"]
    workspace.save()
    return {"id": workspace._internal_id, "name": workspace._internal_name, "url": workspace.url}


def report_object(spec: dict[str, Any], entity: str):
    """The ``wandb_workspaces`` ``Report`` of a ``wandb_report.json`` spec, with ``entity``
    where the spec (or a run set of it) names none, and every panel's layout as the spec has
    it (the library's reader drops a W&B Table panel's). Serializing it asks the server for
    the run sets' project ids."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.reports.v2 import internal

    model = internal.ReportViewspec.model_validate(spec)
    if not model.project.entity_name:
        model.project.entity_name = entity
    layouts = {}
    for block in model.spec.blocks:
        if isinstance(block, internal.PanelGrid):
            for runset in block.metadata.run_sets:
                if runset.project is not None and not runset.project.entity_name:
                    runset.project.entity_name = entity
            for panel in block.metadata.panel_bank_section_config.panels:
                layouts[panel.id] = panel.layout
    report = wr.Report._from_model(model)
    for block in report.blocks:
        for panel in getattr(block, "panels", None) or []:
            if layouts.get(panel._id) is not None:
                panel.layout = wr.Layout._from_model(layouts[panel._id])
    return report


def _save_report(spec: dict[str, Any], entity: str, saved: dict[str, Any]) -> dict[str, Any]:
    import wandb

    report = report_object(spec, entity)
    api = wandb.Api()
    if not any(p.name == report.project for p in api.projects(report.entity)):
        # the run sets name the project, and serializing them asks for it: make it first
        # (Report.save would, but only after serializing)
        api.create_project(report.project, report.entity)
    report.id = saved.get("id") or ""
    report.save()
    return {"id": report.id, "url": report.url}


def save_dashboards(store: Path, study: str, reports: Path = Path("reports")) -> dict[str, Any]:
    """Save (or update) the workspace and Report of ``study`` (a name in the store); returns
    the record written to ``<store>/<study>/wandb_views.json``. ``ConfigError`` (one line,
    nothing saved) for missing specs or no W&B login."""
    specs = (_spec(reports, study, WORKSPACE_FILE), _spec(reports, study, REPORT_FILE))
    if not wandb_logged_in():
        raise ConfigError(
            "no W&B login (run `wandb login` or set WANDB_API_KEY); nothing saved",
            source=f"ablate dashboard {study}",
        )
    check_server("nothing saved", f"ablate dashboard {study}")
    # every API request of this process, the workspaces library's included (read by wandb
    # as it is imported)
    os.environ.setdefault("WANDB_HTTP_TIMEOUT", str(max(1, round(wandb_timeout()))))
    import wandb

    entity = wandb.Api().default_entity or ""
    path = Path(store) / study / VIEWS_FILE
    record = read_json(path) or {}
    record["study"] = study
    record["workspace"] = _save_workspace(specs[0], entity, record.get("workspace") or {})
    atomic_write_json(path, record)  # kept even if the Report fails next
    record["report"] = _save_report(specs[1], entity, record.get("report") or {})
    atomic_write_json(path, record)
    return record
