"""The GPU table's budget: FLOPs of a planned run (``ablate plan --flops``) and the guards on the
shipped gpu profiles (each tier fits one GPU window at the measured rate, every task a few
minutes, no profile draws more windows than its corpus has, the reference profile is nanoGPT's
GPU config, each profile well above its cpu profile and stating its FLOPs as the plan computes
them)."""

import json
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
from ablate.execution import flops
from ablate.execution.flops import (
    device_minutes,
    largest_task,
    pilot_rate,
    run_flops,
    run_reuse,
    study_flops,
    tiers,
)
from ablate.model import build_model
from ablate.model.members import Linear
from ablate.study import load_study

STUDIES = sorted(Path("studies").glob("*.yaml"))
# One GPU window: a session lent a GPU gets 15 minutes of device time in all, the machine's
# start included, at most 10 minutes a command: one command of ~9 minutes. A tier must fit
# one: 30 PFLOP (training and evaluation) is 8 minutes at the rate the GPU pilot measured (its
# solo runs, evaluations included, ~62 TFLOP/s on an H200), more than a window leaves after
# the install and the probe only when the probe's verdict (stack or pack) is no faster: such a
# tier spills into the next window, which resumes it. A task (one run, or one stacked group)
# cut at a command's end starts over on a fresh machine, so none may take over 4 minutes.
TIER_PFLOP, TASK_S = 30, 240
TIER_1 = {"reference_nanogpt_cpu"}
MIN_TOKENS_X, MIN_PARAMS_X = 10, 10
# nanoGPT's config/train_shakespeare_char.py (with its train.py defaults it keeps), as the
# reference study's gpu profile must resolve it
NANOGPT_GPU = {
    "model.n_layers": 6,
    "model.n_heads": 6,
    "model.d_model": 384,
    "model.dropout": 0.2,
    "model.bias": False,
    "model.tie_embeddings": True,
    "model.norm_placement": "pre",
    "model.pos_encoding": "learned",
    "model.activation": "gelu",
    "data.seq_len": 256,
    "data.batch_size": 64,
    "data.order": "random",  # get_batch: a random offset per sequence
    "data.val_fraction": 0.1,
    "optim.lr": 1e-3,
    "optim.min_lr": 1e-4,
    "optim.decay": "cosine_min",
    "optim.beta1": 0.9,
    "optim.beta2": 0.99,
    "optim.weight_decay": 0.1,
    "optim.grad_clip": 1.0,
    "train.max_steps": 5000,
    "train.eval_interval": 250,
}


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
    linears = (nn.Linear, Linear)  # ablate's: the members' batched matmul (one member here)
    weights = sum(m.weight.numel() for m in model.blocks.modules() if isinstance(m, linears))
    off_matmul = model.param_counts()["non_embedding"] - weights
    assert off_matmul > 0  # the correction below is exercised
    assert flops.flops_per_token == counter.get_total_flops() / x.numel() + 6 * off_matmul
    assert flops.train_tokens == 7 * 2 * 128
    assert flops.train_flops == flops.flops_per_token * 7 * 2 * 128
    # 7 steps hold no periodic evaluation: one forward pass over the whole validation split
    val_tokens = token_splits(cfg.data).tokens["val"].numel()
    assert flops.eval_flops == pytest.approx(val_tokens * flops.flops_per_token / 3)
    assert device_minutes(62e12 * 60, 62e12) == pytest.approx(1.0)


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
    assert None not in by_tier and sorted(by_tier) == list(range(1, len(by_tier) + 1))
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


def test_every_run_or_stacked_group_fits_four_minutes_at_the_pilots_rate():
    """The largest task of each study (a run, or the largest group ``train.stack`` could form:
    its N, or under auto every run of one shape) trains within 4 minutes at the rate the GPU
    pilot measured."""
    rate = pilot_rate()
    assert rate is not None and 40e12 < rate.flops_per_s < 90e12  # the H200 pilot: ~62
    for study in _gpu_studies():
        members, flops = largest_task(study)
        seconds = device_minutes(flops, rate.flops_per_s) * 60
        assert seconds <= TASK_S, (study.name, members, f"{seconds:.0f} s")


def test_no_gpu_profile_draws_more_windows_than_its_corpus_has():
    """From the resolved configs: every run of every gpu profile draws each distinct training
    window at most once on average (the pilot's fixed windows were drawn 20-82 times)."""
    for study in _gpu_studies():
        for run in study.runs:
            reuse = run_reuse(run.config)
            assert reuse is not None and reuse.per_window <= 1, (study.name, run.name, reuse)
            assert run.config.data.order == "random", (study.name, run.name)


def test_the_reference_gpu_profile_is_nanogpts_gpu_config():
    (study,) = [s for s in _gpu_studies() if s.name == "reference_nanogpt_cpu"]
    for run in study.runs:
        c = run.config.to_dict()
        got = {k: c[k.split(".")[0]][k.split(".")[1]] for k in NANOGPT_GPU}
        assert got == NANOGPT_GPU
        assert round(run.config.optim.warmup_ratio * 5000) == 100  # warmup_iters
        assert run.config.train.eval_batches == 200  # eval_iters (nanoGPT's are random batches)
    claims = {c.id: c for c in study.claims}
    assert claims["equals-nanogpt-readme"].external == (1.4697,)
    own = claims["equals-nanogpt-full-split"]
    assert own.external_source == "../reports/gpu/nanogpt_own.json: best_val_loss"
    assert {c.metric for c in claims.values()} == {"best_val_loss"}


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


def test_plan_flops_costs_a_gpu_profile_at_a_measured_rate_without_a_gpu(monkeypatch):
    plan = ["plan", "studies/reference_nanogpt_cpu.yaml", "--profile", "gpu", "--flops"]
    res = CliRunner().invoke(app, plan)  # the shipped CUDA probe's rate comes first
    assert res.exit_code == 0, res.output
    started = json.loads(flops.PROBE_JSON.read_text())["started"]  # named by when it ran
    assert f"measured: the CUDA probe of {started} on " in res.output
    monkeypatch.setattr(flops, "probe_rate", lambda: None)  # no probe: the pilot's rate
    res = CliRunner().invoke(app, plan)
    assert res.exit_code == 0, res.output
    # 3 runs x 5000 steps x 64 x 256 tokens x flops_per_token of the 6L/384d reference model
    assert "17.44 PFLOP" in res.output and "measured: the GPU pilot's 2 solo runs" in res.output
    assert "0.32 windows drawn per distinct window" in res.output
    res = CliRunner().invoke(app, ["plan", *map(str, STUDIES), "-p", "gpu", "--flops"])
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if line.startswith("│ tier ")]
    assert [r.split()[2] for r in rows] == [str(t) for t in range(1, len(rows) + 1)]
    assert "│ total" in res.output and "tier 1: longest task" in res.output
    assert "warning" not in res.output  # no profile draws more windows than exist
    res = CliRunner().invoke(
        app, ["plan", "studies/reference_nanogpt_cpu.yaml", "-p", "gpu", "--flops", "--tflops", "1"]
    )
    assert "minutes at 1 TFLOP/s, measured: --tflops" in res.output
    # the cpu profile's course windows (stride = seq_len, 12 rows) are drawn about 1.5 times
    res = CliRunner().invoke(app, ["plan", "studies/reference_nanogpt_cpu.yaml", "--flops"])
    (warning,) = [line for line in res.output.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: reference_nanogpt_cpu: runs draw up to 1.5x")
