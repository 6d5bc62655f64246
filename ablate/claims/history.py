"""What a reviewer checks beyond the numbers: every confirmation attempt of a study (the store's
and the archived ones), the margin each claim was first committed with, and the order of
registration and runs proven by git ancestry.

* **Attempts** (:func:`study_attempts`): the archived result tables of earlier attempts
  (``reports/<study>/history/*.csv``: one attempt per file; a ``recorded_in`` column names the
  commit that first recorded its rows, which orders it) and the store's confirmation runs, one
  attempt per registration commit, in order of their first start. A claim is decided on the
  latest; its line says "attempt k of n". Alpha is *not* shared across attempts: each attempt
  is tested at the full α = 0.05 (Holm over the study's claims); the earlier attempts are
  listed so a reader can discount a claim that needed several.
* **Margins** (:func:`margin_history`): every committed version of the study YAML, and the
  margin each gave the claim. A margin changed after an earlier attempt makes the verdict say
  so, and the report decides the claim again at the margin first committed.
* **Order** (:func:`order_proof`): a verdict is confirmatory only when the registration commit
  is an ancestor of every deciding run's recorded ``git_commit`` (``git merge-base
  --is-ancestor``), the registration file is the same at each of those commits, and each run's
  tree either was clean (``git_dirty`` false) or ran code whose ``--confirm`` refuses an
  uncommitted registration file (checked in that commit's code). Clock times are a second line.
"""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

HISTORY = "history"
RECORDED_IN = "recorded_in"
ALPHA_ACROSS_ATTEMPTS = (
    "α is not shared across attempts: each attempt is tested at the full α = 0.05 (Holm over "
    "the study's claims) and the earlier ones are listed, not corrected for"
)
LAUNCH_CHECK = "has changes not committed"
"""The words of the check ``ablate run --confirm`` makes before it starts: the registration
file has no uncommitted change (:func:`ablate.claims.registration.commit_problem`). Found in
a run's commit, it proves the registration file was clean in that run's dirty tree."""
NOT_CHECKABLE = "order not checkable here"


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess | None:
    """``git -C cwd args``; None when git is missing or hangs."""
    try:
        return subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _commit_time(cwd: Path, commit: str) -> float:
    out = git(cwd, "show", "-s", "--format=%ct", commit)
    if out is None or out.returncode != 0 or not out.stdout.strip():
        return math.nan
    return float(out.stdout.strip())


# --- attempts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One confirmation attempt: its registration (or where its rows are kept), seeds, runs."""

    label: str
    seeds: tuple[int, ...]
    runs: int
    finished: int
    start: float = math.nan
    """Its first run's start (unix), or the time of the commit that recorded its rows."""
    tag: str = ""
    """The registration commit its runs ran under (store attempts), else ""."""
    archived: bool = False

    def text(self) -> str:
        seeds = ", ".join(map(str, self.seeds)) or "none"
        left = f" ({self.finished} finished, {self.runs - self.finished} not)"
        left = left if self.finished < self.runs else ""
        return f"{self.label}: {self.runs} runs{left}, seeds {seeds}"


def _confirm_rows(df: pd.DataFrame) -> pd.DataFrame:
    if "confirm" not in df:
        return df.iloc[0:0]
    flag = df["confirm"].map(lambda v: v is True or v in (1, 1.0, "True", "true", "1", "1.0"))
    return df[flag]


def history_attempts(folder: Path | None, cwd: Path | None = None) -> list[Attempt]:
    """The archived attempts in ``folder`` (``reports/<study>/history``): one per CSV with
    confirmation rows, ordered by the commit that recorded them (``recorded_in``), those
    without one after."""
    if folder is None or not folder.is_dir():
        return []
    out = []
    for csv in sorted(folder.glob("*.csv")):
        df = pd.read_csv(csv)
        conf = _confirm_rows(df)
        if conf.empty:
            continue
        t = math.nan
        if RECORDED_IN in df and cwd is not None:
            t = _commit_time(cwd, str(df[RECORDED_IN].dropna().iloc[0]))
        done = int(conf["status"].isin(("completed", "diverged")).sum()) if "status" in conf else 0
        seeds = tuple(sorted({int(s) for s in conf["seed"].dropna()}))
        label = f"archived in {folder.name}/{csv.name}"
        out.append(Attempt(label, seeds, len(conf), done, t, archived=True))
    return sorted(out, key=lambda a: (math.isnan(a.start), a.start if a.start == a.start else 0))


def store_attempts(runs: pd.DataFrame) -> list[Attempt]:
    """The store's confirmation attempts, one per registration tag, by first start."""
    if "registration" not in runs:
        return []
    conf = runs[runs["registration"].notna()]
    t = pd.to_datetime(conf.get("started"), utc=True, errors="coerce")
    starts = (t - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    order = starts.groupby(conf["registration"]).min().sort_values(na_position="first")
    out = []
    for tag in order.index:
        g = conf[conf["registration"] == tag]
        name = tag[:7] if len(str(tag)) == 40 else str(tag)
        done = int(g["status"].isin(("completed", "diverged")).sum())
        seeds = tuple(sorted({int(s) for s in g["seed"].dropna()}))
        out.append(Attempt(f"under {name}", seeds, len(g), done, float(order[tag]), str(tag)))
    return out


def study_attempts(study) -> list[Attempt]:
    """Every confirmation attempt of ``study``, oldest first: the archived ones
    (``study.extra["history_dir"]``, set by the report) before the store's (archived attempts
    predate the store's registration files)."""
    folder = study.extra.get("history_dir") if isinstance(study.extra, dict) else None
    cwd = study.yaml_path.parent if study.yaml_path is not None else None
    return history_attempts(Path(folder) if folder else None, cwd) + store_attempts(study.runs)


def attempt_text(k: int, attempts: list[Attempt]) -> str:
    """``attempt 3 of 3 (earlier: ...; α not shared ...)``."""
    n = len(attempts)
    if n <= 1:
        return "attempt 1 of 1"
    earlier = "; ".join(a.text() for a in attempts[: k - 1])
    return f"attempt {k} of {n} (earlier: {earlier}; α not shared across attempts)"


# --- margins -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MarginVersion:
    commit: str
    time: float
    margin: float


def margin_history(
    yaml_path: Path | None, claim_id: str, default: float = 0.01
) -> list[MarginVersion]:
    """The claim's margin as first committed, then each commit that changed it (against its
    first parent), oldest first; empty outside git."""
    if yaml_path is None or not Path(yaml_path).is_file():
        return []
    path = Path(yaml_path)
    log = git(path.parent, "log", "--follow", "--name-only", "--format=@@%H %ct", "--", path.name)
    if log is None or log.returncode != 0:
        return []
    entries: list[list[str]] = []
    for line in log.stdout.splitlines():
        if line.startswith("@@"):
            entries.append([*line[2:].split(" ", 1), ""])
        elif line.strip() and entries:
            entries[-1][2] = line.strip()
    top = git(path.parent, "rev-parse", "--show-toplevel")
    root = Path(top.stdout.strip()) if top is not None and top.returncode == 0 else path.parent

    def margin_at(rev: str) -> float | None:
        shown = git(root, "show", rev)
        try:
            data = yaml.safe_load(shown.stdout) if shown and shown.returncode == 0 else None
        except yaml.YAMLError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
            return None
        entry = next(
            (c for c in data["claims"] if isinstance(c, dict) and c.get("id") == claim_id), None
        )
        if entry is None:
            return None
        try:
            return float(entry.get("margin", data.get("equivalence_margin", default)))
        except (TypeError, ValueError):
            return None

    # a change is a commit whose margin differs from its first parent's (parallel branches
    # interleave in time; only a commit that changes the margin counts)
    first: MarginVersion | None = None
    changes: list[MarginVersion] = []
    for commit, t, name in reversed(entries):
        now = margin_at(f"{commit}:{name}")
        if now is None:
            continue
        if first is None:
            first = MarginVersion(commit, float(t), now)
            continue
        before = margin_at(f"{commit}^:{name}")
        if before is not None and before != now:
            changes.append(MarginVersion(commit, float(t), now))
    return ([first] if first else []) + sorted(changes, key=lambda m: m.time)


# --- a margin against the gap the claim quotes ---------------------------------------------

CLOSER = "closer than the paper's gap"
_PAIR = r"(\d+(?:\.\d+)?)\s*vs\.?\s*(\d+(?:\.\d+)?)\s*(log-ppl|ppl)"


def quoted_gap(text: str) -> float | None:
    """The largest gap, in nats, between two numbers the claim's text quotes as ``a vs b ppl``
    (|ln a - ln b|) or ``a vs b log-ppl`` (|a - b|); None when it quotes none."""
    import re

    gaps = []
    for a, b, unit in re.findall(_PAIR, text):
        x, y = float(a), float(b)
        if unit == "ppl" and x > 0 and y > 0:
            gaps.append(abs(math.log(x) - math.log(y)))
        elif unit == "log-ppl":
            gaps.append(abs(x - y))
    return max(gaps) if gaps else None


def margin_gap_problem(claim, margin: float) -> str:
    """Why an equivalence claim's margin is narrower than the gap its text quotes without
    saying so ("" when it is not): by such a test the paper's own numbers would differ."""
    if claim.expect != "equivalent":
        return ""
    gap = quoted_gap(claim.text)
    if gap is None or margin >= gap or CLOSER in claim.text:
        return ""
    return (
        f"the margin ±{margin:g} is narrower than the gap the claim quotes ({gap:.3f} nats): "
        "by this test the paper's own numbers would differ, and the text does not say "
        f'"{CLOSER}" or why'
    )


# --- order ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OrderProof:
    """Whether git proves the registration precedes every deciding run, in words."""

    ok: bool | None
    """True proven, False disproven, None not checkable here."""
    text: str
    dirty: int = 0
    """How many deciding runs ran from a dirty tree."""


def order_proof(reg_path: Path, reg_commit: str, runs: pd.DataFrame) -> OrderProof:
    """The git-ancestry proof that ``reg_commit`` (the registration of ``reg_path``) precedes
    every run of ``runs`` (their recorded ``git_commit`` / ``git_dirty``), module doc."""
    cwd = reg_path.parent
    if "git_commit" not in runs or runs["git_commit"].isna().all():
        return OrderProof(None, f"{NOT_CHECKABLE}: the runs recorded no git commit")
    inside = git(cwd, "rev-parse", "--is-inside-work-tree")
    if inside is None or inside.returncode != 0:
        return OrderProof(None, f"{NOT_CHECKABLE}: {cwd} is not a git checkout")
    top = git(cwd, "rev-parse", "--show-toplevel")
    rel = reg_path.resolve().relative_to(Path(top.stdout.strip()).resolve()).as_posix()
    unrecorded = int(runs["git_commit"].isna().sum())
    commits = sorted(set(runs["git_commit"].dropna().astype(str)))
    dirty_flags = runs.get("git_dirty", pd.Series(False, index=runs.index))
    dirty = runs[dirty_flags.map(lambda v: v is True or v in ("True", "true", 1))]
    problems, missing = [], []
    for c in commits:
        res = git(cwd, "merge-base", "--is-ancestor", reg_commit, c)
        if res is None or res.returncode not in (0, 1):
            missing.append(c[:7])
        elif res.returncode == 1:
            problems.append(f"{reg_commit[:7]} is NOT an ancestor of {c[:7]}")
        else:
            same = git(cwd, "diff", "--quiet", reg_commit, c, "--", rel)
            if same is None or same.returncode != 0:
                problems.append(f"the registration file differs at {c[:7]}")
    for c in sorted(set(dirty["git_commit"].dropna().astype(str))):
        if c[:7] in missing:
            continue
        check = git(cwd, "grep", "-q", LAUNCH_CHECK, c, "--", ":(top)ablate")
        if check is None or check.returncode != 0:
            problems.append(
                f"runs at {c[:7]} ran from a dirty tree and that code does not refuse an "
                "uncommitted registration file"
            )
    n, names = len(runs), ", ".join(c[:7] for c in commits)
    dirty_text = ""
    if len(dirty):
        dirty_text = (
            f"; {len(dirty)} of {n} ran from a DIRTY tree (uncommitted changes to tracked "
            "files, not recorded): the registration file was clean in it, since `ablate run "
            "--confirm` at that commit refuses to start otherwise"
        )
    if problems:
        return OrderProof(False, "git does not prove the order: " + "; ".join(problems), len(dirty))
    if missing or unrecorded:
        why = f"commit(s) {', '.join(missing)} not in this repository" if missing else ""
        why += ("; " if why and unrecorded else "") + (
            f"{unrecorded} run(s) recorded no commit" if unrecorded else ""
        )
        return OrderProof(None, f"{NOT_CHECKABLE}: {why}", len(dirty))
    return OrderProof(
        True,
        f"git: {reg_commit[:7]} is an ancestor of the commit of every one of the {n} deciding "
        f"runs ({names}) and the registration file is unchanged there{dirty_text}",
        len(dirty),
    )


@dataclass
class ClaimHistory:
    """A claim's attempts, margins and order proof, as its line reports them."""

    attempt: int = 1
    attempts: list[Attempt] = field(default_factory=list)
    margins: list[MarginVersion] = field(default_factory=list)
    margin_changed: str = ""
    """Words when the margin changed after an earlier attempt, else ""."""

    def attempt_text(self) -> str:
        return attempt_text(self.attempt, self.attempts)


def claim_history(study, claim, deciding: pd.DataFrame | None) -> ClaimHistory:
    """The claim's :class:`ClaimHistory`: which attempt decided it (the latest with runs of
    it), its margins in git, and whether the margin changed after an earlier attempt."""
    attempts = study_attempts(study)
    tags = set()
    if deciding is not None and "registration" in deciding:
        tags = set(deciding["registration"].dropna().astype(str))
    k = len(attempts)
    for i, a in enumerate(attempts, 1):
        if a.tag and a.tag in tags:
            k = i
    margins = []
    if not claim.parts and claim.expect in ("better", "worse", "equivalent"):  # margin used
        margins = margin_history(study.yaml_path, claim.id, study.equivalence_margin)
    out = ClaimHistory(max(k, 1), attempts, margins)
    if len(margins) > 1:
        change = margins[-1]
        before = [a for a in attempts[: k - 1] if not (a.start >= change.time)]
        if before:
            out.margin_changed = (
                f"margin changed from ±{margins[0].margin:g} (first committed in "
                f"{margins[0].commit[:7]}) to ±{change.margin:g} in {change.commit[:7]}, "
                f"AFTER an earlier confirmation attempt ({before[-1].text()})"
            )
        else:
            out.margin_changed = (
                f"margin changed from ±{margins[0].margin:g} ({margins[0].commit[:7]}) to "
                f"±{change.margin:g} ({change.commit[:7]}) before any confirmation attempt"
            )
    return out
