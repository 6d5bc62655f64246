"""GPU code paths checked on the CPU: attention-kernel rules (against SDPA itself), bf16 autocast,
fused AdamW with clipping, torch.compile and its checkpoints, the compiler preflight."""

import shutil

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from typer.testing import CliRunner

import ablate.training.stacked.member
from ablate.accel import attn_backend_problem, compile_problem, kernel_problem, pick_backend
from ablate.cli import app
from ablate.config import ConfigError, ModelConfig, build_config
from ablate.model import build_model
from ablate.model.transformer import ALiBiPositions, CausalSelfAttention
from ablate.store import RunStore
from ablate.study import load_study
from ablate.training.lit import LitRuns, lm_loss
from ablate.training.train import train_run
from ablate.training.trainer import attn_context


@pytest.fixture
def tiny_run(tiny_run):
    """conftest's tiny run, its gradient norm logged every 5 steps."""
    return {**tiny_run, "train.grad_norm_interval": 5}


KERNELS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


# --- the attention-kernel rules, asked of SDPA on the CPU -------------------------------------


@pytest.mark.parametrize("backend", list(KERNELS))
@pytest.mark.parametrize("pos", ["learned", "alibi"])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_cpu_rule_matches_what_sdpa_runs(backend, pos, precision):
    cfg = ModelConfig(d_model=32, n_heads=2, pos_encoding=pos)
    attn = CausalSelfAttention(cfg)
    bias = ALiBiPositions(cfg).attn_bias(16, torch.device("cpu")) if pos == "alibi" else None
    x = torch.randn(1, 2, 16, 32)  # (k, B, T, d)
    predicted = kernel_problem(
        backend, "cpu", precision=precision, attn_bias=bias is not None, head_dim=16
    )
    try:
        with (
            sdpa_kernel([KERNELS[backend]]),
            torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16-mixed"),
        ):
            attn(x, None, bias).float().sum().backward()
        ran = True
    except RuntimeError:
        ran = False
    assert ran == (predicted is None), (backend, pos, precision, predicted)


@pytest.mark.parametrize("pos", ["sinusoidal", "learned", "rope", "alibi", "none"])
def test_auto_picks_a_kernel_that_runs_every_encoding(pos, tiny_run):
    cfg = build_config({**tiny_run, "model.pos_encoding": pos, "train.attn_backend": "auto"})
    picked = pick_backend("auto", "cpu", precision="32-true", attn_bias=pos == "alibi", head_dim=16)
    assert picked == ("math" if pos == "alibi" else "flash")
    model = build_model(cfg.model, 65)
    # auto pins its pick (math only as a fallback): forcing the pick alone must also run
    with sdpa_kernel([KERNELS[picked]]):
        model(torch.randint(0, 65, (2, 32))).sum().backward()
    with attn_context(cfg, torch.device("cpu")):
        assert torch.isfinite(model(torch.randint(0, 65, (2, 32)))).all()


def test_auto_on_cuda_prefers_flash_then_efficient():
    kw = {"head_dim": 64}
    assert pick_backend("auto", "cuda", precision="bf16-mixed", attn_bias=False, **kw) == "flash"
    assert pick_backend("auto", "cuda", precision="bf16-mixed", attn_bias=True, **kw) == "efficient"
    assert pick_backend("auto", "cuda", precision="32-true", attn_bias=False, **kw) == "efficient"
    assert pick_backend("auto", "cuda", precision="bf16-mixed", attn_bias=False, head_dim=320) == (
        "efficient"
    )


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"model.pos_encoding": "alibi", "train.accelerator": "gpu"}, "takes no attention mask"),
        ({"model.pos_encoding": "alibi", "train.accelerator": "cpu"}, "CPU flash kernel"),
        ({"train.precision": "32-true", "train.accelerator": "gpu"}, "fp16/bf16"),
        ({"train.precision": "32-true", "train.accelerator": "auto"}, "fp16/bf16"),
    ],
)
def test_impossible_flash_configs_are_rejected_in_one_line(overrides, why, tiny_run):
    with pytest.raises(ConfigError) as err:
        build_config({**tiny_run, "train.attn_backend": "flash", **overrides})
    msg = str(err.value)
    assert "train.attn_backend=flash" in msg and why in msg and "\n" not in msg


def test_possible_kernel_configs_are_accepted(tiny_run):
    build_config({**tiny_run, "train.attn_backend": "flash", "train.precision": "32-true"})  # CPU
    gpu = {"train.accelerator": "gpu", "train.precision": "bf16-mixed"}
    build_config({**tiny_run, **gpu, "train.attn_backend": "flash"})
    build_config(
        {**tiny_run, **gpu, "train.attn_backend": "efficient", "model.pos_encoding": "alibi"}
    )
    for pos in ("alibi", "rope"):  # auto always finds a kernel
        build_config({**tiny_run, **gpu, "train.attn_backend": "auto", "model.pos_encoding": pos})
    assert (  # the LSTM has no attention
        attn_backend_problem(
            "flash",
            arch="lstm",
            pos_encoding="alibi",
            precision="32-true",
            accelerator="gpu",
            head_dim=16,
        )
        is None
    )
    with pytest.raises(ConfigError, match="exists on CUDA only"):
        build_config({**tiny_run, "train.attn_backend": "efficient"})


def test_study_plan_rejects_flash_with_alibi_naming_the_key():
    with pytest.raises(ConfigError) as err:
        load_study("studies/positional_encoding.yaml", "gpu", ["train.attn_backend=flash"])
    assert "train.attn_backend" in str(err.value) and "alibi" in str(err.value)


# --- bf16 autocast on the CPU -----------------------------------------------------------------


def test_bf16_mixed_trains_on_cpu_close_to_fp32(tmp_path, tiny_run):
    store = RunStore(tmp_path)
    got = {}
    for precision in ("32-true", "bf16-mixed"):
        cfg = build_config({**tiny_run, "train.precision": precision, "optim.lr": 3e-3})
        got[precision] = train_run(cfg, store.run("t", cfg.run_id()))
    fp32, bf16 = got["32-true"], got["bf16-mixed"]
    assert bf16["status"] == "completed" and fp32["status"] == "completed"
    assert bf16["final_val_loss"] < 3.9  # learned something (uniform: ln 65 = 4.17)
    assert bf16["final_val_loss"] == pytest.approx(fp32["final_val_loss"], abs=0.05)
    rows = store.run(
        "t", build_config({**tiny_run, "train.precision": "bf16-mixed", "optim.lr": 3e-3}).run_id()
    ).read_metrics()
    names = {m for _, m, _ in rows}
    assert {"train/loss", "grad_norm/global", "val/loss"} <= names


def test_metrics_stay_fp32_under_bf16_autocast(tiny_run):
    cfg = build_config({**tiny_run, "train.precision": "bf16-mixed"})
    lit = LitRuns([cfg], build_model(cfg.model, 65), bits_per_token=False, member_loggers=[[]])
    x, y = torch.randint(0, 65, (2, 32)), torch.randint(0, 65, (2, 32))
    with torch.autocast("cpu", torch.bfloat16):
        logits = lit.model(x)
        loss = lm_loss(logits, y)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    norms = lit.grad_norms()
    assert norms and all(v.dtype == torch.float32 for v in norms.values())


def test_nan_in_bf16_activations_is_caught_as_divergence(tmp_path, monkeypatch, tiny_run):
    real_build = ablate.training.stacked.member.build_model
    seen = {"calls": 0, "dtypes": set()}

    def poisoned_build(cfg, vocab, members=1):
        model = real_build(cfg, vocab, members)

        def hook(module, args, out):
            seen["dtypes"].add(out.dtype)
            if module.training:
                seen["calls"] += 1
                if seen["calls"] > 7:  # from the 8th training step on
                    return out * float("nan")
            return out

        model.blocks[0].attn.register_forward_hook(hook)
        return model

    monkeypatch.setattr(ablate.training.stacked.member, "build_model", poisoned_build)
    cfg = build_config({**tiny_run, "train.precision": "bf16-mixed", "train.eval_interval": 100})
    summary = train_run(cfg, RunStore(tmp_path).run("t", cfg.run_id()))
    assert torch.bfloat16 in seen["dtypes"]  # the NaN was planted in a bf16 tensor
    assert summary["status"] == "diverged" and summary["diverged_step"] == 7


def test_fused_adamw_with_clipping_under_bf16(tmp_path, tiny_run):
    """Every GPU run (fused AdamW by default, clipping 1.0, bf16-mixed) crashed on its first
    step in Lightning's clipping; the fused kernel also runs on the CPU, so this catches it."""
    cfg = build_config(
        {**tiny_run, "train.precision": "bf16-mixed", "optim.fused": True, "optim.grad_clip": 1.0}
    )
    summary = train_run(cfg, RunStore(tmp_path).run("t", cfg.run_id()))
    assert summary["status"] == "completed", summary.get("error")


# --- torch.compile ----------------------------------------------------------------------------


@pytest.mark.slow
def test_compiled_model_gives_the_eager_logits_and_keeps_its_keys(tiny_run):
    cfg = build_config(tiny_run)
    torch.manual_seed(0)
    model = build_model(cfg.model, 65)
    x = torch.randint(0, 65, (2, 32))
    eager = model(x)
    keys = list(model.state_dict())
    model.compile()
    torch.testing.assert_close(model(x), eager, atol=1e-5, rtol=1e-4)
    assert list(model.state_dict()) == keys  # no "_orig_mod.": checkpoints stay interchangeable


def _copy_last(src, dst, rename=None):
    ckpt = torch.load(src.last_checkpoint(), map_location="cpu", weights_only=False)
    if rename:
        ckpt["state_dict"] = {rename(k): v for k, v in ckpt["state_dict"].items()}
    dst.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, dst.checkpoint_dir / "last.ckpt")
    return ckpt


@pytest.mark.slow
def test_checkpoints_move_between_compiled_and_eager_runs(tmp_path, tiny_run):
    store = RunStore(tmp_path)
    base = {**tiny_run, "train.checkpoint_interval": 2, "train.eval_interval": 100}
    eager2 = build_config({**base, "train.max_steps": 2})
    compiled4 = build_config({**base, "train.max_steps": 4, "train.compile": True})
    eager6 = build_config({**base, "train.max_steps": 6})
    a, b, c = store.run("t", "eager2"), store.run("t", "compiled4"), store.run("t", "eager6")
    assert train_run(eager2, a)["status"] == "completed"
    # an eager checkpoint, saved as torch.compile(model) would name it ("model._orig_mod.*")
    _copy_last(a, b, rename=lambda k: k.replace("model.", "model._orig_mod.", 1))
    s = train_run(compiled4, b)
    assert s["status"] == "completed" and s["resumed_from_step"] == 2 and s["steps"] == 4
    ckpt = _copy_last(b, c)
    assert not any("_orig_mod" in k for k in ckpt["state_dict"])
    s = train_run(eager6, c)
    assert s["status"] == "completed" and s["resumed_from_step"] == 4 and s["steps"] == 6


def test_compile_without_a_compiler_is_one_line_at_plan_time(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++, c++, clang++
    monkeypatch.delenv("CXX", raising=False)
    assert compile_problem() is not None
    res = CliRunner().invoke(
        app, ["train", "--set", "train.compile=true", "--store", str(tmp_path / "s")]
    )
    assert res.exit_code == 2
    assert "train.compile" in res.output and "C++ compiler" in res.output
    assert not (tmp_path / "s").exists()  # nothing written
    monkeypatch.undo()
    assert compile_problem() is None or shutil.which("g++") is None
