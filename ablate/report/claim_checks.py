"""Check a study's claims (:mod:`ablate.study.claims`) against its runs, at report time.

Each claim becomes one :class:`~ablate.report.comparisons.Comparison` (arm a vs arm b, paired
by seed where both arms share the seeds), Holm-corrected together with the report's axis
comparisons, and an outcome: *reproduces*, *contradicted*, or *inconclusive* with the seeds
that would decide it. ``diverges`` claims count diverged runs instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from ablate.report.collect import StudyData, axis_column, format_value
from ablate.report.comparisons import (
    FINISHED,
    Comparison,
    adjust,
    axis_comparisons,
    compare,
    compare_groups,
)
from ablate.report.fit import init_ffn_grad_slope, lr_fit
from ablate.report.stats import ALPHA, seeds_needed
from ablate.study.claims import Claim

SLOPE = "ffn_grad_slope@init"

REPRODUCES, CONTRADICTED, INCONCLUSIVE, UNTESTED = (
    "reproduces",
    "contradicted",
    "inconclusive",
    "not testable",
)


NOT_BRACKETED = "not testable: the best LR is at the edge of the sweep (not bracketed)"


@dataclass
class ClaimCheck:
    claim: Claim
    comparison: Comparison | None = None
    outcome: str = UNTESTED
    detail: str = ""
    seeds_needed: int | None = None


def metric_column(claim: Claim) -> str:
    if claim.length is not None:
        return f"val_loss_at_{claim.length:g}x"
    return claim.metric


def _match(runs: pd.DataFrame, sel: dict) -> pd.DataFrame:
    """Runs whose axes equal every scalar of ``sel`` (lists are resolved by :func:`_best`)."""
    mask = pd.Series(True, index=runs.index)
    for key, val in sel.items():
        if isinstance(val, list):
            continue
        col = axis_column(key)
        mask &= runs[col] == val if col in runs else False
    return runs[mask]


def _best(runs: pd.DataFrame, sel: dict, col: str) -> tuple[pd.DataFrame, str]:
    """The arm of ``sel``; a list value picks the value with the lowest mean ``col``."""
    g = _match(runs, sel)
    label = ", ".join(
        f"{k.split('.')[-1]}={format_value(v)}" for k, v in sel.items() if not isinstance(v, list)
    )
    for key, val in sel.items():
        if not isinstance(val, list):
            continue
        c = axis_column(key)
        means = {
            v: pd.to_numeric(
                g.loc[(g[c] == v) & (g["status"] == "completed"), col], errors="coerce"
            ).mean()
            for v in val
        }
        finite = {v: m for v, m in means.items() if math.isfinite(m)}
        pick = min(finite, key=finite.get) if finite else val[0]
        g = g[g[c] == pick]
        opts = "/".join(format_value(v) for v in val)
        part = f"{key.split('.')[-1]}={format_value(pick)} (best of {opts})"
        label = f"{label}, {part}" if label else part
    return g, label or "ablate (all runs)"


def build_comparisons(study: StudyData, claims: list[Claim], margin: float) -> list[ClaimCheck]:
    """One :class:`ClaimCheck` per claim with its (unadjusted) comparison."""
    runs = study.runs[study.runs["status"].isin(FINISHED)]
    if any(c.metric == SLOPE for c in claims):
        runs = runs.assign(**{SLOPE: runs["run_id"].map(init_ffn_grad_slope(study.metrics))})
    out = []
    for claim in claims:
        m = claim.margin if claim.margin is not None else margin
        check = ClaimCheck(claim)
        base = _match(runs, claim.where)
        if claim.metric == "lr_exponent":
            if not {"data.batch_size", "optim.lr"} <= set(study.varying_axes):
                check.detail = "these runs do not sweep data.batch_size × optim.lr"
                out.append(check)
                continue
            fit = lr_fit(base)
            alphas = {s: a for s, a in fit.alphas.items() if math.isfinite(a)}
            seeds = list(alphas)
            check.comparison = compare(
                list(alphas.values()),
                [claim.value] * len(seeds),
                seeds_a=seeds,
                seeds_b=seeds,
                label_a="alpha",
                label_b=f"{claim.value:g}",
                margin=m,
            )
            not_bracketed = fit.per_batch.loc[~fit.per_batch["interior"], "batch"].tolist()
            if not_bracketed:  # no claim on an optimum the sweep does not contain
                check.detail = f"{NOT_BRACKETED} at batch " + ", ".join(
                    f"{b:g}" for b in not_bracketed
                )
            out.append(check)
            continue
        col = metric_column(claim)
        if col not in runs or runs[col].isna().all():
            check.detail = f"no run records {claim.metric}"
            out.append(check)
            continue
        ga, la = _best(base, claim.a, col)
        if claim.expect == "diverges":
            check.comparison = compare_groups(
                ga, ga.iloc[0:0], col, label_a=la, label_b="-", margin=m
            )
            out.append(check)
            continue
        if claim.external:
            done = ga[ga["status"] == "completed"]
            check.comparison = compare(
                pd.to_numeric(done[col], errors="coerce").tolist(),
                list(claim.external),
                label_a=la,
                label_b=claim.external_label,
                margin=m,
                diverged_a=int((ga["status"] == "diverged").sum()),
            )
        else:
            gb, lb = _best(base, claim.b, col)
            check.comparison = compare_groups(ga, gb, col, label_a=la, label_b=lb, margin=m)
        out.append(check)
    return out


def _decide(check: ClaimCheck, alpha: float) -> None:
    c, claim = check.comparison, check.claim
    if c is None or check.detail.startswith(NOT_BRACKETED):
        return
    if claim.expect == "diverges":
        n = c.total_a
        if n == 0:
            check.detail = check.detail or "no finished runs"
            return
        check.outcome = (
            REPRODUCES
            if c.diverged_a == n
            else CONTRADICTED
            if c.diverged_a == 0 and n >= 2
            else INCONCLUSIVE
        )
        return
    all_a = c.total_a > 0 and c.diverged_a == c.total_a
    all_b = c.total_b > 0 and c.diverged_b == c.total_b
    if all_a != all_b and claim.expect in ("better", "worse"):  # one arm diverged everywhere
        a_better = all_b
        check.outcome = REPRODUCES if a_better == (claim.expect == "better") else CONTRADICTED
        return
    if c.n_a < 2 or c.n_b < 2:
        check.detail = check.detail or "fewer than 2 finite seeds in an arm"
        return
    sig = math.isfinite(c.p_adj) and c.p_adj < alpha
    equiv = math.isfinite(c.p_tost_adj) and c.p_tost_adj < alpha
    # lower loss is better; for lr_exponent "better" means above value
    a_lower = c.diff < 0 if claim.metric != "lr_exponent" else c.diff > 0
    if claim.expect == "equivalent":
        check.outcome = REPRODUCES if equiv else CONTRADICTED if sig else INCONCLUSIVE
    else:
        want = a_lower if claim.expect == "better" else not a_lower
        if sig and abs(c.diff) >= c.margin or sig and not equiv:
            check.outcome = REPRODUCES if want else CONTRADICTED
        elif equiv:
            check.outcome = CONTRADICTED
        else:
            check.outcome = INCONCLUSIVE
    if check.outcome == INCONCLUSIVE:
        check.seeds_needed = seeds_needed(
            c.diff, c.sd, c.margin, paired=c.paired, alpha=alpha / c.family
        )


def analyse(study: StudyData) -> tuple[list[Comparison], list[ClaimCheck]]:
    """Every comparison of a report, Holm-corrected as one family: the axis comparisons and
    the claims (a claim that is the same comparison as an axis one is counted once)."""
    margin = study.equivalence_margin
    comps = axis_comparisons(study.runs, study.varying_axes, margin=margin)
    checks = build_comparisons(study, study.claims, margin)
    family = list(comps)
    keys = {c.key for c in comps}
    for check in checks:
        c = check.comparison
        if c is None:
            continue
        if not c.key:
            check.comparison = c = replace(c, key=("claim", check.claim.id))
        if c.key not in keys:
            family.append(c)
            keys.add(c.key)
    adjusted = {c.key: c for c in adjust(family)}
    for check in checks:
        c = check.comparison
        if c is not None and c.key in adjusted:
            a = adjusted[c.key]
            check.comparison = replace(c, p_adj=a.p_adj, p_tost_adj=a.p_tost_adj, family=a.family)
        _decide(check, ALPHA)
    return [adjusted[c.key] for c in comps], checks
