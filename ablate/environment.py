"""What a run's numbers depend on besides its config: threads, workers, device, library versions.

Float reductions differ with the thread count and the worker layout, and an unstable run
amplifies that, so each run records them in its summary (``environment``) and the report
shows them.
"""

from __future__ import annotations

import os
import platform
from typing import Any

WORKERS_ENV = "ABLATE_WORKERS"
"""Set by the runner: how many runs train at once (the worker layout)."""


def environment(accelerator: str = "cpu") -> dict[str, Any]:
    """Threads, workers, device and library versions of the current process."""
    import numpy
    import pytorch_lightning
    import torch

    device = "cpu"
    if accelerator != "cpu" and torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
    return {
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "workers": int(os.environ.get(WORKERS_ENV, "1") or 1),
        "device": device,
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": pytorch_lightning.__version__,
        "numpy": numpy.__version__,
    }
