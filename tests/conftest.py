import os
import signal
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

# Tests read tiny shakespeare from the shared folder beside the checkout (never the internet).
_SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if "ABLATE_DATA_DIR" not in os.environ and _SHARED.is_dir():
    os.environ["ABLATE_DATA_DIR"] = str(_SHARED)
os.environ.setdefault("WANDB_SILENT", "true")

# A shell starts background jobs (`make test &`, nohup) with SIGINT ignored, and Python then keeps
# it ignored: the Ctrl-C tests would never see their KeyboardInterrupt. Restore Python's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
