"""Loggers: the local store (always) and Weights & Biases (offline unless a login is configured)."""

from __future__ import annotations

import hashlib
import logging
import netrc
import os
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities import rank_zero_only

from ablate.config import TrackingConfig
from ablate.store import RunDir
from ablate.store.provenance import STALE_DIR

log = logging.getLogger("ablate")

_WANDB_ID_BAD = set(":;,#?/'")
_wandb_warned = False


class StoreLogger(Logger):
    """Appends every logged metric to the run's ``metrics.csv`` (long form, resume-safe).

    Lightning's CSVLogger deletes an existing ``metrics.csv`` when it is pointed at a non-empty
    directory, which would lose the history of a resumed run; this logger only ever appends.
    """

    def __init__(self, run_dir: RunDir):
        super().__init__()
        self.run_dir = run_dir

    @property
    def name(self) -> str:
        return "store"

    @property
    def version(self) -> str:
        return self.run_dir.run_id

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass  # the resolved config is written to run.yaml by the runner

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        metrics = {k: v for k, v in metrics.items() if k != "epoch"}
        self.run_dir.append_metrics(int(step or 0), metrics)


def wandb_run_id(run_dir: RunDir) -> str:
    """The run's W&B id: ``<run id>-<8 hex>``, the hex a digest of the study and how often the
    run was retrained (``--rerun-stale`` moves the old one to ``<study>/.stale/``).

    The run id hashes the config only, so the same config in two studies, or a retrained stale
    run, would otherwise resume (and overwrite) another W&B run. A resumed run keeps its id.
    """
    retrains = sum(1 for _ in (run_dir.path.parent / STALE_DIR).glob(f"{run_dir.run_id}-*"))
    key = f"{run_dir.study}/{run_dir.run_id}/{retrains}"
    return f"{run_dir.run_id}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def wandb_tags(meta: dict[str, Any], extra: list[str]) -> list[str]:
    """A run's W&B tags: its axis values, ``confirm`` for a confirmation run (``ablate run
    --confirm``: fresh seeds, to tell apart from the exploratory ones), the config's tags."""
    axes = [f"{k}={v}" for k, v in (meta.get("axes") or {}).items()]
    confirm = ["confirm"] if meta.get("confirm") is True else []
    return sorted({*axes, *confirm, *extra})[:64]


def replay_history(run_dir: RunDir, log_step: Callable[[dict[str, float], int], Any]) -> int:
    """Log the store's metrics again, one call per step, into a resumed offline W&B run.

    A resumed offline run is a new ``offline-run-*`` folder with the same id, and syncing
    several folders of one id replaces history rather than appending (wandb#3841): so each
    folder holds the whole history (the store's rows up to the checkpoint, then the new steps)
    and ``ablate sync`` uploads only the newest. Returns the number of steps replayed.
    """
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    for step, metric, value in run_dir.read_metrics():
        by_step[step][metric] = value
    for step in sorted(by_step):
        log_step(by_step[step], step)
    return len(by_step)


def wandb_logged_in() -> bool:
    """True when an API key is available from the environment or ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("//")[-1]
        return netrc.netrc().authenticators(host.split("/")[0]) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def wandb_mode(cfg: TrackingConfig) -> str:
    """online / offline / disabled: config first, then ``$WANDB_MODE``, then login state."""
    if not cfg.wandb or cfg.mode == "disabled":
        return "disabled"
    if cfg.mode != "auto":
        return cfg.mode
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    if env in ("online", "offline", "disabled"):
        return env
    if env == "dryrun":
        return "offline"
    return "online" if wandb_logged_in() else "offline"


WANDB_INIT_TIMEOUT_S = 20.0
"""How long ``wandb.init`` may wait for the server (W&B's default, 90 s, per run, adds an hour
of idling to a 36-run study when the server is down)."""
_wandb_unreachable = False  # an online start failed in this process: later runs go offline


def _start_wandb_logger(
    cfg: TrackingConfig, run_dir: RunDir, *, offline: bool, run_config: dict[str, Any], **kw: Any
) -> Logger:
    from pytorch_lightning.loggers import WandbLogger

    run_dir.wandb_dir.mkdir(parents=True, exist_ok=True)
    logger = WandbLogger(
        project=cfg.project or os.environ.get("WANDB_PROJECT") or "ablate",
        entity=cfg.entity,
        save_dir=str(run_dir.path),
        id=wandb_run_id(run_dir),
        name=kw["name"],
        group=kw["group"],
        job_type=kw["job_type"],
        tags=sorted({*kw["tags"], *cfg.tags})[:64],
        offline=offline,
        config=run_config,
        settings={
            "silent": True,
            "console": "off",
            "x_disable_stats": True,
            "init_timeout": WANDB_INIT_TIMEOUT_S,
        },
    )
    # Lightning always passes anonymous=None, which recent wandb answers with a deprecation
    # warning on every run; dropping the key changes nothing else.
    logger._wandb_init.pop("anonymous", None)
    experiment = logger.experiment  # start now so a failure is caught here, not mid-training
    experiment.define_metric("val/loss", summary="min")
    experiment.define_metric("train/loss", summary="last")
    if offline:
        replay_history(run_dir, logger.log_metrics)
    return logger


def _first_line(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def make_wandb_logger(
    cfg: TrackingConfig,
    run_dir: RunDir,
    *,
    run_config: dict[str, Any],
    group: str,
    job_type: str,
    name: str,
    tags: list[str],
) -> Logger | None:
    """A started WandbLogger, or None (disabled, or W&B failed to start: reported once).

    Online, a server that does not answer within ``WANDB_INIT_TIMEOUT_S`` is remembered for
    the rest of the process: this run and every later one log offline into their run
    directories (``wandb sync <run dir>/wandb/offline-run-*`` uploads them later), with one
    warning in all.
    """
    global _wandb_warned, _wandb_unreachable
    mode = wandb_mode(cfg)
    if mode == "disabled":
        return None
    if set(wandb_run_id(run_dir)) & _WANDB_ID_BAD:
        raise ValueError(f"run id {run_dir.run_id!r} has characters W&B rejects")
    kw = {"run_config": run_config, "group": group, "job_type": job_type, "name": name}
    kw["tags"] = tags
    if mode == "online" and not _wandb_unreachable:
        try:
            return _start_wandb_logger(cfg, run_dir, offline=False, **kw)
        except Exception as err:  # noqa: BLE001 - W&B must never stop a run
            _wandb_unreachable = True
            log.warning(
                "W&B server unreachable (%s); this and later runs log offline into their run "
                "directories (upload later with `wandb sync`)",
                _first_line(err),
            )
    try:
        return _start_wandb_logger(cfg, run_dir, offline=True, **kw)
    except Exception as err:  # noqa: BLE001 - W&B must never stop a run
        # once per process: a study of many runs should not repeat the same warning each run
        (log.debug if _wandb_warned else log.warning)(
            "W&B could not start (%s); the local store keeps everything", _first_line(err)
        )
        _wandb_warned = True
        return None


def final_val_split(config: dict[str, Any]) -> str:
    """What a run's ``final_val_loss`` averages, from its config's ``train.final_eval_batches``."""
    n = (config.get("train") or {}).get("final_eval_batches")
    return "the full validation split" if n is None else f"{n} validation batches"


def finish_wandb_run(run: Any, summary: dict[str, Any]) -> None:
    """Copy the summary's headline numbers into the W&B run (a wandb run, or a Lightning
    ``WandbLogger``'s) and finish it; a W&B that fails to close is a warning, never a failed run."""
    if run is None:
        return
    try:
        run = getattr(run, "experiment", run)
        for k in ("status", "final_val_loss", "best_val_loss", "steps", "params", "diverged_step"):
            if summary.get(k) is not None:
                run.summary[k] = summary[k]
        for mult, loss in (summary.get("val_loss_at_length") or {}).items():
            if loss is not None:  # the report's column names: val_loss_at_2x, ...
                run.summary[f"val_loss_at_{float(mult):g}x"] = loss
        if summary.get("final_val_loss") is not None:
            # the curve's last val/loss point averages train.eval_batches batches, so it is
            # not final_val_loss: say what the final number was measured on
            run.summary["final_val_loss_on"] = final_val_split(dict(run.config))
        run.finish(exit_code=0 if summary.get("status") != "failed" else 1)
    except Exception as err:  # noqa: BLE001
        log.warning("W&B did not close cleanly: %s", err)
