"""The tables a user reads stay readable at 80 columns."""

from __future__ import annotations

import io
from types import SimpleNamespace

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
    assert "RuntimeError: word0" in body[0] and body[0].rstrip("│ ").endswith("…")
    assert f"full error: {failed_dir / 'error.log'}" in lines


def test_a_failed_run_keeps_its_whole_traceback_in_error_log(tmp_path, monkeypatch):
    import ablate.training.train as train
    from ablate.config import build_config
    from ablate.store import RunStore

    def broken(*args, **kwargs):
        raise RuntimeError("the model cannot be built: " + "detail " * 50)

    monkeypatch.setattr(train, "LitLM", broken)
    cfg = build_config({"train.max_steps": 2, "tracking.wandb": False, "train.progress": False})
    run_dir = RunStore(tmp_path).run("t", "x")
    summary = train.train_run(cfg, run_dir)
    assert summary["status"] == "failed"
    text = run_dir.error_file.read_text()
    assert text.startswith("Traceback") and "in broken" in text
    assert text.rstrip().endswith(summary["error"].rstrip())
