"""Whether and where W&B logs: the mode (online / offline / disabled), the login, the
destination (entity, project), and the tracking settings a study's runs used."""

from __future__ import annotations

import configparser
import netrc
import os
from collections.abc import Iterable
from pathlib import Path

from ablate.config import TrackingConfig
from ablate.store import RunDir


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


def wandb_setting(key: str) -> str:
    """``key`` of the user's W&B settings (``[default]`` of ``./wandb/settings``, then of
    ``$WANDB_CONFIG_DIR/settings`` or ``~/.config/wandb/settings``, which ``wandb init``
    writes); empty when none says."""
    config_dir = os.environ.get("WANDB_CONFIG_DIR") or Path.home() / ".config" / "wandb"
    for path in (Path("wandb") / "settings", Path(config_dir) / "settings"):
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
            value = parser.get("default", key, fallback="").strip()
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        if value:
            return value
    return ""


def project(cfg: TrackingConfig) -> str:
    """The W&B project: ``tracking.project``, then ``$WANDB_PROJECT``, then the user's W&B
    settings, then ``ablate``."""
    return cfg.project or os.environ.get("WANDB_PROJECT") or wandb_setting("project") or "ablate"


def entity(cfg: TrackingConfig) -> str:
    """The W&B entity: ``tracking.entity``, then ``$WANDB_ENTITY``, then the user's W&B
    settings; empty means the login's default (W&B's choice for a run, filled in when a view
    is saved)."""
    return cfg.entity or os.environ.get("WANDB_ENTITY") or wandb_setting("entity")


def destination(cfg: TrackingConfig) -> tuple[str, str]:
    """(entity, project) of :func:`entity` and :func:`project`."""
    return entity(cfg), project(cfg)


def study_tracking(study_dir: Path, run_ids: Iterable[str]) -> TrackingConfig:
    """The tracking config the study's runs used (the first readable run's), default
    otherwise."""
    for run_id in run_ids:
        try:
            cfg = RunDir(Path(study_dir) / str(run_id)).read_run()["config"].get("tracking") or {}
            return TrackingConfig(**cfg)
        except Exception:  # noqa: BLE001 - a damaged run.yaml: try the next run
            continue
    return TrackingConfig()
