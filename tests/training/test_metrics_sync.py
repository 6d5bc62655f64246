"""``metrics.csv`` is fsynced before each checkpoint and at the end of a fit, never per log
step (``checkpoints.MetricsFirst``): what a checkpoint or a finished summary promises is on
disk before it, and a stack's log steps cost no fsync per member."""

import errno
import os
import threading
from pathlib import Path

import pytest

import ablate.training.checkpoints as checkpoints
import ablate.training.stacked.store as member_store
from ablate.config import build_config
from ablate.store import RunDir, RunStore
from ablate.training.checkpoints import MetricsFirst
from ablate.training.train import train_group, train_run

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


@pytest.fixture
def disk_log(monkeypatch):
    """Every fsync of a ``metrics.csv`` (with the last step the file holds then) and every
    checkpoint written (its step), in order, by run directory: ``{dir: [(kind, step)]}``."""
    log: dict[Path, list[tuple[str, int]]] = {}
    lock = threading.Lock()  # a stack's checkpoints are written by a background thread
    real_fsync, real_save = os.fsync, checkpoints.atomic_save

    def fsync(fd):
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.name == "metrics.csv":
            last = max((s for s, _, _ in RunDir(path.parent).read_metrics()), default=-1)
            with lock:
                log.setdefault(path.parent, []).append(("sync", last))
        return real_fsync(fd)

    def save(checkpoint, path):
        with lock:
            run = Path(path).parent.parent  # <run>/checkpoints/<name>
            log.setdefault(run, []).append(("checkpoint", int(checkpoint["global_step"])))
        return real_save(checkpoint, path)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(checkpoints, "atomic_save", save)
    monkeypatch.setattr(member_store, "atomic_save", save)
    return log


@pytest.mark.parametrize("members", [0, 2])
def test_metrics_are_synced_before_each_checkpoint_and_at_the_end_only(
    tmp_path, tiny_run, disk_log, members
):
    cfg = build_config(tiny_run)  # 20 steps, a log step every 5, a checkpoint every 10
    store = RunStore(tmp_path)
    if members:
        cfgs = [cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": s})})
                for s in range(members)]  # fmt: skip
        runs = [store.run("t", c.run_id()) for c in cfgs]
        assert all(s["status"] == "completed" for s in train_group(cfgs, runs))
    else:
        runs = [store.run("t", cfg.run_id())]
        assert train_run(cfg, runs[0])["status"] == "completed"
    for run in runs:
        events = disk_log[run.path]
        # two checkpoints (steps 10 and 20), a sync before each, one at the end of the fit;
        # none at the 4 log steps, the 2 evaluations or the gradient norms (the checkpoints
        # are written by a background thread: the last one may land after the end's sync)
        assert [s for kind, s in events if kind == "sync"] == [10, 20, 20], events
        assert [s for kind, s in events if kind == "checkpoint"] == [10, 20], events
        for i, (kind, step) in enumerate(events):
            if kind == "checkpoint":
                assert ("sync", step) in events[:i], events
        steps = {s for s, m, _ in run.read_metrics() if m == "train/loss"}
        assert steps == {5, 10, 15, 20}  # every row still there


class _Recorder:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def sync_metrics(self):
        self.log.append(("sync", self.name))

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.log.append(("save", path))

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        return {"loaded": path, "weights_only": weights_only}

    def remove_checkpoint(self, path):
        self.log.append(("remove", path))

    def teardown(self):
        self.log.append(("teardown", self.name))


def test_the_writer_syncs_every_run_before_it_saves_and_when_it_ends():
    log = []
    io = MetricsFirst(_Recorder(log, "io"), [_Recorder(log, "a"), _Recorder(log, "b")])
    io.save_checkpoint({}, "x.ckpt")
    assert log == [("sync", "a"), ("sync", "b"), ("save", "x.ckpt")]
    assert io.load_checkpoint("y.ckpt", weights_only=False) == {
        "loaded": "y.ckpt",
        "weights_only": False,
    }
    io.remove_checkpoint("x.ckpt")
    io.teardown()
    assert log[3:] == [("remove", "x.ckpt"), ("sync", "a"), ("sync", "b"), ("teardown", "io")]


def test_an_unsynced_append_is_synced_later_and_a_refused_sync_names_the_file(
    tmp_path, monkeypatch
):
    run = RunDir(tmp_path / "r")
    run.sync_metrics()  # no file yet: nothing to do
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    run.append_metrics(1, {"train/loss": 1.5}, sync=False)
    assert synced == [] and run.read_metrics() == [(1, "train/loss", 1.5)]
    run.sync_metrics()
    assert len(synced) == 1

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=r"cannot write .*metrics\.csv: disk full"):
        run.sync_metrics()
