"""When were a study's claims written: before its runs (confirmatory) or after (exploratory)?

``ablate run`` records, at a study's first run, ``<store>/<study>/claims_registration.json``::

    {"registered_at": <unix time>, "first_run_at": <unix time or null>,
     "claims": {"<claim id>": {"fingerprint": "<sha256 of the claim's canonical JSON>",
                               "registered_at": <unix time>, ...}}}

A claim added or edited later gets its own later ``registered_at``. This module only reads it
(and the runs' start times, when the record has no ``first_run_at``) and words each claim's
standing for the report (:func:`claim_registration`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.store import RunStore

REGISTRATION_FILE = "claims_registration.json"
BEFORE = "registered before its runs"
BEFORE_CONFIRM = "registered before its confirmation runs"
AFTER = "written after runs were seen (exploratory)"
EDITED = "edited since it was registered (exploratory until re-registered by a run)"
UNREGISTERED = "not registered (no registration record: treat as exploratory)"


def _time(v: Any) -> float | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def read_registration(study_dir: Path) -> dict[str, Any] | None:
    """The study's registration record; None when missing, unreadable or malformed."""
    try:
        data = json.loads((Path(study_dir) / REGISTRATION_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
        return None
    return data


def first_run_start(study_dir: Path, only: set[str] | None = None) -> float | None:
    """The earliest start of any run of the study (its summary's ``attempts[0].started``), or
    of the runs whose ids are in ``only``."""
    study_dir = Path(study_dir)
    starts = []
    for run in RunStore(study_dir.parent).runs(study_dir.name):
        if only is not None and run.run_id not in only:
            continue
        attempts = (run.read_summary() or {}).get("attempts")
        first = attempts[0] if isinstance(attempts, list) and attempts else {}
        t = _time(first.get("started")) if isinstance(first, dict) else None
        if t is not None:
            starts.append(t)
    return min(starts) if starts else None


@dataclass(frozen=True)
class Registration:
    """A claim's standing: ``status`` (one of the module's labels) and whether it is
    confirmatory (registered before the runs it is decided on)."""

    status: str
    confirmatory: bool
    registered_at: float | None = None


def claim_registration(
    claim_id: str,
    record: dict[str, Any] | None,
    first_run_at: float | None,
    fingerprint: str | None = None,
    confirm_start: float | None = None,
) -> Registration:
    """Registered before its runs when the claim's ``registered_at`` is at or before the
    study's first run (``record["first_run_at"]``, else ``first_run_at`` from the store; no run
    yet counts as before); or, for a claim decided on confirmation runs, at or before the first
    of those (``confirm_start``): fresh seeds confirm a claim written after the first runs.
    ``fingerprint`` (the claim as it is now), when given, must match the registered one, else
    the claim was edited since."""
    entry = (record or {}).get("claims", {}).get(claim_id) if record else None
    if not isinstance(entry, dict) or _time(entry.get("registered_at")) is None:
        return Registration(UNREGISTERED, False)
    at = _time(entry["registered_at"])
    if fingerprint is not None and entry.get("fingerprint") not in (None, fingerprint):
        return Registration(EDITED, False, at)
    first = _time(record.get("first_run_at"))
    first = first if first is not None else first_run_at
    if first is None or at <= first:
        return Registration(BEFORE, True, at)
    if confirm_start is not None and at <= confirm_start:
        return Registration(BEFORE_CONFIRM, True, at)
    return Registration(AFTER, False, at)
