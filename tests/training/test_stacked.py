"""Stacked groups: every member equals its solo run (``train_run``), stays a run
in the store, diverges alone, and resumes bit-exact after an interruption."""

import os
import signal
import subprocess
import sys

import pytest
import torch

import ablate.training.train as stacked
from ablate.config import ConfigError, build_config
from ablate.store import RunStore
from ablate.training.train import check_group, stack_key, train_group, train_run
from ablate.training.trainer import request_stop

# Relative tolerance of a member's losses against its solo run. Each member computes the solo
# run's operations on its own slice of every tensor; what can differ is float rounding where a
# CPU kernel rounds an element by its position in the tensor (SiLU's backward does: a member's
# elements lie elsewhere in a stack's tensor than in its solo run's). Measured: bit-exact for
# most axis values (test_members.py), ~1e-7 where such a kernel runs.
RTOL = 1e-5
LOSSES = ("train/loss", "val/loss", "val/ppl", "val/bpc")


@pytest.fixture
def cfgs_of(tiny_run):
    """``cfgs_of(*overrides)``: the tiny run's config with each override applied."""
    return lambda *overrides: [build_config({**tiny_run, **o}) for o in overrides]


def solo_and_stacked(tmp_path, cfgs):
    store = RunStore(tmp_path)
    solo = [train_run(c, store.run("solo", c.run_id())) for c in cfgs]
    dirs = [store.run("stacked", c.run_id()) for c in cfgs]
    return solo, train_group(cfgs, dirs), store


def metrics(store, study, cfg):
    return {(s, m): v for s, m, v in store.run(study, cfg.run_id()).read_metrics()}


def assert_member_equals_solo(store, cfg, solo, member):
    assert member["status"] == solo["status"]
    for key in ("final_val_loss", "best_val_loss", "final_val_ppl", "final_val_bpc"):
        if solo.get(key) is None:
            assert member.get(key) is None, key
        else:
            assert member[key] == pytest.approx(solo[key], rel=RTOL), key
    a, b = metrics(store, "solo", cfg), metrics(store, "stacked", cfg)
    assert set(a) == set(b)  # the same metric names at the same steps
    for (step, name), value in a.items():
        if name in LOSSES or name == "lr":
            assert b[step, name] == pytest.approx(value, rel=RTOL, nan_ok=True), (step, name)


def test_three_seeds_equal_their_solo_runs(tmp_path, cfgs_of):
    cfgs = cfgs_of({"train.seed": 0}, {"train.seed": 1}, {"train.seed": 2})
    solo, group, store = solo_and_stacked(tmp_path, cfgs)
    for cfg, s, m in zip(cfgs, solo, group, strict=True):
        assert_member_equals_solo(store, cfg, s, m)
    assert len({m["final_val_loss"] for m in group}) == 3  # seeds really differ


def test_three_lrs_with_warmup_and_clipping_equal_their_solo_runs(tmp_path, cfgs_of):
    cfgs = cfgs_of(
        {"optim.lr": 1e-3, "optim.warmup_ratio": 0.2},
        {"optim.lr": 3e-3, "optim.weight_decay": 0.0, "optim.grad_clip": None},
        {"optim.lr": 1e-2, "optim.beta2": 0.95, "optim.grad_clip": 0.1},
    )
    solo, group, store = solo_and_stacked(tmp_path, cfgs)
    for cfg, s, m in zip(cfgs, solo, group, strict=True):
        assert_member_equals_solo(store, cfg, s, m)


def test_a_diverging_member_is_frozen_and_the_others_are_unchanged(tmp_path, cfgs_of):
    cfgs = cfgs_of({"train.seed": 0}, {"optim.lr": 1e6, "optim.grad_clip": None}, {"train.seed": 2})
    solo, group, store = solo_and_stacked(tmp_path, cfgs)
    assert solo[1]["status"] == group[1]["status"] == "diverged"
    assert group[1]["diverged_step"] == solo[1]["diverged_step"]
    assert group[1]["steps"] == solo[1]["steps"]
    for i in (0, 2):
        assert_member_equals_solo(store, cfgs[i], solo[i], group[i])


def test_stacked_members_with_dropout_are_their_solo_runs_in_distribution(tmp_path, cfgs_of):
    """With dropout, a member of a stack of 3 draws other masks than its solo run (once for all
    members: docs/stacking.md), so its losses differ from the solo run's by more than float
    rounding, as another draw of the same masks' distribution does; they stay within the
    spread that the dropout draw makes."""
    cfgs = cfgs_of(*({"model.dropout": 0.1, "train.seed": s} for s in range(3)))
    solo, group, store = solo_and_stacked(tmp_path, cfgs)
    pairs = zip(solo, group, strict=True)
    gaps = [abs(m["final_val_loss"] / s["final_val_loss"] - 1) for s, m in pairs]
    assert max(gaps) > RTOL  # other masks: not the solo run's numbers
    assert max(gaps) < 0.05  # but its distribution: a few percent at most after 20 steps


def test_a_solo_runs_checkpoint_continues_in_a_stack(tmp_path, monkeypatch, cfgs_of):
    """solo -> stacked: a run interrupted solo at step 13 resumes as a member of a group
    (beside a fresh member, which trains alone up to step 13 first) and ends as its
    uninterrupted solo run does."""
    import ablate.training.stacked.lit

    cfgs = cfgs_of({"train.seed": 0}, {"train.seed": 1})
    store = RunStore(tmp_path)
    whole = [train_run(c, store.run("whole", c.run_id())) for c in cfgs]

    class Stop(ablate.training.stacked.lit.LitStack):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            super().on_train_batch_end(outputs, batch, batch_idx)
            if self.step == 13:
                raise KeyboardInterrupt

    dirs = [store.run("cut", c.run_id()) for c in cfgs]
    monkeypatch.setattr("ablate.training.train.LitStack", Stop)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train_run(cfgs[0], dirs[0])
    monkeypatch.undo()
    resumed = train_group(cfgs, dirs)
    assert resumed[0]["resumed_from_step"] == 13 and "resumed_from_step" not in resumed[1]
    for cfg, w, r in zip(cfgs, whole, resumed, strict=True):
        assert r["final_val_loss"] == pytest.approx(w["final_val_loss"], rel=RTOL)
        a, b = metrics(store, "whole", cfg), metrics(store, "cut", cfg)
        assert set(a) == set(b), cfg.run_id()


def _columns(run_dir) -> dict[str, dict[int, float]]:
    """metrics.csv as columns: metric name -> {step: value}, read from the file itself."""
    lines = run_dir.metrics_file.read_text().splitlines()
    assert lines[0] == "step,metric,value"
    out: dict[str, dict[int, float]] = {}
    for line in lines[1:]:
        step, name, value = line.split(",")
        out.setdefault(name, {})[int(step)] = float(value)
    return out


def test_metrics_csv_of_a_stacked_member_diffs_clean_against_its_solo_run(tmp_path, cfgs_of):
    """The same metric columns at the same steps, values within float rounding, for a member
    that completes, one that diverges and one that stops early (each leaves the stack at another
    step): the metric bookkeeping is one implementation, whichever way a run trains."""
    train = {"early_stopping_patience": 1, "eval_interval": 4, "log_interval": 2, "eval_batches": 1}
    every = {f"train.{k}": v for k, v in train.items()}
    cfgs = cfgs_of(
        {**every, "optim.warmup_ratio": 0.2},
        {**every, "train.seed": 1, "optim.lr": 1e6, "optim.grad_clip": None},
        {**every, "train.seed": 2, "optim.lr": 0.03},
    )
    solo, group, store = solo_and_stacked(tmp_path, cfgs)
    ends = [(s["status"], s["steps"], bool(s.get("stopped_early"))) for s in solo]
    # the three endings: the diverged member found at a log step (2) before any evaluation,
    # the other stopped early at an evaluation (8)
    assert ends == [("completed", 20, False), ("diverged", 2, False), ("completed", 8, True)]
    assert [(m["status"], m["steps"], bool(m.get("stopped_early"))) for m in group] == ends
    for cfg in cfgs:
        a = _columns(store.run("solo", cfg.run_id()))
        b = _columns(store.run("stacked", cfg.run_id()))
        assert sorted(a) == sorted(b)  # the same columns
        for name, by_step in a.items():
            assert sorted(by_step) == sorted(b[name]), name  # at the same steps
            if name.startswith("perf/"):
                continue  # timing
            rtol = 1e-4 if name.startswith("grad_norm/") else RTOL
            for step, value in by_step.items():
                got = b[name][step]
                assert got == pytest.approx(value, rel=rtol, nan_ok=True), (name, step)


def test_member_directory_summary_and_metric_names_match_a_solo_run(tmp_path, cfgs_of):
    cfgs = cfgs_of({"train.seed": 0}, {"train.seed": 1})
    store = RunStore(tmp_path)
    train_run(cfgs[0], store.run("solo", cfgs[0].run_id()), {"name": "a", "axes": {"x": 1}})
    dirs = [store.run("stacked", c.run_id()) for c in cfgs]
    train_group(cfgs, dirs, [{"name": "a", "axes": {"x": 1}}, {"name": "b"}])
    solo_dir, member = store.run("solo", cfgs[0].run_id()), dirs[0]
    files = {p.relative_to(solo_dir.path) for p in solo_dir.path.rglob("*")}
    assert files <= {p.relative_to(member.path) for p in member.path.rglob("*")}
    s, m = solo_dir.read_summary(), member.read_summary()
    assert set(s) - {"wandb_wait_s"} <= set(m) and set(m) - set(s) <= {"stack"}
    assert m["stack"]["runs"] == [d.run_id for d in dirs]
    assert (m["name"], m["axes"], m["seed"]) == ("a", {"x": 1}, 0)
    assert member.read_run()["config"] == solo_dir.read_run()["config"]
    ckpt = torch.load(member.checkpoint_dir / "last.ckpt", weights_only=False)
    solo_ckpt = torch.load(solo_dir.checkpoint_dir / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 20 and set(ckpt["state_dict"]) == set(solo_ckpt["state_dict"])


# Under bf16-mixed a member computes the solo run's operations in the same dtypes (autocast
# casts each linear's inputs to bf16 in both, ``ops._Baddbmm``); what differs is the order of
# the fp32 accumulation inside a batched matmul, which flips a bf16 rounding of an output now
# and then. bf16 keeps 8 significant bits (one rounding: up to 2**-9 = 2e-3 relative), but a
# loss averages over every token of the batch, so such flips move it far less: measured <= 2e-5
# relative over 20 steps for every axis value below. 1e-3 (half a bf16 rounding) leaves room
# for other CPUs' kernels while a real difference (a cast missing, a wrong dtype) is ~1e-2.
RTOL_BF16 = 1e-3
BF16_AXES = [
    {},
    {"model.norm_placement": "post"},
    {"model.norm": "rmsnorm"},
    *({"model.pos_encoding": p} for p in ("sinusoidal", "rope", "alibi", "none")),
    *({"model.activation": a} for a in ("relu", "swiglu", "geglu")),
    {"model.n_heads": 4, "model.n_kv_heads": 2},  # GQA
    {"model.n_kv_heads": 1},  # MQA
    {"model.attention": "qk_norm"},
]
DROPOUT = [{"model.dropout": 0.1}, {"model.dropout": 0.1, "model.pos_encoding": "alibi"}]


def _axis_id(case: dict) -> str:
    return ",".join(f"{k.split('.')[1]}={v}" for k, v in case.items()) or "default"


@pytest.mark.parametrize("case", BF16_AXES + DROPOUT, ids=map(_axis_id, BF16_AXES + DROPOUT))
def test_a_bf16_group_of_4_trains_every_axis_value_like_its_solo_runs(tmp_path, cfgs_of, case):
    """A group of 4 under bf16-mixed trains each member to the end, within ``RTOL_BF16`` of its
    solo bf16 run. Dropout draws other masks under vmap (docs/stacking.md), so there members
    are only held to finishing with finite losses near their solo runs'."""
    bf16 = {"train.precision": "bf16-mixed", **case}
    cfgs = cfgs_of(*({**bf16, "train.seed": s} for s in range(4)))
    solo, group, store = solo_and_stacked(tmp_path, cfgs)
    for cfg, s, m in zip(cfgs, solo, group, strict=True):
        assert m["status"] == s["status"] == "completed", m.get("error")
        assert m["steps"] == 20 and m["compute_dtypes"]["matmul"] == "bfloat16"
        a, b = metrics(store, "solo", cfg), metrics(store, "stacked", cfg)
        assert set(a) == set(b)
        rtol = 0.05 if cfg.model.dropout else RTOL_BF16
        for (step, name), value in a.items():
            if name in LOSSES:
                assert b[step, name] == pytest.approx(value, rel=rtol), (step, name)


def test_a_16_mixed_stack_is_refused_at_plan_time_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from ablate.cli import app

    sets = ["--set", "train.precision=16-mixed", "--set", "train.stack=4"]
    res = CliRunner().invoke(
        app, ["run", "studies/positional_encoding.yaml", *sets, "--store", str(tmp_path / "r")]
    )
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1
    assert "train.precision" in res.output and "bf16-mixed" in res.output
    assert not (tmp_path / "r").exists()


def _interrupt_at(monkeypatch, step):
    def hook(steps):
        if steps[0] == step:
            request_stop()

    monkeypatch.setattr(stacked, "_step_done", hook)


def test_interrupted_group_resumes_bit_exact(tmp_path, monkeypatch, cfgs_of):
    cfgs = cfgs_of({"train.seed": 0}, {"train.seed": 1, "optim.lr": 3e-3})
    store = RunStore(tmp_path)
    whole = train_group(cfgs, [store.run("whole", c.run_id()) for c in cfgs])
    dirs = [store.run("cut", c.run_id()) for c in cfgs]
    _interrupt_at(monkeypatch, 7)  # not a checkpoint step: the stop writes one at step 7
    with pytest.raises(KeyboardInterrupt):
        train_group(cfgs, dirs)
    assert [d.read_summary()["status"] for d in dirs] == ["running", "running"]
    monkeypatch.setattr(stacked, "_step_done", lambda steps: None)
    resumed = train_group(cfgs, dirs)
    for cfg, w, r in zip(cfgs, whole, resumed, strict=True):
        assert r["resumed_from_step"] == 7
        assert r["final_val_loss"] == w["final_val_loss"]  # bit-exact
        a, b = metrics(store, "whole", cfg), metrics(store, "cut", cfg)
        assert set(a) == set(b)
        assert all(a[k] == b[k] for k in a if not k[1].startswith("perf/")), cfg.run_id()


def test_dropout_goes_on_as_uninterrupted_from_a_periodic_checkpoint(
    tmp_path, monkeypatch, cfgs_of
):
    """The RNG (dropout) is in a member's checkpoint, and an evaluation draws nothing from it:
    so a resume from the checkpoint of step 10, taken with step 10's evaluation (what a kill -9
    at step 13 leaves), draws the uninterrupted run's masks."""
    cfgs = cfgs_of(*({"model.dropout": 0.1, "train.seed": s} for s in (0, 1)))
    store = RunStore(tmp_path)
    whole = train_group(cfgs, [store.run("whole", c.run_id()) for c in cfgs])
    dirs = [store.run("cut", c.run_id()) for c in cfgs]

    def crash(steps):
        if steps[0] == 13:
            raise RuntimeError("killed")

    monkeypatch.setattr(stacked, "_step_done", crash)
    train_group(cfgs, dirs)  # the crash fails both runs, with an interrupted.ckpt of step 13
    assert [d.read_summary()["status"] for d in dirs] == ["failed", "failed"]
    for d in dirs:  # as a kill -9 would leave it: the periodic checkpoint of step 10
        (d.checkpoint_dir / "interrupted.ckpt").unlink()
    monkeypatch.setattr(stacked, "_step_done", lambda steps: None)
    for w, r in zip(whole, train_group(cfgs, dirs), strict=True):
        assert r["resumed_from_step"] == 10 and r["final_val_loss"] == w["final_val_loss"]


def test_members_resume_at_different_steps_and_catch_up_bit_exact(tmp_path, monkeypatch, cfgs_of):
    """One member resumes from step 5, the other from step 10 (as a group killed while it wrote
    their checkpoints one after the other leaves them): the first trains alone up to step 10,
    then both go on together; each ends as in an uninterrupted group."""
    import shutil

    cfgs = cfgs_of({"train.seed": 0}, {"train.seed": 1, "optim.lr": 3e-3})
    store = RunStore(tmp_path)
    whole = train_group(cfgs, [store.run("whole", c.run_id()) for c in cfgs])
    dirs = [store.run("cut", c.run_id()) for c in cfgs]
    kept = tmp_path / "step5"
    for step in (5, 10):
        _interrupt_at(monkeypatch, step)
        with pytest.raises(KeyboardInterrupt):
            train_group(cfgs, dirs)
        if step == 5:
            shutil.copytree(dirs[0].checkpoint_dir, kept)
    shutil.rmtree(dirs[0].checkpoint_dir)
    shutil.copytree(kept, dirs[0].checkpoint_dir)  # member 0 back at step 5
    sizes = []
    monkeypatch.setattr(stacked, "_step_done", lambda steps: sizes.append((steps[0], len(steps))))
    resumed = train_group(cfgs, dirs)
    assert sizes[:5] == [(s, 1) for s in range(6, 11)] and sizes[5] == (11, 2)
    assert [r["resumed_from_step"] for r in resumed] == [5, 10]
    for cfg, w, r in zip(cfgs, whole, resumed, strict=True):
        assert r["final_val_loss"] == w["final_val_loss"]
        a, b = metrics(store, "whole", cfg), metrics(store, "cut", cfg)
        assert all(a[k] == b[k] for k in a if not k[1].startswith("perf/")), cfg.run_id()


KILL_SCRIPT = """
import os, signal, sys
import ablate.training.train as stacked
from ablate.config import build_config
from ablate.store import RunStore
cfgs = [build_config({**eval(sys.argv[1]), "train.seed": s}) for s in (0, 1)]
def hook(steps):
    if steps[0] == 13:
        os.kill(os.getpid(), signal.SIGKILL)
stacked._step_done = hook
store = RunStore(sys.argv[2])
stacked.train_group(cfgs, [store.run("cut", c.run_id()) for c in cfgs])
"""


def test_kill_9_mid_group_then_rerun_is_bit_exact(tmp_path, cfgs_of, tiny_run):
    cfgs = cfgs_of({"train.seed": 0}, {"train.seed": 1})
    store = RunStore(tmp_path)
    whole = train_group(cfgs, [store.run("whole", c.run_id()) for c in cfgs])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, repr(tiny_run), str(tmp_path)], env=env, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL
    dirs = [store.run("cut", c.run_id()) for c in cfgs]
    resumed = train_group(cfgs, dirs)
    for cfg, w, r in zip(cfgs, whole, resumed, strict=True):
        # the periodic checkpoint of step 10, written in the background (gone only if the
        # kill came before its rename: then a fresh start, which must be bit-exact too)
        assert r.get("resumed_from_step") in (10, None)
        assert r["final_val_loss"] == w["final_val_loss"]
        a, b = metrics(store, "whole", cfg), metrics(store, "cut", cfg)
        assert all(a[k] == b[k] for k in a if not k[1].startswith("perf/"))


def test_finished_members_are_skipped(tmp_path, cfgs_of):
    cfgs = cfgs_of({"train.seed": 0}, {"train.seed": 1})
    store = RunStore(tmp_path)
    dirs = [store.run("s", c.run_id()) for c in cfgs]
    first = train_run(cfgs[0], dirs[0])
    out = train_group(cfgs, dirs)
    assert out[0] == first and "stack" not in out[0]  # untouched
    assert out[1]["status"] == "completed" and out[1]["stack"]["members"] == 2


def test_group_check_and_stack_key(cfgs_of):
    a, b, c = cfgs_of({"train.seed": 1, "optim.lr": 0.1}, {}, {"model.d_model": 64})
    assert stack_key(a) == stack_key(b) != stack_key(c)
    check_group([a, b])
    with pytest.raises(ConfigError, match="model.d_model"):
        check_group([a, c])
    half = {"train.precision": "16-mixed"}
    with pytest.raises(ConfigError, match="train.precision"):  # no loss scaler per member
        check_group(cfgs_of(half, {**half, "train.seed": 1}))
    check_group(cfgs_of(half))  # alone, Lightning's scaler is the run's


def test_train_stack_is_not_part_of_the_run_id(tiny_run):
    plain, three = build_config(tiny_run), build_config({**tiny_run, "train.stack": "3"})
    assert three.train.stack == "3" and plain.run_id() == three.run_id()
    assert build_config({**tiny_run, "train.stack": 4}).train.stack == "4"  # YAML int
    for bad in ("0", "many", "-2"):
        with pytest.raises(ConfigError, match="train.stack: choose auto, off or a positive"):
            build_config({**tiny_run, "train.stack": bad})


@pytest.mark.slow
def test_a_compiled_stack_gives_its_eager_losses_and_gradients(tiny_run):
    """``train.compile`` on a stack: forward and loss of every member (one ``baddbmm`` per
    linear layer, attention folded into SDPA's batch) compiled by inductor as one graph with
    its backward, against the same stack run eagerly."""
    from ablate.model import build_model
    from ablate.training.step import losses_fn, member_losses

    cfg = build_config({**tiny_run, "train.compile": True})
    torch.manual_seed(0)
    model = build_model(cfg.model, 65, members=3)
    x, y = torch.randint(0, 65, (3, 2, 32)), torch.randint(0, 65, (3, 2, 32))
    grads = []
    for losses_of in (member_losses, losses_fn(cfg)):
        model.zero_grad(set_to_none=True)
        losses = losses_of(model, x, y)
        losses.sum().backward()
        grads.append((losses.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (eager, eager_grads), (compiled, compiled_grads) = grads
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
    for name, g in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_a_stack_past_the_recompile_limit_says_so_once(tiny_run, monkeypatch, caplog):
    """dynamo falls back to eager past ``recompile_limit`` with one easily missed warning of its
    own; ablate's logger says it once, in words. (The ``eager`` backend: dynamo's guards and
    limit are the same as inductor's, without minutes of C++ compilation.)"""
    import functools
    import logging

    import torch._dynamo

    from ablate.model import build_model
    from ablate.training import step

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    monkeypatch.setattr(step._RecompileNotice, "said", False)
    torch._dynamo.reset()
    cfg = build_config({**tiny_run, "train.compile": True})
    model, losses_of = build_model(cfg.model, 65, members=2), step.losses_fn(cfg)
    with torch._dynamo.config.patch(recompile_limit=1), caplog.at_level(logging.WARNING):
        for t in (8, 16, 24, 12):  # each new length is a new graph: the second is one too many
            x = torch.randint(0, 65, (2, 2, t))
            losses_of(model, x, x)
    said = [r for r in caplog.records if r.name == "ablate" and "recompile limit" in r.message]
    assert len(said) == 1 and "runs eager" in said[0].message
    torch._dynamo.reset()
