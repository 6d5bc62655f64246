"""The machine the bench runs on: what it is, its dense matmul rate (the denominator of every
efficiency figure: fp32 measured on a CPU; on a GPU the vendor's dense bf16 peak, else measured),
its processes (from ``/proc``), and ``ablate`` commands started as a user starts them."""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from ablate.execution.worker import cpu_count
from ablate.training.trainer import torch_threads  # noqa: F401 - re-exported for the bench sections

# dense (no sparsity) bf16 tensor-core peak, FLOP/s, and where the number comes from: the data
# sheets quote "with sparsity" figures; dense is half of those
GPU_BF16_PEAK: dict[str, tuple[float, str]] = {
    "H200": (989e12, "NVIDIA H200 datasheet: BF16 1,979 TFLOPS with sparsity"),
    "H100 PCIe": (756e12, "NVIDIA H100 datasheet (PCIe): BF16 1,513 TFLOPS with sparsity"),
    "H100 NVL": (835e12, "NVIDIA H100 datasheet (NVL): BF16 1,671 TFLOPS with sparsity"),
    "H100": (989e12, "NVIDIA H100 datasheet (SXM): BF16 1,979 TFLOPS with sparsity"),
    "A100": (312e12, "NVIDIA A100 datasheet: BF16 312 TFLOPS dense (624 with sparsity)"),
    "L40S": (362e12, "NVIDIA L40S datasheet: BF16 362 TFLOPS dense (733 with sparsity)"),
    "A10G": (70e12, "NVIDIA A10G (AWS G5): BF16 70 TFLOPS dense"),
    "L4": (121e12, "NVIDIA L4 datasheet: BF16 242 TFLOPS with sparsity"),
}

# the same helper the runner uses, so the bench measures what it does
usable_cores = cpu_count


def has_gpu() -> bool:
    return torch.cuda.is_available()


def sync() -> None:
    """Wait for queued GPU work, so a host clock read covers it (no-op on CPU)."""
    if has_gpu():
        torch.cuda.synchronize()


def load_avg() -> float | None:
    """The 1-minute load average (above the core count: contention)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_peak_bf16(name: str) -> tuple[float, str] | None:
    """``(FLOP/s, source)`` of a CUDA device name's peak, the longest matching key first."""
    for key in sorted(GPU_BF16_PEAK, key=len, reverse=True):
        if all(part in name for part in key.split()):
            return GPU_BF16_PEAK[key]
    return None


def nvidia_driver() -> str | None:
    """The driver version ``nvidia-smi`` reports (None: no nvidia-smi or no answer)."""
    cmd = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.split("\n")[0].strip() or None) if out.returncode == 0 else None


def machine_info(threads: int | None) -> dict[str, Any]:
    import pytorch_lightning as pl

    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "threads": threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": pl.__version__,
        "platform": platform.platform(terse=True),
        "gpu": None,
    }
    try:
        info["x_transformers"] = version("x-transformers")
    except PackageNotFoundError:  # an optional comparison (a dev dependency)
        info["x_transformers"] = None
    if has_gpu():
        info["gpu"] = torch.cuda.get_device_name()
        peak = gpu_peak_bf16(info["gpu"])
        info["gpu_bf16_peak"] = peak[0] if peak else None
    info["load_avg_start"] = load_avg()
    return info


def gpu_info(matmul_n: int) -> dict[str, Any]:
    """``machine_info``, the CUDA device and its dense bf16 peak (the table's, else measured)."""
    p = torch.cuda.get_device_properties(0)
    measured = matmul_flops(matmul_n, trials=3)["best"]
    table = gpu_peak_bf16(p.name)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return machine_info(None) | {
        "name": p.name,
        "capability": f"{p.major}.{p.minor}",
        "memory_gib": p.total_memory / 2**30,
        "sms": p.multi_processor_count,
        "driver": nvidia_driver(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "triton": triton_version,
        "matmul_n": matmul_n,
        "matmul_tflops": measured / 1e12,
        "peak_tflops": (table[0] if table else measured) / 1e12,
        "peak_source": table[1] if table else f"measured {matmul_n}^3 bf16 matmul (not in table)",
        "peak_table": {k: v[0] / 1e12 for k, v in GPU_BF16_PEAK.items()},
    }


def timed(fn, k: int, *, each: bool = False) -> list[float]:
    """Seconds per call of ``k`` calls of ``fn``, GPU work included: each call on its own
    (``each``: a stall spoils one sample, not a block), else the block's mean ``k`` times."""
    sync()
    if not each:
        t = time.perf_counter()
        for _ in range(k):
            fn()
        sync()
        return [(time.perf_counter() - t) / k] * k
    times = []
    for _ in range(k):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return times


def matmul_flops(n: int, *, trials: int = 5, min_time: float = 0.2) -> dict[str, Any]:
    """Dense matmul FLOP/s of ``n x n`` squares (fp32 on CPU, bf16 on GPU): the best trial
    (the attainable peak) and the median (how much a shared machine's load moves it)."""
    dev = torch.device("cuda" if has_gpu() else "cpu")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a, b, c = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(3))
    mm = lambda: torch.mm(a, b, out=c)  # noqa: E731
    timed(mm, 2)  # warm-up
    reps = max(1, int(min_time / max(timed(mm, 1)[0], 1e-6)))
    rates = [2 * n**3 / timed(mm, reps)[0] for _ in range(trials)]
    return {
        "n": n,
        "dtype": str(dtype).removeprefix("torch."),
        "best": max(rates),
        "median": statistics.median(rates),
    }


# --- processes, from /proc ----------------------------------------------------------------------


def processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (session id, command line)."""
    out: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "(comm)": state ppid pgrp session ...
        if fields[0] in ("Z", "X"):
            continue
        out[int(entry)] = (int(fields[3]), cmd)
    return out


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` but its leader."""
    return sorted(pid for pid, (s, _) in processes().items() if s == sid and pid != sid)


def rss_anon(pid: int) -> int:
    """Anonymous resident bytes of ``pid`` (its heap, not the page cache of files it maps); 0
    once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


# --- ablate commands, as a user runs them -------------------------------------------------------


def ablate_command(verb: str, *args: str, flat: dict[str, Any] | None = None) -> list[str]:
    """``ablate VERB ARGS --no-progress`` in this interpreter, ``flat``'s keys as ``--set``s."""
    cmd = [sys.executable, "-m", "ablate", verb, *args, "--no-progress"]
    for key, v in (flat or {}).items():
        text = "null" if v is None else json.dumps(v) if isinstance(v, (list, bool)) else str(v)
        cmd += ["--set", f"{key}={text}"]
    return cmd


def summary(run: Path) -> dict[str, Any] | None:
    """A run directory's ``summary.json`` (None: not written yet, or mid-write)."""
    try:
        return json.loads((Path(run) / "summary.json").read_text())
    except (OSError, ValueError):
        return None
