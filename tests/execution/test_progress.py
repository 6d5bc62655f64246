"""Live progress through the store (ablate.execution.progress): the file the training process
writes, the lines the driver draws from it, the study ETA from steps."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ablate.execution.progress import (
    PROGRESS_FILE,
    LiveProgress,
    RunLine,
    read_progress,
    study_eta,
)
from ablate.training.callbacks import ProgressFile


def _record(run: Path, **rec) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / PROGRESS_FILE).write_text(json.dumps(rec))


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_the_writer_records_step_total_loss_and_phases(tmp_path):
    progress = ProgressFile([tmp_path, tmp_path / "b"])
    (tmp_path / "b").mkdir()
    progress.start(140, 400)  # resumed at step 140
    first = read_progress(tmp_path / PROGRESS_FILE)
    assert [first[k] for k in ("step", "total", "start_step", "loss")] == [140, 400, 140, None]
    assert "first_step" not in first  # start-up ends at the first log step
    progress.log(145, [2.145, 3.0])  # each member's mean loss of the log step
    rec, other = (read_progress(p / PROGRESS_FILE) for p in (tmp_path, tmp_path / "b"))
    assert (rec["step"], rec["loss"], other["loss"]) == (145, 2.145, 3.0)
    assert rec["first_step"] >= rec["started"] and rec["pid"] == os.getpid()
    progress.phase("eval")
    assert read_progress(tmp_path / PROGRESS_FILE)["phase"] == "eval"
    progress.phase("train")
    progress.log(150, [2.150, 2.9])
    progress.end(400)
    rec = read_progress(tmp_path / PROGRESS_FILE)
    assert (rec["step"], rec["phase"], rec["loss"], rec["start_step"]) == (
        400,
        "final eval",
        2.150,
        140,
    )
    assert rec["started"] <= rec["updated"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([PROGRESS_FILE, "b"])  # no tmp


def test_read_progress_tolerates_missing_and_garbled_files(tmp_path):
    assert read_progress(tmp_path / "nope.json") is None
    (tmp_path / "a.json").write_text('{"step": 3, "tot')
    assert read_progress(tmp_path / "a.json") is None
    (tmp_path / "b.json").write_text('{"step": "x"}')
    assert read_progress(tmp_path / "b.json") is None


def test_a_resumed_run_counts_its_rate_from_the_resumed_step():
    now = 1000.0
    rec = {"step": 200, "total": 400, "start_step": 140, "started": now - 60, "updated": now}
    line = RunLine.from_record("r", {**rec, "loss": 2.3456})
    assert line.trained == 60 and line.rate() == pytest.approx(1.0)  # not 200/60
    assert line.eta(now) == pytest.approx(200.0) and line.eta(now + 50) == pytest.approx(150.0)
    assert line.info(now) == "loss 2.3456  ETA 3m20s"
    fresh = RunLine.from_record("r", {**rec, "step": 140})
    assert fresh.rate() is None and fresh.info(now) == "ETA ?"


def test_study_eta_comes_from_steps_not_runs():
    # 6 runs x 1000 steps; 1 run finished before this session; 1500 steps trained in 300 s
    assert study_eta(6000, 2500, 1500, 300.0) == pytest.approx(3500 / 5.0)
    assert study_eta(6000, 1000, 0, 300.0) is None
    assert study_eta(6000, 6000, 0, 0.0) == 0.0


def _live(tmp_path, console=None, **kw):
    runs = {f"id{i}": (f"run{i}", tmp_path / f"id{i}", 400) for i in range(3)}
    runs["id3"] = ("x" * 80, tmp_path / "id3", 400)  # a long name is cut, the numbers still fit
    return LiveProgress("study", runs, finished_steps=400, finished_runs=1, console=console, **kw)


def test_poll_reads_the_runs_in_flight_and_draws_one_line_each(tmp_path):
    out = io.StringIO()
    from rich.console import Console

    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    bar = _live(tmp_path, console=console)
    now = time.time()
    _record(tmp_path / "id0", step=140, total=400, start_step=100, loss=2.31, started=now - 40,
            updated=now, phase="train")  # fmt: skip
    _record(tmp_path / "id1", step=50, total=400, start_step=0, loss=3.0, started=now - 50,
            updated=now, phase="train")  # fmt: skip
    stale = tmp_path / "id2" / PROGRESS_FILE  # left by an earlier session: not in flight
    _record(tmp_path / "id2", step=10, total=400, start_step=0, started=0, updated=0)
    os.utime(stale, (now - 3600, now - 3600))
    bar.poll()
    assert [t.line is not None for t in bar.tracked.values()] == [True, True, False, False]
    done, count, info = bar.study_line(now)
    assert done == 400 + 140 + 50 and count == "1/5 runs"
    bar._progress.refresh()
    text = _plain(out.getvalue())
    # run0: 40 steps in 40 s since its resumed step 140, 260 to go
    assert re.search(r"run0 .*140/400 +loss 2\.3100 +ETA 4m20s", text), text
    assert re.search(r"run1 .*50/400 +loss 3\.0000 +ETA 5m50s", text), text
    # study: 90 steps trained in the 50 s since the first run started; 1010 to go
    assert "run2" not in text and "1/5 runs 590/2,000 steps  ETA 13m" in text
    _record(tmp_path / "id3", step=7, total=400, start_step=0, started=now, updated=now)
    bar.poll()
    bar._progress.refresh()
    assert re.search(r"  x{43}… .*7/400", _plain(out.getvalue()))

    bar.finished(SimpleNamespace(run_id="id0", name="run0"), "trained", {"status": "completed"})
    assert bar.done == 2 and bar.done_steps == 800 and bar.trained_done == 40
    assert bar.tracked["id0"].task is None and len(bar._progress.tasks) == 3  # study, run1, x
    bar.close()
    assert "[2/5] run0: trained" in _plain(out.getvalue())
    assert bar._progress is None


def test_without_a_terminal_only_the_finished_lines_print(tmp_path, capsys):
    bar = _live(tmp_path)  # pytest's stdout is not a terminal
    _record(tmp_path / "id1", step=50, total=400, start_step=0, started=time.time(),
            updated=time.time())  # fmt: skip
    bar.poll()
    bar.finished(SimpleNamespace(run_id="id1", name="run1"), "locked", {})
    bar.close()
    assert capsys.readouterr().out == "[1/5] run1: locked\n"


# --- the real thing in a terminal: 2 workers, live lines, Ctrl-C, a clean screen ------------------


def test_two_workers_show_live_run_lines_and_ctrl_c_leaves_a_clean_screen(tmp_path):
    """``ablate run --workers 2`` in a pseudo-terminal, rendered by a terminal emulator (pyte):
    both runs get a live line with their step/total and loss while they train; after Ctrl-C no
    bar is left on the screen and the resume hint is the last thing printed."""
    pty = pytest.importorskip("pty")
    pyte = pytest.importorskip("pyte")
    import select
    import signal
    import subprocess
    import sys

    import yaml

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"the king {i % 7} shall love thee good lord" for i in range(800)))
    train = {"max_steps": 100000, "eval_interval": 100000, "eval_batches": 1, "log_interval": 5,
             "checkpoint_interval": 100000, "threads": 1}  # fmt: skip
    base = {
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 16},
        "data": {"seq_len": 16, "batch_size": 4, "dataset": str(corpus)},
        "train": train,
        "tracking": {"wandb": False},
    }
    study = tmp_path / "live.yaml"
    grid = {"model.activation": ["relu", "gelu"]}
    study.write_text(yaml.safe_dump({"name": "live", "base": base, "grid": grid}))
    screen = pyte.Screen(120, 30)
    stream = pyte.ByteStream(screen)
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "LINES": "30", "TERM": "xterm"}
    cmd = [sys.executable, "-m", "ablate", "run", str(study), "--workers", "2",
           "--store", str(tmp_path / "runs")]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        start_new_session=True,
        # a shell's background job ignores SIGINT, and a child would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(follower)
    t0 = time.time()
    raw, seen, sent = b"", set(), None
    try:
        while time.time() < t0 + 400:  # seconds on an idle machine; minutes on a loaded one
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                raw += chunk
                stream.feed(chunk)
            text = _plain(raw[-20000:].decode(errors="replace"))
            for name in ("activation=relu,seed=0", "activation=gelu,seed=0"):
                if re.search(re.escape(name) + r" .*\d+/100000 +loss \d\.\d{4} +ETA", text):
                    seen.add(name)
            if len(seen) == 2 and sent is None:
                os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole group
                sent = time.time() - t0
            if proc.poll() is not None and not ready:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(leader)
    timing = f"Ctrl-C at {sent}s, ended at {time.time() - t0:.0f}s"
    shown = "\n".join(line.rstrip() for line in screen.display).rstrip()
    assert len(seen) == 2, _plain(raw.decode(errors="replace"))[-3000:]
    assert proc.returncode == 130, f"{timing}\n{shown}"
    # no bar left behind (the summary table's own rules are drawn with box characters)
    assert "ETA" not in shown and not re.search(r"\d+/100000|runs \d", shown), shown
    # the summary table (titled "live: 2 runs") comes after the workers stopped
    assert shown.index("stopping workers") < shown.rindex("live: 2 runs"), shown
    assert "Interrupted" in shown and "2 interrupted" in shown
    resume = shown.split("Resume with:")[1]  # the last thing on screen: the resume command
    typed = f"{sys.executable} -m ablate run"  # as this test invoked it (the path may wrap)
    assert "".join(resume.split()).startswith("".join(typed.split())), shown
    assert resume.endswith("--workers 2"), shown


def test_a_ctrl_c_while_drawing_is_delivered_after_the_drawing(tmp_path):
    import signal

    from ablate.execution.progress import _sigint_deferred

    drawn = []
    with pytest.raises(KeyboardInterrupt):
        with _sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here; a plain KeyboardInterrupt would stop us
            drawn.append("whole frame")
    assert drawn == ["whole frame"]
    with _sigint_deferred(reraise=False):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
