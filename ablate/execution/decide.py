"""``ablate run until-decided STUDY``: a group-sequential design on the study's claims.

Only claims are tested (exploratory axis comparisons never add seeds). The design is fixed before
the first look: at most ``max_looks`` looks, the first on the study's seeds (or, with
``--confirm --seeds N``, on ``N`` fresh confirmation seeds), each later one ``seeds_per_look``
seeds more.
Look ``k`` has information fraction ``t_k = seeds at look k / seeds at the last look`` and tests
at the nominal level that a Lan-DeMets O'Brien-Fleming-type spending function spends at that
look (:mod:`ablate.claims.sequential`; the design, its log and each look's decision are
:mod:`ablate.claims.looks`), so the chance of a false decision over all looks stays
at most ``alpha``: under a registration, the α share this attempt spends of the claims'
budgets (its ``design.alpha``, :mod:`ablate.claims.budget`). At each look every claim not yet
decided is analysed on exactly that look's seeds (Holm over the claims), a claim decided there
stops, and the next look's new seeds go to *every* arm of every claim still inconclusive, so arms
keep one seed set (paired tests). It stops when no claim is inconclusive or after the last look.

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
from typing import TYPE_CHECKING, Any

from ablate.claims.arms import claim_arms
from ablate.claims.registration import read_registration, registration_path, sequential_seeds
from ablate.config import ConfigError
from ablate.execution.confirm import check_n, confirm_seeds, store_seeds, study_inputs
from ablate.execution.runner import (
    Execution,
    StudyArgs,
    only_seeds,
    plan_runs,
    run_options,
    train_planned,
)
from ablate.store.rundir import DECISIONS_FILE, write_decisions
from ablate.study import Study

if TYPE_CHECKING:
    from ablate.results import StudyData

DEFAULT_MAX_LOOKS = 3

Outcomes = Callable[["StudyData", float], dict[str, str]]


def _first_seeds(plan: Study, store: Path, confirm, registered: Sequence[int] = ()) -> list[int]:
    """The first look's seeds: the ``registered`` ones, else ``confirm`` fresh confirmation
    seeds, else the study's own."""
    if confirm is not None:
        return list(registered) if registered else confirm_seeds(plan, store, confirm)
    return sorted({r.seed for r in plan.runs})


def run_until_decided(
    study_path: str | Path,
    *,
    max_looks: int = DEFAULT_MAX_LOOKS,
    seeds_per_look: int | None = None,
    alpha: float | None = None,
    confirm: int | None = None,
    unregistered: bool = False,
    outcomes: Outcomes | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    """Run the design of the module doc to its end (or resume it); returns the summaries of the
    last look's runs. ``confirm``: the first look is that many fresh confirmation seeds (``ablate
    run until-decided --confirm --seeds N``) and every added seed is a confirmation run too. The
    design must be the committed registration's
    (:func:`ablate.claims.registration.sequential_seeds`), on its registered seeds (so
    ``confirm`` is required), unless ``unregistered`` (the outcome is then exploratory).
    ``alpha``: the design's (None: ``claims.stats.ALPHA``); ``outcomes``: each look's decisions
    (None: ``claims.outcomes.claim_outcomes``). ``options``:
    :func:`ablate.execution.runner.run_options`' (store, executor, ...)."""
    args, how = run_options(study_path, **options)
    plan = plan_runs(args)  # nothing written on error
    # the statistics (pandas, scipy, statsmodels: seconds) load once the study is valid, so a
    # mistake in it is said at once
    from ablate.claims.looks import check_design, open_log, sequential_design
    from ablate.claims.outcomes import claim_outcomes
    from ablate.claims.stats import ALPHA

    alpha = ALPHA if alpha is None else alpha
    confirm = None if confirm is None else check_n(confirm)
    registered, tag = _registered(plan, args, confirm, unregistered, max_looks, seeds_per_look)
    if not unregistered:  # the attempt spends its registered share of the claims' budgets
        record = read_registration(registration_path(plan.path, plan.profile)) or {}
        alpha = float(record["design"].get("alpha", alpha))
    check_design(max_looks, seeds_per_look, alpha, plan.claims, plan.path)
    first = _first_seeds(plan, how.store, confirm, registered)
    design = sequential_design(first, max_looks, seeds_per_look, alpha, confirm is not None)
    log_path = how.store / plan.name / DECISIONS_FILE
    log = open_log(log_path, design, first)
    mode = _mode(max_looks, seeds_per_look, confirm, unregistered)
    confirmation = tag if confirm is not None else None
    how = dataclasses.replace(how, confirmation=confirmation, mode=mode)
    return _looks(plan, args, how, log, log_path, outcomes or claim_outcomes)


def _looks(
    plan: Study,
    args: StudyArgs,
    how: Execution,
    log: dict[str, Any],
    log_path: Path,
    outcomes: Outcomes,
) -> list[dict[str, Any]]:
    """Train and decide the design's looks from the next one on (``log``: the design and the
    looks so far, written to ``log_path`` before each look's seeds train); returns the last
    look's summaries."""
    from ablate.claims.looks import (
        look_seeds,
        next_round,
        planned_seeds,
        record_look,
        restrict_seeds,
    )
    from ablate.claims.sequential import look_levels
    from ablate.results import read_study

    design, confirm = log["design"], how.confirmation is not None
    first, arms = log["first_seeds"], claim_arms(plan)
    decided = {c for lk in log["looks"] for c in lk["decided"]}
    while True:
        look = len(log["looks"]) + 1
        seeds = planned_seeds(log, first, arms, confirm)
        write_decisions(log_path, log)
        study = plan_runs(args, seeds)
        if confirm:  # a confirmation trains its seeds only
            study = only_seeds(study, seeds)
        results = train_planned(
            study, args, dataclasses.replace(how, rerun_stale=how.rerun_stale and look == 1)
        )
        if "stopped" in log:  # the design was finished before: nothing more to look at
            return results
        seed_set = look_seeds(log, look)
        found = read_study(how.store, plan.name, args.path, plan.profile)
        data = restrict_seeds(found, seed_set)
        data = dataclasses.replace(data, claims=[c for c in data.claims if c.id not in decided])
        level = look_levels(design["seeds_at_looks"], design["alpha"])[look - 1]["nominal_alpha"]
        open_ = record_look(log, look, seed_set, outcomes(data, level), decided)
        if not open_ or look >= design["max_looks"]:
            log["stopped"] = "decided" if not open_ else f"max_looks {design['max_looks']} reached"
            write_decisions(log_path, log)
            return results
        taken = {*store_seeds(how.store, plan.name)[0], *(r.seed for r in plan.runs), *seed_set}
        log["rounds"].append(next_round(log, look + 1, open_, arms, taken))


def _registered(
    plan: Study,
    args: StudyArgs,
    confirm: int | None,
    unregistered: bool,
    max_looks: int,
    seeds_per_look: int | None,
) -> tuple[list[int], str]:
    """(the registered first seeds, the registration's commit); ``([], "unregistered")`` for
    an unregistered design. A registered design trains its registered seeds: ``confirm``
    must be given."""
    if unregistered:
        return [], "unregistered"
    if confirm is None:  # the study's own seeds are not the registered ones
        raise ConfigError(
            "a registered design trains its registered seeds: add --confirm (or "
            "--unregistered: the outcome is then exploratory)",
            key="run until-decided",
            source=plan.path,
        )
    return sequential_seeds(
        plan.path,
        plan.name,
        plan.profile,
        plan.claims,
        plan.equivalence_margin,
        max_looks,
        seeds_per_look,
        study_inputs(args.path, args.profile, args.overrides, args.plugins),
    )


def _mode(
    max_looks: int, seeds_per_look: int | None, confirm: int | None, unregistered: bool
) -> tuple[str, ...]:
    """The ``ablate run until-decided`` words that resume this design."""
    out = ["until-decided", "--max-looks", str(max_looks)]
    if seeds_per_look is not None:
        out += ["--seeds-per-look", str(seeds_per_look)]
    if confirm is not None:  # a registered design trains the registered seeds
        out += ["--confirm", *(["--seeds", str(confirm)] if unregistered else [])]
    return (*out, *(["--unregistered"] if unregistered else []))
