"""The model against independent references: torch's own layers, the papers' formulas written
out by hand here, and properties (causality, relative position) that a wrong model breaks."""

import math
import re

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

from ablate import registry
from ablate.config import ModelConfig
from ablate.model import (
    LSTMLM,
    TransformerLM,
    build_model,
    load_member_state_dict,
    member_state_dict,
)
from ablate.model.transformer import (
    ATTENTIONS,
    BLOCKS,
    FFNS,
    NORMS,
    POSITIONS,
    ALiBiPositions,
    CausalSelfAttention,
    GatedFeedForward,
    LayerNorm,
    RMSNorm,
    alibi_slopes,
    apply_rope,
    rope_frequencies,
    sinusoidal_table,
)

VOCAB = 13


def tiny(**overrides) -> ModelConfig:
    base = dict(d_model=16, n_layers=2, n_heads=4, d_ff=32, max_seq_len=8, dropout=0.0)
    return ModelConfig(**{**base, **overrides})


def randomize_(module: nn.Module, std: float = 0.5) -> nn.Module:
    """Large random weights everywhere (norms and biases too), so mismatches can't hide."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)
    return module


def solo(module: nn.Module) -> dict[str, torch.Tensor]:
    """A model of one member's tensors in torch's own layouts (``nn.Linear``'s ``(out, in)``
    weights, no member dimension): what the references below are built from."""
    return member_state_dict(module, 0)


def run(module: nn.Module, x: torch.Tensor, *args) -> torch.Tensor:
    """``module`` of one member on ``x`` without the member dimension, as torch's layers take it."""
    return module(x.unsqueeze(0), *args)[0]


# --- 1. blocks vs torch.nn.TransformerEncoderLayer -----------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("placement", ["post", "pre"])
def test_block_matches_torch_encoder_layer(placement, activation):
    torch.manual_seed(0)
    cfg = tiny(norm_placement=placement, activation=activation, pos_encoding="none", bias=True)
    block = randomize_(BLOCKS[placement](cfg)).eval()
    ref = nn.TransformerEncoderLayer(
        cfg.d_model,
        cfg.n_heads,
        cfg.ff_dim,
        dropout=0.0,
        activation=activation,
        layer_norm_eps=cfg.norm_eps,
        batch_first=True,
        norm_first=placement == "pre",
    ).eval()
    w = solo(block)
    with torch.no_grad():
        sa = ref.self_attn
        qkv = [f"attn.{p}_proj" for p in "qkv"]
        sa.in_proj_weight.copy_(torch.cat([w[f"{p}.weight"] for p in qkv]))
        sa.in_proj_bias.copy_(torch.cat([w[f"{p}.bias"] for p in qkv]))
        sa.out_proj.weight.copy_(w["attn.out_proj.weight"])
        sa.out_proj.bias.copy_(w["attn.out_proj.bias"])
        for ours, theirs in [
            ("ffn.w1", ref.linear1),
            ("ffn.w2", ref.linear2),
            ("attn_norm", ref.norm1),
            ("ffn_norm", ref.norm2),
        ]:
            theirs.weight.copy_(w[f"{ours}.weight"])
            theirs.bias.copy_(w[f"{ours}.bias"])
    x = torch.randn(2, 7, cfg.d_model)
    mask = nn.Transformer.generate_square_subsequent_mask(7)
    with torch.no_grad():
        assert_close(run(block, x), ref(x, src_mask=mask, is_causal=True))


def test_final_norm_only_for_pre_norm():
    assert isinstance(TransformerLM(tiny(norm_placement="post"), VOCAB).final_norm, nn.Identity)
    assert isinstance(TransformerLM(tiny(norm_placement="pre"), VOCAB).final_norm, LayerNorm)


# --- 2. norms ------------------------------------------------------------------------------------


def test_rmsnorm_matches_torch():
    torch.manual_seed(0)
    ours = RMSNorm(tiny(norm="rmsnorm", norm_eps=1e-3))
    ref = nn.RMSNorm(16, eps=1e-3)
    with torch.no_grad():
        ours.weight.normal_()
        ref.weight.copy_(ours.weight[0])
    # rows of very different scale: eps only matters for the small ones
    x = torch.randn(3, 5, 16) * torch.tensor([3.0, 1.0, 0.01])[:, None, None]
    assert_close(run(ours, x), ref(x))


def test_layernorm_matches_torch():
    torch.manual_seed(0)
    ours = randomize_(LayerNorm(tiny(norm_eps=1e-3)))
    ref = nn.LayerNorm(16, eps=1e-3)
    with torch.no_grad():
        ref.weight.copy_(ours.weight[0])
        ref.bias.copy_(ours.bias[0])
    x = torch.randn(3, 5, 16) * 4 + 1
    assert_close(run(ours, x), ref(x))


def test_unknown_registry_name_lists_choices():
    with pytest.raises(
        ValueError, match="unknown norm 'batchnorm'; choose from: layernorm, rmsnorm"
    ):
        registry.lookup("norm", "batchnorm")


def test_the_declared_names_are_the_defined_classes_and_validation_needs_no_torch():
    import subprocess
    import sys

    for axis, names in registry.BUILTINS.items():
        assert tuple(registry.table(axis))[: len(names)] == names
    with pytest.raises(RuntimeError, match="keep registry.BUILTINS in step"):
        registry.define("norm", {"layernorm": nn.LayerNorm})
    code = (
        "import sys\nfrom ablate.config import build_config\n"
        "build_config({'model.norm': 'rmsnorm', 'model.arch': 'lstm'})\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # the names are declared: no model, no torch


# --- 3.-5. positional encodings ------------------------------------------------------------------


def test_sinusoidal_table_matches_formula():
    d = 10
    table = sinusoidal_table(60, d)
    for pos, i in [(0, 0), (1, 0), (7, 2), (13, 3), (59, 4), (42, 1)]:
        angle = pos / 10000 ** (2 * i / d)
        assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
        assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)
    # odd widths keep the interleaving and drop the last cosine
    odd = sinusoidal_table(5, 9)
    assert odd[3, 8].item() == pytest.approx(math.sin(3 / 10000 ** (8 / 9)), abs=1e-6)


def test_sinusoidal_positions_are_added_to_embeddings():
    pos = POSITIONS["sinusoidal"](tiny(), 3)
    x = torch.randn(3, 2, 5, 16)  # (k, B, T, d)
    assert_close(pos.embed(x) - x, sinusoidal_table(5, 16).expand(3, 2, 5, 16))


def rope_at(x: torch.Tensor, m: int) -> torch.Tensor:
    cos, sin = rope_frequencies(m + 1, x.size(-1))
    return apply_rope(x[None], cos[m : m + 1], sin[m : m + 1])[0]


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    q, k = torch.randn(16), torch.randn(16)

    def score(m: int, n: int) -> float:
        return (rope_at(q, m) @ rope_at(k, n)).item()

    assert score(3, 1) == pytest.approx(score(10, 8), rel=1e-5, abs=1e-5)
    assert score(0, 5) == pytest.approx(score(20, 25), rel=1e-5, abs=1e-5)
    assert score(3, 1) != pytest.approx(score(3, 2), rel=1e-3)
    assert_close(rope_at(q, 0), q)


def rope_reference(x: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """RoPE as complex rotation (Su et al. eq. 12; Meta's llama): pair i of position m times
    exp(i m theta^(-2i/d)). x is (..., T, D)."""
    T, D = x.shape[-2:]
    freqs = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * freqs  # (T, D/2)
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], D // 2, 2))
    rotated = xc * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(rotated).flatten(-2).to(x.dtype)


def test_rope_matches_complex_rotation():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 12, 8)
    assert_close(apply_rope(x, *rope_frequencies(12, 8)), rope_reference(x), rtol=1e-5, atol=1e-5)


def test_alibi_slopes_match_paper():
    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    # 6 heads: the 4-head slopes, then every other 8-head slope
    assert alibi_slopes(6).tolist() == [2.0**-k for k in (2, 4, 6, 8, 1, 3)]


def test_alibi_bias_by_hand():
    bias = ALiBiPositions(tiny(n_heads=2)).attn_bias(3, torch.device("cpu"))
    inf = float("inf")
    s0, s1 = 2.0**-4, 2.0**-8  # 2 heads: 2^(-8/2 * h)
    expected = torch.tensor(
        [
            [[0, -inf, -inf], [-s0, 0, -inf], [-2 * s0, -s0, 0]],
            [[0, -inf, -inf], [-s1, 0, -inf], [-2 * s1, -s1, 0]],
        ]
    )
    assert_close(bias, expected)


# --- 6. attention vs plain matmuls ---------------------------------------------------------------


def reference_attention(
    attn: CausalSelfAttention, x: torch.Tensor, pos: str, slopes: list[float]
) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d) + bias + causal) V, one head at a time."""
    B, T, _ = x.shape
    H, Hkv, D = attn.n_heads, attn.n_kv_heads, attn.head_dim
    w = solo(attn)

    def project(name: str, heads: int) -> torch.Tensor:
        y = x @ w[f"{name}.weight"].T + w[f"{name}.bias"]
        return y.reshape(B, T, heads, D).permute(0, 2, 1, 3)

    q, k, v = project("q_proj", H), project("k_proj", Hkv), project("v_proj", Hkv)
    if hasattr(attn, "q_norm"):  # QK-LayerNorm: each head's q and k over head_dim, then RoPE
        ln = torch.nn.functional.layer_norm
        q = ln(q, (D,), w["q_norm.weight"], w["q_norm.bias"], attn.q_norm.eps)
        k = ln(k, (D,), w["k_norm.weight"], w["k_norm.bias"], attn.k_norm.eps)
    if pos == "rope":
        q, k = rope_reference(q), rope_reference(k)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    heads = []
    for h in range(H):
        g = h // (H // Hkv)
        s = q[:, h] @ k[:, g].transpose(-1, -2) / math.sqrt(D)  # (B, T, T)
        if pos == "alibi":
            s = s + torch.tensor([[-slopes[h] * (i - j) for j in range(T)] for i in range(T)])
        s = s.masked_fill(future, float("-inf"))
        heads.append(torch.softmax(s, dim=-1) @ v[:, g])  # (B, T, D)
    y = torch.cat(heads, dim=-1)  # (B, T, H*D)
    return y @ w["out_proj.weight"].T + w["out_proj.bias"]


@pytest.mark.parametrize("attention", ["plain", "qk_norm"])
@pytest.mark.parametrize("pos", ["none", "rope", "alibi"])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_attention_matches_reference(kv_heads, pos, attention):
    torch.manual_seed(0)
    cfg = tiny(n_heads=4, n_kv_heads=kv_heads, pos_encoding=pos, attention=attention)
    attn = randomize_(ATTENTIONS[attention](cfg), std=0.3).eval()
    assert isinstance(attn, CausalSelfAttention)  # every value subclasses the documented base
    positions = POSITIONS[pos](cfg)
    x = torch.randn(2, 6, cfg.d_model)
    with torch.no_grad():
        ours = run(attn, x, positions.rotary(6, x.device), positions.attn_bias(6, x.device))
        ref = reference_attention(attn, x, pos, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8])
    assert_close(ours, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("members", [1, 3])
@pytest.mark.parametrize(
    "case", [{}, {"bias": False}, {"n_kv_heads": 2}, {"n_kv_heads": 1, "bias": False}]
)
def test_one_qkv_matmul_is_the_three_projections(members, case):
    """``project``'s one matmul over the three weights side by side gives each projection's
    output and each weight's gradient (and the input's), as the three ``Linear`` calls do, to
    float rounding (a wider matmul is blocked differently: ~1e-6 relative)."""
    torch.manual_seed(0)
    attn = randomize_(CausalSelfAttention(tiny(n_heads=4, **case), members), std=0.3)
    x = torch.randn(members, 2, 6, 16)
    results = []
    for how in (attn.project, lambda x: (attn.q_proj(x), attn.k_proj(x), attn.v_proj(x))):
        attn.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        outs = how(xi)
        sum((o * (i + 1) * o.detach().sign()).sum() for i, o in enumerate(outs)).backward()
        results.append((outs, xi.grad, {n: p.grad for n, p in attn.named_parameters()}))
    (fused, gx, grads), (separate, ref_gx, ref_grads) = results
    tol = {"rtol": 1e-5, "atol": 1e-5}
    for a, b in zip(fused, separate, strict=True):
        assert_close(a, b, **tol)
    assert_close(gx, ref_gx, **tol)
    for name, g in ref_grads.items():
        if g is not None:
            assert_close(grads[name], g, **tol, msg=name)


def test_projections_that_are_other_modules_are_called_as_they_are():
    """A variant that replaces a projection (a plugin's attention) gets that module's output."""
    torch.manual_seed(0)
    attn = CausalSelfAttention(tiny(n_heads=4), 1)
    attn.k_proj = nn.Sequential(attn.k_proj, nn.Tanh())
    x = torch.randn(1, 2, 6, 16)
    q, k, v = attn.project(x)
    assert_close(k, torch.tanh(attn.k_proj[0](x)))
    assert_close(q, attn.q_proj(x))
    assert_close(v, attn.v_proj(x))


# --- 7. causality --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [dict(pos_encoding=p) for p in POSITIONS]
    + [dict(pos_encoding="rope", norm_placement="post", norm="rmsnorm", activation="swiglu")]
    + [dict(arch="lstm")],
    ids=lambda o: "-".join(o.values()),
)
def test_future_tokens_never_change_past_logits(overrides):
    torch.manual_seed(0)
    model = build_model(tiny(init_std=0.2, **overrides), VOCAB).eval()
    idx = torch.randint(0, VOCAB, (2, 8))
    with torch.no_grad():
        before = model(idx)
        for t in (0, 3, 7):
            changed = idx.clone()
            changed[:, t] = (idx[:, t] + 1) % VOCAB
            after = model(changed)
            assert_close(after[:, :t], before[:, :t], rtol=0, atol=1e-6)
            assert (after[:, t] - before[:, t]).abs().max() > 1e-4


# --- 8. GLU parameter matching -------------------------------------------------------------------


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("glu", ["swiglu", "geglu"])
def test_glu_matches_plain_ffn_parameters(glu):
    plain = count(FFNS["relu"](tiny(d_model=64, d_ff=256, activation="relu")))
    gated = GatedFeedForward(tiny(d_model=64, d_ff=256, activation=glu))
    assert gated.w1.out_features == gated.w3.out_features == int(2 * 256 / 3)
    assert abs(count(gated) / plain - 1) < 0.02
    unmatched = GatedFeedForward(tiny(d_model=64, d_ff=256, activation=glu, glu_param_match=False))
    assert unmatched.w1.out_features == 256
    assert count(unmatched) / plain > 1.4


def test_gated_ffn_formula():
    torch.manual_seed(0)
    ffn = randomize_(GatedFeedForward(tiny(activation="swiglu")))
    x = torch.randn(3, 16)
    w = solo(ffn)

    def linear(x, name):
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    h1 = linear(x, "w1")
    expected = linear(h1 * torch.sigmoid(h1) * linear(x, "w3"), "w2")
    assert_close(run(ffn, x), expected)


# --- 9. grouped-query and multi-query attention --------------------------------------------------


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_gqa_shrinks_kv_projections(kv_heads):
    attn = CausalSelfAttention(tiny(n_heads=4, n_kv_heads=kv_heads))
    head_dim = 16 // 4
    w = solo(attn)
    assert w["q_proj.weight"].shape == (16, 16)
    assert w["k_proj.weight"].shape == w["v_proj.weight"].shape == (kv_heads * head_dim, 16)
    assert attn(torch.randn(1, 2, 5, 16)).shape == (1, 2, 5, 16)


def test_mqa_equals_mha_with_copied_kv_heads():
    torch.manual_seed(0)
    mqa = randomize_(CausalSelfAttention(tiny(n_heads=4, n_kv_heads=1)), std=0.3).eval()
    mha = CausalSelfAttention(tiny(n_heads=4)).eval()
    w = solo(mqa)
    for name in ("k_proj", "v_proj"):  # the one K/V head, copied to each of the four
        w[f"{name}.weight"] = w[f"{name}.weight"].repeat(4, 1)
        w[f"{name}.bias"] = w[f"{name}.bias"].repeat(4)
    load_member_state_dict(mha, 0, w)
    with torch.no_grad():
        x = torch.randn(1, 2, 6, 16)
        assert_close(mqa(x), mha(x))


# --- 10. parameter counts and FLOPs --------------------------------------------------------------


def test_param_counts_by_hand():
    d, L, ff, V, T = 8, 2, 16, 10, 12
    cfg = tiny(d_model=d, n_layers=L, n_heads=2, d_ff=ff, max_seq_len=T, activation="relu")
    per_block = 4 * (d * d + d) + (d * ff + ff) + (ff * d + d) + 2 * (2 * d)
    non_embedding = L * per_block + 2 * d  # + final LayerNorm
    tied = build_model(cfg, V).param_counts()
    assert tied == {
        "total": non_embedding + V * d + T * d,
        "embedding": V * d + T * d,
        "non_embedding": non_embedding,
    }
    untied = build_model(cfg.model_copy(update={"tie_embeddings": False}), V).param_counts()
    assert untied["total"] == tied["total"] + V * d
    assert untied["non_embedding"] == non_embedding
    model = build_model(cfg, V)
    assert model.flops_per_token(T) == 6 * non_embedding + 6 * d * V + 12 * L * d * T


def test_lstm_param_counts_and_flops():
    d, L, V = 8, 2, 10
    lstm = build_model(tiny(arch="lstm", d_model=d, n_layers=L), V)
    assert isinstance(lstm, LSTMLM)
    non_embedding = L * 4 * (2 * d * d + 2 * d)  # 4 gates: W_ih, W_hh, b_ih, b_hh
    assert lstm.param_counts() == {
        "total": non_embedding + V * d,
        "embedding": V * d,
        "non_embedding": non_embedding,
    }
    assert lstm.flops_per_token(100) == 6 * non_embedding + 6 * d * V


def test_parameter_names_give_the_layer():
    layer = re.compile(r"(?:^|\.)blocks\.(\d+)\.|_l(\d+)$")
    for arch in ("transformer", "lstm"):
        model = build_model(tiny(arch=arch, n_layers=3), VOCAB)
        layers = set()
        for name, _ in model.named_parameters():
            m = layer.search(name)
            if m:
                layers.add(int(m.group(1) or m.group(2)))
            else:
                assert name.split(".")[0] in {"tok_emb", "pos", "final_norm", "head"}, name
        assert layers == {0, 1, 2}


# --- 11. sequence length -------------------------------------------------------------------------


@pytest.mark.parametrize("pos", ["sinusoidal", "rope", "alibi", "none"])
def test_unbounded_positions_run_at_four_times_max_seq_len(pos):
    model = build_model(tiny(pos_encoding=pos, max_seq_len=8), VOCAB).eval()
    assert model.max_len is None
    with torch.no_grad():
        assert model(torch.randint(0, VOCAB, (1, 32))).shape == (1, 32, VOCAB)


def test_learned_positions_refuse_longer_sequences():
    model = build_model(tiny(pos_encoding="learned", max_seq_len=8), VOCAB)
    assert model.max_len == 8
    assert model(torch.randint(0, VOCAB, (1, 8))).shape == (1, 8, VOCAB)
    with pytest.raises(ValueError, match="sequence length 9 exceeds max_seq_len 8"):
        model(torch.randint(0, VOCAB, (1, 9)))


# --- 12. initialisation, determinism, dropout ----------------------------------------------------


@pytest.mark.parametrize("arch", ["transformer", "lstm"])
def test_same_seed_same_weights(arch):
    def weights(seed: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(seed)
        return build_model(tiny(arch=arch), VOCAB).state_dict()

    a, b, c = weights(0), weights(0), weights(1)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["tok_emb.weight"], c["tok_emb.weight"])


def test_init_std_and_scaled_residual_projections():
    torch.manual_seed(0)
    cfg = tiny(d_model=64, n_heads=4, n_layers=8, d_ff=256, init_std=0.02)
    model = build_model(cfg, 100)
    std = cfg.init_std
    assert model.head is None  # tied: the head is the embedding table, transposed
    assert model.tok_emb.weight.std().item() == pytest.approx(std, rel=0.1)
    assert model.blocks[0].attn.q_proj.weight.std().item() == pytest.approx(std, rel=0.1)
    scaled = std / math.sqrt(2 * cfg.n_layers)
    assert model.blocks[3].attn.out_proj.weight.std().item() == pytest.approx(scaled, rel=0.1)
    assert model.blocks[3].ffn.w2.weight.std().item() == pytest.approx(scaled, rel=0.1)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert not p.any(), name


def test_vaswani_init_xavier_linears_and_unit_scale_embeddings():
    torch.manual_seed(0)
    cfg = tiny(d_model=64, n_heads=4, n_layers=2, d_ff=256, init="vaswani", pos_encoding="none")
    model = build_model(cfg, 100)
    w = model.blocks[1].ffn.w2.weight  # (64, 256): Xavier-uniform bound sqrt(6 / (256 + 64))
    bound = math.sqrt(6 / (256 + 64))
    assert w.abs().max().item() <= bound
    assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)  # uniform std
    assert model.tok_emb.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)
    # tokens enter the residual stream multiplied by sqrt(d_model): unit scale per coordinate
    idx = torch.randint(0, 100, (4, 8))
    captured = {}
    model.blocks[0].register_forward_pre_hook(lambda m, args: captured.update(x=args[0]))
    model(idx)
    assert_close(captured["x"], model.tok_emb(idx[None]) * 8.0)
    assert captured["x"].std().item() == pytest.approx(1.0, rel=0.15)


def test_sinusoidal_positions_do_not_swamp_gpt2_initialised_tokens():
    """Vaswani et al. scale embeddings by sqrt(d_model) with sinusoids; without it a unit-amplitude
    sinusoid next to std-0.02 tokens left training stuck at the unigram loss."""
    torch.manual_seed(0)
    d = 128
    cfg = tiny(d_model=d, n_heads=4, n_layers=1, pos_encoding="sinusoidal", init="gpt2")
    model = build_model(cfg, VOCAB)
    idx = torch.randint(0, VOCAB, (4, 16))
    captured = {}
    model.blocks[0].register_forward_pre_hook(lambda m, args: captured.update(x=args[0]))
    model(idx)
    tokens = model.tok_emb(idx[None]) * math.sqrt(d)  # 0.02 * sqrt(128) = 0.23 per coordinate
    assert_close(captured["x"], tokens + sinusoidal_table(16, d))
    assert tokens.std().item() == pytest.approx(0.02 * math.sqrt(d), rel=0.1)
    # learned positions keep gpt2's unscaled embeddings (nanoGPT's setting)
    cfg = tiny(d_model=d, n_heads=4, max_seq_len=16, pos_encoding="learned", init="gpt2")
    model = build_model(cfg, VOCAB)
    model.blocks[0].register_forward_pre_hook(lambda m, args: captured.update(x=args[0]))
    model(idx)
    pos = model.pos.table(torch.arange(16)[None])  # (1, T, d)
    assert_close(captured["x"], model.tok_emb(idx[None]) + pos)


@pytest.mark.parametrize("arch", ["transformer", "lstm"])
def test_dropout_only_in_training(arch):
    torch.manual_seed(0)
    model = build_model(tiny(arch=arch, dropout=0.5), VOCAB)
    idx = torch.randint(0, VOCAB, (2, 8))
    with torch.no_grad():
        assert not torch.equal(model.train()(idx), model(idx))
        model.eval()
        assert torch.equal(model(idx), model(idx))


def test_forward_of_every_axis():
    for norm in NORMS:
        for act in FFNS:
            for attention in ATTENTIONS:
                cfg = tiny(norm=norm, activation=act, attention=attention, bias=False)
                model = build_model(cfg, VOCAB)
                assert model(torch.randint(0, VOCAB, (2, 5))).shape == (2, 5, VOCAB)
                assert not any(n.endswith("bias") for n, _ in model.named_parameters())


@pytest.mark.parametrize("arch", ["transformer", "lstm"])
def test_a_solo_model_is_a_plain_language_model_and_a_stack_keeps_its_member_dimension(arch):
    """One member maps ``(B, T)`` ids to ``(B, T, vocab)`` (nanoGPT's GPT does), and its
    ``(1, B, T)`` form to ``(1, B, T, vocab)``: the same logits; k > 1 keeps the dimension."""
    torch.manual_seed(0)
    model = build_model(tiny(arch=arch), VOCAB).eval()
    idx = torch.randint(0, VOCAB, (2, 5))
    with torch.no_grad():
        plain, member = model(idx), model(idx.unsqueeze(0))
    assert plain.shape == (2, 5, VOCAB) and member.shape == (1, 2, 5, VOCAB)
    assert torch.equal(plain, member[0])
    if arch == "transformer":
        stack = build_model(tiny(), VOCAB, members=3)
        assert stack(idx).shape == stack(idx.expand(3, 2, 5)).shape == (3, 2, 5, VOCAB)


def test_the_plain_attention_value_is_the_model_every_earlier_run_had():
    """``attention: plain`` builds the same attention as before the axis existed and is left
    out of the run id, so earlier runs keep their ids; ``qk_norm`` is a new run."""
    from ablate.config import build_config

    plain = build_config({"model.attention": "plain"})
    assert plain.run_id() == build_config({}).run_id()
    assert build_config({"model.attention": "qk_norm"}).run_id() != plain.run_id()
    block = build_model(tiny(), VOCAB).blocks[0]
    assert type(block.attn) is CausalSelfAttention
