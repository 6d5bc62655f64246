"""``ablate sync`` and ``ablate dashboard``: a study's W&B runs uploaded, its workspace and
Report saved (:mod:`ablate.tracking.sync`, :mod:`ablate.tracking.views`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ablate.commands.options import ReportsOpt, StoreOpt, fail
from ablate.config import ConfigError

StudyNameArg = Annotated[str, typer.Argument(help="Study name in the store, or its YAML.")]


def sync(
    study: StudyNameArg,
    store: StoreOpt = Path("runs"),
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be uploaded; upload nothing.")
    ] = False,
) -> None:
    """Upload a study's offline W&B runs, its report run included (needs `wandb login`)."""
    from ablate.results import resolve_studies
    from ablate.tracking.mode import WandbUnreachable
    from ablate.tracking.sync import sync_study

    try:
        name = resolve_studies([study], store)[0][0]  # one line for an unknown study
        code = sync_study(store, name, dry_run=dry_run)
    except ConfigError as err:
        fail(err)
    except WandbUnreachable as err:  # what did not happen and how to retry, in one line
        fail(err, 1)
    if code:
        raise typer.Exit(code)


def dashboard(
    study: StudyNameArg,
    store: StoreOpt = Path("runs"),
    out: ReportsOpt = Path("reports"),
) -> None:
    """Save the study's W&B workspace and Report (from `ablate report`); update them next time."""
    from ablate.results import resolve_studies
    from ablate.tracking.mode import WandbUnreachable
    from ablate.tracking.views import save_dashboards

    try:
        name = resolve_studies([study], store)[0][0]  # a study YAML names its study
        record = save_dashboards(store, name, out)
    except ConfigError as err:
        fail(err)
    except WandbUnreachable as err:
        fail(err, 1)
    for kind in ("workspace", "report"):
        typer.echo(f"{record['study']} {kind}: {record[kind]['url']}")
