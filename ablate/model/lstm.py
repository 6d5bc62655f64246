"""The LSTM baseline: the transformer's embedding, head, tying and init around an ``nn.LSTM``.

Parameter naming (for per-layer gradient norms): LSTM layer ``i`` owns
``lstm.{weight,bias}_{ih,hh}_l{i}`` (torch's names); ``tok_emb`` and ``head`` belong to no layer.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ablate.config import ModelConfig
from ablate.model.base import LanguageModel


class LSTMLM(LanguageModel):
    """Embedding -> dropout -> ``n_layers`` LSTM (Hochreiter & Schmidhuber 1997) of width
    ``d_model`` -> dropout -> head, regularised as in Zaremba et al. 2014 (arXiv 1409.2329):
    dropout on the non-recurrent connections only. Causal by construction. The recurrence runs
    in fp32 whatever ``train.precision`` says (``hidden``).

    One member only: ``nn.LSTM`` has no member dimension (and its cuDNN kernel no batched
    weights), so LSTM runs train alone, never stacked."""

    member_aware = False

    def __init__(self, cfg: ModelConfig, vocab_size: int, members: int = 1):
        if members != 1:
            raise ValueError("model.arch lstm computes one member: its runs train alone")
        super().__init__(cfg, vocab_size, members)
        self.drop = nn.Dropout(cfg.dropout)
        self.lstm = nn.LSTM(
            cfg.d_model,
            cfg.d_model,
            cfg.n_layers,
            bias=cfg.bias,
            batch_first=True,
            # between stacked layers; torch warns if asked for it with a single layer
            dropout=cfg.dropout if cfg.n_layers > 1 else 0.0,
        )
        self.lstm.one_member = True  # its tensors have no member dimension (members.py)
        # init_std covers the embedding and head; the LSTM keeps torch's U(-1/sqrt(d), 1/sqrt(d)),
        # the usual init for LSTM LMs (e.g. Zaremba et al.), not tuned for transformers
        self.init_weights()

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.tok_emb(idx))[0]  # (B, T, d): the one member
        # fp32 inside any autocast, on purpose: CUDA autocast runs the cuDNN LSTM in fp16
        # whatever dtype it was given (and bf16-mixed has no loss scaler), and oneDNN has no
        # bf16 LSTM on CPUs without AVX-512. The embedding and head still follow the run's
        # precision; the run's summary records what each part computed in (compute_dtypes).
        with torch.autocast(x.device.type, enabled=False):
            x, _ = self.lstm(x.float())  # (B, T, d)
        return self.drop(x).unsqueeze(0)  # (1, B, T, d)
