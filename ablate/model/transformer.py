"""The configurable decoder-only transformer LM (its base class, shared with the LSTM:
``ablate.model.base.LanguageModel``).

Reads top to bottom: norms -> positional encodings -> attention -> feed-forward -> block -> model.
Each ablation axis of ``ModelConfig`` is a registry (a small ``dict`` name -> class) looked up
once at build time, so the forward pass has no branches on config strings.

One model computes k runs of one shape ("members"; a solo run is k = 1): every tensor leads with
the member dimension and activations are ``(k, B, T, d)`` (``ablate.model.members``: the batched
``Linear`` and ``Embedding``, how a member's tensors are saved). The code is the same for every
k, so a step dispatches the same operations whatever k is.

Parameter naming (for per-layer gradient norms): everything in transformer layer ``i`` lives
under ``blocks.{i}.`` (``blocks.{i}.attn.{q,k,v,out}_proj``, ``blocks.{i}.ffn.w{1,2,3}``,
``blocks.{i}.{attn,ffn}_norm``); the rest (``tok_emb``, ``pos``, ``final_norm``, ``head``) belongs
to no layer. With tied embeddings the head is ``tok_emb.weight`` transposed and has no
parameter of its own.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ablate import registry
from ablate.config import ModelConfig
from ablate.model.base import LanguageModel
from ablate.model.members import Embedding, Linear, build, linear

# --- norms ----------------------------------------------------------------------------------------
#
# Activations are ``(k, B, T, d)``: k members (a solo run: k = 1), each with its own batch. Every
# tensor of a module leads with k (``ablate.model.members``); a norm's weights are ``(k, d)``.


def per_member(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A member's ``(k, d)`` weights shaped to scale ``x`` ``(k, ..., d)`` member by member."""
    return w.view(w.size(0), *(1,) * (x.dim() - 2), w.size(-1))


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dimension, each member
    with its own ``(k, d)`` weight and bias."""
    y = F.layer_norm(x, x.shape[-1:], eps=eps)
    w = per_member(weight, y)
    return y * w if bias is None else torch.addcmul(per_member(bias, y), y, w)


class LayerNorm(nn.Module):
    """LayerNorm (Ba et al. 2016, arXiv 1607.06450); the shift is dropped when ``bias=False``."""

    member_aware = True

    def __init__(self, cfg: ModelConfig, members: int = 1, dim: int | None = None):
        super().__init__()
        dim = dim or cfg.d_model
        self.eps = cfg.norm_eps
        self.weight = nn.Parameter(torch.ones(members, dim))
        self.bias = nn.Parameter(torch.zeros(members, dim)) if cfg.bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dimension."""
    # the mean of squares overflows/underflows in half precision, so normalise in fp32
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019, arXiv 1910.07467): LayerNorm without centring or shift."""

    member_aware = True

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__()
        self.eps = cfg.norm_eps
        self.weight = nn.Parameter(torch.ones(members, cfg.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, per_member(self.weight, x), self.eps)


NORMS: dict[str, type[nn.Module]] = registry.define(
    "norm", {"layernorm": LayerNorm, "rmsnorm": RMSNorm}
)


# --- positional encodings -------------------------------------------------------------------------
#
# A positional encoding acts in one of three places: added to the token embeddings (sinusoidal,
# learned), rotating q and k inside attention (RoPE), or as an additive attention bias (ALiBi).
# Each class overrides the hook it needs; the model calls all three once per forward and hands the
# rotary tables and bias to every block. Everything but the learned table is computed for the
# actual length on the fly, so evaluation beyond the training length works.


def sinusoidal_table(seq_len: int, dim: int, device: torch.device | None = None) -> torch.Tensor:
    """``PE[pos, 2i] = sin(pos / 10000^(2i/dim))``, ``PE[pos, 2i+1] = cos(pos / 10000^(2i/dim))``.

    Returns ``(seq_len, dim)`` float32; an odd ``dim`` drops the last cosine column.
    """
    pos = torch.arange(seq_len, dtype=torch.float32, device=device)
    two_i = torch.arange(0, dim, 2, dtype=torch.float32, device=device)
    angle = pos[:, None] * torch.exp(-math.log(10000.0) * two_i / dim)  # (T, ceil(dim/2))
    table = torch.empty(seq_len, dim, device=device)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return table


def rope_frequencies(
    seq_len: int, dim: int, theta: float = 10000.0, device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos(m * theta_i)`` and ``sin(m * theta_i)`` with ``theta_i = theta^(-2i/dim)``.

    For positions ``m = 0..seq_len-1`` and pairs ``i = 0..dim/2-1``; each is ``(seq_len, dim/2)``.
    """
    two_i = torch.arange(0, dim, 2, dtype=torch.float32, device=device)
    inv_freq = theta ** (-two_i / dim)  # (dim/2,)
    angle = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair ``(x_2i, x_2i+1)`` at position ``m`` by the angle ``m * theta_i``:

    ``x'_2i = x_2i cos - x_2i+1 sin``, ``x'_2i+1 = x_2i sin + x_2i+1 cos``.
    ``x`` is ``(..., T, D)``; ``cos``/``sin`` are ``(T, D/2)`` from ``rope_frequencies``.
    """
    # rotate in fp32: the angles of far positions lose their low bits in bf16
    x32 = x.float()
    x1, x2 = x32[..., 0::2], x32[..., 1::2]  # (..., T, D/2)
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (..., T, D/2, 2)
    return out.flatten(-2).type_as(x)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Head slopes ``2^(-8h/n)`` for ``h = 1..n`` when ``n`` is a power of two.

    Otherwise (the paper's interpolation) the slopes of the closest lower power of two ``p``,
    followed by every other slope of ``2p`` for the remaining ``n - p`` heads.
    """

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(p) + power_of_two(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes)


def alibi_bias(slopes: torch.Tensor, seq_len: int) -> torch.Tensor:
    """``bias[h, i, j] = -slopes[h] * (i - j)``: a penalty linear in the query-key distance.

    Returns ``(H, T, T)``; entries with ``j > i`` are meaningless and must be causally masked.
    """
    pos = torch.arange(seq_len, device=slopes.device)
    distance = (pos[:, None] - pos[None, :]).to(slopes.dtype)  # (T, T)
    return -slopes[:, None, None] * distance  # (H, T, T)


def causal_mask(seq_len: int, device: torch.device | None = None) -> torch.Tensor:
    """Additive ``(T, T)`` mask: 0 where ``j <= i``, ``-inf`` where ``j > i``."""
    return torch.full((seq_len, seq_len), float("-inf"), device=device).triu(1)


Rotary = tuple[torch.Tensor, torch.Tensor]


class NoPositions(nn.Module):
    """No position signal; the causal mask alone lets a decoder infer position
    (Haviv et al. 2022, arXiv 2203.16634). Also the base class: every hook is a no-op."""

    member_aware = True
    max_len: int | None = None
    """Longest sequence the encoding supports; ``None`` = any."""

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__()

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Token embeddings ``(k, B, T, d)`` -> input of the first block."""
        return x

    def rotary(self, seq_len: int, device: torch.device) -> Rotary | None:
        """``(cos, sin)`` tables applied to q and k, or ``None``; every member's."""
        return None

    def attn_bias(self, seq_len: int, device: torch.device) -> torch.Tensor | None:
        """Additive attention mask ``(H, T, T)`` that already includes causality, or ``None``;
        every member's."""
        return None


class SinusoidalPositions(NoPositions):
    """Fixed sinusoids added to the embeddings (Vaswani et al. 2017, arXiv 1706.03762)."""

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return x + sinusoidal_table(x.size(-2), x.size(-1), x.device).to(x.dtype)


class LearnedPositions(NoPositions):
    """A trained absolute position table (GPT, Radford et al. 2018; BERT, arXiv 1810.04805)."""

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__(cfg, members)
        self.max_len = cfg.max_seq_len
        self.table = Embedding(cfg.max_seq_len, cfg.d_model, members)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        T = x.size(-2)
        if T > self.max_len:
            raise ValueError(
                f"sequence length {T} exceeds max_seq_len {self.max_len}: learned positions "
                "have no embedding past the table (use sinusoidal, rope, alibi or none)"
            )
        positions = torch.arange(T, device=x.device).unsqueeze(0)  # (1, T): every member's
        return x + self.table(positions).unsqueeze(1)  # (k, B, T, d) + (k, 1, T, d)


class RotaryPositions(NoPositions):
    """RoPE (Su et al. 2021, arXiv 2104.09864): q and k rotated by position, so q.k depends
    only on the offset."""

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__(cfg, members)
        self.head_dim, self.theta = cfg.head_dim, cfg.rope_theta

    def rotary(self, seq_len: int, device: torch.device) -> Rotary:
        return rope_frequencies(seq_len, self.head_dim, self.theta, device)


class ALiBiPositions(NoPositions):
    """ALiBi (Press et al. 2021, arXiv 2108.12409): a per-head linear distance penalty."""

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__(cfg, members)
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads), persistent=False)

    def attn_bias(self, seq_len: int, device: torch.device) -> torch.Tensor:
        slopes = self.slopes.to(device=device, dtype=torch.float32)
        return alibi_bias(slopes, seq_len) + causal_mask(seq_len, device)  # (H, T, T)


POSITIONS: dict[str, type[NoPositions]] = registry.define(
    "pos_encoding",
    {
        "sinusoidal": SinusoidalPositions,
        "learned": LearnedPositions,
        "rope": RotaryPositions,
        "alibi": ALiBiPositions,
        "none": NoPositions,
    },
)


# --- attention ------------------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (Vaswani et al. 2017) with ``n_kv_heads`` key/value
    heads: grouped-query attention (Ainslie et al. 2023, arXiv 2305.13245), multi-query when 1
    (Shazeer 2019, arXiv 1911.02150). Query head ``h`` reads K/V head ``h // (n_heads/n_kv)``.

    The members are folded into SDPA's batch, ``(k*B, H, T, D)``: one attention call for all of
    them, with the fused kernels and attention dropout (``dropout_p``) inside it.

    The ``attention`` axis' base (``plain``): a variant subclasses it and overrides ``qk`` (the
    heads' queries and keys before the positions rotate them) or ``attend`` (the attention of
    the projected heads); the block calls it as ``attn(x, rotary, attn_bias)``."""

    member_aware = True

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__()
        self.members = members
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        kv_dim = self.n_kv_heads * self.head_dim
        # three projections (their names and layout: nn.MultiheadAttention's in_proj split in
        # three, what checkpoints hold), computed as one (``project``)
        self.q_proj = Linear(cfg.d_model, cfg.d_model, bias=cfg.bias, members=members)
        self.k_proj = Linear(cfg.d_model, kv_dim, bias=cfg.bias, members=members)
        self.v_proj = Linear(cfg.d_model, kv_dim, bias=cfg.bias, members=members)
        self.out_proj = Linear(cfg.d_model, cfg.d_model, bias=cfg.bias, members=members)
        self.attn_dropout = cfg.dropout
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries ``(k*B, H, T, D)`` and keys ``(k*B, Hkv, T, D)`` as the scores will use them."""
        return q, k

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_bias: torch.Tensor | None
    ) -> torch.Tensor:
        """``softmax(q k^T / sqrt(D) + bias) v`` over ``(k*B, H, T, D)`` heads, causal."""
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=None if attn_bias is None else attn_bias.to(q.dtype),
            dropout_p=self.attn_dropout if self.training else 0.0,
            # a bias mask already carries the causal -inf; is_causal would apply it twice
            is_causal=attn_bias is None,
        )

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of ``x`` ``(k, B, T, d)``: ``(k, B, T, H*D)``, ``(k, B, T,
        Hkv*D)`` twice. One matmul over the three projections' weights side by side (one read
        of ``x``, one kernel; the layout stays three ``Linear``s); a variant whose projections
        are other modules gets each one's output."""
        projections = (self.q_proj, self.k_proj, self.v_proj)
        if not all(type(p) is Linear for p in projections):
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        weight = torch.cat([p.weight for p in projections], -1)  # (k, d, d + 2 kv)
        bias = None if self.q_proj.bias is None else torch.cat([p.bias for p in projections], -1)
        kv = self.n_kv_heads * self.head_dim
        return linear(x, weight, bias).split((x.size(-1), kv, kv), -1)

    def forward(
        self,
        x: torch.Tensor,
        rotary: Rotary | None = None,
        attn_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        members, B, T, C = x.shape
        H, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        q, k, v = self.project(x)
        q = q.reshape(members * B, T, H, D).transpose(1, 2)  # (k*B, H, T, D)
        k = k.reshape(members * B, T, Hkv, D).transpose(1, 2)  # (k*B, Hkv, T, D)
        v = v.reshape(members * B, T, Hkv, D).transpose(1, 2)  # (k*B, Hkv, T, D)
        q, k = self.qk(q, k)
        if rotary is not None:
            q, k = apply_rope(q, *rotary), apply_rope(k, *rotary)
        if Hkv != H:
            k = k.repeat_interleave(H // Hkv, dim=1)  # (k*B, H, T, D)
            v = v.repeat_interleave(H // Hkv, dim=1)  # (k*B, H, T, D)
        y = self.attend(q, k, v, attn_bias)  # (k*B, H, T, D)
        y = y.transpose(1, 2).reshape(members, B, T, C)  # (k, B, T, d)
        return self.resid_dropout(self.out_proj(y))


class QKNormAttention(CausalSelfAttention):
    """QK-LayerNorm (Henry et al. 2020, arXiv 2010.04245; Dehghani et al. 2023, arXiv
    2302.05442): each head's queries and keys layer-normalised (over ``head_dim``, a learned
    scale per head dimension) before the scores, which bounds the attention logits; Wortsman et
    al. 2023 (arXiv 2309.14322) find it keeps small models trainable at higher learning rates."""

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__(cfg, members)
        self.q_norm = LayerNorm(cfg, members, dim=self.head_dim)
        self.k_norm = LayerNorm(cfg, members, dim=self.head_dim)

    def qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # (k*B, H, T, D) -> (k, B, H, T, D): each member's heads with the member's scale
        q = self.q_norm(q.unflatten(0, (self.members, -1))).flatten(0, 1)
        return q, self.k_norm(k.unflatten(0, (self.members, -1))).flatten(0, 1)


ATTENTIONS: dict[str, type[CausalSelfAttention]] = registry.define(
    "attention", {"plain": CausalSelfAttention, "qk_norm": QKNormAttention}
)


# --- feed-forward ---------------------------------------------------------------------------------

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swiglu": F.silu, "geglu": F.gelu}


class FeedForward(nn.Module):
    """``W2 act(W1 x)`` with ReLU (Vaswani et al. 2017, arXiv 1706.03762) or GELU
    (Hendrycks & Gimpel 2016, arXiv 1606.08415)."""

    member_aware = True

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__()
        self.act = ACTIVATIONS[cfg.activation]
        self.w1 = Linear(cfg.d_model, cfg.ffn_hidden, bias=cfg.bias, members=members)
        self.w2 = Linear(cfg.ffn_hidden, cfg.d_model, bias=cfg.bias, members=members)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.w2(self.act(self.w1(x))))


class GatedFeedForward(nn.Module):
    """``W2 (act(W1 x) * W3 x)``: SwiGLU (act = SiLU) and GEGLU (act = GELU), Shazeer 2020
    (arXiv 2002.05202). The hidden width is ``cfg.ffn_hidden`` = 2/3 d_ff when parameter-matched,
    since three matrices replace two."""

    member_aware = True

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__()
        self.act = ACTIVATIONS[cfg.activation]
        self.w1 = Linear(cfg.d_model, cfg.ffn_hidden, bias=cfg.bias, members=members)
        self.w3 = Linear(cfg.d_model, cfg.ffn_hidden, bias=cfg.bias, members=members)
        self.w2 = Linear(cfg.ffn_hidden, cfg.d_model, bias=cfg.bias, members=members)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.w2(self.act(self.w1(x)) * self.w3(x)))


FFNS: dict[str, type[nn.Module]] = registry.define(
    "activation",
    {
        "relu": FeedForward,
        "gelu": FeedForward,
        "swiglu": GatedFeedForward,
        "geglu": GatedFeedForward,
    },
)


# --- block ----------------------------------------------------------------------------------------


class Block(nn.Module):
    """Attention and feed-forward sublayers, each with a residual connection and a norm."""

    member_aware = True
    final_norm: bool
    """Whether the model needs a norm between the last block and the head."""

    def __init__(self, cfg: ModelConfig, members: int = 1):
        super().__init__()
        self.attn_norm = build("norm", cfg, members)
        self.attn = build("attention", cfg, members)
        self.ffn_norm = build("norm", cfg, members)
        self.ffn = build("activation", cfg, members)


class PostNormBlock(Block):
    """``x = LN(x + Sublayer(x))`` (Vaswani et al. 2017, arXiv 1706.03762)."""

    # the last block already ends in a norm
    final_norm = False

    def forward(
        self, x: torch.Tensor, rotary: Rotary | None = None, attn_bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.attn_norm(x + self.attn(x, rotary, attn_bias))
        return self.ffn_norm(x + self.ffn(x))


class PreNormBlock(Block):
    """``x = x + Sublayer(LN(x))`` (GPT-2; Xiong et al. 2020, arXiv 2002.04745)."""

    # the residual stream is never normalised inside the blocks, so normalise it before the head
    final_norm = True

    def forward(
        self, x: torch.Tensor, rotary: Rotary | None = None, attn_bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rotary, attn_bias)
        return x + self.ffn(self.ffn_norm(x))


BLOCKS: dict[str, type[Block]] = registry.define(
    "norm_placement", {"post": PostNormBlock, "pre": PreNormBlock}
)


# --- model ----------------------------------------------------------------------------------------


class TransformerLM(LanguageModel):
    """Decoder-only transformer LM (GPT, Radford et al. 2018): embed (+ positions) -> dropout ->
    ``n_layers`` blocks -> final norm (pre-norm only) -> head."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, members: int = 1):
        super().__init__(cfg, vocab_size, members)
        self.pos = build("pos_encoding", cfg, members)
        self.drop = nn.Dropout(cfg.dropout)
        layers = (build("norm_placement", cfg, members) for _ in range(cfg.n_layers))
        self.blocks = nn.ModuleList(layers)
        block = registry.lookup("norm_placement", cfg.norm_placement)
        self.final_norm = build("norm", cfg, members) if block.final_norm else nn.Identity()
        self.init_weights()

    @property
    def max_len(self) -> int | None:
        return self.pos.max_len

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(-1)
        x = self.drop(self.pos.embed(self.tok_emb(idx) * self.emb_scale))  # (k, B, T, d)
        # once per forward, shared by every block and member
        rotary = self.pos.rotary(T, idx.device)
        attn_bias = self.pos.attn_bias(T, idx.device)
        for block in self.blocks:
            x = block(x, rotary, attn_bias)
        return self.final_norm(x)

    def residual_projections(self) -> list[nn.Module]:
        # a plugin block or FFN may name its output projection differently: it keeps its init
        out = []
        for b in self.blocks:
            for owner, name in (
                (getattr(b, "attn", None), "out_proj"),
                (getattr(b, "ffn", None), "w2"),
            ):
                linear = getattr(owner, name, None)
                if isinstance(linear, (Linear, nn.Linear)):
                    out.append(linear)
        return out

    def embedding_parameters(self) -> list[nn.Parameter]:
        # the only positional parameters are the learned table's
        return super().embedding_parameters() + list(self.pos.parameters())

    def flops_per_token(self, seq_len: int) -> int:
        """``6 N_non_embedding + 6 d_model vocab + 12 n_layers d_model seq_len``.

        The last term is the attention scores and weighted sum, which have no parameters: QK^T and
        AV are ``2 * d_model * seq_len`` multiply-adds (``4 d T`` FLOPs) per layer and token, times
        3 for training, as in PaLM (Chowdhery et al. 2022, arXiv 2204.02311, appendix B); like
        PaLM it ignores the causal mask's halving.
        """
        attention = 12 * self.cfg.n_layers * self.cfg.d_model * seq_len
        return super().flops_per_token(seq_len) + attention
