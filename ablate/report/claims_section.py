"""The report's claim sections: "Against the paper" (one line per checked claim with its numbers,
the LR-optimum table, the hand-written commentary) and the ``--until-decided`` seed rounds.

The claims are checked (verdicts computed) in :mod:`ablate.report.claim_checks`; this module
only words them.
"""

from __future__ import annotations

import math

import pandas as pd

from ablate.report.claim_checks import INCONCLUSIVE, ClaimCheck
from ablate.report.collect import StudyData
from ablate.report.fit import lr_fit
from ablate.report.render import Block
from ablate.report.verdicts import fmt_num, fmt_p, verdict


def _where(check: ClaimCheck) -> str:
    w = check.claim.where
    return ("at " + ", ".join(f"{k.split('.')[-1]}={v}" for k, v in w.items())) if w else ""


def numbers(check: ClaimCheck, unit: str) -> str:
    """The numbers behind a claim's outcome, computed from the runs."""
    c, claim = check.comparison, check.claim
    if c is None:
        return check.detail or "no runs to test it"
    if claim.expect == "diverges":
        tail = f" {_where(check)}" if claim.where else ""
        return f"{c.label_a}: diverged in {c.diverged_a}/{c.total_a} finished seeds{tail}"
    if claim.metric == "lr_exponent":
        if c.n_a < 2:
            return check.detail or "fewer than 2 seeds with an optimum at every batch size"
        v = claim.value
        text = (
            f"alpha = {fmt_num(c.mean_a)} (95% CI [{fmt_num(v + c.ci_lo)}, "
            f"{fmt_num(v + c.ci_hi)}] over {c.n_a} seeds; against {v:g}: {c.test}, "
            f"{fmt_p(c.p)}, Holm {fmt_p(c.p_adj)}; "
            f"TOST ±{fmt_num(c.margin)}: Holm {fmt_p(c.p_tost_adj, 'p')})"
        )
        return f"{text}; {check.detail}" if check.detail else text
    if claim.metric.endswith("@init"):  # a slope of gradient norms over layers, not a loss
        unit = "(grad-norm slope per layer)"
    return verdict(c, unit=unit, where=_where(check)).text


def claim_items(checks: list[ClaimCheck], unit: str) -> list[str]:
    """One line per claim: id, the paper's statement, the outcome and the numbers."""
    items = []
    for check in checks:
        outcome = check.outcome
        if outcome == INCONCLUSIVE:
            outcome += (
                f" (≈{check.seeds_needed} seeds per arm would decide it)"
                if check.seeds_needed
                else " (more seeds needed)"
            )
        expect = check.claim.expect + (
            f" {check.claim.value:g}" if check.claim.value is not None else ""
        )
        items.append(
            f"**{check.claim.id}** ({check.claim.metric}, expect {expect}): "
            f"{check.claim.text} → **{outcome}**: {numbers(check, unit)}"
        )
    return items


def lr_table(study: StudyData) -> pd.DataFrame | None:
    """Per batch size: LRs swept, best LR of the mean curve, bracketed or not, fitted lr*."""
    axes = set(study.varying_axes)
    if not {"data.batch_size", "optim.lr"} <= axes:
        return None
    fit = lr_fit(study.runs)
    rows = []
    for _, r in fit.per_batch.iterrows():
        star = "—"
        if math.isfinite(r["lr_star"]):
            star = f"{r['lr_star']:.3g}"
            if math.isfinite(r["lr_lo"]):
                star += f" [{r['lr_lo']:.3g}, {r['lr_hi']:.3g}]"
        rows.append(
            {
                "batch": f"{r['batch']:g}",
                "LRs swept": ", ".join(f"{x:g}" for x in r["lrs"]),
                "best LR (mean)": f"{r['best_lr']:g}" if math.isfinite(r["best_lr"]) else "—",
                # per seed too: a mean curve can bend where single seeds still sit at the edge
                "optimum bracketed": (
                    f"yes (per seed: {int(r['n'])}/{int(r['seeds'])})"
                    if r["interior"]
                    else "NO: best LR at the edge"
                ),
                "fitted lr* [95% t-CI]": star,
                "n": int(r["n"]),
            }
        )
    return pd.DataFrame(rows)


def against_the_paper(study: StudyData, checks: list, unit: str) -> list[Block]:
    """Claims checked by the engine (computed now), then the hand-written commentary."""
    if not checks and not study.findings:
        return []
    out = [Block("h2", "Against the paper")]
    if checks:
        out.append(
            Block(
                "p",
                "Each claim from the study YAML, checked against the runs when this report was "
                f"built (Holm-corrected with the comparisons below, margin ±"
                f"{study.equivalence_margin:g} unless a claim sets its own):",
            )
        )
        out.append(Block("ul", claim_items(checks, unit)))
    table = lr_table(study)
    if table is not None:
        out.append(
            Block(
                "table",
                table,
                "Optimum LR per batch size: the vertex of a quadratic in log10(lr) fitted per "
                "seed around the sweep's lowest loss; mean over seeds with its 95% t-interval. "
                "An optimum at the edge of the sweep is not bracketed and gives no fit; "
                "'per seed: k/n' counts the seeds whose own sweep brackets (and fits) it.",
            )
        )
    if study.findings:
        lead = "**Commentary** (hand-written): " if checks else ""
        out.append(Block("p", lead + study.findings))
    return out


def extra_seeds_section(study: StudyData) -> list[Block]:
    """Which variants ``ablate run --until-decided`` gave extra seeds, round by round."""
    extra = extra_seed_items(study)
    if not extra:
        return []
    return [
        Block("h2", "Extra seeds (--until-decided)"),
        Block(
            "p",
            "After the study's seeds, `ablate run --until-decided` added seeds only to the "
            "variants of inconclusive comparisons or claims, re-analysing after each round:",
        ),
        Block("ul", extra),
    ]


def extra_seed_items(study: StudyData) -> list[str]:
    """``--until-decided`` rounds from the store's log: which variants got which seed, why."""
    from ablate.store.rundir import DECISIONS_FILE, read_decisions

    path = study.path / DECISIONS_FILE
    if not path.is_file():
        return []
    log = read_decisions(path)
    items = []
    for i, r in enumerate(log.get("rounds", []), 1):
        for variant, seed in r.get("seeds", {}).items():
            why = "; ".join(r.get("why", {}).get(variant, []))
            items.append(f"round {i}: **{variant}** got seed {seed} (inconclusive: {why})")
    stop = log.get("stopped")
    if stop:
        items.append(f"stopped: {stop}")
    return items
