"""A run's W&B run: started once, through one online-to-offline fallback, for every run (solo,
or a member of a stacked group: its own run object) and the report run alike; logged, replayed
into a resumed offline run, finished with the summary's headline numbers.

:func:`start` is the one start: tracking off is nothing; a W&B id with characters W&B rejects
is a ``ValueError``; online, a server that does not answer within ``$ABLATE_WANDB_TIMEOUT_S``
(``mode.wandb_timeout``, 20 s by default; W&B's own 90 s per run would add an hour of idling to
a 36-run study) is remembered for the rest of the process (this start and every later one go
offline, into the run's directory, for ``ablate sync`` to upload), one warning in all; and a
W&B that cannot start at all (not installed, a broken offline start) is one warning per
process, never a failed run.

A run logs through its own run object (``wandb.init(reinit="create_new")``, wandb >= 0.19.10:
one process, several active runs, the members of a group; never the global ``wandb.log``,
which W&B says integrations that assume one global run, Lightning's ``WandbLogger`` among
them, do not support in that mode), with the step metric ``WandbLogger`` uses.

Every row a run logs carries its step (``trainer/global_step``) and the training tokens seen
by then (``tokens``, from the config), the x axis of a study whose runs differ in tokens per
step. The summary's ``status`` is ``running`` from the start; :func:`finish_wandb_run` ends
the W&B run the way the attempt ended: ``completed`` finishes (exit code 0); ``diverged``
(tagged ``diverged``) and ``failed`` end failed (exit code 1); an attempt stopped from
outside (Ctrl-C, SIGTERM: the store keeps it ``running`` to resume) ends failed with
``status: interrupted``, and the next attempt resumes the same W&B id (``resume="allow"``).
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

from ablate.config import RunConfig, TrackingConfig
from ablate.store import RunDir
from ablate.tracking.ids import (
    DIVERGED_TAG,
    STEP,
    TOKENS,
    check_id,
    run_identity,
    wandb_run_id,
)
from ablate.tracking.mode import entity, project, wandb_mode, wandb_timeout

log = logging.getLogger("ablate")

T = TypeVar("T")

SETTINGS = {"silent": True, "console": "off", "x_disable_stats": True}
"""W&B settings of every start: no console capture, no system stats, nothing printed."""

_unreachable = False  # an online start failed in this process: later starts go offline
_warned = False  # "W&B could not start" was said in this process: later failures say it quietly


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def _could_not_start(err: BaseException) -> None:
    global _warned
    # once per process: a study of many runs should not repeat the same warning each run
    (log.debug if _warned else log.warning)(
        "W&B could not start (%s); the local store keeps everything", _first_line(err)
    )
    _warned = True


def start(
    cfg: TrackingConfig, begin: Callable[[str], T], *, run_dir: RunDir | None = None
) -> T | None:
    """``begin(mode)`` ("online" or "offline") with the fallback of the module doc; None when
    tracking is off or W&B could not start. ``run_dir``: the run whose W&B id is checked."""
    global _unreachable
    mode = wandb_mode(cfg)
    if mode == "disabled":
        return None
    if run_dir is not None:
        check_id(wandb_run_id(run_dir), run_dir.run_id)
    if mode == "online" and not _unreachable:
        try:
            return begin("online")
        except ImportError as err:  # no wandb: offline would fail the same way
            _could_not_start(err)
            return None
        except Exception as err:  # noqa: BLE001 - W&B must never stop a run
            _unreachable = True
            log.warning(
                "W&B server unreachable (%s); this and later runs log offline into their run "
                "directories (upload later with `ablate sync`)",
                _first_line(err),
            )
    try:
        return begin("offline")
    except Exception as err:  # noqa: BLE001 - W&B must never stop a run
        _could_not_start(err)
        return None


def _define_summaries(run: Any) -> None:
    run.define_metric("val/loss", summary="min")
    run.define_metric("train/loss", summary="last")
    run.summary["status"] = "running"  # until finish_wandb_run says how the attempt ended


def tokens_per_step(cfg: RunConfig) -> int:
    """Training tokens one optimizer step consumes: ``data.batch_size * data.seq_len``."""
    return cfg.data.batch_size * cfg.data.seq_len


def with_position(metrics: dict[str, float], step: int, per_step: int) -> dict[str, float]:
    """``metrics`` with the step and the tokens seen by then: one W&B row."""
    return {**metrics, STEP: step, TOKENS: step * per_step}


# --- a run: its own run object -------------------------------------------------------------------


class MemberRun:
    """A run's own W&B run (``experiment``, as a ``WandbLogger`` names it) and the tokens one
    of its steps consumes."""

    def __init__(self, experiment: Any, per_step: int) -> None:
        self.experiment, self.per_step = experiment, per_step

    @property
    def dir(self) -> str:
        return self.experiment.dir

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.experiment.log(with_position(metrics, step, self.per_step))


def start_member_wandb(
    cfg: RunConfig, run_dir: RunDir, meta: dict[str, Any], name: str
) -> MemberRun | None:
    """The run's started W&B run, or None (:func:`start`)."""
    ident = run_identity(cfg, meta, name)
    t, per_step = cfg.tracking, tokens_per_step(cfg)
    return start(t, lambda mode: _member_run(t, run_dir, mode, ident, per_step), run_dir=run_dir)


def _member_run(
    cfg: TrackingConfig, run_dir: RunDir, mode: str, ident: dict[str, Any], per_step: int
) -> MemberRun:
    import wandb

    run_dir.wandb_dir.mkdir(parents=True, exist_ok=True)
    if mode == "offline":
        # wandb's process-wide settings read the environment once: anything later in this
        # process that starts W&B without a mode (the report run) must find it offline, not
        # need a login
        os.environ["WANDB_MODE"] = "offline"
    run = wandb.init(
        project=project(cfg),
        entity=entity(cfg) or None,
        dir=str(run_dir.path),
        id=wandb_run_id(run_dir),
        mode=mode,
        resume="allow",
        reinit="create_new",
        settings=wandb.Settings(**SETTINGS, init_timeout=wandb_timeout()),
        **ident,
    )
    run.define_metric(STEP)
    run.define_metric("*", step_metric=STEP, step_sync=True)
    _define_summaries(run)
    member = MemberRun(run, per_step)
    if mode == "offline":
        replay_history(run_dir, lambda metrics, step: log_member(member, metrics, step))
    return member


def log_member(run: MemberRun | None, metrics: dict[str, float], step: int) -> None:
    """Log ``metrics`` at ``step`` into a member's W&B run (None: nothing); a failed log is a
    debug line, never a failed run."""
    if run is None:
        return
    try:
        run.log(metrics, step)
    except Exception as err:  # noqa: BLE001 - W&B must never stop a run
        log.debug("W&B log failed: %s", err)


# --- history and the end ------------------------------------------------------------------------


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


def final_val_split(config: dict[str, Any]) -> str:
    """What a run's ``final_val_loss`` averages, from its config's ``train.final_eval_batches``."""
    n = (config.get("train") or {}).get("final_eval_batches")
    return "the full validation split" if n is None else f"{n} validation batches"


HEADLINE = (
    "final_val_loss",
    "best_val_loss",
    "steps",
    "params",
    "diverged_step",
    "resumed_from_step",
)
"""The summary fields a W&B run's summary repeats (with ``status``)."""


def ended_as(summary: dict[str, Any]) -> tuple[str, int]:
    """(the W&B summary's ``status``, the exit code) of an attempt that ended with ``summary``
    (module doc): a run the store keeps ``running`` was stopped from outside."""
    status = summary.get("status") or "failed"
    if status == "running":
        return "interrupted", 1
    return status, 0 if status == "completed" else 1


def finish_wandb_run(run: Any, summary: dict[str, Any]) -> None:
    """Copy the summary's headline numbers into the W&B run (a wandb run or a
    :class:`MemberRun`) and finish it as the attempt ended
    (:func:`ended_as`); a W&B that fails to close is a warning, never a failed run."""
    if run is None:
        return
    try:
        run = getattr(run, "experiment", run)
        status, exit_code = ended_as(summary)
        run.summary["status"] = status
        if status == "diverged" and DIVERGED_TAG not in (run.tags or ()):
            run.tags = (*(run.tags or ()), DIVERGED_TAG)
        for k in HEADLINE:
            if summary.get(k) is not None:
                run.summary[k] = summary[k]
        for mult, loss in (summary.get("val_loss_at_length") or {}).items():
            if loss is not None:  # the report's column names: val_loss_at_2x, ...
                run.summary[f"val_loss_at_{float(mult):g}x"] = loss
        if summary.get("final_val_loss") is not None:
            # the curve's last val/loss point averages train.eval_batches batches, so it is
            # not final_val_loss: say what the final number was measured on
            run.summary["final_val_loss_on"] = final_val_split(dict(run.config))
        run.finish(exit_code=exit_code)
    except Exception as err:  # noqa: BLE001
        log.warning("W&B did not close cleanly: %s", err)
