"""Two groups of runs on one metric: a :class:`Comparison` with its paired or Welch test,
TOST and bootstrap CI (:func:`compare`), adjusted over a family (:func:`adjust`: Holm for the
confirmatory family of a study's claims, Benjamini–Hochberg for the exploratory axis
comparisons), and every one-axis comparison of a study's runs table (:func:`axis_comparisons`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from ablate.claims.stats import (
    SEED,
    bh,
    bootstrap_diff_ci,
    finite,
    holm,
    paired_t,
    sign_flip_p,
    sign_flip_tost,
    tost,
    welch_diff,
)
from ablate.data.baseline import COLUMN as NOTHING_COLUMN
from ablate.names import format_value, value_order

FINISHED = ("completed", "diverged")
PAIRED = "paired by seed: same initialisation and the same token stream"
SEEDS_DIFFER = "Welch: the two sides were not trained on the same seeds"
STREAMS_DIFFER = (
    "Welch: the batch size differs under data.order: rows, so a seed's token order differs "
    "(data.order: tokens keeps one stream per seed at every batch size)"
)


@dataclass(frozen=True)
class Comparison:
    """Two groups of runs (e.g. ``pre`` vs ``post``) on one metric, with diverged runs counted."""

    label_a: str
    label_b: str
    a: tuple[float, ...]
    """Finite metric values of the finished, non-diverged runs of group a."""
    b: tuple[float, ...]
    diverged_a: int = 0
    diverged_b: int = 0
    diff: float = math.nan
    """mean(a) - mean(b) (paired: mean of the per-seed differences, the same number)."""
    ci_lo: float = math.nan
    """95% t-interval of the difference (paired or Welch–Satterthwaite): the headline CI."""
    ci_hi: float = math.nan
    t: float = math.nan
    df: float = math.nan
    p: float = math.nan
    axis: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    """The other axes, held fixed, for an axis comparison."""
    test: str = ""
    """``paired t`` or ``Welch t``."""
    sd: float = math.nan
    margin: float = 0.01
    """Equivalence margin (± this, in the metric's unit)."""
    p_tost: float = math.nan
    p_adj: float = math.nan
    """p adjusted over its family (set by :func:`adjust`; ``correction`` says how)."""
    p_tost_adj: float = math.nan
    family: int = 1
    """How many comparisons the correction ran over."""
    correction: str = "Holm"
    """``Holm`` (family-wise error: the claims) or ``BH`` (false discovery rate: the
    exploratory axis comparisons)."""
    boot_lo: float = math.nan
    """Percentile bootstrap CI (secondary, labelled as such)."""
    boot_hi: float = math.nan
    key: tuple = ()
    """Identity of the two groups (their run ids), so one comparison is counted once."""
    pairing: str = ""
    """Why the test is paired or not: :data:`PAIRED`, :data:`SEEDS_DIFFER` or
    :data:`STREAMS_DIFFER`."""
    p_flip: float = math.nan
    """The exact sign-flip (permutation) p of the per-seed differences (paired and one-sample
    tests only; NaN for Welch): the t-test's check that needs no normality."""
    p_flip_tost: float = math.nan
    """Equivalence within ±margin by two one-sided sign-flip tests."""
    p_flip_adj: float = math.nan
    p_flip_tost_adj: float = math.nan
    exact: str = ""
    """The exact test in ``p_flip``: ``sign-flip`` (paired and one-sample designs) or
    ``permutation`` (two-sample, filled in for claims); "" when there is none."""
    nothing_a: int = 0
    """Runs of a among its values that learned nothing (their loss is the unigram loss:
    :mod:`ablate.data.baseline`): counted in, and named by the verdict."""
    nothing_b: int = 0

    @property
    def n_a(self) -> int:
        return len(self.a)

    @property
    def n_b(self) -> int:
        return len(self.b)

    @property
    def total_a(self) -> int:
        return self.n_a + self.diverged_a

    @property
    def total_b(self) -> int:
        return self.n_b + self.diverged_b

    @property
    def mean_a(self) -> float:
        return float(np.mean(self.a)) if self.a else math.nan

    @property
    def mean_b(self) -> float:
        return float(np.mean(self.b)) if self.b else math.nan

    @property
    def paired(self) -> bool:
        return self.test == "paired t"


def _pairable(
    x: Sequence[float], y: Sequence[float], sx: Sequence[Any] | None, sy: Sequence[Any] | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Values of a and b aligned by seed, when both arms have exactly the same finite seeds."""
    if sx is None or sy is None or len(sx) != len(x) or len(sy) != len(y):
        return None
    da = {s: v for s, v in zip(sx, x, strict=True) if v is not None and math.isfinite(v)}
    db = {s: v for s, v in zip(sy, y, strict=True) if v is not None and math.isfinite(v)}
    if len(da) < 2 or set(da) != set(db) or len(da) != len(finite(x)):
        return None
    seeds = sorted(da, key=str)
    return np.array([da[s] for s in seeds]), np.array([db[s] for s in seeds])


@dataclass(frozen=True)
class Arm:
    """One side of a :func:`compare`: its metric values (the non-finite ones are left out), the
    seed of each value (None: not known, so never paired) and how many of its runs diverged."""

    values: Sequence[float]
    label: str = "a"
    seeds: Sequence[Any] | None = None
    diverged: int = 0
    nothing: int = 0
    """How many of ``values`` are runs that learned nothing (:mod:`ablate.data.baseline`)."""


def _as_arm(x: Arm | Sequence[float], side: str) -> Arm:
    """``x`` as an :class:`Arm` (plain values: an arm labelled ``side``, seeds unknown)."""
    return x if isinstance(x, Arm) else Arm(x, side)


def compare(
    a: Arm | Sequence[float],
    b: Arm | Sequence[float],
    *,
    margin: float = 0.01,
    seed: int = SEED,
    axis: str = "",
    context: dict[str, Any] | None = None,
    key: tuple = (),
) -> Comparison:
    """``mean(a) - mean(b)``: a paired t-test and interval when both arms have the same finite
    seeds (each :class:`Arm`'s ``seeds`` give its values' seeds), else Welch; TOST at
    ``±margin``; and the percentile bootstrap CI as a secondary number. p_adj is filled by
    :func:`adjust`. Plain values are an arm labelled ``"a"``/``"b"`` whose seeds are not
    known."""
    arm_a, arm_b = _as_arm(a, "a"), _as_arm(b, "b")
    a, b = arm_a.values, arm_b.values
    pairs = _pairable(a, b, arm_a.seeds, arm_b.seeds)
    x, y = finite(a), finite(b)
    if pairs is not None:
        x, y = pairs
        res = paired_t(x, y)
    else:
        res = welch_diff(x, y)
    _, blo, bhi = bootstrap_diff_ci(x, y, seed=seed)
    p_tost = tost(x, y, margin, pairs is not None)
    flip = flip_tost = math.nan
    if pairs is not None:  # the per-seed differences: a test that holds without normality
        flip, flip_tost = sign_flip_p(x - y), sign_flip_tost(x - y, margin)
    return Comparison(
        label_a=arm_a.label,
        label_b=arm_b.label,
        a=tuple(float(v) for v in x),
        b=tuple(float(v) for v in y),
        diverged_a=arm_a.diverged,
        diverged_b=arm_b.diverged,
        diff=res.diff,
        ci_lo=res.lo,
        ci_hi=res.hi,
        t=res.t,
        df=res.df,
        p=res.p,
        axis=axis,
        context=dict(context or {}),
        test=res.test,
        sd=res.sd,
        margin=margin,
        p_tost=p_tost,
        p_adj=res.p,
        p_tost_adj=p_tost,
        boot_lo=blo,
        boot_hi=bhi,
        key=key,
        pairing=PAIRED if pairs is not None else SEEDS_DIFFER,
        p_flip=flip,
        p_flip_tost=flip_tost,
        p_flip_adj=flip,
        p_flip_tost_adj=flip_tost,
        exact="sign-flip" if pairs is not None else "",
        nothing_a=arm_a.nothing,
        nothing_b=arm_b.nothing,
    )


def adjust(comps: Sequence[Comparison], method: str = "holm") -> list[Comparison]:
    """Adjust the difference p-values and, separately, the TOST p-values over ``comps`` (one
    family): ``method`` ``"holm"`` (Holm–Bonferroni) or ``"bh"`` (Benjamini–Hochberg). Returns
    new comparisons."""
    fn, name = {"holm": (holm, "Holm"), "bh": (bh, "BH")}[method]
    p_adj = fn([c.p for c in comps])
    t_adj = fn([c.p_tost for c in comps])
    k = sum(1 for c in comps if math.isfinite(c.p))
    return [
        replace(c, p_adj=pa, p_tost_adj=ta, family=max(k, 1), correction=name)
        for c, pa, ta in zip(comps, p_adj, t_adj, strict=True)
    ]


def compare_groups(
    ga: pd.DataFrame,
    gb: pd.DataFrame,
    metric: str,
    *,
    label_a: str = "a",
    label_b: str = "b",
    **kwargs: Any,
) -> Comparison:
    """:func:`compare` on two groups of runs of the runs table: completed runs give the values
    (with their seeds, so equal seed sets are paired), diverged runs are counted, and the run
    ids identify the comparison (``key``). ``kwargs`` go to :func:`compare`."""
    same_stream = token_streams(ga) == token_streams(gb) or gb.empty
    comp = compare(
        _group_arm(ga, metric, label_a, same_stream),
        _group_arm(gb, metric, label_b, same_stream),
        key=(metric, tuple(sorted(map(str, ga["run_id"]))), tuple(sorted(map(str, gb["run_id"])))),
        **kwargs,
    )
    return comp if same_stream else replace(comp, pairing=STREAMS_DIFFER)


def _group_arm(g: pd.DataFrame, metric: str, label: str, with_seeds: bool) -> Arm:
    """A group of runs as an :class:`Arm`: its completed runs' ``metric`` (and seeds, when the
    two groups share their token streams), its diverged runs and its completed runs that
    learned nothing counted."""
    done = g[g["status"] == "completed"]
    return Arm(
        pd.to_numeric(done[metric], errors="coerce").tolist() if metric in done else [],
        label,
        done["seed"].tolist() if with_seeds else None,
        int((g["status"] == "diverged").sum()),
        int(nothing_mask(done).sum()),
    )


def nothing_mask(runs: pd.DataFrame) -> pd.Series:
    """The runs in state "learned nothing" (the runs table's column; none where it is absent,
    e.g. a runs table from before it or without the dataset on this machine)."""
    if NOTHING_COLUMN not in runs:
        return pd.Series(False, index=runs.index)
    return pd.to_numeric(runs[NOTHING_COLUMN], errors="coerce").fillna(0) > 0


def token_streams(g: pd.DataFrame) -> set[Any]:
    """What fixes a seed's training token order in these runs: under ``data.order: rows`` (and
    in stores from before the field) the batch size cuts the stream into rows, so it is part
    of the order; under ``tokens`` and ``random`` it is not."""
    if "cfg.batch_size" not in g:
        return set()
    order = g["cfg.order"] if "cfg.order" in g else pd.Series("rows", index=g.index)
    return {
        (o,) if o in ("tokens", "random") else ("rows", b)
        for o, b in zip(order.fillna("rows"), g["cfg.batch_size"], strict=True)
    }


def axis_comparisons(
    runs: pd.DataFrame,
    axes: list[str],
    metric: str = "final_val_loss",
    seed: int = SEED,
    margin: float = 0.01,
) -> list[Comparison]:
    """For each axis, every pair of its values with all other axes held fixed.

    Runs are matched on the other axes (the "context"); within a context, the finished runs
    (``completed`` or ``diverged``) of value ``v_i`` are compared with those of ``v_j``:
    completed runs give the metric values, diverged ones are counted. Runs still running,
    failed or pending are left out.
    """
    done = runs[runs["status"].isin(FINISHED)]
    out: list[Comparison] = []
    for axis in axes:
        values = value_order(runs[axis])
        if len(values) < 2:
            continue
        others = [a for a in axes if a != axis]
        groups = done.groupby(others, sort=False, dropna=False) if others else [((), done)]
        contexts = []
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            contexts.append((dict(zip(others, key, strict=True)), g))
        for other in others:  # contexts in axis-value order
            order = {v: i for i, v in enumerate(value_order(runs[other]))}
            contexts.sort(key=lambda cg, o=other, od=order: od.get(cg[0][o], len(od)))
        for ctx, g in contexts:
            present = [
                v for v in values if (g[axis] == v).any() or (v is None and g[axis].isna().any())
            ]
            for va, vb in combinations(present, 2):
                ga = g[g[axis] == va] if va is not None else g[g[axis].isna()]
                gb = g[g[axis] == vb] if vb is not None else g[g[axis].isna()]
                out.append(
                    compare_groups(
                        ga,
                        gb,
                        metric,
                        label_a=format_value(va),
                        label_b=format_value(vb),
                        margin=margin,
                        seed=seed,
                        axis=axis,
                        context=ctx,
                    )
                )
    return out
