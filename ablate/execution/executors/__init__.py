"""Executors decide only *where* a planned run trains: this machine, a Ray cluster, SLURM.

An executor is a typed options model, a subclass of :class:`ExecutorOptions` whose
``executor`` field is a ``Literal`` of its name (the tag of the union of all executors'
options), with the methods the runner calls::

    check() -> None                                   # before anything is written
    execute(tasks: list[RunTask], progress: Progress) -> None
    where(tasks) -> str                               # the header's "on Ray (auto)"
    runs_at_once(tasks) -> int                        # recorded in each run's environment

``execute`` runs ``ablate.execution.worker.execute_task`` once per task wherever it places it
(the lease protocol, resume and the store are the same everywhere). A task may be a stacked
group (``RunTask.members``, ``train.stack``): one process trains its members, each reported as
a run. Each finished run is reported through ``progress.finished(run, outcome, summary)``;
while waiting an executor calls ``progress.poll()`` at least once a second. A stop (Ctrl-C)
raises ``KeyboardInterrupt`` after the runs in progress were asked to checkpoint, so the same
command resumes them.

An executor is one module and one registry entry: the built-ins (``local``, ``ray``,
``slurm``) are imported by name when asked for (:data:`BUILTIN`), others register their class
with :func:`register_executor` or, installed as a package, under the entry-point group
``ablate.executors`` (``dask = "my_pkg.dask:DaskOptions"``). ``ablate run --executor NAME``
takes the options as ``--executor-opt KEY=VALUE``; ``ablate run --executor NAME --help``
lists them (from the model's fields and their docstrings).

``parse_options`` validates the options before anything is written (a bad value, an unknown
key, a missing extra ``pip install "ablate[ray]"``: a one-line ``ConfigError``); ``check``
then validates them against this machine (a Ray address that does not answer, SLURM's
``sbatch`` missing from PATH).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Protocol, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ablate.config import ConfigError, RunConfig
from ablate.errors import suggest

BUILTIN = ("local", "ray", "slurm")
ENTRY_POINTS = "ablate.executors"
"""The entry-point group an installed package registers its executor under."""
EXTRAS = {"ray": "ray", "slurm": "submitit"}  # extra name -> module it installs
SHORTHANDS = {"workers": "--workers", "runs_per_gpu": "--runs-per-gpu"}
"""Options with their own ``ablate run`` flag (everyday ones); the rest are ``--executor-opt``."""
OPT_FLAG = "--executor-opt"


class ExecutorFailed(RuntimeError):
    """The executor cannot go on (e.g. workers keep dying); one line, the study resumes."""


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
    workers: int = 1
    """Runs of the study training at once (the worker layout), recorded in each run's summary
    (``environment.workers``) by the process that trains it."""

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


class ExecutorOptions(BaseModel):
    """Where and how the runs of a study train: the options every executor has. Each executor
    subclasses it with a ``Literal`` ``executor`` and its own fields, each documented by the
    docstring under it (``ablate run --executor NAME --help`` shows them)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)

    executor: str
    lease_grace_s: float | None = Field(None, gt=0)
    """Seconds without a heartbeat after which a run's lease is stale and may be taken over
    (default: ``$ABLATE_LEASE_GRACE_S`` or 120)."""

    extra: ClassVar[str | None] = None
    """The pip extra the executor needs (``ablate[ray]``), checked by ``check``."""

    def check(self) -> None:
        """Validate the options against this machine before anything is written."""
        if self.extra:
            require_extra(self.extra)

    def execute(self, tasks: list[RunTask], progress: Progress) -> None:
        """Train ``tasks`` (module doc)."""
        raise NotImplementedError(f"the {self.executor} executor has no execute()")

    def where(self, tasks: Sequence[RunTask]) -> str:
        """How the runs are spread, for the header line ('' for one run at a time, here)."""
        return ""

    def runs_at_once(self, tasks: Sequence[RunTask]) -> int:
        """Runs training at once on one machine (1 where the cluster decides the layout)."""
        return 1

    def cli_args(self) -> list[str]:
        """The ``ablate run`` options that reproduce these settings (for the resume hint)."""
        out = [] if self.executor == "local" else ["--executor", self.executor]
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if name == "executor" or value == info.get_default(call_default_factory=True):
                continue
            if name in SHORTHANDS:
                out += [SHORTHANDS[name], str(value)]
            elif isinstance(value, dict):
                out += [a for k, v in value.items() for a in (OPT_FLAG, f"{name}.{k}={v}")]
            else:
                out += [OPT_FLAG, f"{name}={value}"]
        return out


# --- the registry ---------------------------------------------------------------------------------

_REGISTERED: dict[str, type[ExecutorOptions]] = {}


def executor_name(cls: type[ExecutorOptions]) -> str:
    """The name an options class is registered under: its ``executor`` field's default."""
    name = cls.model_fields["executor"].default
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__qualname__}.executor needs a default: its Literal name")
    return name


def register_executor(cls: type[ExecutorOptions]) -> type[ExecutorOptions]:
    """Register an executor's options class under its name (usable as a class decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, ExecutorOptions)):
        raise TypeError(f"{cls!r} is not an ExecutorOptions subclass")
    name = executor_name(cls)
    have = _REGISTERED.get(name)
    where = (cls.__module__, cls.__qualname__)
    if have is not None and (have.__module__, have.__qualname__) != where:
        raise ConfigError(
            f"executor {name!r} is registered twice ({have.__module__}.{have.__qualname__}, "
            f"{cls.__module__}.{cls.__qualname__})",
            key="--executor",
        )
    _REGISTERED[name] = cls
    return cls


def executor_names() -> list[str]:
    """Every executor ``--executor`` takes: the built-ins, then registered and installed ones."""
    installed = [ep.name for ep in entry_points(group=ENTRY_POINTS)]
    return list(dict.fromkeys([*BUILTIN, *_REGISTERED, *installed]))


def options_class(name: str) -> type[ExecutorOptions]:
    """The options class of the executor ``name`` (imported on first use), else a one-line
    ``ConfigError``: the names there are, or the pip command of a missing extra."""
    if name not in _REGISTERED:
        if name in BUILTIN:
            _import_builtin(name)
        else:
            for ep in entry_points(group=ENTRY_POINTS, name=name):
                register_executor(ep.load())
    if name not in _REGISTERED:
        names = executor_names()
        raise ConfigError(
            f"unknown executor {name!r}{suggest(name, names)}; valid: {', '.join(names)}",
            key="--executor",
        )
    return _REGISTERED[name]


def _import_builtin(name: str) -> None:
    """Import a built-in executor's module (``executors/<name>.py``), which registers it."""
    try:
        importlib.import_module(f"{__name__}.{name}")
    except ImportError as err:
        if err.name not in EXTRAS.values():
            raise
        require_extra(name)


def require_extra(extra: str) -> Any:
    """Import the module an optional extra installs, or a one-line ``ConfigError``."""
    try:
        return importlib.import_module(EXTRAS[extra])
    except ImportError:
        raise ConfigError(
            f'the {extra} executor needs {EXTRAS[extra]}: pip install "ablate[{extra}]"',
            key="--executor",
        ) from None


# --- options from the command line ----------------------------------------------------------------


def parse_options(
    executor: str = "local", pairs: Sequence[str] = (), **shorthands: Any
) -> ExecutorOptions:
    """The options of ``--executor`` from ``--executor-opt KEY=VALUE`` ``pairs`` (``KEY.SUB``
    sets an item of a mapping) and the shorthand flags (``workers=...``; None: not given).
    Anything wrong is a one-line ``ConfigError`` naming the flag or key."""
    cls = options_class(executor)
    values: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = str(pair).partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(f"{pair!r} is not KEY=VALUE", key=OPT_FLAG)
        name, dot, sub = key.partition(".")
        if dot:
            values.setdefault(name, {})[sub] = value.strip()
        else:
            values[name] = value.strip()
    given = {k: v for k, v in shorthands.items() if v is not None}
    known = cls.model_fields.keys() - {"executor"}
    for name in [*values, *given]:
        if name not in known:
            flag = SHORTHANDS[name] if name in given else f"{OPT_FLAG} {name}"
            raise ConfigError(_unknown(name, executor, sorted(known)), key=flag)
    try:
        return cls.model_validate({**values, **given, "executor": executor})
    except ValidationError as err:
        e = err.errors()[0]
        name = str(e["loc"][0]) if e["loc"] else ""
        flag = SHORTHANDS[name] if name in given else f"{OPT_FLAG} {name}".strip()
        raise ConfigError(e["msg"].removeprefix("Value error, "), key=flag) from None


def _unknown(name: str, executor: str, known: list[str]) -> str:
    """An option the executor does not have: which ones it has (and which loaded executor
    has this one, e.g. ``gpus_per_run`` asked of ``local``)."""
    others = [n for n, c in _REGISTERED.items() if n != executor and name in c.model_fields]
    where = f" ({', '.join(others)} {'has' if len(others) == 1 else 'have'} it)" if others else ""
    return (
        f"the {executor} executor has no option {name!r}{where}{suggest(name, known)}; "
        f"its options: {', '.join(known)}"
    )


def options_help(executor: str) -> list[tuple[str, str, str]]:
    """(``KEY=TYPE``, default, what it does) for each option of ``executor``, for ``--help``."""
    cls = options_class(executor)
    rows = []
    for name, info in cls.model_fields.items():
        if name == "executor":
            continue
        key = f"{name}.KEY=str" if get_origin(info.annotation) is dict else f"{name}={_kind(info)}"
        if name in SHORTHANDS:
            key = f"{SHORTHANDS[name]} / {key}"
        default = info.get_default(call_default_factory=True)
        doc = " ".join((info.description or "").replace("``", "").split())
        rows.append((key, "-" if default in (None, {}) else str(default), doc))
    return rows


def _kind(info: Any) -> str:
    """A field's type as a user types it: ``int``, ``str``, ``local|slurm|debug``."""
    out = []
    for arg in get_args(info.annotation) or (info.annotation,):
        if get_origin(arg) is Annotated:
            arg = get_args(arg)[0]
        if get_origin(arg) is Literal:
            out += [str(v) for v in get_args(arg)]
        elif arg is not type(None):
            out.append(getattr(arg, "__name__", str(arg)))
    return "|".join(out)


def check(opts: ExecutorOptions) -> None:
    """Validate the options against this machine before anything is written."""
    opts.check()


def execute(tasks: list[RunTask], *, opts: ExecutorOptions, progress: Progress) -> None:
    """Train ``tasks`` with the executor ``opts`` names."""
    opts.execute(tasks, progress)
