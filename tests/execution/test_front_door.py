"""``ablate run``'s front door: the everyday options on one screen, the modes as subcommands
(the old flags name them), each executor's options behind ``--executor NAME``, and an
executor added by a package of its own (an entry point), no edit of ablate."""

import re
import textwrap

import pytest
from typer.testing import CliRunner

import ablate.execution.executors as executors
from ablate.cli import app

MODES = {"confirm", "until-decided", "smoke"}


def _help(*args: str) -> str:
    res = CliRunner().invoke(app, ["run", *args, "--help"], env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    return res.output


def _options(text: str, panel: str = "Options") -> list[str]:
    """The flags listed in one of the help's panels."""
    body = text.split(f"─ {panel} ")[1].split("╰")[0]
    return re.findall(r"^│ (-[-\w]+)", body, re.M)


def test_run_help_lists_the_everyday_options_on_one_screen_and_the_modes():
    text = _help()
    options = _options(text)
    assert len(options) <= 15, options
    assert {"--profile", "--set", "--store", "--executor", "--executor-opt", "--workers"} <= set(
        options
    )
    assert not [o for o in options if o.startswith(("--slurm", "--ray", "--confirm", "--smoke"))]
    assert re.search(r"Usage: \S+ run \[OPTIONS\]", text)  # not the hidden command's name
    modes = text.split("─ Modes")[1].split("╰")[0]
    assert all(f"│ {m} " in modes for m in MODES), modes
    assert "partition" not in text  # an executor's options only with --executor of its kind
    assert (
        CliRunner().invoke(app, ["run"]).output == CliRunner().invoke(app, ["run", "--help"]).output
    )


@pytest.mark.parametrize(
    ("executor", "keys"),
    [
        ("local", ["--workers / workers=int|auto", "max_retries=int"]),
        ("ray", ["address=str", "gpus_per_run=int"]),
        ("slurm", ["partition=str", "time=int", "sbatch.KEY=str", "cluster=slurm|local|debug"]),
    ],
)
def test_executor_help_lists_its_options(executor, keys):
    pytest.importorskip("submitit") if executor == "slurm" else None
    text = _help("--executor", executor)
    panel = text.split(f"─ {executor} options")[1].split("╰")[0]
    assert all(k in panel for k in keys), panel
    assert "[default: 60]" in panel if executor == "slurm" else True  # rich markup escaped


def test_each_mode_has_its_own_options():
    confirm = _options(_help("confirm"))
    decide = _options(_help("until-decided"))
    smoke = _options(_help("smoke"))
    assert {"--seeds", "--unregistered"} <= set(confirm) and "--max-looks" not in confirm
    assert {"--confirm", "--max-looks", "--seeds-per-look", "--unregistered"} <= set(decide)
    assert set(smoke) == {"--profile", "--set", "--plugin", "--help"}


@pytest.mark.parametrize(
    ("args", "mode"),
    [
        (["s.yaml", "--smoke", "-p", "gpu"], "smoke"),
        (["s.yaml", "--confirm"], "confirm"),
        (["--confirm", "s.yaml", "--store", "r"], "confirm"),
        (["s.yaml", "--confirm", "5", "--unregistered"], "confirm"),
        (["s.yaml", "--until-decided", "--confirm", "3"], "until-decided"),
    ],
)
def test_an_old_flag_names_its_command_in_one_line(args, mode, tmp_path, monkeypatch):
    """The flags that picked a mode once (``ablate run STUDY --confirm``) are one line, exit
    2, naming the command now; nothing is written."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["run", *args])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"error: --{mode}: is a command now: ablate run {mode} STUDY"
    ]
    assert not list(tmp_path.iterdir())


def test_options_before_the_study_are_the_study_commands(make_study, tmp_path):
    """``ablate run --store DIR STUDY``: the options before the study reach the command that
    trains it (a bad one is its one-line error)."""
    path, store = make_study(), tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", "--store", str(store), "--workers", "0", str(path)])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [
        "error: --workers: Input should be greater than or equal to 1"
    ]
    assert not store.exists()


FAKE = '''
from typing import Literal

from ablate.execution.executors import ExecutorOptions
from ablate.execution.worker import execute_task


class FakeOptions(ExecutorOptions):
    """Trains each task in this process, one at a time, and says so."""

    executor: Literal["fake"] = "fake"
    label: str = "fake"
    """What it calls itself in the header."""

    def where(self, tasks):
        return f"on the {self.label} executor"

    def execute(self, tasks, progress):
        for t in tasks:
            progress.write(f"{self.label}: {t.name}")
            t.report(execute_task(*t.payload(), workers=t.workers), progress)
'''


@pytest.fixture
def fake_executor(tmp_path, monkeypatch):
    """A package installed beside ablate that registers the executor ``fake`` through the
    ``ablate.executors`` entry point, as ``pip install`` would leave it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "fake_ablate_executor.py").write_text(textwrap.dedent(FAKE))
    info = site / "fake_ablate_executor-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-ablate-executor\n")
    (info / "entry_points.txt").write_text(
        "[ablate.executors]\nfake = fake_ablate_executor:FakeOptions\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(executors, "_REGISTERED", dict(executors._REGISTERED))
    return site


def test_an_installed_executor_trains_a_study(make_study, tmp_path, fake_executor):
    path, store = make_study(), tmp_path / "runs"
    assert "fake" in executors.executor_names()
    assert "label=str" in _help("--executor", "fake")
    args = ["run", str(path), "--store", str(store), "--no-progress", "-e", "fake"]
    res = CliRunner().invoke(app, [*args, "-x", "label=borrowed"])
    assert res.exit_code == 0, res.output
    assert (
        "on the borrowed executor" in res.output
        and "borrowed: activation=relu,seed=0" in res.output
    )
    assert res.output.count(": completed") == 2
    again = CliRunner().invoke(app, [*args, "-x", "nope=1"])
    assert again.exit_code == 2
    assert "--executor-opt nope: the fake executor has no option 'nope'" in again.output


def test_the_resume_hint_repeats_the_mode_and_every_option():
    """After a Ctrl-C of ``ablate run confirm``, the command printed resumes the confirmation
    (not the study's exploratory seeds), with the same study, store, executor and plugins."""
    from pathlib import Path

    from ablate.execution.executors import parse_options
    from ablate.execution.runner import Execution, StudyArgs, resume_command

    args = StudyArgs(Path("s.yaml"), "gpu", ("train.max_steps=5",), ("p.py",))
    slurm = parse_options("slurm", ["partition=x", "sbatch.qos=high"])
    how = Execution(Path("r2"), slurm, mode=("confirm", "--seeds", "3", "--unregistered"))
    assert resume_command(args, how).split()[1:] == [
        *("run", "confirm", "s.yaml", "--profile", "gpu", "--set", "train.max_steps=5"),
        *("--store", "r2", "--executor", "slurm", "--executor-opt", "partition=x"),
        *("--executor-opt", "sbatch.qos=high", "--plugin", "p.py"),
        *("--seeds", "3", "--unregistered"),
    ]
    local = Execution(executor=parse_options("local", workers="2"))
    assert resume_command(args, local).endswith("--workers 2 --plugin p.py")


def test_a_claim_error_is_said_before_torch_or_scipy_load(make_study, tmp_path):
    """A mistake in a claim is one line from every command that reads the study, before
    torch, Lightning, scipy or pandas is imported (seconds), on a study whose profile is chosen
    by whether a CUDA device is visible (the commands run in turn in one fresh process)."""
    import json
    import subprocess
    import sys

    claim = {"id": "x", "text": "t", "expect": "better"}
    claim.update(a={"model.activation": "gegl"}, b={"model.activation": "relu"})
    profiles = {"cpu": {}, "gpu": {"train": {"accelerator": "gpu"}}}
    path = make_study(
        name="badclaim",
        grid={"model.activation": ["relu", "gelu"]},
        profiles=profiles,
        default_profile="auto",
        claims=[claim],
    )
    store = tmp_path / "runs"
    commands = [["plan"], ["register"], ["run"], ["run", "confirm"], ["run", "until-decided"]]
    code = f"""
import json, sys
from typer.testing import CliRunner
from ablate.cli import app
heavy = ("torch", "pytorch_lightning", "scipy", "pandas", "wandb")
out = []
for cmd in {commands!r}:
    res = CliRunner().invoke(app, [*cmd, {str(path)!r}, "--store", {str(store)!r}])
    loaded = [m for m in heavy if m in sys.modules]
    out.append([res.exit_code, res.output.strip().splitlines(), loaded])
print(json.dumps(out))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    for command, (code_, lines, loaded) in zip(commands, json.loads(run.stdout), strict=True):
        assert code_ == 2 and len(lines) == 1, (command, lines)
        assert "claims[0].a.model.activation: 'gegl' is not a value" in lines[0], lines
        assert loaded == [], (command, loaded)
    assert not store.exists()
