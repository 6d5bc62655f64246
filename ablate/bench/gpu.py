"""``ablate bench --gpu``: the GPU acceptance bench, one process, ``reports/bench_gpu.md``.

Sections (each within a time budget; a failing one is recorded in the report, the others run):

0. the device: name, driver, torch/CUDA/cuDNN versions, the dense bf16 peak (vendor table
   ``PEAKS``, else a measured 8192^3 bf16 matmul) and the measured matmul rate beside it;
1. attention kernels: every (backend, encoding, precision, head size) the model can ask SDPA
   for, run forward + backward on CUDA, against ``ablate.accel.kernel_problem``'s prediction;
2. training MFU and tokens/s of each shipped study's gpu-profile model and a GPT-2-small-sized
   config (12L/768d/ctx 1024), bf16 autocast + the flash/efficient kernel + fused AdamW, eager
   and compiled, in the raw PyTorch loop (``loops.raw_loop``), with the peak memory;
3. framework overhead on the GPU: ``train_run`` / raw loop (``loops.compare_loops``);
4. packing: k = 1, 2, 4, 8 ``ablate train`` processes of a small model at once on the one GPU:
   runs/hour, aggregate tokens/s, GPU utilisation sampled with nvidia-smi;
5. time to quality: nanoGPT's GPU shakespeare-char config (the gpu profile of
   ``studies/reference_nanogpt_cpu.yaml``), wall time and the full-split validation loss
   against nanoGPT's published 1.4697.

MFU = model FLOPs per token (``flops_per_token``: 6 N + attention, PaLM's accounting) x tokens/s
/ the dense bf16 peak. Without CUDA the command prints one line and exits 0.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from ablate.bench.loops import GPU_OVERRIDES, NANOGPT_CPU, bench_config, compare_loops, raw_loop

NANOGPT_GPU_VAL_LOSS = 1.4697  # nanoGPT README, shakespeare-char on one A100, 5000 iters
REFERENCE_STUDY = Path(__file__).resolve().parents[2] / "studies" / "reference_nanogpt_cpu.yaml"
STUDIES = Path(__file__).resolve().parents[2] / "studies"

# dense (no sparsity) bf16 tensor-core peak, TFLOP/s, and where the number comes from: the
# data sheets quote "with sparsity" figures; dense is half of those
PEAKS: dict[str, tuple[float, str]] = {
    "H200": (989.0, "NVIDIA H200 datasheet: BF16 1,979 TFLOPS with sparsity"),
    "H100 PCIe": (756.0, "NVIDIA H100 datasheet (PCIe): BF16 1,513 TFLOPS with sparsity"),
    "H100 NVL": (835.0, "NVIDIA H100 datasheet (NVL): BF16 1,671 TFLOPS with sparsity"),
    "H100": (989.0, "NVIDIA H100 datasheet (SXM): BF16 1,979 TFLOPS with sparsity"),
    "A100": (312.0, "NVIDIA A100 datasheet: BF16 312 TFLOPS dense (624 with sparsity)"),
    "L40S": (362.0, "NVIDIA L40S datasheet: BF16 362 TFLOPS dense (733 with sparsity)"),
    "L4": (121.0, "NVIDIA L4 datasheet: BF16 242 TFLOPS with sparsity"),
}

GPT2_SMALL: dict[str, Any] = {
    "model.n_layers": 12,
    "model.n_heads": 12,
    "model.d_model": 768,
    "model.max_seq_len": 1024,
    "model.dropout": 0.0,
    "data.seq_len": 1024,
    "data.batch_size": 16,
}
SMALL_PACKED: dict[str, Any] = {  # under 10M parameters: what packing is for
    "model.n_layers": 4,
    "model.n_heads": 4,
    "model.d_model": 256,
    "model.max_seq_len": 256,
    "data.seq_len": 256,
    "data.batch_size": 64,
}


def peak_from_table(name: str) -> tuple[float, str] | None:
    """``(TFLOP/s, source)`` for a CUDA device name, the longest matching key first."""
    for key in sorted(PEAKS, key=len, reverse=True):
        if all(part in name for part in key.split()):
            return PEAKS[key]
    return None


def _sync() -> None:
    torch.cuda.synchronize()


# --- 0. the device ----------------------------------------------------------------------------


def _nvidia_smi(query: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None
    except (OSError, subprocess.SubprocessError):
        return None


def matmul_tflops(n: int, reps: int = 20) -> float:
    """Measured dense bf16 ``n x n @ n x n`` rate (best of 3 timed blocks), TFLOP/s."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    _sync()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        _sync()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 * reps / best / 1e12


def device_info(matmul_n: int) -> dict[str, Any]:
    import pytorch_lightning as pl

    p = torch.cuda.get_device_properties(0)
    measured = matmul_tflops(matmul_n)
    table = peak_from_table(p.name)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "name": p.name,
        "capability": f"{p.major}.{p.minor}",
        "memory_gib": p.total_memory / 2**30,
        "sms": p.multi_processor_count,
        "driver": _nvidia_smi("driver_version"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "triton": triton_version,
        "lightning": pl.__version__,
        "python": platform.python_version(),
        "cpu_cores": os.cpu_count(),
        "matmul_n": matmul_n,
        "matmul_tflops": measured,
        "peak_tflops": table[0] if table else measured,
        "peak_source": table[1] if table else f"measured {matmul_n}^3 bf16 matmul (not in table)",
        "peak_table": {k: v[0] for k, v in PEAKS.items()},
    }


# --- 1. attention kernels ---------------------------------------------------------------------


def attention_kernels(quick: bool) -> list[dict[str, Any]]:
    """Run the model's attention under each pinned SDPA backend on CUDA and compare the outcome
    with the rule ``ablate.accel.kernel_problem`` (what plan-time validation enforces)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ablate.accel import kernel_problem
    from ablate.config import ModelConfig
    from ablate.model.transformer import ALiBiPositions, CausalSelfAttention

    names = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    rows = []
    head_dims = (64,) if quick else (64, 128, 256, 320)
    for backend in names:
        for pos in ("learned", "alibi"):
            for precision in ("bf16-mixed", "32-true"):
                for hd in head_dims:
                    cfg = ModelConfig(d_model=2 * hd, n_heads=2, pos_encoding=pos, dropout=0.1)
                    attn = CausalSelfAttention(cfg).cuda()
                    bias = (
                        ALiBiPositions(cfg).attn_bias(128, torch.device("cuda"))
                        if pos == "alibi"
                        else None
                    )
                    x = torch.randn(4, 128, cfg.d_model, device="cuda", requires_grad=True)
                    predicted = kernel_problem(
                        backend,
                        "cuda",
                        precision=precision,
                        attn_bias=bias is not None,
                        head_dim=hd,
                    )
                    try:
                        with (
                            sdpa_kernel([names[backend]]),
                            torch.autocast(
                                "cuda", torch.bfloat16, enabled=precision == "bf16-mixed"
                            ),
                        ):
                            attn(x, None, bias).float().sum().backward()
                        _sync()
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


def _study_models() -> list[tuple[str, dict[str, Any]]]:
    """The first transformer run of each shipped study's gpu profile, one per distinct shape."""
    from ablate.study import load_study

    out, seen = [], set()
    for path in sorted(STUDIES.glob("*.yaml")):
        try:
            study = load_study(path, "gpu")
        except Exception:  # noqa: BLE001 - a study without a gpu profile
            continue
        for run in study.runs:
            c = run.config
            if c.model.arch != "transformer":
                continue
            m, d = c.model, c.data
            key = (m.n_layers, m.d_model, m.n_heads, d.seq_len, d.batch_size, m.pos_encoding)
            if key not in seen:
                seen.add(key)
                flat = {f"{s}.{k}": v for s, sub in c.to_dict().items() for k, v in sub.items()}
                out.append((f"{study.name} ({m.n_layers}L/{m.d_model}d)", flat))
            break
    return out


def _train_cfg(flat: dict[str, Any], *, compile_: bool, steps: int) -> Any:
    cfg = {**NANOGPT_CPU, **flat, **GPU_OVERRIDES}
    cfg.update(
        {
            "train.compile": compile_,
            "train.max_steps": steps,
            "train.attn_backend": "efficient"
            if cfg.get("model.pos_encoding") == "alibi"
            else "flash",
            "train.threads": None,
            "tracking.wandb": False,
            "train.progress": False,
        }
    )
    return bench_config(cfg)


def mfu_row(
    name: str, flat: dict[str, Any], *, compile_: bool, steps: int, warmup: int, peak: float
) -> dict[str, Any]:
    from ablate.data import LMDataModule
    from ablate.model import build_model

    cfg = _train_cfg(flat, compile_=compile_, steps=steps)
    dm = LMDataModule(cfg.data)
    dm.setup("fit")
    model = build_model(cfg.model, dm.vocab_size)
    fpt = model.flops_per_token(cfg.data.seq_len)
    params = model.param_counts()["total"]
    del model
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    res = raw_loop(cfg, sync_at={warmup, steps - 1})
    wall = time.perf_counter() - t
    step_s = res.mean_step(warmup)
    tokens_per_s = cfg.data.batch_size * cfg.data.seq_len / step_s
    return {
        "model": name,
        "shape": f"{cfg.model.n_layers}L/{cfg.model.n_heads}H/{cfg.model.d_model}d, "
        f"{cfg.data.batch_size}x{cfg.data.seq_len}",
        "params": params,
        "attn": cfg.train.attn_backend,
        "compile": compile_,
        "flops_per_token": fpt,
        "ms_per_step": step_s * 1e3,
        "tokens_per_s": tokens_per_s,
        "mfu": fpt * tokens_per_s / (peak * 1e12),
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "wall_s": wall,
        "last_loss": res.losses[-1] if res.losses else None,
    }


def training_mfu(
    peak: float, quick: bool, budget_s: float, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    models = [("GPT-2 small (12L/768d/ctx 1024)", GPT2_SMALL), *_study_models()]
    steps, warmup = (8, 3) if quick else (40, 10)
    if quick:
        models = [("tiny", {**SMALL_PACKED, "model.n_layers": 1, "data.batch_size": 8})]
    rows, t0 = [], time.perf_counter()
    # eager first for every model, then compiled, most important first, while time is left
    for compile_ in (False, True):
        for name, flat in models:
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


# --- 3. overhead ------------------------------------------------------------------------------


def gpu_overhead(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    flat = _nanogpt_gpu_flat()
    steps, warmup, reps = (30, 10, 1) if quick else (320, 20, 2)
    cfg = bench_config(
        {**flat, **GPU_OVERRIDES},
        **{
            "train.compile": False,
            "train.max_steps": steps,
            "train.eval_interval": steps + 1,
            "train.final_eval_batches": 1,
            "train.progress": False,
            "tracking.mode": "offline",
            "tracking.wandb": _wandb_importable(),
        },
    )
    return compare_loops(cfg, reps=reps, warmup=warmup, log=log)


def _wandb_importable() -> bool:
    """W&B offline is part of the loop a user runs; without the package, measure without it."""
    try:
        import wandb  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure
        return False
    return True


def _nanogpt_gpu_flat() -> dict[str, Any]:
    from ablate.study import load_study

    cfg = load_study(REFERENCE_STUDY, "gpu").runs[0].config
    return {f"{s}.{k}": v for s, sub in cfg.to_dict().items() for k, v in sub.items()}


# --- 4. packing -------------------------------------------------------------------------------


class UtilSampler(threading.Thread):
    """GPU utilisation (%) every ``interval`` s from nvidia-smi (else torch.cuda.utilization)."""

    def __init__(self, interval: float = 0.5):
        super().__init__(daemon=True)
        self.interval, self.samples, self._halt = interval, [], threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            value = _nvidia_smi("utilization.gpu")
            if value is None:
                try:
                    value = torch.cuda.utilization()
                except Exception:  # noqa: BLE001 - no NVML: no samples
                    return
            try:
                self.samples.append(float(value))
            except ValueError:
                return
            self._halt.wait(self.interval)

    def stop(self) -> list[float]:
        self._halt.set()  # not ``_stop``: Thread has a method of that name
        self.join(timeout=5)
        return self.samples


def packing(quick: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """k ``ablate train`` processes at once (separate processes, one GPU): runs/hour."""
    steps = 30 if quick else 600
    ks = (1, 2) if quick else (1, 2, 4, 8)
    flat = {**_nanogpt_gpu_flat(), **SMALL_PACKED, **GPU_OVERRIDES}
    flat.update(
        {
            "train.compile": False,
            "train.max_steps": steps,
            "train.eval_interval": steps,
            "train.eval_batches": 10,
            "train.final_eval_batches": 20,
            "train.progress": False,
            "tracking.wandb": False,
        }
    )
    rows = []
    for k in ks:
        with tempfile.TemporaryDirectory(prefix="ablate-pack-") as tmp:
            cmds = [
                [
                    sys.executable,
                    "-m",
                    "ablate",
                    "train",
                    "--store",
                    tmp,
                    "--name",
                    f"pack{i}",
                    "--no-progress",
                ]
                + [
                    a
                    for key, v in {**flat, "train.seed": i}.items()
                    for a in ("--set", f"{key}={_yaml(v)}")
                ]
                for i in range(k)
            ]
            sampler = UtilSampler()
            sampler.start()
            t = time.perf_counter()
            procs = [
                subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for c in cmds
            ]
            outs = [p.communicate()[0] for p in procs]
            wall = time.perf_counter() - t
            util = sampler.stop()
            summaries = [json.loads(p.read_text()) for p in Path(tmp).glob("pack*/*/summary.json")]
        ok = [s for s in summaries if s.get("status") == "completed"]
        tokens = sum(s.get("steps", 0) for s in ok) * flat["data.batch_size"] * flat["data.seq_len"]
        row = {
            "k": k,
            "completed": len(ok),
            "wall_s": wall,
            "runs_per_hour": len(ok) * 3600 / wall,
            "tokens_per_s": tokens / wall,
            "in_run_tokens_per_s": sum(s.get("tokens_per_s") or 0 for s in ok),
            "gpu_util_mean": sum(util) / len(util) if util else None,
            "gpu_util_samples": len(util),
            "errors": [
                o.strip().splitlines()[-1][:200]
                for p, o in zip(procs, outs, strict=True)
                if p.returncode and o.strip()
            ],
        }
        rows.append(row)
        log(
            f"  k={k}: {row['completed']}/{k} runs in {wall:.1f} s, "
            f"{row['runs_per_hour']:.0f} runs/h, {row['tokens_per_s']:,.0f} tok/s, "
            f"GPU busy {row['gpu_util_mean'] or float('nan'):.0f}%"
        )
    base = rows[0]["runs_per_hour"] if rows and rows[0]["runs_per_hour"] else None
    for r in rows:
        r["vs_k1"] = r["runs_per_hour"] / base if base else None
    return rows


def _yaml(v: Any) -> str:
    return "null" if v is None else json.dumps(v) if isinstance(v, (list, bool)) else str(v)


# --- 5. time to quality -----------------------------------------------------------------------


def gpu_quality(quick: bool, budget_s: float) -> dict[str, Any]:
    from ablate.bench.quality import time_to_quality

    flat = _nanogpt_gpu_flat()
    over: dict[str, Any] = {
        "train.eval_interval": 500,
        "train.eval_batches": 50,
        "train.final_eval_batches": None,
        "train.progress": False,
        "train.compile": True,
        "data.pin_memory": True,
        "optim.fused": True,
        "tracking.mode": "offline",
        "tracking.wandb": _wandb_importable(),
    }
    if quick:
        over.update(
            {
                "train.max_steps": 40,
                "train.eval_interval": 20,
                "train.eval_batches": 2,
                "train.final_eval_batches": 5,
                "train.compile": False,
            }
        )
    cfg = bench_config(flat, **over)
    res = time_to_quality(cfg, NANOGPT_GPU_VAL_LOSS, budget_s=budget_s)
    m = cfg.model
    res["config"] = (
        f"{m.n_layers}L/{m.n_heads}H/{m.d_model}d, ctx {cfg.data.seq_len}, "
        f"batch {cfg.data.batch_size}, dropout {m.dropout}, lr {cfg.optim.lr}, "
        f"{cfg.train.max_steps} steps, compile {cfg.train.compile}"
    )
    return res


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
    from rich.console import Console

    from ablate.bench import gpu_report

    console = Console(highlight=False)
    say = console.print
    os.environ.setdefault("WANDB_SILENT", "true")
    torch.backends.cuda.matmul.allow_tf32 = True
    r: dict[str, Any] = {
        "quick": quick,
        "started": datetime.now().isoformat(timespec="seconds"),
        "errors": {},
        "section_s": {},
    }
    t_start = time.perf_counter()

    def section(key: str, title: str, fn: Callable[[], Any]) -> None:
        console.rule(f"[bold]{title}")
        t = time.perf_counter()
        try:
            r[key] = fn()
        except Exception as err:  # noqa: BLE001 - record it, run the other sections
            say(traceback.format_exc())
            r["errors"][key] = f"{type(err).__name__}: {err}"
        r["section_s"][key] = time.perf_counter() - t
        r["wall_s"] = time.perf_counter() - t_start
        gpu_report.write(r, out)
        say(f"[dim]{title}: {r['section_s'][key]:.0f} s (total {r['wall_s']:.0f} s)[/]")

    section("device", "0. device", lambda: device_info(1024 if quick else 8192))
    dev = r.get("device") or {}
    say(
        f"{dev.get('name')}: peak {dev.get('peak_tflops', float('nan')):.0f} TFLOP/s "
        f"({dev.get('peak_source')}), "
        f"measured matmul {dev.get('matmul_tflops', float('nan')):.0f}"
    )
    peak = dev.get("peak_tflops") or matmul_tflops(4096)
    section("attention", "1. attention kernels", lambda: attention_kernels(quick))
    if r.get("attention"):
        bad = [a for a in r["attention"] if not a["agree"]]
        say(f"{len(r['attention'])} combinations, {len(bad)} disagree with the plan-time rule")
    section("mfu", "2. training MFU", lambda: training_mfu(peak, quick, 20 if quick else 100, say))
    section("overhead", "3. framework overhead", lambda: gpu_overhead(quick, say))
    section("packing", "4. packing runs on one GPU", lambda: packing(quick, say))
    section(
        "quality",
        "5. time to quality (nanoGPT GPU config)",
        lambda: gpu_quality(quick, 60 if quick else 140),
    )
    say(f"wrote {out} and {out.with_suffix('.json')} ({r['wall_s'] / 60:.1f} min)")
    return r
