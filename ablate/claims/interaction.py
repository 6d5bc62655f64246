"""Interaction claims: "the effect of A on the metric is smaller/larger/equal where B = b1 than
where B = b2", e.g. "Pre-LN shrinks the penalty of skipping warmup"::

    - id: pre-ln-shrinks-warmup-penalty
      expect: smaller                       # smaller | larger | equal
      a: {optim.warmup_ratio: 0.0}          # the effect is metric(a) - metric(b) ...
      b: {optim.warmup_ratio: 0.1}
      by: {model.norm_placement: [pre, post]}   # ... at pre, compared with it at post

Per seed ``s`` (every seed that trained all four cells and finished them finite)::

    d_s = (m(a, b1)_s - m(b, b1)_s) - (m(a, b2)_s - m(b, b2)_s)

a difference of paired differences. The test is the paired t-test of ``d_s`` against 0 (a
one-sample t on ``n - 1`` degrees of freedom), its 95% t-interval, TOST at ``±margin`` for
``equal``, and seeds needed as for any paired claim (``n`` counts seeds, each training the four
cells). ``smaller`` reproduces when the mean ``d`` is significantly below 0 (signed: a negative
effect that grows more negative is "smaller"), ``larger`` above 0, ``equal`` is an equivalence
claim on ``d``. The claim sits in the study's Holm family like every other claim.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from ablate.claims.comparisons import Arm, Comparison, compare, nothing_mask
from ablate.claims.spec import Claim
from ablate.names import axis_column, format_value

AS_PAIRED = {"smaller": "better", "larger": "worse", "equal": "equivalent"}
"""An interaction decides like a paired claim on ``d``: "smaller" wants ``d < 0`` as "better"
wants a lower loss, "equal" is an equivalence."""
TEST = "paired t of the per-seed difference of differences (TOST for equal)"


def cells(claim: Claim) -> list[dict[str, Any]]:
    """The four cells of an interaction, (a, b1), (b, b1), (a, b2), (b, b2), ``where``
    included."""
    ((axis, (v1, v2)),) = claim.by.items()
    return [
        {**claim.where, **arm, axis: v}
        for v in (v1, v2)
        for arm in (claim.a, claim.b)  # a then b at each value of the by axis
    ]


def select_runs(runs: pd.DataFrame, sel: dict[str, Any]) -> pd.DataFrame:
    """The rows of ``runs`` whose axes have the values of ``sel`` (none where an axis is
    missing)."""
    mask = pd.Series(True, index=runs.index)
    for key, val in sel.items():
        col = axis_column(key)
        mask &= runs[col] == val if col in runs else False
    return runs[mask]


def cells_nothing(
    runs: pd.DataFrame, sels: list[dict[str, Any]], where: dict[str, Any]
) -> list[tuple[str, int, int]]:
    """(cell, k, n) for each selection in ``sels`` with runs that learned nothing: ``k`` of
    its ``n`` completed runs (:mod:`ablate.data.baseline`); the cell named by its axes beyond
    ``where``."""
    out = []
    for sel in sels:
        done = select_runs(runs, sel)
        done = done[done["status"] == "completed"]
        k = int(nothing_mask(done).sum())
        if k:
            label = ", ".join(
                f"{key.split('.')[-1]}={format_value(v)}"
                for key, v in sel.items()
                if key not in where
            )
            out.append((label, k, len(done)))
    return out


def nothing_text(found: list[tuple[str, int, int]]) -> str:
    """``norm_placement=post learned nothing in 3/3 seeds; ...`` ("" when none)."""
    return "; ".join(f"{label} learned nothing in {k}/{n} seeds" for label, k, n in found)


def per_seed(runs: pd.DataFrame, claim: Claim, col: str) -> tuple[pd.DataFrame, int]:
    """(one row per seed with all four cells finished finite: the cells' values ``c0..c3`` in
    :func:`cells` order, the effects ``e1 = c0 - c1`` and ``e2 = c2 - c3``, and
    ``d = e1 - e2``; the number of seeds left out because a cell diverged)."""
    frames, lost = [], set()
    for i, sel in enumerate(cells(claim)):
        g = select_runs(runs, sel)
        lost |= set(g.loc[g["status"] == "diverged", "seed"])
        done = g[g["status"] == "completed"]
        vals = pd.to_numeric(done[col], errors="coerce") if col in done else pd.Series()
        frames.append(pd.Series(vals.to_numpy(), index=done["seed"].to_numpy(), name=f"c{i}"))
    table = pd.concat(frames, axis=1, join="inner") if frames else pd.DataFrame()
    table = table[np.isfinite(table.to_numpy(dtype=float)).all(axis=1)].sort_index()
    table["e1"] = table["c0"] - table["c1"]
    table["e2"] = table["c2"] - table["c3"]
    table["d"] = table["e1"] - table["e2"]
    return table, len(lost)


def effect_label(claim: Claim) -> str:
    """``warmup_ratio=0 vs 0.1`` (the effect whose size the claim compares)."""
    keys = list(claim.a)
    a = ", ".join(f"{k.split('.')[-1]}={format_value(claim.a[k])}" for k in keys)
    b = ", ".join(format_value(claim.b[k]) for k in keys)
    return f"{a} vs {b}"


def by_labels(claim: Claim) -> tuple[str, str]:
    ((axis, (v1, v2)),) = claim.by.items()
    name = axis.split(".")[-1]
    return f"{name}={format_value(v1)}", f"{name}={format_value(v2)}"


def interaction_comparison(runs: pd.DataFrame, claim: Claim, col: str, margin: float) -> Comparison:
    """The claim's test on ``runs`` (already under ``where``): the per-seed ``d`` against 0,
    paired by seed (a one-sample t), with each side's mean effect in ``context``."""
    table, lost = per_seed(runs, claim, col)
    seeds = [int(s) for s in table.index]
    l1, l2 = by_labels(claim)
    comp = compare(
        Arm(table["d"].tolist(), f"effect at {l1} − effect at {l2}", seeds, diverged=lost),
        Arm([0.0] * len(seeds), "0", seeds),
        margin=margin,
        key=("interaction", claim.id),
    )
    context = {
        "effect": effect_label(claim),
        "by": (l1, l2),
        "e1": float(table["e1"].mean()) if len(table) else math.nan,
        "e2": float(table["e2"].mean()) if len(table) else math.nan,
        "seeds": seeds,
        "nothing": cells_nothing(runs, cells(claim), claim.where),
    }
    return replace(comp, context=context)


def numbers_text(c: Comparison, unit: str, fmt_num, fmt_p) -> str:
    """The claim's numbers in words: each side's mean effect, the difference of differences
    with its CI, the tests and their Holm p."""
    ctx = c.context
    l1, l2 = ctx["by"]
    n = c.n_a
    lost = f"; {c.diverged_a} seed(s) left out: a cell diverged" if c.diverged_a else ""
    if ctx.get("nothing"):
        lost += f"; {nothing_text(ctx['nothing'])}"
    return (
        f"effect of {ctx['effect']}: {fmt_num(ctx['e1'])} {unit} at {l1}, "
        f"{fmt_num(ctx['e2'])} at {l2}; difference of differences {fmt_num(c.diff)} "
        f"(95% CI [{fmt_num(c.ci_lo)}, {fmt_num(c.ci_hi)}], {n} seeds, each training the four "
        f"cells; paired t {fmt_p(c.p)}, {c.correction} {fmt_p(c.p_adj)}; TOST ±{c.margin:g}: "
        f"{c.correction} {fmt_p(c.p_tost_adj, 'p')}){lost}"
    )
