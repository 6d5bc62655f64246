"""Plain functions behind the CLI commands that are not part of a larger module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.config import ConfigError, load_run_config
from ablate.store import RunStore


def train_one(
    config: Path | None,
    overrides: list[str],
    *,
    store: Path = Path("runs"),
    study: str = "train",
    progress: bool = True,
) -> dict[str, Any]:
    """Train one run from a config YAML and ``key=value`` overrides; print where it went."""
    from ablate.data import resolve_dataset
    from ablate.train import train_run

    cfg = load_run_config(config, overrides)
    resolve_dataset(cfg.data.dataset)  # a missing or corrupt dataset is bad input: exit 2 now
    if cfg.train.compile:
        from ablate.accel import compile_problem

        if problem := compile_problem():
            raise ConfigError(problem, key="train.compile", source=config)
    run_dir = RunStore(store).run(study, cfg.run_id())
    name = f"{cfg.model.arch}-seed{cfg.train.seed}"
    summary = train_run(cfg, run_dir, {"name": name, "variant": cfg.model.arch}, progress=progress)
    loss = summary.get("final_val_loss")
    line = f"{summary['status']}: {run_dir.path}  steps={summary.get('steps')}"
    if loss is not None:
        line += f"  val_loss={loss:.4f}"
        if summary.get("final_val_bpc") is not None:
            line += f"  val_bpc={summary['final_val_bpc']:.4f}"
    if summary.get("diverged_step") is not None:
        line += f"  diverged at step {summary['diverged_step']}"
    if summary.get("error"):
        line += f"  error: {summary['error']}"
    print(line)
    return summary
