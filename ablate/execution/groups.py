"""Stacked groups of a study's runs (``train.stack``): which runs train as one
stacked model, as one executor task.

The rules are ``ablate.stacking``'s (torch-free); this module adds what needs the
machine: ``train.stack: auto`` measures the device this process sees (its free CUDA memory,
then what one member of each shape holds there: ``ablate.training.footprint``, a few seconds
once per shape). A driver without the GPU its runs train on (a SLURM login node) cannot
measure it, so ``auto`` is off there: name N to stack such runs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from ablate.config import RunConfig
from ablate.execution.executors import RunTask
from ablate.stacking import (
    auto_members,
    describe_limit,
    not_stackable,
    plan_groups,
    stack_key,
    stack_limit,
)


@functools.lru_cache(maxsize=1)
def _cuda_free() -> int | None:
    """Free memory of the first visible CUDA device, or None without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        free, _total = torch.cuda.mem_get_info(0)
        return int(free)
    except Exception:  # noqa: BLE001 - no usable CUDA: auto is off
        return None


@functools.lru_cache(maxsize=64)
def _footprint(key: str) -> int | None:
    """Bytes one member of the runs of ``key`` (their ``stack_key``) holds on the first CUDA
    device, measured; None when it cannot be (auto stays off)."""
    try:
        import torch

        from ablate.training.footprint import member_footprint

        cfg = RunConfig.model_validate(json.loads(key))  # seed and scalars: defaults
        d = cfg.data
        # the plan has no data: char and bpe bound the vocabulary, a word vocabulary is guessed
        vocab = {"char": 256, "bpe": d.bpe_vocab_size}.get(d.tokenizer, 65536)
        return member_footprint(cfg, vocab, torch.device("cuda", 0))
    except Exception:  # noqa: BLE001 - e.g. out of memory at two members: auto stays off
        return None


def auto_here(cfg: RunConfig) -> int:
    """``train.stack: auto``'s member count for ``cfg`` on this machine."""
    if cfg.train.accelerator == "cpu":
        return 1
    free = _cuda_free()  # before any measurement holds memory
    per = _footprint(stack_key(cfg)) if free is not None else None
    return auto_members(cfg, cuda=free is not None, free_bytes=free, member_bytes=per)


def limit_here(cfg: RunConfig) -> int:
    """At most this many members in a group of ``cfg``'s runs (1: train alone)."""
    return stack_limit(cfg, auto_here)


def group_tasks(tasks: Sequence[RunTask]) -> list[RunTask]:
    """The executor's tasks: runs that stack become one group task each, the rest stay."""
    groups = plan_groups(list(tasks), lambda t: t.config, limit_here)
    return [RunTask.group(g) for g in groups]


def plan_labels(runs: Sequence[Any]) -> tuple[dict[str, str], list[str]]:
    """For ``ablate plan``: each run id's group (``g1 (3)``; a run that cannot stack although
    its ``train.stack`` asks for it: ``alone``; other runs alone: none) and one line per
    distinct ``train.stack`` setting saying what it does here."""
    groups = plan_groups(list(runs), lambda r: r.config, limit_here)
    labels: dict[str, str] = {}
    n = 0
    for g in groups:
        if len(g) > 1:
            n += 1
            labels.update({r.run_id: f"g{n} ({len(g)})" for r in g})
        elif g[0].config.train.stack != "off" and not_stackable(g[0].config):
            labels[g[0].run_id] = "alone"
    lines: dict[tuple[str, str], str] = {}
    for r in runs:
        key = (stack_key(r.config), r.config.train.stack)
        if key not in lines and r.config.train.stack != "off":
            lines[key] = describe_limit(r.config, limit_here(r.config))
    return labels, sorted(set(lines.values()))
