"""``ablate sync STUDY``: upload a study's offline W&B runs, its report run included.

Every start of a run (fresh, resumed, retried) writes a new ``offline-run-<time>-<id>`` folder
with the run's one W&B id, and a resumed offline run replays the store's history first
(``ablate.tracking.runs.replay_history``): the newest folder of an id holds the whole
history. Syncing several folders of one id makes each replace the last (wandb#3841), so only
the newest folder of each id is uploaded; the earlier ones are listed as superseded and kept.
Runs moved to ``<study>/.stale/`` are not part of the study any more and are left out.

Nothing waits on the network without a bound: the server must answer an HTTP request within
``$ABLATE_WANDB_TIMEOUT_S`` (``mode.check_server``) before ``wandb sync`` starts, and a
``wandb sync`` that prints nothing for :data:`STALL_FACTOR` times that is stopped; either way
one line says what did not happen and how to retry (the runs it finished stay marked synced).

The ``.wandb`` file is the only record of an offline run: a LevelDB-style log
(github.com/google/leveldb/blob/main/doc/log_format.md) behind a 7-byte header (``:W&B``, magic,
version) of 32 KiB blocks of chunks ``crc32 (4) | length (2) | type (1) | data``, type FULL=1 or
FIRST/MIDDLE/LAST=2/3/4 for a record split across blocks, each record a protobuf ``Record``.
wandb 0.31 ships no Python reader (its core is Go), so :func:`read_records` is one.
"""

from __future__ import annotations

import json
import os
import shlex
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ablate.config import ConfigError
from ablate.store import RunDir
from ablate.tracking.ids import REPORT_WANDB_DIR, STEP
from ablate.tracking.mode import (
    TIMEOUT_ENV,
    WandbUnreachable,
    check_server,
    server_url,
    wandb_logged_in,
    wandb_timeout,
)

_BLOCK = 32768
STALL_FACTOR = 6
"""``wandb sync`` is stopped after this many times ``$ABLATE_WANDB_TIMEOUT_S`` without output."""


def read_records(path: Path) -> list:
    """Every protobuf ``Record`` in a ``.wandb`` file (module doc); a torn tail is dropped."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a .wandb file")
    pos, buf, records = 7, b"", []
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # block trailer: too short for a chunk header
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zero padding
            pos += left
            continue
        if pos + 7 + length > len(data):
            break  # torn by a kill mid-write
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            records.append(record)
            buf = b""
    return records


def logged_steps(path: Path) -> list[int]:
    """The step (``trainer/global_step``) of every history row of a ``.wandb`` file, in order."""
    steps = []
    for rec in read_records(path):
        if rec.WhichOneof("record_type") == "history":
            for item in rec.history.item:
                if (item.key or "/".join(item.nested_key)) == STEP:
                    steps.append(int(json.loads(item.value_json)))
    return steps


@dataclass
class OfflineRun:
    """One W&B id of a study: the folder to upload and the earlier ones it supersedes."""

    wandb_id: str
    name: str  # the run's name, or "report"
    folder: Path
    superseded: list[Path] = field(default_factory=list)

    @property
    def synced(self) -> bool:
        return any(self.folder.glob("*.wandb.synced"))


def _wandb_id(folder: Path) -> str:
    # offline-run-YYYYMMDD_HHMMSS-<id>; ids may contain '-'
    return folder.name.split("-", 3)[3]


def offline_runs(store: Path, study: str) -> list[OfflineRun]:
    """The offline W&B runs of ``study`` (a name in the store), the report run last (module
    doc)."""
    root = Path(store) / study
    dirs = [p for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]
    sources: list[tuple[RunDir | None, Path]] = [(RunDir(p), p / "wandb") for p in dirs]
    sources.append((None, root / REPORT_WANDB_DIR / "wandb"))
    out = []
    for run_dir, wdir in sources:
        by_id: dict[str, list[Path]] = {}
        for folder in sorted(wdir.glob("offline-run-*")):  # the name starts with its time
            if any(folder.glob("*.wandb")):
                by_id.setdefault(_wandb_id(folder), []).append(folder)
        name = "report"
        if run_dir is not None:
            name = (run_dir.read_summary() or {}).get("name") or run_dir.run_id
        for wid, folders in by_id.items():
            out.append(OfflineRun(wid, str(name), folders[-1], folders[:-1]))
    return out


def sync_command(runs: list[OfflineRun]) -> list[str]:
    """The ``wandb sync`` call that uploads ``runs`` (already synced folders are skipped)."""
    return [sys.executable, "-m", "wandb", "sync", *(str(r.folder) for r in runs)]


def describe(runs: list[OfflineRun], store: Path) -> list[str]:
    """One line per W&B id: name, id, folder, step range, superseded folders, synced."""
    lines = []
    for r in runs:
        steps = logged_steps(next(r.folder.glob("*.wandb")))
        span = f"steps {min(steps)}-{max(steps)}" if steps else "no steps"
        extra = f", supersedes {len(r.superseded)} earlier start(s)" if r.superseded else ""
        done = ", already synced" if r.synced else ""
        rel = r.folder.relative_to(store) if r.folder.is_relative_to(store) else r.folder
        lines.append(f"{r.name}  {r.wandb_id}  {rel}  ({span}{extra}{done})")
    return lines


def sync_study(store: Path, study: str, *, dry_run: bool = False) -> int:
    """Upload the offline runs of ``study`` (a name in the store; module doc); ``dry_run``
    prints what it would do. Returns ``wandb sync``'s exit code (0 when there is nothing to do).

    Raises ``ConfigError`` (one line, nothing changed) for a study without offline runs, or,
    unless ``dry_run``, no W&B login; :class:`WandbUnreachable` (one line) for a server that
    does not answer or a ``wandb sync`` that stops making progress (module doc).
    """
    store = Path(store)
    runs = offline_runs(store, study)
    if not runs:
        raise ConfigError(f"study '{study}' has no offline W&B runs", source=store / study)
    if not dry_run and not wandb_logged_in():
        raise ConfigError(
            "no W&B login (run `wandb login` or set WANDB_API_KEY); nothing synced",
            source=f"ablate sync {study}",
        )
    print(f"{study}: {len(runs)} offline W&B run(s), the newest start of each id:")
    for line in describe(runs, store):
        print(f"  {line}")
    todo = [r for r in runs if not r.synced]
    if not todo:
        print("nothing to upload: every run is synced")
        return 0
    cmd = sync_command(todo)
    if dry_run:
        print(f"would run: {shlex.join(cmd)}")
        return 0
    retry = f"ablate sync {study}"
    check_server("nothing synced", retry)
    stall = STALL_FACTOR * wandb_timeout()
    code = run_watched(cmd, stall)
    if code is None:
        raise WandbUnreachable(
            f"wandb sync printed nothing for {stall:g} s (W&B server {server_url()}): stopped; "
            f"the runs it finished stay synced; retry with `{retry}` ({TIMEOUT_ENV} sets the "
            f"wait, {STALL_FACTOR}x it here)"
        )
    return code


def run_watched(cmd: list[str], stall_s: float) -> int | None:
    """Run ``cmd``, passing its output through; its exit code, or None when it printed nothing
    for ``stall_s`` seconds (it is then stopped)."""
    sys.stdout.flush()  # what was printed before comes first
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    last = [time.monotonic()]

    def pump() -> None:  # any output (a progress update too) is progress
        while chunk := os.read(proc.stdout.fileno(), 4096):  # type: ignore[union-attr]
            last[0] = time.monotonic()
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while proc.poll() is None:
        if time.monotonic() - last[0] > stall_s:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return None
        time.sleep(0.1)
    reader.join(5)
    return proc.returncode
