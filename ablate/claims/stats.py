"""Statistics across seeds, on arrays of per-seed values: means and t-intervals, paired/Welch
t-tests, a secondary bootstrap CI, TOST equivalence, Holm and Benjamini–Hochberg corrections,
exact sign-flip and permutation tests, plus :func:`summarize`, the per-group mean/std/CI table
of the runs table (seeds needed: :mod:`ablate.claims.power`).

The array functions are pure: same input, same output (the bootstrap takes a fixed seed).
Two groups of runs compared with them are :mod:`ablate.claims.comparisons`; the plain-language
verdict on a comparison is :mod:`ablate.claims.verdicts`.

Non-finite values (a diverged run's loss) are never averaged: the array functions drop them,
and the callers count diverged runs separately and say so.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

from ablate.claims.spec import ALPHA  # noqa: F401 - the statistics' level, kept in spec
from ablate.store import RUN_STATES

SEED = 0
"""Fixed seed of every bootstrap in a report, so rebuilding a report gives the same numbers."""


def finite(values: Iterable[float]) -> np.ndarray:
    """The finite values as a float array (NaN, ±inf and None dropped)."""
    arr = np.asarray([np.nan if v is None else v for v in values], dtype=float).ravel()
    return arr[np.isfinite(arr)]


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """``(mean, s, n)`` of the finite values, ``s = sqrt(sum((x - mean)²) / (n - 1))`` (n≥2)."""
    x = finite(values)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std(ddof=1)) if n > 1 else math.nan, n


def mean_ci(values: Iterable[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided t-interval over seeds: ``(mean, lo, hi)``.

    ``mean ± t_{n-1, (1+c)/2} · s / sqrt(n)`` with ``s`` the sample standard deviation
    (ddof=1); for c = 0.95 and n = 3, ``t_{2, 0.975} = 4.302653``. Non-finite values are dropped.
    n = 1 gives ``(x, nan, nan)`` (no interval from one seed); n = 0 gives all nan.
    """
    m, s, n = mean_std(values)
    if n < 2:
        return m, math.nan, math.nan
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * s / math.sqrt(n)
    return m, m - half, m + half


def t_errorbar(values: Iterable[float]) -> tuple[float, float]:
    """``(lo, hi)`` of :func:`mean_ci` for seaborn's ``errorbar=`` (figures draw the tables'
    interval); one value: ``(x, x)``."""
    m, lo, hi = mean_ci(values)
    return (m, m) if not math.isfinite(lo) else (lo, hi)


@dataclass(frozen=True)
class WelchResult:
    t: float
    df: float
    p: float


def welch(a: Iterable[float], b: Iterable[float]) -> WelchResult:
    """Welch's unequal-variance t-test of mean(a) vs mean(b), two-sided.

    ``t = (mean_a - mean_b) / sqrt(s_a²/n_a + s_b²/n_b)`` and Welch–Satterthwaite degrees of
    freedom ``df = (s_a²/n_a + s_b²/n_b)² / ((s_a²/n_a)²/(n_a-1) + (s_b²/n_b)²/(n_b-1))``;
    ``p = 2 · (1 - F_t(|t|; df))``. Computed by ``scipy.stats.ttest_ind(equal_var=False)``.
    Non-finite values are dropped; fewer than 2 values on a side gives all nan. Zero variance
    on both sides gives ``t = ±inf, p = 0`` when the means differ (``t = 0, p = 1`` if not).
    """
    x, y = finite(a), finite(b)
    if len(x) < 2 or len(y) < 2:
        return WelchResult(math.nan, math.nan, math.nan)
    va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    diff = float(x.mean() - y.mean())
    if va + vb == 0:
        return WelchResult(
            math.copysign(math.inf, diff) if diff else 0.0, math.nan, 0.0 if diff else 1.0
        )
    df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
    res = stats.ttest_ind(x, y, equal_var=False)
    return WelchResult(float(res.statistic), float(df), float(res.pvalue))


@dataclass(frozen=True)
class OneSample:
    """Mean of the seeds minus a fixed reference value, its t-interval and p-value."""

    n: int
    mean: float
    diff: float
    lo: float
    hi: float
    p: float


def one_sample(values: Iterable[float], reference: float, confidence: float = 0.95) -> OneSample:
    """The seeds' mean against a published value: ``diff = mean - reference`` with the t-interval
    ``diff ± t_{n-1, (1+c)/2} · s / sqrt(n)`` and the two-sided one-sample t-test
    ``t = diff / (s / sqrt(n))`` on n - 1 degrees of freedom (``scipy.stats.ttest_1samp``).
    Non-finite values are dropped; n < 2 gives nan for the interval and p."""
    x = finite(values)
    m, lo, hi = mean_ci(x, confidence)
    if len(x) < 2:
        return OneSample(len(x), m, m - reference, math.nan, math.nan, math.nan)
    with warnings.catch_warnings():  # identical seeds: scipy warns, p is nan
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_1samp(x, reference).pvalue)
    return OneSample(len(x), m, m - reference, lo - reference, hi - reference, p)


def bootstrap_diff_ci(
    a: Iterable[float],
    b: Iterable[float],
    seed: int = SEED,
    confidence: float = 0.95,
    n_resamples: int = 9999,
) -> tuple[float, float, float]:
    """``(mean_a - mean_b, lo, hi)``: percentile bootstrap CI of the difference of means.

    Each sample is resampled with replacement independently (``scipy.stats.bootstrap``,
    ``paired=False``) ``n_resamples`` times with ``numpy.random.default_rng(seed)``; the CI is
    the ``(1-c)/2`` and ``(1+c)/2`` quantiles of the resampled differences. The percentile
    method (the one seaborn's ``errorbar=("ci", 95)`` uses) rather than BCa, whose jackknife
    acceleration is unstable with 2–5 seeds. Fewer than 2 finite values on a side: nan CI.
    """
    x, y = finite(a), finite(b)
    diff = float(x.mean() - y.mean()) if len(x) and len(y) else math.nan
    if len(x) < 2 or len(y) < 2:
        return diff, math.nan, math.nan

    def stat(u, v, axis=-1):
        return np.mean(u, axis=axis) - np.mean(v, axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (x, y),
            stat,
            n_resamples=n_resamples,
            vectorized=True,
            paired=False,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    return diff, float(res.confidence_interval.low), float(res.confidence_interval.high)


@dataclass(frozen=True)
class DiffTest:
    """A two-sided test of ``mean(a) - mean(b) = 0`` with the t-interval of the difference."""

    test: str
    """``"paired t"`` (per-seed differences) or ``"Welch t"`` (unpaired)."""
    diff: float
    lo: float
    hi: float
    t: float
    df: float
    p: float
    sd: float
    """Standard deviation behind the effect size: of the paired differences (paired), or the
    root mean of the two sample variances (Welch), for the seeds-needed estimate."""


def paired_t(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> DiffTest:
    """Paired t-test on per-seed differences ``d_i = a_i - b_i`` (``scipy.stats.ttest_rel``).

    ``t = mean(d) / (s_d / sqrt(n))`` on ``n - 1`` df, with the interval
    ``mean(d) ± t_{n-1, (1+c)/2} · s_d / sqrt(n)``. ``a`` and ``b`` are aligned by seed and
    finite. Identical differences (``s_d = 0``): ``p = 0`` and a zero-width interval when
    ``mean(d) != 0``, else ``p = 1``.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = x - y
    n, m = len(d), float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    if n < 2:
        return DiffTest("paired t", m, math.nan, math.nan, math.nan, math.nan, math.nan, sd)
    if sd == 0:
        return DiffTest(
            "paired t",
            m,
            m,
            m,
            math.copysign(math.inf, m) if m else 0.0,
            n - 1,
            0.0 if m else 1.0,
            0.0,
        )
    res = stats.ttest_rel(x, y)
    ci = res.confidence_interval(confidence)
    return DiffTest(
        "paired t",
        m,
        float(ci.low),
        float(ci.high),
        float(res.statistic),
        float(n - 1),
        float(res.pvalue),
        sd,
    )


def welch_diff(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> DiffTest:
    """Welch's test (:func:`welch`) with the Welch–Satterthwaite t-interval of the difference:
    ``mean_a - mean_b ± t_{df, (1+c)/2} · sqrt(s_a²/n_a + s_b²/n_b)``."""
    x, y = finite(a), finite(b)
    diff = float(x.mean() - y.mean()) if len(x) and len(y) else math.nan
    w = welch(x, y)
    if len(x) < 2 or len(y) < 2:
        return DiffTest("Welch t", diff, math.nan, math.nan, w.t, w.df, w.p, math.nan)
    va, vb = x.var(ddof=1), y.var(ddof=1)
    sd = math.sqrt((va + vb) / 2)
    if not math.isfinite(w.df):  # both variances zero
        return DiffTest("Welch t", diff, diff, diff, w.t, w.df, w.p, sd)
    half = float(stats.t.ppf((1 + confidence) / 2, w.df)) * math.sqrt(va / len(x) + vb / len(y))
    return DiffTest("Welch t", diff, diff - half, diff + half, w.t, w.df, w.p, sd)


def tost(a: Sequence[float], b: Sequence[float], margin: float, paired: bool) -> float:
    """Two one-sided tests of equivalence, ``|mean(a) - mean(b)| < margin``: the larger of the
    one-sided p-values of ``H0: diff <= -margin`` and ``H0: diff >= +margin``
    (``statsmodels.stats.weightstats.ttost_paired`` / ``ttost_ind(usevar="unequal")``).
    p < alpha is equivalent to the ``1 - 2·alpha`` t-interval lying inside ``±margin``.
    Zero spread: 0 when the difference is inside the margin, else 1. Fewer than 2: nan."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2 or len(y) < 2:
        return math.nan
    spread = np.std(x - y) if paired else np.std(x) + np.std(y)
    if spread == 0:
        return 0.0 if abs(x.mean() - y.mean()) < margin else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if paired:
            p = ttost_paired(x, y, -margin, margin)[0]
        else:
            p = ttost_ind(x, y, -margin, margin, usevar="unequal")[0]
    return float(p)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (what ``multipletests(method="holm")`` returns): sort
    the k finite p ascending, ``p_adj(i) = max_{j<=i} min(1, (k - j + 1) · p_(j))``. NaN stays
    NaN and does not count in k. Computed here: statsmodels runs a full garbage collection on
    every holm call, a second or more in a process that holds torch and Lightning (a report
    calls it once per family)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(len(p), math.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    factors = np.arange(len(order), 0, -1)  # k - j + 1 for the j-th smallest
    out[order] = np.minimum(1.0, np.maximum.accumulate(p[order] * factors))
    return [float(v) for v in out]


def bh(pvalues: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (FDR; ``multipletests(method="fdr_bh")``): sort the k
    finite p ascending, ``q(i) = min_{j>=i} min(1, k · p_(j) / j)``. NaN stays NaN and does not
    count in k. For exploratory comparisons: controls the expected share of false findings."""
    return _adjusted(pvalues, "fdr_bh")


def _adjusted(pvalues: Sequence[float], method: str) -> list[float]:
    """``multipletests(method=method)`` over the finite p-values; NaN stays NaN."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(len(p), math.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method=method)[1]
    return [float(v) for v in out]


def summarize(runs: pd.DataFrame, by: list[str], metrics: list[str]) -> pd.DataFrame:
    """One row per group of runs: status counts and, per metric, mean/std/CI/n.

    Columns: ``by``, ``total``, one count per state of ``store.RUN_STATES``,
    ``diverged_steps`` (list), and for each metric ``m``: ``m_mean, m_std, m_lo, m_hi, m_n``.
    Metrics are computed over the ``completed`` runs only (finite values): diverged runs are
    counted in ``diverged``, never averaged in.
    """
    rows = []
    for key, g in runs.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        status = g["status"]
        row["total"] = len(g)
        for s in RUN_STATES:
            row[s] = int((status == s).sum())
        if "diverged_step" in g:
            row["diverged_steps"] = [
                int(v) for v in g.loc[status == "diverged", "diverged_step"] if pd.notna(v)
            ]
        done = g[status == "completed"]
        for m in metrics:
            vals = done[m] if m in done else pd.Series(dtype=float)
            mean, lo, hi = mean_ci(pd.to_numeric(vals, errors="coerce"))
            _, s, n = mean_std(pd.to_numeric(vals, errors="coerce"))
            row.update({f"{m}_mean": mean, f"{m}_std": s, f"{m}_lo": lo, f"{m}_hi": hi})
            row[f"{m}_n"] = n
        rows.append(row)
    return pd.DataFrame(rows)


EXACT_MAX_N = 20
"""Up to this many pairs the sign-flip test enumerates all 2^n sign patterns (exact); above,
it draws :data:`SIGN_FLIP_DRAWS` patterns with the fixed seed :data:`SEED` (Monte Carlo)."""
SIGN_FLIP_DRAWS = 100_000


def sign_flip_p(
    diffs: Iterable[float], shift: float = 0.0, alternative: str = "two-sided"
) -> float:
    """The sign-flip (permutation) p of the per-seed differences ``diffs`` against ``shift``:
    under H0 each ``d - shift`` is symmetric about 0, so its sign is a fair coin; the statistic
    is the mean of ``d - shift`` and the p counts the sign patterns at least as extreme (the
    observed one included, so p >= 2^-n). ``alternative``: ``two-sided``, ``greater`` (mean
    above ``shift``) or ``less``. Exact for n <= :data:`EXACT_MAX_N`, else Monte Carlo with a
    fixed seed. NaN with fewer than 2 finite values. Valid without normality: at small n it
    cannot go below ``2/2^n`` (two-sided), which the t-test can."""
    d = finite(diffs) - shift
    n = len(d)
    if n < 2:
        return math.nan
    if n <= EXACT_MAX_N:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
    else:
        rng = np.random.default_rng(SEED)
        signs = rng.choice([-1, 1], size=(SIGN_FLIP_DRAWS, n))
        signs[0] = 1  # the observed pattern counts
    means = signs @ d / n
    obs, tol = d.mean(), 1e-12 * max(1.0, float(np.abs(d).max()))
    if alternative == "greater":
        hits = means >= obs - tol
    elif alternative == "less":
        hits = means <= obs + tol
    else:
        hits = np.abs(means) >= abs(obs) - tol
    return float(hits.mean())


def sign_flip_tost(diffs: Iterable[float], margin: float) -> float:
    """Equivalence within ``±margin`` by two one-sided sign-flip tests (the larger p): the
    differences lie above ``-margin`` and below ``+margin``."""
    d = finite(diffs)
    if len(d) < 2:
        return math.nan
    return max(sign_flip_p(d, -margin, "greater"), sign_flip_p(d, margin, "less"))


def sign_flip_floor(n: int) -> float:
    """The smallest two-sided exact sign-flip p that ``n`` pairs can give: ``2 / 2^n``."""
    return min(1.0, 2.0 / 2**n) if n >= 1 else 1.0


EXACT_MAX_SPLITS = 100_000
"""Up to this many ways to split the pooled values into the two arms, the two-sample
permutation test enumerates them all (exact); above, it draws :data:`SIGN_FLIP_DRAWS` splits
with the fixed seed :data:`SEED`."""


def permutation_p(
    a: Iterable[float], b: Iterable[float], shift: float = 0.0, alternative: str = "two-sided"
) -> float:
    """The two-sample permutation p of ``mean(a) - mean(b)`` against ``shift`` (unpaired arms:
    another seed set, or published values; ``scipy.stats.permutation_test``, independent):
    under H0 the values of ``a - shift`` and ``b`` are exchangeable, so every split of the
    pooled values into groups of the arms' sizes is equally likely. ``alternative``:
    ``two-sided`` (twice the smaller one-sided p, scipy's convention), ``greater`` or
    ``less``. Exact up to :data:`EXACT_MAX_SPLITS` splits, else :data:`SIGN_FLIP_DRAWS`
    random splits with the fixed seed :data:`SEED`. NaN with fewer than 2 finite values in
    an arm. Its floor is ``1/C(n_a + n_b, n_a)`` one-sided, twice that two-sided."""
    x, y = finite(a) - shift, finite(b)
    if len(x) < 2 or len(y) < 2:
        return math.nan
    exact = math.comb(len(x) + len(y), len(x)) <= EXACT_MAX_SPLITS

    def stat(u, v, axis=-1):
        return np.mean(u, axis=axis) - np.mean(v, axis=axis)

    res = stats.permutation_test(
        (x, y),
        stat,
        permutation_type="independent",
        vectorized=True,
        n_resamples=np.inf if exact else SIGN_FLIP_DRAWS,
        alternative=alternative,
        rng=np.random.default_rng(SEED),
    )
    return float(res.pvalue)


def permutation_tost(a: Iterable[float], b: Iterable[float], margin: float) -> float:
    """Equivalence within ``±margin`` of two unpaired arms by two one-sided permutation tests
    (the larger p): ``mean(a) - mean(b)`` above ``-margin`` and below ``+margin``."""
    x, y = finite(a), finite(b)
    if len(x) < 2 or len(y) < 2:
        return math.nan
    return max(permutation_p(x, y, -margin, "greater"), permutation_p(x, y, margin, "less"))


def exact_floor(n: int, sided: int = 2, n_b: int | None = None) -> float:
    """The smallest p an exact test can give: over ``n`` paired seeds (sign-flip) ``sided/2^n``;
    with ``n_b`` unpaired values in the other arm (permutation) ``sided/C(n + n_b, n)``."""
    if n < 1:
        return 1.0
    count = 2**n if n_b is None else math.comb(n + n_b, n)
    return min(1.0, sided / count)
