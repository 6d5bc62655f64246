"""ablate against nanoGPT's training procedure: per-step time and wall time to the same loss.

Measured in one process, in A/B pairs whose order alternates (A B, B A, ...), so that a slow
drift of a shared machine's speed cancels in the ratios:

- arm **ablate**: ``train_run`` exactly as a user runs it (Lightning ``Trainer``, checkpoints,
  ``metrics.csv``, W&B offline, progress bar, gradient norms, its evaluation cadence);
- arm **nanoGPT**: ``nanogpt_loop.nanogpt_train``, nanoGPT's procedure in plain PyTorch
  (random-offset batches, its warmup and cosine, AdamW built as nanoGPT builds it, ``loss.item()``
  every step, evaluation every 250 steps on 20 train + 20 val batches, a checkpoint when val
  improves).

Both get the same ``RunConfig`` and seed, so the same initial weights (``build_model`` right
after ``torch.manual_seed(seed)``). The clock of an arm starts when it is called (data, model and,
for ablate, W&B and Lightning set-up are inside it; imports are not).

**Per step**: the median interval between consecutive training-step starts of each run
(evaluation and checkpoint steps are in the tail the median ignores); per pair, ablate ÷ nanoGPT.

**To the same loss**: each arm keeps a copy of its weights every ``snapshot_every`` steps and after
the last (the copy is taken off the clock). After a pair, the target is the nanoGPT run's final
loss on the whole validation split; an arm reaches it at the earliest snapshot from which every
later snapshot scores at or below it on the whole split. Its time to quality is the wall time
from its call to that snapshot.

**Breakdown**: one more run of each arm with timers: Lightning's ``SimpleProfiler`` (plus timers
around the optimizer update and each logger) for ablate, per-phase clocks for nanoGPT; reported
per training step, with what each arm spends before its first step and after its last.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytorch_lightning as pl
import torch

from ablate.bench.loops import ablate_loop, bench_config
from ablate.bench.nanogpt_loop import nanogpt_train
from ablate.config import RunConfig

# nanoGPT's config/train_shakespeare_char.py cadence (its README's CPU command: --eval_iters=20
# --log_interval=1) and ablate's reference study (studies/reference_nanogpt_cpu.yaml)
NANOGPT_EVAL_INTERVAL = 250
NANOGPT_EVAL_ITERS = 20
REFERENCE_TRAIN: dict[str, Any] = {
    "train.eval_interval": 250,
    "train.eval_batches": 20,
    "train.final_eval_batches": None,
    "train.log_interval": 10,
}


class Snapshots(pl.Callback):
    """A CPU copy of the weights every ``every`` optimizer steps and after the last, with the
    clock reading minus the time earlier copies took (``perf_counter`` seconds)."""

    def __init__(self, every: int):
        self.every = every
        self.taken: list[tuple[int, float, dict[str, torch.Tensor]]] = []
        self.off_clock = 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = int(trainer.global_step)
        if step % self.every and step != trainer.max_steps:
            return
        now = time.perf_counter()
        state = {
            k: v.detach().to("cpu", copy=True) for k, v in pl_module.model.state_dict().items()
        }
        self.taken.append((step, now - self.off_clock, state))
        self.off_clock += time.perf_counter() - now


def _median_step(stamps: list[float]) -> float:
    return statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False))


def _judge(cfg: RunConfig, snapshots, target: float, dm) -> dict[str, Any]:
    """Score snapshots on the whole val split from the last backwards; the reach point is the
    earliest snapshot of the final run at or below ``target``."""
    from ablate.model import build_model
    from ablate.training.train import evaluate

    model = build_model(cfg.model, dm.vocab_size)
    scored: dict[int, float] = {}
    reached: tuple[int, float] | None = None
    for step, t, state in reversed(snapshots):
        model.load_state_dict(state)
        scored[step] = evaluate(model, dm.val_dataloader())
        if scored[step] > target:
            break
        reached = (step, t)
    final_step = snapshots[-1][0]
    return {
        "final_loss": scored[final_step],
        "scored": dict(sorted(scored.items())),
        "reached": reached is not None,
        "reached_step": reached[0] if reached else None,
        "reached_s": reached[1] if reached else None,
    }


def _run_arm(cfg: RunConfig, arm: str, snapshot_every: int) -> dict[str, Any]:
    """One timed run: ``nanogpt`` or an ablate arm (``cfg`` already has its overrides)."""
    if arm == "nanogpt":
        _, _, trace = nanogpt_train(
            cfg,
            eval_interval=NANOGPT_EVAL_INTERVAL,
            eval_iters=NANOGPT_EVAL_ITERS,
            snapshot_every=snapshot_every,
        )
        return {
            "step_s": _median_step(trace.stamps),
            "wall_s": trace.t_end - trace.t_call,
            "snapshots": trace.snapshots,
            "steps": len(trace.stamps),
        }
    snaps = Snapshots(snapshot_every)
    result, timer = ablate_loop(cfg, name="versus", progress=cfg.train.progress, callbacks=(snaps,))
    return {
        "flops_per_token": result.summary.get("flops_per_token"),
        "step_s": _median_step(timer.stamps),
        "wall_s": timer.t_return - timer.t_call - snaps.off_clock,
        "snapshots": [(step, t - timer.t_call, w) for step, t, w in snaps.taken],
        "steps": len(timer.stamps),
    }


def run_pair(
    cfg: RunConfig,
    order: list[str],
    variants: dict[str, dict[str, Any]],
    snapshot_every: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """One run of each arm in ``order`` (``nanogpt`` or a key of ``variants``: ablate with
    those overrides), each ablate arm judged against the nanoGPT run's final loss."""
    got = {}
    for arm in order:
        arm_cfg = cfg if arm == "nanogpt" else bench_config(cfg, **variants[arm])
        got[arm] = _run_arm(arm_cfg, arm, snapshot_every)
        g = got[arm]
        log(f"  {arm:>14}: {g['step_s'] * 1e3:.2f} ms/step (median), {g['wall_s']:.1f} s")
    from ablate.data import LMDataModule

    dm = LMDataModule(cfg.data, seed=cfg.train.seed).prepare()
    target = _judge(cfg, got["nanogpt"]["snapshots"][-1:], math.inf, dm)["final_loss"]
    out: dict[str, Any] = {"order": "/".join(order), "target": target, "arms": {}}
    for arm in order:
        judged = _judge(cfg, got[arm]["snapshots"], target, dm)
        out["arms"][arm] = {k: v for k, v in got[arm].items() if k != "snapshots"} | judged
    n = out["arms"]["nanogpt"]
    for arm in variants:
        a = out["arms"][arm]
        a["step_ratio"] = a["step_s"] / n["step_s"]
        a["wall_ratio"] = a["wall_s"] / n["wall_s"]
        a["reach_ratio"] = a["reached_s"] / n["reached_s"] if a["reached"] else None
        log(
            f"  {arm}: target {target:.4f}, final {a['final_loss']:.4f} "
            + (f"reached at step {a['reached_step']}" if a["reached"] else "not reached")
            + f"; per step {a['step_ratio']:.3f}x, whole run {a['wall_ratio']:.3f}x"
        )
    return out


def race(
    base: RunConfig | dict[str, Any],
    *,
    pairs: int,
    snapshot_every: int,
    breakdown_steps: int | None = None,
    before: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    **overrides: Any,
) -> dict[str, Any]:
    """``pairs`` rounds of ablate vs nanoGPT (and ablate with the ``before`` overrides, when
    given) in rotating order, at the reference study's evaluation and logging cadence; then one
    timed run of each arm for the breakdown (``breakdown_steps`` steps; default: as many)."""
    cfg = bench_config(base, **{**REFERENCE_TRAIN, **overrides})
    variants: dict[str, dict[str, Any]] = {"ablate": {}}
    if before is not None:
        variants["ablate (before)"] = before
    arms = [*variants, "nanogpt"]
    runs = []
    for rep in range(pairs):
        k = rep % len(arms)
        order = arms[k:] + arms[:k] if rep % 2 == 0 else (arms[k:] + arms[:k])[::-1]
        log(f"round {rep + 1}/{pairs} ({'/'.join(order)})")
        runs.append(run_pair(cfg, order, variants, snapshot_every, log))
    summary = {}
    for arm in variants:
        got = [r["arms"][arm] for r in runs]
        reach = [g["reach_ratio"] for g in got if g["reach_ratio"] is not None]
        summary[arm] = {
            "step_ratio": statistics.median(g["step_ratio"] for g in got),
            "wall_ratio": statistics.median(g["wall_ratio"] for g in got),
            "reach_ratio": statistics.median(reach) if reach else None,
            "reached": f"{len(reach)}/{len(got)}",
        }
    m = cfg.model
    short = bench_config(cfg, **{"train.max_steps": breakdown_steps or cfg.train.max_steps})
    ablate_step = statistics.median(r["arms"]["ablate"]["step_s"] for r in runs)
    return {
        "config": f"{m.n_layers}L/{m.n_heads}H/{m.d_model}d, ctx {cfg.data.seq_len}, batch "
        f"{cfg.data.batch_size}, {cfg.train.max_steps} steps",
        "steps": cfg.train.max_steps,
        "snapshot_every": snapshot_every,
        "ablate_eval": f"every {cfg.train.eval_interval} steps on {cfg.train.eval_batches} "
        "val batches, then the whole val split",
        "nanogpt_eval": f"every {NANOGPT_EVAL_INTERVAL} steps on {NANOGPT_EVAL_ITERS} train + "
        f"{NANOGPT_EVAL_ITERS} val batches",
        "variants": variants,
        "rounds": runs,
        "summary": summary,
        # for the efficiency section: the ablate arm's training rate
        "tokens_per_s": cfg.data.batch_size * cfg.data.seq_len / ablate_step,
        "flops_per_token": runs[0]["arms"]["ablate"]["flops_per_token"],
        "breakdown": breakdown(short, log),
    }


# --- where the time goes ----------------------------------------------------------------------

# (row, predicate on a Lightning SimpleProfiler action name)
_ACTIONS: list[tuple[str, Callable[[str], bool]]] = [
    ("data loading", lambda a: a.endswith("train_dataloader_next")),
    ("forward + loss", lambda a: a.startswith("[Strategy]") and a.endswith(".training_step")),
    ("backward", lambda a: a.startswith("[Strategy]") and a.endswith(".backward")),
    ("gradient clipping", lambda a: a.endswith(".configure_gradient_clipping")),
    ("optimizer update", lambda a: a == "optimizer update" or a.endswith("optimizer_zero_grad")),
    (
        "grad-norm hook (norms + their logging)",
        lambda a: a.startswith("[LightningModule]") and a.endswith("on_before_optimizer_step"),
    ),
    (
        "logging hook (loss sync, metrics to the loggers)",
        lambda a: a.startswith("[LightningModule]") and a.endswith(".on_train_batch_end"),
    ),
    (
        "checkpointing",
        lambda a: a.startswith("[Callback]ModelCheckpoint") and a.endswith("on_train_batch_end"),
    ),
    ("progress bar", lambda a: a.startswith("[Callback]TQDMProgressBar") and "train_batch" in a),
]
# parts of the rows above (every logger call, from any hook): shown, not added up
_DETAILS = {
    "of which: writing metrics.csv (fsync per call)": "logger StoreLogger",
    "of which: W&B log": "logger WandbLogger",
}
REST = "rest: the loop, LR, other hooks (ablate: + profiler)"
_NANOGPT_PHASES = {
    "data loading": "data",
    "forward + loss": "forward",
    "backward": "backward",
    "gradient clipping": "clip",
    "optimizer update": "optimizer",
    "logging hook (loss sync, metrics to the loggers)": "log",
}


@contextmanager
def _timed(profiler) -> Iterator[None]:
    """Report the AdamW update itself and each logger's ``log_metrics`` to ``profiler`` (they
    run inside other actions: Lightning's closure runs inside ``optimizer.step``)."""
    import torch.optim.adam as adam_mod

    from ablate.training.tracking import StoreLogger

    patched: list[tuple[Any, str, Any]] = []

    def wrap(owner, attr: str, name: str) -> None:
        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            with profiler.profile(name):
                return original(*args, **kwargs)

        patched.append((owner, attr, original))
        setattr(owner, attr, timed)

    import ablate.training.train as train_mod

    wrap(adam_mod, "adam", "optimizer update")
    wrap(train_mod, "make_wandb_logger", "W&B start")
    wrap(train_mod, "close_wandb", "W&B finish")
    wrap(train_mod, "evaluate", "final evaluation")
    wrap(StoreLogger, "log_metrics", "logger StoreLogger")
    try:
        from pytorch_lightning.loggers import WandbLogger

        wrap(WandbLogger, "log_metrics", "logger WandbLogger")
    except ImportError:
        pass
    try:
        yield
    finally:
        for owner, attr, original in reversed(patched):
            setattr(owner, attr, original)


def breakdown(cfg: RunConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """One timed run of each arm of ``cfg``: milliseconds per training step by component, and
    seconds before the first step and after the last."""
    from pytorch_lightning.profilers import SimpleProfiler

    profiler = SimpleProfiler()
    with _timed(profiler):
        _, timer = ablate_loop(
            cfg, name="breakdown", progress=cfg.train.progress, profiler=profiler
        )
    durations = {a: sum(d) for a, d in profiler.recorded_durations.items()}
    steps = len(timer.stamps)
    eval_s = sum(e["t_end"] - e["t_start"] for e in timer.evals)
    fit_s = timer.train_end - timer.stamps[0] - eval_s
    ablate: dict[str, float] = {}
    for row, match in _ACTIONS:
        ablate[row] = sum(v for a, v in durations.items() if match(a))
    ablate["evaluation"] = eval_s
    ablate[REST] = fit_s - sum(v for k, v in ablate.items() if k != "evaluation")
    _, _, trace = nanogpt_train(
        cfg, eval_interval=NANOGPT_EVAL_INTERVAL, eval_iters=NANOGPT_EVAL_ITERS
    )
    details = {row: durations.get(action, 0.0) for row, action in _DETAILS.items()}
    nano = {row: trace.phases.get(phase, 0.0) for row, phase in _NANOGPT_PHASES.items()}
    # the evaluation at step 0 runs before the first step starts: a once-per-run cost
    nano["evaluation"] = sum(e["s"] for e in trace.evals if e["step"] > 0)
    nano[REST] = trace.t_end - trace.stamps[0] - sum(nano.values())
    n_steps = len(trace.stamps)
    rows = []
    for row in ablate:
        a_ms = ablate[row] / steps * 1e3
        n_ms = nano[row] / n_steps * 1e3 if row in nano else 0.0
        rows.append({"component": row, "ablate_ms": a_ms, "nanogpt_ms": n_ms})
    detail_rows = [
        {"component": row, "ablate_ms": v / steps * 1e3, "nanogpt_ms": 0.0}
        for row, v in details.items()
    ]
    total = {
        "ablate_ms": sum(r["ablate_ms"] for r in rows),
        "nanogpt_ms": (trace.t_end - trace.stamps[0]) / n_steps * 1e3,
    }
    log(f"breakdown: ablate {total['ablate_ms']:.2f} ms/step, nanoGPT {total['nanogpt_ms']:.2f}")
    return {
        "steps": steps,
        "rows": rows,
        "details": detail_rows,
        "total": total,
        "fixed_s": [
            {
                "what": "before the first step (data, model, Lightning set-up)",
                "ablate": timer.stamps[0] - timer.t_call - durations.get("W&B start", 0.0),
                "nanogpt": trace.stamps[0] - trace.t_call,
            },
            {"what": "W&B start", "ablate": durations.get("W&B start", 0.0), "nanogpt": 0.0},
            {
                "what": "final evaluation on the whole val split",
                "ablate": durations.get("final evaluation", 0.0),
                "nanogpt": 0.0,
            },
            {
                "what": "W&B finish, summary",
                "ablate": timer.t_return - timer.train_end - durations.get("final evaluation", 0.0),
                "nanogpt": 0.0,
            },
        ],
    }
