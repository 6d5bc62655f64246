"""``ablate run STUDY --confirm N``: fresh seeds for the arms of a study's claims.

A claim written after its runs were seen can only be confirmed on data it has not seen. This
trains ``N`` seeds the study never used (not in its ``seeds`` list, not in any run of the
study in the store, not in its ``seen_seeds``) for the variants its claims select
(:func:`claim_arms`: the runs of arms ``a`` and ``b`` under ``where``; every run under ``where``
for a fitted exponent), and nothing else. Every arm gets the same seeds, so the arms stay
paired. Each run's ``run.yaml`` meta and ``summary.json`` say ``confirm: true``; its run id is
its config's, so it differs from the study's runs by the seed alone.

Deterministic and resumable: the confirmation seeds already in the store come first, then the
next unused integers above the study's largest seed, so ``--confirm 3`` run again resumes the
same three seeds and ``--confirm 5`` later adds two.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ablate.config import ConfigError
from ablate.store import RunStore
from ablate.study import Study, load_study
from ablate.study.claims import FITTED, Claim

DEFAULT_CONFIRM = 3


def _selects(axes: dict[str, Any], sel: dict[str, Any]) -> bool:
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
    arms = [{**claim.where, **claim.a}]
    if claim.expect != "diverges" and not claim.external:
        arms.append({**claim.where, **claim.b})
    return arms


def claim_arms(study: Study) -> dict[str, list[str]]:
    """Claim id -> the variant labels of its arms, in plan order."""
    out: dict[str, list[str]] = {}
    for claim in study.claims:
        sels = arm_selectors(claim)
        labels: list[str] = []
        for run in study.runs:
            if run.variant not in labels and any(_selects(run.axes, s) for s in sels):
                labels.append(run.variant)
        out[claim.id] = labels
    return out


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


def fresh_seeds(n: int, taken: set[int], above: int) -> list[int]:
    """The first ``n`` integers greater than ``above`` that are not in ``taken``."""
    out, s = [], above
    while len(out) < n:
        s += 1
        if s not in taken:
            out.append(s)
    return out


def confirm_seeds(study: Study, store: str | Path, n: int) -> list[int]:
    """The ``n`` confirmation seeds: those already in the store, then fresh ones (module doc)."""
    own = {r.seed for r in study.runs}
    used, confirm = store_seeds(store, study.name)
    used |= set(study.seen_seeds)  # looked at in an earlier store: not fresh
    have = sorted(confirm - own)
    if len(have) >= n:
        return have[:n]
    top = max(own | used, default=-1)
    return have + fresh_seeds(n - len(have), own | used, max(own, default=top))


def check_n(n: Any, key: str = "--confirm") -> int:
    """``n`` as a number of seeds (an integer >= 2), else a one-line ``ConfigError``."""
    try:
        value = int(str(n).strip())
    except ValueError:
        raise ConfigError(f"must be a whole number of seeds, got {n!r}", key=key) from None
    if value < 2:
        raise ConfigError(f"must be at least 2 seeds (a test needs 2), got {value}", key=key)
    return value


def plan_confirm(
    study_path: str | Path,
    n: int,
    *,
    store: str | Path,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    plugins: Sequence[str] = (),
) -> tuple[Study, list[int], dict[str, list[int]]]:
    """(the study, its confirmation seeds, variant -> those seeds for every claim arm).
    ``ConfigError`` (nothing written) when the study has no claim or no claim selects a run."""
    n = check_n(n)
    study = load_study(study_path, profile, overrides, plugins=plugins)
    if not study.claims:
        raise ConfigError("the study has no claims to confirm", key="claims", source=study.path)
    arms = claim_arms(study)
    variants = [v for labels in arms.values() for v in labels]
    if not variants:
        raise ConfigError("no claim selects a run of this study", key="claims", source=study.path)
    seeds = confirm_seeds(study, store, n)
    return study, seeds, {v: list(seeds) for v in dict.fromkeys(variants)}


def run_confirm(
    study_path: str | Path,
    n: int = DEFAULT_CONFIRM,
    *,
    store: str | Path = "runs",
    profile: str | None = None,
    overrides: Sequence[str] = (),
    plugins: Sequence[str] = (),
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Train ``n`` confirmation seeds for the claims' arms (module doc); returns their summaries.
    ``kwargs`` go to :func:`ablate.execution.runner.run_study` (workers, executor, ...)."""
    from ablate.execution.runner import run_study

    _, _, per_variant = plan_confirm(
        study_path, n, store=store, profile=profile, overrides=overrides, plugins=plugins
    )
    return run_study(
        study_path,
        store=store,
        profile=profile,
        overrides=overrides,
        plugins=plugins,
        confirm_seeds=per_variant,
        **kwargs,
    )
