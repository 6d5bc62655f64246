"""The member dimension (``ablate.model.members``): a model of k members computes each member as
a model of one member with that member's weights does (forward and gradients, for every axis
value), saves a member in torch's own layouts, and keeps its members apart (dropout included)."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from ablate.config import ModelConfig
from ablate.model import (
    build_model,
    load_member_state_dict,
    member_state_dict,
    stack_models,
)
from ablate.model.members import Embedding, Linear

VOCAB = 13
# Every built-in axis value. A member computes its own model's operations on its slice of each
# tensor; some CPU kernels round an element by where it lies in the tensor (SiLU's backward
# does), so gradients are held to float rounding (most cases are bit-exact).
CASES = [
    {},
    {"norm_placement": "post"},
    {"norm": "rmsnorm"},
    *({"pos_encoding": p} for p in ("sinusoidal", "learned", "rope", "alibi", "none")),
    *({"activation": a} for a in ("relu", "gelu", "swiglu", "geglu")),
    {"n_heads": 4, "n_kv_heads": 2},  # GQA
    {"n_kv_heads": 1},  # MQA
    {"attention": "qk_norm"},
    {"tie_embeddings": False},
    {"bias": False},
    {"init": "vaswani"},
    {"dropout": 0.2},  # evaluated in eval mode below; dropout's masks: their own test
]


def tiny(**overrides) -> ModelConfig:
    base = dict(d_model=16, n_layers=2, n_heads=4, d_ff=32, max_seq_len=8)
    return ModelConfig(**{**base, **overrides})


def members_of(cfg: ModelConfig, k: int) -> list[torch.nn.Module]:
    out = []
    for seed in range(k):
        torch.manual_seed(seed)
        out.append(build_model(cfg, VOCAB))
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_each_member_computes_what_its_own_model_computes(case):
    models = members_of(tiny(**case), 3)
    stack = stack_models(models).eval()
    x = torch.randint(0, VOCAB, (3, 2, 8))
    logits = stack(x)  # (k, B, T, vocab)
    logits.square().mean((1, 2, 3)).sum().backward()
    grads = {n: p.grad for n, p in stack.named_parameters()}
    for i, model in enumerate(models):
        model.eval()
        own = model(x[i])  # (B, T, vocab): one member's model
        own.square().mean().backward()
        assert_close(logits[i], own, rtol=1e-6, atol=1e-7)
        for name, p in model.named_parameters():
            assert_close(grads[name][i], p.grad[0], rtol=1e-5, atol=1e-7, msg=name)


def test_a_batch_every_member_reads_is_each_members_batch():
    stack = stack_models(members_of(tiny(), 3)).eval()
    x = torch.randint(0, VOCAB, (2, 8))
    assert torch.equal(stack(x), stack(x.expand(3, 2, 8)))


def test_the_layers_are_torchs_in_the_saved_layout():
    """A member's saved tensors are ``F.linear``'s and ``F.embedding``'s arguments."""
    torch.manual_seed(0)
    linear, table = Linear(5, 7, bias=True, members=3), Embedding(11, 4, members=3)
    x, idx = torch.randn(3, 2, 6, 5), torch.randint(0, 11, (3, 2, 6))
    for i in range(3):
        w, t = member_state_dict(linear, i), member_state_dict(table, i)
        assert w["weight"].shape == (7, 5)  # nn.Linear's (out, in)
        assert_close(linear(x)[i], F.linear(x[i], w["weight"], w["bias"]))
        assert torch.equal(table(idx)[i], F.embedding(idx[i], t["weight"]))


@pytest.mark.parametrize("bias", [True, False])
def test_a_linear_layer_of_one_member_is_nn_linear_forward_and_backward(bias):
    """One member takes its own path (a plain ``addmm`` on views of the weights): torch's
    ``nn.Linear`` with the same weights, outputs and gradients, and the stacked path's."""
    torch.manual_seed(0)
    ours, ref = Linear(5, 7, bias=bias, members=1), torch.nn.Linear(5, 7, bias=bias)
    with torch.no_grad():
        for name, t in member_state_dict(ours, 0).items():
            getattr(ref, name).copy_(t)
    x = torch.randn(1, 2, 6, 5)
    y = ours(x)
    assert y.shape == (1, 2, 6, 7)
    assert_close(y[0], ref(x[0]), rtol=1e-6, atol=1e-7)
    g = torch.randn_like(y)
    y.backward(g)
    ref(x[0]).backward(g[0])
    assert_close(ours.weight.grad[0], ref.weight.grad.T, rtol=1e-6, atol=1e-7)
    if bias:
        assert_close(ours.bias.grad[0], ref.bias.grad, rtol=1e-6, atol=1e-7)
    stacked = (
        torch.baddbmm(ours.bias.unsqueeze(1), x.view(1, -1, 5), ours.weight)
        if bias
        else (torch.bmm(x.view(1, -1, 5), ours.weight))
    )  # the members' path at k = 1
    assert_close(y.view(1, -1, 7), stacked, rtol=1e-6, atol=1e-7)


def test_members_move_between_models_and_old_tied_checkpoints_load():
    models = members_of(tiny(), 2)
    stack = stack_models(models)
    back = build_model(tiny(), VOCAB)
    load_member_state_dict(back, 0, member_state_dict(stack, 1))
    x = torch.randint(0, VOCAB, (2, 8))
    assert torch.equal(back(x)[0], models[1](x)[0])
    old = dict(member_state_dict(models[0], 0))  # code before the member dimension saved the
    old["head.weight"] = old["tok_emb.weight"]  # tied head under its own name too
    load_member_state_dict(back, 0, old)
    assert torch.equal(back(x), models[0](x))
    del old["blocks.0.ffn.w1.bias"]
    with pytest.raises(RuntimeError, match="missing .*blocks.0.ffn.w1.bias"):
        load_member_state_dict(back, 0, old)


def test_stacking_draws_nothing_from_torchs_generator():
    models = members_of(tiny(), 3)
    before = torch.get_rng_state()
    stack_models(models)
    assert torch.equal(torch.get_rng_state(), before)


def test_each_member_draws_its_own_dropout_masks_at_the_rate():
    """Dropout is drawn once for the whole stack: each member's masks have its solo run's
    distribution (keep rate 1 - p) and are independent of the other members' (identical
    members on identical batches agree on a unit only as often as independent masks do)."""
    p, k = 0.3, 4
    cfg = tiny(dropout=p, pos_encoding="none")
    torch.manual_seed(0)
    stack = stack_models([build_model(cfg, VOCAB)] * k).train()  # k identical members
    seen = []
    stack.drop.register_forward_hook(lambda m, args, out: seen.append(out != 0))
    x = torch.randint(0, VOCAB, (2, 8)).expand(k, 2, 8)
    stack(x)
    (kept,) = seen  # (k, B, T, d): the embedding's dropout, one mask per member
    n = kept[0].numel()
    tol = 4 * (p * (1 - p) / n) ** 0.5  # 4 standard deviations of a binomial rate
    for i in range(k):
        assert kept[i].float().mean().item() == pytest.approx(1 - p, abs=tol)
        for j in range(i):
            agree = (kept[i] == kept[j]).float().mean().item()
            assert agree == pytest.approx(p * p + (1 - p) ** 2, abs=2 * tol)


def test_attention_dropout_inside_sdpa_is_each_members_own():
    """Attention dropout runs inside SDPA over the folded ``(k*B, H, T, D)`` heads: identical
    members on identical inputs get different outputs, and each is unbiased (its mean over
    draws is the no-dropout output)."""
    from ablate.model.transformer import CausalSelfAttention

    torch.manual_seed(0)
    attn = CausalSelfAttention(tiny(dropout=0.5), members=2)
    attn.resid_dropout.p = 0.0  # only the attention weights' dropout
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(p[:1].expand_as(p))  # member 1 = member 0
        x = torch.randn(1, 1, 8, 16).expand(2, 2000, 8, 16)  # one input, 2000 draws a member
        plain = attn.eval()(x[:, :1])
        draws = attn.train()(x)
    assert torch.equal(plain[0], plain[1])
    assert not torch.equal(draws[0, 0], draws[1, 0])
    assert_close(draws.mean(1, keepdim=True), plain, atol=0.05, rtol=0)


def test_a_module_written_for_one_run_works_alone_and_refuses_members():
    import torch.nn as nn

    from ablate import registry
    from ablate.model.members import build, member_tensors

    class Scale(nn.Module):  # a plugin's norm written for (B, T, d), not member-aware
        def __init__(self, cfg):
            super().__init__()
            self.g = nn.Parameter(torch.full((cfg.d_model,), 2.0))

        def forward(self, x):
            assert x.dim() == 3  # (B, T, d): it never sees the member dimension
            return x * self.g

    registry.table("norm")["scale_test"] = Scale
    try:
        cfg = tiny(norm="scale_test")
        model = build_model(cfg, VOCAB)
        assert model(torch.randint(0, VOCAB, (2, 8))).shape == (2, 8, VOCAB)
        assert member_state_dict(model, 0)["blocks.0.attn_norm.g"].shape == (16,)
        assert not member_tensors(model)["blocks.0.attn_norm.g"][1]  # no member dimension
        with pytest.raises(ValueError, match="model.norm 'scale_test' .* not member-aware"):
            build("norm", cfg, 2)
    finally:
        del registry.table("norm")["scale_test"]
