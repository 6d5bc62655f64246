"""Fitted quantities: the loss-optimal learning rate per batch size, and the exponent alpha in
lr* ∝ batch^alpha. Pure functions on arrays, then one table function on the runs table.

Per seed (same initial weights; the same token stream at every batch size under ``data.order:
tokens``), for each batch size the final loss is fitted by a quadratic in log10(lr) around the
lowest point of the sweep and its vertex is the optimum; alpha is the least-squares slope of
log lr* on log batch. The spread of the per-seed alphas gives its t-interval, like every other
interval in the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablate.claims.stats import mean_ci

BATCH, LR = "data.batch_size", "optim.lr"
PEAK = "lr"
"""The summary's peak LR of each run (after ``optim.lr_scaling``), the x of the fit."""


def optimum_log_lr(lrs: np.ndarray, losses: np.ndarray, window: int = 2) -> tuple[float, bool]:
    """``(log10 lr*, interior)``: vertex ``x* = -b / (2c)`` of the least-squares quadratic
    ``loss = a + b·x + c·x²`` in ``x = log10(lr)``, fitted to the points within ``window`` sweep
    steps of the lowest finite loss. ``interior`` is False when the lowest loss sits at an end of
    the sweep (the optimum is not bracketed); then, or when the fit has no minimum (c <= 0) or
    fewer than 3 points, x* is nan."""
    x, y = np.log10(np.asarray(lrs, dtype=float)), np.asarray(losses, dtype=float)
    order = np.argsort(x)
    x, y = x[order], y[order]
    ok = np.isfinite(y)
    if ok.sum() < 3:
        return math.nan, False
    best = int(np.nanargmin(np.where(ok, y, np.nan)))
    interior = 0 < best < len(x) - 1 and ok[best - 1] and ok[best + 1]
    lo, hi = max(0, best - window), min(len(x), best + window + 1)
    xs, ys = x[lo:hi][ok[lo:hi]], y[lo:hi][ok[lo:hi]]
    if not interior or len(xs) < 3:
        return math.nan, bool(interior)
    c, b, _ = np.polyfit(xs, ys, 2)
    if c <= 0:
        return math.nan, True
    return float(-b / (2 * c)), True


def exponent(batches: np.ndarray, log_lr_star: np.ndarray) -> float:
    """Least-squares slope alpha of ``log10 lr* = alpha · log10 batch + const`` (nan if fewer
    than 2 finite points)."""
    b, y = np.log10(np.asarray(batches, dtype=float)), np.asarray(log_lr_star, dtype=float)
    ok = np.isfinite(y)
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(b[ok], y[ok], 1)[0])


@dataclass
class LrFit:
    per_batch: pd.DataFrame
    """One row per batch size: lrs swept, best lr of the mean curve, interior, lr* mean and
    t-interval over seeds, n (seeds with a fit), seeds."""
    alphas: dict
    """seed -> alpha."""


def lr_fit(runs: pd.DataFrame, metric: str = "final_val_loss") -> LrFit:
    """Per seed and batch size the fitted optimum of the peak LR (summary ``lr``: optim.lr after
    the batch-size rule; optim.lr when a run lacks it), and per seed the exponent alpha."""
    done = runs[runs["status"].isin(("completed", "diverged"))].copy()
    # the LR the run trained with: optim.lr scaled by the batch rule (summary "lr")
    x = LR
    if PEAK in done and pd.to_numeric(done[PEAK], errors="coerce").notna().all():
        x = PEAK
    done["x"] = pd.to_numeric(done[x], errors="coerce")
    done["y"] = pd.to_numeric(done[metric], errors="coerce").where(done["status"] == "completed")
    rows, per_seed = [], {}
    for bs, g in done.groupby(BATCH, sort=True):
        mean = g.groupby("x")["y"].mean()
        _, interior = optimum_log_lr(mean.index.to_numpy(), mean.to_numpy())
        stars = {}
        for seed, gs in g.groupby("seed"):
            star, _ = optimum_log_lr(gs["x"].to_numpy(), gs["y"].to_numpy())
            stars[seed] = star
            per_seed.setdefault(seed, {})[bs] = star
        m, lo, hi = mean_ci([v for v in stars.values()])
        best = mean.idxmin() if mean.notna().any() else math.nan
        rows.append(
            {
                "batch": bs,
                "lrs": sorted(g["x"].unique()),
                "best_lr": best,
                "interior": bool(interior),
                "lr_star": 10**m if math.isfinite(m) else math.nan,
                "lr_lo": 10**lo if math.isfinite(lo) else math.nan,
                "lr_hi": 10**hi if math.isfinite(hi) else math.nan,
                "n": sum(1 for v in stars.values() if math.isfinite(v)),
                "seeds": len(stars),
            }
        )
    alphas = {
        s: exponent(np.array(list(d)), np.array(list(d.values()))) for s, d in per_seed.items()
    }
    return LrFit(pd.DataFrame(rows), alphas)


FFN_OUT = "grad_norm/ffn_out_"


def grad_slope(layers: np.ndarray, norms: np.ndarray) -> float:
    """Least-squares slope of ``log10(norm)`` on the layer index: > 0 when the gradient grows
    toward the output (nan with fewer than 2 finite positive norms)."""
    x, y = np.asarray(layers, dtype=float), np.asarray(norms, dtype=float)
    ok = np.isfinite(y) & (y > 0)
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(x[ok], np.log10(y[ok]), 1)[0])


def init_ffn_grad_slope(metrics: pd.DataFrame) -> pd.Series:
    """Per run id: :func:`grad_slope` of the FFN output weight's gradient norm at step 0
    (``grad_norm/ffn_out_<layer>``; the quantity of Xiong et al.'s Fig. 3)."""
    if metrics.empty:
        return pd.Series(dtype=float)
    m = metrics[(metrics["step"] == 0) & metrics["metric"].str.startswith(FFN_OUT)]
    out = {}
    for run_id, g in m.groupby("run_id"):
        layers = g["metric"].str.removeprefix(FFN_OUT).astype(int).to_numpy()
        out[run_id] = grad_slope(layers, g["value"].astype(float).to_numpy())
    return pd.Series(out, dtype=float)
