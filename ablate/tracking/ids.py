"""Who a W&B run is: its id, name, group, job type, tags and config, and the keys that runs,
the report run and the views share.

W&B's conventions: the group is the study (its runs, the report run among them); the job type
is the kind of job (``train`` for a run, ``report`` for the report run), never a variant; the
variant and seed are config (``meta.variant``, ``train.seed``), which the views group and
filter on. A tag is at most 64 characters (``wandb.init`` refuses a longer one, and the run
would get no W&B run at all): a longer one keeps its start and ends in a digest of the whole.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ablate.config import RunConfig
from ablate.store import RunDir
from ablate.store.provenance import STALE_DIR

STEP = "trainer/global_step"
"""The step metric of every logged metric (the one Lightning's ``WandbLogger`` uses) and the
workspace's x axis."""
TOKENS = "tokens"
"""Training tokens seen at a step (``step * data.batch_size * data.seq_len``), logged with every
W&B row: the x axis of a study whose runs differ in tokens per step."""
TRAIN_JOB_TYPE = "train"
"""The job type of every run of a study."""
REPORT_JOB_TYPE = "report"
"""The job type of the report run, which the views leave out of the study's runs."""
VARIANT = "meta.variant"
"""The config key of a run's variant (its name without the seed): what the views group by."""
SEED = "train.seed"
"""The config key of a run's seed."""
DIVERGED_TAG = "diverged"
"""The tag a run gets when its loss became non-finite (it also ends failed, ``status:
diverged`` in its summary)."""
REPORT_WANDB_DIR = ".report-wandb"
"""``<store>/<study>/.report-wandb/``: the report run's W&B folder (hidden: not a run)."""
MAX_TAGS = 64
"""At most this many tags per run."""
MAX_TAG_LEN = 64
"""W&B's longest tag (``wandb.Settings`` refuses a longer one)."""

_BAD = set(":;,#?/'")


def wandb_run_id(run_dir: RunDir) -> str:
    """The run's W&B id: ``<run id>-<8 hex>``, the hex a digest of the study and how often the
    run was retrained (``--rerun-stale`` moves the old one to ``<study>/.stale/``).

    The run id hashes the config only, so the same config in two studies, or a retrained stale
    run, would otherwise resume (and overwrite) another W&B run. A resumed run keeps its id.
    """
    retrains = sum(1 for _ in (run_dir.path.parent / STALE_DIR).glob(f"{run_dir.run_id}-*"))
    key = f"{run_dir.study}/{run_dir.run_id}/{retrains}"
    return f"{run_dir.run_id}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def check_id(wandb_id: str, run_id: str) -> None:
    """A ``ValueError`` when ``wandb_id`` (of run ``run_id``) has characters W&B rejects."""
    if set(wandb_id) & _BAD:
        raise ValueError(f"run id {run_id!r} has characters W&B rejects")


def report_run_id(study: str) -> str:
    """The report run's W&B id: the same for every report of ``study``, unlike any run's."""
    return f"report-{hashlib.sha256(study.encode()).hexdigest()[:12]}"


def short_tag(text: str) -> str:
    """``text`` as a W&B tag: itself up to 64 characters, else its start, ``~`` and 8 hex of
    its sha256 (64 in all; the same text always gives the same tag). The config keeps the
    whole value."""
    if len(text) <= MAX_TAG_LEN:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: MAX_TAG_LEN - len(digest) - 1]}~{digest}"


def wandb_tags(meta: dict[str, Any], extra: list[str]) -> list[str]:
    """A run's W&B tags: its axis values, ``confirm`` for a confirmation run (``ablate run
    confirm``: fresh seeds, to tell apart from the exploratory ones), the config's tags;
    each at most 64 characters (:func:`short_tag`)."""
    axes = [f"{k}={v}" for k, v in (meta.get("axes") or {}).items()]
    confirm = ["confirm"] if meta.get("confirm") is True else []
    return sorted({short_tag(str(t)) for t in (*axes, *confirm, *extra) if str(t)})[:MAX_TAGS]


def run_identity(cfg: RunConfig, meta: dict[str, Any], name: str) -> dict[str, Any]:
    """A run's W&B name, group (the study), job type (``train``), tags and config (the
    resolved config with the run's meta: ``meta.variant``, ``meta.seed``, ``meta.axes``), the
    same for a solo run and a stacked member: the keyword arguments of ``wandb.init``."""
    return {
        "name": name,
        "group": meta["study"],
        "job_type": TRAIN_JOB_TYPE,
        "tags": wandb_tags(meta, cfg.tracking.tags),
        "config": {**cfg.to_dict(), "meta": meta},
    }
