"""Run leases: who trains a run, renewed by a heartbeat, taken over once its owner is gone.

A process lock dies with its process, which is right on one machine; across machines a node
that dies would leave its run "running" forever, and ``flock`` is unreliable on NFS. A lease is a
plain file in the run directory instead, so every node that sees the store sees the lease::

    run.lease.<n>   {"host", "pid", "job_id", "heartbeat", "released"}   generation n

The current lease is the highest generation ``n``. It is *held* while its owner heartbeats
(rewrites it every few seconds) and has not released it. Another process may take it over when

* it is released (the owner finished or stopped cleanly),
* its heartbeat is older than the grace period (the owner's node died or hangs),
* its owner is on this host and its pid is gone (killed: no need to wait for the grace period),
* its owner has our executor job id on another host/pid: a requeued SLURM job or a retried Ray
  task takes over from its own dead earlier attempt.

Taking over creates generation ``n + 1`` with ``os.link`` of a complete temporary file, which
fails if the name exists (atomic on local disks and NFS), so of two racers for one stale lease
exactly one wins; generations only grow, so a racer that read an old generation can never
replace a newer lease (no ABA). A winner removes the older generations; a release rewrites only
its own file (deleting it would let the generation count restart).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger("ablate")

LEASE_PREFIX = "run.lease."
DEFAULT_GRACE_S = 120.0
GRACE_ENV = "ABLATE_LEASE_GRACE_S"


def default_grace() -> float:
    """The grace period: ``$ABLATE_LEASE_GRACE_S`` or 120 s."""
    try:
        return float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_S))
    except ValueError:
        return DEFAULT_GRACE_S


def _generations(run_path: Path) -> list[int]:
    gens = []
    try:
        names = os.listdir(run_path)
    except FileNotFoundError:
        return []
    for name in names:
        if name.startswith(LEASE_PREFIX) and name[len(LEASE_PREFIX) :].isdigit():
            gens.append(int(name[len(LEASE_PREFIX) :]))
    return sorted(gens)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child not yet reaped by its parent still answers kill(0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def is_free(
    info: dict[str, Any], *, grace: float, job_id: str | None = None, now: float | None = None
) -> bool:
    """Whether a lease (its file's contents) may be taken over; see the module docstring."""
    if info.get("released"):
        return True
    now = time.time() if now is None else now
    if now - float(info.get("heartbeat", 0)) > grace:
        return True
    same_host = info.get("host") == socket.gethostname()
    if same_host and not pid_alive(int(info.get("pid", -1))):
        return True
    me = same_host and info.get("pid") == os.getpid()
    return job_id is not None and info.get("job_id") == job_id and not me


def _create(path: Path, info: dict[str, Any]) -> bool:
    """Create ``path`` holding ``info`` iff it does not exist: a complete file or none."""
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(info))
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


class Lease:
    """A held lease: ``renew()`` it (or ``start_heartbeat()``), ``release()`` it at the end."""

    def __init__(self, path: Path, info: dict[str, Any], grace: float):
        self.path, self.info, self.grace = path, info, grace
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _newer_exists(self) -> bool:
        gen = int(self.path.name[len(LEASE_PREFIX) :])
        return any(g > gen for g in _generations(self.path.parent))

    def renew(self) -> bool:
        """Write a fresh heartbeat; False (and ``lost``) if another process took the run over."""
        if self.lost or self._newer_exists():
            if not self.lost:
                log.warning("lease %s was taken over by another process", self.path)
            self.lost = True
            return False
        self.info["heartbeat"] = time.time()
        _write_own(self.path, self.info)
        return True

    def start_heartbeat(self, interval: float | None = None) -> Lease:
        """Renew every ``interval`` s (default: a quarter of the grace period, at most 5 s)."""
        interval = interval or min(5.0, self.grace / 4)

        def beat() -> None:
            while not self._stop.wait(interval):
                try:
                    if not self.renew():
                        return
                except OSError as err:  # a store hiccup: try again at the next beat
                    log.warning("lease heartbeat failed: %s", err)

        self._thread = threading.Thread(target=beat, name="ablate-lease", daemon=True)
        self._thread.start()
        return self

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if not self.lost and not self._newer_exists():
            self.info["released"] = True
            _write_own(self.path, self.info)


def _write_own(path: Path, info: dict[str, Any]) -> None:
    # only the owner writes its generation's file, so a replace cannot clobber another's lease
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)


def acquire(
    run_path: str | Path, *, grace: float | None = None, job_id: str | None = None
) -> Lease | None:
    """The run's lease if it is free (see the module docstring), else None. Never waits."""
    run_path = Path(run_path)
    grace = default_grace() if grace is None else grace
    run_path.mkdir(parents=True, exist_ok=True)
    for _ in range(5):  # a racer's cleanup may delete the generation we just listed
        gens = _generations(run_path)
        new = 0
        if gens:
            info = _read(run_path / f"{LEASE_PREFIX}{gens[-1]}")
            if info is None:
                continue
            if not is_free(info, grace=grace, job_id=job_id):
                return None
            new = gens[-1] + 1
        mine = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "job_id": job_id,
            "heartbeat": time.time(),
            "released": False,
        }
        path = run_path / f"{LEASE_PREFIX}{new}"
        if not _create(path, mine):
            continue  # another process took this generation first: look at it again
        lease = Lease(path, mine, grace)
        if lease._newer_exists():  # we created a generation a winner had already passed
            path.unlink(missing_ok=True)
            return None
        for g in _generations(run_path):
            if g < new:
                (run_path / f"{LEASE_PREFIX}{g}").unlink(missing_ok=True)
        return lease
    return None


def holder(run_path: str | Path, *, grace: float | None = None) -> dict[str, Any] | None:
    """The current lease's contents if someone holds it, else None."""
    run_path = Path(run_path)
    grace = default_grace() if grace is None else grace
    gens = _generations(run_path)
    if not gens:
        return None
    info = _read(run_path / f"{LEASE_PREFIX}{gens[-1]}")
    if info is None or is_free(info, grace=grace):
        return None
    return info
