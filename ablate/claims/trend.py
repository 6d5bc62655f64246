"""Trend claims: does the gap between two arms grow, shrink or stay flat as training compute
grows along a scale ladder (:mod:`ablate.study.ladder`)? ::

    - id: post-ln-penalty-grows
      expect: grows                       # grows | shrinks | flat
      a: {model.norm_placement: post}     # the gap is metric(a) - metric(b) at each rung ...
      b: {model.norm_placement: pre}
      margin: 0.01                        # nats per decade of training FLOPs (flat: required)
      # by: {axis: [v1, v2]}              # ... or an interaction's difference of differences

The gap of seed ``s`` at rung ``r`` is ``g[s, r] = m(a, r)_s - m(b, r)_s`` (both arms trained on
seed ``s``: paired), or with ``by:`` the interaction's difference of differences at that rung
(:mod:`ablate.claims.interaction`). The rung's compute is ``x[r] = log10`` of its training FLOPs
(each run's ``flops_per_token x steps x batch_size x seq_len``, the mean over the claim's runs
at the rung; evaluation left out). Per seed, the ordinary least-squares slope of ``g[s, .]`` on
``x`` is that seed's trend in nats per decade of compute. Two tests decide the claim, as every
claim (:mod:`ablate.claims.checks`; :func:`slope_tests`): the one-sample t of the seeds' slopes
against 0 (n - 1 degrees of freedom, its 95% t-interval; for ``flat`` TOST at ``±margin`` per
decade), and its exact counterpart, the sign-flip test of the slopes against 0 (under no trend
each seed's slope is symmetric about 0, so its sign is a fair coin; for ``flat`` two one-sided
sign-flip tests of the slopes against ``±margin``), which needs no normality and cannot go
below ``2/2^n``. Each sits in its test kind's Holm family over the study's claims. ``grows``
reproduces when the mean slope is significantly above 0 (the gap ``a - b`` rises with compute:
write the arm you expect to fall behind as ``a``), ``shrinks`` below 0, ``flat`` decides like
an equivalence (equivalent / different / different but within margin / inconclusive); a slope
equivalent to 0 contradicts grows and shrinks. Where only one test supports an outcome the
claim says which ("reproduces by t-test only").

**The gap at every rung, and every step.** A slope summarises the rungs; it does not say the
gap moved the same way at each of them (a gap flat over two rungs that jumps at the third has a
steep, tight slope). So the claim also reports the mean gap at every rung with its 95%
t-interval over seeds, and tests every *step*, the per-seed change ``g[s, r+1] - g[s, r]``
between consecutive rungs, by the one-sample t-test and the exact sign-flip test against 0,
each Holm-corrected over the trend's steps (:func:`step_tests`). ``grows`` and ``shrinks`` hold
only when every step moves in the claimed direction (Holm p below α; an intersection of the
steps, so requiring all of them never raises the claim's error rate above its slope test's).
Otherwise the outcome says where it does not (:mod:`ablate.claims.checks`): a step that moves
significantly the other way contradicts the trend, and where exactly one step moves the claimed
way and none after it moves back, the outcome is *a threshold, not a trend*, between those two
rungs; a step that moves neither way significantly leaves the trend inconclusive. The rungs'
runs that learned nothing (their loss is the unigram loss, :mod:`ablate.data.baseline`) are
named at their rung: a threshold there is a model that stopped learning, not a growing penalty.

Why per-seed slopes and not a mixed model (``statsmodels`` ``MixedLM``, random intercept and
slope per seed): every seed trains every cell at every rung, so the design is balanced and all
seeds share the same x. Then the mean of the per-seed OLS slopes *is* the mixed model's
fixed-effect slope (GLS and OLS coincide), and the one-sample t on the slopes is its exact
small-sample test; the mixed model would instead estimate two variance components by REML from
3-8 seeds (often on the boundary, with convergence warnings) and test with a Wald z that is
too liberal at that n. The slopes also reuse the paired machinery every claim has: the exact
sign-flip test, TOST and the seeds-needed power (:mod:`ablate.claims.power`, one number per
seed). The price: a seed that misses a cell at some rung (a diverged run) is left out whole,
and counted, rather than contributing its other rungs.

The report's extrapolation (:func:`extrapolate`) is each seed's fitted line carried one rung
spacing (the mean step in ``x``) past the largest rung, with the t-interval over seeds: a
prediction from the fitted line, never a measurement, and labelled so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from ablate.claims.comparisons import Arm, Comparison, compare
from ablate.claims.interaction import cells, cells_nothing, select_runs
from ablate.claims.labels import CONTRADICTED, INCONCLUSIVE, NOT_A_TREND, REPRODUCES, THRESHOLD
from ablate.claims.spec import RUNG, TREND, TREND_AS_PAIRED, Claim
from ablate.claims.stats import exact_floor, holm, mean_ci
from ablate.names import format_value

AS_PAIRED = TREND_AS_PAIRED
KEY = "trend"
"""``Comparison.key[0]`` of a trend's test."""
TEST = "one-sample t of the per-seed slopes of the gap on log10 training FLOPs"
UNIT = "per decade of training FLOPs"
WITH, AGAINST, UNCLEAR = "with", "against", "unclear"
"""How a step moves against the claimed direction (:func:`step_moves`)."""

__all__ = [
    "AS_PAIRED",
    "TREND",
    "slope_tests",
    "trend_comparison",
    "train_flops",
]


def train_flops(runs: pd.DataFrame) -> pd.Series:
    """Training FLOPs of each run: ``flops_per_token x steps x batch_size x seq_len`` (the
    model's own accounting, as its ``summary.json`` records it); NaN where unknown."""
    cols = ("flops_per_token", "steps", "cfg.batch_size", "cfg.seq_len")
    if not all(c in runs for c in cols):
        return pd.Series(np.nan, index=runs.index)
    out = pd.Series(1.0, index=runs.index)
    for c in cols:
        out = out * pd.to_numeric(runs[c], errors="coerce")
    return out


def rung_order(runs: pd.DataFrame) -> list[Any]:
    """The rungs of ``runs`` in order of their mean training FLOPs (unknown last)."""
    flops = train_flops(runs).groupby(runs[RUNG].to_numpy()).mean()
    return list(flops.sort_values(na_position="last").index)


def _signed_cells(claim: Claim) -> list[tuple[float, dict[str, Any]]]:
    """The cells whose signed sum is the gap: ``a - b``, or an interaction's
    ``(a, b1) - (b, b1) - (a, b2) + (b, b2)``."""
    if claim.by:
        return list(zip((1.0, -1.0, -1.0, 1.0), cells(claim), strict=True))
    return [(1.0, {**claim.where, **claim.a}), (-1.0, {**claim.where, **claim.b})]


def rung_gaps(runs: pd.DataFrame, claim: Claim, col: str) -> tuple[pd.DataFrame, pd.Series, int]:
    """(one row per seed that finished every cell finite at every rung, one column per rung
    in order of compute: the gap; ``x``: log10 training FLOPs per rung, same order; the number
    of seeds left out because a cell is missing or not finite at some rung)."""
    if RUNG not in runs:
        return pd.DataFrame(), pd.Series(dtype=float), 0
    flops = train_flops(runs)
    gaps: dict[str, pd.Series] = {}
    x: dict[str, float] = {}
    seen: set = set()
    for rung in dict.fromkeys(runs[RUNG].dropna()):
        at = runs[runs[RUNG] == rung]
        total, used = None, []
        for sign, sel in _signed_cells(claim):
            g = select_runs(at, sel)
            seen |= set(g["seed"])
            done = g[g["status"] == "completed"]
            vals = pd.to_numeric(done[col], errors="coerce") if col in done else pd.Series()
            s = pd.Series(sign * vals.to_numpy(dtype=float), index=done["seed"].to_numpy())
            total = s if total is None else total.add(s)  # NaN where a seed lacks a cell
            used.append(flops[done.index])
        fl = pd.concat(used)
        fl = fl[np.isfinite(fl)]
        if total is not None and len(fl):
            gaps[rung] = total
            x[rung] = math.log10(float(fl.mean()))
    xs = pd.Series(x, dtype=float).sort_values()
    table = pd.concat([gaps[r] for r in xs.index], axis=1, keys=list(xs.index)) if x else None
    if table is None:
        return pd.DataFrame(), xs, len(seen)
    table = table[np.isfinite(table.to_numpy(dtype=float)).all(axis=1)].sort_index()
    return table, xs, len(seen - set(table.index))


def seed_lines(table: pd.DataFrame, x: pd.Series) -> pd.DataFrame:
    """Per seed (rows of ``table``): the OLS ``slope`` of its gaps on ``x`` (per decade) and
    the ``intercept`` at ``x = 0``: ``slope = sum((x - mean x)(g - mean g)) / sum((x -
    mean x)^2)``."""
    xv = x.to_numpy(dtype=float)
    g = table.to_numpy(dtype=float)
    dx = xv - xv.mean()
    slope = (g - g.mean(axis=1, keepdims=True)) @ dx / float(dx @ dx)
    intercept = g.mean(axis=1) - slope * xv.mean()
    return pd.DataFrame({"slope": slope, "intercept": intercept}, index=table.index)


def rung_gaps_ci(table: pd.DataFrame) -> list[tuple[float, float, float]]:
    """(mean, lo, hi) of the gap at each rung (column of ``table``): the 95% t-interval over
    the seeds."""
    return [mean_ci(table[r]) for r in table.columns]


def step_tests(table: pd.DataFrame) -> list[dict[str, Any]]:
    """One test per pair of consecutive rungs (columns of ``table``, in order of compute): the
    per-seed change of the gap ``d_s = g[s, r+1] - g[s, r]``, its mean with the 95% t-interval,
    the one-sample t-test and the exact sign-flip test of ``d`` against 0, and each test's p
    Holm-corrected over the trend's steps (``p_holm``, ``p_flip_holm``)."""
    rungs = list(table.columns)
    steps = []
    for lo, hi in zip(rungs, rungs[1:], strict=False):
        d = (table[hi] - table[lo]).tolist()
        c = compare(Arm(d, "step", list(table.index)), Arm([0.0] * len(d), "0", list(table.index)))
        steps.append(
            {"from": lo, "to": hi, "diff": c.diff, "lo": c.ci_lo, "hi": c.ci_hi, "n": c.n_a}
            | {"p": c.p, "p_flip": c.p_flip}
        )
    for name in ("p", "p_flip"):
        for step, adj in zip(steps, holm([st[name] for st in steps]), strict=True):
            step[f"{name}_holm"] = adj
    return steps


def step_seeds_needed(alpha: float, steps: int) -> int:
    """The fewest seeds whose two-sided sign-flip test of one step can go below its first Holm
    level over the trend's ``steps``: ``exact_floor(n) < alpha / steps``."""
    n = 2
    while exact_floor(n) >= alpha / steps:
        n += 1
    return n


def step_moves(steps: list[dict[str, Any]], expect: str, alpha: float, exact: bool) -> list[str]:
    """Each step against the claim (``grows``: up, ``shrinks``: down): :data:`WITH` (its Holm p
    below ``alpha`` and the change the claimed way), :data:`AGAINST` (below ``alpha``, the
    other way) or :data:`UNCLEAR`; by the sign-flip test when ``exact``, else the t-test."""
    sign = 1.0 if expect == "grows" else -1.0
    out = []
    for st in steps:
        p = st["p_flip_holm" if exact else "p_holm"]
        if not (math.isfinite(p) and p < alpha):
            out.append(UNCLEAR)
        else:
            out.append(WITH if sign * st["diff"] > 0 else AGAINST)
    return out


def rung_nothing(runs: pd.DataFrame, claim: Claim) -> list[tuple[Any, str, int, int]]:
    """(rung, cell, k, n) for each rung and cell of the claim with runs that learned nothing:
    ``k`` of its ``n`` completed runs (:mod:`ablate.data.baseline`)."""
    sels = [sel for _, sel in _signed_cells(claim)]
    return [
        (rung, *found)
        for rung in (rung_order(runs) if RUNG in runs else [])
        for found in cells_nothing(runs[runs[RUNG] == rung], sels, claim.where)
    ]


def next_rung(x: pd.Series) -> float:
    """log10 FLOPs one rung up: one mean rung spacing past the largest rung."""
    xv = x.to_numpy(dtype=float)
    return float(xv[-1] + (xv[-1] - xv[0]) / (len(xv) - 1))


def extrapolate(lines: pd.DataFrame, at: float) -> tuple[float, float, float]:
    """(mean, lo, hi): the seeds' fitted gaps at log10 FLOPs ``at`` with the 95% t-interval
    over seeds: an extrapolation of the fitted lines, not a measurement."""
    return mean_ci(lines["intercept"] + lines["slope"] * at)


def gap_label(claim: Claim) -> str:
    """``norm_placement=post − pre`` (or an interaction's difference of differences)."""
    if claim.by:
        ((axis, (v1, v2)),) = claim.by.items()
        name = axis.split(".")[-1]
        arms = _arms(claim)
        return f"({arms}) at {name}={format_value(v1)} − at {format_value(v2)}"
    return _arms(claim)


def _arms(claim: Claim) -> str:
    keys = list(claim.a)
    a = ", ".join(f"{k.split('.')[-1]}={format_value(claim.a[k])}" for k in keys)
    b = ", ".join(format_value(claim.b[k]) for k in keys)
    return f"{a} − {b}"


def slope_tests(
    slopes: Sequence[float], seeds: Sequence[int], margin: float, label: str, key: tuple = ()
) -> Comparison:
    """A trend's two tests on its per-seed ``slopes`` (module doc): the one-sample t against 0
    with its 95% t-interval and TOST at ``±margin``, and the exact sign-flip test of the slopes
    against 0 with two one-sided sign-flip tests at ``±margin`` (``p_flip``, ``p_flip_tost``).
    Written as the slopes paired with zeros, so a slope is a seed's difference and every
    claim's machinery (Holm per test kind, the outcome by each test, seeds needed) applies."""
    comp = compare(
        Arm(list(slopes), label, seeds),
        Arm([0.0] * len(slopes), "0", seeds),
        margin=margin,
        key=key,
    )
    return replace(comp, test="one-sample t") if comp.paired else comp


def trend_comparison(runs: pd.DataFrame, claim: Claim, col: str, margin: float) -> Comparison:
    """The claim's tests on ``runs`` (already under ``where``): :func:`slope_tests` of the
    per-seed slopes, with the rungs, each seed's line and the extrapolation in ``context``."""
    table, x, lost = rung_gaps(runs, claim, col)
    ok = len(x) >= 3 and len(table) > 0
    lines = seed_lines(table, x) if ok else pd.DataFrame({"slope": [], "intercept": []})
    seeds = [int(s) for s in lines.index]
    label = f"slope of {gap_label(claim)} per decade"
    comp = slope_tests(lines["slope"].tolist(), seeds, margin, label, key=(KEY, claim.id))
    nxt = next_rung(x) if ok else math.nan
    context = {
        "gap": gap_label(claim),
        "rungs": list(x.index),
        "x": [float(v) for v in x],
        "gap_means": [float(table[r].mean()) for r in x.index] if ok else [],
        "gap_ci": rung_gaps_ci(table[list(x.index)]) if ok else [],
        "steps": step_tests(table[list(x.index)]) if ok and len(table) else [],
        "nothing": rung_nothing(runs, claim),
        "seeds": seeds,
        "lost": lost,
        "lines": lines,
        "table": table,
        "next_x": nxt,
        "next": extrapolate(lines, nxt) if ok and len(lines) else (math.nan,) * 3,
    }
    return replace(comp, context=context)


def _ci(m: float, lo: float, hi: float, fmt_num) -> str:
    return f"{fmt_num(m)} [{fmt_num(lo)}, {fmt_num(hi)}]"


def rungs_text(c: Comparison, fmt_num) -> str:
    """``small -0.0107 [-0.0127, -0.0086], medium ...``: the mean gap at each rung with its 95%
    t-interval over the seeds."""
    ctx = c.context
    return ", ".join(
        f"{r} {_ci(*ci, fmt_num)}" for r, ci in zip(ctx["rungs"], ctx["gap_ci"], strict=True)
    )


def steps_text(c: Comparison, fmt_num, fmt_p) -> str:
    """Each step of the gap between consecutive rungs: its mean change, 95% CI and both tests'
    Holm p within the trend."""
    return "; ".join(
        f"{st['from']} → {st['to']} {_ci(st['diff'], st['lo'], st['hi'], fmt_num)} (t-test "
        f"Holm {fmt_p(st['p_holm'])}, exact sign-flip Holm {fmt_p(st['p_flip_holm'])})"
        for st in c.context.get("steps", [])
    )


def nothing_text(c: Comparison) -> str:
    """``at large, norm_placement=post learned nothing in 7/7 seeds`` (the rungs' runs at the
    unigram loss); "" when none."""
    return "; ".join(
        f"at {rung}, {label} learned nothing in {k}/{n} seeds"
        for rung, label, k, n in c.context.get("nothing", [])
    )


def moves_text(c: Comparison, expect: str, moves: list[str]) -> str:
    """Where the gap moves as claimed and where not, in words: ``the gap ... shrinks from small
    to medium (-0.0625), grows from medium to large (+1.55)`` (the mean change per step)."""
    claimed = "grows" if expect == "grows" else "shrinks"
    other = "shrinks" if expect == "grows" else "grows"
    parts = []
    for st, move in zip(c.context["steps"], moves, strict=True):
        verb = {WITH: claimed, AGAINST: other, UNCLEAR: "moves neither way significantly"}[move]
        parts.append(f"{verb} from {st['from']} to {st['to']} ({st['diff']:+.3g})")
    return f"the gap {c.context['gap']} " + ", ".join(parts)


def numbers_text(c: Comparison, unit: str, fmt_num, fmt_p) -> str:
    """The claim's numbers in words: the slope per decade with its CI and tests, the mean gap
    at each rung with its CI, each step's change with its tests (Holm within the trend), the
    rungs' runs that learned nothing, and the extrapolated gap one rung up, labelled as an
    extrapolation."""
    ctx = c.context
    if len(ctx.get("x", [])) < 3:
        return f"fewer than 3 rungs with finished runs of both arms ({len(ctx.get('x', []))})"
    flops = ", ".join(f"{r} {10**x:.3g}" for r, x in zip(ctx["rungs"], ctx["x"], strict=True))
    m, lo, hi = ctx["next"]
    lost = f"; {ctx['lost']} seed(s) left out: a cell missing or diverged" if ctx["lost"] else ""
    nothing = f"; {nothing_text(c)}" if ctx.get("nothing") else ""
    return (
        f"gap {ctx['gap']}: slope {fmt_num(c.diff)} {unit} {UNIT} (95% CI "
        f"[{fmt_num(c.ci_lo)}, {fmt_num(c.ci_hi)}], {c.n_a} seeds, each training every cell at "
        f"{len(ctx['x'])} rungs; {TEST} {fmt_p(c.p)}, {c.correction} {fmt_p(c.p_adj)}; TOST "
        f"±{c.margin:g} per decade: {c.correction} {fmt_p(c.p_tost_adj, 'p')}); mean gap per "
        f"rung (95% CI): {rungs_text(c, fmt_num)}; the gap's step between rungs (95% CI; "
        f"Holm over the {len(ctx['steps'])} steps): {steps_text(c, fmt_num, fmt_p)}"
        f"{nothing}; training FLOPs per rung: {flops}; EXTRAPOLATION (the fitted lines one "
        f"rung spacing past {ctx['rungs'][-1]}, not measured): {fmt_num(m)} [{fmt_num(lo)}, "
        f"{fmt_num(hi)}] at {10 ** ctx['next_x']:.3g} FLOPs{lost}"
    )


def steps_outcome(
    expect: str, c: Comparison, by_slope: tuple[str, str], alpha: float, exact: bool
) -> tuple[str, str]:
    """A ``grows``/``shrinks`` claim's outcome by one kind of test, from its slope's outcome
    and its steps between rungs (:func:`step_moves`): every step the claimed way: the slope's
    outcome; a step the other way: contradicted, or where exactly one step moves the claimed
    way and none after it moves back, a threshold (:data:`~ablate.claims.labels.THRESHOLD`),
    or where several do, not a trend; a step that moves neither way: a reproducing slope is
    inconclusive. The why says which step does what."""
    steps = c.context.get("steps") or []
    if not steps or by_slope[0] == CONTRADICTED:
        return by_slope
    moves = step_moves(steps, expect, alpha, exact)
    if all(m == WITH for m in moves):
        return by_slope
    words = f"{moves_text(c, expect, moves)} (each step Holm-corrected over the trend's steps)"
    floor = exact_floor(c.n_a) * len(steps)  # every step at the floor: Holm's adjusted p
    if exact and UNCLEAR in moves and floor >= alpha:
        words += (
            f"; {c.n_a} seeds cannot bring a step's exact Holm p below {floor:.2g}: "
            f"{step_seeds_needed(alpha, len(steps))} seeds can"
        )
    nothing = nothing_text(c)
    words += f"; {nothing}" if nothing else ""
    withs = [i for i, m in enumerate(moves) if m == WITH]
    if AGAINST in moves:
        if len(withs) == 1 and AGAINST not in moves[withs[0] :]:
            st = steps[withs[0]]
            return THRESHOLD, f"a threshold between {st['from']} and {st['to']}: {words}"
        if withs:
            return NOT_A_TREND, f"it does not move one way at every step: {words}"
        return CONTRADICTED, words
    if by_slope[0] == REPRODUCES:
        return INCONCLUSIVE, f"the slope is significant, but not every step: {words}"
    return by_slope
