"""Train runs into their store directories: one lifecycle for a group of k runs, k = 1 solo.

A study's seeds and LR sweeps are many small runs of one shape; ``train_group`` trains them
together (one model of k members, ``ablate.model.members``) while each member stays a run: its
own initial weights and data order (``stacked.member``: opened alike whatever group it trains
in), LR schedule, gradient clipping, AdamW state (``MemberAdamW``), metrics, divergence and
early stopping (``LitRuns``), checkpoint (``stacked.store``), ``summary.json`` and
``progress.json`` in its own ``RunDir``. ``train_run`` is a group of one.

The lifecycle, top to bottom:

1. **open** each unfinished run (``open_member``): ``run.yaml``, the ``running`` summary, data,
   model, the checkpoint it resumes from;
2. **fit** (``_fit``): one ``Trainer.fit`` of the members at one step (``LitStack``), whose
   every step is ``train_step``, then ``LitRuns.end_step``: log, evaluate, decide the end,
   checkpoint, in that order;
3. **turns** (``_train``): members that resume at different steps (checkpoints of a killed
   group, written one after another) train in turns: the ones furthest behind alone until
   they reach the next ones, then all together; a member that finishes (diverged, stopped
   early, at ``max_steps``) ends the fit, and the others go on in a new fit without it, from
   their state in memory;
4. **finish** each member as it ends (``stacked.member.finish``: final evaluation, summary).

What stacking keeps equal to a solo run: each member computes the solo run's operations on its
own slice of each tensor, so losses agree with the solo run's to float rounding (some CPU
kernels round an element by where it lies in the tensor); ``tests/training/test_stacked.py``
states the tolerance. Dropout masks are drawn once for all members: a member's masks have its
solo run's distribution, not its values (docs/stacking.md). A group of more than one trains in
``32-true`` or ``bf16-mixed`` only (no loss scaler per member).
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import ExitStack
from typing import Any

import torch

from ablate.config import ConfigError, RunConfig
from ablate.stacking import MEMBER_FIELDS, PRECISIONS, stack_key
from ablate.store import FINISHED, RunDir
from ablate.training.callbacks import ProgressFile
from ablate.training.finish import ResumeMismatch
from ablate.training.stacked.lit import LitStack
from ablate.training.stacked.member import Member, finish, open_member
from ablate.training.stacked.store import LAST, MemberCheckpointIO
from ablate.training.trainer import (
    StepBoundaryStop,
    attn_context,
    attn_kernel,
    make_trainer,
    quiet_lightning,
    stoppable,
    torch_threads,
    training_way,
)

log = logging.getLogger("ablate")


def train_run(
    cfg: RunConfig,
    run_dir: RunDir,
    meta: dict[str, Any] | None = None,
    *,
    progress: bool | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Train (or resume) one run in ``run_dir`` and return its summary: a group of one
    (``train_group``); ``progress``: Lightning's progress bar (default ``train.progress``)."""
    progress = cfg.train.progress if progress is None else progress
    return train_group([cfg], [run_dir], [meta], workers=workers, progress=progress)[0]


def train_group(
    cfgs: list[RunConfig],
    run_dirs: list[RunDir],
    metas: list[dict[str, Any] | None] | None = None,
    *,
    workers: int = 1,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Train (or resume) the runs ``cfgs`` into ``run_dirs`` as one group and return their
    summaries, in order. Finished runs (completed, diverged) are skipped; ``workers`` (how many
    of the study's tasks train at once) is recorded in each member's environment.

    Each directory ends with run.yaml, summary.json (``completed``/``diverged``/``failed``;
    ``stack``: the group, for k > 1), metrics.csv, progress.json, checkpoints/last.ckpt. An
    exception fails every unfinished member (``failed``, error.log) and the study goes on;
    ``ResumeMismatch`` (bad input) is raised with the stores as they were; Ctrl-C stops at a
    step boundary with a checkpoint each and re-raises KeyboardInterrupt (the runs stay
    ``running``, so the next ``ablate run`` resumes them).
    """
    check_group(cfgs)
    metas = list(metas or [None] * len(cfgs))
    quiet_lightning()
    t0 = time.time()
    device = _device(cfgs[0])
    stop = StepBoundaryStop()
    members: list[Member] = []
    try:
        with ExitStack() as ctx:
            ctx.enter_context(torch_threads(cfgs[0].train.threads))
            ctx.enter_context(attn_context(cfgs[0], device))
            _open_all(members, cfgs, run_dirs, metas, device, t0, workers)
            for m in members:
                if m.done:  # killed before its summary said so (final evaluation, divergence)
                    finish(m, device)
            with stoppable(stop):
                _train(members, device, stop, progress)
    except ResumeMismatch:
        for m in members:  # put back what the stores said and touch nothing else
            m.attempt.restore()
            m.close_wandb()
        raise
    except (KeyboardInterrupt, SystemExit):
        # a second Ctrl-C (Lightning turns it into SystemExit) or SIGTERM: an "interrupted"
        # checkpoint was saved; the runs stay "running" so the next `ablate run` resumes them
        _stopped(members)
        raise
    except Exception as err:  # noqa: BLE001 - a failed group must not stop a study
        _failed(members, err, run_dirs)
    if stop.requested:
        _stopped(members)
        raise KeyboardInterrupt  # the study stops; the next `ablate run` resumes
    return [rd.read_summary() or {} for rd in run_dirs]  # what each member's store says


def _stopped(members: list[Member]) -> None:
    for m in members:
        if not m.finished:  # stays "running": the next run resumes it from its checkpoint
            m.close_wandb()
            m.attempt.interrupted(m.wandb_wait)


def _failed(members: list[Member], err: Exception, run_dirs: list[RunDir]) -> None:
    ids = [rd.run_id for rd in run_dirs]
    if isinstance(err, OSError) and err.errno is not None:  # e.g. a full disk: one line
        log.error("run %s failed: %s", ", ".join(ids), err)
    else:
        log.exception("run %s failed", ", ".join(ids))
    for m in members:
        if not m.finished:
            m.attempt.failed(err)
            m.close_wandb()
            m.attempt.write(**m.wall_time())


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}".lstrip("."))
    return path


def check_group(cfgs: list[RunConfig]) -> None:
    """``ConfigError`` (one line, naming the key) unless ``cfgs`` can train as one group."""
    if not cfgs:
        raise ConfigError("a group needs at least one run", key="train.stack")
    first = json.loads(stack_key(cfgs[0]))
    for cfg in cfgs[1:]:
        other = json.loads(stack_key(cfg))
        if other != first:
            key = _first_difference(first, other)
            raise ConfigError(
                "runs of one stacked group may differ only in train.seed and "
                f"optim.{{{', '.join(MEMBER_FIELDS['optim'])}}}",
                key=key,
            )
    t = cfgs[0].train
    if len(cfgs) > 1 and t.precision not in PRECISIONS:
        raise ConfigError(
            f"stacked training supports precision {', '.join(PRECISIONS)}, not {t.precision}",
            key="train.precision",
        )
    if t.devices != 1:
        raise ConfigError("a run trains on one device", key="train.devices")


def _device(cfg: RunConfig) -> torch.device:
    want = cfg.train.accelerator
    if want == "gpu" or (want == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def _step_done(steps: list[int]) -> None:
    """Called after every step of a fit with its members' steps: one place for tests to inject
    a stop or a crash at a chosen step."""


def _open_all(
    out: list[Member],
    cfgs: list[RunConfig],
    run_dirs: list[RunDir],
    metas: list[dict | None],
    device: torch.device,
    t0: float,
    workers: int,
) -> None:
    """Open every run that has not finished (completed, diverged) into ``out``, as it opens
    (so a failure meanwhile fails the ones opened)."""
    group = {"members": len(cfgs), "runs": [rd.run_id for rd in run_dirs]}
    kernel = attn_kernel(cfgs[0], device) if cfgs[0].model.arch == "transformer" else None
    for cfg, rd, meta in zip(cfgs, run_dirs, metas, strict=True):
        prior = rd.read_summary() or {}
        if prior.get("status") in FINISHED:
            continue
        m = open_member(cfg, rd, meta or {}, t0, workers)
        m.summary["attn_kernel"] = kernel
        if len(cfgs) > 1:
            m.summary["stack"] = group
        out.append(m)
    for m in out:  # the runs this attempt trains together
        m.attempt.trains(training_way(m.cfg, len(out), device))


def _train(
    members: list[Member], device: torch.device, stop: StepBoundaryStop, progress: bool
) -> None:
    """Fit until every member is done (or a stop is requested), each finished member's summary
    written at once: the members furthest behind first, up to the next ones' step; a member
    that finishes leaves."""
    while not stop.requested and (training := [m for m in members if not m.done]):
        start = min(m.step for m in training)
        turn = [m for m in training if m.step == start]
        ahead = [m.step for m in training if m.step > start]
        _fit(turn, device, stop, min(ahead, default=None), progress)
        if all(m.step == start and not m.done for m in turn):
            raise RuntimeError(f"a fit from step {start} trained no step")
        for m in turn:
            if m.done:
                finish(m, device)


def _fit(
    members: list[Member],
    device: torch.device,
    stop: StepBoundaryStop,
    until: int | None,
    progress: bool,
) -> None:
    """One ``Trainer.fit`` of ``members`` (all at one step) until one of them finishes, they
    reach step ``until`` (where members further ahead wait) or a stop is requested; their state
    handed back to them."""
    lit = LitStack(members, device)
    dirs = [m.run_dir for m in members]
    lit.stop_at, lit.stop = until, stop
    lit.after_step = lambda step: _step_done([step] * len(members))
    lit.progress = ProgressFile([d.path for d in dirs])
    lit.checkpoint_path = str(dirs[0].checkpoint_dir / LAST)
    io = MemberCheckpointIO([d.checkpoint_dir for d in dirs])
    trainer = make_trainer(members[0].cfg, dirs, io, progress=progress)
    trainer.fit(lit, train_dataloaders=lit.dataloader())
    lit.copy_to_members()
