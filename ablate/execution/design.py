"""What a confirmation of a study's claims needs before it is registered: per claim, the α
share its next attempt spends of its budget (:mod:`ablate.claims.budget`) and the fewest seeds
whose exact test can reach that share over the Holm family at all
(:func:`ablate.claims.power.decidable_n`). ``ablate register`` refuses fewer seeds (unless the
registration is exploratory) and ``ablate plan`` prints the same numbers, from this one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ablate.claims.arms import arm_selectors, selects
from ablate.claims.budget import Budget, claim_shares, fixed_budget
from ablate.claims.comparisons import token_streams
from ablate.claims.history import study_attempts
from ablate.claims.power import Floor, claims_family, decidable_n
from ablate.claims.registration import Spending, git_versions, registration_path
from ablate.claims.spec import ALPHA, Claim
from ablate.config import ConfigError
from ablate.store import RunStore
from ablate.study import Study


@dataclass(frozen=True)
class ClaimDesign:
    """What the next attempt of one claim spends and needs."""

    claim: Claim
    budget: Budget
    attempt: int
    """The attempt of the claim's budget it would be (1 for a claim never decided)."""
    share: float
    """Its α share (0: the budget is spent, the attempt can only be exploratory)."""
    floor: Floor

    def text(self) -> str:
        if self.share <= 0:
            spent = self.budget.spent_text()
            return (
                f"{self.claim.id}: no α left ({self.budget.text()}; spent {spent}): "
                f"exploratory only; at the nominal α it needs {self.floor.n} seeds"
            )
        return (
            f"{self.claim.id}: attempt {self.attempt} at α={self.share:.3g}, at least "
            f"{self.floor.n} seeds ({self.floor.text()})"
        )


def unpaired(study: Study, claim: Claim) -> bool:
    """Whether the claim's two arms, trained on the same seeds, still cannot be paired: their
    seeds' token streams differ (another batch size under ``data.order: rows``)."""
    sels = arm_selectors(claim)
    if len(sels) != 2 or claim.by or claim.external:
        return False
    streams = []
    for sel in sels:
        runs = [r for r in study.runs if selects(r.axes, sel)]
        cfg = pd.DataFrame(
            {
                "cfg.batch_size": [r.config.data.batch_size for r in runs],
                "cfg.order": [r.config.data.order for r in runs],
            }
        )
        streams.append(token_streams(cfg))
    return streams[0] != streams[1]


def claim_designs(
    study: Study, store: str | Path, spending: Spending | None = None
) -> list[ClaimDesign]:
    """Per claim of the planned ``study``, its next attempt (module doc): the budget its first
    committed registration fixed (``spending`` for a claim registered now for the first time),
    what the store's attempts under that file already spent, and the seeds it needs."""
    versions = git_versions(registration_path(study.path, study.profile))
    data = _store_data(study, store)
    family = claims_family(study.claims)
    steps = len(study.ladder.rungs) - 1 if study.ladder is not None else 1
    out = []
    for claim in study.claims:
        if data is not None:
            budget, _ = claim_shares(data, claim, study_attempts(data), versions)
        else:
            budget = fixed_budget(claim.id, versions)
        if not budget.fixed_in:  # registered now for the first time: the rule given now
            budget = Budget(spending or Spending())
        share = budget.next_share()
        level = share if share > 0 else ALPHA  # none left: what an exploratory look needs
        floor = decidable_n(claim, family, level, unpaired=unpaired(study, claim), steps=steps)
        out.append(ClaimDesign(claim, budget, len(budget.spent) + 1, share, floor))
    return out


def _store_data(study: Study, store: str | Path):
    """The study's runs at its profile read back from ``store`` (None when it has none)."""
    if not any(True for _ in RunStore(store).runs(study.name)):
        return None
    from ablate.results import read_study  # pandas and the statistics: only where runs exist

    try:
        return read_study(Path(store), study.name, Path(study.path), study.profile)
    except ConfigError:  # no runs of this profile
        return None


def refuse_small(designs: list[ClaimDesign], n: int, source: Path) -> None:
    """``ConfigError`` (one line) when ``n`` seeds per arm is below a claim's floor, naming the
    claim that needs the most and the seeds it needs, or when no claim has α left."""
    open_ = [d for d in designs if d.share > 0]
    if not open_:
        spent = "; ".join(d.text() for d in designs[:1])
        raise ConfigError(
            f"no claim has α left for another attempt ({spent}): register it --exploratory",
            key="--seeds",
            source=source,
        )
    short = sorted((d for d in open_ if n < d.floor.n), key=lambda d: -d.floor.n)
    if short:
        first = short[0]
        also = ", ".join(f"{d.claim.id} {d.floor.n}" for d in short[1:])
        raise ConfigError(
            f"{n} seeds per arm cannot decide claim {first.claim.id}: it needs at least "
            f"{first.floor.n} ({first.floor.text()}, at attempt {first.attempt}'s α="
            f"{first.share:.3g})" + (f"; also {also}" if also else "") + "; register more "
            "seeds, or --exploratory",
            key="--seeds",
            source=source,
        )


def design_lines(study: Study, store: str | Path) -> list[str]:
    """What ``ablate plan`` says about a study's claims: each one's next attempt, its α share
    and the fewest seeds per arm it needs (what ``ablate register`` refuses below)."""
    designs = claim_designs(study, store)
    if not designs:
        return []
    k = designs[0].floor.family
    head = (
        f"Its claims' next confirmation (Holm over {k} test(s); `ablate register` refuses "
        "fewer seeds than a claim needs):"
    )
    return [head, *(f"  {d.text()}" for d in designs)]
