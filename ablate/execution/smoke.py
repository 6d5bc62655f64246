"""``ablate run smoke STUDY --profile gpu``: every run of a profile for 2 steps on the CPU.

Before anyone pays for a GPU: the study is planned exactly as ``ablate run`` plans it (so every
plan-time check, the attention-kernel rules for ``accelerator: gpu`` included, applies to the
real GPU configs), then each run is trained for ``SMOKE_STEPS`` steps on the CPU with the
profile's model shapes and sequence length, a validation and a final evaluation of one batch
(at every ``eval_lengths`` multiple too), a checkpoint, and a throwaway store. This catches
shape, config and code-path errors of every variant (minutes on 2 cores, not an hour of GPU).

What changes for the CPU, and nothing else:

- ``train.accelerator: cpu``; AdamW stays fused as on the GPU (the fused kernel runs on CPU
  too, and fused AdamW with clipping under bf16 is what crashed every GPU run once);
  ``train.precision`` stays what the profile asks for (CPU autocast runs bf16), except that
  ``16-mixed``, which Lightning does not run on a CPU, becomes ``bf16-mixed``, and the smoke
  says so. On a CPU that emulates bf16 matrix products (``ablate.accel.cpu_bf16_matmul_fast``:
  ~70x slower than fp32 there, e.g. AVX2-only CPUs) bf16 runs train ``EMULATED_STEPS`` step
  instead of ``SMOKE_STEPS``, in bf16 all the same, and the smoke says that too;
- runs the profile stacks (``train.stack`` not ``off``, a member-aware model) train as
  a stacked group of ``SMOKE_MEMBERS`` (the run and the same run at the next seed), whatever
  the CPU would choose for ``auto``: the GPU runs will take that path;
- ``train.attn_backend`` flash/efficient becomes ``auto`` (the CPU kernel for the encoding);
- ``data.batch_size`` becomes ``SMOKE_BATCH`` and ``data.eval_batch_size`` 1 (a GPU batch of a
  GPU model takes minutes per step on a CPU; memory is what ``ablate bench --gpu`` measures);
- ``data.pin_memory`` off (pinning needs a CUDA device), W&B off, progress bars off.

One run per code path: seeds, and optimizer scalars (``SAME_PATH_KEYS``: learning rate,
warmup, LR scaling) only change numbers, so of runs that differ only in those one is trained
(batch-size variants coincide once the batch is cut).

``tiny=True`` (the test suite's smoke) also shrinks every shape (:func:`tiny_shape`: heads of
``TINY_HEAD_DIM``, at most ``TINY_LAYERS`` layers, sequences of ``TINY_SEQ``) and trains
``SMOKE_STEPS`` steps on every CPU: each code path (precision, attention kernel, stacking,
compile, every axis value) in seconds, where the profile's own widths take minutes; runs that
differ only in shape (a ladder's rungs) then share one code path. What the shapes themselves
must satisfy is checked without training them (a meta-device step, the FLOPs and memory).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ablate.config import RunConfig
from ablate.execution.tables import Col, make_console, print_rows, profile_text
from ablate.store import RunStore
from ablate.study import PlannedRun, Study, load_study
from ablate.study.preflight import check_compile

SMOKE_STEPS = 2
EMULATED_STEPS = 1
SMOKE_BATCH = 2
SMOKE_MEMBERS = 2
TINY_HEAD_DIM = 8
TINY_LAYERS = 2
TINY_SEQ = 32
TINY_WIDTH = 32  # a model without heads (the LSTM)


def tiny_shape(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its code path kept and its shape shrunk: the same heads (and key/value
    heads) of ``TINY_HEAD_DIM`` each, at most ``TINY_LAYERS`` layers, sequences of at most
    ``TINY_SEQ`` with ``max_seq_len`` cut by the same factor (an ``eval_lengths`` multiple
    past it stays past it), a set ``d_ff`` scaled with the width."""
    d = cfg.to_dict()
    m, data = d["model"], d["data"]
    width = TINY_HEAD_DIM * m["n_heads"] if m["arch"] == "transformer" else TINY_WIDTH
    if m["d_ff"] is not None:
        m["d_ff"] = max(1, m["d_ff"] * width // m["d_model"])
    seq = min(data["seq_len"], TINY_SEQ)
    m["max_seq_len"] = -(-m["max_seq_len"] * seq // data["seq_len"])  # ceil
    m.update(d_model=width, n_layers=min(m["n_layers"], TINY_LAYERS))
    data["seq_len"] = seq
    return RunConfig.model_validate(d)


def smoke_config(
    cfg: RunConfig, *, steps: int | None = None, batch: int = SMOKE_BATCH, tiny: bool = False
) -> RunConfig:
    """``cfg`` for a short CPU run (``steps``; default ``SMOKE_STEPS``, ``EMULATED_STEPS``
    where this CPU emulates the run's bf16 at the run's own shape): the changes listed in the
    module docstring; ``tiny``: at :func:`tiny_shape` too."""
    if tiny:
        cfg = tiny_shape(cfg)
    d = cfg.to_dict()
    t = d["train"]
    if steps is None:
        emulated = emulated_bf16("bf16-mixed" if t["precision"] == "16-mixed" else t["precision"])
        steps = EMULATED_STEPS if emulated and not tiny else SMOKE_STEPS
    t.update(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        eval_interval=steps,
        eval_batches=1,
        final_eval_batches=1,
        log_interval=1,
        grad_norm_interval=1,
        checkpoint_interval=steps,
        progress=False,
    )
    if t["precision"] == "16-mixed":
        t["precision"] = "bf16-mixed"
    if t["attn_backend"] in ("flash", "efficient"):
        t["attn_backend"] = "auto"
    if d["optim"]["fused"] is None and t["accelerator"] == "cpu" and cfg.train.accelerator != "cpu":
        d["optim"]["fused"] = True  # what the GPU run gets (MemberAdamW fuses AdamW on CUDA)
    # evaluation at 1 sequence per batch: the 4x-length evaluations are the costliest part
    d["data"].update(batch_size=batch, eval_batch_size=1, pin_memory=False)
    d["tracking"]["wandb"] = False
    return RunConfig.model_validate(d)


def emulated_bf16(precision: str) -> bool:
    """Whether a ``precision`` run multiplies in bf16 on a CPU that emulates it (slowly)."""
    from ablate.accel import BF16_PRECISIONS, cpu_bf16_matmul_fast

    return precision in BF16_PRECISIONS and not cpu_bf16_matmul_fast()


def smoke_members(cfg: RunConfig) -> list[RunConfig]:
    """The configs one smoke run trains: ``cfg`` alone, or where the profile stacks ``cfg``'s
    runs (``auto``, or groups of N > 1), ``cfg`` and ``SMOKE_MEMBERS - 1`` more seeds as one
    stacked group."""
    from ablate.stacking import stack_limit

    if stack_limit(cfg, auto=lambda c: SMOKE_MEMBERS) == 1:  # off, 1, or cannot stack
        return [cfg]
    out = []
    for seed in range(cfg.train.seed, cfg.train.seed + SMOKE_MEMBERS):
        d = cfg.to_dict()
        d["train"]["seed"] = seed
        out.append(RunConfig.model_validate(d))
    return out


# optimizer scalars: runs that differ only in these take the same code path
SAME_PATH_KEYS = ("lr", "min_lr", "warmup_ratio", "lr_scaling", "ref_batch_size", "cycles")


def _code_path(cfg: RunConfig) -> str:
    d = cfg.to_dict()
    for key in SAME_PATH_KEYS:
        d["optim"].pop(key)
    d["train"].pop("seed")
    return json.dumps(d, sort_keys=True)


def smoke_runs(study: Study, *, tiny: bool = False) -> list[tuple[PlannedRun, RunConfig]]:
    """One run per distinct smoke config, seeds and ``SAME_PATH_KEYS`` aside: one seed per
    variant, and e.g. one of a grid over learning rates or (once the batch is cut) batch sizes;
    ``tiny``: at :func:`tiny_shape`, where shapes no longer tell runs apart."""
    seen: set[str] = set()
    out = []
    for run in study.runs:
        cfg = smoke_config(run.config, tiny=tiny)
        key = _code_path(cfg)
        if key not in seen:
            seen.add(key)
            out.append((run, cfg))
    return out


def smoke_study(
    study_path: str | Path,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    console: Console | None = None,
    plugins: Sequence[str] = (),
    tiny: bool = False,
) -> list[dict[str, Any]]:
    """Plan the study (``ConfigError`` on bad input), train each smoke run (``tiny``: at
    :func:`tiny_shape`) into a temporary store that is deleted afterwards, print a table;
    returns one row per run."""
    # it trains on the CPU, whatever device the profile names
    study = load_study(study_path, profile, overrides, check_device=False, plugins=plugins)
    check_compile([r.config for r in study.runs], study.path)
    console = console or make_console()
    runs = smoke_runs(study, tiny=tiny)
    _print_notes(study, runs, console, tiny)
    os.environ.setdefault("WANDB_MODE", "disabled")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ablate-smoke-") as tmp:
        store = RunStore(tmp)
        for i, (run, cfg) in enumerate(runs):
            t0 = time.perf_counter()
            s, dirs = _train(store, study, run, smoke_members(cfg), f"{i:03d}")
            row = _row(run, cfg, s, time.perf_counter() - t0)
            rows.append(row)
            console.print(f"  {escape(run.name)}: {row['status']} ({row['seconds']:.1f} s)")
            for run_dir in dirs:  # GPU-size checkpoints add up
                shutil.rmtree(run_dir.path, ignore_errors=True)
    _print_table(study, rows, console)
    return rows


def _print_notes(
    study: Study, runs: list[tuple[PlannedRun, RunConfig]], console, tiny: bool
) -> None:
    """The smoke's header, and a line for each way it departs from the profile."""
    console.print(
        f"[bold]{study.name}[/] smoke test{profile_text(study)}: {len(runs)} of "
        f"{len(study.runs)} runs (one per code path) on the CPU"
    )
    if tiny:
        console.print(
            f"  note: tiny shapes (heads of {TINY_HEAD_DIM}, at most {TINY_LAYERS} layers, "
            f"sequences of at most {TINY_SEQ}): the code paths, not the profile's shapes"
        )
    if any(r.config.train.precision == "16-mixed" for r, _ in runs):
        console.print("  note: 16-mixed runs are smoke-tested in bf16-mixed (no fp16 on a CPU)")
    if any(c.train.max_steps == EMULATED_STEPS < SMOKE_STEPS for _, c in runs):
        console.print(
            f"  note: this CPU emulates bf16 matrix products (no AVX512-BF16 or AMX), so bf16 "
            f"runs train {EMULATED_STEPS} step instead of {SMOKE_STEPS}, still in bf16",
            soft_wrap=True,
        )
    stacked = sum(len(smoke_members(c)) > 1 for _, c in runs)
    if stacked:
        console.print(
            f"  note: {stacked} run(s) train stacked as the profile asks, each with "
            f"{SMOKE_MEMBERS - 1} more seed as a group of {SMOKE_MEMBERS}"
        )


def _train(
    store: RunStore, study: Study, run: PlannedRun, cfgs: list[RunConfig], prefix: str
) -> tuple[dict[str, Any], list]:
    """Train ``cfgs`` (one run, or one stacked group) into ``store``: the first run's summary
    (or a ``failed`` row) and the run directories written."""
    from ablate.training.train import train_group, train_run

    dirs = [store.run(study.name, f"{prefix}-{c.run_id()}") for c in cfgs]
    meta = study.meta(run)
    try:
        if len(cfgs) == 1:
            return train_run(cfgs[0], dirs[0], meta, progress=False), dirs
        return train_group(cfgs, dirs, [meta] * len(cfgs))[0], dirs
    except Exception as err:  # noqa: BLE001 - report it, smoke-test the others
        return {"status": "failed", "error": f"{type(err).__name__}: {err}"}, dirs


def _row(run: PlannedRun, cfg: RunConfig, s: dict[str, Any], seconds: float) -> dict[str, Any]:
    return {
        "name": run.name,
        "params": s.get("params"),
        "shape": f"{cfg.model.n_layers}L/{cfg.model.d_model}d, "
        f"{cfg.data.batch_size}x{cfg.data.seq_len}",
        "precision": cfg.train.precision
        if cfg.train.precision == run.config.train.precision
        else f"{run.config.train.precision}->{cfg.train.precision}",
        "steps": cfg.train.max_steps,
        "stack": (s.get("stack") or {}).get("members", 1),
        "compute_dtypes": s.get("compute_dtypes"),
        "attn": s.get("attn_kernel"),
        "status": s.get("status"),
        "final_val_loss": s.get("final_val_loss"),
        "eval_lengths": s.get("val_loss_at_length"),
        "error": s.get("error")
        or (
            f"diverged at step {s['diverged_step']}" if s.get("diverged_step") is not None else None
        ),
        "seconds": seconds,
    }


def _print_table(study: Study, rows: list[dict[str, Any]], console: Console) -> None:
    cols = [
        Col("run"),
        Col("params", 4, "right"),
        Col("shape", 5),
        Col("precision", 6),
        Col("stack", 8, "right"),
        Col("attn (cpu)", 7),
        Col("status"),
        Col("val loss", 2, "right"),
        Col("s", 3, "right"),
        Col("error", 1, prose=True),
    ]
    cells = [
        [
            escape(r["name"]),
            f"{r['params']:,}" if r["params"] else "-",
            r["shape"],
            r["precision"],
            str(r["stack"]),
            r["attn"] or "-",
            r["status"] or "-",
            f"{r['final_val_loss']:.3f}" if r["final_val_loss"] is not None else "-",
            f"{r['seconds']:.1f}",
            escape(str(r["error"] or "").splitlines()[0] if r["error"] else ""),
        ]
        for r in rows
    ]
    print_rows(console, f"{study.name} smoke: {len(rows)} runs", cols, cells)
    for r in rows:  # the whole error, which the table cuts to its width
        if r["error"]:
            console.print(escape(f"{r['name']}: {r['error']}"))
    bad = [r for r in rows if r["status"] != "completed"]
    console.print(
        f"[red]{len(bad)} of {len(rows)} smoke runs did not complete[/]"
        if bad
        else f"[green]all {len(rows)} smoke runs completed[/]"
    )
