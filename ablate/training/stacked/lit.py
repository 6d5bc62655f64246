"""``LitStack``: the members of a group (one for a solo run) as one LightningModule, and their
batches.

Everything a step computes and records is ``LitRuns``'s (``ablate.training.lit``), over one
model of k members (``ablate.model.stack_models``: member i holds member i's own model's
weights). What this adds is the hand-over of each member's state into and out of a fit: its
step (the module counts from it: a fit that resumes restores no Lightning state), weights,
AdamW state and loop state, and each member's checkpoint. A batch is every member's batch from
its own data stream (seed, start), stacked: ``(k, B, T)``; evaluation batches are shared (the
members have one data config).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from ablate.data import LMDataModule
from ablate.model import load_member_state_dict, member_state_dict, stack_models
from ablate.training.adamw import MemberAdamW, lr_of
from ablate.training.lit import LitRuns
from ablate.training.stacked.member import Member
from ablate.training.stacked.store import member_checkpoint


def _hyper(m: Member, step: int) -> dict[str, Any]:
    """The param-group entries of the member's AdamW state_dict at ``step``."""
    o = m.cfg.optim
    betas = (o.beta1, o.beta2)
    return {"lr": lr_of(m.cfg, step), "betas": betas, "eps": o.eps, "weight_decay": o.weight_decay}


class LitStack(LitRuns):
    """The ``members`` (all at one step) as one module on ``device``."""

    def __init__(self, members: list[Member], device: torch.device):
        super().__init__(
            [m.cfg for m in members],
            stack_models([m.model.to(device) for m in members]),
            bits_per_token=members[0].dm.is_char,
            member_loggers=[m.loggers() for m in members],
            step=members[0].step,
            metrics=[m.metrics for m in members],
        )
        self.members = members
        self.clocks = [m.attempt.wall_time for m in members]
        self.start_step = members[0].step
        self.loop_states = [m.loop for m in members]
        self.opt: MemberAdamW | None = None

    def configure_optimizers(self):
        """``LitRuns``' optimizer, with each member's AdamW state and step."""
        opt = super().configure_optimizers()
        for i, m in enumerate(self.members):
            if m.optimizer:
                opt.load_member(i, m.optimizer)
        opt.start_at([self.start_step] * self.k)
        self.opt = opt  # for copy_to_members, after the fit
        return opt

    def save_members(self, checkpoint: dict, loops: list[dict[str, Any]]) -> None:
        """Each member's checkpoint (``stacked.store.member_checkpoint``), copied off the
        device now, for ``MemberCheckpointIO`` to write into the member's directory."""
        step, opt = self.step, self.opt
        checkpoint["members"] = [
            member_checkpoint(
                member_state_dict(self.model, i),
                step,
                opt.member_state(i, _hyper(m, step)),
                loops[i],
            )
            for i, m in enumerate(self.members)
        ]

    @torch.no_grad()
    def copy_to_members(self) -> None:
        """Each member's state after the fit, as a resume would read it: weights into its own
        model (on the training device), AdamW state, loop state, step and how it ended."""
        opt = self.opt
        step, loops = self.step, self.loop_state()
        for i, m in enumerate(self.members):
            if m.model is not self.model:  # a group of one trained its member's own model
                load_member_state_dict(m.model, 0, member_state_dict(self.model, i))
            m.optimizer = opt.member_state(i, _hyper(m, step))
            m.loop, m.step = loops[i], step
            m.tokens_per_s = self.tokens_per_s if self.tokens_per_s is not None else m.tokens_per_s

    def dataloader(self) -> DataLoader:
        """The stacked training batches from the members' step on; the shared evaluation
        batches become ``val_batches``."""
        dms = [m.dm for m in self.members]
        cuda = next(self.model.parameters()).is_cuda
        # a private generator: iterating the loader draws its seed from it, not from torch's
        # global RNG (dropout)
        train = DataLoader(
            _StackedBatches(dms, self.start_step),
            batch_size=None,
            pin_memory=cuda,
            generator=torch.Generator(),
        )
        self.val_batches = dms[0].val_dataloader()
        return train


class _StackedBatches(IterableDataset):
    """Each member's training batches (its own seeded stream, from global batch ``start``, epoch
    after epoch), stacked: ``(k, B, T)`` inputs and targets."""

    def __init__(self, dms: list[LMDataModule], start: int):
        self.dms, self.start = dms, start

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        streams = [_batches(dm, self.start) for dm in self.dms]
        while True:
            xs, ys = zip(*(next(s) for s in streams), strict=True)
            yield torch.stack(xs), torch.stack(ys)


def _batches(dm: LMDataModule, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The batches ``dm.train_dataloader(start=start)`` yields, endlessly (its sampler moves
    to the next epoch after each pass), without a loader per epoch."""
    loader = dm.train_dataloader(start=start)
    while True:
        for index in loader.sampler:
            yield loader.dataset[index]
