"""``ablate run smoke`` (every shipped gpu profile, on the CPU) and ``ablate bench --gpu``."""

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ablate.accel
import ablate.training.train
from ablate.cli import app
from ablate.data.reuse import split_sizes
from ablate.execution.flops import worst_case_limit
from ablate.execution.smoke import SMOKE_STEPS, smoke_config, smoke_runs, smoke_study, tiny_shape
from ablate.model import build_model
from ablate.stacking import AUTO_MEMORY_SHARE, stack_key, stack_limit
from ablate.study import load_study
from ablate.training.step import member_losses

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
    assert cfg.optim.fused is True  # as MemberAdamW fuses AdamW on CUDA
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
SMOKED_IDS = [p.stem + "".join(f"[{o}]" for o in s) for p, s in SMOKED]
GPU_BYTES = 80 * 2**30  # the smallest GPU the windows are planned for (an 80 GB H100)


def test_tiny_shape_keeps_the_code_path_and_shrinks_every_dimension():
    study = load_study("studies/norm_placement.yaml", "gpu", check_device=False)
    run = study.runs[0].config
    tiny = tiny_shape(run).to_dict()
    real = run.to_dict()
    m, d = tiny["model"], tiny["data"]
    assert (m["d_model"], m["n_heads"], m["n_layers"]) == (8 * 8, 8, 2)  # 512d/8H/12L
    assert (m["max_seq_len"], d["seq_len"]) == (32, 32)  # 256/256, cut by 8 both
    for key in ("d_model", "n_layers", "max_seq_len"):
        real["model"].pop(key), tiny["model"].pop(key)
    real["data"].pop("seq_len"), tiny["data"].pop("seq_len")
    assert tiny == real  # everything else as the profile has it
    wide = run.model_copy(update={"model": run.model.model_copy(update={"d_ff": 1536})})
    wide = wide.model_copy(update={"data": run.data.model_copy(update={"seq_len": 128})})
    got = tiny_shape(wide)  # d_ff scaled with the width; a context 2x the sequence stays 2x
    assert (got.model.d_ff, got.model.max_seq_len, got.data.seq_len) == (192, 64, 32)
    lstm = load_study("studies/architecture.yaml", "gpu", check_device=False).runs[-1].config
    assert (lstm.model.arch, tiny_shape(lstm).model.d_model) == ("lstm", 32)


@pytest.mark.parametrize(("study", "overrides"), SMOKED, ids=SMOKED_IDS)
def test_every_code_path_of_every_shipped_gpu_profile_passes_the_tiny_smoke(study, overrides):
    """The smoke of each gpu profile at ``tiny_shape``: every code path (precision, attention
    kernel, stacking, every axis value) trains 2 steps, evaluates at every length and checkpoints;
    the profiles' own shapes are checked by the test below, without training."""
    rows = smoke_study(study, profile="gpu", overrides=overrides, tiny=True)
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
        assert r["steps"] == SMOKE_STEPS and r["compute_dtypes"]
        # stacked where the profile stacks (auto: smoke's 2 members; 1 or off: alone)
        assert r["stack"] == stack_limit(cfg, auto=lambda c: 2)


def _shape_step(cfg, members: int, vocab: int) -> None:
    """One training step of ``cfg``'s model at its own width, depth, batch and sequence
    (``members`` stacked), under bf16 autocast as the profile trains, and an evaluation at
    every ``eval_lengths`` multiple the model can take: on fake tensors (torch's
    ``FakeTensorMode``: shapes and dtypes propagate, no memory is allocated, nothing is
    computed; the meta device would refuse the LSTM's autocast on the CPU)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert cfg.train.precision == "bf16-mixed"
    B, T = cfg.data.batch_size, cfg.data.seq_len
    with FakeTensorMode(), torch.autocast("cpu", dtype=torch.bfloat16):
        model = build_model(cfg.model, vocab, members)
        x = torch.zeros(members, B, T, dtype=torch.long)
        losses = member_losses(model, x, x)
        assert losses.shape == (members,) and losses.dtype == torch.float32
        losses.sum().backward()
        for p in model.parameters():
            assert p.grad is not None and p.grad.shape == p.shape
        for multiple in cfg.train.eval_lengths:
            length = int(round(multiple * T))
            if model.max_len is None or length <= model.max_len:
                x = torch.zeros(1, length, dtype=torch.long)
                assert member_losses(model, x, x).shape == (members,)


def estimated_member_bytes(params: int, cfg) -> int:
    """Device memory one member needs, by arithmetic (``auto`` measures it on the GPU itself):
    weights, gradients and AdamW's two moments (16 bytes a parameter, fp32 masters) plus the
    activations a step keeps for the backward pass, per layer ~34 values per token and model
    width (Korthikanti et al. 2022, arXiv 2205.05198, flash attention: no seq² term), and the
    logits (3 copies of B x T x vocab in fp32: output, softmax, gradient)."""
    m, d = cfg.model, cfg.data
    tokens = d.batch_size * d.seq_len
    width = 2 if cfg.train.precision == "bf16-mixed" else 4
    layers = 34 * tokens * m.d_model * m.n_layers * width // 2
    vocab = {"char": 256, "bpe": d.bpe_vocab_size}.get(d.tokenizer, 65536)
    return 16 * params + layers + 3 * tokens * vocab * 4


@pytest.mark.parametrize("study", STUDIES, ids=[p.stem for p in STUDIES])
def test_the_real_shapes_of_every_gpu_profile_take_a_step_on_fake_tensors_and_fit_a_gpu(study):
    """What the tiny smoke shrinks, checked by arithmetic: one member of every shape of the
    profile fits an 80 GB GPU at ``auto``'s share (estimated: weights, AdamW state,
    activations, logits), and every run at its own shape passes a training step and its
    evaluations on fake tensors, in the largest group ``train.stack`` could form there (its N,
    or for ``auto`` as many runs of the shape as that memory holds: a window may turn ``auto``
    on); its FLOPs and tier are checked in test_gpu_table.py."""
    planned = load_study(study, "gpu", check_device=False)
    vocab = split_sizes(planned.runs[0].config.data)[0]
    shapes, counts = {}, Counter()
    for run in planned.runs:  # one check per shape and code path
        cfg = run.config
        shapes.setdefault(stack_key(cfg), cfg)
        counts[stack_key(cfg)] += 1
    for key, cfg in shapes.items():
        with torch.device("meta"):
            params = build_model(cfg.model, vocab).param_counts()["total"]
        need = estimated_member_bytes(params, cfg)
        room = int(AUTO_MEMORY_SHARE * GPU_BYTES // need)
        assert room >= 1, (planned.name, need / 2**30)
        _shape_step(cfg, min(worst_case_limit(cfg), counts[key], room), vocab)


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
