"""What one study's runs left in the store, as the report and the claims read it
(:class:`StudyData`), and the names of the columns computed rather than read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.names import LENGTH_PREFIX, length_multiple
from ablate.store import RUN_STATES
from ablate.study.figures import FigureOptions
from ablate.study.spec import Reference

ORDERED_STATUSES = RUN_STATES  # the store's one vocabulary, decided by store.run_state

REUSE_PREFIX = "reuse."
"""``reuse.<field>``: a :class:`ablate.data.reuse.DataReuse` field of the run."""
TRAIN_TAIL = 0.1
"""The last fraction of a run's steps whose logged training losses make its final train loss."""
DTYPE_PREFIX = "dtype."
"""``dtype.<kind>``: what a run computed ``<kind>`` in (its summary's ``compute_dtypes``)."""
TRAINED_PREFIX = "trained."
"""``trained.<field>``: how a run's last attempt trained it (its summary's ``training``:
``stack``, ``compile``, ``compile_mode``, ``cuda_graphs``), none of it in the run id."""
TRAINED_AS = "trained_as"
"""How a run trained, in words, every attempt in order (``'solo, eager then stack of 4,
compiled'``): runs trained differently are equal in distribution only (docs/stacking.md)."""


@dataclass
class StudyData:
    """Everything the report and the claims need about one study, read from the store."""

    name: str
    path: Path
    runs: pd.DataFrame
    metrics: pd.DataFrame
    axes: list[str]
    """Every axis key any run has, in first-seen order (dotted, e.g. ``model.norm_placement``)."""
    description: str = ""
    findings: str = ""
    """The study YAML's ``findings``: what the runs showed against the paper, written by hand."""
    reference: Reference | None = None
    """The study YAML's ``reference``: a published final validation loss to test against."""
    expected_runs: int | None = None
    """Run count from expanding the study YAML, when that was possible; else None."""
    yaml_path: Path | None = None
    damaged: dict[Path, str] = field(default_factory=dict)
    """Run path -> ``'<file>: <reason>'`` for the runs whose files cannot be read: skipped, and
    listed by the report."""
    spec_problem: str = ""
    """Why the study YAML could not be expanded (its claims and run count are then missing)."""
    claims: list = field(default_factory=list)
    """The study YAML's ``claims:`` (:class:`ablate.claims.spec.Claim`), checked by the report."""
    equivalence_margin: float = 0.01
    """The study YAML's ``equivalence_margin`` (nats) for TOST and claims."""
    profile: str | None = None
    """The profile the runs were planned with (their ``meta.profile``)."""
    claim_arms: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Claim id -> the axes of each variant of its arms at this profile (what a registered
    confirmation trains for it: :func:`ablate.claims.arms.claim_arm_axes`)."""
    figures: dict[str, FigureOptions] = field(default_factory=dict)
    """The figures the study YAML asks for beyond every report's (:mod:`ablate.study.figures`)."""
    history_dir: Path | None = None
    """Where the result tables of archived confirmation attempts are (the report's
    ``history/``); None: only the store's attempts count."""
    reproduced: pd.DataFrame | None = None
    """What ``ablate reproduce`` found retraining archived runs (None: it never ran)."""

    @property
    def varying_axes(self) -> list[str]:
        """Axes with more than one value among the runs."""
        return [a for a in self.axes if self.runs[a].nunique(dropna=False) > 1]

    def status_counts(self) -> dict[str, int]:
        counts = self.runs["status"].value_counts().to_dict() if len(self.runs) else {}
        return {s: int(counts.get(s, 0)) for s in ORDERED_STATUSES}

    @property
    def length_columns(self) -> list[str]:
        """``val_loss_at_<m>x`` columns, ordered by the length multiple."""
        cols = [c for c in self.runs.columns if c.startswith(LENGTH_PREFIX)]
        return sorted(cols, key=length_multiple)
