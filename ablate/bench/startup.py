"""Bench section 11, start-up: from typing ``ablate run`` to the first training step.

A fresh ``ablate run`` process (``python -m ablate`` in this interpreter) trains a small study
into a fresh store, as a user starts one: 4 runs (2 activations x 2 seeds) of a 2-layer char
model on tiny shakespeare, W&B offline. Timed from just before the process starts: its first
printed line (the study header, once the plan is checked) and the first training step any run
finished (``first_step`` in the run's ``progress.json``, written by the training process).
Twice per repetition, alternating: with the default workers (``auto``: one per core, forked
from a server that imported torch, Lightning and W&B while the driver planned) and with
``--workers 1`` (one run at a time, in the ``ablate run`` process itself). The 1-minute load
average before each launch says how busy the machine was; the goal holds for an idle one.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from ablate.bench.machine import load_avg, usable_cores
from ablate.bench.markdown import bold, num, table

GOAL_S = 5.0
SETTINGS = {
    "default workers (auto)": [],
    "--workers 1 (in the ablate run process)": ["--workers", "1"],
}
SMALL_STUDY = {
    "name": "startup",
    "description": "a small study: the time from `ablate run` to its first training step",
    "base": {
        "model": {"d_model": 64, "n_layers": 2, "n_heads": 2, "max_seq_len": 64},
        "data": {"dataset": "tinyshakespeare", "tokenizer": "char", "seq_len": 64, "batch_size": 8},
        "train": {"max_steps": 30, "eval_interval": 30, "eval_batches": 2, "final_eval_batches": 2},
    },
    "grid": {"model.activation": ["relu", "gelu"]},
    "seeds": [0, 1],
}
QUICK_STEPS = 3


def launch(study: Path, store: Path, extra: list[str]) -> dict[str, Any]:
    """One ``ablate run`` of ``study`` into ``store``: seconds to its first printed line and to
    the first finished training step, the process's wall time, the load average before."""
    env = {**os.environ, "WANDB_MODE": "offline"}  # a login must not upload bench runs
    cmd = [sys.executable, "-m", "ablate", "run", str(study), "--store", str(store)]
    load = load_avg()
    t0 = time.time()
    proc = subprocess.Popen(
        [*cmd, "--no-progress", *extra], env=env, stdout=subprocess.PIPE, text=True
    )
    first_line = None
    for line in proc.stdout:  # type: ignore[union-attr]
        if first_line is None and line.strip():
            first_line = time.time() - t0
    proc.wait()
    wall = time.time() - t0
    if proc.returncode:
        raise RuntimeError(f"ablate run exited {proc.returncode}: {' '.join(cmd + extra)}")
    firsts = []
    for path in store.glob("*/*/progress.json"):
        record = json.loads(path.read_text())
        if record.get("first_step") is not None:
            firsts.append(record["first_step"] - t0)
    return {
        "first_line_s": first_line,
        "first_step_s": min(firsts) if firsts else None,
        "wall_s": wall,
        "load": load,
    }


def measure(reps: int, quick: bool, log=print) -> dict[str, Any]:
    """``reps`` launches per setting, alternating settings; the median of each."""
    spec = json.loads(json.dumps(SMALL_STUDY))
    settings = dict(SETTINGS)
    if quick:  # a smoke test: short runs, the default setting only
        spec["base"]["train"].update(max_steps=QUICK_STEPS, eval_interval=QUICK_STEPS)
        settings = dict(list(SETTINGS.items())[:1])
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory(prefix="ablate-bench-startup-") as tmp:
        study = Path(tmp) / "startup.yaml"
        study.write_text(yaml.safe_dump(spec, sort_keys=False))
        for rep in range(reps):
            for i, (name, extra) in enumerate(settings.items()):
                got = launch(study, Path(tmp) / f"store-{rep}-{i}", extra)
                rows[name].append(got)
                log(
                    f"  {name}: first line {num(got['first_line_s'], '{:.1f}')} s, first step "
                    f"{num(got['first_step_s'], '{:.1f}')} s (load {num(got['load'], '{:.1f}')})"
                )
    return {
        "study": spec,
        "reps": reps,
        "cores": usable_cores(),
        "goal_s": GOAL_S,
        "settings": {name: _median(runs) | {"runs": runs} for name, runs in rows.items()},
    }


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for key in ("first_line_s", "first_step_s", "wall_s"):
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = statistics.median(values) if values else None
    return out


def render(d: dict[str, Any]) -> str:
    rows = []
    for name, s in d["settings"].items():
        each = ", ".join(num(r["first_step_s"], "{:.1f}") for r in s["runs"])
        loads = ", ".join(num(r["load"], "{:.1f}") for r in s["runs"])
        goal = s["first_step_s"] / d["goal_s"] if s["first_step_s"] is not None else None
        rows.append(
            [name, num(s["first_line_s"], "{:.1f} s"), num(s["first_step_s"], "{:.1f} s")]
            + [bold(goal, 2), each, loads, num(s["wall_s"], "{:.0f} s")]
        )
    header = ["setting", "first line (median)", "first step (median)", "first step ÷ goal"]
    header += ["first step, each launch (s)", "load before each", "whole study (median)"]
    return (
        f"`ablate run` of a small study (4 runs of a 2-layer, 64-wide char model on tiny "
        f"shakespeare, {d['study']['base']['train']['max_steps']} steps each, W&B offline) in a "
        f"fresh process and store, {d['reps']} times per setting, alternating. Seconds from "
        "the launch to its first printed line (the plan checked) and to the first training "
        "step any run finished. Goal: the first step within "
        f"{d['goal_s']:g} s on an idle machine ({d['cores']} cores here; the load average "
        "before each launch says how idle it was).\n\n" + table(header, rows)
    )
