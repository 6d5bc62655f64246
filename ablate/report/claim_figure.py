"""``claims.png``: each claim drawn from the very numbers that decided it (matplotlib, PNG).

One panel per claim, next to the claims table, from the claim's own comparison (its deciding
seeds: the confirmation seeds when it has them), so the figure beside an inconclusive claim
never shows another seed set than the claim's. A two-arm claim: each arm's seeds as dots, a
grey line joining a seed's two values when the arms are paired, the mean with its 95%
t-interval; a published arm as its values; a fitted exponent, an interaction or a trend: its
per-seed values (a trend's: slopes per decade of compute) against the value it is tested
against (dashed); a one-arm claim or an intersection: each part's seeds against its
reference. The panel's title names the claim, its outcome and its seeds. The pooled views
(every seed of the study) are the Figures section's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from ablate.claims.checks import ClaimCheck  # noqa: E402
from ablate.claims.spec import TREND  # noqa: E402
from ablate.claims.stats import mean_ci  # noqa: E402
from ablate.report.answer import claim_seeds  # noqa: E402
from ablate.report.plots import FigureFile, save_figure  # noqa: E402
from ablate.results import StudyData  # noqa: E402

COLS = 3


def _arm(ax, x: float, values, color: str) -> None:
    """An arm's seeds as dots and its mean with the 95% t-interval (a diamond and bars)."""
    m, lo, hi = mean_ci(values)
    ax.scatter([x] * len(values), values, s=14, color=color, alpha=0.6, zorder=2)
    yerr = [[m - lo], [hi - m]] if math.isfinite(lo) else None
    ax.errorbar([x], [m], yerr=yerr, fmt="D", color=color, capsize=4, zorder=3)


def _panel(ax, check: ClaimCheck) -> bool:
    """Draw one claim; False when it has nothing to draw (no comparison, diverged counts)."""
    c, claim = check.comparison, check.claim
    if c is None or claim.expect == "diverges" or not c.a:
        return False
    if check.parts:
        for i, part in enumerate(check.parts):
            _arm(ax, i, part.values, f"C{i}")
            ax.hlines(part.ref, i - 0.3, i + 0.3, colors="0.3", linestyles="dashed")
        ax.set_xticks(range(len(check.parts)), [p.label for p in check.parts], fontsize=7)
        return True
    trend = claim.expect in TREND
    constant = trend or claim.by or claim.metric == "lr_exponent" or len(claim.external) == 1
    if constant:  # per-seed values against a constant: 0, the exponent, one published value
        _arm(ax, 0, list(c.a), "C0")
        ax.axhline(c.b[0] if c.b else 0.0, color="0.3", ls="dashed", lw=1)
        what = "difference of differences" if claim.by and not trend else c.label_a
        ax.set_xticks([0], [what], fontsize=7)
        return True
    if c.paired:
        for va, vb in zip(c.a, c.b, strict=True):
            ax.plot([0, 1], [va, vb], color="0.7", lw=0.8, zorder=1)
    _arm(ax, 0, c.a, "C0")
    _arm(ax, 1, c.b, "C1")
    ax.set_xticks([0, 1], [c.label_a, c.label_b], fontsize=7)
    return True


def claims_figure(study: StudyData, checks: list[ClaimCheck], out: Path) -> FigureFile | None:
    """``claims.png`` (module doc); None when no claim has numbers to draw."""
    drawable = [ch for ch in checks if ch.comparison is not None and ch.claim.expect != "diverges"]
    if not drawable:
        return None
    rows = math.ceil(len(drawable) / COLS)
    cols = min(COLS, len(drawable))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, check in zip(axes.flat, drawable, strict=False):
        _panel(ax, check)
        ax.set_title(
            f"{check.claim.id}\n{check.outcome}; {claim_seeds(check)}", fontsize=8, loc="left"
        )
        per = " (slope per decade)" if check.claim.expect in TREND else ""
        ax.set_ylabel(f"{check.claim.metric}{per}", fontsize=8)
        ax.tick_params(axis="x", labelrotation=0)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(drawable) :]:
        ax.axis("off")
    title = f"Each claim on its own seeds — {study.name}"
    key = "diamond: mean, bars: 95% t-interval, dots: seeds, grey line: one seed's two arms"
    caption = (
        "Each claim drawn from the numbers that decided it, on its own seeds (named in each "
        "panel: the confirmation seeds when it has them): for two arms, each arm's seeds (dots) "
        "and mean with its 95% t-interval (diamond, bars), a grey line joining one seed's two "
        "values when the arms are paired; for a fitted exponent or an interaction, its "
        "per-seed values against the tested value (dashed); for a one-arm claim, each part's "
        "seeds against its reference (dashed)."
    )
    if any(ch.claim.expect in TREND for ch in drawable):
        caption += " A trend: its per-seed slopes per decade of training FLOPs against 0 (dashed)."
    shown = save_figure(fig, out, "claims", title, key, caption)
    return replace(shown, title="Each claim on its own seeds", seeds="each panel's own")
