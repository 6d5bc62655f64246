"""The study runner end to end on tiny runs: skip, retry, resume, locking, workers, W&B offline."""

import collections
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ablate.data
import ablate.training.stacked.lit
from ablate.cli import app
from ablate.execution.executors.local import LocalOptions
from ablate.execution.runner import run_study
from ablate.store import RunStore
from ablate.store.provenance import process_started
from ablate.tracking.ids import wandb_run_id

pytestmark = pytest.mark.usefixtures("no_wandb")


def summaries(store: Path, study: str) -> dict[str, dict]:
    return {d.read_run()["meta"]["name"]: d.read_summary() for d in RunStore(store).runs(study)}


def metric_rows(path: Path) -> list[tuple[int, str]]:
    with open(path) as f:
        return [(int(r[0]), r[1]) for r in list(csv.reader(f))[1:]]


def test_study_runs_end_to_end_and_a_rerun_skips_finished_runs(make_study, tmp_path, capsys):
    path = make_study()
    store = tmp_path / "runs"
    results = run_study(path, store=store, progress=False)
    out = capsys.readouterr().out
    assert [r["status"] for r in results] == ["completed", "completed"]
    assert [r["name"] for r in results] == ["activation=relu,seed=0", "activation=gelu,seed=0"]
    for name in ("activation=relu,seed=0", "activation=gelu,seed=0", "completed"):
        assert name in out  # the summary table
    runs = list(RunStore(store).runs("tiny"))
    assert len(runs) == 2
    assert RunStore(store).spec_file("tiny").read_text() == path.read_text()  # for the report
    for d in runs:
        meta = d.read_run()["meta"]
        assert meta["study"] == "tiny" and meta["profile"] is None and meta["seed"] == 0
        assert set(meta["axes"]) == {"model.activation"}
        assert meta["variant"] == meta["name"].rsplit(",seed=", 1)[0]
        s = d.read_summary()
        assert s["steps"] == 20 and s["final_val_loss"] > 0 and len(s["attempts"]) == 1
        # when the process that ran the study (this one) was launched, in the attempt alone
        attempt = s["attempts"][0]
        assert attempt["launched"] == pytest.approx(process_started(), abs=0.05)  # ticks: 10 ms
        assert attempt["launched"] < attempt["started"]
        assert "launched" not in meta
    before = {
        d.run_id: (d.summary_file.stat().st_mtime_ns, d.metrics_file.read_bytes()) for d in runs
    }
    results = run_study(path, store=store, progress=False)
    assert [r["status"] for r in results] == ["completed", "completed"]
    assert "2 finished, 0 to train" in capsys.readouterr().out
    after = {
        d.run_id: (d.summary_file.stat().st_mtime_ns, d.metrics_file.read_bytes()) for d in runs
    }
    assert after == before  # nothing retrained, nothing rewritten


def test_failed_run_does_not_stop_the_study_and_is_retried(
    make_study, tmp_path, corpus, monkeypatch
):
    bad = tmp_path / "bad.txt"
    bad.write_text(corpus.read_text())  # valid at plan time; the run fails when it starts
    real_setup = ablate.data.LMDataModule.setup

    def setup(self, stage=None):
        if self.cfg.dataset == str(bad):
            raise RuntimeError("the data went away (empty)")
        return real_setup(self, stage)

    monkeypatch.setattr(ablate.data.LMDataModule, "setup", setup)
    path = make_study(
        variants=[
            {"name": "good"},
            {"name": "bad", "set": {"data.dataset": str(bad)}},
            {"name": "good2", "set": {"model.activation": "relu"}},
        ]
    )
    store = tmp_path / "runs"
    results = {r["name"]: r for r in run_study(path, store=store, progress=False)}
    assert results["bad,seed=0"]["status"] == "failed"
    assert "empty" in results["bad,seed=0"]["error"]
    assert results["good,seed=0"]["status"] == results["good2,seed=0"]["status"] == "completed"
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(store), "--no-progress"])
    assert result.exit_code == 1  # still failing: the CLI says so
    monkeypatch.setattr(ablate.data.LMDataModule, "setup", real_setup)  # fix the cause
    results = {r["name"]: r for r in run_study(path, store=store, progress=False)}
    assert {r["status"] for r in results.values()} == {"completed"}
    # the cause was fixed without changing the data: the same run is retried (third attempt)
    bad = sorted(
        (len(d.read_summary()["attempts"]), d.read_summary()["status"])
        for d in RunStore(store).runs("tiny")
        if d.read_run()["meta"]["name"] == "bad,seed=0"
    )
    assert bad == [(3, "completed")]
    assert len(summaries(store, "tiny")["good,seed=0"]["attempts"]) == 1


def test_interrupted_run_resumes_with_every_step_once(
    make_study, tmp_path, interrupt_first_run_at_step_12, capsys
):
    path = make_study(grid={"model.activation": ["relu"]})
    store = tmp_path / "runs"
    interrupt_first_run_at_step_12(path, store)  # a KeyboardInterrupt, what Ctrl-C raises
    out = capsys.readouterr().out
    assert "Interrupted" in out and f"ablate run {path} --store {store}" in out
    assert "12 saved" in out and "resumes from step 12" in out  # the step its checkpoint holds
    (d,) = RunStore(store).runs("tiny")
    assert d.read_summary()["status"] == "running"
    assert not d.is_locked()  # the lock went with the interrupted attempt
    assert CliRunner().invoke(app, ["status", "--store", str(store)]).output.count("interrupted")

    (result,) = run_study(path, store=store, progress=False)
    assert result["status"] == "completed" and result["steps"] == 20
    assert result["resumed_from_step"] == 12 and len(result["attempts"]) == 2
    rows = metric_rows(d.metrics_file)
    assert len(rows) == len(set(rows))  # every (step, metric) once
    assert [s for s, m in rows if m == "train/loss"] == [5, 10, 15, 20]
    assert sorted(s for s, m in rows if m == "val/loss") == [10, 20]
    # and the resumed run ends exactly where an uninterrupted one does
    (fresh,) = run_study(path, store=tmp_path / "fresh", progress=False)
    assert result["final_val_loss"] == pytest.approx(fresh["final_val_loss"], abs=1e-6)


def test_status_after_ctrl_c_lists_pending_runs_and_the_rerun_says_who_resumes(
    make_study, tmp_path, interrupt_first_run_at_step_12, capsys
):
    path = make_study(grid={"model.activation": ["relu", "gelu", "swiglu"]})
    store = tmp_path / "runs"
    interrupt_first_run_at_step_12(path, store)
    capsys.readouterr()
    out = CliRunner().invoke(app, ["status", "--store", str(store)]).output
    assert "1 interrupted" in out and "2 pending" in out, out
    assert out.count("pending") == 3  # the two runs not started have a row each, and the count
    run_study(path, store=store, progress=False)
    out = capsys.readouterr().out
    assert "3 runs, 0 finished, 3 to train (1 resume from a checkpoint)" in out, out


def test_ctrl_c_inside_an_optimizer_step_resumes_bit_exactly(make_study, tmp_path, monkeypatch):
    """A real SIGINT delivered between the optimizer's parameter update and Lightning counting
    the step: the run stops at the next step boundary, so the resumed run matches a fresh one."""
    import signal

    path = make_study(grid={"model.activation": ["relu"]})
    store = tmp_path / "runs"
    original = ablate.training.stacked.lit.LitStack.on_train_start

    def arm(self):
        original(self)

        def after_update(optimizer, args, kwargs):
            if self.step == 12:  # params updated, step not yet counted
                signal.raise_signal(signal.SIGINT)

        self.trainer.optimizers[0].register_step_post_hook(after_update)

    monkeypatch.setattr(ablate.training.stacked.lit.LitStack, "on_train_start", arm)
    with pytest.raises(KeyboardInterrupt):
        run_study(path, store=store, progress=False)
    (d,) = RunStore(store).runs("tiny")
    assert d.read_summary()["status"] == "running"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler given back

    monkeypatch.setattr(ablate.training.stacked.lit.LitStack, "on_train_start", original)
    (result,) = run_study(path, store=store, progress=False)
    (fresh,) = run_study(path, store=tmp_path / "fresh", progress=False)
    assert result["final_val_loss"] == pytest.approx(fresh["final_val_loss"], abs=1e-6)
    # the interrupted step completed and the next one did not start
    assert result["resumed_from_step"] == 13


def test_a_run_locked_by_another_process_is_skipped_not_waited_on(make_study, tmp_path):
    path = make_study()
    store = tmp_path / "runs"
    from ablate.study import load_study

    first = load_study(path).runs[0]
    held = RunStore(store).run("tiny", first.run_id).try_lock()  # "another process" trains it
    try:
        results = {r["name"]: r for r in run_study(path, store=store, progress=False)}
    finally:
        held.release()
    assert results[first.name]["status"] == "pending"
    assert results["activation=gelu,seed=0"]["status"] == "completed"
    results = run_study(path, store=store, progress=False)  # lock gone: now it trains
    assert [r["status"] for r in results] == ["completed", "completed"]


def test_status_is_checked_again_once_the_lock_is_held(make_study, tmp_path, monkeypatch):
    """Another process may finish a run between our status read and our lock: don't retrain."""
    from ablate.store import RunDir

    path = make_study()
    store = tmp_path / "runs"
    real_try_lock = RunDir.try_lock

    def finished_meanwhile(self):
        self.write_summary({"status": "completed", "name": "by another process"})
        return real_try_lock(self)

    monkeypatch.setattr(RunDir, "try_lock", finished_meanwhile)
    results = run_study(path, store=store, progress=False)
    assert [r["status"] for r in results] == ["completed", "completed"]
    assert not list(RunStore(store).runs("tiny"))  # no run.yaml: nothing was trained
    assert all("attempts" not in r for r in results)


def _ablate(*args: str) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "ablate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def test_two_processes_never_train_the_same_run(make_study, tmp_path):
    path = make_study(
        base={"train.max_steps": 40},
        grid={"model.activation": ["relu", "gelu", "swiglu"]},
        seeds=[0, 1],
    )
    store = tmp_path / "runs"
    procs = [_ablate("run", str(path), "--store", str(store), "--no-progress") for _ in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    s = summaries(store, "tiny")
    assert len(s) == 6 and {v["status"] for v in s.values()} == {"completed"}
    pids = {p.pid for p in procs}
    print("trained by", collections.Counter(v["attempts"][0]["pid"] for v in s.values()))
    for name, summary in s.items():
        (attempt,) = summary["attempts"]  # trained exactly once, by one of the two processes
        assert attempt["pid"] in pids, name
        rows = metric_rows(RunStore(store).run("tiny", summary["run_id"]).metrics_file)
        assert len(rows) == len(set(rows))


def test_workers_train_runs_in_separate_processes(make_study, tmp_path, capsys):
    path = make_study(grid={"model.activation": ["relu", "gelu", "swiglu", "geglu"]})
    store = tmp_path / "runs"
    results = run_study(path, store=store, executor=LocalOptions(workers=2), progress=False)
    assert [r["status"] for r in results] == ["completed"] * 4
    assert "2 workers" in capsys.readouterr().out
    # the layout travels with each task to the process that trains it
    assert [r["environment"]["workers"] for r in results] == [2] * 4
    pids = {r["attempts"][0]["pid"] for r in results}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert all(len(r["attempts"]) == 1 for r in results)


def test_plan_lists_runs_without_writing_and_status_counts(make_study, tmp_path):
    path = make_study(seeds=[0, 1], grid={"model.activation": ["relu", "gelu"]})
    store = tmp_path / "runs"
    result = CliRunner().invoke(app, ["plan", str(path), "--store", str(store)])
    assert result.exit_code == 0, result.output
    for name in ("activation=relu,seed=0", "activation=gelu,seed=1"):
        assert name in result.output
    assert result.output.count("pending") == 4 and "4 runs" in result.output
    assert not store.exists()
    run_study(path, store=store, progress=False, overrides=["train.max_steps=5"])
    result = CliRunner().invoke(app, ["status", "--store", str(store)])
    assert result.exit_code == 0 and "4 completed" in result.output
    assert "activation=gelu,seed=1" in result.output
    result = CliRunner().invoke(
        app, ["plan", str(path), "--store", str(store), "--set", "train.max_steps=5"]
    )
    assert result.output.count("completed") == 4


# --- W&B offline ----------------------------------------------------------------------------


def test_wandb_offline_run_per_run_holds_config_and_metrics(
    make_study, tmp_path, monkeypatch, offline_wandb_run
):
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc login: auto means offline
    path = make_study(base={"tracking.wandb": True, "tracking.mode": "auto"})
    store = tmp_path / "runs"
    results = run_study(path, store=store, progress=False)
    assert [r["status"] for r in results] == ["completed", "completed"]
    for r in results:
        d = RunStore(store).run("tiny", r["run_id"])
        w = offline_wandb_run(d)
        run, kinds, config, history = w.run, w.kinds, w.config, w.history
        assert run.run_id == wandb_run_id(d) and run.run_group == "tiny"
        assert run.job_type == "train" and config["meta"]["variant"] == r["variant"]
        assert f"model.activation={r['axes']['model.activation']}" in run.tags
        assert config["model"]["d_model"] == 16
        assert config["model"]["activation"] == r["axes"]["model.activation"]
        assert config["meta"]["name"] == r["name"] and config["meta"]["study"] == "tiny"
        assert len(history["train/loss"]) == 4 and len(history["val/loss"]) == 2
        stored = [v for _, m, v in d.read_metrics() if m == "val/loss"]
        assert history["val/loss"] == pytest.approx(stored)  # the same numbers as the store
        assert "grad_norm/global" in history
        assert kinds["exit"] == 1 and w.exit_codes == [0]  # finished cleanly
        assert w.summary["status"] == "completed"
        assert w.history["tokens"] == [s * 4 * 16 for s in w.history["trainer/global_step"]]


def test_wandb_logger_starts_without_deprecation_warnings(tmp_path, monkeypatch, wandb_logger):
    """Lightning passes ``anonymous=None``, which wandb warns about on every run."""
    import wandb

    warned: list[str] = []
    monkeypatch.setattr(wandb, "termwarn", lambda msg, *a, **k: warned.append(str(msg)))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run_dir = RunStore(tmp_path / "runs").run("s", "abc123")
    logger = wandb_logger(run_dir, "offline", "seed=0")
    assert logger is not None
    logger.experiment.finish()
    assert not [w for w in warned if "anonymous" in w], warned
