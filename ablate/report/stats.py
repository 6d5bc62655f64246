"""Statistics across seeds: t-intervals, Welch's t-test, bootstrap CIs and plain-language verdicts.

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
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

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
    """mean(a) - mean(b)."""
    ci_lo: float = math.nan
    ci_hi: float = math.nan
    t: float = math.nan
    df: float = math.nan
    p: float = math.nan
    axis: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    """The other axes, held fixed, for an axis comparison."""

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


def compare(
    a: Sequence[float],
    b: Sequence[float],
    *,
    label_a: str = "a",
    label_b: str = "b",
    diverged_a: int = 0,
    diverged_b: int = 0,
    seed: int = SEED,
    axis: str = "",
    context: dict[str, Any] | None = None,
) -> Comparison:
    """Welch test and bootstrap CI of ``mean(a) - mean(b)`` over the finite values."""
    x, y = finite(a), finite(b)
    w = welch(x, y)
    diff, lo, hi = bootstrap_diff_ci(x, y, seed=seed)
    return Comparison(
        label_a=label_a,
        label_b=label_b,
        a=tuple(float(v) for v in x),
        b=tuple(float(v) for v in y),
        diverged_a=diverged_a,
        diverged_b=diverged_b,
        diff=diff,
        ci_lo=lo,
        ci_hi=hi,
        t=w.t,
        df=w.df,
        p=w.p,
        axis=axis,
        context=dict(context or {}),
    )


@dataclass(frozen=True)
class Verdict:
    kind: str
    """``winner``, ``no_difference``, ``inconclusive`` (CI and test disagree), ``diverged``,
    ``too_few`` (fewer than 2 finite seeds on a side)."""
    winner: str | None
    text: str


def _num(x: float) -> str:
    if not math.isfinite(x):
        return "nan"
    s = f"{x:.3g}"
    return "0" if s in ("-0", "0") else s


def _p(p: float) -> str:
    if not math.isfinite(p):
        return "p n/a"
    return "p<0.001" if p < 0.001 else f"p={p:.2g}"


def _seeds(c: Comparison) -> str:
    if c.n_a == c.n_b:
        return f"n={c.n_a} seed{'s' if c.n_a != 1 else ''}"
    return f"n={c.n_a} vs {c.n_b} seeds"


def verdict(
    c: Comparison,
    *,
    unit: str = "nats",
    lower_is_better: bool = True,
    alpha: float = ALPHA,
    where: str = "",
) -> Verdict:
    """A plain-language verdict that names a winner only when the evidence supports one.

    Rules, in order: a side that diverged in every seed while the other did not loses ("post
    diverged in 3/3 seeds (pre: 0/3)"); both diverged everywhere: no winner; fewer than 2 finite
    seeds on a side: no test; the bootstrap CI of the difference includes 0: "no detectable
    difference"; the CI excludes 0 but Welch ``p >= alpha``: inconclusive (small-n bootstrap
    CIs are too narrow); otherwise the side with the better mean wins by ``|diff|`` with the CI
    of (loser - winner) for lower-is-better metrics. Partial divergence is appended. ``where``
    (e.g. "at warmup_ratio=0") names what was held fixed.
    """
    a, b = c.label_a, c.label_b
    tail = f" {where}" if where else ""
    div_note = ""
    parts = [
        f"{lab} diverged in {d}/{tot} seeds"
        for lab, d, tot in ((a, c.diverged_a, c.total_a), (b, c.diverged_b, c.total_b))
        if d
    ]
    if parts:
        div_note = "; " + " and ".join(parts) + " (not averaged)"

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
    if c.n_a < 2 or c.n_b < 2:
        text = (
            f"{a} vs {b}{tail}: too few finite seeds to test ({_seeds(c)}; need at least 2 "
            f"each){div_note}"
        )
        return Verdict("too_few", None, text)
    ci = f"[{_num(c.ci_lo)}, {_num(c.ci_hi)}]"
    if not (math.isfinite(c.ci_lo) and math.isfinite(c.ci_hi)) or c.ci_lo <= 0 <= c.ci_hi:
        text = (
            f"{a} vs {b}{tail}: no detectable difference at {_seeds(c)}: "
            f"95% CI of the difference {ci} includes 0 (Welch {_p(c.p)}){div_note}"
        )
        return Verdict("no_difference", None, text)
    a_better = (c.diff < 0) if lower_is_better else (c.diff > 0)
    winner, loser = (a, b) if a_better else (b, a)
    # the CI of the winner's advantage (loser - winner when lower is better): positive
    flip = a_better == lower_is_better
    lo, hi = (-c.ci_hi, -c.ci_lo) if flip else (c.ci_lo, c.ci_hi)
    n = f"n={c.n_a} vs {c.n_b}" if a_better else f"n={c.n_b} vs {c.n_a}"
    if math.isfinite(c.p) and c.p >= alpha:
        text = (
            f"{a} vs {b}{tail}: inconclusive at {_seeds(c)}: {winner} is better by "
            f"{_num(abs(c.diff))} {unit} and the bootstrap CI [{_num(lo)}, {_num(hi)}] excludes 0, "
            f"but Welch {_p(c.p)} >= {alpha:g}; add seeds{div_note}"
        )
        return Verdict("inconclusive", None, text)
    text = (
        f"{winner} beats {loser} by {_num(abs(c.diff))} {unit} "
        f"(95% CI [{_num(lo)}, {_num(hi)}], Welch {_p(c.p)}, {n}){tail}{div_note}"
    )
    return Verdict("winner", winner, text)


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


def axis_comparisons(
    runs: pd.DataFrame,
    axes: list[str],
    metric: str = "final_val_loss",
    seed: int = SEED,
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
                    compare(
                        ga.loc[ga["status"] == "completed", metric].tolist(),
                        gb.loc[gb["status"] == "completed", metric].tolist(),
                        label_a=format_value(va),
                        label_b=format_value(vb),
                        diverged_a=int((ga["status"] == "diverged").sum()),
                        diverged_b=int((gb["status"] == "diverged").sum()),
                        seed=seed,
                        axis=axis,
                        context=ctx,
                    )
                )
    return out
