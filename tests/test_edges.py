"""Edges users hit on other machines (issue 21): bf16 LSTMs on CPUs without the kernel, memory
that grows with the corpus, data errors that came only when a run started."""

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import ablate.accel
from ablate.cli import app
from ablate.errors import ConfigError
from ablate.execution.smoke import smoke_config
from ablate.study import load_study


def _one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


# --- 3. bf16 LSTM on a CPU without oneDNN's bf16 LSTM kernel ---------------------------------


@pytest.fixture
def bf16_lstm(monkeypatch):
    """Set what the CPU probe answers (so the tests pass whatever this CPU can do)."""

    def answer(ok: bool) -> None:
        monkeypatch.setattr(ablate.accel, "cpu_bf16_lstm", lambda: ok)

    return answer


LSTM_BF16_CPU = ["--set", "train.precision=bf16-mixed", "--set", "train.accelerator=cpu"]


def test_a_cpu_lstm_run_this_cpu_cannot_do_in_bf16_is_a_plan_time_error(tmp_path, bf16_lstm):
    bf16_lstm(False)
    store = tmp_path / "runs"
    res = CliRunner().invoke(
        app, ["run", "studies/architecture.yaml", *LSTM_BF16_CPU, "--store", str(store)]
    )
    line = _one_line(res.output)
    assert res.exit_code == 2, res.output
    assert "train.precision" in line and "32-true" in line and "bf16 LSTM" in line
    assert not store.exists() or not any(store.rglob("*"))
    res = CliRunner().invoke(
        app, ["train", "--set", "model.arch=lstm", *LSTM_BF16_CPU, "--store", str(store)]
    )
    assert res.exit_code == 2 and "train.precision" in _one_line(res.output), res.output
    assert not store.exists() or not any(store.rglob("*"))


def test_the_bf16_lstm_rule_follows_the_probe_and_spares_other_runs(bf16_lstm):
    sets = ["train.precision=bf16-mixed", "train.accelerator=cpu"]
    bf16_lstm(True)
    assert len(load_study("studies/architecture.yaml", overrides=sets).runs) == 6
    bf16_lstm(False)
    with pytest.raises(ConfigError, match="train.precision"):
        load_study("studies/architecture.yaml", overrides=sets)
    # the transformer has its bf16 kernels, fp32 LSTMs need none, a GPU run is not on the CPU
    assert load_study("studies/positional_encoding.yaml", overrides=sets)
    assert load_study("studies/architecture.yaml", overrides=["train.accelerator=cpu"])
    assert load_study("studies/architecture.yaml", "gpu", check_device=False)


def test_smoke_runs_a_bf16_lstm_in_fp32_only_where_the_cpu_has_no_kernel(bf16_lstm):
    study = load_study("studies/architecture.yaml", "gpu", check_device=False)
    by_arch = {r.config.model.arch: r.config for r in study.runs}
    assert by_arch["lstm"].train.precision == "bf16-mixed"
    bf16_lstm(False)
    assert smoke_config(by_arch["lstm"]).train.precision == "32-true"
    assert smoke_config(by_arch["transformer"]).train.precision == "bf16-mixed"
    bf16_lstm(True)
    assert smoke_config(by_arch["lstm"]).train.precision == "bf16-mixed"


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
    kernel (an AVX-512 CPU then answers like an AVX2 one), and the smoke still completes."""
    study = tmp_path / "tiny_lstm.yaml"
    study.write_text(TINY_LSTM_STUDY)
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "WANDB_MODE": "disabled"}
    res = subprocess.run(
        [sys.executable, "-m", "ablate", "run", str(study), "--smoke"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all 1 smoke runs completed" in res.stdout
