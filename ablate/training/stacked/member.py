"""One run of a group (a solo run is a group of one): its store, data, model and where it
stands between fits.

``open_member`` opens a run: ``run.yaml``, the ``running`` summary, the seeded data and initial
weights, the checkpoint it resumes from (checked against the data), so its first step is the
same whichever group it trains in. Between the group's fits (``ablate.training.train``) the
member holds its own state as a resume reads it: weights in its own model, AdamW state, loop
state and step. At the end ``finish`` evaluates it (``finish.finish_run``, on the training
device, under the run's precision) and writes its summary.

Its metrics go to its own store (``StoreLogger``) and to its own W&B run object
(``ablate.tracking.runs``), both as Lightning loggers of the module's member.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import Logger

from ablate.config import RunConfig
from ablate.data import LMDataModule
from ablate.model import LanguageModel, build_model, load_member_state_dict
from ablate.store import RunDir
from ablate.store.attempt import RunAttempt
from ablate.store.provenance import environment
from ablate.tracking.runs import finish_wandb_run, log_member, start_member_wandb
from ablate.training.checkpoints import select_checkpoint
from ablate.training.finish import (
    ResumeMismatch,
    check_resume,
    finish_run,
    tokenizer_digest,
    val_history,
)
from ablate.training.inputs import run_inputs
from ablate.training.lit import MemberMetrics, early_stopping_state, resumed_divergence
from ablate.training.precision import precision_context
from ablate.training.stacked.store import load_member_checkpoint, member_loop
from ablate.training.store_logger import StoreLogger


class MemberWandb(Logger):
    """A member's own W&B run object as a Lightning logger (``tracking.runs.log_member``)."""

    def __init__(self, run: Any):
        super().__init__()
        self.run = run

    @property
    def name(self) -> str:
        return "wandb-member"

    @property
    def version(self) -> str:
        return str(getattr(self.run, "id", ""))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass  # the config went to wandb.init

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        log_member(self.run, metrics, int(step or 0))


@dataclass
class Member:
    """One run of the group; see the module docstring."""

    cfg: RunConfig
    run_dir: RunDir
    attempt: RunAttempt  # the writer of the member's run directory
    dm: LMDataModule
    model: LanguageModel  # its own model of one member (its initial weights, then its state)
    wandb: Any = None  # the member's own W&B run object (ablate.tracking.runs), or None
    step: int = 0
    optimizer: dict | None = None  # AdamW state_dict (a checkpoint's, or the last fit's)
    loop: dict[str, Any] = field(default_factory=dict)  # LitRuns.loop_state
    metrics: MemberMetrics = field(default_factory=MemberMetrics)  # how it trains and ended
    tokens_per_s: float | None = None
    finished: bool = False  # its final summary is written
    wandb_wait: float = 0.0  # seconds waiting for W&B (a slow or dead server is not train time)

    @property
    def summary(self) -> dict[str, Any]:
        return self.attempt.summary

    @property
    def done(self) -> bool:
        """Done training: diverged, stopped early, or at ``max_steps``."""
        return self.metrics.ended or self.step >= self.cfg.train.max_steps

    def loggers(self) -> list[Logger]:
        out: list[Logger] = [StoreLogger(self.run_dir)]
        if self.wandb is not None:
            out.append(MemberWandb(self.wandb))
        return out

    def close_wandb(self) -> None:
        run, self.wandb = self.wandb, None
        t = time.time()
        finish_wandb_run(run, self.summary)
        self.wandb_wait += time.time() - t

    def wall_time(self) -> dict[str, float]:
        """The summary's ``wall_time_s`` (W&B's waits left out) and ``wandb_wait_s``."""
        out = {"wall_time_s": self.attempt.wall_time(self.wandb_wait)}
        if self.wandb_wait:
            out["wandb_wait_s"] = round(self.wandb_wait, 3)
        return out


def open_member(
    cfg: RunConfig, run_dir: RunDir, meta: dict[str, Any], t0: float, workers: int = 1
) -> Member:
    """Write ``run.yaml`` and the ``running`` summary, build data and model (seeded by
    ``train.seed``), record the run's sizes and environment (``workers``: runs training at
    once), start its W&B run and read its checkpoint (if any: metrics after its step are
    dropped) into it. ``ResumeMismatch`` (the data changed under the checkpoint) puts back what
    the store said."""
    from ablate.model.plugins import load_plugins

    # another process (a worker, a cluster job) imports the study's plugins again
    load_plugins((meta or {}).get("plugins"), key="meta.plugins", source=run_dir.run_file)
    attempt = RunAttempt.start(cfg, run_dir, meta, t0, inputs=run_inputs(cfg))
    try:
        m = _build(cfg, attempt, workers)
    except ResumeMismatch:  # bad input, not a failed run: touch nothing else
        attempt.restore()
        raise
    except Exception as err:
        attempt.failed(err)
        attempt.write(wall_time_s=attempt.wall_time())
        raise
    t = time.time()
    m.wandb = start_member_wandb(cfg, run_dir, attempt.meta, m.summary["name"])
    m.wandb_wait = time.time() - t
    if m.wandb is not None:
        m.summary["wandb_dir"] = str(m.wandb.dir)
    return m


def _build(cfg: RunConfig, attempt: RunAttempt, workers: int) -> Member:
    """The member's data, model and the state of the checkpoint it resumes from."""
    pl.seed_everything(cfg.train.seed, workers=True, verbose=False)
    dm = LMDataModule(cfg.data, seed=cfg.train.seed)
    dm.setup("fit")
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, dm.vocab_size)
    counts = model.param_counts()
    attempt.write(
        params=counts["total"],
        params_non_embedding=counts["non_embedding"],
        flops_per_token=model.flops_per_token(cfg.data.seq_len),
        vocab_size=dm.vocab_size,
        lr=cfg.lr,
        environment=environment(cfg.train.accelerator, workers),  # threads/workers/versions
    )
    # corrupt checkpoints are renamed *.corrupt (set aside) and named in the summary
    ckpt_path, step, set_aside = select_checkpoint(attempt.run_dir.checkpoint_dir)
    attempt.summary["tokenizer_sha256"] = tokenizer_digest(dm.tokenizer)
    attempt.save_tokenizer(dm.tokenizer)
    m = Member(cfg, attempt.run_dir, attempt, dm, model)
    if ckpt_path is not None:
        ckpt = load_member_checkpoint(ckpt_path)
        check_resume(ckpt, dm, attempt.prior, attempt.run_dir)  # same vocabulary and tokenizer
        weights = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}
        load_member_state_dict(model, 0, weights)
        m.step = int(ckpt["global_step"])
        m.optimizer = (ckpt.get("optimizer_states") or [None])[0]
        m.loop = member_loop(ckpt)
        if (bad := resumed_divergence(cfg, m.step, m.loop)) is not None:
            m.metrics.diverged_step, m.metrics.found_at = bad, m.step  # done: finished at once
    attempt.resume(step if ckpt_path is not None else None, set_aside)
    # early stopping from the store's val/loss history (the rows up to the checkpoint's step)
    best, wait, m.metrics.stopped_early = early_stopping_state(
        val_history(attempt.run_dir), cfg.train.early_stopping_patience
    )
    m.metrics.early = (best, wait)
    return m


def finish(m: Member, device: torch.device) -> None:
    """The member's final summary (final evaluation unless diverged, on ``device`` under its
    precision), written to its store; its W&B run closed."""
    model = m.model.to(device)
    with precision_context(m.cfg.train.precision, device):
        fields = finish_run(
            m.cfg,
            model,
            m.dm,
            m.run_dir,
            steps=m.step,
            tokens_per_s=m.tokens_per_s,
            diverged_step=m.metrics.diverged_step,
        )
    m.summary.update(fields)
    m.close_wandb()  # with the summary's numbers
    m.attempt.write(**m.wall_time())
    m.finished = True
