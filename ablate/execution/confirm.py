"""``ablate run confirm STUDY``: fresh seeds for the arms of a study's claims.

A claim written after its runs were seen can only be confirmed on data it has not seen. This
trains ``N`` seeds the study never used (not in its ``seeds`` list, not in any run of the
study in the store, not in its ``seen_seeds``) for the variants its claims select
(:func:`ablate.claims.arms.claim_arms`: the runs of arms ``a`` and ``b`` under ``where``; every
run under ``where`` for a fitted exponent), and nothing else. Every arm gets the same seeds, so
the arms stay paired. Each run's ``run.yaml`` meta and ``summary.json`` say ``confirm:
true``; its run id is its config's, so it differs from the study's runs by the seed alone.

The design is fixed before the data: ``ablate register`` (:func:`register_study`) picks ``N``
seeds never seen (not in the study's ``seeds`` or ``seen_seeds``, no run of the study in the
store) and writes them into the study's registration (:mod:`ablate.claims.registration`, with
the pilot: what the exploratory runs say, :func:`ablate.claims.outcomes.pilot`), with each
claim's attempt and the α share it spends; it refuses fewer seeds than a claim's exact test
needs to reach that share (:mod:`ablate.execution.design`) unless ``--exploratory``. The user
commits the file. ``ablate run confirm`` then trains exactly the registered seeds, and only when the
registration matches the study and is committed; ``--unregistered`` trains fresh seeds without
one, and the report calls the outcome exploratory. Each confirmation run's meta names the
registration commit it ran under (``registration``), so the report can group the attempts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.claims.arms import claim_arms
from ablate.claims.registration import (
    InputsFn,
    Spending,
    build_design,
    build_registration,
    fixed_seeds,
    fresh_seeds,
    inputs_record,
    registration_path,
    write_registration,
)
from ablate.config import ConfigError
from ablate.store import RunStore
from ablate.study import Study, load_study

if TYPE_CHECKING:
    from ablate.execution.design import ClaimDesign
    from ablate.execution.runner import StudyArgs

DEFAULT_CONFIRM = 3


def store_seeds(store: str | Path, name: str) -> tuple[set[int], set[int]]:
    """(every seed of the study's runs in the store, the seeds of its confirmation runs)."""
    used, confirm = set(), set()
    for run in RunStore(store).runs(name):
        meta = run.read_run()["meta"]
        seed = meta.get("seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            used.add(seed)
            if meta.get("confirm") is True:
                confirm.add(seed)
    return used, confirm


def confirm_seeds(study: Study, store: str | Path, n: int) -> list[int]:
    """``n`` unregistered confirmation seeds: those already in the store first (so the same
    command resumes them), then fresh ones."""
    own = {r.seed for r in study.runs}
    used, confirm = store_seeds(store, study.name)
    used |= set(study.seen_seeds)  # looked at in an earlier store: not fresh
    have = sorted(confirm - own)
    if len(have) >= n:
        return have[:n]
    top = max(own | used, default=-1)
    return have + fresh_seeds(n - len(have), own | used, max(own, default=top))


def new_seeds(study: Study, store: str | Path, n: int) -> list[int]:
    """``n`` seeds the study has never used: not its seeds, not its ``seen_seeds``, not a seed
    of any of its runs in the store (a confirmation of an earlier registration included)."""
    own = {r.seed for r in study.runs}
    used, _ = store_seeds(store, study.name)
    taken = own | used | set(study.seen_seeds)
    return fresh_seeds(n, taken, max(taken, default=-1))


@dataclasses.dataclass(frozen=True)
class Choices:
    """What ``ablate register`` is told about a design beyond its seeds."""

    looks: int | None = None
    """A sequential design of up to this many looks (None: fixed)."""
    note: str = ""
    """Why this design, in words."""
    spending: Spending | None = None
    """How a claim registered here first spreads its α over attempts (default ``once``)."""
    exploratory: bool = False
    """It registers no α share: its outcomes are exploratory, and any seeds will do."""


def register_study(
    study_path: str | Path,
    n: int,
    *,
    store: str | Path = "runs",
    profile: str | None = None,
    overrides: Sequence[str] = (),
    plugins: Sequence[str] = (),
    choices: Choices | None = None,
) -> Path:
    """Write the study's registration (``ablate register``): its claims and the confirmation
    design, ``n`` fresh seeds per arm (or, with ``choices.looks``, up to that many looks of
    ``n`` seeds each, O'Brien-Fleming alpha spending), each claim's attempt and the α share it
    spends. Refused in one line, nothing written, when ``n`` seeds cannot decide a claim at
    its share (:func:`ablate.execution.design.refuse_small`) unless the registration is
    exploratory. Returns the file,
    which the user commits. Nothing trains, so the profile's device and data need not be here
    (a gpu profile is registered on the laptop, committed, then run on the GPU machine)."""
    study = load_study(
        study_path, profile, overrides, plugins=plugins, check_data=False, check_device=False
    )
    if not study.claims:
        raise ConfigError("the study has no claims to register", key="claims", source=study.path)
    n = check_n(n, "--seeds")
    # budgets and floors read the store and load the statistics: not on `ablate run`'s way in
    from ablate.execution.design import claim_designs, refuse_small

    choices = choices or Choices()
    looks, exploratory = choices.looks, choices.exploratory
    designs = {d.claim.id: d for d in claim_designs(study, store, choices.spending)}
    if not exploratory:
        refuse_small(list(designs.values()), n, Path(study.path))
    arms = list(dict.fromkeys(v for vs in claim_arms(study).values() for v in vs))
    design = build_design(new_seeds(study, store, n), arms, looks, choices.note)
    shares = {cid: d.share for cid, d in designs.items()}
    if looks is not None and not exploratory:  # one level for every look's claims: the least
        design["alpha"] = min(a for a in shares.values() if a > 0)
    inputs, _ = study_inputs(study_path, profile, overrides, plugins)(design["seeds"])
    record = build_registration(
        study.name,
        study.profile,
        study.claims,
        study.equivalence_margin,
        design,
        inputs,
        choices.spending,
        exploratory,
    )
    needs: dict[str, Any] = {}
    pilot = pilot_power(study_path, store, study.name, study.profile, needs, shares)
    for entry in record["claims"]:
        d = designs[entry["id"]]
        if not exploratory:  # the share this attempt spends, under the budget first fixed
            entry["attempt"], entry["alpha"] = d.attempt, float(f"{d.share:.6g}")
            entry["budget"] = d.budget.text()
        entry["pilot"] = pilot.get(entry["id"]) or pilot[""]
        warnings = design_warnings(n, d, needs.get(entry["id"]), exploratory)
        if warnings:  # the researcher decides; the file keeps what they were told
            entry["warnings"] = warnings
    path = registration_path(study_path, study.profile)
    write_registration(path, record)
    return path


def study_inputs(
    study_path: str | Path,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    plugins: Sequence[str] = (),
) -> InputsFn:
    """Registered seeds -> (what defines the confirmation runs on them, the study and plugin
    files): :func:`ablate.claims.registration.inputs_record` of the claims' arms planned at
    those seeds (their run ids hash config, plugin sources and data), the study file, its
    plugin files and each dataset's content key."""

    def compute(seeds: list[int]) -> tuple[dict[str, Any], list[Path]]:
        from ablate.data.datasets import DATASETS
        from ablate.data.source import data_key

        first = load_study(
            study_path, profile, overrides, plugins=plugins, check_data=False, check_device=False
        )
        arms = {v for vs in claim_arms(first).values() for v in vs}
        study = load_study(
            study_path,
            profile,
            overrides,
            plugins=plugins,
            check_data=False,
            check_device=False,
            extra_seeds={v: list(seeds) for v in arms},
        )
        runs = [r for r in study.runs if r.variant in arms and r.seed in set(seeds)]
        data = {}
        for name in sorted({r.config.data.dataset for r in runs}):
            pinned = DATASETS.get(name)
            data[name] = f"sha256:{pinned.sha256}" if pinned else (data_key(name) or "missing")
        files = [Path(p) for p in study.plugins if Path(p).is_file()]
        record = inputs_record(Path(study.path), files, data, [r.run_id for r in runs])
        return record, [Path(study.path), *files]

    return compute


def design_warnings(n: int, design: ClaimDesign, need: Any = None, exploratory=False) -> list[str]:
    """What ``ablate register`` warns about a claim in a design of ``n`` seeds per arm that it
    does not refuse: no α share left (the attempt is exploratory for it), or ``n`` below the
    pilot's need (``need``: its :class:`~ablate.claims.power.SeedsNeeded`, the report's
    computation: 80% power, never below the exact test's floor)."""
    out = []
    if design.share <= 0 and not exploratory:
        out.append(f"exploratory for this claim: {design.text()}")
    needed = getattr(need, "n", None)
    if needed is not None and n < needed:
        out.append(
            f"{n} seeds per arm is below the pilot's need of ≈{needed} {need.unit} to decide it "
            f"by both tests ({need.text()})"
        )
    elif need is not None and needed is None and getattr(need, "why_not", ""):
        out.append(f"the pilot's need is not reachable ({need.text()})")
    return out


def check_n(n: Any, key: str = "--seeds") -> int:
    """``n`` as a number of seeds (an integer >= 2), else a one-line ``ConfigError``."""
    try:
        value = int(str(n).strip())
    except ValueError:
        raise ConfigError(f"must be a whole number of seeds, got {n!r}", key=key) from None
    if value < 2:
        raise ConfigError(f"must be at least 2 seeds (a test needs 2), got {value}", key=key)
    return value


def pilot_power(
    study_path: str | Path,
    store: str | Path,
    name: str,
    profile: str | None = None,
    needs: dict[str, Any] | None = None,
    alphas: dict[str, float] | None = None,
) -> dict[str, str]:
    """Claim id -> what the study's exploratory runs of ``profile`` in the store (the pilot)
    say (:func:`ablate.claims.outcomes.pilot`, at each claim's α share ``alphas``). Without
    such runs, ``{"": "no pilot: ..."}``: another profile's runs are another scale and never
    stand in for this one's."""
    # the statistics load scipy and statsmodels: only when a registration is written
    from ablate.claims.outcomes import pilot
    from ablate.results import read_study

    none = {"": f"no pilot: the store has no exploratory runs of {name} at profile {profile}"}
    if not any(True for _ in RunStore(store).runs(name)):
        return none
    try:
        data = read_study(Path(store), name, Path(study_path), profile)
    except ConfigError:  # no runs of this profile
        return none
    text, found = pilot(data, alphas)
    if needs is not None:  # claim id -> SeedsNeeded, for the registration's warnings
        needs.update(found)
    return none | text


def plan_confirm(
    study_path: str | Path,
    n: int | None,
    *,
    store: str | Path,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    plugins: Sequence[str] = (),
    unregistered: bool = False,
) -> tuple[Study, list[int], dict[str, list[int]], str]:
    """(the study, its confirmation seeds, variant -> those seeds for every claim arm, the
    registration commit or ``"unregistered"``). Registered: the registration's seeds (``n``,
    when given, must be their number); ``unregistered``: ``n`` fresh seeds. ``ConfigError``
    (nothing written) when the study has no claim, no claim selects a run, or the registration
    is missing, does not match, or is not committed."""
    study = load_study(study_path, profile, overrides, plugins=plugins)
    if not study.claims:
        raise ConfigError("the study has no claims to confirm", key="claims", source=study.path)
    arms = claim_arms(study)
    variants = [v for labels in arms.values() for v in labels]
    if not variants:
        raise ConfigError("no claim selects a run of this study", key="claims", source=study.path)
    if unregistered:
        seeds = confirm_seeds(study, store, check_n(n if n is not None else DEFAULT_CONFIRM))
        tag = "unregistered"
    else:
        seeds, commit = fixed_seeds(
            Path(study_path),
            study.name,
            study.profile,
            study.claims,
            study.equivalence_margin,
            study_inputs(study_path, profile, overrides, plugins),
        )
        if n is not None and check_n(n) != len(seeds):
            raise ConfigError(
                f"registers {len(seeds)} seeds, not {n}: a new design needs a new registration",
                key="--seeds",
                source=registration_path(study_path, study.profile),
            )
        tag = commit or "uncommitted (not a git checkout)"
    return study, seeds, {v: list(seeds) for v in dict.fromkeys(variants)}, tag


def confirmation_study(
    args: StudyArgs, n: int | None, store: str | Path, unregistered: bool = False
) -> tuple[Study, str]:
    """(the study with only the runs ``ablate run confirm`` trains, the registration they run
    under): what ``ablate plan --confirm`` lists and times and what :func:`run_confirm` hands
    to the runner. Errors as :func:`plan_confirm`."""
    from ablate.execution.runner import only_seeds, plan_runs

    _, _, per_variant, tag = plan_confirm(
        args.path,
        n,
        store=store,
        profile=args.profile,
        overrides=args.overrides,
        plugins=args.plugins,
        unregistered=unregistered,
    )
    return only_seeds(plan_runs(args, per_variant), per_variant), tag


def plan_confirmations(
    studies: Sequence[StudyArgs],
    n: int | None,
    *,
    store: str | Path,
    unregistered: bool = False,
    estimate: bool = True,
    workers: str | int | None = None,
    remeasure: bool = False,
) -> list[Study]:
    """``ablate plan --confirm``: print, for each study, the runs ``ablate run confirm`` would
    train, which seeds and registration, and (``estimate``) their time."""
    from ablate.execution.tables import show_plans

    plans = []
    for args in studies:
        study, tag = confirmation_study(args, n, store, unregistered)
        plans.append((study, _confirm_note(study, tag)))
    show_plans(plans, store, estimate, workers, remeasure)
    return [study for study, _ in plans]


def _confirm_note(study: Study, tag: str) -> str:
    """What ``ablate plan --confirm`` says first: which seeds, how many arms, which
    registration."""
    seeds = sorted({r.seed for r in study.runs})
    arms = len({r.variant for r in study.runs})
    under = "no registration (exploratory)" if tag == "unregistered" else f"registration {tag}"
    return (
        f"The confirmation `ablate run confirm` trains: seeds {', '.join(map(str, seeds))} "
        f"for each of the {arms} claim arm(s), under {under}."
    )


def run_confirm(
    study_path: str | Path, n: int | None = None, *, unregistered: bool = False, **options: Any
) -> list[dict[str, Any]]:
    """Train the registered confirmation seeds for the claims' arms (module doc); returns their
    summaries. ``options``: :func:`ablate.execution.runner.run_options`' (store, workers, ...)."""
    from ablate.execution.runner import run_options, train_planned

    args, how = run_options(study_path, **options)
    study, tag = confirmation_study(args, n, how.store, unregistered)
    mode = ("confirm", *(["--seeds", str(n)] if n is not None else []))
    mode += ("--unregistered",) if unregistered else ()
    return train_planned(study, args, dataclasses.replace(how, confirmation=tag, mode=mode))
