"""What one training step costs, counted: kernel-launching aten operations and host reads per
step of a solo run (``train_run``, Lightning) and of a stacked group (``train_group``).

Counted from outside, as a user runs them: the whole run under ``OpCounter`` at two lengths,
the difference divided by the steps between them, so set-up, the final evaluation and the
checkpoint cancel and what is left is the steady-state step (logging, evaluation and
checkpoints are kept out of the extra steps by their intervals). The data loader's collation
runs in the training process and is counted too (a few CPU operations per batch, no kernel on
a GPU).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.config import RunConfig, build_config
from ablate.store import RunStore
from ablate.training.opcount import OpCounter

SHORT, LONG = 4, 10  # run lengths; their difference is the steps counted


@dataclass
class StepCost:
    members: int  # 0: a solo run
    kernels: float  # kernel-launching aten operations per step
    host_reads: float  # per step
    ops: dict[str, float]  # per step, by operation


def _counted(cfg: RunConfig, members: int, root: Path) -> OpCounter:
    from ablate.training.stacked.group import train_group
    from ablate.training.train import train_run

    store = RunStore(root)
    with OpCounter() as counter:
        if members == 0:
            train_run(cfg, store.run("solo", cfg.run_id()))
        else:
            cfgs = [cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": s})})
                    for s in range(members)]  # fmt: skip
            train_group(cfgs, [store.run("stacked", c.run_id()) for c in cfgs])
    return counter


def step_cost(overrides: dict[str, Any], members: int) -> StepCost:
    """Per-step cost of ``overrides`` (``build_config`` keys) solo (``members=0``) or stacked."""
    quiet = {
        "train.log_interval": 1000,
        "train.eval_interval": 1000,
        "train.checkpoint_interval": 1000,
        "train.grad_norm_interval": 0,
        "train.progress": False,
        "tracking.wandb": False,
    }
    counts = []
    for steps in (SHORT, LONG):
        cfg = build_config({**overrides, **quiet, "train.max_steps": steps})
        with tempfile.TemporaryDirectory() as root:
            counts.append(_counted(cfg, members, Path(root)))
    short, long = counts
    n = LONG - SHORT
    ops = Counter(long.ops)
    ops.subtract(short.ops)
    return StepCost(
        members,
        (long.kernels - short.kernels) / n,
        (long.host_reads - short.host_reads) / n,
        {k: v / n for k, v in sorted(ops.items()) if v},
    )
