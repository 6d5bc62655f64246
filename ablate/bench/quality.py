"""Time to quality: how long ``train_run`` takes to reach nanoGPT's published validation loss.

The run is nanoGPT's shakespeare-char CPU configuration (``loops.NANOGPT_CPU``: 4 layers,
4 heads, d_model 128, context 64, batch 12, 2000 steps, lr 1e-3 with 5 % warmup and nanoGPT's
cosine from 1e-3 down to 1e-4, AdamW beta2 0.99, dropout 0, no biases), trained by ``train_run``
exactly as a user runs it (progress bar, metrics.csv, W&B offline). It evaluates every
``eval_interval`` steps on a fixed subset of the validation split (its first ``eval_batches``
windows), and on the whole split at the end. The clock starts when training starts
(``on_train_start``: data, model and loggers are ready) and the target counts as reached at
the end of the first evaluation at or below it; the wall time includes the evaluations before
it, the training time excludes them.
"""

from __future__ import annotations

import math
from typing import Any

from ablate.bench.loops import ablate_loop
from ablate.config import RunConfig


def time_to_quality(cfg: RunConfig, target: float, budget_s: float | None = None) -> dict[str, Any]:
    """Train ``cfg`` and time it to ``target``; training stops early after ``budget_s``."""
    result, timer = ablate_loop(
        cfg, name="time-to-quality", progress=cfg.train.progress, budget_s=budget_s
    )
    summary = result.summary
    t0 = timer.train_start
    evals = timer.evals
    end = timer.train_end
    eval_s = [e["t_end"] - e["t_start"] for e in evals]
    train_s = (end - t0) - sum(eval_s)
    steps = int(summary["steps"])
    tokens = steps * cfg.data.batch_size * cfg.data.seq_len
    out: dict[str, Any] = {
        "target": target,
        "steps": steps,
        "eval_interval": cfg.train.eval_interval,
        "eval_batches": cfg.train.eval_batches,
        "evals": [{"step": e["step"], "val_loss": e["val_loss"]} for e in evals],
        "fit_wall_s": end - t0,
        "train_s": train_s,
        "eval_s": sum(eval_s),
        "run_wall_s": summary.get("wall_time_s"),
        "tokens_per_s": tokens / train_s,
        "final_val_loss": summary.get("final_val_loss"),
        "best_subset_val_loss": min((e["val_loss"] for e in evals), default=math.nan),
        "flops_per_token": summary.get("flops_per_token"),
        "reached": False,
        "out_of_time": timer.out_of_time,
        "budget_s": budget_s,
    }
    for i, e in enumerate(evals):
        if e["val_loss"] <= target:
            out.update(
                reached=True,
                reached_step=e["step"],
                reached_wall_s=e["t_end"] - t0,
                reached_train_s=e["t_end"] - t0 - sum(eval_s[: i + 1]),
            )
            break
    final = out["final_val_loss"]
    out["final_reached"] = final is not None and final <= target
    return out
