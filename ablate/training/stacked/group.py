"""Train a group of runs as one stacked model in one process.

A study's seeds and LR sweeps are many small runs of one shape; ``train_group`` trains them
together (``ablate.training.stacked.ops``: ``torch.func.stack_module_state`` + ``vmap``, the
model code unchanged) while each member stays a run: its own initial weights (the solo run's
seeding sequence, ``train.prepare_run``), data order (its seed's ``LMDataModule`` stream), LR
schedule (``lit.lr_factor``), gradient clipping, AdamW state, evaluation, metrics (the names and
steps ``LitLM`` logs), checkpoint, ``summary.json`` (``train.finish_summary``) and
``progress.json`` in its own ``RunDir``. A member that finishes (diverged, stopped early)
while others go on leaves the stack: the group is rebuilt from the others' state in memory, as
a resume would build it.

What stacking keeps equal to a solo run (CPU, fp32): each member computes exactly the solo
operations on its own tensors (vmap maps ``mm`` to a batched ``bmm``), so losses agree with
the solo run's to float rounding (a batched matmul adds in another order than the solo one);
``tests/training/test_stacked.py`` states the tolerance. A member whose loss becomes non-finite
is frozen at once (its update masked on the device, no host sync) and, like ``LitLM``, found at
the next log step and recorded ``diverged`` at the step of the first non-finite loss; the others
go on unchanged. Members resume from their own checkpoints, even at different steps.

Each member logs to W&B through its own run object (``ablate.tracking.runs``). Not (yet) here:
``16-mixed``/``bf16-true`` precision, dropout equal to a solo run's masks (vmap draws its own).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch

from ablate.config import ConfigError, RunConfig
from ablate.data import LMDataModule
from ablate.store import FINISHED, RunDir
from ablate.store.attempt import RunAttempt
from ablate.store.rundir import PROGRESS_FILE, write_progress
from ablate.tracking.runs import finish_wandb_run, log_member, start_member_wandb
from ablate.training.adamw import MemberAdamW, decay_groups, lr_of
from ablate.training.inputs import run_inputs
from ablate.training.lit import LitLM
from ablate.training.stacked.ops import Stack
from ablate.training.stacked.plan import MEMBER_FIELDS, PRECISIONS, stack_key
from ablate.training.stacked.store import (
    LAST,
    CheckpointWriter,
    member_checkpoint,
    state_dict_keys,
)
from ablate.training.train import (
    StepBoundaryStop,
    attn_context,
    attn_kernel,
    finish_summary,
    prepare_run,
    quiet_lightning,
    stoppable,
    torch_threads,
)

log = logging.getLogger("ablate")


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}".lstrip("."))
    return path


def check_group(cfgs: list[RunConfig]) -> None:
    """``ConfigError`` (one line, naming the key) unless ``cfgs`` can train as one group."""
    if not cfgs:
        raise ConfigError("a stacked group needs at least one run", key="train.stack")
    first = json.loads(stack_key(cfgs[0]))
    for cfg in cfgs[1:]:
        other = json.loads(stack_key(cfg))
        if other != first:
            key = _first_difference(first, other)
            raise ConfigError(
                "runs of one stacked group may differ only in train.seed and "
                f"optim.{{{', '.join(MEMBER_FIELDS['optim'])}}}",
                key=key,
            )
    t = cfgs[0].train
    if t.precision not in PRECISIONS:
        raise ConfigError(
            f"stacked training supports precision {', '.join(PRECISIONS)}, not {t.precision}",
            key="train.precision",
        )
    if t.devices != 1:
        raise ConfigError("stacked training uses one device", key="train.devices")


@dataclass
class Member:
    """One run of the group: its store, data, model and loop state."""

    cfg: RunConfig
    run_dir: RunDir
    summary: dict[str, Any]
    dm: LMDataModule
    lit: LitLM
    attempt: RunAttempt  # the writer of the member's run directory
    step: int = 0
    start_step: int = 0
    loop: dict[str, Any] = field(default_factory=dict)  # restored loop state (checkpoint)
    optimizer: dict | None = None  # restored AdamW state_dict
    batches: Iterator | None = None
    stopped_early: bool = False
    diverged_step: int | None = None
    done: bool = False
    progress: dict[str, Any] = field(default_factory=dict)
    wandb: Any = None  # the member's own W&B run object (ablate.tracking.runs), or None

    def lr(self, step: int) -> float:
        return lr_of(self.cfg, step)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run_dir.append_metrics(step, metrics)
        log_member(self.wandb, metrics, step)

    def close_wandb(self) -> None:
        run, self.wandb = self.wandb, None
        finish_wandb_run(run, self.summary)

    def write_progress(self, **fields: Any) -> None:
        self.progress.update(fields, updated=time.time())
        try:
            write_progress(self.run_dir.path / PROGRESS_FILE, self.progress)
        except OSError:  # a display hint must never fail a run
            pass


def _open_member(cfg: RunConfig, run_dir: RunDir, meta: dict[str, Any], t0: float) -> Member:
    """Write ``run.yaml`` and the ``running`` summary, build data and model exactly as a solo
    run does, and read the member's checkpoint (if any) into its model."""
    from ablate.model.plugins import load_plugins

    load_plugins((meta or {}).get("plugins"), key="meta.plugins", source=run_dir.run_file)
    attempt = RunAttempt.start(cfg, run_dir, meta, t0, inputs=run_inputs(cfg))
    summary = attempt.summary
    dm, lit, ckpt_path = prepare_run(cfg, attempt)
    member = Member(cfg, run_dir, summary, dm, lit, attempt)
    member.wandb = start_member_wandb(cfg, run_dir, attempt.meta, summary["name"])
    if member.wandb is not None:
        summary["wandb_dir"] = str(member.wandb.dir)
    if ckpt_path is not None:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        lit.load_state_dict(ckpt["state_dict"])  # LitLM handles compiled-model keys
        member.step = member.start_step = int(ckpt["global_step"])
        member.optimizer = (ckpt.get("optimizer_states") or [None])[0]
        member.loop = ckpt.get("stacked") or {}
    return member


def _device(cfg: RunConfig) -> torch.device:
    want = cfg.train.accelerator
    if want == "gpu" or (want == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


class Group:
    """The stacked state of the members that still train, and one step of all of them."""

    def __init__(self, members: list[Member], device: torch.device, fold: bool):
        self.members, self.device = members, device
        cfgs = [m.cfg for m in members]
        models = [m.lit.model.to(device) for m in members]
        self.fold = fold
        self.stack = Stack(models, fold_attention=fold, compile=cfgs[0].train.compile)
        names = {id(p): n for n, p in models[0].named_parameters()}
        decay, other = (g["params"] for g in decay_groups(models[0], 1.0))
        order = [self.stack.params[names[id(p)]] for p in [*decay, *other]]
        # the solo run's optimizer path; its mask ``active``: the members finite so far
        self.opt = MemberAdamW(order, cfgs, len(decay))
        self.keys = state_dict_keys(members[0].lit)
        k = len(members)
        self.nonfinite = torch.full((k,), -1, dtype=torch.long, device=device)
        self.loss_sum = torch.zeros(k, dtype=torch.float32, device=device)
        self.loss_n = [0] * k
        self.es = [(math.inf, 0)] * k  # early stopping: (best val/loss, evaluations since)
        self._restore()

    def _restore(self) -> None:
        for i, m in enumerate(self.members):
            if m.optimizer:
                self.opt.load_member(i, m.optimizer)
            loop = m.loop
            if "loss_sum" in loop:
                self.loss_sum[i] = loop["loss_sum"]
                self.loss_n[i] = int(loop["loss_n"])
                self.nonfinite[i] = int(loop["nonfinite_step"])
                self.opt.active[i] = int(loop["nonfinite_step"]) < 0
                self.es[i] = (float(loop["es_best"]), int(loop["es_wait"]))
            m.batches = _endless(m.dm, m.step)
        self.opt.start_at([m.step for m in self.members])
        rng = [m.loop.get("rng") for m in self.members]
        if rng[0] is not None and all(m.step == self.members[0].step for m in self.members):
            torch.set_rng_state(rng[0])  # dropout masks continue as uninterrupted

    def snapshot(self, i: int) -> dict[str, Any]:
        """Member ``i``'s checkpoint dict, copied off the device now."""
        m = self.members[i]
        loop = {
            "loss_sum": float(self.loss_sum[i]),
            "loss_n": self.loss_n[i],
            "nonfinite_step": int(self.nonfinite[i]),
            "es_best": self.es[i][0],
            "es_wait": self.es[i][1],
            "rng": torch.get_rng_state(),
        }
        o = m.cfg.optim
        hyper = {
            "lr": m.lr(m.step),
            "betas": (o.beta1, o.beta2),
            "eps": o.eps,
            "weight_decay": o.weight_decay,
        }
        return member_checkpoint(
            self.stack.member_tensors(i), self.keys, m.step, self.opt.member_state(i, hyper), loop
        )


def _endless(dm: LMDataModule, start: int) -> Iterator:
    """The member's training batches from global batch ``start`` on, epoch after epoch."""
    loader = dm.train_dataloader(start=start)
    while True:
        yield from loader


def _step_done(steps: list[int]) -> None:
    """Called after every step of a group with the members' steps: one place for tests to
    inject a stop or a crash at a chosen step."""


def _to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``batch`` on ``device``; on CUDA from pinned memory, without waiting for the copy."""
    if device.type != "cuda":
        return batch
    return batch.pin_memory().to(device, non_blocking=True)


def _train_step(g: Group) -> None:
    """One optimizer step of every member (a diverged member's update is masked). Nothing is
    read back to the host: the mask, the steps and the losses stay on the device."""
    ms, dev = g.members, g.device
    xs, ys = zip(*(next(m.batches) for m in ms), strict=True)
    x, y = _to_device(torch.stack(xs), dev), _to_device(torch.stack(ys), dev)
    autocast = ms[0].cfg.train.precision == "bf16-mixed"
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
        losses = g.stack.losses(x, y)
    losses.sum().backward()  # members share no operation: each gets its own loss's gradient
    loss = losses.detach().float()
    finite = torch.isfinite(loss)
    g.nonfinite = torch.where(~finite & (g.nonfinite < 0), g.opt.at.view(-1), g.nonfinite)
    g.opt.active &= finite.view(-1, 1)  # frozen from its first non-finite loss on
    g.loss_sum += loss
    interval = ms[0].cfg.train.grad_norm_interval
    due = [i for i, m in enumerate(ms) if interval and m.step % interval == 0]
    if due:  # before clipping, at the step whose gradients they are (as LitLM)
        norms = g.stack.grad_norms()
        values = torch.stack(list(norms.values()), 1).tolist()
        for i in due:
            ms[i].log(dict(zip(norms, values[i], strict=True)), ms[i].step)
    g.opt.step()
    g.opt.zero_grad(set_to_none=True)
    for i, m in enumerate(ms):
        m.step += 1
        g.loss_n[i] += 1


def _log_train(g: Group, due: list[int], clock: dict) -> None:
    """LitLM's log-interval metrics of the ``due`` members; divergence found here."""
    if not due:  # the read below waits for the device: only at log steps
        return
    n = torch.tensor([max(c, 1) for c in g.loss_n], dtype=torch.float32, device=g.device)
    means, bad = torch.stack([g.loss_sum / n, g.nonfinite.to(g.loss_sum)]).tolist()
    now = time.perf_counter()
    for i in due:
        m = g.members[i]
        metrics = {"train/loss": means[i], "lr": m.lr(m.step)}
        t_last, step_last = clock[i]
        if m.step > step_last:
            tokens = (m.step - step_last) * m.cfg.data.batch_size * m.cfg.data.seq_len
            m.summary["tokens_per_s"] = metrics["perf/tokens_per_s"] = tokens / (now - t_last)
        m.log(metrics, m.step)
        clock[i] = (time.perf_counter(), m.step)
        g.loss_sum[i], g.loss_n[i] = 0.0, 0
        m.write_progress(step=m.step, loss=means[i], phase="train")
        if bad[i] >= 0:
            m.diverged_step, m.done = int(bad[i]), True


def _validate(g: Group, due: list[int], clock: dict) -> None:
    """Validation of the ``due`` members (LitLM's metrics) and their early stopping."""
    t0 = time.perf_counter()
    m0 = g.members[0]
    for i in due:
        g.members[i].write_progress(phase="eval")
    batches = itertools.islice(m0.dm.val_dataloader(), m0.cfg.train.eval_batches)
    autocast = m0.cfg.train.precision == "bf16-mixed"
    with torch.autocast(g.device.type, dtype=torch.bfloat16, enabled=autocast):
        values = g.stack.eval_losses(batches).tolist()
    for i in due:
        m, value = g.members[i], values[i]
        metrics = {"val/loss": value, "val/ppl": math.exp(min(value, 50.0))}
        if m.dm.is_char:
            metrics["val/bpc"] = value / math.log(2)
        m.log(metrics, m.step)
        m.write_progress(phase="train")
        patience = m.cfg.train.early_stopping_patience
        if patience:  # Lightning's EarlyStopping(check_finite=True, min_delta=0), per member
            best, wait = g.es[i]
            if not math.isfinite(value):
                m.done = m.stopped_early = True
            elif value < best:
                g.es[i] = (value, 0)
            else:
                g.es[i] = (best, wait + 1)
                m.done = m.stopped_early = wait + 1 >= patience
    spent = time.perf_counter() - t0  # evaluation time is not training throughput
    for i, (t_last, step_last) in clock.items():
        clock[i] = (t_last + spent, step_last)


def _finalize(m: Member) -> dict[str, Any]:
    """The member's final summary (final evaluation unless diverged), written to its store."""
    m.write_progress(step=m.step, phase="final eval")
    history = [v for _, name, v in m.run_dir.read_metrics() if name == "val/loss"]
    autocast = m.cfg.train.precision == "bf16-mixed"
    device = next(m.lit.model.parameters()).device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        fields = finish_summary(
            m.cfg,
            m.lit.model,
            m.dm,
            steps=m.step,
            tokens_per_s=m.summary.get("tokens_per_s"),
            val_history=history,
            diverged_step=m.diverged_step,
        )
    m.attempt.write(**fields, wall_time_s=m.attempt.wall_time())
    m.close_wandb()
    return m.summary


@torch.no_grad()
def _unstack(g: Group, i: int) -> None:
    """Member ``i``'s stacked tensors into its own model (for its final evaluation)."""
    model = g.members[i].lit.model
    for name, p in model.named_parameters():
        p.copy_(g.stack.params[name][i])
    for name, b in model.named_buffers():
        if name in g.stack.buffers:
            b.copy_(g.stack.buffers[name][i])


def _checkpoint(g: Group, idx: list[int], writer: CheckpointWriter) -> None:
    jobs = [(g.snapshot(i), g.members[i].run_dir.checkpoint_dir / LAST) for i in idx]
    writer.submit(jobs)


def _loop(g: Group, stop: StepBoundaryStop, writer: CheckpointWriter) -> None:
    """Train until every member is done; a stop request ends it at a step boundary with a
    checkpoint of every member (so the re-run continues bit-exact)."""
    ms, t = g.members, g.members[0].cfg.train
    now = time.perf_counter()
    clock = {i: (now, m.step) for i, m in enumerate(ms)}
    for m in ms:
        m.progress = {"pid": os.getpid(), "started": time.time(), "start_step": m.step}
        m.write_progress(step=m.step, total=t.max_steps, loss=None, phase="train")
    while not all(m.done for m in ms):
        if stop.requested:
            _checkpoint(g, [i for i, m in enumerate(ms) if not m.done], writer)
            writer.wait()
            raise KeyboardInterrupt
        _train_step(g)  # every member of g is running: finished ones leave the group
        ran = range(len(ms))
        last = t.max_steps
        _log_train(
            g, [i for i in ran if ms[i].step % t.log_interval == 0 or ms[i].step == last], clock
        )
        evals = [i for i in ran if not ms[i].done and ms[i].step % t.eval_interval == 0]
        if evals:
            _validate(g, evals, clock)
        for i in ran:
            ms[i].done = ms[i].done or ms[i].step >= last
        saves = [i for i in ran if ms[i].done or ms[i].step % t.checkpoint_interval == 0]
        if saves:
            _checkpoint(g, saves, writer)
        finished = [i for i in ran if ms[i].done]
        if finished:
            writer.wait()  # a finished run's checkpoint is on disk before its summary
            for i in finished:
                _unstack(g, i)
                _finalize(ms[i])
            if not all(m.done for m in ms):  # the others go on without the finished ones
                g = _without_finished(g)
                ms, now = g.members, time.perf_counter()
                clock = {i: (now, m.step) for i, m in enumerate(ms)}
        _step_done([m.step for m in ms])


def _without_finished(g: Group) -> Group:
    """A new group of the members of ``g`` that still train, built the way a resume builds
    one (each member's weights, AdamW state and loop state taken from ``g`` in memory), so
    finished or diverged members no longer cost a forward and backward pass each step."""
    keep = [i for i, m in enumerate(g.members) if not m.done]
    for i in keep:
        snap = g.snapshot(i)
        _unstack(g, i)
        m = g.members[i]
        m.optimizer, m.loop = snap["optimizer_states"][0], snap["stacked"]
    return Group([g.members[i] for i in keep], g.device, g.fold)


class _Deterministic:
    """``torch.use_deterministic_algorithms`` as Lightning's ``deterministic`` sets it (CPU
    runs only), put back afterwards."""

    def __init__(self, cfg: RunConfig):
        self.on = cfg.train.deterministic and cfg.train.accelerator == "cpu"

    def __enter__(self):
        self.was = torch.are_deterministic_algorithms_enabled()
        if self.on:
            torch.use_deterministic_algorithms(True)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.was)


def _open_all(
    cfgs: list[RunConfig], run_dirs: list[RunDir], metas: list[dict], device, t0: float
) -> tuple[list[Member | dict], list[Member]]:
    """Each position: a finished run's stored summary (skipped) or an opened member."""
    out: list[Member | dict] = []
    group = {"members": len(cfgs), "runs": [rd.run_id for rd in run_dirs]}
    kernel = attn_kernel(cfgs[0], device) if cfgs[0].model.arch == "transformer" else None
    for cfg, rd, meta in zip(cfgs, run_dirs, metas, strict=True):
        prior = rd.read_summary() or {}
        if prior.get("status") in FINISHED:
            out.append(prior)
            continue
        m = _open_member(cfg, rd, meta, t0)
        m.summary.update(attn_kernel=kernel, stack=group)
        m.done = m.step >= cfg.train.max_steps  # killed during its final evaluation
        out.append(m)
    return out, [m for m in out if isinstance(m, Member)]


def train_group(
    cfgs: list[RunConfig],
    run_dirs: list[RunDir],
    metas: list[dict[str, Any] | None] | None = None,
    *,
    fold_attention: bool = True,
) -> list[dict[str, Any]]:
    """Train (or resume) the runs ``cfgs`` into ``run_dirs`` as one stacked group and return
    their summaries, in order. Finished runs (completed, diverged) are skipped.

    Each member's directory ends as a solo run's would (``train.train_run``): run.yaml,
    summary.json, metrics.csv, progress.json, checkpoints/last.ckpt; its summary adds
    ``stack`` (the group). An exception fails every unfinished member (``failed``, error.log);
    Ctrl-C stops at a step boundary with a checkpoint each and re-raises KeyboardInterrupt.
    ``fold_attention``: fold the members into SDPA's batch (default: on).
    """
    check_group(cfgs)
    metas = list(metas or [None] * len(cfgs))
    quiet_lightning()
    # known and measured (the module docstring): CPU SDPA has no vmap batching rule
    warnings.filterwarnings("ignore", ".*batching rule for aten::_scaled_dot_product.*")
    t0 = time.time()
    device = _device(cfgs[0])
    stop, writer = StepBoundaryStop(), CheckpointWriter()
    slots: list[Member | dict] = []
    members: list[Member] = []
    try:
        with ExitStack() as ctx:
            ctx.enter_context(torch_threads(cfgs[0].train.threads))
            ctx.enter_context(attn_context(cfgs[0], device))
            ctx.enter_context(_Deterministic(cfgs[0]))
            slots, members = _open_all(cfgs, run_dirs, metas, device, t0)
            for m in members:
                if m.done:
                    _finalize(m)
            training = [m for m in members if not m.done]
            if training:
                group = Group(training, device, fold_attention)
                with stoppable(stop):
                    _loop(group, stop, writer)
            writer.close()
    except (KeyboardInterrupt, SystemExit):
        _close_quietly(writer)
        for m in members:
            if not m.done:  # stays "running": the next run resumes it from its checkpoint
                m.attempt.interrupted()
            m.close_wandb()
        raise
    except Exception as err:  # noqa: BLE001 - a failed group must not stop a study
        _close_quietly(writer)
        log.exception("stacked group %s failed", [rd.run_id for rd in run_dirs])
        for m in members:
            if m.summary.get("status") == "running":
                m.attempt.failed(err)
                m.attempt.write(wall_time_s=m.attempt.wall_time())
            m.close_wandb()
    return [rd.read_summary() or {} for rd in run_dirs]  # what each member's store says


def _close_quietly(writer: CheckpointWriter) -> None:
    try:
        writer.close()
    except Exception as err:  # noqa: BLE001 - the error that stopped training comes first
        log.error("checkpoint write failed: %s", err)
