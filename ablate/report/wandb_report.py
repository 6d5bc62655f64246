"""The report logged to W&B (``ablate.tracking.report_run``), so the dashboard shows the same
answer as ``report.md``: the results and verdicts as W&B Tables, the claims with their
outcomes, the figures as images.

The tracking settings are the study's own (the first run's ``tracking`` config, then
``$WANDB_MODE``); ``wandb: false`` or ``WANDB_MODE=disabled`` logs nothing. W&B never stops a
report: any failure is a one-line warning.
"""

from __future__ import annotations

import pandas as pd

from ablate.config import TrackingConfig
from ablate.results import StudyData, results_frame
from ablate.tracking.mode import study_tracking, wandb_mode
from ablate.tracking.report_run import log_report_run


def comparisons_frame(verdicts: list, labels: dict[str, str]) -> pd.DataFrame:
    """The verdicts table with its numbers as numbers: one row per ``(Comparison, Verdict)``;
    ``labels`` maps an axis key to its display name."""
    rows = []
    for c, v in verdicts:
        rows.append(
            {
                "axis": labels.get(c.axis, c.axis),
                "held fixed": ", ".join(f"{labels.get(k, k)}={x}" for k, x in c.context.items()),
                "a": c.label_a,
                "b": c.label_b,
                "n a": len(c.a),
                "n b": len(c.b),
                "diverged a": c.diverged_a,
                "diverged b": c.diverged_b,
                "mean a": c.mean_a,
                "mean b": c.mean_b,
                "a - b": c.diff,
                "ci low": c.ci_lo,
                "ci high": c.ci_hi,
                "test": c.test,
                "df": c.df,
                "p": c.p,
                "p adjusted": c.p_adj,
                "correction": c.correction,
                "tost margin": c.margin,
                "tost p adjusted": c.p_tost_adj,
                "verdict": v.kind.replace("_", " "),
                "verdict text": v.text,
            }
        )
    return pd.DataFrame(rows)


def log_report(
    study: StudyData,
    tables: dict[str, pd.DataFrame],
    figures: list,
    tracking: TrackingConfig | None = None,
) -> str | None:
    """Log the results table, ``tables`` (name -> frame; empty ones left out) and ``figures``
    as the study's report run; returns the mode used ("offline"/"online") or None when
    disabled or W&B failed."""
    cfg = tracking or study_tracking(study.path, study.runs["run_id"])
    if wandb_mode(cfg) == "disabled":
        return None
    frames = {"results": results_frame(study)}
    frames.update({name: df for name, df in tables.items() if len(df)})
    images = {f"figures/{f.path.stem}": f.path for f in figures}
    return log_report_run(cfg, study.name, study.path, frames, images)
