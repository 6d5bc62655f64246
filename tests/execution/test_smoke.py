"""``ablate run smoke`` (every shipped gpu profile, on the CPU) and ``ablate bench --gpu``."""

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ablate.accel
import ablate.training.train
from ablate.cli import app
from ablate.execution.smoke import smoke_config, smoke_runs, smoke_study
from ablate.stacking import stack_limit
from ablate.study import load_study

STUDIES = sorted(Path("studies").glob("*.yaml"))


def test_smoke_config_keeps_shapes_and_moves_gpu_paths_to_the_cpu(monkeypatch):
    monkeypatch.setattr(ablate.accel, "cpu_bf16_matmul_fast", lambda: True)
    study = load_study("studies/positional_encoding.yaml", "gpu", check_device=False)
    run = study.runs[0]
    cfg = smoke_config(run.config)
    assert run.config.train.accelerator == "gpu" and run.config.train.attn_backend == "efficient"
    t, m, d = cfg.train, cfg.model, cfg.data
    assert (t.accelerator, t.attn_backend, t.max_steps) == ("cpu", "auto", 2)
    assert t.precision == run.config.train.precision == "bf16-mixed"
    assert cfg.optim.fused is True  # as LitLM fuses AdamW on CUDA
    assert (m.d_model, m.n_layers, d.seq_len) == (384, 6, 256)  # the gpu profile's shapes
    assert t.eval_lengths == run.config.train.eval_lengths and t.final_eval_batches == 1
    assert cfg.tracking.wandb is False and d.pin_memory is False


def test_smoke_runs_one_run_per_code_path():
    study = load_study("studies/batch_lr_scaling.yaml", "gpu", check_device=False)
    assert len(study.runs) == 72 and len(smoke_runs(study)) == 1  # lr/batch/seed grid
    pos = load_study("studies/positional_encoding.yaml", "gpu", check_device=False)
    assert [r.axes["model.pos_encoding"] for r, _ in smoke_runs(pos)] == [
        "sinusoidal",
        "learned",
        "rope",
        "alibi",
        "none",
    ]


# every shipped gpu profile as it is, and one as a window's stack verdict runs it
SMOKED = [(p, ()) for p in STUDIES] + [
    (Path("studies/batch_lr_scaling.yaml"), ("train.stack=auto",))
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("study", "overrides"), SMOKED, ids=[p.stem + "".join(f"[{o}]" for o in s) for p, s in SMOKED]
)
def test_every_shipped_gpu_profile_passes_the_smoke_test(study, overrides):
    rows = smoke_study(study, profile="gpu", overrides=overrides)
    assert rows and all(r["status"] == "completed" for r in rows), [
        (r["name"], r["error"]) for r in rows if r["status"] != "completed"
    ]
    runs = load_study(study, "gpu", overrides, check_device=False).runs
    plan = {r.name: r.config for r in runs}
    for r in rows:
        if r["eval_lengths"]:  # every requested length was evaluated (or is n/a: learned)
            assert set(r["eval_lengths"]) == {"1", "2", "4"}
        cfg = plan[r["name"]]
        assert r["precision"] == cfg.train.precision == "bf16-mixed"  # never switched to fp32
        # stacked where the profile stacks (auto: smoke's 2 members; 1 or off: alone)
        assert r["stack"] == stack_limit(cfg, auto=lambda c: 2)


def test_smoke_exits_nonzero_when_a_run_fails(tmp_path, monkeypatch):
    def broken(cfg, run_dir, meta=None, *, progress=None):
        return {"status": "failed", "error": "RuntimeError: boom"}

    monkeypatch.setattr(ablate.training.train, "train_run", broken)
    res = CliRunner().invoke(
        app, ["run", "smoke", "studies/reference_nanogpt_cpu.yaml", "--profile", "gpu"]
    )
    assert res.exit_code == 1 and "boom" in res.output


def test_smoke_of_a_study_without_profiles_names_none(make_study, monkeypatch):
    """A study with no profiles says nothing about one (it said "(profile None)"); one with
    profiles says which it chose and why, as `ablate run` does."""
    monkeypatch.setattr(ablate.training.train, "train_run", lambda *a, **k: {"status": "completed"})
    res = CliRunner().invoke(app, ["run", "smoke", str(make_study(name="plain"))])
    assert res.exit_code == 0, res.output
    assert "plain smoke test: 2 of 2 runs" in res.output and "None" not in res.output
    res = CliRunner().invoke(app, ["run", "smoke", "studies/reference_nanogpt_cpu.yaml"])
    assert "smoke test (profile cpu: default_profile auto: no CUDA device visible)" in res.output


def test_smoke_rejects_an_impossible_kernel_at_plan_time():
    res = CliRunner().invoke(
        app,
        [
            "run",
            "smoke",
            "studies/positional_encoding.yaml",
            "--profile",
            "gpu",
            "--set",
            "train.attn_backend=flash",
        ],
    )
    assert res.exit_code == 2 and "train.attn_backend" in res.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="the one-line answer is for CPU machines")
def test_bench_gpu_without_cuda_says_so_in_one_line(tmp_path):
    res = CliRunner().invoke(app, ["bench", "--gpu", "--out", str(tmp_path / "b.md")])
    assert res.exit_code == 0
    assert res.output.strip().count("\n") == 0 and "no CUDA device" in res.output
    assert not (tmp_path / "b.md").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_install_with_empty_torch_spec_keeps_the_machines_torch(tmp_path):
    def dry(*args):
        return subprocess.run(
            ["make", "-n", "install", f"VENV={tmp_path / 'venv'}", *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    assert "pip install -q torch==" in dry()
    keep = dry("TORCH_SPEC=")
    assert "pip install -q torch" not in keep and "--system-site-packages" in keep
