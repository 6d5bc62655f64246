"""Which runs train as one stacked group, and how many members a group gets (no torch imported
here; ``not_stackable`` imports the model to read its class from the registry).

``train.stack`` says how runs train, never what they are (it is not in the run id):

* ``off``: one run per process (the default);
* ``N``: runs that share a ``stack_key`` train in groups of at most N members;
* ``auto``: chosen from the device and the model size (``auto_members``): off on a CPU, where
  these models are compute-bound already and one process per core trains more runs an hour
  (docs/stacking.md); on a GPU as many members as fit in 70% of the free memory, each member
  as large as measured (``ablate.training.footprint``: one step's peak memory at one member
  and at two), with no constant cap.

A run that cannot stack (``not_stackable``: a model class that is not member-aware, the LSTM or
a plugin written for one run, ``ablate.model.members``) trains alone whatever ``train.stack``
says; the plan lists it alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TypeVar

from ablate import registry
from ablate.config import RunConfig

# what members of one group may differ in: the seed and optimizer scalars
MEMBER_FIELDS = {
    "train": ("seed", "progress", "stack"),
    "optim": ("lr", "min_lr", "warmup_ratio", "weight_decay", "beta1", "beta2", "grad_clip"),
}
PRECISIONS = ("32-true", "bf16-mixed")
AUTO_MEMORY_SHARE = 0.7
"""Share of the free device memory ``auto`` plans to fill (the rest: allocator slack, kernels'
workspaces, the evaluation batches)."""

T = TypeVar("T")


def stack_key(cfg: RunConfig) -> str:
    """The shape-determining part of ``cfg`` (everything but the seed, the optimizer scalars
    and tracking) as canonical JSON: runs with equal keys can train as one stacked group."""
    d = cfg.to_dict()
    d.pop("tracking")
    for section, keys in MEMBER_FIELDS.items():
        for key in keys:
            d[section].pop(key)
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def not_stackable(cfg: RunConfig) -> str | None:
    """Why ``cfg`` must train alone (None: it can stack)."""
    t = cfg.train
    if t.devices != 1:
        return "more than one device"
    import ablate.model  # noqa: F401 - defines the built-in classes (torch: not at import)

    for axis in registry.AXES:
        name = getattr(cfg.model, axis)
        if axis != "arch" and cfg.model.arch != "transformer":
            continue  # only the transformer builds the other axes' classes
        cls = registry.lookup(axis, name)
        if not getattr(cls, "member_aware", False):
            return f"model.{axis} {name}: {cls.__qualname__} computes one run (not member-aware)"
    if t.precision not in PRECISIONS:
        return f"precision {t.precision}"
    return None


def auto_members(
    cfg: RunConfig, *, cuda: bool, free_bytes: int | None, member_bytes: int | None
) -> int:
    """Members per group for ``train.stack: auto`` (1 = off): off unless the run trains on a
    CUDA device this process can measure (``free_bytes``: its free memory; ``member_bytes``:
    what one more member holds, measured); then as many as ``AUTO_MEMORY_SHARE`` of the free
    memory holds."""
    if cfg.train.accelerator == "cpu" or not cuda or free_bytes is None or not member_bytes:
        return 1
    return max(1, int(AUTO_MEMORY_SHARE * free_bytes // member_bytes))


def stack_limit(cfg: RunConfig, auto: Callable[[RunConfig], int] | None = None) -> int:
    """The most members a group of ``cfg``'s runs may have (1: train alone)."""
    value = cfg.train.stack
    if value == "off" or not_stackable(cfg):
        return 1
    if value == "auto":
        return auto(cfg) if auto is not None else 1
    return int(value)


def plan_groups(
    runs: Sequence[T], config: Callable[[T], RunConfig], limit: Callable[[RunConfig], int]
) -> list[list[T]]:
    """``runs`` split into groups, in plan order of each group's first run: runs with one
    ``stack_key`` (and one ``train.stack``) are cut into ceil(n / limit) groups of near-equal
    size; a run alone is a group of one."""
    buckets: dict[tuple[str, str], list[T]] = {}
    for run in runs:
        cfg = config(run)
        buckets.setdefault((stack_key(cfg), cfg.train.stack), []).append(run)
    out: list[list[T]] = []
    for members in buckets.values():
        n, cap = len(members), max(1, limit(config(members[0])))
        parts = -(-n // cap)
        sizes = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
        start = 0
        for size in sizes:
            out.append(members[start : start + size])
            start += size
    first = {id(r): i for i, r in enumerate(runs)}
    return sorted(out, key=lambda g: first[id(g[0])])


def describe_limit(cfg: RunConfig, members: int) -> str:
    """One line for ``ablate plan``: what ``train.stack`` means for these runs."""
    if cfg.train.stack == "off":
        return "train.stack off: one run per process"
    why = not_stackable(cfg)
    if why:
        return f"train.stack {cfg.train.stack}: runs train alone ({why})"
    if cfg.train.stack == "auto" and members == 1:
        where = "a CPU" if cfg.train.accelerator == "cpu" else "no CUDA device visible here"
        return f"train.stack auto: off ({where}; stacking is slower on CPUs, see docs/stacking.md)"
    return f"train.stack {cfg.train.stack}: groups of at most {members}"
