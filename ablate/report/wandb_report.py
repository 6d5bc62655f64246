"""Log a built report to W&B as a ``report`` run in the study's group (offline unless a login
is configured, like every run), so the dashboard shows the same answer as ``report.md``: the
results and verdicts as W&B Tables (numbers as numbers, so W&B can sort and plot them), the
claims with their outcomes, the figures as images.

The report run has one W&B id per study (:func:`report_run_id`) and lives in
``<store>/<study>/.report-wandb/``; each report is a new offline folder of that id holding the
whole report, so the older folders are removed once it is written (``ablate sync`` uploads it).

The tracking settings are the study's own (the first run's ``tracking`` config, then
``$WANDB_MODE``); ``wandb: false`` or ``WANDB_MODE=disabled`` logs nothing. W&B never stops a
report: any failure is a one-line warning.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import shutil
from pathlib import Path

import pandas as pd

from ablate.config import TrackingConfig
from ablate.store import RunDir
from ablate.study.results import StudyData, results_frame
from ablate.training.tracking import wandb_mode

log = logging.getLogger("ablate")

REPORT_WANDB_DIR = ".report-wandb"
"""``<store>/<study>/.report-wandb/``: the report run's W&B folder (hidden: not a run)."""
REPORT_JOB_TYPE = "report"


def report_run_id(study: str) -> str:
    """The report run's W&B id: the same for every report of ``study``, unlike any run's."""
    return f"report-{hashlib.sha256(study.encode()).hexdigest()[:12]}"


def study_tracking(study: StudyData) -> TrackingConfig:
    """The tracking config the study's runs used (the first run's), default otherwise."""
    for run_id in study.runs["run_id"]:
        try:
            cfg = RunDir(study.path / str(run_id)).read_run()["config"].get("tracking") or {}
            return TrackingConfig(**cfg)
        except Exception:  # noqa: BLE001 - a damaged run.yaml: try the next run
            continue
    return TrackingConfig()


def _cell(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return str(v)


def numeric_table(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with numeric and boolean columns kept as they are and every other column as text
    (None for a missing value), the shape a W&B Table sorts and plots."""
    out = df.reset_index(drop=True).copy()
    for col in out.columns:
        if not (pd.api.types.is_numeric_dtype(out[col]) or pd.api.types.is_bool_dtype(out[col])):
            out[col] = pd.Series([_cell(v) for v in out[col]], index=out.index, dtype=object)
    return out


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


def _table(df: pd.DataFrame):
    import wandb

    return wandb.Table(dataframe=numeric_table(df))


def log_report(
    study: StudyData,
    tables: dict[str, pd.DataFrame],
    figures: list,
    tracking: TrackingConfig | None = None,
) -> str | None:
    """Log ``tables`` (name -> frame), the results table and ``figures`` to W&B; returns the
    mode used ("offline"/"online") or None when disabled or W&B failed."""
    cfg = tracking or study_tracking(study)
    mode = wandb_mode(cfg)
    if mode == "disabled":
        return None
    try:
        import wandb

        wdir = Path(study.path) / REPORT_WANDB_DIR
        wdir.mkdir(parents=True, exist_ok=True)
        older = sorted((wdir / "wandb").glob("*run-*"))
        run = wandb.init(
            id=report_run_id(study.name),
            project=cfg.project or os.environ.get("WANDB_PROJECT") or "ablate",
            entity=cfg.entity,
            group=study.name,
            job_type=REPORT_JOB_TYPE,
            name=f"{study.name}-report",
            dir=str(wdir),
            mode=mode,
            resume="allow",
            tags=["report", *cfg.tags][:64],
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )
        payload = {"results": _table(results_frame(study))}
        payload.update({name: _table(df) for name, df in tables.items() if len(df)})
        payload.update({f"figures/{f.path.stem}": wandb.Image(str(f.path)) for f in figures})
        run.log(payload)
        run.finish()
        for folder in older:  # superseded: the new folder holds the whole report
            shutil.rmtree(folder, ignore_errors=True)
        return mode
    except Exception as err:  # noqa: BLE001 - W&B must never stop a report
        log.warning("W&B report not logged (%s: %s)", type(err).__name__, str(err)[:200])
        return None
