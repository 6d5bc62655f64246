"""What made a run: ablate version, git commit, code fingerprint, data and plugin keys, and the
environment its numbers depend on (threads, workers, device, library versions).

``provenance(inputs)`` goes into each run's ``run.yaml`` meta and W&B config. ``code_fingerprint()``
hashes the source files that decide a run's numbers (``CODE_FILES``: the model, the training
step and its optimizer, solo and stacked, schedules, batching, tokenizers); ``is_stale(run_dir)``
says a finished run was made by a different fingerprint than the current code, so ``ablate
status``/``ablate report`` can flag it and ``ablate run --rerun-stale`` can retrain it
(``archive_stale`` first moves the old run aside, into ``<study>/.stale/``, so nothing is
lost). A run from before fingerprints were recorded is not called stale: there is nothing to
compare.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import time
from functools import cache
from pathlib import Path
from typing import Any

from ablate.store.rundir import RunDir
from ablate.version import __version__

PACKAGE = Path(__file__).resolve().parents[1]
"""The ``ablate`` package folder (``CODE_FILES`` are relative to it)."""
CODE_FILES = (
    "model/*.py",
    "training/lit.py",
    "training/adamw.py",
    "training/step.py",
    "training/schedules.py",
    "data/batching.py",
    "data/module.py",
    "data/tokenizers.py",
    "data/token_cache.py",
)
STALE_DIR = ".stale"


def environment(accelerator: str = "cpu", workers: int = 1) -> dict[str, Any]:
    """Threads, device and library versions of the current process, and ``workers``: how many
    runs of the study trained at once (the worker layout its task came with)."""
    import numpy
    import pytorch_lightning
    import torch

    device = "cpu"
    if accelerator != "cpu" and torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
    return {
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "workers": workers,
        "device": device,
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": pytorch_lightning.__version__,
        "numpy": numpy.__version__,
    }


@cache
def code_fingerprint() -> str:
    """sha256 (first 16 hex) over the relative path and bytes of every file in ``CODE_FILES``."""
    h = hashlib.sha256()
    files = sorted({p for pattern in CODE_FILES for p in PACKAGE.glob(pattern) if p.is_file()})
    for p in files:
        h.update(str(p.relative_to(PACKAGE)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


CODE_PATHS = (PACKAGE.name, "pyproject.toml")
"""What of ablate's checkout ``git_dirty`` watches: the package and its dependencies. Reports,
studies and docs never make a run dirty (``ablate report`` rewrites tracked reports; a
study's own files are ``study_dirty``'s)."""


@cache
def git_info() -> dict[str, Any]:
    """``{'git_commit', 'git_dirty'}`` when ablate runs from a git checkout, else ``{}``;
    dirty means uncommitted changes to ablate's code (:data:`CODE_PATHS`)."""
    return code_state(PACKAGE.parent)


def code_state(root: Path, paths: tuple[str, ...] = CODE_PATHS) -> dict[str, Any]:
    """``{'git_commit', 'git_dirty'}`` of the checkout at ``root``: HEAD, and whether a tracked
    file under ``paths`` differs from it; ``{}`` outside git."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        # tracked code only: a stray untracked file does not change what ran
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", *paths))
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"git_commit": commit, "git_dirty": dirty}


def study_git(files: list[Path]) -> dict[str, Any]:
    """``{'study_commit', 'study_dirty', 'study_file'}``: HEAD of the git repository holding
    ``files[0]`` (the study file), whether any of ``files`` (the study, its registration, its
    plugins) differs from it or is not committed at all, and the study file's absolute path
    (``ablate report NAME`` finds the study and its registration there); ``{}`` outside git.
    A registration's order is proven in the repository the study and its registration live
    in, which need not be ablate's own checkout."""
    where = str(files[0].resolve().parent)
    present = [str(f.resolve()) for f in files if f.is_file()]

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", where, *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        top = Path(git("rev-parse", "--show-toplevel")).resolve()
        mine = [f for f in present if Path(f).is_relative_to(top)]  # a plugin elsewhere: its own
        # an untracked study or plugin file is not committed: as dirty as a changed one
        changed = git("status", "--porcelain", "--untracked-files=all", "--", *mine)
    except (OSError, subprocess.SubprocessError):
        return {}
    return {
        "study_commit": commit,
        "study_dirty": bool(changed),
        "study_file": str(files[0].resolve()),
    }


def process_started(pid: int | None = None) -> float | None:
    """When process ``pid`` (default: this one) was launched, in seconds since the epoch, from
    Linux's ``/proc``: its start in clock ticks after boot set against the uptime now (to about
    10 ms; the boot time ``/proc/stat`` gives is whole seconds). None where there is no
    ``/proc``. ``ablate run`` records it in every attempt it starts: time from the launch
    (interpreter start-up, imports and planning included) is what a user waits."""
    try:
        stat = Path(f"/proc/{pid or os.getpid()}/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        # field 22, starttime; the fields after the command name, which may hold spaces
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        per_s = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return round(time.time() - (uptime - ticks / per_s), 3)


def provenance(inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The meta fields recording the code, then ``inputs``: what the run reads besides the
    code, computed by the caller (``data_key``, ``plugin_sources``: ``ablate.training.inputs``)
    so that the store imports neither the data nor the model."""
    out: dict[str, Any] = {"ablate_version": __version__, **git_info()}
    out["code_fingerprint"] = code_fingerprint()
    out.update(inputs or {})
    return out


def is_stale(run_dir: RunDir | Path) -> bool:
    """True when the run recorded a code fingerprint that differs from the current code's."""
    run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    recorded = run_dir.read_run()["meta"].get("code_fingerprint")
    return recorded is not None and recorded != code_fingerprint()


def stale_runs(study_dir: Path) -> list[RunDir]:
    """Runs under ``<store>/<study>`` made by other model/training code."""
    if not Path(study_dir).is_dir():
        return []
    dirs = (RunDir(p) for p in sorted(Path(study_dir).iterdir()) if (p / "run.yaml").is_file())
    return [d for d in dirs if is_stale(d)]


def stale_note(study_dir: Path) -> str:
    """A report line naming how many runs are stale ('' when none)."""
    n = len(stale_runs(study_dir))
    if not n:
        return ""
    return (
        f"{n} run{'s were' if n > 1 else ' was'} made by different model/training code than "
        f"the current one (code fingerprint {code_fingerprint()}); retrain with "
        "`ablate run STUDY --rerun-stale`"
    )


def archive_stale(run_dir: RunDir) -> Path | None:
    """Move a stale run to ``<study>/.stale/<run id>-<unix time>/`` so it trains afresh."""
    if not run_dir.path.is_dir() or not is_stale(run_dir):
        return None
    dest = run_dir.path.parent / STALE_DIR / f"{run_dir.run_id}-{int(time.time())}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    run_dir.path.rename(dest)
    return dest
