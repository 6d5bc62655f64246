"""``ablate reproduce STUDY``: retrain a few archived runs with today's code
(:mod:`ablate.execution.reproduce`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ablate.commands.options import ReportsOpt, fail
from ablate.config import ConfigError


def reproduce(
    study: Annotated[str, typer.Argument(help="Study name (or its YAML) with an archived store.")],
    runs: Annotated[int, typer.Option("--runs", "-k", min=1, help="How many runs to retrain.")] = 2,
    run_id: Annotated[
        list[str] | None, typer.Option("--run", help="Retrain this run id (repeatable).")
    ] = None,
    reports: ReportsOpt = Path("reports"),
    store: Annotated[
        Path | None,
        typer.Option(help="Read the runs from this store instead of the report's archive."),
    ] = None,
) -> None:
    """Retrain k archived runs of a study with today's code and say, per run, whether the
    numbers are identical, within 1e-4 nats or different (reports/<study>/reproduce/runs.csv,
    which the report reads)."""
    from ablate.execution.reproduce import reproduce_study
    from ablate.study import read_study_yaml

    try:
        name = study
        if study.endswith((".yaml", ".yml")):
            name = str(read_study_yaml(Path(study)).get("name") or Path(study).stem)
        path = reproduce_study(name, k=runs, runs=run_id or [], reports=reports, store=store)
    except ConfigError as err:
        fail(err)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    typer.echo(f"wrote {path}: `ablate report {name}` puts it in the report")
