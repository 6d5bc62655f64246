"""The end of a run's training: the final evaluation and summary fields (``finish_run``), and
the check that a checkpoint still fits the data it resumes on (``check_resume``)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from typing import Any

import torch

from ablate.config import ConfigError, RunConfig
from ablate.data import LMDataModule
from ablate.store import RunDir
from ablate.training.precision import compute_dtypes
from ablate.training.step import lm_loss


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


def val_history(run_dir: RunDir) -> list[float]:
    """The val/loss values the run has logged so far (its store's)."""
    return [v for _, name, v in run_dir.read_metrics() if name == "val/loss"]


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
