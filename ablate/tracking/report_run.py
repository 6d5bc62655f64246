"""The report as a W&B run: a ``report`` run in the study's group (offline unless a login is
configured, like every run) holding the report's tables as W&B Tables (numbers as numbers, so
W&B can sort and plot them) and its figures as images.

The report run has one W&B id per study (``report_run_id``) and lives in
``<store>/<study>/.report-wandb/``; each report is a new offline folder of that id holding the
whole report, so the older folders are removed once it is written (``ablate sync`` uploads it).
It starts as every run does (``runs.start``: the timeout, the offline fallback); W&B never
stops a report: any failure is a one-line warning.
"""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path

import pandas as pd

from ablate.config import TrackingConfig
from ablate.tracking.ids import (
    MAX_TAGS,
    REPORT_JOB_TYPE,
    REPORT_WANDB_DIR,
    report_run_id,
    short_tag,
)
from ablate.tracking.mode import entity, project, wandb_timeout
from ablate.tracking.runs import SETTINGS, start

log = logging.getLogger("ablate")


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


def _begin(cfg: TrackingConfig, study: str, wdir: Path, mode: str):
    import wandb

    wdir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        id=report_run_id(study),
        project=project(cfg),
        entity=entity(cfg) or None,
        group=study,
        job_type=REPORT_JOB_TYPE,
        name=f"{study}-report",
        dir=str(wdir),
        mode=mode,
        resume="allow",
        tags=sorted({"report", *(short_tag(t) for t in cfg.tags if t)})[:MAX_TAGS],
        settings=wandb.Settings(**SETTINGS, init_timeout=wandb_timeout()),
    )
    return run, mode


def log_report_run(
    cfg: TrackingConfig,
    study: str,
    study_dir: Path,
    tables: dict[str, pd.DataFrame],
    images: dict[str, Path],
) -> str | None:
    """Log ``tables`` (name -> frame) and ``images`` (key -> PNG) as the report run of
    ``study`` (its store folder ``study_dir``); returns the mode used ("online"/"offline") or
    None when tracking is off or W&B failed."""
    wdir = Path(study_dir) / REPORT_WANDB_DIR
    older = sorted((wdir / "wandb").glob("*run-*"))
    started = start(cfg, lambda mode: _begin(cfg, study, wdir, mode))
    if started is None:
        return None
    run, mode = started
    try:
        import wandb

        payload = {name: wandb.Table(dataframe=numeric_table(df)) for name, df in tables.items()}
        payload.update({key: wandb.Image(str(path)) for key, path in images.items()})
        run.log(payload)
        run.finish()
    except Exception as err:  # noqa: BLE001 - W&B must never stop a report
        log.warning("W&B report not logged (%s: %s)", type(err).__name__, str(err)[:200])
        return None
    for folder in older:  # superseded: the new folder holds the whole report
        shutil.rmtree(folder, ignore_errors=True)
    return mode
