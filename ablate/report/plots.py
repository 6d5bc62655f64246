"""The figures every study's report draws (seaborn, Agg backend, PNG), each chosen by the data
it needs, not by the study's name:

* ``val_loss_curves.png``: validation loss over training steps per variant (``val/loss`` metric).
* ``final_val_loss.png``: final validation loss per variant, individual seeds shown.

The figures a study declares (a heatmap over two axes, per-layer gradients at init, loss against
evaluation length) are :mod:`ablate.report.declared`'s; the figure helpers they share are here.
Bands and bars are the 95% t-interval over seeds (:func:`ablate.claims.stats.t_errorbar`), the
same interval as the tables; every title and caption says so. The last point of a validation
curve is the run's full-split final loss, the number the tables use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from ablate.claims.stats import SEED, t_errorbar  # noqa: E402
from ablate.names import loss_unit  # noqa: E402
from ablate.report.figure_data import (  # noqa: E402
    display_columns,
    labelled,
    seed_counts,
    with_final_points,
)
from ablate.results import StudyData  # noqa: E402

DPI = 110
CI_BANDS = "band: 95% t-interval over seeds (as in the tables)"
CI_BARS = "bars: 95% t-interval over seeds (as in the tables)"


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


def finish_figure(
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


def line_facets(
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


def reference_line(study: StudyData, axes: list) -> str:
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
    g = line_facets(
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
    ref = reference_line(study, list(g.axes.flat))
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
    return finish_figure(g, study, out, "val_loss_curves", title, key, caption)


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
    ref = reference_line(study, [ax])
    title = "Final validation loss per variant"
    key = f"diamond: mean over seeds; {CI_BARS}; dots: individual seeds"
    caption = (
        f"{title} (completed runs). Diamond: mean over seeds; {CI_BARS} "
        "(mean ± t·s/√n); dots: individual seeds. Diverged runs are "
        f"not plotted; their count is under the tick label.{ref}"
    )
    return finish_figure(g, study, out, "final_val_loss", title, key, caption)


FIGURES = (val_loss_curves, final_val_loss)


def make_figures(study: StudyData, out: Path) -> list[FigureFile]:
    """The figures every study's report draws (its data permitting), written as PNGs into
    ``out``; those a study declares are :func:`ablate.report.declared.declared_figures`."""
    sns.set_theme(style="ticks", context="notebook", font_scale=0.9)
    figures = []
    for fn in FIGURES:
        fig = fn(study, out)
        if fig is not None:
            figures.append(fig)
    plt.close("all")
    return figures
