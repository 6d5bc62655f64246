"""Run states and damaged run directories: what state a run is in, read without writing, and
which file of a damaged run cannot be read, and why.

A store outlives disks, editors and copies; a run whose ``run.yaml``, ``summary.json`` or
``metrics.csv`` is damaged (binary bytes, a JSON list where a mapping belongs, a non-numeric
loss) is reported by ``ablate status`` and ``ablate report`` as *damaged* with the path and the
reason, and skipped, so the rest of the study still reports. ``ablate run`` retrains such a run
only when its summary is unreadable (then the run's state is unknown); a finished run with a
damaged ``metrics.csv`` keeps its result.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

from ablate.store.rundir import STATUSES, SUMMARY_NUMBERS, RunDir

DAMAGED = "damaged"

NUMERIC_FIELDS = SUMMARY_NUMBERS  # summary fields that must be numbers (or null) when present


def _text(path: Path) -> str:
    """The file as UTF-8 text; ``ValueError`` naming the first bad byte."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})"
        ) from None


def _kind(obj: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(obj), type(obj).__name__
    )


def _check_run_yaml(path: Path) -> None:
    try:
        data = yaml.safe_load(_text(path))
    except yaml.YAMLError as err:
        raise ValueError(f"invalid YAML ({getattr(err, 'problem', err)})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{_kind(data)} where a mapping (meta, config) belongs")
    for key in ("meta", "config"):
        if not isinstance(data.get(key), dict):
            raise ValueError(f"'{key}' is {_kind(data.get(key))}, not a mapping")


def _check_summary(path: Path) -> None:
    try:
        data = json.loads(_text(path))
    except json.JSONDecodeError as err:
        raise ValueError(f"invalid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{_kind(data)} where a mapping belongs")
    if data.get("status") not in STATUSES:
        raise ValueError(f"status {data.get('status')!r} is not one of {', '.join(STATUSES)}")
    for key in NUMERIC_FIELDS:
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise ValueError(f"{key} is {v!r}, not a number")
    if not isinstance(data.get("axes", {}), dict):
        raise ValueError("'axes' is not a mapping")


def _check_metrics(path: Path) -> None:
    text = _text(path)
    lines = text.splitlines()
    if text and not text.endswith("\n"):
        lines = lines[:-1]  # a torn last line is what a crash mid-append leaves: not damage
    if lines and lines[0].strip() != "step,metric,value":
        raise ValueError("line 1: not the header 'step,metric,value'")
    for i, rec in enumerate(csv.reader(lines[1:]), start=2):
        if len(rec) != 3:
            raise ValueError(f"line {i}: {len(rec)} fields, expected step,metric,value")
        try:
            int(rec[0])
            float(rec[2])  # nan/inf are numbers: a diverged loss is logged as such
        except ValueError:
            raise ValueError(f"line {i}: non-numeric step or value {rec!r}") from None


def run_damage(run: RunDir) -> str | None:
    """``'<path>: <reason>'`` for the first damaged file of ``run``, or None when it reads."""
    for path, check in (
        (run.run_file, _check_run_yaml),
        (run.summary_file, _check_summary),
        (run.metrics_file, _check_metrics),
    ):
        if not path.exists():
            continue
        try:
            check(path)
        except (OSError, ValueError) as err:
            return f"{path}: {err}"
    return None


def run_state(run_dir: RunDir) -> str:
    """The state of a run, one of :data:`RUN_STATES`, read from the store without writing.

    ``pending``: never started (no directory or no summary); ``running``: the summary says
    running and a process holds the run's lock; ``interrupted``: it says running and no process
    holds it; ``completed``/``diverged``/``failed``: as the summary says; ``damaged``: one of
    its files cannot be read (:func:`run_damage` says which and why).
    """
    if not run_dir.path.is_dir():
        return "pending"
    if run_damage(run_dir) is not None:
        return "damaged"
    status = (run_dir.read_summary() or {}).get("status")
    if status not in STATUSES:
        return "pending"
    if status == "running":
        # the lock file exists once a run started, so checking it creates nothing new
        return "running" if run_dir.is_locked() else "interrupted"
    return status
