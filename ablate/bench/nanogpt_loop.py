"""nanoGPT's training procedure in a plain PyTorch loop (diagnostic for the reference study).

Trains ablate's model (at nanoGPT's settings it is nanoGPT's GPT: same layers, init and
parameter count) with nanoGPT's *procedure* instead of ablate's: every batch is ``batch_size``
windows at independent uniformly random offsets of the training tokens (with replacement), the
LR is ``nanogpt_lr``, the optimizer and clipping are set by hand; no Lightning, store or logger.
``nanogpt_run`` reports the loss on the whole validation split (the windows ablate's final
evaluation uses) and nanoGPT's own printed estimate (the mean over ``estimate_batches`` random
validation batches); ``nanogpt_train`` is the nanoGPT arm of section 3 (``versus``).

If this loop lands where ``ablate run studies/reference_nanogpt_cpu.yaml`` lands, any gap to
nanoGPT's published number is not something ablate's training adds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ablate.bench.loops import autocast_context, device_of
from ablate.config import RunConfig
from ablate.data import LMDataModule
from ablate.model import build_model
from ablate.training.lit import decay_groups, lm_loss
from ablate.training.train import attn_context, evaluate, torch_threads


def nanogpt_lr(t: int, *, lr: float, min_lr: float, warmup: int, total: int) -> float:
    """nanoGPT's ``get_lr`` at iteration ``t`` (0-based):

    - ``t < W``: ``lr · (t + 1) / (W + 1)``
    - ``t > total``: ``min_lr``
    - otherwise ``min_lr + ½ (1 + cos(π (t − W) / (total − W))) · (lr − min_lr)``
    """
    if t < warmup:
        return lr * (t + 1) / (warmup + 1)
    if t > total:
        return min_lr
    progress = (t - warmup) / (total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def random_windows(
    tokens: torch.Tensor, batch_size: int, seq_len: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """nanoGPT's ``get_batch``: ``batch_size`` windows at offsets drawn uniformly from
    ``[0, len - seq_len)``; targets are the inputs shifted by one token."""
    ix = torch.randint(tokens.numel() - seq_len, (batch_size,), generator=gen)
    x = torch.stack([tokens[i : i + seq_len] for i in ix])  # (B, T)
    y = torch.stack([tokens[i + 1 : i + 1 + seq_len] for i in ix])  # (B, T)
    return x.long(), y.long()  # token files are uint16/uint32 memmaps


@dataclass
class NanoGPTTrace:
    """What one ``nanogpt_train`` call measured (``perf_counter`` seconds)."""

    t_call: float  # the function was entered (before data and model set-up)
    t_end: float = math.nan  # the last step (and any evaluation after it) finished
    stamps: list[float] = field(default_factory=list)  # start of every training step
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase, summed
    losses: list[float] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    # (steps done, seconds since t_call with snapshot copies excluded, weights)
    snapshots: list[tuple[int, float, dict[str, torch.Tensor]]] = field(default_factory=list)


class _Phases:
    """Adds the seconds since the previous ``lap`` to a named phase (CPU: ops are synchronous,
    so host time is the op's time; on a GPU it is only the launch time)."""

    def __init__(self, into: dict[str, float]):
        self.into, self.t = into, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.into[name] = self.into.get(name, 0.0) + now - self.t
        self.t = now


def _estimate(model, tokens, cfg: RunConfig, gen, iters: int, dev) -> float:
    """nanoGPT's ``estimate_loss`` for one split: mean loss of ``iters`` random batches."""
    total = torch.zeros((), device=dev)
    for _ in range(iters):
        x, y = random_windows(tokens, cfg.data.batch_size, cfg.data.seq_len, gen)
        total += lm_loss(model(x.to(dev)), y.to(dev))
    return float(total) / iters


def _update(cfg: RunConfig, model, step_model, opt, batch, lap: _Phases) -> torch.Tensor:
    """Forward, backward, clipping and the AdamW step of one batch, each phase timed."""
    x, y = batch
    with autocast_context(cfg.train.precision, x.device):
        loss = lm_loss(step_model(x), y)
    lap.lap("forward")
    loss.backward()
    lap.lap("backward")
    if cfg.optim.grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
    lap.lap("clip")
    opt.step()
    opt.zero_grad(set_to_none=True)
    lap.lap("optimizer")
    return loss


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
    """Train ``cfg`` for ``cfg.train.max_steps`` steps with nanoGPT's procedure.

    Per step: LR set by ``nanogpt_lr``, a ``random_windows`` batch, forward, backward,
    ``clip_grad_norm_``, AdamW (fused on CUDA only, as nanoGPT builds it), ``zero_grad``, and
    every ``log_interval`` steps ``loss.item()`` (nanoGPT's README CPU command logs every step).
    Every ``eval_interval`` steps (0: never), and after the last step when it falls on one,
    nanoGPT's ``estimate_loss``: ``eval_iters`` random batches of train and of val in eval
    mode; when val improved, a checkpoint (model + optimizer) is written to ``checkpoint_dir``
    (after step 0, as nanoGPT does). ``snapshot_every`` keeps a copy of the weights every so
    many steps and after the last (off the clock). Device, autocast, SDPA backend and compile
    follow ``cfg.train``. Batches are drawn from ``gen`` (default: a generator seeded with
    ``cfg.train.seed``; nanoGPT's evaluation batches come from the same stream).
    """
    d, o, t = cfg.data, cfg.optim, cfg.train
    trace = NanoGPTTrace(t_call=time.perf_counter())
    dev = device_of(cfg)
    with torch_threads(t.threads):
        dm = LMDataModule(d, seed=t.seed).prepare()
        train, val = dm.tokens("train"), dm.tokens("val")
        gen = gen if gen is not None else torch.Generator().manual_seed(t.seed)
        torch.manual_seed(t.seed)
        model = build_model(cfg.model, dm.vocab_size).to(dev)
        # AdamW as nanoGPT builds it: fused on CUDA only
        fused = (dev.type == "cuda") or None
        groups = decay_groups(model, o.weight_decay)
        opt = torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, fused=fused)
        step_model = torch.compile(model) if t.compile else model
        warmup = round(o.warmup_ratio * t.max_steps)
        best_val, off_clock = math.inf, 0.0
        losses: list[torch.Tensor] = []

        def evaluate_now(step: int) -> None:
            nonlocal best_val
            t0 = time.perf_counter()
            model.eval()
            with torch.no_grad(), autocast_context(t.precision, dev):
                tr = _estimate(step_model, train, cfg, gen, eval_iters, dev)
                va = _estimate(step_model, val, cfg, gen, eval_iters, dev)
            model.train()
            if va < best_val:
                best_val = va
                if step > 0 and checkpoint_dir is not None:
                    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
                    torch.save({**state, "iter_num": step}, Path(checkpoint_dir) / "ckpt.pt")
            took = time.perf_counter() - t0
            trace.evals.append({"step": step, "train": tr, "val": va, "s": took})
            trace.phases["eval"] = trace.phases.get("eval", 0.0) + took

        def snapshot(step: int) -> None:
            nonlocal off_clock
            now = time.perf_counter()
            state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            trace.snapshots.append((step, now - trace.t_call - off_clock, state))
            off_clock += time.perf_counter() - now

        model.train()
        with attn_context(cfg, dev):
            for step in range(t.max_steps):
                if eval_interval and step % eval_interval == 0:
                    evaluate_now(step)
                trace.stamps.append(time.perf_counter())
                lap = _Phases(trace.phases)
                lr = nanogpt_lr(step, lr=o.lr, min_lr=o.min_lr, warmup=warmup, total=t.max_steps)
                for group in opt.param_groups:
                    group["lr"] = lr
                x, y = random_windows(train, d.batch_size, d.seq_len, gen)
                x, y = x.to(dev), y.to(dev)
                lap.lap("data")
                loss = _update(cfg, model, step_model, opt, (x, y), lap)
                losses.append(loss.detach())
                if log_interval and step % log_interval == 0:
                    loss.item()  # nanoGPT's lossf: a host sync on a GPU
                lap.lap("log")
                if snapshot_every and ((step + 1) % snapshot_every == 0 or step + 1 == t.max_steps):
                    snapshot(step + 1)
            if eval_interval and t.max_steps % eval_interval == 0:
                evaluate_now(t.max_steps)
        trace.t_end = time.perf_counter() - off_clock
    trace.losses = torch.stack(losses).tolist()
    return model, dm, trace


def nanogpt_run(cfg: RunConfig, *, estimate_batches: int = 20) -> dict[str, Any]:
    """Train ``cfg`` the nanoGPT way for ``cfg.train.max_steps`` steps (no evaluation during
    training) and evaluate: nanoGPT's estimate and the whole validation split."""
    d = cfg.data
    gen = torch.Generator().manual_seed(cfg.train.seed)
    model, dm, trace = nanogpt_train(cfg, log_interval=0, gen=gen)
    with torch_threads(cfg.train.threads):
        model.eval()
        with torch.no_grad():
            val = dm.tokens("val")
            batches = [
                random_windows(val, d.batch_size, d.seq_len, gen) for _ in range(estimate_batches)
            ]
            estimate = sum(lm_loss(model(x), y).item() for x, y in batches) / estimate_batches
        full = evaluate(model, dm.val_dataloader())
    return {
        "seed": cfg.train.seed,
        "full_val_loss": full,
        "nanogpt_estimate": estimate,
        "train_losses": trace.losses,
        "train_s": trace.t_end - trace.stamps[0],
    }
