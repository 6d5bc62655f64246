"""Confirmatory statistics: alpha spending over sequential looks and seeds needed, each checked
against a Monte-Carlo simulation (vectorised, fixed RNG seeds; tolerances stated at each test)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ablate.report.power import (
    beyond_power,
    diff_power,
    smallest_n,
    tost_power,
)
from ablate.report.sequential import (
    nominal_levels,
    obf_spent,
    planned_fractions,
    spending_table,
)

ALPHA = 0.05

# --- alpha spending ---------------------------------------------------------------------------


def test_obrien_fleming_spending_by_hand():
    # alpha(t) = 2 - 2 Phi(1.959964 / sqrt(t)): t = 1 spends all of alpha, t = 0.25 spends
    # 2 - 2 Phi(3.919928) = 8.857e-5
    assert obf_spent(1.0, ALPHA) == pytest.approx(ALPHA)
    assert obf_spent(0.25, ALPHA) == pytest.approx(2 * stats.norm.sf(3.919928), rel=1e-5)
    assert obf_spent(0.0, ALPHA) == 0.0
    rows = spending_table(planned_fractions(4), ALPHA)
    assert [r["look"] for r in rows] == [1, 2, 3, 4]
    assert sum(r["nominal_alpha"] for r in rows) == pytest.approx(ALPHA)  # increments add up
    assert rows[-1]["alpha_spent"] == pytest.approx(ALPHA)
    with pytest.raises(ValueError):
        nominal_levels([0.5, 0.4])


def _sequential_t_pvalues(looks: list[int], sims: int, seed: int) -> np.ndarray:
    """Two-sided one-sample t-test p-values at each look of ``sims`` studies under H0 (paired
    per-seed differences ~ N(0, 1)), the seeds accumulating: shape (sims, looks)."""
    n = np.asarray(looks)
    x = np.random.default_rng(seed).standard_normal((sims, n[-1]))
    s1, s2 = np.cumsum(x, 1)[:, n - 1], np.cumsum(x**2, 1)[:, n - 1]
    mean = s1 / n
    var = (s2 - n * mean**2) / (n - 1)
    t = mean / np.sqrt(var / n)
    return 2 * stats.t.sf(np.abs(t), n - 1)


@pytest.mark.parametrize("looks", [[3, 6, 9, 12, 15], [2, 4, 6, 8, 10], [4, 8]])
def test_sequential_looks_keep_the_type_one_error(looks):
    # 100000 simulated studies: Monte-Carlo SE of a rate near 0.05 is sqrt(.05·.95/1e5) =
    # 0.0007; allow 3 SE above alpha
    sims = 100_000
    tol = 3 * math.sqrt(ALPHA * (1 - ALPHA) / sims)
    p = _sequential_t_pvalues(looks, sims, seed=7)
    levels = np.array(nominal_levels([n / looks[-1] for n in looks], ALPHA))
    error = (p < levels).any(axis=1).mean()
    assert error <= ALPHA + tol
    naive = (p < ALPHA).any(axis=1).mean()  # testing at alpha at every look: inflated
    if len(looks) > 2:
        assert naive > 0.1


def test_exact_boundaries_spend_alpha_exactly_on_z_statistics():
    # z statistics of one accumulating sample (Brownian motion in information time): the
    # recursive-integration boundaries spend alpha(t_k) by look k, within 3 Monte-Carlo SE
    t = np.array(planned_fractions(5))
    sims = 200_000
    inc = np.random.default_rng(3).standard_normal((sims, 5)) * np.sqrt(np.diff(t, prepend=0))
    z = np.cumsum(inc, axis=1) / np.sqrt(t)
    crit = stats.norm.isf(np.array(nominal_levels(t, ALPHA, exact=True)) / 2)
    crossed = (np.cumsum(np.abs(z) >= crit, axis=1) > 0).mean(axis=0)
    spent = np.array([obf_spent(x, ALPHA) for x in t])
    assert crossed == pytest.approx(spent, abs=3 * math.sqrt(ALPHA / sims))
    # ...but t-tests on a few seeds have heavier tails: these boundaries exceed alpha there,
    # which is why the per-look increments are the default
    p = _sequential_t_pvalues([2, 4, 6, 8, 10], 100_000, seed=5)
    assert (p < np.array(nominal_levels(t, ALPHA, exact=True))).any(axis=1).mean() > ALPHA


# --- seeds needed, against simulation ----------------------------------------------------------

SIMS = 20_000
"""Per candidate n: the Monte-Carlo SE of a power near 0.8 is sqrt(.8·.2/20000) = 0.003, less
than the power gained by one more seed near these n (0.02-0.04), so the simulated smallest n
can differ from the computed one by at most one seed."""


def _mc_smallest_n(reject, n_max: int, seed: int) -> int:
    """The smallest n whose simulated power (share of ``reject(sample(n))``) reaches 0.8."""
    rng = np.random.default_rng(seed)
    for n in range(2, n_max + 1):
        if reject(rng, n).mean() >= 0.8:
            return n
    raise AssertionError("not reached")


def test_seeds_needed_one_sample_matches_simulation():
    # the fitted exponent per seed ~ N(0.5 + 0.3, 0.4²) tested against 0.5: 0.3 off
    delta, sd = 0.3, 0.4
    n = smallest_n(lambda k: diff_power(k, delta, sd, ALPHA))

    def reject(rng, k):
        x = rng.normal(delta, sd, (SIMS, k))
        return stats.ttest_1samp(x, 0.0, axis=1).pvalue < ALPHA

    assert abs(_mc_smallest_n(reject, n + 3, seed=11) - n) <= 1


def test_seeds_needed_paired_matches_simulation():
    # two arms on the same seeds: a shared per-seed effect (sd 0.05) cancels in the paired test;
    # arm noise sd 0.008 each, so the per-seed differences have sd 0.008·sqrt(2)
    delta, noise = 0.01, 0.008
    n = smallest_n(lambda k: diff_power(k, delta, noise * math.sqrt(2), ALPHA))

    def reject(rng, k):
        shared = rng.normal(0, 0.05, (SIMS, k))
        a = 1.5 + delta + shared + rng.normal(0, noise, (SIMS, k))
        b = 1.5 + shared + rng.normal(0, noise, (SIMS, k))
        return stats.ttest_rel(a, b, axis=1).pvalue < ALPHA

    assert abs(_mc_smallest_n(reject, n + 3, seed=12) - n) <= 1


@pytest.mark.parametrize("delta", [0.003, 0.006])
def test_seeds_needed_tost_matches_simulation(delta):
    # paired differences with sd 0.01, margin ±0.01: showing equivalence needs more seeds the
    # nearer the true difference is to the margin
    sd, margin = 0.01, 0.01
    n = smallest_n(lambda k: tost_power(k, delta, sd, margin, ALPHA))

    def reject(rng, k):  # TOST by its definition: both one-sided t-tests at alpha
        d = rng.normal(delta, sd, (SIMS, k))
        se, df = d.std(axis=1, ddof=1) / math.sqrt(k), k - 1
        p_low = stats.t.sf((d.mean(axis=1) + margin) / se, df)
        p_high = stats.t.cdf((d.mean(axis=1) - margin) / se, df)
        return np.maximum(p_low, p_high) < ALPHA

    assert abs(_mc_smallest_n(reject, n + 3, seed=13) - n) <= 1


def test_beyond_the_margin_and_unreachable():
    # nearer the margin, equivalence needs more seeds (0.003 -> 15, 0.006 -> 41 at sd 0.01)
    assert smallest_n(lambda k: tost_power(k, 0.006, 0.01, 0.01)) > smallest_n(
        lambda k: tost_power(k, 0.003, 0.01, 0.01)
    )
    # a true difference of 2 margins: the 95% CI lies beyond the margin with enough seeds
    assert smallest_n(lambda k: beyond_power(k, 0.02, 0.01, 0.01)) is not None
    # a true difference on the margin: TOST can never reach 80% power
    assert smallest_n(lambda k: tost_power(k, 0.01, 0.01, 0.01, ALPHA)) is None
