"""The member dimension: k runs of one shape computed by one model, a solo run being k = 1.

A study's runs are mostly small models of one shape that differ in their seed or optimizer
scalars. ablate computes them as one model whose every tensor leads with the member dimension
``k`` (HFTA's fused models, Wang et al. 2021, arXiv 2102.02344): a linear layer is one batched
matmul over ``(k, in, out)`` weights, an embedding is one gather from ``(k, n, d)`` tables, a
norm scales by ``(k, d)`` weights, attention folds the members into its batch. The members share
no operation, so each gets exactly its own gradient, and a step dispatches the same operations
whatever k is: what a small model's GPU step costs is its host work, not its arithmetic.

* A module is **member-aware** when its class says so (``member_aware = True``): it is built as
  ``cls(cfg, members)``, its parameters and persistent buffers lead with ``members``, and it maps
  ``(k, B, T, d)`` activations to ``(k, B, T, d)``, member i's output depending only on member i's
  input and tensors. Every built-in class is; a plugin says so itself (``build``).
* A class that is not (a plugin written for one run, the LSTM) computes one member: it is built
  as ``cls(cfg)`` for a model of one member only, sees ``(B, T, d)`` (``one_member``), and its
  runs train alone (``ablate.stacking.not_stackable``).

Checkpoints keep a solo run's layout (``member_state_dict``: member i's tensors as ``nn.Linear``
and ``nn.Embedding`` hold them), so a run moves between solo and stacked training, and
checkpoints written before the member dimension existed still load.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn as nn

from ablate import registry
from ablate.config import ModelConfig


def member_aware(cls: type) -> bool:
    """Whether ``cls`` computes k members (its class attribute ``member_aware``)."""
    return bool(getattr(cls, "member_aware", False))


def one_member(module: nn.Module) -> nn.Module:
    """``module`` (written for one run, ``(B, T, d)``) inside a model of one member: its forward
    (``embed`` for a positional encoding) gets ``x[0]`` and its output regains the member
    dimension. Its tensors have no member dimension (``member_state_dict`` knows it)."""
    module.one_member = True
    if hasattr(module, "embed"):  # a NoPositions subclass: the model calls embed, not forward
        solo_embed = module.embed
        module.embed = lambda x: solo_embed(x[0]).unsqueeze(0)
        return module
    module.register_forward_pre_hook(lambda m, args: (args[0][0], *args[1:]))
    module.register_forward_hook(lambda m, args, out: out.unsqueeze(0))
    return module


def build(axis: str, cfg: ModelConfig, members: int) -> nn.Module:
    """The class ``cfg`` names on ``axis`` (its registry), built for ``members`` members."""
    name = getattr(cfg, axis)
    cls = registry.lookup(axis, name)
    if member_aware(cls):
        return cls(cfg, members)
    if members != 1:
        raise ValueError(
            f"model.{axis} {name!r} ({cls.__qualname__}) is not member-aware: its runs train "
            "alone, not stacked"
        )
    return one_member(cls(cfg))


# --- the two parametrised layers ------------------------------------------------------------------


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x (k, ..., in) @ weight (k, in, out) + bias (k, out)`` of each member: one ``baddbmm``
    (``bmm`` without a bias); of one member one ``addmm`` (``mm``) on views of the weights, as
    cheap as ``nn.Linear``'s, whose gradients reach the weights through the views."""
    k, d_in, d_out = weight.shape
    if k == 1:
        x2, w = x.reshape(-1, d_in), weight.view(d_in, d_out)  # (M, in), (in, out)
        y = x2 @ w if bias is None else torch.addmm(bias.view(-1), x2, w)
    else:
        x2 = x.reshape(k, -1, d_in)  # (k, M, in)
        y = torch.bmm(x2, weight) if bias is None else torch.baddbmm(bias.unsqueeze(1), x2, weight)
    return y.view(*x.shape[:-1], d_out)  # (k, ..., out)


class Linear(nn.Module):
    """``y = x W^T + b`` of each member at once (:func:`linear`).

    ``weight`` is ``(k, in, out)``, each member's ``W^T``: the backward's ``bmm`` then makes the
    weight's gradient in the weight's own layout (stored as ``nn.Linear``'s ``(out, in)`` the
    gradient would come out transposed and be copied once a step). ``solo_form`` gives
    ``nn.Linear``'s layout for checkpoints. Initialised as ``nn.Linear`` (the model re-inits)."""

    member_aware = True

    def __init__(self, d_in: int, d_out: int, *, bias: bool, members: int = 1):
        super().__init__()
        self.in_features, self.out_features = d_in, d_out
        bound = 1 / math.sqrt(d_in)
        self.weight = nn.Parameter(torch.empty(members, d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(members, d_out)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)

    @staticmethod
    def solo_form(name: str, t: torch.Tensor) -> torch.Tensor:
        """A member's tensor ``name`` as ``nn.Linear`` holds it (a view)."""
        return t.transpose(-1, -2) if name == "weight" else t


class Embedding(nn.Module):
    """``members`` lookup tables ``(k, n, d)`` read by one gather: member i's id ``j`` is
    ``weight[i, j]`` (one ``index``; its backward one ``index_put``). Initialised as
    ``nn.Embedding``, N(0, 1)."""

    member_aware = True

    def __init__(self, n: int, d: int, members: int = 1):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(members, n, d))
        self.register_buffer("member_ids", torch.arange(members), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """``idx`` ``(k, ...)``, or ``(1, ...)`` for ids every member reads -> ``(k, ..., d)``."""
        # indexing, not F.embedding over a (k*n, d) view: a member's table is a row of the
        # optimizer's (k, N) buffer, so the k tables are not one contiguous block
        members = self.member_ids.view(-1, *(1,) * (idx.dim() - 1))  # (k, 1, ...)
        return self.weight[members, idx]


# --- a member's tensors -------------------------------------------------------------------------


def _owners(model: nn.Module) -> Iterator[tuple[str, nn.Module, bool]]:
    """``(name, module, has the member dimension)`` of every submodule."""

    def walk(prefix: str, module: nn.Module, member: bool):
        member = member and not getattr(module, "one_member", False)
        yield prefix, module, member
        for name, child in module.named_children():
            yield from walk(f"{prefix}{name}.", child, member)

    yield from walk("", model, True)


def member_tensors(model: nn.Module) -> dict[str, tuple[torch.Tensor, bool, Callable]]:
    """Every tensor of ``model``'s state_dict: ``name -> (tensor, has the member dimension,
    its solo form)``; the solo form maps a member's slice to the layout a solo checkpoint
    holds (``Linear``'s weight transposed, the rest as is)."""
    saved = model.state_dict(keep_vars=True)
    out: dict[str, tuple[torch.Tensor, bool, Callable]] = {}
    for prefix, module, member in _owners(model):
        form = getattr(module, "solo_form", None)
        local = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
        for name, t in local:
            key = prefix + name
            if key in saved and key not in out:
                solo = (lambda x, f=form, n=name: f(n, x)) if form else (lambda x: x)
                out[key] = (t, member, solo)
    return out


def member_state_dict(model: nn.Module, i: int) -> dict[str, torch.Tensor]:
    """Member ``i``'s tensors as a solo run's model holds them (views, no copy)."""
    return {
        name: solo(t[i] if member else t)
        for name, (t, member, solo) in member_tensors(model).items()
    }


@torch.no_grad()
def load_member_state_dict(model: nn.Module, i: int, state: dict[str, Any]) -> None:
    """Copy a solo layout ``state`` (``member_state_dict``'s form; a checkpoint's) into member
    ``i``. Keys the model does not hold (a tied head's alias, ``ignored_keys``) are skipped;
    a tensor missing or of another shape is an error naming it."""
    target = member_state_dict(model, i)
    ignored = getattr(model, "ignored_keys", set())
    unexpected = sorted(set(state) - set(target) - set(ignored))
    missing = sorted(set(target) - set(state))
    if unexpected or missing:
        raise RuntimeError(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
    for name, t in target.items():
        if t.shape != state[name].shape:
            raise RuntimeError(
                f"size mismatch for {name}: the checkpoint has {tuple(state[name].shape)}, "
                f"the model {tuple(t.shape)}"
            )
        t.copy_(state[name])


def solo_dims(model: nn.Module) -> dict[str, int]:
    """Each parameter's number of dimensions in a solo run (its member dimension left out)."""
    tensors = member_tensors(model)
    return {n: p.dim() - int(tensors[n][1]) for n, p in model.named_parameters()}


def stack_models(models: list[nn.Module]) -> nn.Module:
    """One model of ``len(models)`` members, member i holding ``models[i]``'s member 0 (each
    a model of one member, of one class and config), on their device. Draws nothing from
    torch's random generators (dropout goes on as it would have). One model is its own stack
    (it trains in place)."""
    first = models[0]
    if len(models) == 1:
        return first
    device = next(first.parameters()).device
    forked = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=forked), torch.device(device):
        stack = type(first)(first.cfg, first.vocab_size, members=len(models))
    for i, model in enumerate(models):
        load_member_state_dict(stack, i, member_state_dict(model, 0))
    return stack.train(first.training)
