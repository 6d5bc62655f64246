"""One claim (:mod:`ablate.claims.spec`) tested on a study's runs, and decided.

Each claim becomes one :class:`~ablate.claims.comparisons.Comparison` (arm a vs arm b, paired
by seed where both arms share the seeds; :func:`build_comparisons`). The claims are the
*confirmatory* family: Holm over the study's claims only, each distinct test counted once (a
claim written as the reverse of another is the same test; :func:`confirmatory_family`), so a
claim's p never depends on how large the grid is.

Outcomes (:func:`decide_claim`): *reproduces*, *contradicted*, or *inconclusive* with the seeds
that would decide it (:mod:`ablate.claims.power`); an ``equivalent`` claim reads *equivalent*
(TOST passes, reproduces), *different* (significant, 95% CI wholly outside ±margin:
contradicted), *different but within margin* (significant, CI inside ±margin: the "no
difference" holds in practice) or inconclusive. ``diverges`` claims count diverged runs
instead. A study's claims decided together: :mod:`ablate.claims.outcomes`.

**Two tests decide.** Each claim is decided by its t-test (paired, Welch, one-sample, TOST) and
again by an exact test that needs no normality (the sign-flip test of the per-seed differences
for paired and one-sample designs, the two-sample permutation test for unpaired arms), each
Holm-corrected over the claims. The outcome is plain only when both give it; otherwise it says
which test alone supports it ("reproduces by t-test only"), and the seeds needed include the
seeds the exact test needs to reach the level at all. Every claim is in every family (one per
test kind: t, TOST, exact, exact TOST); a claim without a test of that kind counts with p = 1,
so each family has the study's k claims.

When the store has confirmation runs (``ablate run confirm``: fresh seeds, ``confirm`` true),
a claim whose arms all have some is decided on those runs only; otherwise on the original ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pandas as pd

from ablate.claims.comparisons import FINISHED, Arm, Comparison, compare, compare_groups
from ablate.claims.fit import init_ffn_grad_slope, lr_fit
from ablate.claims.interaction import AS_PAIRED, cells, interaction_comparison
from ablate.claims.labels import (
    BY_EXACT_ONLY,
    BY_T_ONLY,
    CONTRADICTED,
    INCONCLUSIVE,
    NOT_A_TREND,
    NOT_HERE,
    PENDING,
    REPRODUCES,
    THRESHOLD,
    UNTESTED,
    WITHIN_MARGIN,
)
from ablate.claims.one_sample import Part, contradicted, intersection, part_of
from ablate.claims.power import SeedsNeeded, seeds_to_decide
from ablate.claims.spec import FITTED, ONE_SAMPLE, TREND, TREND_AS_PAIRED, Claim
from ablate.claims.standing import confirm_mask, latest_attempt
from ablate.claims.stats import (
    exact_floor,
    holm,
    permutation_p,
    permutation_tost,
)
from ablate.claims.trend import steps_outcome, trend_comparison
from ablate.names import axis_column, format_value

SLOPE = "ffn_grad_slope@init"
RUN_METRICS: dict[str, Callable[[pd.DataFrame], pd.Series]] = {SLOPE: init_ffn_grad_slope}
"""Per-run claim metrics computed from the runs' logged metrics (long form) rather than read
from their summaries: metric -> run id -> value. The report writes each into results.csv, so a
claim on it recomputes from the csv."""

NOT_BRACKETED = "not testable: the best LR is at the edge of the sweep (not bracketed)"


@dataclass
class ClaimCheck:
    claim: Claim
    comparison: Comparison | None = None
    outcome: str = UNTESTED
    detail: str = ""
    seeds_needed: SeedsNeeded | None = None
    why: str = ""
    """How the outcome follows from the tests (e.g. "TOST passes")."""
    confirmation: bool = False
    """Decided on the confirmation runs only (``ablate run confirm``)."""
    has_confirmation: bool = False
    """The study has confirmation runs at all (then an original-seed verdict says why)."""
    pooled: ClaimCheck | None = None
    """The same claim tested on every finished seed of its arms (exploratory and confirmation)
    when it is decided on its confirmation seeds: exploratory, Holm over the claims' pooled
    tests. Seeds-needed assumes its difference and SD (a few confirmation seeds give a poor
    SD), and the report's answer says what it shows where the confirmation is inconclusive."""
    parts: list[Part] = field(default_factory=list)
    """``expect: above/below/all``: each one-sample part's test."""
    pool: pd.DataFrame | None = None
    """The runs the claim was decided on (for its registration standing)."""
    look: dict | None = None
    """The ``run until-decided`` look that decided the claim (or its last look): its seeds and
    nominal level, from ``until_decided.json``; None outside a sequential design."""
    pending: tuple[int, int] | None = None
    """(finished, planned) runs of its registered confirmation design while some are left:
    the claim is not decided yet (no interim look was registered)."""
    t_outcome: str = ""
    """The outcome by the t-test alone (TOST for equivalence)."""
    exact_outcome: str = ""
    """The outcome by the exact test alone ("" when the claim has none)."""
    history: object | None = None
    """The claim's attempts, what each spends of its α budget, and its committed versions
    (:class:`ablate.claims.history.ClaimHistory`), when the report computed them."""


def claim_runs(runs: pd.DataFrame, claim: Claim) -> tuple[pd.DataFrame, bool]:
    """(the runs that decide ``claim``, whether they are its confirmation runs): the latest
    attempt's confirmation runs when every arm of the claim has one, else the original runs."""
    conf = confirm_mask(runs)
    if not conf.any():
        return runs, False
    fresh = runs[latest_attempt(runs)]
    arms = [claim.where] if claim.metric in FITTED else [{**claim.where, **claim.a}]
    if claim.b:
        arms.append({**claim.where, **claim.b})
    if claim.by:  # an interaction: its four cells
        arms = cells(claim)
    if all(len(_match(fresh, arm)) for arm in arms):
        return fresh, True
    return runs[~conf], False


def metric_column(claim: Claim) -> str:
    if claim.length is not None:
        return f"val_loss_at_{claim.length:g}x"
    return claim.metric


def _match(runs: pd.DataFrame, sel: dict) -> pd.DataFrame:
    """Runs whose axes equal every scalar of ``sel`` (lists are resolved by :func:`_best`)."""
    mask = pd.Series(True, index=runs.index)
    for key, val in sel.items():
        if isinstance(val, list):
            continue
        col = axis_column(key)
        mask &= runs[col] == val if col in runs else False
    return runs[mask]


def _best(
    runs: pd.DataFrame, sel: dict, col: str, explore: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, str]:
    """The arm of ``sel``; a list value picks the value with the lowest mean ``col`` over the
    exploratory runs ``explore`` (never the confirmation runs that then decide the claim)."""
    g = _match(runs, sel)
    pick_from = _match(explore if explore is not None else runs, sel)
    label = ", ".join(
        f"{k.split('.')[-1]}={format_value(v)}" for k, v in sel.items() if not isinstance(v, list)
    )
    for key, val in sel.items():
        if not isinstance(val, list):
            continue
        c = axis_column(key)
        done = pick_from[pick_from["status"] == "completed"]
        means = {v: pd.to_numeric(done.loc[done[c] == v, col], errors="coerce").mean() for v in val}
        finite = {v: m for v, m in means.items() if math.isfinite(m)}
        pick = min(finite, key=finite.get) if finite else val[0]
        g = g[g[c] == pick]
        pick_from = pick_from[pick_from[c] == pick]
        opts = "/".join(format_value(v) for v in val)
        part = f"{key.split('.')[-1]}={format_value(pick)} (best of {opts})"
        label = f"{label}, {part}" if label else part
    return g, label or "ablate (all runs)"


def _exponent_check(check: ClaimCheck, base: pd.DataFrame, axes: list[str], m: float) -> None:
    """An ``lr_exponent`` claim: the per-seed fitted alpha against ``value`` (one-sample)."""
    claim = check.claim
    if not {"data.batch_size", "optim.lr"} <= set(axes):
        check.detail = "these runs do not sweep data.batch_size × optim.lr"
        return
    fit = lr_fit(base)
    alphas = {s: a for s, a in fit.alphas.items() if math.isfinite(a)}
    seeds = list(alphas)
    check.comparison = compare(
        Arm(list(alphas.values()), "alpha", seeds),
        Arm([claim.value] * len(seeds), f"{claim.value:g}", seeds),
        margin=m,
    )
    # one fitted exponent per seed against a constant: a one-sample t-test, not a paired one
    check.comparison = replace(check.comparison, test="one-sample t")
    not_bracketed = fit.per_batch.loc[~fit.per_batch["interior"], "batch"].tolist()
    if not_bracketed:  # no claim on an optimum the sweep does not contain
        check.detail = f"{NOT_BRACKETED} at batch " + ", ".join(f"{b:g}" for b in not_bracketed)


def _arm_check(
    check: ClaimCheck, base: pd.DataFrame, m: float, explore: pd.DataFrame | None = None
) -> None:
    """A claim on a per-run metric: arm a against arm b, or against published values."""
    claim = check.claim
    col = metric_column(claim)
    if col not in base or base[col].isna().all():
        check.detail = f"no run records {claim.metric}"
        return
    ga, la = _best(base, claim.a, col, explore)
    if claim.expect == "diverges":
        check.comparison = compare_groups(ga, ga.iloc[0:0], col, label_a=la, label_b="-", margin=m)
    elif claim.external:
        done = ga[ga["status"] == "completed"]
        values = pd.to_numeric(done[col], errors="coerce").tolist()
        one = len(claim.external) == 1  # one published number: a fixed value, one-sample
        seeds = done["seed"].tolist() if one else None
        diverged = int((ga["status"] == "diverged").sum())
        check.comparison = compare(
            Arm(values, la, seeds, diverged),
            Arm(list(claim.external) * (len(values) if one else 1), published_label(claim), seeds),
            margin=m,
        )
        if one:
            check.comparison = replace(check.comparison, test="one-sample t")
    else:
        gb, lb = _best(base, claim.b, col, explore)
        check.comparison = compare_groups(ga, gb, col, label_a=la, label_b=lb, margin=m)


def _one_sample_check(check: ClaimCheck, base: pd.DataFrame, explore: pd.DataFrame) -> None:
    """A one-arm claim against a value, or an intersection of such parts
    (:mod:`ablate.claims.one_sample`)."""
    claim = check.claim
    col = metric_column(claim)
    if col not in base or base[col].isna().all():
        check.detail = f"no run records {claim.metric}"
        return
    for part in claim.parts or (claim,):
        g, label = _best(base, part.a, col, _match(explore, claim.where))
        margin = part.margin if part.margin is not None else 0.0
        check.parts.append(part_of(g, part, col, label, margin))
    check.comparison = intersection(claim, check.parts, claim.margin or 0.0)


def published_label(claim: Claim) -> str:
    """A published arm's name with where its numbers come from: the artifact file and key, or
    a note that they were typed into the study."""
    where = claim.external_source or "typed into the study YAML, no artifact"
    return f"{claim.external_label} ({where})"


def _test_claim(check: ClaimCheck, runs: pd.DataFrame, explore: pd.DataFrame, study, m) -> None:
    """Fill ``check.comparison`` (and its parts) with the claim's tests on ``runs`` (already
    the claim's pool: its confirmation runs or the original ones)."""
    claim = check.claim
    check.pool = base = _match(runs, claim.where)
    if claim.metric == "lr_exponent":
        _exponent_check(check, base, study.varying_axes, m)
    elif claim.expect in (*ONE_SAMPLE, "all"):
        _one_sample_check(check, base, explore)
    elif claim.expect in TREND:
        check.comparison = trend_comparison(base, claim, metric_column(claim), m)
    elif claim.by:
        check.comparison = interaction_comparison(base, claim, metric_column(claim), m)
    else:
        _arm_check(check, base, m, _match(explore, claim.where))
    if check.comparison is not None and not math.isfinite(check.comparison.p_flip):
        check.comparison = with_permutation(check.comparison)


def with_permutation(c: Comparison) -> Comparison:
    """An unpaired comparison (Welch: other seeds, or published values) with its exact test:
    the two-sample permutation test, and for equivalence its two one-sided versions."""
    if c.paired or c.test != "Welch t" or c.n_a < 2 or c.n_b < 2:
        return c
    p, p_tost = permutation_p(c.a, c.b), permutation_tost(c.a, c.b, c.margin)
    return replace(
        c, p_flip=p, p_flip_tost=p_tost, p_flip_adj=p, p_flip_tost_adj=p_tost, exact="permutation"
    )


def build_comparisons(study, claims: list[Claim], margin: float) -> list[ClaimCheck]:
    """One :class:`ClaimCheck` per claim with its (unadjusted) comparison, on the claim's
    confirmation runs when it has them (:func:`claim_runs`), and then the same claim on every
    finished seed (``pooled``). ``study``: its runs read back from the store
    (:class:`ablate.results.StudyData`: ``runs``, ``metrics``, ``varying_axes``)."""
    runs = study.runs[study.runs["status"].isin(FINISHED)]
    for metric in {c.metric for c in claims} & RUN_METRICS.keys():
        values = runs["run_id"].map(RUN_METRICS[metric](study.metrics))  # from the logged
        if metric in runs:  # metrics, else as recorded
            values = values.fillna(pd.to_numeric(runs[metric], errors="coerce"))
        runs = runs.assign(**{metric: values})
    has_confirmation = bool(confirm_mask(runs).any())
    explore = runs[~confirm_mask(runs)]
    out = []
    for claim in claims:
        m = claim.margin if claim.margin is not None else margin
        pool, fresh = claim_runs(runs, claim)
        check = ClaimCheck(claim, confirmation=fresh, has_confirmation=has_confirmation)
        _test_claim(check, pool, explore, study, m)
        if fresh:  # every seed of its arms: exploratory, and what seeds-needed assumes
            check.pooled = ClaimCheck(claim, has_confirmation=has_confirmation)
            _test_claim(check.pooled, runs, explore, study, m)
        out.append(check)
    return out


def _diverges(check: ClaimCheck, c: Comparison) -> None:
    n = c.total_a
    if n == 0:
        check.detail = check.detail or "no finished runs"
        return
    check.outcome = (
        REPRODUCES
        if c.diverged_a == n
        else CONTRADICTED
        if c.diverged_a == 0 and n >= 2
        else INCONCLUSIVE
    )


def _equivalence(c: Comparison, sig: bool, equiv: bool) -> tuple[str, str]:
    """equivalent / different / different but within margin / inconclusive, and why."""
    m = f"±{c.margin:g}"
    inside = math.isfinite(c.ci_lo) and -c.margin < c.ci_lo and c.ci_hi < c.margin
    outside = math.isfinite(c.ci_lo) and (c.ci_lo > c.margin or c.ci_hi < -c.margin)
    if sig and inside:
        return WITHIN_MARGIN, f"a significant difference whose whole 95% CI lies inside {m}"
    if equiv:
        return REPRODUCES, f"equivalent: TOST within {m} passes"
    if sig and outside:
        return CONTRADICTED, f"different: significant, 95% CI wholly outside {m}"
    if sig:
        return INCONCLUSIVE, f"a significant difference, but its 95% CI straddles the margin {m}"
    return INCONCLUSIVE, ""


def _by_one_test(claim: Claim, c: Comparison, p: float, p_tost: float, alpha: float):
    """(outcome, why) of a two-arm, fitted or interaction claim by one kind of test: its
    (Holm) difference p and TOST p."""
    sig = math.isfinite(p) and p < alpha
    equiv = math.isfinite(p_tost) and p_tost < alpha
    if claim.expect == "equivalent":
        return _equivalence(c, sig, equiv)
    # lower loss is better; for lr_exponent "better" means above value
    a_lower = c.diff < 0 if claim.metric != "lr_exponent" else c.diff > 0
    want = a_lower if claim.expect == "better" else not a_lower
    if sig and abs(c.diff) >= c.margin or sig and not equiv:
        return (REPRODUCES if want else CONTRADICTED), ""
    if equiv:
        return CONTRADICTED, f"equivalent within ±{c.margin:g} (TOST): no difference"
    return INCONCLUSIVE, ""


def as_paired(claim: Claim) -> Claim:
    """The paired claim ``claim`` decides as: a trend on its per-seed slopes (grows as worse,
    shrinks as better, flat as equivalent), an interaction on its per-seed difference of
    differences; any other claim as itself."""
    if claim.expect in TREND:
        return replace(claim, expect=TREND_AS_PAIRED[claim.expect])
    if claim.by:
        return replace(claim, expect=AS_PAIRED[claim.expect])
    return claim


def decide_claim(check: ClaimCheck, alpha: float) -> None:
    """The claim's outcome at level ``alpha`` from its (family-corrected) comparison, by the
    t-test and by the exact test (module doc), and the seeds that would decide it."""
    c, claim = check.comparison, check.claim
    if c is None or check.detail.startswith(NOT_BRACKETED):
        return
    claim = as_paired(claim)
    if claim.expect == "diverges":
        _diverges(check, c)
        return
    if check.parts:
        _decide_parts(check, c, alpha)
    else:
        all_a = c.total_a > 0 and c.diverged_a == c.total_a
        all_b = c.total_b > 0 and c.diverged_b == c.total_b
        if all_a != all_b and claim.expect in ("better", "worse"):  # one arm diverged everywhere
            a_better = all_b
            check.outcome = REPRODUCES if a_better == (claim.expect == "better") else CONTRADICTED
            return
        if c.n_a < 2 or c.n_b < 2:
            check.detail = check.detail or "fewer than 2 finite seeds in an arm"
            return
        t = _by_one_test(claim, c, c.p_adj, c.p_tost_adj, alpha)
        exact = None
        if math.isfinite(c.p_flip):
            exact = _by_one_test(claim, c, c.p_flip_adj, c.p_flip_tost_adj, alpha)
        if check.claim.expect in ("grows", "shrinks"):  # the slope, and then every step
            t = steps_outcome(check.claim.expect, c, t, alpha, exact=False)
            if exact is not None:
                exact = steps_outcome(check.claim.expect, c, exact, alpha, exact=True)
        _combine(check, t, exact, alpha)
    paper = check.claim.paper
    if paper is not None and paper.other_optimizer and check.outcome.startswith(CONTRADICTED):
        check.outcome = check.outcome.replace(CONTRADICTED, NOT_HERE, 1)
        setting = f" ({paper.setting})" if paper.setting else ""
        said = f"the paper states it for {paper.optimizer}{setting}; these runs train with AdamW"
        check.why = f"{check.why}; {said}" if check.why else said
    if not settled(check.outcome):
        check.seeds_needed = claim_need(check, alpha)


def _combine(check: ClaimCheck, t: tuple[str, str], exact: tuple[str, str] | None, alpha) -> None:
    """The outcome both tests support, else the one test's outcome, qualified (module doc)."""
    check.t_outcome = t[0]
    check.exact_outcome = exact[0] if exact is not None else ""
    if exact is None or exact[0] == t[0]:
        check.outcome, check.why = t
        return
    short, c = exact_shortfall(check.comparison, alpha), check.comparison
    if check.claim.expect in ("grows", "shrinks") and exact[1]:  # a step did not reach α
        short = f"by the exact sign-flip test, {exact[1]}"
    both_tost = c.p_tost_adj < alpha and c.p_flip_tost_adj < alpha
    if {t[0], exact[0]} == {WITHIN_MARGIN, REPRODUCES} and both_tost:
        one = "t-test" if t[0] == WITHIN_MARGIN else "exact test"
        check.outcome = REPRODUCES
        check.why = (
            f"equivalent within ±{c.margin:g} by both tests (TOST); the {one} alone also finds "
            "a difference inside the margin"
        )
    elif exact[0] == INCONCLUSIVE:
        check.outcome = f"{t[0]} {BY_T_ONLY}"
        check.why = "; ".join(x for x in (t[1], short) if x)
    elif t[0] == INCONCLUSIVE:
        check.outcome = f"{exact[0]} {BY_EXACT_ONLY}"
        check.why = f"the exact test gives {exact[0]}, the t-test does not reach α={alpha:g}"
    else:
        check.outcome = INCONCLUSIVE
        check.why = f"the t-test gives {t[0]}, the exact test {exact[0]}"


def exact_shortfall(c: Comparison | None, alpha: float) -> str:
    """Why the exact test does not decide: its Holm p, and its floor at these seeds when the
    floor itself is above the level."""
    if c is None or not math.isfinite(c.p_flip):
        return ""
    name = EXACT_NAMES.get(c.exact, c.exact)
    ps = [f"Holm p={c.p_flip_adj:.2g}"]
    if math.isfinite(c.p_flip_tost_adj) and c.p_flip_tost_adj < 1:
        ps.append(f"its TOST Holm p={c.p_flip_tost_adj:.2g}")
    text = f"the exact {name} test does not reach α={alpha:g} ({', '.join(ps)}"
    floor = (
        exact_floor(c.n_a, 2, c.n_b if c.exact == "permutation" else None) if c.n_a >= 1 else 1.0
    )
    if floor * c.family >= alpha:
        seeds = f"{c.n_a} seeds" if c.exact != "permutation" else f"{c.n_a} vs {c.n_b} values"
        text += f"; {seeds} cannot go below p={floor:.2g}"
    return text + ")"


EXACT_NAMES = {"sign-flip": "sign-flip", "permutation": "permutation"}


def claim_need(check: ClaimCheck, alpha: float) -> SeedsNeeded | None:
    """The seeds that would decide the claim by both tests (:func:`ablate.claims.power.
    seeds_to_decide`), assuming the difference and SD over every seed of its arms (its
    pooled test where it has one, else its own): the one seeds-needed computation, for the
    report, a registration's pilot and ``ablate register``'s warnings alike."""
    c = check.comparison
    if c is None:
        return None
    pooled = check.pooled if check.pooled is not None and check.pooled.comparison else None
    ref = pooled or check
    n = max(p.n for p in ref.parts) if ref.parts else max(ref.comparison.n_a, ref.comparison.n_b)
    which = "over all" if pooled is not None else "over the"
    sd_from = f" (difference and sd both {which} {n} seeds of its arms)"
    return seeds_to_decide(
        replace(c, sd=ref.comparison.sd, diff=ref.comparison.diff),
        as_paired(check.claim),
        alpha,
        parts=ref.parts,
        sd_from=sd_from,
        current=max(p.n for p in check.parts) if check.parts else None,
    )


def decide_pooled(checks: list[ClaimCheck], alpha: float) -> None:
    """Decide each claim's ``pooled`` test (every seed of its arms; exploratory), Holm over the
    claims' pooled tests (a claim decided on all its seeds anyway stands for itself)."""
    family = [ch.pooled if ch.pooled is not None else replace(ch) for ch in checks]
    confirmatory_family(family)
    for ch in checks:
        if ch.pooled is not None:
            decide_claim(ch.pooled, alpha)


def _decide_parts(check: ClaimCheck, c: Comparison, alpha: float) -> None:
    """A one-sample claim or an intersection: reproduces when its (Holm) p is below ``alpha``,
    contradicted when a part's opposite one-sided test is significant; by the t-tests and by
    the exact one-sided sign-flip tests."""
    if any(p.n < 2 for p in check.parts):
        check.detail = check.detail or "fewer than 2 finite seeds in an arm"
        return
    level = alpha / max(c.family, 1)

    def by(p: float, exact: bool) -> tuple[str, str]:
        against = contradicted(check.parts, level, exact)
        if math.isfinite(p) and p < alpha:
            return REPRODUCES, "every part significant"
        if against:
            return CONTRADICTED, "significantly the other way: " + ", ".join(
                x.label for x in against
            )
        return INCONCLUSIVE, ""

    exact = by(c.p_flip_adj, True) if math.isfinite(c.p_flip) else None
    _combine(check, by(c.p_adj, False), exact, alpha)


def _family_key(c: Comparison) -> tuple:
    """A comparison's identity regardless of arm order (a claim written as the reverse of
    another is the same two-sided test)."""
    if len(c.key) == 3 and c.key[0] != "claim":
        return (c.key[0], *sorted(c.key[1:]))
    return c.key


def confirmatory_family(checks: list[ClaimCheck]) -> None:
    """Holm over the claims' distinct tests, one family per test kind (difference p, TOST p at
    each margin, exact p, exact TOST p), written back into every claim's comparison. Every
    claim is in every family: a claim without a test of that kind (or without runs to test)
    counts with p = 1, so each family has the study's k claims."""
    tests: dict[tuple, Comparison] = {}
    untested = 0
    for check in checks:
        c = check.comparison
        if c is None:
            untested += 1
            continue
        if not c.key:
            check.comparison = c = replace(c, key=("claim", check.claim.id))
        tests.setdefault(_family_key(c), c)
    keys = list(tests)
    tost_keys = list(dict.fromkeys((k, tests[k].margin) for k in keys))
    k = len(keys) + untested

    def family(ps: list[float]) -> list[float]:
        ps = [p if math.isfinite(p) else 1.0 for p in ps]
        return holm(ps + [1.0] * (k - len(ps)))[: len(ps)]

    p_adj = dict(zip(keys, family([tests[key].p for key in keys]), strict=True))
    f_adj = dict(zip(keys, family([tests[key].p_flip for key in keys]), strict=True))
    t_adj = dict(zip(tost_keys, family([tests[x].p_tost for x, _ in tost_keys]), strict=True))
    ft_adj = dict(zip(tost_keys, family([tests[x].p_flip_tost for x, _ in tost_keys]), strict=True))
    for check in checks:
        c = check.comparison
        if c is not None:
            key = _family_key(c)

            def nan(x: float) -> bool:
                return not math.isfinite(x)

            check.comparison = replace(
                c,
                p_adj=math.nan if nan(c.p) else p_adj[key],
                p_tost_adj=math.nan if nan(c.p_tost) else t_adj[(key, tests[key].margin)],
                p_flip_adj=math.nan if nan(c.p_flip) else f_adj[key],
                p_flip_tost_adj=math.nan
                if nan(c.p_flip_tost)
                else ft_adj[(key, tests[key].margin)],
                family=max(k, 1),
                correction="Holm",
            )


def settled(outcome: str) -> bool:
    """Whether both tests decided the claim (a plain outcome, not pending or not testable)."""
    return outcome in (REPRODUCES, CONTRADICTED, WITHIN_MARGIN, NOT_HERE, THRESHOLD, NOT_A_TREND)


def hold(check: ClaimCheck, progress: tuple[int, int], attempt: pd.DataFrame) -> None:
    """A claim whose registered design has runs left: pending, without numbers (an interim
    look the design did not plan would spend alpha it does not have)."""
    k, n = progress
    check.pending, check.outcome, check.comparison = progress, PENDING, None
    check.pooled = None  # no look at the seeds of a design under way, not even pooled
    check.confirmation, check.pool, check.seeds_needed = True, attempt, None
    check.detail = (
        f"{k} of {n} runs of its registered confirmation design finished; no verdict before "
        "every one has (the design registered no interim looks)"
    )
