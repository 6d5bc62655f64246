"""Which accelerated paths a run can take: the SDPA kernel, and whether ``torch.compile`` can.

Pure rules, checked when a config is built (``RunConfig`` calls ``attn_backend_problem``) and
before a study starts (``compile_problem``), so an impossible combination is a one-line
``ConfigError`` at plan time, never a crash an hour into a GPU queue.

The attention rules are facts about ``F.scaled_dot_product_attention`` as the model calls it
(``ablate.model.transformer.CausalSelfAttention``): ``q, k, v`` of shape ``(B, H, T, head_dim)``
in the autocast dtype, and either ``is_causal=True`` (no mask) or, for ALiBi only, an additive
``(H, T, T)`` float bias that already holds the causal ``-inf``. Every other encoding (learned,
sinusoidal, RoPE, none) passes no mask.

- CUDA flash (FlashAttention-2): fp16/bf16 inputs only, no ``attn_mask`` at all, head size at
  most 256 (PyTorch's ``sdp_utils.cpp``: ``check_for_attn_mask``, ``check_tensor_dtype``,
  ``check_head_dim_size_flash``). So no ALiBi, and no ``precision: 32-true``.
- CUDA efficient (xFormers' memory-efficient kernel): fp32/fp16/bf16, takes an additive mask.
- CPU flash: fp32 and bf16, takes a 2-D or 4-D mask but not the model's 3-D ``(H, T, T)`` bias.
- CPU has no efficient kernel (CUDA only). ``math`` runs everything everywhere.

``tests/training/test_accel.py`` asks SDPA on the CPU whether each CPU rule holds;
``ablate bench --gpu`` asks the CUDA kernels the same for the CUDA rules and reports any
disagreement.

One fact depends on the CPU, so it is asked of the CPU, not read from its flags: CPUs
without native bf16 (AVX512-BF16 or AMX) emulate bf16 matrix products, ~70x slower than fp32 on
an AVX2-only CPU. ``cpu_bf16_matmul_fast`` times one product of each, and the smoke test
(``ablate.execution.smoke``) trains fewer steps of a bf16 profile there, in bf16 all the same.
(The LSTM, whose bf16 kernel oneDNN has only on some CPUs, always runs in fp32:
``ablate.model.lstm``.)
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
from functools import cache
from typing import Literal

Device = Literal["cuda", "cpu"]
BACKENDS = ("flash", "efficient", "math")
HALF_PRECISIONS = ("bf16-mixed", "bf16-true", "16-mixed")
BF16_PRECISIONS = ("bf16-mixed", "bf16-true")
FLASH_MAX_HEAD_DIM = 256


def gpu_driver() -> bool:
    """Whether this machine has a GPU driver torch could use: NVIDIA's ``libcuda`` loads, or
    AMD's ``/dev/kfd`` (ROCm) exists. Asked without importing torch (seconds): where this says
    no, ``torch.cuda.is_available()`` says no too, so a CPU machine decides a study's profile
    and its GPU checks without torch."""
    if os.path.exists("/dev/kfd"):
        return True
    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.dylib")
    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def attn_devices(accelerator: str) -> tuple[Device, ...]:
    """The devices a run with ``train.accelerator`` may attend on (``auto``: either)."""
    return {"gpu": ("cuda",), "cpu": ("cpu",)}.get(accelerator, ("cuda", "cpu"))


def kernel_problem(
    backend: str,
    device: Device,
    *,
    precision: str,
    attn_bias: bool,
    head_dim: int,
) -> str | None:
    """Why SDPA's ``backend`` kernel cannot run this attention on ``device``; ``None`` if it can.

    ``attn_bias``: the model passes an additive mask (ALiBi); ``precision``: Lightning's.
    """
    if backend == "math":
        return None
    if device == "cpu":
        if backend == "efficient":
            return "the efficient kernel exists on CUDA only"
        if attn_bias:
            return "the CPU flash kernel does not take ALiBi's (H, T, T) attention bias"
        return None
    if backend == "flash":
        if attn_bias:
            return "the flash kernel takes no attention mask, and ALiBi adds a bias"
        if precision not in HALF_PRECISIONS:
            return f"the flash kernel needs fp16/bf16 inputs, not precision {precision}"
        if head_dim > FLASH_MAX_HEAD_DIM:
            return (
                f"the flash kernel supports head sizes up to {FLASH_MAX_HEAD_DIM}, not {head_dim}"
            )
    return None


def pick_backend(
    requested: str, device: Device, *, precision: str, attn_bias: bool, head_dim: int
) -> str:
    """``requested``, or for ``auto`` the first of flash, efficient, math that can run."""
    if requested != "auto":
        return requested
    for backend in BACKENDS:
        if (
            kernel_problem(
                backend, device, precision=precision, attn_bias=attn_bias, head_dim=head_dim
            )
            is None
        ):
            return backend
    return "math"


def attn_backend_problem(
    backend: str,
    *,
    arch: str,
    pos_encoding: str,
    precision: str,
    accelerator: str,
    head_dim: int,
) -> str | None:
    """One line naming ``train.attn_backend`` when the chosen kernel cannot run the model on
    the devices ``train.accelerator`` allows; ``None`` when it can (or nothing attends)."""
    if backend == "auto" or arch != "transformer":
        return None
    for device in attn_devices(accelerator):
        why = kernel_problem(
            backend,
            device,
            precision=precision,
            attn_bias=pos_encoding == "alibi",
            head_dim=head_dim,
        )
        if why is not None:
            where = {"cuda": "on a GPU", "cpu": "on the CPU"}[device]
            return (
                f"train.attn_backend={backend} cannot run {where} "
                f"(model.pos_encoding={pos_encoding}, train.precision={precision}): {why}; "
                "use auto"
                + "".join(
                    f" or {b}" for b in _runnable(pos_encoding, precision, accelerator, head_dim)
                )
            )
    return None


def _runnable(pos_encoding: str, precision: str, accelerator: str, head_dim: int) -> list[str]:
    """The explicit backends that can run on every device ``accelerator`` allows."""
    return [
        b
        for b in BACKENDS
        if all(
            kernel_problem(
                b, d, precision=precision, attn_bias=pos_encoding == "alibi", head_dim=head_dim
            )
            is None
            for d in attn_devices(accelerator)
        )
    ]


# --- what this CPU can run in bf16 ----------------------------------------------------------


BF16_SLOWDOWN_LIMIT = 8.0  # emulated bf16 measured ~70x fp32 on AVX2; native is ~1x or faster


@cache
def cpu_bf16_matmul_fast() -> bool:
    """Whether this CPU multiplies bf16 matrices within ``BF16_SLOWDOWN_LIMIT`` x the fp32 time.

    Timed once per process (a fraction of a second): the best of 3 products of 256 x 256
    matrices in each dtype, after one untimed product."""
    import time

    import torch

    a = torch.randn(256, 256)

    def best(x: torch.Tensor) -> float:
        x @ x
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            x @ x
            times.append(time.perf_counter() - t0)
        return min(times)

    return best(a.bfloat16()) <= BF16_SLOWDOWN_LIMIT * best(a)


# --- torch.compile ---------------------------------------------------------------------------


def c_compiler() -> str | None:
    """The C++ compiler inductor would call (``$CXX``, else g++, c++, clang++), if on PATH.

    Inductor compiles its CPU kernels with it, and Triton builds its CUDA launcher with a C
    compiler, so ``torch.compile`` needs one on either device."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def compile_problem() -> str | None:
    """One line when ``train.compile: true`` cannot work on this machine, else ``None``."""
    if c_compiler() is None:
        return (
            "torch.compile needs a C++ compiler (g++, c++ or clang++ on PATH, or $CXX) and "
            "none was found; install one (e.g. apt-get install g++) or set train.compile: false"
        )
    return None
