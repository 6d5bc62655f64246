"""``ablate bench --gpu``: the GPU acceptance bench, one process, ``reports/bench_gpu.md``.

Sections (each within a time budget; a failing one is recorded in the report, the others run):

0. the device: name, driver, torch/CUDA/cuDNN versions, the dense bf16 peak (vendor table
   ``machine.GPU_BF16_PEAK``, else a measured 8192^3 bf16 matmul) and the measured matmul
   rate beside it;
1. attention kernels: every (backend, encoding, precision, head size) the model can ask SDPA
   for, forward + backward on CUDA, against ``ablate.accel.kernel_problem``'s prediction;
2. training MFU and tokens/s of a GPT-2-small-sized config (12L/768d/ctx 1024), bf16 autocast +
   the flash kernel + fused AdamW, eager and compiled, in the raw PyTorch loop
   (``loops.raw_loop``), with the peak memory;
3. framework overhead on the GPU: ``train_run`` / raw loop (``loops.compare_loops``);
4. packing: k = 1, 2, 4, 8 ``ablate train`` processes of a small model at once on the one GPU:
   runs/hour and aggregate tokens/s;
5. time to quality: nanoGPT's GPU shakespeare-char config (the gpu profile of
   ``studies/reference_nanogpt_cpu.yaml``) trained by ``train_run`` exactly as a user runs
   it, evaluated every 500 steps on a fixed 50-batch subset of the validation split and on the
   whole split at the end: wall time to nanoGPT's published 1.4697, and the full-split loss;
6. stacked runs (``train.stack``) vs solo vs ``--runs-per-gpu 4``: a heading that reads "not
   run" (not measured yet; the CPU comparison is ``ablate bench`` section 9).

MFU = model FLOPs per token (``flops_per_token``: 6 N + attention, PaLM's accounting) x tokens/s
/ the dense bf16 peak. Without CUDA the command prints one line and exits 0.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from ablate.bench.loops import (
    GPU_OVERRIDES,
    NANOGPT_CPU,
    ablate_loop,
    bench_config,
    compare_loops,
    overhead_config,
    raw_loop,
)
from ablate.bench.machine import ablate_command, gpu_info, matmul_flops, summary
from ablate.bench.markdown import Sections
from ablate.config import RunConfig, flatten

NANOGPT_GPU_VAL_LOSS = 1.4697  # nanoGPT README, shakespeare-char on one A100, 5000 iters
REFERENCE_STUDY = Path(__file__).resolve().parents[2] / "studies" / "reference_nanogpt_cpu.yaml"

GPT2_SMALL: dict[str, Any] = {
    "model.n_layers": 12,
    "model.n_heads": 12,
    "model.d_model": 768,
    "model.max_seq_len": 1024,
    "model.dropout": 0.0,
    "data.seq_len": 1024,
    "data.batch_size": 16,
}
QUIET = {"tracking.wandb": False, "train.progress": False}
SMALL_PACKED: dict[str, Any] = {  # under 10M parameters: what packing is for
    "model.n_layers": 4,
    "model.n_heads": 4,
    "model.d_model": 256,
    "model.max_seq_len": 256,
    "data.seq_len": 256,
    "data.batch_size": 64,
}


# --- 1. attention kernels ---------------------------------------------------------------------


def attention_kernels(quick: bool) -> list[dict[str, Any]]:
    """Run the model's attention under each pinned SDPA backend on CUDA and compare the outcome
    with the rule ``ablate.accel.kernel_problem`` (what plan-time validation enforces)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ablate.accel import kernel_problem
    from ablate.config import ModelConfig
    from ablate.model.transformer import ALiBiPositions, CausalSelfAttention

    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    head_dims = (64,) if quick else (64, 128, 256, 320)
    rows = []
    for backend, pos, precision, hd in itertools.product(
        backends, ("learned", "alibi"), ("bf16-mixed", "32-true"), head_dims
    ):
        cfg = ModelConfig(d_model=2 * hd, n_heads=2, pos_encoding=pos, dropout=0.1)
        attn = CausalSelfAttention(cfg).cuda()
        alibi = pos == "alibi"
        bias = ALiBiPositions(cfg).attn_bias(128, torch.device("cuda")) if alibi else None
        x = torch.randn(4, 128, cfg.d_model, device="cuda", requires_grad=True)
        bf16 = torch.autocast("cuda", torch.bfloat16, enabled=precision == "bf16-mixed")
        predicted = kernel_problem(
            backend, "cuda", precision=precision, attn_bias=alibi, head_dim=hd
        )
        try:
            with sdpa_kernel([backends[backend]]), bf16:
                attn(x, None, bias).float().sum().backward()
            torch.cuda.synchronize()
            error = None
        except RuntimeError as err:
            error = str(err).strip().splitlines()[0][:160]
        rows.append(
            {
                "backend": backend,
                "pos_encoding": pos,
                "precision": precision,
                "head_dim": hd,
                "predicted_ok": predicted is None,
                "ran": error is None,
                "agree": (predicted is None) == (error is None),
                "error": error,
            }
        )
    return rows


# --- 2. training MFU --------------------------------------------------------------------------


def mfu_row(
    name: str, flat: dict[str, Any], *, compile_: bool, steps: int, warmup: int, peak: float
) -> dict[str, Any]:
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
    t = time.perf_counter()
    res = raw_loop(cfg, sync_at={warmup, steps - 1})
    wall, step_s = time.perf_counter() - t, res.mean_step(warmup)
    m, d = cfg.model, cfg.data
    return {
        "model": name,
        "shape": f"{m.n_layers}L/{m.n_heads}H/{m.d_model}d, {d.batch_size}x{d.seq_len}",
        "params": params,
        "attn": cfg.train.attn_backend,
        "compile": compile_,
        "flops_per_token": fpt,
        "ms_per_step": step_s * 1e3,
        "tokens_per_s": d.batch_size * d.seq_len / step_s,
        "mfu": fpt * d.batch_size * d.seq_len / step_s / (peak * 1e12),
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "wall_s": wall,
        "last_loss": res.losses[-1] if res.losses else None,
    }


def training_mfu(peak: float, quick: bool, budget_s: float, log) -> list[dict[str, Any]]:
    models = [("GPT-2 small (12L/768d/ctx 1024)", GPT2_SMALL)]
    steps, warmup = (8, 3) if quick else (40, 10)
    if quick:
        models = [("tiny", {**SMALL_PACKED, "model.n_layers": 1, "data.batch_size": 8})]
    rows, t0 = [], time.perf_counter()
    # eager first for every model, then compiled, most important first, while time is left
    for compile_, (name, flat) in itertools.product((False, True), models):
        if time.perf_counter() - t0 > budget_s:
            rows.append({"model": name, "compile": compile_, "skipped": "time budget"})
            continue
        try:
            row = mfu_row(name, flat, compile_=compile_, steps=steps, warmup=warmup, peak=peak)
            log(
                f"  {name} compile={compile_}: {row['tokens_per_s']:,.0f} tok/s, "
                f"MFU {row['mfu']:.1%}, {row['peak_mem_gib']:.1f} GiB"
            )
        except Exception as err:  # noqa: BLE001 - one model failing must not lose the rest
            row = {"model": name, "compile": compile_, "error": f"{type(err).__name__}: {err}"}
            log(f"  {name} compile={compile_}: [red]{row['error'][:200]}[/]")
        rows.append(row)
    return rows


# --- 3. overhead, 5. time to quality ----------------------------------------------------------


def _tracking() -> dict[str, Any]:
    """W&B offline is part of the loop a user runs; without the package, measure without it."""
    try:
        import wandb  # noqa: F401

        importable = True
    except Exception:  # noqa: BLE001 - any import failure
        importable = False
    return {"train.progress": False, "tracking.mode": "offline", "tracking.wandb": importable}


def _nanogpt_gpu_flat() -> dict[str, Any]:
    from ablate.study import load_study

    return flatten(load_study(REFERENCE_STUDY, "gpu").runs[0].config.to_dict())


def gpu_overhead(quick: bool, log) -> dict[str, Any]:
    steps, warmup, reps = (30, 10, 1) if quick else (320, 20, 2)
    flat = {**_nanogpt_gpu_flat(), **GPU_OVERRIDES}
    cfg = overhead_config(flat, steps, **{"train.compile": False, **_tracking()})
    return compare_loops(cfg, reps=reps, warmup=warmup, log=log)


def time_to_quality(cfg: RunConfig, target: float, budget_s: float | None = None) -> dict[str, Any]:
    """Train ``cfg`` and time it to ``target`` (the clock starts when training starts; the
    target counts as reached at the end of the first evaluation at or below it); training
    stops early after ``budget_s``."""
    result, timer = ablate_loop(
        cfg, name="time-to-quality", progress=cfg.train.progress, budget_s=budget_s
    )
    summary, evals, t0 = result.summary, timer.evals, timer.train_start
    eval_s = [e["t_end"] - e["t_start"] for e in evals]
    train_s = (timer.train_end - t0) - sum(eval_s)
    final = summary.get("final_val_loss")
    out: dict[str, Any] = {
        "target": target,
        "steps": int(summary["steps"]),
        "eval_interval": cfg.train.eval_interval,
        "eval_batches": cfg.train.eval_batches,
        "evals": [{"step": e["step"], "val_loss": e["val_loss"]} for e in evals],
        "fit_wall_s": timer.train_end - t0,
        "train_s": train_s,
        "eval_s": sum(eval_s),
        "run_wall_s": summary.get("wall_time_s"),
        "tokens_per_s": int(summary["steps"]) * cfg.data.batch_size * cfg.data.seq_len / train_s,
        "final_val_loss": final,
        "final_reached": final is not None and final <= target,
        "best_subset_val_loss": min((e["val_loss"] for e in evals), default=math.nan),
        "flops_per_token": summary.get("flops_per_token"),
        "reached": False,
        "out_of_time": timer.out_of_time,
        "budget_s": budget_s,
    }
    for i, e in enumerate(evals):
        if e["val_loss"] <= target:
            out.update(
                reached=True,
                reached_step=e["step"],
                reached_wall_s=e["t_end"] - t0,
                reached_train_s=e["t_end"] - t0 - sum(eval_s[: i + 1]),
            )
            break
    return out


def gpu_quality(quick: bool, budget_s: float) -> dict[str, Any]:
    over: dict[str, Any] = {
        "train.eval_interval": 500,
        "train.eval_batches": 50,
        "train.final_eval_batches": None,
        "train.compile": True,
        "data.pin_memory": True,
        "optim.fused": True,
        **_tracking(),
    }
    if quick:
        over.update({"train.max_steps": 40, "train.eval_interval": 20, "train.compile": False})
        over.update({"train.eval_batches": 2, "train.final_eval_batches": 5})
    cfg = bench_config(_nanogpt_gpu_flat(), **over)
    res = time_to_quality(cfg, NANOGPT_GPU_VAL_LOSS, budget_s=budget_s)
    m = cfg.model
    res["config"] = (
        f"{m.n_layers}L/{m.n_heads}H/{m.d_model}d, ctx {cfg.data.seq_len}, "
        f"batch {cfg.data.batch_size}, dropout {m.dropout}, lr {cfg.optim.lr}, "
        f"{cfg.train.max_steps} steps, compile {cfg.train.compile}"
    )
    return res


# --- 4. packing -------------------------------------------------------------------------------


def packing(quick: bool, log) -> list[dict[str, Any]]:
    """k ``ablate train`` processes at once (separate processes, one GPU): runs/hour."""
    steps = 30 if quick else 600
    flat = {**_nanogpt_gpu_flat(), **SMALL_PACKED, **GPU_OVERRIDES, **QUIET}
    flat.update({"train.compile": False, "train.max_steps": steps, "train.eval_interval": steps})
    flat.update({"train.eval_batches": 10, "train.final_eval_batches": 20})
    rows = []
    for k in (1, 2) if quick else (1, 2, 4, 8):
        with tempfile.TemporaryDirectory(prefix="ablate-pack-") as tmp:
            t = time.perf_counter()
            procs = [
                subprocess.Popen(
                    ablate_command(
                        "train",
                        "--store",
                        tmp,
                        "--name",
                        f"pack{i}",
                        flat={**flat, "train.seed": i},
                    ),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                for i in range(k)
            ]
            outs = [p.communicate()[0] for p in procs]
            wall = time.perf_counter() - t
            summaries = [summary(p) or {} for p in Path(tmp).glob("pack*/*")]
        ok = [s for s in summaries if s.get("status") == "completed"]
        tokens = sum(s.get("steps", 0) for s in ok) * flat["data.batch_size"] * flat["data.seq_len"]
        row = {
            "k": k,
            "completed": len(ok),
            "wall_s": wall,
            "runs_per_hour": len(ok) * 3600 / wall,
            "tokens_per_s": tokens / wall,
            "in_run_tokens_per_s": sum(s.get("tokens_per_s") or 0 for s in ok),
            "errors": [
                o.strip().splitlines()[-1][:200]
                for p, o in zip(procs, outs, strict=True)
                if p.returncode and o.strip()
            ],
        }
        rows.append(row)
        log(
            f"  k={k}: {row['completed']}/{k} runs in {wall:.1f} s, "
            f"{row['runs_per_hour']:.0f} runs/h, {row['tokens_per_s']:,.0f} tok/s"
        )
    base = rows[0]["runs_per_hour"] or None
    for r in rows:
        r["vs_k1"] = r["runs_per_hour"] / base if base else None
    return rows


# --- the driver -------------------------------------------------------------------------------


def run_gpu_bench(
    quick: bool = False, out: Path = Path("reports/bench_gpu.md")
) -> dict[str, Any] | None:
    """Run every section and write ``out`` and ``out.with_suffix('.json')`` after each one
    (partial results survive a later failure). Without CUDA: one line, ``None``."""
    if not torch.cuda.is_available():
        print(
            f"ablate bench --gpu: no CUDA device visible to torch {torch.__version__}; "
            "nothing measured"
        )
        return None
    from ablate.bench import gpu_report

    torch.backends.cuda.matmul.allow_tf32 = True
    r: dict[str, Any] = {"quick": quick, "started": datetime.now().isoformat(timespec="seconds")}
    run = Sections(r, after=lambda: gpu_report.write(r, out))
    say = run.say
    run.run("device", "0. device", lambda: gpu_info(1024 if quick else 8192))
    dev = r.get("device") or {}
    say(
        f"{dev.get('name')}: peak {dev.get('peak_tflops', math.nan):.0f} TFLOP/s "
        f"({dev.get('peak_source')}), measured matmul {dev.get('matmul_tflops', math.nan):.0f}"
    )
    peak = dev.get("peak_tflops") or matmul_flops(4096)["best"] / 1e12
    run.run("attention", "1. attention kernels", lambda: attention_kernels(quick))
    if r.get("attention"):
        bad = [a for a in r["attention"] if not a["agree"]]
        say(f"{len(r['attention'])} combinations, {len(bad)} disagree with the plan-time rule")
    run.run("mfu", "2. training MFU", lambda: training_mfu(peak, quick, 20 if quick else 100, say))
    run.run("overhead", "3. framework overhead", lambda: gpu_overhead(quick, say))
    run.run("packing", "4. packing runs on one GPU", lambda: packing(quick, say))
    budget = 60 if quick else 140
    run.run(
        "quality", "5. time to quality (nanoGPT GPU config)", lambda: gpu_quality(quick, budget)
    )
    say(f"wrote {out} and {out.with_suffix('.json')} ({r['wall_s'] / 60:.1f} min)")
    return r
