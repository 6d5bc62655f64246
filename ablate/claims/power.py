"""Seeds needed: how many seeds the test that would decide a claim needs for 80% power, under a
stated assumption about the true difference (the observed one, with the observed SD).

That is an assumption, not a measurement: post-hoc power at the observed effect is noisy, so
the report words it as "if the true difference is the observed d (sd s), ...". The designs:

* ``one-sample``: one number per seed against a fixed value (the fitted exponent alpha), or the
  per-seed differences of two arms trained on the same seeds (paired): seeds, not "per arm";
* ``two-sample``: two arms with different seeds (Welch): seeds per arm;
* ``fixed-b``: arm a against ``n_b`` published values: seeds of arm a only.

The tests: the two-sided t-test of "no difference" (exact, noncentral t), the TOST for
"equivalent within ±m" (:func:`tost_power`, exact for one-sample designs by integrating over
the sample SD; the pooled two-sample t for the others), and the one-sided test that the
difference lies beyond the margin ("different": the 95% CI wholly outside ±m).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

POWER = 0.8
MAX_SEEDS = 1000
"""Beyond this many seeds a decision is "not reachable in practice"."""
_Q = (np.arange(4000) + 0.5) / 4000  # quantiles of the SD's distribution (deterministic)


def _design(n: int, design: str, n_b: int) -> tuple[float, float]:
    """(standard-error factor f with se = sd·f, degrees of freedom) for ``n`` seeds."""
    if design == "one-sample":
        return 1 / math.sqrt(n), n - 1
    if design == "two-sample":
        return math.sqrt(2 / n), 2 * n - 2
    if design == "fixed-b":
        return math.sqrt(1 / n + 1 / n_b), n + n_b - 2
    raise ValueError(f"unknown design {design!r}")


def diff_power(
    n: int, delta: float, sd: float, alpha: float, design: str = "one-sample", n_b: int = 0
) -> float:
    """Power of the two-sided t-test of 0 at level ``alpha`` when the true difference is
    ``delta`` (noncentral t with noncentrality ``delta / (sd·f)``)."""
    f, df = _design(n, design, n_b)
    if df < 1:
        return 0.0
    nc, crit = delta / (sd * f), stats.t.isf(alpha / 2, df)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def beyond_power(
    n: int,
    delta: float,
    sd: float,
    margin: float,
    alpha: float = 0.025,
    design: str = "one-sample",
    n_b: int = 0,
) -> float:
    """Power of the one-sided t-test that ``|difference| > margin`` at level ``alpha`` (the
    95% CI lying wholly beyond the margin on the side of ``delta``: alpha = 0.025)."""
    f, df = _design(n, design, n_b)
    if df < 1:
        return 0.0
    return float(stats.nct.sf(stats.t.isf(alpha, df), df, (abs(delta) - margin) / (sd * f)))


def tost_power(
    n: int,
    delta: float,
    sd: float,
    margin: float,
    alpha: float = 0.05,
    design: str = "one-sample",
    n_b: int = 0,
) -> float:
    """Power of TOST at level ``alpha`` (each one-sided test) when the true difference is
    ``delta``: ``P(-m + t·s·f < d̂ < m - t·s·f)`` with ``d̂ ~ N(delta, (sd·f)²)`` and the sample
    SD ``s`` independent, ``s²·df/sd² ~ chi²(df)``; the expectation over ``s`` is taken at 4000
    quantiles of its distribution."""
    f, df = _design(n, design, n_b)
    if df < 1:
        return 0.0
    s = sd * np.sqrt(stats.chi2.ppf(_Q, df) / df)
    half = margin - stats.t.isf(alpha, df) * s * f
    se = sd * f
    p = stats.norm.cdf((half - delta) / se) - stats.norm.cdf((-half - delta) / se)
    return float(np.mean(np.where(half > 0, p, 0.0)))


def smallest_n(power: Callable[[int], float], start: int = 2, target: float = POWER) -> int | None:
    """The smallest n >= ``start`` with ``power(n) >= target`` (power increasing in n), or None
    when even :data:`MAX_SEEDS` is not enough."""
    if power(MAX_SEEDS) < target:
        return None
    lo, hi = start, start
    while power(hi) < target:
        lo, hi = hi + 1, min(MAX_SEEDS, hi * 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if power(mid) < target else (lo, mid)
    return lo


@dataclass(frozen=True)
class SeedsNeeded:
    """The seeds the deciding test needs, what they count, and the assumption behind it."""

    n: int | None
    """Seeds (None: not reachable in practice, or never at the assumed difference)."""
    unit: str
    """``seeds``, ``seeds per arm`` or ``seeds of arm a``."""
    test: str
    """The test and the outcome it would give, e.g. ``TOST at α=0.025 (→ equivalent)``."""
    assumption: str
    """What is assumed true, e.g. ``true difference = the observed -0.006, sd 0.02``."""
    why_not: str = ""
    """Why no number: e.g. the assumed difference sits on the margin."""

    def text(self) -> str:
        if self.n is None:
            return f"not reachable: {self.why_not} (assuming {self.assumption})"
        return f"≈{self.n} {self.unit} for {self.test} at 80% power, assuming {self.assumption}"


def floor_above(n: int | None, current: int) -> int | None:
    """At least one seed more than the ``current`` seeds, which already did not decide it."""
    return None if n is None else max(n, current + 1)
