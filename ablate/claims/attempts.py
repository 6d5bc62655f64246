"""What each earlier attempt gave each claim: the claims decided again, with today's tests, on
the runs of one attempt (:mod:`ablate.claims.history` lists them).

An attempt of the store is the study's confirmation runs under one registration commit, with
the exploratory runs beside them (a best-of arm is picked there); an archived attempt is a
result table under ``reports/<study>/history/`` (its confirmation rows, or every row of an
exploratory look). Each is decided as the report decides the latest: Holm over the study's
claims, by the t-test and by the exact test, each claim at the α share that attempt spends of
its budget (:mod:`ablate.claims.budget`; the nominal α where it spends none) and at the margin
and metric that attempt's registration gave it. An attempt whose runs are unfinished is not
decided: its line says how many finished.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ablate.claims.checks import (
    PENDING,
    ClaimCheck,
    build_comparisons,
    confirmatory_family,
    decide_claim,
)
from ablate.claims.history import Attempt
from ablate.claims.standing import confirm_mask
from ablate.claims.stats import ALPHA
from ablate.claims.verdicts import holm_ps
from ablate.store import FINISHED


def attempt_runs(study, attempt: Attempt) -> pd.DataFrame | None:
    """The runs to decide ``attempt`` on, as the study's runs table reads them; None when it
    has no finished run."""
    runs = study.runs
    if attempt.rows is None:  # the store's: its confirmation runs and the exploratory runs
        tags = runs.get("registration", pd.Series(None, index=runs.index)).astype(str)
        mine = confirm_mask(runs) & (tags == attempt.tag)
        if not (mine & runs["status"].isin(FINISHED)).any():
            return None
        return runs[mine | ~confirm_mask(runs)]
    rows = attempt.rows.copy()
    if "status" not in rows or not rows["status"].isin(FINISHED).any():
        return None
    rows["confirm"] = not attempt.exploratory
    rows["registration"] = None if attempt.exploratory else attempt.label
    if attempt.exploratory:
        return rows
    explore = runs[~confirm_mask(runs)]  # a best-of arm is picked on the exploratory runs
    return pd.concat([explore, rows], ignore_index=True)


def decide_attempt(
    study, attempt: Attempt, instead: dict | None = None, alphas: dict | None = None
) -> dict[str, ClaimCheck] | None:
    """Every claim of ``study`` decided on ``attempt``'s runs (None: nothing finished);
    ``instead``: claim id -> the claim to decide in its place (another margin or metric);
    ``alphas``: claim id -> its level (default the nominal α)."""
    runs = attempt_runs(study, attempt)
    if runs is None:
        return None
    data = replace(study, runs=runs.reset_index(drop=True))
    claims = [(instead or {}).get(c.id, c) for c in study.claims]
    checks = build_comparisons(data, claims, study.equivalence_margin)
    confirmatory_family(checks)
    for ch in checks:
        decide_claim(ch, (alphas or {}).get(ch.claim.id, ALPHA))
    return {ch.claim.id: ch for ch in checks}


def gave(check: ClaimCheck | None) -> str:
    """What an attempt gave a claim in a few words: its outcome and Holm p (t-test and exact
    test; TOST for an equivalence)."""
    if check is None:
        return "no finished run"
    c = check.comparison
    if c is None or check.outcome == PENDING:
        return check.outcome + (f" ({check.detail})" if check.detail else "")
    n = f"{c.n_a}" if c.n_a == c.n_b or not c.b else f"{c.n_a} vs {c.n_b}"
    return f"{check.outcome} ({holm_ps(check)}, n={n})"


def earlier_outcomes(study, attempts: list[Attempt], histories: dict) -> list[dict[str, str]]:
    """Per attempt (in order), claim id -> what it gave that claim (:func:`gave`), each claim
    as that attempt registered it and at its share (``histories``: claim id -> its
    :class:`~ablate.claims.history.ClaimHistory` with the shares)."""
    out = []
    for i, attempt in enumerate(attempts):
        instead, alphas = {}, {}
        for claim in study.claims:
            shares = getattr(histories.get(claim.id), "shares", [])
            share = shares[i] if i < len(shares) else None
            if share is None:
                continue
            if share.alpha is not None:
                alphas[claim.id] = share.alpha
            now = claim.margin if claim.margin is not None else study.equivalence_margin
            margin = share.margin if share.margin is not None else now
            metric = share.metric or claim.metric
            if (margin, metric) != (now, claim.metric):
                instead[claim.id] = replace(claim, margin=float(margin), metric=metric)
        decided = decide_attempt(study, attempt, instead, alphas)
        if decided is None:
            out.append({c.id: "not decided: no finished run" for c in study.claims})
        else:
            out.append({cid: gave(ch) for cid, ch in decided.items()})
    return out
