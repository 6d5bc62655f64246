"""Figures for a study report (seaborn, Agg backend, PNG).

Every figure is chosen by the data it needs, not by the study's name:

* ``val_loss_curves.png``: validation loss over training steps per variant (``val/loss`` metric).
* ``final_val_loss.png``: final validation loss per variant, individual seeds shown.
* ``heatmap_batch_lr.png``: final loss over batch size × LR (axes ``data.batch_size`` and
  ``optim.lr`` or ``optim.lr_scaling``).
* ``grad_norm_layers.png``: per-layer gradient norm at the first logged step (initialisation)
  by norm placement (axis ``model.norm_placement``; Xiong et al. 2020, Fig. 3 style).
* ``length_extrapolation.png``: validation loss vs evaluation length (``val_loss_at_length``).

Bands and bars are the 95% t-interval over seeds (:func:`ablate.report.stats.t_errorbar`), the
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

from ablate.report.collect import (  # noqa: E402
    StudyData,
    display_names,
    format_value,
    length_multiple,
    loss_unit,
    value_order,
    variant_order,
)
from ablate.report.stats import SEED, t_errorbar  # noqa: E402

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


def _labelled(df: pd.DataFrame, study: StudyData) -> tuple[pd.DataFrame, dict[str, list[str]]]:
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


def _context(df: pd.DataFrame, study: StudyData, exclude: list[str]) -> str | None:
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


def _layout(study: StudyData) -> tuple[str, str | None]:
    """Display columns (primary, secondary): 1 axis: (a, None); 2 axes: (a, b); else variant."""
    names = display_names(study.axes)
    varying = [names[a] for a in study.varying_axes]
    if len(varying) in (1, 2):
        return varying[0], (varying[1] if len(varying) == 2 else None)
    return "variant", None


def _save(g_or_fig, path: Path) -> None:
    fig = getattr(g_or_fig, "figure", g_or_fig)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def _counts(study: StudyData, by: str) -> str:
    per = study.runs.groupby("variant", sort=False)["status"]
    n = per.apply(lambda s: int((s == "completed").sum()))
    n = n[n > 0] if (n > 0).any() else n
    lo, hi = int(n.min()), int(n.max())
    return f"n={lo} seeds per {by}" if lo == hi else f"n={lo}–{hi} seeds per {by}"


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


def val_loss_curves(study: StudyData, out: Path) -> FigureFile | None:
    """Validation loss vs step: line = mean over seeds, band = 95% t-interval over seeds; a
    completed run's last point is its full-split ``final_val_loss``."""
    m = study.metrics
    df = m[(m["metric"] == "val/loss") & (m["status"] != "diverged")]
    df = df[np.isfinite(df["value"].astype(float))]
    if df.empty:
        return None
    df = with_final_points(df, study.runs)
    df, orders = _labelled(df, study)
    primary, secondary = _layout(study)
    hue = primary if primary != "variant" or df["variant"].nunique() > 1 else None
    col = secondary
    n_col = len(orders[col]) if col else 1
    few_points = df.groupby("run_id")["step"].nunique().max() <= 12
    g = sns.relplot(
        data=df,
        kind="line",
        x="step",
        y="value",
        hue=hue,
        hue_order=orders.get(hue) if hue else None,
        col=col,
        col_order=orders.get(col) if col else None,
        col_wrap=min(3, n_col) if col and n_col > 1 else None,
        errorbar=t_errorbar,
        marker="o" if few_points else None,
        markersize=4,
        height=3.4,
        aspect=1.4,
        facet_kws={"sharey": True},
    )
    unit = loss_unit(study)
    g.set_axis_labels("training step", f"validation loss ({unit})")
    if col:
        g.set_titles(col_template=f"{col} = {{col_name}}")
    for ax in g.axes.flat:
        ax.grid(alpha=0.3)
    ref = _reference_line(study, list(g.axes.flat))
    n_div = int((study.runs["status"] == "diverged").sum())
    div = f"; {n_div} diverged run(s) left out" if n_div else ""
    title = "Validation loss during training"
    g.figure.suptitle(
        f"{title} — {study.name}\n"
        f"line: mean over seeds; {CI_BANDS} ({_counts(study, 'variant')}){div}",
        y=1.0,
        va="bottom",
        fontsize=10,
    )
    path = out / "val_loss_curves.png"
    _save(g, path)
    caption = (
        f"{title} per variant. Line: mean over seeds; {CI_BANDS} "
        "(mean ± t·s/√n). The last point of a completed run is its full-split final loss, "
        "the number in the tables. Runs still running are included up to "
        f"their last evaluation{div}.{ref}"
    )
    return FigureFile(path, title, caption)


def final_val_loss(
    study: StudyData, out: Path, metric: str = "final_val_loss"
) -> FigureFile | None:
    """Final validation loss per variant: point = mean, bars = 95% t-interval, dots = seeds."""
    runs = study.runs
    done = runs[(runs["status"] == "completed") & runs[metric].notna()]
    if done.empty:
        return None
    df, orders = _labelled(done, study)
    all_runs, _ = _labelled(runs, study)
    x, hue = _layout(study)
    order = orders[x]
    # diverged counts in the tick labels: diverged runs are never averaged in
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
    n_hue = len(orders[hue]) if hue else 1
    dodge = 0.8 * (n_hue - 1) / n_hue if hue else False
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
        dodge=dodge,
        markers="D",
        height=4.0,
        aspect=max(1.2, min(2.6, 0.45 * len(order) * max(1, n_hue / 2))),
    )
    ax = g.ax
    # stripplot jitters with numpy's global RNG: seed it here so a rebuild draws the same dots
    state = np.random.get_state()
    np.random.seed(SEED)
    sns.stripplot(
        data=df,
        x=x,
        y=metric,
        order=order,
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
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(ticks, rotation=30 if x == "variant" and len(order) > 4 else 0)
    unit = loss_unit(study)
    label = metric.replace("_", " ").replace("val", "validation")
    ax.set_ylabel(f"{label} ({unit})")
    ax.set_xlabel(x)
    ax.grid(axis="y", alpha=0.3)
    ref = _reference_line(study, [ax])
    title = "Final validation loss per variant"
    g.figure.suptitle(
        f"{title} — {study.name}\ndiamond: mean over seeds; {CI_BARS}; dots: individual seeds",
        y=1.0,
        va="bottom",
        fontsize=10,
    )
    path = out / "final_val_loss.png"
    _save(g, path)
    caption = (
        f"{title} (completed runs). Diamond: mean over seeds; {CI_BARS} "
        "(mean ± t·s/√n); dots: individual seeds. Diverged runs are "
        f"not plotted; their count is under the tick label.{ref}"
    )
    return FigureFile(path, title, caption)


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
    others = [a for a in axes if a not in ("data.batch_size", lr_axis)]
    if others:
        contexts = [
            (
                ", ".join(
                    f"{display_names(study.axes)[a]}={format_value(v)}"
                    for a, v in zip(others, k, strict=True)
                ),
                g,
            )
            for k, g in runs.groupby(others, sort=True, dropna=False)
            for k in [k if isinstance(k, tuple) else (k,)]
        ]
    else:
        contexts = [("", runs)]
    rows = value_order(runs["data.batch_size"])
    cols = value_order(runs[lr_axis])
    n = len(contexts)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    w = max(5.5, 1.4 * len(cols) + 2.8)
    h = max(3.6, 0.85 * len(rows) + 1.8)
    fig, axs = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    unit = loss_unit(study)
    for ax, (ctx, g) in zip(axs.flat, contexts, strict=False):
        mean = pd.DataFrame(
            np.nan, index=[format_value(r) for r in rows], columns=[format_value(c) for c in cols]
        )
        annot = pd.DataFrame("", index=mean.index, columns=mean.columns)
        for r in rows:
            for c in cols:
                cell = g[(g["data.batch_size"] == r) & (g[lr_axis] == c)]
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
                annot.loc[format_value(r), format_value(c)] = text.strip()
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
        ax.set_xlabel(
            "peak learning rate (optim.lr)"
            if lr_axis == "optim.lr"
            else "LR scaling rule (optim.lr_scaling)"
        )
        ax.tick_params(axis="y", rotation=0)
        if ctx:
            ax.set_title(ctx, fontsize=9)
    for ax in list(axs.flat)[n:]:
        ax.set_visible(False)
    title = "Final validation loss over batch size × learning rate"
    fig.suptitle(
        f"{title} — {study.name}\ncell: mean over completed seeds ± std; red box: lowest; "
        "grey: no completed run",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / "heatmap_batch_lr.png"
    _save(fig, path)
    caption = (
        f"{title}. Cell: mean final validation loss over completed seeds ± sample std "
        "(lower is better; red box: lowest mean); diverged seeds are counted in the cell, "
        "not averaged; grey cells have no completed run."
    )
    return FigureFile(path, title, caption)


def grad_norm_layers(study: StudyData, out: Path) -> FigureFile | None:
    """Per-layer gradient norm at the first logged step (init) by norm placement."""
    axis = "model.norm_placement"
    if axis not in study.varying_axes:
        return None
    m = study.metrics
    df = m[m["metric"].str.startswith("grad_norm/layer_")].copy()
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
    df, orders = _labelled(df, study)
    names = display_names(study.axes)
    hue = names[axis]
    blind = [a for a in study.varying_axes if a not in init_axes] if step == 0 else []
    col = _context(df, study, [axis, *blind])
    n_col = df[col].nunique() if col else 1
    df["seed "] = df["seed"].astype(str)
    g = sns.relplot(
        data=df,
        kind="line",
        x="layer",
        y="value",
        hue=hue,
        hue_order=orders[hue],
        units="seed ",
        estimator=None,
        marker="o",
        markersize=4,
        alpha=0.75,
        col=col,
        col_wrap=min(3, n_col) if col and n_col > 1 else None,
        height=3.4,
        aspect=1.3,
    )
    layers = sorted(df["layer"].unique())
    if len(layers) > 12:
        layers = layers[:: math.ceil(len(layers) / 12)]
    for ax in g.axes.flat:
        ax.set_xticks(layers)
        ax.grid(alpha=0.3)
    if col:
        g.set_titles(col_template="{col_name}")
    when = "initialisation (step 0)" if step == 0 else f"step {step} (first logged)"
    g.set_axis_labels("layer index (0 = nearest the input)", "gradient L2 norm of the layer")
    title = f"Per-layer gradient norm at {when}"
    g.figure.suptitle(
        f"{title} — {study.name}\none line per seed",
        y=1.0,
        va="bottom",
        fontsize=10,
    )
    path = out / "grad_norm_layers.png"
    _save(g, path)
    caption = (
        f"{title}, by norm placement (cf. Xiong et al. 2020, Fig. 3: Post-LN's gradients are "
        "large near the output at init, Pre-LN's are not). Norms before clipping. One line "
        "per seed, so a trend carried by one seed shows as one."
        + (
            f" Optimiser/schedule axes ({', '.join(names[a] for a in blind)}) cannot change "
            "step 0, so their runs are shown once."
            if blind
            else ""
        )
    )
    return FigureFile(path, title, caption)


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
    df, orders = _labelled(long, study)
    if "model.pos_encoding" in study.varying_axes:
        hue = names["model.pos_encoding"]
    else:
        hue = _layout(study)[0]
    # levels with no finite loss past 1x: say why in the legend
    max_mult = max(length_multiple(c) for c in cols)
    relabel: dict[str, str] = {}
    why_na: dict[str, str] = {}
    n_learned_na = 0
    for level in orders[hue]:
        sub = df[df[hue] == level]
        past = sub[(sub["mult"] > 1) & sub["loss"].notna()]
        if len(sub) and past.empty and max_mult > 1:
            learned = (sub["cfg.pos_encoding"] == "learned").any()
            relabel[level] = f"{level} (n/a past 1×)"
            why_na[relabel[level]] = (
                "no positions past\nmax_seq_len" if learned else "not evaluated\npast 1×"
            )
            n_learned_na += int(learned)
    df = df[df["loss"].notna()].copy()
    if df.empty:
        return None
    hue_order = [relabel.get(v, v) for v in orders[hue]]
    df[hue] = pd.Categorical(
        df[hue].astype(str).map(lambda v: relabel.get(v, v)), categories=hue_order
    )
    col = _context(
        df, study, ["model.pos_encoding"] if hue == names.get("model.pos_encoding") else []
    )
    if hue == "variant":
        col = None
    n_col = df[col].nunique() if col else 1
    g = sns.relplot(
        data=df,
        kind="line",
        x="mult",
        y="loss",
        hue=hue,
        hue_order=hue_order,
        style=hue,
        style_order=hue_order,
        markers=True,
        dashes=False,
        markersize=8,
        col=col,
        col_wrap=min(3, n_col) if col and n_col > 1 else None,
        errorbar=t_errorbar,
        height=3.4,
        aspect=1.3,
    )
    if col:
        g.set_titles(col_template="{col_name}")
    mults = sorted({length_multiple(c) for c in cols})
    for ax in g.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks(mults)
        ax.set_xticklabels([f"{v:g}×" for v in mults])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        # the n/a levels have only their 1x point, often hidden under another: point at it
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
    seq = done["cfg.seq_len"].dropna()
    train_len = f"; trained at {int(seq.iloc[0])} tokens" if len(seq) and seq.nunique() == 1 else ""
    g.set_axis_labels("evaluation length (× training)", f"validation loss ({loss_unit(study)})")
    title = "Validation loss vs evaluation length"
    g.figure.suptitle(
        f"{title} — {study.name}{train_len}\nline: mean over seeds; {CI_BANDS}",
        y=1.0,
        va="bottom",
        fontsize=10,
    )
    path = out / "length_extrapolation.png"
    _save(g, path)
    note = (
        " Learned absolute positions have no embedding past max_seq_len, so they cannot be "
        "evaluated past 1× and have the 1× point only (n/a in the table)."
        if n_learned_na
        else ""
    )
    caption = f"{title} (completed runs). Line: mean over seeds; {CI_BANDS}.{note}"
    return FigureFile(path, title, caption)


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
