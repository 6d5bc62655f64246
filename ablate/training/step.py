"""One training step of k members, solo (k = 1) and stacked runs alike.

``train_step`` is the whole step, in the order it happens: the members' losses (one forward of
the model, ``member_losses``), the backward of their sum (the members share no operation, so
each gets exactly its own gradient), the mask of members whose loss is not finite (their
update is skipped from now on: a diverged member is frozen, the others go on unchanged), and
``MemberAdamW``'s update (each member's gradient clipping, AdamW and LR schedule, in a fixed
handful of operations for all members). The LightningModule (``ablate.training.lit.LitRuns``)
calls it once per batch; nothing in it reads a value back to the host.

``train.compile`` compiles ``member_losses`` (forward and loss, and with it their backward) with
``torch.compile``: one graph per number of members in training and one in evaluation; the update
stays torch's fused AdamW kernel. ``train.compile_mode: reduce-overhead`` adds CUDA graphs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ablate.config import RunConfig

log = logging.getLogger("ablate")


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy in nats over every token of ``logits`` ``(..., V)`` and
    ``targets`` (the same tokens, ``(...)``), in fp32."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


def lm_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``lm_loss`` of each of k members at once, in one cross-entropy call: logits
    ``(k, B, T, V)``, targets ``(k, B, T)`` or ``(B, T)`` (every member's) -> ``(k,)``."""
    k, vocab = logits.size(0), logits.size(-1)
    targets = targets.expand(logits.shape[:-1])  # (k, B, T)
    tokens = F.cross_entropy(
        logits.reshape(-1, vocab).float(), targets.reshape(-1), reduction="none"
    )
    return tokens.view(k, -1).mean(1)


def member_losses(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(k,)`` mean token losses of the model's k members: batches ``x, y`` ``(k, B, T)``
    (member i's in row i), or ``(B, T)`` every member reads (evaluation)."""
    return lm_losses(model(x if x.dim() == 3 else x.unsqueeze(0)), y)  # (k, B, T, V) logits


def adamw_of(opt: Any) -> Any:
    """The ``MemberAdamW`` behind ``opt`` (Lightning wraps it as ``opt.optimizer``)."""
    return getattr(opt, "optimizer", opt)


def train_step(
    model: torch.nn.Module,
    opt: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    losses_of: Callable[..., torch.Tensor] = member_losses,
    backward: Callable[[torch.Tensor], Any] = torch.Tensor.backward,
) -> torch.Tensor:
    """One optimizer step of every member; returns their ``(k,)`` fp32 losses (on the device).

    ``opt``: the ``MemberAdamW`` (or Lightning's wrapper of it, whose ``step`` also counts the
    step and calls the hooks before it); ``losses_of``: ``member_losses``, compiled or not;
    ``backward``: how the loss is backpropagated (Lightning's ``manual_backward``)."""
    losses = losses_of(model, x, y)  # (k,)
    backward(losses.sum())  # the members share no operation: each gets its own gradient
    losses = losses.detach().float()
    adamw_of(opt).active &= torch.isfinite(losses).view(-1, 1)  # frozen from here on
    opt.step()  # each member's clipping, AdamW and LR
    opt.zero_grad(set_to_none=True)
    return losses


class _RecompileNotice(logging.Filter):
    """Past ``torch._dynamo.config.recompile_limit`` compiles of one function, dynamo runs it
    eager from then on and says so in one warning among its own logs, easy to miss. A group
    recompiles when a member leaves it (k changes) and a run for each new evaluation length,
    so this says it once more, on ablate's logger, in words."""

    said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.said and str(record.msg).startswith("torch._dynamo hit config."):
            type(self).said = True
            limit = record.args[1] if isinstance(record.args, tuple) else "?"
            log.warning(
                "train.compile: the training step hit torch's recompile limit (%s compiles) "
                "and runs eager from now on: same numbers, slower steps (docs/stacking.md)",
                limit,
            )
        return True


_NOTICE = _RecompileNotice()


def losses_fn(cfg: RunConfig) -> Callable[..., torch.Tensor]:
    """``member_losses``, compiled when ``train.compile`` (mode ``train.compile_mode``)."""
    if not cfg.train.compile:
        return member_losses
    # Logger.addFilter adds a filter once, however many runs compile
    logging.getLogger("torch._dynamo.convert_frame").addFilter(_NOTICE)
    return torch.compile(member_losses, mode=cfg.train.compile_mode)
