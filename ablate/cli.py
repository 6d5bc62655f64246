"""The ``ablate`` command line: each command parses options and calls one plain function."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from ablate.config import ConfigError
from ablate.execution.executors import ExecutorFailed
from ablate.store import StoreWriteError


class Commands(TyperGroup):
    """The commands in the order of the flow: ``run`` (a group: the study's runs and its
    modes, registered after the plain commands) right after ``train``."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        first = {"train": 0, "run": 1}
        return sorted(super().list_commands(ctx), key=lambda name: first.get(name, 2))


app = typer.Typer(
    cls=Commands,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Controlled ablation studies on one configurable transformer language model.",
)

SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a config value: key=value (repeatable)."),
]
NoProgressOpt = Annotated[
    bool, typer.Option("--no-progress", help="No progress bars (a log file never gets them).")
]
ProfileOpt = Annotated[
    str | None, typer.Option("--profile", "-p", help="Profile from the study (cpu, gpu).")
]
PluginOpt = Annotated[
    list[str] | None,
    typer.Option("--plugin", help="Import a plugin (module name or .py path) first (repeatable)."),
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
    no_progress: NoProgressOpt = False,
    plugin: PluginOpt = None,
) -> None:
    """Train one run and print its validation loss."""
    from ablate.execution.train_one import train_one

    try:
        summary = train_one(
            config,
            set_ or [],
            store=store,
            study=name,
            progress=not no_progress,
            plugins=plugin or [],
        )
    except ConfigError as err:
        fail(err)
    except StoreWriteError as err:  # e.g. a full disk: one line, not a chained traceback
        fail(err, 1)
    except (KeyboardInterrupt, SystemExit):  # Lightning turns Ctrl-C into SystemExit(1)
        typer.echo("Interrupted: run the same command again to resume from the last checkpoint.")
        raise typer.Exit(130) from None
    if summary["status"] == "failed":
        raise typer.Exit(1)


# --- ablate run: the study's runs, or one of its modes (`ablate run MODE STUDY`) ---------------


class RunModes(TyperGroup):
    """``ablate run STUDY`` trains the study (the default command, shown by ``ablate run
    --help`` with the modes under it); ``ablate run MODE STUDY`` is one of its modes. The old
    spellings ``--smoke``, ``--confirm [N]`` and ``--until-decided`` still pick their mode."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, route_run(args, set(self.commands)))


def route_run(args: list[str], modes: set[str]) -> list[str]:
    """``ablate run``'s arguments with the command to run first: a mode named first, else the
    mode an old flag names, else the study (``--help`` too: it lists the modes)."""
    if not args:
        return [STUDY_COMMAND, "--help"]
    if args[0] in modes:
        return args
    if "--until-decided" in args:
        return ["until-decided", *(a for a in args if a != "--until-decided")]
    if "--smoke" in args:
        return ["smoke", *(a for a in args if a != "--smoke")]
    if "--confirm" in args:
        i = args.index("--confirm")
        value = args[i + 1] if i + 1 < len(args) else "-"
        if value.startswith("-") or value.endswith((".yaml", ".yml")):  # --confirm alone
            value, rest = DEFAULT_CONFIRM, args[:i] + args[i + 1 :]
        else:
            rest = args[:i] + args[i + 2 :]
        return ["confirm", *rest, *([] if value == DEFAULT_CONFIRM else ["--seeds", value])]
    return [STUDY_COMMAND, *args]


STUDY_COMMAND = "study"
"""The hidden name of ``ablate run STUDY`` (the default command of the group)."""


class _TopContext(typer.Context):
    @property
    def command_path(self) -> str:  # `ablate run`, not `ablate run study`
        return super().command_path.strip()


class RunStudyCommand(TyperCommand):
    """``ablate run STUDY``: its usage and help read as ``ablate run``'s; ``--help`` adds the
    modes and, after ``--executor NAME``, that executor's ``--executor-opt`` keys."""

    context_class = _TopContext

    def make_context(self, info_name, args, parent=None, **extra) -> typer.Context:
        return super().make_context(None, args, parent=parent, **extra)

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        ctx.meta["ablate.args"] = list(args)  # --help shows the options of the --executor given
        return super().parse_args(ctx, args)

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        super().format_help(ctx, formatter)
        modes = ctx.parent.command.commands if ctx.parent else {}
        rows = [(name, cmd.get_short_help_str(80)) for name, cmd in modes.items() if not cmd.hidden]
        print_panel("Modes: ablate run MODE STUDY [OPTIONS] (ablate run MODE --help)", rows)
        name = executor_given(ctx.meta.get("ablate.args", []))
        if name is None:
            return
        from ablate.execution.executors import options_help

        try:
            rows = [(key, _with_default(doc, dflt)) for key, dflt, doc in options_help(name)]
        except ConfigError as err:
            fail(err)
        print_panel(f"{name} options: --executor {name} --executor-opt KEY=VALUE", rows)


def _with_default(doc: str, default: str) -> str:
    return doc if default == "-" else f"{doc} [default: {default}]"


def executor_given(args: list[str]) -> str | None:
    """The value of ``--executor``/``-e`` in ``args`` (None: not given)."""
    for i, flag in enumerate(args):
        if flag in ("--executor", "-e") and i + 1 < len(args):
            return args[i + 1]
        if flag.startswith("--executor="):
            return flag.partition("=")[2]
    return None


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


run_app = typer.Typer(
    cls=RunModes,
    no_args_is_help=True,
    help="Train a study's runs (ablate run STUDY), or one of its modes (ablate run MODE STUDY).",
)
app.add_typer(run_app, name="run")

ExecOpt = Annotated[
    str,
    typer.Option(
        "--executor", "-e", help="Where runs train: local, ray, slurm (or an installed plugin's)."
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


def _train(start: Callable[[], list[dict[str, Any]]]) -> None:
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


def _executor(
    name: str, pairs: list[str] | None, workers: str | None, runs_per_gpu: int | None
) -> Any:
    """The executor's options from the command line (a bad one is a ConfigError naming it)."""
    from ablate.execution.executors import parse_options

    return parse_options(name, pairs or [], workers=workers, runs_per_gpu=runs_per_gpu)


def _run_options(
    profile: str | None,
    set_: list[str] | None,
    store: Path,
    no_progress: bool,
    plugin: list[str] | None,
    rerun_stale: bool,
) -> dict[str, Any]:
    """The keyword arguments of ``run_study`` (``runner.run_options``) but the executor."""
    return {
        "profile": profile,
        "overrides": set_ or [],
        "store": store,
        "progress": not no_progress,
        "plugins": plugin or [],
        "rerun_stale": rerun_stale,
    }


@run_app.command(STUDY_COMMAND, cls=RunStudyCommand, hidden=True)
def run(
    study: StudyArg,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    store: StoreOpt = Path("runs"),
    executor: ExecOpt = "local",
    executor_opt: ExecutorOptOpt = None,
    workers: WorkersOpt = None,
    runs_per_gpu: RunsPerGpuOpt = None,
    plugin: PluginOpt = None,
    rerun_stale: RerunStaleOpt = False,
    no_progress: NoProgressOpt = False,
) -> None:
    """Expand a study into runs and train every run not yet finished (resumable)."""
    from ablate.execution.runner import run_study

    _train(
        lambda: run_study(
            study,
            executor=_executor(executor, executor_opt, workers, runs_per_gpu),
            **_run_options(profile, set_, store, no_progress, plugin, rerun_stale),
        )
    )


@run_app.command("confirm")
def run_confirm(
    study: StudyArg,
    seeds: Annotated[
        str | None,
        typer.Option(
            help="Seeds per arm: the registration's number (default: the registered seeds), or "
            "with --unregistered N fresh ones (default 3)."
        ),
    ] = None,
    unregistered: UnregisteredOpt = False,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    store: StoreOpt = Path("runs"),
    executor: ExecOpt = "local",
    executor_opt: ExecutorOptOpt = None,
    workers: WorkersOpt = None,
    runs_per_gpu: RunsPerGpuOpt = None,
    plugin: PluginOpt = None,
    rerun_stale: RerunStaleOpt = False,
    no_progress: NoProgressOpt = False,
) -> None:
    """Train the registered confirmation seeds of the claims' arms only (`ablate register`
    first), each run marked confirm."""
    from ablate.execution.confirm import check_n
    from ablate.execution.confirm import run_confirm as confirm

    _train(
        lambda: confirm(
            study,
            None if seeds is None else check_n(seeds, "--seeds"),
            unregistered=unregistered,
            executor=_executor(executor, executor_opt, workers, runs_per_gpu),
            **_run_options(profile, set_, store, no_progress, plugin, rerun_stale),
        )
    )


@run_app.command("until-decided")
def run_until_decided(
    study: StudyArg,
    confirm: Annotated[
        str | None,
        typer.Option(
            "--confirm",
            help="The first look on N fresh confirmation seeds (--confirm alone: the "
            "registered ones; a registered design needs it), every added seed one too.",
        ),
    ] = None,
    max_looks: Annotated[str, typer.Option(help="Planned looks at most (>= 1).")] = "3",
    seeds_per_look: Annotated[
        str | None, typer.Option(help="Seeds added per look (default: the first look's).")
    ] = None,
    unregistered: UnregisteredOpt = False,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    store: StoreOpt = Path("runs"),
    executor: ExecOpt = "local",
    executor_opt: ExecutorOptOpt = None,
    workers: WorkersOpt = None,
    runs_per_gpu: RunsPerGpuOpt = None,
    plugin: PluginOpt = None,
    rerun_stale: RerunStaleOpt = False,
    no_progress: NoProgressOpt = False,
) -> None:
    """Sequential looks on the claims: add seeds to inconclusive claims' arms, spending alpha
    (O'Brien-Fleming), until decided or --max-looks."""
    from ablate.execution.decide import run_until_decided as decide

    _train(
        lambda: decide(
            study,
            **_sequential_options(max_looks, seeds_per_look, confirm),
            unregistered=unregistered,
            executor=_executor(executor, executor_opt, workers, runs_per_gpu),
            **_run_options(profile, set_, store, no_progress, plugin, rerun_stale),
        )
    )


@run_app.command("smoke")
def run_smoke(
    study: StudyArg,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    plugin: PluginOpt = None,
) -> None:
    """2 CPU steps of every variant into a throwaway store; exit 1 on a failure."""
    from ablate.execution.smoke import smoke_study

    try:
        rows = smoke_study(study, profile=profile, overrides=set_ or [], plugins=plugin or [])
    except ConfigError as err:
        fail(err)
    if any(r["status"] != "completed" for r in rows):
        raise typer.Exit(1)


def _whole(raw: str | None, key: str, least: int) -> int | None:
    """``raw`` as a whole number >= ``least`` (None stays None), else a one-line ConfigError."""
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"must be a whole number, got {raw!r}", key=key) from None
    if value < least:
        raise ConfigError(f"must be at least {least}, got {value}", key=key)
    return value


def _confirm_n(confirm: str) -> str:
    """``--confirm`` alone with --until-decided: 3 seeds at the first look."""
    return "3" if confirm == DEFAULT_CONFIRM else confirm


def _sequential_options(max_looks: str, seeds_per_look: str | None, confirm: str | None) -> dict:
    """``--until-decided``'s options, checked (a bad one is a ConfigError naming it)."""
    from ablate.execution.confirm import check_n

    return {
        "max_looks": _whole(max_looks, "--max-looks", 1),
        "seeds_per_look": _whole(seeds_per_look, "--seeds-per-look", 1),
        "confirm": None if confirm is None else check_n(_confirm_n(confirm)),
    }


@app.command()
def register(
    study: Annotated[Path, typer.Argument(help="Study YAML, e.g. studies/norm_placement.yaml.")],
    seeds: Annotated[
        int, typer.Option(help="Confirmation seeds per arm (per look with --looks).")
    ] = 3,
    looks: Annotated[
        int | None,
        typer.Option(min=1, help="A sequential design (ablate run until-decided): K looks."),
    ] = None,
    note: Annotated[str, typer.Option(help="Why this design (e.g. its power, its budget).")] = "",
    attempts: Annotated[
        str,
        typer.Option(
            help="How a claim registered here first spends its α over attempts: 1 (all on "
            "one), K (α/K on each of at most K) or halving (α/2, α/4, ...)."
        ),
    ] = "1",
    exploratory: Annotated[
        bool,
        typer.Option(
            "--exploratory",
            help="Register no α share: any seeds will do, the outcomes are exploratory.",
        ),
    ] = False,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    store: StoreOpt = Path("runs"),
    plugin: PluginOpt = None,
) -> None:
    """Write the study's registration (claims, margins, the confirmation design and its fresh
    seeds, each claim's attempt and α share) beside it; commit it before `ablate run confirm`.
    Refuses a design whose seeds cannot decide a claim unless --exploratory."""
    from ablate.claims.registration import spending_option
    from ablate.execution.confirm import Choices, register_study

    try:
        choices = Choices(looks, note, spending_option(attempts), exploratory)
        path = register_study(
            study,
            seeds,
            store=store,
            profile=profile,
            overrides=set_ or [],
            plugins=plugin or [],
            choices=choices,
        )
    except ConfigError as err:
        fail(err)
    import yaml

    for entry in (yaml.safe_load(path.read_text()) or {}).get("claims", []):
        for warning in entry.get("warnings") or []:  # recorded in the file too
            typer.echo(f"warning: {entry.get('id')}: {warning}", err=True)
    typer.echo(f"wrote {path}: commit it (git add {path} && git commit) before confirming")


@app.command()
def plan(
    studies: Annotated[
        list[Path], typer.Argument(help="Study YAMLs, e.g. studies/*.yaml.", show_default=False)
    ],
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    store: StoreOpt = Path("runs"),
    plugin: PluginOpt = None,
    no_estimate: Annotated[
        bool, typer.Option("--no-estimate", help="Skip the measured time estimate.")
    ] = False,
    workers: Annotated[
        str | None,
        typer.Option(help="The time for this many workers, or auto, as ablate run resolves it."),
    ] = None,
    remeasure: Annotated[
        bool,
        typer.Option("--remeasure", help="Probe this machine's step times again (they are kept)."),
    ] = False,
    flops: Annotated[
        bool,
        typer.Option(
            "--flops",
            help="Print FLOPs and GPU minutes per variant and tier instead (no GPU needed), "
            "at the last CUDA probe's measured rate, else the GPU pilot's.",
        ),
    ] = False,
    tflops: Annotated[
        float | None,
        typer.Option(min=0.001, help="With --flops: minutes at this rate (TFLOP/s) instead."),
    ] = None,
    confirm: Annotated[
        str | None,
        typer.Option(
            "--confirm",
            help="Only the runs `ablate run confirm [--seeds N]` would train, and their time "
            "(--confirm alone: the registered seeds).",
        ),
    ] = None,
    unregistered: Annotated[
        bool, typer.Option(help="With --confirm: N fresh seeds without a registration.")
    ] = False,
) -> None:
    """Print the expanded runs of studies (name, id, status, key params, time) without
    training; check their datasets as run does."""
    from ablate.execution.tables import plan_studies

    try:
        if confirm is not None:
            if flops:
                raise ConfigError("prices a whole study; --confirm times one here", key="--flops")
            from ablate.execution.confirm import check_n, plan_confirmations
            from ablate.execution.runner import StudyArgs

            plan_confirmations(
                [StudyArgs(p, profile, tuple(set_ or []), tuple(plugin or [])) for p in studies],
                None if confirm == DEFAULT_CONFIRM else check_n(confirm),
                store=store,
                unregistered=unregistered,
                estimate=not no_estimate,
                workers=workers,
                remeasure=remeasure,
            )
        elif flops:
            plan_flops(studies, profile, set_ or [], plugin or [], tflops)
        else:
            plan_studies(
                studies,
                profile=profile,
                overrides=set_ or [],
                store=store,
                plugins=plugin or [],
                estimate=not no_estimate,
                workers=workers,
                remeasure=remeasure,
            )
    except ConfigError as err:
        fail(err)


def plan_flops(
    studies: list[Path],
    profile: str | None,
    overrides: list[str],
    plugins: list[str],
    tflops: float | None,
) -> None:
    """``ablate plan --flops``: every study validated as for a run except for the device (a
    gpu profile is costed on a laptop), then one FLOPs table in minutes at a measured rate
    (``tflops``: one given), with each tier's total and each study's data reuse."""
    from ablate.execution.flops import Rate, measured_rate, print_flops
    from ablate.execution.tables import make_console
    from ablate.study import load_study

    planned = [
        load_study(p, profile, overrides, plugins=plugins, check_device=False) for p in studies
    ]
    rate = Rate(tflops * 1e12, "--tflops") if tflops else measured_rate()
    print_flops(planned, rate=rate, console=make_console())


@app.command()
def status(
    studies: Annotated[
        list[str] | None,
        typer.Argument(help="Only these studies: names in the store or study YAMLs."),
    ] = None,
    store: StoreOpt = Path("runs"),
) -> None:
    """List the studies in the store and the state of their runs."""
    from ablate.execution.tables import store_status

    try:
        store_status(store, studies or [])
    except ConfigError as err:
        fail(err)


@app.command()
def report(
    studies: Annotated[
        list[str] | None, typer.Argument(help="Study names in the store or study YAMLs.")
    ] = None,
    store: StoreOpt = Path("runs"),
    out: Annotated[Path, typer.Option(help="Reports directory.")] = Path("reports"),
    profile: ProfileOpt = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace a committed report even by a partial build (unfinished runs, fewer "
            "claims decided); without it that build goes to <out>/<study>/partial/.",
        ),
    ] = False,
) -> None:
    """Build comparison reports (tables, significance, figures) from the run store (the runs
    of one profile: --profile where a store holds several). A committed report is never
    replaced by a partial build unless --force."""
    from ablate.report import build_reports

    try:
        build_reports(studies or [], store=store, out=out, profile=profile, force=force)
    except ConfigError as err:
        fail(err)


@app.command()
def reproduce(
    study: Annotated[str, typer.Argument(help="Study name (or its YAML) with an archived store.")],
    runs: Annotated[int, typer.Option("--runs", "-k", min=1, help="How many runs to retrain.")] = 2,
    run_id: Annotated[
        list[str] | None, typer.Option("--run", help="Retrain this run id (repeatable).")
    ] = None,
    reports: Annotated[Path, typer.Option(help="Reports directory.")] = Path("reports"),
    store: Annotated[
        Path | None,
        typer.Option(help="Read the runs from this store instead of the report's archive."),
    ] = None,
) -> None:
    """Retrain k archived runs of a study with today's code and say, per run, whether the
    numbers are identical, within 1e-4 nats or different (reports/<study>/reproduce/runs.csv,
    which the report reads)."""
    from ablate.execution.reproduce import reproduce_study

    name = study
    if study.endswith((".yaml", ".yml")):
        from ablate.study.spec import read_study_yaml

        try:
            name = str(read_study_yaml(Path(study)).get("name") or Path(study).stem)
        except ConfigError as err:
            fail(err)
    try:
        path = reproduce_study(name, k=runs, runs=run_id or [], reports=reports, store=store)
    except ConfigError as err:
        fail(err)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    typer.echo(f"wrote {path}: `ablate report {name}` puts it in the report")


@app.command()
def sync(
    study: Annotated[str, typer.Argument(help="Study name in the store, or its YAML.")],
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


@app.command()
def dashboard(
    study: Annotated[str, typer.Argument(help="Study name in the store, or its YAML.")],
    store: StoreOpt = Path("runs"),
    out: Annotated[Path, typer.Option(help="Reports directory.")] = Path("reports"),
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


@app.command()
def sample(
    run: Annotated[str, typer.Argument(help="Run directory, or a run id in the store.")],
    prompt: Annotated[str, typer.Option(help="Text to continue (default: a newline).")] = "",
    tokens: Annotated[int, typer.Option(min=1, help="Tokens to generate.")] = 200,
    temperature: Annotated[
        float, typer.Option(min=0.0, help="Softmax temperature (0 = greedy).")
    ] = 1.0,
    top_k: Annotated[
        int | None, typer.Option("--top-k", min=1, help="Sample from the k likeliest tokens.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed (same seed, same text).")] = 0,
    store: StoreOpt = Path("runs"),
    plugin: PluginOpt = None,
) -> None:
    """Print text generated by a run's last checkpoint."""
    from ablate.training.sample import sample_run

    try:
        text = sample_run(
            run,
            prompt=prompt,
            tokens=tokens,
            temperature=temperature,
            top_k=top_k,
            seed=seed,
            store=store,
            plugins=plugin or [],
        )
    except ConfigError as err:
        fail(err)
    typer.echo(text)


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
    chaos: Annotated[
        bool,
        typer.Option(
            help="Crash safety: kill -9 workers and drivers of a 24-run study (local and Ray) "
            "until it completes; reports/bench_chaos.md and section 6 of bench.md."
        ),
    ] = False,
    probe: Annotated[
        bool,
        typer.Option(
            help="The probe (reports/bench_probe.md): solo, 4 packed processes, stacks of 1, 4 "
            "and 8, then compiled solo and stack of 8 runs, at the reference gpu shape, and the "
            "verdicts window.sh applies; without CUDA at a tiny shape, CUDA figures 'not "
            "measured'."
        ),
    ] = False,
    compiled: Annotated[
        bool | None,
        typer.Option(
            "--compiled/--no-compiled",
            help="With --probe: measure its compiled rows (default: on CUDA only; on a CPU "
            "inductor's C++ takes minutes).",
        ),
    ] = None,
    section: Annotated[
        str | None,
        typer.Option(
            help="Measure one section of the CPU bench (overhead, speed, quality, efficiency, "
            "study, data, stacked, stepcost, startup, stackone; nanogpt: nanoGPT's procedure on "
            "the reference study's 8 seeds, ~16 min, only when named) and put it into the existing "
            "report."
        ),
    ] = None,
) -> None:
    """Measure framework overhead, model speed, time-to-quality and efficiency."""
    default = out == Path("reports/bench.md")
    if chaos:
        from ablate.bench.chaos import run_chaos

        try:
            run_chaos(quick=quick, out=Path("reports/bench_chaos.md") if default else out)
        except RuntimeError as err:
            fail(err, code=1)
        return
    if probe:
        from ablate.bench.probe import run_probe

        run_probe(Path("reports/bench_probe.md") if default else out, compiled=compiled)
        return
    if gpu:
        from ablate.bench.gpu import run_gpu_bench

        run_gpu_bench(quick=quick, out=Path("reports/bench_gpu.md") if default else out)
        return
    from ablate.bench.cpu import check_section, run_bench

    try:
        check_section(section)
    except ValueError as err:
        fail(err)
    try:
        run_bench(quick=quick, out=out, only=section)
    except ConfigError as err:  # e.g. the data cannot be had offline: one line, nothing written
        fail(err)


DEFAULT_CONFIRM = "registered"
"""``--confirm`` alone: the registration's seeds (3 fresh ones with ``--unregistered``)."""


def optional_values(args: list[str]) -> list[str]:
    """``--confirm`` alone (last, or before another option or the study YAML) means
    ``--confirm registered``: the parser needs every option's value, so it is put in here."""
    out = []
    for i, arg in enumerate(args):
        out.append(arg)
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg == "--confirm" and (
            nxt is None or nxt.startswith("--") or nxt.endswith((".yaml", ".yml"))
        ):
            out.append(DEFAULT_CONFIRM)
    return out


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app(args=optional_values(sys.argv[1:])))
