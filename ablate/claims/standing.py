"""A claim's registration standing: when it was registered (from git), against when the runs
that decide it started, and which runs are the confirmation runs of which attempt.

The registration is the committed file beside the study YAML (:mod:`ablate.claims.registration`).
Each confirmation run records the registration commit it ran under (``registration`` in
results.csv) and its start (``started``); runs of one registration are one *attempt*. A claim
is decided on the latest attempt; the report lists the earlier ones (:mod:`ablate.report.audit`).
A claim's outcome is confirmatory only when it is decided on the confirmation runs of its
profile's registration (``ablate run confirm``: the registered seeds) and git shows that
registration committed before the first of them; runs of other seeds at the same profile are
exploratory, and the report says why. While the registered design's runs are unfinished a
claim is pending (:func:`design_progress`): no verdict before every run of the design finished,
unless the design registered interim looks (``run until-decided``), which the report replays.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from ablate.claims.history import NOT_CHECKABLE, inputs_proof, margin_gap_problem, order_proof
from ablate.claims.registration import (
    Version,
    commit_problem,
    design_text,
    git_versions,
    read_registration,
    registration_path,
)
from ablate.claims.spec import claim_fingerprint
from ablate.errors import ConfigError
from ablate.names import axis_column
from ablate.store import FINISHED

BEFORE_FILES = "before registration files"
"""The ``registration`` of a confirmation run from before registration files existed."""
UNREGISTERED = "unregistered"


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


def registration_versions(study) -> tuple[Path | None, list[Version], str]:
    """(the study's registration file at its profile, its committed versions, why the order
    cannot be proven or ""). ``study``: its runs read back from the store
    (:class:`ablate.results.StudyData`: its ``yaml_path``, ``profile``)."""
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


def _same_claims(path: Path, study) -> bool:
    try:
        record = read_registration(path)
    except ConfigError:
        return False
    have = {c.get("id"): c.get("fingerprint") for c in (record or {}).get("claims", [])}
    now = {c.id: claim_fingerprint(c, study.equivalence_margin) for c in study.claims}
    return have == now


def registered_version(study, tag: str) -> Version | None:
    """The committed version of the study's registration (at its profile) that confirmation
    runs tagged ``tag`` ran under; None when ``tag`` is no commit of that file."""
    _, versions, _ = registration_versions(study)
    return next((v for v in versions if v.commit == tag), None)


def design_progress(study, claims: list) -> dict[str, tuple[int, int]]:
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
    out = {}
    for claim in claims:
        done, planned = attempt_progress(study, runs[latest], design, claim.id)
        if done < planned:
            out[claim.id] = (done, planned)
    return out


def attempt_progress(study, attempt: pd.DataFrame, design: dict, claim_id: str) -> tuple[int, int]:
    """(finished, planned) runs of one attempt's registered ``design`` for a claim: its arms'
    variants x the design's seeds (a sequential design's first look), among the runs
    ``attempt`` (the confirmation runs under that registration)."""
    seeds = {int(s) for s in design.get("seeds") or []}
    done = attempt[attempt["seed"].isin(seeds) & attempt["status"].isin(FINISHED)]
    arms = study.claim_arms.get(claim_id, [])
    return sum(len(set(_with_axes(done, axes)["seed"])) for axes in arms), len(arms) * len(seeds)


def _with_axes(runs: pd.DataFrame, axes: dict) -> pd.DataFrame:
    """The runs whose axis columns hold exactly ``axes``' values (one planned variant)."""
    mask = pd.Series(True, index=runs.index)
    for key, value in axes.items():
        col = axis_column(key)
        mask &= runs[col] == value if col in runs else False
    return runs[mask]


def standing(study, deciding: pd.DataFrame, confirmation: bool) -> Standing:
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
    path, versions, why = registration_versions(study)
    if not versions or why:
        return Standing(
            f"{NOT_CHECKABLE}: registration not provable ({why or 'never committed'}; exploratory)",
            False,
        )
    if not _same_claims(path, study):
        return Standing("the claims changed since their registration (exploratory)", False)
    if not confirmation:  # the profile's default seeds, or run until-decided without --confirm
        v = versions[-1]
        return Standing(
            f"registered in {v.commit[:7]} ({design_text(v.design)}), but decided on runs that "
            f"are not its confirmation runs (`ablate run confirm`; exploratory)",
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
    proof = order_proof(path, version.commit, deciding)
    first = start_times(deciding).min()
    head = f"registered in {version.commit[:7]}"
    if not pd.notna(first):
        clock = "clock: run start times unknown"
    else:
        hours = (first - version.time) / 3600
        gap = f"{abs(hours):.1f} h" if abs(hours) >= 1 else f"{abs(hours) * 60:.0f} min"
        rel = "AFTER" if hours < 0 else "before"
        clock = (
            f"clock (second line, one machine's clock): registered {when(version.time)}, {gap} "
            f"{rel} the first confirmation run"
        )
    if not proof.ok:  # None: not checkable here; False: disproven
        return Standing(f"{head}; {proof.text} (exploratory); {clock}", False)
    inputs = _inputs(study, path, version, proof.commits)
    if not inputs.ok:
        return Standing(
            f"{head}; order proven by {proof.text}; but {inputs.text} (exploratory); {clock}",
            False,
        )
    return Standing(f"{head}; order proven by {proof.text}; {inputs.text}; {clock}", True)


def _inputs(study, path: Path, version: Version, commits: list[str]):
    """The inputs proof (:func:`ablate.claims.history.inputs_proof`) of the attempt that ran
    under ``version``: its confirmation runs at the registered seeds."""
    import yaml

    from ablate.claims.registration import INPUTS, repo_path

    try:
        record = yaml.safe_load(version.text) or {}
    except yaml.YAMLError:
        record = {}
    design = version.design if isinstance(version.design, dict) else {}
    seeds = {int(s) for s in design.get("seeds") or []}
    runs = study.runs
    tags = runs.get("registration", pd.Series(None, index=runs.index)).astype(str)
    mine = confirm_mask(runs) & (tags == version.commit) & runs["seed"].isin(seeds)
    return inputs_proof(
        path.parent,
        version.commit,
        record.get(INPUTS) if isinstance(record, dict) else None,
        commits,
        [str(r) for r in runs.loc[mine, "run_id"]],
        repo_path(Path(study.yaml_path)),
    )


def _unregistered_seeds(deciding: pd.DataFrame, design: dict | None) -> str:
    """The deciding seeds a fixed design does not list, as text ("" when none; a sequential
    design's later looks draw seeds the file cannot list in advance)."""
    if not isinstance(design, dict) or design.get("kind") != "fixed":
        return ""
    listed = {int(s) for s in design.get("seeds") or []}
    stray = sorted({int(s) for s in deciding["seed"].dropna()} - listed)
    return ", ".join(map(str, stray))


def claim_standings(study, checks: list) -> dict[str, Standing]:
    """Each decided claim's registration standing (``checks``: its
    :class:`~ablate.claims.checks.ClaimCheck`, on the runs it was decided on), proven from git;
    a claim pending on a registered design under way is not confirmatory yet."""
    out = {}
    for ch in checks:
        pool = ch.pool if ch.pool is not None else study.runs.iloc[0:0]
        out[ch.claim.id] = standing(study, pool, ch.confirmation)
        margin = ch.claim.margin if ch.claim.margin is not None else study.equivalence_margin
        narrow = margin_gap_problem(ch.claim, margin)
        if narrow:
            out[ch.claim.id] = Standing(f"{out[ch.claim.id].text}; {narrow}", False)
        out[ch.claim.id] = _with_budget(out[ch.claim.id], ch)
        if ch.pending is not None:  # a registered design under way: nothing is confirmed yet
            out[ch.claim.id] = Standing(out[ch.claim.id].text, False)
    return out


def _with_budget(standing: Standing, check) -> Standing:
    """``standing`` with the α its deciding attempt spends and the claim's committed changes:
    exploratory where that attempt has no registered share of the claim's budget, or where
    the claim is not the one that attempt registered (:mod:`ablate.claims.budget`)."""
    h = check.history
    if h is None:
        return standing
    text, confirmatory = standing.text, standing.confirmatory
    share = h.deciding_share() if check.confirmation else None
    if share is not None and share.changed:
        text += (
            f"; exploratory: a new claim: its {share.changed} changed after the data of the "
            f"attempt it was decided on ({h.attempts[h.deciding].label}), which registered it "
            "otherwise"
        )
        confirmatory = False
    elif share is not None and not share.confirms:  # exploratory, or pending
        text += f"; {share.role}"
        confirmatory = False
    elif share is not None:
        text += f"; decided at its {share.role}"
    if h.margin_changed:
        text += f"; its study-file entry: {h.margin_changed}"
    return Standing(text, confirmatory)
