"""``ablate dashboard STUDY``: save the study's W&B workspace and Report, then update them.

It saves the specs ``ablate report`` wrote (``reports/<study>/wandb_workspace.json`` and
``wandb_report.json``: what was read and diffed is what is saved), with the login's default
entity where the study names none. A save of a new view creates a new one every time, so the
saved views' ids and URLs are recorded in the store (``<store>/<study>/wandb_views.json``) and
the next ``ablate dashboard`` updates those views instead of making duplicates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ablate.config import ConfigError
from ablate.report.dashboards import REPORT_FILE, WORKSPACE_FILE
from ablate.store.rundir import atomic_write_json, read_json
from ablate.study.results import resolve_studies
from ablate.training.tracking import wandb_logged_in

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


def _save_report(spec: dict[str, Any], entity: str, saved: dict[str, Any]) -> dict[str, Any]:
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.reports.v2 import internal

    project = spec.get("project") or {}
    if not project.get("entityName"):
        spec = {**spec, "project": {**project, "entityName": entity}}
    report = wr.Report._from_model(internal.ReportViewspec.model_validate(spec))
    report.id = saved.get("id") or ""
    report.save()
    return {"id": report.id, "url": report.url}


def save_dashboards(store: Path, study: str, reports: Path = Path("reports")) -> dict[str, Any]:
    """Save (or update) the study's workspace and Report; returns the record written to
    ``<store>/<study>/wandb_views.json``. ``ConfigError`` (one line, nothing saved) for an
    unknown study, missing specs or no W&B login."""
    study = resolve_studies([study], Path(store))[0][0]  # a study YAML names its study
    specs = (_spec(reports, study, WORKSPACE_FILE), _spec(reports, study, REPORT_FILE))
    if not wandb_logged_in():
        raise ConfigError(
            "no W&B login (run `wandb login` or set WANDB_API_KEY); nothing saved",
            source=f"ablate dashboard {study}",
        )
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
