"""``claim_<id>.png``: each claim drawn from the very numbers that decided it, on its deciding
seeds (its confirmation seeds when it has them), one figure per claim (matplotlib, PNG).

Left, what the claim compares, every arm in one panel: for two arms, each arm's seeds as dots,
a grey line joining a seed's two values when the arms are paired, the mean with its 95%
t-interval; an interaction's four cells (:func:`ablate.report.axis_figures.draw_cells`); a
trend's gap against compute (:func:`ablate.report.ladder.draw_trend`). Right, the tested
effect in the Answer's orientation (:func:`ablate.report.answer.effect_of`): the per-seed
effects where there are some (paired seeds, an interaction's difference of differences, a
trend's slopes), the effect with its 95% t-interval, 0 dashed, and for an equivalence, an
``equal`` interaction or a ``flat`` trend its ±margin as a shaded band. A claim on one arm
against a value (a fitted exponent, one published number, the parts of an intersection) is one
panel: its seeds against the value (dashed), with the margin band where it is an equivalence.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from ablate.claims.checks import ClaimCheck  # noqa: E402
from ablate.claims.spec import EQUIVALENCE  # noqa: E402
from ablate.claims.stats import mean_ci  # noqa: E402
from ablate.names import loss_unit  # noqa: E402
from ablate.report.answer import Effect, claim_seeds, effect_of, seed_span  # noqa: E402
from ablate.report.axis_figures import draw_cells  # noqa: E402
from ablate.report.ladder import draw_trend  # noqa: E402
from ablate.report.plots import FigureFile, save_figure  # noqa: E402
from ablate.results import StudyData  # noqa: E402

BAND = "0.85"
"""The margin band's grey."""


def _arm(ax, x: float, values, color: str) -> None:
    """An arm's seeds as dots and its mean with the 95% t-interval (a diamond and bars)."""
    m, lo, hi = mean_ci(values)
    ax.scatter([x] * len(values), values, s=14, color=color, alpha=0.6, zorder=2)
    yerr = [[m - lo], [hi - m]] if math.isfinite(lo) else None
    ax.errorbar([x], [m], yerr=yerr, fmt="D", color=color, capsize=4, zorder=3)


def _band(ax, center: float, margin: float) -> None:
    ax.axhspan(center - margin, center + margin, color=BAND, alpha=0.6, zorder=0, lw=0)


def effect_panel(ax, check: ClaimCheck, e: Effect, unit: str) -> str:
    """The tested effect (module doc) on ``ax``; its caption sentence."""
    c = check.comparison
    if c.paired and len(c.a) == len(c.b):  # one effect per seed, oriented as the Answer's
        seeds = [e.sign * (va - vb) for va, vb in zip(c.a, c.b, strict=True)]
        ax.scatter([0] * len(seeds), seeds, s=14, color="C2", alpha=0.6, zorder=2)
    if math.isfinite(e.lo):
        ax.errorbar(
            [0], [e.diff], yerr=[[e.diff - e.lo], [e.hi - e.diff]], fmt="D", color="C2",
            capsize=4, zorder=3,
        )  # fmt: skip
    ax.axhline(0, color="0.3", ls="dashed", lw=1)
    band = ""
    if check.claim.expect in EQUIVALENCE:
        _band(ax, 0.0, c.margin)
        band = " Grey band: the claim's margin."
    what = {
        "trend": f"slope of {e.x} per decade",
        "interaction": f"effect at {e.x} − at {e.y}",
    }.get(e.kind, f"{e.x} − {e.y}")
    ax.set_xticks([0], [what], fontsize=7)
    ax.set_xlim(-0.6, 0.6)
    ax.set_ylabel(f"{unit}" if e.kind != "trend" else f"{unit} per decade of FLOPs", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    dots = "seeds as dots, " if c.paired else ""
    return f"Right: the tested effect, {what}: {dots}mean and 95% t-interval; dashed: 0.{band}"


def arms_panel(ax, check: ClaimCheck, e: Effect) -> str:
    """Both arms in one panel, in the Answer's order (larger first); its caption sentence."""
    c = check.comparison
    first, second = (c.a, c.b) if e.sign > 0 else (c.b, c.a)
    if c.paired and len(c.a) == len(c.b):
        for va, vb in zip(first, second, strict=True):
            ax.plot([0, 1], [va, vb], color="0.7", lw=0.8, zorder=1)
    _arm(ax, 0, first, "C0")
    _arm(ax, 1, second, "C1")
    ax.set_xticks([0, 1], [e.x, e.y], fontsize=7)
    ax.set_xlim(-0.5, 1.5)
    paired = ", a grey line joining a seed's two" if c.paired else ""
    return f"Left: both arms, seeds as dots{paired}, mean and 95% t-interval."


def against_panel(ax, check: ClaimCheck) -> str:
    """One arm (or each part) against the value it is tested against; its caption sentence."""
    c, claim = check.comparison, check.claim
    equivalence = claim.expect in EQUIVALENCE
    if check.parts:
        for i, part in enumerate(check.parts):
            _arm(ax, i, part.values, f"C{i}")
            ax.hlines(part.ref, i - 0.3, i + 0.3, colors="0.3", linestyles="dashed")
        ax.set_xticks(range(len(check.parts)), [p.label for p in check.parts], fontsize=7)
        return (
            "Each part's seeds (dots) and mean with its 95% t-interval against its value (dashed)."
        )
    ref = c.b[0] if c.b else 0.0
    _arm(ax, 0, list(c.a), "C0")
    ax.axhline(ref, color="0.3", ls="dashed", lw=1)
    band = ""
    if equivalence:
        _band(ax, ref, c.margin)
        band = "; grey band: its margin"
    ax.set_xticks([0], [c.label_a], fontsize=7)
    ax.set_xlim(-0.6, 0.6)
    against = claim.external_label or c.label_b
    return f"{c.label_a}: seeds as dots, mean and 95% t-interval, against {against} (dashed){band}."


def claim_figure(study: StudyData, check: ClaimCheck, out: Path) -> FigureFile | None:
    """``claim_<id>.png`` (module doc); None when the claim has no numbers to draw."""
    c, claim = check.comparison, check.claim
    if c is None or check.pending is not None or claim.expect == "diverges" or not c.a:
        return None
    e = effect_of(check)
    unit = loss_unit(study).split("/")[0] if e.kind != "fitted" else ""
    single = e.kind in ("parts", "fitted") or (e.kind == "arms" and len(claim.external) == 1)
    fig, axes = plt.subplots(
        1, 1 if single else 2, figsize=(4.6 if single else 9.6, 3.8), squeeze=False,
        gridspec_kw=None if single else {"width_ratios": [2.2, 1]},
    )  # fmt: skip
    axes = list(axes.flat)
    if single:
        words = [against_panel(axes[0], check)]
        axes[0].set_ylabel(claim.metric, fontsize=8)
        axes[0].grid(axis="y", alpha=0.3)
    else:
        left = {"trend": draw_trend, "interaction": draw_cells}.get(e.kind)
        words = [left(axes[0], study, check) if left else arms_panel(axes[0], check, e)]
        if e.kind == "arms":
            axes[0].set_ylabel(f"{claim.metric} ({loss_unit(study)})", fontsize=8)
            axes[0].grid(axis="y", alpha=0.3)
        if words[0] is None:  # nothing to draw on the left: the effect alone
            axes[0].axis("off")
            words = []
        words.append(effect_panel(axes[1], check, e, unit))
    seeds = claim_seeds(check)
    title = f"{claim.id}: {check.outcome}"
    key = f"on its deciding seeds ({seeds}); diamond: mean, bars: 95% t-interval, dots: seeds"
    caption = f"Claim {claim.id}. " + " ".join(words)
    shown = save_figure(fig, out, f"claim_{claim.id}", title, key, caption, fontsize=9)
    return replace(shown, title=f"Claim {claim.id}", seeds=_own_seeds(check))


def _own_seeds(check: ClaimCheck) -> str:
    pool = check.pool
    if pool is None or "seed" not in pool:
        return "the claim's own"
    done = pool[pool["status"].isin(("completed", "diverged"))]
    kind = "confirmation" if check.confirmation else "exploratory"
    return f"{kind} seeds {seed_span(done['seed'])}, the claim's own"


def claim_figures(study: StudyData, checks: list[ClaimCheck], out: Path) -> list[FigureFile]:
    """One figure per claim that has numbers to draw, in the claims' order."""
    figures = [claim_figure(study, ch, out) for ch in checks]
    plt.close("all")
    return [f for f in figures if f is not None]
