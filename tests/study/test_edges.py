"""Edges users hit on other machines: bf16 on CPUs without native bf16 (the LSTM, the smoke),
memory that grows with the corpus, data errors that came only when a run started."""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import ablate.accel
from ablate.cli import app
from ablate.data import resolve_dataset, window_order
from ablate.execution.smoke import EMULATED_STEPS, SMOKE_STEPS, smoke_config
from ablate.study import load_study


def _one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


# --- 3. bf16 on CPUs: the LSTM in fp32 on purpose, the smoke at the profile's precision ------


LSTM_BF16_CPU = ["--set", "train.precision=bf16-mixed", "--set", "train.accelerator=cpu"]


def test_an_lstm_under_bf16_autocast_computes_in_fp32_and_its_run_records_it(tmp_path):
    """The recurrence leaves autocast on purpose (CUDA's would run cuDNN in fp16, oneDNN has no
    bf16 LSTM on AVX2 CPUs): the run trains on any CPU and its summary says what it used."""
    res = CliRunner().invoke(
        app,
        ["train", "--set", "model.arch=lstm", *LSTM_BF16_CPU, "--set", "train.max_steps=4"]
        + ["--set", "model.d_model=16", "--set", "data.seq_len=16", "--store", str(tmp_path)],
    )
    assert res.exit_code == 0, res.output
    (summary,) = [json.loads(p.read_text()) for p in tmp_path.rglob("summary.json")]
    assert summary["status"] == "completed"
    assert summary["compute_dtypes"] == {"lstm": "float32", "matmul": "bfloat16", "loss": "float32"}


def test_smoke_keeps_the_profiles_bf16_and_trains_fewer_steps_where_bf16_is_emulated(monkeypatch):
    study = load_study("studies/positional_encoding.yaml", "gpu", check_device=False)
    cfg = study.runs[0].config
    assert cfg.train.precision == "bf16-mixed"
    monkeypatch.setattr(ablate.accel, "cpu_bf16_matmul_fast", lambda: False)
    emulated = smoke_config(cfg)
    assert (emulated.train.precision, emulated.train.max_steps) == ("bf16-mixed", EMULATED_STEPS)
    monkeypatch.setattr(ablate.accel, "cpu_bf16_matmul_fast", lambda: True)
    native = smoke_config(cfg)
    assert (native.train.precision, native.train.max_steps) == ("bf16-mixed", SMOKE_STEPS)
    fp32 = smoke_config(load_study("studies/positional_encoding.yaml").runs[0].config)
    assert (fp32.train.precision, fp32.train.max_steps) == ("32-true", SMOKE_STEPS)


TINY_LSTM_STUDY = """
name: tiny_lstm
base:
  model: {arch: lstm, d_model: 16, n_layers: 1, n_heads: 2, max_seq_len: 16}
  data: {dataset: tinyshakespeare, seq_len: 16, batch_size: 2}
  train: {accelerator: gpu, precision: bf16-mixed, max_steps: 2, threads: 1}
seeds: [0]
"""


def test_smoke_of_a_bf16_lstm_passes_when_onednn_is_capped_at_avx2(tmp_path):
    """A real CPU-side check, whatever this CPU is: oneDNN capped at AVX2 has no bf16 LSTM
    kernel and emulates bf16 products (an AVX-512 CPU then answers like an AVX2 one); the smoke
    still completes, in bf16 (the step count follows a timing, so it is not asserted here)."""
    study = tmp_path / "tiny_lstm.yaml"
    study.write_text(TINY_LSTM_STUDY)
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "WANDB_MODE": "disabled", "COLUMNS": "200"}
    res = subprocess.run(
        [sys.executable, "-m", "ablate", "run", "smoke", str(study)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all 1 smoke runs completed" in res.stdout
    assert "│ bf16-mixed │" in res.stdout  # the profile's precision, never switched to fp32


# --- 5. data errors at plan time: a binary file, a seq_len the data cannot fill ---------------


def _study(tmp_path, **data) -> Path:
    study = tmp_path / "tiny.yaml"
    base = {
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 4096},
        "data": {"seq_len": 16, "batch_size": 2, **data},
        "train": {"max_steps": 2, "accelerator": "cpu"},
    }
    study.write_text(yaml.safe_dump({"name": "tiny", "base": base, "seeds": [0, 1]}))
    return study


def _data_sets(**data) -> list[str]:
    return [a for k, v in data.items() for a in ("--set", f"data.{k}={v}")]


def _rejected(tmp_path, needles, **data) -> None:
    """``ablate run`` and ``ablate train`` both answer one line naming ``needles``, exit 2,
    and write nothing."""
    store = tmp_path / "runs"
    for args in (
        ["run", str(_study(tmp_path, **data)), "--no-progress"],
        ["train", "--set", "model.max_seq_len=4096", *_data_sets(**data)],
    ):
        res = CliRunner().invoke(app, [*args, "--store", str(store)])
        assert res.exit_code == 2, res.output
        line = _one_line(res.output)
        assert all(n in line for n in needles), line
        assert not store.exists(), args


@pytest.mark.parametrize("name", ["corpus.bin", "corpus.txt", "corpus"])
def test_a_binary_data_file_is_a_plan_time_error(tmp_path, name):
    data = tmp_path / name
    data.write_bytes(bytes(range(128, 256)) * 64)
    needles = [str(data), "data.dataset", "not UTF-8", "0x80 at offset 0"]
    _rejected(tmp_path, needles, dataset=str(data))


def test_a_seq_len_a_registered_dataset_cannot_fill_is_a_plan_time_error(tmp_path):
    # tinyshakespeare's val split: 111,540 chars = 3,485 per row of 32 < 4,097
    needles = ["data.seq_len", "val split has 111540 char tokens", "32 rows", "4097"]
    _rejected(tmp_path, needles, dataset="tinyshakespeare", seq_len=4096, batch_size=32)


def test_ablate_train_checks_seq_len_against_the_real_bpe_token_count(tmp_path):
    """300 bytes of val text pass a bound by bytes; its 130 or so BPE tokens do not."""
    data = tmp_path / "small.txt"
    data.write_text(resolve_dataset("tinyshakespeare").read_text()[:3000])
    store = tmp_path / "runs"
    sets = _data_sets(dataset=data, tokenizer="bpe", batch_size=1, seq_len=200)
    res = CliRunner().invoke(app, ["train", *sets, "--store", str(store)])
    assert res.exit_code == 2, res.output
    line = _one_line(res.output)
    assert "data.seq_len" in line and "bpe tokens" in line and "has at most" not in line, line
    assert not store.exists()


# --- 4. memory does not grow with the corpus ---------------------------------------------------

MEMORY_CHILD = r"""
import json, sys, threading, time

def rss_anon():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024

from ablate.config import build_config
from ablate.data import LMDataModule, source
from ablate.study.preflight import check_runs

# both corpora span many chunks and reads: only the corpus size differs
source.CHUNK_CHARS = source._READ_BYTES = 1 << 20
cfg = build_config({"data.dataset": sys.argv[1], "data.seq_len": 64, "data.batch_size": 12})
base, peak, done = rss_anon(), [0], threading.Event()

def sample():
    while not done.is_set():
        peak[0] = max(peak[0], rss_anon())
        time.sleep(0.001)

thread = threading.Thread(target=sample, daemon=True)
thread.start()
check_runs([(cfg, None)], None)  # plan time, as `ablate run` checks it
dm = LMDataModule(cfg.data).prepare()  # builds the token cache, or opens it
next(iter(dm.train_dataloader()))
next(iter(dm.val_dataloader()))
done.set()
thread.join()
print(json.dumps({"base": base, "peak": max(peak[0], rss_anon())}))
"""


def _data_peak(corpus: Path, cache: Path) -> int:
    """Anonymous memory the plan-time check, the token cache and the loaders added."""
    env = {**os.environ, "ABLATE_CACHE_DIR": str(cache)}
    res = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, str(corpus)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    got = json.loads(res.stdout.strip().splitlines()[-1])
    return got["peak"] - got["base"]


def test_data_memory_does_not_grow_with_the_corpus(tmp_path):
    """A 24 MB corpus adds no more anonymous memory than a 2 MB one (within 16 MiB), on the
    run that builds the token cache and on one that finds it (the whole text in memory would
    add ~44 MB more: its bytes and its str)."""
    line = "First Citizen: Before we proceed any further, hear me speak.\n"
    added = {}
    for mb in (2, 24):
        corpus = tmp_path / f"c{mb}.txt"
        corpus.write_text(line * (mb * 10**6 // len(line)))
        added[mb] = [_data_peak(corpus, tmp_path / "cache") for _ in ("build", "cached")]
        corpus.unlink()
    for small, big in zip(added[2], added[24], strict=True):
        assert big - small < 16 << 20, {mb: [a >> 20 for a in v] for mb, v in added.items()}


def test_the_window_sampler_does_not_list_every_window_at_once():
    """Sliding windows over a big corpus are one per token: the visiting order is handed out
    a block at a time, not as one Python list (~36 bytes per window)."""
    import tracemalloc

    from ablate.data import WindowSampler

    sampler = WindowSampler(2_000_000, seed=0, shuffle=True, start=5)
    tracemalloc.start()
    try:
        it = iter(sampler)
        first = next(it)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak >> 20
    assert [first, *itertools.islice(it, 3)] == window_order(2_000_000, 0, 0)[5:9].tolist()
