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
from ablate.claims.checks import (
    ClaimCheck,
    build_comparisons,
    claim_need,
    confirmatory_family,
    decide_claim,
    decide_pooled,
    hold,
)
from ablate.claims.comparisons import Comparison, adjust, axis_comparisons
from ablate.claims.history import claim_history
from ablate.claims.looks import sequential_checks, study_looks
from ablate.claims.power import SeedsNeeded
from ablate.claims.standing import confirm_mask, design_progress, latest_attempt
from ablate.claims.stats import ALPHA
from ablate.claims.verdicts import numbers


def analyse(study) -> tuple[list[Comparison], list[ClaimCheck]]:
    """The report's two families: the exploratory axis comparisons (on the original, not the
    confirmation, runs), Benjamini–Hochberg within the report; and the study's claims, the
    confirmatory family, Holm over the claims only (each test once), decided."""
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
        else:
            decide_claim(check, ALPHA)
    decide_pooled(checks, ALPHA)
    by_id = decided | {check.claim.id: check for check in checks}
    ordered = [by_id[c.id] for c in study.claims]
    add_history(study, ordered)
    return comps, ordered


def add_history(study, checks: list[ClaimCheck]) -> None:
    """Each claim's attempts, what every earlier attempt gave it, and its margin and metric
    history (:mod:`ablate.claims.history`). A claim whose margin or metric changed after an
    earlier attempt is decided again, in the same family and on the same runs, at the margin
    and metric first committed: that is its confirmatory line (it takes the claim's place),
    and the decision at the changed ones is kept as exploratory (``check.changed``)."""
    for check in checks:
        check.history = claim_history(study, check.claim, check.pool)
    depth = max((ch.history.attempt - 1 for ch in checks), default=0)
    attempts = checks[0].history.attempts[:depth] if checks else []
    said = earlier_outcomes(study, attempts)
    for check in checks:
        h = check.history
        if h.after_data:  # its earlier attempts too, at the margin and metric first committed
            said_first = earlier_outcomes(study, attempts, {check.claim.id: _first(check)})
            h.earlier = [said_first[i][check.claim.id] for i in range(h.attempt - 1)]
        else:
            h.earlier = [said[i][check.claim.id] for i in range(h.attempt - 1)]
    for i, check in enumerate(checks):
        h = check.history
        if not h.after_data:
            continue
        claims = [_first(check) if c.id == check.claim.id else c for c in study.claims]
        again = build_comparisons(study, claims, study.equivalence_margin)
        confirmatory_family(again)
        for ch in again:
            decide_claim(ch, ALPHA)
        decide_pooled(again, ALPHA)
        line = next(ch for ch in again if ch.claim.id == check.claim.id)
        line.claim, line.history, line.changed = check.claim, h, check
        checks[i] = line


def _first(check: ClaimCheck):
    """The claim at the margin and metric its study file first committed."""
    first = check.history.margins[0]
    return replace(check.claim, margin=first.margin, metric=first.metric)


def claim_outcomes(study, alpha: float) -> dict[str, str]:
    """Claim id -> its outcome at level ``alpha``, Holm-corrected over the claims alone (the
    confirmatory family), as the report decides a claim (one look of a sequential design)."""
    checks = build_comparisons(study, study.claims, study.equivalence_margin)
    confirmatory_family(checks)
    for check in checks:
        decide_claim(check, alpha)
    return {check.claim.id: check.outcome for check in checks}


def pilot(study) -> tuple[dict[str, str], dict[str, SeedsNeeded | None]]:
    """Claim id -> what the study's exploratory runs (the pilot) say: the outcome and numbers
    there, and the seeds the deciding test would need at 80% power if the pilot's difference
    and SD were the true ones (a registered design's power justification); and claim id ->
    those seeds needed. Both empty without exploratory runs."""
    explore = study.runs[~confirm_mask(study.runs)]
    if explore.empty:
        return {}, {}
    data = replace(study, runs=explore)
    checks = build_comparisons(data, data.claims, data.equivalence_margin)
    confirmatory_family(checks)
    seeds = ", ".join(str(int(s)) for s in sorted(set(explore["seed"].dropna())))
    said, needs = {}, {}
    for ch in checks:
        decide_claim(ch, ALPHA)
        need = claim_need(ch, ALPHA)  # as the report computes it, decided or not
        needs[ch.claim.id] = need
        said[ch.claim.id] = (
            f"on the exploratory seeds {seeds}: {ch.outcome}: {numbers(ch, 'nats')}; "
            f"seeds needed: {need.text() if need else 'unknown'}"
        )
    return said, needs
