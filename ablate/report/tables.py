"""The report's tables as DataFrames of formatted strings: per-variant quality and cost, against
a reference value, length extrapolation, the comparisons, and every run.

Cells read ``mean ± std [95% t-CI]`` over seeds (:func:`fmt_ci`); diverged runs are counted in
their own column, never averaged. :mod:`ablate.report.blocks` puts the tables in the report.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ablate.claims.comparisons import Comparison
from ablate.claims.stats import one_sample, summarize
from ablate.claims.verdicts import Verdict
from ablate.data.baseline import COLUMN as NOTHING_COLUMN
from ablate.data.baseline import LEARNED_NOTHING, UNIGRAM_COLUMN
from ablate.names import display_names, format_value, length_multiple, variant_order
from ablate.report.figure_data import NO_POSITIONS, past_max_len
from ablate.results import StudyData
from ablate.store import UNFINISHED_STATES

QUALITY = [  # (column, header, decimals); perplexity and bits are the loss restated: results.csv
    ("final_val_loss", "final val loss", 4),
    ("best_val_loss", "best val loss", 4),
    ("final_train_loss", "final train loss", 4),
    ("train_val_gap", "val − train", 4),
]
COST = ["steps", "wall_time_s", "tokens_per_s", "params", "params_non_embedding"]


# --- formatting --------------------------------------------------------------------------------


def _isnum(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def fmt_ci(mean: float, std: float, lo: float, hi: float, n: int, d: int = 4) -> str:
    """``'1.2345 ± 0.0100 [1.2097, 1.2593]'``; one seed: ``'1.2345 (1 seed)'``; none: ``'—'``."""
    if n == 0 or not _isnum(mean):
        return "—"
    if n == 1 or not _isnum(lo):
        return f"{mean:.{d}f} (1 seed)"
    return f"{mean:.{d}f} ± {std:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]"


def fmt_seconds(s: float) -> str:
    """Wall time in a table cell: ``'42.0 s'``, ``'12.5 min'``, ``'3.20 h'``."""
    if not _isnum(s):
        return "—"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


def fmt_count(x: float) -> str:
    """``1234567 -> '1.23M'``."""
    if not _isnum(x):
        return "—"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.0f}"


def fmt_stat(r: pd.Series, col: str, f) -> str:
    """``'mean ± std [lo, hi]'`` of summary column ``col`` with formatter ``f``; the interval
    is left out when it is empty (one seed, or every seed the same, e.g. steps). Costs cannot
    be negative, so the t-interval's lower end is cut at 0."""
    mean, std, lo, hi, n = (r[f"{col}_{k}"] for k in ("mean", "std", "lo", "hi", "n"))
    lo = max(lo, 0.0) if _isnum(lo) else lo
    if n == 0 or not _isnum(mean):
        return "—"
    if n == 1 or not _isnum(std):
        return f(mean)
    if std == 0:
        return f"{f(mean)} ± 0"
    return f"{f(mean)} ± {f(std)} [{f(lo)}, {f(hi)}]"


def where_text(c: Comparison, study: StudyData) -> str:
    if not c.context:
        return ""
    names = display_names(study.axes)
    return "at " + ", ".join(f"{names[k]}={format_value(v)}" for k, v in c.context.items())


# --- tables ------------------------------------------------------------------------------------


def _status_cells(row: pd.Series) -> tuple[str, str]:
    """('diverged' cell, 'other' cell): '2/3 (steps 40, 55)' and '1 running, 1 failed'."""
    finished = int(row["completed"] + row["diverged"])
    div = "0" if not row["diverged"] else f"{int(row['diverged'])}/{finished}"
    steps = row.get("diverged_steps") or []
    if steps:
        div += f" (step {', '.join(str(s) for s in steps)})"
    other = ", ".join(f"{int(row[s])} {s}" for s in UNFINISHED_STATES if row.get(s, 0))
    return div, other or "—"


def variant_tables(study: StudyData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(quality table, cost table), one row per variant, formatted as strings."""
    runs = study.runs
    names = display_names(study.axes)
    axes = study.varying_axes
    quality = [(c, h, d) for c, h, d in QUALITY if c in runs and runs[c].notna().any()]
    cost = [c for c in COST if c in runs]
    summ = summarize(runs, ["variant", *axes], [c for c, _, _ in quality] + cost)
    order = {v: i for i, v in enumerate(variant_order(runs))}
    summ = summ.sort_values("variant", key=lambda s: s.map(order)).reset_index(drop=True)
    q_rows, c_rows = [], []
    # an axis whose values are the variant labels (a study's ``variant`` axis) repeats them
    axes = [a for a in axes if not summ[a].map(format_value).equals(summ["variant"])]
    for _, r in summ.iterrows():
        ident = {"variant": r["variant"], **{names[a]: format_value(r[a]) for a in axes}}
        div, other = _status_cells(r)
        n = int(r["completed"])
        q = {**ident, "seeds": int(r["total"]), "diverged": div, "not finished": other, "n": n}
        for c, h, d in quality:
            cell = fmt_ci(r[f"{c}_mean"], r[f"{c}_std"], r[f"{c}_lo"], r[f"{c}_hi"], r[f"{c}_n"], d)
            if r[f"{c}_n"] == 1 and r["diverged"]:
                cell = cell.replace("(1 seed)", "(1 finite seed only)")
            elif r[f"{c}_n"] and r["diverged"]:
                cell += f" (mean of {int(r[f'{c}_n'])} finite)"
            elif r[f"{c}_n"] and r[f"{c}_n"] != n:
                cell += f" (n={int(r[f'{c}_n'])})"
            elif not r[f"{c}_n"] and r["diverged"] and not r["completed"]:
                cell = "diverged"
            q[h] = cell
        q_rows.append(q)
        cr = {**ident, "n": n}
        if "steps" in cost:
            cr["steps"] = fmt_stat(r, "steps", lambda v: f"{v:.0f}")
        if "wall_time_s" in cost:
            cr["wall time"] = fmt_stat(r, "wall_time_s", fmt_seconds)
        if "tokens_per_s" in cost:
            cr["tokens/s"] = fmt_stat(r, "tokens_per_s", lambda v: f"{v:,.0f}")
        for c, h in (("params", "params"), ("params_non_embedding", "non-embedding params")):
            if c in cost:
                cr[h] = fmt_count(r[f"{c}_mean"]) if r[f"{c}_n"] else "—"
        c_rows.append(cr)
    return pd.DataFrame(q_rows), pd.DataFrame(c_rows)


def reference_table(study: StudyData) -> pd.DataFrame:
    """One row per variant: its completed seeds' final val loss against ``study.reference``."""
    ref = study.reference
    if ref is None:
        raise ValueError(f"study {study.name!r} has no reference value")
    runs = study.runs
    done = runs[runs["status"] == "completed"]
    rows = []
    for variant in variant_order(runs):
        vals = done.loc[done["variant"] == variant, "final_val_loss"].tolist()
        r = one_sample(vals, ref.value)
        below = sum(1 for v in vals if v <= ref.value)
        if r.n < 2:
            says = "too few seeds"
        elif r.hi < 0:
            says = "below the reference"
        elif r.lo > 0:
            says = "above the reference"
        else:
            says = "not distinguishable"
        rows.append(
            {
                "variant": variant,
                "n": r.n,
                "final val loss": f"{r.mean:.4f}" if r.n else "—",
                "reference": f"{ref.value:g}",
                "difference [95% CI]": (
                    f"{r.diff:+.4f} [{r.lo:+.4f}, {r.hi:+.4f}]" if r.n >= 2 else "—"
                ),
                "p": f"{r.p:.3g}" if _isnum(r.p) else "—",
                "seeds at or below": f"{below}/{r.n}",
                "verdict": says,
            }
        )
    return pd.DataFrame(rows)


def length_table(study: StudyData) -> pd.DataFrame | None:
    """Rows = variant, columns = evaluation length multiples: mean [95% t-CI] (n)."""
    cols = study.length_columns
    if not cols:
        return None
    runs = study.runs
    summ = summarize(runs, ["variant"], cols)
    order = {v: i for i, v in enumerate(variant_order(runs))}
    summ = summ.sort_values("variant", key=lambda s: s.map(order))
    rows = []
    for _, r in summ.iterrows():
        grp = runs[(runs["variant"] == r["variant"]) & (runs["status"] == "completed")]
        row = {"variant": r["variant"], "n": int(r["completed"])}
        for c in cols:
            label = f"{length_multiple(c):g}×"
            if r[f"{c}_n"]:
                row[label] = fmt_ci(
                    r[f"{c}_mean"], r[f"{c}_std"], r[f"{c}_lo"], r[f"{c}_hi"], r[f"{c}_n"]
                )
            elif not len(grp):
                row[label] = "—"
            elif runs[c].notna().any() and past_max_len(grp, length_multiple(c)).all():
                row[label] = f"n/a ({NO_POSITIONS})"
            else:
                row[label] = "n/a (not evaluated at this length)"
        rows.append(row)
    return pd.DataFrame(rows)


def comparisons_table(comps: list[tuple[Comparison, Verdict]], study: StudyData) -> pd.DataFrame:
    names = display_names(study.axes)
    rows = []
    for c, v in comps:
        rows.append(
            {
                "axis": names.get(c.axis, c.axis),
                "held fixed": ", ".join(
                    f"{names[k]}={format_value(x)}" for k, x in c.context.items()
                )
                or "—",
                "a vs b": f"{c.label_a} vs {c.label_b}",
                "n (diverged)": f"{c.n_a} ({c.diverged_a}) vs {c.n_b} ({c.diverged_b})",
                "mean a": f"{c.mean_a:.4f}" if _isnum(c.mean_a) else "—",
                "mean b": f"{c.mean_b:.4f}" if _isnum(c.mean_b) else "—",
                "a − b": f"{c.diff:+.4f}" if _isnum(c.diff) else "—",
                "95% t-CI": f"[{c.ci_lo:+.4f}, {c.ci_hi:+.4f}]" if _isnum(c.ci_lo) else "—",
                # before the test details: the column a reader looks for, on any page width
                "verdict": v.kind.replace("_", " ")
                + (f" (≈{v.seeds_needed} seeds)" if v.seeds_needed else ""),
                "test (df)": f"{c.test} ({c.df:.3g})" if _isnum(c.df) else c.test or "—",
                "p": f"{c.p:.3g}" if _isnum(c.p) else "—",
                f"{c.correction} p": f"{c.p_adj:.3g}" if _isnum(c.p_adj) else "—",
                f"TOST ±{c.margin:g} {c.correction} p": (
                    f"{c.p_tost_adj:.3g}" if _isnum(c.p_tost_adj) else "—"
                ),
                "bootstrap CI (secondary)": (
                    f"[{c.boot_lo:+.4f}, {c.boot_hi:+.4f}]" if _isnum(c.boot_lo) else "—"
                ),
            }
        )
    return pd.DataFrame(rows)


def runs_table(study: StudyData) -> pd.DataFrame:
    rows = []
    for _, r in study.runs.iterrows():
        note = ""
        if r["status"] == "diverged" and _isnum(r.get("diverged_step")):
            note = f"diverged at step {int(r['diverged_step'])}"
        elif isinstance(r.get("error"), str) and r["error"]:
            note = r["error"][:120]
        elif r.get("stopped_early") is True or r.get("stopped_early") == 1.0:
            note = "stopped early"
        nothing = r.get(NOTHING_COLUMN) == 1
        if nothing:
            note = f"at the unigram loss {r[UNIGRAM_COLUMN]:.4f}" + (f"; {note}" if note else "")
        rows.append(
            {
                "run": r["run_id"],
                "variant": r["variant"],
                "seed": format_value(r["seed"]),
                "status": LEARNED_NOTHING if nothing else r["status"],
                "final val loss": f"{r['final_val_loss']:.4f}"
                if _isnum(r.get("final_val_loss"))
                else "—",
                "steps": f"{r['steps']:.0f}" if _isnum(r.get("steps")) else "—",
                "wall time": fmt_seconds(r.get("wall_time_s")),
                "note": note,
            }
        )
    return pd.DataFrame(rows)
