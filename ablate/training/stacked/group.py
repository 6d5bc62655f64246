"""Train a group of runs as one stacked model in one process.

A study's seeds and LR sweeps are many small runs of one shape; ``train_group`` trains them
together (one model of k members, ``ablate.model.members``: the solo run's code with a member
dimension, k = 1 for a solo run) while each member stays a run: its own initial weights and
data order (``stacked.member``: opened as a solo run is), LR schedule, gradient clipping, AdamW
state (``MemberAdamW``), metrics, divergence and early stopping (``LitRuns``, the solo run's
code), checkpoint (``stacked.store``), ``summary.json`` (``train.finish_run``) and
``progress.json`` in its own ``RunDir``.

Lightning drives the group as it drives a solo run: ``LitStack`` (the members as one
LightningModule) in a ``Trainer`` from ``train.make_trainer``. What stays here is what one fit
cannot do, because a fit trains one fixed set of tensors from one step:

* Members that resume at different steps (checkpoints of a killed group, written one after
  another) train in turns: the ones furthest behind train alone until they reach the next
  ones, then all together.
* A member that finishes (diverged, stopped early) while others go on ends the fit; the others
  go on in a new fit without it, from their state in memory, as a resume would build them, so
  a finished member no longer costs a forward and backward pass each step.

What stacking keeps equal to a solo run: each member computes the solo run's operations on its
own slice of each tensor, so losses agree with the solo run's to float rounding (some CPU
kernels round an element by where it lies in the tensor); ``tests/training/test_stacked.py``
states the tolerance. Dropout masks are drawn once for all members: a member's masks have its
solo run's distribution, not its values (docs/stacking.md). Not here: ``16-mixed`` (no loss
scaler per member: refused at plan time) and ``bf16-true``.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import ExitStack
from typing import Any

import pytorch_lightning as pl
import torch

from ablate.config import ConfigError, RunConfig
from ablate.stacking import MEMBER_FIELDS, PRECISIONS, stack_key
from ablate.store import FINISHED, RunDir
from ablate.training.stacked.lit import LitStack
from ablate.training.stacked.member import Member, finish, open_member
from ablate.training.stacked.store import MemberCheckpointIO
from ablate.training.train import (
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


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}".lstrip("."))
    return path


def check_group(cfgs: list[RunConfig]) -> None:
    """``ConfigError`` (one line, naming the key) unless ``cfgs`` can train as one group."""
    if not cfgs:
        raise ConfigError("a stacked group needs at least one run", key="train.stack")
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
    if t.precision not in PRECISIONS:
        raise ConfigError(
            f"stacked training supports precision {', '.join(PRECISIONS)}, not {t.precision}",
            key="train.precision",
        )
    if t.devices != 1:
        raise ConfigError("stacked training uses one device", key="train.devices")


def _device(cfg: RunConfig) -> torch.device:
    want = cfg.train.accelerator
    if want == "gpu" or (want == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def _step_done(steps: list[int]) -> None:
    """Called after every step of a group with the members' steps: one place for tests to
    inject a stop or a crash at a chosen step."""


class _StepDone(pl.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        _step_done([trainer.global_step] * pl_module.k)


def _fit(
    members: list[Member], device: torch.device, stop: StepBoundaryStop, until: int | None
) -> None:
    """One ``Trainer.fit`` of ``members`` (all at one step) until they finish, one of them
    finishes, or step ``until`` (where members further ahead wait); their state handed back."""
    lit = LitStack(members, device)
    lit.stop_at = until
    dirs = [m.run_dir for m in members]
    trainer = make_trainer(
        members[0].cfg,
        dirs[0],
        [],
        progress=False,
        stop=stop,
        member_dirs=dirs,
        checkpoint_io=MemberCheckpointIO([d.checkpoint_dir for d in dirs]),
        callbacks=[_StepDone()],
    )
    train, val = lit.dataloaders()
    try:
        trainer.fit(lit, train_dataloaders=train, val_dataloaders=val)
    except SystemExit as err:  # Lightning's answer to a KeyboardInterrupt, after its checkpoint
        if isinstance(err.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise
    lit.copy_to_members()


def _train(members: list[Member], device: torch.device, stop: StepBoundaryStop) -> None:
    """Fit until every member is done, each finished member's summary written at once: the
    members furthest behind first, up to the next ones' step; a member that finishes leaves."""
    while training := [m for m in members if not m.done]:
        start = min(m.step for m in training)
        turn = [m for m in training if m.step == start]
        ahead = [m.step for m in training if m.step > start]
        _fit(turn, device, stop, min(ahead, default=None))
        if all(m.step == start and not m.done for m in turn):
            raise RuntimeError(f"a stacked fit from step {start} trained no step")
        for m in turn:
            if m.done:
                finish(m, device)


def _open_all(
    cfgs: list[RunConfig],
    run_dirs: list[RunDir],
    metas: list[dict],
    device,
    t0: float,
    workers: int,
) -> list[Member]:
    """The members to train: every run that has not finished (completed, diverged), opened."""
    out: list[Member] = []
    group = {"members": len(cfgs), "runs": [rd.run_id for rd in run_dirs]}
    kernel = attn_kernel(cfgs[0], device) if cfgs[0].model.arch == "transformer" else None
    for cfg, rd, meta in zip(cfgs, run_dirs, metas, strict=True):
        prior = rd.read_summary() or {}
        if prior.get("status") in FINISHED:
            continue
        m = open_member(cfg, rd, meta, t0, workers)
        m.summary.update(attn_kernel=kernel, stack=group)
        out.append(m)
    for m in out:  # the runs this attempt trains together
        m.attempt.trains(training_way(m.cfg, len(out), device))
    return out


def train_group(
    cfgs: list[RunConfig],
    run_dirs: list[RunDir],
    metas: list[dict[str, Any] | None] | None = None,
    *,
    workers: int = 1,
) -> list[dict[str, Any]]:
    """Train (or resume) the runs ``cfgs`` into ``run_dirs`` as one stacked group and return
    their summaries, in order. Finished runs (completed, diverged) are skipped; ``workers``
    (how many of the study's tasks train at once) is recorded in each member's environment.

    Each member's directory ends as a solo run's would (``train.train_run``): run.yaml,
    summary.json, metrics.csv, progress.json, checkpoints/last.ckpt; its summary adds
    ``stack`` (the group). An exception fails every unfinished member (``failed``, error.log);
    Ctrl-C stops at a step boundary with a checkpoint each and re-raises KeyboardInterrupt.
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
            members = _open_all(cfgs, run_dirs, metas, device, t0, workers)
            for m in members:
                if m.done:  # killed during its final evaluation
                    finish(m, device)
            with stoppable(stop):
                _train(members, device, stop)
    except (KeyboardInterrupt, SystemExit):
        for m in members:
            if not m.finished:  # stays "running": the next run resumes it from its checkpoint
                m.attempt.interrupted()
            m.close_wandb()
        raise
    except Exception as err:  # noqa: BLE001 - a failed group must not stop a study
        log.exception("stacked group %s failed", [rd.run_id for rd in run_dirs])
        for m in members:
            if not m.finished:
                m.attempt.failed(err)
                m.attempt.write(wall_time_s=m.attempt.wall_time())
            m.close_wandb()
    if stop.requested:  # asked to stop during the last step: the group finished, the study stops
        raise KeyboardInterrupt
    return [rd.read_summary() or {} for rd in run_dirs]  # what each member's store says
