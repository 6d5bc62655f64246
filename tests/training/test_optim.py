"""The one optimizer path (``MemberAdamW``): per member it equals torch's ``clip_grad_norm_``
followed by ``torch.optim.AdamW`` under a ``LambdaLR`` of the run's schedule; a masked member
keeps every tensor; the solo run (a stack of one) uses it too."""

import copy

import pytest
import torch
from torch.testing import assert_close

from ablate.config import build_config
from ablate.model import build_model
from ablate.model.members import Linear
from ablate.training.adamw import (
    MemberAdamW,
    decay_groups,
    fused_adamw_supported,
    lr_factor,
    use_fused,
)


def _cfg(**kw):
    base = {"model.d_model": 32, "model.n_layers": 1, "model.n_heads": 2}
    return build_config({**base, "train.max_steps": 6, "optim.warmup_ratio": 0.34, **kw})


def _reference(model, cfg):
    """torch's own: AdamW over decay_groups, the schedule as LambdaLR, clip_grad_norm_."""
    o = cfg.optim
    opt = torch.optim.AdamW(
        decay_groups(model, o.weight_decay), lr=cfg.lr, betas=(o.beta1, o.beta2), eps=o.eps
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(cfg, s))

    def step():
        if o.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), o.grad_clip)
        opt.step()
        sched.step()

    return opt, step


@pytest.mark.parametrize("fused", [False, True])
def test_a_stack_equals_torch_adamw_and_clipping_per_member_and_a_masked_member_stays(fused):
    if fused and not fused_adamw_supported("cpu"):
        pytest.skip("no fused AdamW on this CPU")
    members = [
        {"optim.lr": 3e-3, "optim.weight_decay": 0.1, "optim.grad_clip": 0.05},
        {"optim.lr": 1e-2, "optim.weight_decay": 0.0, "optim.beta1": 0.8, "optim.grad_clip": None},
        {"optim.lr": 5e-4, "optim.weight_decay": 0.3, "optim.beta2": 0.95, "optim.grad_clip": 1.0},
    ]
    cfgs = [_cfg(**m, **{"optim.fused": fused}) for m in members]
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(build_model(cfgs[0].model, 50))
    refs = [copy.deepcopy(m) for m in models]
    names = {id(p): n for n, p in models[0].named_parameters()}
    decay, other = (g["params"] for g in decay_groups(models[0], 1.0))
    order = [names[id(p)] for p in [*decay, *other]]
    stacked = [
        torch.stack([dict(m.named_parameters())[n].detach() for m in models]).requires_grad_()
        for n in order
    ]
    opt = MemberAdamW(stacked, cfgs, len(decay))
    ref_steps = [_reference(r, c) for r, c in zip(refs, cfgs, strict=True)]
    gen = torch.Generator().manual_seed(0)
    frozen = None
    for step in range(6):
        grads = [[torch.randn(p.shape[1:], generator=gen) for p in stacked] for _ in models]
        if step >= 3:  # member 2 diverged: non-finite gradients, masked from now on
            grads[2] = [torch.full_like(g, float("nan")) for g in grads[2]]
            opt.active[2] = False
        if step == 3:
            frozen = [t.clone() for t in (opt.flat[2], opt.exp_avg[2], opt.exp_avg_sq[2])]
        for p, *gs in zip(stacked, *grads, strict=True):
            p.grad = torch.stack(gs)
        opt.step()
        for i, (ref, (_, ref_step)) in enumerate(zip(refs, ref_steps, strict=True)):
            if i == 2 and step >= 3:
                continue
            byname = dict(ref.named_parameters())
            for n, g in zip(order, grads[i], strict=True):
                byname[n].grad = g.clone()
            ref_step()
    assert frozen is not None
    now = (opt.flat[2], opt.exp_avg[2], opt.exp_avg_sq[2])
    for before, after in zip(frozen, now, strict=True):
        assert torch.equal(before, after)  # bit for bit, no NaN leaked in
    for i, (ref, (ref_opt, _)) in enumerate(zip(refs, ref_steps, strict=True)):
        byname = dict(ref.named_parameters())
        for j, n in enumerate(order):
            assert_close(stacked[j][i], byname[n], rtol=1e-5, atol=1e-6, msg=f"{i} {n}")
            ref_avg = ref_opt.state[byname[n]]["exp_avg"]
            assert_close(opt.member_state(i, {})["state"][j]["exp_avg"], ref_avg)
        assert not torch.equal(byname[order[0]], dict(models[i].named_parameters())[order[0]])


def _solo_layout(model, state: dict) -> dict:
    """torch's AdamW state over ``model`` (a model of one member) as over a solo model of
    torch's layers: the member dimension dropped, ``nn.Linear``'s ``(out, in)`` weights."""
    names = {id(p): n for n, p in model.named_parameters()}
    order = [names[id(p)] for g in decay_groups(model, 1.0) for p in g["params"]]
    out = copy.deepcopy(state)
    for j, name in enumerate(order):
        owner = model.get_submodule(name.rpartition(".")[0])
        for key in ("exp_avg", "exp_avg_sq"):
            t = out["state"][j][key][0]
            out["state"][j][key] = t.T if isinstance(owner, Linear) and t.dim() == 2 else t
    return out


def test_a_solo_model_is_a_stack_of_one_and_its_state_dict_is_torch_adamws():
    cfg = _cfg(**{"optim.grad_clip": 0.01})
    torch.manual_seed(0)
    model = build_model(cfg.model, 50)
    ref = copy.deepcopy(model)
    opt = MemberAdamW.for_model(model, [cfg])
    ref_opt, ref_step = _reference(ref, cfg)
    x = torch.randint(0, 50, (4, 16))
    for _ in range(4):
        for m, step in ((model, opt.step), (ref, ref_step)):
            for p in m.parameters():
                p.grad = None
            m(x).logsumexp(-1).mean().backward()
            step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    # its state is torch's AdamW's over the solo layout (a checkpoint of a run from before the
    # member dimension), and such a state loads into a fresh optimizer
    torch_state = _solo_layout(ref, ref_opt.state_dict())
    for j, s in opt.state_dict()["state"].items():
        assert_close(s["exp_avg"], torch_state["state"][j]["exp_avg"], rtol=1e-5, atol=1e-9)
    fresh = MemberAdamW.for_model(copy.deepcopy(model), [cfg])
    fresh.load_state_dict(torch_state)
    assert_close(fresh.exp_avg_sq, opt.exp_avg_sq, rtol=1e-5, atol=1e-9)
    assert fresh.at.item() == opt.at.item() == 4


def test_fused_is_the_default_where_torch_has_the_kernel_and_config_wins():
    cpu = torch.device("cpu")
    assert use_fused(_cfg(), cpu) == fused_adamw_supported("cpu")
    assert use_fused(_cfg(**{"optim.fused": False}), cpu) is False
    assert use_fused(_cfg(**{"optim.fused": True}), cpu) is True
