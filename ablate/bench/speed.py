"""Model speed: forward + backward tokens/s and step memory of our transformer against
x-transformers (``TransformerWrapper(Decoder)`` in the same shape, ``attn_flash=True``) and
``nn.TransformerEncoder`` (pre-norm, causal mask, tied head): parameter counts match exactly.

Throughput: ``zero_grad; CE(model(x), y).backward()`` on one fixed batch (no optimizer), the
models in a rotating order per repetition; the figure is the best step (``timeit``'s rule:
noise only ever adds time). Step memory, CPU: the peak bytes of tensor storages created during
the step and alive together (a ``TorchDispatchMode``; parameters and allocator caching not
counted); GPU: the rise of ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn as nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ablate.bench.loops import NANOGPT_CPU
from ablate.bench.machine import has_gpu, sync, timed
from ablate.config import build_config
from ablate.model import build_model
from ablate.training.lit import lm_loss

VOCAB = 65  # tiny shakespeare's characters


@dataclass(frozen=True)
class Size:
    """One model size of the comparison, and its batch."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    seq_len: int
    batch_size: int

    @property
    def label(self) -> str:
        s = self
        return f"{s.n_layers}L/{s.d_model}d/{s.n_heads}h, ctx {s.seq_len}, batch {s.batch_size}"

    @property
    def tokens(self) -> int:
        return self.seq_len * self.batch_size


def build_ours(size: Size) -> nn.Module:
    """``build_model`` in nanoGPT's shape (Pre-LN, GELU, learned positions, tied, no biases)."""
    keys = {"n_layers": size.n_layers, "d_model": size.d_model, "n_heads": size.n_heads}
    shape = {f"model.{k}": v for k, v in keys.items()} | {"model.max_seq_len": size.seq_len}
    shape["data.seq_len"] = size.seq_len
    return build_model(build_config({**NANOGPT_CPU, **shape}).model, VOCAB)


def build_x_transformers(size: Size) -> nn.Module:
    from x_transformers import Decoder, TransformerWrapper

    return TransformerWrapper(
        num_tokens=VOCAB,
        max_seq_len=size.seq_len,
        tie_embedding=True,
        emb_dropout=0.0,
        attn_layers=Decoder(
            dim=size.d_model,
            depth=size.n_layers,
            heads=size.n_heads,
            attn_dim_head=size.d_model // size.n_heads,
            attn_flash=True,
            ff_mult=4,
            ff_no_bias=True,
        ),
    )


class TorchEncoderLM(nn.Module):
    """Token + learned position embeddings -> ``nn.TransformerEncoder`` (causal) -> tied head."""

    def __init__(self, size: Size):
        super().__init__()
        d = size.d_model
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(size.seq_len, d)
        layer = nn.TransformerEncoderLayer(
            d,
            size.n_heads,
            dim_feedforward=4 * d,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
            bias=False,
        )
        self.encoder = nn.TransformerEncoder(
            layer, size.n_layers, norm=nn.LayerNorm(d, bias=False), enable_nested_tensor=False
        )
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.head.weight = self.tok.weight
        mask = nn.Transformer.generate_square_subsequent_mask(size.seq_len)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        x = self.encoder(x, mask=self.mask[:T, :T], is_causal=True)
        return self.head(x)


MODELS: dict[str, Callable[[Size], nn.Module]] = {
    "ours": build_ours,
    "x-transformers": build_x_transformers,
    "torch": TorchEncoderLM,
}


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights once


class PeakTensorBytes(TorchDispatchMode):
    """Peak bytes of tensor storages created inside the mode and alive at the same time."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = 0
        self.peak = 0

    def _drop_freed(self) -> None:
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.current -= self.live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._drop_freed()
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                ref = StorageWeakRef(storage)
                if ref.cdata not in self.live:
                    self.live[ref.cdata] = (ref, storage.nbytes())
                    self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        return out


def step_memory(step: Callable[[], None]) -> int:
    """Peak bytes allocated by ``step`` beyond what existed before it."""
    if not has_gpu():
        with PeakTensorBytes() as tracker:
            step()
        return tracker.peak
    sync()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    sync()
    return torch.cuda.max_memory_allocated() - base


def _prepare(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, compile_: bool, block_s: float
) -> tuple[dict[str, Any], Callable[[], None]]:
    """A model's row (parameters, step memory, steps per timed block) and its step, warmed up."""
    row: dict[str, Any] = {"params": param_count(model), "compiled": compile_}
    model = torch.compile(model) if compile_ else model  # compiles lazily, at the first step
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if has_gpu() else nullcontext()

    def step() -> None:
        model.zero_grad(set_to_none=True)
        with amp:
            logits = model(x)
        lm_loss(logits, y).backward()

    if compile_:
        step()  # compile outside the memory measurement
    est = timed(lambda: row.update(peak_bytes=step_memory(step)), 1)[0]  # also a warm-up
    # plain warm-up steps (the tracked one is slower, and the first ever is slower still); a
    # step that already takes 10 s is its own warm-up
    est = min([est, *(timed(step, 1)[0] for _ in range(0 if est >= 10.0 else 3))])
    row["steps_per_block"] = max(1, round(block_s / max(est, 1e-6)))
    return row, step


def measure_speed(
    size: Size, *, reps: int, block_s: float, compile_models=False, log=print
) -> dict:
    """Tokens/s (best step), step memory and parameters of every model at ``size``."""
    dev = torch.device("cuda" if has_gpu() else "cpu")
    torch.manual_seed(0)
    x, y = (torch.randint(0, VOCAB, (size.batch_size, size.seq_len), device=dev) for _ in "xy")
    rows: dict[str, dict[str, Any]] = {}
    steps: dict[str, Callable[[], None]] = {}
    for name, build in MODELS.items():
        torch.manual_seed(0)
        try:
            model = build(size).to(dev).train()
        except ImportError as err:  # x-transformers is a dev dependency
            log(f"  {size.name} {name:>14}: skipped ({err})")
            continue
        rows[name], steps[name] = _prepare(model, x, y, compile_models, block_s)
    names, times = list(rows), {name: [] for name in rows}
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            # each CPU step on its own; on a GPU the block's mean (no sync per step)
            times[name] += timed(steps[name], rows[name]["steps_per_block"], each=not has_gpu())
    for name, row in rows.items():
        t = times[name]
        row.update(timed_steps=len(t), step_s=min(t), tokens_per_s=size.tokens / min(t))
        row["tokens_per_s_median"] = size.tokens / statistics.median(t)
        log(f"  {size.name} {name:>14}: {row['tokens_per_s']:,.0f} tokens/s (best of {len(t)})")
    ours = rows["ours"]
    others = {n: r for n, r in rows.items() if n != "ours"}
    return {
        "size": {**asdict(size), "label": size.label, "tokens": size.tokens},
        "models": rows,
        "speed_ratio": {n: ours["tokens_per_s"] / r["tokens_per_s"] for n, r in others.items()},
        "memory_ratio": {n: ours["peak_bytes"] / r["peak_bytes"] for n, r in others.items()},
    }
