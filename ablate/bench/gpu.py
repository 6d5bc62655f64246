"""``ablate bench --gpu``: the GPU acceptance bench, one process, ``reports/bench_gpu.md``.

0. the device and its dense bf16 peak (``machine.GPU_BF16_PEAK``, else a measured matmul);
1. every (SDPA backend, encoding, precision, head size) the model can ask for, forward +
   backward on CUDA, against ``ablate.accel.kernel_problem``'s prediction;
2. training MFU of a GPT-2-small-sized config in the raw loop, eager and compiled;
3. framework overhead on the GPU (``loops.compare_loops``);
4. packing k ``ablate train`` processes of a small model on the one GPU: runs/hour;
5. time to quality: the reference study's gpu profile (nanoGPT's GPU config) trained by
   ``train_run`` to nanoGPT's published 1.4697 on the whole val split (``versus.time_to_target``);
6. the probe (``ablate.bench.probe``, also ``ablate bench --probe`` alone): a solo run, 4
   packed processes and a stacked group of 4 at the reference gpu shape, and its verdict.

MFU = ``flops_per_token`` (6 N + attention) x tokens/s / the dense bf16 peak. Sections run
within time budgets; without CUDA the command prints one line and exits 0.
"""

from __future__ import annotations

import itertools
import math
import tempfile
import time
from datetime import datetime
from pathlib import Path
from subprocess import PIPE, STDOUT, Popen
from typing import Any

import torch

from ablate.bench.loops import (
    GPU_OVERRIDES,
    NANOGPT_CPU,
    REFERENCE_STUDY,
    bench_config,
    compare_loops,
    overhead_config,
    profile_flat,
    raw_loop,
)
from ablate.bench.machine import ablate_command, gpu_info, matmul_flops, summary
from ablate.bench.markdown import Sections

NANOGPT_GPU_VAL_LOSS = 1.4697  # nanoGPT README, shakespeare-char on one A100, 5000 iters
MODEL = ("model.n_layers", "model.n_heads", "model.d_model", "model.max_seq_len")
GPT2_SMALL = dict(zip(MODEL, (12, 12, 768, 1024), strict=True))
GPT2_SMALL.update({"model.dropout": 0.0, "data.seq_len": 1024, "data.batch_size": 16})
# under 10M parameters: what packing is for
SMALL_PACKED = dict(zip(MODEL, (4, 4, 256, 256), strict=True))
SMALL_PACKED.update({"data.seq_len": 256, "data.batch_size": 64})
QUIET = {"tracking.wandb": False, "train.progress": False}


def attention_kernels(quick: bool) -> list[dict[str, Any]]:
    """The model's attention under each pinned SDPA backend on CUDA, against the plan-time rule."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ablate.accel import kernel_problem
    from ablate.config import ModelConfig
    from ablate.model.transformer import ALiBiPositions, CausalSelfAttention

    kernels = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}
    backends = {name: getattr(SDPBackend, k) for name, k in kernels.items()}
    rows = []
    for backend, pos, precision, hd in itertools.product(
        backends,
        ("learned", "alibi"),
        ("bf16-mixed", "32-true"),
        (64,) if quick else (64, 128, 256, 320),
    ):
        cfg = ModelConfig(d_model=2 * hd, n_heads=2, pos_encoding=pos, dropout=0.1)
        attn = CausalSelfAttention(cfg).cuda()
        alibi = pos == "alibi"
        bias = ALiBiPositions(cfg).attn_bias(128, torch.device("cuda")) if alibi else None
        x = torch.randn(4, 128, cfg.d_model, device="cuda", requires_grad=True)
        bf16 = torch.autocast("cuda", torch.bfloat16, enabled=precision == "bf16-mixed")
        ok = (
            kernel_problem(backend, "cuda", precision=precision, attn_bias=alibi, head_dim=hd)
            is None
        )
        try:
            with sdpa_kernel([backends[backend]]), bf16:
                attn(x, None, bias).float().sum().backward()
            torch.cuda.synchronize()
            error = None
        except RuntimeError as err:
            error = str(err).strip().splitlines()[0][:160]
        rows.append(
            {"backend": backend, "pos_encoding": pos, "precision": precision, "head_dim": hd}
            | {"predicted_ok": ok, "ran": error is None, "agree": ok == (error is None)}
            | {"error": error}
        )
    return rows


def mfu_row(name: str, flat: dict, *, compile_: bool, steps: int, warmup: int, peak: float) -> dict:
    """Tokens/s, MFU and peak memory of ``flat`` trained by the raw loop on the GPU paths."""
    from ablate.data import LMDataModule
    from ablate.model import build_model

    over = {"train.compile": compile_, "train.max_steps": steps, "train.threads": None}
    cfg = bench_config({**NANOGPT_CPU, **flat, **GPU_OVERRIDES, **QUIET}, **over)
    dm = LMDataModule(cfg.data)
    dm.setup("fit")
    model = build_model(cfg.model, dm.vocab_size)
    fpt, params = model.flops_per_token(cfg.data.seq_len), model.param_counts()["total"]
    del model
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    res = raw_loop(cfg, sync_at={warmup, steps - 1})
    m, d, step_s = cfg.model, cfg.data, res.mean_step(warmup)
    return {
        "model": name,
        "shape": f"{m.n_layers}L/{m.n_heads}H/{m.d_model}d, {d.batch_size}x{d.seq_len}",
        "params": params,
        "attn": cfg.train.attn_backend,
        "compile": compile_,
        "ms_per_step": step_s * 1e3,
        "tokens_per_s": d.batch_size * d.seq_len / step_s,
        "mfu": fpt * d.batch_size * d.seq_len / step_s / (peak * 1e12),
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def training_mfu(peak: float, quick: bool, budget_s: float, log) -> list[dict[str, Any]]:
    name, flat = "GPT-2 small (12L/768d/ctx 1024)", GPT2_SMALL
    steps, warmup = (8, 3) if quick else (40, 10)
    if quick:
        name, flat = "tiny", {**SMALL_PACKED, "model.n_layers": 1, "data.batch_size": 8}
    rows, t0 = [], time.perf_counter()
    for compile_ in (False, True):  # eager first, then compiled while time is left
        if time.perf_counter() - t0 > budget_s:
            rows.append({"model": name, "compile": compile_, "skipped": "time budget"})
            continue
        try:
            row = mfu_row(name, flat, compile_=compile_, steps=steps, warmup=warmup, peak=peak)
            log(f"  compile={compile_}: {row['tokens_per_s']:,.0f} tok/s, MFU {row['mfu']:.1%}")
        except Exception as err:  # noqa: BLE001 - the compiled row failing must not lose eager
            row = {"model": name, "compile": compile_, "error": f"{type(err).__name__}: {err}"}
            log(f"  compile={compile_}: [red]{row['error'][:200]}[/]")
        rows.append(row)
    return rows


def _tracking() -> dict[str, Any]:
    """W&B offline is part of the loop a user runs; without the package, measure without it."""
    try:
        import wandb  # noqa: F401

        importable = True
    except Exception:  # noqa: BLE001 - any import failure
        importable = False
    return {"train.progress": False, "tracking.mode": "offline", "tracking.wandb": importable}


def gpu_overhead(quick: bool, log) -> dict[str, Any]:
    steps, warmup, reps = (30, 10, 1) if quick else (320, 20, 2)
    flat = {**profile_flat(REFERENCE_STUDY, "gpu")[0], **GPU_OVERRIDES}
    cfg = overhead_config(flat, steps, **{"train.compile": False, **_tracking()})
    return compare_loops(cfg, reps=reps, warmup=warmup, log=log)


def gpu_quality(quick: bool, budget_s: float) -> dict[str, Any]:
    from ablate.bench.versus import time_to_target

    over = {**GPU_OVERRIDES, "train.eval_interval": 500, "train.eval_batches": 50, **_tracking()}
    if quick:
        over.update({"train.max_steps": 40, "train.eval_interval": 20, "train.compile": False})
        over.update({"train.eval_batches": 2, "train.final_eval_batches": 5})
    cfg = bench_config(profile_flat(REFERENCE_STUDY, "gpu")[0], **over)
    res = time_to_target(cfg, NANOGPT_GPU_VAL_LOSS, 20 if quick else 250, budget_s=budget_s)
    m, d = cfg.model, cfg.data
    res["tokens_per_s"] = d.batch_size * d.seq_len / res["step_s"]
    res["config"] = (
        f"{m.n_layers}L/{m.n_heads}H/{m.d_model}d, ctx {d.seq_len}, batch {d.batch_size}, "
        f"dropout {m.dropout}, lr {cfg.optim.lr}, {cfg.train.max_steps} steps, "
        f"compile {cfg.train.compile}"
    )
    return res | {"target": NANOGPT_GPU_VAL_LOSS, "budget_s": budget_s}


def packing(quick: bool, log) -> list[dict[str, Any]]:
    """k ``ablate train`` processes at once (separate processes, one GPU): runs/hour."""
    steps = 30 if quick else 600
    flat = {**profile_flat(REFERENCE_STUDY, "gpu")[0], **SMALL_PACKED, **GPU_OVERRIDES, **QUIET}
    flat.update({"train.compile": False, "train.max_steps": steps, "train.eval_interval": steps})
    flat.update({"train.eval_batches": 10, "train.final_eval_batches": 20})
    rows = []
    for k in (1, 2) if quick else (1, 2, 4, 8):
        with tempfile.TemporaryDirectory(prefix="ablate-pack-") as tmp:
            t = time.perf_counter()
            cmds = [
                ablate_command(
                    "train", "--store", tmp, "--name", f"pack{i}", flat=flat | {"train.seed": i}
                )
                for i in range(k)
            ]
            procs = [Popen(c, stdout=PIPE, stderr=STDOUT, text=True) for c in cmds]
            outs = [p.communicate()[0] for p in procs]
            wall = time.perf_counter() - t
            ok = [
                s
                for s in map(summary, Path(tmp).glob("pack*/*"))
                if s and s["status"] == "completed"
            ]
        tokens = sum(s.get("steps", 0) for s in ok) * flat["data.batch_size"] * flat["data.seq_len"]
        errors = [
            o.strip().splitlines()[-1][:200]
            for p, o in zip(procs, outs, strict=True)
            if p.returncode and o.strip()
        ]
        rows.append(
            {"k": k, "completed": len(ok), "wall_s": wall, "runs_per_hour": len(ok) * 3600 / wall}
            | {"tokens_per_s": tokens / wall, "errors": errors}
        )
        log(f"  k={k}: {len(ok)}/{k} runs in {wall:.1f} s, {rows[-1]['runs_per_hour']:.0f} runs/h")
    for r in rows:
        r["vs_k1"] = r["runs_per_hour"] / rows[0]["runs_per_hour"] if rows[0]["completed"] else None
    return rows


def run_gpu_bench(quick: bool = False, out: Path = Path("reports/bench_gpu.md")) -> dict | None:
    """Run every section, writing ``out`` and its JSON after each one. Without CUDA: None."""
    if not torch.cuda.is_available():
        print(f"ablate bench --gpu: no CUDA device visible to torch {torch.__version__}")
        return None
    from ablate.bench import gpu_report

    torch.backends.cuda.matmul.allow_tf32 = True
    r: dict[str, Any] = {"quick": quick, "started": datetime.now().isoformat(timespec="seconds")}
    run = Sections(r, after=lambda: gpu_report.write(r, out))
    say = run.say
    run.run("device", "0. device", lambda: gpu_info(1024 if quick else 8192))
    dev = r.get("device") or {}
    say(f"{dev.get('name')}: peak {dev.get('peak_tflops', math.nan):.0f} TFLOP/s")
    peak = dev.get("peak_tflops") or matmul_flops(4096)["best"] / 1e12
    run.run("attention", "1. attention kernels", lambda: attention_kernels(quick))
    run.run("mfu", "2. training MFU", lambda: training_mfu(peak, quick, 20 if quick else 100, say))
    run.run("overhead", "3. framework overhead", lambda: gpu_overhead(quick, say))
    run.run("packing", "4. packing runs on one GPU", lambda: packing(quick, say))
    budget = 60 if quick else 140
    run.run(
        "quality", "5. time to quality (nanoGPT GPU config)", lambda: gpu_quality(quick, budget)
    )
    from ablate.bench.probe import measure as probe

    run.run("stacked", "6. probe", lambda: probe(quick=quick, peak_tflops=peak, log=say))
    say(f"wrote {out} and {out.with_suffix('.json')} ({r['wall_s'] / 60:.1f} min)")
    return r
