"""``ablate run STUDY --until-decided``: a group-sequential design on the study's claims.

Only claims are tested (exploratory axis comparisons never add seeds). The design is fixed before
the first look: at most ``max_looks`` looks, the first on the study's seeds (or, with
``--confirm N``, on ``N`` fresh confirmation seeds), each later one ``seeds_per_look`` seeds more.
Look ``k`` has information fraction ``t_k = seeds at look k / seeds at the last look`` and tests
at the nominal level that a Lan-DeMets O'Brien-Fleming-type spending function spends at that
look (:mod:`ablate.claims.sequential`), so the chance of a false decision over all looks stays
at most ``alpha``. At each look every claim not yet decided is analysed on exactly that look's
seeds (Holm over the claims), a claim decided there stops, and the next look's new seeds go to
*every* arm of every claim still inconclusive, so arms keep one seed set (paired tests). It stops
when no claim is inconclusive or after the last look.

Resumable: ``<store>/<study>/until_decided.json`` records the design, each look and each round of
added seeds (written before they train); run again, the same command finishes the design::

    {"design": {"max_looks": 3, "alpha": 0.05, "spending": "obrien-fleming",
                "seeds_per_look": 3, "confirm": false, "seeds_at_looks": [3, 6, 9]},
     "rounds": [{"look": 2, "seeds": {"<variant>": [3, 4, 5]}, "why": {"<variant>": ["claim x"]}}],
     "looks": [{"look": 1, "seeds": 3, "seed_set": [0, 1, 2], "info_fraction": 0.333,
                "alpha_spent": 0.0007, "nominal_alpha": 0.0007, "decided": ["x"],
                "outcomes": {"x": "reproduces", "y": "inconclusive"}}],
     "stopped": "decided" | "max_looks 3 reached"}

``rounds`` keeps its earlier shape (variant -> the seed added, a list when several).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from ablate.claims.arms import claim_arms
from ablate.claims.sequential import SPENDING, look_levels
from ablate.claims.stats import ALPHA
from ablate.config import ConfigError
from ablate.execution.confirm import (
    confirm_seeds,
    fresh_seeds,
    registered_design,
    store_seeds,
)
from ablate.execution.runner import run_study
from ablate.report.claim_checks import (
    INCONCLUSIVE,
    UNTESTED,
    build_comparisons,
    confirmatory_family,
    decide_claim,
)
from ablate.store.rundir import DECISIONS_FILE, read_decisions, write_decisions
from ablate.study import Study, load_study
from ablate.study.results import StudyData, read_study, restrict_seeds

DEFAULT_MAX_LOOKS = 3

Outcomes = Callable[[StudyData, float], dict[str, str]]


def claim_outcomes(study: StudyData, alpha: float) -> dict[str, str]:
    """Claim id -> its outcome at level ``alpha``, Holm-corrected over the claims alone (the
    confirmatory family), as the report decides a claim."""
    checks = build_comparisons(study, study.claims, study.equivalence_margin)
    confirmatory_family(checks)
    for check in checks:
        decide_claim(check, alpha)
    return {check.claim.id: check.outcome for check in checks}


def look_seed_counts(first: int, per_look: int, max_looks: int) -> list[int]:
    """Seeds per arm at each planned look: ``first``, then ``per_look`` more each look."""
    return [first + k * per_look for k in range(max_looks)]


def _design(
    plan: Study,
    store: Path,
    max_looks: int,
    seeds_per_look: int | None,
    alpha: float,
    confirm,
    registered: Sequence[int] = (),
) -> tuple[dict[str, Any], list[int]]:
    """The design and the first look's seeds (the study's, or ``confirm`` fresh ones: the
    ``registered`` first-look seeds when given)."""
    _whole(max_looks, "--max-looks")
    if seeds_per_look is not None:
        _whole(seeds_per_look, "--seeds-per-look")
    if not 0 < alpha < 1:
        raise ConfigError(f"must be in (0, 1), got {alpha!r}", key="alpha")
    if not plan.claims:
        raise ConfigError(
            "--until-decided adds seeds for claims only, and this study has none",
            key="claims",
            source=plan.path,
        )
    if confirm is not None:
        first = list(registered) if registered else confirm_seeds(plan, store, confirm)
    else:
        first = sorted({r.seed for r in plan.runs})
    per = seeds_per_look or len(first)
    design = {
        "max_looks": max_looks,
        "alpha": alpha,
        "spending": SPENDING,
        "seeds_per_look": per,
        "confirm": confirm is not None,
        "seeds_at_looks": look_seed_counts(len(first), per, max_looks),
    }
    return design, first


def _whole(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"must be a whole number >= 1, got {value!r}", key=key)


def _same_design(old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    """A design is fixed once its first look is recorded: another one is a one-line error."""
    if old is None or old == new:
        return
    differ = ", ".join(f"{k} {old.get(k)!r} -> {v!r}" for k, v in new.items() if old.get(k) != v)
    raise ConfigError(
        f"until_decided.json records another design ({differ}); finish it with the same options, "
        "or move the file aside to start a new design",
        key="--until-decided",
    )


def _planned_seeds(log: dict[str, Any], first: list[int], arms: dict[str, list[str]], confirm):
    """variant -> every seed the design has planned for it so far (the first look's seeds on
    the claims' arms in confirm mode, then each round's)."""
    out: dict[str, list[int]] = {}
    if confirm:
        for labels in arms.values():
            for v in labels:
                out[v] = list(first)
    for r in log["rounds"]:
        if "look" not in r:  # a round of the earlier, unplanned --until-decided
            continue
        for v, seeds in r["seeds"].items():
            have = out.setdefault(v, [])
            have += [s for s in (seeds if isinstance(seeds, list) else [seeds]) if s not in have]
    return out


def _next_round(
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


def _record_look(
    log: dict[str, Any], look: int, seed_set: list[int], outcomes: dict[str, str], decided: set
) -> list[str]:
    """Append look ``look``'s record; returns the claims still inconclusive."""
    levels = look_levels(log["design"]["seeds_at_looks"], log["design"]["alpha"])[look - 1]
    outcomes = {c: o for c, o in outcomes.items() if c not in decided}  # tested at this look
    now = [c for c, o in outcomes.items() if o not in (INCONCLUSIVE, UNTESTED)]
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
    return [c for c, o in outcomes.items() if o == INCONCLUSIVE]


def run_until_decided(
    study_path: str | Path,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    store: str | Path = "runs",
    workers: int | Literal["auto"] | None = None,
    max_looks: int = DEFAULT_MAX_LOOKS,
    seeds_per_look: int | None = None,
    alpha: float = ALPHA,
    confirm: int | None = None,
    progress: bool = True,
    executor=None,
    plugins: Sequence[str] = (),
    rerun_stale: bool = False,
    outcomes: Outcomes = claim_outcomes,
    unregistered: bool = False,
) -> list[dict[str, Any]]:
    """Run the design of the module doc to its end (or resume it); returns the summaries of the
    last look's runs. ``confirm``: the first look is that many fresh confirmation seeds (``ablate
    run --confirm N --until-decided``) and every added seed is a confirmation run too. The
    design must be the committed registration's (:func:`registered_design`), on its registered
    seeds (so ``confirm`` is required), unless ``unregistered`` (the outcome is then
    exploratory)."""
    from ablate.execution.confirm import check_n

    store, study_path = Path(store), Path(study_path)
    plan = load_study(study_path, profile, overrides, plugins=plugins)  # nothing written on error
    confirm = None if confirm is None else check_n(confirm)
    registered, tag = [], "unregistered"
    if not unregistered:
        if confirm is None:  # the study's own seeds are not the registered ones
            raise ConfigError(
                "a registered design trains its registered seeds: add --confirm N (or "
                "--unregistered: the outcome is then exploratory)",
                key="--until-decided",
                source=study_path,
            )
        registered, tag = registered_design(plan, study_path, max_looks, seeds_per_look)
    design, first = _design(plan, store, max_looks, seeds_per_look, alpha, confirm, registered)
    log_path = store / plan.name / DECISIONS_FILE
    log = _open_log(log_path, design, first)
    first, arms = log["first_seeds"], claim_arms(plan)
    decided = {c for lk in log["looks"] for c in lk["decided"]}
    kw = dict(profile=profile, overrides=overrides, store=store, workers=workers)
    kw |= dict(progress=progress, executor=executor, plugins=plugins, registration=tag)
    while True:
        look = len(log["looks"]) + 1
        seeds_key = "confirm_seeds" if confirm is not None else "extra_seeds"
        kw[seeds_key] = _planned_seeds(log, first, arms, confirm is not None)
        write_decisions(log_path, log)
        results = run_study(study_path, **kw, rerun_stale=rerun_stale and look == 1)
        if "stopped" in log:  # the design was finished before: nothing more to look at
            return results
        seed_set = _look_seeds(log, look)
        found = read_study(store, plan.name, study_path, plan.profile)
        data = restrict_seeds(found, seed_set)
        data = dataclasses.replace(data, claims=[c for c in data.claims if c.id not in decided])
        level = look_levels(design["seeds_at_looks"], alpha)[look - 1]["nominal_alpha"]
        open_ = _record_look(log, look, seed_set, outcomes(data, level), decided)
        if not open_ or look >= design["max_looks"]:
            log["stopped"] = "decided" if not open_ else f"max_looks {design['max_looks']} reached"
            write_decisions(log_path, log)
            return results
        taken = {*store_seeds(store, plan.name)[0], *(r.seed for r in plan.runs), *seed_set}
        log["rounds"].append(_next_round(log, look + 1, open_, arms, taken))


def _open_log(path: Path, design: dict[str, Any], first: list[int]) -> dict[str, Any]:
    """The log to go on with: the recorded design (the same, else a one-line error) or a new
    one; rounds of an earlier, unplanned ``--until-decided`` are kept as they were."""
    log = read_decisions(path)
    if log.get("looks"):
        _same_design(log.get("design"), design)
        return log
    for stale in ("stopped", "max_seeds"):  # a new design starts here
        log.pop(stale, None)
    log.setdefault("rounds", [])
    log.update(design=design, first_seeds=first, looks=[])
    return log


def _look_seeds(log: dict[str, Any], look: int) -> list[int]:
    """The seeds look ``look`` analyses: the first look's and every round's up to it."""
    added = [s for r in log["rounds"] if r.get("look", 0) <= look for s in r.get("new_seeds", [])]
    return sorted({*log["first_seeds"], *added})
