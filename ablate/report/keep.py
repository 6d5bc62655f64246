"""A committed report is never replaced by a partial one.

A report folder ``reports/<study>/`` is *committed* when git tracks its ``report.md`` or its
``claims.csv`` holds decided claims (any outcome but pending or not testable). A build is
*partial* when not every planned run of the study has finished, or when it decides fewer claims
than the committed report did. A partial build of a committed report goes to
``reports/<study>/partial/`` (git-ignored) and the committed folder stays byte for byte as it
was, so ``make report`` after an interrupted ``make run`` loses no shipped result, and
``reports/claims.md`` (read from every ``<study>/claims.csv``) keeps the committed rows.
``ablate report --force`` replaces it anyway. The next complete build replaces the committed
report and drops ``partial/``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd

from ablate.claims.checks import PENDING, UNTESTED
from ablate.report.index import CLAIMS_CSV

PARTIAL_DIR = "partial"
"""Where a partial build of a committed report goes: ``reports/<study>/partial/``."""


def decided(claims: pd.DataFrame) -> int:
    """How many claims have an outcome (neither pending nor not testable)."""
    if not len(claims) or "outcome" not in claims:
        return 0
    outcome = claims["outcome"].astype(str)
    return int((~(outcome.str.startswith(PENDING) | outcome.str.startswith(UNTESTED))).sum())


def committed_decided(folder: Path) -> int:
    """Decided claims in ``folder/claims.csv`` (0 when it has none or no such file)."""
    path = folder / CLAIMS_CSV
    if not path.is_file():
        return 0
    try:
        return decided(pd.read_csv(path, keep_default_na=False))
    except (OSError, ValueError):
        return 0


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
    when it may be replaced."""
    if not (folder / "report.md").is_file():
        return None
    before, now = committed_decided(folder), decided(claims)
    if partial is None and now >= before:
        return None  # a complete build replaces whatever was there
    is_tracked = tracked(folder / "report.md")
    if not is_tracked and before == 0:
        return None  # an uncommitted report without decided claims: nothing to lose
    kept = "committed in git" if is_tracked else "not in git"
    kept += f", {before} claim(s) decided" if before else ""
    if partial is not None:
        this = partial.split(".")[0].removeprefix("PARTIAL: ")
    else:
        this = f"it decides {now} of the committed {before} claim(s)"
    return f"{kept}; this build is partial: {this}"
