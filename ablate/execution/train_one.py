"""`ablate train`: one run from a config YAML and overrides, outside any study."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ablate.config import RunConfig, load_run_config, parse_override
from ablate.store import FINISHED, RunStore


def train_run_name(config: Path | None, overrides: Sequence[str], cfg: RunConfig) -> str:
    """The run's name from what was asked for, like a study run's from its axes:
    ``ablate train --set model.d_model=64 --set optim.lr=0.003`` -> ``d_model=64,lr=0.003,seed=0``
    (a config YAML adds its stem first; nothing at all gives ``transformer,seed=0``)."""
    from ablate.names import fmt_value, short_names

    asked = dict(parse_override(o) for o in overrides)  # later wins, as in load_run_config
    asked.pop("train.seed", None)  # the seed always comes last
    short = short_names(asked)
    parts = [config.stem] if config is not None else []
    # a path value (a dataset file) is named by its file name, not its directory
    parts += [f"{short[k]}={fmt_value(v).rstrip('/').rsplit('/', 1)[-1]}" for k, v in asked.items()]
    return f"{','.join(parts) or cfg.model.arch},seed={cfg.train.seed}"


def train_one(
    config: Path | None,
    overrides: list[str],
    *,
    store: Path = Path("runs"),
    study: str = "train",
    progress: bool = True,
    plugins: list[str] = (),
) -> dict[str, Any]:
    """Train one run from a config YAML and ``key=value`` overrides; print where it went.

    A run already finished in the store (same config, so same run id) is reported as it is and
    nothing else happens: no re-evaluation, no new W&B run.
    """
    if plugins:  # their names are valid values in the config (the model package loads torch)
        from ablate.model.plugins import load_plugins

        load_plugins(list(plugins), key="--plugin")
    cfg = load_run_config(config, overrides)  # before importing torch: bad input answers fast
    from ablate.data import resolve_dataset
    from ablate.data.source import is_hf, load_hf
    from ablate.study import planned_run_id
    from ablate.study.preflight import check_compile, check_runs

    # a missing or corrupt dataset is bad input: exit 2 now
    load_hf(cfg.data.dataset) if is_hf(cfg.data.dataset) else resolve_dataset(cfg.data.dataset)
    # empty/short/binary data (tokenized now: exact counts), seeds, sizes, a GPU that is not there
    check_runs([(cfg, None)], config, tokenize=True)
    check_compile([cfg], config)
    run_dir = RunStore(store).run(study, planned_run_id(cfg))
    summary = run_dir.read_summary() or {}
    if summary.get("status") in FINISHED:
        print(_result_line(summary, run_dir.path, already=True))
        return summary
    from ablate.execution.progress import LiveProgress
    from ablate.training.train import train_run

    name = train_run_name(config, overrides, cfg)
    meta: dict[str, Any] = {"name": name, "variant": name.rsplit(",seed=", 1)[0]}
    if plugins:
        from ablate.model.plugins import plugin_paths

        meta["plugins"] = plugin_paths(list(plugins))
    # the run's live line comes from its progress.json, as in `ablate run`
    bar = LiveProgress(
        study,
        {run_dir.run_id: (name, run_dir.path, cfg.train.max_steps)},
        enabled=progress and cfg.train.progress,
        background=True,
    )
    try:
        summary = train_run(cfg, run_dir, meta, progress=False)
    finally:
        bar.close()  # a clean screen before the result line or the Ctrl-C traceback
    print(_result_line(summary, run_dir.path))
    return summary


def _result_line(summary: dict[str, Any], path: Path, *, already: bool = False) -> str:
    status = f"already {summary['status']}" if already else summary["status"]
    line = f"{status}: {path}  steps={summary.get('steps')}"
    loss = summary.get("final_val_loss")
    if loss is not None:
        line += f"  val_loss={loss:.4f}"
        if summary.get("final_val_bpc") is not None:
            line += f"  val_bpc={summary['final_val_bpc']:.4f}"
    if summary.get("diverged_step") is not None:
        line += f"  diverged at step {summary['diverged_step']}"
    if summary.get("error"):
        line += f"  error: {summary['error']}"
    return line
