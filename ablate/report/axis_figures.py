"""Figures along a study's axes (matplotlib, PNG):

* :func:`draw_cells`, the left panel of an interaction claim's figure (``by:``;
  :mod:`ablate.report.claim_figure` puts its difference of differences beside it): its four
  cells, the metric at a and at b at each value of the by axis, mean and 95% t-interval per
  cell, one grey line per seed joining its a and b (the seed's effect). Drawn from the runs
  that decided the claim (its confirmation seeds when it has them).
* ``sensitivity_<axis>.png``: for each numeric axis with at least 3 values (LR, batch size,
  warmup ratio...), the final loss against it per arm (the other varying axes' values): mean
  line, 95% t-interval band over seeds, seed dots; and each arm's best value of the axis (the
  lowest mean) with its 95% bootstrap interval over seeds (seeds resampled, the best value of
  each resample's mean curve; percentile interval, on the swept grid).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ablate.claims.checks import metric_column  # noqa: E402
from ablate.claims.interaction import by_labels, effect_label, per_seed  # noqa: E402
from ablate.claims.stats import SEED, mean_ci  # noqa: E402
from ablate.names import display_names, format_value, loss_unit, value_order  # noqa: E402
from ablate.report.plots import FigureFile, save_figure  # noqa: E402
from ablate.results import StudyData  # noqa: E402

BOOT = 2000


def draw_cells(ax, study: StudyData, check) -> str | None:
    """An interaction claim's four cells on ``ax``, from the runs that decided it (module
    doc); its caption sentence, or None when fewer than 2 seeds trained all four."""
    claim, pool = check.claim, check.pool
    col = metric_column(claim)
    if pool is None or col not in pool:
        return None
    table, lost = per_seed(pool, claim, col)
    if len(table) < 2:
        return None
    l1, l2 = by_labels(claim)
    a_lab = ", ".join(f"{k.split('.')[-1]}={format_value(v)}" for k, v in claim.a.items())
    b_lab = ", ".join(f"{k.split('.')[-1]}={format_value(v)}" for k, v in claim.b.items())
    xs = {0: (0.0, 1.0), 1: (2.0, 3.0)}  # (a, b) at each value of the by axis
    for side in (0, 1):
        xa, xb = xs[side]
        ca, cb = table[f"c{2 * side}"], table[f"c{2 * side + 1}"]
        for s in table.index:
            ax.plot([xa, xb], [ca[s], cb[s]], color="0.7", lw=0.8, zorder=1)
        for x, vals, color in ((xa, ca, "C0"), (xb, cb, "C1")):
            m, lo, hi = mean_ci(vals)
            ax.scatter([x] * len(vals), vals, s=14, color=color, alpha=0.6, zorder=2)
            yerr = [[m - lo], [hi - m]] if math.isfinite(lo) else None
            ax.errorbar([x], [m], yerr=yerr, fmt="D", color=color, capsize=4, zorder=3)
        e = (ca - cb).mean()
        ax.annotate(
            f"effect {e:+.3g}",
            ((xa + xb) / 2, max(ca.max(), cb.max())),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks([0, 1, 2, 3])
    ax.set_xticklabels([f"{a_lab}\n{l1}", f"{b_lab}\n{l1}", f"{a_lab}\n{l2}", f"{b_lab}\n{l2}"])
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel(f"{col.replace('_', ' ')} ({loss_unit(study)})")
    ax.grid(axis="y", alpha=0.3)
    return (
        f"Left: the four cells (effect of {effect_label(claim)} at {l1} and at {l2}), seeds as "
        "dots, a grey line joining a seed's a and b, mean and 95% t-interval."
        + (f" {lost} seed(s) left out: a cell diverged." if lost else "")
    )


def numeric_axes(study: StudyData, least: int = 3) -> list[str]:
    """Varying axes whose values are all numbers, with at least ``least`` of them."""
    out = []
    for axis in study.varying_axes:
        vals = [v for v in value_order(study.runs[axis]) if v is not None]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals)
        if numeric and len(vals) >= least:
            out.append(axis)
    return out


def best_value(curves: pd.DataFrame, rng: np.random.Generator) -> tuple[float, float, float]:
    """(the axis value with the lowest mean, its 95% bootstrap interval's ends) from
    ``curves``: rows = seeds, columns = the axis' values (NaN where a seed lacks one). Seeds
    are resampled with replacement; each resample's best value is taken on its mean curve."""
    vals = np.asarray(curves.columns, dtype=float)
    x = curves.to_numpy(dtype=float)
    mean = np.nanmean(x, axis=0)
    best = float(vals[np.nanargmin(mean)])
    if len(x) < 2:
        return best, math.nan, math.nan
    idx = rng.integers(0, len(x), size=(BOOT, len(x)))
    with np.errstate(all="ignore"):
        means = np.nanmean(x[idx], axis=1)  # (BOOT, values)
    ok = ~np.isnan(means).all(axis=1)
    picks = vals[np.nanargmin(np.where(np.isnan(means[ok]), np.inf, means[ok]), axis=1)]
    lo, hi = np.percentile(picks, [2.5, 97.5], method="inverted_cdf")
    return best, float(lo), float(hi)


def sensitivity_figure(
    study: StudyData, axis: str, out: Path, metric: str = "final_val_loss"
) -> FigureFile | None:
    """The metric against one numeric axis per arm, with each arm's best value (module doc)."""
    runs = study.runs
    done = runs[(runs["status"] == "completed") & runs[metric].notna()].copy()
    if done.empty:
        return None
    names = display_names(study.axes)
    others = [a for a in study.varying_axes if a != axis]
    done["_arm"] = (
        done[others].apply(
            lambda r: ", ".join(f"{names[a]}={format_value(v)}" for a, v in r.items()), axis=1
        )
        if others
        else "all runs"
    )
    arms = list(dict.fromkeys(done.sort_values(others or [axis])["_arm"]))
    values = [v for v in value_order(runs[axis]) if v is not None]
    log = min(values) > 0 and max(values) / min(values) >= 10
    rng = np.random.default_rng(SEED)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    lines = []
    for i, arm in enumerate(arms):
        g = done[done["_arm"] == arm]
        curves = g.pivot_table(index="seed", columns=axis, values=metric, aggfunc="mean")
        curves = curves.reindex(columns=[v for v in values if v in curves.columns])
        stats = [mean_ci(curves[v].dropna()) for v in curves.columns]
        xs = np.asarray(curves.columns, dtype=float)
        m = np.array([s[0] for s in stats])
        lo = np.array([s[1] for s in stats])
        hi = np.array([s[2] for s in stats])
        color = f"C{i % 10}"
        ax.plot(xs, m, "-o", color=color, label=arm, ms=4)
        ax.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)
        for v in curves.columns:
            seeds = curves[v].dropna()
            ax.scatter([v] * len(seeds), seeds, s=8, color=color, alpha=0.5)
        best, blo, bhi = best_value(curves, rng)
        y = float(np.nanmin(m))
        if math.isfinite(blo):
            ax.errorbar(
                [best], [y], xerr=[[best - blo], [bhi - best]], fmt="*", ms=12, color=color,
                capsize=4, zorder=5,
            )  # fmt: skip
        interval = f" (95% bootstrap interval {blo:g}-{bhi:g})" if math.isfinite(blo) else ""
        lines.append(f"{arm}: best {names[axis]} = {best:g}{interval}, n={len(curves)} seeds")
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(names[axis])
    ax.set_ylabel(f"{metric.replace('_', ' ')} ({loss_unit(study)})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    title = f"{metric.replace('_', ' ').capitalize()} against {names[axis]} per arm"
    key = "line: mean over seeds; band: 95% t-interval; dots: seeds; star: best value, bars: "
    key += "its 95% bootstrap interval over seeds"
    caption = (
        f"{title} (completed runs). Line: mean over seeds, band: 95% t-interval, dots: seeds. "
        "Star: each arm's best value of the axis (lowest mean), bars: its 95% percentile "
        f"bootstrap interval over seeds ({BOOT} resamples, on the swept values). "
        + "; ".join(lines)
        + "."
    )
    return save_figure(fig, out, f"sensitivity_{names[axis]}", title, key, caption)


def axis_figures(study: StudyData, out: Path) -> list[FigureFile]:
    """Every sensitivity figure the study's data supports."""
    figures = []
    for axis in numeric_axes(study):
        fig = sensitivity_figure(study, axis, out)
        if fig is not None:
            figures.append(fig)
    plt.close("all")
    return figures
