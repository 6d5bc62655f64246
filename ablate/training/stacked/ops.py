"""The numerics of a stacked group: k models of one shape as one set of stacked tensors.

Facts this rests on:

* ``torch.func.stack_module_state(models)`` stacks each parameter and buffer of k same-shaped
  modules along a new leading dimension; ``torch.func.functional_call(base, (params, buffers),
  (x,))`` runs ``base``'s forward with those tensors, and ``torch.vmap`` over the leading
  dimension runs the k members at once (PyTorch's "model ensembling" recipe). Autograd through
  ``vmap`` gives each member the gradient of its own loss: the members share no operation.
* ``Module.to("meta")`` on a copy un-ties shared parameters (a tied LM head), so the stacked
  call passes every alias of a shared parameter explicitly (found with
  ``named_parameters(remove_duplicate=False)``).
* AdamW (Loshchilov & Hutter 2019, arXiv 1711.05101) is elementwise, so one update over the
  stacked tensors is k independent updates, given per-member hyperparameters broadcast over the
  leading dimension. The update follows ``torch.optim.AdamW``: ``p *= 1 - lr*wd``;
  ``m = lerp(m, g, 1-b1)``; ``v = b2*v + (1-b2)*g²``; ``p -= lr/(1-b1^t) * m /
  (sqrt(v)/sqrt(1-b2^t) + eps)``. Its state is kept in ``torch.optim.AdamW``'s state_dict form
  (``step``, ``exp_avg``, ``exp_avg_sq`` per parameter index), so a solo run's checkpoint loads.
* Gradient clipping is Lightning's ``gradient_clip_val``, i.e. ``clip_grad_norm_`` over all
  parameters: total = ||(||g_i||)_i||, g *= min(1, max_norm / (total + 1e-6)); per member here.
* CPU SDPA (``_scaled_dot_product_flash_attention_for_cpu``) has no vmap batching rule in torch
  2.x: vmap falls back to a per-member loop with a "performance drop" warning. ``fold_attention``
  instead folds the member dimension into SDPA's batch dimension (k*B), through an
  ``autograd.Function`` whose ``vmap`` staticmethod does the reshape (torch.func's documented
  extension point); its backward recomputes the attention (one extra attention forward).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ablate.training.lit import grad_norm_metrics, layer_of, lm_loss

_SDPA = F.scaled_dot_product_attention
CLIP_EPS = 1e-6  # clip_grad_norm_'s guard against a zero norm


class _FoldedSDPA(torch.autograd.Function):
    """SDPA (no dropout) whose vmap rule folds the vmapped dimension into the batch."""

    @staticmethod
    def forward(q, k, v, mask, is_causal):
        return _SDPA(q, k, v, attn_mask=mask, is_causal=is_causal)

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, mask, is_causal = inputs
        ctx.save_for_backward(q, k, v, mask)
        ctx.is_causal = is_causal

    @staticmethod
    def backward(ctx, grad):
        q, k, v, mask = ctx.saved_tensors
        with torch.enable_grad():  # recompute: the fused kernels' saved statistics are private
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = _SDPA(*leaves, attn_mask=mask, is_causal=ctx.is_causal)
            grads = torch.autograd.grad(out, leaves, grad)
        return (*grads, None, None)

    @staticmethod
    def vmap(info, in_dims, q, k, v, mask, is_causal):
        n = info.batch_size

        def fold(t, dim):
            t = t.movedim(dim, 0) if dim is not None else t.expand(n, *t.shape)
            return t.reshape(n * t.shape[1], *t.shape[2:])

        qf = fold(q, in_dims[0])
        rows = qf.shape[0] // n
        if mask is not None and in_dims[3] is not None:  # a per-member mask (ALiBi's slopes)
            m = mask.movedim(in_dims[3], 0)
            mask = m.unsqueeze(1).expand(n, rows, *m.shape[1:]).reshape(n * rows, *m.shape[1:])
        out = _FoldedSDPA.apply(qf, fold(k, in_dims[1]), fold(v, in_dims[2]), mask, is_causal)
        return out.reshape(n, rows, *out.shape[1:]), 0


class _FoldAttention(TorchFunctionMode):
    """Route the model's ``F.scaled_dot_product_attention`` calls through ``_FoldedSDPA``
    (the model code stays as it is); calls with dropout keep the plain op."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _SDPA and not kwargs.get("dropout_p") and not kwargs.get("scale"):
            q, k, v = args[:3]
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            return _FoldedSDPA.apply(q, k, v, mask, bool(kwargs.get("is_causal", False)))
        return func(*args, **kwargs)


def _lead(vec: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-member vector ``(k,)`` shaped to broadcast over a stacked tensor ``(k, ...)``."""
    return vec.view(-1, *([1] * (like.dim() - 1)))


class Stack:
    """k same-shaped models as stacked leaf tensors, with a vmapped forward.

    ``params[name]`` is ``(k, *shape)``; members are independent in everything computed here.
    """

    def __init__(self, models: list[torch.nn.Module], *, fold_attention: bool = False):
        first = models[0]
        params, self.buffers = torch.func.stack_module_state(models)
        self.params = {n: p.detach().requires_grad_() for n, p in params.items()}
        self.k = len(models)
        self.base = copy.deepcopy(first).to("meta")
        # every name of a shared (tied) parameter -> the name stack_module_state kept
        ids = {id(p): n for n, p in first.named_parameters()}
        self.aliases = {
            n: ids[id(p)]
            for n, p in first.named_parameters(remove_duplicate=False)
            if ids[id(p)] != n
        }
        self.layer_map = {n: layer_of(n) for n in self.params}
        self.fold_attention = fold_attention

    @contextmanager
    def _attention(self) -> Iterator[None]:
        if self.fold_attention:
            with _FoldAttention():
                yield
        else:
            yield

    def _call(self, p, b, x):
        p = {**p, **{alias: p[name] for alias, name in self.aliases.items()}}
        return torch.func.functional_call(self.base, (p, b), (x,))

    def losses(self, x: torch.Tensor, y: torch.Tensor, *, shared: bool = False) -> torch.Tensor:
        """``(k,)`` mean token losses; ``x, y`` are ``(k, B, T)``, or ``(B, T)`` for every
        member when ``shared`` (evaluation batches)."""
        dim = None if shared else 0

        def loss(p, b, xi, yi):
            return lm_loss(self._call(p, b, xi), yi)

        run = torch.vmap(loss, in_dims=(0, 0, dim, dim), randomness="different")
        with self._attention():
            return run(self.params, self.buffers, x, y)

    def train(self, mode: bool = True) -> None:
        self.base.train(mode)

    @torch.no_grad()
    def eval_losses(self, batches) -> torch.Tensor:
        """``(k,)`` mean over ``batches`` of each member's loss (as LitLM's validation:
        the float32 mean of the per-batch losses)."""
        was = self.base.training
        self.base.eval()
        try:
            dev = next(iter(self.params.values())).device
            per_batch = [self.losses(x.to(dev), y.to(dev), shared=True) for x, y in batches]
        finally:
            self.base.train(was)
        return torch.stack(per_batch).mean(0)

    def grad_norms(self) -> dict[str, torch.Tensor]:
        """LitLM's gradient-norm metrics, each a ``(k,)`` vector."""
        return grad_norm_metrics(
            ((n, p.grad) for n, p in self.params.items()), self.layer_map, lead=1
        )

    @torch.no_grad()
    def clip_(self, max_norms: torch.Tensor) -> None:
        """Per-member ``clip_grad_norm_`` over all parameters; ``inf`` = no clipping."""
        grads = [p.grad for p in self.params.values()]
        norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], 1)
        total = torch.linalg.vector_norm(norms, dim=1)
        coef = torch.clamp(max_norms / (total + CLIP_EPS), max=1.0)
        coef = torch.where(torch.isinf(max_norms), torch.ones_like(coef), coef)
        for g in grads:
            g.mul_(_lead(coef, g))

    @torch.no_grad()
    def member_tensors(self, i: int) -> dict[str, torch.Tensor]:
        """Member ``i``'s parameters and buffers, copied to the CPU (for a checkpoint)."""
        out = {n: p[i].to("cpu", copy=True) for n, p in self.params.items()}
        out.update({n: b[i].to("cpu", copy=True) for n, b in self.buffers.items()})
        return out


class StackedAdamW:
    """AdamW over a ``Stack``'s tensors with per-member hyperparameters and masked updates.

    ``decay_names``: the parameters ``decay_groups`` decays (matrices); the others get no
    weight decay. ``order``: the parameter names in ``decay_groups`` order (the index of a
    parameter in a ``torch.optim.AdamW`` state_dict).
    """

    def __init__(self, stack: Stack, order: list[str], decay_names: set[str], hyper: dict):
        self.stack, self.order, self.decay_names = stack, order, decay_names
        dev = next(iter(stack.params.values())).device
        f32 = {"dtype": torch.float32, "device": dev}
        self.wd = torch.tensor(hyper["weight_decay"], **f32)
        self.b1 = torch.tensor(hyper["beta1"], dtype=torch.float64, device=dev)
        self.b2 = torch.tensor(hyper["beta2"], dtype=torch.float64, device=dev)
        self.eps = hyper["eps"]
        self.steps = torch.zeros(stack.k, dtype=torch.float64, device=dev)
        self.exp_avg = {n: torch.zeros_like(p) for n, p in stack.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in stack.params.items()}

    @torch.no_grad()
    def step(self, lrs: torch.Tensor, active: torch.Tensor) -> None:
        """One update of the members where ``active``; the others keep every tensor."""
        self.steps += active.to(self.steps.dtype)
        t = self.steps.clamp(min=1)
        bc1 = 1 - self.b1**t
        bc2_sqrt = (1 - self.b2**t).sqrt()
        step_size = (lrs.double() / bc1).float()
        b1, b2 = self.b1.float(), self.b2.float()
        for n, p in self.stack.params.items():
            g, m, v = p.grad, self.exp_avg[n], self.exp_avg_sq[n]
            on = _lead(active, p)
            wd = self.wd if n in self.decay_names else torch.zeros_like(self.wd)
            p_new = p * _lead(1 - lrs * wd, p)
            m_new = m.lerp(g, _lead(1 - b1, g))
            v_new = v * _lead(b2, v) + _lead(1 - b2, g) * g * g
            denom = v_new.sqrt() / _lead(bc2_sqrt.float(), v) + self.eps
            p_new = p_new - _lead(step_size, p) * m_new / denom
            p.copy_(torch.where(on, p_new, p))
            m.copy_(torch.where(on, m_new, m))
            v.copy_(torch.where(on, v_new, v))

    def member_state(self, i: int, hyper: dict) -> dict:
        """Member ``i``'s state as ``torch.optim.AdamW(decay_groups(...)).state_dict()``."""
        state = {
            idx: {
                "step": torch.tensor(float(self.steps[i])),
                "exp_avg": self.exp_avg[n][i].to("cpu", copy=True),
                "exp_avg_sq": self.exp_avg_sq[n][i].to("cpu", copy=True),
            }
            for idx, n in enumerate(self.order)
        }
        n_decay = sum(n in self.decay_names for n in self.order)
        groups = [
            {**hyper, "params": list(range(n_decay))},
            {**hyper, "weight_decay": 0.0, "params": list(range(n_decay, len(self.order)))},
        ]
        return {"state": state, "param_groups": groups}

    @torch.no_grad()
    def load_member(self, i: int, state_dict: dict) -> None:
        """Load member ``i`` from an AdamW state_dict (ours, or a solo run's Lightning one)."""
        for idx, n in enumerate(self.order):
            s = state_dict["state"].get(idx) or state_dict["state"].get(str(idx))
            if not s:
                continue  # a parameter that never had a gradient
            self.exp_avg[n][i].copy_(s["exp_avg"])
            self.exp_avg_sq[n][i].copy_(s["exp_avg_sq"])
            self.steps[i] = float(s["step"])
