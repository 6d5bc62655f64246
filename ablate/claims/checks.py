"""One claim (:mod:`ablate.claims.spec`) tested on a study's runs, and decided.

Each claim becomes one :class:`~ablate.claims.comparisons.Comparison` (arm a vs arm b, paired
by seed where both arms share the seeds; :func:`build_comparisons`). The claims are the
*confirmatory* family: Holm over the study's claims only, each distinct test counted once (a
claim written as the reverse of another is the same test; :func:`confirmatory_family`), so a
claim's p never depends on how large the grid is.

Outcomes (:func:`decide_claim`): *reproduces*, *contradicted*, or *inconclusive* with the seeds
the deciding test would need (:mod:`ablate.claims.power`); an ``equivalent`` claim reads
*equivalent* (TOST passes, reproduces), *different* (significant, 95% CI wholly outside
±margin: contradicted), *different but within margin* (significant, CI inside ±margin: the "no
difference" holds in practice) or inconclusive. ``diverges`` claims count diverged runs
instead. A study's claims decided together: :mod:`ablate.claims.outcomes`.

When the store has confirmation runs (``ablate run --confirm``: fresh seeds, ``confirm`` true),
a claim whose arms all have some is decided on those runs only; otherwise on the original ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ablate.claims.comparisons import FINISHED, Comparison, compare, compare_groups
from ablate.claims.fit import init_ffn_grad_slope, lr_fit
from ablate.claims.interaction import AS_PAIRED, cells, interaction_comparison
from ablate.claims.one_sample import Part, contradicted, intersection, part_of
from ablate.claims.power import SeedsNeeded, claim_seeds_needed, parts_seeds_needed
from ablate.claims.spec import FITTED, ONE_SAMPLE, TREND, TREND_AS_PAIRED, Claim
from ablate.claims.standing import confirm_mask, latest_attempt
from ablate.claims.stats import holm
from ablate.claims.trend import trend_comparison
from ablate.names import axis_column, format_value

SLOPE = "ffn_grad_slope@init"

REPRODUCES, CONTRADICTED, INCONCLUSIVE, UNTESTED, PENDING = (
    "reproduces",
    "contradicted",
    "inconclusive",
    "not testable",
    "pending",
)
WITHIN_MARGIN = "different but within margin"
"""An equivalence claim's outcome when the difference is significant but its whole 95% CI lies
inside ±margin: a real difference too small to matter, so the "no difference" holds in
practice."""


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
    """Decided on the confirmation runs only (``ablate run --confirm``)."""
    has_confirmation: bool = False
    """The study has confirmation runs at all (then an original-seed verdict says why)."""
    sd_all: float = math.nan
    """The SD of the claim's test over all the arms' seeds (exploratory and confirmation): what
    seeds-needed assumes (a few confirmation seeds give a poor SD)."""
    sd_all_n: int = 0
    diff_all: float = math.nan
    """The difference over the same seeds as ``sd_all``: seeds-needed assumes both from one
    set of seeds, never a few seeds' difference with many seeds' SD."""
    parts: list[Part] = field(default_factory=list)
    """``expect: above/below/all``: each one-sample part's test."""
    pool: pd.DataFrame | None = None
    """The runs the claim was decided on (for its registration standing)."""
    look: dict | None = None
    """The ``--until-decided`` look that decided the claim (or its last look): its seeds and
    nominal level, from ``until_decided.json``; None outside a sequential design."""
    pending: tuple[int, int] | None = None
    """(finished, planned) runs of its registered confirmation design while some are left:
    the claim is not decided yet (no interim look was registered)."""
    disagreement: str = ""
    """Where the exact sign-flip test decides otherwise than the t-test (small n, a skewed or
    bimodal arm): in words; "" when they agree or there is no sign-flip test."""
    history: object | None = None
    """The claim's attempts, margin history and git order proof
    (:class:`ablate.claims.history.ClaimHistory`), when the report computed them."""
    first_margin: ClaimCheck | None = None
    """The claim decided again at the margin it was first committed with, when its margin
    changed after an earlier attempt."""


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
        list(alphas.values()),
        [claim.value] * len(seeds),
        seeds_a=seeds,
        seeds_b=seeds,
        label_a="alpha",
        label_b=f"{claim.value:g}",
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
        check.comparison = compare(
            values,
            list(claim.external) * (len(values) if one else 1),
            seeds_a=done["seed"].tolist() if one else None,
            seeds_b=done["seed"].tolist() if one else None,
            label_a=la,
            label_b=published_label(claim),
            margin=m,
            diverged_a=int((ga["status"] == "diverged").sum()),
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


def build_comparisons(study, claims: list[Claim], margin: float) -> list[ClaimCheck]:
    """One :class:`ClaimCheck` per claim with its (unadjusted) comparison, on the claim's
    confirmation runs when it has them (:func:`claim_runs`). ``study``: its runs read back
    from the store (:class:`ablate.study.results.StudyData`: ``runs``, ``metrics``,
    ``varying_axes``)."""
    runs = study.runs[study.runs["status"].isin(FINISHED)]
    if any(c.metric == SLOPE for c in claims):
        runs = runs.assign(**{SLOPE: runs["run_id"].map(init_ffn_grad_slope(study.metrics))})
    has_confirmation = bool(confirm_mask(runs).any())
    out = []
    for claim in claims:
        m = claim.margin if claim.margin is not None else margin
        pool, fresh = claim_runs(runs, claim)
        check = ClaimCheck(claim, confirmation=fresh, has_confirmation=has_confirmation)
        check.pool = base = _match(pool, claim.where)
        if claim.metric == "lr_exponent":
            _exponent_check(check, base, study.varying_axes, m)
        elif claim.expect in (*ONE_SAMPLE, "all"):
            _one_sample_check(check, base, runs[~confirm_mask(runs)])
        elif claim.expect in TREND:
            check.comparison = trend_comparison(base, claim, metric_column(claim), m)
            if fresh:  # the same test on every seed of the cells, for its SD
                every = trend_comparison(_match(runs, claim.where), claim, metric_column(claim), m)
                check.sd_all, check.diff_all, check.sd_all_n = every.sd, every.diff, every.n_a
        elif claim.by:
            check.comparison = interaction_comparison(base, claim, metric_column(claim), m)
            if fresh:  # the same test on every seed of the cells, for its SD
                every = interaction_comparison(
                    _match(runs, claim.where), claim, metric_column(claim), m
                )
                check.sd_all, check.sd_all_n = every.sd, every.n_a
        else:
            explore = _match(runs[~confirm_mask(runs)], claim.where)
            _arm_check(check, base, m, explore)
            if fresh:  # the same test on every seed of the arms, for its SD
                every = ClaimCheck(claim)
                _arm_check(every, _match(runs, claim.where), m, explore)
                if every.comparison is not None:
                    check.sd_all = every.comparison.sd
                    check.diff_all = every.comparison.diff
                    check.sd_all_n = max(every.comparison.n_a, every.comparison.n_b)
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


def _equivalence(check: ClaimCheck, c: Comparison, sig: bool, equiv: bool) -> None:
    """equivalent / different / different but within margin / inconclusive."""
    m = f"±{c.margin:g}"
    inside = math.isfinite(c.ci_lo) and -c.margin < c.ci_lo and c.ci_hi < c.margin
    outside = math.isfinite(c.ci_lo) and (c.ci_lo > c.margin or c.ci_hi < -c.margin)
    if sig and inside:
        check.outcome = WITHIN_MARGIN
        check.why = f"a significant difference whose whole 95% CI lies inside {m}"
    elif equiv:
        check.outcome, check.why = REPRODUCES, f"equivalent: TOST within {m} passes"
    elif sig and outside:
        check.outcome = CONTRADICTED
        check.why = f"different: significant, 95% CI wholly outside {m}"
    elif sig:
        check.outcome = INCONCLUSIVE
        check.why = f"a significant difference, but its 95% CI straddles the margin {m}"
    else:
        check.outcome = INCONCLUSIVE


def decide_claim(check: ClaimCheck, alpha: float) -> None:
    """The claim's outcome at level ``alpha`` from its (family-corrected) comparison."""
    c, claim = check.comparison, check.claim
    if c is None or check.detail.startswith(NOT_BRACKETED):
        return
    if claim.expect in TREND:  # a trend decides as a paired claim on its per-seed slopes
        claim = replace(claim, expect=TREND_AS_PAIRED[claim.expect])
    elif claim.by:  # an interaction decides as a paired claim on its difference of differences
        claim = replace(claim, expect=AS_PAIRED[claim.expect])
    if claim.expect == "diverges":
        _diverges(check, c)
        return
    if check.parts:
        _decide_parts(check, c, alpha)
        return
    all_a = c.total_a > 0 and c.diverged_a == c.total_a
    all_b = c.total_b > 0 and c.diverged_b == c.total_b
    if all_a != all_b and claim.expect in ("better", "worse"):  # one arm diverged everywhere
        a_better = all_b
        check.outcome = REPRODUCES if a_better == (claim.expect == "better") else CONTRADICTED
        return
    if c.n_a < 2 or c.n_b < 2:
        check.detail = check.detail or "fewer than 2 finite seeds in an arm"
        return
    sig = math.isfinite(c.p_adj) and c.p_adj < alpha
    equiv = math.isfinite(c.p_tost_adj) and c.p_tost_adj < alpha
    # lower loss is better; for lr_exponent "better" means above value
    a_lower = c.diff < 0 if claim.metric != "lr_exponent" else c.diff > 0
    if claim.expect == "equivalent":
        _equivalence(check, c, sig, equiv)
    else:
        want = a_lower if claim.expect == "better" else not a_lower
        if sig and abs(c.diff) >= c.margin or sig and not equiv:
            check.outcome = REPRODUCES if want else CONTRADICTED
        elif equiv:
            check.outcome = CONTRADICTED
            check.why = f"equivalent within ±{c.margin:g} (TOST): no difference"
        else:
            check.outcome = INCONCLUSIVE
    check.disagreement = flip_disagreement(c, alpha, claim.expect == "equivalent")
    if check.outcome == INCONCLUSIVE:
        n_all = f" (difference and sd both over all {check.sd_all_n} seeds)"
        same = math.isfinite(check.sd_all) and math.isfinite(check.diff_all)
        sd, diff = (check.sd_all, check.diff_all) if same else (c.sd, c.diff)
        n_all = n_all if same else f" (both over the {max(c.n_a, c.n_b)} deciding seeds)"
        check.seeds_needed = claim_seeds_needed(replace(c, sd=sd, diff=diff), claim, alpha, n_all)


def flip_disagreement(c: Comparison, alpha: float, equivalence: bool) -> str:
    """Where the exact sign-flip test and the t-test disagree at ``alpha`` (both Holm), in
    words; "" when they agree or there is no sign-flip test (Welch)."""
    out = []
    if math.isfinite(c.p_flip_adj) and math.isfinite(c.p_adj):
        t_sig, f_sig = c.p_adj < alpha, c.p_flip_adj < alpha
        if t_sig != f_sig:
            out.append(
                f"the difference is {'significant' if t_sig else 'not significant'} by the "
                f"t-test (Holm p={c.p_adj:.2g}) but {'significant' if f_sig else 'not'} by the "
                f"exact sign-flip test (Holm p={c.p_flip_adj:.2g}"
                + (f"; {c.n_a} seeds cannot go below p={2 / 2**c.n_a:.2g})" if not f_sig else ")")
            )
    if equivalence and math.isfinite(c.p_flip_tost_adj) and math.isfinite(c.p_tost_adj):
        t_eq, f_eq = c.p_tost_adj < alpha, c.p_flip_tost_adj < alpha
        if t_eq != f_eq:
            out.append(
                f"equivalence within ±{c.margin:g} {'passes' if t_eq else 'fails'} by TOST "
                f"(Holm p={c.p_tost_adj:.2g}) but {'passes' if f_eq else 'fails'} by the "
                f"sign-flip TOST (Holm p={c.p_flip_tost_adj:.2g})"
            )
    return "; ".join(out)


def _decide_parts(check: ClaimCheck, c: Comparison, alpha: float) -> None:
    """A one-sample claim or an intersection: reproduces when its (Holm) p is below ``alpha``,
    contradicted when a part's opposite one-sided test is significant."""
    if any(p.n < 2 for p in check.parts):
        check.detail = check.detail or "fewer than 2 finite seeds in an arm"
        return
    level = alpha / max(c.family, 1)
    against = contradicted(check.parts, level)
    if math.isfinite(c.p_adj) and c.p_adj < alpha:
        check.outcome, check.why = REPRODUCES, "every part significant"
    elif against:
        check.outcome = CONTRADICTED
        check.why = "significantly the other way: " + ", ".join(p.label for p in against)
    else:
        check.outcome = INCONCLUSIVE
        check.seeds_needed = parts_seeds_needed(check.parts, level)


def _family_key(c: Comparison) -> tuple:
    """A comparison's identity regardless of arm order (a claim written as the reverse of
    another is the same two-sided test)."""
    if len(c.key) == 3 and c.key[0] != "claim":
        return (c.key[0], *sorted(c.key[1:]))
    return c.key


def confirmatory_family(checks: list[ClaimCheck]) -> None:
    """Holm over the claims' distinct tests (difference p and, separately, TOST p at each
    margin), written back into every claim's comparison."""
    tests: dict[tuple, Comparison] = {}
    for check in checks:
        c = check.comparison
        if c is None:
            continue
        if not c.key:
            check.comparison = c = replace(c, key=("claim", check.claim.id))
        tests.setdefault(_family_key(c), c)
    keys = list(tests)
    p_adj = dict(zip(keys, holm([tests[k].p for k in keys]), strict=True))
    tost_keys = list(dict.fromkeys((k, tests[k].margin) for k in keys))
    t_adj = dict(zip(tost_keys, holm([tests[k].p_tost for k, _ in tost_keys]), strict=True))
    # the exact sign-flip p, Holm over the same family (NaN where a test has none: not counted)
    f_adj = dict(zip(keys, holm([tests[k].p_flip for k in keys]), strict=True))
    ft_adj = dict(zip(tost_keys, holm([tests[k].p_flip_tost for k, _ in tost_keys]), strict=True))
    k = int(np.isfinite([tests[key].p for key in keys]).sum()) if keys else 0
    for check in checks:
        c = check.comparison
        if c is not None:
            key = _family_key(c)
            check.comparison = replace(
                c,
                p_adj=p_adj[key],
                p_tost_adj=t_adj[(key, tests[key].margin)],
                p_flip_adj=f_adj[key],
                p_flip_tost_adj=ft_adj[(key, tests[key].margin)],
                family=max(k, 1),
                correction="Holm",
            )


def hold(check: ClaimCheck, progress: tuple[int, int], attempt: pd.DataFrame) -> None:
    """A claim whose registered design has runs left: pending, without numbers (an interim
    look the design did not plan would spend alpha it does not have)."""
    k, n = progress
    check.pending, check.outcome, check.comparison = progress, PENDING, None
    check.confirmation, check.pool, check.seeds_needed = True, attempt, None
    check.detail = (
        f"{k} of {n} runs of its registered confirmation design finished; no verdict before "
        "every one has (the design registered no interim looks)"
    )
