"""``<store>/<study>/claims_registration.json``: when each of a study's claims was registered.

Written by ``ablate run`` before any run trains (:func:`record_registration`), atomically::

    {"registered_at": 1717000000.0,          # when the store first recorded the claims
     "first_run_at": 1717000012.5,           # the study's earliest run start (null: none yet)
     "claims": {"post-needs-warmup": {
         "fingerprint": "<sha256 of the claim's canonical JSON>",
         "registered_at": 1717000000.0,      # when this fingerprint was first seen
         "history": [{"fingerprint": "...", "registered_at": ...}],   # earlier versions, newest
                                             # first (only when the claim was edited)
         "removed_at": 1717100000.0}}}       # only when the claim left the study YAML

A claim reads "registered before its runs" when its ``registered_at`` precedes ``first_run_at``
(or there is no run yet), and "written after runs were seen" otherwise: a store that already had
runs when the file was first written (every study run before registration existed) registers
its claims *now*, after ``first_run_at``. Editing a claim is allowed and visible: its new
fingerprint gets a new ``registered_at`` and the old one moves to ``history``.

Pure store bookkeeping: the fingerprints come from the caller
(:func:`ablate.study.claims.claim_fingerprint`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from ablate.store.rundir import RunStore, atomic_write_json, read_json

REGISTRATION_FILE = "claims_registration.json"


def registration_path(store: str | Path, study: str) -> Path:
    return Path(store) / study / REGISTRATION_FILE


def read_registration(path: Path) -> dict[str, Any] | None:
    """The registration record at ``path``; None when missing or unreadable."""
    data = read_json(path)
    if data is None or not isinstance(data.get("claims"), dict):
        return None
    return data


def first_run_start(store: str | Path, study: str) -> float | None:
    """The earliest start of any run of ``study`` (its summary's ``attempts[0].started``; a run
    without one counts from its ``run.yaml``'s modification time); None when there is no run."""
    starts = []
    for run in RunStore(store).runs(study):
        attempts = (run.read_summary() or {}).get("attempts")
        first = attempts[0] if isinstance(attempts, list) and attempts else {}
        t = first.get("started") if isinstance(first, dict) else None
        if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t):
            starts.append(float(t))
        else:
            try:
                starts.append(run.run_file.stat().st_mtime)
            except OSError:
                continue
    return min(starts) if starts else None


def updated_registration(
    old: dict[str, Any] | None,
    fingerprints: dict[str, str],
    first_run_at: float | None,
    now: float,
) -> dict[str, Any]:
    """The record after seeing the study's claims (``id -> fingerprint``) at time ``now``."""
    rec = {
        "registered_at": now,
        "first_run_at": first_run_at,
        "claims": {},
    }
    if old is not None:
        rec = {**old, "claims": {k: dict(v) for k, v in old["claims"].items()}}
        if rec.get("first_run_at") is None:
            rec["first_run_at"] = first_run_at
    claims = rec["claims"]
    for cid, fp in fingerprints.items():
        entry = claims.get(cid)
        if not isinstance(entry, dict):
            claims[cid] = {"fingerprint": fp, "registered_at": now}
        elif entry.get("fingerprint") != fp or "removed_at" in entry:
            keys = ("fingerprint", "registered_at", "removed_at")
            prior = {k: entry[k] for k in keys if k in entry}
            history = entry.get("history") if isinstance(entry.get("history"), list) else []
            claims[cid] = {"fingerprint": fp, "registered_at": now, "history": [prior, *history]}
    for cid, entry in claims.items():
        if cid not in fingerprints and isinstance(entry, dict) and "removed_at" not in entry:
            entry["removed_at"] = now
    return rec


def record_registration(
    store: str | Path, study: str, fingerprints: dict[str, str], now: float | None = None
) -> dict[str, Any]:
    """Register ``study``'s claims in the store (see the module doc); written only when
    something changed. Returns the record."""
    path = registration_path(store, study)
    old = read_registration(path)
    now = time.time() if now is None else now
    rec = updated_registration(old, fingerprints, first_run_start(store, study), now)
    if rec != old:
        atomic_write_json(path, rec)
    return rec
