"""The GPU table's budget: FLOPs of a planned run (``ablate plan --flops``) and the guard on the
shipped gpu profiles (together <= 520 PFLOP of training, each well above its cpu profile)."""

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import RunConfig
from ablate.data.datasets import resolve_dataset
from ablate.data.token_cache import token_splits
from ablate.execution.flops import device_minutes, run_flops, study_flops
from ablate.model import build_model
from ablate.study import load_study

STUDIES = sorted(Path("studies").glob("*.yaml"))
TABLE_PFLOP = 520  # one H100-hour at ~15% MFU of its 989 TFLOP/s dense bf16 peak
MIN_TOKENS_X, MIN_PARAMS_X = 10, 15
# nanoGPT's own CPU (4L/128d) and GPU (6L/384d) shapes are 13.4x apart in parameters; the
# reference study and positional_encoding use exactly those two shapes
NANOGPT_SHAPES_X = {"reference_nanogpt_cpu": 13, "positional_encoding": 13}


@pytest.fixture(autouse=True)
def shakespeare():
    """The shipped studies' data on this machine (downloaded once if missing): a plan counts
    FLOPs with its real vocabulary only where the data is at hand, never downloading it."""
    resolve_dataset("tinyshakespeare")


def test_run_flops_match_the_matmuls_a_flop_counter_sees():
    """Independent reference: torch's FlopCounterMode over one forward + backward pass (math
    attention, so QK^T and AV are visible as bmm). It counts matmuls only, so ablate's count is
    that plus 6 FLOPs per token for each non-embedding parameter outside a matmul weight
    (biases, norms): its 6 N counts every parameter."""
    cfg = RunConfig.model_validate(
        {
            "model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "max_seq_len": 128},
            "data": {"seq_len": 128, "batch_size": 2},
            "train": {"max_steps": 7},
        }
    )
    flops = run_flops(cfg)
    model = build_model(cfg.model, 65)  # tiny shakespeare's character vocabulary
    x = torch.randint(0, 65, (2, 128))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x).float().sum().backward()
    weights = sum(m.weight.numel() for m in model.blocks.modules() if isinstance(m, nn.Linear))
    off_matmul = model.param_counts()["non_embedding"] - weights
    assert off_matmul > 0  # the correction below is exercised
    assert flops.flops_per_token == counter.get_total_flops() / x.numel() + 6 * off_matmul
    assert flops.train_tokens == 7 * 2 * 128
    assert flops.train_flops == flops.flops_per_token * 7 * 2 * 128
    # 7 steps hold no periodic evaluation: one forward pass over the whole validation split
    val_tokens = token_splits(cfg.data).tokens["val"].numel()
    assert flops.eval_flops == pytest.approx(val_tokens * flops.flops_per_token / 3)
    assert device_minutes(989e12 * 60 * 0.25, mfu=0.25, peak=989e12) == pytest.approx(1.0)


def _sizes(study_path: Path, profile: str) -> dict[str, tuple[int, int, float]]:
    """Per variant: (non-embedding params, tokens per run, training FLOPs over its seeds)."""
    study = load_study(study_path, profile, check_device=False)
    costs = study_flops(study)
    out: dict[str, tuple[int, int, float]] = {}
    for run in study.runs:
        c = costs[run.run_id]
        prev = out.get(run.variant, (0, 0, 0.0))
        out[run.variant] = (c.non_embedding_params, c.train_tokens, prev[2] + c.train_flops)
    return out


def test_the_shipped_gpu_profiles_fit_the_table_and_outgrow_their_cpu_profiles():
    total = 0.0
    for path in STUDIES:
        gpu, cpu = _sizes(path, "gpu"), _sizes(path, "cpu")
        assert gpu.keys() == cpu.keys(), path
        min_params_x = NANOGPT_SHAPES_X.get(path.stem, MIN_PARAMS_X)
        for variant, (params, tokens, flops) in gpu.items():
            cpu_params, cpu_tokens, _ = cpu[variant]
            assert tokens >= MIN_TOKENS_X * cpu_tokens, (path.stem, variant, tokens, cpu_tokens)
            assert params >= min_params_x * cpu_params, (path.stem, variant, params, cpu_params)
            total += flops
    assert total <= TABLE_PFLOP * 1e15, f"{total / 1e15:.1f} PFLOP"


def test_plan_flops_costs_a_gpu_profile_without_a_gpu():
    res = CliRunner().invoke(
        app, ["plan", "studies/reference_nanogpt_cpu.yaml", "--profile", "gpu", "--flops"]
    )
    assert res.exit_code == 0, res.output
    # 8 runs x 5000 steps x 64 x 256 tokens x flops_per_token of the 6L/384d reference model
    assert "46.50 PFLOP" in res.output and "at 25% MFU" in res.output
