"""The probe's kernel facts (``ablate.bench.probe``): which SDPA kernel a step of the solo model
and of a stack runs (one forward + backward under ``torch.profiler``, with dropout, without, and
with ALiBi), the kernel a profile's pinned backend falls back to where it cannot run, and the
dtype the LSTM arm computes in under bf16-mixed autocast."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from ablate.accel import kernel_problem
from ablate.bench.probe_runs import CHARS, PROFILE_PRECISION, failed
from ablate.config import RunConfig, build_config

LSTM_SHAPE = {"model.d_model": 816, "model.n_layers": 2}  # architecture.yaml's gpu lstm arm
STACK = 4  # the attention table's stack


def with_kernel(flat: dict[str, Any]) -> dict[str, Any]:
    """``flat`` with ``train.attn_backend: auto`` where its pinned kernel cannot run it (e.g.
    flash at 32-true on CUDA, or with ALiBi): the probe measures, it does not refuse."""
    device = "cuda" if flat["train.accelerator"] == "gpu" else "cpu"
    backend = flat["train.attn_backend"]
    problem = kernel_problem(
        backend,
        device,
        precision=flat["train.precision"],
        attn_bias=flat["model.pos_encoding"] == "alibi",
        head_dim=flat["model.d_model"] // flat["model.n_heads"],
    )
    # the CPU flash kernel takes no dropout ("No available kernel" in torch 2.13), which the
    # plan-time rule does not know: the gpu profile's flash + dropout 0.2 cannot run on a CPU
    problem = problem or (device == "cpu" and backend == "flash" and flat["model.dropout"] > 0)
    return flat | {"train.attn_backend": "auto"} if problem else flat


# --- which SDPA kernel ran, and the LSTM's dtype ------------------------------------------------


def sdpa_names(prof: Any) -> tuple[dict[str, int], list[str]]:
    """From a finished ``torch.profiler.profile``: the aten SDPA backend ops and how often
    each ran, and the CUDA kernels whose names say attention (flash, fmha, cudnn, ...)."""
    from torch.autograd import DeviceType

    ops: Counter = Counter()
    kernels: set[str] = set()
    words = ("flash", "fmha", "attention", "attn", "cudnn", "sdpa", "mem_eff")
    for evt in prof.events():
        name = evt.name
        if evt.device_type == DeviceType.CUDA:
            if any(w in name.lower() for w in words):  # without "void " and template arguments
                kernels.add(re.split(r"[<(]", name.removeprefix("void "))[0][:80])
        elif name.startswith("aten::_scaled_dot_product"):  # the backend's own op
            ops[name.removeprefix("aten::")] += 1
    return dict(sorted(ops.items())), sorted(kernels)


def _models(cfg: RunConfig, n: int, vocab: int, dev: torch.device) -> list[torch.nn.Module]:
    from ablate.model import build_model

    models = []
    for seed in range(n):
        torch.manual_seed(seed)
        models.append(build_model(cfg.model, vocab).to(dev).train())
    return models


def attention_step(cfg: RunConfig, members: int, dev: torch.device) -> Callable[[], None]:
    """One training forward + backward of the solo model (``members=0``) or a stack, as
    ``train_run`` / ``train_group`` compute it (their autocast, pinned kernel, loss)."""
    from ablate.model import stack_models
    from ablate.training.lit import lm_loss
    from ablate.training.step import member_losses

    vocab, d = len(CHARS), cfg.data
    models = _models(cfg, max(members, 1), vocab, dev)
    stack = stack_models(models) if members else None
    shape = (members, d.batch_size, d.seq_len) if members else (d.batch_size, d.seq_len)
    x = torch.randint(vocab, shape, device=dev)
    y = torch.randint(vocab, shape, device=dev)
    bf16 = cfg.train.precision == "bf16-mixed"

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = member_losses(stack, x, y).sum() if stack else lm_loss(models[0](x), y)
        loss.backward()

    return step


def profile_attention(flat: dict[str, Any], members: int, cuda: bool) -> dict[str, Any]:
    """The SDPA ops and kernels of one profiled step (after one unprofiled warm-up step)."""
    from torch.profiler import ProfilerActivity, profile

    from ablate.training.trainer import attn_context, attn_kernel

    cfg = build_config(flat)
    dev = torch.device("cuda" if cuda else "cpu")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with attn_context(cfg, dev):
        step = attention_step(cfg, members, dev)
        step()
        with profile(activities=acts) as prof:
            step()
            if cuda:
                torch.cuda.synchronize()
    ops, kernels = sdpa_names(prof)
    pinned = attn_kernel(cfg, dev)
    if cfg.train.attn_backend == "auto":  # pinned with the math kernel as its fallback
        pinned = f"auto: {pinned}"
    return {"pinned": pinned, "ops": ops, "kernels": kernels if cuda else None}


ATTENTION_CASES = (
    ("learned, dropout 0.2 (the profile)", {}),
    ("learned, no dropout", {"model.dropout": 0.0}),
    ("ALiBi, dropout 0.2", {"model.pos_encoding": "alibi"}),
)


def attention_rows(flat: dict[str, Any], cuda: bool) -> list[dict[str, Any]]:
    """Which SDPA kernel ran, solo and in a stack of ``STACK``, per attention case."""
    rows = []
    for members in (0, STACK):
        for case, over in ATTENTION_CASES:
            row: dict[str, Any] = {"members": members, "case": case}
            try:
                row |= profile_attention(with_kernel(flat | over), members, cuda)
            except Exception as err:  # noqa: BLE001 - a failed case is shown, not fatal
                row["error"] = failed(err)
            rows.append(row)
    return rows


def lstm_dtype(flat: dict[str, Any], full: bool) -> dict[str, Any]:
    """The dtype the LSTM's ``nn.LSTM`` returns (and the logits') in one forward under
    bf16-mixed autocast: the architecture study's lstm arm at its gpu width (``full``), else
    at ``flat``'s."""
    from ablate.model import build_model

    shape = LSTM_SHAPE if full else {"model.d_model": flat["model.d_model"]}
    cfg = build_config(flat | shape | {"model.arch": "lstm", "train.precision": PROFILE_PRECISION})
    dev = torch.device("cuda" if flat["train.accelerator"] == "gpu" else "cpu")
    m = cfg.model
    out: dict[str, Any] = {"precision": PROFILE_PRECISION, "shape": [m.n_layers, m.d_model]}
    seen: list[torch.dtype] = []
    try:
        model = build_model(cfg.model, len(CHARS)).to(dev).train()
        lstms = [m for m in model.modules() if isinstance(m, torch.nn.LSTM)]
        for m in lstms:
            m.register_forward_hook(lambda _m, _i, o: seen.append(o[0].dtype))
        x = torch.randint(len(CHARS), (cfg.data.batch_size, cfg.data.seq_len), device=dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(x)
        out |= {"lstm": str(seen[0]).removeprefix("torch.") if seen else "no nn.LSTM found"}
        out["logits"] = str(logits.dtype).removeprefix("torch.")
    except Exception as err:  # noqa: BLE001 - e.g. a CPU without a bf16 LSTM kernel
        out["error"] = failed(err)
    return out
