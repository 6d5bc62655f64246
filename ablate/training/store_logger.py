"""The Lightning logger of the local store (always on); W&B is ``ablate.tracking``."""

from __future__ import annotations

from typing import Any

from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities import rank_zero_only

from ablate.store import RunDir


class StoreLogger(Logger):
    """Appends every logged metric to the run's ``metrics.csv`` (long form, resume-safe),
    without an fsync per log step: ``checkpoints.MetricsFirst`` makes the rows durable before
    each checkpoint and at the end of a fit, all the crash guarantees need (docs/guarantees.md).

    Lightning's CSVLogger deletes an existing ``metrics.csv`` when it is pointed at a non-empty
    directory, which would lose the history of a resumed run; this logger only ever appends.
    """

    def __init__(self, run_dir: RunDir):
        super().__init__()
        self.run_dir = run_dir

    @property
    def name(self) -> str:
        return "store"

    @property
    def version(self) -> str:
        return self.run_dir.run_id

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass  # the resolved config is written to run.yaml by the runner

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        metrics = {k: v for k, v in metrics.items() if k != "epoch"}
        self.run_dir.append_metrics(int(step or 0), metrics, sync=False)
