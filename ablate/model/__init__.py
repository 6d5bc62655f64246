"""The models of every study: ``build_model(cfg, vocab_size)`` picks the arch by ``cfg.arch``.

Every model is a ``LanguageModel`` of k members (``members``; 1 for a solo run, see
``ablate.model.members``): ``forward(idx (k, B, T)) -> logits (k, B, T, vocab)`` (one member
also maps ``(B, T)`` to ``(B, T, vocab)``, as a plain language model),
``param_counts()`` and ``flops_per_token(seq_len)`` of one member, and ``max_len`` (``None`` =
any length). Per-layer parameter names: ``blocks.{i}.`` (transformer) and ``lstm.*_l{i}`` (LSTM).
"""

from __future__ import annotations

from ablate import registry
from ablate.config import ModelConfig
from ablate.model.base import LanguageModel
from ablate.model.lstm import LSTMLM
from ablate.model.members import (
    load_member_state_dict,
    member_state_dict,
    member_tensors,
    solo_dims,
    stack_models,
)
from ablate.model.transformer import TransformerLM

ARCHS: dict[str, type[LanguageModel]] = registry.define(
    "arch", {"transformer": TransformerLM, "lstm": LSTMLM}
)


def build_model(cfg: ModelConfig, vocab_size: int, members: int = 1) -> LanguageModel:
    """The model ``cfg`` describes for ``members`` members, freshly initialised from torch's
    global RNG."""
    return registry.lookup("arch", cfg.arch)(cfg, vocab_size, members)


__all__ = [
    "ARCHS",
    "LSTMLM",
    "LanguageModel",
    "TransformerLM",
    "build_model",
    "load_member_state_dict",
    "member_state_dict",
    "member_tensors",
    "solo_dims",
    "stack_models",
]
