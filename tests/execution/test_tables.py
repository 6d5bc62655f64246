"""The tables a user reads stay readable at 80 columns: names and run ids whole, numbers never
broken, columns left out or the layout changed instead."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from ablate.execution.tables import print_summary


def test_a_long_error_keeps_each_run_on_one_row_and_points_to_the_full_error(tmp_path):
    error = "RuntimeError: " + " ".join(f"word{i}" for i in range(120))
    failed_dir = tmp_path / "abc123"
    failed_dir.mkdir()
    (failed_dir / "error.log").write_text(f"Traceback (most recent call last):\n{error}\n")
    results = [
        {"name": "activation=relu,seed=0", "run_id": "abc123", "status": "failed"}
        | {"error": error, "path": str(failed_dir), "wall_time_s": 3.0},
        {"name": "activation=gelu,seed=0", "run_id": "def456", "status": "completed"}
        | {"final_val_loss": 2.5, "best_val_loss": 2.4, "steps": 20, "path": str(tmp_path)},
    ]
    out = io.StringIO()
    console = Console(file=out, width=80, highlight=False, color_system=None)
    print_summary(SimpleNamespace(name="tiny"), results, console, elapsed=5.0)
    lines = out.getvalue().splitlines()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert all(len(line) <= 80 for line in table), "\n".join(lines)
    body = table[table.index(next(x for x in table if x.startswith("┡"))) + 1 : -1]
    assert len(body) == 2, "\n".join(lines)  # one line per run, the error cut, not folded
    assert "RuntimeError" in body[0] and body[0].rstrip("│ ").endswith("…")
    assert "abc123" in body[0] and "def456" in body[1]  # run ids whole, beside the names
    assert f"full error: {failed_dir / 'error.log'}" in lines


def test_a_failed_run_keeps_its_whole_traceback_in_error_log(tmp_path, monkeypatch):
    import ablate.training.train as train
    from ablate.config import build_config
    from ablate.store import RunStore

    def broken(*args, **kwargs):
        raise RuntimeError("the model cannot be built: " + "detail " * 50)

    monkeypatch.setattr(train, "LitStack", broken)
    cfg = build_config({"train.max_steps": 2, "tracking.wandb": False, "train.progress": False})
    run_dir = RunStore(tmp_path).run("t", "x")
    summary = train.train_run(cfg, run_dir)
    assert summary["status"] == "failed"
    text = run_dir.error_file.read_text()
    assert text.startswith("Traceback") and "in broken" in text
    assert text.rstrip().endswith(summary["error"].rstrip())


NAMES = [f"norm_placement={n},warmup_ratio=0.0,pos_encoding=sinusoidal,seed={s}" for n, s in
         (("post", 0), ("pre", 11))]  # fmt: skip


def _status_store(tmp_path):
    """Two runs with long names: one completed, one interrupted with a checkpoint at step 300."""
    import torch

    from ablate.config import build_config
    from ablate.store import RunStore

    ids = []
    for seed, name in zip((0, 11), NAMES, strict=True):
        cfg = build_config({"train.seed": seed, "tracking.wandb": False})
        d = RunStore(tmp_path / "runs").run("norm_placement", cfg.run_id())
        d.write_run(cfg.to_dict(), {"name": name, "seed": seed, "profile": "cpu"})
        if seed:
            d.write_summary({"status": "running", "seed": seed})  # nobody holds it: interrupted
            d.checkpoint_dir.mkdir(parents=True)
            torch.save({"global_step": 300, "state_dict": {}}, d.checkpoint_dir / "last.ckpt")
        else:
            d.write_summary({"status": "completed", "steps": 1234567, "final_val_loss": 2.2345})
        ids.append(d.run_id)
    return tmp_path / "runs", ids


@pytest.mark.parametrize("columns", ["80", "100", "200"])
def test_status_keeps_names_and_ids_whole_and_shows_the_saved_step(tmp_path, columns):
    from typer.testing import CliRunner

    from ablate.cli import app

    store, ids = _status_store(tmp_path)
    res = CliRunner().invoke(app, ["status", "--store", str(store)], env={"COLUMNS": columns})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert all(len(line) <= int(columns) for line in lines), res.output
    for name, run_id in zip(NAMES, ids, strict=True):
        assert any(name in line for line in lines) and any(run_id in line for line in lines)
    assert any("1234567" in line for line in lines), res.output  # no number broken
    assert any("2.2345" in line for line in lines), res.output
    assert "300 saved" in res.output and "1 interrupted" in res.output


def test_a_piped_smoke_table_never_breaks_a_number(monkeypatch):
    from ablate.execution.smoke import _print_table

    rows = [
        {"name": name, "params": 12_345_678, "shape": "12L/768d, 2x1024", "precision":
         "bf16-mixed", "stack": 2, "attn": "math", "status": "failed", "final_val_loss": 3.14159,
         "error": "RuntimeError: " + "shape mismatch " * 20, "seconds": 123.456}
        for name in NAMES
    ]  # fmt: skip
    for width in (80, 160):
        out = io.StringIO()
        console = Console(file=out, width=width, highlight=False, color_system=None)
        _print_table(SimpleNamespace(name="norm_placement"), rows, console)
        text = out.getvalue()
        assert all(len(line) <= width for line in text.splitlines()), text
        assert all(any(n in line for line in text.splitlines()) for n in NAMES), text
        for number in ("12,345,678", "3.142", "123.5"):  # each whole on one line
            assert number in text, text
        assert text.count("shape mismatch shape mismatch") >= 2  # the whole error, below


def test_status_lists_a_variants_seeds_in_numeric_order(tmp_path, write_run):
    from typer.testing import CliRunner

    from ablate.cli import app

    store = tmp_path / "runs"
    for seed in (10, 2, 1):
        for norm in ("pre", "post"):
            write_run(store, "s", {"model.norm_placement": norm}, seed, "completed", 2.0)
    res = CliRunner().invoke(app, ["status", "--store", str(store)], env={"COLUMNS": "120"})
    names = [line.split("│")[1].strip() for line in res.output.splitlines() if line[:1] == "│"]
    assert names == [f"{v}-s{s}" for v in ("post", "pre") for s in (1, 2, 10)], res.output


def test_status_lists_the_planned_runs_before_any_has_started(tmp_path):
    """`ablate run` writes its plan before the first run starts: a Ctrl-C in the seconds of
    start-up leaves no run directory, and `ablate status NAME` lists the planned runs as
    pending (not "no study in the store")."""
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.store import RunStore

    store = RunStore(tmp_path / "runs")
    plan = [{"run_id": f"id{i}", "name": f"run-{i}", "profile": "cpu"} for i in range(3)]
    store.keep_plan("fresh", plan)
    for args in (["status", "fresh"], ["status"]):
        res = CliRunner().invoke(app, [*args, "--store", str(store.root)], env={"COLUMNS": "120"})
        assert res.exit_code == 0, res.output
        assert "3 pending" in res.output and all(f"run-{i}" in res.output for i in range(3))
