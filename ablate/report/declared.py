"""The figures a study declares in its YAML (``figures:``, :mod:`ablate.study.figures`), drawn
from its runs; none of them knows a study or an axis by name:

* ``heatmap_batch_lr.png`` (``heatmap``): the mean final loss over two axes, one panel per
  combination of the others; by default over a study's two numeric axes when it has two;
* ``grad_norm_layers.png`` (``layer_gradients``): per-layer gradient norms at initialisation,
  one line per seed, by one axis, when the runs logged ``grad_norm/ffn_out_*`` or
  ``grad_norm/layer_*`` and hold the declared values;
* ``length_extrapolation.png`` (``length_curves``): validation loss against evaluation length
  (``val_loss_at_length``), one line per value of an axis (default: the only or first of two
  varying axes, else per variant).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ablate.claims.fit import FFN_OUT
from ablate.claims.stats import t_errorbar
from ablate.names import display_names, length_multiple, loss_unit, value_order
from ablate.report.figure_data import (
    display_columns,
    heatmap_cells,
    heatmap_panels,
    held_fixed_column,
    labelled,
    past_max_len,
    used_differs,
)
from ablate.report.plots import CI_BANDS, FigureFile, finish_figure, line_facets
from ablate.results import StudyData
from ablate.study.figures import FigureOptions, Heatmap, LayerGradients, LengthCurves

STEP0_BLIND = ("optim.",)
"""Axes whose values cannot change the gradient at step 0 (LR, warmup, schedule, betas)."""


def words(axis: str, study: StudyData) -> str:
    """An axis as a label: its short name, in words (``data.batch_size`` -> ``batch size``)."""
    return display_names(study.axes).get(axis, axis.split(".")[-1]).replace("_", " ")


def default_options(study: StudyData) -> dict[str, FigureOptions]:
    """The figures a study gets without declaring them: a heatmap over its two numeric axes
    when it has exactly two, and the length curves (their runs permitting)."""
    out: dict[str, FigureOptions] = {}
    runs = study.runs
    numeric = [
        a
        for a in study.varying_axes
        if pd.to_numeric(runs[a], errors="coerce").notna().all() and runs[a].nunique() > 1
    ]
    if len(numeric) == 2:
        used = numeric[1].split(".")[-1]  # a summary field of the same name: what runs used
        out["heatmap"] = Heatmap(rows=numeric[0], columns=numeric[1], used=used)
    out["length_curves"] = LengthCurves()
    return out


def _heatmap_panel(ax, cells: tuple[pd.DataFrame, pd.DataFrame], unit: str, labels: tuple) -> None:
    """One heatmap on ``ax`` (``cells``: mean, annotation), its lowest mean outlined in red."""
    mean, annot = cells
    sns.heatmap(
        mean,
        annot=annot.to_numpy(),
        fmt="",
        cmap="viridis_r",
        ax=ax,
        linewidths=0.5,
        linecolor="white",
        annot_kws={"fontsize": 8},
        cbar_kws={"label": f"final val loss ({unit})"},
    )
    if mean.notna().any().any():  # outline the best cell
        i, j = np.unravel_index(np.nanargmin(mean.to_numpy()), mean.shape)
        ax.add_patch(plt.Rectangle((j, i), 1, 1, fill=False, edgecolor="red", lw=2.5))
    ax.set_facecolor("0.85")
    ax.set_ylabel(labels[0])
    ax.set_xlabel(labels[1])
    ax.tick_params(axis="y", rotation=0)


def heatmap(study: StudyData, out: Path, options: Heatmap) -> FigureFile | None:
    """Mean final loss over ``options.rows`` × ``options.columns``; needs both to vary."""
    axes, runs = (options.rows, options.columns), study.runs
    if not all(a in study.varying_axes for a in axes):
        return None
    contexts = heatmap_panels(study, [a for a in study.varying_axes if a not in axes])
    values = (value_order(runs[axes[0]]), value_order(runs[axes[1]]))
    n = len(contexts)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    w = max(5.5, 1.4 * len(values[1]) + 2.8)
    h = max(3.6, 0.85 * len(values[0]) + 1.8)
    fig, axs = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    differs = used_differs(runs, options.columns, options.used)
    rows, cols = words(axes[0], study), words(axes[1], study)
    xlabel = cols + (
        f" (columns: {options.columns}; each cell: the {options.used} its runs trained with)"
        if differs
        else ""
    )
    used = (options.used or "") if differs else ""
    for ax, (ctx, g) in zip(axs.flat, contexts, strict=False):
        cells = heatmap_cells(g, axes, values, "final_val_loss", used)
        _heatmap_panel(ax, cells, loss_unit(study), (rows, xlabel))
        if ctx:
            ax.set_title(ctx, fontsize=9)
    for ax in list(axs.flat)[n:]:
        ax.set_visible(False)
    title = f"Final validation loss over {rows} × {cols}"
    key = "cell: mean over completed seeds ± std; red box: lowest; grey: no completed run"
    caption = (
        f"{title}. Cell: mean final validation loss over completed seeds ± sample std "
        "(lower is better; red box: lowest mean); diverged seeds are counted in the cell, "
        "not averaged; grey cells have no completed run."
        + (
            f" Each cell also gives the {options.used} its runs trained with (their summary's "
            f"{options.used}), which differs from the column's {options.columns}."
            if differs
            else ""
        )
    )
    return finish_figure(fig, study, out, "heatmap_batch_lr", title, key, caption)


def init_gradients(study: StudyData) -> tuple[pd.DataFrame, bool]:
    """The per-layer gradient norms at each run's first logged step (step 0: initialisation):
    the FFN output weight's (what the ffn_grad_slope@init claim tests) when logged, else the
    whole layer's; and whether they are the FFN's. Runs that differ only in axes that cannot
    change step 0 (optimiser, schedule) are the same model at init: one of them is kept."""
    m = study.metrics
    ffn = bool(m["metric"].str.startswith(FFN_OUT).any())
    prefix = FFN_OUT if ffn else "grad_norm/layer_"
    df = m[m["metric"].str.startswith(prefix)].copy()
    if df.empty:
        return df, ffn
    first = df.groupby("run_id")["step"].transform("min")
    df = df[df["step"] == first]
    df["layer"] = df["metric"].str.rsplit("_", n=1).str[-1].astype(int)
    df = df[np.isfinite(df["value"].astype(float))]
    if int(df["step"].min()) == 0:
        init_axes = [a for a in study.varying_axes if not a.startswith(STEP0_BLIND)]
        df = df.drop_duplicates(["seed", "layer", *init_axes])
    return df, ffn


def layer_gradients(study: StudyData, out: Path, options: LayerGradients) -> FigureFile | None:
    """Per-layer gradient norm at the first logged step (init) by ``options.by``: only when
    that axis varies over every value in ``options.values`` and the runs logged per-layer
    gradient norms."""
    axis = options.by
    present = set(study.runs[axis].dropna()) if axis in study.runs else set()
    if axis not in study.varying_axes or not set(options.values) <= present:
        return None
    df, ffn = init_gradients(study)
    if df.empty:
        return None
    step = int(df["step"].min())
    df, orders = labelled(df, study)
    names = display_names(study.axes)
    hue = names[axis]
    blind = [a for a in study.varying_axes if a.startswith(STEP0_BLIND)] if step == 0 else []
    col = held_fixed_column(df, study, [axis, *blind])
    df["seed "] = df["seed"].astype(str)
    g = line_facets(
        df,
        x="layer",
        y="value",
        hue=hue,
        hue_order=orders[hue],
        col=col,
        n_col=df[col].nunique() if col else 1,
        aspect=1.3,
        units="seed ",
        estimator=None,
        marker="o",
        markersize=4,
        alpha=0.75,
    )
    layers = sorted(df["layer"].unique())
    if len(layers) > 12:
        layers = layers[:: math.ceil(len(layers) / 12)]
    for ax in g.axes.flat:
        ax.set_xticks(layers)
    when = "initialisation (step 0)" if step == 0 else f"step {step} (first logged)"
    ylabel = "‖grad‖ of the FFN output weight" if ffn else "gradient L2 norm of the layer"
    g.set_axis_labels("layer index (0 = nearest the input)", ylabel)
    what = "FFN output weight's gradient norm" if ffn else "whole-layer gradient norm"
    title = f"Per-layer {what} at {when}"
    tested = (
        " This is the quantity the ffn_grad_slope@init claim tests (metric "
        "grad_norm/ffn_out_<layer>)."
        if ffn
        else " Whole-layer norms (all of a layer's parameters), not the FFN output weight."
    )
    note = f" ({options.note})" if options.note else ""
    caption = (
        f"{title}, by {words(axis, study)}{note}." + tested + " Norms before clipping. "
        "One line per seed, so a trend carried by one seed shows as one."
        + (
            f" Optimiser/schedule axes ({', '.join(names[a] for a in blind)}) cannot change "
            "step 0, so their runs are shown once."
            if blind
            else ""
        )
    )
    return finish_figure(g, study, out, "grad_norm_layers", title, "one line per seed", caption)


def _without_long_evals(
    df: pd.DataFrame, hue: str, levels: list[str], max_mult: float
) -> tuple[dict[str, str], dict[str, str], int]:
    """The hue levels with no finite loss past 1×, to say why in the legend: (level -> its
    relabelled name, relabelled name -> why, how many of them stop at their max_seq_len)."""
    relabel: dict[str, str] = {}
    why_na: dict[str, str] = {}
    n_limited = 0
    evaluated = df[(df["mult"] > 1) & df["loss"].notna()]
    for level in levels:
        sub = df[df[hue] == level]
        longer = sub[sub["mult"] > 1]
        if len(sub) and longer["loss"].notna().sum() == 0 and max_mult > 1:
            limited = len(evaluated) > 0 and past_max_len(longer, longer["mult"]).all()
            relabel[level] = f"{level} (n/a past 1×)"
            why_na[relabel[level]] = (
                "no positions past\nmax_seq_len" if limited else "not evaluated\npast 1×"
            )
            n_limited += int(limited)
    return relabel, why_na, n_limited


def _length_axes(
    g, df: pd.DataFrame, hue: str, col: str | None, mults: list, why_na: dict[str, str]
) -> None:
    """Log₂ length axis ticked at the evaluated multiples; an arrow to each n/a level's lone
    1× point, which is often hidden under another line's."""
    for ax in g.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks(mults)
        ax.set_xticklabels([f"{v:g}×" for v in mults])
        ax.minorticks_off()
        for level, why in why_na.items():
            sel = (df[hue] == level) & (df["mult"] == min(mults))
            if col:
                sel &= df[col] == ax.get_title()
            if sel.any():
                ax.annotate(
                    f"{level.split(' (')[0]}:\n{why}",
                    xy=(min(mults), df.loc[sel, "loss"].mean()),
                    xytext=(0.06, 0.95),
                    textcoords="axes fraction",
                    va="top",
                    fontsize=7.5,
                    arrowprops={"arrowstyle": "->", "lw": 0.8, "color": "0.3"},
                    color="0.25",
                )


def length_curves(study: StudyData, out: Path, options: LengthCurves) -> FigureFile | None:
    """Validation loss vs evaluation length (multiples of the training length), one line per
    value of ``options.by`` (default: :func:`display_columns`' first)."""
    cols = study.length_columns
    runs = study.runs
    done = runs[runs["status"] == "completed"]
    if not cols or done.empty:
        return None
    names = display_names(study.axes)
    long = done.melt(
        id_vars=[c for c in done.columns if c not in cols],
        value_vars=cols,
        var_name="col",
        value_name="loss",
    )
    long["mult"] = long["col"].map(length_multiple)
    df, orders = labelled(long, study)
    hue = names[options.by] if options.by in study.varying_axes else display_columns(study)[0]
    max_mult = max(length_multiple(c) for c in cols)
    relabel, why_na, n_limited = _without_long_evals(df, hue, orders[hue], max_mult)
    df = df[df["loss"].notna()].copy()
    if df.empty:
        return None
    hue_order = [relabel.get(v, v) for v in orders[hue]]
    df[hue] = pd.Categorical(
        df[hue].astype(str).map(lambda v: relabel.get(v, v)), categories=hue_order
    )
    by_axis = {name: axis for axis, name in names.items()}
    col = held_fixed_column(df, study, [by_axis[hue]] if hue in by_axis else [])
    if hue == "variant":
        col = None
    n_col = df[col].nunique() if col else 1
    g = line_facets(
        df,
        x="mult",
        y="loss",
        hue=hue,
        hue_order=hue_order,
        col=col,
        n_col=n_col,
        aspect=1.3,
        style=hue,
        style_order=hue_order,
        markers=True,
        dashes=False,
        markersize=8,
        errorbar=t_errorbar,
    )
    _length_axes(g, df, hue, col, sorted({length_multiple(c) for c in cols}), why_na)
    seq = done["cfg.seq_len"].dropna()
    train_len = f"; trained at {int(seq.iloc[0])} tokens" if len(seq) and seq.nunique() == 1 else ""
    g.set_axis_labels("evaluation length (× training)", f"validation loss ({loss_unit(study)})")
    title = "Validation loss vs evaluation length"
    note = (
        " A model whose positions stop at its max_seq_len (learned absolute positions) cannot "
        "be evaluated past it and has the 1× point only (n/a in the table)."
        if n_limited
        else ""
    )
    caption = f"{title} (completed runs). Line: mean over seeds; {CI_BANDS}.{note}"
    key = f"line: mean over seeds; {CI_BANDS}"
    return finish_figure(
        g, study, out, "length_extrapolation", title, key, caption, after_title=train_len
    )


DECLARED: dict[str, Callable[..., FigureFile | None]] = {
    "heatmap": heatmap,
    "layer_gradients": layer_gradients,
    "length_curves": length_curves,
}
"""Figure kind (:data:`ablate.study.figures.FIGURES`) -> the function drawing it."""


def declared_figures(study: StudyData, out: Path) -> list[FigureFile]:
    """The figures the study declares (else the defaults of :func:`default_options`) that its
    runs support, written as PNGs into ``out``, in the order of :data:`DECLARED`."""
    options = default_options(study) | study.figures
    figures = []
    for kind, draw in DECLARED.items():
        if kind in options:
            fig = draw(study, out, options[kind])
            if fig is not None:
                figures.append(fig)
    plt.close("all")
    return figures
