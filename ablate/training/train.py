"""Train one run into its store directory: resume, divergence, final evaluation, summary.

``make_trainer`` builds the one ``Trainer`` set-up of every run, solo (``train_run``) or a
stacked group's (``ablate.training.stacked.group``): checkpoints on an interval, on an
exception and at the end; ``progress.json``; stop requests at step boundaries. The per-step
metrics are ``ablate.training.lit.LitRuns``'s, the final evaluation ``finish_run``'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import signal
import threading
import time
import warnings
from collections.abc import Iterable
from contextlib import contextmanager, nullcontext
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.plugins.environments import LightningEnvironment

from ablate.accel import pick_backend
from ablate.config import ConfigError, RunConfig
from ablate.data import LMDataModule
from ablate.store import RunDir
from ablate.store.attempt import RunAttempt
from ablate.store.provenance import environment
from ablate.tracking.runs import finish_wandb_run, start_solo_wandb
from ablate.training.callbacks import LossBar, ProgressFile
from ablate.training.checkpoints import (
    AtomicCheckpointIO,
    ExceptionCheckpoint,
    FinalCheckpoint,
    MetricsFirst,
    select_checkpoint,
)
from ablate.training.inputs import run_inputs
from ablate.training.lit import LitLM
from ablate.training.precision import compute_dtypes
from ablate.training.step import lm_loss
from ablate.training.store_logger import StoreLogger

log = logging.getLogger("ablate")


def quiet_lightning() -> None:
    """Drop Lightning's start-up chatter so the progress bars stay readable."""
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*checkpoint.*not found.*")
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


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Iterable, max_batches: int | None = None) -> float:
    """Mean token cross-entropy (nats) of ``model`` over (x, y) batches."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    # summed on the device in float64: one host sync at the end, not one per batch
    total, n = torch.zeros((), dtype=torch.float64, device=device), 0
    for i, (x, y) in enumerate(batches):
        if max_batches is not None and i >= max_batches:
            break
        total += lm_loss(model(x.to(device)), y.to(device)).double()
        n += 1
    model.train(was_training)
    return total.item() / n if n else math.nan


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


class StepBoundaryStop(pl.Callback):
    """A stop request during ``fit`` (Ctrl-C, or the runner's SIGUSR1 in a worker) takes effect
    at the start of the next training step, after the last one finished (its optimizer update,
    logging and any evaluation). A KeyboardInterrupt raised wherever the signal lands could
    leave an optimizer update half-applied in the ``interrupted`` checkpoint, and the resumed
    run would then differ from an uninterrupted one. A second request interrupts at once."""

    def __init__(self) -> None:
        self.requested = False

    def request(self) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.requested:
            raise KeyboardInterrupt


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
    run_dir: RunDir,
    loggers: list,
    *,
    progress: bool,
    stop: StepBoundaryStop | None = None,
    member_dirs: list[RunDir] | None = None,
    checkpoint_io: Any = None,
    callbacks: Iterable[pl.Callback] = (),
) -> pl.Trainer:
    """The ``Trainer`` of ``run_dir``'s run, or of a stacked group whose members' directories
    are ``member_dirs`` (a ``progress.json`` each; ``checkpoint_io`` writes each member's
    checkpoint into its own directory, under the name Lightning gives ``run_dir``'s)."""
    t = cfg.train
    ckpt = ModelCheckpoint(
        dirpath=run_dir.checkpoint_dir,
        save_last=True,
        save_top_k=0,
        every_n_train_steps=t.checkpoint_interval,
        save_on_train_epoch_end=False,
    )
    # progress.json of each run: the driver's live line
    progress_file = ProgressFile([d.path for d in member_dirs or [run_dir]], t.log_interval)
    callbacks = [
        ckpt,
        # Ctrl-C or a crash mid-run: keep what was trained so a re-run resumes from here
        ExceptionCheckpoint(dirpath=run_dir.checkpoint_dir, filename="interrupted"),
        FinalCheckpoint(run_dir.checkpoint_dir),  # the end of training, off the interval too
        progress_file,
        *callbacks,
    ]
    if progress:  # after ProgressFile, whose hook reads the log step's loss it shows
        callbacks.append(LossBar(refresh_rate=t.log_interval, leave=False))
    if stop is not None:
        callbacks.append(stop)
    return pl.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        precision=t.precision,
        max_steps=t.max_steps,
        max_epochs=-1,
        val_check_interval=t.eval_interval,
        check_val_every_n_epoch=None,
        limit_val_batches=t.eval_batches if t.eval_batches is not None else 1.0,
        num_sanity_val_steps=0,
        log_every_n_steps=t.log_interval,
        logger=loggers,
        callbacks=callbacks,
        enable_progress_bar=progress,
        enable_model_summary=False,
        deterministic=t.deterministic and t.accelerator == "cpu",
        default_root_dir=str(run_dir.path),
        plugins=[
            # same-directory temp file + fsync + rename, the runs' metrics fsynced first
            MetricsFirst(
                checkpoint_io if checkpoint_io is not None else AtomicCheckpointIO(),
                member_dirs or [run_dir],
            ),
            # one process per run wherever it trains (a local worker, a Ray task, a SLURM array
            # task): ablate, not Lightning's SLURM detection, decides that; so a login node with
            # `srun` on the PATH prints no srun warning into the live progress lines, and a SLURM
            # requeue is submitit's (USR2), not Lightning's auto-requeue
            LightningEnvironment(),
        ],
    )


def train_run(
    cfg: RunConfig,
    run_dir: RunDir,
    meta: dict[str, Any] | None = None,
    *,
    progress: bool | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Train (or resume) one run in ``run_dir`` and return its summary (``workers``: how many
    runs of its study train at once, recorded in its environment).

    Writes ``run.yaml`` once, ``summary.json`` with status ``running`` while training and then
    ``completed``/``diverged``/``failed``; metrics stream to ``metrics.csv`` and W&B. A
    non-finite loss ends the run as ``diverged`` with the step; an exception ends it as
    ``failed`` with the error (re-raised for KeyboardInterrupt so the caller can stop).
    """
    from ablate.model.plugins import load_plugins

    # another process (a worker, a cluster job) imports the study's plugins again
    load_plugins((meta or {}).get("plugins"), key="meta.plugins", source=run_dir.run_file)
    progress = cfg.train.progress if progress is None else progress
    quiet_lightning()
    attempt = RunAttempt.start(cfg, run_dir, meta, time.time(), inputs=run_inputs(cfg))
    summary = attempt.summary  # filled in while training; attempt.write() stores it
    wandb_logger = None
    wandb_wait = 0.0  # a slow or dead W&B server is not train time
    stop = StepBoundaryStop()
    try:
        with torch_threads(cfg.train.threads):
            dm, lit, ckpt_path = prepare_run(cfg, attempt, workers)
            t_wandb = time.time()
            wandb_logger = _wandb_logger(cfg, run_dir, attempt.meta, summary)
            wandb_wait += time.time() - t_wandb
            loggers = [StoreLogger(run_dir), *([wandb_logger] if wandb_logger else [])]
            trainer = make_trainer(cfg, run_dir, loggers, progress=progress, stop=stop)
            _fit(cfg, lit, dm, trainer, ckpt_path, stop, attempt)
    except ResumeMismatch:
        # bad input, not a failed run: put back what the store said and touch nothing else
        attempt.restore()
        raise
    except (KeyboardInterrupt, SystemExit):
        # Ctrl-C (Lightning turns it into SystemExit) or SIGTERM: an "interrupted" checkpoint
        # was saved; the run stays "running" so the next `ablate run` resumes it
        attempt.interrupted(wandb_wait)
        raise
    except Exception as err:  # noqa: BLE001 - a failed run must not stop a study
        if isinstance(err, OSError) and err.errno is not None:  # e.g. a full disk: one line
            log.error("run %s failed: %s", run_dir.run_id, err)
        else:
            log.exception("run %s failed", run_dir.run_id)
        attempt.failed(err)
    finally:
        if wandb_logger is not None:
            t_close = time.time()
            finish_wandb_run(wandb_logger, summary)
            wandb_wait += time.time() - t_close
    summary["wall_time_s"] = attempt.wall_time(wandb_wait)
    if wandb_wait:
        summary["wandb_wait_s"] = round(wandb_wait, 3)
    attempt.write()
    if stop.requested:  # asked to stop during the last step: the run finished, the study stops
        raise KeyboardInterrupt
    return summary


def prepare_run(
    cfg: RunConfig, attempt: RunAttempt, workers: int = 1
) -> tuple[LMDataModule, LitLM, Any]:
    """Data, model and the checkpoint to resume from (checked against the data), with the
    run's sizes and environment (``workers``: runs training at once) recorded in the attempt's
    summary; metrics after the resumed step are dropped."""
    pl.seed_everything(cfg.train.seed, workers=True, verbose=False)
    dm = LMDataModule(cfg.data, seed=cfg.train.seed)
    dm.setup("fit")
    torch.manual_seed(cfg.train.seed)
    lit = LitLM(cfg, dm.vocab_size, bits_per_token=dm.is_char)
    lit.clocks = [attempt.wall_time]
    counts = lit.model.param_counts()
    attempt.write(
        params=counts["total"],
        params_non_embedding=counts["non_embedding"],
        flops_per_token=lit.model.flops_per_token(cfg.data.seq_len),
        vocab_size=dm.vocab_size,
        lr=cfg.lr,
        environment=environment(cfg.train.accelerator, workers),  # threads/workers/versions
    )
    # corrupt checkpoints are renamed *.corrupt (set aside) and named in the summary
    ckpt_path, step, set_aside = select_checkpoint(attempt.run_dir.checkpoint_dir)
    attempt.summary["tokenizer_sha256"] = tokenizer_digest(dm.tokenizer)
    attempt.save_tokenizer(dm.tokenizer)
    if ckpt_path is not None:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        check_resume(ckpt, dm, attempt.prior, attempt.run_dir)  # same vocabulary and tokenizer
        del ckpt
    attempt.resume(step if ckpt_path is not None else None, set_aside)
    lit.resume_early_stopping([val_history(attempt.run_dir)])
    return dm, lit, ckpt_path


def val_history(run_dir: RunDir) -> list[float]:
    """The val/loss values the run has logged so far (its store's)."""
    return [v for _, name, v in run_dir.read_metrics() if name == "val/loss"]


def _wandb_logger(cfg: RunConfig, run_dir: RunDir, meta: dict[str, Any], summary: dict[str, Any]):
    """The run's W&B logger (None when tracking is off), named and grouped like the run."""
    wandb_logger = start_solo_wandb(cfg, run_dir, meta, summary["name"])
    if wandb_logger is not None:
        summary["wandb_dir"] = str(wandb_logger.experiment.dir)
    return wandb_logger


def _fit(
    cfg: RunConfig,
    lit: LitLM,
    dm: LMDataModule,
    trainer: pl.Trainer,
    ckpt_path: Any,
    stop: StepBoundaryStop,
    attempt: RunAttempt,
) -> None:
    """Fit (from ``ckpt_path`` when resuming) and evaluate at the end, into the summary."""
    device = trainer.strategy.root_device
    summary = attempt.summary
    attempt.trains(training_way(cfg, 1, device))
    summary["attn_kernel"] = attn_kernel(cfg, device) if cfg.model.arch == "transformer" else None
    with attn_context(cfg, device):
        with stoppable(stop):
            trainer.fit(lit, datamodule=dm, ckpt_path=str(ckpt_path) if ckpt_path else None)
        # Lightning's teardown moved the model to the CPU: the final evaluation (and the
        # compute dtypes it measures) belongs on the training device, under the training
        # precision (autocast), like validation
        lit.model.to(device)
        with trainer.precision_plugin.forward_context():
            summary.update(
                finish_run(
                    cfg, lit.model, dm, attempt.run_dir,
                    steps=int(trainer.global_step), tokens_per_s=lit.tokens_per_s,
                    diverged_step=lit.diverged_step[0],
                )
            )  # fmt: skip


class ResumeMismatch(ConfigError):
    """The run's checkpoint was trained on other token ids than the data gives now."""


def tokenizer_digest(tok) -> str:
    """sha256 (16 hex) of the tokenizer's saved state: same ids for the same text iff equal."""
    blob = json.dumps(tok.to_dict(), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_resume(ckpt: dict, dm: LMDataModule, prior: dict, run_dir: RunDir) -> None:
    """Refuse to resume from a checkpoint whose vocabulary or tokenizer differs from the data's
    (e.g. the data file was edited in place): ``ResumeMismatch`` naming the cause."""
    emb = next(
        (v for k, v in ckpt.get("state_dict", {}).items() if k.endswith("tok_emb.weight")), None
    )
    where = f"cannot resume run {run_dir.run_id} ({run_dir.path})"
    if emb is not None and emb.shape[0] != dm.vocab_size:
        raise ResumeMismatch(
            f"{where}: its checkpoint has a vocabulary of {emb.shape[0]} tokens but the data "
            f"now gives {dm.vocab_size} (data file or tokenizer changed)",
            key="data.dataset",
        )
    before = prior.get("tokenizer_sha256")
    if before and before != tokenizer_digest(dm.tokenizer):
        raise ResumeMismatch(
            f"{where}: the tokenizer differs from the one it was trained with "
            "(data file or tokenizer changed)",
            key="data.tokenizer",
        )


def finish_run(
    cfg: RunConfig,
    model: torch.nn.Module,
    dm: LMDataModule,
    run_dir: RunDir,
    *,
    steps: int,
    tokens_per_s: float | None,
    diverged_step: int | None,
) -> dict[str, Any]:
    """Summary fields after training, solo or a stacked member: ``finish_summary`` with the
    val/loss history of the run's store. Called under the run's precision context."""
    return finish_summary(
        cfg,
        model,
        dm,
        steps=steps,
        tokens_per_s=tokens_per_s,
        val_history=val_history(run_dir),
        diverged_step=diverged_step,
    )


def finish_summary(
    cfg: RunConfig,
    model: torch.nn.Module,
    dm: LMDataModule,
    *,
    steps: int,
    tokens_per_s: float | None,
    val_history: list[float],
    diverged_step: int | None,
) -> dict[str, Any]:
    """Summary fields of a trained ``model``: final full-split evaluation, extrapolation,
    divergence (``val_history``: the val/loss values logged while training), and the dtypes
    it computes in (``precision.compute_dtypes``). Called under the run's precision context."""
    out: dict[str, Any] = {"steps": steps, "tokens_per_s": tokens_per_s}
    x, y = next(iter(dm.val_dataloader()))
    device = next(model.parameters()).device
    out["compute_dtypes"] = compute_dtypes(model, x[:1].to(device), y[:1].to(device), lm_loss)
    history = val_history
    if diverged_step is not None:
        out.update(status="diverged", diverged_step=diverged_step)
        out["best_val_loss"] = min((v for v in history if math.isfinite(v)), default=None)
        out["final_val_loss"] = None
        return out
    final = evaluate(model, dm.val_dataloader(), cfg.train.final_eval_batches)
    if not math.isfinite(final):
        out.update(status="diverged", diverged_step=steps, final_val_loss=None)
        return out
    out.update(
        status="completed",
        final_val_loss=final,
        best_val_loss=min([final, *(v for v in history if math.isfinite(v))]),
        final_val_ppl=math.exp(min(final, 50)),
        stopped_early=bool(steps < cfg.train.max_steps),
    )
    if dm.is_char:
        out["final_val_bpc"] = final / math.log(2)
    lengths: dict[str, float | None] = {}
    for mult in cfg.train.eval_lengths:
        seq = int(round(mult * cfg.data.seq_len))
        limit = getattr(model, "max_len", None)
        if limit is not None and seq > limit:
            lengths[f"{mult:g}"] = None  # e.g. learned positions: no table past max_seq_len
            continue
        try:
            batches = dm.eval_windows("val", seq)
        except Exception:  # noqa: BLE001 - a split too short for this length
            lengths[f"{mult:g}"] = None
            continue
        lengths[f"{mult:g}"] = evaluate(model, batches, cfg.train.final_eval_batches)
    if lengths:
        out["val_loss_at_length"] = lengths
    return out
