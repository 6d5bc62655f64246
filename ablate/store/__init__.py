"""The run store, the source of truth for runs and reports (W&B is a mirror).

``rundir``: run directories and their atomically written files; ``attempt``: one attempt at
training a run, the one writer of its directory while it trains; ``states``: what state a run is
in and which of its files is damaged; ``lease``: who trains a run (heartbeat leases);
``provenance``: what made a run (code fingerprint, git, environment).
"""

from ablate.store.rundir import (
    FINISHED,
    RUN_STATES,
    STATUSES,
    SUMMARY_NUMBERS,
    UNFINISHED_STATES,
    RunDir,
    RunStore,
    StoreWriteError,
    describe_os_error,
    file_mode,
)
from ablate.store.states import DAMAGED, run_damage, run_state

__all__ = [
    "DAMAGED",
    "FINISHED",
    "RUN_STATES",
    "STATUSES",
    "SUMMARY_NUMBERS",
    "UNFINISHED_STATES",
    "RunDir",
    "RunStore",
    "StoreWriteError",
    "describe_os_error",
    "file_mode",
    "run_damage",
    "run_state",
]
