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
* Clipping, AdamW and the LR schedule over the stacked tensors are the solo run's own
  (``ablate.training.adamw.MemberAdamW`` with k members).
* CPU SDPA (``_scaled_dot_product_flash_attention_for_cpu``) has no vmap batching rule in torch
  2.x: vmap falls back to a per-member loop with a "performance drop" warning. ``fold_attention``
  instead folds the member dimension into SDPA's batch dimension (k*B), through an
  ``autograd.Function`` whose ``vmap`` staticmethod does the reshape (torch.func's documented
  extension point). The folded call keeps its autograd graph from forward to backward, so
  the backward is SDPA's own: one SDPA forward and one backward per layer for the whole stack,
  as in a solo step. On by default, on the CPU too.
* Every operation is a kernel launch on a GPU (``ablate.training.opcount``), so the stacked
  forward also replaces two of vmap's generic rules: ``F.linear`` with a batched bias becomes
  one ``baddbmm`` (vmap's: ``bmm`` + ``add``), and the loss is taken outside ``vmap`` in one
  cross-entropy call (``nll_loss`` has no batching rule; vmap decomposes it).
"""

from __future__ import annotations

import copy
import logging

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ablate.training.lit import grad_norm_metrics, layer_of, lm_losses

_SDPA = F.scaled_dot_product_attention
log = logging.getLogger("ablate")


class _RecompileNotice(logging.Filter):
    """Past ``torch._dynamo.config.recompile_limit`` compiles of one function, dynamo runs it
    eager from then on and says so in one warning among its own logs, easy to miss. A stacked
    group recompiles its forward when a member leaves (k changes) and for evaluation batches,
    so this says it once more, on ablate's logger, in words."""

    said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.said and str(record.msg).startswith("torch._dynamo hit config."):
            type(self).said = True
            limit = record.args[1] if isinstance(record.args, tuple) else "?"
            log.warning(
                "train.compile: the stacked forward hit torch's recompile limit (%s compiles) "
                "and runs eager from now on: same numbers, slower steps (docs/stacking.md)",
                limit,
            )
        return True


_NOTICE = _RecompileNotice()


class _GraphSDPA(torch.autograd.Function):
    """SDPA on the folded tensors that keeps its own autograd graph from forward to backward:
    the backward is SDPA's own (with the statistics its forward saved), not a recomputation."""

    @staticmethod
    def forward(ctx, q, k, v, mask, is_causal):
        with torch.enable_grad():
            ctx.leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            ctx.out = _SDPA(*ctx.leaves, attn_mask=mask, is_causal=is_causal)
        return ctx.out.detach()

    @staticmethod
    def backward(ctx, grad):
        grads = torch.autograd.grad(ctx.out, ctx.leaves, grad)
        del ctx.out, ctx.leaves
        return (*grads, None, None)


class _FoldedSDPA(torch.autograd.Function):
    """SDPA (no dropout) whose vmap rule folds the vmapped dimension into the batch: one SDPA
    call for all members. Only ever applied under ``vmap``, where the folded call's node
    (``_GraphSDPA``) is what autograd records."""

    @staticmethod
    def forward(q, k, v, mask, is_causal):
        return _SDPA(q, k, v, attn_mask=mask, is_causal=is_causal)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("_FoldedSDPA is applied under vmap only")

    @staticmethod
    def vmap(info, in_dims, q, k, v, mask, is_causal):
        n = info.batch_size

        def fold(t, dim):
            t = t.movedim(dim, 0) if dim is not None else t.expand(n, *t.shape)
            return t.reshape(n * t.shape[1], *t.shape[2:])

        qf, kf, vf = fold(q, in_dims[0]), fold(k, in_dims[1]), fold(v, in_dims[2])
        rows = qf.shape[0] // n
        if mask is not None and in_dims[3] is not None:  # a per-member mask (ALiBi's slopes)
            m = mask.movedim(in_dims[3], 0)
            mask = m.unsqueeze(1).expand(n, rows, *m.shape[1:]).reshape(n * rows, *m.shape[1:])
        if torch.is_grad_enabled() and any(t.requires_grad for t in (qf, kf, vf)):
            out = _GraphSDPA.apply(qf, kf, vf, mask, is_causal)
        else:
            out = _SDPA(qf, kf, vf, attn_mask=mask, is_causal=is_causal)
        return out.reshape(n, rows, *out.shape[1:]), 0


def _autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast casts matmuls to on ``device_type``, or None when it is off."""
    if not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


def _batched(t: torch.Tensor, dim: int | None, n: int) -> torch.Tensor:
    return t.movedim(dim, 0) if dim is not None else t.expand(n, *t.shape)


class _Baddbmm(torch.autograd.Function):
    """``x @ w^T + b`` for ``(k, M, in)``, ``(k, out, in)``, ``(k, out)``, with a backward that
    makes each gradient in its parameter's layout at once (autograd's ``bmm`` backward would
    make the weight's transposed, and accumulating it into the weight copies it)."""

    @staticmethod
    def forward(ctx, x, w, b):
        # Under autocast, cast as ``F.linear`` would and save the cast tensors: the backward
        # runs outside autocast, and must multiply the (bf16) gradient by the tensors the
        # forward multiplied. Autograd casts each gradient back to its input's dtype.
        dtype = _autocast_dtype(x.device.type)
        if dtype is not None:
            x, w = x.to(dtype), w.to(dtype)
            b = None if b is None else b.to(dtype)
        ctx.save_for_backward(x, w)
        ctx.bias = b is not None
        with torch.autocast(x.device.type, enabled=False):
            if b is None:
                return torch.bmm(x, w.transpose(1, 2))
            return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        gx = torch.bmm(grad, w) if need[0] else None
        gw = torch.bmm(grad.transpose(1, 2), x) if need[1] else None
        gb = grad.sum(1) if ctx.bias and need[2] else None
        return gx, gw, gb


class _StackedLinear(torch.autograd.Function):
    """``F.linear`` whose vmap rule is one ``baddbmm`` (bias included): vmap's own rule for a
    batched bias is a ``bmm`` and a separate ``add``, one more launch per linear layer."""

    @staticmethod
    def forward(x, w, b):
        return F.linear(x, w, b)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("_StackedLinear is applied under vmap only")

    @staticmethod
    def vmap(info, in_dims, x, w, b):
        n = info.batch_size
        x, w = _batched(x, in_dims[0], n), _batched(w, in_dims[1], n)
        b = None if b is None else _batched(b, in_dims[2], n)
        out = _Baddbmm.apply(x.reshape(n, -1, x.shape[-1]), w, b)
        return out.reshape(*x.shape[:-1], w.shape[1]), 0


class _StackOps(TorchFunctionMode):
    """Route the model's SDPA calls through ``_FoldedSDPA`` (calls with dropout or a custom
    scale keep the plain op) and its ``F.linear`` calls through ``_StackedLinear``; the model
    code stays as it is. (LayerNorm keeps vmap's own rule: an ``addcmul`` affine would save a
    forward operation per norm and cost two in the backward.)"""

    def __init__(self, fold_attention: bool):
        super().__init__()
        self.fold_attention = fold_attention

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, w = args[:2]
            b = kwargs.get("bias", args[2] if len(args) > 2 else None)
            return _StackedLinear.apply(x, w, b)
        if (
            func is _SDPA
            and self.fold_attention
            and not kwargs.get("dropout_p")
            and not kwargs.get("scale")
        ):
            q, k, v = args[:3]
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            return _FoldedSDPA.apply(q, k, v, mask, bool(kwargs.get("is_causal", False)))
        return func(*args, **kwargs)


class Stack:
    """k same-shaped models as stacked leaf tensors, with a vmapped forward.

    ``params[name]`` is ``(k, *shape)``; members are independent in everything computed here.
    """

    def __init__(
        self, models: list[torch.nn.Module], *, fold_attention: bool = True, compile: bool = False
    ):
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
        # train.compile: the vmapped forward (the members' loss and its backward) compiled as
        # one graph; the optimizer's update is compiled apart (optim.fused)
        self._forward = torch.compile(self._logits) if compile else self._logits
        if compile:
            # Logger.addFilter adds a filter once, however many stacks are built
            logging.getLogger("torch._dynamo.convert_frame").addFilter(_NOTICE)

    def _call(self, p, b, x):
        p = {**p, **{alias: p[name] for alias, name in self.aliases.items()}}
        return torch.func.functional_call(self.base, (p, b), (x,))

    def _logits(self, x: torch.Tensor, shared: bool) -> torch.Tensor:
        run = torch.vmap(self._call, in_dims=(0, 0, None if shared else 0), randomness="different")
        with _StackOps(self.fold_attention):
            return run(self.params, self.buffers, x)

    def losses(self, x: torch.Tensor, y: torch.Tensor, *, shared: bool = False) -> torch.Tensor:
        """``(k,)`` mean token losses; ``x, y`` are ``(k, B, T)``, or ``(B, T)`` for every
        member when ``shared`` (evaluation batches). The loss is taken outside ``vmap``, over
        all members at once (``nll_loss`` has no batching rule: vmap would decompose it)."""
        logits = self._forward(x, shared)
        return lm_losses(logits, y.expand(self.k, *y.shape) if shared else y)

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
    def member_tensors(self, i: int) -> dict[str, torch.Tensor]:
        """Member ``i``'s parameters and buffers, copied to the CPU (for a checkpoint)."""
        out = {n: p[i].to("cpu", copy=True) for n, p in self.params.items()}
        out.update({n: b[i].to("cpu", copy=True) for n, b in self.buffers.items()})
        return out
