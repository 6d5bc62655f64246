"""What a report shows of a scale ladder (:mod:`ablate.study.ladder`):

* :func:`draw_trend`, the left panel of a trend claim's figure (``expect: grows | shrinks |
  flat``; :mod:`ablate.report.claim_figure` puts its slopes beside it): the gap against
  training compute (log x), every seed's gap at every rung (dots, a thin line per seed), the
  fitted line (the mean of the seeds' least-squares lines) with its band (the 95% t-interval
  over seeds of the fitted lines, the interval the claim's slope test uses), and the fitted
  lines carried one rung spacing past the largest rung, dashed, ending in a hollow diamond
  labelled as an extrapolation. Drawn from the runs that decide the claim (its confirmation
  seeds when it has them), with the numbers the claim engine computed
  (:mod:`ablate.claims.trend`).
* :func:`rungs_text`: every rung of the runs (parameters, tokens, training FLOPs) for the
  report's scale line.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from ablate.claims.checks import ClaimCheck  # noqa: E402
from ablate.claims.spec import RUNG  # noqa: E402
from ablate.claims.stats import t_errorbar  # noqa: E402
from ablate.claims.trend import next_rung, train_flops  # noqa: E402
from ablate.names import loss_unit  # noqa: E402
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


def draw_trend(ax, study: StudyData, check: ClaimCheck) -> str | None:
    """One trend claim's gap against compute on ``ax`` (module doc); its caption sentence, or
    None when fewer than 3 rungs or 2 seeds leave nothing to draw."""
    c = check.comparison
    ctx = c.context if c is not None else {}
    if c is None or len(ctx.get("x", [])) < 3 or c.n_a < 2 or "lines" not in ctx:
        return None
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
    m, lo, hi = ctx.get("next", (math.nan,) * 3)
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
    ax.set_xlabel("training FLOPs per run (log scale)")
    ax.set_ylabel(f"gap {ctx['gap']} ({loss_unit(study)})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    lost = ctx.get("lost")
    lost = f" {lost} seed(s) left out: a cell missing or diverged." if lost else ""
    return (
        f"Left: the gap {ctx['gap']} of each seed at each rung (dots, a grey line per seed); "
        "line and band: the mean of the seeds' least-squares lines on log10 training FLOPs "
        "and its 95% t-interval. Dashed, to the hollow diamond: those lines carried one rung "
        f"past {ctx['rungs'][-1]}, an EXTRAPOLATION, not a measurement.{lost}"
    )
