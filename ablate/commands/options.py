"""What every ``ablate`` command shares: the options spelled the same way everywhere, and the
one-line error of bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ablate.config import ConfigError


def fail(err: Exception, code: int = 2) -> None:
    """Bad input: one line on stderr, exit code 2 (1 for a store that cannot be written)."""
    typer.echo(f"error: {err}", err=True)
    raise typer.Exit(code)


def store_dir(path: Path) -> Path:
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
    typer.Option("--store", envvar="ABLATE_STORE", callback=store_dir, help="Run store directory."),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a config value: key=value (repeatable)."),
]
ProfileOpt = Annotated[
    str | None, typer.Option("--profile", "-p", help="Profile from the study (cpu, gpu).")
]
PluginOpt = Annotated[
    list[str] | None,
    typer.Option("--plugin", help="Import a plugin (module name or .py path) first (repeatable)."),
]
NoProgressOpt = Annotated[
    bool, typer.Option("--no-progress", help="No progress bars (a log file never gets them).")
]
ReportsOpt = Annotated[Path, typer.Option(help="Reports directory.")]
