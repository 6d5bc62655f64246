"""The local run store: the source of truth for runs and reports (W&B is a mirror).

Layout::

    <root>/<study>/study.yaml   the study file its last ``ablate run`` read (for the report)
    <root>/<study>/<run-id>/
        run.yaml         resolved RunConfig plus meta (name, variant, axes, seed), written once
        summary.json     status and headline numbers, replaced atomically
        metrics.csv      long-form ``step,metric,value`` rows, append-only
        progress.json    step/total/loss while training, for live progress lines (display only)
        error.log        the traceback of the last failed attempt (the summary keeps one line)
        tokenizer.json   the run's tokenizer (``ablate sample`` reads it)
        checkpoints/     the run's checkpoint (``last.ckpt``) for resume
        wandb/           the W&B (offline) run directory
        run.lease.<n>    who trains the run, renewed by a heartbeat (store/lease.py)

Every file that is replaced is written to a temporary file in the same directory, flushed,
fsynced and renamed over the old one, so a crash leaves either the old or the new file, never
half of one. ``metrics.csv`` is only appended to; readers drop a torn last line and keep the
last value written for a (step, metric), which is what a resumed run re-logs. Training appends
without an fsync per row and fsyncs the file before each checkpoint and at the end of a fit
(``sync_metrics``): a power cut loses at most the rows after the newest checkpoint, which the
resumed run drops and logs again anyway.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ablate.store.lease import Lease, acquire, holder

STATUSES = ("completed", "diverged", "failed", "running")  # what summary.json may say
FINISHED = ("completed", "diverged")  # a re-run skips these; it retries failed and resumes running

# The one vocabulary of run states shown to users (``ablate plan``/``status``/``run``, reports),
# decided by :func:`run_state` alone. ``interrupted`` is a summary that says ``running`` with no
# process holding the run (Ctrl-C, a killed worker): the next ``ablate run`` resumes it.
RUN_STATES = ("completed", "diverged", "running", "interrupted", "failed", "damaged", "pending")
UNFINISHED_STATES = ("running", "interrupted", "failed", "pending")

# numeric summary fields (or null), in the report's display order: the report's columns and the
# damage check (a non-numeric value here marks the run damaged) share this one list
SUMMARY_NUMBERS = (
    "final_val_loss",
    "best_val_loss",
    "final_val_ppl",
    "final_val_bpc",
    "steps",
    "diverged_step",
    "wall_time_s",
    "tokens_per_s",
    "params",
    "params_non_embedding",
    "flops_per_token",
    "vocab_size",
    "lr",
    "resumed_from_step",
)

RUN_FILE = "run.yaml"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.csv"
CHECKPOINT_DIR = "checkpoints"
ERROR_FILE = "error.log"
TOKENIZER_FILE = "tokenizer.json"


class StoreWriteError(OSError):
    """The store itself cannot be written (e.g. a full disk): the study cannot go on."""

    def __str__(self) -> str:
        return str(self.strerror)


def file_mode() -> int:
    """``0o666`` minus the process umask: the mode ``open()`` gives a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def describe_os_error(err: OSError) -> str:
    """``'disk full (No space left on device)'`` for ENOSPC/EDQUOT, else the OS message."""
    text = err.strerror or str(err)
    if err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return f"disk full ({text})"
    return text


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())  # mkstemp makes 0600; a shared store must stay readable
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def _clean(obj: Any) -> Any:
    # JSON has no NaN/inf: a diverged loss is stored as null rather than as invalid JSON.
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(_clean(obj), indent=2, default=_json_default) + "\n")


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON mapping in ``path``; None when missing or unreadable (binary bytes, invalid
    JSON, not a mapping: ``ablate.store.states`` says which)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):  # ValueError: JSON and UTF-8 decode errors
        return None
    return data if isinstance(data, dict) else None


PROGRESS_FILE = "progress.json"


def write_progress(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically (rename), without fsync: a reader sees a whole file, and a
    crash losing the last update costs nothing (the file is only a display hint)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_progress(path: Path) -> dict[str, Any] | None:
    """The progress record at ``path``; None when missing or unreadable (never raises)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("step"), int):
        return None
    return data


STUDY_SPEC_FILE = "study.yaml"
"""``<store>/<study>/study.yaml``: a copy of the study file ``ablate run`` read, rewritten at
each start, so ``ablate report NAME`` finds the claims and description from any directory."""

PLAN_FILE = "planned.json"
"""``<store>/<study>/planned.json``: the runs the last ``ablate run`` planned (id, name,
profile), so ``ablate status`` lists the runs not started yet beside the others."""

DECISIONS_FILE = "until_decided.json"
"""``<store>/<study>/until_decided.json``: the rounds of ``ablate run until-decided``."""


def read_decisions(path: Path) -> dict[str, Any]:
    """The ``run until-decided`` log at ``path``; no rounds when missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"rounds": []}


def write_decisions(path: Path, log: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(log, indent=1))
    os.replace(tmp, path)  # never half-written


@dataclass(frozen=True)
class RunDir:
    """One run's directory and its files."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def study(self) -> str:
        return self.path.parent.name

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT_DIR

    @property
    def error_file(self) -> Path:
        return self.path / ERROR_FILE

    @property
    def wandb_dir(self) -> Path:
        return self.path / "wandb"

    def exists(self) -> bool:
        return self.run_file.is_file()

    # --- run.yaml --------------------------------------------------------------------------
    def write_run(self, config: dict[str, Any], meta: dict[str, Any]) -> None:
        atomic_write_text(
            self.run_file, yaml.safe_dump({"meta": meta, "config": config}, sort_keys=False)
        )

    def read_run(self) -> dict[str, Any]:
        """``{'meta': {...}, 'config': {...}}``; empty dicts if the run was never started."""
        try:
            data = yaml.safe_load(self.run_file.read_text(encoding="utf-8")) or {}
        except (FileNotFoundError, ValueError, yaml.YAMLError):  # ValueError: not UTF-8
            data = {}
        if not isinstance(data, dict):
            data = {}
        meta, config = data.get("meta"), data.get("config")
        return {
            "meta": meta if isinstance(meta, dict) else {},
            "config": config if isinstance(config, dict) else {},
        }

    # --- summary.json -----------------------------------------------------------------------
    def read_summary(self) -> dict[str, Any] | None:
        return read_json(self.summary_file)

    def write_summary(self, summary: dict[str, Any]) -> None:
        if summary.get("status") not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {summary.get('status')!r}")
        atomic_write_json(self.summary_file, summary)

    @property
    def status(self) -> str | None:
        s = self.read_summary()
        return s.get("status") if s else None

    # --- metrics.csv --------------------------------------------------------------------------
    def append_metrics(self, step: int, metrics: dict[str, float], *, sync: bool = True) -> None:
        """Append ``step,metric,value`` rows; ``sync``: fsync them too (else they reach the
        OS, which keeps them through a killed process, and ``sync_metrics`` makes them
        durable: training syncs before each checkpoint and at the end of a fit)."""
        if not metrics:
            return
        new = not self.metrics_file.exists()
        buf = io.StringIO()
        w = csv.writer(buf)
        if new:
            w.writerow(["step", "metric", "value"])
        for k, v in metrics.items():
            w.writerow([int(step), k, repr(float(v))])
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with open(self.metrics_file, "a", encoding="utf-8") as f:
                f.write(buf.getvalue())
                f.flush()
                if sync:
                    os.fsync(f.fileno())
        except OSError as err:  # e.g. a full disk: the run fails naming the file (a torn line
            # left behind is dropped by readers)
            raise self._metrics_error(err) from None

    def sync_metrics(self) -> None:
        """Make every row appended so far durable (fsync ``metrics.csv``; none: nothing)."""
        try:
            fd = os.open(self.metrics_file, os.O_RDONLY)
        except FileNotFoundError:
            return
        except OSError as err:
            raise self._metrics_error(err) from None
        try:
            os.fsync(fd)
        except OSError as err:  # a write the OS took but the disk refuses shows here
            raise self._metrics_error(err) from None
        finally:
            os.close(fd)

    def _metrics_error(self, err: OSError) -> OSError:
        return OSError(err.errno, f"cannot write {self.metrics_file}: {describe_os_error(err)}")

    def read_metrics(self) -> list[tuple[int, str, float]]:
        """All ``(step, metric, value)`` rows, last write winning, torn lines dropped."""
        try:
            # binary garbage becomes U+FFFD and its rows are dropped below
            text = self.metrics_file.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        rows: dict[tuple[int, str], float] = {}
        lines = text.splitlines()
        if text and not text.endswith("\n"):
            lines = lines[:-1]  # a crash mid-append leaves a torn last line
        for rec in csv.reader(lines[1:]):
            if len(rec) != 3:
                continue
            try:
                rows[(int(rec[0]), rec[1])] = float(rec[2])
            except ValueError:
                continue
        return [(s, m, v) for (s, m), v in sorted(rows.items())]

    def truncate_metrics_after(self, step: int) -> None:
        """Drop rows logged after ``step`` (a resumed run replays them from its checkpoint)."""
        rows = [r for r in self.read_metrics() if r[0] <= step]
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["step", "metric", "value"])
        for s, m, v in rows:
            w.writerow([s, m, repr(v)])
        atomic_write_text(self.metrics_file, buf.getvalue())

    # --- the lease ----------------------------------------------------------------------------
    def try_lock(self, *, grace: float | None = None, job_id: str | None = None) -> Lease | None:
        """The run's lease if no live process holds it, else None (never waits).

        ``grace``: seconds without a heartbeat after which a lease is stale (default
        ``$ABLATE_LEASE_GRACE_S`` or 120); ``job_id``: the executor's job (a requeued job may
        take over from its own dead attempt). Call ``.release()`` when done.
        """
        return acquire(self.path, grace=grace, job_id=job_id)

    def is_locked(self, *, grace: float | None = None) -> bool:
        """Whether a live process holds the run's lease."""
        return holder(self.path, grace=grace) is not None

    def last_checkpoint(self) -> Path | None:
        """The newest checkpoint to resume from, if any."""
        ckpts = sorted(
            self.checkpoint_dir.glob("*.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        return ckpts[0] if ckpts else None


class RunStore:
    """``<root>/<study>/<run-id>/`` directories."""

    def __init__(self, root: str | Path = "runs"):
        self.root = Path(root)

    def run(self, study: str, run_id: str) -> RunDir:
        return RunDir(self.root / study / run_id)

    def spec_file(self, study: str) -> Path:
        """Where the study file of ``study`` is kept (:data:`STUDY_SPEC_FILE`)."""
        return self.root / study / STUDY_SPEC_FILE

    def keep_spec(self, study: str, source: Path) -> None:
        """Copy the study file ``source`` into the store (atomically; a full disk is one
        :class:`StoreWriteError` line), with the plugin files its ``plugins:`` names: they are
        copied beside it (``plugins/``) and the copy names them there, so the kept study
        resolves from any directory (same bytes: the same plugin hashes, the same run ids)."""
        text = Path(source).read_text(encoding="utf-8")
        try:
            text = self._keep_plugins(study, Path(source), text)
            atomic_write_text(self.spec_file(study), text)
        except OSError as err:
            raise StoreWriteError(
                err.errno, f"cannot write {self.spec_file(study)}: {describe_os_error(err)}"
            ) from None

    def _keep_plugins(self, study: str, source: Path, text: str) -> str:
        """``text`` with each plugin file of its ``plugins:`` copied to ``plugins/`` beside
        the kept study and named there (module names stay as they are)."""
        raw = yaml.safe_load(text)
        plugins = raw.get("plugins") if isinstance(raw, dict) else None
        if not isinstance(plugins, list) or not plugins:
            return text
        kept = []
        for i, spec in enumerate(plugins):
            path = Path(str(spec)).expanduser()
            path = path if path.is_absolute() else source.parent / path
            if not (str(spec).endswith(".py") and path.is_file()):
                kept.append(spec)  # a module name, or a file the plan-time check rejects
                continue
            name = f"{i}_{path.name}"
            atomic_write_text(self.root / study / "plugins" / name, path.read_text("utf-8"))
            kept.append(f"./plugins/{name}")
        raw["plugins"] = kept
        return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)

    def keep_plan(self, study: str, runs: list[dict[str, Any]]) -> None:
        """Record the planned runs of ``study`` (:data:`PLAN_FILE`; atomically)."""
        path = self.root / study / PLAN_FILE
        try:
            atomic_write_text(path, json.dumps({"runs": runs}, indent=1) + "\n")
        except OSError as err:
            raise StoreWriteError(
                err.errno, f"cannot write {path}: {describe_os_error(err)}"
            ) from None

    def planned(self, study: str) -> list[dict[str, Any]]:
        """The runs the last ``ablate run`` of ``study`` planned; none when unknown."""
        try:
            runs = json.loads((self.root / study / PLAN_FILE).read_text()).get("runs")
        except (OSError, ValueError, AttributeError):
            return []
        return [r for r in runs if isinstance(r, dict) and "run_id" in r] if runs else []

    def studies(self, *, planned: bool = False) -> list[str]:
        """Studies with a run in the store; with ``planned`` also those whose last ``ablate
        run`` planned runs none of which has started yet (:data:`PLAN_FILE`)."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name
            for p in self.root.iterdir()
            if p.is_dir() and (any(self.runs(p.name)) or (planned and self.planned(p.name)))
        )

    def runs(self, study: str) -> Iterator[RunDir]:
        d = self.root / study
        if not d.is_dir():
            return iter(())
        return (RunDir(p) for p in sorted(d.iterdir()) if (p / RUN_FILE).is_file())
