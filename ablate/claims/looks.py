"""The looks of a group-sequential design (``ablate run until-decided``): the design fixed
before the first look, its log (``<store>/<study>/until_decided.json``), what each look decides,
the seeds the next look adds, and each look replayed at report time.

At most ``max_looks`` looks, the first on the study's seeds (or on fresh confirmation seeds),
each later one ``seeds_per_look`` seeds more. Look ``k`` has information fraction ``t_k = seeds
at look k / seeds at the last look`` and tests at the nominal level an O'Brien-Fleming-type
spending function spends there (:mod:`ablate.claims.sequential`). At each look every claim not
yet decided is analysed on exactly that look's seeds (Holm over the claims still open); a claim
decided there stops, and the next look's new seeds go to *every* arm of every claim still
inconclusive, so the arms keep one seed set (paired tests). The log's shape is
:mod:`ablate.execution.decide`'s, which trains the looks.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ablate.claims.checks import (
    UNTESTED,
    ClaimCheck,
    build_comparisons,
    confirmatory_family,
    decide_claim,
    settled,
)
from ablate.claims.registration import fresh_seeds
from ablate.claims.sequential import SPENDING, look_levels
from ablate.errors import ConfigError
from ablate.store.rundir import DECISIONS_FILE, read_decisions


def look_seed_counts(first: int, per_look: int, max_looks: int) -> list[int]:
    """Seeds per arm at each planned look: ``first``, then ``per_look`` more each look."""
    return [first + k * per_look for k in range(max_looks)]


def check_design(
    max_looks: Any, seeds_per_look: Any, alpha: float, claims: list, source: Path
) -> None:
    """``--max-looks``, ``--seeds-per-look`` and the alpha of a design, and that the study has
    claims to add seeds for: a one-line ``ConfigError`` otherwise."""
    _whole(max_looks, "--max-looks")
    if seeds_per_look is not None:
        _whole(seeds_per_look, "--seeds-per-look")
    if not 0 < alpha < 1:
        raise ConfigError(f"must be in (0, 1), got {alpha!r}", key="alpha")
    if not claims:
        raise ConfigError(
            "`ablate run until-decided` adds seeds for claims only, and this study has none",
            key="claims",
            source=source,
        )


def _whole(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"must be a whole number >= 1, got {value!r}", key=key)


def sequential_design(
    first: list[int], max_looks: int, seeds_per_look: int | None, alpha: float, confirm: bool
) -> dict[str, Any]:
    """The design (the log's ``design``) whose first look has the seeds ``first``; ``confirm``:
    its seeds are confirmation runs."""
    per = seeds_per_look or len(first)
    return {
        "max_looks": max_looks,
        "alpha": alpha,
        "spending": SPENDING,
        "seeds_per_look": per,
        "confirm": confirm,
        "seeds_at_looks": look_seed_counts(len(first), per, max_looks),
    }


def _same_design(old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    """A design is fixed once its first look is recorded: another one is a one-line error."""
    if old is None or old == new:
        return
    differ = ", ".join(f"{k} {old.get(k)!r} -> {v!r}" for k, v in new.items() if old.get(k) != v)
    raise ConfigError(
        f"until_decided.json records another design ({differ}); finish it with the same options, "
        "or move the file aside to start a new design",
        key="run until-decided",
    )


def open_log(path: Path, design: dict[str, Any], first: list[int]) -> dict[str, Any]:
    """The log to go on with: the recorded design (the same, else a one-line error) or a new
    one; rounds of an earlier, unplanned ``run until-decided`` are kept as they were."""
    log = read_decisions(path)
    if log.get("looks"):
        _same_design(log.get("design"), design)
        return log
    for stale in ("stopped", "max_seeds"):  # a new design starts here
        log.pop(stale, None)
    log.setdefault("rounds", [])
    log.update(design=design, first_seeds=first, looks=[])
    return log


def planned_seeds(log: dict[str, Any], first: list[int], arms: dict[str, list[str]], confirm):
    """variant -> every seed the design has planned for it so far (the first look's seeds on
    the claims' arms in confirm mode, then each round's)."""
    out: dict[str, list[int]] = {}
    if confirm:
        for labels in arms.values():
            for v in labels:
                out[v] = list(first)
    for r in log["rounds"]:
        if "look" not in r:  # a round of the earlier, unplanned run until-decided
            continue
        for v, seeds in r["seeds"].items():
            have = out.setdefault(v, [])
            have += [s for s in (seeds if isinstance(seeds, list) else [seeds]) if s not in have]
    return out


def next_round(
    log: dict[str, Any], look: int, open_: list[str], arms: dict[str, list[str]], taken: set[int]
) -> dict[str, Any]:
    """The seeds of ``look`` for every arm of every open claim: the next ``seeds_per_look``
    integers nobody used, the same for all of them (so arms stay paired)."""
    per = log["design"]["seeds_per_look"]
    new = fresh_seeds(per, taken, max(taken, default=-1))
    why: dict[str, list[str]] = {}
    for cid in open_:
        for v in arms.get(cid, []):
            why.setdefault(v, []).append(f"claim {cid}")
    seeds = {v: (new[0] if per == 1 else list(new)) for v in why}
    return {"look": look, "seeds": seeds, "why": why, "new_seeds": new}


def record_look(
    log: dict[str, Any], look: int, seed_set: list[int], outcomes: dict[str, str], decided: set
) -> list[str]:
    """Append look ``look``'s record; returns the claims still inconclusive."""
    levels = look_levels(log["design"]["seeds_at_looks"], log["design"]["alpha"])[look - 1]
    outcomes = {c: o for c, o in outcomes.items() if c not in decided}  # tested at this look
    # decided by both tests; one decided by the t-test only stays open for more seeds
    now = [c for c, o in outcomes.items() if settled(o)]
    decided.update(now)
    log["looks"].append(
        {
            "look": look,
            "seeds": len(seed_set),
            "seed_set": sorted(seed_set),
            **levels,
            "decided": now,
            "outcomes": outcomes,
        }
    )
    return [c for c, o in outcomes.items() if not settled(o) and o != UNTESTED]


def look_seeds(log: dict[str, Any], look: int) -> list[int]:
    """The seeds look ``look`` analyses: the first look's and every round's up to it."""
    added = [s for r in log["rounds"] if r.get("look", 0) <= look for s in r.get("new_seeds", [])]
    return sorted({*log["first_seeds"], *added})


def restrict_seeds(data, seeds: Any):
    """The study's runs (``data``: :class:`ablate.results.StudyData`) at ``seeds`` only
    (a sequential look analyses exactly its seeds)."""
    keep = {int(s) for s in seeds}
    runs = data.runs
    mask = runs["seed"].map(lambda s: s == s and s is not None and int(s) in keep)
    return replace(data, runs=runs[mask.astype(bool)])


def study_looks(study) -> list[dict]:
    """The looks of the study's ``run until-decided`` design (``until_decided.json`` in its store
    folder, ``study.path``), if any."""
    path = study.path / DECISIONS_FILE
    looks = list(read_decisions(path).get("looks", [])) if path.is_file() else []
    # a log without each look's seeds and level cannot be replayed: decide on all runs then
    return looks if all("seed_set" in lk and "nominal_alpha" in lk for lk in looks) else []


def sequential_checks(study, looks: list[dict]) -> dict[str, ClaimCheck]:
    """Each claim of a sequential design as it was decided: at the look that decided it (or
    the last look), on exactly that look's seeds, Holm over the claims still open there, at
    the look's nominal level (as ``ablate run until-decided`` decided it)."""
    out: dict[str, ClaimCheck] = {}
    for i, look in enumerate(looks):
        open_claims = [c for c in study.claims if c.id not in out]
        data = restrict_seeds(study, look.get("seed_set", []))
        checks = build_comparisons(data, open_claims, study.equivalence_margin)
        confirmatory_family(checks)
        last = i == len(looks) - 1
        for check in checks:
            decide_claim(check, float(look["nominal_alpha"]))
            if last or check.claim.id in look.get("decided", []):
                check.look = look
                out[check.claim.id] = check
    return out
