"""A study's claims decided together, for each place that decides them: the report
(:func:`analyse`: the claims as registered, replaying sequential looks, pending while a
registered design is unfinished), one look of ``ablate run until-decided``
(:func:`claim_outcomes`) and the pilot a registration records (:func:`pilot`).

``study`` is always a study's runs read back from the store
(:class:`ablate.results.StudyData`: its runs, metrics, claims and margin).
"""

from __future__ import annotations

from dataclasses import replace

from ablate.claims.attempts import earlier_outcomes
from ablate.claims.budget import as_it_stood, claim_shares, deciding_level
from ablate.claims.checks import (
    ClaimCheck,
    build_comparisons,
    claim_need,
    confirmatory_family,
    decide_claim,
    decide_pooled,
    hold,
    settled,
)
from ablate.claims.comparisons import Comparison, adjust, axis_comparisons
from ablate.claims.history import claim_history
from ablate.claims.looks import sequential_checks, study_looks
from ablate.claims.power import SeedsNeeded
from ablate.claims.standing import (
    confirm_mask,
    design_progress,
    latest_attempt,
    registration_versions,
)
from ablate.claims.stats import ALPHA
from ablate.claims.verdicts import numbers


def analyse(study) -> tuple[list[Comparison], list[ClaimCheck]]:
    """The report's two families: the exploratory axis comparisons (on the original, not the
    confirmation, runs), Benjamini–Hochberg within the report; and the study's claims, the
    confirmatory family, Holm over the claims only (each test once), each decided at the α
    share its deciding attempt spends of its budget (:mod:`ablate.claims.budget`; the nominal
    α where that attempt is exploratory)."""
    margin = study.equivalence_margin
    original = study.runs[~confirm_mask(study.runs)]
    comps = adjust(axis_comparisons(original, study.varying_axes, margin=margin), method="bh")
    looks = study_looks(study)
    decided = sequential_checks(study, looks) if looks else {}
    rest = [c for c in study.claims if c.id not in decided]
    checks = build_comparisons(study, rest, margin)
    progress = design_progress(study, rest)
    for check in checks:  # in the family, but never rejected before its design finished
        if check.claim.id in progress and check.comparison is not None:
            check.comparison = replace(check.comparison, p=1.0, p_tost=1.0)
    confirmatory_family(checks)
    for check in checks:
        if check.claim.id in progress:
            hold(check, progress[check.claim.id], study.runs[latest_attempt(study.runs)])
    by_id = decided | {check.claim.id: check for check in checks}
    ordered = [by_id[c.id] for c in study.claims]
    versions = registration_versions(study)[1]
    for check in ordered:
        add_budget(study, check, versions)
    for check in checks:
        if check.pending is None:
            h = check.history
            decide_claim(check, deciding_level(h.shares, h.deciding))
            if not settled(check.outcome) and h.budget.next_share() > 0:
                check.seeds_needed = claim_need(check, h.budget.next_share())
    decide_pooled(checks, ALPHA)
    add_earlier(study, ordered)
    return comps, ordered


def add_budget(study, check: ClaimCheck, versions) -> None:
    """The claim's attempts and what each spends of its α budget (``check.history``)."""
    h = claim_history(study, check.claim, check.pool if check.confirmation else None)
    h.budget, shares = claim_shares(study, check.claim, h.attempts, versions)
    h.shares = as_it_stood(shares, h.attempts, h.margins)
    check.history = h


def add_earlier(study, checks: list[ClaimCheck]) -> None:
    """What every earlier attempt gave each claim, as it registered the claim and at its
    share (:func:`ablate.claims.attempts.earlier_outcomes`)."""
    depth = max((ch.history.attempt - 1 for ch in checks), default=0)
    attempts = checks[0].history.attempts[:depth] if checks else []
    said = earlier_outcomes(study, attempts, {ch.claim.id: ch.history for ch in checks})
    for check in checks:
        check.history.earlier = [said[i][check.claim.id] for i in range(check.history.attempt - 1)]


def claim_outcomes(study, alpha: float) -> dict[str, str]:
    """Claim id -> its outcome at level ``alpha``, Holm-corrected over the claims alone (the
    confirmatory family), as the report decides a claim (one look of a sequential design)."""
    checks = build_comparisons(study, study.claims, study.equivalence_margin)
    confirmatory_family(checks)
    for check in checks:
        decide_claim(check, alpha)
    return {check.claim.id: check.outcome for check in checks}


def pilot(
    study, alphas: dict[str, float] | None = None
) -> tuple[dict[str, str], dict[str, SeedsNeeded | None]]:
    """Claim id -> what the study's exploratory runs (the pilot) say: the outcome and numbers
    there, and the seeds the deciding test would need at 80% power if the pilot's difference
    and SD were the true ones, never fewer than its exact test's floor (a registered design's
    power justification); and claim id -> those seeds needed. ``alphas``: claim id -> the α
    share of the attempt being registered (default the nominal α). Both empty without
    exploratory runs."""
    explore = study.runs[~confirm_mask(study.runs)]
    if explore.empty:
        return {}, {}
    data = replace(study, runs=explore)
    checks = build_comparisons(data, data.claims, data.equivalence_margin)
    confirmatory_family(checks)
    seeds = ", ".join(str(int(s)) for s in sorted(set(explore["seed"].dropna())))
    said, needs = {}, {}
    for ch in checks:
        alpha = (alphas or {}).get(ch.claim.id) or ALPHA
        decide_claim(ch, alpha)
        need = claim_need(ch, alpha)  # as the report computes it, decided or not
        needs[ch.claim.id] = need
        said[ch.claim.id] = (
            f"on the exploratory seeds {seeds}: {ch.outcome}: {numbers(ch, 'nats')}; "
            f"seeds needed: {need.text() if need else 'unknown'}"
        )
    return said, needs
