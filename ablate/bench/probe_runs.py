"""The runs the probe times (``ablate.bench.probe``), in a module of their own so that a packed
row's processes (``ablate.bench.probe_pack``) time the same runs the same way: a solo run
(``train_run``) or a stacked group (``train_group``) into a temporary store, as ``ablate run``
trains them, and the tokens/s from two of them (set-up and final evaluation cancel)."""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ablate.config import RunConfig, build_config
from ablate.store import RunStore

PROFILE_PRECISION = "bf16-mixed"  # what every gpu profile trains at
CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # tinyshakespeare's


def failed(err: BaseException | str) -> str:
    """A row's error as one line: ``failed: <first line>``."""
    text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    lines = [s.strip() for s in str(text).strip().splitlines() if s.strip()]
    return "failed: " + (lines[0] if lines else "unknown error")[:200]


def member_configs(cfg: RunConfig, members: int) -> list[RunConfig]:
    """The group's runs: ``cfg`` at seeds 0..members-1 (a seed study's stack)."""
    return [
        cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": s})})
        for s in range(members)
    ]


def train(cfg: RunConfig, members: int, root: Path) -> list[dict[str, Any]]:
    """Train ``cfg`` solo (``members=0``) or as a stacked group into a store at ``root``; the
    runs' summaries."""
    from ablate.training.train import train_group, train_run

    store = RunStore(root)
    if members == 0:
        return [train_run(cfg, store.run("probe", cfg.run_id()))]
    cfgs = member_configs(cfg, members)
    return train_group(cfgs, [store.run("probe", c.run_id()) for c in cfgs])


def failure(summaries: list[dict[str, Any]]) -> str | None:
    """The first run that did not complete, as ``failed: ...``; None when all did."""
    for s in summaries:
        if s.get("status") != "completed":
            return failed(s.get("error") or f"run ended {s.get('status')}")
    return None


def run_length(steps: int, eval_every: int | None = None) -> dict[str, Any]:
    """Config keys for a run of ``steps`` steps evaluating every ``eval_every`` steps (None:
    no evaluation before the final one)."""
    return {"train.max_steps": steps, "train.eval_interval": eval_every or 10**6}


def timed_runs(
    flat: dict[str, Any],
    members: int,
    window: tuple[int, int],
    cuda: bool,
    eval_every: int | None = None,
) -> dict[str, Any]:
    """Tokens/s of all members from the wall time of two runs of ``window`` steps (each ends
    synchronized: its final evaluation reads the loss), so set-up, final evaluation and
    checkpoint cancel; the peak CUDA memory of the longer; the run's FLOPs per token and
    attention kernel, and the summaries' own figure (their last log interval).

    Under ``train.compile`` a run of the short length comes first, from a clean dynamo cache:
    it compiles the training and evaluation graphs, which the two timed runs in this process
    reuse (a second run compiles nothing: ``tests/training/test_compile.py``), so compiling is
    in neither of them; ``compile_s`` is that run's wall time over the short timed one's.
    ``eval_every``: the runs evaluate at that interval too (its steps are in the tokens/s)."""
    from ablate.bench.machine import sync

    compiled = flat.get("train.compile", False)
    if compiled:
        import torch._dynamo as dynamo

        dynamo.reset()  # each compiled row compiles its own graphs, none left over
    walls, summaries = [], []
    for steps in ((window[0],) if compiled else ()) + tuple(window):
        cfg = build_config(flat | run_length(steps, eval_every))
        if cuda:
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        with tempfile.TemporaryDirectory(prefix="ablate-probe-") as root:
            t = time.perf_counter()
            summaries = train(cfg, members, Path(root))
            sync()
            walls.append(time.perf_counter() - t)
        if error := failure(summaries):
            return {"error": error}
    d = build_config(flat).data
    tokens = (window[1] - window[0]) * max(members, 1) * d.batch_size * d.seq_len
    out = {"compile_s": walls[0] - walls[1]} if compiled else {}
    walls = walls[-2:]
    out |= {
        "tokens_per_s": tokens / (walls[1] - walls[0]) if walls[1] > walls[0] else None,
        "wall_s": walls,
        "summary_tokens_per_s": sum(s.get("tokens_per_s") or 0.0 for s in summaries),
        "flops_per_token": summaries[0]["flops_per_token"],
        "attn_kernel": summaries[0].get("attn_kernel"),
        "attn_backend": cfg.train.attn_backend,
    }
    if cuda:
        out["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


# --- a stack equals its solo runs ---------------------------------------------------------------

EQUAL_MEMBERS, EQUAL_STEPS, EQUAL_LOG = 4, 10, 2
RTOL_BF16 = 1e-3
"""A member's losses against its solo run's under bf16-mixed, relative: the tolerance
``tests/training/test_stacked.py`` states and argues (half a bf16 rounding; a real difference,
a cast missing or a wrong dtype, is ~1e-2)."""
LOSSES = ("train/loss", "val/loss")


def loss_differences(
    solo: list[list[tuple[int, str, float]]], stacked: list[list[tuple[int, str, float]]]
) -> dict[str, Any]:
    """Each member's logged losses (``read_metrics`` rows) against its solo run's: the largest
    absolute and relative difference, how many values were compared, and the steps or metrics
    one side logged and the other did not (``missing``)."""
    worst_abs = worst_rel = 0.0
    compared, missing = 0, []
    for i, (a, b) in enumerate(zip(solo, stacked, strict=True)):
        ours = {(s, m): v for s, m, v in a if m in LOSSES}
        theirs = {(s, m): v for s, m, v in b if m in LOSSES}
        missing += [f"member {i}: {m} at step {s}" for s, m in sorted(set(ours) ^ set(theirs))]
        for key in ours.keys() & theirs.keys():
            diff = abs(ours[key] - theirs[key])
            worst_abs = max(worst_abs, diff)
            worst_rel = max(worst_rel, diff / abs(ours[key]) if ours[key] else diff)
            compared += 1
    ok = compared > 0 and not missing and worst_rel <= RTOL_BF16
    return {"ok": ok, "max_abs_diff": worst_abs, "max_rel_diff": worst_rel, "rtol": RTOL_BF16} | {
        "compared": compared,
        "missing": missing[:5],
    }


def stack_equals_solo(flat: dict[str, Any]) -> dict[str, Any]:
    """A stack of ``EQUAL_MEMBERS`` against its solo runs (seeds 0..3, ``flat``'s shape and
    kernels at dropout 0: a stack draws other dropout masks than its solo runs,
    docs/stacking.md), ``EQUAL_STEPS`` steps under bf16-mixed, losses logged every
    ``EQUAL_LOG`` steps and at the final evaluation: :func:`loss_differences`."""
    over = {"model.dropout": 0.0, "train.precision": PROFILE_PRECISION}
    over |= run_length(EQUAL_STEPS) | {"train.log_interval": EQUAL_LOG}
    cfgs = member_configs(build_config(flat | over), EQUAL_MEMBERS)
    with tempfile.TemporaryDirectory(prefix="ablate-probe-equal-") as tmp:
        solo_store, stack_store = RunStore(Path(tmp) / "solo"), RunStore(Path(tmp) / "stack")
        summaries = [s for c in cfgs for s in train(c, 0, solo_store.root)]
        summaries += train(cfgs[0], EQUAL_MEMBERS, stack_store.root)
        if error := failure(summaries):
            return {"ok": False, "error": error}
        runs = [
            [store.run("probe", c.run_id()).read_metrics() for c in cfgs]
            for store in (solo_store, stack_store)
        ]
    return {"members": EQUAL_MEMBERS, "steps": EQUAL_STEPS} | loss_differences(*runs)
