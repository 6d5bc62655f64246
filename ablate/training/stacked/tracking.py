"""A stacked member's W&B run: one run object per member, in one process.

``wandb.init(reinit="create_new")`` (wandb >= 0.19.10) lets one process hold several active
runs; each member logs through its own run object (never the global ``wandb.log``: W&B says
integrations that assume one global run, Lightning's ``WandbLogger`` among them, do not
support that mode). Everything else is what a solo run's ``WandbLogger`` gets
(``ablate.training.tracking``, ``train._wandb_logger``): the mode (offline unless a login is
configured; an unreachable server turns later runs offline), directory (``<run>/wandb``), id,
name, group, job type, tags, config, ``resume="allow"``, the store's history replayed into a
resumed offline run, and metrics logged with ``trainer/global_step`` as their step metric.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ablate.config import RunConfig
from ablate.store import RunDir
from ablate.training import tracking
from ablate.training.tracking import (
    WANDB_INIT_TIMEOUT_S,
    replay_history,
    wandb_mode,
    wandb_run_id,
    wandb_tags,
)

log = logging.getLogger("ablate")

STEP = "trainer/global_step"  # Lightning's WandbLogger step metric


def _init(cfg: RunConfig, run_dir: RunDir, meta: dict[str, Any], name: str, mode: str):
    import wandb

    if mode == "offline":
        # as Lightning's WandbLogger does for an offline run: wandb's process-wide settings
        # read the environment once, and a solo run later in this process (its WandbLogger
        # sets WANDB_MODE instead of passing a mode) must find it offline, not need a login
        os.environ["WANDB_MODE"] = "offline"
    t = cfg.tracking
    run = wandb.init(
        project=t.project or os.environ.get("WANDB_PROJECT") or "ablate",
        entity=t.entity,
        dir=str(run_dir.path),
        id=wandb_run_id(run_dir),
        name=name,
        group=meta["study"],
        job_type=meta.get("variant") or name,
        tags=wandb_tags(meta, t.tags),
        config={**cfg.to_dict(), "meta": meta},
        mode=mode,
        resume="allow",
        reinit="create_new",
        settings=wandb.Settings(
            silent=True, console="off", x_disable_stats=True, init_timeout=WANDB_INIT_TIMEOUT_S
        ),
    )
    run.define_metric(STEP)
    run.define_metric("*", step_metric=STEP, step_sync=True)
    run.define_metric("val/loss", summary="min")
    run.define_metric("train/loss", summary="last")
    if mode == "offline":
        replay_history(run_dir, lambda metrics, step: log_member(run, metrics, step))
    return run


def start_member_wandb(cfg: RunConfig, run_dir: RunDir, meta: dict[str, Any], name: str):
    """The member's started W&B run, or None (tracking off, or W&B failed: a warning)."""
    mode = wandb_mode(cfg.tracking)
    if mode == "disabled":
        return None
    run_dir.wandb_dir.mkdir(parents=True, exist_ok=True)
    if mode == "online" and not tracking._wandb_unreachable:
        try:
            return _init(cfg, run_dir, meta, name, "online")
        except Exception as err:  # noqa: BLE001 - W&B must never stop a run
            tracking._wandb_unreachable = True
            log.warning("W&B server unreachable (%s); members log offline", err)
    try:
        return _init(cfg, run_dir, meta, name, "offline")
    except Exception as err:  # noqa: BLE001 - W&B must never stop a run
        log.warning("W&B could not start (%s); the local store keeps everything", err)
        return None


def log_member(run: Any, metrics: dict[str, float], step: int) -> None:
    if run is None:
        return
    try:
        run.log({**metrics, STEP: step})
    except Exception as err:  # noqa: BLE001 - W&B must never stop a run
        log.debug("W&B log failed: %s", err)
