"""Newcomer-facing behaviour: run states, CLI help, progress lines, train naming (issue 15)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import build_config
from ablate.store import RUN_STATES, RunStore, run_state


def _run(store: Path, study: str, seed: int, status: str | None):
    """A run directory as the runner leaves it: run.yaml and (unless None) summary.json."""
    cfg = build_config({"train.seed": seed, "train.max_steps": 10, "tracking.wandb": False})
    d = RunStore(store).run(study, cfg.run_id())
    d.write_run(cfg.to_dict(), {"name": f"s{seed}", "variant": "base", "seed": seed})
    if status is not None:
        summary = {"status": status, "seed": seed, "steps": 10}
        if status == "completed":
            summary.update(final_val_loss=2.0, best_val_loss=2.0)
        d.write_summary(summary)
    return d


@pytest.fixture
def mixed_store(tmp_path):
    store = tmp_path / "runs"
    dirs = {
        "completed": _run(store, "mix", 0, "completed"),
        "interrupted": _run(store, "mix", 1, "running"),  # says running, nobody holds it
        "running": _run(store, "mix", 2, "running"),
        "pending": _run(store, "mix", 3, None),
    }
    return store, dirs


def test_run_state_decides_every_state(mixed_store, tmp_path):
    store, dirs = mixed_store
    held = dirs["running"].try_lock()  # as a training process holds it
    try:
        for want, d in dirs.items():
            assert run_state(d) == want
    finally:
        held.release()
    assert run_state(dirs["running"]) == "interrupted"  # its process is gone
    never = RunStore(store).run("mix", "no-such-run")
    assert run_state(never) == "pending" and not never.path.exists()  # nothing created
    assert set(RUN_STATES) >= {"completed", "diverged", "failed", "running", "interrupted"}


def test_status_and_report_agree_on_an_interrupted_run(mixed_store, tmp_path):
    from ablate.report import build_reports
    from ablate.results import read_study

    store, dirs = mixed_store
    result = CliRunner().invoke(app, ["status", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert "2 interrupted" in result.output and "1 completed" in result.output
    assert "1 pending" in result.output and "running" not in result.output
    counts = read_study(store, "mix").status_counts()
    assert counts["interrupted"] == 2 and counts["running"] == 0 and counts["pending"] == 1
    build_reports(["mix"], store=store, out=tmp_path / "reports", quiet=True)
    md = (tmp_path / "reports" / "mix" / "report.md").read_text()
    assert "1 of 4 runs finished; 2 interrupted, 1 pending" in md
    assert "running" not in md.split("finished;")[1].split(".")[0]
    summary = json.loads(dirs["interrupted"].summary_file.read_text())
    assert summary["status"] == "running"  # reading states wrote nothing


def test_ruff_ignores_a_wandb_folder_left_by_wandb_sync(tmp_path):
    """``./wandb/`` (from ``wandb sync``) must not turn ``import wandb`` into first-party."""
    import shutil
    import subprocess
    import sys

    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff not installed")
    root = Path(__file__).resolve().parents[2]
    shutil.copy(root / "pyproject.toml", tmp_path)
    (tmp_path / "wandb" / "run-1").mkdir(parents=True)
    (tmp_path / "wandb" / "run-1" / "junk.py").write_text("import os,sys\n")  # would fail lint
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "junk.py").write_text("import os,sys\n")
    (tmp_path / "mod.py").write_text(
        "import wandb\n\nfrom ablate.config import RunConfig\n\nprint(wandb, RunConfig)\n"
    )
    out = subprocess.run([ruff, "check", "."], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    gitignore = (root / ".gitignore").read_text().split()
    assert "/wandb/" in gitignore and "/runs/" in gitignore


# --- CLI: help on every option, several studies for plan/status ---------------------------------


def test_every_option_of_every_command_has_one_line_of_help():
    import click
    import typer.main

    group = typer.main.get_command(app)
    assert group.commands
    for name, command in group.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and param.name == "help":
                continue
            text = (getattr(param, "help", None) or "").strip()
            assert text, f"ablate {name}: {param.name} has no help"
            assert "\n" not in text, f"ablate {name}: {param.name} help is not one line"


def _study_yaml(tmp_path: Path, name: str, seeds: list[int]) -> Path:
    import yaml

    path = tmp_path / f"{name}.yaml"
    base = {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2}, "tracking": {"wandb": False}}
    path.write_text(yaml.safe_dump({"name": name, "base": base, "seeds": seeds}))
    return path


def test_plan_and_status_take_several_studies(tmp_path):
    a, b = _study_yaml(tmp_path, "alpha", [0, 1]), _study_yaml(tmp_path, "beta", [0, 1, 2])
    store = tmp_path / "runs"
    result = CliRunner().invoke(app, ["plan", str(a), str(b), "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert "alpha" in result.output and "beta" in result.output
    assert "2 runs" in result.output and "3 runs" in result.output and not store.exists()
    bad = CliRunner().invoke(app, ["plan", str(a), str(tmp_path / "nope.yaml")])
    assert bad.exit_code == 2 and "alpha" not in bad.output  # validated before printing
    _run(store, "alpha", 0, "completed")
    _run(store, "beta", 1, "running")
    _run(store, "gamma", 2, "completed")
    result = CliRunner().invoke(app, ["status", "alpha", str(b), "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert "1 completed" in result.output and "1 interrupted" in result.output
    assert "gamma" not in result.output


# --- ablate train: names from --set, a finished run is only reported ----------------------------


def test_train_run_name_comes_from_the_overrides():
    from ablate.config import load_run_config
    from ablate.execution.train_one import train_run_name

    sets = ["model.d_model=64", "optim.lr=0.003", "train.seed=2", "model.d_model=48"]
    cfg = load_run_config(None, sets)
    assert train_run_name(None, sets, cfg) == "d_model=48,lr=0.003,seed=2"
    assert train_run_name(None, [], load_run_config(None, [])) == "transformer,seed=0"
    assert train_run_name(Path("cfg/small.yaml"), ["model.arch=lstm"], cfg).startswith(
        "small,arch=lstm,"
    )
    path = ["data.dataset=/data/corpora/corpus.txt"]  # a file is named by its file name
    assert train_run_name(None, path, cfg) == "dataset=corpus.txt,seed=2"


def test_an_identical_train_on_a_finished_run_only_reports_it(tmp_path, monkeypatch):
    import ablate.training.train

    sets = [
        "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=16",
        "data.seq_len=16", "data.batch_size=4", "train.max_steps=4", "train.eval_interval=4",
        "train.eval_batches=1", "train.final_eval_batches=1", "train.log_interval=2",
        "train.threads=1", "tracking.wandb=false", "optim.lr=0.003",
    ]  # fmt: skip
    args = ["train", "--store", str(tmp_path / "runs"), "--no-progress"]
    for s in sets:
        args += ["--set", s]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    (run,) = RunStore(tmp_path / "runs").runs("train")
    name = run.read_run()["meta"]["name"]
    assert name.startswith("d_model=16,n_layers=1,") and name.endswith("lr=0.003,seed=0")
    assert run.read_summary()["name"] == name
    before = run.summary_file.read_bytes()

    def no_training(*a, **k):
        raise AssertionError("a finished run must not be trained or evaluated again")

    monkeypatch.setattr(ablate.training.train, "train_run", no_training)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    loss = json.loads(before)["final_val_loss"]
    assert f"already completed: {run.path}" in again.output and f"{loss:.4f}" in again.output
    assert run.summary_file.read_bytes() == before and not run.wandb_dir.exists()


# --- HTML tables, README -----------------------------------------------------------------------


def test_html_tables_fit_short_headers_numbers_wrap_only_between_whole_parts():
    import pandas as pd

    from ablate.report.render import CSS, html_table

    df = pd.DataFrame(
        {
            "variant": ["norm_placement=post,warmup_ratio=0.0", "pre"],
            "final val loss": ["1.9012 ± 0.0123 [1.8706, 1.9318]", "1.6 (1 seed)"],
            "workers": [2.0, 1.0],
            "verdict": ["pre is lower by 0.30 nats; significant after Holm correction " * 2, "—"],
        }
    )
    out = html_table(df)
    assert out.startswith('<div class="table-wrap"><table>')
    assert '<th title="final val loss">final loss</th>' in out and "<th>variant</th>" in out
    nb = "\u00a0"  # mean ± sd together, the interval together, a break only between them
    assert f'<td class="num">1.9012{nb}±{nb}0.0123 [1.8706,{nb}1.9318]</td>' in out
    assert "norm_placement=<wbr>post,<wbr>warmup_ratio=0.0" in out  # labels may wrap
    assert '<td class="num">2</td>' in out and "2.0" not in out  # whole numbers as integers
    assert '<td class="text">pre is lower' in out  # prose may wrap
    assert '<p class="legend">final loss = final val loss</p>' in out
    assert ".table-wrap{overflow-x:auto" in CSS.replace("\n", "")  # only a last resort


def test_markdown_emphasis_is_rendered_but_not_inside_code():
    from ablate.report.render import inline_html

    html = inline_html("*better*/*worse*, **bold**, `*code*`, 2*3*4 and a * b")
    assert "<em>better</em>/<em>worse</em>" in html and "<strong>bold</strong>" in html
    assert "<code>*code*</code>" in html and "2*3*4" in html and "a * b" in html
    html = inline_html("*decided on 5 seeds (`ablate run confirm`, a<b).*")  # a claim's tail
    assert html == "<em>decided on 5 seeds (<code>ablate run confirm</code>, a&lt;b).</em>"


def _variant_axis_store(root, write_run):
    """A study whose axis is named ``variant`` (its values are the variant labels), with an
    environment whose thread and worker counts are read back as floats."""
    for arch, base in (("lstm", 2.3), ("transformer", 2.1)):
        for seed in range(3):
            write_run(root, "arch", {"variant": arch}, seed, "completed", base + 0.01 * seed)
    for d in RunStore(root).runs("arch"):
        env = {"torch_threads": 1, "workers": 2, "device": "cpu"}
        d.write_summary({**d.read_summary(), "environment": env})
    return root


def test_html_report_has_no_repeated_column_and_whole_integers(tmp_path, write_run):
    import re

    from ablate.report import build_reports

    store = _variant_axis_store(tmp_path / "runs", write_run)
    build_reports(["arch"], store=store, out=tmp_path / "reports", quiet=True)
    html = (tmp_path / "reports" / "arch" / "report.html").read_text()
    seen = 0
    for table in re.findall(r"<table>.*?</table>", html, flags=re.S):
        heads = re.findall(r"<th(?: [^>]*)?>(.*?)</th>", table)
        rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table)]
        columns = list(zip(*[r for r in rows if r], strict=True))
        assert len(set(heads)) == len(heads) == len(columns), heads
        if heads[0] == "variant":  # no axis column repeats the variant labels
            assert all(col != columns[0] for col in columns[1:]), heads
        assert not re.search(r">\d+\.0<", table), table  # 1, not 1.0
        seen += heads[0] == "variant"
    assert seen >= 2  # the quality and cost tables were checked
    assert "<em>better</em>" in html and "*better*" not in html


def test_readme_shows_the_data_dir_export_next_to_the_train_examples():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    setup = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert "export ABLATE_DATA_DIR=" in setup and ".venv/bin/ablate" in setup and "make" in setup


# --- ablate report NAME from any directory ------------------------------------------------------


def test_report_by_name_keeps_the_claims_from_another_directory(
    tmp_path, norm_pos_store, monkeypatch
):
    import yaml

    store = norm_pos_store(tmp_path / "runs")
    claim = {"id": "pre-wins", "text": "Pre-LN trains better", "expect": "better"}
    claim |= {"a": {"model.norm_placement": "pre"}, "b": {"model.norm_placement": "post"}}
    spec = tmp_path / "norm_pos.yaml"
    grid = {"model.norm_placement": ["post", "pre"], "model.pos_encoding": ["learned", "rope"]}
    study = {"name": "norm_pos", "description": "Does Pre-LN win?", "grid": grid}
    spec.write_text(yaml.safe_dump(study | {"seeds": [0, 1, 2], "claims": [claim]}))
    RunStore(store).keep_spec("norm_pos", spec)  # what `ablate run` does when it starts
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    args = ["report", "norm_pos", "--store", str(store), "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "warning" not in result.output, result.output
    md = (tmp_path / "out" / "norm_pos" / "report.md").read_text()
    assert "| pre-wins |" in md and "Does Pre-LN win?" in md and "claims above" in md

    RunStore(store).spec_file("norm_pos").unlink()  # a store written before it kept specs
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and "no study file" in warnings[0], result.output
    assert "kept the committed report" in result.output  # one with a decided claim
    assert "| pre-wins |" in (tmp_path / "out" / "norm_pos" / "report.md").read_text()
    md = (tmp_path / "out" / "norm_pos" / "partial" / "report.md").read_text()
    assert "pre-wins" not in md and "claims above" not in md and "No claims: the study" in md


def test_the_resume_command_repeats_how_ablate_was_invoked(tmp_path, monkeypatch):
    from ablate.execution.runner import invoked_as

    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "ablate").write_text("#!/bin/sh\n")
    (venv / "ablate").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    typed = [".venv/bin/python", ".venv/bin/ablate", "run", "s.yaml"]
    assert invoked_as([".venv/bin/ablate", "run"], typed) == [".venv/bin/ablate"]
    monkeypatch.setenv("PATH", f"{venv}:/usr/bin:/bin")  # found on PATH: typed as `ablate`
    assert invoked_as([str(venv / "ablate"), "run"], typed) == ["ablate"]
    module = ["/usr/bin/python3", "-m", "ablate", "run", "s.yaml"]
    assert invoked_as(["/x/ablate/__main__.py", "run"], module) == [
        "/usr/bin/python3",
        "-m",
        "ablate",
    ]
    assert invoked_as(["/x/pytest"], ["python", "/x/pytest"]) == ["ablate"]


# --- ablate plan: how long -----------------------------------------------------------------------


def test_a_run_estimate_is_its_steps_plus_its_evaluations(tiny_run):
    from ablate.config import build_config
    from ablate.execution.estimate import run_seconds

    cfg = build_config(tiny_run)  # 20 steps, eval every 10 on 2 batches, final eval 4 batches
    # 20 steps x 0.1 s + (2 evals x 2 batches + 4 final batches) x a forward (0.1 s / 3)
    assert run_seconds(cfg, 0.1) == pytest.approx(20 * 0.1 + (2 * 2 + 4) * 0.1 / 3)
    longer = build_config(tiny_run | {"train.eval_lengths": [2.0]})  # the final eval at 2x too
    assert run_seconds(longer, 0.1) == pytest.approx(2.0 + (4 + 4 * 3) * 0.1 / 3)


def test_plan_prints_a_time_per_run_and_for_the_workers_run_will_use(
    make_study, tmp_path, monkeypatch
):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    path = make_study(seeds=[0, 1], grid={"model.activation": ["relu", "gelu"]})
    args = ["plan", str(path), "--store", str(tmp_path / "runs")]
    first = CliRunner().invoke(app, [*args, "--workers", "2"])
    assert first.exit_code == 0, first.output
    assert "for the 4 runs to train (with 2 workers, as ablate run will; " in first.output
    assert "of start-up included" in first.output
    assert "4 from a probe of this machine measured" in first.output
    rows = [line for line in first.output.splitlines() if "seed=" in line]
    assert len(rows) == 4 and all(line.rstrip(" │").endswith("s") for line in rows), rows
    # the probe is kept: a second call says the same, to the second
    again = CliRunner().invoke(app, [*args, "--workers", "2"])
    assert _time_lines(again.output) == _time_lines(first.output)
    quiet = CliRunner().invoke(app, [*args, "--no-estimate"])
    assert quiet.exit_code == 0 and "Time:" not in quiet.output


def test_plan_adds_the_start_up_and_says_at_what_load_it_measured(
    make_study, tmp_path, monkeypatch
):
    """The total is the start-up (measured once, kept) plus the runs; the probe and the
    start-up say when they were measured and how busy the machine was then."""
    import re

    from ablate.execution import estimate

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "getloadavg", lambda: (3.5, 1.0, 1.0))
    calls = []
    monkeypatch.setattr(estimate, "startup_seconds", lambda: calls.append(1) or 61.0)
    path = make_study(seeds=[0, 1])
    args = ["plan", str(path), "--store", str(tmp_path / "runs"), "--workers", "1"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    # the 2 runs take a fraction of a second each (20 tiny steps): 61 s and a little
    total = r"Time: about 1m0[12]s for the 2 runs to train \(one at a time; 1m01s of start-up"
    assert re.search(total, " ".join(res.output.split())), res.output
    text = " ".join(res.output.split())  # the console wraps long lines
    probe = r"probe of this machine measured [-\d :]+ at load 3\.5 on \d+ cores"
    start = r"start-up from a fresh interpreter's imports, measured [-\d :]+ at load 3\.5"
    assert re.search(probe, text) and re.search(start, text), res.output
    again = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert calls == [1] and _time_lines(again.output) == _time_lines(res.output)  # kept


def _time_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "seed=" in line or "Time:" in line]


def test_plan_takes_its_times_from_finished_runs_of_the_same_shape(make_study, tmp_path):
    from ablate.execution.executors.local import LocalOptions
    from ablate.execution.runner import run_study
    from ablate.store import RunStore

    path = make_study(seeds=[0, 1])
    store = tmp_path / "runs"
    run_study(path, store=store, progress=False, executor=LocalOptions(workers=1))
    per_step = sorted(
        d.read_summary()["wall_time_s"] / d.read_summary()["steps"]
        for d in RunStore(store).runs("tiny")
    )
    other = make_study("other", seeds=[5])  # the same shape, not trained yet
    res = CliRunner().invoke(app, ["plan", str(other), "--store", str(store), "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert "from finished runs of the same shape in the store" in res.output
    median = sum(per_step[len(per_step) // 2 - 1 : len(per_step) // 2 + 1]) / 2
    from ablate.execution.progress import fmt_duration

    assert f"{fmt_duration(median * 20)}" in res.output  # 20 steps x the median s/step


def test_the_total_hands_runs_longest_first_to_the_next_free_worker():
    from ablate.execution.estimate import makespan

    assert makespan([5, 4, 3, 3, 1], 2) == 8  # 5+3 | 4+3+1
    assert makespan([5, 4, 3], 1) == 12
    assert makespan([2, 2], 4) == 2
