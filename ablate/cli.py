"""The ``ablate`` command line: each command parses options and calls one plain function."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ablate.config import ConfigError
from ablate.store import StoreWriteError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Controlled ablation studies on one configurable transformer language model.",
)

SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a config value: key=value (repeatable)."),
]


def fail(err: Exception, code: int = 2) -> None:
    """Bad input: one line on stderr, exit code 2 (1 for a store that cannot be written)."""
    typer.echo(f"error: {err}", err=True)
    raise typer.Exit(code)


def _store_dir(path: Path) -> Path:
    """``--store`` must be a directory or not exist yet (it is created on the first run)."""
    if path.exists() and not path.is_dir():
        fail(
            ConfigError(
                "is not a directory (the run store is a folder)", key=str(path), source="--store"
            )
        )
    return path


StoreOpt = Annotated[
    Path,
    typer.Option(
        "--store", envvar="ABLATE_STORE", callback=_store_dir, help="Run store directory."
    ),
]


@app.command()
def train(
    config: Annotated[
        Path | None, typer.Argument(help="Run config YAML (sections model/data/optim/...).")
    ] = None,
    set_: SetOpt = None,
    store: StoreOpt = Path("runs"),
    name: Annotated[str, typer.Option(help="Study folder to store the run under.")] = "train",
    no_progress: Annotated[bool, typer.Option("--no-progress")] = False,
) -> None:
    """Train one run and print its validation loss."""
    from ablate.commands import train_one

    try:
        summary = train_one(config, set_ or [], store=store, study=name, progress=not no_progress)
    except ConfigError as err:
        fail(err)
    except StoreWriteError as err:  # e.g. a full disk: one line, not a chained traceback
        fail(err, 1)
    if summary["status"] == "failed":
        raise typer.Exit(1)


@app.command()
def run(
    study: Annotated[Path, typer.Argument(help="Study YAML, e.g. studies/norm_placement.yaml.")],
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", help="Profile from the study (cpu, gpu).")
    ] = None,
    set_: SetOpt = None,
    store: StoreOpt = Path("runs"),
    workers: Annotated[int, typer.Option(min=1, help="Runs trained in parallel.")] = 1,
    no_progress: Annotated[bool, typer.Option("--no-progress")] = False,
) -> None:
    """Expand a study into runs and train every run not yet finished (resumable)."""
    from ablate.runner import run_study

    try:
        results = run_study(
            study,
            profile=profile,
            overrides=set_ or [],
            store=store,
            workers=workers,
            progress=not no_progress,
        )
    except ConfigError as err:
        fail(err)
    except StoreWriteError as err:  # e.g. a full disk: one line, not a chained traceback
        fail(err, 1)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if any(r.get("status") == "failed" for r in results):
        raise typer.Exit(1)


@app.command()
def plan(
    study: Annotated[Path, typer.Argument(help="Study YAML.")],
    profile: Annotated[str | None, typer.Option("--profile", "-p")] = None,
    set_: SetOpt = None,
    store: StoreOpt = Path("runs"),
) -> None:
    """Print the expanded runs of a study (name, id, status, key params) without training."""
    from ablate.runner import plan_study

    try:
        plan_study(study, profile=profile, overrides=set_ or [], store=store)
    except ConfigError as err:
        fail(err)


@app.command()
def status(
    study: Annotated[
        str | None, typer.Argument(help="Only this study (its name in the store).")
    ] = None,
    store: StoreOpt = Path("runs"),
) -> None:
    """List the studies in the store and the state of their runs."""
    from ablate.runner import store_status

    try:
        store_status(store, study)
    except ConfigError as err:
        fail(err)


@app.command()
def report(
    studies: Annotated[
        list[str] | None, typer.Argument(help="Study names in the store or study YAMLs.")
    ] = None,
    store: StoreOpt = Path("runs"),
    out: Annotated[Path, typer.Option(help="Reports directory.")] = Path("reports"),
) -> None:
    """Build comparison reports (tables, significance, figures) from the run store."""
    from ablate.report import build_reports

    try:
        build_reports(studies or [], store=store, out=out)
    except ConfigError as err:
        fail(err)


@app.command()
def bench(
    quick: Annotated[bool, typer.Option(help="Small sizes: a smoke test.")] = False,
    out: Annotated[Path, typer.Option(help="Where to write the report.")] = Path(
        "reports/bench.md"
    ),
) -> None:
    """Measure framework overhead, model speed, time-to-quality and efficiency."""
    from ablate.bench import run_bench

    run_bench(quick=quick, out=out)


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())
