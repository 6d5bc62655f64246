"""One run of a stacked group: its store, data, model and where it stands between fits.

A member is opened exactly as a solo run is (``train.prepare_run``: ``run.yaml``, the
``running`` summary, the seeded data and initial weights, the checkpoint it resumes from), so
its first step equals the solo run's. Between the group's fits (``stacked.group``) the member
holds its own state as a resume reads it: weights in its own model, AdamW state, loop state
and step. At the end ``finish`` evaluates it as a solo run is evaluated (``train.finish_run``,
on the training device, under the run's precision) and writes its summary.

Its metrics go to its own store (``StoreLogger``) and to its own W&B run object
(``ablate.tracking.runs``), both as Lightning loggers of the module's member.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from pytorch_lightning.loggers import Logger

from ablate.config import RunConfig
from ablate.data import LMDataModule
from ablate.store import RunDir
from ablate.store.attempt import RunAttempt
from ablate.tracking.runs import finish_wandb_run, log_member, start_member_wandb
from ablate.training.inputs import run_inputs
from ablate.training.lit import LitLM, checkpoint_loop
from ablate.training.store_logger import StoreLogger
from ablate.training.train import finish_run, prepare_run


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
    lit: LitLM  # its own model (the solo run's initial weights)
    wandb: Any = None  # the member's own W&B run object (ablate.tracking.runs), or None
    step: int = 0
    optimizer: dict | None = None  # AdamW state_dict (a checkpoint's, or the last fit's)
    loop: dict[str, Any] = field(default_factory=dict)  # LitRuns.loop_state
    early: tuple[float, int] = (float("inf"), 0)  # early stopping: (best val/loss, since)
    stopped_early: bool = False
    diverged_step: int | None = None
    tokens_per_s: float | None = None
    finished: bool = False  # its final summary is written

    @property
    def summary(self) -> dict[str, Any]:
        return self.attempt.summary

    @property
    def done(self) -> bool:
        """Done training: diverged, stopped early, or at ``max_steps``."""
        ended = self.diverged_step is not None or self.stopped_early
        return ended or self.step >= self.cfg.train.max_steps

    def loggers(self) -> list[Logger]:
        out: list[Logger] = [StoreLogger(self.run_dir)]
        if self.wandb is not None:
            out.append(MemberWandb(self.wandb))
        return out

    def close_wandb(self) -> None:
        run, self.wandb = self.wandb, None
        finish_wandb_run(run, self.summary)


def open_member(
    cfg: RunConfig, run_dir: RunDir, meta: dict[str, Any], t0: float, workers: int = 1
) -> Member:
    """Write ``run.yaml`` and the ``running`` summary, build data and model exactly as a solo
    run does, start its W&B run and read its checkpoint (if any) into it."""
    from ablate.model.plugins import load_plugins

    load_plugins((meta or {}).get("plugins"), key="meta.plugins", source=run_dir.run_file)
    attempt = RunAttempt.start(cfg, run_dir, meta, t0, inputs=run_inputs(cfg))
    dm, lit, ckpt_path = prepare_run(cfg, attempt, workers)
    m = Member(cfg, run_dir, attempt, dm, lit)
    m.early, m.stopped_early = lit.early[0], lit.stopped_early[0]  # from the store's history
    m.wandb = start_member_wandb(cfg, run_dir, attempt.meta, m.summary["name"])
    if m.wandb is not None:
        m.summary["wandb_dir"] = str(m.wandb.dir)
    if ckpt_path is not None:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        lit.on_load_checkpoint(ckpt)  # keys of a compiled model's checkpoint
        lit.load_state_dict(ckpt["state_dict"])
        m.step = int(ckpt["global_step"])
        m.optimizer = (ckpt.get("optimizer_states") or [None])[0]
        m.loop = checkpoint_loop(ckpt)
    return m


def precision_context(cfg: RunConfig, device: torch.device):
    """The run's precision as Lightning's ``forward_context`` sets it, for the precisions a
    stack trains in (``ablate.stacking.PRECISIONS``): autocast to bf16 for ``bf16-mixed``."""
    bf16 = cfg.train.precision == "bf16-mixed"
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)


def finish(m: Member, device: torch.device) -> None:
    """The member's final summary (final evaluation unless diverged, on ``device`` under its
    precision), written to its store; its W&B run closed."""
    model = m.lit.model.to(device)
    with precision_context(m.cfg, device):
        fields = finish_run(
            m.cfg,
            model,
            m.dm,
            m.run_dir,
            steps=m.step,
            tokens_per_s=m.tokens_per_s,
            diverged_step=m.diverged_step,
        )
    m.attempt.write(**fields, wall_time_s=m.attempt.wall_time())
    m.finished = True
    m.close_wandb()
