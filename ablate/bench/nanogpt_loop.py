"""nanoGPT's training procedure in a plain PyTorch loop (diagnostic for the reference study).

Trains ablate's model (at nanoGPT's settings it is nanoGPT's GPT: same layers, init and
parameter count) with nanoGPT's *procedure* instead of ablate's: every batch is ``batch_size``
windows at independent uniformly random offsets of the training tokens (with replacement), the
LR is ``nanogpt_lr``, the optimizer and clipping are set by hand; no Lightning, store or logger.
It reports the loss on the whole validation split (the windows ablate's final evaluation uses)
and nanoGPT's own printed estimate (the mean over ``estimate_batches`` random validation
batches).

    python -m ablate.bench.nanogpt_loop --seed 0 --seed 1 > nanogpt_loop.txt

If this loop lands where ``ablate run studies/reference_nanogpt_cpu.yaml`` lands, any gap to
nanoGPT's published number is not something ablate's training adds.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import torch

from ablate.config import RunConfig
from ablate.data import LMDataModule
from ablate.lit import decay_groups, lm_loss
from ablate.model import build_model
from ablate.study import load_study
from ablate.train import evaluate, torch_threads


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


def nanogpt_run(cfg: RunConfig, *, estimate_batches: int = 20) -> dict[str, Any]:
    """Train ``cfg`` on CPU the nanoGPT way for ``cfg.train.max_steps`` steps and evaluate."""
    d, o, t = cfg.data, cfg.optim, cfg.train
    with torch_threads(t.threads):
        dm = LMDataModule(d, seed=t.seed).prepare()
        train, val = dm.tokens("train"), dm.tokens("val")
        gen = torch.Generator().manual_seed(t.seed)
        torch.manual_seed(t.seed)
        model = build_model(cfg.model, dm.vocab_size)
        opt = torch.optim.AdamW(
            decay_groups(model, o.weight_decay), lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps
        )
        warmup = round(o.warmup_ratio * t.max_steps)
        t0 = time.perf_counter()
        model.train()
        losses = []
        for step in range(t.max_steps):
            lr = nanogpt_lr(step, lr=o.lr, min_lr=o.min_lr, warmup=warmup, total=t.max_steps)
            for group in opt.param_groups:
                group["lr"] = lr
            x, y = random_windows(train, d.batch_size, d.seq_len, gen)
            loss = lm_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if o.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), o.grad_clip)
            opt.step()
            losses.append(loss.detach())  # read once after training: no sync per step
        train_s = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            batches = [
                random_windows(val, d.batch_size, d.seq_len, gen) for _ in range(estimate_batches)
            ]
            estimate = sum(lm_loss(model(x), y).item() for x, y in batches) / estimate_batches
        full = evaluate(model, dm.val_dataloader())
    return {
        "seed": t.seed,
        "full_val_loss": full,
        "nanogpt_estimate": estimate,
        "train_losses": torch.stack(losses).tolist(),
        "train_s": train_s,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, action="append", required=True)
    ap.add_argument("--study", default="studies/reference_nanogpt_cpu.yaml")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    base = load_study(args.study).runs[0].config
    for seed in args.seed:
        cfg = base.model_copy(
            update={"train": base.train.model_copy(update={"seed": seed, "threads": args.threads})}
        )
        r = nanogpt_run(cfg)
        print(
            f"seed={seed} full val {r['full_val_loss']:.4f}  nanoGPT 20-batch estimate "
            f"{r['nanogpt_estimate']:.4f}  ({r['train_s']:.0f} s training)",
            flush=True,
        )


if __name__ == "__main__":
    main()
