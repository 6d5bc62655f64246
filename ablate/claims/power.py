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

For a claim: :func:`claim_seeds_needed` (the test that decides a two-arm, published-value or
fitted claim) and :func:`parts_seeds_needed` (every one-sided part of a one-arm claim), and
:func:`seeds_to_decide`, which raises that to the claim's :func:`decidable_n`: the fewest seeds
whose exact test (sign-flip or permutation) can go below the claim's Holm level at all. That
floor needs no pilot and no assumption: it is what ``ablate register`` refuses to go below,
what ``ablate plan`` prints and what the pilot's and the report's seeds needed are raised to,
one function for all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from ablate.claims.comparisons import Comparison
from ablate.claims.one_sample import Part
from ablate.claims.spec import EQUIVALENCE, FITTED, ONE_SAMPLE, TREND, Claim
from ablate.claims.stats import ALPHA, exact_floor, finite

POWER = 0.8
MAX_SEEDS = 200
"""Beyond this many seeds a decision is "not reachable": 80% power not reached by 200 seeds."""
_Q = (np.arange(4000) + 0.5) / 4000  # quantiles of the SD's distribution (deterministic)


def _se_and_df(n: int, design: str, n_b: int) -> tuple[float, float]:
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
    f, df = _se_and_df(n, design, n_b)
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
    f, df = _se_and_df(n, design, n_b)
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
    f, df = _se_and_df(n, design, n_b)
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
    exact: str = ""
    """Where the exact test binds: ``the exact sign-flip test cannot reach α=0.01 with fewer``
    (then ``n`` is its need, above the t-test's ``power_n``); "" where power binds."""
    power_n: int | None = None
    floor: Floor | None = None
    """The claim's :func:`decidable_n` at this level: ``n`` is never below its ``n``."""

    def text(self) -> str:
        if self.n is None:
            return f"not reachable: {self.why_not} (assuming {self.assumption})"
        if self.exact:
            return (
                f"≈{self.n} {self.unit}: {self.exact} ({self.test} needs ≈{self.power_n} at 80% "
                f"power, assuming {self.assumption})"
            )
        return f"≈{self.n} {self.unit} for {self.test} at 80% power, assuming {self.assumption}"


def floor_above(n: int | None, current: int) -> int | None:
    """At least one seed more than the ``current`` seeds, which already did not decide it."""
    return None if n is None else max(n, current + 1)


def parts_seeds_needed(parts: list[Part], level: float, current: int | None = None) -> SeedsNeeded:
    """Seeds for 80% power of every part's one-sided test at ``level``, assuming each arm's
    observed mean and SD are the true ones: the largest part's need, at least one more than
    ``current`` (default: the parts' seeds); "not reachable" when a part's mean sits on the
    wrong side of its value or would need not reached by 200 seeds."""
    needs, assumed = [], []
    for p in parts:
        x = finite(p.values)
        d = (float(np.mean(x)) - p.ref) * (1 if p.expect == "above" else -1)
        sd = float(np.std(x, ddof=1))
        assumed.append(f"{p.label}: mean {np.mean(x):+.3g}, sd {sd:.3g}")
        if d <= 0 or sd <= 0:
            needs.append(None)
            continue
        needs.append(smallest_n(lambda k, d=d, sd=sd: beyond_power(k, d, sd, 0.0, level)))
    unit, assumption = "seeds per arm", "; ".join(assumed)
    if any(n is None for n in needs):
        why = (
            "an arm's observed mean is on the wrong side of its value, or not reached by 200 seeds"
        )
        return SeedsNeeded(None, unit, "", assumption, why)
    current = max(p.n for p in parts) if current is None else current
    test = f"every part's one-sided t at α={level:.2g}"
    return SeedsNeeded(floor_above(max(needs), current), unit, test, assumption)


def _claim_design(c: Comparison, claim: Claim) -> tuple[str, str, int, int]:
    """(power design, what the seeds count, current seeds, published values) of a claim."""
    if claim.metric == "lr_exponent":
        return "one-sample", "seeds (one fitted exponent per seed)", c.n_a, 0
    if c.key[:1] == ("trend",):  # one slope per seed, over every rung
        cells = "the four cells" if claim.by else "both arms"
        return "one-sample", f"seeds (each training {cells} at every rung, paired)", c.n_a, 0
    if claim.by:  # one difference of differences per seed
        return "one-sample", "seeds (each training the four cells, paired by seed)", c.n_a, 0
    if len(claim.external) == 1:
        return "one-sample", "seeds of arm a (against one published value)", c.n_a, 0
    if claim.external:
        return "fixed-b", f"seeds of arm a (against {c.n_b} published values)", c.n_a, c.n_b
    if c.paired:
        return "one-sample", "seeds per arm (paired by seed)", c.n_a, 0
    return "two-sample", "seeds per arm", max(c.n_a, c.n_b), 0


def claim_seeds_needed(
    c: Comparison, claim: Claim, alpha: float = ALPHA, sd_from: str = ""
) -> SeedsNeeded | None:
    """Seeds for 80% power of the test that would decide ``claim``, assuming the true
    difference and SD are the observed ones, at Holm's first-step level ``alpha / family``:
    for ``equivalent`` TOST when the difference is inside the margin, else the test that the
    CI lies beyond it; for ``better``/``worse`` the t-test of no difference, or TOST (which
    would contradict it) when that needs fewer. At least one seed more than the seeds that
    did not decide it; None when the SD is unknown or zero."""
    if not (math.isfinite(c.diff) and math.isfinite(c.sd)) or c.sd <= 0:
        return None
    design, unit, current, n_b = _claim_design(c, claim)
    level, d, sd, m = alpha / max(c.family, 1), c.diff, c.sd, c.margin
    assumption = f"the true difference is the observed {d:+.3g} with sd {sd:.3g}{sd_from}"
    lvl = f"α={level:.2g}"
    options = []  # (n, test)
    if abs(d) < m:
        n = smallest_n(lambda k: tost_power(k, d, sd, m, level, design, n_b))
        options.append((n, f"TOST within ±{m:g} at {lvl} (→ equivalent)"))
    if claim.expect == "equivalent" and abs(d) > m:

        def power(k: int) -> float:  # significant and the 95% CI beyond the margin
            return min(
                diff_power(k, d, sd, level, design, n_b),
                beyond_power(k, d, sd, m, 0.025, design, n_b),
            )

        options.append((smallest_n(power), f"the 95% CI wholly beyond ±{m:g} (→ different)"))
    if claim.expect != "equivalent" and d != 0:
        n = smallest_n(lambda k: diff_power(k, d, sd, level, design, n_b))
        options.append((n, f"the t-test of no difference at {lvl} (→ a winner)"))
    found = [(n, t) for n, t in options if n is not None]
    if found:
        n, test = min(found)
        return SeedsNeeded(floor_above(n, current), unit, test, assumption)
    floor = f"the {n_b} published values alone fix the standard error" if n_b else ""
    why = (
        "the assumed difference sits on the margin"
        if abs(d) == m
        else f"not reached by 200 seeds{'; ' + floor if floor else ''}"
        if options
        else "no difference at all to detect"
    )
    return SeedsNeeded(None, unit, "", assumption, why)


def seeds_to_decide(
    c: Comparison,
    claim: Claim,
    alpha: float = ALPHA,
    *,
    parts: list[Part] | tuple = (),
    sd_from: str = "",
    current: int | None = None,
) -> SeedsNeeded | None:
    """The seeds that would decide ``claim`` by both of its tests at Holm's first-step level
    ``alpha / family``: the t-test's 80%-power need (:func:`claim_seeds_needed`, or
    :func:`parts_seeds_needed` for one-arm claims), raised to the claim's :func:`decidable_n`
    (its exact test as these runs test it: paired or not, published values or not). None
    when the SD is unknown or zero."""
    level = alpha / max(c.family, 1)
    if parts:
        need = parts_seeds_needed(list(parts), level, current)
        unpaired = False
    else:
        need = claim_seeds_needed(c, claim, alpha, sd_from)
        if need is None:
            return None
        unpaired = _claim_design(c, claim)[0] == "two-sample"
    steps = len(c.context.get("steps") or []) or 1
    floor = decidable_n(claim, c.family, alpha, unpaired=unpaired, steps=steps)
    need = replace(need, floor=floor)
    if need.n is None or floor.n <= need.n:
        return need
    return replace(need, n=floor.n, exact=floor.text(), power_n=need.n)


@dataclass(frozen=True)
class Floor:
    """The fewest seeds at which a claim's exact test can go below its level at all (module
    doc): below it the verdict could rest on the t-test's normality alone."""

    n: int
    """Seeds per arm (of arm a against published values)."""
    level: float
    """The claim's Holm first-step level: its attempt's alpha share over the family."""
    alpha: float
    family: int
    test: str
    """``sign-flip``, ``permutation`` or "" (no exact test: a count of diverged runs)."""
    sided: int
    n_b: int | None = None
    """Permutation: the other arm's fixed size (published values); 0: as many as arm a."""

    def smallest_p(self, n: int) -> float:
        """The smallest p the test can give with ``n`` seeds."""
        if not self.test:
            return 0.0
        return exact_floor(n, self.sided, None if self.n_b is None else self.n_b or n)

    def text(self) -> str:
        """``the exact two-sided sign-flip test cannot go below α/5=0.01 with fewer than 8
        seeds (smallest p 2/2^8=0.0078; 7 give 0.016)``."""
        if not self.test:
            return "a count of diverged runs: no exact test to floor it"
        sides = "two-sided" if self.sided == 2 else "one-sided"
        if self.test == "sign-flip":
            how = f"{self.sided}/2^{self.n}"
        else:
            other = self.n_b or self.n
            how = f"{self.sided}/C({self.n + other},{self.n})"
        fewer = f"; {self.n - 1} give {self.smallest_p(self.n - 1):.2g}" if self.n > 2 else ""
        return (
            f"the exact {sides} {self.test} test cannot go below α/{self.family}="
            f"{self.level:.2g} with fewer than {self.n} seeds (smallest p {how}="
            f"{self.smallest_p(self.n):.2g}{fewer})"
        )


def exact_test(claim: Claim, unpaired: bool = False) -> tuple[str, int, int | None]:
    """(the claim's exact test, its sides, the other arm's fixed size) as the report tests it:
    the sign-flip test of per-seed values or differences (paired arms, a fitted exponent, a
    trend's slopes, an interaction, one published value), the two-sample permutation test
    for ``unpaired`` arms (other seeds, or other token streams: ``n_b`` 0, as many as arm a) or
    against several published values (``n_b`` = their number). One-sided for a one-arm part
    and for TOST (an equivalence decides by TOST's own floor), two-sided otherwise."""
    if claim.expect == "diverges":
        return "", 0, None
    one_sided = claim.expect in (*EQUIVALENCE, *ONE_SAMPLE, "all") or claim.parts
    sided = 1 if one_sided else 2
    if len(claim.external) > 1:
        return "permutation", sided, len(claim.external)
    plain = not (claim.external or claim.by or claim.parts or claim.expect in TREND)
    if unpaired and plain and claim.metric not in FITTED:
        return "permutation", sided, 0
    return "sign-flip", sided, None


def decidable_n(
    claim: Claim, family: int, alpha: float, *, unpaired: bool = False, steps: int = 1
) -> Floor:
    """The fewest seeds whose exact test (:func:`exact_test`) can give a p below the claim's
    Holm first-step level ``alpha / family`` (``alpha``: its attempt's share): ``register``,
    ``plan``, the pilot and the report all count with this one function. A trend claim is
    decided step by step too (Holm over its ``steps`` between rungs), so its level is divided
    by them as well: a step's test must be able to reach it."""
    family = max(family, 1) * (max(steps, 1) if claim.expect in TREND else 1)
    test, sided, n_b = exact_test(claim, unpaired)
    level = alpha / family
    floor = Floor(2, level, alpha, family, test, sided, n_b)
    if not test or level <= 0:
        return floor
    n = 2
    while floor.smallest_p(n) >= level and n < MAX_SEEDS:
        n += 1
    return replace(floor, n=n)


def family_key(claim: Claim) -> tuple:
    """The test a claim is, before any run: two claims on the same two arms and metric (one
    the reverse of the other, or a difference and an equivalence) are one test, as
    :func:`ablate.claims.checks.confirmatory_family` counts them on the runs."""
    import json

    plain = not (claim.external or claim.by or claim.parts or claim.expect in TREND)
    if plain and claim.metric not in FITTED and claim.expect != "diverges":
        arms = sorted(
            json.dumps({**claim.where, **arm}, sort_keys=True, default=str)
            for arm in (claim.a, claim.b)
        )
        return ("arms", claim.metric, *arms)
    return ("claim", claim.id)


def claims_family(claims: list[Claim]) -> int:
    """How many distinct tests the study's claims are: the size of each Holm family."""
    return max(len({family_key(c) for c in claims}), 1)


_COMPARISON = Claim(id="comparison", text="", expect="better")
"""An exploratory comparison decides like a ``better`` claim: a winner, or equivalence."""


def comparison_seeds_needed(c: Comparison, alpha: float = ALPHA) -> int | None:
    """Seeds per variant that would decide an exploratory comparison at 80% power, at its
    family's first-step level ``alpha / family``: :func:`claim_seeds_needed` as for a
    ``better`` claim (the t-test of no difference, or TOST when that needs fewer), so the
    comparisons and the claims count seeds alike. None when it cannot be estimated or is not
    reachable."""
    need = claim_seeds_needed(c, _COMPARISON, alpha)
    return need.n if need is not None else None
