"""Executors decide only *where* a planned run trains: this machine, a Ray cluster, SLURM.

Every executor has one signature::

    execute(tasks: list[RunTask], *, opts: ExecutorOptions, progress: Progress) -> None

and runs ``ablate.execution.worker.execute_run`` once per task wherever it places it (the lease
protocol, resume and the store are the same everywhere). A task may be a stacked group
(``RunTask.members``, ``train.stack``): one process trains its members through
``worker.execute_group``, and each member is reported as a run. Each finished run is reported
through ``progress.finished(run, outcome, summary)``; while waiting an executor calls
``progress.poll()`` at least once a second. A stop (Ctrl-C) raises ``KeyboardInterrupt`` after
the runs in progress were asked to checkpoint, so the same command resumes them.

``check(opts)`` validates the options before anything is written: a bad value, a missing extra
(``pip install "ablate[ray]"``), a Ray address that does not answer or SLURM's ``sbatch`` missing
from PATH is a ``ConfigError``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ablate.config import ConfigError, RunConfig

EXECUTORS = ("local", "ray", "slurm")
EXTRAS = {"ray": "ray", "slurm": "submitit"}  # extra name -> module it installs


class ExecutorFailed(RuntimeError):
    """The executor cannot go on (e.g. workers keep dying); one line, the study resumes."""


class ExecutorOptions(BaseModel):
    """Where and how the runs of a study train (``ablate run --executor ...``)."""

    model_config = ConfigDict(extra="forbid")

    executor: Literal["local", "ray", "slurm"] = "local"
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] | None = None
    """local: runs trained at once, or ``auto``: every GPU ``runs_per_gpu`` deep on a GPU box;
    on a CPU one worker per ``train.threads`` cores (one per core by default: 2 workers x 1
    thread beat 1 x 2 on a 2-core CPU, ``reports/bench.md`` section 5). None:
    ``$ABLATE_DEFAULT_WORKERS`` if set (an integer or ``auto``), else ``auto``
    (``default_workers``)."""
    runs_per_gpu: int = Field(1, ge=1)
    """Runs packed on one GPU, each capped at 1/k of its memory (local, ray)."""
    gpus_per_run: int = Field(1, ge=0)
    """GPUs one run uses (ray, slurm); 0 trains on CPU."""
    ray_address: str | None = None
    """``auto``, ``HOST:PORT`` of a running cluster, or None to start a local Ray."""
    max_retries: int = Field(3, ge=0)
    """ray, local pool: re-queue the runs of a worker or node that died this many times."""
    slurm_partition: str | None = None
    slurm_time: int = Field(60, ge=1)
    """slurm: minutes per job before it is requeued (resumes from its checkpoint)."""
    slurm_array_parallelism: int = Field(64, ge=1)
    slurm_opts: dict[str, str] = Field(default_factory=dict)
    """slurm: extra ``#SBATCH`` options, e.g. ``account=abc``, ``qos=high``."""
    slurm_cluster: Literal["slurm", "local", "debug"] | None = None
    """submitit cluster (None: SLURM, whose ``sbatch`` must be on PATH); ``local`` runs the jobs
    as local processes of this machine, ``debug`` in this process."""
    slurm_folder: str | None = None
    """Where submitit keeps job scripts and logs (default: ``<store>/.submitit/<study>``)."""
    lease_grace_s: float | None = Field(None, gt=0)
    """Seconds without a heartbeat after which a run's lease is stale and may be taken over
    (None: ``$ABLATE_LEASE_GRACE_S`` or 120)."""

    @field_validator("slurm_time", mode="before")
    @classmethod
    def _minutes(cls, v: Any) -> Any:
        """``90``, ``"90"``, ``"1:30:00"`` or ``"2-00:00:00"`` (days-hours:min:s) -> minutes."""
        if not isinstance(v, str) or v.strip().isdigit():
            return v
        days, _, hms = v.strip().rpartition("-")
        try:
            parts = [int(p) for p in hms.split(":")]
            if len(parts) != 3 or (days and not days.isdigit()):
                raise ValueError
        except ValueError:
            raise ValueError(f"{v!r} is not minutes, H:MM:SS or D-HH:MM:SS") from None
        h, m, s = parts
        return max(1, (int(days or 0) * 24 + h) * 60 + m + (1 if s else 0))

    @field_validator("slurm_opts", mode="before")
    @classmethod
    def _key_values(cls, v: Any) -> Any:
        if not isinstance(v, list | tuple):
            return v
        out = {}
        for item in v:
            key, eq, value = str(item).partition("=")
            if not eq or not key.strip():
                raise ValueError(f"{item!r} is not key=value")
            out[key.strip().lstrip("-").replace("-", "_")] = value.strip()
        return out

    @field_validator("workers", mode="before")
    @classmethod
    def _count_or_auto(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.strip()
            if v != "auto" and not v.isdigit():
                raise ValueError(f"{v!r} is not a number of workers or auto")
        return v

    @model_validator(mode="after")
    def _packing(self) -> ExecutorOptions:
        if self.runs_per_gpu > 1 and self.gpus_per_run > 1:
            raise ValueError("runs_per_gpu > 1 packs runs of one GPU each: use gpus_per_run 1")
        return self

    @classmethod
    def parse(cls, **values: Any) -> ExecutorOptions:
        """Options from CLI values; a bad value is a one-line ``ConfigError`` naming the option."""
        values = {k: v for k, v in values.items() if v is not None}
        try:
            return cls(**values)
        except ValidationError as err:
            e = err.errors()[0]
            name = str(e["loc"][0]) if e["loc"] else ""
            flag = {"lease_grace_s": "lease-grace", "slurm_opts": "slurm-opt"}.get(name, name)
            key = "--" + flag.replace("_", "-") if name else ""
            msg = e["msg"]
            if e["type"] == "literal_error" and e["loc"] == ("executor",):
                msg = f"unknown executor {values.get('executor')!r}; valid: {', '.join(EXECUTORS)}"
            raise ConfigError(msg.removeprefix("Value error, "), key=key) from None

    def cli_args(self) -> list[str]:
        """The ``ablate run`` options that reproduce these settings (for the resume hint)."""
        out: list[str] = []
        for name, value in self:
            if value == type(self).model_fields[name].default or name == "slurm_folder":
                continue
            if name == "slurm_opts":
                for k, v in value.items():
                    out += ["--slurm-opt", f"{k}={v}"]
                continue
            flag = "--" + {"lease_grace_s": "lease-grace"}.get(name, name.replace("_", "-"))
            out += [flag, str(value)]
        return out


@dataclass
class RunTask:
    """One planned run to train, or a stacked group of them (``members``, each a RunTask of
    one run; ``config``/``path`` are the first member's): what the executor ships to wherever
    it trains."""

    run: Any  # the PlannedRun, given back to progress.finished
    config: RunConfig
    path: str
    meta: dict[str, Any] = field(default_factory=dict)
    members: list[RunTask] = field(default_factory=list)

    @classmethod
    def group(cls, members: list[RunTask]) -> RunTask:
        """One task for a stacked group (a single member stays a plain task)."""
        if len(members) == 1:
            return members[0]
        first = members[0]
        names = f"{first.name} + {len(members) - 1} more"
        return cls(first.run, first.config, first.path, {"name": names}, list(members))

    @property
    def name(self) -> str:
        return str(self.meta.get("name", self.path))

    def runs(self) -> list[RunTask]:
        """The runs this task trains: its members, or itself."""
        return self.members or [self]

    def payload(self) -> tuple[list[RunConfig], list[str], list[dict[str, Any]]]:
        """What ``worker.execute_task`` takes: configs, paths and metas, one per run."""
        runs = self.runs()
        return [r.config for r in runs], [r.path for r in runs], [r.meta for r in runs]

    def failed(self, error: str) -> list[tuple[str, dict[str, Any]]]:
        """Each run's result when the task died without one: its stored summary, failed."""
        from ablate.execution.worker import TRAINED
        from ablate.store import RunDir

        out = []
        for run in self.runs():
            summary = RunDir(Path(run.path)).read_summary() or {}
            out.append((TRAINED, {**summary, "status": "failed", "error": error}))
        return out

    def report(self, results: Any, progress: Progress) -> bool:
        """Report each run's ``(outcome, summary)`` (one pair or a list of them, in member
        order); True when one of them was interrupted (the study stops)."""
        from ablate.execution.worker import INTERRUPTED

        pairs = results if isinstance(results, list) else [results]
        for run, (outcome, summary) in zip(self.runs(), pairs, strict=False):
            progress.finished(run.run, outcome, summary)
        return any(outcome == INTERRUPTED for outcome, _ in pairs)


class Progress(Protocol):
    def finished(self, run: Any, outcome: str, summary: dict[str, Any]) -> None: ...
    def write(self, line: str) -> None: ...
    def poll(self) -> None: ...
    def close(self) -> None: ...


def require_extra(extra: str) -> Any:
    """Import the module an optional extra installs, or a one-line ``ConfigError``."""
    try:
        return importlib.import_module(EXTRAS[extra])
    except ImportError:
        raise ConfigError(
            f'the {extra} executor needs {EXTRAS[extra]}: pip install "ablate[{extra}]"',
            key="--executor",
        ) from None


DEFAULT_WORKERS_ENV = "ABLATE_DEFAULT_WORKERS"


def default_workers() -> int | Literal["auto"]:
    """What ``--workers`` means when not given: ``$ABLATE_DEFAULT_WORKERS`` (an integer or
    ``auto``; e.g. 1 on a machine shared with others), else ``auto``."""
    value = os.environ.get(DEFAULT_WORKERS_ENV, "auto").strip()
    if value == "auto":
        return "auto"
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(
            f"{value!r} is not a number of workers >= 1 or auto", key=DEFAULT_WORKERS_ENV
        )
    return int(value)


def check(opts: ExecutorOptions) -> None:
    """Validate the options against this machine before anything is written."""
    if opts.workers is None:
        default_workers()
    if opts.executor == "local":
        if opts.gpus_per_run > 1:
            raise ConfigError(
                "the local executor gives each run one GPU; use ray or slurm for more",
                key="--gpus-per-run",
            )
        return
    require_extra(opts.executor)
    if opts.executor == "slurm":
        from ablate.execution.executors.slurm import check as check_slurm

        check_slurm(opts)
    if opts.executor == "ray" and opts.ray_address:
        from ablate.execution.executors.ray import check_address

        check_address(opts.ray_address)


def execute(tasks: list[RunTask], *, opts: ExecutorOptions, progress: Progress) -> None:
    """Train ``tasks`` with the executor ``opts`` names."""
    # plain imports, not importlib: the import graph (and lint-imports) sees every executor
    if opts.executor == "ray":
        from ablate.execution.executors import ray as module
    elif opts.executor == "slurm":
        from ablate.execution.executors import slurm as module
    else:
        from ablate.execution.executors import local as module
    module.execute(tasks, opts=opts, progress=progress)
