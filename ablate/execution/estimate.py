"""How long a study's runs will take on this machine, for ``ablate plan``: a measured probe.

Each distinct training shape (model, batch x sequence length, precision, threads) is built
here and timed for ``PROBE_STEPS`` AdamW steps on random tokens, after one untimed step; the
median step is the figure. A run's estimate is its steps times that, plus its evaluations:
forward passes (a third of a training step per token: no backward, no update) over the
validation batches of every ``eval_interval`` and of the final evaluation (the full split
when ``eval_batches`` is unset, sized from the dataset file; each ``eval_lengths`` multiple
once more). Data loading, logging and checkpoints are not in it, so it is a floor; the bench
(``reports/bench.md``, section 1) measures what the training loop adds on top. The probe
runs under the machine's current load, which the printed line states (other processes on
the same cores slow it as they would slow the runs).

A run that asks for a GPU on a machine without one is not measured (its time is unknown).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

from ablate.config import ConfigError, RunConfig

PROBE_STEPS = 3
SLOW_STEP_S = 5.0  # a step slower than this is timed once: the probe must stay short
VOCAB = {"char": 96, "word": 16384}  # typical sizes (a BPE tokenizer states its own)


@dataclass(frozen=True)
class Estimate:
    """Seconds per run (None: not measurable here) and how they were obtained."""

    seconds: dict[str, float | None]
    method: str


def _shape_key(cfg: RunConfig) -> str:
    d, t = cfg.data, cfg.train
    return "|".join(
        [cfg.model.model_dump_json(), d.tokenizer, str(d.bpe_vocab_size), str(d.batch_size)]
        + [str(d.seq_len), t.precision, str(t.threads), t.accelerator]
    )


def _device(cfg: RunConfig) -> str | None:
    """Where the run trains: ``cpu``, ``cuda``, or None when it needs a GPU this machine lacks."""
    import torch

    if cfg.train.accelerator == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu" if cfg.train.accelerator == "auto" else None


def step_seconds(cfg: RunConfig, device: str, steps: int = PROBE_STEPS) -> float:
    """The median seconds of one training step of ``cfg``'s model and batch on ``device``."""
    import torch

    from ablate.model import build_model
    from ablate.training.lit import lm_loss

    vocab = cfg.data.bpe_vocab_size if cfg.data.tokenizer == "bpe" else VOCAB[cfg.data.tokenizer]
    threads = torch.get_num_threads()
    if cfg.train.threads and device == "cpu":
        torch.set_num_threads(cfg.train.threads)
    try:
        model = build_model(cfg.model, vocab).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        x = torch.randint(vocab, (cfg.data.batch_size, cfg.data.seq_len + 1), device=device)
        half = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(cfg.train.precision)
        cast = torch.autocast(device, dtype=half) if half else nullcontext()
        times: list[float] = []
        for i in range(steps + 1):
            t0 = time.perf_counter()
            with cast:
                loss = lm_loss(model(x[:, :-1]), x[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
            if i:
                times.append(time.perf_counter() - t0)
            if time.perf_counter() - t0 > SLOW_STEP_S and times:
                break
        return statistics.median(times)
    finally:
        torch.set_num_threads(threads)


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


def estimate_runs(configs: dict[str, RunConfig]) -> Estimate:
    """Seconds for each run (run id -> config), each distinct shape probed once."""
    steps: dict[str, float | None] = {}
    devices = set()
    out: dict[str, float | None] = {}
    for run_id, cfg in configs.items():
        key = _shape_key(cfg)
        if key not in steps:
            device = _device(cfg)
            steps[key] = None if device is None else step_seconds(cfg, device)
            devices.add(device or "no GPU here")
        step = steps[key]
        out[run_id] = None if step is None else run_seconds(cfg, step)
    shapes = sum(1 for s in steps.values() if s is not None)
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    method = (
        f"measured now on this machine: {PROBE_STEPS} timed steps of each of {shapes} model "
        f"shape(s) on {'/'.join(sorted(devices))}{load} (random tokens; evaluations added; data "
        "loading, logging and checkpoints not: a floor for this load)"
    )
    return Estimate(out, method)


def total_line(est: Estimate, todo: Sequence[str], fmt) -> str:
    """``'about 12m for 8 runs to train (one at a time), 20m for all 12'`` and the method."""
    known = [est.seconds[r] for r in todo if est.seconds.get(r) is not None]
    every = [s for s in est.seconds.values() if s is not None]
    if not every:
        return f"Time: not measurable on this machine ({est.method})."
    text = f"Time: about {fmt(sum(known))} for the {len(todo)} runs to train (one at a time)"
    if len(todo) != len(est.seconds):
        text += f", {fmt(sum(every))} for all {len(est.seconds)}"
    missing = sum(1 for s in est.seconds.values() if s is None)
    if missing:
        text += f"; {missing} runs need a GPU this machine lacks (not counted)"
    return f"{text}.\nPer run: {est.method}."
