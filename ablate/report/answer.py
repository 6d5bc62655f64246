"""The top of a report: the study's claims as one table (claim, outcome, difference, CI, p, n
and which seeds), and the words that label every table and figure with the seeds behind it.

Every number here was computed by the claim engine (:mod:`ablate.claims`: a claim's
:class:`~ablate.claims.checks.ClaimCheck` and its comparison); this module only formats them
and counts the seeds of the runs a table or figure draws.
"""

from __future__ import annotations

import pandas as pd

from ablate.claims.checks import ClaimCheck
from ablate.claims.standing import confirm_mask
from ablate.claims.verdicts import fmt_num, fmt_p
from ablate.report.render import Block
from ablate.study.results import StudyData


def seed_span(seeds) -> str:
    """``'0–2, 5, 9–13'``: sorted seeds, consecutive ones as a range."""
    runs: list[list[int]] = []
    for s in sorted({int(s) for s in seeds if pd.notna(s)}):
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def seeds_text(runs: pd.DataFrame, *, per: str = "variant") -> str:
    """The completed seeds behind a table or figure drawn from ``runs``: ``'n = 3 exploratory
    seeds per variant (0–2)'``, ``'n = 5 confirmation seeds per variant (9–13)'`` or ``'n = 8
    seeds per variant, pooled (exploratory 0–2, confirmation 9–13)'``."""
    done = runs[runs["status"] == "completed"] if len(runs) else runs
    if done.empty:
        return "no completed seeds yet"
    per_variant = done.groupby("variant")["seed"].nunique()
    lo, hi = int(per_variant.min()), int(per_variant.max())
    n = f"{lo}" if lo == hi else f"{lo}–{hi}"
    conf = confirm_mask(done)
    explore, fresh = done.loc[~conf, "seed"], done.loc[conf, "seed"]
    if fresh.empty or explore.empty:
        kind = "confirmation" if explore.empty else "exploratory"
        return f"n = {n} {kind} seeds per {per} ({seed_span(done['seed'])})"
    return (
        f"n = {n} seeds per {per}, pooled (exploratory {seed_span(explore)}, confirmation "
        f"{seed_span(fresh)})"
    )


def _claim_seeds(check: ClaimCheck) -> str:
    """Which seeds decided a claim: ``'confirmation 9–13'`` / ``'exploratory 0–2'``."""
    pool = check.pool
    if pool is None or pool.empty:
        return "—"
    done = pool[pool["status"].isin(("completed", "diverged"))]
    if done.empty:
        return "none finished"
    kind = "confirmation" if check.confirmation else "exploratory"
    return f"{kind} {seed_span(done['seed'])}"


def _p(p: float) -> str:
    return fmt_p(p, "").removeprefix("=").strip()


def claim_row(check: ClaimCheck) -> dict:
    """One claim as a row of the table: every number is the claim engine's."""
    c = check.comparison
    row = {"claim": check.claim.id, "outcome": check.outcome}
    if check.pending is not None:
        row["outcome"] = f"pending ({check.pending[0]} of {check.pending[1]} runs)"
    if check.outcome == "inconclusive" and check.seeds_needed is not None:
        if check.seeds_needed.n is not None:
            row["outcome"] += f" (≈{check.seeds_needed.n} seeds needed)"
    empty = {"a vs b": "—", "a − b": "—", "95% CI": "—", "Holm p": "—", "n": "—"}
    if c is None or check.pending is not None:
        return {**row, **empty, "seeds": _claim_seeds(check)}
    if check.parts:  # one-sample parts: each arm against a value, no difference of arms
        n = ", ".join(str(p.n) for p in check.parts)
        vs = "; ".join(
            f"{p.label} {'>' if p.expect == 'above' else '<'} {p.ref:+.3g}" for p in check.parts
        )
        row |= {"a vs b": vs, "a − b": "—", "95% CI": "—"}
    elif check.claim.expect == "diverges":
        n = f"{c.total_a}"
        row |= {"a vs b": f"{c.label_a}: diverged {c.diverged_a}/{c.total_a}", "a − b": "—"}
        row["95% CI"] = "—"
    else:
        n = f"{c.n_a}" if c.n_a == c.n_b or not c.b else f"{c.n_a} vs {c.n_b}"
        row |= {
            "a vs b": f"{c.label_a} vs {c.label_b}",
            "a − b": fmt_num(c.diff),
            "95% CI": f"[{fmt_num(c.ci_lo)}, {fmt_num(c.ci_hi)}]",
        }
    p = _p(c.p_adj)
    if check.claim.expect in ("equivalent", "flat"):  # TOST decides equivalence (a flat trend)
        p = f"{_p(c.p_tost_adj)} (TOST), {p} (difference)"
    return {**row, "Holm p": p, "n": n, "seeds": _claim_seeds(check)}


def claims_summary(study: StudyData, checks: list[ClaimCheck], unit: str) -> list[Block]:
    """The claims table for the top of the report (a line when the study states none)."""
    if not checks:
        return [
            Block(
                "note",
                "**Claims**: none (the study file states none): every comparison in this "
                "report is exploratory.",
            )
        ]
    table = pd.DataFrame([claim_row(ch) for ch in checks])
    caption = (
        "The study's claims as the claim engine decided them (each in words, with its test, "
        f"under Against the paper). a − b: difference of the arms' means ({unit} for a loss), "
        "with its 95% t-interval; Holm p: the test's p, Holm-corrected over the claims only (an "
        "equivalence claim: TOST's and the difference test's); n: seeds per arm "
        "behind the numbers; seeds: which, confirmation (registered, `ablate run --confirm`) "
        "or exploratory."
    )
    return [Block("h2", "Claims"), Block("table", table, caption)]
