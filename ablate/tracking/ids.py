"""Who a W&B run is: its id, name, group, job type, tags and config, and the keys that runs,
the report run and the views share."""

from __future__ import annotations

import hashlib
from typing import Any

from ablate.config import RunConfig
from ablate.store import RunDir
from ablate.store.provenance import STALE_DIR

STEP = "trainer/global_step"
"""The step metric of every logged metric: Lightning's ``WandbLogger``'s, also the stacked
members' and the workspace's x axis."""
REPORT_JOB_TYPE = "report"
"""The job type of the report run, which the workspace leaves out of the study's runs."""
REPORT_WANDB_DIR = ".report-wandb"
"""``<store>/<study>/.report-wandb/``: the report run's W&B folder (hidden: not a run)."""
MAX_TAGS = 64

_BAD = set(":;,#?/'")


def wandb_run_id(run_dir: RunDir) -> str:
    """The run's W&B id: ``<run id>-<8 hex>``, the hex a digest of the study and how often the
    run was retrained (``--rerun-stale`` moves the old one to ``<study>/.stale/``).

    The run id hashes the config only, so the same config in two studies, or a retrained stale
    run, would otherwise resume (and overwrite) another W&B run. A resumed run keeps its id.
    """
    retrains = sum(1 for _ in (run_dir.path.parent / STALE_DIR).glob(f"{run_dir.run_id}-*"))
    key = f"{run_dir.study}/{run_dir.run_id}/{retrains}"
    return f"{run_dir.run_id}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def check_id(wandb_id: str, run_id: str) -> None:
    """A ``ValueError`` when ``wandb_id`` (of run ``run_id``) has characters W&B rejects."""
    if set(wandb_id) & _BAD:
        raise ValueError(f"run id {run_id!r} has characters W&B rejects")


def report_run_id(study: str) -> str:
    """The report run's W&B id: the same for every report of ``study``, unlike any run's."""
    return f"report-{hashlib.sha256(study.encode()).hexdigest()[:12]}"


def wandb_tags(meta: dict[str, Any], extra: list[str]) -> list[str]:
    """A run's W&B tags: its axis values, ``confirm`` for a confirmation run (``ablate run
    --confirm``: fresh seeds, to tell apart from the exploratory ones), the config's tags."""
    axes = [f"{k}={v}" for k, v in (meta.get("axes") or {}).items()]
    confirm = ["confirm"] if meta.get("confirm") is True else []
    return sorted({*axes, *confirm, *extra})[:MAX_TAGS]


def run_identity(cfg: RunConfig, meta: dict[str, Any], name: str) -> dict[str, Any]:
    """A run's W&B name, group (the study), job type (the variant), tags and config (the
    resolved config with the run's meta), the same for a solo run and a stacked member: the
    keyword arguments of ``wandb.init`` (and so of Lightning's ``WandbLogger``)."""
    return {
        "name": name,
        "group": meta["study"],
        "job_type": meta.get("variant") or name,
        "tags": wandb_tags(meta, cfg.tracking.tags),
        "config": {**cfg.to_dict(), "meta": meta},
    }
