"""A study's runs read back from the run store into pandas tables (:func:`read_study`).

Not :func:`ablate.study.load_study`, which reads the study YAML into its planned runs; this
reads what those runs left in the store, for the report and for deciding claims
(:mod:`ablate.claims`). Both the report (``ablate report``) and ``ablate run until-decided``
/ ``ablate register`` (the pilot) read a study's runs through here.

Two tables come out of a study directory ``<store>/<study>/``:

* ``runs``: one row per run: ``run_id, name, variant, seed, status``, one column per axis
  (dotted key, e.g. ``model.norm_placement``) and the summary fields (``final_val_loss``,
  ``steps``, ``params`` ...; ``val_loss_at_length`` flattened to ``val_loss_at_2x`` ...).
* ``metrics``: long form (tidy): one row per run × step × metric with the same identifying
  columns (variant, seed, status, every axis) plus ``step, metric, value``.

Some run columns are computed here rather than read: the run's data reuse (``reuse.*``:
:func:`ablate.data.reuse.data_reuse` of its recorded data config and steps, where the dataset
is on this machine), ``unigram_loss`` and ``learned_nothing`` (the unigram cross-entropy of its
data, and 1 for a completed run whose final validation loss is at it: the run state "learned
nothing", :mod:`ablate.data.baseline`), and ``final_train_loss`` (the mean logged
``train/loss`` over the last ``TRAIN_TAIL`` of its steps) with ``train_val_gap`` (final val loss
minus it).

A run's ``status`` is :func:`ablate.store.run_state` (``pending`` without ``summary.json``,
``interrupted`` when it says running but no process holds it), as in ``ablate status``. Only the
store is read; nothing here writes to it.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ablate.claims.arms import claim_arm_axes
from ablate.claims.spec import RUNG
from ablate.claims.trend import rung_order
from ablate.config import ConfigError, DataConfig
from ablate.data.baseline import COLUMN as NOTHING_COLUMN
from ablate.data.baseline import UNIGRAM_COLUMN, learned_nothing, unigram_loss
from ablate.names import (
    ID_COLUMNS,
    LENGTH_PREFIX,
    ORDER_ATTR,
    axis_column,
    format_value,
    value_order,
)
from ablate.results.data import (
    DTYPE_PREFIX,
    REUSE_PREFIX,
    TRAIN_TAIL,
    TRAINED_AS,
    TRAINED_PREFIX,
    StudyData,
)
from ablate.store import SUMMARY_NUMBERS, RunDir, RunStore, run_state
from ablate.study.load import load_study
from ablate.study.spec import Reference, parse_reference, read_study_yaml

# summary fields in display order; any other scalar field a run writes is kept after these
SUMMARY_FIELDS = [
    *SUMMARY_NUMBERS[:6],  # losses, steps, diverged_step
    "stopped_early",
    *SUMMARY_NUMBERS[6:],  # cost, size, lr, resume
    "error",
]
SKIP_FIELDS = {"status", "name", "variant", "seed", "axes", "run_id", "study", "wandb_dir"}
# config values the report needs even when they are not axes
CONFIG_COLUMNS = {
    "model.pos_encoding": "cfg.pos_encoding",
    "model.max_seq_len": "cfg.max_seq_len",
    "data.seq_len": "cfg.seq_len",
    "data.tokenizer": "cfg.tokenizer",
    "data.batch_size": "cfg.batch_size",  # with data.order: whether seeds share a token stream
    "data.order": "cfg.order",
    "train.precision": "cfg.precision",
}


def _config_value(config: dict[str, Any], key: str) -> Any:
    """``config["model"]["pos_encoding"]`` for ``"model.pos_encoding"``; None when absent.

    Not :func:`ablate.config.flatten`: that rejects keys this code does not know, and a store
    may hold runs written by another version of it (the report must still read them).
    """
    section, name = key.split(".", 1)
    sub = config.get(section)
    return sub.get(name) if isinstance(sub, dict) else None


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _hashable(v: Any) -> str:
    """A list/dict axis value (e.g. ``train.eval_lengths``) as one label: ``[1,2]``."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_hashable(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_hashable(x) for x in v) + "]"
    return format_value(v)


def _run_row(run: RunDir) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(row, axes, meta) for one run directory."""
    data = run.read_run()
    meta, config = data["meta"], data["config"]
    summary = run.read_summary() or {}
    axes = {
        k: (_hashable(v) if isinstance(v, list | tuple | dict) else v)
        for k, v in (meta.get("axes") or summary.get("axes") or {}).items()
    }
    seed = meta.get("seed", summary.get("seed", (config.get("train") or {}).get("seed")))
    variant = meta.get("variant") or summary.get("variant")
    if not variant:
        variant = ",".join(f"{k.split('.')[-1]}={format_value(v)}" for k, v in axes.items())
    row: dict[str, Any] = {
        "run_id": run.run_id,
        "name": meta.get("name") or summary.get("name") or run.run_id,
        "variant": variant or "base",
        "seed": seed,
        "status": run_state(run),
    }
    for k in SUMMARY_FIELDS:
        row[k] = summary.get(k)
    if meta.get("confirm") is True or summary.get("confirm") is True:  # ablate run confirm
        row["confirm"] = True
        # the registration commit it ran under; none recorded: it predates registration files
        row["registration"] = meta.get("registration") or "before registration files"
    row["started"] = _started(summary)
    # ablate's checkout (git_*) and the study's repository (study_*: where its registration is
    # committed, the commit the order's proof checks), each as recorded
    for k in ("git_commit", "git_dirty", "study_commit", "study_dirty", "study_file"):
        if k in meta:
            row[k] = meta[k]
    for k, v in summary.items():
        if k not in row and k not in SKIP_FIELDS and _scalar(v):
            row[k] = v
    for k, v in (summary.get("environment") or {}).items():  # threads, workers, versions
        row[f"env.{k}"] = v
    for k, v in recorded_way(summary, config).items():
        row[f"{TRAINED_PREFIX}{k}"] = v
    row[TRAINED_AS] = trained_as(summary, config)
    for kind, dtype in (summary.get("compute_dtypes") or {}).items():
        row[f"{DTYPE_PREFIX}{kind}"] = dtype
    for mult, loss in (summary.get("val_loss_at_length") or {}).items():
        row[f"{LENGTH_PREFIX}{float(mult):g}x"] = loss
    for key, col in CONFIG_COLUMNS.items():
        row[col] = _config_value(config, key)
    for k, v in _reuse(config, summary).items():
        row[f"{REUSE_PREFIX}{k}"] = v
    unigram = unigram_loss(config.get("data") or {})
    row[UNIGRAM_COLUMN] = unigram
    at_unigram = learned_nothing(summary.get("final_val_loss"), unigram)
    row[NOTHING_COLUMN] = int(row["status"] == "completed" and at_unigram)
    return row, axes, meta


def recorded_way(summary: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """How the run's last attempt trained it: its summary's ``training``; for a run from before
    that was recorded, what its config and summary say (``stack``: the group it trained in, 1
    without one; CUDA graphs: ``reduce-overhead`` on a device other than the CPU)."""
    way = summary.get("training")
    if isinstance(way, dict):
        return way
    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    compiled = bool(train.get("compile"))
    mode = train.get("compile_mode", "default") if compiled else None
    stack = summary.get("stack") if isinstance(summary.get("stack"), dict) else {}
    device = (summary.get("environment") or {}).get("device")
    return {
        "stack": stack.get("members", 1),
        "compile": compiled,
        "compile_mode": mode,
        "cuda_graphs": mode == "reduce-overhead" and device not in (None, "cpu"),
    }


def way_label(way: dict[str, Any]) -> str:
    """``'solo, eager'``, ``'stack of 4, compiled'``, ``'stack of 8, compiled, CUDA graphs'``."""
    k = way.get("stack") or 1
    how = "eager"
    if way.get("compile"):
        mode = way.get("compile_mode") or "default"
        how = "compiled" + (", CUDA graphs" if way.get("cuda_graphs") else "")
        if mode != "default" and not way.get("cuda_graphs"):
            how += f", {mode}"  # reduce-overhead where it made no graphs (a CPU)
    return f"{'solo' if k == 1 else f'stack of {k}'}, {how}"


def trained_as(summary: dict[str, Any], config: dict[str, Any]) -> str:
    """:data:`TRAINED_AS`: the ways its attempts recorded, in order, a repeat merged (``' then
    '`` between two); the last attempt's way when none recorded one."""
    attempts = summary.get("attempts") if isinstance(summary.get("attempts"), list) else []
    labels = [
        way_label(a["training"])
        for a in attempts
        if isinstance(a, dict) and isinstance(a.get("training"), dict)
    ]
    labels = [x for i, x in enumerate(labels) if i == 0 or labels[i - 1] != x]
    return " then ".join(labels) or way_label(recorded_way(summary, config))


def _reuse(config: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """The run's data reuse fields at the steps it trained (its planned steps before it
    finished); empty when its data config is unreadable or the dataset is not here."""
    from ablate.data.reuse import data_reuse, split_sizes

    try:
        data = DataConfig.model_validate(config["data"])
        steps = summary.get("steps") or config["train"]["max_steps"]
        sizes = split_sizes(data)
        reuse = data_reuse(data, int(steps), sizes[1]) if sizes else None
    except (KeyError, TypeError, ValueError):
        return {}
    return asdict(reuse) if reuse else {}


def _started(summary: dict[str, Any]) -> str | None:
    """When the run first started (its first attempt), as ISO 8601 UTC; None when unknown."""
    attempts = summary.get("attempts")
    first = attempts[0] if isinstance(attempts, list) and attempts else {}
    t = first.get("started") if isinstance(first, dict) else None
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        return None
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scale_texts(yaml_data: dict[str, Any], profile: str | None) -> dict[str, Any]:
    """The study YAML with the ``description`` and ``findings`` of ``profile`` in place of the
    study's where that profile sets its own: one scale's commentary is not another's."""
    profiles = yaml_data.get("profiles")
    own = profiles.get(profile) if isinstance(profiles, dict) and profile else None
    if not isinstance(own, dict):
        return yaml_data
    return yaml_data | {k: own[k] for k in ("description", "findings") if k in own}


def _study_description(store_dir: Path, yaml_data: dict[str, Any], metas: list[dict]) -> str:
    if yaml_data.get("description"):
        return str(yaml_data["description"]).strip()
    for m in metas:
        if m.get("description"):
            return str(m["description"]).strip()
    # a copy of the study YAML the runner may keep next to the runs
    for p in sorted(store_dir.glob("*.y*ml")):
        try:
            d = yaml.safe_load(p.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(d, dict) and d.get("description"):
            return str(d["description"]).strip()
    return ""


def _expand(yaml_path: Path | None, profile: str | None):
    """``(study, None)``: the study YAML expanded by ``ablate.study.load``, or ``(None, why
    not)``. A bad ``claims``, ``equivalence_margin`` or ``figures`` is an error here too (one
    line naming the key)."""
    if yaml_path is None:
        return None, (
            "no study file (neither ./studies/<name>.yaml nor a copy in the store); pass the "
            "study YAML to report its claims and description"
        )
    try:
        return load_study(yaml_path, profile, check_data=False, check_device=False), None
    except ConfigError as err:
        if str(getattr(err, "key", "") or "").startswith(
            ("claims", "equivalence_margin", "figures")
        ):
            raise
        return None, f"cannot read {yaml_path}: {err}"
    except Exception as err:  # noqa: BLE001 - optional: the report must not depend on it
        return None, f"cannot read {yaml_path}: {type(err).__name__}: {err}"


def read_study(
    store: Path, name: str, yaml_path: Path | None = None, profile: str | None = None
) -> StudyData:
    """Read every run of ``name`` from the store into a :class:`StudyData`: the runs of
    ``profile``, or of the one profile the store holds (runs of several: ``ConfigError``)."""
    rs = RunStore(store)
    run_dirs = list(rs.runs(name))
    if not run_dirs:
        present = rs.studies()
        raise ConfigError(
            f"no runs for study '{name}' in the store; studies present: "
            f"{', '.join(present) or '(none)'}",
            source=store,
        )
    damaged = damaged_runs(run_dirs)  # shown in the report and skipped, never a crash
    run_dirs = [r for r in run_dirs if r.path not in damaged]
    if not run_dirs:
        first = next(iter(damaged.values()))
        raise ConfigError(
            f"every run of study '{name}' is damaged ({len(damaged)}; first: {first})",
            source=store,
        )
    read = [(run, *_run_row(run)) for run in run_dirs]
    profile = _one_profile([meta for *_, meta in read], name, store, profile)
    read = [r for r in read if r[3].get("profile") == profile]
    if not read:
        raise ConfigError(f"no runs of study '{name}' at profile {profile!r}", source=store)
    run_dirs = [r[0] for r in read]
    rows, metas, axes_of = [], [], []
    axis_keys: list[str] = []
    for _, row, axes, meta in read:
        rows.append(row)
        metas.append(meta)
        axes_of.append(axes)
        for k in axes:
            if axis_column(k) not in axis_keys and k != "train.seed":
                axis_keys.append(axis_column(k))
    for row, axes in zip(rows, axes_of, strict=True):
        by_col = {axis_column(k): v for k, v in axes.items()}
        for k in axis_keys:
            row[k] = by_col.get(k)
    runs = pd.DataFrame(rows)
    ordered = ID_COLUMNS + axis_keys
    runs = runs[ordered + [c for c in runs.columns if c not in ordered]]
    for col in runs.columns:
        if col in ordered or col == "error" or col.startswith(("cfg.", TRAINED_PREFIX)):
            continue
        if runs[col].map(lambda v: v is None or isinstance(v, int | float)).all():
            runs[col] = pd.to_numeric(runs[col], errors="coerce").astype(float)
    if RUNG in runs:  # a ladder's rungs in order of compute, not of their names
        runs.attrs[ORDER_ATTR] = {RUNG: rung_order(runs)}
    runs = sort_runs(runs, axis_keys)
    metrics = _metrics_frame(run_dirs, runs, axis_keys)
    runs["final_train_loss"] = runs["run_id"].map(final_train_loss(metrics, runs))
    runs["train_val_gap"] = runs["final_val_loss"] - runs["final_train_loss"]

    yaml_data = scale_texts(read_study_yaml(yaml_path) if yaml_path is not None else {}, profile)
    plan, why = _expand(yaml_path, profile)
    return StudyData(
        name=name,
        path=rs.root / name,
        runs=runs,
        metrics=metrics,
        axes=axis_keys,
        description=_study_description(rs.root / name, yaml_data, metas),
        findings=str(yaml_data.get("findings") or "").strip(),
        reference=_reference(plan, yaml_data, yaml_path),
        expected_runs=len(plan.runs) if plan is not None else None,
        yaml_path=yaml_path,
        damaged=damaged,
        spec_problem=why or "",  # the claims and expected run count are missing: say so
        claims=list(plan.claims) if plan is not None else [],
        equivalence_margin=plan.equivalence_margin if plan is not None else 0.01,
        profile=profile,
        claim_arms=claim_arm_axes(plan) if plan is not None else {},
        figures=plan.figures if plan is not None else {},
    )


def _metrics_frame(run_dirs: list[RunDir], runs: pd.DataFrame, axis_keys: list[str]):
    """The long-form metrics of ``run_dirs``, each row with its run's identifying columns."""
    frames = []
    id_cols = ["run_id", "variant", "seed", "status", *axis_keys]
    by_id = runs.set_index("run_id")
    for run in run_dirs:
        recs = run.read_metrics()
        if not recs:
            continue
        df = pd.DataFrame(recs, columns=["step", "metric", "value"])
        info = by_id.loc[run.run_id]
        for c in id_cols[1:]:
            df[c] = info[c]
        df["run_id"] = run.run_id
        frames.append(df)
    if frames:
        return pd.concat(frames, ignore_index=True)[id_cols + ["step", "metric", "value"]]
    return pd.DataFrame(columns=id_cols + ["step", "metric", "value"])


def final_train_loss(metrics: pd.DataFrame, runs: pd.DataFrame) -> dict[str, float]:
    """Run id -> the mean of its logged ``train/loss`` over the last ``TRAIN_TAIL`` of its
    steps (at least its last logged value): the training loss its final val loss is set
    against. Each value is one batch's loss with dropout on, as the run logged it."""
    train = metrics[metrics["metric"] == "train/loss"]
    steps = runs.set_index("run_id")["steps"]
    out: dict[str, float] = {}
    for run_id, rows in train.groupby("run_id"):
        last = steps.get(run_id)
        last = rows["step"].max() if last is None or pd.isna(last) else last
        tail = rows[rows["step"] > last * (1 - TRAIN_TAIL)]
        values = pd.to_numeric((tail if len(tail) else rows.tail(1))["value"], errors="coerce")
        out[str(run_id)] = float(values.mean())
    return out


def _one_profile(metas: list[dict], name: str, store: Path, profile: str | None) -> str | None:
    """The profile the report is about: ``profile`` when given, else the one its runs were
    planned with. Runs of two profiles are two scales: never pooled, never one report."""
    have = list(dict.fromkeys(m.get("profile") for m in metas))
    if profile is not None:
        return profile
    if len(have) > 1:
        raise ConfigError(
            f"the store holds runs of study '{name}' at profiles "
            f"{', '.join(sorted(map(str, have)))}: report one with --profile (a profile's "
            "runs never decide another's claims)",
            source=store,
        )
    return have[0] if have else None


def _reference(plan, yaml_data: dict[str, Any], yaml_path: Path | None) -> Reference | None:
    """The published reference value at the runs' profile (a profile may replace the study's
    or remove it), else the study YAML's as written."""
    if plan is not None:
        return plan.reference
    return parse_reference(yaml_data.get("reference"), yaml_path) if yaml_path else None


def damaged_runs(run_dirs: list[RunDir]) -> dict[Path, str]:
    """``{run path: '<file>: <reason>'}`` for the runs whose files cannot be read."""
    from ablate.store import run_damage

    out = {}
    for run in run_dirs:
        reason = run_damage(run)
        if reason is not None:
            out[run.path] = reason
    return out


def sort_runs(runs: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """Runs ordered by axis values (in :func:`value_order`), then seed, then run id."""
    if runs.empty:
        return runs
    keys = []
    for a in axes:
        order = {v: i for i, v in enumerate(value_order(runs[a]))}
        keys.append(runs[a].map(lambda v, o=order: o.get(v, len(o))))
    frame = pd.DataFrame({f"k{i}": k for i, k in enumerate(keys)}, index=runs.index)
    frame["seed"] = pd.to_numeric(runs["seed"], errors="coerce")
    frame["run_id"] = runs["run_id"]
    idx = frame.sort_values(list(frame.columns), kind="stable").index
    return runs.loc[idx].reset_index(drop=True)


def results_frame(study: StudyData) -> pd.DataFrame:
    """The ``results.csv`` table: one row per run (summary fields + axes + seed)."""
    df = study.runs.copy()
    df.insert(0, "study", study.name)
    return df
