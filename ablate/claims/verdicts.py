"""Plain-language verdicts on a :class:`~ablate.claims.comparisons.Comparison`: better, worse,
equivalent within the margin, inconclusive (with the seeds that would decide it), diverged or
too few seeds, from the p-values adjusted over the comparison's family (Holm for claims,
Benjamini–Hochberg for the exploratory axis comparisons); the number formats those sentences
use; and a decided claim in words (:func:`outcome_text`, :func:`numbers`, :func:`seeds_used`),
as the report, ``claims.csv`` and a registration's pilot word it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.claims.checks import PENDING, UNTESTED, ClaimCheck, settled
from ablate.claims.comparisons import STREAMS_DIFFER, Comparison
from ablate.claims.interaction import numbers_text
from ablate.claims.power import comparison_seeds_needed
from ablate.claims.spec import EQUIVALENCE, TREND
from ablate.claims.stats import ALPHA, EXACT_MAX_N, EXACT_MAX_SPLITS
from ablate.claims.trend import numbers_text as trend_text


@dataclass(frozen=True)
class Verdict:
    kind: str
    """``better`` / ``worse`` (a against b), ``equivalent`` (within ±margin), ``inconclusive``,
    ``diverged``, ``too_few`` (fewer than 2 finite seeds on a side)."""
    winner: str | None
    text: str
    seeds_needed: int | None = None
    """For an inconclusive comparison: seeds per variant for 80% power (else None)."""


def fmt_num(x: float) -> str:
    """Three significant digits, ``'nan'`` when not finite, and never ``'-0'``."""
    if not math.isfinite(x):
        return "nan"
    s = f"{x:.3g}"
    return "0" if s in ("-0", "0") else s


def fmt_p(p: float, name: str = "p") -> str:
    """``'p=0.012'``, ``'p<0.001'``, or ``'p n/a'`` when there was no test."""
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
    seeds: bool = True,
) -> Verdict:
    """better / worse / equivalent within ±margin / inconclusive, from the adjusted p.

    Rules, in order: a side that diverged in every seed loses (both: no winner); fewer than 2
    finite seeds on a side: no test; adjusted ``p < alpha`` (Holm or BH, as ``c.correction``
    says): the side with the better mean wins, quoted with the 95% t-interval of its advantage;
    adjusted TOST ``p < alpha``: equivalent within ±margin; otherwise inconclusive, with the
    seeds per variant that would decide it with 80% power at the corrected level
    (``alpha / family``, the first step of either correction), never fewer than one more than
    the seeds that did not decide it.
    Partial divergence is appended; ``where`` names what was held fixed; ``seeds=False``
    leaves the seeds-needed figure out (a claim words its own, for the test that decides it).
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
    test = f"{c.test}, {fmt_p(c.p)}, {c.correction} {fmt_p(c.p_adj)}"
    m = f"±{fmt_num(c.margin)} {unit}"
    if math.isfinite(c.p_adj) and c.p_adj < alpha:
        a_better = (c.diff < 0) if lower_is_better else (c.diff > 0)
        winner, loser = (a, b) if a_better else (b, a)
        flip = a_better == lower_is_better  # CI of the winner's advantage: positive
        lo, hi = (-c.ci_hi, -c.ci_lo) if flip else (c.ci_lo, c.ci_hi)
        small = f"; the difference is within {m}" if abs(c.diff) < c.margin else ""
        text = (
            f"{winner} beats {loser} by {fmt_num(abs(c.diff))} {unit} "
            f"(95% CI [{fmt_num(lo)}, {fmt_num(hi)}], {test}, {_seeds(c)}){tail}{small}{div_note}"
        )
        return Verdict("better" if a_better else "worse", winner, text)
    ci = f"95% CI [{fmt_num(c.ci_lo)}, {fmt_num(c.ci_hi)}]"
    if math.isfinite(c.p_tost_adj) and c.p_tost_adj < alpha:
        text = (
            f"{a} ≈ {b}{tail}: equivalent within {m}: difference {fmt_num(c.diff)} ({ci}, "
            f"TOST {c.correction} {fmt_p(c.p_tost_adj)}, {_seeds(c)}){div_note}"
        )
        return Verdict("equivalent", None, text)
    need = comparison_seeds_needed(c, alpha)
    more = f"; ≈{need} seeds per variant would decide it" if need else "; add seeds"
    text = (
        f"{a} vs {b}{tail}: inconclusive at {_seeds(c)}: difference {fmt_num(c.diff)} {unit} "
        f"({ci}, {test}; not within {m} by TOST, {c.correction} {fmt_p(c.p_tost_adj)})"
        f"{more if seeds else ''}{div_note}"
    )
    return Verdict("inconclusive", None, text, need)


# --- a claim's outcome in words ------------------------------------------------------------


def _where(check: ClaimCheck) -> str:
    w = check.claim.where
    return ("at " + ", ".join(f"{k.split('.')[-1]}={v}" for k, v in w.items())) if w else ""


def numbers(check: ClaimCheck, unit: str) -> str:
    """The numbers behind a claim's outcome, computed from the runs."""
    c, claim = check.comparison, check.claim
    if c is None:
        return check.detail or "no runs to test it"
    if check.parts:
        text = "; ".join(p.text() for p in check.parts)
        if len(check.parts) > 1:
            text += f"; {c.test} p={fmt_num(c.p)}"
        text += f"; {c.correction} {fmt_p(c.p_adj)}{flip_text(c)}"
        return f"{text} {_where(check)}".rstrip()
    if claim.expect in TREND:
        text = trend_text(c, unit, fmt_num, fmt_p) + flip_text(c, claim.expect == "flat")
        return f"{text} {_where(check)}".rstrip()
    if claim.by:
        text = numbers_text(c, unit, fmt_num, fmt_p) + flip_text(c, claim.expect == "equal")
        return f"{text} {_where(check)}".rstrip()
    if claim.expect == "diverges":
        tail = f" {_where(check)}" if claim.where else ""
        return f"{c.label_a}: diverged in {c.diverged_a}/{c.total_a} finished seeds{tail}"
    if claim.metric == "lr_exponent":
        if c.n_a < 2:
            return check.detail or "fewer than 2 seeds with an optimum at every batch size"
        v = claim.value
        text = (
            f"alpha = {fmt_num(c.mean_a)} (95% CI [{fmt_num(v + c.ci_lo)}, "
            f"{fmt_num(v + c.ci_hi)}] over {c.n_a} seeds; against {v:g}: {c.test}, "
            f"{fmt_p(c.p)}, {c.correction} {fmt_p(c.p_adj)}; "
            f"TOST ±{fmt_num(c.margin)}: {c.correction} {fmt_p(c.p_tost_adj, 'p')})"
        ) + flip_text(c)
        return f"{text}; {check.detail}" if check.detail else text
    if claim.metric.endswith("@init"):  # a slope of gradient norms over layers, not a loss
        unit = "(grad-norm slope per layer)"
    text = verdict(c, unit=unit, where=_where(check), seeds=False).text
    text = f"{text} [{c.pairing}]" if c.pairing == STREAMS_DIFFER else text
    return text + flip_text(c, claim.expect == "equivalent")


def flip_text(c: Comparison, equivalence: bool = False) -> str:
    """``; exact sign-flip p=0.062, Holm p=0.25``: the claim's exact test beside its t-test
    (the sign-flip test for paired and one-sample designs, the permutation test for
    unpaired arms; "" where it has none)."""
    if not math.isfinite(c.p_flip):
        return ""
    text = f"; {exact_label(c)} {fmt_p(c.p_flip)}, {c.correction} {fmt_p(c.p_flip_adj)}"
    if equivalence and math.isfinite(c.p_flip_tost):
        text += f"; {c.exact} TOST {c.correction} {fmt_p(c.p_flip_tost_adj)}"
    return text


def exact_label(c: Comparison) -> str:
    """``exact sign-flip``, ``exact permutation``, or its Monte Carlo version at many seeds."""
    if c.exact == "permutation":
        exact = math.comb(c.n_a + c.n_b, c.n_a) <= EXACT_MAX_SPLITS
    else:
        exact = c.n_a <= EXACT_MAX_N
    return f"exact {c.exact}" if exact else f"{c.exact} (Monte Carlo, fixed seed)"


def seeds_used(check: ClaimCheck) -> str:
    """Which seeds decided the claim: its confirmation runs only, or the original seeds."""
    c = check.comparison
    if check.pending is not None:
        return "not decided yet: its registered confirmation runs are unfinished"
    if check.look is not None:  # a sequential design: the look that decided it
        lk = check.look
        kind = "confirmation " if check.confirmation else ""
        return (
            f"decided at look {lk['look']} of the sequential design on its "
            f"{len(lk.get('seed_set', []))} {kind}seeds (nominal level {lk['nominal_alpha']:.3g})"
        )
    if check.confirmation:
        one_arm = check.claim.external or check.parts
        n = f"{c.n_a}" if c is not None and (c.n_a == c.n_b or one_arm) else ""
        n = n or (f"{c.n_a} vs {c.n_b}" if c is not None else "its")
        attempt = f"; {check.history.attempt_text()}" if check.history is not None else ""
        return (
            f"decided on {n} confirmation seed(s) only (fresh seeds, `ablate run confirm`){attempt}"
        )
    if check.has_confirmation:
        return "decided on the original seeds (its arms have no confirmation runs)"
    return "decided on the original seeds (no confirmation runs)"


def outcome_text(check: ClaimCheck) -> str:
    """``**outcome** (why)``, and for an inconclusive claim the seeds that would decide it."""
    if check.pending is not None:
        return f"**{PENDING}, {check.pending[0]} of {check.pending[1]} runs**"
    text = f"**{check.outcome}**"
    if check.why:
        text += f" ({check.why})"

    need = check.seeds_needed
    if not settled(check.outcome) and check.outcome != UNTESTED:
        if need is None:
            text += " (more seeds needed)"
        elif need.n is None:
            text += f" (seeds to decide it: {need.text()})"
        else:
            text += f" (to decide it by both tests: {need.text()}: an assumption, not measured)"
    return text


def paper_said(check: ClaimCheck, unit: str = "nats") -> str:
    """What the paper reports for the claim (``claim.paper``), its numbers, setting and source,
    with no run's number; "" when the claim has no ``paper:``."""
    paper = check.claim.paper
    if paper is None:
        return ""
    numbers = f"{paper.a:g} vs {paper.b:g} {paper.unit}" if paper.a is not None else ""
    optimizer = f"with {paper.optimizer}" if paper.optimizer else ""
    where = "; ".join(x for x in (numbers, optimizer, paper.setting, paper.source) if x)
    eff = paper.effect
    if eff is None:
        return f"the paper: {where}" if where else ""
    better = check.claim.a if eff < 0 else check.claim.b
    who = ", ".join(str(v) for v in better.values() if not isinstance(v, list)) or "a"
    size = f"{fmt_num(abs(eff))}-{unit.rstrip('s')} advantage of {who}" if eff else "no difference"
    return f"the paper's {size} ({where})" if where else f"the paper's {size}"


def paper_text(check: ClaimCheck, unit: str = "nats") -> str:
    """The runs' 95% interval against the effect the paper reports (``claim.paper``): inside
    it, or excluded at this scale (smaller, larger or the other way here); "" when the paper
    gives no number or the claim has no interval of a difference."""
    paper, c = check.claim.paper, check.comparison
    if paper is None or paper.effect is None or c is None or check.parts or check.claim.by:
        return ""
    if check.claim.metric == "lr_exponent" or not math.isfinite(c.ci_lo):
        return ""
    eff = paper.effect
    said = paper_said(check, unit)
    ci = f"95% CI [{fmt_num(c.ci_lo)}, {fmt_num(c.ci_hi)}]"
    if c.ci_lo <= eff <= c.ci_hi:
        return f"{said} lies inside this {ci}"
    sign = 1.0 if eff > 0 else -1.0
    lo, hi = sorted((c.ci_lo * sign, c.ci_hi * sign))  # along the paper's direction
    if eff == 0:
        how = "a difference here"
    elif lo > abs(eff):
        how = "larger here"
    elif hi < 0:
        how = "the other way here"
    else:
        how = "smaller here" if lo > 0 else "smaller here, possibly none"
    return f"{said} is excluded at this scale ({ci}: {how})"


def holm_ps(check: ClaimCheck) -> str:
    """The Holm p of a claim's t-test and exact test in a few words; an equivalence's
    difference test and TOST both (either may decide it)."""
    c = check.comparison
    equiv = check.claim.expect in EQUIVALENCE

    def two(p: float, tost: float) -> str:
        return f"Holm {fmt_p(p)}" + (f" (TOST {fmt_p(tost)})" if equiv else "")

    text = f"t-test {two(c.p_adj, c.p_tost_adj)}"
    if c.exact:
        text += f", exact {c.exact} {two(c.p_flip_adj, c.p_flip_tost_adj)}"
    return text
