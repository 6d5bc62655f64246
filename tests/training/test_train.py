"""End-to-end training of one run on real data (CPU), through the store."""

import math

import pytest
import torch

import ablate.training.stacked.lit
import ablate.training.step
from ablate.config import build_config
from ablate.data import LMDataModule, unigram_entropy
from ablate.store import RunStore
from ablate.training.train import train_run


def test_200_steps_on_tiny_shakespeare_beat_the_unigram_entropy(tmp_path, tiny_run):
    cfg = build_config(
        {
            **tiny_run,
            "model.d_model": 64,
            "model.n_layers": 2,
            "model.n_heads": 4,
            "model.max_seq_len": 64,
            "data.seq_len": 64,
            "data.batch_size": 16,
            "optim.lr": 3e-3,
            "optim.warmup_ratio": 0.05,
            "train.max_steps": 200,
            "train.eval_interval": 100,
            "train.final_eval_batches": 20,
            "train.threads": 1,
        }
    )
    summary = train_run(cfg, RunStore(tmp_path).run("t", cfg.run_id()))
    dm = LMDataModule(cfg.data)
    dm.setup("fit")
    entropy = unigram_entropy(dm.tokens("train"), dm.vocab_size)
    assert 3.2 < entropy < 3.4  # chars of tiny shakespeare
    assert summary["status"] == "completed" and summary["steps"] == 200
    assert summary["final_val_loss"] < entropy - 0.6, (summary["final_val_loss"], entropy)
    assert summary["final_val_bpc"] == pytest.approx(summary["final_val_loss"] / math.log(2))


def test_store_gets_config_summary_and_metrics(tmp_path, tiny_run):
    cfg = build_config(tiny_run)
    run = RunStore(tmp_path).run("t", cfg.run_id())
    summary = train_run(cfg, run, {"name": "tiny", "variant": "tiny", "axes": {"model.norm": "x"}})
    assert run.read_run()["config"]["model"]["d_model"] == 32
    on_disk = run.read_summary()
    assert on_disk["status"] == "completed" == summary["status"]
    for key in (
        "best_val_loss",
        "final_val_loss",
        "steps",
        "params",
        "wall_time_s",
        "tokens_per_s",
    ):
        assert on_disk[key] is not None, key
    assert on_disk["axes"] == {"model.norm": "x"} and on_disk["seed"] == 0
    env = on_disk["environment"]  # what float results depend on besides the config
    assert env["torch"] == torch.__version__ and env["device"] == "cpu"
    assert env["torch_threads"] >= 1 and env["workers"] == 1  # trained alone
    metrics = {m for _, m, _ in run.read_metrics()}
    assert {
        "train/loss",
        "val/loss",
        "val/ppl",
        "val/bpc",
        "lr",
        "perf/tokens_per_s",
        "grad_norm/global",
        "grad_norm/layer_00",
        "grad_norm/ffn_out_00",  # Xiong et al. Fig. 3: the FFN output weight, per layer
    } <= metrics
    # the run's clock beside every evaluation: increasing, within the run's own wall time
    clock = [(s, v) for s, m, v in run.read_metrics() if m == "perf/wall_s"]
    assert [s for s, _ in clock] == [s for s, m, _ in run.read_metrics() if m == "val/loss"]
    assert all(a < b for (_, a), (_, b) in zip(clock, clock[1:], strict=False))
    assert 0 < clock[0][1] and clock[-1][1] <= on_disk["wall_time_s"]
    steps_with_grad = {s for s, m, _ in run.read_metrics() if m == "grad_norm/global"}
    assert 0 in steps_with_grad and 10 in steps_with_grad  # at init and every interval
    assert (run.checkpoint_dir / "last.ckpt").is_file()


def test_same_seed_same_run_other_seed_differs(tmp_path, tiny_run):
    store = RunStore(tmp_path)
    a = train_run(build_config(tiny_run), store.run("a", "x"))
    b = train_run(build_config(tiny_run), store.run("b", "x"))
    c = train_run(build_config({**tiny_run, "train.seed": 1}), store.run("c", "x"))
    assert a["final_val_loss"] == b["final_val_loss"]
    assert a["final_val_loss"] != c["final_val_loss"]


def test_non_finite_loss_marks_the_run_diverged(tmp_path, monkeypatch, tiny_run):
    real = ablate.training.step.lm_losses
    calls = {"n": 0}

    def poisoned(logits, targets):
        calls["n"] += 1
        loss = real(logits, targets)
        return loss * float("nan") if calls["n"] > 7 else loss

    monkeypatch.setattr(ablate.training.step, "lm_losses", poisoned)
    cfg = build_config({**tiny_run, "train.eval_interval": 100})
    run = RunStore(tmp_path).run("t", cfg.run_id())
    summary = train_run(cfg, run)
    assert summary["status"] == "diverged"
    assert summary["diverged_step"] == 7  # the 8th training step (0-based)
    assert summary["steps"] <= 10  # stopped at the next log interval, not at max_steps
    assert run.read_summary()["status"] == "diverged"


def test_early_stopping_stops_at_the_first_evaluation_without_a_new_best(tmp_path, tiny_run):
    over = {"train.early_stopping_patience": 1, "train.eval_interval": 2, "train.eval_batches": 1}
    cfg = build_config({**tiny_run, **over, "train.max_steps": 60, "optim.lr": 0.05})
    run = RunStore(tmp_path).run("t", cfg.run_id())
    summary = train_run(cfg, run)
    history = [(s, v) for s, m, v in run.read_metrics() if m == "val/loss"]
    best, first_worse = math.inf, None
    for step, value in history:
        if not value < best:  # Lightning's EarlyStopping: min_delta 0, a strict improvement
            first_worse = step
            break
        best = value
    assert first_worse is not None, history
    assert summary["stopped_early"] and summary["steps"] == first_worse == history[-1][0]


def test_resume_continues_to_the_same_result(tmp_path, monkeypatch, tiny_run):
    store = RunStore(tmp_path)
    cfg = build_config(tiny_run)
    straight = train_run(cfg, store.run("a", "x"))

    class Stop(ablate.training.stacked.lit.LitStack):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            super().on_train_batch_end(outputs, batch, batch_idx)
            if self.step == 13:
                raise KeyboardInterrupt

    run = store.run("b", "x")
    monkeypatch.setattr("ablate.training.train.LitStack", Stop)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train_run(cfg, run)
    assert run.read_summary()["status"] == "running"
    assert run.last_checkpoint() is not None
    monkeypatch.undo()
    resumed = train_run(cfg, run)
    assert resumed["status"] == "completed" and resumed["steps"] == 20
    assert resumed["resumed_from_step"] == 13
    assert resumed["final_val_loss"] == straight["final_val_loss"]  # bit-exact
    steps = [s for s, m, _ in run.read_metrics() if m == "train/loss"]
    assert steps == sorted(set(steps))  # each logged step once
    # the same metrics at the same steps: the gradient norms of step 10, read with the log
    # step 15's values, were logged with the interrupted checkpoint at 13; the loss summed
    # over steps 11-13 is in that checkpoint, so step 15's mean is the uninterrupted one
    a = {(s, m): v for s, m, v in store.run("a", "x").read_metrics() if not m.startswith("perf/")}
    b = {(s, m): v for s, m, v in run.read_metrics() if not m.startswith("perf/")}
    assert a == b


def test_a_run_with_its_progress_bar_shows_the_losses_the_module_read(tmp_path, tiny_run, capfd):
    """``train.progress``: Lightning's bar, with the last log step's and evaluation's losses."""
    cfg = build_config({**tiny_run, "train.progress": True})
    summary = train_run(cfg, RunStore(tmp_path).run("t", cfg.run_id()))
    assert summary["status"] == "completed"
    bar = capfd.readouterr().out  # Lightning's bar writes to stdout
    assert "train/loss=" in bar and "val/loss=" in bar, bar[-500:]
    # redrawn about the 4 log steps (and its start and end), not at each of the 20 steps
    assert bar.count("it/s") < 20, bar


def test_a_run_killed_after_its_divergence_was_found_ends_diverged_without_training(
    tmp_path, monkeypatch, tiny_run
):
    """A checkpoint of the log step that found a divergence, and no summary yet (a kill between
    them): the resume ends the run as diverged at once, at that step, training nothing more."""
    real = ablate.training.step.lm_losses
    calls = {"n": 0}

    def poisoned(logits, targets):
        calls["n"] += 1
        loss = real(logits, targets)
        return loss * float("nan") if calls["n"] > 7 else loss

    monkeypatch.setattr(ablate.training.step, "lm_losses", poisoned)
    cfg = build_config({**tiny_run, "train.eval_interval": 100})
    run = RunStore(tmp_path).run("t", cfg.run_id())
    first = train_run(cfg, run)
    assert (first["status"], first["diverged_step"], first["steps"]) == ("diverged", 7, 10)
    run.write_summary({**first, "status": "running"})  # as the kill left it
    monkeypatch.undo()
    calls["n"] = 0
    monkeypatch.setattr(ablate.training.step, "lm_losses", lambda *a: calls.update(n=1) or real(*a))
    again = train_run(cfg, run)
    assert (again["status"], again["diverged_step"], again["steps"]) == ("diverged", 7, 10)
    assert calls["n"] == 0  # no training step, no evaluation: nothing computed a loss
