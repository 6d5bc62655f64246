"""The machine the bench runs on: what it is, and how fast it multiplies dense matrices.

The matmul rate is the denominator of every efficiency figure. On a CPU it is *measured*
(fp32 ``torch.mm`` of ``n x n`` squares, ``2 n^3`` FLOPs each, timed in the same process as the
training it is compared with); on a GPU it is the vendor's dense bf16 peak when the card is in
``GPU_BF16_PEAK`` and the measured bf16 rate otherwise.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import torch

from ablate.execution.worker import cpu_count
from ablate.training.train import torch_threads  # noqa: F401 - re-exported for the bench sections

# dense (no sparsity) bf16 tensor-core peaks, FLOP/s, from the vendors' data sheets
GPU_BF16_PEAK: dict[str, float] = {
    "H200": 989e12,
    "H100 SXM": 989e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,  # an unqualified name: the SXM part
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 70e12,
    "L4": 121e12,
}


def has_gpu() -> bool:
    return torch.cuda.is_available()


def device() -> torch.device:
    return torch.device("cuda" if has_gpu() else "cpu")


def sync() -> None:
    """Wait for queued GPU work, so a host clock read covers it (no-op on CPU)."""
    if has_gpu():
        torch.cuda.synchronize()


# the same helpers the runner and the training loop use, so the bench measures what they do
usable_cores = cpu_count


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_peak_bf16(name: str) -> float | None:
    """The table's dense bf16 peak for a CUDA device name, longest matching key first."""
    for key in sorted(GPU_BF16_PEAK, key=len, reverse=True):
        if all(part in name for part in key.split()):
            return GPU_BF16_PEAK[key]
    return None


def machine_info(threads: int) -> dict[str, Any]:
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
        name = torch.cuda.get_device_name()
        info["gpu"] = name
        info["gpu_bf16_peak"] = gpu_peak_bf16(name)
    info["load_avg_start"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return info


def matmul_flops(n: int, *, trials: int = 5, min_time: float = 0.2) -> dict[str, float]:
    """Dense matmul rate (FLOP/s) of ``n x n`` squares: fp32 on CPU, bf16 on GPU.

    Each trial times enough back-to-back ``torch.mm`` calls to last ``min_time`` seconds;
    returns the best and the median trial (the best is the machine's attainable peak; the
    median shows how much a shared machine's load moves it).
    """
    dev = device()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    for _ in range(2):
        torch.mm(a, b, out=c)
    sync()
    t = time.perf_counter()
    torch.mm(a, b, out=c)
    sync()
    reps = max(1, int(min_time / max(time.perf_counter() - t, 1e-6)))
    rates = []
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        sync()
        rates.append(2 * n**3 * reps / (time.perf_counter() - t))
    return {
        "n": n,
        "dtype": str(dtype).removeprefix("torch."),
        "best": max(rates),
        "median": statistics.median(rates),
    }
