"""An ablate plugin: the squared-ReLU feed-forward of Primer (So et al. 2021, arXiv 2109.08668).

``FFN(x) = W2 relu(W1 x)^2``. Registered on the ``activation`` axis, whose class is the whole
feed-forward module, so a study selects it with ``model.activation: relu2``. Like the built-in
FFNs it is built from the ``ModelConfig`` alone and keeps the names ``w1``/``w2`` (``w2`` gets
the scaled residual init).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import ablate
from ablate.config import ModelConfig


@ablate.register("activation", "relu2")
class SquaredReLUFeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.ff_dim, bias=cfg.bias)
        self.w2 = nn.Linear(cfg.ff_dim, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.w2(F.relu(self.w1(x)).square()))
