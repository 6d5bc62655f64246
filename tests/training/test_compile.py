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
from ablate.training.stacked.group import train_group
from ablate.training.train import train_run

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
