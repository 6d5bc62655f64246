"""The dtypes a run really computes in, measured from one forward pass.

``train.precision`` names a policy (``bf16-mixed``: autocast to bf16), not what each operation
does under it: autocast keeps norms and the loss in fp32, the LSTM opts out of autocast
(``ablate.model.lstm``), and a plugin may do anything. So a run's summary records the dtype
each kind of operation produced in a forward pass and loss of one batch, under the same
precision context as its evaluation:

* ``matmul``: outputs of the linear layers (projections, FFN, LM head: the members' batched
  ``baddbmm``/``bmm``; a plugin's ``F.linear``);
* ``attention``: outputs of ``F.scaled_dot_product_attention``;
* ``norm``: outputs of the model's norm modules (the ``norm`` axis' registered classes);
* ``lstm``: outputs of ``nn.LSTM``;
* ``loss``: the cross-entropy.

A kind the model does not use is left out; a kind seen in two dtypes lists both.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import ablate.model  # noqa: F401 - defines the built-in norms read from the registry
from ablate import registry

_FUNCTIONS = {
    F.linear: "matmul",
    torch.bmm: "matmul",
    torch.baddbmm: "matmul",
    F.scaled_dot_product_attention: "attention",
    F.cross_entropy: "loss",
}


class _Record(TorchFunctionMode):
    """The output dtype of each function in ``_FUNCTIONS``, by kind."""

    def __init__(self, seen: dict[str, set[str]]):
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        kind = _FUNCTIONS.get(func)
        if kind is not None and isinstance(out, torch.Tensor):
            self.seen[kind].add(_name(out.dtype))
        return out


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _module_kind(module: nn.Module) -> str | None:
    if isinstance(module, nn.LSTM):
        return "lstm"
    if isinstance(module, tuple(registry.table("norm").values())):
        return "norm"
    return None


@torch.no_grad()
def compute_dtypes(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn) -> dict[str, str]:
    """``{kind: dtype}`` of ``loss_fn(model(x), y)`` as computed under the caller's precision
    context (e.g. ``{"matmul": "bfloat16", "norm": "float32", "loss": "float32"}``)."""
    seen: dict[str, set[str]] = defaultdict(set)

    def hook(module, args, out):
        out = out[0] if isinstance(out, tuple) else out
        seen[_module_kind(module)].add(_name(out.dtype))

    handles = [m.register_forward_hook(hook) for m in model.modules() if _module_kind(m)]
    was = model.training
    model.eval()
    try:
        with _Record(seen):
            loss_fn(model(x), y)
    finally:
        model.train(was)
        for h in handles:
            h.remove()
    return {kind: "/".join(sorted(seen[kind])) for kind in sorted(seen)}


def precision_context(precision: str, device: torch.device):
    """The autocast of ``train.precision`` as Lightning's precision plugin sets it around a
    forward pass, for the module's evaluations and the final one: bf16 for ``bf16-mixed`` (and
    ``bf16-true``, whose fit holds bf16 weights), fp16 for ``16-mixed``, none for ``32-true``."""
    half = {"bf16-mixed": torch.bfloat16, "bf16-true": torch.bfloat16, "16-mixed": torch.float16}
    dtype = half.get(precision)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)
