"""The SLURM executor through submitit's local executor (same jobs, local processes), its
polling against fake SLURM commands, and (``make test-slurm``) against a real cluster."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import ConfigError
from ablate.execution.executors import RunTask, check, parse_options
from ablate.execution.runner import run_study
from ablate.store import RunDir, RunStore
from ablate.store.lease import holder
from ablate.study import load_study

pytestmark = pytest.mark.usefixtures("no_wandb")  # make_study and the executor checks: conftest

pytest.importorskip("submitit", reason='pip install "ablate[slurm]"')

LOCAL = parse_options("slurm", ["cluster=local", "time=5"])


def test_a_study_trains_as_a_job_array_like_it_does_locally(
    make_study, tmp_path, capsys, interrupt_first_run_at_step_12, assert_same_as_local
):
    path = make_study()
    store = tmp_path / "slurm"
    interrupt_first_run_at_step_12(path, store)
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


def _fake_commands(bin_dir: Path, **scripts: str) -> Path:
    """Executables named after the keys (``sbatch``...) running the given shell code."""
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        exe = bin_dir / name
        exe.write_text(f"#!/bin/sh\n{body}\n")
        exe.chmod(0o755)
    return bin_dir


def test_without_sbatch_the_slurm_executor_is_one_line_and_writes_nothing(
    make_study, tmp_path, monkeypatch
):
    """submitit would fall back to local processes and the header would still say 'on SLURM'."""
    path = make_study()
    store = tmp_path / "runs"
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(store), "-e", "slurm"])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    assert "sbatch" in lines[0] and "--executor-opt cluster=local" in lines[0]
    assert not store.exists()  # no run dirs, no .submitit folder


def test_only_an_explicit_local_cluster_runs_slurm_jobs_without_sbatch(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    check(parse_options("slurm", ["cluster=local"]))
    for pairs in ([], ["cluster=slurm"]):
        with pytest.raises(ConfigError, match="sbatch, squeue, scancel not found"):
            check(parse_options("slurm", pairs))
    bin_dir = _fake_commands(tmp_path / "bin", sbatch="", squeue="", scancel="")
    monkeypatch.setenv("PATH", str(bin_dir))
    check(parse_options("slurm"))  # a login node: SLURM's clients are here


def _wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while not (value := predicate()):
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is not training
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def test_a_driver_stopped_with_sigterm_stops_its_local_jobs(make_study, tmp_path):
    """--executor-opt cluster=local: the jobs are processes of this machine; stopping the driver
    (SIGTERM, like Ctrl-C) must stop them, not leave them training for nobody."""
    path = make_study(base={"train.max_steps": 100_000, "train.checkpoint_interval": 50})
    store = tmp_path / "runs"
    cmd = [sys.executable, "-m", "ablate", "run", str(path), "--store", str(store),
           "--executor", "slurm", "-x", "cluster=local", "--no-progress"]  # fmt: skip
    driver = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    pids: list[int] = []
    try:
        _wait_for(lambda: len(list(store.glob("tiny/*/run.yaml"))) == 2, 120, "run dirs")
        dirs = [p.parent for p in store.glob("tiny/*/run.yaml")]
        holders = _wait_for(
            lambda: all(holder(d) for d in dirs) and [holder(d) for d in dirs], 120, "training"
        )
        pids = [h["pid"] for h in holders]
        assert driver.poll() is None
        driver.send_signal(signal.SIGTERM)
        out, _ = driver.communicate(timeout=90)
        assert driver.returncode == 130, out.decode(errors="replace")
        _wait_for(lambda: not any(_alive(p) for p in pids), 10, "the jobs to stop")
        for d in dirs:  # stopped, not failed: the same command resumes them
            assert RunDir(d).read_summary()["status"] == "running"
    finally:
        for pid in [driver.pid, *pids]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        driver.wait()


def test_jobs_are_followed_through_squeue_without_accounting(tmp_path, monkeypatch, capfd):
    """No slurmdbd: sacct fails. The driver follows the tasks without it and prints nothing of
    submitit's; a task that leaves the queue without a result is a failed run, not a hang."""
    import submitit
    from submitit.core.utils import cloudpickle_dump

    from ablate.execution.executors import slurm

    states = tmp_path / "squeue.txt"
    states.write_text("42_0 RUNNING\n42_1 RUNNING\n")
    bin_dir = _fake_commands(
        tmp_path / "bin",
        squeue=f"cat {states}",
        sacct='echo "Slurm accounting storage is disabled" >&2; exit 1',
        scancel="exit 0",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    for name, value in [("SQUEUE_EVERY_S", 0), ("RESULT_GRACE_S", 0), ("POLL_S", 0.01)]:
        monkeypatch.setattr(slurm, name, value)
    folder = tmp_path / "submitit"
    folder.mkdir()
    jobs = [submitit.SlurmJob(folder, f"42_{i}") for i in range(2)]
    tasks = [RunTask(f"run{i}", None, str(tmp_path / f"run{i}")) for i in range(2)]

    class Recorder:
        polls, done = 0, {}

        def poll(self):
            self.polls += 1
            assert self.polls < 500, "the driver never saw the tasks end"
            if self.polls == 3:  # task 0 finishes, task 1 dies (e.g. out of memory)
                result = ("trained", {"status": "completed"})
                cloudpickle_dump(("success", result), jobs[0].paths.result_pickle)
                jobs[1].paths.stderr.parent.mkdir(parents=True, exist_ok=True)
                jobs[1].paths.stderr.write_text("slurmstepd: error: Detected 1 oom_kill event\n")
                states.write_text("42_0 COMPLETED\n42_1 OUT_OF_MEMORY\n")

        def finished(self, run, outcome, summary):
            self.done[run] = (outcome, summary)

        def write(self, line):
            print(line)

    rec = Recorder()
    slurm.wait(jobs, tasks, rec)
    assert rec.done["run0"] == ("trained", {"status": "completed"})
    outcome, summary = rec.done["run1"]
    assert outcome == "trained" and summary["status"] == "failed"
    assert "job 42_1 ended OUT_OF_MEMORY without a result" in summary["error"]
    assert "oom_kill" in summary["error"]
    out, err = capfd.readouterr()
    assert "Bypassing" not in out + err and "accounting" not in out + err, out + err


# --- against a real cluster: `make test-slurm` (scripts/slurm/cluster.sh starts one here) ---


def _slurm(*args: str) -> str:
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, f"{' '.join(args)}: {out.stderr.strip()}"
    return out.stdout


@pytest.fixture
def cluster():
    """A SLURM cluster whose jobs this test may submit (and cancel): only one you own."""
    if os.environ.get("ABLATE_TEST_SLURM") != "1":
        pytest.skip("the real-cluster test runs with `make test-slurm` (ABLATE_TEST_SLURM=1)")
    try:
        cmd = ["sinfo", "-h", "-o", "%T"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        pytest.skip(f"no SLURM cluster reachable: {err}")
    if out.returncode != 0 or "idle" not in out.stdout.split():
        pytest.skip(f"no idle SLURM node: {(out.stderr or out.stdout).strip() or 'sinfo is empty'}")
    assert not _slurm("squeue", "-h"), "the queue must be empty before the test"


def _train_steps(run_dir: Path) -> list[int]:
    return [s for s, m, _ in RunDir(run_dir).read_metrics() if m == "train/loss"]


@pytest.mark.slurm
def test_a_study_on_a_real_cluster_survives_a_requeue_and_leaves_an_empty_queue(
    corpus, tiny_base, tmp_path, cluster
):
    """`ablate run --executor slurm` on slurmctld + slurmd (no accounting): one array task is
    requeued mid-run (`scontrol requeue`); every run completes exactly once, the requeued one
    resumes from its checkpoint, the terminal shows ablate's lines only, the queue ends empty."""
    base = json.loads(json.dumps(tiny_base))
    base["data"]["dataset"] = str(corpus)
    base["train"].update(max_steps=1500, checkpoint_interval=50, eval_interval=500)
    study = tmp_path / "tiny.yaml"
    grid = {"model.activation": ["relu", "gelu"]}
    study.write_text(yaml.safe_dump({"name": "tiny", "base": base, "grid": grid, "seeds": [0, 1]}))
    store = tmp_path / "runs"
    cmd = [sys.executable, "-m", "ablate", "run", str(study), "--store", str(store),
           "--executor", "slurm", "--no-progress"]  # fmt: skip
    driver = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    array = None
    try:
        # the first run past a checkpoint while its task runs: requeue that task
        def training_run():
            for d in (p for p in store.glob("tiny/*") if p.is_dir()):
                steps = _train_steps(d) if (d / "metrics.csv").exists() else []
                owner = holder(d)
                if owner and steps and steps[-1] >= 200:
                    return d, owner["job_id"].removeprefix("submitit:"), steps[-1]
            return None

        run_dir, task, step = _wait_for(training_run, 300, "a run to pass step 200")
        array = task.split("_")[0]
        _slurm("scontrol", "requeue", task)

        # SLURM holds a requeued task back for two minutes (BeginTime): start it now
        def restarted():
            state = _slurm("squeue", "-h", "-r", "-j", task, "-o", "%T %r").split()
            if state[:2] == ["PENDING", "BeginTime"]:
                subprocess.run(["scontrol", "update", f"JobId={task}", "StartTime=now"])
            return state[:1] == ["RUNNING"] or state == []

        _wait_for(restarted, 120, f"task {task} to restart")
        out, _ = driver.communicate(timeout=600)
        assert driver.returncode == 0, out
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if array:
            subprocess.run(["scancel", array])

    names = [f"activation={a},seed={s}" for a in ("relu", "gelu") for s in (0, 1)]
    for name in names:  # each run reported once, and completed
        assert len(re.findall(rf"\] {re.escape(name)}: completed", out)) == 1, out
    assert "submitted job array" in out and "4 completed" in out, out
    for noise in ("Bypassing", "sacct", "accounting", "submitit WARNING"):  # ablate's lines only
        assert noise not in out, out
    summaries = {d.name: RunDir(d).read_summary() for d in store.glob("tiny/*") if d.is_dir()}
    summaries.pop(".submitit", None)
    assert len(summaries) == 4
    for rid, summary in summaries.items():
        assert summary["status"] == "completed" and summary["steps"] == 1500, summary
        steps = _train_steps(store / "tiny" / rid)
        assert steps == sorted(set(steps)) and steps[-1] == 1500  # each step trained once
        if rid != run_dir.name:
            assert len(summary["attempts"]) == 1 and "resumed_from_step" not in summary, summary
    requeued = summaries[run_dir.name]
    assert len(requeued["attempts"]) == 2, requeued  # killed by the requeue, then resumed
    # from its last checkpoint before the requeue (not from step 0, not retrained to the end)
    assert max(50, step - 50) <= requeued["resumed_from_step"] < 1500, (requeued, step)
    # nothing left behind: the queue drains once the last task has exited
    _wait_for(lambda: not _slurm("squeue", "-h", "-r"), 120, "an empty queue")


def test_a_stacked_group_is_one_array_task(make_study, tmp_path, capsys, assert_stacked_like_solo):
    path = make_study(grid={"optim.lr": [1e-3, 3e-3]}, seeds=[0, 1])
    store = tmp_path / "slurm"
    results = run_study(
        path, store=store, overrides=["train.stack=2"], progress=False, executor=LOCAL
    )
    out = capsys.readouterr().out
    assert "(2 tasks, 4 runs)" in out and out.count(": completed") == 4
    assert_stacked_like_solo(results, path, tmp_path, members=2)
    assert len({r["attempts"][-1]["pid"] for r in results}) == 2  # one job per group
