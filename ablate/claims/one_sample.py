"""Claims on one arm against a value (``expect: above`` / ``below``) and their intersection
(``expect: all``), e.g. Xiong et al. Fig. 3: "Post-LN's FFN gradient slope over the layers is
> 0 and Pre-LN's is <= 0".

A part is a one-sided one-sample t-test of the arm's per-run metric: ``above v`` tests
H1: mean > v; ``below v`` with margin m tests H1: mean < v + m (the margin is the tolerance
for "not growing": a stated seed noise, so a flat slope can pass). Its *opposite* test (mean < v,
resp. mean > v + m) significant contradicts it. An intersection is the intersection-union test:
it holds when every part is significant, so its p is the largest part's p (no correction inside
it; Berger 1982) and it counts as one test in the claims' Holm family. Each part also has its
exact one-sided sign-flip test (the values minus the reference), and the intersection's exact
p is the largest part's, the claim's exact test.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ablate.claims.comparisons import Comparison
from ablate.claims.spec import Claim
from ablate.claims.stats import finite, mean_ci, sign_flip_p

TEST = "one-sided one-sample t"
IUT = "intersection-union test (p = the largest part's one-sided p)"


@dataclass(frozen=True)
class Part:
    """One arm's per-run values against ``ref`` (value, or value + margin for ``below``)."""

    label: str
    expect: str
    ref: float
    values: tuple[float, ...]
    p: float
    """One-sided p of the claimed direction."""
    p_opposite: float
    """One-sided p of the opposite direction (significant: the part is contradicted)."""
    p_flip: float = math.nan
    """The exact one-sided sign-flip p of the claimed direction (values minus ``ref``)."""
    p_flip_opposite: float = math.nan

    @property
    def n(self) -> int:
        return len(self.values)

    def text(self) -> str:
        m, lo, hi = mean_ci(self.values)
        sign = ">" if self.expect == "above" else "<"
        return (
            f"{self.label}: mean {m:+.4g} (95% CI [{lo:+.4g}, {hi:+.4g}], {self.n} seeds), "
            f"{sign} {self.ref:+.4g}: {TEST} p={self.p:.3g}, exact sign-flip p={self.p_flip:.3g}"
        )


def one_sided(values: list[float], ref: float, expect: str) -> tuple[float, float]:
    """(p of mean > ref, p of mean < ref) for ``above``; swapped for ``below``."""
    x = finite(values)
    if len(x) < 2 or float(np.std(x)) == 0.0:
        return math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        greater = float(stats.ttest_1samp(x, ref, alternative="greater").pvalue)
        less = float(stats.ttest_1samp(x, ref, alternative="less").pvalue)
    return (greater, less) if expect == "above" else (less, greater)


def part_of(runs: pd.DataFrame, part: Claim, col: str, label: str, margin: float) -> Part:
    """The part ``part`` (expect above/below, value) on the completed runs of its arm."""
    done = runs[runs["status"] == "completed"]
    values = [v for v in pd.to_numeric(done[col], errors="coerce").tolist() if math.isfinite(v)]
    ref = float(part.value) + (margin if part.expect == "below" else 0.0)
    p, p_opp = one_sided(values, ref, part.expect)
    side, other = ("greater", "less") if part.expect == "above" else ("less", "greater")
    flip = sign_flip_p(values, ref, side) if len(values) >= 2 else math.nan
    flip_opp = sign_flip_p(values, ref, other) if len(values) >= 2 else math.nan
    return Part(label, part.expect, ref, tuple(values), p, p_opp, flip, flip_opp)


def intersection(claim: Claim, parts: list[Part], margin: float) -> Comparison:
    """The claim's comparison in the family: p = the largest part p (IUT)."""
    ps, flips = [p.p for p in parts], [p.p_flip for p in parts]
    p = max(ps) if all(math.isfinite(x) for x in ps) else math.nan
    flip = max(flips) if all(math.isfinite(x) for x in flips) else math.nan
    return Comparison(
        label_a=" and ".join(x.label for x in parts),
        label_b="",
        a=parts[0].values,
        b=(),
        p=p,
        test=IUT if len(parts) > 1 else TEST,
        margin=margin,
        key=("claim", claim.id),
        p_flip=flip,
        p_flip_adj=flip,
        exact="sign-flip",
    )


def contradicted(parts: list[Part], level: float, exact: bool = False) -> list[Part]:
    """The parts whose opposite one-sided test (t, or ``exact``: sign-flip) is significant at
    ``level`` (Bonferroni over the parts)."""
    k = max(len(parts), 1)
    ps = [x.p_flip_opposite if exact else x.p_opposite for x in parts]
    return [x for x, p in zip(parts, ps, strict=True) if math.isfinite(p) and p * k < level]
