"""Bench section 10, what one training step costs the host: kernel-launching aten operations,
Python function calls and host reads per step of a solo run (``train_run``, Lightning) and of
stacked groups (``train_group``) of 1, 4 and 8 members, at the cpu and the gpu profile's shapes,
and the tokens/s each trains at. Section 11 (``stack_one``): this CPU's wall time per step of a
stack of one against a solo run, measured round-robin: the ratio to watch without a GPU.

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
import statistics
import tempfile
import time
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
MEMBERS = (0, 1, 4, 8)  # 0: solo
WALL_STEPS = (5, 25)  # the wall-time row's run lengths
WALL_ROUNDS = 7  # solo, stack of 1, solo, ... (the order alternating each round)
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


def _timed(overrides: dict[str, Any], members: int, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds (this process's, every thread) of one run of ``steps`` steps."""
    cfg = build_config({**overrides, **QUIET, "train.max_steps": steps})
    with tempfile.TemporaryDirectory() as root:
        t, cpu = time.perf_counter(), time.process_time()
        train(cfg, members, Path(root))
        return time.perf_counter() - t, time.process_time() - cpu


def wall_rows(overrides: dict[str, Any], rounds: int = WALL_ROUNDS, log=print) -> dict[str, Any]:
    """Wall time per step of a solo run and of a stack of one (the same run through the group's
    path), measured round-robin: each round times both (the order alternating) at two lengths,
    the difference per step, so set-up and the final evaluation cancel; the median over rounds
    of each, and of the per-round ratio. The process's CPU time per step beside it: on a busy
    machine wall time also counts the other processes' turns, CPU time only this one's work."""
    short, long = WALL_STEPS
    _timed(overrides, 1, short)  # what a process does once (the group path's imports)
    wall: dict[int, list[float]] = {0: [], 1: []}
    cpu: dict[int, list[float]] = {0: [], 1: []}
    for r in range(rounds):
        for members in (0, 1) if r % 2 == 0 else (1, 0):
            (wa, ca), (wb, cb) = _timed(overrides, members, short), _timed(overrides, members, long)
            wall[members].append((wb - wa) / (long - short))
            cpu[members].append((cb - ca) / (long - short))
        log(f"  round {r + 1}/{rounds}: solo {wall[0][-1] * 1e3:.1f} ms/step "
            f"({cpu[0][-1] * 1e3:.1f} CPU), stack of 1 {wall[1][-1] * 1e3:.1f} ms/step "
            f"({cpu[1][-1] * 1e3:.1f} CPU)")  # fmt: skip
    ratios = [s / o for s, o in zip(wall[1], wall[0], strict=True)]
    cpu_ratios = [s / o for s, o in zip(cpu[1], cpu[0], strict=True)]
    return {
        "solo_ms": statistics.median(wall[0]) * 1e3,
        "stack1_ms": statistics.median(wall[1]) * 1e3,
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "solo_cpu_ms": statistics.median(cpu[0]) * 1e3,
        "stack1_cpu_ms": statistics.median(cpu[1]) * 1e3,
        "cpu_ratio": statistics.median(cpu_ratios),
        "rounds": rounds,
        "steps": [short, long],
    }


def measure(threads: int, quick: bool, log=print) -> dict[str, Any]:
    """Section 10's rows: per shape and member count, the counts per step and (at the cpu
    shape, on a CPU) tokens/s; and the wall time row at the cpu shape."""
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


def stack_one(quick: bool, log=print) -> dict[str, Any]:
    """Section 11: ``wall_rows`` at the cpu profile's shape, on one thread (on a shared machine
    a second thread waits for its turn, which times the machine, not the path)."""
    name, *shape = SHAPES[0]
    flat = _shape(*shape) | {"train.threads": 1}
    if quick:  # a smoke test of the section: its numbers measure nothing
        name, flat = "quick 1L-32d, ctx 16, batch 2", _shape(1, 32, 2, 16, 2)
    return {"shape": name, "threads": 1} | wall_rows(flat, 1 if quick else WALL_ROUNDS, log=log)


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
        f"`train_run` (solo, Lightning) and `train_group` (stacked) at {SHORT} and {LONG} steps, "
        "the difference per step, after one uncounted run: logging, evaluation and checkpoints "
        "fall outside it. On a GPU each operation is a kernel launch of several microseconds "
        "of host time and every Python call host time too, so these counts are what a small "
        "model's GPU step costs the host. Host reads: `_local_scalar_dense`, `equal`, "
        "`tolist`, `cpu`, `numpy` (each a wait for the GPU). Tokens/s: the whole run or group, "
        "from its summary (steady state), on this machine. `tests/training/test_step_cost.py` "
        "holds stacks of 1, 4 and 8 to at most 1.2x the solo step's operations and Python "
        "calls, with no host read.",
        table(header, body),
    ]
    return "\n\n".join(parts)


def render_stack_one(w: dict[str, Any]) -> str:
    """Section 11's markdown body."""
    text = (
        f"Wall time per step on this CPU, {w['shape']}, {w['threads']} thread: a solo run "
        "(`train_run`) against a stack of one (the same run through `train_group`), "
        f"{w['rounds']} rounds round-robin (the order alternating), runs of {w['steps'][0]} "
        f"and {w['steps'][1]} steps, the difference per step; medians, and the median of the "
        "per-round ratios. CPU time is the process's own: on a busy machine wall time also "
        "counts other processes' turns. Without a GPU this is the ratio to watch (goal: at "
        "most 1.2); section 10 counts what it is made of."
    )
    rows = [["wall", f"{w['solo_ms']:.1f}", f"{w['stack1_ms']:.1f}", bold(w["ratio"], 3),
             ", ".join(f"{v:.3f}" for v in w["ratios"])]]  # fmt: skip
    rows.append(["CPU", f"{w['solo_cpu_ms']:.1f}", f"{w['stack1_cpu_ms']:.1f}",
                 bold(w["cpu_ratio"], 3), ""])  # fmt: skip
    header = ["time", "solo ms/step", "stack of 1 ms/step", "stack of 1 / solo", "per round"]
    return "\n\n".join([text, table(header, rows)])
