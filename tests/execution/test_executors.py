"""Executor options and the local executor's device assignment (pure, no GPU needed)."""

from collections import Counter

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import ConfigError, RunConfig
from ablate.execution.executors import RunTask, check, local, parse_options
from ablate.execution.executors.local import LocalOptions, Slot, assign_devices, plan_workers


@pytest.mark.parametrize("n_gpus", [1, 2, 8])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_devices_round_robin_with_k_runs_per_gpu(n_gpus, k):
    gpus = [str(i) for i in range(n_gpus)]
    slots = assign_devices(gpus, n_gpus * k, k)
    assert len(slots) == n_gpus * k
    # worker i on GPU i mod G: neighbours spread over GPUs before any GPU gets a second run
    assert [s.cuda_visible_devices for s in slots] == [gpus[i % n_gpus] for i in range(n_gpus * k)]
    assert Counter(s.cuda_visible_devices for s in slots) == {g: k for g in gpus}
    assert {s.memory_fraction for s in slots} == ({None} if k == 1 else {1 / k})
    # fewer workers than slots: still one GPU each, round robin
    few = assign_devices(gpus, max(1, n_gpus // 2), k)
    assert [s.cuda_visible_devices for s in few] == gpus[: max(1, n_gpus // 2)]
    with pytest.raises(ConfigError, match="runs-per-gpu"):
        assign_devices(gpus, n_gpus * k + 1, k)


def test_devices_follow_the_visible_ids_not_their_positions():
    slots = assign_devices(["3", "5"], 4, 2)
    assert [s.cuda_visible_devices for s in slots] == ["3", "5", "3", "5"]
    assert all(s.memory_fraction == 0.5 for s in slots)


def test_cpu_only_every_slot_is_cpu():
    assert assign_devices([], 3, 4) == [Slot(None, None)] * 3


def _tasks(n, accelerator):
    cfg = RunConfig.model_validate({"train": {"accelerator": accelerator}})
    return [RunTask(None, cfg, f"/x/{i}") for i in range(n)]


def test_worker_count_auto_is_gpus_times_k_and_cpu_runs_ignore_gpus():
    opts = LocalOptions(workers="auto", runs_per_gpu=2)
    assert len(plan_workers(_tasks(10, "gpu"), opts, ["0", "1"])) == 4
    assert len(plan_workers(_tasks(3, "gpu"), opts, ["0", "1"])) == 3  # no idle workers
    cpu = plan_workers(_tasks(10, "cpu"), LocalOptions(workers=2), ["0", "1"])
    assert cpu == [Slot(None, None)] * 2  # a CPU study on a GPU box does not touch the GPUs
    assert plan_workers(_tasks(10, "gpu"), LocalOptions(workers=1), []) == [Slot(None, None)]


def test_auto_is_the_default_and_fills_the_cores_one_thread_each(monkeypatch):
    monkeypatch.delenv("ABLATE_DEFAULT_WORKERS")  # conftest pins tests to one worker
    monkeypatch.setattr(local, "cpu_count", lambda: 2)
    default = plan_workers(_tasks(6, "cpu"), LocalOptions(), [])
    # on 2 cores: the layout of --workers 2, 2 workers x 1 thread (measured faster than 1 x 2)
    assert default == plan_workers(_tasks(6, "cpu"), LocalOptions(workers=2), [])
    assert len(default) == 2 and local.worker_threads(len(default)) == 1
    assert len(plan_workers(_tasks(1, "cpu"), LocalOptions(), [])) == 1  # no idle worker
    monkeypatch.setattr(local, "cpu_count", lambda: 16)
    auto = LocalOptions(workers="auto")
    assert len(plan_workers(_tasks(20, "cpu"), auto, [])) == 16
    assert local.worker_threads(16) == 1 and local.worker_threads(3) == 5
    four = [RunTask(None, RunConfig.model_validate({"train": {"threads": 4}}), "/x/t")] * 20
    assert len(plan_workers(four, auto, [])) == 4  # 4 workers x 4 threads: the 16 cores
    # an integer still means that many; the default can be set for a shared machine
    assert len(plan_workers(_tasks(20, "cpu"), LocalOptions(workers=3), [])) == 3
    monkeypatch.setenv("ABLATE_DEFAULT_WORKERS", "5")
    assert len(plan_workers(_tasks(20, "cpu"), LocalOptions(), [])) == 5
    monkeypatch.setenv("ABLATE_DEFAULT_WORKERS", "many")
    with pytest.raises(ConfigError, match="ABLATE_DEFAULT_WORKERS.*'many'"):
        check(LocalOptions())


def test_bad_executor_options_are_one_line_config_errors():
    with pytest.raises(ConfigError, match=r"--executor.*unknown executor 'dask'.*local, ray"):
        parse_options("dask")
    with pytest.raises(ConfigError, match="--runs-per-gpu"):
        parse_options("local", runs_per_gpu=0)
    with pytest.raises(ConfigError, match="gpus_per_run"):
        parse_options("local", ["gpus_per_run=2"])


def test_resume_hint_repeats_the_executor_options():
    opts = parse_options("slurm", ["partition=gpu", "sbatch.qos=high"])
    assert opts.cli_args() == [
        "--executor",
        "slurm",
        "--executor-opt",
        "partition=gpu",
        "--executor-opt",
        "sbatch.qos=high",
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--executor", "dask"], "unknown executor"),
        (["--runs-per-gpu", "0"], "--runs-per-gpu"),
        (["--executor-opt", "noequals"], "--executor-opt"),
        (["--workers", "0"], "--workers"),
        (["--workers", "many"], "--workers"),
    ],
)
def test_cli_rejects_bad_executor_settings_before_writing(tmp_path, args, message):
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nbase: {train: {max_steps: 1}}\n")
    store = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", str(study), "--store", str(store), *args])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], result.output
    assert not store.exists()


def test_missing_extra_names_the_pip_command(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "submitit", None)  # import raises ImportError
    with pytest.raises(ConfigError, match=r'pip install "ablate\[slurm\]"'):
        check(parse_options("slurm"))


def _device_of_this_worker():
    import os
    import time

    time.sleep(0.5)  # keep this worker busy so that each worker takes one task
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES")


def test_each_pool_worker_takes_its_own_slot():
    """The pool initializer gives every worker process one slot's CUDA_VISIBLE_DEVICES."""
    slots = assign_devices(["4", "7"], 2, 1)
    with local.worker_pool(slots, local.pool_context().Event()) as pool, pool:
        seen = dict(f.result() for f in [pool.submit(_device_of_this_worker) for _ in range(4)])
    assert sorted(seen.values()) == ["4", "7"]  # two workers, one per GPU


def _what_this_worker_has() -> tuple[str | None, list[str]]:
    import os
    import sys

    heavy = ("torch", "pytorch_lightning", "wandb", "ablate.training.train")
    return os.environ.get("ABLATE_TEST_MARK"), [m for m in heavy if m in sys.modules]


def test_pool_workers_start_warm_with_the_drivers_environment_of_now(monkeypatch):
    """A worker forked from the pool's forkserver starts with torch, Lightning and W&B imported
    (the server imported them once), and with the driver's environment when the pool starts,
    not the server's from when it started."""
    from multiprocessing import forkserver

    local.pool_context()  # the pool's forkserver, with its preload
    forkserver.ensure_running()  # started before the environment below changes
    monkeypatch.setenv("ABLATE_TEST_MARK", "set after the server started")
    with local.worker_pool([local.Slot(None, None)], local.pool_context().Event()) as pool, pool:
        mark, loaded = pool.submit(_what_this_worker_has).result()
    assert mark == "set after the server started"
    assert loaded == ["torch", "pytorch_lightning", "wandb", "ablate.training.train"]


def test_one_run_to_train_starts_no_pool_with_the_default_workers(
    make_study, tmp_path, monkeypatch
):
    """A study with one run to train, at the default workers (auto: one per core, 2 here),
    trains it in this process: no worker pool and no forkserver start (they would import torch,
    Lightning and W&B a second time beside this process, seconds of CPU)."""
    from ablate.execution.runner import run_study

    asked = []
    monkeypatch.setattr(local, "cpu_count", lambda: 2)
    monkeypatch.setattr(local, "pool_context", lambda: asked.append("pool") or 1 / 0)
    monkeypatch.delenv(local.DEFAULT_WORKERS_ENV, raising=False)
    path = make_study(name="solo", base={"train.max_steps": 5}, seeds=[0])
    results = run_study(path, store=tmp_path / "runs", progress=False)
    assert [r["status"] for r in results] == ["completed"] and asked == []
    assert results[0]["environment"]["workers"] == 1


def test_run_plans_a_cpu_study_without_torch_lightning_scipy_or_wandb(make_study, tmp_path):
    """The driver of `ablate run` checks and plans a CPU study, and hands its runs to the
    executor, without importing the heavy libraries (seconds of start-up before any run
    trains); the processes that train import them."""
    import json
    import subprocess
    import sys

    study = make_study(name="light")
    code = f"""
import json, os, sys
import ablate.execution.runner as runner
heavy = ("torch", "pytorch_lightning", "scipy", "pandas", "wandb", "matplotlib")
def execute(tasks, *, opts, progress):
    print(json.dumps([m for m in heavy if m in sys.modules]), flush=True)
    os._exit(0)
runner.execute = execute
runner.run_study({str(study)!r}, store={str(tmp_path / "runs")!r}, progress=False)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_killed_worker_does_not_stop_the_study(tmp_path, tiny_base):
    """kill -9 of a pool worker mid-run: its run is re-queued in a fresh pool and, its owner's
    pid being gone, takes the lease over at once (no grace period) and completes."""
    import glob
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    base = tiny_base
    base["data"]["dataset"] = str(_corpus(tmp_path, 400))
    # long enough that the kill, polled every 0.2 s from step 10 on, lands mid-run on a fast CPU
    base["train"].update(max_steps=600, log_interval=5, eval_interval=300)
    study = tmp_path / "s.yaml"
    grid = {"model.activation": ["relu", "gelu"]}
    study.write_text(yaml.safe_dump({"name": "s", "base": base, "grid": grid}))
    store = tmp_path / "runs"
    env = {**os.environ, "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "ablate", "run", str(study), "--store", str(store)]
    proc = subprocess.Popen(
        [*cmd, "--workers", "2", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline, victim = time.time() + 240, None
    while victim is None:
        assert time.time() < deadline and proc.poll() is None
        for metrics in glob.glob(str(store / "s" / "*" / "metrics.csv")):
            lines = open(metrics).read().splitlines()
            if any(ln.startswith("10,train/loss") for ln in lines):
                (lease,) = glob.glob(os.path.join(os.path.dirname(metrics), "run.lease.*"))
                victim = json.loads(open(lease).read())["pid"]
        time.sleep(0.2)
    os.kill(victim, signal.SIGKILL)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert "a worker process died" in out
    runs = [json.loads(open(p).read()) for p in glob.glob(str(store / "s" / "*" / "summary.json"))]
    assert sorted(r["status"] for r in runs) == ["completed", "completed"]
    assert victim in {a["pid"] for r in runs for a in r["attempts"][:-1]}  # and it was retried


def test_a_pool_that_keeps_breaking_stops_with_one_line(monkeypatch, tmp_path):
    """Breaks with a run finished in between are retried without limit; max_retries + 1 breaks
    in a row with no progress (a run that kills its worker every time) stop the study with
    ExecutorFailed, which the CLI prints as one line, exit code 1."""
    from concurrent.futures.process import BrokenProcessPool

    import ablate.execution.executors.local as local
    from ablate.execution.executors import ExecutorFailed

    class Quiet:
        lines: list[str] = []

        def write(self, line):
            self.lines.append(line)

    def breaking(pattern):
        calls = iter(pattern)

        def one_pool(left, slots, opts, progress):
            if next(calls) == "progress":
                left.pop()  # a run finished, then a worker died
            raise BrokenProcessPool("killed")

        return one_pool

    opts = LocalOptions(max_retries=2)
    tasks = list(range(10))
    # 4 breaks, each after progress: the pool is tried again each time; then the 4th break counts
    # as the first in a row, two more without progress make 3 > max_retries
    monkeypatch.setattr(local, "_one_pool", breaking(["progress"] * 4 + ["none"] * 2))
    with pytest.raises(ExecutorFailed, match="died 3 times in a row"):
        local._run_pool(list(tasks), [], opts, Quiet())
    assert len(Quiet.lines) == 5  # one "restarting" line per fresh pool

    def fail_at_once(tasks, *, opts, progress):
        raise ExecutorFailed("a worker process died 4 times in a row")

    monkeypatch.setattr("ablate.execution.runner.execute", fail_at_once)
    study = tmp_path / "s.yaml"
    study.write_text(
        "name: s\nbase:\n  data: {dataset: " + str(_corpus(tmp_path)) + ", seq_len: 8}\n"
        "  model: {n_layers: 1, d_model: 16, n_heads: 2, max_seq_len: 8}\n"
    )
    result = CliRunner().invoke(app, ["run", str(study), "--store", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        "error: a worker process died 4 times in a row"
    )
    assert "Resume with" in result.output


def _corpus(folder, lines=200):
    path = folder / "corpus.txt"
    path.write_text("the king shall not love my lord thee good queen\n" * lines)
    return path
