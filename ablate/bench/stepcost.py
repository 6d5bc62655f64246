"""Bench section 10, what one training step costs the host: kernel-launching aten operations,
Python function calls and host reads per step of a solo run (``train_run``: a group of one) and
of stacked groups (``train_group``) of 4 and 8 members, at the cpu and the gpu profile's shapes,
and the tokens/s each trains at.

Counted from outside, as a user runs them: the whole run under ``OpCounter`` (or
``PythonCalls``) at two lengths, the difference divided by the steps between them, so set-up,
the final evaluation and the checkpoint cancel and what is left is the steady-state step
(logging, evaluation and checkpoints are kept out of the extra steps by their intervals). One
uncounted run first takes what a process does once (imports, first calls). Python's cyclic
garbage collector is off in a counted run (after a collection before it): a collection runs the
finalizers of whatever garbage the process holds (in a test session, earlier tests'), on
whichever thread's allocation triggers it (the training thread or the checkpoint writer's,
which depends on the machine's load), and would count them as the step's calls. The data loader's
collation runs in the training process and is counted too (a few CPU operations per batch, no
kernel on a GPU).
"""

from __future__ import annotations

import gc
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ablate.bench.markdown import bold, table, x
from ablate.config import RunConfig, build_config
from ablate.store import RunStore
from ablate.training.opcount import OpCounter, PythonCalls

SHORT, LONG = 4, 10  # run lengths; their difference is the steps counted
MEMBERS = (0, 4, 8)  # 0: solo (a group of one)
# (name, layers, d_model, heads, seq_len, batch): nanoGPT's CPU shape (the cpu profiles) and
# the gpu profiles' 6L-384d; an operation count does not depend on the batch, so both are
# counted at batch 1
SHAPES = (("cpu profile 4L-128d, ctx 64, batch 12", 4, 128, 4, 64, 12),
          ("gpu profile 6L-384d, ctx 256, batch 64", 6, 384, 6, 256, 64))  # fmt: skip
QUIET = {
    "train.log_interval": 1000,
    "train.eval_interval": 1000,
    "train.checkpoint_interval": 1000,
    "train.grad_norm_interval": 0,
    "train.progress": False,
    "tracking.wandb": False,
}


@dataclass
class StepCost:
    members: int  # 0: a solo run
    kernels: float  # kernel-launching aten operations per step
    host_reads: float  # per step
    python_calls: float  # per step
    ops: dict[str, float]  # per step, by operation


def train(cfg: RunConfig, members: int, root: Path) -> list[dict[str, Any]]:
    """``cfg`` trained solo (``members=0``) or as a group of ``members`` seeds into ``root``."""
    from ablate.training.train import train_group, train_run

    store = RunStore(root)
    if members == 0:
        return [train_run(cfg, store.run("solo", cfg.run_id()))]
    cfgs = [cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": s})})
            for s in range(members)]  # fmt: skip
    return train_group(cfgs, [store.run("stacked", c.run_id()) for c in cfgs])


def _counted(overrides: dict[str, Any], members: int, steps: int, counter) -> None:
    cfg = build_config({**overrides, **QUIET, "train.max_steps": steps})
    gc.collect()
    gc.disable()  # no other code's finalizers in the count (module docstring)
    try:
        with tempfile.TemporaryDirectory() as root, counter:
            train(cfg, members, Path(root))
    finally:
        gc.enable()


def step_cost(overrides: dict[str, Any], members: int) -> StepCost:
    """Per-step cost of ``overrides`` (``build_config`` keys) solo (``members=0``) or stacked."""
    _counted(overrides, members, SHORT, PythonCalls())  # what a process does once
    ops = [OpCounter() for _ in (SHORT, LONG)]
    calls = [PythonCalls() for _ in (SHORT, LONG)]
    for steps, op, call in zip((SHORT, LONG), ops, calls, strict=True):
        _counted(overrides, members, steps, op)
        _counted(overrides, members, steps, call)
    (short, long), n = ops, LONG - SHORT
    by_op = Counter(long.ops)
    by_op.subtract(short.ops)
    return StepCost(
        members,
        (long.kernels - short.kernels) / n,
        (long.host_reads - short.host_reads) / n,
        (calls[1].calls - calls[0].calls) / n,
        {k: v / n for k, v in sorted(by_op.items()) if v},
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
    every = {"train.log_interval": steps // 2, "train.eval_interval": 10 * steps}
    every |= {"train.progress": False}
    cfg = build_config({**overrides, **every, "train.max_steps": steps, "tracking.wandb": False})
    with tempfile.TemporaryDirectory() as root:
        done = train(cfg, members, Path(root))
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
                 "python_calls": cost.python_calls, "host_reads": cost.host_reads,
                 "tokens_per_s": tps,
                 "sdpa": sum(v for op, v in cost.ops.items()
                             if "scaled_dot_product" in op and "backward" not in op)}
            )  # fmt: skip
            log(f"step cost {name}, {k or 'solo'}: {cost.kernels:.0f} ops, "
                f"{cost.python_calls:.0f} Python calls, {cost.host_reads} reads")  # fmt: skip
    return {"rows": rows, "gpu": cuda}


def render(r: dict[str, Any]) -> str:
    """Section 10's markdown body."""
    solo = {row["shape"]: row for row in r["rows"] if row["members"] == 0}
    body = []
    for row in r["rows"]:
        base = solo[row["shape"]]
        k = row["members"] or 1
        tps = row["tokens_per_s"]
        calls = row.get("python_calls")
        body.append(
            [
                row["shape"],
                row["members"] or "solo",
                f"{row['kernels']:.0f}",
                bold(row["kernels"] / base["kernels"], 2),
                x(row["kernels"] / base["kernels"] / k, 2),
                "" if calls is None else f"{calls:,.0f}",
                "" if calls is None else bold(calls / base["python_calls"], 2),
                f"{row['sdpa']:.0f}",
                f"{row['host_reads']:.0f}",
                "not run (gpu shape: a GPU's figure)" if tps is None else f"{tps:,.0f}",
                x(tps / base["tokens_per_s"], 2) if tps and base["tokens_per_s"] else "",
            ]
        )
    header = ["shape", "members", "ops/step", "x solo", "x solo per member"]
    header += ["Python calls/step", "x solo", "SDPA calls", "host reads/step", "tokens/s"]
    header += ["x solo tokens/s"]
    parts = [
        "Kernel-launching aten operations per training step (`training.opcount.OpCounter`, "
        "a `TorchDispatchMode` counting `func.overloadpacket`; views, transposes, detach "
        "and allocations left out) and Python function calls per step "
        '(`training.opcount.PythonCalls`: `sys.setprofile` "call" events), counted around '
        f"`train_run` (solo: a group of one) and `train_group` at {SHORT} and {LONG} steps, "
        "the difference per step, after one uncounted run: logging, evaluation and checkpoints "
        "fall outside it. On a GPU each operation is a kernel launch of several microseconds "
        "of host time and every Python call host time too, so these counts are what a small "
        "model's GPU step costs the host. Host reads: `_local_scalar_dense`, `equal`, "
        "`tolist`, `cpu`, `numpy` (each a wait for the GPU). Tokens/s: the whole run or group, "
        "from its summary (steady state), on this machine. `tests/training/test_step_cost.py` "
        "holds stacks of 4 and 8 to at most 1.2x the solo step's operations and Python "
        "calls, with no host read.",
        table(header, body),
    ]
    return "\n\n".join(parts)
