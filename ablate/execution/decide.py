"""``ablate run STUDY --until-decided``: add seeds only where a comparison is still undecided.

After the study's own seeds, each round analyses the store exactly as the report does
(:func:`ablate.report.claim_checks.analyse`: paired/Welch tests, Holm, TOST, claims), takes the
variants of every *inconclusive* comparison or claim, and trains one more seed for each (the
variant's next unused seed number, so variants given seeds in the same rounds stay paired by
seed). It stops when nothing is inconclusive or every such variant has ``max_seeds`` seeds.

Resumable like any run: the extra seeds are read back from the store (every seed of a variant
that the study YAML does not list), and ``<store>/<study>/until_decided.json`` records each
round's variants and why, which the report shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.config import ConfigError
from ablate.execution.runner import run_study
from ablate.report import collect
from ablate.report.claim_checks import INCONCLUSIVE, analyse
from ablate.report.verdicts import verdict
from ablate.store.rundir import DECISIONS_FILE, read_decisions, write_decisions
from ablate.study import load_study

Undecided = Callable[[collect.StudyData], dict[str, list[str]]]


def undecided_variants(study: collect.StudyData) -> dict[str, list[str]]:
    """Variant -> why it needs seeds: each inconclusive axis comparison or claim it is in."""
    comps, checks = analyse(study)
    variant_of = study.runs.set_index("run_id")["variant"].to_dict()
    out: dict[str, list[str]] = {}

    def add(key: tuple, reason: str) -> None:
        if len(key) != 3 or key[0] == "claim":
            return  # a fitted quantity or a claim against published values only
        for side in key[1:]:
            for run_id in side:
                if run_id in variant_of:
                    reasons = out.setdefault(variant_of[run_id], [])
                    if reason not in reasons:
                        reasons.append(reason)

    for c in comps:
        if verdict(c).kind == "inconclusive":
            held = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in c.context.items())
            add(c.key, f"{c.label_a} vs {c.label_b}" + (f" at {held}" if held else ""))
    for check in checks:
        if check.outcome == INCONCLUSIVE and check.comparison is not None:
            add(check.comparison.key, f"claim {check.claim.id}")
    return out


def extra_seeds_in_store(store: Path, name: str, study_seeds: set[int]) -> dict[str, list[int]]:
    """Seeds per variant in the store that the study YAML does not list (earlier rounds)."""
    try:
        runs = collect.load_study(store, name).runs
    except ConfigError:  # no runs yet
        return {}
    out: dict[str, list[int]] = {}
    for variant, seed in zip(runs["variant"], pd.to_numeric(runs["seed"]), strict=True):
        if pd.notna(seed) and int(seed) not in study_seeds:
            out.setdefault(variant, []).append(int(seed))
    return {v: sorted(set(s)) for v, s in out.items()}


def run_until_decided(
    study_path: str | Path,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    store: str | Path = "runs",
    workers: int | None = None,
    max_seeds: int = 10,
    progress: bool = True,
    executor=None,
    plugins: Sequence[str] = (),
    rerun_stale: bool = False,
    undecided: Undecided = undecided_variants,
) -> list[dict[str, Any]]:
    """Run the study, then rounds of one extra seed per undecided variant (see module doc).
    Returns the summaries of the last round's runs."""
    store, study_path = Path(store), Path(study_path)
    # validates; nothing written on error
    plan = load_study(study_path, profile, overrides, plugins=plugins)
    study_seeds = {r.seed for r in plan.runs}
    extra = extra_seeds_in_store(store, plan.name, study_seeds)
    log_path = store / plan.name / DECISIONS_FILE
    log = read_decisions(log_path)
    log["max_seeds"] = max_seeds
    while True:
        results = run_study(
            study_path,
            profile=profile,
            overrides=overrides,
            store=store,
            workers=workers,
            progress=progress,
            executor=executor,
            plugins=plugins,
            rerun_stale=rerun_stale and not extra,  # stale runs are moved aside once
            extra_seeds=extra,
        )
        data = collect.load_study(store, plan.name, study_path)

        # planned seeds, not finished ones: a run that keeps failing cannot loop forever
        def planned(v: str) -> set[int]:
            return study_seeds | set(extra.get(v, []))

        open_ = undecided(data)
        todo = {v: r for v, r in open_.items() if len(planned(v)) < max_seeds}
        if not todo:
            log["stopped"] = "decided" if not open_ else f"max_seeds {max_seeds} reached"
            write_decisions(log_path, log)
            return results
        added = {}
        for v in todo:
            seed = max(planned(v)) + 1
            extra.setdefault(v, []).append(seed)
            added[v] = seed
        log["rounds"].append({"seeds": added, "why": todo})
        write_decisions(log_path, log)
