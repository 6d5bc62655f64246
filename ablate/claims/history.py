"""What a reviewer checks beyond the numbers: every confirmation attempt of a study (the store's
and the archived ones), the margin each claim was first committed with, and the order of
registration and runs proven by git ancestry.

* **Attempts** (:func:`study_attempts`): the archived result tables of earlier attempts
  (``reports/<study>/history/*.csv``: one attempt per file; a ``recorded_in`` column names the
  commit that first recorded its rows, which orders it; a table without confirmation runs is
  an exploratory look at the claims, e.g. an early ``run until-decided``) and the store's
  confirmation runs, one attempt per registration commit, in order of their first start. A
  claim is decided on the latest; its line says "attempt k of n" and what each earlier one
  gave (:mod:`ablate.claims.attempts` decides them), each at the α share of the claim's one
  budget it spends (:mod:`ablate.claims.budget`: the first registration fixes how α is spread
  over attempts; an attempt without a share is exploratory).
* **Text, margins and metrics** (:func:`margin_history`): every committed version of the study
  YAML, and the text, margin and metric each gave the claim, in words beside its attempts
  (a claim changed after an attempt's data is a new claim: :mod:`ablate.claims.budget`).
* **Order** (:func:`order_proof`): a verdict is confirmatory only when the registration commit
  is an ancestor of every deciding run's recorded commit (``study_commit``, the repository of
  the study and its registration; ``git_commit`` for runs from before ablate recorded it;
  ``git merge-base --is-ancestor``), the registration file is the same at each of those
  commits, and each run's study, registration and plugin files were as committed
  (``study_dirty`` false; for older runs, which recorded only whether ablate's whole tree was
  dirty, that they ran code whose ``run confirm`` refuses an uncommitted registration file).
  **Inputs** (:func:`inputs_proof`): the deciding runs are the runs the registration defined
  (its pinned digest). An older registration, without ``inputs:``, pinned its claims and
  design only and keeps that meaning: the line says whether the study file changed from the
  registration commit to the runs' commit, and a change does not undo it. Clock times are a
  second line.
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
LAUNCH_CHECK = "has changes not committed"
"""The words of the check ``ablate run confirm`` makes before it starts: the registration
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
    rows: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    """Its runs (an archived table's rows), for deciding the claims on them; None for the
    store's attempts (their runs are the study's runs under ``tag``)."""
    exploratory: bool = False
    """An exploratory look at the claims (an archived table without confirmation runs)."""

    def text(self) -> str:
        seeds = ", ".join(map(str, self.seeds)) or "none"
        left = f" ({self.finished} finished, {self.runs - self.finished} not)"
        left = left if self.finished < self.runs else ""
        look = "an exploratory look, " if self.exploratory else ""
        return f"{self.label}: {look}{self.runs} runs{left}, seeds {seeds}"


def _confirm_rows(df: pd.DataFrame) -> pd.DataFrame:
    if "confirm" not in df:
        return df.iloc[0:0]
    flag = df["confirm"].map(lambda v: v is True or v in (1, 1.0, "True", "true", "1", "1.0"))
    return df[flag]


def history_attempts(
    folder: Path | None, cwd: Path | None = None, before: float = math.nan
) -> list[Attempt]:
    """The archived attempts in ``folder`` (``reports/<study>/history``): one per CSV with
    confirmation rows, ordered by the commit that recorded them (``recorded_in``); one
    without it dates from ``before`` (a time its runs are known to precede), else after."""
    if folder is None or not folder.is_dir():
        return []
    out = []
    for csv in sorted(folder.glob("*.csv")):
        df = pd.read_csv(csv)
        conf = _confirm_rows(df)
        look = conf.empty  # no confirmation runs: an exploratory look at the claims
        conf = df if look else conf
        t = before
        if RECORDED_IN in df and cwd is not None:
            t = _commit_time(cwd, str(df[RECORDED_IN].dropna().iloc[0]))
        done = int(conf["status"].isin(("completed", "diverged")).sum()) if "status" in conf else 0
        seeds = tuple(sorted({int(s) for s in conf["seed"].dropna()}))
        label = f"archived in {folder.name}/{csv.name}"
        out.append(Attempt(label, seeds, len(conf), done, t, "", True, conf, look))
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
    (``study.history_dir``, set by the report) before the store's (archived attempts
    predate the store's registration files)."""
    folder = study.history_dir
    cwd = study.yaml_path.parent if study.yaml_path is not None else None
    before = math.nan
    if study.yaml_path is not None:  # their runs predate the first registration file
        from ablate.claims.registration import git_versions, registration_path

        versions = git_versions(registration_path(study.yaml_path, getattr(study, "profile", None)))
        before = versions[0].time - 1 if versions else math.nan
    archived = history_attempts(Path(folder) if folder else None, cwd, before)
    return archived + store_attempts(study.runs)


def attempt_text(
    k: int,
    attempts: list[Attempt],
    gave: list[str] | None = None,
    shares: list | None = None,
    budget: object | None = None,
) -> str:
    """``attempt 3 of 3; α budget: ...; this attempt: α=0.025 (...); earlier: ...: its α →
    what it gave``; ``gave``: what each earlier attempt gave the claim, ``shares``: what each
    attempt spends of its budget (:class:`ablate.claims.budget.Share`), in the same order."""
    n = len(attempts)
    roles = [s.role for s in shares or []] + [""] * n
    said = list(gave or []) + [""] * n
    head = f"attempt {k} of {max(n, 1)}"
    if budget is not None:
        head += f"; α budget: {budget.text()}"
    if roles[k - 1]:
        head += f"; this attempt: {roles[k - 1]}"
    if n <= 1:
        return head
    earlier = "; ".join(
        a.text() + (f": {roles[i]}" if roles[i] else "") + (f" → {said[i]}" if said[i] else "")
        for i, a in enumerate(attempts[: k - 1])
    )
    return f"{head} (earlier: {earlier})" if earlier else head


# --- margins -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MarginVersion:
    """The claim's margin, metric and text as one commit of the study file states them."""

    commit: str
    time: float
    margin: float
    metric: str = "final_val_loss"
    text: str = ""

    def changes(self, before: MarginVersion) -> str:
        """What this version changed against ``before``, in words: ``margin ±0.01 → ±0.03``."""
        out = []
        if self.text != before.text:
            out.append("text")
        if self.margin != before.margin:
            out.append(f"margin ±{before.margin:g} → ±{self.margin:g}")
        if self.metric != before.metric:
            out.append(f"metric {before.metric} → {self.metric}")
        return ", ".join(out)


def margin_history(
    yaml_path: Path | None, claim_id: str, default: float = 0.01, profile: str | None = None
) -> list[MarginVersion]:
    """The claim's margin, metric and text as first committed, then each commit that changed
    one (against its first parent), oldest first; empty outside git. ``profile``: its
    ``claims:`` replacements apply (a profile may measure a claim another way)."""
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

    def margin_at(rev: str) -> tuple[float, str, str] | None:
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
        prof = ((data.get("profiles") or {}).get(profile) or {}) if profile else {}
        over = ((prof.get("claims") if isinstance(prof, dict) else None) or {}).get(claim_id)
        entry = {**entry, **over} if isinstance(over, dict) else entry
        margin = entry.get("margin", data.get("equivalence_margin"))
        text = " ".join(str(entry.get("text") or "").split())
        try:
            return (
                float(default if margin is None else margin),
                str(entry.get("metric") or "final_val_loss"),
                text,
            )
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
            first = MarginVersion(commit, float(t), *now)
            continue
        before = margin_at(f"{commit}^:{name}")
        if before is not None and before != now:
            changes.append(MarginVersion(commit, float(t), *now))
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
    commits: list[str] = field(default_factory=list)
    """The deciding runs' commits (a proven order)."""


def order_proof(reg_path: Path, reg_commit: str, runs: pd.DataFrame) -> OrderProof:
    """The git-ancestry proof that ``reg_commit`` (the registration of ``reg_path``) precedes
    every run of ``runs`` (their recorded commit and dirty flag, :func:`proof_columns`),
    module doc."""
    cwd = reg_path.parent
    commit_col, dirty_col, own = proof_columns(runs)
    if commit_col.isna().all():
        return OrderProof(None, f"{NOT_CHECKABLE}: the runs recorded no git commit")
    inside = git(cwd, "rev-parse", "--is-inside-work-tree")
    if inside is None or inside.returncode != 0:
        return OrderProof(None, f"{NOT_CHECKABLE}: {cwd} is not a git checkout")
    top = git(cwd, "rev-parse", "--show-toplevel")
    rel = reg_path.resolve().relative_to(Path(top.stdout.strip()).resolve()).as_posix()
    unrecorded = int(commit_col.isna().sum())
    commits = sorted(set(commit_col.dropna().astype(str)))
    dirty = runs[dirty_col.map(_truthy)]
    dirty_commits = sorted(set(commit_col[dirty.index].dropna().astype(str)))
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
    if own and len(dirty):  # the study, its registration or a plugin not as committed
        problems.append(
            f"{len(dirty)} run(s) ran with the study file, its registration or a plugin not as "
            "committed (study_dirty)"
        )
    for c in [] if own else dirty_commits:
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
    if len(dirty) and not own:
        dirty_text = (
            f"; {len(dirty)} of {n} ran from a DIRTY tree (uncommitted changes to tracked "
            "files, not recorded): the registration file was clean in it, since `ablate run "
            "confirm` at that commit refuses to start otherwise; whether the study file was "
            "is not recorded (runs from before ablate recorded study_dirty)"
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
        commits,
    )


def proof_columns(runs: pd.DataFrame) -> tuple[pd.Series, pd.Series, bool]:
    """(each run's commit for the proof, whether its inputs were dirty, whether that flag is
    the study's own): the commit of the study's repository (``study_commit``, where the
    registration is committed) and ``study_dirty`` where a run recorded them, else ablate's
    checkout (``git_commit``, ``git_dirty``: runs from before ablate recorded the study's)."""
    none = pd.Series(None, index=runs.index, dtype=object)
    commit = runs["git_commit"] if "git_commit" in runs else none
    dirty = runs["git_dirty"] if "git_dirty" in runs else pd.Series(False, index=runs.index)
    if "study_commit" in runs and runs["study_commit"].notna().any():
        commit = runs["study_commit"].where(runs["study_commit"].notna(), commit)
        own = runs["study_dirty"] if "study_dirty" in runs else none
        return commit, own.where(own.notna(), dirty), True
    return commit, dirty, False


def _truthy(v) -> bool:
    return v is True or v in ("True", "true", 1, 1.0)


def inputs_proof(
    cwd: Path,
    reg_commit: str,
    pinned: dict | None,
    commits: list[str],
    attempt_ids: list[str],
    study_rel: str,
) -> OrderProof:
    """Whether the deciding runs are the runs the registration defined: with its pinned
    ``inputs`` (:func:`ablate.claims.registration.inputs_record`), the study file at every
    deciding commit has the pinned sha256 and the attempt's confirmation runs at the registered
    seeds have the pinned ids. A registration from before pins keeps its original meaning: it
    pinned the claims and the design, which the order proof checks, so it holds; the line says
    whether the study file changed from the registration commit to the deciding commits."""
    import hashlib

    from ablate.claims.registration import NOT_PINNED, runs_digest

    if not isinstance(pinned, dict):
        changed = []
        for c in commits:
            res = git(cwd, "diff", "--quiet", reg_commit, c, "--", f":(top){study_rel}")
            if res is None or res.returncode not in (0, 1):
                return OrderProof(None, f"{NOT_CHECKABLE}: commit {c[:7]} not here")
            if res.returncode == 1:
                changed.append(c[:7])
        if changed:
            return OrderProof(
                True,
                f"{NOT_PINNED}: it pinned its claims and design only; the study file changed "
                f"from {reg_commit[:7]} to {', '.join(changed)}",
            )
        return OrderProof(
            True,
            f"the study file is unchanged from {reg_commit[:7]} to the runs' commit; {NOT_PINNED}",
        )
    study = pinned.get("study") or {}
    for c in commits:
        shown = subprocess.run(
            ["git", "-C", str(cwd), "show", f"{c}:{study.get('file')}"],
            capture_output=True,
            timeout=30,
        )
        if shown.returncode != 0:
            return OrderProof(None, f"{NOT_CHECKABLE}: {study.get('file')} not at {c[:7]}")
        if hashlib.sha256(shown.stdout).hexdigest() != study.get("sha256"):
            return OrderProof(False, f"{study.get('file')} at {c[:7]} is not the registered one")
    runs = pinned.get("runs") or {}
    if runs_digest(attempt_ids) != runs.get("sha256"):
        return OrderProof(
            False,
            f"the confirmation runs ({len(attempt_ids)}) are not the {runs.get('count')} "
            "registered ones (their ids differ from the pinned digest)",
        )
    return OrderProof(
        True,
        f"inputs as registered: {study.get('file')} at the runs' commit and the ids of the "
        f"{len(attempt_ids)} confirmation runs match the digest pinned in the registration "
        f"({str(pinned.get('digest'))[:12]})",
    )


@dataclass
class ClaimHistory:
    """A claim's attempts, what each spends of its α budget, its committed versions and what
    each earlier attempt gave it, as its line reports them."""

    attempt: int = 1
    """The attempt that decided it, counted from 1 (the last when none did)."""
    attempts: list[Attempt] = field(default_factory=list)
    deciding: int | None = None
    """Index in ``attempts`` of the attempt whose confirmation runs decided it (None: decided
    on runs of no attempt)."""
    margins: list[MarginVersion] = field(default_factory=list)
    margin_changed: str = ""
    """Words when its text, margin or metric changed since first committed, else ""."""
    earlier: list[str] = field(default_factory=list)
    """Each earlier attempt with what it gave this claim (outcome and p), oldest first."""
    budget: object | None = None
    """Its α budget (:class:`ablate.claims.budget.Budget`), when the report computed it."""
    shares: list = field(default_factory=list)
    """What each attempt spends of it (:class:`ablate.claims.budget.Share`), as ``attempts``."""

    def attempt_text(self) -> str:
        return attempt_text(self.attempt, self.attempts, self.earlier, self.shares, self.budget)

    def rows(self, outcome: str = "") -> list[dict]:
        """Every attempt as data, oldest first: its label, seeds, runs (finished), the α it
        spends of this claim's budget (None: none), that share's words, and what it gave the
        claim (``outcome`` for the deciding one; "" where nothing was decided)."""
        out = []
        for i, a in enumerate(self.attempts):
            share = self.shares[i] if i < len(self.shares) else None
            gave = self.earlier[i] if i < len(self.earlier) else ""
            out.append(
                {
                    "attempt": i + 1,
                    "label": a.label,
                    "seeds": list(a.seeds),
                    "runs": a.runs,
                    "finished": a.finished,
                    "alpha": None if share is None else share.alpha,
                    "share": "" if share is None else share.role,
                    "outcome": outcome if i == self.deciding else gave,
                }
            )
        return out

    def deciding_share(self):
        """The deciding attempt's :class:`~ablate.claims.budget.Share` (None: no attempt)."""
        if self.deciding is None or self.deciding >= len(self.shares):
            return None
        return self.shares[self.deciding]


def claim_history(study, claim, deciding: pd.DataFrame | None) -> ClaimHistory:
    """The claim's :class:`ClaimHistory` without its budget: which attempt decided it (the
    latest with runs of it), and its committed versions in git, in words."""
    attempts = study_attempts(study)
    tags = set()
    if deciding is not None and "registration" in deciding:
        tags = set(deciding["registration"].dropna().astype(str))
    k, index = len(attempts), None
    for i, a in enumerate(attempts):
        if a.tag and a.tag in tags:
            k, index = i + 1, i
    margins = []
    if not claim.parts:
        margins = margin_history(
            study.yaml_path, claim.id, study.equivalence_margin, getattr(study, "profile", None)
        )
    out = ClaimHistory(max(k, 1), attempts, index, margins)
    steps = []
    for before, now in zip(margins, margins[1:], strict=False):
        seen = [a for a in attempts if a.start < now.time]
        when = f"after the data of the attempt {seen[-1].label}" if seen else "before any attempt"
        steps.append(f"{now.changes(before)} in {now.commit[:7]}, {when}")
    if steps:
        out.margin_changed = (
            f"first committed in {margins[0].commit[:7]}; changed: {'; '.join(steps)} (a change "
            "after an attempt's data makes it a new claim: that attempt never confirms it)"
        )
    return out
