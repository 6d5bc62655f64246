"""Which planned runs a claim is decided on: its arms (``a`` and ``b`` under ``where``; every
run under ``where`` for a fitted exponent), as variant labels of the study at one profile.

The confirmation runs (``ablate run confirm``) train exactly these variants at the registered
seeds, and the report counts them to say how far a registered design has got.
"""

from __future__ import annotations

from typing import Any

from ablate.claims.spec import FITTED, Claim


def selects(axes: dict[str, Any], sel: dict[str, Any]) -> bool:
    """Whether a run with ``axes`` is among those ``sel`` picks (a list: any of its values)."""
    for key, want in sel.items():
        if key not in axes:
            return False
        have = axes[key]
        if not any(have == w for w in (want if isinstance(want, list) else [want])):
            return False
    return True


def arm_selectors(claim: Claim) -> list[dict[str, Any]]:
    """The selectors of the claim's arms that are runs of the study (``where`` included)."""
    if claim.metric in FITTED:
        return [dict(claim.where)]  # the exponent is fitted over the whole sweep under where
    if claim.by:  # an interaction: a and b at both values of the by axis
        return [{**claim.where, **arm, **claim.by} for arm in (claim.a, claim.b)]
    arms = [{**claim.where, **claim.a}]
    if claim.expect != "diverges" and not claim.external:
        arms.append({**claim.where, **claim.b})
    return arms


def claim_arms(study) -> dict[str, list[str]]:
    """Claim id -> the variant labels of its arms, in plan order (``study``: a planned
    :class:`ablate.study.Study`, its ``claims`` and ``runs``)."""
    out: dict[str, list[str]] = {}
    for claim in study.claims:
        sels = arm_selectors(claim)
        labels: list[str] = []
        for run in study.runs:
            if run.variant not in labels and any(selects(run.axes, s) for s in sels):
                labels.append(run.variant)
        out[claim.id] = labels
    return out


def claim_arm_axes(study) -> dict[str, list[dict[str, Any]]]:
    """Claim id -> the axes of each variant of its arms (:func:`claim_arms`), for matching runs
    in a store by what they vary rather than by their labels."""
    axes = {run.variant: dict(run.axes) for run in study.runs}
    return {cid: [axes[v] for v in labels] for cid, labels in claim_arms(study).items()}
