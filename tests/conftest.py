import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

# Tests read tiny shakespeare from the shared folder beside the checkout (never the internet).
_SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if "ABLATE_DATA_DIR" not in os.environ and _SHARED.is_dir():
    os.environ["ABLATE_DATA_DIR"] = str(_SHARED)
os.environ.setdefault("WANDB_SILENT", "true")
