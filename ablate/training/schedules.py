"""Learning-rate schedules as pure functions of the step; Lightning only wraps them."""

from __future__ import annotations

import math
from collections.abc import Iterable

DECAYS = ("cosine", "linear", "constant", "cosine_min")


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    """W = round(warmup_ratio * total_steps)."""
    return int(round(warmup_ratio * total_steps))


def lr_at(
    step: int,
    *,
    total_steps: int,
    base_lr: float,
    warmup_ratio: float,
    min_lr: float,
    decay: str,
    cycles: float = 0.5,
) -> float:
    """Learning rate at optimizer step ``t = step`` of ``T = total_steps``.

    With ``W = round(warmup_ratio * T)`` warmup steps:

    - warmup (t < W): ``lr = base_lr * t / W``
    - linear:   ``lr = max(min_lr, base_lr * (1 - (t - W) / (T - W)))``
    - cosine:   ``lr = max(min_lr, base_lr * 0.5 * (1 + cos(2π · cycles · (t - W) / (T - W))))``
    - constant: ``lr = base_lr``
    - cosine_min: ``lr = min_lr + (base_lr - min_lr) * c`` with ``c`` the cosine factor above
      (nanoGPT's form: the cosine runs between base_lr and min_lr instead of being floored)

    ``cycles = 0.5`` is the usual half-cosine from ``base_lr`` to 0 (floored at ``min_lr``).
    Steps past ``T`` keep the value at ``T``.
    """
    return lr_values(
        [step],
        total_steps=total_steps,
        base_lr=base_lr,
        warmup_ratio=warmup_ratio,
        min_lr=min_lr,
        decay=decay,
        cycles=cycles,
    )[0]


def lr_values(
    steps: Iterable[int],
    *,
    total_steps: int,
    base_lr: float,
    warmup_ratio: float,
    min_lr: float,
    decay: str,
    cycles: float = 0.5,
) -> list[float]:
    """``lr_at`` of each of ``steps`` (the formulas are ``lr_at``'s), in one call: an
    optimizer's table of a whole schedule costs no Python call per step."""
    if decay not in DECAYS:
        raise ValueError(f"unknown decay '{decay}'; choose from: {', '.join(DECAYS)}")
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    w = warmup_steps(total_steps, warmup_ratio)
    out = []
    for step in steps:
        t = min(step, total_steps)
        if t < w:
            out.append(base_lr * t / w)
            continue
        if decay == "constant":
            out.append(base_lr)
            continue
        progress = (t - w) / max(1, total_steps - w)
        if decay == "linear":
            out.append(max(min_lr, base_lr * (1.0 - progress)))
            continue
        coeff = 0.5 * (1.0 + math.cos(2.0 * math.pi * cycles * progress))
        if decay == "cosine_min":
            out.append(min_lr + (base_lr - min_lr) * coeff)
        else:
            out.append(max(min_lr, base_lr * coeff))
    return out
