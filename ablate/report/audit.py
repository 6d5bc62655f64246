"""What a reviewer audits, as the report's last section: every committed version of the
study's registration (from git) and every confirmation attempt, the failed ones included, with
the archived result tables of attempts whose runs are no longer in the store
(``reports/<study>/history/*.csv``). Whether a claim's outcome is confirmatory is
:mod:`ablate.claims.standing`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ablate.claims.registration import design_text
from ablate.claims.standing import registration_versions, start_times, when
from ablate.report.render import Block
from ablate.results import StudyData
from ablate.store import FINISHED

HISTORY = "history"


def attempt_items(study: StudyData) -> list[str]:
    """One line per confirmation attempt in the store: its registration, seeds, first start."""
    runs = study.runs
    if "registration" not in runs:
        return []
    conf = runs[runs["registration"].notna()]
    out = []
    starts = start_times(conf)
    order = starts.groupby(conf["registration"]).min().sort_values(na_position="first")
    for tag in order.index:
        g = conf[conf["registration"] == tag]
        seeds = ", ".join(str(int(s)) for s in sorted(set(g["seed"].dropna())))
        first = order[tag]
        at = when(first) if pd.notna(first) else "start unknown"
        name = tag[:7] if len(tag) == 40 else tag
        done = int(g["status"].isin(FINISHED).sum())
        left = f" ({done} finished, {len(g) - done} not)" if done < len(g) else ""
        out.append(f"under {name}: {len(g)} runs{left}, seeds {seeds}, first started {at}")
    return out


def history_items(folder: Path) -> list[str]:
    """The archived result tables of earlier attempts (``history/*.csv``): rows and seeds."""
    out = []
    for csv in sorted((folder / HISTORY).glob("*.csv")):
        df = pd.read_csv(csv)
        conf = df[df["confirm"].fillna(False).astype(bool)] if "confirm" in df else df.iloc[0:0]
        link = f"[{HISTORY}/{csv.name}]({HISTORY}/{csv.name})"
        if conf.empty:  # no confirmation runs: an exploratory look at the claims
            seeds = ", ".join(str(int(s)) for s in sorted(set(df["seed"].dropna())))
            out.append(f"{link}: an exploratory look, {len(df)} runs (seeds {seeds or 'none'})")
            continue
        seeds = ", ".join(str(int(s)) for s in sorted(set(conf["seed"].dropna())))
        out.append(f"{link}: {len(df)} runs, {len(conf)} of them confirmation runs (seeds {seeds})")
    return out


def audit_blocks(study: StudyData, folder: Path) -> list[Block]:
    """Registration versions (git) and confirmation attempts, for the report."""
    if not study.claims:
        return []
    path, versions, why = registration_versions(study)
    out = [Block("h2", "Registration and confirmation attempts")]
    items = [
        f"{v.commit[:7]} on {when(v.time)}: {v.subject} — {design_text(v.design)}" for v in versions
    ]
    name = f"{path.parent.name}/{path.name}" if path is not None else "the registration"
    head = f"Versions of {name} in git (oldest first)" + (f"; note: {why}" if why else "") + ":"
    out += [Block("p", head), Block("ul", items or ["none"])]
    attempts = attempt_items(study) + history_items(folder)
    out += [
        Block(
            "p",
            "Confirmation attempts and earlier looks (the latest attempt decides the claims; "
            "none is dropped; what each gave every claim is in the claim's line):",
        ),
        Block("ul", attempts or ["none"]),
    ]
    return out
