"""The SLURM executor through submitit's local executor (same jobs, local processes)."""

import os
import signal
import time

import pytest
import test_runner
from executor_checks import assert_same_as_local, interrupt_first_run_at_step_12

from ablate.execution.executors import ExecutorOptions, RunTask
from ablate.execution.runner import run_study
from ablate.store import RunStore
from ablate.store.lease import holder
from ablate.study import load_study

# the tiny study fixtures of test_runner.py (fixtures are found by name in this module)
corpus, make_study = test_runner.corpus, test_runner.make_study
_no_wandb_by_default = test_runner._no_wandb_by_default

pytest.importorskip("submitit", reason='pip install "ablate[slurm]"')

LOCAL = ExecutorOptions(executor="slurm", slurm_cluster="local", slurm_time=5)


def test_a_study_trains_as_a_job_array_like_it_does_locally(
    make_study, tmp_path, capsys, monkeypatch
):
    path = make_study()
    store = tmp_path / "slurm"
    interrupt_first_run_at_step_12(path, store, monkeypatch)
    capsys.readouterr()
    results = run_study(path, store=store, progress=False, executor=LOCAL)
    out = capsys.readouterr().out
    assert "submitted job array" in out and "activation=relu,seed=0: completed" in out
    assert_same_as_local(results, run_study(path, store=tmp_path / "local", progress=False))
    assert (store / "tiny" / ".submitit").is_dir()  # job logs beside the runs
    assert len(list(RunStore(store).runs("tiny"))) == 2  # .submitit is not a run
    run_study(path, store=store, progress=False, executor=LOCAL)
    assert "2 finished, 0 to train" in capsys.readouterr().out


def test_a_preempted_job_is_requeued_and_resumes_from_its_checkpoint(make_study, tmp_path):
    from ablate.execution.executors.slurm import submit

    # long enough to be caught mid-run, short per step
    path = make_study(base={"train.max_steps": 200, "train.checkpoint_interval": 10})
    study = load_study(path)
    run = study.runs[0]
    d = RunStore(tmp_path / "runs").run(study.name, run.run_id)
    (job,) = submit([RunTask(run, run.config, str(d.path), study.meta(run))], LOCAL)
    deadline = time.time() + 120
    while not any(s >= 20 for s, m, _ in d.read_metrics() if m == "train/loss"):
        assert time.time() < deadline and not job.done(), job.stderr()
        time.sleep(0.2)
    owner = holder(d.path)  # the lease names the training process
    assert owner is not None and owner["job_id"] == f"submitit:{job.job_id}"
    os.kill(owner["pid"], signal.SIGUSR2)  # what SLURM sends before preempting the job
    outcome, summary = job.result()
    assert outcome == "trained" and summary["status"] == "completed", job.stderr()
    assert summary["steps"] == 200 and len(summary["attempts"]) == 2
    assert 20 <= summary["resumed_from_step"] < 200
    steps = [s for s, m, _ in d.read_metrics() if m == "train/loss"]
    assert steps == sorted(set(steps)) and steps[-1] == 200
