"""Stacked groups planned and run by a study: ``train.stack`` groups runs
that share a stack key, ``ablate plan`` shows them, ``ablate run`` trains each group as one task
(local in-process and in a worker pool; Ray and SLURM in their own test modules) and every
member stays a run: same run id, same final loss as the solo study, its own W&B run."""

import json
import os
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import ablate.training.footprint as footprint_module
from ablate.cli import app
from ablate.config import build_config
from ablate.execution import groups
from ablate.execution.runner import run_study
from ablate.results import read_study
from ablate.stacking import auto_members, plan_groups, stack_limit
from ablate.store import RunDir, RunStore
from ablate.tracking.ids import wandb_run_id

# a member's final loss against its solo run: float rounding only (tests/training/test_stacked.py)
RTOL = 1e-5
SEEDS = {"grid": {"optim.lr": [0.001, 0.003]}, "seeds": [0, 1, 2]}


@pytest.fixture
def study6(make_study, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return make_study(**SEEDS)


def by_id(results):
    return {r["run_id"]: r for r in results}


def assert_like_solo(stacked, solo):
    s, o = by_id(stacked), by_id(solo)
    assert set(s) == set(o)  # the same run ids
    for run_id, ref in o.items():
        assert s[run_id]["status"] == ref["status"] == "completed"
        assert s[run_id]["final_val_loss"] == pytest.approx(ref["final_val_loss"], rel=RTOL)


@pytest.mark.parametrize("workers", [1, 2])
def test_ablate_run_with_stack_3_equals_the_solo_study(study6, tmp_path, workers):
    solo = run_study(study6, store=tmp_path / "solo", progress=False)
    args = ["run", str(study6), "--store", str(tmp_path / "st"), "--no-progress"]
    args += ["--set", "train.stack=3", "--workers", str(workers)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "6 as 2 stacked groups" in result.output
    assert result.output.count(": completed") == 6  # each member reported as a run
    stacked = [json.loads(p.read_text()) for p in (tmp_path / "st").glob("tiny/*/summary.json")]
    assert_like_solo(stacked, solo)
    assert all(s["stack"]["members"] == 3 for s in stacked)
    assert [s["environment"]["workers"] for s in stacked] == [workers] * 6  # the task's layout
    again = CliRunner().invoke(app, args)
    assert "6 finished, 0 to train" in again.output


def test_ablate_plan_shows_the_groups_and_bad_values_are_one_line(study6, tmp_path):
    result = CliRunner().invoke(app, ["plan", str(study6), "--set", "train.stack=3"])
    assert result.exit_code == 0, result.output
    assert result.output.count("g1 (3)") == 3 and result.output.count("g2 (3)") == 3
    assert "train.stack 3: groups of at most 3" in result.output
    auto = CliRunner().invoke(app, ["plan", str(study6), "--set", "train.stack=auto"])
    assert "train.stack auto: off (a CPU" in auto.output and "g1" not in auto.output
    for bad in ("0", "abc"):
        for cmd in ("plan", "run"):
            args = [cmd, str(study6), "--set", f"train.stack={bad}", "--store", str(tmp_path)]
            out = CliRunner().invoke(app, args)
            assert out.exit_code == 2, out.output
            lines = out.output.strip().splitlines()
            assert len(lines) == 1 and "train.stack" in lines[0], out.output
    assert not list(tmp_path.glob("tiny"))  # nothing written


def test_an_lstm_arm_trains_alone_in_a_stacked_study(make_study, tmp_path, monkeypatch):
    # the LSTM computes one member (nn.LSTM has no member dimension): the plan keeps it alone
    monkeypatch.setenv("WANDB_MODE", "disabled")
    study = make_study(grid={"model.arch": ["transformer", "lstm"]}, seeds=[0, 1, 2])
    plan = CliRunner().invoke(app, ["plan", str(study), "--set", "train.stack=3"])
    assert plan.exit_code == 0, plan.output
    assert plan.output.count("g1 (3)") == 3 and plan.output.count("alone") == 3 + 1
    assert "runs train alone (model.arch lstm: LSTMLM computes one run" in plan.output
    args = ["run", str(study), "--store", str(tmp_path / "st"), "--no-progress"]
    result = CliRunner().invoke(app, [*args, "--set", "train.stack=3"])
    assert result.exit_code == 0, result.output
    assert result.output.count(": completed") == 6, result.output
    dirs = [RunDir(p.parent) for p in (tmp_path / "st").glob("tiny/*/summary.json")]
    arch = {d.run_id: d.read_run()["config"]["model"]["arch"] for d in dirs}
    runs = [d.read_summary() for d in dirs]
    assert sorted(arch.values()) == ["lstm"] * 3 + ["transformer"] * 3
    for r in runs:
        assert r["status"] == "completed"
        assert ("stack" in r) == (arch[r["run_id"]] == "transformer"), r["run_id"]
    assert all(r["stack"]["members"] == 3 for r in runs if "stack" in r)
    # how each trained: in its summary and its attempt's entry, and read back by the results
    eager = {"compile": False, "compile_mode": None, "cuda_graphs": False}
    for r in runs:
        way = eager | {"stack": 3 if arch[r["run_id"]] == "transformer" else 1}
        assert r["training"] == r["attempts"][-1]["training"] == way, r["run_id"]
    table = read_study(tmp_path / "st", "tiny").runs.set_index("run_id")
    for run_id, a in arch.items():
        label = "stack of 3, eager" if a == "transformer" else "solo, eager"
        assert table.loc[run_id, "trained_as"] == label
        assert table.loc[run_id, "trained.stack"] == (3 if a == "transformer" else 1)


def test_grouping_and_auto():
    cfgs = [build_config({"train.seed": s, "optim.lr": lr}) for lr in (1e-3, 3e-3) for s in (0, 1)]
    cfgs.append(build_config({"model.d_model": 64}))  # another shape: alone
    groups = plan_groups(cfgs, lambda c: c, lambda c: 3)
    assert [len(g) for g in groups] == [2, 2, 1]  # 4 runs at most 3: two of two
    assert stack_limit(build_config({"train.stack": 2})) == 2
    assert stack_limit(build_config({"train.stack": 2, "train.compile": True})) == 2
    assert stack_limit(build_config({"train.stack": 2, "train.precision": "16-mixed"})) == 1
    assert stack_limit(build_config({"train.stack": 2, "model.arch": "lstm"})) == 1
    cpu = build_config({"train.stack": "auto"})
    auto = {"cuda": True, "free_bytes": 2**40, "member_bytes": 1}
    assert stack_limit(cpu, lambda c: auto_members(c, **auto)) == 1
    gpu = build_config({"train.stack": "auto", "train.accelerator": "gpu"})
    one = 2 * 2**30  # a member of 2 GiB, as measured
    assert auto_members(gpu, cuda=True, free_bytes=3 * one, member_bytes=one) == 2  # 70% of 3
    # no constant cap: 139 GiB free hold 48 such members
    assert auto_members(gpu, cuda=True, free_bytes=139 * 2**30, member_bytes=one) == 48
    assert auto_members(gpu, cuda=True, free_bytes=one // 2, member_bytes=one) == 1
    assert auto_members(gpu, cuda=False, free_bytes=None, member_bytes=one) == 1
    assert auto_members(gpu, cuda=True, free_bytes=2**40, member_bytes=None) == 1  # unmeasured


def test_auto_stacks_what_the_free_memory_holds_at_the_measured_footprint(monkeypatch):
    """``auto`` on a GPU machine, with its memory figures injected: the free memory over the
    member's measured footprint, which is measured once per shape from the runs' stack key."""
    measured = []

    def footprint(cfg, vocab, device, memory=None):
        measured.append((cfg, vocab, device.type))
        return 2**30  # 1 GiB a member

    monkeypatch.setattr(groups, "_cuda_free", lambda: 24 * 2**30)
    monkeypatch.setattr(footprint_module, "member_footprint", footprint)
    groups._footprint.cache_clear()
    base = {"train.stack": "auto", "train.accelerator": "gpu", "model.d_model": 64}
    cfgs = [build_config(base | {"train.seed": s, "optim.lr": 1e-3 * (s + 1)}) for s in range(20)]
    assert groups.limit_here(cfgs[0]) == 16  # 70% of 24 GiB: 16 members, past the old cap 8
    assert [len(g) for g in plan_groups(cfgs, lambda c: c, groups.limit_here)] == [10, 10]
    ((cfg, vocab, device),) = measured  # once for the shape, whatever the seed or LR
    assert device == "cuda" and vocab == 256  # char data: 256 bounds the vocabulary
    assert cfg.model == cfgs[0].model and cfg.data == cfgs[0].data
    assert cfg.train.precision == cfgs[0].train.precision
    groups._footprint.cache_clear()
    monkeypatch.setattr(groups, "_cuda_free", lambda: None)  # no CUDA device visible here
    assert groups.limit_here(cfgs[0]) == 1
    groups._footprint.cache_clear()


KILL_SCRIPT = """
import os, signal, sys
import ablate.training.train as stacked
from ablate.cli import app
def hook(steps):
    if min(steps) >= 13:
        os.kill(os.getpid(), signal.SIGKILL)
stacked._step_done = hook
app(sys.argv[1:])
"""


def test_kill_9_mid_group_then_rerun_is_bit_exact(study6, tmp_path):
    common = ["--set", "train.stack=3", "--no-progress"]
    whole = CliRunner().invoke(app, ["run", str(study6), "--store", str(tmp_path / "w"), *common])
    assert whole.exit_code == 0, whole.output
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = ["run", str(study6), "--store", str(tmp_path / "cut"), *common]
    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT, *args], env=env, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    w, c = RunStore(tmp_path / "w"), RunStore(tmp_path / "cut")
    for d in w.runs("tiny"):
        a, b = d.read_summary(), c.run("tiny", d.run_id).read_summary()
        assert b["status"] == "completed" and b["final_val_loss"] == a["final_val_loss"]
        ma = {(s, m): v for s, m, v in d.read_metrics() if not m.startswith("perf/")}
        mb = {(s, m): v for s, m, v in c.run("tiny", d.run_id).read_metrics()}
        assert all(mb[k] == v for k, v in ma.items())  # bit-exact curves


def test_a_solo_rerun_resumes_a_stacked_checkpoint(study6, tmp_path, monkeypatch):
    import ablate.training.train as stacked
    from ablate.training.trainer import request_stop

    def stop_at_12(steps):
        if min(steps) == 12:
            request_stop()  # as Ctrl-C: a checkpoint of every member at step 12

    whole = run_study(study6, store=tmp_path / "w", overrides=["train.stack=3"], progress=False)
    monkeypatch.setattr(stacked, "_step_done", stop_at_12)
    with pytest.raises(KeyboardInterrupt):
        run_study(study6, store=tmp_path / "cut", overrides=["train.stack=3"], progress=False)
    monkeypatch.undo()
    monkeypatch.setenv("WANDB_MODE", "disabled")
    resumed = run_study(study6, store=tmp_path / "cut", progress=False)  # stack off
    done = by_id(resumed)
    first = {r["run_id"] for r in resumed if r["name"].startswith("lr=0.001")}  # group 1
    for run_id, ref in by_id(whole).items():
        r = done[run_id]
        if run_id in first:  # its stacked checkpoint, continued by a group of one
            assert r["resumed_from_step"] == 12 and r["training"]["stack"] == 1
            assert r["final_val_loss"] == ref["final_val_loss"]  # bit-exact
        else:  # never started: trained solo (Lightning)
            assert "stack" not in r and "resumed_from_step" not in r
            assert r["final_val_loss"] == pytest.approx(ref["final_val_loss"], rel=RTOL)


def test_each_member_logs_its_own_offline_wandb_run(
    make_study, tmp_path, monkeypatch, offline_wandb_run
):
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no login: auto means offline
    path = make_study(
        base={"tracking.wandb": True, "tracking.mode": "auto"}, grid={"optim.lr": [1e-3, 3e-3]}
    )
    store = tmp_path / "runs"
    results = run_study(path, store=store, overrides=["train.stack=2"], progress=False)
    assert [r["stack"]["members"] for r in results] == [2, 2]
    for r in results:
        d = RunStore(store).run("tiny", r["run_id"])
        w = offline_wandb_run(d)
        run, kinds, config, history = w.run, w.kinds, w.config, w.history
        assert run.run_id == wandb_run_id(d) and run.run_group == "tiny"
        assert run.job_type == "train" and run.display_name == r["name"]
        assert config["meta"]["variant"] == r["variant"]
        assert f"optim.lr={r['axes']['optim.lr']}" in run.tags
        assert config["optim"]["lr"] == r["axes"]["optim.lr"]
        assert config["meta"]["name"] == r["name"]
        stored = [v for _, m, v in d.read_metrics() if m == "val/loss"]
        assert history["val/loss"] == pytest.approx(stored) and len(stored) == 2
        assert len(history["train/loss"]) == 4 and "grad_norm/global" in history
        assert history["tokens"] == [s * 4 * 16 for s in history["trainer/global_step"]]
        assert kinds["exit"] == 1 and w.exit_codes == [0]  # finished
        assert w.summary["status"] == "completed"


def test_a_diverged_member_leaves_the_stack(tmp_path, monkeypatch, tiny_run):
    import ablate.training.train as stacked

    sizes = []
    monkeypatch.setattr(stacked, "_step_done", lambda steps: sizes.append(len(steps)))
    bad = {"optim.lr": 1e6, "optim.grad_clip": None}
    cfgs = [build_config({**tiny_run, **o}) for o in ({}, bad, {"train.seed": 2})]
    store = RunStore(tmp_path)
    out = stacked.train_group(cfgs, [store.run("s", c.run_id()) for c in cfgs])
    assert [s["status"] for s in out] == ["completed", "diverged", "completed"]
    assert sizes[0] == 3 and sizes[-1] == 2  # rebuilt without it once it was found
    # 3 members up to the log step that found it (the last step of their fit), then 2
    assert sizes.count(3) == out[1]["steps"]


def test_a_group_task_leaves_out_a_member_another_process_holds(tmp_path, tiny_run):
    from ablate.execution.worker import LOCKED, SKIPPED, TRAINED, execute_group
    from ablate.training.train import train_run

    cfgs = [build_config({**tiny_run, "train.seed": s}) for s in (0, 1, 2)]
    store = RunStore(tmp_path)
    dirs = [store.run("s", c.run_id()) for c in cfgs]
    train_run(cfgs[0], dirs[0])  # finished before the group starts
    lease = dirs[2].try_lock(job_id="someone-else")  # held by a live process (this one)
    try:
        out = execute_group(cfgs, dirs, [{"name": f"seed={s}"} for s in (0, 1, 2)])
    finally:
        lease.release()
    assert [o for o, _ in out] == [SKIPPED, TRAINED, LOCKED]
    assert out[1][1]["status"] == "completed" and out[1][1]["training"]["stack"] == 1
    assert dirs[2].read_summary() is None  # untouched
    assert not dirs[1].is_locked()  # released
