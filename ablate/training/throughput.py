"""A run's own training clock: tokens/s between log steps, evaluations left out.

A GPU runs behind the host: when the host reaches a log step, the steps it queued may still be
running. A clock read there counts steps the device has not done, and a stack's tokens/s came
out ~40% above the wall clock's (the GPU probe, k = 8). So every clock read here comes after
the device has caught up: a log step's ``lap`` after the log step's one host read (which waits
for the device), ``start`` and ``pause`` after a sync of their own; an evaluation's time (from
``pause`` to ``resume``, which comes after the evaluation's host read) is left out. Intervals
are back to back: the host's own work between two log steps (logging, a checkpoint) is
training time, as on the wall clock.

Not part of the code fingerprint (``ablate.store.provenance.CODE_FILES``): it times training,
it computes nothing a run's numbers depend on.
"""

from __future__ import annotations

import time

import torch


def device_sync(device: torch.device) -> None:
    """Wait until ``device`` has done the work queued on it (a CPU computes at once)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Throughput:
    """Tokens/s of a fit from log step to log step (``tokens_per_step``: all of one member's
    tokens a step), evaluation time excluded; see the module docstring."""

    def __init__(self, tokens_per_step: int):
        self.tokens_per_step = tokens_per_step
        self._t: float | None = None  # the clock at the last lap (or the start)
        self._step = 0
        self._paused: float | None = None

    def start(self, step: int, device: torch.device) -> None:
        """Training starts (or resumes) at ``step``."""
        device_sync(device)
        self._t, self._step = time.perf_counter(), step

    def lap(self, step: int) -> float | None:
        """Tokens/s since the last lap: call it after the log step's host read. None at the
        start's own step or before ``start``."""
        now = time.perf_counter()
        rate = None
        if self._t is not None and step > self._step and now > self._t:
            rate = (step - self._step) * self.tokens_per_step / (now - self._t)
        self._t, self._step = now, step
        return rate

    def pause(self, device: torch.device) -> None:
        """An evaluation starts: the training steps queued before it count as training."""
        device_sync(device)
        self._paused = time.perf_counter()

    def resume(self) -> None:
        """The evaluation has ended (after its host read): its time is not training time."""
        if self._t is not None and self._paused is not None:
            self._t += time.perf_counter() - self._paused
        self._paused = None
