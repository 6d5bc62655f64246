"""What one more member of a stacked group costs in device memory, measured.

``train.stack: auto`` stacks as many members as the device's free memory holds
(``ablate.stacking.auto_members``). What a member holds is measured here, not estimated: one
training step (``step.train_step``: forward, backward, ``MemberAdamW``'s update, its state
created) of a model of one member and of two, at the run's shape and precision on random
tokens, and the difference of the two steps' peak memory: weights, gradients, AdamW's moments
and the activations a step keeps, without what every group has once (the process, the CUDA
context, kernels' workspaces). Measured eager: a compiled step keeps no more.

Not part of the code fingerprint: it decides how many runs train together, not what they
compute.
"""

from __future__ import annotations

import gc
from typing import Protocol

import torch

from ablate.config import RunConfig
from ablate.model import build_model
from ablate.training.adamw import MemberAdamW
from ablate.training.step import train_step


class DeviceMemory(Protocol):
    """Peak memory of a device: ``reset`` starts a measurement, ``peak`` reads its bytes."""

    def reset(self) -> None: ...

    def peak(self) -> int: ...


class CudaMemory:
    """``torch.cuda``'s peak allocated bytes on ``device``."""

    def __init__(self, device: torch.device):
        self.device = device

    def reset(self) -> None:
        gc.collect()
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        torch.cuda.synchronize(self.device)
        return int(torch.cuda.max_memory_allocated(self.device))


def step_peak(
    cfg: RunConfig, vocab: int, members: int, device: torch.device, memory: DeviceMemory
) -> int:
    """Peak bytes on ``device`` over one training step of a model of ``members`` members."""
    d = cfg.data
    model = build_model(cfg.model, vocab, members).to(device)
    opt = MemberAdamW.for_model(model, [cfg] * members)
    x, y = torch.randint(vocab, (2, members, d.batch_size, d.seq_len), device=device)
    bf16 = cfg.train.precision == "bf16-mixed"

    def backward(loss: torch.Tensor) -> None:  # outside autocast, as a run's backward is
        with torch.autocast(device.type, enabled=False):
            loss.backward()

    memory.reset()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        train_step(model, opt, x, y, backward=backward)
    peak = memory.peak()
    del model, opt, x, y
    return peak


def member_footprint(
    cfg: RunConfig, vocab: int, device: torch.device, memory: DeviceMemory | None = None
) -> int:
    """Bytes one more member adds to a training step's peak on ``device`` (``memory``: how
    the peak is read; CUDA's by default). Draws nothing from torch's generators (a run that
    trains in this process starts as it would have)."""
    memory = memory if memory is not None else CudaMemory(device)
    forked = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=forked):
        one = step_peak(cfg, vocab, 1, device, memory)
        two = step_peak(cfg, vocab, 2, device, memory)
    memory.reset()  # the measurement's memory back to the device
    return max(1, two - one)
