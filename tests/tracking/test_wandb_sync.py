"""W&B identity and ``ablate sync``: one W&B run per study and run, a resumed run's whole
history in the folder that is uploaded, the report run with one id per study."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.execution.runner import run_study
from ablate.store import RunStore
from ablate.tracking.ids import wandb_run_id

OFFLINE = {"tracking.wandb": True, "tracking.mode": "offline"}


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """W&B offline, and no login (no key, an empty home)."""
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_two_studies_with_the_same_config_get_two_wandb_runs(
    make_study, tmp_path, offline, offline_wandb_run
):
    store = tmp_path / "runs"
    grid = {"grid": {"model.activation": ["relu"]}}
    for name in ("first", "second"):
        run_study(make_study(name, {**OFFLINE, "train.max_steps": 5}, **grid), store=store)
    (a,), (b,) = (list(RunStore(store).runs(s)) for s in ("first", "second"))
    assert a.run_id == b.run_id  # the same config: the same run id in the store
    wa, wb = offline_wandb_run(a), offline_wandb_run(b)
    assert wa.run.run_id != wb.run.run_id
    assert (wa.run.run_group, wb.run.run_group) == ("first", "second")
    assert len(wa.history["train/loss"]) == len(wb.history["train/loss"]) == 1  # step 5 only


def test_a_retrained_stale_run_gets_a_new_wandb_id(tmp_path):
    run = RunStore(tmp_path).run("s", "abc123")
    first = wandb_run_id(run)
    assert first.startswith("abc123-") and wandb_run_id(run) == first  # a resume keeps it
    assert wandb_run_id(RunStore(tmp_path).run("t", "abc123")) != first  # another study
    (tmp_path / "s" / ".stale" / "abc123-1700000000").mkdir(parents=True)  # --rerun-stale
    assert wandb_run_id(run) not in (first, wandb_run_id(RunStore(tmp_path).run("t", "abc123")))


def _interrupt_at(step, path, store, monkeypatch):
    """Train the study until its run is interrupted at ``step`` (a Ctrl-C mid-run)."""
    import ablate.training.stacked.lit

    original = ablate.training.stacked.lit.LitStack.on_train_batch_end

    def interrupt(self, outputs, batch, batch_idx):
        original(self, outputs, batch, batch_idx)
        if self.step == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(ablate.training.stacked.lit.LitStack, "on_train_batch_end", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_study(path, store=store, progress=False)
    monkeypatch.setattr(ablate.training.stacked.lit.LitStack, "on_train_batch_end", original)
    # W&B names an offline folder by the second it started: the next start gets its own
    # (a start within the same second reuses the folder, and the replay keeps it whole)
    time.sleep(1.1)


def test_a_run_interrupted_twice_syncs_its_whole_history(
    make_study, tmp_path, offline, monkeypatch, offline_wandb_run, read_wandb_file
):
    from ablate.report.wandb_report import log_report
    from ablate.results import read_study
    from ablate.tracking.ids import report_run_id
    from ablate.tracking.sync import logged_steps, read_records

    store = tmp_path / "runs"
    path = make_study(base=OFFLINE, grid={"model.activation": ["relu"]})
    _interrupt_at(6, path, store, monkeypatch)
    _interrupt_at(13, path, store, monkeypatch)
    (result,) = run_study(path, store=store, progress=False)
    assert result["status"] == "completed" and result["resumed_from_step"] == 13
    (run,) = RunStore(store).runs("tiny")
    w = offline_wandb_run(run)
    assert w.folders == 3  # one offline folder per start, one W&B id
    # each interrupted attempt ended its W&B run as not finished; the last one finished
    attempts = [read_wandb_file(f) for f in sorted(run.wandb_dir.glob("offline-run-*/*.wandb"))]
    assert [a.exit_codes for a in attempts] == [[1], [1], [0]]
    assert [a.summary["status"] for a in attempts] == ["interrupted", "interrupted", "completed"]
    assert {a.run.run_id for a in attempts} == {wandb_run_id(run)}
    assert w.summary["resumed_from_step"] == 13
    stored = run.read_metrics()
    for key in ("train/loss", "val/loss", "grad_norm/global"):  # every step once, in order
        assert w.history[key] == pytest.approx([v for _, m, v in stored if m == key])
    newest = sorted(run.wandb_dir.glob("offline-run-*/*.wandb"))[-1]
    steps = sorted({s for s, _, _ in stored})
    assert sorted(set(logged_steps(newest))) == steps and steps[-1] == 20
    summary = {
        item.key: json.loads(item.value_json)
        for rec in read_records(newest)
        if rec.WhichOneof("record_type") == "summary"
        for item in rec.summary.update
    }
    assert summary["final_val_loss"] == pytest.approx(result["final_val_loss"])
    assert summary["final_val_loss_on"] == "2 validation batches"  # train.final_eval_batches
    study = read_study(store, "tiny")
    assert log_report(study, {}, []) == "offline" and log_report(study, {}, []) == "offline"
    (report,) = (study.path / ".report-wandb" / "wandb").glob("offline-run-*")  # the last one

    dry = CliRunner().invoke(app, ["sync", "tiny", "--store", str(store), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    lines = dry.output.splitlines()
    listed = [x for x in lines if x.startswith("  ")]
    (line,) = [x for x in listed if wandb_run_id(run) in x]
    assert f"steps {steps[0]}-20" in line and "supersedes 2 earlier start(s)" in line
    assert newest.parent.name in line
    (rline,) = [x for x in listed if report_run_id("tiny") in x]
    assert len(listed) == 2 and rline.split()[0] == "report" and report.name in rline
    would = lines[-1]
    assert would.startswith("would run: ") and " sync " in would
    assert str(newest.parent) in would and str(report) in would
    assert would.count("offline-run-") == 2  # the superseded folders stay home

    nolog = CliRunner().invoke(app, ["sync", "tiny", "--store", str(store)])
    assert nolog.exit_code == 2 and "no W&B login" in nolog.output
    assert len(nolog.output.strip().splitlines()) == 1
    assert not list(store.rglob("*.wandb.synced"))  # nothing changed


def test_sync_of_an_unknown_study_is_one_line(tmp_path, norm_pos_store):
    store = norm_pos_store(tmp_path / "runs")
    result = CliRunner().invoke(app, ["sync", "nope", "--store", str(store), "--dry-run"])
    assert result.exit_code == 2 and "studies present: norm_pos" in result.output
    study_yaml = tmp_path / "norm_pos.yaml"  # a study YAML names its study
    study_yaml.write_text("name: norm_pos\n")
    for study in ("norm_pos", str(study_yaml)):
        result = CliRunner().invoke(app, ["sync", study, "--store", str(store), "--dry-run"])
        assert result.exit_code == 2, result.output
        assert "study 'norm_pos' has no offline W&B runs" in result.output


def test_confirmation_runs_are_tagged():
    from ablate.tracking.ids import wandb_tags

    axes = {"model.activation": "relu"}
    assert wandb_tags({"axes": axes}, ["x"]) == ["model.activation=relu", "x"]
    assert "confirm" in wandb_tags({"axes": axes, "confirm": True}, [])


def test_tags_are_never_longer_than_wandb_accepts():
    """A tag over 64 characters keeps its start and ends in a digest of the whole: the same
    value always gives the same tag, two values with the same start two tags."""
    from ablate.tracking.ids import short_tag, wandb_tags

    a, b = "/data/" + "x" * 94, "/data/" + "x" * 93 + "y"
    tags = wandb_tags({"axes": {"data.dataset": a}}, ["t" * 70])
    assert all(len(t) <= 64 for t in tags) and len(tags) == 2
    assert short_tag(f"data.dataset={a}") in tags and short_tag("ok") == "ok"
    assert short_tag(a) == short_tag(a) != short_tag(b) and short_tag(a).startswith("/data/x")


def test_a_run_with_a_100_character_axis_value_gets_its_wandb_run(
    make_study, corpus, tmp_path, offline, offline_wandb_run
):
    """A dataset path as an axis value (docs/data.md) is longer than a W&B tag may be: the run
    still gets its W&B run, the tag shortened, the config keeping the whole path."""
    from ablate.tracking.ids import short_tag

    folder = tmp_path / "data"
    folder.mkdir()
    stem = "c" * max(1, 100 - len(str(folder)) - len("/.txt"))
    data = folder / f"{stem}.txt"  # 100 characters (more if tmp_path is that long already)
    data.write_text(corpus.read_text())
    value = str(data)
    assert len(value) >= 100
    store = tmp_path / "runs"
    path = make_study(base={**OFFLINE, "train.max_steps": 5}, grid={"data.dataset": [value]})
    (result,) = run_study(path, store=store, progress=False)
    assert result["status"] == "completed"
    (run,) = RunStore(store).runs("tiny")
    w = offline_wandb_run(run)  # it has one
    assert short_tag(f"data.dataset={value}") in w.run.tags
    assert all(len(t) <= 64 for t in w.run.tags)
    assert w.config["data"]["dataset"] == value and w.exit_codes == [0]


def test_a_diverged_run_ends_failed_tagged_and_says_so(
    make_study, tmp_path, offline, offline_wandb_run
):
    """A non-finite loss: the W&B run ends failed (exit code 1), tagged ``diverged``, with
    ``status: diverged`` in its summary (the views group by it: outside the seed bands)."""
    store = tmp_path / "runs"
    bad = {**OFFLINE, "optim.lr": 1e6, "optim.grad_clip": None}
    path = make_study(base=bad, grid={"model.activation": ["relu"]})
    (result,) = run_study(path, store=store, progress=False)
    assert result["status"] == "diverged"
    (run,) = RunStore(store).runs("tiny")
    w = offline_wandb_run(run)
    assert w.exit_codes == [1] and "diverged" in w.run.tags
    assert w.summary["status"] == "diverged"
    assert w.summary["diverged_step"] == result["diverged_step"]


def test_a_resumed_run_continues_its_own_wandb_run(tmp_path, monkeypatch):
    """A resumed attempt (solo or stacked member: one start) asks W&B to resume its run: the
    same W&B id, ``resume="allow"`` (offline, each start is a folder of that id: see above)."""
    import wandb

    from ablate.config import RunConfig, TrackingConfig
    from ablate.tracking.runs import finish_wandb_run, start_member_wandb

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    seen, real = [], wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kw: seen.append(kw) or real(**kw))
    cfg = RunConfig(tracking=TrackingConfig(wandb=True, mode="offline"))
    member = RunStore(tmp_path / "runs").run("s", "def456")
    for _ in range(2):  # a start, then a resume
        finish_wandb_run(
            start_member_wandb(cfg, member, {"study": "s"}, "m"), {"status": "running"}
        )
    assert [(kw["id"], kw["resume"]) for kw in seen] == [(wandb_run_id(member), "allow")] * 2


def test_report_tables_keep_numbers_as_numbers():
    import math

    import pandas as pd

    from ablate.tracking.report_run import numeric_table

    df = pd.DataFrame(
        {"loss": [1.5, math.nan], "n": [3, 4], "ok": [True, False], "name": ["a", None]}
    )
    out = numeric_table(df)
    assert out["loss"].dtype.kind == "f" and out["n"].dtype.kind == "i"
    assert out["ok"].dtype.kind == "b" and list(out["name"]) == ["a", None]


def test_solo_stacked_and_report_runs_start_through_one_fallback(tmp_path, monkeypatch, caplog):
    """An unreachable server is tried once, then every start goes offline; a W&B that cannot
    start at all is one warning; a W&B id W&B rejects is an error, for a stacked member too."""
    import logging

    import ablate.tracking.runs as runs
    from ablate.config import TrackingConfig, build_config

    monkeypatch.setattr(runs, "_unreachable", False)
    monkeypatch.setattr(runs, "_warned", False)
    tried = []

    def begin(mode):
        tried.append(mode)
        raise RuntimeError("down")

    online = TrackingConfig(wandb=True, mode="online")
    with caplog.at_level(logging.WARNING, logger="ablate"):
        assert runs.start(online, begin) is None and runs.start(online, begin) is None
    assert tried == ["online", "offline", "offline"]
    assert caplog.text.count("unreachable") == caplog.text.count("could not start") == 1
    assert runs.start(TrackingConfig(wandb=False), begin) is None and len(tried) == 3
    cfg = build_config({"tracking.wandb": True, "tracking.mode": "offline"})
    bad = RunStore(tmp_path).run("s", "a:b")
    with pytest.raises(ValueError, match="characters W&B rejects"):
        runs.start_member_wandb(cfg, bad, {"study": "s"}, "n")


def test_a_run_stopped_by_ctrl_c_logs_at_the_same_steps_after_resume(
    make_study, tmp_path, offline, monkeypatch, offline_wandb_run
):
    """Ctrl-C mid-run (a SIGINT: the run stops at the next step boundary), then resume: every
    metric lands on the same steps as in the uninterrupted run, in the store and in W&B."""
    import os
    import signal

    import ablate.training.stacked.lit

    path = make_study(base=OFFLINE, grid={"model.activation": ["relu"]})
    (done,) = run_study(path, store=tmp_path / "whole", progress=False)
    original = ablate.training.stacked.lit.LitStack.on_train_batch_end

    def ctrl_c(self, outputs, batch, batch_idx):
        original(self, outputs, batch, batch_idx)
        if self.step == 12:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(ablate.training.stacked.lit.LitStack, "on_train_batch_end", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_study(path, store=tmp_path / "cut", progress=False)
    monkeypatch.setattr(ablate.training.stacked.lit.LitStack, "on_train_batch_end", original)
    time.sleep(1.1)  # the resumed start's offline folder gets its own second
    (resumed,) = run_study(path, store=tmp_path / "cut", progress=False)
    # the signal came after step 12's end: step 13, then in flight, finished first
    assert resumed["resumed_from_step"] == 13 and resumed["status"] == "completed"
    (whole,), (cut,) = (list(RunStore(tmp_path / s).runs("tiny")) for s in ("whole", "cut"))

    def steps(rows):
        return sorted({(m, s) for s, m, _ in rows})

    assert steps(cut.read_metrics()) == steps(whole.read_metrics())
    assert _wandb_steps(cut) == _wandb_steps(whole)


def _wandb_steps(run_dir) -> list[tuple[str, int]]:
    """(metric, step) of every value in the run's newest offline W&B run (the one synced)."""
    from ablate.tracking.ids import STEP
    from ablate.tracking.sync import read_records

    newest = sorted(run_dir.wandb_dir.glob("offline-run-*/*.wandb"))[-1]
    out = set()
    for rec in read_records(newest):
        if rec.WhichOneof("record_type") == "history":
            row = {i.key or "/".join(i.nested_key): i.value_json for i in rec.history.item}
            step = json.loads(row[STEP])
            out |= {(k, step) for k in row if not k.startswith("_") and k != STEP}
    return sorted(out)


def _offline_folder(store, write_run):
    """A study "s" of one run with a real offline W&B run in its folder (made by W&B in a
    process of its own: this one's W&B settings stay as they are)."""
    import subprocess
    import sys

    write_run(store, "s", {"model.activation": "relu"}, 0, "completed", 2.0)
    (run,) = RunStore(store).runs("s")
    make = (
        "import wandb; r = wandb.init(mode='offline', project='p', "
        f"dir={str(run.path)!r}, id='r1'); r.log({{'a': 1}}); r.finish()"
    )
    subprocess.run([sys.executable, "-c", make], check=True, capture_output=True)
    (folder,) = run.wandb_dir.glob("offline-run-*")
    return folder


def _ablate(*args, timeout=60):
    """``python -m ablate ARGS`` in a process of its own: what a user types, with a limit that
    fails the test instead of hanging it."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "ablate", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_sync_to_a_server_that_never_answers_ends_in_one_line(
    tmp_path, silent_wandb_server, write_run
):
    """With a key and a server that accepts but never answers, `ablate sync` gives up after
    ABLATE_WANDB_TIMEOUT_S (1 s here) with one line saying what did not happen and how to
    retry, exit 1, the run not marked synced (W&B's own sync waited until killed)."""
    store = tmp_path / "runs"
    folder = _offline_folder(store, write_run)
    t0 = time.monotonic()
    res = _ablate("sync", "s", "--store", str(store))
    assert time.monotonic() - t0 < 30
    assert res.returncode == 1, res.stdout + res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert f"W&B server {silent_wandb_server} did not answer within 1 s" in line
    assert "nothing synced; retry with `ablate sync s`" in line
    assert "ABLATE_WANDB_TIMEOUT_S" in line
    assert not list(folder.glob("*.synced"))


def test_sync_to_a_closed_port_says_so(tmp_path, silent_wandb_server, monkeypatch, write_run):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    store = tmp_path / "runs"
    _offline_folder(store, write_run)
    res = _ablate("sync", "s", "--store", str(store))
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"127.0.0.1:{port} could not be reached" in res.stderr and "nothing synced" in res.stderr


def test_a_sync_that_stops_making_progress_is_stopped():
    """`wandb sync` that goes quiet (a server that dies mid-upload) is stopped after the
    silence limit: its output passed through until then."""
    import sys

    from ablate.tracking.sync import run_watched

    quiet = [sys.executable, "-c", "import time; print('syncing', flush=True); time.sleep(60)"]
    t0 = time.monotonic()
    assert run_watched(quiet, stall_s=1.0) is None
    assert time.monotonic() - t0 < 20
    done = [sys.executable, "-c", "import sys; print('done'); sys.exit(3)"]
    assert run_watched(done, stall_s=10.0) == 3


def test_the_wandb_wait_comes_from_the_environment(monkeypatch):
    from ablate.config import ConfigError
    from ablate.tracking.mode import WANDB_TIMEOUT_S, wandb_timeout

    monkeypatch.delenv("ABLATE_WANDB_TIMEOUT_S", raising=False)
    assert wandb_timeout() == WANDB_TIMEOUT_S
    monkeypatch.setenv("ABLATE_WANDB_TIMEOUT_S", "2.5")
    assert wandb_timeout() == 2.5
    for bad in ("0", "-1", "soon"):
        monkeypatch.setenv("ABLATE_WANDB_TIMEOUT_S", bad)
        with pytest.raises(ConfigError, match="ABLATE_WANDB_TIMEOUT_S"):
            wandb_timeout()
