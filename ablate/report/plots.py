"""Figures for a study report (seaborn, Agg backend, PNG).

Every figure is chosen by the data it needs, not by the study's name:

* ``val_loss_curves.png``: validation loss over training steps per variant (``val/loss`` metric).
* ``final_val_loss.png``: final validation loss per variant, individual seeds shown.
* ``heatmap_batch_lr.png``: final loss over batch size × LR (axes ``data.batch_size`` and
  ``optim.lr`` or ``optim.lr_scaling``).
* ``grad_norm_layers.png``: per-layer gradient norm at the first logged step (initialisation)
  by norm placement (Xiong et al. 2020, Fig. 3 style): only when ``model.norm_placement``
  varies over both ``post`` and ``pre`` and the runs logged ``grad_norm/layer_*`` or
  ``grad_norm/ffn_out_*``.
* ``length_extrapolation.png``: validation loss vs evaluation length (``val_loss_at_length``).

Bands and bars are the 95% t-interval over seeds (:func:`ablate.claims.stats.t_errorbar`), the
same interval as the tables; every title and caption says so. The last point of a validation
curve is the run's full-split final loss, the number the tables use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from ablate.claims.stats import SEED, t_errorbar  # noqa: E402
from ablate.names import display_names, length_multiple, loss_unit, value_order  # noqa: E402
from ablate.report.figure_data import (  # noqa: E402
    display_columns,
    heatmap_cells,
    heatmap_panels,
    held_fixed_column,
    labelled,
    peak_lr_differs,
    seed_counts,
    with_final_points,
)
from ablate.study.results import StudyData  # noqa: E402

DPI = 110
CI_BANDS = "band: 95% t-interval over seeds (as in the tables)"
CI_BARS = "bars: 95% t-interval over seeds (as in the tables)"


STEP0_BLIND = ("optim.",)
"""Axes whose values cannot change the gradient at step 0 (LR, warmup, schedule, betas)."""


@dataclass(frozen=True)
class FigureFile:
    path: Path
    title: str
    caption: str
    seeds: str = ""
    """The seeds it draws when not the study's pooled runs (a claim's own), in words."""


def save_figure(
    fig, out: Path, name: str, title: str, key: str, caption: str, fontsize: int = 10
) -> FigureFile:
    """A plain figure's last steps: ``title`` over ``key`` above it, the layout tightened to
    make room, ``out/<name>.png`` written, the figure closed."""
    fig.suptitle(f"{title}\n{key}", fontsize=fontsize)
    fig.tight_layout()
    path = out / f"{name}.png"
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return FigureFile(path, title, caption)


def _finish(
    plot,
    study: StudyData,
    out: Path,
    name: str,
    title: str,
    key: str,
    caption: str,
    *,
    after_title: str = "",
) -> FigureFile:
    """Every figure's last steps: the title (``title — study``, then ``key``: what marks, lines
    and bands show) over the figure, ``out/<name>.png`` written, the figure closed."""
    fig = getattr(plot, "figure", plot)
    if isinstance(plot, plt.Figure):  # plain subplots: tight_layout makes room for the title
        shown = save_figure(fig, out, name, f"{title} — {study.name}{after_title}", key, caption)
        return FigureFile(shown.path, title, caption)
    # a seaborn grid: the title sits on top of its axes
    fig.suptitle(f"{title} — {study.name}{after_title}\n{key}", y=1.0, va="bottom", fontsize=10)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return FigureFile(path, title, caption)


def _line_facets(
    df: pd.DataFrame,
    *,
    x: str,
    y: str,
    col: str | None,
    n_col: int,
    aspect: float,
    col_title: str = "{col_name}",
    **kwargs,
) -> sns.FacetGrid:
    """The opening the line figures share: a seaborn line plot per ``col`` value (wrapped after
    three panels), each panel titled and gridded. ``kwargs`` (``hue``, ``hue_order``, ...) go
    to ``sns.relplot``."""
    g = sns.relplot(
        data=df,
        kind="line",
        x=x,
        y=y,
        col=col,
        col_wrap=min(3, n_col) if col and n_col > 1 else None,
        height=3.4,
        aspect=aspect,
        **kwargs,
    )
    if col:
        g.set_titles(col_template=col_title)
    for ax in g.axes.flat:
        ax.grid(alpha=0.3)
    return g


def _reference_line(study: StudyData, axes: list) -> str:
    """Draw the study's published reference value (if any) as a dashed line on ``axes``;
    returns the caption sentence for it ("" when there is none)."""
    ref = study.reference
    if ref is None:
        return ""
    for ax in axes:
        ax.axhline(ref.value, color="crimson", linestyle="--", linewidth=1.2, zorder=1)
        ax.annotate(
            f"{ref.label}: {ref.value:g}",
            xy=(0.0, ref.value),  # left: loss curves start high, so the label stays clear
            xycoords=("axes fraction", "data"),
            xytext=(4, 3),
            textcoords="offset points",
            ha="left",
            va="bottom",
            fontsize=8,
            color="crimson",
        )
    return f" Dashed line: {ref.label} ({ref.value:g})."


def val_loss_curves(study: StudyData, out: Path) -> FigureFile | None:
    """Validation loss vs step: line = mean over seeds, band = 95% t-interval over seeds; a
    completed run's last point is its full-split ``final_val_loss``."""
    m = study.metrics
    df = m[(m["metric"] == "val/loss") & (m["status"] != "diverged")]
    df = df[np.isfinite(df["value"].astype(float))]
    if df.empty:
        return None
    df = with_final_points(df, study.runs)
    df, orders = labelled(df, study)
    primary, secondary = display_columns(study)
    hue = primary if primary != "variant" or df["variant"].nunique() > 1 else None
    col = secondary
    n_col = len(orders[col]) if col else 1
    few_points = df.groupby("run_id")["step"].nunique().max() <= 12
    g = _line_facets(
        df,
        x="step",
        y="value",
        hue=hue,
        hue_order=orders.get(hue) if hue else None,
        col=col,
        n_col=n_col,
        aspect=1.4,
        col_title=f"{col} = {{col_name}}",
        col_order=orders.get(col) if col else None,
        errorbar=t_errorbar,
        marker="o" if few_points else None,
        markersize=4,
        facet_kws={"sharey": True},
    )
    unit = loss_unit(study)
    g.set_axis_labels("training step", f"validation loss ({unit})")
    ref = _reference_line(study, list(g.axes.flat))
    n_div = int((study.runs["status"] == "diverged").sum())
    div = f"; {n_div} diverged run(s) left out" if n_div else ""
    title = "Validation loss during training"
    key = f"line: mean over seeds; {CI_BANDS} ({seed_counts(study, 'variant')}){div}"
    caption = (
        f"{title} per variant. Line: mean over seeds; {CI_BANDS} "
        "(mean ± t·s/√n). The last point of a completed run is its full-split final loss, "
        "the number in the tables. Runs still running are included up to "
        f"their last evaluation{div}.{ref}"
    )
    return _finish(g, study, out, "val_loss_curves", title, key, caption)


def _diverged_ticks(all_runs: pd.DataFrame, x: str, hue: str | None, order: list) -> list[str]:
    """Tick labels with the diverged count under each value: diverged runs are never averaged
    in, so the figure says how many there were."""
    ticks = []
    for v in order:
        grp = all_runs[all_runs[x] == v]
        notes = []
        for level, sub in grp.groupby(hue, observed=True) if hue else [(None, grp)]:
            d = int((sub["status"] == "diverged").sum())
            fin = int(sub["status"].isin(("completed", "diverged")).sum())
            if d:
                notes.append(f"diverged {d}/{fin}" + (f" ({level})" if hue else ""))
        ticks.append("\n".join([str(v), *notes]))
    return ticks


def _seed_dots(df: pd.DataFrame, x: str, y: str, orders: dict, hue: str | None, ax) -> None:
    """One dot per seed over the means. stripplot jitters with numpy's global RNG: it is seeded
    here (and restored after) so a rebuild draws the same dots."""
    state = np.random.get_state()
    np.random.seed(SEED)
    sns.stripplot(
        data=df,
        x=x,
        y=y,
        order=orders[x],
        hue=hue,
        hue_order=orders.get(hue) if hue else None,
        dodge=bool(hue),
        jitter=0.08,
        alpha=0.8,
        size=3.5,
        linewidth=0.6,
        edgecolor="black",
        color=None if hue else "0.6",
        legend=False,
        zorder=5,
        ax=ax,
    )
    np.random.set_state(state)


def final_val_loss(
    study: StudyData, out: Path, metric: str = "final_val_loss"
) -> FigureFile | None:
    """Final validation loss per variant: point = mean, bars = 95% t-interval, dots = seeds."""
    runs = study.runs
    done = runs[(runs["status"] == "completed") & runs[metric].notna()]
    if done.empty:
        return None
    df, orders = labelled(done, study)
    all_runs, _ = labelled(runs, study)
    x, hue = display_columns(study)
    order = orders[x]
    n_hue = len(orders[hue]) if hue else 1
    g = sns.catplot(
        data=df,
        kind="point",
        x=x,
        y=metric,
        order=order,
        hue=hue,
        hue_order=orders.get(hue) if hue else None,
        errorbar=t_errorbar,
        capsize=0.12,
        linestyle="none",
        dodge=0.8 * (n_hue - 1) / n_hue if hue else False,
        markers="D",
        height=4.0,
        aspect=max(1.2, min(2.6, 0.45 * len(order) * max(1, n_hue / 2))),
    )
    ax = g.ax
    _seed_dots(df, x, metric, orders, hue, ax)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(
        _diverged_ticks(all_runs, x, hue, order),
        rotation=30 if x == "variant" and len(order) > 4 else 0,
    )
    label = metric.replace("_", " ").replace("val", "validation")
    ax.set_ylabel(f"{label} ({loss_unit(study)})")
    ax.set_xlabel(x)
    ax.grid(axis="y", alpha=0.3)
    ref = _reference_line(study, [ax])
    title = "Final validation loss per variant"
    key = f"diamond: mean over seeds; {CI_BARS}; dots: individual seeds"
    caption = (
        f"{title} (completed runs). Diamond: mean over seeds; {CI_BARS} "
        "(mean ± t·s/√n); dots: individual seeds. Diverged runs are "
        f"not plotted; their count is under the tick label.{ref}"
    )
    return _finish(g, study, out, "final_val_loss", title, key, caption)


def _lr_label(lr_axis: str, differs: bool | None) -> str:
    """The heatmap's x label: the peak LR when the columns are it, else what they are."""
    if lr_axis != "optim.lr":
        return "LR scaling rule (optim.lr_scaling)"
    if differs:
        return "base learning rate optim.lr (each cell: the peak LR its runs used)"
    if differs is None:
        return "base learning rate (optim.lr; the runs record no peak LR)"
    return "peak learning rate (optim.lr, used unscaled)"


def _heatmap_panel(ax, mean: pd.DataFrame, annot: pd.DataFrame, unit: str, xlabel: str) -> None:
    """One batch size × LR heatmap on ``ax``, its lowest mean outlined in red."""
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
    ax.set_ylabel("batch size (sequences)")
    ax.set_xlabel(xlabel)
    ax.tick_params(axis="y", rotation=0)


def heatmap_batch_lr(
    study: StudyData, out: Path, metric: str = "final_val_loss"
) -> FigureFile | None:
    """Mean final loss over batch size (rows) × LR (columns); needs those two axes."""
    axes = study.varying_axes
    if "data.batch_size" not in axes:
        return None
    lr_axis = next((a for a in ("optim.lr", "optim.lr_scaling") if a in axes), None)
    if lr_axis is None:
        return None
    runs = study.runs
    contexts = heatmap_panels(study, [a for a in axes if a not in ("data.batch_size", lr_axis)])
    rows = value_order(runs["data.batch_size"])
    cols = value_order(runs[lr_axis])
    n = len(contexts)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    w = max(5.5, 1.4 * len(cols) + 2.8)
    h = max(3.6, 0.85 * len(rows) + 1.8)
    fig, axs = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    differs = peak_lr_differs(runs)
    for ax, (ctx, g) in zip(axs.flat, contexts, strict=False):
        mean, annot = heatmap_cells(g, rows, cols, lr_axis, metric, peak=bool(differs))
        _heatmap_panel(ax, mean, annot, loss_unit(study), _lr_label(lr_axis, differs))
        if ctx:
            ax.set_title(ctx, fontsize=9)
    for ax in list(axs.flat)[n:]:
        ax.set_visible(False)
    title = "Final validation loss over batch size × learning rate"
    key = "cell: mean over completed seeds ± std; red box: lowest; grey: no completed run"
    caption = (
        f"{title}. Cell: mean final validation loss over completed seeds ± sample std "
        "(lower is better; red box: lowest mean); diverged seeds are counted in the cell, "
        "not averaged; grey cells have no completed run."
        + (
            " Columns are the base LR (optim.lr); the batch-size rule scales it, so each cell "
            "also gives the peak LR its runs trained with (their summary's lr)."
            if differs
            else ""
        )
    )
    return _finish(fig, study, out, "heatmap_batch_lr", title, key, caption)


def grad_norm_layers(study: StudyData, out: Path) -> FigureFile | None:
    """Per-layer gradient norm at the first logged step (init) by norm placement: only where
    the study compares Post-LN with Pre-LN (the comparison of Xiong et al.; a study whose
    norm_placement axis holds other values, e.g. a plugin's, gets no such figure) and its runs
    logged per-layer gradient norms."""
    axis = "model.norm_placement"
    if axis not in study.varying_axes or not {"post", "pre"} <= set(study.runs[axis].dropna()):
        return None
    m = study.metrics
    # the FFN output weight's gradient (what the ffn_grad_slope@init claim tests) when logged,
    # else the whole layer's
    ffn = m["metric"].str.startswith("grad_norm/ffn_out_")
    df = m[ffn if ffn.any() else m["metric"].str.startswith("grad_norm/layer_")].copy()
    what = "FFN output weight's gradient norm" if ffn.any() else "whole-layer gradient norm"
    if df.empty:
        return None
    first = df.groupby("run_id")["step"].transform("min")
    df = df[df["step"] == first]
    step = int(df["step"].min())
    df["layer"] = df["metric"].str.rsplit("_", n=1).str[-1].astype(int)
    df = df[np.isfinite(df["value"].astype(float))]
    # optimiser and schedule axes cannot change the gradient at step 0: one panel, not one per
    # value (runs that differ only there are the same model at init; keep one of them)
    init_axes = [a for a in study.varying_axes if not a.startswith(STEP0_BLIND)]
    if step == 0:
        df = df.drop_duplicates(["seed", "layer", *init_axes])
    df, orders = labelled(df, study)
    names = display_names(study.axes)
    hue = names[axis]
    blind = [a for a in study.varying_axes if a not in init_axes] if step == 0 else []
    col = held_fixed_column(df, study, [axis, *blind])
    n_col = df[col].nunique() if col else 1
    df["seed "] = df["seed"].astype(str)
    g = _line_facets(
        df,
        x="layer",
        y="value",
        hue=hue,
        hue_order=orders[hue],
        col=col,
        n_col=n_col,
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
    ylabel = "‖grad‖ of the FFN output weight" if ffn.any() else "gradient L2 norm of the layer"
    g.set_axis_labels("layer index (0 = nearest the input)", ylabel)
    title = f"Per-layer {what} at {when}"
    tested = (
        " This is the quantity the ffn_grad_slope@init claim tests (metric "
        "grad_norm/ffn_out_<layer>)."
        if ffn.any()
        else " Whole-layer norms (all of a layer's parameters), not the FFN output weight."
    )
    caption = (
        f"{title}, by norm placement (cf. Xiong et al. 2020, Fig. 3: Post-LN's gradients are "
        "large near the output at init, Pre-LN's are not)." + tested + " Norms before clipping. "
        "One line per seed, so a trend carried by one seed shows as one."
        + (
            f" Optimiser/schedule axes ({', '.join(names[a] for a in blind)}) cannot change "
            "step 0, so their runs are shown once."
            if blind
            else ""
        )
    )
    return _finish(g, study, out, "grad_norm_layers", title, "one line per seed", caption)


def _without_long_evals(
    df: pd.DataFrame, hue: str, levels: list[str], max_mult: float
) -> tuple[dict[str, str], dict[str, str], int]:
    """The hue levels with no finite loss past 1×, to say why in the legend: (level -> its
    relabelled name, relabelled name -> why, how many of them are learned positions)."""
    relabel: dict[str, str] = {}
    why_na: dict[str, str] = {}
    n_learned_na = 0
    for level in levels:
        sub = df[df[hue] == level]
        past = sub[(sub["mult"] > 1) & sub["loss"].notna()]
        if len(sub) and past.empty and max_mult > 1:
            learned = (sub["cfg.pos_encoding"] == "learned").any()
            relabel[level] = f"{level} (n/a past 1×)"
            why_na[relabel[level]] = (
                "no positions past\nmax_seq_len" if learned else "not evaluated\npast 1×"
            )
            n_learned_na += int(learned)
    return relabel, why_na, n_learned_na


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


def length_extrapolation(study: StudyData, out: Path) -> FigureFile | None:
    """Validation loss vs evaluation length (multiples of the training length)."""
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
    if "model.pos_encoding" in study.varying_axes:
        hue = names["model.pos_encoding"]
    else:
        hue = display_columns(study)[0]
    max_mult = max(length_multiple(c) for c in cols)
    relabel, why_na, n_learned_na = _without_long_evals(df, hue, orders[hue], max_mult)
    df = df[df["loss"].notna()].copy()
    if df.empty:
        return None
    hue_order = [relabel.get(v, v) for v in orders[hue]]
    df[hue] = pd.Categorical(
        df[hue].astype(str).map(lambda v: relabel.get(v, v)), categories=hue_order
    )
    col = held_fixed_column(
        df, study, ["model.pos_encoding"] if hue == names.get("model.pos_encoding") else []
    )
    if hue == "variant":
        col = None
    n_col = df[col].nunique() if col else 1
    g = _line_facets(
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
        " Learned absolute positions have no embedding past max_seq_len, so they cannot be "
        "evaluated past 1× and have the 1× point only (n/a in the table)."
        if n_learned_na
        else ""
    )
    caption = f"{title} (completed runs). Line: mean over seeds; {CI_BANDS}.{note}"
    key = f"line: mean over seeds; {CI_BANDS}"
    return _finish(
        g, study, out, "length_extrapolation", title, key, caption, after_title=train_len
    )


FIGURES = (
    val_loss_curves,
    final_val_loss,
    heatmap_batch_lr,
    grad_norm_layers,
    length_extrapolation,
)


def make_figures(study: StudyData, out: Path) -> list[FigureFile]:
    """Every figure the study's data supports, written as PNGs into ``out``."""
    sns.set_theme(style="ticks", context="notebook", font_scale=0.9)
    figures = []
    for fn in FIGURES:
        fig = fn(study, out)
        if fig is not None:
            figures.append(fig)
    plt.close("all")
    return figures
