"""Log a built report to W&B as a ``report`` run in the study's group (offline unless a login
is configured, like every run), so the dashboard shows the same answer as ``report.md``: the
results and verdicts as W&B Tables, the claims with their outcomes, the figures as images.

The tracking settings are the study's own (the first run's ``tracking`` config, then
``$WANDB_MODE``); ``wandb: false`` or ``WANDB_MODE=disabled`` logs nothing. W&B never stops a
report: any failure is a one-line warning.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pandas as pd

from ablate.config import TrackingConfig
from ablate.report.collect import StudyData, results_frame
from ablate.store import RunDir
from ablate.training.tracking import wandb_mode

log = logging.getLogger("ablate")


def study_tracking(study: StudyData) -> TrackingConfig:
    """The tracking config the study's runs used (the first run's), default otherwise."""
    for run_id in study.runs["run_id"]:
        try:
            cfg = RunDir(study.path / str(run_id)).read_run()["config"].get("tracking") or {}
            return TrackingConfig(**cfg)
        except Exception:  # noqa: BLE001 - a damaged run.yaml: try the next run
            continue
    return TrackingConfig()


def _table(df: pd.DataFrame):
    import wandb

    return wandb.Table(dataframe=df.astype(str).reset_index(drop=True))


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

        wdir = Path(study.path) / ".report-wandb"
        wdir.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=cfg.project or os.environ.get("WANDB_PROJECT") or "ablate",
            entity=cfg.entity,
            group=study.name,
            job_type="report",
            name=f"{study.name}-report",
            dir=str(wdir),
            mode=mode,
            tags=["report", *cfg.tags][:64],
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )
        payload = {"results": _table(results_frame(study))}
        payload.update({name: _table(df) for name, df in tables.items() if len(df)})
        payload.update({f"figures/{f.path.stem}": wandb.Image(str(f.path)) for f in figures})
        run.log(payload)
        run.finish()
        return mode
    except Exception as err:  # noqa: BLE001 - W&B must never stop a report
        log.warning("W&B report not logged (%s: %s)", type(err).__name__, str(err)[:200])
        return None
