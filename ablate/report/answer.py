"""The top of a report: the answer (each claim in plain words, labelled by its evidence:
confirmed, supported by the t-test only, not supported, not decided with what every seed in the
store shows, exploratory), the study's claims as one table (claim, outcome, difference, CI, p,
n and which seeds), and the words that label every table and figure with the seeds behind it.

Every number here was computed by the claim engine (:mod:`ablate.claims`: a claim's
:class:`~ablate.claims.checks.ClaimCheck` and its comparison); this module only formats them
and counts the seeds of the runs a table or figure draws.
"""

from __future__ import annotations

import pandas as pd

from ablate.claims.checks import (
    CONTRADICTED,
    NOT_HERE,
    REPRODUCES,
    WITHIN_MARGIN,
    ClaimCheck,
    settled,
)
from ablate.claims.spec import EQUIVALENCE, TREND
from ablate.claims.standing import confirm_mask
from ablate.claims.stats import mean_ci
from ablate.claims.verdicts import fmt_num, fmt_p, holm_ps, paper_text
from ablate.report.render import Block
from ablate.results import StudyData


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


def claim_seeds(check: ClaimCheck) -> str:
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
    if not settled(check.outcome) and check.seeds_needed is not None:
        if check.seeds_needed.n is not None:
            row["outcome"] += f" (≈{check.seeds_needed.n} seeds needed)"
    empty = {"a vs b": "—", "a − b": "—", "95% CI": "—", "Holm p": "—", "exact Holm p": "—"}
    empty["n"] = "—"
    if c is None or check.pending is not None:
        return {**row, **empty, "seeds": claim_seeds(check)}
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
    p, exact = _p(c.p_adj), _p(c.p_flip_adj)
    if check.claim.expect in EQUIVALENCE:  # TOST decides equivalence
        p = f"{_p(c.p_tost_adj)} (TOST), {p} (difference)"
        exact = f"{_p(c.p_flip_tost_adj)} (TOST), {exact} (difference)"
    if c.exact:
        exact = f"{c.exact}: {exact}" if "(" in exact else f"{exact} ({c.exact})"
    else:
        exact = "—"
    row |= {"Holm p": p, "exact Holm p": exact}
    return {**row, "n": n, "seeds": claim_seeds(check)}


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
        "with its 95% t-interval; Holm p: the t-test's p, Holm-corrected over the claims only (an "
        "equivalence claim: TOST's and the difference test's); exact Holm p: the same for the "
        "exact test (sign-flip for paired seeds, permutation for unpaired arms), which needs no "
        "normality; an outcome is plain only when both tests give it, else it says which test "
        "alone does; n: seeds per arm "
        "behind the numbers; seeds: which, confirmation (registered, `ablate run confirm`) "
        "or exploratory."
    )
    return [Block("h2", "Claims"), Block("table", table, caption)]


# --- the answer: the study's question answered from its claims, by evidence ----------------


def headline(check: ClaimCheck, unit: str) -> str:
    """A decided claim's effect in a few words: the difference (or the parts' means) with its
    95% t-interval, and the Holm p of both tests."""
    c, claim = check.comparison, check.claim
    if c is None:
        return check.detail or "no runs to test it"
    if check.parts:
        parts = []
        for p in check.parts:
            m, lo, hi = mean_ci(p.values)
            parts.append(f"{p.label}: mean {m:+.3g} (95% CI [{lo:+.3g}, {hi:+.3g}])")
        effect = "; ".join(parts)
    elif claim.expect == "diverges":
        return f"{c.label_a}: diverged in {c.diverged_a}/{c.total_a} finished seeds"
    else:
        ci = f"95% CI [{fmt_num(c.ci_lo)}, {fmt_num(c.ci_hi)}]"
        if claim.expect in TREND:  # the slope of the gap per decade of training FLOPs
            effect = f"{c.label_a}: {fmt_num(c.diff)} {unit} ({ci})"
        elif claim.by:
            effect = f"difference of differences {fmt_num(c.diff)} {unit} ({ci})"
        elif claim.metric == "lr_exponent":
            lo, hi = claim.value + c.ci_lo, claim.value + c.ci_hi
            effect = f"alpha {fmt_num(c.mean_a)} (95% CI [{fmt_num(lo)}, {fmt_num(hi)}])"
            effect += f" against {claim.value:g}"
        else:
            effect = f"{c.label_a} − {c.label_b}: {fmt_num(c.diff)} {unit} ({ci})"
    return f"{effect}; {holm_ps(check)}"


def evidence(check: ClaimCheck, confirmatory: bool) -> str:
    """The claim's label by evidence: confirmed, supported by the t-test (or exact test) only,
    not supported (at this setting), contradicted by one test only, not decided, pending, or
    exploratory."""
    outcome = check.outcome
    if check.pending is not None:
        return "pending"
    if not confirmatory:
        return "exploratory"
    tests = ("t-test", "exact test")
    one = next((f"by the {t} only" for t in tests if f"by {t} only" in outcome), "")
    if outcome.startswith((REPRODUCES, WITHIN_MARGIN)):
        return f"supported {one}" if one else "confirmed"
    if outcome.startswith(NOT_HERE):
        return "not supported at this setting" + (f" ({one})" if one else "")
    if outcome.startswith(CONTRADICTED):
        return f"contradicted {one}" if one else "not supported"
    return "not decided"


def answer_item(check: ClaimCheck, confirmatory: bool, unit: str) -> str:
    """One claim of the answer: its label, the claim, the effect on its own seeds, what the
    pooled seeds say where its confirmation did not decide it, and what would decide it."""
    label, claim = evidence(check, confirmatory), check.claim
    if check.pending is not None:
        return f"**pending**: {claim.text} ({check.detail})."
    kind = "" if confirmatory else " (not confirmatory: see its registration line)"
    text = (
        f"**{label}**{kind}: {claim.text} → {check.outcome}: {headline(check, unit)} "
        f"({claim_seeds(check)})."
    )
    pooled = check.pooled
    if pooled is not None and pooled.comparison is not None and not settled(check.outcome):
        n = seeds_text(pooled.pool, per="arm") if pooled.pool is not None else "all seeds"
        text += f" **Exploratory on all seeds** ({n}): {pooled.outcome}: {headline(pooled, unit)}."
    need = check.seeds_needed
    if need is not None and not settled(check.outcome):
        text += f" Seeds to decide it by both tests: {need.text()}."
    paper = paper_text(check, unit)
    if "excluded" in paper:
        text += f" Against the paper: {paper}."
    return text


def answer_blocks(
    study: StudyData, checks: list[ClaimCheck], unit: str, confirmatory: dict[str, bool]
) -> list[Block]:
    """The report's opening: the study's claims answered in plain words, each labelled by its
    evidence (nothing here is computed but by the claim engine)."""
    if not checks:
        return []
    counts = pd.Series([evidence(ch, confirmatory.get(ch.claim.id, False)) for ch in checks])
    tally = ", ".join(f"{n} {label}" for label, n in counts.value_counts().items())
    lead = (
        f"**Answer** ({len(checks)} claim(s): {tally}). Each claim as the claim engine decided "
        "it: *confirmed* means both tests (the t-test and the exact test, Holm over the claims) "
        "support it on the registered confirmation seeds, with the registration's order proven "
        "by git; *supported by the t-test only* means the exact test does not reach α on those "
        "seeds; *not decided* and *supported by the t-test only* add what every seed in the "
        "store shows (the same tests, Holm over the claims: exploratory, since those seeds "
        "include ones seen before the registration) and the seeds that would decide it by both "
        "tests. The scale is the one the claims section states."
    )
    items = [answer_item(ch, confirmatory.get(ch.claim.id, False), unit) for ch in checks]
    return [Block("h2", "Answer"), Block("p", lead), Block("ul", items)]
