"""Statistics across seeds: paired/Welch t-tests and t-intervals, Holm correction, TOST
equivalence, power (seeds needed), a secondary bootstrap CI and plain-language verdicts.

The functions on arrays (:func:`mean_ci`, :func:`welch`, :func:`bootstrap_diff_ci`,
:func:`compare`, :func:`verdict`) are pure: same input, same output (the bootstrap takes a fixed
seed). The table functions (:func:`summarize`, :func:`axis_comparisons`) apply them to the runs
table from :mod:`ablate.report.collect`.

Non-finite values (a diverged run's loss) are never averaged: the array functions drop them,
and the callers count diverged runs separately and say so.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestIndPower, TTestPower
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

from ablate.report.collect import format_value, value_order
from ablate.store import RUN_STATES

FINISHED = ("completed", "diverged")
SEED = 0
"""Fixed seed of every bootstrap in a report, so rebuilding a report gives the same numbers."""
ALPHA = 0.05


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
    """Holm–Bonferroni adjusted p-values (``multipletests(method="holm")``): sort the k finite
    p ascending, ``p_adj(i) = max_{j<=i} min(1, (k - j + 1) · p_(j))``. NaN stays NaN and does
    not count in k."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(len(p), math.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method="holm")[1]
    return [float(v) for v in out]


POWER = 0.8


def seeds_needed(
    diff: float, sd: float, margin: float, *, paired: bool, alpha: float = ALPHA
) -> int | None:
    """Seeds per variant that would decide a comparison with 80% power, at the observed
    difference and standard deviation: the fewer of (a) a two-sided t-test detecting ``diff``
    (effect size ``|diff| / sd``; ``TTestPower`` for paired seeds, ``TTestIndPower`` per arm
    otherwise) and (b), when ``|diff| < margin``, the one-sided test at the nearer equivalence
    bound that TOST needs (effect ``(margin - |diff|) / sd``). ``alpha`` should already be the
    corrected level. None when it cannot be estimated (sd nan/0 or no effect at all)."""
    if not (math.isfinite(diff) and math.isfinite(sd)) or sd <= 0:
        return None
    power = TTestPower() if paired else TTestIndPower()
    cands = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if abs(diff) > 0:
            cands.append(power.solve_power(abs(diff) / sd, alpha=alpha, power=POWER))
        if abs(diff) < margin:
            cands.append(
                power.solve_power(
                    (margin - abs(diff)) / sd, alpha=alpha, power=POWER, alternative="larger"
                )
            )
    cands = [float(np.ravel(c)[0]) for c in cands]
    cands = [c for c in cands if math.isfinite(c)]
    return max(2, math.ceil(min(cands))) if cands else None


@dataclass(frozen=True)
class Comparison:
    """Two groups of runs (e.g. ``pre`` vs ``post``) on one metric, with diverged runs counted."""

    label_a: str
    label_b: str
    a: tuple[float, ...]
    """Finite metric values of the finished, non-diverged runs of group a."""
    b: tuple[float, ...]
    diverged_a: int = 0
    diverged_b: int = 0
    diff: float = math.nan
    """mean(a) - mean(b) (paired: mean of the per-seed differences, the same number)."""
    ci_lo: float = math.nan
    """95% t-interval of the difference (paired or Welch–Satterthwaite): the headline CI."""
    ci_hi: float = math.nan
    t: float = math.nan
    df: float = math.nan
    p: float = math.nan
    axis: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    """The other axes, held fixed, for an axis comparison."""
    test: str = ""
    """``paired t`` or ``Welch t``."""
    sd: float = math.nan
    margin: float = 0.01
    """Equivalence margin (± this, in the metric's unit)."""
    p_tost: float = math.nan
    p_adj: float = math.nan
    """Holm-adjusted p over every comparison of the report (set by :func:`adjust`)."""
    p_tost_adj: float = math.nan
    family: int = 1
    """How many comparisons the Holm correction ran over."""
    boot_lo: float = math.nan
    """Percentile bootstrap CI (secondary, labelled as such)."""
    boot_hi: float = math.nan
    key: tuple = ()
    """Identity of the two groups (their run ids), so one comparison is counted once."""

    @property
    def n_a(self) -> int:
        return len(self.a)

    @property
    def n_b(self) -> int:
        return len(self.b)

    @property
    def total_a(self) -> int:
        return self.n_a + self.diverged_a

    @property
    def total_b(self) -> int:
        return self.n_b + self.diverged_b

    @property
    def mean_a(self) -> float:
        return float(np.mean(self.a)) if self.a else math.nan

    @property
    def mean_b(self) -> float:
        return float(np.mean(self.b)) if self.b else math.nan

    @property
    def paired(self) -> bool:
        return self.test == "paired t"


def _pairable(
    x: Sequence[float], y: Sequence[float], sx: Sequence[Any] | None, sy: Sequence[Any] | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Values of a and b aligned by seed, when both arms have exactly the same finite seeds."""
    if sx is None or sy is None or len(sx) != len(x) or len(sy) != len(y):
        return None
    da = {s: v for s, v in zip(sx, x, strict=True) if v is not None and math.isfinite(v)}
    db = {s: v for s, v in zip(sy, y, strict=True) if v is not None and math.isfinite(v)}
    if len(da) < 2 or set(da) != set(db) or len(da) != len(finite(x)):
        return None
    seeds = sorted(da, key=str)
    return np.array([da[s] for s in seeds]), np.array([db[s] for s in seeds])


def compare(
    a: Sequence[float],
    b: Sequence[float],
    *,
    label_a: str = "a",
    label_b: str = "b",
    seeds_a: Sequence[Any] | None = None,
    seeds_b: Sequence[Any] | None = None,
    diverged_a: int = 0,
    diverged_b: int = 0,
    margin: float = 0.01,
    seed: int = SEED,
    axis: str = "",
    context: dict[str, Any] | None = None,
    key: tuple = (),
) -> Comparison:
    """``mean(a) - mean(b)``: a paired t-test and interval when both arms have the same finite
    seeds (``seeds_a``/``seeds_b`` give each value's seed), else Welch; TOST at ``±margin``;
    and the percentile bootstrap CI as a secondary number. p_adj is filled by :func:`adjust`."""
    pairs = _pairable(a, b, seeds_a, seeds_b)
    x, y = finite(a), finite(b)
    if pairs is not None:
        x, y = pairs
        res = paired_t(x, y)
    else:
        res = welch_diff(x, y)
    _, blo, bhi = bootstrap_diff_ci(x, y, seed=seed)
    p_tost = tost(x, y, margin, pairs is not None)
    return Comparison(
        label_a=label_a,
        label_b=label_b,
        a=tuple(float(v) for v in x),
        b=tuple(float(v) for v in y),
        diverged_a=diverged_a,
        diverged_b=diverged_b,
        diff=res.diff,
        ci_lo=res.lo,
        ci_hi=res.hi,
        t=res.t,
        df=res.df,
        p=res.p,
        axis=axis,
        context=dict(context or {}),
        test=res.test,
        sd=res.sd,
        margin=margin,
        p_tost=p_tost,
        p_adj=res.p,
        p_tost_adj=p_tost,
        boot_lo=blo,
        boot_hi=bhi,
        key=key,
    )


def adjust(comps: Sequence[Comparison]) -> list[Comparison]:
    """Holm-adjust the difference p-values and, separately, the TOST p-values over ``comps``
    (one family: every comparison of a report). Returns new comparisons."""
    p_adj = holm([c.p for c in comps])
    t_adj = holm([c.p_tost for c in comps])
    k = sum(1 for c in comps if math.isfinite(c.p))
    return [
        replace(c, p_adj=pa, p_tost_adj=ta, family=max(k, 1))
        for c, pa, ta in zip(comps, p_adj, t_adj, strict=True)
    ]


@dataclass(frozen=True)
class Verdict:
    kind: str
    """``better`` / ``worse`` (a against b), ``equivalent`` (within ±margin), ``inconclusive``,
    ``diverged``, ``too_few`` (fewer than 2 finite seeds on a side)."""
    winner: str | None
    text: str
    seeds_needed: int | None = None
    """For an inconclusive comparison: seeds per variant for 80% power (else None)."""


def _num(x: float) -> str:
    if not math.isfinite(x):
        return "nan"
    s = f"{x:.3g}"
    return "0" if s in ("-0", "0") else s


def _p(p: float, name: str = "p") -> str:
    if not math.isfinite(p):
        return f"{name} n/a"
    return f"{name}<0.001" if p < 0.001 else f"{name}={p:.2g}"


def _seeds(c: Comparison) -> str:
    if c.n_a == c.n_b:
        return f"n={c.n_a} seed{'s' if c.n_a != 1 else ''}"
    return f"n={c.n_a} vs {c.n_b} seeds"


def _diverged(c: Comparison, tail: str) -> Verdict | None:
    a, b = c.label_a, c.label_b
    all_a = c.total_a > 0 and c.diverged_a == c.total_a
    all_b = c.total_b > 0 and c.diverged_b == c.total_b
    if all_a and all_b:
        text = (
            f"both diverged: {a} in {c.diverged_a}/{c.total_a} and "
            f"{b} in {c.diverged_b}/{c.total_b} seeds{tail}"
        )
        return Verdict("diverged", None, text)
    if all_a or all_b:
        loser, winner = (a, b) if all_a else (b, a)
        d, tot = (c.diverged_a, c.total_a) if all_a else (c.diverged_b, c.total_b)
        wd, wtot = (c.diverged_b, c.total_b) if all_a else (c.diverged_a, c.total_a)
        text = f"{loser} diverged in {d}/{tot} seeds ({winner}: {wd}/{wtot}){tail}"
        return Verdict("diverged", winner, text)
    return None


def verdict(
    c: Comparison,
    *,
    unit: str = "nats",
    lower_is_better: bool = True,
    alpha: float = ALPHA,
    where: str = "",
) -> Verdict:
    """better / worse / equivalent within ±margin / inconclusive, from the Holm-adjusted p.

    Rules, in order: a side that diverged in every seed loses (both: no winner); fewer than 2
    finite seeds on a side: no test; Holm-adjusted ``p < alpha``: the side with the better mean
    wins, quoted with the 95% t-interval of its advantage; Holm-adjusted TOST ``p < alpha``:
    equivalent within ±margin; otherwise inconclusive, with the seeds per variant that would
    decide it with 80% power at the corrected level (``alpha / family``, Holm's first step).
    Partial divergence is appended; ``where`` names what was held fixed.
    """
    a, b = c.label_a, c.label_b
    tail = f" {where}" if where else ""
    parts = [
        f"{lab} diverged in {d}/{tot} seeds"
        for lab, d, tot in ((a, c.diverged_a, c.total_a), (b, c.diverged_b, c.total_b))
        if d
    ]
    div_note = "; " + " and ".join(parts) + " (not averaged)" if parts else ""
    dv = _diverged(c, tail)
    if dv is not None:
        return dv
    if c.n_a < 2 or c.n_b < 2:
        text = (
            f"{a} vs {b}{tail}: too few finite seeds to test ({_seeds(c)}; need at least 2 "
            f"each){div_note}"
        )
        return Verdict("too_few", None, text)
    test = f"{c.test}, {_p(c.p)}, Holm {_p(c.p_adj)}"
    m = f"±{_num(c.margin)} {unit}"
    if math.isfinite(c.p_adj) and c.p_adj < alpha:
        a_better = (c.diff < 0) if lower_is_better else (c.diff > 0)
        winner, loser = (a, b) if a_better else (b, a)
        flip = a_better == lower_is_better  # CI of the winner's advantage: positive
        lo, hi = (-c.ci_hi, -c.ci_lo) if flip else (c.ci_lo, c.ci_hi)
        small = f"; the difference is within {m}" if abs(c.diff) < c.margin else ""
        text = (
            f"{winner} beats {loser} by {_num(abs(c.diff))} {unit} "
            f"(95% CI [{_num(lo)}, {_num(hi)}], {test}, {_seeds(c)}){tail}{small}{div_note}"
        )
        return Verdict("better" if a_better else "worse", winner, text)
    ci = f"95% CI [{_num(c.ci_lo)}, {_num(c.ci_hi)}]"
    if math.isfinite(c.p_tost_adj) and c.p_tost_adj < alpha:
        text = (
            f"{a} ≈ {b}{tail}: equivalent within {m}: difference {_num(c.diff)} ({ci}, "
            f"TOST Holm {_p(c.p_tost_adj)}, {_seeds(c)}){div_note}"
        )
        return Verdict("equivalent", None, text)
    need = seeds_needed(c.diff, c.sd, c.margin, paired=c.paired, alpha=alpha / c.family)
    more = f"≈{need} seeds per variant would decide it" if need else "add seeds"
    text = (
        f"{a} vs {b}{tail}: inconclusive at {_seeds(c)}: difference {_num(c.diff)} {unit} "
        f"({ci}, {test}; not within {m} by TOST); {more}{div_note}"
    )
    return Verdict("inconclusive", None, text, need)


# --- tables ------------------------------------------------------------------------------------


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


def compare_groups(ga: pd.DataFrame, gb: pd.DataFrame, metric: str, **kwargs: Any) -> Comparison:
    """:func:`compare` on two groups of runs of the runs table: completed runs give the values
    (with their seeds, so equal seed sets are paired), diverged runs are counted, and the run
    ids identify the comparison (``key``)."""
    da, db = ga[ga["status"] == "completed"], gb[gb["status"] == "completed"]
    return compare(
        pd.to_numeric(da[metric], errors="coerce").tolist() if metric in da else [],
        pd.to_numeric(db[metric], errors="coerce").tolist() if metric in db else [],
        seeds_a=da["seed"].tolist(),
        seeds_b=db["seed"].tolist(),
        diverged_a=int((ga["status"] == "diverged").sum()),
        diverged_b=int((gb["status"] == "diverged").sum()),
        key=(metric, tuple(sorted(map(str, ga["run_id"]))), tuple(sorted(map(str, gb["run_id"])))),
        **kwargs,
    )


def axis_comparisons(
    runs: pd.DataFrame,
    axes: list[str],
    metric: str = "final_val_loss",
    seed: int = SEED,
    margin: float = 0.01,
) -> list[Comparison]:
    """For each axis, every pair of its values with all other axes held fixed.

    Runs are matched on the other axes (the "context"); within a context, the finished runs
    (``completed`` or ``diverged``) of value ``v_i`` are compared with those of ``v_j``:
    completed runs give the metric values, diverged ones are counted. Runs still running,
    failed or pending are left out.
    """
    done = runs[runs["status"].isin(FINISHED)]
    out: list[Comparison] = []
    for axis in axes:
        values = value_order(runs[axis])
        if len(values) < 2:
            continue
        others = [a for a in axes if a != axis]
        groups = done.groupby(others, sort=False, dropna=False) if others else [((), done)]
        contexts = []
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            contexts.append((dict(zip(others, key, strict=True)), g))
        for other in others:  # contexts in axis-value order
            order = {v: i for i, v in enumerate(value_order(runs[other]))}
            contexts.sort(key=lambda cg, o=other, od=order: od.get(cg[0][o], len(od)))
        for ctx, g in contexts:
            present = [
                v for v in values if (g[axis] == v).any() or (v is None and g[axis].isna().any())
            ]
            for va, vb in combinations(present, 2):
                ga = g[g[axis] == va] if va is not None else g[g[axis].isna()]
                gb = g[g[axis] == vb] if vb is not None else g[g[axis].isna()]
                out.append(
                    compare_groups(
                        ga,
                        gb,
                        metric,
                        label_a=format_value(va),
                        label_b=format_value(vb),
                        margin=margin,
                        seed=seed,
                        axis=axis,
                        context=ctx,
                    )
                )
    return out
