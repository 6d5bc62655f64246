"""The long-form tables the report's figures draw: axes as ordered labels under their display
names, facets by the axes held fixed, which axes go on x/hue/columns, seed counts for captions,
validation curves ending at the full-split final loss, and a two-axis heatmap's cells.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ablate.names import axis_column, display_names, format_value, value_order, variant_order
from ablate.results import StudyData

NO_POSITIONS = "no positions past max_seq_len"
"""Why a run has no loss at a length: the length is past its model's ``max_seq_len``, and the
study's other runs were evaluated there (so the split was long enough): its positions stop."""


def past_max_len(runs: pd.DataFrame, mult: float | pd.Series) -> pd.Series:
    """Per run: whether ``mult`` × its training length is past its ``model.max_seq_len``
    (False where either is not recorded)."""
    if not {"cfg.seq_len", "cfg.max_seq_len"} <= set(runs.columns):
        return pd.Series(False, index=runs.index)
    seq = pd.to_numeric(runs["cfg.seq_len"], errors="coerce")
    limit = pd.to_numeric(runs["cfg.max_seq_len"], errors="coerce")
    return (mult * seq > limit).fillna(False)


def labelled(df: pd.DataFrame, study: StudyData) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """A copy with every axis as an ordered string column under its short name."""
    names = display_names(study.axes)
    out = df.copy()
    orders: dict[str, list[str]] = {}
    for axis, name in names.items():
        order = [format_value(v) for v in value_order(study.runs[axis])]
        out[name] = pd.Categorical(out[axis].map(format_value), categories=order, ordered=True)
        orders[name] = order
    orders["variant"] = variant_order(study.runs)
    out["variant"] = pd.Categorical(out["variant"], categories=orders["variant"], ordered=True)
    return out, orders


def held_fixed_column(df: pd.DataFrame, study: StudyData, exclude: list[str]) -> str | None:
    """Add an ordered ``held fixed`` column naming the other varying axes' values; its name.

    None when no other axis varies. Used to facet figures so runs that differ in another axis
    are never pooled into one band.
    """
    names = display_names(study.axes)
    others = [a for a in study.varying_axes if a not in exclude]
    if not others:
        return None
    orders = [{v: i for i, v in enumerate(value_order(study.runs[a]))} for a in others]
    keys = df[others].apply(
        lambda r: tuple(o.get(v, len(o)) for o, v in zip(orders, r, strict=True)), axis=1
    )
    labels = df[others].apply(
        lambda r: ", ".join(
            f"{names[a]}={format_value(v)}" for a, v in zip(others, r, strict=True)
        ),
        axis=1,
    )
    cats = list(dict.fromkeys(lab for _, lab in sorted(zip(keys, labels, strict=True))))
    df["held fixed"] = pd.Categorical(labels, categories=cats, ordered=True)
    return "held fixed"


def display_columns(study: StudyData) -> tuple[str, str | None]:
    """Display columns (primary, secondary): 1 axis: (a, None); 2 axes: (a, b); else variant.
    The primary (a line figure's hue, one panel) is the axis the study's claims compare where
    only one of the two is, so the arms a claim compares are always drawn in one panel."""
    names = display_names(study.axes)
    compared = {axis_column(k) for c in study.claims for k in (*c.a, *c.b)}
    varying = sorted(study.varying_axes, key=lambda a: a not in compared)
    varying = [names[a] for a in varying]
    if len(varying) in (1, 2):
        return varying[0], (varying[1] if len(varying) == 2 else None)
    return "variant", None


def seed_counts(study: StudyData, by: str) -> str:
    """``'n=3 seeds per variant'`` (or ``'n=2–3 ...'``): completed seeds, for a figure's title."""
    per = study.runs.groupby("variant", sort=False)["status"]
    n = per.apply(lambda s: int((s == "completed").sum()))
    n = n[n > 0] if (n > 0).any() else n
    lo, hi = int(n.min()), int(n.max())
    return f"n={lo} seeds per {by}" if lo == hi else f"n={lo}–{hi} seeds per {by}"


def with_final_points(df: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``val/loss`` rows with each completed run's last point replaced by its full-split
    ``final_val_loss`` at its final step (the periodic evaluations use a few batches)."""
    if "final_val_loss" not in runs or "steps" not in runs:
        return df
    done = runs[(runs["status"] == "completed") & runs["final_val_loss"].notna()]
    finals = done.set_index("run_id")[["final_val_loss", "steps"]]
    keep = ~(df["run_id"].isin(finals.index) & (df["step"] >= df["run_id"].map(finals["steps"])))
    last = df[df["run_id"].isin(finals.index)].sort_values("step").groupby("run_id").tail(1)
    last = last.assign(
        step=last["run_id"].map(finals["steps"]).astype(int),
        value=last["run_id"].map(finals["final_val_loss"]).astype(float),
    )
    return pd.concat([df[keep], last], ignore_index=True).sort_values(["run_id", "step"])


def heatmap_panels(study: StudyData, others: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """(label, runs) per combination of the ``others`` axes (those not on the heatmap's rows
    and columns): one panel each."""
    runs = study.runs
    if not others:
        return [("", runs)]
    names = display_names(study.axes)
    return [
        (", ".join(f"{names[a]}={format_value(v)}" for a, v in zip(others, k, strict=True)), g)
        for k, g in runs.groupby(others, sort=True, dropna=False)
        for k in [k if isinstance(k, tuple) else (k,)]
    ]


def used_differs(runs: pd.DataFrame, axis: str, used: str | None) -> bool | None:
    """Whether the value the runs trained with for ``axis`` (their summary field ``used``, e.g.
    the learning rate after a batch-size rule) differs from the axis value; None when the runs
    do not record it."""
    if used is None or used not in runs or axis not in runs:
        return None
    got = pd.to_numeric(runs[used], errors="coerce")
    if got.isna().all():
        return None
    base = pd.to_numeric(runs[axis], errors="coerce")
    return bool((~np.isclose(got, base, rtol=1e-9) & got.notna()).any())


def heatmap_cells(
    g: pd.DataFrame, axes: tuple[str, str], values: tuple[list, list], metric: str, used: str = ""
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(mean, annotation) per (row, column) cell of the two ``axes`` over their ``values``:
    mean ± std of the completed seeds, the diverged count, or why the cell is empty; with
    ``used`` (a summary field), the value the cell's runs trained with for the column."""
    (row_axis, col_axis), (rows, cols) = axes, values
    mean = pd.DataFrame(
        np.nan, index=[format_value(r) for r in rows], columns=[format_value(c) for c in cols]
    )
    annot = pd.DataFrame("", index=mean.index, columns=mean.columns)
    for r in rows:
        for c in cols:
            cell = g[(g[row_axis] == r) & (g[col_axis] == c)]
            if cell.empty:
                annot.loc[format_value(r), format_value(c)] = "no run"
                continue
            ok = cell.loc[cell["status"] == "completed", metric].dropna()
            div = int((cell["status"] == "diverged").sum())
            fin = int(cell["status"].isin(("completed", "diverged")).sum())
            text = ""
            if len(ok):
                mean.loc[format_value(r), format_value(c)] = ok.mean()
                text = f"{ok.mean():.3f}"
                if len(ok) > 1:
                    text += f"\n±{ok.std(ddof=1):.3f}"
            if div:
                text += f"\ndiverged {div}/{fin}" if text else f"diverged\n{div}/{fin}"
            if not text:
                text = "no finished run"
            got = pd.to_numeric(cell[used], errors="coerce").dropna() if used else []
            if len(got):
                text += f"\n{used} {got.iloc[0]:.2g}"
            annot.loc[format_value(r), format_value(c)] = text.strip()
    return mean, annot
