"""The one optimizer path of solo runs and stacked groups: gradient clipping, AdamW and the LR
schedule for k members held as one ``(k, N)`` buffer.

A solo run is a group of one (``k = 1``). Every parameter of the k members becomes a view into
one buffer ``flat`` of shape ``(k, N)`` (row i: member i's parameters, decayed ones first, in
``decay_groups`` order), so an optimizer step is a fixed handful of operations on that buffer,
however many parameter tensors the model has: one ``cat`` gathers the gradients, the rest work
on ``(k, N)`` tensors with the per-member hyperparameters as ``(k, 1)`` device tensors. Nothing
is read back to the host: the step counters, the LR (a table of the schedule on the device,
indexed by each member's step) and the mask of members that may update all live there.

The update follows ``torch.optim.AdamW`` (Loshchilov & Hutter 2019, arXiv 1711.05101) and
Lightning's ``gradient_clip_val`` (``clip_grad_norm_`` over all parameters), per member:

* clip: ``total = ||g||``; ``g *= min(1, max_norm / (total + 1e-6))`` (``inf`` = no clipping);
* ``t += 1``; ``p *= 1 - lr*wd`` (decayed parameters); ``m = lerp(m, g, 1-b1)``;
  ``v = b2*v + (1-b2)*g²``; ``p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)``.

The update runs as torch's fused AdamW kernel, one call per member (weight decay done before it
for all members in one operation) where the device has it (``optim.fused``), else as ~15
elementwise operations on the whole buffer (``_update``). A masked member (finished, or its loss
non-finite) keeps every tensor bit for bit: the fused kernel skips it (its ``found_inf``); in
``_update`` its gradient is replaced by zeros and its step size, weight decay and moment weights
are set to the identity (``m + 0*(0-m) = m``, ``1*v + 0 = v``, ``p - 0 = p``), so non-finite
values never reach the state.

The state is kept in ``torch.optim.AdamW``'s state_dict form per member (``step``, ``exp_avg``,
``exp_avg_sq`` per parameter index over ``decay_groups``), so checkpoints of solo runs, stacked
members and older runs (torch's fused AdamW) load into one another.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

import torch

from ablate.config import RunConfig
from ablate.model import member_tensors, solo_dims
from ablate.training.schedules import lr_at, lr_values

CLIP_EPS = 1e-6  # clip_grad_norm_'s guard against a zero norm


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices only (no decay on biases, norms: parameters that
    are 1-D in a solo run, their member dimension left out)."""
    dims = solo_dims(model)
    params = [(dims[n], p) for n, p in model.named_parameters() if p.requires_grad]
    return [
        {"params": [p for d, p in params if d >= 2], "weight_decay": weight_decay},
        {"params": [p for d, p in params if d < 2], "weight_decay": 0.0},
    ]


def lr_factor(cfg: RunConfig, step: int, base_lr: float | None = None) -> float:
    """The run's LR at optimizer step ``step`` as a multiple of ``base_lr`` (default
    ``cfg.lr``): the ``LambdaLR`` factor, so ``base_lr * factor`` is the LR the update uses."""
    base_lr = cfg.lr if base_lr is None else base_lr
    o = cfg.optim
    lr = lr_at(
        step,
        total_steps=cfg.train.max_steps,
        base_lr=base_lr,
        warmup_ratio=o.warmup_ratio,
        min_lr=o.min_lr,
        decay=o.decay,
        cycles=o.cycles,
    )
    return lr / base_lr


def lr_of(cfg: RunConfig, step: int) -> float:
    """The LR the update of optimizer step ``step`` uses (base * factor, as ``LambdaLR``)."""
    return cfg.lr * lr_factor(cfg, step)


def lr_table(cfg: RunConfig) -> list[float]:
    """``lr_of`` at steps ``0..max_steps``, computed in one call (no Python call per step)."""
    o, base = cfg.optim, cfg.lr
    values = lr_values(
        range(cfg.train.max_steps + 1),
        total_steps=cfg.train.max_steps,
        base_lr=base,
        warmup_ratio=o.warmup_ratio,
        min_lr=o.min_lr,
        decay=o.decay,
        cycles=o.cycles,
    )
    return [base * (lr / base) for lr in values]  # lr_of's arithmetic, to the last bit


@cache
def fused_adamw_supported(device_type: str) -> bool:
    """Whether this torch has a fused AdamW kernel for ``device_type`` (CUDA; CPU since 2.4).

    Probed with one tiny step: torch checks the device only when stepping.
    """
    try:
        p = torch.zeros(1, device=device_type, requires_grad=True)
        p.grad = torch.zeros_like(p)
        torch.optim.AdamW([p], fused=True).step()
    except (RuntimeError, ValueError):
        return False
    return True


def use_fused(cfg: RunConfig, device: torch.device) -> bool:
    """``optim.fused``, or by default: on wherever ``device`` has torch's fused AdamW kernel.
    Fused is one kernel call per member instead of ~15 passes over the parameters (on the CPU
    reference model, one thread: ~8 ms against ~40 ms a step)."""
    if cfg.optim.fused is not None:
        return cfg.optim.fused
    return fused_adamw_supported(device.type)


def _column(values: list[float], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, device=device).view(-1, 1)


class Hyper(NamedTuple):
    """The members' AdamW hyperparameters as ``(k, 1)`` device columns (``max_norm``: None
    when no member clips), and the ``eps`` they share."""

    weight_decay: torch.Tensor
    beta1: torch.Tensor
    beta2: torch.Tensor
    max_norm: torch.Tensor | None
    eps: float


class AdamState(NamedTuple):
    """What a step changes besides the parameters: the moments (k, N), the AdamW steps taken
    ``t`` and each member's global step ``at`` (the LR table's index), both (k, 1)."""

    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    t: torch.Tensor
    at: torch.Tensor


def _update(
    flat: torch.Tensor,
    grad: torch.Tensor,
    state: AdamState,
    on: torch.Tensor,
    table: torch.Tensor,
    hyper: Hyper,
    n_decay: int,
) -> None:
    """Clip, then AdamW, in place, as elementwise operations on the ``(k, N)`` tensors (where
    there is no fused kernel, or ``optim.fused: false``); ``on`` (k, 1): the members that
    update; ``table``: each member's LR per global step."""
    m, v, t, at = state
    wd, b1, b2, max_norm, eps = hyper
    grad = torch.where(on, grad, 0.0)  # a masked member's (maybe non-finite) gradient: zero
    if max_norm is not None:
        total = torch.linalg.vector_norm(grad, dim=1, keepdim=True)
        grad = grad * (max_norm / (total + CLIP_EPS)).clamp(max=1.0)
    live = on.to(grad.dtype)
    t.add_(live)
    lr = table.gather(1, at) * live  # a masked member: lr 0 (no decay, no step)
    at.add_(1).clamp_(max=table.shape[1] - 1)  # steps past the end keep the last LR
    steps = t.clamp(min=1)
    flat[:, :n_decay].mul_(1 - lr * wd)
    m.lerp_(grad, (1 - b1) * live)
    v.mul_(torch.where(on, b2, 1.0)).addcmul_(grad, grad * ((1 - b2) * live))
    step_size = lr / (1 - b1**steps)
    denom = (v.sqrt() / (1 - b2**steps).sqrt()).add_(eps)
    flat.sub_((m / denom).mul_(step_size))


class MemberAdamW(torch.optim.Optimizer):
    """Clipping + AdamW + LR schedule for ``cfgs`` (one per member) over ``params``.

    ``params``: in ``decay_groups`` order, the first ``n_decay`` decayed, each ``(k, *shape)``
    (a model's tensors of one member only, any shape: k = 1). Their ``.data`` become views of
    ``self.flat``. ``active`` (k, 1) on the device: the members that update at ``step``. A
    member's state has the solo run's shapes and layout: ``solo_forms[j]`` maps member i's row
    of parameter j (``numel`` values) to it (default: ``(shape)``), also in a stack of one.
    """

    def __init__(
        self,
        params: list[torch.Tensor],
        cfgs: list[RunConfig],
        n_decay: int,
        *,
        solo_forms: list[Callable[[torch.Tensor], torch.Tensor]] | None = None,
    ):
        super().__init__(params, {"lr": cfgs[0].lr})
        k, dev = len(cfgs), params[0].device
        self.solo_forms = solo_forms or [
            lambda row, shape=p.shape[1:]: row.view(shape) for p in params
        ]
        sizes = [p.numel() // k for p in params]
        with torch.no_grad():
            self.flat = torch.cat([p.detach().reshape(k, -1) for p in params], 1)
        offset = 0
        for p, n in zip(params, sizes, strict=True):
            p.data = self.flat[:, offset : offset + n].view(p.shape)
            offset += n
        self.params, self.k, self.sizes, self.n_decay = params, k, sizes, n_decay
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)
        self.t = torch.zeros(k, 1, device=dev)  # AdamW steps taken
        self.at = torch.zeros(k, 1, dtype=torch.long, device=dev)  # each member's global step
        self.active = torch.ones(k, 1, dtype=torch.bool, device=dev)
        clips = [c.optim.grad_clip for c in cfgs]
        self.hyper = Hyper(
            _column([c.optim.weight_decay for c in cfgs], dev),
            _column([c.optim.beta1 for c in cfgs], dev),
            _column([c.optim.beta2 for c in cfgs], dev),
            _column([c or math.inf for c in clips], dev) if any(clips) else None,
            cfgs[0].optim.eps,
        )
        # the fused kernel takes its hyperparameters as host numbers: one call per member
        self.betas = [(c.optim.beta1, c.optim.beta2) for c in cfgs]
        self.table = torch.tensor([lr_table(c) for c in cfgs], device=dev)
        self.fused = use_fused(cfgs[0], dev)

    @classmethod
    def for_model(cls, model: torch.nn.Module, cfgs: list[RunConfig]) -> MemberAdamW:
        """The optimizer of ``model``'s members (``cfgs``: one per member), whose states have
        the solo run's layout (``ablate.model.member_tensors``)."""
        decay, other = (g["params"] for g in decay_groups(model, 1.0))
        params = [*decay, *other]
        tensors = {id(t): (member, solo) for t, member, solo in member_tensors(model).values()}

        def form(p: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
            member, solo = tensors[id(p)]
            shape = p.shape[1:] if member else p.shape
            return lambda row: solo(row.view(shape))

        return cls(params, cfgs, len(decay), solo_forms=[form(p) for p in params])

    def start_at(self, steps: list[int]) -> None:
        """Each member's global step (the LR's index), e.g. on resume; not a per-step call."""
        self.at.copy_(torch.tensor(steps, dtype=torch.long).view(-1, 1))

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch.optim.Optimizer.step
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        k = self.k
        grads = [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(k, -1)
            for p in self.params
        ]
        n_decay = sum(self.sizes[: self.n_decay])
        grad = torch.cat(grads, 1)
        if self.fused:
            self._fused(grad, n_decay)
        else:
            state = AdamState(self.exp_avg, self.exp_avg_sq, self.t, self.at)
            _update(self.flat, grad, state, self.active, self.table, self.hyper, n_decay)
        return loss

    def _fused(self, grad: torch.Tensor, n_decay: int) -> None:
        """``_update`` through torch's fused AdamW kernel, one call per member: weight decay
        first, for all members at once (as the kernel would, ``p *= 1 - lr*wd``; the kernel
        itself then runs without, so that decayed and other parameters share its call),
        clipping as the kernel's gradient scale (``g / max(1, (total + 1e-6) / max_norm)``),
        the mask as its ``found_inf`` (a masked member's call changes nothing), the LR and the
        step as device tensors."""
        live = self.active.to(grad.dtype)
        self.t.add_(live)
        lr = self.table.gather(1, self.at)
        self.at.add_(1).clamp_(max=self.table.shape[1] - 1)
        self.flat[:, :n_decay].mul_(1 - lr * live * self.hyper.weight_decay)
        max_norm = self.hyper.max_norm
        scale = None
        if max_norm is not None:
            total = torch.linalg.vector_norm(grad, dim=1, keepdim=True)
            scale = ((total + CLIP_EPS) / max_norm).clamp(min=1.0)
        skip = 1 - live
        for i, (b1, b2) in enumerate(self.betas):
            torch._fused_adamw_(
                [self.flat[i]], [grad[i]], [self.exp_avg[i]], [self.exp_avg_sq[i]], [],
                [self.t[i, 0]], lr=lr[i, 0], beta1=b1, beta2=b2, weight_decay=0.0,
                eps=self.hyper.eps, amsgrad=False, maximize=False,
                grad_scale=None if scale is None else scale[i, 0], found_inf=skip[i, 0],
            )  # fmt: skip

    def _member_view(self, row: torch.Tensor) -> list[torch.Tensor]:
        out, offset = [], 0
        for form, n in zip(self.solo_forms, self.sizes, strict=True):
            out.append(form(row[offset : offset + n]))
            offset += n
        return out

    def member_state(self, i: int, hyper: dict[str, Any]) -> dict:
        """Member ``i``'s state as ``torch.optim.AdamW(decay_groups(...)).state_dict()``,
        copied to the CPU; ``hyper``: its param-group entries (lr, betas, eps, weight_decay)."""
        step = self.t[i, 0].to("cpu", copy=True)
        avg = self._member_view(self.exp_avg[i].to("cpu", copy=True))
        avg_sq = self._member_view(self.exp_avg_sq[i].to("cpu", copy=True))
        state = {
            idx: {"step": step.clone(), "exp_avg": a, "exp_avg_sq": s}
            for idx, (a, s) in enumerate(zip(avg, avg_sq, strict=True))
        }
        n = len(self.params)
        groups = [
            {**hyper, "params": list(range(self.n_decay))},
            {**hyper, "weight_decay": 0.0, "params": list(range(self.n_decay, n))},
        ]
        return {"state": state, "param_groups": groups}

    @torch.no_grad()
    def load_member(self, i: int, state_dict: dict) -> None:
        """Load member ``i`` from an AdamW state_dict (``member_state``, or torch's AdamW)."""
        avg, avg_sq = self._member_view(self.exp_avg[i]), self._member_view(self.exp_avg_sq[i])
        for idx in range(len(self.params)):
            s = state_dict["state"].get(idx) or state_dict["state"].get(str(idx))
            if not s:
                continue  # a parameter that never had a gradient
            avg[idx].copy_(s["exp_avg"])
            avg_sq[idx].copy_(s["exp_avg_sq"])
            self.t[i] = float(s["step"])

    def state_dict(self) -> dict:
        """A solo run's state (member 0), in ``torch.optim.AdamW``'s form. A stack's members
        are saved one by one (``member_state``, by the group's checkpoint IO): Lightning's own
        copy of a stack's state would be one member's, copied for nothing."""
        if self.k > 1:
            return {"members": self.k}
        group = self.param_groups[0]
        return self.member_state(0, {"lr": group["lr"]})

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a solo run's state; its global step is its AdamW step (a solo run never masks)."""
        self.load_member(0, state_dict)
        self.at.copy_(self.t.long().clamp(max=self.table.shape[1] - 1))
