"""Run leases: stale ones are taken over, live ones never, and exactly one racer wins."""

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time

import pytest

from ablate.store import RunStore
from ablate.store.lease import LEASE_PREFIX, acquire, holder


def _lease_files(path):
    return sorted(p.name for p in path.iterdir() if p.name.startswith(LEASE_PREFIX))


def _fake_lease(path, **fields):
    """A lease file as another owner would have left it (generation 0)."""
    path.mkdir(parents=True, exist_ok=True)
    info = {"host": "node-17", "pid": 4242, "job_id": None, "heartbeat": time.time()}
    info.update(released=False, **fields)
    (path / f"{LEASE_PREFIX}0").write_text(json.dumps(info))


def test_a_lease_is_exclusive_until_released(tmp_path):
    d = RunStore(tmp_path).run("s", "r1")
    lease = d.try_lock()
    assert lease is not None and d.is_locked()
    assert d.try_lock() is None  # held, even by this very process
    lease.release()
    assert not d.is_locked()
    again = d.try_lock()
    assert again is not None
    again.release()
    assert _lease_files(d.path) == [f"{LEASE_PREFIX}1"]  # older generations are cleaned up


def test_a_stale_lease_is_taken_over_and_a_live_one_is_skipped(tmp_path):
    d = RunStore(tmp_path).run("s", "r1")
    _fake_lease(d.path, heartbeat=time.time() - 5)  # another node, heartbeat 5 s ago: live
    assert d.is_locked() and d.try_lock(grace=120) is None
    _fake_lease(d.path, heartbeat=time.time() - 300)  # no heartbeat for 5 min: stale
    assert not d.is_locked(grace=120)
    lease = d.try_lock(grace=120)
    assert lease is not None
    info = json.loads(lease.path.read_text())
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    lease.release()


def test_the_heartbeat_keeps_a_lease_live(tmp_path):
    d = RunStore(tmp_path).run("s", "r1")
    lease = d.try_lock(grace=0.6).start_heartbeat(interval=0.1)
    try:
        time.sleep(1.0)  # longer than the grace period: only the heartbeat keeps it
        assert d.is_locked(grace=0.6)
        assert d.try_lock(grace=0.6, job_id="someone") is None
    finally:
        lease.release()
    lease = d.try_lock(grace=0.6)  # not renewed: stale after the grace period
    time.sleep(0.8)
    assert not d.is_locked(grace=0.6)
    lease.release()


def test_a_dead_pid_on_this_host_is_reclaimed_at_once(tmp_path):
    d = RunStore(tmp_path).run("s", "r1")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # exited and reaped: its pid is gone
    _fake_lease(d.path, host=socket.gethostname(), pid=child.pid)
    assert not d.is_locked(grace=3600)
    lease = d.try_lock(grace=3600)
    assert lease is not None
    lease.release()


def test_a_requeued_job_takes_over_from_its_own_dead_attempt(tmp_path):
    d = RunStore(tmp_path).run("s", "r1")
    _fake_lease(d.path, job_id="slurm:77_3")  # fresh heartbeat, another node, same job
    assert d.try_lock(grace=3600, job_id="slurm:78_0") is None
    lease = d.try_lock(grace=3600, job_id="slurm:77_3")
    assert lease is not None
    lease.release()


def _race(path, barrier, results):
    barrier.wait()
    lease = acquire(path, grace=60)
    results.put((os.getpid(), lease is not None))
    if lease is not None:
        time.sleep(0.5)  # hold it while the others look


@pytest.mark.parametrize("racers", [2, 4])
def test_racers_for_one_stale_lease_exactly_one_wins(tmp_path, racers):
    ctx = mp.get_context("fork")
    for attempt in range(5):  # several rounds: a lucky interleaving must not hide a race
        path = tmp_path / f"run{attempt}"
        _fake_lease(path, heartbeat=time.time() - 3600)
        barrier, results = ctx.Barrier(racers), ctx.Queue()
        procs = [ctx.Process(target=_race, args=(path, barrier, results)) for _ in range(racers)]
        for p in procs:
            p.start()
        outcome = [results.get(timeout=30) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        winners = [pid for pid, won in outcome if won]
        assert len(winners) == 1, outcome
        assert holder(path, grace=60) is None or holder(path, grace=60)["pid"] == winners[0]


def test_processes_of_one_slurm_allocation_do_not_share_a_job_id(tmp_path, monkeypatch):
    """`ablate run --workers 4` inside an sbatch job: every process sees the same SLURM_JOB_ID,
    which must not let one take over another's live lease."""
    from ablate.execution.worker import job_id

    monkeypatch.setenv("SLURM_JOB_ID", "123")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "123")
    monkeypatch.delenv("ABLATE_JOB_ID", raising=False)
    assert job_id() is None
    monkeypatch.setenv("ABLATE_JOB_ID", "submitit:123_4")  # set by the executor for one run
    assert job_id() == "submitit:123_4"
