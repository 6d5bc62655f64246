"""What the commands of ``ablate run`` share: the group that sends ``ablate run STUDY`` to the
command that trains the study, its help (the modes, an executor's options), the old spellings
of the modes (one line naming their command), the options of every mode, and how a mode ends
(its exit codes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from ablate.commands.options import fail
from ablate.config import ConfigError
from ablate.execution.executors import ExecutorFailed
from ablate.store import StoreWriteError

STUDY = "study"
"""The hidden name of ``ablate run STUDY``, the default command of the ``run`` group."""
OLD_FLAGS = ("--until-decided", "--smoke", "--confirm")
"""The flags that picked a mode before the modes were commands (``ablate run STUDY --smoke``),
in the order they won (``--confirm`` was an option of ``--until-decided`` too)."""


class RunGroup(TyperGroup):
    """``ablate run``: a first word that names a mode runs it; anything else (the study, an
    option) goes, with the rest, to the hidden command that trains the study. Click has no
    default subcommand; this is the one place that decides. A mode's old flag is one line
    naming its command."""

    def resolve_command(self, ctx: typer.Context, args: list[str]) -> Any:
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        for flag in OLD_FLAGS:
            if flag in args:
                fail(ConfigError(f"is a command now: ablate run {flag[2:]} STUDY", key=flag))
        return "", self.commands[STUDY], args  # no name: an error's usage reads `ablate run`


def run_group(text: str) -> typer.Typer:
    """The ``run`` group: its own help is the study command's (``--help`` goes to it with
    every option given before the study), as is ``ablate run`` alone."""
    group = typer.Typer(
        cls=RunGroup,
        add_help_option=False,
        invoke_without_command=True,
        context_settings={"ignore_unknown_options": True},
        help=text,
    )
    group.callback()(_alone)
    return group


def _alone(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:  # `ablate run` alone: the study command's help
        ctx.command.commands[STUDY].make_context(STUDY, ["--help"], parent=ctx)


def run_help(ctx: typer.Context, value: bool) -> None:
    """``ablate run --help``: typer's help of ``ablate run STUDY``, read as ``ablate run``'s, then
    the modes and, after ``--executor NAME``, that executor's ``--executor-opt`` keys."""
    if not value or ctx.resilient_parsing:
        return
    group = ctx.parent
    shown = typer.Context(ctx.command, info_name=group.info_name, parent=group.parent)
    ctx.command.get_help(shown)  # typer prints it
    modes = [(name, cmd.get_short_help_str(80)) for name, cmd in group.command.commands.items()]
    print_panel(
        "Modes: ablate run MODE STUDY [OPTIONS] (ablate run MODE --help)",
        [(name, text) for name, text in modes if name != STUDY],
    )
    source = ctx.get_parameter_source("executor")
    if source is not None and source.name == "COMMANDLINE":
        from ablate.execution.executors import options_help

        name = ctx.params["executor"]
        try:
            rows = [(key, with_default(doc, dflt)) for key, dflt, doc in options_help(name)]
        except ConfigError as err:
            fail(err)
        print_panel(f"{name} options: --executor {name} --executor-opt KEY=VALUE", rows)
    raise typer.Exit()


def with_default(doc: str, default: str) -> str:
    return doc if default == "-" else f"{doc} [default: {default}]"


def print_panel(title: str, rows: list[tuple[str, str]]) -> None:
    """A help section after typer's own, in its style."""
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for key, text in rows:
        table.add_row(escape(key), escape(text))
    Console().print(Panel(table, title=title, title_align="left", border_style="dim"))


ExecOpt = Annotated[
    str,
    typer.Option(
        "--executor",
        "-e",
        is_eager=True,  # read by --help after it: `ablate run --executor slurm --help`
        help="Where runs train: local, ray, slurm (or an installed plugin's).",
    ),
]
ExecutorOptOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--executor-opt",
        "-x",
        help="An option of the executor: KEY=VALUE (repeatable; `ablate run --executor NAME "
        "--help` lists them).",
    ),
]
WorkersOpt = Annotated[
    str | None,
    typer.Option(
        help="local: runs trained at once, or auto (default: one per core on a CPU, "
        "GPUs x runs-per-gpu on GPUs; $ABLATE_DEFAULT_WORKERS overrides the default)."
    ),
]
RunsPerGpuOpt = Annotated[
    int | None,
    typer.Option(help="local, ray: runs packed on one GPU, each with 1/k of its memory."),
]
RerunStaleOpt = Annotated[
    bool,
    typer.Option(
        "--rerun-stale", help="Retrain runs made by other model/training code (moved aside)."
    ),
]
UnregisteredOpt = Annotated[
    bool,
    typer.Option(
        "--unregistered",
        help="Without a committed registration (the report calls the outcome exploratory).",
    ),
]
StudyArg = Annotated[Path, typer.Argument(help="Study YAML, e.g. studies/norm_placement.yaml.")]


def train_with(start: Callable[[], list[dict[str, Any]]]) -> None:
    """Run one of ``ablate run``'s modes: bad input is one line (exit 2), a full disk or dying
    workers one line (exit 1), Ctrl-C exit 130, a failed run exit 1."""
    try:
        results = start()
    except ConfigError as err:
        fail(err)
    except (StoreWriteError, ExecutorFailed) as err:
        fail(err, 1)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if any(r.get("status") == "failed" for r in results):
        raise typer.Exit(1)


def run_options(
    profile: str | None,
    set_: list[str] | None,
    store: Path,
    no_progress: bool,
    plugin: list[str] | None,
    rerun_stale: bool,
    executor: tuple[str, list[str] | None, str | None, int | None],
) -> dict[str, Any]:
    """The keyword arguments of ``run_study`` (``runner.run_options``); ``executor``: its name,
    ``--executor-opt`` pairs, ``--workers`` and ``--runs-per-gpu`` (a bad one is a ConfigError
    naming it)."""
    from ablate.execution.executors import parse_options

    name, pairs, workers, runs_per_gpu = executor
    return {
        "profile": profile,
        "overrides": set_ or [],
        "store": store,
        "progress": not no_progress,
        "plugins": plugin or [],
        "rerun_stale": rerun_stale,
        "executor": parse_options(name, pairs or [], workers=workers, runs_per_gpu=runs_per_gpu),
    }
