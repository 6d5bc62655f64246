"""The LightningModule of training: k runs ("members") stepped as one, k = 1 for a solo run.

Lightning's ``Trainer`` drives every fit, solo (k = 1) or a stacked group: its loop over the
batches, precision, device, callbacks and exceptions (``ablate.training.trainer``). ``LitRuns``
holds the model of its k members (``ablate.model``: every tensor leads with the member
dimension), counts their step (from the step they resume at), calls the one training step
(``ablate.training.step.train_step``) once per batch and, after it, ``end_step``: log,
evaluate, decide the end of the fit, checkpoint, in that order, the one place that ends a fit.
It is the one place that keeps the per-step metrics of each member: the training loss summed
over the log interval, the LR, tokens/s net of evaluation time, the step of the first
non-finite loss, gradient norms, validation loss/ppl/bpc and early stopping. Its subclass
``ablate.training.stacked.lit.LitStack`` says where the members come from and go (each with
its own checkpoint). Lightning's progress counters are never set or read: a fit's own count
starts at 0 and the module's step is the members'.

Optimization is manual (``automatic_optimization = False``): the step's update is
``MemberAdamW.step`` (clipping, AdamW and the LR schedule of each member, ``adamw.py``). So
Lightning's own clipping is unused; with manual optimization it refuses ``gradient_clip_val``.

Training reads the device once per log step (``log_interval``): the loss is summed on the
device, a non-finite loss is recorded there (and the member's update masked from then on, so a
diverged member is frozen), gradient norms (every ``grad_norm_interval`` steps) wait there, and a
log step reads all of them in one ``tolist`` (a checkpoint or the end of training reads what
still waits). Nothing goes through Lightning's ``self.log``: Lightning converts each logged value
with its own ``.item()``, at every step. An evaluation reads its losses once.

Early stopping is the module's, per member, with the rule of Lightning's ``EarlyStopping(
monitor="val/loss", check_finite=True)`` (min_delta 0): Lightning's callback watches one logged
value and stops the whole Trainer, while a stack's members stop one by one. Its state is not
checkpointed: it follows from the val/loss history in the store (``early_stopping_state``), which
also holds the evaluation of a checkpoint's own step (saved after it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytorch_lightning as pl
import torch

from ablate.config import RunConfig
from ablate.model import (
    LanguageModel,
    member_tensors,
)
from ablate.training.adamw import MemberAdamW, lr_of
from ablate.training.precision import precision_context
from ablate.training.step import lm_loss, losses_fn, train_step
from ablate.training.throughput import Throughput

__all__ = ["LitRuns", "grad_norm_metrics", "layer_of", "lm_loss"]  # lm_loss: step.py's

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


@dataclass
class MemberMetrics:
    """One member's running metrics and how it ended, kept across the fits it trains in (a
    stack's fit hands the same object on to the next): what the module and the group read."""

    loss_n: int = 0  # steps in the device's loss sum since the last log step
    diverged_step: int | None = None  # the step of its first non-finite loss, once found
    found_at: int | None = None  # the log step that found it
    stopped_early: bool = False
    early: tuple[float, int] = (math.inf, 0)  # early stopping: (best val/loss, evaluations since)
    train_loss: float | None = None  # the last log step's mean (the progress line)
    val_loss: float | None = None  # the last evaluation's

    @property
    def ended(self) -> bool:
        """Diverged or stopped early (``max_steps`` is the module's to say)."""
        return self.diverged_step is not None or self.stopped_early


def is_log_step(cfg: RunConfig, step: int) -> bool:
    """Whether a run logs (and reads the device) after ``step`` updates."""
    return step % cfg.train.log_interval == 0 or step == cfg.train.max_steps


def resumed_divergence(cfg: RunConfig, step: int, loop: dict[str, Any]) -> int | None:
    """The diverged step a checkpoint at ``step`` with loop state ``loop`` already found: its
    first non-finite step, when ``step`` is a log step (the log step read it, and the run ended
    there; a kill before its summary leaves it to the resume), else None."""
    bad = int(loop.get("nonfinite_step", -1))
    return bad if bad >= 0 and is_log_step(cfg, step) else None


def early_stopping_step(
    state: tuple[float, int], value: float, patience: int
) -> tuple[float, int, bool]:
    """``(best, evaluations since it, stop)`` after one evaluation ``value`` from ``state``
    (``(best, wait)``): the rule of Lightning's ``EarlyStopping(check_finite=True)`` with
    ``min_delta`` 0. A non-finite value stops; a strictly lower one is the new best; any other
    counts towards ``patience``."""
    best, wait = state
    if not math.isfinite(value):
        return best, wait, True
    if value < best:
        return value, 0, False
    return best, wait + 1, wait + 1 >= patience


def early_stopping_state(history: Iterable[float], patience: int | None) -> tuple[float, int, bool]:
    """``early_stopping_step`` over the val/loss values ``history``: where a run's early
    stopping stands after them (``stop``: it stopped at the last of them)."""
    best, wait, stop = math.inf, 0, False
    for value in history if patience else ():
        best, wait, stop = early_stopping_step((best, wait), value, patience)
        if stop:
            break
    return best, wait, stop


class LitRuns(pl.LightningModule):
    """The k members of ``model`` (``cfgs``: one per member) trained by one ``Trainer.fit``;
    see the module docstring.

    ``member_loggers[i]``: member i's loggers. ``step``: the members' step (they train in
    step), counted here: a fit that resumes starts at its members' step.
    ``stop_at``: end the fit after this step (a stack pausing for members further ahead).
    ``loop_states``: each member's loop state (``stacked.store.member_loop``), applied when
    training starts. ``stop``: the stop request of the process (``trainer.StepBoundaryStop``).
    ``progress``: the members' ``progress.json`` writer. ``val_batches``: the evaluation
    batches every member reads. ``checkpoint_path``: where ``end_step`` saves.
    """

    def __init__(
        self,
        cfgs: list[RunConfig],
        model: LanguageModel,
        *,
        bits_per_token: bool,
        member_loggers: list[list[Any]],
        step: int = 0,
        metrics: list[MemberMetrics] | None = None,
    ):
        super().__init__()
        if model.members != len(cfgs):
            raise ValueError(f"{len(cfgs)} runs for a model of {model.members} members")
        self.automatic_optimization = False
        self.cfgs, self.cfg, self.k = cfgs, cfgs[0], len(cfgs)  # cfg: what members share
        self.model = model
        self.losses_of = losses_fn(self.cfg)  # member_losses, compiled under train.compile
        self._layer_of = {n: layer_of(n) for n, _ in model.named_parameters()}
        self._member = {n: member for n, (_, member, _) in member_tensors(model).items()}
        # bits-per-char is loss / ln 2 when a token is a character
        self.bits_per_token = bits_per_token
        self.member_loggers = member_loggers
        # each member's run clock (its attempt's wall_time: seconds trained, earlier attempts
        # included), logged with every evaluation as perf/wall_s: time to a loss from the store
        self.clocks: list[Callable[[], float]] | None = None
        self.tokens_per_step = self.cfg.data.batch_size * self.cfg.data.seq_len
        self.throughput = Throughput(self.tokens_per_step)  # clock reads after the device's work
        k = self.k
        self.register_buffer("loss_sum", torch.zeros(k), persistent=False)
        self.register_buffer("nonfinite_step", torch.full((k,), -1), persistent=False)
        self.metrics = metrics or [MemberMetrics() for _ in range(k)]
        self.tokens_per_s: float | None = None
        self.step = step
        self.stop_at: int | None = None
        self.loop_states: list[dict[str, Any]] | None = None
        self.stop: Any = None  # trainer.StepBoundaryStop
        self.progress: Any = None  # callbacks.ProgressFile
        self.val_batches: Iterable | None = None
        self.checkpoint_path: str | None = None
        self.after_step: Callable[[int], None] = lambda step: None  # a test's hook
        # gradient norms waiting on the device for the next read: (step, names, (names, k))
        self._pending_norms: list[tuple[int, list[str], torch.Tensor]] = []
        self._logged_step = -1
        self._bad: list[float] = []  # the first non-finite steps the last log step read

    # --- the model ------------------------------------------------------------------------
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def configure_optimizers(self):
        """``MemberAdamW`` (clipping, AdamW and the LR schedule of every member in one step)
        over the model: no Lightning scheduler, no Lightning clipping."""
        return MemberAdamW.for_model(self.model, self.cfgs)

    def grad_norms(self) -> dict[str, torch.Tensor]:
        """Global and per-layer L2 norms of each member's gradients (before clipping), ``(k,)``
        each; a tensor of one member (a solo run's LSTM) is a member dimension of 1."""
        named = (
            (n, g if g is None or self._member[n] else g.unsqueeze(0))
            for n, g in ((n, p.grad) for n, p in self.model.named_parameters())
        )
        return grad_norm_metrics(named, self._layer_of, lead=1)

    # --- state ----------------------------------------------------------------------------
    def finished(self, i: int) -> bool:
        """Member ``i`` is done training: diverged, stopped early or at ``max_steps``."""
        return self.metrics[i].ended or self.step >= self.cfg.train.max_steps

    def end_early(self) -> None:
        """Stop every member now, as early stopping would (a benchmark's time budget): the fit
        ends at this step."""
        for m in self.metrics:
            m.stopped_early = True
        self.stop_at = self.step

    def loop_state(self) -> list[dict[str, Any]]:
        """Each member's state a resume needs beyond weights and AdamW (one read of the device,
        with any gradient norms still waiting, which are logged first): the loss summed since
        the last log step, the first non-finite step, and the RNG (dropout)."""
        step = self.step
        if self.is_log_step(step):
            self.log_step()  # a log step is logged before its sum is saved (and reset)
        if step == self._logged_step:  # what the log step read, no second read
            self._read([])
            sums, bad = [0.0] * self.k, self._bad
        else:
            sums, bad = self._read([self.loss_sum, self.nonfinite_step])
        rng = {"rng": torch.get_rng_state()}
        if self.device.type == "cuda":  # dropout on a GPU draws from the device's generator
            rng["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        return [
            {"loss_sum": sums[i], "loss_n": m.loss_n, "nonfinite_step": int(bad[i]), **rng}
            for i, m in enumerate(self.metrics)
        ]

    def _restore(self, loops: list[dict[str, Any]]) -> None:
        """Apply ``loops`` (each member's ``stacked.store.member_loop``): a member whose loss
        became non-finite since the last log step stays masked until the next (one found
        diverged at a log step never comes here: ``resumed_divergence``)."""
        opt = self.optimizers().optimizer
        for i, loop in enumerate(loops):
            self.loss_sum[i] = float(loop.get("loss_sum", 0.0))
            self.metrics[i].loss_n = int(loop.get("loss_n", 0))
            bad = int(loop.get("nonfinite_step", -1))
            self.nonfinite_step[i] = bad
            opt.active[i] = bad < 0
        # dropout masks continue as uninterrupted (members that resume together share a state)
        if loops[0].get("rng") is not None:
            torch.set_rng_state(loops[0]["rng"])
        if loops[0].get("cuda_rng") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(loops[0]["cuda_rng"], self.device)

    # --- training -------------------------------------------------------------------------
    def training_step(self, batch, batch_idx):
        x, y = batch
        step = self.step  # the members' step before this update (they train in step)
        losses = train_step(
            self.model, self.optimizers(), x, y, losses_of=self.losses_of, backward=self._backward
        )
        self._account(losses, step)
        self.step = step + 1
        return losses.sum()  # the batch's outputs for callbacks

    def _backward(self, loss: torch.Tensor) -> None:
        # outside autocast, where Lightning's automatic optimization runs it
        with torch.autocast(self.device.type, enabled=False):
            self.manual_backward(loss)

    def _account(self, loss: torch.Tensor, step: int) -> None:
        """Sum the losses on the device; a member's first non-finite loss records ``step``
        (``train_step`` masked its updates from then on)."""
        first = ~torch.isfinite(loss) & (self.nonfinite_step < 0)
        self.nonfinite_step = torch.where(first, step, self.nonfinite_step)
        self.loss_sum += loss
        for m in self.metrics:
            m.loss_n += 1

    def is_log_step(self, step: int) -> bool:
        return is_log_step(self.cfg, step)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.end_step()

    def end_step(self) -> None:
        """What follows a step's update, in order: log (a log step), evaluate (an evaluation
        step, or a member found diverged now, which logs its loss), decide whether the fit ends
        (``fit_ends``), save a checkpoint (its interval, or the fit's end) and end the fit.
        The one place that ends a fit. ``after_step`` (a test's hook) comes before the
        decision, so a stop it requests ends the fit at this step."""
        step, t = self.step, self.cfg.train
        logged = self.is_log_step(step)
        if logged:
            self.progress.log(step, self.log_step())
        # a divergence is found at a log step only: no loop over the members at other steps
        found = logged and any(m.found_at == step for m in self.metrics)
        evaluated = step % t.eval_interval == 0 or found
        if evaluated:
            self.validate()
        self.after_step(step)
        ends = self.fit_ends(members_changed=logged or evaluated)
        if ends or step % t.checkpoint_interval == 0:
            self.trainer.save_checkpoint(self.checkpoint_path)
        if ends:
            self.trainer.should_stop = True

    def fit_ends(self, members_changed: bool = True) -> bool:
        """A member is done (diverged, stopped early, at ``max_steps``: it leaves, and the others
        go on in a new fit), the members reached ``stop_at``, or a stop was requested. A member
        ends only at a log step or an evaluation (``members_changed``), or by ``end_early``,
        which sets ``stop_at``: other steps look at no member."""
        return (
            self.step >= self.cfg.train.max_steps
            or (self.stop_at is not None and self.step >= self.stop_at)
            or (self.stop is not None and self.stop.requested)
            or (members_changed and any(m.ended for m in self.metrics))
        )

    def log_step(self) -> list[float | None]:
        """Log this log step's metrics of every member and return their mean training losses.
        The first call at a step reads the device, later calls return what it read."""
        step = self.step  # optimizer steps done so far
        if step != self._logged_step and any(m.loss_n for m in self.metrics):
            self._log_train(step)
        return [m.train_loss for m in self.metrics]

    def _log_train(self, step: int) -> None:
        sums, bad = self._read([self.loss_sum, self.nonfinite_step])
        means = [s / max(m.loss_n, 1) for s, m in zip(sums, self.metrics, strict=True)]
        # tokens/s of each member since the last log step, evaluations left out: the clock is
        # read after the read above, which waited for the device
        rate = self.throughput.lap(step)
        if rate is not None:
            self.tokens_per_s = rate
        for i in range(self.k):
            metrics = {"train/loss": means[i], "lr": lr_of(self.cfgs[i], step)}
            if rate is not None:
                metrics["perf/tokens_per_s"] = rate
            self.log_member(i, metrics, step)
            m = self.metrics[i]
            if bad[i] >= 0 and m.diverged_step is None:
                m.diverged_step, m.found_at = int(bad[i]), step  # it leaves
            m.train_loss, m.loss_n = means[i], 0
        self._logged_step, self._bad = step, bad
        self.loss_sum.zero_()

    def log_member(self, i: int, metrics: dict[str, float], step: int) -> None:
        """Send member ``i``'s metrics to its loggers at ``step`` (Lightning's own cadence
        would drop them)."""
        for logger in self.member_loggers[i]:
            logger.log_metrics(metrics, step=step)

    def _read(self, tensors: list[torch.Tensor]) -> list[list[float]]:
        """``tensors`` (each ``(k,)`` on the device) and every pending gradient norm in one read
        of the host; the norms are logged at their own steps, before anything later."""
        pending, self._pending_norms = self._pending_norms, []
        parts = [t.float().reshape(-1) for t in [*tensors, *(v for *_, v in pending)]]
        if not parts:
            return []
        values, k = torch.cat(parts).tolist(), self.k
        at = len(tensors) * k
        for step, names, _ in pending:
            block = values[at : at + len(names) * k]  # (names, k), row by row
            for i in range(k):
                self.log_member(i, {n: block[j * k + i] for j, n in enumerate(names)}, step)
            at += len(names) * k
        return [values[j * k : (j + 1) * k] for j in range(len(tensors))]

    def on_train_start(self):
        if self.loop_states is not None:
            self._restore(self.loop_states)
            self.loop_states = None
        self.progress.start(self.step, self.cfg.train.max_steps)
        self.throughput.start(self.step, self.device)

    def on_before_optimizer_step(self, optimizer):
        interval = self.cfg.train.grad_norm_interval
        step = self.step  # gradients of this step, before the update: step 0 = at init
        if interval == 0 or (step % interval and step != 0):
            return
        norms = self.grad_norms()
        if norms:  # read with the next log step's values
            self._pending_norms.append((step, list(norms), torch.stack(list(norms.values()))))

    def on_train_end(self):
        self._read([])  # norms still waiting (a run stopped early)
        self.progress.end(self.step)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # a checkpoint off the log interval (an interruption, an early stop): the norms up to
        # it go into metrics.csv first, since a resumed run drops the rows after its step and
        # would not compute them again
        self.save_members(checkpoint, self.loop_state())

    def save_members(self, checkpoint: dict, loops: list[dict[str, Any]]) -> None:
        """Put the members' state into Lightning's ``checkpoint`` (``loops``: ``loop_state``)."""
        raise NotImplementedError

    # --- validation -----------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> None:
        """Every member's mean loss over the evaluation batches (``val_batches``, up to
        ``train.eval_batches``), in eval mode under the run's precision, read once; logged at
        the step for the members at their interval or found diverged now (early stopping
        follows). Its time is not training throughput."""
        self.throughput.pause(self.device)
        self.progress.phase("eval")
        limit, losses = self.cfg.train.eval_batches, []
        self.model.eval()
        with precision_context(self.cfg.train.precision, self.device):
            for n, (x, y) in enumerate(self.val_batches):
                if limit is not None and n >= limit:
                    break
                x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
                # a copy: a CUDA graph's replay (compile_mode reduce-overhead) writes the next
                # batch's losses into the same output tensor
                losses.append(self.losses_of(self.model, x, y).clone())
        self.model.train()
        if losses:
            self._log_val(torch.stack(losses).mean(0))  # (k,): the mean of the batch means
        self.progress.phase("train")
        self.throughput.resume()

    def _log_val(self, losses: torch.Tensor) -> None:
        # the evaluation's one read, with any gradient norms still waiting: their rows come
        # before this step's in metrics.csv
        (values,) = self._read([losses])
        step = self.step
        for i, value in enumerate(values):
            # a member found diverged at this step logs it (as a solo run always did); the
            # others only at their interval
            if step % self.cfg.train.eval_interval and self.metrics[i].found_at != step:
                continue
            metrics = {"val/loss": value, "val/ppl": math.exp(min(value, 50.0))}
            if self.bits_per_token:
                metrics["val/bpc"] = value / math.log(2)
            if self.clocks is not None:
                metrics["perf/wall_s"] = self.clocks[i]()
            self.log_member(i, metrics, step)
            self.metrics[i].val_loss = value
            self._early_stop(self.metrics[i], value)

    def _early_stop(self, m: MemberMetrics, value: float) -> None:
        patience = self.cfg.train.early_stopping_patience
        if not patience or m.diverged_step is not None:
            return
        best, wait, stop = early_stopping_step(m.early, value, patience)
        m.early = (best, wait)
        if stop:
            m.stopped_early = True  # it leaves (``fit_ends``)
