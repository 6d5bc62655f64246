"""What a reviewer audits: when the claims were registered (from git), against when the runs
that decide them started, and every confirmation attempt, the failed ones included.

The registration is the committed file beside the study YAML (:mod:`ablate.claims.registration`).
Each confirmation run records the registration commit it ran under (``registration`` in
results.csv) and its start (``started``); runs of one registration are one *attempt*. A claim
is decided on the latest attempt; the earlier ones stay listed here, with the archived result
tables of attempts whose runs are no longer in the store (``reports/<study>/history/*.csv``).
A claim's outcome is confirmatory only when it is decided on the confirmation runs of its
profile's registration (``ablate run --confirm``: the registered seeds) and git shows that
registration committed before the first of them; runs of other seeds at the same profile are
exploratory, and the report says why. While the registered design's runs are unfinished a
claim is pending (:func:`design_progress`): no verdict before every run of the design finished,
unless the design registered interim looks (``--until-decided``), which the report replays.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from ablate.claims.registration import (
    Version,
    commit_problem,
    git_versions,
    read_registration,
    registration_path,
)
from ablate.claims.spec import claim_fingerprint
from ablate.errors import ConfigError
from ablate.names import axis_column
from ablate.report.render import Block
from ablate.store import FINISHED
from ablate.study.results import StudyData

BEFORE_FILES = "before registration files"
"""The ``registration`` of a confirmation run from before registration files existed."""
UNREGISTERED = "unregistered"
HISTORY = "history"


@dataclass(frozen=True)
class Standing:
    """How a claim was registered, in words, and whether its outcome is confirmatory."""

    text: str
    confirmatory: bool


def confirm_mask(runs: pd.DataFrame) -> pd.Series:
    """True for confirmation runs (``confirm`` in run.yaml's meta or summary.json)."""
    if "confirm" not in runs:
        return pd.Series(False, index=runs.index)
    return runs["confirm"].map(lambda v: v is True or (isinstance(v, int | float) and v == 1))


def latest_attempt(runs: pd.DataFrame) -> pd.Series:
    """True for the confirmation runs of the latest attempt: those run under the registration
    whose first run started last (earlier attempts are history, never pooled with it)."""
    conf = confirm_mask(runs)
    if "registration" not in runs or not conf.any():
        return conf
    tags = runs["registration"].where(conf)
    started = runs.get("started", pd.Series(None, index=runs.index))
    started = pd.to_datetime(started, utc=True, errors="coerce")
    first = started.groupby(tags).min().sort_values(na_position="first")
    return conf & (tags == first.index[-1])


def when(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def start_times(runs: pd.DataFrame) -> pd.Series:
    """The runs' ``started`` as unix seconds (NaN when unknown)."""
    if "started" not in runs:
        return pd.Series(float("nan"), index=runs.index)
    t = pd.to_datetime(runs["started"], utc=True, errors="coerce")
    return (t - pd.Timestamp(0, tz="UTC")).dt.total_seconds()


def _versions(study: StudyData) -> tuple[Path | None, list[Version], str]:
    """(the registration file, its committed versions, why the order cannot be proven or "")."""
    if study.yaml_path is None:
        return None, [], "the study YAML was not found, so neither was its registration"
    path = registration_path(study.yaml_path, study.profile)
    if not path.is_file():
        return path, [], f"no registration file ({path.parent.name}/{path.name}) was committed"
    problem = commit_problem(path)
    if problem == "not a git checkout":
        return path, [], f"{path.parent} is not a git checkout"
    versions = git_versions(path)
    return path, versions, f"{path.parent.name}/{path.name} {problem}" if problem else ""


def _same_claims(path: Path, study: StudyData) -> bool:
    try:
        record = read_registration(path)
    except ConfigError:
        return False
    have = {c.get("id"): c.get("fingerprint") for c in (record or {}).get("claims", [])}
    now = {c.id: claim_fingerprint(c, study.equivalence_margin) for c in study.claims}
    return have == now


def registered_version(study: StudyData, tag: str) -> Version | None:
    """The committed version of the study's registration (at its profile) that confirmation
    runs tagged ``tag`` ran under; None when ``tag`` is no commit of that file."""
    _, versions, _ = _versions(study)
    return next((v for v in versions if v.commit == tag), None)


def design_progress(study: StudyData, claims: list) -> dict[str, tuple[int, int]]:
    """Claim id -> (finished, planned) runs of its registered confirmation design, for every
    claim whose design has runs left: its arms' variants (``study.claim_arms``) x the
    registered seeds (a sequential design's first look) of the latest attempt's registration.
    Empty when the latest attempt ran under no committed registration (unregistered, before
    registration files) or none has started."""
    runs = study.runs
    latest = latest_attempt(runs) if len(runs) else pd.Series(dtype=bool)
    if not latest.any():
        return {}
    version = registered_version(study, str(runs.loc[latest, "registration"].iloc[0]))
    design = version.design if version is not None else None
    if not isinstance(design, dict):
        return {}
    seeds = {int(s) for s in design.get("seeds") or []}
    done = runs[latest & runs["seed"].isin(seeds) & runs["status"].isin(FINISHED)]
    out = {}
    for claim in claims:
        arms = study.claim_arms.get(claim.id, [])
        k = sum(len(set(_with_axes(done, axes)["seed"])) for axes in arms)
        if k < len(arms) * len(seeds):
            out[claim.id] = (k, len(arms) * len(seeds))
    return out


def _with_axes(runs: pd.DataFrame, axes: dict) -> pd.DataFrame:
    """The runs whose axis columns hold exactly ``axes``' values (one planned variant)."""
    mask = pd.Series(True, index=runs.index)
    for key, value in axes.items():
        col = axis_column(key)
        mask &= runs[col] == value if col in runs else False
    return runs[mask]


def standing(study: StudyData, deciding: pd.DataFrame, confirmation: bool) -> Standing:
    """The registration standing of a claim decided on the runs ``deciding`` (its confirmation
    runs when ``confirmation``): confirmatory only on the confirmation runs of its profile's
    registration, at the registered seeds, committed before the first of them."""
    if confirmation and "registration" in deciding:
        tags = set(deciding["registration"].dropna())
        if tags <= {BEFORE_FILES}:
            return Standing(
                "confirmation run before registration files existed: the order cannot be "
                "proven from git (exploratory)",
                False,
            )
        if UNREGISTERED in tags:
            return Standing("confirmation run with --unregistered (exploratory)", False)
    path, versions, why = _versions(study)
    if not versions or why:
        return Standing(
            f"registration not provable ({why or 'never committed'}; exploratory)", False
        )
    if not _same_claims(path, study):
        return Standing("the claims changed since their registration (exploratory)", False)
    if not confirmation:  # the profile's default seeds, or --until-decided without --confirm
        v = versions[-1]
        return Standing(
            f"registered in {v.commit[:7]} ({_design(v.design)}), but decided on runs that "
            f"are not its confirmation runs (`ablate run --confirm`; exploratory)",
            False,
        )
    tag = next(iter(set(deciding.get("registration", pd.Series()).dropna())), "")
    version = next((v for v in versions if v.commit == tag), None)
    if version is None:
        return Standing(f"ran under {tag!r}, not a commit of {path.name} (exploratory)", False)
    stray = _unregistered_seeds(deciding, version.design)
    if stray:
        return Standing(
            f"decided on seeds {stray} that {path.name} in {version.commit[:7]} does not "
            "register (exploratory)",
            False,
        )
    first = start_times(deciding).min()
    if not pd.notna(first):
        return Standing(f"registered in {version.commit[:7]}; run start times unknown", False)
    hours = (first - version.time) / 3600
    head = f"registered in {version.commit[:7]} on {when(version.time)}"
    which = "confirmation run"
    gap = f"{abs(hours):.1f} h" if abs(hours) >= 1 else f"{abs(hours) * 60:.0f} min"
    if hours < 0:
        return Standing(f"{head}, {gap} AFTER the first {which} (exploratory)", False)
    return Standing(f"{head}, {gap} before the first {which}", True)


def _unregistered_seeds(deciding: pd.DataFrame, design: dict | None) -> str:
    """The deciding seeds a fixed design does not list, as text ("" when none; a sequential
    design's later looks draw seeds the file cannot list in advance)."""
    if not isinstance(design, dict) or design.get("kind") != "fixed":
        return ""
    listed = {int(s) for s in design.get("seeds") or []}
    stray = sorted({int(s) for s in deciding["seed"].dropna()} - listed)
    return ", ".join(map(str, stray))


def _design(design: dict | None) -> str:
    if not isinstance(design, dict):
        return "design unreadable"
    seeds = ", ".join(str(s) for s in design.get("seeds") or [])
    if design.get("kind") == "sequential":
        return (
            f"sequential: up to {design.get('max_looks')} looks of {design.get('seeds_per_look')}"
            f" seeds, {design.get('spending')} spending, first seeds {seeds}"
        )
    return f"fixed: {len(design.get('seeds') or [])} seeds per arm ({seeds})"


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
        seeds = ", ".join(str(int(s)) for s in sorted(set(conf["seed"].dropna())))
        out.append(
            f"[{HISTORY}/{csv.name}]({HISTORY}/{csv.name}): {len(df)} runs, "
            f"{len(conf)} of them confirmation runs (seeds {seeds or 'none'})"
        )
    return out


def audit_blocks(study: StudyData, folder: Path) -> list[Block]:
    """Registration versions (git) and confirmation attempts, for the report."""
    if not study.claims:
        return []
    path, versions, why = _versions(study)
    out = [Block("h2", "Registration and confirmation attempts")]
    items = [
        f"{v.commit[:7]} on {when(v.time)}: {v.subject} — {_design(v.design)}" for v in versions
    ]
    name = f"{path.parent.name}/{path.name}" if path is not None else "the registration"
    head = f"Versions of {name} in git (oldest first)" + (f"; note: {why}" if why else "") + ":"
    out += [Block("p", head), Block("ul", items or ["none"])]
    attempts = attempt_items(study) + history_items(folder)
    out += [
        Block("p", "Confirmation attempts (the latest decides the claims; none is dropped):"),
        Block("ul", attempts or ["none"]),
    ]
    return out
