"""ablate against nanoGPT's training procedure: per-step time and wall time to the same loss.

The nanoGPT arm (``nanogpt_train``) trains ablate's model (at nanoGPT's settings it is nanoGPT's
GPT) with nanoGPT's *procedure* in plain PyTorch: random-offset batches, its warmup and cosine,
AdamW as nanoGPT builds it, ``loss.item()`` every step, evaluation every 250 steps on 20 train +
20 val batches, a checkpoint when val improves. The ablate arm is ``train_run`` as a user runs
it. Same ``RunConfig`` and seed (so the same initial weights); rounds in one process, the order
alternating. Each arm keeps its weights every ``snapshot_every`` steps (off the clock); an arm
reaches a target loss at the earliest snapshot from which every later one scores at or below it
on the whole validation split (``time_to_target``, also the GPU bench's time to quality).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from ablate.bench.loops import ablate_loop, autocast_context, bench_config, device_of
from ablate.config import RunConfig
from ablate.data import LMDataModule
from ablate.model import build_model
from ablate.training.adamw import decay_groups
from ablate.training.finish import evaluate
from ablate.training.lit import lm_loss
from ablate.training.trainer import attn_context, torch_threads

# nanoGPT's config/train_shakespeare_char.py cadence (its README's CPU command: --eval_iters=20)
NANOGPT_EVAL_INTERVAL = 250
NANOGPT_EVAL_ITERS = 20
# (steps done, seconds since the arm's call with snapshot copies excluded, weights)
Snapshot = tuple[int, float, dict[str, torch.Tensor]]


def nanogpt_lr(t: int, *, lr: float, min_lr: float, warmup: int, total: int) -> float:
    """nanoGPT's ``get_lr`` at iteration ``t``: warmup ``lr (t + 1) / (W + 1)``, then a cosine
    to ``min_lr`` at ``total``, ``min_lr`` after."""
    if t < warmup:
        return lr * (t + 1) / (warmup + 1)
    if t > total:
        return min_lr
    progress = (t - warmup) / (total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def random_windows(
    tokens: torch.Tensor, batch_size: int, seq_len: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """nanoGPT's ``get_batch``: windows at uniform random offsets, targets shifted by one."""
    ix = torch.randint(tokens.numel() - seq_len, (batch_size,), generator=gen)
    x = torch.stack([tokens[i : i + seq_len] for i in ix])
    y = torch.stack([tokens[i + 1 : i + 1 + seq_len] for i in ix])
    return x.long(), y.long()  # token files are uint16/uint32 memmaps


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


@dataclass
class NanoGPTTrace:
    """``perf_counter`` at the call and at the end (after the last evaluation), at every step
    start; losses, evaluations and snapshots."""

    t_call: float
    t_end: float = math.nan
    stamps: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)


def nanogpt_model(
    cfg: RunConfig, dev: torch.device, vocab_size: int
) -> tuple[torch.nn.Module, torch.optim.AdamW, torch.nn.Module]:
    """The model of ``cfg`` built after seeding torch with its seed, its AdamW as nanoGPT builds
    it (fused on CUDA only), and what a step calls (the model compiled with ``train.compile``)."""
    o = cfg.optim
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, vocab_size).to(dev)
    groups = decay_groups(model, o.weight_decay)
    fused = (dev.type == "cuda") or None
    opt = torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, fused=fused)
    return model, opt, torch.compile(model) if cfg.train.compile else model


def nanogpt_train(
    cfg: RunConfig,
    *,
    eval_interval: int = 0,
    eval_iters: int = 20,
    log_interval: int = 1,
    snapshot_every: int = 0,
    checkpoint_dir: Path | None = None,
    gen: torch.Generator | None = None,
) -> tuple[torch.nn.Module, LMDataModule, NanoGPTTrace]:
    """Train ``cfg`` with nanoGPT's procedure: every ``eval_interval`` steps (0: never) and
    after the last when it falls on one, its ``estimate_loss``, and a checkpoint into
    ``checkpoint_dir`` when val improved after step 0; a weight snapshot every
    ``snapshot_every`` steps and after the last. Batches come from ``gen`` (default: seeded)."""
    d, o, t = cfg.data, cfg.optim, cfg.train
    trace = NanoGPTTrace(t_call=time.perf_counter())
    dev = device_of(cfg)
    with torch_threads(t.threads):
        dm = LMDataModule(d, seed=t.seed).prepare()
        train, val = dm.tokens("train"), dm.tokens("val")
        gen = gen if gen is not None else torch.Generator().manual_seed(t.seed)
        model, opt, step_model = nanogpt_model(cfg, dev, dm.vocab_size)
        warmup = round(o.warmup_ratio * t.max_steps)
        best_val, off_clock = math.inf, 0.0
        losses: list[torch.Tensor] = []

        def estimate(tokens) -> float:
            total = torch.zeros((), device=dev)
            for _ in range(eval_iters):
                x, y = random_windows(tokens, d.batch_size, d.seq_len, gen)
                total += lm_loss(step_model(x.to(dev)), y.to(dev))
            return float(total) / eval_iters

        def evaluate_now(step: int) -> None:
            nonlocal best_val
            model.eval()
            with torch.no_grad(), autocast_context(t.precision, dev):
                tr, va = estimate(train), estimate(val)
            model.train()
            if va < best_val:
                best_val = va
                if step > 0 and checkpoint_dir is not None:
                    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
                    torch.save({**state, "iter_num": step}, Path(checkpoint_dir) / "ckpt.pt")
            trace.evals.append({"step": step, "train": tr, "val": va})

        model.train()
        with attn_context(cfg, dev):
            for step in range(t.max_steps):
                if eval_interval and step % eval_interval == 0:
                    evaluate_now(step)
                trace.stamps.append(time.perf_counter())
                lr = nanogpt_lr(step, lr=o.lr, min_lr=o.min_lr, warmup=warmup, total=t.max_steps)
                for group in opt.param_groups:
                    group["lr"] = lr
                x, y = random_windows(train, d.batch_size, d.seq_len, gen)
                x, y = x.to(dev), y.to(dev)
                with autocast_context(t.precision, dev):
                    loss = lm_loss(step_model(x), y)
                loss.backward()
                if o.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), o.grad_clip)
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(loss.detach())
                if log_interval and step % log_interval == 0:
                    loss.item()  # nanoGPT's lossf: a host sync on a GPU
                if snapshot_every and ((step + 1) % snapshot_every == 0 or step + 1 == t.max_steps):
                    now = time.perf_counter()
                    trace.snapshots.append(
                        (step + 1, now - trace.t_call - off_clock, _weights(model))
                    )
                    off_clock += time.perf_counter() - now
            if eval_interval and t.max_steps % eval_interval == 0:
                evaluate_now(t.max_steps)
        trace.t_end = time.perf_counter() - off_clock
    trace.losses = torch.stack(losses).tolist()
    return model, dm, trace


def nanogpt_run(cfg: RunConfig, *, estimate_batches: int = 20) -> dict[str, Any]:
    """Train ``cfg`` the nanoGPT way, then nanoGPT's estimate (``estimate_batches`` random val
    batches) and the loss on the whole validation split."""
    d, gen = cfg.data, torch.Generator().manual_seed(cfg.train.seed)
    model, dm, trace = nanogpt_train(cfg, log_interval=0, gen=gen)
    with torch_threads(cfg.train.threads), torch.no_grad():
        model.eval()
        val = dm.tokens("val")
        windows = (
            random_windows(val, d.batch_size, d.seq_len, gen) for _ in range(estimate_batches)
        )
        estimate = sum(lm_loss(model(x), y).item() for x, y in windows) / estimate_batches
        full = evaluate(model, dm.val_dataloader())
    return {"full_val_loss": full, "nanogpt_estimate": estimate, "train_losses": trace.losses}


# --- to the same loss ---------------------------------------------------------------------------


class Snapshots(pl.Callback):
    """A CPU copy of the weights every ``every`` steps and after the last, off the clock."""

    def __init__(self, every: int):
        self.every, self.taken, self.off_clock = every, [], 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.step % self.every == 0:
            self._take(pl_module)

    def on_train_end(self, trainer, pl_module):
        if not self.taken or self.taken[-1][0] != pl_module.step:  # the last step
            self._take(pl_module)

    def _take(self, pl_module) -> None:
        now = time.perf_counter()
        self.taken.append((pl_module.step, now - self.off_clock, _weights(pl_module.model)))
        self.off_clock += time.perf_counter() - now


def _judge(cfg: RunConfig, snapshots: list[Snapshot], target: float, dm) -> dict[str, Any]:
    """Score snapshots on the whole val split from the last backwards: the reach point is the
    earliest snapshot of the final run at or below ``target``."""
    model = build_model(cfg.model, dm.vocab_size).to(device_of(cfg))
    final, reached = None, None
    for step, t, state in reversed(snapshots):
        model.load_state_dict(state)
        loss = evaluate(model, dm.val_dataloader())
        final = loss if final is None else final
        if loss > target:
            break
        reached = (step, t)
    return {
        "final_loss": final,
        "reached": reached is not None,
        "reached_step": reached[0] if reached else None,
        "reached_s": reached[1] if reached else None,
    }


def _run_arm(cfg: RunConfig, arm: str, snapshot_every: int, budget_s=None) -> dict[str, Any]:
    """One timed run of ``arm`` (``ablate`` or ``nanogpt``)."""
    if arm == "nanogpt":
        kw = {"eval_interval": NANOGPT_EVAL_INTERVAL, "eval_iters": NANOGPT_EVAL_ITERS}
        _, _, trace = nanogpt_train(cfg, snapshot_every=snapshot_every, **kw)
        wall, snaps, stamps = trace.t_end - trace.t_call, trace.snapshots, trace.stamps
        summary, out_of_time = {}, False
    else:
        snap = Snapshots(snapshot_every)
        kw = {"progress": cfg.train.progress, "budget_s": budget_s, "callbacks": (snap,)}
        result, timer = ablate_loop(cfg, name="versus", **kw)
        wall, stamps = timer.t_return - timer.t_call - snap.off_clock, timer.stamps
        snaps = [(step, t - timer.t_call, w) for step, t, w in snap.taken]
        summary, out_of_time = result.summary, timer.out_of_time
    return {
        "step_s": statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False)),
        "wall_s": wall,
        "steps": len(stamps),
        "snapshots": snaps,
        "flops_per_token": summary.get("flops_per_token"),
        "out_of_time": out_of_time,
    }


def time_to_target(
    cfg: RunConfig, target: float, snapshot_every: int, budget_s: float | None = None
) -> dict[str, Any]:
    """``train_run(cfg)`` timed to ``target`` on the whole val split (stopped after
    ``budget_s``): per-step time, wall time, final loss and the reach point."""
    got = _run_arm(cfg, "ablate", snapshot_every, budget_s)
    dm = LMDataModule(cfg.data, seed=cfg.train.seed).prepare()
    return got | _judge(cfg, got.pop("snapshots"), target, dm)


def race(
    base: RunConfig | dict[str, Any], *, rounds: int, snapshot_every: int, log=print, **overrides
) -> dict[str, Any]:
    """``rounds`` of ablate vs nanoGPT, the order alternating; each round's ablate run judged
    against its nanoGPT run's final loss."""
    cfg = bench_config(base, **overrides)
    dm = LMDataModule(cfg.data, seed=cfg.train.seed).prepare()
    runs = []
    for i in range(rounds):
        order = ["ablate", "nanogpt"][:: 1 if i % 2 == 0 else -1]
        log(f"round {i + 1}/{rounds} ({'/'.join(order)})")
        got = {arm: _run_arm(cfg, arm, snapshot_every) for arm in order}
        target = _judge(cfg, got["nanogpt"]["snapshots"][-1:], math.inf, dm)["final_loss"]
        arms = {arm: g | _judge(cfg, g.pop("snapshots"), target, dm) for arm, g in got.items()}
        a, n = arms["ablate"], arms["nanogpt"]
        a["step_ratio"] = a["step_s"] / n["step_s"]
        a["wall_ratio"] = a["wall_s"] / n["wall_s"]
        a["reach_ratio"] = a["reached_s"] / n["reached_s"] if a["reached"] else None
        log(
            f"  target {target:.4f}, ablate final {a['final_loss']:.4f}, "
            + (f"reached at step {a['reached_step']}" if a["reached"] else "not reached")
            + f"; per step {a['step_ratio']:.3f}x, whole run {a['wall_ratio']:.3f}x"
        )
        runs.append({"order": "/".join(order), "target": target, "arms": arms})
    ablate = [r["arms"]["ablate"] for r in runs]
    reach = [g["reach_ratio"] for g in ablate if g["reach_ratio"] is not None]
    m, t, d = cfg.model, cfg.train, cfg.data
    return {
        "config": f"{m.n_layers}L/{m.n_heads}H/{m.d_model}d, ctx {d.seq_len}, batch "
        f"{d.batch_size}, {t.max_steps} steps",
        "steps": t.max_steps,
        "snapshot_every": snapshot_every,
        "ablate_eval": f"every {t.eval_interval} steps on {t.eval_batches} val batches, then "
        "the whole val split",
        "nanogpt_eval": f"every {NANOGPT_EVAL_INTERVAL} steps on {NANOGPT_EVAL_ITERS} train + "
        f"{NANOGPT_EVAL_ITERS} val batches",
        "rounds": runs,
        "summary": {
            "ablate": {
                "step_ratio": statistics.median(g["step_ratio"] for g in ablate),
                "wall_ratio": statistics.median(g["wall_ratio"] for g in ablate),
                "reach_ratio": statistics.median(reach) if reach else None,
                "reached": f"{len(reach)}/{len(ablate)}",
            }
        },
        # for the efficiency section: the ablate arm's training rate
        "tokens_per_s": d.batch_size * d.seq_len / statistics.median(g["step_s"] for g in ablate),
        "flops_per_token": ablate[0]["flops_per_token"],
    }
