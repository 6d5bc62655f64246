"""One α budget per claim, across its attempts.

An attempt is the study's confirmation runs under one registration commit
(:mod:`ablate.claims.history`). Testing a claim again at the full α whenever an attempt misses
inflates its error rate whatever each attempt's own α, so a claim has one budget, α = 0.05 in
all, which its **first registration** (the first committed version of the study's registration
file that registers its id and is not exploratory) spreads over attempts (:class:`Spending`, the
file's ``attempts:``):

* ``once``: its first decided attempt spends α, none after. A registration from before budgets
  reads so: it tested its attempt at the full α and planned no other.
* ``equal`` with ``max_attempts: K``: each of up to K attempts spends α/K.
* ``halving``: attempt k spends α/2^k (α/2, α/4, ...: never more than α in all).

Each later attempt spends the next share, when its registered design has finished; one
withdrawn before then was never tested and spends nothing (it says so). A later registration
that states another rule changes no claim registered before it. Holm over the claims runs at
the attempt's share, so a claim's chance of a false verdict over all its attempts is at most α.

An attempt without a registered share is exploratory: archived or unregistered, under an
exploratory registration (``ablate register --exploratory``), under one that does not register
the claim, or after the budget is spent. A claim whose text, margin, metric or arms differ from
the entry its attempt ran under changed after that attempt's data: a new claim, which those data
cannot confirm. The budget stays the id's (rewording a claim buys no new α): the earlier wording
spent it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import yaml

from ablate.claims.history import Attempt
from ablate.claims.registration import SPENDING_KEY, Spending, Version, parse_spending
from ablate.claims.spec import Claim, claim_fingerprint
from ablate.claims.standing import (
    BEFORE_FILES,
    UNREGISTERED,
    attempt_progress,
    confirm_mask,
    registration_versions,
)
from ablate.claims.stats import ALPHA
from ablate.errors import ConfigError


@dataclass(frozen=True)
class Share:
    """What one attempt of the study spends of one claim's budget, and why, in words."""

    alpha: float | None
    """Its share (Holm over the claims at this level); None: it spends none (exploratory, or
    never tested)."""
    role: str
    margin: float | None = None
    """The margin and metric its registration gave the claim (None: not registered there)."""
    metric: str | None = None
    changed: str = ""
    """Words when the claim now is not the entry this attempt ran under (text, margin, metric
    or arms changed after its data): then the claim is a new one, never confirmed by it."""
    pending: bool = False
    """Its design has runs left: it spends ``alpha`` once they finish."""

    @property
    def confirms(self) -> bool:
        """Whether this attempt can confirm the claim as the study states it now."""
        return self.alpha is not None and not self.changed and not self.pending


@dataclass(frozen=True)
class Budget:
    """A claim's α budget: its rule, the registration that fixed it, the shares spent."""

    spending: Spending
    fixed_in: str = ""
    """The commit of the claim's first registration ("": not registered yet)."""
    legacy: bool = False
    """Fixed by a registration from before budgets (read as ``once``)."""
    spent: tuple[tuple[str, float], ...] = ()
    """(registration commit, share) of each attempt that spent some, in order."""

    def next_share(self, alpha: float = ALPHA) -> float:
        """The share the claim's next attempt would spend (0: none left)."""
        return self.spending.share(len(self.spent) + 1, alpha)

    def text(self) -> str:
        rule = self.spending.text()
        if not self.fixed_in:
            return f"{rule} (fixed when first registered)"
        if self.legacy:
            return (
                f"{rule}: its first registration ({self.fixed_in[:7]}) is from before α budgets, "
                "so it tested at the full α and planned no other attempt"
            )
        return f"{rule}, fixed by its first registration ({self.fixed_in[:7]})"

    def spent_text(self) -> str:
        return ", ".join(f"α={a:.3g} under {c[:7]}" for c, a in self.spent) or "nothing yet"


def version_record(version: Version) -> dict[str, Any]:
    """A committed registration as a mapping ({} when it cannot be read)."""
    try:
        data = yaml.safe_load(version.text)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def claim_entry_in(record: dict[str, Any], claim_id: str) -> dict[str, Any] | None:
    entries = record.get("claims") if isinstance(record.get("claims"), list) else []
    return next((c for c in entries if isinstance(c, dict) and c.get("id") == claim_id), None)


def fixed_budget(claim_id: str, versions: list[Version]) -> Budget:
    """The budget the claim's first registration fixed (module doc); ``once`` and not fixed
    yet when no committed registration registers it."""
    for v in versions:
        record = version_record(v)
        if record.get("exploratory") or claim_entry_in(record, claim_id) is None:
            continue
        raw = record.get(SPENDING_KEY)
        if raw is None:
            return Budget(Spending("once"), v.commit, legacy=True)
        try:
            return Budget(parse_spending(raw), v.commit)
        except ConfigError:  # an unreadable rule spends like the strictest one
            return Budget(Spending("once"), v.commit)
    return Budget(Spending("once"))


def claim_shares(
    study, claim: Claim, attempts: list[Attempt], versions: list[Version] | None = None
) -> tuple[Budget, list[Share]]:
    """(the claim's budget with what its attempts spent, what each of ``attempts`` spends of
    it, in their order). ``study``: its runs read back from the store
    (:class:`ablate.results.StudyData`); ``versions``: the registration's committed versions
    (default: those of the study's profile)."""
    if versions is None:
        versions = registration_versions(study)[1]
    by_commit = {v.commit: version_record(v) for v in versions}
    budget = fixed_budget(claim.id, versions)
    runs = study.runs
    tags = runs["registration"].astype(str) if "registration" in runs else None
    spent: list[tuple[str, float]] = []
    shares = []
    for i, attempt in enumerate(attempts):
        record = by_commit.get(attempt.tag)
        why = _unregistered(attempt, record, claim.id)
        if why:
            shares.append(Share(None, f"exploratory: {why}"))
            continue
        entry = claim_entry_in(record, claim.id) or {}
        mine = runs[confirm_mask(runs) & (tags == attempt.tag)] if tags is not None else runs
        done, planned = attempt_progress(study, mine, record.get("design") or {}, claim.id)
        sequential = (record.get("design") or {}).get("kind") == "sequential"
        finished = done > 0 if sequential else planned > 0 and done >= planned
        k = len(spent) + 1
        share = budget.spending.share(k)
        margin, metric = entry.get("margin"), entry.get("metric")
        if not finished and i < len(attempts) - 1:
            role = f"no α spent: withdrawn before its design finished ({done} of {planned} runs)"
            shares.append(Share(None, role))
        elif share <= 0:
            role = f"exploratory: no α share left ({budget.spending.text()}: spent {_spent(spent)})"
            shares.append(Share(None, role, margin, metric, _changed(study, claim, entry)))
        elif not finished:
            role = (
                f"pending: spends α={share:.3g} (share {k} of the claim's budget) when it finishes"
            )
            changed = _changed(study, claim, entry)
            shares.append(Share(share, role, margin, metric, changed, pending=True))
        else:
            spent.append((attempt.tag, share))
            role = f"α={share:.3g} (share {k} of the claim's budget)"
            shares.append(Share(share, role, margin, metric, _changed(study, claim, entry)))
    return Budget(budget.spending, budget.fixed_in, budget.legacy, tuple(spent)), shares


def as_it_stood(shares: list[Share], attempts: list[Attempt], margins: list) -> list[Share]:
    """``shares`` with the margin and metric of each unregistered attempt filled in from the
    study file as it stood when that attempt started (``margins``:
    :func:`ablate.claims.history.margin_history`), so every attempt is decided as it was run."""
    out = []
    for share, attempt in zip(shares, attempts, strict=True):
        then = [m for m in margins if not m.time > attempt.start]
        if share.margin is None and then:
            share = replace(share, margin=then[-1].margin, metric=then[-1].metric)
        out.append(share)
    return out


def _unregistered(attempt: Attempt, record: dict | None, claim_id: str) -> str:
    """Why ``attempt`` has no registered share of the claim ("" when its registration gives
    it one)."""
    if attempt.exploratory:
        return "an exploratory look, not registered"
    if attempt.archived or attempt.tag == BEFORE_FILES:
        return "run before registration files (no registered share)"
    if attempt.tag == UNREGISTERED:
        return "run with --unregistered"
    if record is None:
        return "its runs name no committed version of the registration file"
    if record.get("exploratory"):
        return "registered as exploratory (no α share)"
    if claim_entry_in(record, claim_id) is None:
        return "its registration does not register this claim"
    return ""


def _spent(spent: list[tuple[str, float]]) -> str:
    return ", ".join(f"α={a:.3g} by the attempt under {c[:7]}" for c, a in spent) or "nothing"


def _changed(study, claim: Claim, entry: dict[str, Any]) -> str:
    """What differs between the claim now and the registration entry an attempt ran under
    ("" when nothing): its text, or what it tests (margin, metric, arms: the fingerprint)."""
    what = []
    if entry.get("text") is not None and " ".join(str(entry["text"]).split()) != " ".join(
        claim.text.split()
    ):
        what.append("text")
    if entry.get("fingerprint") and entry["fingerprint"] != claim_fingerprint(
        claim, study.equivalence_margin
    ):
        what.append("margin, metric or arms")
    return " and ".join(what)


def deciding_level(shares: list[Share], deciding: int | None) -> float:
    """The level the deciding attempt's claim is tested at: its share, else the nominal α
    (an exploratory decision)."""
    if deciding is None or deciding >= len(shares) or not shares[deciding].confirms:
        return ALPHA
    return float(shares[deciding].alpha)
