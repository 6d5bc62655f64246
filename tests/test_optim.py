"""The AdamW that ablate builds: fused wherever torch has the kernel, same updates as the
reference for-loop implementation."""

import pytest
import torch
from torch.testing import assert_close

from ablate.config import build_config
from ablate.training.lit import fused_adamw_supported, make_adamw, use_fused_adamw


def _cfg(**kw):
    return build_config({"model.d_model": 32, "model.n_layers": 1, "model.n_heads": 2, **kw})


def test_fused_is_the_default_where_torch_has_it_and_config_wins():
    cpu = torch.device("cpu")
    assert use_fused_adamw(_cfg(), cpu) == fused_adamw_supported("cpu")
    assert use_fused_adamw(_cfg(**{"optim.fused": False}), cpu) is False
    assert use_fused_adamw(_cfg(**{"optim.fused": True}), cpu) is True
    # Lightning cannot clip a fused optimizer's gradients behind 16-mixed's GradScaler
    assert use_fused_adamw(_cfg(**{"train.precision": "16-mixed"}), cpu) is False


@pytest.mark.skipif(not fused_adamw_supported("cpu"), reason="no fused AdamW on this CPU")
def test_fused_adamw_matches_the_for_loop_reference():
    from ablate.model import build_model
    from ablate.training.lit import decay_groups

    cfg = _cfg()
    torch.manual_seed(0)
    a = build_model(cfg.model, 50)
    b = build_model(cfg.model, 50)
    b.load_state_dict(a.state_dict())
    init = a.tok_emb.weight.detach().clone()
    opt_a = make_adamw(a, cfg)
    assert opt_a.defaults["fused"]
    o = cfg.optim
    opt_b = torch.optim.AdamW(
        decay_groups(b, o.weight_decay),
        lr=cfg.lr,
        betas=(o.beta1, o.beta2),
        eps=o.eps,
        foreach=False,
    )
    x = torch.randint(0, 50, (4, 16))
    for _ in range(5):
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            model(x).logsumexp(-1).mean().backward()
            opt.step()
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    assert not torch.equal(a.tok_emb.weight, init)  # the updates did move the weights
