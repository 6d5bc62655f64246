"""The bench: the quick run writes every section with numeric ratios, and the comparison it
rests on is fair (the raw loop and the ablate loop train identically). No timing assertions."""

import json
import re

import pytest
import torch
from torch.testing import assert_close

from ablate.bench.cpu import TINY, run_bench
from ablate.bench.cpu_report import SECTIONS
from ablate.bench.loops import NANOGPT_CPU, ablate_loop, bench_config, loss_parity, raw_loop
from ablate.bench.machine import gpu_peak_bf16
from ablate.bench.speed import MODELS, PeakTensorBytes, Size, param_count

RATIO = re.compile(r"\*\*\d+\.\d+\*\*")


def _config(**overrides):
    return bench_config(
        {**NANOGPT_CPU, **TINY},
        **{
            "train.max_steps": 12,
            "train.eval_interval": 13,
            "train.final_eval_batches": 1,
            "train.log_interval": 5,
            "train.grad_norm_interval": 5,
            "train.checkpoint_interval": 5,
            "train.progress": False,
            "train.threads": 1,
            **overrides,
        },
    )


def test_raw_and_ablate_loops_train_identically():
    """Same init, same batches, same optimizer and schedule: the same loss at every step."""
    cfg = _config()
    ablate, _ = ablate_loop(cfg)
    raw = raw_loop(cfg)
    assert len(ablate.losses) == len(raw.losses) == cfg.train.max_steps
    assert_close(torch.tensor(ablate.losses), torch.tensor(raw.losses), rtol=1e-6, atol=1e-6)
    assert raw.losses[-1] < raw.losses[0]  # it trained: warmup, clipping and decay were active
    assert loss_parity(ablate.losses, raw.losses)["max_abs_diff"] < 1e-6


def test_the_parity_check_can_fail():
    """Another seed (init and batch order) gives another trajectory: the check has power."""
    a = raw_loop(_config())
    b = raw_loop(_config(**{"train.seed": 1}))
    assert not loss_parity(a.losses, b.losses)["identical"]


@pytest.mark.accept  # the whole quick bench, every section side by side: over a minute
def test_quick_bench_writes_every_section_with_ratios(tmp_path):
    out = tmp_path / "bench.md"
    run_bench(quick=True, out=out)
    text = out.read_text()
    for heading in SECTIONS:
        assert heading in text, heading
    sections = re.split(r"\n(?=## )", text)
    numbered = [s for s in sections if re.match(r"## \d+\.", s)]
    # 1-5, 7-11 (section 6 is `ablate bench --chaos`; 8 is measured only when named)
    assert len(numbered) == 10
    assert "not run" in next(s for s in numbered if s.startswith("## 8."))
    assert "nanogpt" not in json.loads(out.with_suffix(".json").read_text())
    for body in numbered:
        if body.startswith("## 8."):
            continue
        assert RATIO.search(body), body[:200]
        assert "FAILED" not in body
    results = json.loads(out.with_suffix(".json").read_text())
    assert results["overhead"]["parity"]["max_abs_diff"] < 1e-6
    assert results["overhead"]["ratio_best"] > 0
    for row in results["speed"]:
        assert len({m["params"] for m in row["models"].values()}) == 1  # same architecture
        assert all(m["peak_bytes"] > 0 for m in row["models"].values())
    assert 0 < results["efficiency"]["rows"][0]["fraction"]
    assert all(r["peak_rss_anon"] > 0 for r in results["data"]["rows"])
    assert set(results["data"]["ratio"]) == {"builds the cache", "cached"}
    (launch,) = results["startup"]["settings"]["default workers (auto)"]["runs"]
    assert 0 < launch["first_line_s"] < launch["first_step_s"] < launch["wall_s"]
    one = results["startup"]["one_run"]  # quick: the default workers and the imports, once
    assert {name: len(runs) for name, runs in one["runs"].items()} == {
        "imports": 1,
        "default workers (auto)": 1,
    }
    assert one["default_over_imports"] > 0 and one["default_over_workers_1"] is None


def test_three_implementations_have_the_same_parameter_count():
    size = Size("t", 2, 48, 4, 16, 2)
    counts = {name: param_count(build(size)) for name, build in MODELS.items()}
    assert len(set(counts.values())) == 1, counts
    x = torch.randint(0, 65, (2, 16))
    for name, build in MODELS.items():
        assert build(size)(x).shape == (2, 16, 65), name


def test_peak_tensor_bytes_counts_live_storages():
    with PeakTensorBytes() as tracker:
        a = torch.ones(1000)  # 4000 bytes
        b = a * 2  # +4000
        del a, b
        c = torch.ones(500)  # 2000, after both were freed
        v = c.view(10, 50)  # a view: no new storage
    assert tracker.peak == 8000
    assert tracker.current == 2000
    del c, v


def test_gpu_peak_table():
    assert gpu_peak_bf16("NVIDIA H100 80GB HBM3")[0] == 989e12
    assert gpu_peak_bf16("NVIDIA H100 PCIe")[0] == 756e12
    assert gpu_peak_bf16("NVIDIA H200")[0] == 989e12
    assert gpu_peak_bf16("NVIDIA A100-SXM4-40GB")[0] == 312e12
    assert gpu_peak_bf16("Some Future GPU") is None


@pytest.mark.parametrize("quick", [True, False])
def test_plans_are_consistent(quick):
    from ablate.bench.cpu import Plan

    plan = Plan.make(quick, gpu=False, threads=2)
    assert plan.overhead_steps > plan.overhead_warmup + 1
    assert plan.speed_reps >= 1 and plan.speed.d_model % plan.speed.n_heads == 0


# --- nanoGPT's procedure in a plain loop (reports/reference_nanogpt_cpu) ----------------------


def test_nanogpt_lr_matches_hand_computed_values():
    from ablate.bench.versus import nanogpt_lr

    kw = {"lr": 1e-3, "min_lr": 1e-4, "warmup": 100, "total": 2000}
    assert nanogpt_lr(0, **kw) == pytest.approx(1e-3 / 101)  # never 0, unlike lr_at's warmup
    assert nanogpt_lr(99, **kw) == pytest.approx(1e-3 * 100 / 101)
    assert nanogpt_lr(100, **kw) == pytest.approx(1e-3)
    assert nanogpt_lr(1050, **kw) == pytest.approx(5.5e-4)  # halfway: (lr + min_lr) / 2
    assert nanogpt_lr(2000, **kw) == pytest.approx(1e-4)
    assert nanogpt_lr(2500, **kw) == pytest.approx(1e-4)


def test_nanogpt_random_windows_shift_targets_by_one():
    from ablate.bench.versus import random_windows

    tokens = torch.arange(100)
    x, y = random_windows(tokens, 8, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 10)
    assert torch.equal(y, x + 1)  # consecutive ids: target = next token
    assert int(x[:, 0].max()) <= 100 - 10 - 1  # every window and its target fit
    assert len(set(x[:, 0].tolist())) > 1  # independent offsets, not one column


def test_nanogpt_loop_trains_and_reports_both_estimates(capsys):
    from ablate.bench.versus import nanogpt_run

    r = nanogpt_run(_config(**{"train.max_steps": 30}), estimate_batches=3)
    assert len(r["train_losses"]) == 30
    assert r["train_losses"][-1] < r["train_losses"][0] - 0.3
    assert r["full_val_loss"] < r["train_losses"][0]
    assert r["nanogpt_estimate"] == pytest.approx(r["full_val_loss"], abs=0.5)


def test_nanogpt_train_keeps_its_cadence_snapshots_and_checkpoint(tmp_path):
    from ablate.bench.versus import nanogpt_train

    cfg = _config(**{"train.max_steps": 10})
    model, _, trace = nanogpt_train(
        cfg, eval_interval=5, eval_iters=2, snapshot_every=4, checkpoint_dir=tmp_path
    )
    assert [e["step"] for e in trace.evals] == [0, 5, 10]  # nanoGPT also evaluates at the end
    assert [s for s, _, _ in trace.snapshots] == [4, 8, 10]  # and after the last step
    final = trace.snapshots[-1][2]
    assert all(torch.equal(final[k], v) for k, v in model.state_dict().items())
    times = [t for _, t, _ in trace.snapshots]
    assert times == sorted(times) and times[-1] <= trace.t_end - trace.t_call
    assert len(trace.stamps) == len(trace.losses) == 10
    assert (tmp_path / "ckpt.pt").is_file()  # val improved after step 0


def test_bench_section_must_be_known():
    from typer.testing import CliRunner

    from ablate.cli import app

    res = CliRunner().invoke(app, ["bench", "--section", "nope"])
    assert res.exit_code == 2
    assert "unknown bench section 'nope'; choose from: overhead, speed" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_bench_without_its_data_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import ablate.bench.cpu
    from ablate.cli import app
    from ablate.errors import ConfigError

    def offline(**_):
        raise ConfigError("data.dataset: could not download it", source="tinyshakespeare")

    monkeypatch.setattr(ablate.bench.cpu, "run_bench", offline)
    out = tmp_path / "bench.md"
    res = CliRunner().invoke(app, ["bench", "--section", "quality", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == "error: tinyshakespeare: data.dataset: could not download it"
    assert not out.exists()


def test_one_section_goes_into_the_existing_report(tmp_path):
    """``--section``: the other sections of the last run stay; the re-measured one says so."""
    out = tmp_path / "bench.md"
    out.with_suffix(".json").write_text(json.dumps({"quick": True, "started": "then", "study": {}}))
    results = run_bench(quick=True, out=out, only="efficiency")
    assert results["study"] == {} and results["efficiency"]["rows"] == []
    text = out.read_text()
    assert "re-measured alone by `ablate bench --section efficiency`" in text
    assert "## 1. Framework overhead\n\nnot run" in text
    assert (
        "run of then (quick (smoke-test sizes: not meaningful as measurements)), sections "
        "since re-measured alone where they say so" in text
    )  # the header says it is no one run


def test_nanogpt_own_runs_train_py_with_the_seed_shifted(tmp_path):
    """The seed shim: nanoGPT seeds ``torch.manual_seed(1337)``; seed s must train under s.
    A stand-in checkout prints what nanoGPT prints; the real one is run by hand (docs)."""
    from ablate.bench import nanogpt_own

    tree = tmp_path / "nanoGPT"
    (tree / "config").mkdir(parents=True)
    (tree / "train.py").write_text(
        "import sys, torch\n"
        "torch.manual_seed(1337)\n"
        "assert sys.argv[1] == 'config/train_shakespeare_char.py', sys.argv\n"
        "print(f'step 2000: train loss 1.0000, val loss {torch.initial_seed() / 1e4:.4f}')\n"
    )
    printed, ckpt, _ = nanogpt_own.train(tree, 1339, threads=1)
    assert printed == 0.1339 and ckpt == tree / "out-seed1339" / "ckpt.pt"
    with pytest.raises(SystemExit) as err:
        nanogpt_own.main(["--nanogpt", str(tmp_path / "nowhere")])
    assert err.value.code == 2
