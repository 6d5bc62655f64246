"""How a run's fit is set up: the ``Trainer``, the run's threads, attention kernel and stop
requests, and how the attempt trains (``training_way``).

``make_trainer`` builds the one ``Trainer`` set-up of every fit (``ablate.training.train``);
``StepBoundaryStop`` and ``stoppable`` turn Ctrl-C (or the runner's SIGUSR1 in a worker) into
a stop at the next step boundary.
"""

from __future__ import annotations

import logging
import signal
import threading
import warnings
from contextlib import contextmanager, nullcontext
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.environments import LightningEnvironment

from ablate.accel import pick_backend
from ablate.config import RunConfig
from ablate.store import RunDir
from ablate.training.callbacks import LossBar
from ablate.training.checkpoints import ExceptionCheckpoint, MetricsFirst


def quiet_lightning() -> None:
    """Drop Lightning's start-up chatter so the progress bars stay readable."""
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*is an invalid version and will not be supported.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    # a cpu-profile run on a GPU machine: the study chose the CPU (seen on an H100 host)
    warnings.filterwarnings("ignore", ".*GPU available but not used.*")
    # a machine with SLURM installed (a login node): every run is one process by ablate's choice
    # (make_trainer), yet a fresh fit still asks Lightning's SLURM detection, which warns
    warnings.filterwarnings("ignore", ".*The `srun` command is available on your system.*")
    # manual optimization (``LitRuns``): a step's checkpoint holds the state after its update,
    # which is the state a resume continues from
    warnings.filterwarnings("ignore", ".*no pre-optimization state was saved.*")


@contextmanager
def torch_threads(n: int | None):
    """Run with ``n`` torch intra-op threads (``None``: leave as is), then restore the count."""
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def attn_kernel(cfg: RunConfig, device: torch.device) -> str:
    """The SDPA kernel this run attends with on ``device``: ``train.attn_backend``, or for
    ``auto`` the first kernel that can run the model (``ablate.accel.pick_backend``)."""
    return pick_backend(
        cfg.train.attn_backend,
        "cuda" if device.type == "cuda" else "cpu",
        precision=cfg.train.precision,
        attn_bias=cfg.model.pos_encoding == "alibi",
        head_dim=cfg.model.head_dim,
    )


def attn_context(cfg: RunConfig, device: torch.device):
    """Pin SDPA to the run's kernel. An explicit choice gets exactly that kernel (no silent
    fallback: the config validator already rejected what it cannot run); ``auto`` gets its
    pick with the math kernel as a fallback."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if cfg.model.arch != "transformer":
        return nullcontext()
    names = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    kernel = attn_kernel(cfg, device)
    chosen = [names[kernel]]
    if cfg.train.attn_backend == "auto" and kernel != "math":
        chosen.append(SDPBackend.MATH)
    return sdpa_kernel(chosen)


def training_way(cfg: RunConfig, members: int, device: torch.device) -> dict[str, Any]:
    """How a run trains in this attempt, as its summary records it (``training``): ``stack``
    (the members trained as one model, 1 solo), ``compile`` (``train.compile``),
    ``compile_mode`` (its mode, None eager) and ``cuda_graphs`` (``reduce-overhead`` on a CUDA
    device: on a CPU the mode adds no graphs). None of it is in the run id: runs of one id
    trained differently agree to float rounding, or in distribution only (docs/stacking.md)."""
    t = cfg.train
    return {
        "stack": members,
        "compile": t.compile,
        "compile_mode": t.compile_mode if t.compile else None,
        "cuda_graphs": t.compile and t.compile_mode == "reduce-overhead" and device.type == "cuda",
    }


class StepBoundaryStop:
    """A stop request during ``fit`` (Ctrl-C, or the runner's SIGUSR1 in a worker), which the
    module reads at the end of every step (``LitRuns.fit_ends``): the fit ends after the step
    that was running finished (its optimizer update, logging, any evaluation and a checkpoint).
    A KeyboardInterrupt raised wherever the signal lands could leave an optimizer update
    half-applied, and the resumed run would then differ from an uninterrupted one. A second
    request interrupts at once."""

    def __init__(self) -> None:
        self.requested = False

    def request(self) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True


_active_stop: StepBoundaryStop | None = None  # the run in ``fit`` in this process, if any


def request_stop() -> None:
    """Stop the run in progress: at the next step boundary while it trains, else at once."""
    if _active_stop is None:
        raise KeyboardInterrupt
    _active_stop.request()


def _sigint(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    request_stop()


@contextmanager
def stoppable(stop: StepBoundaryStop):
    """While training, route Ctrl-C to ``stop``, then put the caller's handler back (Lightning
    ignores SIGINT after an interrupt). A process that ignores SIGINT (a runner worker, stopped
    by SIGUSR1 instead) keeps ignoring it."""
    global _active_stop
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    route = main and previous is not signal.SIG_IGN
    _active_stop = stop
    if route:
        signal.signal(signal.SIGINT, _sigint)
    try:
        yield
    finally:
        _active_stop = None
        if route:
            signal.signal(signal.SIGINT, previous or signal.default_int_handler)


def make_trainer(
    cfg: RunConfig,
    run_dirs: list[RunDir],
    checkpoint_io: Any,
    *,
    progress: bool = False,
) -> pl.Trainer:
    """The ``Trainer`` of one fit of a group of runs (``run_dirs``, one for a solo run): it loops
    over the batches and runs the module's hooks under the run's precision; the module decides
    what each step does after its update and when the fit ends (``LitRuns.end_step``), and
    saves its checkpoints through ``checkpoint_io`` (each member's into its own directory).
    Here: a checkpoint when training stops on an exception, and the metrics fsynced before
    every checkpoint (``MetricsFirst``)."""
    t = cfg.train
    callbacks = [
        # a crash mid-run: keep what was trained so a re-run resumes from here
        ExceptionCheckpoint(dirpath=run_dirs[0].checkpoint_dir, filename="interrupted"),
    ]
    if progress:  # redrawn at the log steps, when the losses it shows change
        callbacks.append(LossBar(refresh_rate=t.log_interval, leave=False))
    return pl.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        precision=t.precision,
        max_steps=-1,  # the module ends the fit (its members' steps, stops and pauses)
        max_epochs=-1,
        limit_val_batches=0,  # the module evaluates at its members' steps
        num_sanity_val_steps=0,
        logger=False,  # each member logs to its own store and W&B run
        callbacks=callbacks,
        enable_progress_bar=progress,
        enable_model_summary=False,
        deterministic=t.deterministic and t.accelerator == "cpu",
        default_root_dir=str(run_dirs[0].path),
        plugins=[
            # each member's checkpoint written into its own directory, its metrics fsynced first
            MetricsFirst(checkpoint_io, run_dirs),
            # one process per run wherever it trains (a local worker, a Ray task, a SLURM array
            # task): ablate, not Lightning's SLURM detection, decides that; so a login node with
            # `srun` on the PATH prints no srun warning into the live progress lines, and a SLURM
            # requeue is submitit's (USR2), not Lightning's auto-requeue
            LightningEnvironment(),
        ],
    )
