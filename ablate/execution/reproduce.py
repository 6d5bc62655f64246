"""``ablate reproduce STUDY``: retrain a few archived runs with today's code and say, per run,
whether today's code gives the same numbers.

A report says when its runs were made by other model/training code (their code fingerprint
differs from today's); that alone cannot tell a reader whether today's code would give other
numbers. This retrains ``k`` of the study's finished runs from the configs they recorded (same
seed, same data, the same torch thread count, one run at a time, W&B off) into a temporary
store and compares each one's final and best validation loss with the archived ones:

* **identical**: every compared number is the same float, bit for bit;
* **within tolerance**: every difference is at most :data:`TOLERANCE` nats;
* **different**: a larger difference (or another status: completed vs diverged).

The tolerance is 1e-4 nats because the reports print losses to 4 decimals, and the smallest
seed standard deviation of any shipped variant is about 0.004 nats (forty times more): a
difference below it cannot move a printed number by more than one in its last digit, nor any
verdict. Float reductions differ with the thread count and the worker layout (runs trained two
at a time, each on one thread), so a stable run usually agrees within ~1e-7 and a chaotic one
(a report's "chaotic variants") can differ by tenths of a nat: the verdict is per run, and each
row also gives the difference in units of its variant's seed standard deviation.

The runs come from the study's archived store (``reports/<study>/archive/store.tar.gz``, or
``--store``); the chosen runs are the latest confirmation attempt's (the claims' own runs) when
there is one, else every finished run, one per variant in turn (lowest seed first) until ``k``,
or the runs named with ``--run``. The result goes to ``reports/<study>/reproduce/runs.csv``
(one row per retrained run, replacing an earlier row of the same run), which the report reads.
"""

from __future__ import annotations

import math
import shutil
import tarfile
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.config import ConfigError, RunConfig
from ablate.store import FINISHED, RunStore
from ablate.store.provenance import code_fingerprint, git_info

TOLERANCE = 1e-4
"""Nats: at most this far from the archived loss is "within tolerance" (module doc)."""
COMPARED = ("final_val_loss", "best_val_loss")
REPRODUCE_DIR = "reproduce"
RUNS_CSV = "runs.csv"
COLUMNS = [
    "run_id",
    "variant",
    "seed",
    "verdict",
    "archived_status",
    "today_status",
    "archived_final_val_loss",
    "today_final_val_loss",
    "diff_final_val_loss",
    "archived_best_val_loss",
    "today_best_val_loss",
    "diff_best_val_loss",
    "variant_seed_sd",
    "tolerance",
    "threads",
    "archived_fingerprint",
    "today_fingerprint",
    "today_commit",
    "today_dirty",
    "retrained",
    "train_s",
    "note",
]


def archive_path(reports: Path, study: str) -> Path:
    return Path(reports) / study / "archive" / "store.tar.gz"


def extract_store(archive: Path, into: Path) -> Path:
    """Unpack ``archive`` (a store folder archived with ``tar -czf``) into ``into``."""
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def _finished_runs(study_dir: Path) -> pd.DataFrame:
    """One row per finished run of the store's study folder: id, variant, seed, status, the
    compared numbers, whether it is a confirmation run of which registration, its start."""
    rows = []
    for run in RunStore(study_dir.parent).runs(study_dir.name):
        summary = run.read_summary() or {}
        if summary.get("status") not in FINISHED:
            continue
        meta = run.read_run()["meta"]
        attempts = summary.get("attempts") or [{}]
        rows.append(
            {
                "run_id": run.run_id,
                "variant": meta.get("variant") or summary.get("variant") or "base",
                "seed": meta.get("seed", summary.get("seed")),
                "status": summary.get("status"),
                "registration": meta.get("registration") if meta.get("confirm") else None,
                "started": (attempts[0] or {}).get("started", math.nan),
                **{k: summary.get(k) for k in COMPARED},
            }
        )
    return pd.DataFrame(rows)


def choose_runs(runs: pd.DataFrame, k: int, named: Sequence[str] = ()) -> list[str]:
    """The run ids to retrain: ``named`` (checked), else ``k`` runs of the latest confirmation
    attempt (every finished run when there is none), one per variant in turn, lowest seed
    first, variants in the order the store lists them."""
    if named:
        missing = [r for r in named if r not in set(runs["run_id"])]
        if missing:
            raise ConfigError(
                f"no finished run {', '.join(missing)} in the archived store", key="--run"
            )
        return list(named)
    pool = runs
    conf = runs[runs["registration"].notna()] if "registration" in runs else runs.iloc[0:0]
    if len(conf):
        first = conf.groupby("registration")["started"].min().sort_values()
        pool = conf[conf["registration"] == first.index[-1]]
    pool = pool.sort_values(["variant", "seed", "run_id"], kind="stable")
    queues = {v: list(g["run_id"]) for v, g in pool.groupby("variant", sort=False)}
    out: list[str] = []
    while len(out) < k and any(queues.values()):
        for q in queues.values():
            if q and len(out) < k:
                out.append(q.pop(0))
    return out


def verdict(archived: dict[str, Any], today: dict[str, Any], tol: float = TOLERANCE) -> str:
    """``identical`` / ``within tolerance`` / ``different`` (module doc)."""
    if archived.get("status") != today.get("status"):
        return "different"
    diffs = []
    for key in COMPARED:
        a, b = archived.get(key), today.get(key)
        if a is None and b is None:
            continue
        if a is None or b is None:
            return "different"
        diffs.append(abs(float(a) - float(b)))
    if all(d == 0.0 for d in diffs):
        return "identical"
    return "within tolerance" if max(diffs) <= tol else "different"


def _seed_sd(runs: pd.DataFrame, variant: str) -> float:
    done = runs[(runs["variant"] == variant) & (runs["status"] == "completed")]
    vals = pd.to_numeric(done["final_val_loss"], errors="coerce").dropna()
    return float(vals.std(ddof=1)) if len(vals) > 1 else math.nan


def retrain(run_dir: Path, into: Path) -> tuple[dict[str, Any], float]:
    """Train the run recorded in ``run_dir`` again with today's code into the store ``into``
    (W&B off, no progress bars): its summary and the seconds it took."""
    from ablate.store import RunDir
    from ablate.training.train import train_run

    source = RunDir(run_dir)
    data = source.read_run()
    config = data["config"]
    config.setdefault("tracking", {})["wandb"] = False
    config.setdefault("train", {})["progress"] = False
    # the thread count it trained with (a worker's share of the cores when the config left it)
    recorded = (source.read_summary() or {}).get("environment", {}).get("torch_threads")
    if not config["train"].get("threads") and isinstance(recorded, int):
        config["train"]["threads"] = recorded
    try:
        cfg = RunConfig.model_validate(config)
    except Exception as err:  # noqa: BLE001 - a config today's schema cannot read
        raise ConfigError(f"today's code cannot read its config ({err})".splitlines()[0]) from None
    meta = {k: data["meta"][k] for k in ("name", "variant", "axes", "seed") if k in data["meta"]}
    target = RunStore(into).run(run_dir.parent.name, source.run_id)
    t0 = time.time()
    summary = train_run(cfg, target, meta, progress=False)
    return summary, time.time() - t0


def _commit() -> tuple[str, bool | None]:
    info = git_info()
    return str(info.get("git_commit", ""))[:12], info.get("git_dirty")


def reproduce_study(
    study: str,
    *,
    k: int = 2,
    runs: Sequence[str] = (),
    reports: Path = Path("reports"),
    store: Path | None = None,
    say=print,
) -> Path:
    """Retrain ``k`` (or the ``runs`` named) archived runs of ``study`` with today's code and
    write ``reports/<study>/reproduce/runs.csv`` (module doc); returns that file."""
    reports = Path(reports)
    with tempfile.TemporaryDirectory(prefix=f"ablate-reproduce-{study}-") as tmp:
        tmp = Path(tmp)
        if store is None:
            archive = archive_path(reports, study)
            if not archive.is_file():
                raise ConfigError(
                    f"no archived store {archive} (give the store with --store)", key=study
                )
            say(f"{study}: unpacking {archive}")
            source = extract_store(archive, tmp / "archived") / study
        else:
            source = Path(store) / study
        if not source.is_dir():
            raise ConfigError(f"no runs of study {study!r} in {source.parent}", key=study)
        table = _finished_runs(source)
        if table.empty:
            raise ConfigError(f"no finished run of study {study!r} in {source.parent}", key=study)
        chosen = choose_runs(table, k, runs)
        commit, dirty = _commit()
        rows = []
        for i, run_id in enumerate(chosen, 1):
            row = table[table["run_id"] == run_id].iloc[0].to_dict()
            what = f"{run_id} ({row['variant']}, seed {row['seed']})"
            say(f"{study}: retraining {i}/{len(chosen)} {what}")
            rows.append(_retrain_row(source / run_id, row, table, tmp / "today", commit, dirty))
            say(f"  {rows[-1]['verdict']}: {_line(rows[-1])}")
    return write_rows(reports / study / REPRODUCE_DIR / RUNS_CSV, rows)


def _retrain_row(
    run_dir: Path, row: dict, table: pd.DataFrame, into: Path, commit: str, dirty
) -> dict[str, Any]:
    from ablate.store import RunDir

    recorded = RunDir(run_dir).read_run()
    out: dict[str, Any] = {
        "run_id": row["run_id"],
        "variant": row["variant"],
        "seed": row["seed"],
        "archived_status": row["status"],
        "variant_seed_sd": _seed_sd(table, row["variant"]),
        "tolerance": TOLERANCE,
        "threads": (recorded["config"].get("train") or {}).get("threads")
        or ((RunDir(run_dir).read_summary() or {}).get("environment") or {}).get("torch_threads"),
        "archived_fingerprint": recorded["meta"].get("code_fingerprint", ""),
        "today_fingerprint": code_fingerprint(),
        "today_commit": commit,
        "today_dirty": dirty,
        "retrained": datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "note": "",
    }
    for key in COMPARED:
        out[f"archived_{key}"] = row.get(key)
    try:
        summary, seconds = retrain(run_dir, into)
    except ConfigError as err:
        return {**out, "verdict": "not retrainable", "note": str(err)}
    out["today_status"] = summary.get("status")
    out["train_s"] = round(seconds, 1)
    for key in COMPARED:
        a, b = row.get(key), summary.get(key)
        out[f"today_{key}"] = b
        ok = a is not None and b is not None
        out[f"diff_{key}"] = float(b) - float(a) if ok else math.nan
    out["verdict"] = verdict(row, summary)
    if summary.get("error"):
        out["note"] = str(summary["error"]).splitlines()[0]
    shutil.rmtree(into, ignore_errors=True)  # one run's checkpoints at a time
    return out


def _line(r: dict[str, Any]) -> str:
    d = r.get("diff_final_val_loss")
    a, b = r.get("archived_final_val_loss"), r.get("today_final_val_loss")
    if a is None or b is None or d is None or not math.isfinite(d):
        return f"archived {r.get('archived_status')}, today {r.get('today_status')} {r.get('note')}"
    return f"final val loss archived {a:.8f}, today {b:.8f} (difference {d:+.2e} nats)"


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` into ``path`` (CSV), replacing earlier rows of the same runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = pd.DataFrame(rows, columns=COLUMNS)
    if path.is_file():
        old = pd.read_csv(path)
        old = old[~old["run_id"].astype(str).isin(set(new["run_id"].astype(str)))]
        new = pd.concat([old, new], ignore_index=True) if len(old) else new
    tmp = path.with_name(f".{path.name}.tmp")
    new.to_csv(tmp, index=False)
    tmp.replace(path)
    return path
