"""The ``ablate`` command line: each command parses options and calls one plain function.

``ablate run STUDY`` trains a study, ``ablate run MODE STUDY`` runs one of its modes (confirm,
until-decided, smoke); the commands beside the flow (bench, sync, dashboard, reproduce) are in
:mod:`ablate.commands`, with the options every command shares."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ablate.commands.bench import bench
from ablate.commands.options import (
    NoProgressOpt,
    PluginOpt,
    ProfileOpt,
    ReportsOpt,
    SetOpt,
    StoreOpt,
    fail,
)
from ablate.commands.reproduce import reproduce
from ablate.commands.run import (
    STUDY,
    ExecOpt,
    ExecutorOptOpt,
    RerunStaleOpt,
    RunsPerGpuOpt,
    StudyArg,
    UnregisteredOpt,
    WorkersOpt,
    run_group,
    run_help,
    run_options,
    train_with,
)
from ablate.commands.sync import dashboard, sync
from ablate.config import ConfigError
from ablate.store import StoreWriteError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Controlled ablation studies on one configurable transformer language model.",
)
# the help lists the commands in the order of the flow, a panel per step
BEFORE, AFTER, WANDB = "Before the runs", "After the runs", "W&B"


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

run_app = run_group(
    "Train a study's runs (ablate run STUDY), or one of its modes (ablate run MODE STUDY)."
)
app.add_typer(run_app, name="run")


@run_app.command(STUDY, hidden=True, context_settings={"help_option_names": []})
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
    help_: Annotated[
        bool, typer.Option("--help", is_eager=True, callback=run_help, help="Show this message.")
    ] = False,
) -> None:
    """Expand a study into runs and train every run not yet finished (resumable)."""
    from ablate.execution.runner import run_study

    executor_of = (executor, executor_opt, workers, runs_per_gpu)
    train_with(
        lambda: run_study(
            study,
            **run_options(profile, set_, store, no_progress, plugin, rerun_stale, executor_of),
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

    executor_of = (executor, executor_opt, workers, runs_per_gpu)
    train_with(
        lambda: confirm(
            study,
            None if seeds is None else check_n(seeds, "--seeds"),
            unregistered=unregistered,
            **run_options(profile, set_, store, no_progress, plugin, rerun_stale, executor_of),
        )
    )


@run_app.command("until-decided")
def run_until_decided(
    study: StudyArg,
    confirm: Annotated[
        bool,
        typer.Option(
            "--confirm",
            help="The first look on confirmation seeds (the registered ones; a registered "
            "design needs it), every added seed one too.",
        ),
    ] = False,
    seeds: Annotated[
        str | None,
        typer.Option(help="With --confirm --unregistered: the first look's fresh seeds (3)."),
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

    executor_of = (executor, executor_opt, workers, runs_per_gpu)
    train_with(
        lambda: decide(
            study,
            max_looks=_whole(max_looks, "--max-looks"),
            seeds_per_look=None
            if seeds_per_look is None
            else _whole(seeds_per_look, "--seeds-per-look"),
            confirm=_confirm_seeds(confirm, seeds),
            unregistered=unregistered,
            **run_options(profile, set_, store, no_progress, plugin, rerun_stale, executor_of),
        )
    )


def _whole(raw: str, key: str) -> int:
    """``raw`` as a whole number >= 1, else a one-line ConfigError naming ``key``."""
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"must be a whole number, got {raw!r}", key=key) from None
    if value < 1:
        raise ConfigError(f"must be at least 1, got {value}", key=key)
    return value


def _confirm_seeds(confirm: bool, seeds: str | None) -> int | None:
    """``--confirm [--seeds N]`` of ``until-decided``: the first look's confirmation seeds (3
    unless given; a registered design trains its own), None without ``--confirm``."""
    from ablate.execution.confirm import DEFAULT_CONFIRM, check_n

    if seeds is not None and not confirm:
        raise ConfigError("counts confirmation seeds: add --confirm", key="--seeds")
    return check_n(seeds or DEFAULT_CONFIRM, "--seeds") if confirm else None


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


@app.command(rich_help_panel=BEFORE)
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


@app.command(rich_help_panel=BEFORE)
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
        bool,
        typer.Option(
            "--confirm",
            help="Only the runs `ablate run confirm` would train (with --seeds N: "
            "`run confirm --seeds N`), and their time.",
        ),
    ] = False,
    seeds: Annotated[
        str | None, typer.Option(help="With --confirm: seeds per arm, as run confirm takes it.")
    ] = None,
    unregistered: Annotated[
        bool, typer.Option(help="With --confirm: fresh seeds without a registration.")
    ] = False,
) -> None:
    """Print the expanded runs of studies (name, id, status, key params, time) without
    training; check their datasets as run does."""
    timing = {"estimate": not no_estimate, "workers": workers, "remeasure": remeasure}
    try:
        if confirm:
            if flops:
                raise ConfigError("prices a whole study; --confirm times one here", key="--flops")
            from ablate.execution.confirm import check_n, plan_confirmations
            from ablate.execution.runner import StudyArgs

            args = [StudyArgs(p, profile, tuple(set_ or []), tuple(plugin or [])) for p in studies]
            n = None if seeds is None else check_n(seeds, "--seeds")
            plan_confirmations(args, n, store=store, unregistered=unregistered, **timing)
        elif seeds is not None:
            raise ConfigError("counts confirmation seeds: add --confirm", key="--seeds")
        elif flops:
            from ablate.execution.tables import plan_flops

            plan_flops(studies, profile, set_ or [], plugin or [], tflops)
        else:
            from ablate.execution.tables import plan_studies

            plugins, overrides = plugin or [], set_ or []
            plan_studies(
                studies,
                profile=profile,
                overrides=overrides,
                plugins=plugins,
                store=store,
                **timing,
            )
    except ConfigError as err:
        fail(err)


@app.command(rich_help_panel=AFTER)
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


@app.command(rich_help_panel=AFTER)
def report(
    studies: Annotated[
        list[str] | None, typer.Argument(help="Study names in the store or study YAMLs.")
    ] = None,
    store: StoreOpt = Path("runs"),
    out: ReportsOpt = Path("reports"),
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


@app.command(rich_help_panel=AFTER)
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


app.command(rich_help_panel=AFTER)(reproduce)
app.command(rich_help_panel=WANDB)(sync)
app.command(rich_help_panel=WANDB)(dashboard)
app.command(rich_help_panel="Benchmarks")(bench)


def main() -> None:  # pragma: no cover - console entry point
    app()
