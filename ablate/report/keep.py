"""A committed report is never replaced by a partial one.

A report folder ``reports/<study>/`` is *committed* when git tracks its ``report.md`` or its
``claims.csv`` holds decided claims (any outcome but pending or not testable). A build is
*partial* when not every planned run of the study has finished, or when it decides fewer claims
than the committed report did. A partial build of a committed report goes to
``reports/<study>/partial/`` (git-ignored) and the committed folder stays byte for byte as it
was, so ``make report`` after an interrupted ``make run`` loses no shipped result, and
``reports/claims.md`` (read from every ``<study>/claims.csv``) keeps the committed rows. A build
that proves fewer claims confirmatory than the committed report (a study whose registration
this command could not reach) is kept apart the same way.
``ablate report --force`` replaces it anyway. The next complete build replaces the committed
report and drops ``partial/``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd

from ablate.claims.checks import PENDING, UNTESTED
from ablate.claims.history import NOT_CHECKABLE
from ablate.report.index import CLAIMS_CSV

PARTIAL_DIR = "partial"
"""Where a partial build of a committed report goes: ``reports/<study>/partial/``."""


def decided(claims: pd.DataFrame) -> int:
    """How many claims have an outcome (neither pending nor not testable)."""
    if not len(claims) or "outcome" not in claims:
        return 0
    outcome = claims["outcome"].astype(str)
    return int((~(outcome.str.startswith(PENDING) | outcome.str.startswith(UNTESTED))).sum())


def confirmatory(claims: pd.DataFrame) -> int:
    """How many claims are confirmatory (their registration proven by git)."""
    if not len(claims) or "confirmatory" not in claims:
        return 0
    return int(claims["confirmatory"].astype(str).str.strip().str.lower().eq("true").sum())


def unprovable(claims: pd.DataFrame) -> bool:
    """Whether some claim's registration could not be checked from here (no registration file
    found, not a git checkout, commits missing): the build knows less, it proves nothing new."""
    if not len(claims) or "registration" not in claims:
        return False
    return bool(claims["registration"].astype(str).str.contains(NOT_CHECKABLE).any())


def committed_counts(folder: Path) -> tuple[int, int]:
    """(decided, confirmatory) claims in ``folder/claims.csv`` (0, 0 without one)."""
    path = folder / CLAIMS_CSV
    if not path.is_file():
        return 0, 0
    try:
        frame = pd.read_csv(path, keep_default_na=False)
    except (OSError, ValueError):
        return 0, 0
    return decided(frame), confirmatory(frame)


def tracked(path: Path) -> bool:
    """Whether git tracks ``path`` (False outside a checkout or without git)."""
    if not path.parent.is_dir():
        return False
    try:
        res = subprocess.run(
            ["git", "-C", str(path.parent), "ls-files", "--error-unmatch", path.name],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0


def keep_reason(folder: Path, partial: str | None, claims: pd.DataFrame) -> str | None:
    """Why the report in ``folder`` must not be replaced by a build whose progress line is
    ``partial`` (None when every planned run finished) and whose claims are ``claims``; None
    when it may be replaced. A build that proves fewer claims confirmatory than the committed
    one because it cannot check their order from here (no registration found, not a git
    checkout) counts as partial too; one that git disproves replaces it."""
    if not (folder / "report.md").is_file():
        return None
    (before, proven), now = committed_counts(folder), decided(claims)
    # fewer proven because this build cannot check the order (not because git disproves it)
    fewer = confirmatory(claims) < proven and unprovable(claims)
    if partial is None and now >= before and not fewer:
        return None  # a complete build replaces whatever was there
    is_tracked = tracked(folder / "report.md")
    if not is_tracked and before == 0:
        return None  # an uncommitted report without decided claims: nothing to lose
    kept = "committed in git" if is_tracked else "not in git"
    kept += f", {before} claim(s) decided" if before else ""
    if partial is not None:
        this = partial.split(".")[0].removeprefix("PARTIAL: ")
    elif now < before:
        this = f"it decides {now} of the committed {before} claim(s)"
    else:
        this = (
            f"it proves {confirmatory(claims)} of the committed {proven} confirmatory claim(s) "
            "(is the study's registration reachable from here?)"
        )
    return f"{kept}; this build is partial: {this}"
