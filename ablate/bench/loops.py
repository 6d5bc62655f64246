"""Framework overhead: ``train_run`` itself against a hand-written PyTorch loop.

Both arms get the same ``RunConfig``, so the same model init (``build_model`` right after
``torch.manual_seed``), batches (the seeded ``LMDataModule`` order), optimizer and schedule
(``MemberAdamW.for_model``) and torch settings. The bench only appends ``StepTimer`` to
``train_run``'s trainer: a step time is the interval between two consecutive batch starts (the
whole cycle); evaluation is switched off by configuration, checkpoints and logging stay on.
"""

from __future__ import annotations

import itertools
import math
import statistics
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import yaml

from ablate.bench.machine import sync, torch_threads
from ablate.config import RunConfig, build_config, flatten
from ablate.data import LMDataModule
from ablate.model import build_model
from ablate.training.adamw import MemberAdamW
from ablate.training.step import lm_loss
from ablate.training.trainer import attn_context

STUDIES = Path(__file__).resolve().parents[2] / "studies"
REFERENCE_STUDY = STUDIES / "reference_nanogpt_cpu.yaml"
# nanoGPT's shakespeare-char CPU settings (its README: val loss 1.88 after 2000 iterations), as
# the reference study's base spells them out (Pre-LN, no biases, cosine to min_lr, eval cadence)
NANOGPT_CPU: dict[str, Any] = {
    **flatten(yaml.safe_load(REFERENCE_STUDY.read_text())["base"]),
    "tracking.mode": "offline",
    "tracking.project": "ablate-bench",
}
# the GPU paths the config switches on (bench.md records whether they ran)
GPU_OVERRIDES: dict[str, Any] = {
    "train.accelerator": "gpu",
    "train.precision": "bf16-mixed",
    "train.attn_backend": "flash",
    "train.compile": True,
    "optim.fused": True,
    "data.pin_memory": True,
}


def bench_config(base: dict[str, Any] | RunConfig, **overrides: Any) -> RunConfig:
    """``base`` (flat dotted keys, or a config) updated with dotted-key ``overrides``."""
    flat = dict(base) if isinstance(base, dict) else flatten(base.to_dict())
    return build_config({**flat, **overrides})


def profile_flat(study: Path, profile: str) -> tuple[dict[str, Any], str]:
    """The first run of a shipped study's profile as flat keys, and its variant."""
    from ablate.study import load_study

    run = load_study(study, profile).runs[0]
    return flatten(run.config.to_dict()), run.variant


def step_times(stamps: list[float], warmup: int = 0) -> list[float]:
    """Intervals between consecutive batch starts, after the first ``warmup``."""
    return [b - a for a, b in itertools.pairwise(stamps)][warmup:]


@dataclass
class LoopResult:
    arm: str
    stamps: list[float]  # clock at each batch start
    losses: list[float] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def mean_step(self, warmup: int) -> float:
        """Steady-state seconds per step: the window's length over its number of steps."""
        times = step_times(self.stamps, warmup)
        return sum(times) / len(times) if times else math.nan


class StepTimer(pl.Callback):
    """Clock at every batch start (after a GPU synchronize at the steps in ``sync_at``: window
    ends), the loss tensors (no host sync), training stopped after ``budget_s`` seconds."""

    def __init__(self, sync_at: set[int] | None = None, budget_s: float | None = None):
        self.stamps: list[float] = []
        self.losses: list[torch.Tensor] = []
        self.t_call = self.t_return = math.nan
        self.sync_at, self.budget_s, self.out_of_time = sync_at or set(), budget_s, False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if len(self.stamps) in self.sync_at:
            sync()
        self.stamps.append(time.perf_counter())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append((outputs["loss"] if isinstance(outputs, dict) else outputs).detach())
        if self.budget_s is not None and time.perf_counter() - self.t_call > self.budget_s:
            self.out_of_time = True
            pl_module.end_early()  # the run ends at this step, completed


def ablate_loop(
    cfg: RunConfig,
    *,
    name: str = "overhead",
    sync_at: set[int] | None = None,
    progress: bool | None = None,
    budget_s: float | None = None,
    callbacks: tuple[pl.Callback, ...] = (),
) -> tuple[LoopResult, StepTimer]:
    """``train_run(cfg)`` into a temporary store, every step timed (``callbacks`` join the
    timer on its trainer); ``timer.t_call``/``t_return`` bracket the call."""
    import ablate.training.train as train_mod
    from ablate.store import RunStore

    timer = StepTimer(sync_at, budget_s)
    make_trainer = train_mod.make_trainer

    def with_timer(*args, **kwargs):
        trainer = make_trainer(*args, **kwargs)
        trainer.callbacks.extend([timer, *callbacks])
        return trainer

    with tempfile.TemporaryDirectory(prefix="ablate-bench-") as tmp:
        run_dir = RunStore(Path(tmp)).run("bench", f"{name}-{time.time_ns():x}")
        train_mod.make_trainer = with_timer
        try:
            timer.t_call = time.perf_counter()
            summary = train_mod.train_run(cfg, run_dir, {"name": name}, progress=progress)
            timer.t_return = time.perf_counter()
        finally:
            train_mod.make_trainer = make_trainer
    if summary.get("status") != "completed":
        raise RuntimeError(
            f"bench run {name} ended {summary.get('status')}: {summary.get('error')}"
        )
    return LoopResult("ablate", timer.stamps, [float(t) for t in timer.losses], summary), timer


def device_of(cfg: RunConfig) -> torch.device:
    acc = cfg.train.accelerator
    gpu = acc == "gpu" or (acc == "auto" and torch.cuda.is_available())
    return torch.device("cuda" if gpu else "cpu")


def autocast_context(precision: str, dev: torch.device):
    if precision == "32-true":
        return nullcontext()
    if precision == "bf16-mixed":
        return torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
    raise ValueError(f"the raw loop implements 32-true and bf16-mixed, not {precision}")


def raw_loop(cfg: RunConfig, *, sync_at: set[int] | None = None) -> LoopResult:
    """The minimal PyTorch loop: ``cfg.train.max_steps`` steps, nothing else."""
    t = cfg.train
    dev, sync_at = device_of(cfg), sync_at or set()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(t.deterministic and dev.type == "cpu")  # as Lightning
    try:
        with torch_threads(t.threads):
            dm = LMDataModule(cfg.data, seed=t.seed)
            dm.setup("fit")
            torch.manual_seed(t.seed)
            # ablate's model and optimizer (clipping, AdamW and the LR schedule in one step);
            # the loop is plain PyTorch
            eager = build_model(cfg.model, dm.vocab_size).to(dev)
            opt = MemberAdamW.for_model(eager, [cfg])
            model = torch.compile(eager) if t.compile else eager
            model.train()
            loader = dm.train_dataloader(start=0)
            batches = (b for _ in itertools.count() for b in loader)  # epoch after epoch
            stamps: list[float] = []
            losses: list[torch.Tensor] = []
            with attn_context(cfg, dev):
                for step in range(t.max_steps):
                    x, y = next(batches)
                    if step in sync_at:
                        sync()
                    stamps.append(time.perf_counter())
                    x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
                    with autocast_context(t.precision, dev):
                        loss = lm_loss(model(x), y)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    losses.append(loss.detach())
    finally:
        torch.use_deterministic_algorithms(deterministic)
    return LoopResult("raw", stamps, [float(x) for x in losses])


def overhead_config(base: dict[str, Any], steps: int, **overrides: Any) -> RunConfig:
    """``base`` for ``steps`` timed steps: no evaluation in the window, a one-batch final one."""
    window = {"train.max_steps": steps, "train.eval_interval": steps + 1}
    return bench_config(base, **window, **{"train.final_eval_batches": 1, **overrides})


def compare_loops(cfg: RunConfig, *, reps: int, warmup: int, log=print) -> dict[str, Any]:
    """``reps`` pairs of (ablate, raw) runs of ``cfg``, the order alternating (A B, B A, ...).

    ``ratio_median``: per pair the ratio of window means, the median over pairs (alternating
    cancels slow drift). ``ratio_best``: for every step of the window the fastest of the runs of
    each arm, the ratio of the sums; step k does the same work in every run of an arm (logging,
    grad norms, checkpoints follow the step number), so this keeps the periodic costs and drops
    stalls from other processes. The first pair's losses are compared step by step (fairness).
    """
    steps = cfg.train.max_steps
    if steps <= warmup + 1:
        raise ValueError(f"need more than warmup + 1 = {warmup + 1} steps, got {steps}")
    sync_at = {warmup, steps - 1}
    raw_loop(bench_config(cfg, **{"train.max_steps": min(steps, 10)}))  # one-time kernel set-up
    pairs, parity = [], {}
    times: dict[str, list[list[float]]] = {"ablate": [], "raw": []}
    for rep in range(reps):
        order = ("ablate", "raw")[:: 1 if rep % 2 == 0 else -1]
        got: dict[str, LoopResult] = {}
        for arm in order:
            if arm == "ablate":
                got[arm] = ablate_loop(cfg, sync_at=sync_at)[0]
            else:
                got[arm] = raw_loop(cfg, sync_at=sync_at)
            times[arm].append(step_times(got[arm].stamps, warmup))
            log(f"  pair {rep + 1}/{reps} {arm:>6}: {got[arm].mean_step(warmup) * 1e3:.2f} ms/step")
        a, r = got["ablate"].mean_step(warmup), got["raw"].mean_step(warmup)
        pairs.append(
            {"ablate_ms": a * 1e3, "raw_ms": r * 1e3, "ratio": a / r, "order": "/".join(order)}
        )
        parity = parity or loss_parity(got["ablate"].losses, got["raw"].losses)
    best = {arm: [min(col) for col in zip(*runs, strict=True)] for arm, runs in times.items()}
    ratios = [p["ratio"] for p in pairs]
    return {
        "steps": steps,
        "warmup": warmup,
        "window": steps - 1 - warmup,
        "reps": reps,
        "pairs": pairs,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ratio_best": sum(best["ablate"]) / sum(best["raw"]),
        "best_ms": {arm: sum(b) / len(b) * 1e3 for arm, b in best.items()},
        "parity": parity,
    }


def loss_parity(ablate: list[float], raw: list[float]) -> dict[str, Any]:
    """How far apart two loss trajectories are, step by step."""
    n = min(len(ablate), len(raw))
    diffs = [abs(a - b) for a, b in zip(ablate[:n], raw[:n], strict=True)]
    return {
        "steps": n,
        "max_abs_diff": max(diffs) if diffs else math.nan,
        "identical": n > 0 and len(ablate) == len(raw) and max(diffs) == 0.0,
        "first_loss": ablate[0] if ablate else math.nan,
        "last_loss": ablate[n - 1] if n else math.nan,
    }
