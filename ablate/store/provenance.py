"""What made a run: ablate version, git commit, code fingerprint, data and plugin keys, and the
environment its numbers depend on (threads, workers, device, library versions).

``provenance(inputs)`` goes into each run's ``run.yaml`` meta and W&B config.
``code_fingerprint()`` hashes what the source files that decide a run's numbers do
(``CODE_FILES``: the model, the training step and its optimizer, solo and stacked, schedules,
batching, tokenizers): each file's syntax tree with its docstrings and other bare string
statements left out (:func:`canonical_source`), so a comment, a docstring or a reformatting
keeps it and a changed constant, name or statement changes it. ``is_stale(run_dir)`` says a
finished run was made by code that behaves differently from the current code, so ``ablate
status``/``ablate report`` can flag it and ``ablate run --rerun-stale`` can retrain it
(``archive_stale`` first moves the old run aside, into ``<study>/.stale/``, so nothing is
lost).

Runs recorded before this fingerprint hashed the files' bytes (16 hex digits, no ``ast:``).
Such a run is compared by what its code did: when it recorded a clean ``git_commit`` (no
uncommitted change to the package), the fingerprint is recomputed from the files at that commit
(``git cat-file``, :func:`fingerprint_at`); otherwise only the bytes can be compared (the byte
hash of today's files, :func:`byte_fingerprint`), and any difference counts as stale. A run
from before fingerprints were recorded is not called stale: there is nothing to compare.
"""

from __future__ import annotations

import ast
import hashlib
import os
import platform
import subprocess
import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path, PurePosixPath
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


PREFIX = "ast:"
"""Marks a fingerprint of behaviour (:func:`code_fingerprint`); a recorded one without it hashed
bytes (:func:`byte_fingerprint`)."""


def _code_file(rel: str) -> bool:
    """Whether ``rel`` (a path relative to the package) is one of ``CODE_FILES``: matched part
    for part, so ``model/*.py`` is no deeper file."""
    path = PurePosixPath(rel)
    return any(
        path.match(pattern) and len(path.parts) == len(PurePosixPath(pattern).parts)
        for pattern in CODE_FILES
    )


def package_sources(package: Path = PACKAGE) -> dict[str, bytes]:
    """``CODE_FILES`` of the package folder ``package``: relative path -> its bytes."""
    files = (p for pattern in CODE_FILES for p in package.glob(pattern) if p.is_file())
    return {p.relative_to(package).as_posix(): p.read_bytes() for p in files}


def _strip_strings(tree: ast.AST) -> ast.AST:
    """``tree`` without its bare string statements (docstrings, attribute docstrings): each is
    a statement that does nothing. A body left empty gets a ``pass``, as Python requires."""
    for node in list(ast.walk(tree)):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            kept = [
                s
                for s in body
                if not (
                    isinstance(s, ast.Expr)
                    and isinstance(s.value, ast.Constant)
                    and isinstance(s.value.value, str)
                )
            ]
            setattr(node, name, kept or [ast.Pass()])
    return tree


def _canon(node: Any) -> str:
    """A syntax tree as text: node type and fields, leaving out empty and absent fields, so the
    text is the same on the Python versions that add empty fields (3.12's ``type_params``);
    positions are not fields, so a line moved or reformatted does not show."""
    if isinstance(node, ast.AST):
        fields = [
            f"{name}={_canon(value)}"
            for name, value in ast.iter_fields(node)
            if value is not None and value != [] and name != "kind"  # kind: a u"" prefix
        ]
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(_canon(v) for v in node) + "]"
    return repr(node)


def canonical_source(source: bytes | str) -> str:
    """What a Python source does, as text: its syntax tree without comments (never in the
    tree), formatting (positions are not compared) or docstrings (:func:`_strip_strings`)."""
    return _canon(_strip_strings(ast.parse(source)))


def source_fingerprint(sources: Mapping[str, bytes | str]) -> str:
    """``ast:`` + sha256 (first 16 hex) over each file's relative path and
    :func:`canonical_source`, in path order."""
    h = hashlib.sha256()
    for rel in sorted(sources, key=PurePosixPath):
        h.update(rel.encode() + b"\0" + canonical_source(sources[rel]).encode() + b"\0")
    return PREFIX + h.hexdigest()[:16]


@cache
def code_fingerprint() -> str:
    """The behaviour fingerprint of today's ``CODE_FILES`` (:func:`source_fingerprint`)."""
    return source_fingerprint(package_sources())


@cache
def byte_fingerprint() -> str:
    """The fingerprint runs recorded before :func:`code_fingerprint`: sha256 (first 16 hex)
    over the relative path and bytes of every file in ``CODE_FILES``. Only to compare a run
    that recorded one and no clean commit to rebuild its code from."""
    h = hashlib.sha256()
    sources = package_sources()
    for rel in sorted(sources, key=PurePosixPath):
        h.update(rel.encode() + b"\0" + sources[rel] + b"\0")
    return h.hexdigest()[:16]


def sources_at(commit: str, package: Path = PACKAGE) -> dict[str, bytes] | None:
    """``CODE_FILES`` as they were at ``commit`` of the git repository holding ``package``:
    relative path -> bytes, read with ``git ls-tree`` and one ``git cat-file --batch``; None
    when git cannot read that commit (not a checkout, a commit this clone lacks)."""

    def git(*args: str, stdin: bytes | None = None) -> bytes:
        return subprocess.run(
            ["git", "-C", str(package), *args],
            input=stdin,
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout

    try:
        prefix = git("rev-parse", "--show-prefix").decode().strip()
        names = (
            git("ls-tree", "-r", "--full-name", "--name-only", commit, "--", ".")
            .decode()
            .splitlines()
        )
        rels = [n.removeprefix(prefix) for n in names if _code_file(n.removeprefix(prefix))]
        out = git(
            "cat-file", "--batch", stdin="".join(f"{commit}:{prefix}{r}\n" for r in rels).encode()
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sources, at = {}, 0
    for rel in rels:  # each: "<sha> blob <size>\n<content>\n"
        end = out.index(b"\n", at)
        size = int(out[at:end].split()[2])
        sources[rel] = out[end + 1 : end + 1 + size]
        at = end + 1 + size + 1
    return sources


@cache
def fingerprint_at(commit: str, package: Path = PACKAGE) -> str | None:
    """The behaviour fingerprint of ``CODE_FILES`` at ``commit`` (None: git cannot read it)."""
    sources = sources_at(commit, package)
    return source_fingerprint(sources) if sources else None


def made_by(meta: dict[str, Any]) -> str | None:
    """The behaviour fingerprint of the code that made a run (its ``run.yaml`` meta): as
    recorded, or for a byte fingerprint recomputed at its clean ``git_commit``; None when
    neither is known (no fingerprint, or bytes with uncommitted changes behind them)."""
    recorded = meta.get("code_fingerprint")
    if not isinstance(recorded, str):
        return None
    if recorded.startswith(PREFIX):
        return recorded
    commit = meta.get("git_commit")
    if isinstance(commit, str) and commit and meta.get("git_dirty") is False:
        return fingerprint_at(commit)
    return None


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
    """True when the run was made by code that behaves differently from the current code
    (module doc): its behaviour fingerprint differs, or, where that cannot be rebuilt, its
    byte fingerprint differs from today's bytes."""
    run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    meta = run_dir.read_run()["meta"]
    recorded = meta.get("code_fingerprint")
    if recorded is None:
        return False
    behaviour = made_by(meta)
    if behaviour is not None:
        return behaviour != code_fingerprint()
    return recorded != byte_fingerprint()


def stale_runs(study_dir: Path) -> list[RunDir]:
    """Runs under ``<store>/<study>`` made by model/training code that behaves differently."""
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
