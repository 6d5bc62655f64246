"""The models of every study: ``build_model(cfg, vocab_size)`` picks the arch by ``cfg.arch``.

Every model is a ``LanguageModel``: ``forward(idx (B, T)) -> logits (B, T, vocab)``,
``param_counts()``, ``flops_per_token(seq_len)`` and ``max_len`` (``None`` = any length).
Per-layer parameter names: ``blocks.{i}.`` (transformer) and ``lstm.*_l{i}`` (LSTM).
"""

from __future__ import annotations

from ablate import registry
from ablate.config import ModelConfig
from ablate.model.lstm import LSTMLM
from ablate.model.transformer import LanguageModel, TransformerLM

ARCHS: dict[str, type[LanguageModel]] = registry.define(
    "arch", {"transformer": TransformerLM, "lstm": LSTMLM}
)


def build_model(cfg: ModelConfig, vocab_size: int) -> LanguageModel:
    """The model ``cfg`` describes, freshly initialised from torch's global RNG."""
    return registry.lookup("arch", cfg.arch)(cfg, vocab_size)


__all__ = ["ARCHS", "LSTMLM", "LanguageModel", "TransformerLM", "build_model"]
