"""What the worker pool's forkserver imports, once, before it forks any worker
(``local.WORKER_IMPORTS``; ``local.pool_context`` names this module). A module that fails to
import here (not installed, a broken library) is left to the worker that needs it, which then
fails its run with the error: the server itself must not die of it, or no worker would start."""

import importlib

from ablate.execution.executors.local import WORKER_IMPORTS

for _name in WORKER_IMPORTS:
    try:
        importlib.import_module(_name)
    except Exception:  # noqa: BLE001, S110 - the worker imports it again and reports it
        pass
