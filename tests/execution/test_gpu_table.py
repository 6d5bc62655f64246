"""The GPU table's budget: FLOPs of a planned run (``ablate plan --flops``) and the guards on the
shipped gpu profiles (each tier fits one GPU window, every task one command, each profile well
above its cpu profile and stating its FLOPs as the plan computes them)."""

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
from ablate.execution.flops import device_minutes, largest_task, run_flops, study_flops, tiers
from ablate.model import build_model
from ablate.study import load_study

STUDIES = sorted(Path("studies").glob("*.yaml"))
# One GPU window: 30 minutes of device time, 10 minutes a command, on an H200 (989 TFLOP/s
# dense bf16). A tier must fit a window with room for the probe and the archives: 110 PFLOP is
# 15.4 minutes at 12% MFU (the solo runs of these shapes measured 6-7% on an H100, stacked
# groups more). A task (one run, or one stacked group) cut at a command's end starts over on a
# fresh machine, so each must fit one command's training budget: 480 s of its 600 s, the rest
# for the install, the grace after SIGINT and the archive.
TIER_PFLOP, MFU, PEAK, TASK_S = 110, 0.12, 989e12, 480
TIER_1 = {"reference_nanogpt_cpu", "positional_encoding", "architecture"}
MIN_TOKENS_X, MIN_PARAMS_X = 10, 10


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


def _gpu_studies():
    return [load_study(p, "gpu", check_device=False) for p in STUDIES]


def test_the_shipped_gpu_profiles_fit_their_tiers_and_outgrow_their_cpu_profiles():
    by_tier = tiers(_gpu_studies())
    assert None not in by_tier  # every gpu profile has one, numbered from 1
    assert sorted(by_tier) == list(range(1, len(by_tier) + 1))
    assert {s.name for s in by_tier[1]} == TIER_1
    for tier, studies in by_tier.items():
        total = sum(c.total_flops for s in studies for c in study_flops(s).values())
        assert total <= TIER_PFLOP * 1e15, f"tier {tier}: {total / 1e15:.1f} PFLOP"
    for path in STUDIES:
        gpu, cpu = _sizes(path, "gpu"), _sizes(path, "cpu")
        assert gpu.keys() == cpu.keys(), path
        for variant, (params, tokens, _) in gpu.items():
            cpu_params, cpu_tokens, _ = cpu[variant]
            assert tokens >= MIN_TOKENS_X * cpu_tokens, (path.stem, variant, tokens, cpu_tokens)
            assert params >= MIN_PARAMS_X * cpu_params, (path.stem, variant, params, cpu_params)


def test_every_run_or_stacked_group_fits_one_command_at_12_percent_mfu():
    """The largest task of each study (a run, or the largest group ``train.stack`` could form:
    its N, or auto's cap) trains within one command's budget at 12% MFU of an H200."""
    for study in _gpu_studies():
        members, flops = largest_task(study)
        seconds = device_minutes(flops, mfu=MFU, peak=PEAK) * 60
        assert seconds <= TASK_S, (study.name, members, f"{seconds:.0f} s")


def test_each_gpu_profile_states_its_tier_and_flops_as_the_plan_computes_them():
    for study in _gpu_studies():
        lines = study.path.read_text().splitlines()
        (stated,) = [x.strip() for x in lines if x.strip().startswith("# tier ")]
        costs = study_flops(study).values()
        train = sum(c.train_flops for c in costs) / 1e15
        evaluation = sum(c.eval_flops for c in costs) / 1e15
        computed = (
            f"# tier {study.tier}: {train:.2f} PFLOP of training ({len(costs)} runs) + "
            f"{evaluation:.2f} of evaluation"
        )
        assert stated == computed, study.name


def test_plan_flops_costs_a_gpu_profile_without_a_gpu():
    res = CliRunner().invoke(
        app, ["plan", "studies/reference_nanogpt_cpu.yaml", "--profile", "gpu", "--flops"]
    )
    assert res.exit_code == 0, res.output
    # 3 runs x 5000 steps x 64 x 256 tokens x flops_per_token of the 6L/384d reference model
    assert "17.44 PFLOP" in res.output and "H200 at 25% MFU" in res.output
    res = CliRunner().invoke(app, ["plan", *map(str, STUDIES), "-p", "gpu", "--flops"])
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if line.startswith("│ tier ")]
    tiers_seen = [r.split()[2] for r in rows]  # each tier's total, then the sum
    assert tiers_seen == [str(t) for t in range(1, len(tiers_seen) + 1)] and len(tiers_seen) >= 3
    assert "│ total" in res.output and "tier 1: longest task" in res.output
