"""Framework overhead: the full ablate training loop against a hand-written PyTorch loop.

Both arms get the same ``RunConfig`` and so train the same model (``LitLM(cfg, vocab)`` right
after ``torch.manual_seed(seed)``, as ``train_run`` does), on the same batches (the seeded
``LMDataModule`` order), with the same optimizer (``LitLM.configure_optimizers``, clipping over
the parameters in group order), under the same torch settings (threads, deterministic
algorithms, precision, the SDPA kernel of ``train.attn_context``, compile).

The ablate arm is ``train_run`` itself, untouched (Lightning, checkpoints, progress bar,
``metrics.csv``, W&B offline, gradient norms, the divergence check); the bench only appends the
``StepTimer`` callback, which reads the clock at every batch start and keeps each step's loss
tensor (no host sync). A step time is the interval between two consecutive batch starts: the
whole cycle. Steady state drops the first ``warmup`` intervals; evaluation is excluded by
configuration, checkpoints are *included* (they are part of the loop a user runs).
"""

from __future__ import annotations

import itertools
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from ablate.bench.machine import sync, torch_threads
from ablate.config import RunConfig, build_config, flatten
from ablate.data import LMDataModule
from ablate.training.lit import LitLM, lm_loss
from ablate.training.train import attn_context

# nanoGPT's shakespeare-char CPU settings (its README: val loss 1.88 after 2000 iterations).
# nanoGPT trains with bias=False and weight decay 0.1; its cosine runs from lr down to min_lr
# (``cosine_min``), as in studies/reference_nanogpt_cpu.yaml.
NANOGPT_CPU: dict[str, Any] = {
    "model.arch": "transformer",
    "model.n_layers": 4,
    "model.n_heads": 4,
    "model.d_model": 128,
    "model.max_seq_len": 64,
    "model.dropout": 0.0,
    "model.bias": False,
    "model.norm_placement": "pre",
    "model.norm": "layernorm",
    "model.activation": "gelu",
    "model.pos_encoding": "learned",
    "model.tie_embeddings": True,
    "data.dataset": "tinyshakespeare",
    "data.tokenizer": "char",
    "data.seq_len": 64,
    "data.batch_size": 12,
    "data.val_fraction": 0.1,
    "optim.lr": 1e-3,
    "optim.min_lr": 1e-4,
    "optim.warmup_ratio": 0.05,
    "optim.decay": "cosine_min",
    "optim.beta2": 0.99,
    "optim.weight_decay": 0.1,
    "optim.grad_clip": 1.0,
    "train.max_steps": 2000,
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
    """``base`` (flat dotted keys, or a config) updated with dotted-key ``overrides``
    (``**{"model.d_model": 64}``), validated."""
    flat = dict(base) if isinstance(base, dict) else flatten(base.to_dict())
    flat.update(overrides)
    return build_config(flat)


# --- one timed run of each arm ----------------------------------------------------------------


def step_times(stamps: list[float], warmup: int = 0) -> list[float]:
    """Intervals between consecutive batch starts, after the first ``warmup``."""
    return [b - a for a, b in itertools.pairwise(stamps)][warmup:]


@dataclass
class LoopResult:
    """Clock readings at each batch start, and the per-step training losses."""

    arm: str
    stamps: list[float]
    losses: list[float] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def mean_step(self, warmup: int) -> float:
        """Steady-state seconds per step: the window's length over its number of steps."""
        times = step_times(self.stamps, warmup)
        return sum(times) / len(times) if times else math.nan


class StepTimer(pl.Callback):
    """Clock at every training batch start (after a synchronize at the steps of ``sync_at``, on
    a GPU: window ends); losses (tensors) and evaluations kept; training stopped once
    ``budget_s`` seconds have passed (a guard for a busy machine)."""

    def __init__(self, sync_at: set[int] | None = None, budget_s: float | None = None):
        self.stamps: list[float] = []
        self.losses: list[torch.Tensor] = []
        self.evals: list[dict[str, float]] = []
        self.train_start = self.train_end = self.t_call = self.t_return = math.nan
        self.sync_at, self.budget_s, self.out_of_time = sync_at or set(), budget_s, False

    def on_train_start(self, trainer, pl_module):
        self.train_start = time.perf_counter()

    def on_train_end(self, trainer, pl_module):
        self.train_end = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if len(self.stamps) in self.sync_at:
            sync()
        self.stamps.append(time.perf_counter())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append((outputs["loss"] if isinstance(outputs, dict) else outputs).detach())
        if self.budget_s is not None and time.perf_counter() - self.train_start > self.budget_s:
            self.out_of_time = trainer.should_stop = True

    def on_validation_start(self, trainer, pl_module):
        self.evals.append({"step": int(trainer.global_step), "t_start": time.perf_counter()})

    def on_validation_end(self, trainer, pl_module):
        loss = trainer.callback_metrics.get("val/loss")
        self.evals[-1]["t_end"] = time.perf_counter()
        self.evals[-1]["val_loss"] = float(loss) if loss is not None else math.nan


def ablate_loop(
    cfg: RunConfig,
    *,
    name: str = "overhead",
    sync_at: set[int] | None = None,
    progress: bool | None = None,
    budget_s: float | None = None,
    callbacks: tuple[pl.Callback, ...] = (),
) -> tuple[LoopResult, StepTimer]:
    """Train ``cfg`` with ``train_run`` (everything on) into a temporary store and time every
    step; ``callbacks`` join the timer on its trainer. ``timer.t_call``/``t_return`` bracket
    the call."""
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
    t, o = cfg.train, cfg.optim
    dev, sync_at = device_of(cfg), sync_at or set()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(t.deterministic and dev.type == "cpu")  # as Lightning
    try:
        with torch_threads(t.threads):
            dm = LMDataModule(cfg.data, seed=t.seed)
            dm.setup("fit")
            torch.manual_seed(t.seed)
            # the LightningModule only builds the model, AdamW and the LR schedule, as for
            # ablate; the loop below is plain PyTorch
            lit = LitLM(cfg, dm.vocab_size).to(dev)
            optimizers = lit.configure_optimizers()
            opt, sched = optimizers["optimizer"], optimizers["lr_scheduler"]["scheduler"]
            params = [p for group in opt.param_groups for p in group["params"]]
            model = torch.compile(lit.model) if t.compile else lit.model
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
                    if o.grad_clip is not None:
                        torch.nn.utils.clip_grad_norm_(params, o.grad_clip)
                    opt.step()
                    sched.step()
                    losses.append(loss.detach())
    finally:
        torch.use_deterministic_algorithms(deterministic)
    return LoopResult("raw", stamps, [float(x) for x in losses])


# --- the A/B comparison -----------------------------------------------------------------------


def overhead_config(base: dict[str, Any], steps: int, **overrides: Any) -> RunConfig:
    """``base`` for an overhead run: ``steps`` steps, no evaluation inside the timed window
    (``eval_interval`` past the end), a one-batch final evaluation; all else as configured."""
    window = {"train.max_steps": steps, "train.eval_interval": steps + 1}
    return bench_config(base, **window, **{"train.final_eval_batches": 1, **overrides})


def compare_loops(
    cfg: RunConfig, *, reps: int, warmup: int, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """``reps`` pairs of (ablate, raw) runs of ``cfg``, order alternating (A B, B A, ...).

    Two estimates of the step-time ratio ablate / raw: ``ratio_median``, per pair the mean step
    over the window, the median over pairs (alternating the order cancels slow drift of the
    machine's speed); ``ratio_best``, for every step k of the window the fastest of the ``reps``
    runs of each arm, the ratio of the sums. Step k does the same work in every run of an arm
    (logging, grad norms and checkpoints follow the step number), so this keeps the periodic
    costs while ignoring stalls from other processes (on a shared CPU a two-thread step can
    stall for seconds when another process takes a core). The first pair's loss trajectories
    are compared step by step (the fairness check).
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
            got[arm] = (
                ablate_loop(cfg, sync_at=sync_at)[0]
                if arm == "ablate"
                else raw_loop(cfg, sync_at=sync_at)
            )
            times[arm].append(step_times(got[arm].stamps, warmup))
            log(
                f"  pair {rep + 1}/{reps} {arm:>6}: "
                f"{got[arm].mean_step(warmup) * 1e3:.2f} ms/step over {steps - 1 - warmup} steps"
            )
        a, r = got["ablate"], got["raw"]
        pairs.append(
            {
                "ablate_ms": a.mean_step(warmup) * 1e3,
                "raw_ms": r.mean_step(warmup) * 1e3,
                "ratio": a.mean_step(warmup) / r.mean_step(warmup),
                "order": "/".join(order),
            }
        )
        parity = parity or loss_parity(a.losses, r.losses)
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
        "same_length": len(ablate) == len(raw),
        "max_abs_diff": max(diffs) if diffs else math.nan,
        "identical": n > 0 and len(ablate) == len(raw) and max(diffs) == 0.0,
        "first_loss": ablate[0] if ablate else math.nan,
        "last_loss": ablate[n - 1] if n else math.nan,
    }
