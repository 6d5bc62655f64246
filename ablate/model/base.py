"""The base class of every arch: token embedding -> ``hidden`` (the architecture) -> linear
head, their initialisation, and a member's size and cost (``ablate.model.members``: every
tensor leads with the member dimension, a solo run being one member)."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn as nn

from ablate.config import ModelConfig
from ablate.model.members import Embedding, Linear


class LanguageModel(nn.Module):
    """Token embedding -> ``hidden`` (the architecture) -> linear head, shared by every arch.

    ``forward(idx)``: ``(k, B, T)`` token ids (member i's batch in row i) -> ``(k, B, T, vocab)``
    logits; ``members`` = k, 1 for a solo run. ``(B, T)`` ids, which every member reads, give
    ``(B, T, vocab)`` for one member, as nanoGPT's GPT does (the model used as a plain language
    model: sampling, an evaluation harness), and ``(k, B, T, vocab)`` for k > 1.
    Subclasses build their body and call ``init_weights()`` last.
    """

    member_aware: ClassVar[bool] = True
    """Whether the class computes k members (``ablate.model.members``); one that does not
    (``False``) is built with one member and its runs train alone, never stacked (read at plan
    time, so such a run is planned alone instead of failing in a group)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, members: int = 1):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.members = members
        self.tok_emb = Embedding(vocab_size, cfg.d_model, members)
        # weight tying (Press & Wolf 2017, arXiv 1608.05859): the head is the embedding's
        # transpose, so it has no weight of its own (checkpoints of older code name it)
        self.head = None if cfg.tie_embeddings else Linear(cfg.d_model, vocab_size, bias=False,
                                                            members=members)  # fmt: skip
        self.ignored_keys = {"head.weight"} if cfg.tie_embeddings else set()

    @property
    def max_len(self) -> int | None:
        """Longest sequence ``forward`` accepts; ``None`` = any length."""
        return None

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids ``(k, B, T)`` or ``(1, B, T)`` -> final hidden states ``(k, B, T, d)``."""
        raise NotImplementedError

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        solo = idx.dim() == 2 and self.members == 1  # no member dimension in, none out
        if idx.dim() == 2:
            idx = idx.unsqueeze(0)  # (1, B, T): every member's batch
        logits = self.logits(self.hidden(idx))  # (k, B, T, vocab)
        return logits[0] if solo else logits

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Final hidden states ``(k, B, T, d)`` -> ``(k, B, T, vocab)`` (the head)."""
        if self.head is not None:
            return self.head(h)
        members, B, T, d = h.shape
        table = self.tok_emb.weight.transpose(1, 2)  # (k, d, vocab)
        return torch.bmm(h.reshape(members, B * T, d), table).view(members, B, T, -1)

    # --- initialisation -------------------------------------------------------------------

    def residual_projections(self) -> list[nn.Module]:
        """Linears whose output is added to the residual stream (they get a scaled init)."""
        return []

    @property
    def emb_scale(self) -> float:
        """Token embeddings are multiplied by sqrt(d_model) under the ``vaswani`` init and with
        sinusoidal positions (Vaswani et al. 2017, sec. 3.4, part of the sinusoidal recipe):
        the fixed sinusoid has unit amplitude, and next to ``gpt2``-initialised embeddings
        (std 0.02) it would swamp the tokens and stall training at the unigram loss."""
        scaled = self.cfg.init == "vaswani" or self.cfg.pos_encoding == "sinusoidal"
        return math.sqrt(self.cfg.d_model) if scaled else 1.0

    def init_weights(self) -> None:
        """``gpt2``: ``N(0, init_std)`` for linear and embedding weights, zero biases; residual
        output projections use ``init_std / sqrt(2 n_layers)`` (GPT-2, Radford et al. 2019) so
        the residual stream's variance does not grow with depth.

        ``vaswani`` (Vaswani et al. 2017, arXiv 1706.03762; the setting of Xiong et al. 2020):
        Xavier-uniform linears, zero biases, embeddings ``N(0, 1/d_model)`` scaled by
        ``sqrt(d_model)`` in the forward pass so tokens enter the residual stream at unit scale.

        Norms keep ones/zeros; other modules keep torch's defaults. A plugin's ``nn.Linear``
        and ``nn.Embedding`` are initialised as the model's own."""
        linears, tables = (Linear, nn.Linear), (Embedding, nn.Embedding)
        if self.cfg.init == "vaswani":
            for module in self.modules():
                if isinstance(module, linears):
                    fans = module.in_features + module.out_features
                    bound = math.sqrt(6 / fans)  # Xavier-uniform (Glorot & Bengio 2010)
                    nn.init.uniform_(module.weight, -bound, bound)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)
            for module in self.modules():
                if isinstance(module, tables):
                    nn.init.normal_(module.weight, mean=0.0, std=self.cfg.d_model**-0.5)
            return
        std = self.cfg.init_std
        for module in self.modules():
            if isinstance(module, (*linears, *tables)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
            if isinstance(module, linears) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for linear in self.residual_projections():
            nn.init.normal_(linear.weight, mean=0.0, std=std / math.sqrt(2 * self.cfg.n_layers))

    # --- size and cost --------------------------------------------------------------------

    def embedding_parameters(self) -> list[nn.Parameter]:
        """Lookup tables: the token embedding, the head when untied, learned positions."""
        return [self.tok_emb.weight] + ([] if self.head is None else [self.head.weight])

    def param_counts(self) -> dict[str, int]:
        """``{'total', 'embedding', 'non_embedding'}`` of one member; tied weights count once.

        ``embedding`` is ``embedding_parameters()`` (Kaplan et al. 2020, arXiv 2001.08361,
        exclude these from N); ``non_embedding`` is everything else.
        """
        # parameters() skips tied duplicates; a model with tensors of one member has k = 1
        total = sum(p.numel() for p in self.parameters()) // self.members
        emb = sum(p.numel() for p in self.embedding_parameters()) // self.members
        return {"total": total, "embedding": emb, "non_embedding": total - emb}

    def flops_per_token(self, seq_len: int) -> int:
        """Approximate training FLOPs per token (forward + backward = 3x forward):

        ``6 * N_non_embedding + 6 * d_model * vocab`` (the head matmul; Kaplan et al. 2020,
        arXiv 2001.08361); transformers add attention's ``12 * n_layers * d_model * seq_len``.
        """
        head = 6 * self.cfg.d_model * self.vocab_size
        return 6 * self.param_counts()["non_embedding"] + head
