"""Framework overhead: the full ablate training loop against a hand-written PyTorch loop.

Both arms get the same ``RunConfig`` and so train

- the same model: ``LitLM(cfg, vocab)`` right after ``torch.manual_seed(seed)``, which is what
  ``train_run`` does, so the initial weights are identical;
- on the same batches: ``LMDataModule(cfg.data, seed).train_dataloader()``, the seeded window
  order of the real data pipeline;
- with the same optimizer: ``LitLM.configure_optimizers`` (AdamW over ``decay_groups``, the
  ``LambdaLR`` of ``lr_at``), and ``clip_grad_norm_`` over the parameters in group order, as
  ``LitLM`` clips;
- under the same torch settings: threads, deterministic algorithms (set by Lightning's
  ``deterministic`` flag), precision (autocast for ``bf16-mixed``), the SDPA kernel
  (``train.attn_context``), compile.

The ablate arm is ``train_run`` itself, untouched: Lightning ``Trainer``, ``ModelCheckpoint``,
the TQDM progress bar, ``StoreLogger`` (``metrics.csv``), ``WandbLogger`` (offline), per-layer
gradient norms at their interval, the divergence check. The bench only appends one callback,
``StepTimer``, to the trainer ``make_trainer`` returns; it reads the clock at every
``on_train_batch_start`` and keeps each step's loss tensor (no host sync).

A step time is the interval between two consecutive batch starts: the whole cycle (fetch,
forward, backward, clipping, optimizer and scheduler step, logging, checkpoints, progress bar).
Steady state drops the first ``warmup`` intervals. Evaluation is excluded by configuration
(``eval_interval`` beyond the last step; the final evaluation comes after the last interval);
checkpoints are *included* (they are part of the loop a user runs).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
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
NANOGPT_VAL_LOSS = 1.88

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


def train_command(flat: dict[str, Any], store: Path, name: str) -> list[str]:
    """The command line of ``ablate train`` of the dotted-key config ``flat`` into ``store``
    (a run in its own process, as a user starts it)."""
    cmd = [sys.executable, "-m", "ablate", "train", "--store", str(store), "--name", name]
    cmd.append("--no-progress")
    for key, v in flat.items():
        text = "null" if v is None else json.dumps(v) if isinstance(v, (list, bool)) else str(v)
        cmd += ["--set", f"{key}={text}"]
    return cmd


# --- one timed run of each arm ----------------------------------------------------------------


@dataclass
class LoopResult:
    """Clock readings at each batch start, and the per-step training losses."""

    arm: str
    stamps: list[float]
    losses: list[float] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def step_times(self, warmup: int) -> list[float]:
        """Intervals between consecutive batch starts, after the first ``warmup``."""
        return [b - a for a, b in itertools.pairwise(self.stamps)][warmup:]

    def mean_step(self, warmup: int) -> float:
        """Steady-state seconds per step: the window's length over its number of steps."""
        times = self.step_times(warmup)
        return sum(times) / len(times) if times else math.nan


class StepTimer(pl.Callback):
    """Clock at every training batch start; losses (tensors) and evaluation times kept."""

    def __init__(self, sync_at: set[int] | None = None, budget_s: float | None = None):
        self.stamps: list[float] = []
        self.losses: list[torch.Tensor] = []
        self.evals: list[dict[str, float]] = []
        self.train_start: float | None = None
        self.train_end: float | None = None
        self.t_call = self.t_return = math.nan  # around the ``train_run`` call
        # on a GPU the clock is read after a synchronize at these steps (window ends)
        self._sync_at = sync_at or set()
        self._val_t0 = 0.0
        # stop training once this many seconds have passed (a guard for a busy machine)
        self.budget_s = budget_s
        self.out_of_time = False

    def on_train_start(self, trainer, pl_module):
        self.train_start = time.perf_counter()

    def on_train_end(self, trainer, pl_module):
        self.train_end = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if len(self.stamps) in self._sync_at:
            sync()
        self.stamps.append(time.perf_counter())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.losses.append(loss.detach())
        if self.budget_s is not None and time.perf_counter() - self.train_start > self.budget_s:
            self.out_of_time = trainer.should_stop = True

    def on_validation_start(self, trainer, pl_module):
        self._val_t0 = time.perf_counter()

    def on_validation_end(self, trainer, pl_module):
        loss = trainer.callback_metrics.get("val/loss")
        self.evals.append(
            {
                "step": int(trainer.global_step),
                "t_start": self._val_t0,
                "t_end": time.perf_counter(),
                "val_loss": float(loss) if loss is not None else math.nan,
            }
        )


@contextmanager
def extra_callbacks(*callbacks: pl.Callback, profiler: Any = None) -> Iterator[None]:
    """While active, every trainer ``train_run`` builds also runs ``callbacks`` (and, when
    given, reports to ``profiler``, a Lightning ``Profiler``)."""
    import ablate.training.train as train_mod

    original = train_mod.make_trainer

    def make_trainer(*args, **kwargs):
        trainer = original(*args, **kwargs)
        trainer.callbacks.extend(callbacks)
        if profiler is not None:
            trainer.profiler = profiler
        return trainer

    train_mod.make_trainer = make_trainer
    try:
        yield
    finally:
        train_mod.make_trainer = original


def _finish_wandb() -> None:
    """Close a W&B run left open (``train_run`` closes its own; this is a safety net), so
    the next run starts its own instead of reusing it."""
    try:
        import wandb

        if wandb.run is not None:
            wandb.finish()
    except Exception:  # noqa: BLE001 - W&B is never allowed to stop a bench
        pass


def ablate_loop(
    cfg: RunConfig,
    store: Path | None = None,
    *,
    name: str = "overhead",
    sync_at: set[int] | None = None,
    progress: bool | None = None,
    budget_s: float | None = None,
    callbacks: tuple[pl.Callback, ...] = (),
    profiler: Any = None,
) -> tuple[LoopResult, StepTimer]:
    """Train ``cfg`` with ``train_run`` (everything on) and time every step; ``callbacks`` and
    ``profiler`` are added to its trainer. ``timer.t_call``/``t_return`` bracket the call."""
    from ablate.store import RunStore
    from ablate.training.train import train_run

    timer = StepTimer(sync_at, budget_s)
    with tempfile.TemporaryDirectory(prefix="ablate-bench-") as tmp:
        root = Path(store) if store is not None else Path(tmp)
        run_dir = RunStore(root).run("bench", f"{name}-{time.time_ns():x}")
        with extra_callbacks(timer, *callbacks, profiler=profiler):
            timer.t_call = time.perf_counter()
            summary = train_run(cfg, run_dir, {"name": name}, progress=progress)
            timer.t_return = time.perf_counter()
        _finish_wandb()
    if summary.get("status") != "completed":
        raise RuntimeError(
            f"bench run {name} ended {summary.get('status')}: {summary.get('error')}"
        )
    losses = [float(t) for t in timer.losses]
    return LoopResult("ablate", timer.stamps, losses, summary), timer


def device_of(cfg: RunConfig) -> torch.device:
    acc = cfg.train.accelerator
    if acc == "gpu" or (acc == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


@contextmanager
def deterministic_algorithms(on: bool) -> Iterator[None]:
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old)


def autocast_context(precision: str, dev: torch.device):
    if precision == "32-true":
        return nullcontext()
    if precision == "bf16-mixed":
        return torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
    raise ValueError(f"the raw loop implements 32-true and bf16-mixed, not {precision}")


def raw_loop(cfg: RunConfig, *, sync_at: set[int] | None = None) -> LoopResult:
    """The minimal PyTorch loop: ``cfg.train.max_steps`` steps, nothing else."""
    t, o = cfg.train, cfg.optim
    dev = device_of(cfg)
    sync_at = sync_at or set()
    on_cpu = dev.type == "cpu"
    with torch_threads(t.threads), deterministic_algorithms(t.deterministic and on_cpu):
        dm = LMDataModule(cfg.data, seed=t.seed)
        dm.setup("fit")
        torch.manual_seed(t.seed)
        # the LightningModule only builds the model, AdamW and the LR schedule, as for ablate;
        # the loop below is plain PyTorch
        lit = LitLM(cfg, dm.vocab_size).to(dev)
        model = lit.model
        optimizers = lit.configure_optimizers()
        opt, sched = optimizers["optimizer"], optimizers["lr_scheduler"]["scheduler"]
        params = [p for group in opt.param_groups for p in group["params"]]
        step_model = torch.compile(model) if t.compile else model
        model.train()
        batches = _endless(dm.train_dataloader(start=0))
        stamps: list[float] = []
        losses: list[torch.Tensor] = []
        non_blocking = dev.type == "cuda"
        with attn_context(cfg, dev):
            for step in range(t.max_steps):
                x, y = next(batches)
                if step in sync_at:
                    sync()
                stamps.append(time.perf_counter())
                x, y = x.to(dev, non_blocking=non_blocking), y.to(dev, non_blocking=non_blocking)
                with autocast_context(t.precision, dev):
                    loss = lm_loss(step_model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if o.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(params, o.grad_clip)
                opt.step()
                sched.step()
                losses.append(loss.detach())
    return LoopResult("raw", stamps, [float(x) for x in losses])


def _endless(loader) -> Iterator:
    """The loader's batches, epoch after epoch (its sampler moves on to the next epoch)."""
    while True:
        yield from loader


# --- the A/B comparison -----------------------------------------------------------------------


def overhead_config(base: dict[str, Any], steps: int, **overrides: Any) -> RunConfig:
    """``base`` for an overhead run: ``steps`` steps, no evaluation inside the timed window
    (``eval_interval`` past the end), a one-batch final evaluation; all else as configured."""
    return bench_config(
        base,
        **{
            "train.max_steps": steps,
            "train.eval_interval": steps + 1,
            "train.final_eval_batches": 1,
            **overrides,
        },
    )


def compare_loops(
    cfg: RunConfig,
    *,
    reps: int,
    warmup: int,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """``reps`` pairs of (ablate, raw) runs of ``cfg``, order alternating (A B, B A, ...).

    Two estimates of the step-time ratio ablate / raw:

    - ``ratio_median``: per pair, mean step time over the window (ablate / raw); the median
      over pairs. Alternating the order cancels slow drift of the machine's speed.
    - ``ratio_best``: for every step index k of the window, the fastest of the ``reps`` runs of
      each arm; the ratio of the sums. Step k does the same work in every run of an arm
      (logging, gradient norms and checkpoints follow the step number), so this keeps the
      periodic costs while ignoring stalls from other processes (on a shared CPU a two-thread
      step can stall for seconds when another process takes a core).

    The first pair's loss trajectories are compared step by step (the fairness check).
    """
    steps = cfg.train.max_steps
    if steps <= warmup + 1:
        raise ValueError(f"need more than warmup + 1 = {warmup + 1} steps, got {steps}")
    sync_at = {warmup, steps - 1}
    raw_loop(bench_config(cfg, **{"train.max_steps": min(steps, 10)}))  # one-time kernel set-up
    pairs = []
    times: dict[str, list[list[float]]] = {"ablate": [], "raw": []}
    parity: dict[str, Any] = {}
    for rep in range(reps):
        order = ("ablate", "raw") if rep % 2 == 0 else ("raw", "ablate")
        got: dict[str, LoopResult] = {}
        for arm in order:
            if arm == "ablate":
                got[arm], _ = ablate_loop(cfg, sync_at=sync_at)
            else:
                got[arm] = raw_loop(cfg, sync_at=sync_at)
            times[arm].append(got[arm].step_times(warmup))
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
                "median_step_ratio": statistics.median(a.step_times(warmup))
                / statistics.median(r.step_times(warmup)),
                "order": "/".join(order),
            }
        )
        if rep == 0:
            parity = loss_parity(a.losses, r.losses)
    best = {arm: [min(col) for col in zip(*runs, strict=True)] for arm, runs in times.items()}
    extra = [a - r for a, r in zip(best["ablate"], best["raw"], strict=True)]
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
        "median_step_ratio": statistics.median(p["median_step_ratio"] for p in pairs),
        "best_ms": {arm: sum(b) / len(b) * 1e3 for arm, b in best.items()},
        "stalls": {arm: _stalls(runs) for arm, runs in times.items()},
        "attribution": attribute(extra, cfg, first_step=warmup),
        "parity": parity,
    }


def step_kind(step: int, cfg: RunConfig) -> str:
    """What the ablate loop does at ``step`` (0-based) besides training: log / grad-norm /
    checkpoint, following ``LitLM`` and ``ModelCheckpoint`` (plain: nothing else)."""
    t = cfg.train
    kinds = []
    if (step + 1) % t.log_interval == 0:
        kinds.append("log")
    if t.grad_norm_interval and step % t.grad_norm_interval == 0:
        kinds.append("grad norms")
    if (step + 1) % t.checkpoint_interval == 0:
        kinds.append("checkpoint")
    return " + ".join(kinds) or "plain"


def attribute(extra: list[float], cfg: RunConfig, first_step: int) -> list[dict[str, Any]]:
    """Extra seconds of ablate over raw per step (best of the repetitions), grouped by what the
    step does: where the overhead goes."""
    groups: dict[str, list[float]] = {}
    for i, e in enumerate(extra):
        groups.setdefault(step_kind(first_step + i, cfg), []).append(e)
    total = sum(extra)
    return [
        {
            "kind": kind,
            "steps": len(v),
            "extra_ms_per_step": sum(v) / len(v) * 1e3,
            "share": sum(v) / total if total > 0 else math.nan,
        }
        for kind, v in sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    ]


def _stalls(runs: list[list[float]], factor: float = 3.0) -> int:
    """Steps slower than ``factor`` x the fastest run of the same step (other processes)."""
    best = [min(col) for col in zip(*runs, strict=True)]
    return sum(t > factor * b for run in runs for t, b in zip(run, best, strict=True))


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
