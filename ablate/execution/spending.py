"""Alpha spending for ``--until-decided``'s planned looks (pure functions, no I/O).

A Lan-DeMets O'Brien-Fleming-type spending function gives the type-I error spent by
information fraction ``t`` (seeds now / seeds at the last planned look)::

    alpha(t) = 2 - 2 * Phi(z_{1 - alpha/2} / sqrt(t))        alpha(0) = 0, alpha(1) = alpha

Look ``k`` tests at the nominal level ``alpha(t_k) - alpha(t_{k-1})``, the increment spent at that
look. Whatever the correlation between looks, the chance of a false decision at *some* look is at
most the sum of the per-look levels (a union bound), which is ``alpha(1) = alpha``: the design
never errs more than ``alpha`` overall, also with t-tests on a few seeds, where the normal-theory
boundaries of a full group-sequential design do not hold exactly. Early looks spend little
(O'Brien-Fleming), so the last look keeps most of ``alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SPENDING = "obrien-fleming"


def obf_spent(t: float, alpha: float) -> float:
    """Cumulative alpha spent by information fraction ``t`` in [0, 1] (O'Brien-Fleming type)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if t <= 0:
        return 0.0
    from scipy.stats import norm

    t = min(t, 1.0)
    return float(2.0 * norm.sf(norm.isf(alpha / 2.0) / math.sqrt(t)))


def look_seed_counts(first: int, per_look: int, max_looks: int) -> list[int]:
    """Seeds per arm at each planned look: ``first``, then ``per_look`` more each look."""
    return [first + k * per_look for k in range(max_looks)]


def look_levels(counts: Sequence[int], alpha: float) -> list[dict[str, float]]:
    """For each planned look: its information fraction, the cumulative alpha spent by it and
    its nominal level (that look's increment)."""
    last = counts[-1]
    out, spent_before = [], 0.0
    for n in counts:
        t = n / last
        spent = obf_spent(t, alpha)
        nominal = spent - spent_before
        out.append({"info_fraction": t, "alpha_spent": spent, "nominal_alpha": nominal})
        spent_before = spent
    return out
