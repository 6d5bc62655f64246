"""What a run reads besides the code the store fingerprints: its data (``data_key``) and the
sources of the plugins its model uses (``plugin_sources``), handed to the store as the run
starts (``RunAttempt.start(..., inputs=run_inputs(cfg))``) to go into ``run.yaml``'s meta and
the W&B config."""

from __future__ import annotations

from typing import Any

from ablate.config import RunConfig
from ablate.data.source import data_key
from ablate.model.plugins import plugins_used


def run_inputs(cfg: RunConfig) -> dict[str, Any]:
    """``data_key`` (a content key of a file or Hugging Face dataset; none for a registered
    name, pinned by its checksum) and ``plugin_sources`` (per axis set to a plugin: its name,
    class, file and the file's sha256), each only when there is one."""
    out: dict[str, Any] = {}
    key = data_key(cfg.data.dataset)
    if key:
        out["data_key"] = key
    used = plugins_used(cfg.model)
    if used:
        out["plugin_sources"] = {
            p.axis: {"name": p.name, "class": p.qualname, "file": p.source, "sha256": p.sha256}
            for p in used
        }
    return out
