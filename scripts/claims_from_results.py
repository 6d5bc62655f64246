"""Decide a study's claims from a committed results.csv when its store is gone.

    .venv/bin/python scripts/claims_from_results.py STUDY.yaml RESULTS.csv [--all-seeds]

Claims on per-run numbers only (the csv has no metric curves, so no slope claims). With
``--all-seeds`` the confirmation flag is dropped and every seed decides the claim: an
exploratory reading, never a confirmation. Prints one line per claim, as the report words it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from ablate.claims.outcomes import analyse
from ablate.claims.verdicts import numbers, outcome_text
from ablate.study import load_study
from ablate.results import StudyData


def main(yaml_path: str, csv: str, all_seeds: bool) -> None:
    plan = load_study(yaml_path)
    runs = pd.read_csv(csv)
    if all_seeds:
        runs = runs.drop(columns=["confirm", "registration"], errors="ignore")
    data = StudyData(
        name=plan.name,
        path=Path(csv).parent,
        runs=runs,
        metrics=pd.DataFrame(columns=["run_id", "step", "metric", "value"]),
        axes=[c for c in runs.columns if c.startswith(("model.", "data.", "optim.", "train."))],
        claims=list(plan.claims),
        equivalence_margin=plan.equivalence_margin,
        yaml_path=Path(yaml_path),
    )
    seeds = ", ".join(str(s) for s in sorted(set(runs["seed"])))
    print(f"{plan.name}: {len(runs)} runs, seeds {seeds}")
    for check in analyse(data)[1]:
        print(f"- {check.claim.id} → {outcome_text(check)}: {numbers(check, 'nats')}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--all-seeds"]
    main(args[0], args[1], "--all-seeds" in sys.argv)
