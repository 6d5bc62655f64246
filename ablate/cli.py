"""The ``ablate`` command line: each command parses options and calls one plain function."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ablate.config import ConfigError

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
StoreOpt = Annotated[
    Path, typer.Option("--store", envvar="ABLATE_STORE", help="Run store directory.")
]


def fail(err: Exception) -> None:
    """Bad input: one line on stderr, exit code 2."""
    typer.echo(f"error: {err}", err=True)
    raise typer.Exit(2)


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
    smoke: Annotated[
        bool,
        typer.Option(
            help="2 CPU steps of every variant into a throwaway store; exit 1 on a failure."
        ),
    ] = False,
) -> None:
    """Expand a study into runs and train every run not yet finished (resumable)."""
    from ablate.runner import run_study

    if smoke:
        from ablate.smoke import smoke_study

        try:
            rows = smoke_study(study, profile=profile, overrides=set_ or [])
        except ConfigError as err:
            fail(err)
        if any(r["status"] != "completed" for r in rows):
            raise typer.Exit(1)
        return
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

    store_status(store, study)


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
    gpu: Annotated[
        bool,
        typer.Option(help="The GPU acceptance bench (reports/bench_gpu.md); no CUDA: says so."),
    ] = False,
) -> None:
    """Measure framework overhead, model speed, time-to-quality and efficiency."""
    if gpu:
        from ablate.bench.gpu import run_gpu_bench

        default = out == Path("reports/bench.md")
        run_gpu_bench(quick=quick, out=Path("reports/bench_gpu.md") if default else out)
        return
    from ablate.bench import run_bench

    run_bench(quick=quick, out=out)


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())
