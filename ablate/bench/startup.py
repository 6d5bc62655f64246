"""Bench section 11, start-up: from typing ``ablate run`` to the first training step.

A fresh ``ablate run`` process (``python -m ablate`` in this interpreter) trains a small study
into a fresh store, as a user starts one: 4 runs (2 activations x 2 seeds) of a 2-layer char
model on tiny shakespeare, W&B offline. Timed from just before the process starts: its first
printed line (the study header, once the plan is checked) and the first training step any run
finished (``first_step`` in the run's ``progress.json``, written by the training process).
Twice per repetition, alternating: with the default workers (``auto``: one per core, forked
from a server that imported torch, Lightning and W&B once) and with
``--workers 1`` (one run at a time, in the ``ablate run`` process itself). The 1-minute load
average before each launch says how busy the machine was; the goal holds for an idle one.

Then a start that costs what the work costs, side by side in the same section: a one-run,
5-step study of a tiny model (the whole ``ablate run`` process, launch to exit) with the default
workers and with ``--workers 1``, and a fresh process that only imports torch, Lightning and
W&B, alternating. Goals: default / ``--workers 1`` at most :data:`SAME_GOAL` (one run to train
starts no worker pool) and default / the imports at most :data:`IMPORTS_GOAL` (what is left is
the work itself).
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
ONE_RUN = {
    "name": "one_run",
    "description": "one run of 5 steps: what `ablate run` costs beyond the work",
    "base": {
        "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "max_seq_len": 32},
        "data": {"dataset": "tinyshakespeare", "tokenizer": "char", "seq_len": 32, "batch_size": 4},
        "train": {
            "max_steps": 5,
            "eval_interval": 5,
            "eval_batches": 1,
            "final_eval_batches": 1,
            "accelerator": "cpu",  # the same work on any machine (auto takes a GPU where one is)
        },
    },
    "seeds": [0],
}
IMPORTS = "import torch, pytorch_lightning, wandb"
"""What a run's process imports before its first step (the rest of ablate is small beside it)."""
SAME_GOAL = 1.25
IMPORTS_GOAL = 1.6


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
        "one_run": measure_one_run(reps, quick, log),
    }


def timed(cmd: list[str]) -> dict[str, Any]:
    """One process of ``cmd``, launch to exit (W&B offline): its wall seconds, the load before."""
    env = {**os.environ, "WANDB_MODE": "offline"}
    load = load_avg()
    t0 = time.time()
    done = subprocess.run(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    wall = time.time() - t0
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"exited {done.returncode}: {' '.join(cmd)}: {tail[0]}")
    return {"wall_s": wall, "load": load}


def measure_one_run(reps: int, quick: bool, log=print) -> dict[str, Any]:
    """``reps`` rounds of: the imports alone, the one-run study with the default workers, with
    ``--workers 1`` (quick: one round, without ``--workers 1``); medians and their ratios."""
    kinds = {"imports": None, "default workers (auto)": [], "--workers 1": ["--workers", "1"]}
    if quick:
        kinds.pop("--workers 1")
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in kinds}
    with tempfile.TemporaryDirectory(prefix="ablate-bench-one-run-") as tmp:
        study = Path(tmp) / "one_run.yaml"
        study.write_text(yaml.safe_dump(ONE_RUN, sort_keys=False))
        for rep in range(reps):
            for i, (name, extra) in enumerate(kinds.items()):
                cmd = [sys.executable, "-c", IMPORTS]
                if extra is not None:
                    store = Path(tmp) / f"store-{rep}-{i}"
                    cmd = [sys.executable, "-m", "ablate", "run", str(study), "--store", str(store)]
                    cmd += ["--no-progress", *extra]
                got = timed(cmd)
                rows[name].append(got)
                log(f"  one run, {name}: {got['wall_s']:.1f} s (load {num(got['load'], '{:.1f}')})")
    wall = {name: statistics.median(r["wall_s"] for r in runs) for name, runs in rows.items()}
    default = wall["default workers (auto)"]
    return {
        "study": ONE_RUN,
        "reps": reps,
        "wall_s": wall,
        "runs": rows,
        "default_over_workers_1": default / wall["--workers 1"] if "--workers 1" in wall else None,
        "default_over_imports": default / wall["imports"],
        "goals": {"default_over_workers_1": SAME_GOAL, "default_over_imports": IMPORTS_GOAL},
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
        "before each launch says how idle it was).\n\n"
        + table(header, rows)
        + ("\n\n" + render_one_run(d["one_run"]) if "one_run" in d else "")
    )


def render_one_run(o: dict[str, Any]) -> str:
    """The one-run rows: the whole process per setting, the imports alone, the two ratios."""
    rows = []
    for name, runs in o["runs"].items():
        what = "import torch, Lightning, W&B" if name == "imports" else f"one run, {name}"
        each = ", ".join(num(r["wall_s"], "{:.1f}") for r in runs)
        loads = ", ".join(num(r["load"], "{:.1f}") for r in runs)
        rows.append([what, num(o["wall_s"][name], "{:.1f} s"), each, loads])
    goals = o["goals"]
    ratios = [
        ["default ÷ --workers 1", bold(o["default_over_workers_1"], 2)]
        + [f"≤ {goals['default_over_workers_1']:g}"],
        ["default ÷ the imports", bold(o["default_over_imports"], 2)]
        + [f"≤ {goals['default_over_imports']:g}"],
    ]
    steps = o["study"]["base"]["train"]["max_steps"]
    return (
        f"A start that costs what the work costs: one run of {steps} steps of a 1-layer, "
        "32-wide char model (W&B offline), the whole `ablate run` process from launch to exit, "
        "with the default workers and with `--workers 1`, beside a fresh process that only "
        f"imports torch, Lightning and W&B; {o['reps']} round(s) in that order, medians.\n\n"
        + table(["process", "wall (median)", "each (s)", "load before each"], rows)
        + "\n\n"
        + table(["ratio", "measured", "goal"], ratios)
    )
