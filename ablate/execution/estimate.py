"""How long a study's runs will take on this machine, for ``ablate plan``.

Each run's time comes from the best source there is, and the plan says which:

1. **The store**: finished runs of the same shape (model, batch x sequence length, precision,
   device, evaluation schedule, and the torch threads each worker had) record their wall time
   and steps; their median seconds per step, all-in (data, logging, evaluations, checkpoints),
   times the run's steps.
2. **A probe, measured once and kept**: each distinct shape is built here and timed for
   ``PROBE_STEPS`` AdamW steps on random tokens (median, after ``WARMUP_STEPS`` untimed ones),
   at the threads a worker of ``ablate run`` will have; a run's time is its steps times that,
   plus its evaluations (forward passes: a third of a training step per token, over every
   ``eval_interval``'s batches and the final evaluation, each ``eval_lengths`` multiple once
   more; the full split sized from the dataset file). The measurement is kept in the cache
   (``~/.cache/ablate/step_times.json``, per machine, torch version and threads), so calls
   agree with each other; ``ablate plan --remeasure`` measures again.

The total is for the workers ``ablate run`` will use (``--workers``, ``auto`` as run resolves
it): runs are handed out longest first to the next free worker, as the pool does; plus the
start-up before the first step, measured once and kept like the probe: a fresh interpreter
importing what a worker imports before its first run (torch, Lightning, W&B;
``executors.local.WORKER_IMPORTS``), which the workers do at once, beside the plan. Every
measurement keeps the 1-minute load average of its moment, and the plan says it: a probe taken
on a busy machine is slow by that much.

A run that asks for a GPU on a machine without one is not measured (its time is unknown).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.config import ConfigError, RunConfig

PROBE_STEPS = 5
WARMUP_STEPS = 2
SLOW_STEP_S = 5.0  # a step slower than this is timed once: the probe must stay short
VOCAB = {"char": 96, "word": 16384}  # typical sizes (a BPE tokenizer states its own)
CACHE_FILE = "step_times.json"


@dataclass(frozen=True)
class Estimate:
    """Seconds per run (None: not measurable here), where each came from, and the workers."""

    seconds: dict[str, float | None]
    sources: dict[str, str]
    """Run id -> ``store`` (finished runs of its shape), ``probe`` or ``no GPU``."""
    workers: int
    method: str
    startup: float = 0.0
    """Seconds before the first step (the workers' imports, measured once; 0: not measured)."""


def _shape(model: dict, data: dict, train: dict, threads: int) -> str:
    """What a step's and an evaluation's time depend on, from config sections as dicts (a
    store's ``run.yaml`` or a planned config), and the worker's torch threads."""
    keys = {
        "model": model,
        "data": {k: data.get(k) for k in ("tokenizer", "bpe_vocab_size", "batch_size", "seq_len")}
        | {"eval_batch_size": data.get("eval_batch_size")},
        "train": {
            k: train.get(k)
            for k in ("precision", "accelerator", "eval_interval", "eval_batches")
            + ("final_eval_batches", "eval_lengths", "compile", "stack")
        },
        "threads": threads,
    }
    return json.dumps(keys, sort_keys=True, default=str)


def _threads(cfg: RunConfig, workers: int) -> int:
    """The torch threads a run gets in ``ablate run`` with ``workers`` workers."""
    from ablate.execution.executors.local import worker_threads

    return cfg.train.threads or worker_threads(workers)


def _device(cfg: RunConfig) -> str | None:
    """Where the run trains: ``cpu``, ``cuda``, or None when it needs a GPU this machine lacks."""
    import torch

    if cfg.train.accelerator == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu" if cfg.train.accelerator == "auto" else None


def step_seconds(cfg: RunConfig, device: str, threads: int, steps: int = PROBE_STEPS) -> float:
    """The median seconds of one training step of ``cfg``'s model and batch on ``device``."""
    import torch

    from ablate.model import build_model
    from ablate.training.lit import lm_loss

    vocab = cfg.data.bpe_vocab_size if cfg.data.tokenizer == "bpe" else VOCAB[cfg.data.tokenizer]
    before = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(threads)
    try:
        model = build_model(cfg.model, vocab).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        x = torch.randint(vocab, (cfg.data.batch_size, cfg.data.seq_len + 1), device=device)
        half = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(cfg.train.precision)
        cast = torch.autocast(device, dtype=half) if half else nullcontext()
        times: list[float] = []
        for i in range(steps + WARMUP_STEPS):
            t0 = time.perf_counter()
            with cast:
                loss = lm_loss(model(x[:, :-1]), x[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= WARMUP_STEPS or time.perf_counter() - t0 > SLOW_STEP_S:
                times.append(time.perf_counter() - t0)
            if time.perf_counter() - t0 > SLOW_STEP_S:
                break
        return statistics.median(times)
    finally:
        torch.set_num_threads(before)


def _val_batches(cfg: RunConfig, batches: int | None) -> float:
    """Validation batches of one evaluation; the full split is sized from the dataset file."""
    if batches is not None:
        return batches
    from ablate.data import resolve_dataset

    try:
        chars = resolve_dataset(cfg.data.dataset).stat().st_size
    except (ConfigError, OSError):  # e.g. an hf: dataset: its size is not known here
        return 0.0  # not counted: the estimate stays a floor
    per_token = {"char": 1.0, "word": 5.0}.get(cfg.data.tokenizer, 3.0)  # characters a token
    tokens = chars / per_token * cfg.data.val_fraction
    return tokens / ((cfg.data.eval_batch_size or cfg.data.batch_size) * cfg.data.seq_len)


def run_seconds(cfg: RunConfig, step_s: float) -> float:
    """Training steps plus evaluations (forward only: a third of a step per token)."""
    t, d = cfg.train, cfg.data
    forward = step_s / 3 * (d.eval_batch_size or d.batch_size) / d.batch_size
    evals = t.max_steps // t.eval_interval * _val_batches(cfg, t.eval_batches)
    final = _val_batches(cfg, t.final_eval_batches) * (1 + sum(t.eval_lengths))
    return t.max_steps * step_s + (evals + final) * forward


# --- the store's finished runs -------------------------------------------------------------


def store_rates(root: Path) -> dict[str, list[float]]:
    """Seconds per step, all-in, of every finished run in the store, by shape."""
    from ablate.store import RunStore

    out: dict[str, list[float]] = {}
    store = RunStore(root)
    for study in store.studies():
        for run in store.runs(study):
            s = run.read_summary() or {}
            wall, steps = s.get("wall_time_s"), s.get("steps")
            if s.get("status") != "completed" or not wall or not steps or s.get("stack"):
                continue  # a stacked member's wall time is its group's
            try:
                c = run.read_run()["config"]
                threads = int((s.get("environment") or {})["torch_threads"])
                key = _shape(c["model"], c["data"], c["train"], threads)
            except (KeyError, TypeError, ValueError):
                continue
            out.setdefault(key, []).append(float(wall) / float(steps))
    return out


# --- the probe, measured once per machine ---------------------------------------------------


def _cache_path() -> Path:
    from ablate.data.datasets import cache_dir

    return cache_dir() / CACHE_FILE


def _machine() -> str:
    import torch

    return f"{platform.node()}|{platform.machine()}|{os.cpu_count()}|torch {torch.__version__}"


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(data: dict[str, Any]) -> None:
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:  # a cache that cannot be written only costs a measurement next time
        pass


def _moment() -> dict[str, Any]:
    """When a measurement is taken and how busy the machine is (the 1-minute load average)."""
    from ablate.execution.worker import cpu_count

    load = round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    return {"measured": when, "load": load, "cores": cpu_count()}


def _kept(key: str, field: str, measure, remeasure: bool) -> tuple[float, dict[str, Any]]:
    """(value, its moment: :func:`_moment`) of the cache's ``key``, or measured now by
    ``measure()`` and kept."""
    cache = _read_cache()
    hit = cache.get(key)
    if hit and not remeasure:
        return float(hit[field]), {k: hit.get(k) for k in ("measured", "load", "cores")}
    moment = _moment()
    value = measure()
    cache = _read_cache()  # another plan may have kept something meanwhile
    cache[key] = {field: value, **moment}
    _write_cache(cache)
    return value, moment


def moments_text(moments: list[dict[str, Any]]) -> str:
    """``2026-11-28 01:12 at load 0.4-0.9 on 2 cores``: when measurements were taken and the
    range of the load average then (a measurement kept before loads were: not recorded)."""
    when = ", ".join(sorted({str(m["measured"]) for m in moments}))
    loads = sorted(m["load"] for m in moments if m.get("load") is not None)
    if not loads:
        return f"{when}, load not recorded"
    span = f"{loads[0]:.1f}" if loads[0] == loads[-1] else f"{loads[0]:.1f}-{loads[-1]:.1f}"
    cores = max(m.get("cores") or 0 for m in moments)
    return f"{when} at load {span} on {cores} cores"


def probed_step(
    cfg: RunConfig, device: str, threads: int, remeasure: bool
) -> tuple[float, dict[str, Any]]:
    """(seconds per step, its moment) of ``cfg``'s shape: the kept measurement of this
    machine, or a new one (kept)."""
    d = cfg.data
    key = "|".join(
        [_machine(), device, str(threads), cfg.train.precision, cfg.model.model_dump_json()]
        + [d.tokenizer, str(d.bpe_vocab_size), str(d.batch_size), str(d.seq_len)]
    )
    return _kept(key, "step_s", lambda: step_seconds(cfg, device, threads), remeasure)


def startup_seconds() -> float:
    """Wall seconds of a fresh interpreter importing what a worker imports before its first
    run (``executors.local.WORKER_IMPORTS``; one that is not installed is left out)."""
    from ablate.execution.executors.local import WORKER_IMPORTS

    code = "import importlib.util as u\n" + "".join(
        f"if u.find_spec({m.split('.')[0]!r}): import {m}\n" for m in WORKER_IMPORTS
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t0


def probed_startup(remeasure: bool) -> tuple[float, dict[str, Any]]:
    """(seconds of start-up, its moment): kept per machine like the step probe."""
    return _kept(f"startup|{_machine()}", "startup_s", startup_seconds, remeasure)


# --- the estimate ---------------------------------------------------------------------------


def estimate_runs(
    configs: dict[str, RunConfig],
    *,
    workers: int = 1,
    store: Path | None = None,
    remeasure: bool = False,
) -> Estimate:
    """Seconds for each run (run id -> config) with ``workers`` workers: from the store's
    finished runs of its shape where there are any, else from the kept probe."""
    rates = store_rates(store) if store is not None else {}
    probed: dict[tuple[str, int], tuple[float, dict]] = {}  # one probe per shape and call
    out: dict[str, float | None] = {}
    sources: dict[str, str] = {}
    when: list[dict[str, Any]] = []
    for run_id, cfg in configs.items():
        threads = _threads(cfg, workers)
        c = cfg.to_dict()
        have = rates.get(_shape(c["model"], c["data"], c["train"], threads))
        device = _device(cfg)
        if have:
            out[run_id], sources[run_id] = statistics.median(have) * cfg.train.max_steps, "store"
        elif device is None:
            out[run_id], sources[run_id] = None, "no GPU"
        else:
            key = (_shape(c["model"], c["data"], c["train"], threads), threads)
            if key not in probed:
                probed[key] = probed_step(cfg, device, threads, remeasure)
            step, measured = probed[key]
            out[run_id], sources[run_id] = run_seconds(cfg, step), "probe"
            when.append(measured)
    method = _method(sources, when, workers)
    try:
        startup, measured = probed_startup(remeasure)
    except (OSError, subprocess.CalledProcessError):  # e.g. torch missing: nothing trains here
        return Estimate(out, sources, workers, method)
    method += f"; start-up from a fresh interpreter's imports, measured {moments_text([measured])}"
    return Estimate(out, sources, workers, method, startup)


def _method(sources: dict[str, str], when: list[dict[str, Any]], workers: int) -> str:
    n = {k: sum(v == k for v in sources.values()) for k in ("store", "probe")}
    parts = []
    if n["store"]:
        parts.append(f"{n['store']} from finished runs of the same shape in the store")
    if n["probe"]:
        parts.append(
            f"{n['probe']} from a probe of this machine measured {moments_text(when)} "
            f"({PROBE_STEPS} timed steps per shape at a worker's threads, evaluations added; "
            "data, logging and checkpoints not: a floor; --remeasure measures again)"
        )
    return "; ".join(parts) or "nothing measurable here"


def makespan(seconds: Sequence[float], workers: int) -> float:
    """Wall time of ``seconds`` long runs handed out longest first to the next free worker."""
    free = [0.0] * max(1, workers)
    for s in sorted(seconds, reverse=True):
        i = free.index(min(free))
        free[i] += s
    return max(free)


def total_line(est: Estimate, todo: Sequence[str], fmt) -> str:
    """``'Time: about 12m for the 8 runs to train with 2 workers, 20m for all 12.'`` and where
    the per-run figures come from."""
    known = [est.seconds[r] for r in todo if est.seconds.get(r) is not None]
    every = [s for s in est.seconds.values() if s is not None]
    if not every:
        return f"Time: not measurable on this machine ({est.method})."
    w = est.workers
    who = "one at a time" if w == 1 else f"with {w} workers, as ablate run will"
    if est.startup:
        who += f"; {fmt(est.startup)} of start-up included"
    first = makespan(known, w) + (est.startup if todo else 0.0)
    text = f"Time: about {fmt(first)} for the {len(todo)} runs to train ({who})"
    if len(todo) != len(est.seconds):
        text += f", {fmt(makespan(every, w) + est.startup)} for all {len(est.seconds)}"
    missing = sum(1 for s in est.seconds.values() if s is None)
    if missing:
        text += f"; {missing} runs need a GPU this machine lacks (not counted)"
    return f"{text}.\nPer run: {est.method}."
