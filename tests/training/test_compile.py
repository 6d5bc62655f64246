"""``train.compile``, solo and stacked: the members' forward and loss (``step.member_losses``)
compile to one graph per number of members in training and one in evaluation, with no graph
break and no fallback past the recompile limit, counted by dynamo at a tiny shape."""

import functools

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from ablate.config import build_config
from ablate.store import RunStore
from ablate.training.train import train_group, train_run

# evaluations at steps 2 and 4, logging every 2 steps (a diverged member is found at step 2)
SHORT = {"train.max_steps": 4, "train.eval_interval": 2, "train.eval_batches": 1}
SHORT |= {"train.log_interval": 2, "train.checkpoint_interval": 100, "train.compile": True}


@pytest.fixture
def dynamo(monkeypatch):
    """dynamo's counters from a clean start, with the ``aot_eager`` backend (dynamo's graphs and
    AOT autograd's joint forward and backward, as inductor gets them, without C++ compilation)
    and a recompile limit that raises instead of falling back to eager."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield counters
    torch._dynamo.reset()


def _graphs(counted) -> int:
    assert not counted["graph_break"], dict(counted["graph_break"])
    assert counted["frames"]["ok"] == counted["frames"]["total"] > 0, dict(counted["frames"])
    return counted["stats"]["unique_graphs"]


def test_compiled_solo_runs_are_one_training_and_one_evaluation_graph(tmp_path, tiny_run, dynamo):
    """Two runs in one process (a worker trains run after run): the second compiles nothing."""
    for seed in (0, 1):
        cfg = build_config({**tiny_run, **SHORT, "train.seed": seed})
        summary = train_run(cfg, RunStore(tmp_path).run("c", cfg.run_id()))
        assert summary["status"] == "completed", summary.get("error")
        assert _graphs(dynamo) == 2


@pytest.mark.slow
def test_a_compiled_group_is_two_graphs_for_each_number_of_members(tmp_path, tiny_run, dynamo):
    """Three members, one of which diverges and leaves: a fit of 3 members, then one of 2."""
    cfgs = [
        build_config({**tiny_run, **SHORT, "train.seed": s, **extra})
        for s, extra in enumerate([{}, {"optim.lr": 1e6, "optim.grad_clip": None}, {}])
    ]
    out = train_group(cfgs, [RunStore(tmp_path).run("g", c.run_id()) for c in cfgs])
    assert [s["status"] for s in out] == ["completed", "diverged", "completed"]
    assert _graphs(dynamo) == 4  # (3 members, 2 members) x (training, evaluation)


def _replaying(losses_fn):
    """``losses_fn`` whose evaluation (no autograd) returns its losses in one tensor that
    every call overwrites, as a CUDA graph's replay does (``reduce-overhead``)."""

    def make(cfg):
        real, out = losses_fn(cfg), {}

        def losses_of(model, x, y):
            losses = real(model, x, y)
            if torch.is_grad_enabled():
                return losses
            buf = out.setdefault(losses.shape, torch.empty_like(losses))
            return buf.copy_(losses)

        return losses_of

    return make


def test_validation_keeps_every_batch_when_a_replay_overwrites_its_output(
    tmp_path, tiny_run, monkeypatch
):
    """An evaluation averages its batches' losses after the last batch: each must be kept
    apart from the output tensor the next call writes into, or the mean is the last batch's."""
    import ablate.training.lit as lit

    cfg = build_config({**tiny_run, "train.max_steps": 10, "train.eval_batches": 3})

    def val_losses(folder):
        run = RunStore(tmp_path / folder).run("v", cfg.run_id())
        assert train_run(cfg, run)["status"] == "completed"
        return [(s, v) for s, m, v in run.read_metrics() if m == "val/loss"]

    eager = val_losses("eager")
    monkeypatch.setattr(lit, "losses_fn", _replaying(lit.losses_fn))
    assert val_losses("replayed") == eager and len(eager) == 1


@pytest.mark.slow
def test_reduce_overhead_validates_as_eager_does(tmp_path, tiny_run):
    """``train.compile_mode: reduce-overhead`` through inductor, validation every 2 steps over 3
    batches: the val/loss history of the eager run, to float rounding. On a CPU the mode
    captures no CUDA graph; the code path (the compiled losses kept across batches) is the
    one a GPU replays."""
    torch._dynamo.reset()
    histories = []
    for extra in ({}, {"train.compile": True, "train.compile_mode": "reduce-overhead"}):
        cfg = build_config({**tiny_run, **SHORT, "train.eval_batches": 3, **extra})
        run = RunStore(tmp_path / str(len(histories))).run("r", cfg.run_id())
        assert train_run(cfg, run)["status"] == "completed"
        histories.append([(s, v) for s, m, v in run.read_metrics() if m == "val/loss"])
    torch._dynamo.reset()
    eager, compiled = histories
    assert [s for s, _ in compiled] == [s for s, _ in eager] == [2, 4]
    for (_, a), (_, b) in zip(compiled, eager, strict=True):
        assert a == pytest.approx(b, rel=1e-5)
