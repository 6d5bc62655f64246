"""The LightningModule: optimizer, LR schedule, metrics and divergence detection.

The model, the schedule and the batching are plain functions/modules elsewhere; this wraps
them. Training reads the device once per log step (``log_interval``): the loss is summed on
the device, a non-finite loss is recorded there, gradient norms (every ``grad_norm_interval``
steps) wait there, and a log step reads all of them in one ``tolist`` (a checkpoint or the end
of training reads norms still waiting). Nothing goes through Lightning's ``self.log`` while
training: Lightning converts each logged value with its own ``.item()``, at every step. An
evaluation reads its loss once, and hands it to Lightning only for ``EarlyStopping``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from ablate.config import RunConfig
from ablate.model import build_model
from ablate.training.adamw import MemberAdamW, lr_of

_LAYER = re.compile(r"(?:^|\.)blocks\.(\d+)\.|_l(\d+)(?:_reverse)?$")


def layer_of(param_name: str) -> str:
    """Group a parameter name into ``layer_<i>`` (transformer blocks / LSTM layers) or ``other``."""
    m = _LAYER.search(param_name)
    if m:
        return f"layer_{int(m.group(1) or m.group(2)):02d}"
    return "other"


@torch.no_grad()
def grad_norm_metrics(
    named_grads: Iterable[tuple[str, torch.Tensor | None]],
    layer_map: dict[str, str],
    lead: int = 0,
) -> dict[str, torch.Tensor]:
    """``grad_norm/<layer>``, ``grad_norm/global`` and ``grad_norm/ffn_out_<i>`` (Xiong et al.
    2020, Fig. 3: the FFN output weight) of the gradients. ``lead``: leading dimensions that are
    not summed over (1 for a stack of members: each norm is then one value per member)."""
    sq: dict[str, torch.Tensor] = {}
    ffn_out: dict[str, torch.Tensor] = {}
    for name, g in named_grads:
        if g is None:
            continue
        # flatten(lead) of a contiguous tensor is a view: with lead 0 the same sum as before
        g2 = g.detach().float().flatten(lead).pow(2).sum(-1)
        key = layer_map[name]
        sq[key] = sq.get(key, 0.0) + g2
        if name.endswith("ffn.w2.weight"):
            ffn_out[f"grad_norm/ffn_out_{key[6:]}"] = g.detach().float().flatten(lead).norm(dim=-1)
    if not sq:
        return {}
    out = {f"grad_norm/{k}": v.sqrt() for k, v in sorted(sq.items())}
    out["grad_norm/global"] = torch.stack(list(sq.values())).sum(0).sqrt()
    out.update(ffn_out)
    return out


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy in nats: logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


def lm_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``lm_loss`` of each of k members at once: logits (k, B, T, V), targets (k, B, T) ->
    (k,), with one cross-entropy call for all members."""
    k, vocab = logits.size(0), logits.size(-1)
    tokens = F.cross_entropy(
        logits.reshape(-1, vocab).float(), targets.reshape(-1), reduction="none"
    )
    return tokens.view(k, -1).mean(1)


class LitLM(pl.LightningModule):
    def __init__(self, cfg: RunConfig, vocab_size: int, *, bits_per_token: bool = False):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        # bits-per-char is loss / ln 2 when a token is a character
        self.bits_per_token = bits_per_token
        self.model = build_model(cfg.model, vocab_size)
        self.tokens_per_step = cfg.data.batch_size * cfg.data.seq_len
        self._layer_of = {n: layer_of(n) for n, _ in self.model.named_parameters()}
        self.register_buffer("nonfinite_step", torch.tensor(-1, dtype=torch.long), persistent=False)
        self.diverged_step: int | None = None
        self._t_last: float | None = None
        self._step_last = 0
        self._eval_t0 = 0.0
        self._loss_sum: torch.Tensor | None = None
        self._loss_n = 0
        self.tokens_per_s: float | None = None
        self.train_loss: float | None = None  # the last log step's, for the progress displays
        self.val_loss: float | None = None
        self._val_losses: list[torch.Tensor] = []
        # gradient norms waiting on the device for the next read: (step, names, values)
        self._pending_norms: list[tuple[int, list[str], torch.Tensor]] = []
        self._logged_step = -1

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Accept a checkpoint whose model was wrapped by ``torch.compile(model)``: its keys
        carry an ``_orig_mod.`` segment that the eager module (and ``model.compile()``, which
        compiles in place) does not have."""
        state = checkpoint.get("state_dict") or {}
        if any("._orig_mod." in k or k.startswith("_orig_mod.") for k in state):
            checkpoint["state_dict"] = {
                k.replace("._orig_mod.", ".").removeprefix("_orig_mod."): v
                for k, v in state.items()
            }

    # --- optimisation ---------------------------------------------------------------------
    def configure_optimizers(self):
        """``MemberAdamW`` (clipping, AdamW and the LR schedule in one step, the stacked
        path's code) over the model: no Lightning scheduler, no Lightning clipping."""
        return MemberAdamW.for_model(self.model, self.cfg)

    def configure_gradient_clipping(
        self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        """Nothing: ``MemberAdamW.step`` clips (``optim.grad_clip``) on the device, after
        Lightning's ``16-mixed`` scaler has unscaled the gradients."""

    # --- training -------------------------------------------------------------------------
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = lm_loss(self.model(x), y)
        detached = loss.detach()
        # accumulate on-device; read once per log interval (no host sync per step)
        self._loss_sum = detached if self._loss_sum is None else self._loss_sum + detached
        self._loss_n += 1
        bad = (~torch.isfinite(detached)) & (self.nonfinite_step < 0)
        self.nonfinite_step = torch.where(bad, self.global_step, self.nonfinite_step)
        return loss

    def log_now(self, metrics: dict[str, float], step: int) -> None:
        """Send metrics to every logger at ``step`` (Lightning's own cadence would drop them)."""
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)

    def is_log_step(self, step: int) -> bool:
        return step % self.cfg.train.log_interval == 0 or step == self.cfg.train.max_steps

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.is_log_step(self.global_step):
            self.log_step()

    def log_step(self) -> float | None:
        """Log this log step's metrics and return its mean training loss. The first call at a
        step reads the device (``ProgressFile``'s hook runs before this module's), later calls
        return what it read."""
        step = self.global_step  # optimizer steps done so far
        if step == self._logged_step or self._loss_sum is None:
            return self.train_loss
        now = time.perf_counter()
        n = max(self._loss_n, 1)
        mean_loss, bad_step = self._read(
            [self._loss_sum / n, self.nonfinite_step.to(self._loss_sum)]
        )
        metrics = {"train/loss": mean_loss, "lr": lr_of(self.cfg, step)}
        if step > self._step_last:
            dt = now - self._t_last
            self.tokens_per_s = (step - self._step_last) * self.tokens_per_step / dt
            metrics["perf/tokens_per_s"] = self.tokens_per_s
        self.log_now(metrics, step)
        self.train_loss, self._logged_step = mean_loss, step
        self._loss_sum, self._loss_n = None, 0
        self._t_last, self._step_last = time.perf_counter(), step
        if bad_step >= 0:
            self.diverged_step = int(bad_step)
            self.trainer.should_stop = True
        return mean_loss

    def _read(self, scalars: list[torch.Tensor]) -> list[float]:
        """``scalars`` (0-d tensors on the device) and every pending gradient norm in one read of
        the host; the norms are logged at their own steps, before anything later."""
        pending, self._pending_norms = self._pending_norms, []
        parts = [v.float().reshape(-1) for v in scalars] + [v.float() for _, _, v in pending]
        if not parts:
            return []
        values = torch.cat(parts).tolist()
        at = len(scalars)
        for step, names, _ in pending:
            self.log_now(dict(zip(names, values[at : at + len(names)], strict=True)), step)
            at += len(names)
        return values[: len(scalars)]

    def on_train_start(self):
        self._t_last, self._step_last = time.perf_counter(), self.global_step

    def on_validation_start(self):
        self._eval_t0 = time.perf_counter()

    def on_validation_end(self):
        # evaluation time is not training throughput
        if self._t_last is not None:
            self._t_last += time.perf_counter() - self._eval_t0

    def on_before_optimizer_step(self, optimizer):
        interval = self.cfg.train.grad_norm_interval
        step = self.global_step  # gradients of this step, before the update: step 0 = at init
        if interval == 0 or (step % interval and step != 0):
            return
        norms = self.grad_norms()
        if norms:  # read with the next log step's values
            self._pending_norms.append((step, list(norms), torch.stack(list(norms.values()))))

    def on_train_end(self):
        self._read([])  # norms still waiting (a run stopped early)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # a checkpoint off the log interval (an interruption, an early stop): the norms up to
        # it go into metrics.csv first, since a resumed run drops the rows after its step and
        # would not compute them again
        self._read([])

    def grad_norms(self) -> dict[str, torch.Tensor]:
        """Global and per-layer L2 norms of the gradients (before clipping)."""
        return grad_norm_metrics(
            ((n, p.grad) for n, p in self.model.named_parameters()), self._layer_of
        )

    # --- validation -----------------------------------------------------------------------
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self._val_losses.append(lm_loss(self.model(x), y).detach())

    def on_validation_epoch_end(self):
        if not self._val_losses:
            return
        loss = torch.stack(self._val_losses).mean()
        self._val_losses.clear()
        # the evaluation's one read, with any gradient norms still waiting: their rows come
        # before this step's in metrics.csv
        (value,) = self._read([loss])
        metrics = {"val/loss": value, "val/ppl": math.exp(min(value, 50.0))}
        if self.bits_per_token:
            metrics["val/bpc"] = value / math.log(2)
        self.log_now(metrics, self.global_step)
        self.val_loss = value
        if self.cfg.train.early_stopping_patience:  # Lightning's EarlyStopping reads it there
            self.log("val/loss", loss, logger=False)
