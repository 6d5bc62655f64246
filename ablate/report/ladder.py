"""What a report shows of a scale ladder (:mod:`ablate.study.ladder`):

* ``trend_<claim id>.png``, for each trend claim (``expect: grows | shrinks | flat``): the gap
  against training compute (log x), every seed's gap at every rung (dots, a thin line per seed),
  the fitted line (the mean of the seeds' least-squares lines) with its band (the 95%
  t-interval over seeds of the fitted lines, the interval the claim's slope test uses), and
  the fitted lines carried one rung spacing past the largest rung, dashed, ending in a hollow
  diamond labelled as an extrapolation. Drawn from the runs that decide the claim (its
  confirmation seeds when it has them), with the numbers the claim engine computed
  (:mod:`ablate.claims.trend`).
* :func:`rungs_text`: every rung of the runs (parameters, tokens, training FLOPs) for the
  report's scale line.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from ablate.claims.checks import ClaimCheck  # noqa: E402
from ablate.claims.spec import RUNG, TREND  # noqa: E402
from ablate.claims.stats import t_errorbar  # noqa: E402
from ablate.claims.trend import UNIT, next_rung, train_flops  # noqa: E402
from ablate.names import loss_unit  # noqa: E402
from ablate.report.plots import FigureFile, save_figure  # noqa: E402
from ablate.results import StudyData  # noqa: E402

GRID = 25
"""Points per fitted line (on log10 FLOPs) from the first rung to one rung past the last."""


def rungs_text(runs: pd.DataFrame) -> str:
    """``rungs: small (99,968 parameters, 400,384 tokens, 2.9e+11 FLOPs), ...``: each rung of
    the (completed) runs in order of training FLOPs, every number from the runs; "" without a
    ladder."""
    if RUNG not in runs or runs[RUNG].isna().all():
        return ""
    r = runs.assign(_flops=train_flops(runs))
    if "steps" in r and "cfg.batch_size" in r and "cfg.seq_len" in r:
        r["_tokens"] = r["steps"] * r["cfg.batch_size"] * r["cfg.seq_len"]
    parts = []
    by = r.groupby(RUNG, sort=False)
    for rung in by["_flops"].mean().sort_values().index:
        g = by.get_group(rung)
        figures = [
            f"{_span(g['params'], '{:,.0f}')} parameters" if "params" in g else "",
            f"{_span(g['_tokens'], '{:,.0f}')} tokens" if "_tokens" in g else "",
            f"{_span(g['_flops'], '{:.3g}')} training FLOPs",
        ]
        parts.append(f"{rung} ({', '.join(f for f in figures if f)})")
    return f"{len(parts)} rungs: " + "; ".join(parts)


def _span(values: pd.Series, fmt: str) -> str:
    v = pd.to_numeric(values, errors="coerce").dropna()
    if v.empty:
        return "?"
    lo, hi = fmt.format(v.min()), fmt.format(v.max())
    return lo if lo == hi else f"{lo}-{hi}"


def trend_figure(study: StudyData, check: ClaimCheck, out: Path) -> FigureFile | None:
    """One trend claim's gap against compute (module doc)."""
    c = check.comparison
    if c is None or len(c.context.get("x", [])) < 3 or c.n_a < 2:
        return None
    ctx, claim = c.context, check.claim
    table, lines, x = ctx["table"], ctx["lines"].loc[ctx["seeds"]], np.asarray(ctx["x"])
    flops = 10 ** pd.Series(x, index=ctx["rungs"])
    points = table.loc[ctx["seeds"]].rename_axis("seed").reset_index()
    points = points.melt(id_vars="seed", var_name="rung", value_name="gap")
    points["FLOPs"] = points["rung"].map(flops)
    points["seed"] = points["seed"].astype(str)
    nxt = next_rung(pd.Series(x))
    grid = np.linspace(x[0], nxt, GRID)
    fitted = pd.DataFrame(
        [
            {"seed": s, "x": g, "FLOPs": 10**g, "fitted": row.intercept + row.slope * g}
            for s, row in lines.iterrows()
            for g in grid
        ]
    )
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
    measured = fitted[fitted["x"] <= x[-1] + 1e-9]
    beyond = fitted[fitted["x"] >= x[-1] - 1e-9]
    sns.lineplot(
        data=measured, x="FLOPs", y="fitted", errorbar=t_errorbar, color="C0", ax=ax,
        label=f"fitted line, 95% t-band over {c.n_a} seeds",
    )  # fmt: skip
    sns.lineplot(
        data=beyond, x="FLOPs", y="fitted", errorbar=t_errorbar, color="C0", ax=ax,
        linestyle="--", alpha=0.6, err_kws={"alpha": 0.08}, label="extrapolation (not measured)",
    )  # fmt: skip
    sns.lineplot(
        data=points, x="FLOPs", y="gap", units="seed", estimator=None, color="0.6", lw=0.7,
        ax=ax, legend=False,
    )  # fmt: skip
    sns.scatterplot(data=points, x="FLOPs", y="gap", color="C1", s=22, ax=ax, label="seeds")
    m, lo, hi = ctx["next"]
    if math.isfinite(lo):
        ax.errorbar(
            [10**nxt], [m], yerr=[[m - lo], [hi - m]], fmt="D", mfc="white", color="C0",
            capsize=4, zorder=5,
        )  # fmt: skip
        ax.annotate("extrapolation", (10**nxt, hi), ha="center", va="bottom", fontsize=8)
    ax.axhline(0, color="0.3", lw=0.6)
    ax.set_xscale("log")
    top = ax.secondary_xaxis("top")  # the rungs by name, above their FLOPs
    top.set_xticks(list(flops), labels=[str(r) for r in flops.index], fontsize=7)
    top.minorticks_off()
    unit = loss_unit(study)
    ax.set_xlabel("training FLOPs per run (log scale)")
    ax.set_ylabel(f"gap {ctx['gap']} ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    which = "confirmation seeds" if check.confirmation else "seeds"
    title = f"Trend {claim.id}: gap {ctx['gap']} against training compute"
    key = (
        f"slope {c.diff:+.3g} {unit.split('/')[0]} {UNIT} "
        f"[{c.ci_lo:+.3g}, {c.ci_hi:+.3g}], n={c.n_a} {which}"
    )
    seeds = ", ".join(str(s) for s in ctx["seeds"])
    caption = (
        f"{title}. Dots: each of the {c.n_a} {which} ({seeds}) at each rung, a grey line "
        "joining one seed's rungs; solid line: the mean of the seeds' least-squares lines of "
        "the gap on log10 training FLOPs, band: its 95% t-interval over seeds (the interval "
        f"of the claim's slope test). Slope {c.diff:+.3g} {unit.split('/')[0]} {UNIT} (95% CI "
        f"[{c.ci_lo:+.3g}, {c.ci_hi:+.3g}]). Dashed, ending in the hollow diamond: the fitted "
        f"lines carried one rung spacing past {ctx['rungs'][-1]} to {10**nxt:.3g} FLOPs, an "
        f"EXTRAPOLATION, not a measurement: gap {m:+.3g} (95% t-interval [{lo:+.3g}, "
        f"{hi:+.3g}])."
        + (f" {ctx['lost']} seed(s) left out: a cell missing or diverged." if ctx["lost"] else "")
    )
    return save_figure(fig, out, f"trend_{claim.id}", title, key, caption, fontsize=9)


def trend_figures(study: StudyData, checks: list[ClaimCheck], out: Path) -> list[FigureFile]:
    """Every trend claim's figure the runs support."""
    figures = [trend_figure(study, ch, out) for ch in checks if ch.claim.expect in TREND]
    plt.close("all")
    return [f for f in figures if f is not None]
