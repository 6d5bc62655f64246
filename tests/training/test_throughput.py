"""A run's tokens/s come from clock reads after the device has done the steps they count
(``ablate.training.throughput``), solo and stacked, evaluations left out."""

from types import SimpleNamespace

import pytest
import torch

import ablate.training.throughput as throughput
from ablate.config import build_config
from ablate.store import RunStore
from ablate.training.lit import LitRuns
from ablate.training.train import train_group, train_run

WAIT_S = 10.0  # what each host read waits for the device, on the fake clock


@pytest.fixture
def slow_device(monkeypatch):
    """A clock that moves only while the host waits for the device: each host read of a
    step's values (``LitRuns._read`` with tensors) takes ``WAIT_S``, everything else no time,
    as a GPU far behind its host would look."""
    now = {"t": 0.0}
    monkeypatch.setattr(throughput, "time", SimpleNamespace(perf_counter=lambda: now["t"]))
    real = LitRuns._read

    def read(self, tensors):
        out = real(self, tensors)
        if tensors:
            now["t"] += WAIT_S
        return out

    monkeypatch.setattr(LitRuns, "_read", read)
    return now


@pytest.mark.parametrize("members", [0, 2])
def test_tokens_per_second_count_the_wait_for_the_device_and_not_evaluation(
    tmp_path, tiny_run, slow_device, members
):
    """Every log interval of 5 steps took one wait (its log step's read): 5 steps in 10 s on
    the run's clock, whatever was queued. The evaluation at step 10 waited too, off the clock.
    A clock read before the read would give no time at all for the first interval."""
    cfg = build_config(tiny_run | {"train.max_steps": 15, "train.checkpoint_interval": 100})
    store = RunStore(tmp_path)
    if members:
        cfgs = [cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": s})})
                for s in range(members)]  # fmt: skip
        runs = [store.run("t", c.run_id()) for c in cfgs]
        summaries = train_group(cfgs, runs)
    else:
        runs = [store.run("t", cfg.run_id())]
        summaries = [train_run(cfg, runs[0])]
    per_member = 5 * cfg.data.batch_size * cfg.data.seq_len / WAIT_S
    for run, summary in zip(runs, summaries, strict=True):
        assert summary["status"] == "completed"
        rates = [(s, v) for s, m, v in run.read_metrics() if m == "perf/tokens_per_s"]
        assert rates == [(5, per_member), (10, per_member), (15, per_member)]
        assert summary["tokens_per_s"] == per_member


def test_a_pause_and_a_start_wait_for_the_device_before_the_clock(monkeypatch):
    events = []
    monkeypatch.setattr(throughput, "device_sync", lambda device: events.append("sync"))
    clock = SimpleNamespace(perf_counter=lambda: events.append("clock") or float(len(events)))
    monkeypatch.setattr(throughput, "time", clock)
    t = throughput.Throughput(tokens_per_step=10)
    t.start(0, torch.device("cpu"))
    assert events == ["sync", "clock"]
    t.pause(torch.device("cpu"))
    assert events[2:] == ["sync", "clock"]


def test_a_cuda_device_is_synchronized(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    throughput.device_sync(torch.device("cpu"))
    assert synced == []
    throughput.device_sync(torch.device("cuda", 0))
    assert synced == [torch.device("cuda", 0)]


def test_a_lap_before_the_start_or_at_its_step_has_no_rate(monkeypatch):
    now = {"t": 0.0}
    monkeypatch.setattr(throughput, "time", SimpleNamespace(perf_counter=lambda: now["t"]))
    t = throughput.Throughput(tokens_per_step=100)
    assert t.lap(5) is None  # never started
    t.start(5, torch.device("cpu"))
    now["t"] = 2.0
    assert t.lap(5) is None  # no step since: the next lap counts from here
    now["t"] = 4.0
    assert t.lap(9) == pytest.approx(4 * 100 / 2.0)
    t.pause(torch.device("cpu"))
    now["t"] = 100.0  # an evaluation of 96 s
    t.resume()
    now["t"] = 101.0
    assert t.lap(10) == pytest.approx(100 / 1.0)
