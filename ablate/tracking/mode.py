"""Whether and where W&B logs: the mode (online / offline / disabled), the login, the
destination (entity, project), the server and how long a call may wait for it, and the
tracking settings a study's runs used."""

from __future__ import annotations

import configparser
import netrc
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from ablate.config import ConfigError, TrackingConfig
from ablate.store import RunDir

TIMEOUT_ENV = "ABLATE_WANDB_TIMEOUT_S"
WANDB_TIMEOUT_S = 20.0
"""How long one W&B call waits for the server by default (an online start, the check before
``ablate sync`` and ``ablate dashboard``, each API request of a dashboard); W&B's own
``wandb.init`` waits 90 s, per run."""
DEFAULT_SERVER = "https://api.wandb.ai"


class WandbUnreachable(RuntimeError):
    """The W&B server did not answer in time: one line saying what did not happen and how to
    retry (exit code 1: not bad input; nothing was changed)."""


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


def wandb_timeout() -> float:
    """Seconds one W&B call may wait for the server: ``$ABLATE_WANDB_TIMEOUT_S``, else
    :data:`WANDB_TIMEOUT_S`; a value that is not a positive number is a ``ConfigError``."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return WANDB_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ConfigError(f"must be a number of seconds > 0, got {raw!r}", key=TIMEOUT_ENV)
    return value


def server_url() -> str:
    """The W&B server: ``$WANDB_BASE_URL``, then the user's W&B settings (``wandb login
    --host``), then W&B's cloud."""
    url = os.environ.get("WANDB_BASE_URL") or wandb_setting("base_url") or DEFAULT_SERVER
    return url.rstrip("/")


def _ask(url: str, timeout: float, answer: list) -> None:
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            pass
        answer.append(None)
    except urllib.error.HTTPError:  # a status code is an answer: the server is there
        answer.append(None)
    except (OSError, ValueError) as err:  # refused, timed out, no such host, a bad URL
        reason = getattr(err, "reason", err)
        answer.append(f"could not be reached ({reason})")


def unreachable(timeout: float | None = None) -> str | None:
    """None when the W&B server answers an HTTP request within ``timeout`` seconds
    (:func:`wandb_timeout`; any status code counts), else why not, in words. The wait is
    bounded as a whole, name lookup included."""
    timeout = wandb_timeout() if timeout is None else timeout
    answer: list[str | None] = []
    asking = threading.Thread(target=_ask, args=(server_url(), timeout, answer), daemon=True)
    asking.start()
    asking.join(timeout + 1.0)
    if answer and (answer[0] is None or "timed out" not in answer[0]):
        return answer[0]
    return f"did not answer within {timeout:g} s"


def check_server(what: str, retry: str) -> None:
    """Raise :class:`WandbUnreachable` (``what`` did not happen, ``retry`` does it again) when
    the W&B server does not answer within :func:`wandb_timeout`."""
    why = unreachable()
    if why is not None:
        raise WandbUnreachable(
            f"W&B server {server_url()} {why}: {what}; retry with `{retry}` once it answers "
            f"({TIMEOUT_ENV} sets the wait, {wandb_timeout():g} s now)"
        )
