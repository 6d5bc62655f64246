"""Bench section 10, what one training step costs: kernel-launching aten operations and host
reads per step of a solo run (``train_run``, Lightning) and of stacked groups
(``train_group``) of 2, 4 and 8 members, at the cpu and the gpu profile's shapes, and the
tokens/s each trains at.

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

import torch

from ablate.bench.markdown import bold, table, x
from ablate.config import RunConfig, build_config
from ablate.store import RunStore
from ablate.training.opcount import OpCounter

SHORT, LONG = 4, 10  # run lengths; their difference is the steps counted
MEMBERS = (0, 2, 4, 8)  # 0: solo
# (name, layers, d_model, heads, seq_len, batch): nanoGPT's CPU shape (the cpu profiles) and
# the gpu profiles' 6L-384d; an operation count does not depend on the batch, so both are
# counted at batch 1
SHAPES = (("cpu profile 4L-128d, ctx 64, batch 12", 4, 128, 4, 64, 12),
          ("gpu profile 6L-384d, ctx 256, batch 64", 6, 384, 6, 256, 64))  # fmt: skip


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


def _shape(layers: int, d: int, heads: int, seq: int, batch: int) -> dict[str, Any]:
    return {
        "model.n_layers": layers,
        "model.d_model": d,
        "model.n_heads": heads,
        "model.max_seq_len": seq,
        "data.seq_len": seq,
        "data.batch_size": batch,
        "train.eval_batches": 1,
        "train.final_eval_batches": 1,
    }


def _tokens_per_s(overrides: dict[str, Any], members: int, steps: int) -> float:
    """Training tokens/s of the whole solo run or group (the members' sum), from the
    summaries' steady-state figure (the last log interval)."""
    from ablate.training.stacked.group import train_group
    from ablate.training.train import train_run

    every = {"train.log_interval": steps // 2, "train.eval_interval": 10 * steps}
    every |= {"train.progress": False}
    cfg = build_config({**overrides, **every, "train.max_steps": steps, "tracking.wandb": False})
    with tempfile.TemporaryDirectory() as root:
        store = RunStore(Path(root))
        if members == 0:
            return train_run(cfg, store.run("solo", cfg.run_id()))["tokens_per_s"]
        cfgs = [cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": s})})
                for s in range(members)]  # fmt: skip
        done = train_group(cfgs, [store.run("stacked", c.run_id()) for c in cfgs])
    return sum(d["tokens_per_s"] for d in done)


def measure(threads: int, quick: bool, log=print) -> dict[str, Any]:
    """Section 10's rows: per shape and member count, the counts per step and (at the cpu
    shape, on a CPU) tokens/s."""
    rows = []
    cuda = torch.cuda.is_available()
    shapes, members = (SHAPES[:1], MEMBERS[:2]) if quick else (SHAPES, MEMBERS)
    for i, (name, *shape) in enumerate(shapes):
        full = _shape(*shape) | {"train.threads": threads}
        counted = full | {"data.batch_size": 1}  # the count does not depend on the batch
        if quick:  # a smoke test of the section: its numbers measure nothing
            name, full = "quick 1L-32d, ctx 16, batch 2", _shape(1, 32, 2, 16, 2)
            full = counted = full | {"train.threads": threads}
        for k in members:
            cost = step_cost(counted, k)
            tps = _tokens_per_s(full, k, 6 if quick else 12) if (i == 0 or cuda) else None
            rows.append(
                {"shape": name, "members": k, "kernels": cost.kernels,
                 "host_reads": cost.host_reads, "tokens_per_s": tps,
                 "sdpa": sum(v for op, v in cost.ops.items()
                             if "scaled_dot_product" in op and "backward" not in op)}
            )  # fmt: skip
            log(f"step cost {name}, {k or 'solo'}: {cost.kernels:.0f} ops, {cost.host_reads} reads")
    return {"rows": rows, "gpu": cuda}


def render(r: dict[str, Any]) -> str:
    """Section 10's markdown body."""
    solo = {row["shape"]: row for row in r["rows"] if row["members"] == 0}
    body = []
    for row in r["rows"]:
        base = solo[row["shape"]]
        k = row["members"] or 1
        tps = row["tokens_per_s"]
        body.append(
            [
                row["shape"],
                row["members"] or "solo",
                f"{row['kernels']:.0f}",
                bold(row["kernels"] / base["kernels"], 2),
                x(row["kernels"] / base["kernels"] / k, 2),
                f"{row['sdpa']:.0f}",
                f"{row['host_reads']:.0f}",
                "not run (gpu shape: a GPU's figure)" if tps is None else f"{tps:,.0f}",
                x(tps / base["tokens_per_s"], 2) if tps and base["tokens_per_s"] else "",
                "not run (the GPU table's)" if r["gpu"] else "not run (no GPU)",
            ]
        )
    header = ["shape", "members", "ops/step", "x solo", "x solo per member", "SDPA calls"]
    header += ["host reads/step", "tokens/s", "x solo tokens/s", "CUDA kernel launches, MFU"]
    return "\n\n".join(
        [
            "Kernel-launching aten operations per training step (`training.opcount.OpCounter`, "
            "a `TorchDispatchMode` counting `func.overloadpacket`; views, transposes, detach "
            "and allocations left out), counted around `train_run` (solo, Lightning) and "
            f"`train_group` (stacked) at {SHORT} and {LONG} steps, the difference per step: "
            "logging, evaluation and checkpoints fall outside it. On a GPU each operation is a "
            "kernel launch of several microseconds of host time, so these counts are what a "
            "small model's GPU step costs the host. Host reads: `_local_scalar_dense`, "
            "`equal`, `tolist`, `cpu`, `numpy` (each a wait for the GPU). Tokens/s: the whole "
            "run or group, from its summary (steady state), on this machine. "
            "`tests/training/test_step_cost.py` holds a stack of 6 to at most 1.5x the solo step's "
            "operations with no host read.",
            table(header, body),
        ]
    )
