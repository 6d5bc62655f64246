"""The top of a report: the Answer a paper would print. A table, one row per claim (its
condition: the arms and any ``where``; the effect a − b with its 95% t-interval; n; the t-test's
and the exact test's Holm p; the verdict), then one sentence per claim in the direction a reader
says it, with the table's numbers and signs, and a short tag linking its registration proof in
``provenance.md``. Also the words that label every table and figure with the seeds behind it.

Every number here was computed by the claim engine (:mod:`ablate.claims`: a claim's
:class:`~ablate.claims.checks.ClaimCheck` and its comparison); this module only orients and
formats them. A two-arm claim and an interaction are written with the larger side first, so
the effect reads as a positive gap ("X ends 0.96 nats worse than Y"); the figure beside the
claim (:mod:`ablate.report.claim_figure`) draws it in the same orientation (:func:`effect_of`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from ablate.claims.checks import (
    BY_EXACT_ONLY,
    BY_T_ONLY,
    CONTRADICTED,
    INCONCLUSIVE,
    NOT_A_TREND,
    NOT_HERE,
    REPRODUCES,
    THRESHOLD,
    UNTESTED,
    WITHIN_MARGIN,
    ClaimCheck,
)
from ablate.claims.spec import EQUIVALENCE, LENGTH_METRIC, TREND
from ablate.claims.standing import Standing, confirm_mask
from ablate.claims.stats import mean_ci
from ablate.claims.verdicts import fmt_num, fmt_p
from ablate.names import format_value
from ablate.report.render import PROVENANCE, Block

LOSSES = ("final_val_loss", "best_val_loss")


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


def anchor(claim_id: str) -> str:
    """The id of a claim's section in ``provenance.md`` (and in the HTML page): GitHub's
    heading slug of ``Claim <id>`` (lower case, spaces to ``-``, other punctuation dropped)."""
    return "claim-" + re.sub(r"[^a-z0-9_-]", "", claim_id.lower())


# --- the effect, oriented as a reader says it ----------------------------------------------


@dataclass(frozen=True)
class Effect:
    """A claim's effect as the Answer shows it: ``x`` − ``y`` = ``diff`` [``lo``, ``hi``],
    ``sign`` times the engine's a − b (−1 where the claim's b side is the larger)."""

    kind: str
    """``arms``, ``interaction``, ``trend``, ``fitted``, ``parts``, ``diverges`` or ``none``."""
    x: str = ""
    y: str = ""
    diff: float = math.nan
    lo: float = math.nan
    hi: float = math.nan
    sign: float = 1.0
    n: str = ""


def _short(key: str, value) -> str:
    return f"{key.split('.')[-1]}={format_value(value)}"


def where_words(check: ClaimCheck) -> str:
    """``norm_placement=post, rung=small``: the axes a claim holds fixed ("" when none)."""
    return ", ".join(_short(k, v) for k, v in check.claim.where.items())


def effect_of(check: ClaimCheck) -> Effect:
    """The claim's effect in the Answer's orientation (module doc)."""
    c, claim = check.comparison, check.claim
    if c is None or check.pending is not None:
        return Effect("none")
    if check.parts:
        ns = list(dict.fromkeys(str(p.n) for p in check.parts))
        return Effect("parts", n=", ".join(ns))
    if claim.expect == "diverges":
        return Effect("diverges", c.label_a, n=str(c.total_a))
    n = f"{c.n_a}" if c.n_a == c.n_b or not c.b else f"{c.n_a} vs {c.n_b}"
    if claim.expect in TREND:
        gap = c.context.get("gap", c.label_a)
        return Effect("trend", str(gap), "", c.diff, c.ci_lo, c.ci_hi, n=str(c.n_a))
    if claim.metric == "lr_exponent":
        return Effect("fitted", "alpha", f"{claim.value:g}", c.diff, c.ci_lo, c.ci_hi, n=n)
    if claim.by:
        ((axis, (v1, v2)),) = claim.by.items()
        x, y = _short(axis, v1), format_value(v2)
        kind = "interaction"
    else:  # a published arm by its label (where its numbers come from: provenance.md)
        x, y, kind = c.label_a, claim.external_label or c.label_b, "arms"
    if math.isfinite(c.diff) and c.diff < 0:  # the larger side first: a positive gap
        if kind == "interaction":
            x, y = _short(axis, v2), format_value(v1)
        else:
            x, y = y, x
            n = f"{c.n_b} vs {c.n_a}" if c.n_a != c.n_b and c.b else n
        return Effect(kind, x, y, -c.diff, -c.ci_hi, -c.ci_lo, -1.0, n)
    return Effect(kind, x, y, c.diff, c.ci_lo, c.ci_hi, 1.0, n)


def fmt_effect(diff: float, lo: float = math.nan, hi: float = math.nan) -> tuple[str, str, str]:
    """An effect and its interval's ends at one precision: two significant digits of the
    interval's width, one digit more where the effect needs it for two of its own (``0.96
    [0.75, 1.17]``, ``0.0025 [-0.0037, 0.0087]``); three significant digits without one."""
    if not math.isfinite(diff):
        return "nan", fmt_num(lo), fmt_num(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return fmt_num(diff), fmt_num(lo), fmt_num(hi)
    width = 1 - math.floor(math.log10(hi - lo))
    places = width
    if diff:  # a small effect gets one more digit, never more
        places = min(max(width, 1 - math.floor(math.log10(abs(diff)))), width + 1)
    places = min(max(places, 0), 6)

    def text(v: float) -> str:
        out = f"{v:.{places}f}"
        return out.lstrip("-") if float(out) == 0 else out  # never "-0.00"

    return text(diff), text(lo), text(hi)


def condition(check: ClaimCheck, e: Effect) -> str:
    """The claim's condition for the table: its arms (in the effect's orientation) and where."""
    claim = check.claim
    if e.kind == "parts":
        text = "; ".join(
            f"{p.label} {'>' if p.expect == 'above' else '<'} {fmt_num(p.ref)}" for p in check.parts
        )
    elif e.kind == "trend":
        text = f"slope of {e.x} per decade of FLOPs"
    elif e.kind == "fitted":
        text = f"alpha (lr* ∝ batch^alpha) vs {e.y}"
    elif e.kind == "interaction":
        text = f"({_effect_arms(check)}) at {e.x} − at {e.y}"
    elif e.kind in ("arms", "diverges"):
        text = f"{e.x} vs {e.y}" if e.kind == "arms" else f"{e.x} diverges"
    else:
        text = ", ".join(_short(k, v) for k, v in claim.a.items()) or claim.id
        if claim.b:
            text += " vs " + ", ".join(_short(k, v) for k, v in claim.b.items())
    if claim.metric not in ("final_val_loss", "lr_exponent"):  # which number, where not the usual
        text += f", {claim.metric}"
    where = where_words(check)
    return f"{text} at {where}" if where else text


def _effect_arms(check: ClaimCheck) -> str:
    """An interaction's effect: ``warmup_ratio=0 − 0.1``."""
    claim = check.claim
    keys = list(claim.a)
    a = ", ".join(_short(k, claim.a[k]) for k in keys)
    return f"{a} − " + ", ".join(format_value(claim.b[k]) for k in keys)


def effect_cell(check: ClaimCheck, e: Effect) -> str:
    """``0.96 [0.747, 1.17]``: the effect and its 95% t-interval, as the sentence has them."""
    if e.kind == "parts":
        return "; ".join(f"{p.label} {_part(p)}" for p in check.parts)
    if e.kind == "diverges":
        c = check.comparison
        return f"diverged {c.diverged_a}/{c.total_a}"
    if e.kind == "none" or not math.isfinite(e.diff):
        return "—"
    d, lo, hi = fmt_effect(e.diff, e.lo, e.hi)
    return f"{d} [{lo}, {hi}]" if math.isfinite(e.lo) else d


def _part(p) -> str:
    d, lo, hi = fmt_effect(*mean_ci(p.values))
    return f"{d} [{lo}, {hi}]"


def _p(p: float) -> str:
    return fmt_p(p, "").removeprefix("=").strip()


def p_cells(check: ClaimCheck) -> tuple[str, str]:
    """(t-test Holm p, exact test Holm p); an equivalence shows TOST's and the difference
    test's (either may decide it)."""
    c = check.comparison
    if c is None or check.pending is not None:
        return "—", "—"
    p, exact = _p(c.p_adj), _p(c.p_flip_adj)
    if check.claim.expect in EQUIVALENCE:
        p = f"{_p(c.p_tost_adj)} (TOST), {p} (difference)"
        exact = f"{_p(c.p_flip_tost_adj)} (TOST), {exact} (difference)"
    if not c.exact:
        return p, "—"
    return p, f"{c.exact}: {exact}" if "(" in exact else f"{exact} ({c.exact})"


def verdict_cell(check: ClaimCheck, confirmatory: bool) -> str:
    """The claim engine's outcome; pending with its runs, exploratory where not confirmatory."""
    if check.pending is not None:
        return f"pending ({check.pending[0]} of {check.pending[1]} runs)"
    return check.outcome + ("" if confirmatory else " (exploratory)")


def claim_row(check: ClaimCheck, confirmatory: bool = True) -> dict:
    """One claim as a row of the Answer's table: every number is the claim engine's."""
    e = effect_of(check)
    p, exact = p_cells(check)
    return {
        "claim": check.claim.id,
        "condition": condition(check, e),
        "a − b [95% CI]": effect_cell(check, e),
        "n": e.n or "—",
        "Holm p": p,
        "exact Holm p": exact,
        "verdict": verdict_cell(check, confirmatory),
    }


# --- the sentence ----------------------------------------------------------------------------


def _unit(check: ClaimCheck, unit: str) -> tuple[str, str]:
    """(unit, the word for a positive gap): ``nats``/``worse`` for a loss, else ``""``/
    ``higher``."""
    metric = check.claim.metric
    if metric in LOSSES or LENGTH_METRIC.match(metric):
        return unit, "worse"
    return "", "higher"


def _need(check: ClaimCheck) -> str:
    need = check.seeds_needed
    return f"≈{need.n}" if need is not None and need.n is not None else ""


def tail(check: ClaimCheck) -> str:
    """What the tests made of it, in a few words (the table's verdict, as a reader says it)."""
    outcome, need = check.outcome, _need(check)
    if outcome.endswith(BY_T_ONLY):
        return (
            f"{need} seeds would let the exact test decide" if need else "only the t-test decides"
        )
    if outcome.endswith(BY_EXACT_ONLY):
        return (
            f"{need} seeds would let the t-test decide" if need else "only the exact test decides"
        )
    if outcome == INCONCLUSIVE:
        return f"{need} seeds would decide it" if need else "undecided"
    if outcome == REPRODUCES:
        equal = check.claim.expect in EQUIVALENCE
        return "equivalent by both tests" if equal else "both tests support the claim"
    return {
        CONTRADICTED: "both tests contradict the claim",
        WITHIN_MARGIN: "a real difference, inside the margin, by both tests",
        NOT_HERE: "not reproduced at this setting, by both tests",
        THRESHOLD: "the gap moves the claimed way at one step only: a threshold, not a trend",
        NOT_A_TREND: "the steps between rungs disagree: not a trend",
    }.get(outcome, outcome)


LABEL_WORDS = 6
"""An arm's label in a sentence, at most (its whole label is in the table's condition)."""


def _few(label: str) -> str:
    words = label.split()
    return label if len(words) <= LABEL_WORDS else " ".join(words[:LABEL_WORDS]) + "…"


def sentence(check: ClaimCheck, unit: str) -> str:
    """One claim in at most ~30 words, in the Answer's orientation, with the table's numbers."""
    e, claim = effect_of(check), check.claim
    if check.pending is not None:
        k, n = check.pending
        return f"{condition(check, e)}: pending, {k} of {n} registered runs finished."
    if e.kind == "none" or check.outcome == UNTESTED:
        return f"{condition(check, e)}: not testable ({check.detail or 'no runs'})."
    where = where_words(check)
    at = f"At {where}, " if where else ""
    u, word = _unit(check, unit)
    u = f" {u}" if u else ""
    margin = f", margin ±{fmt_num(check.comparison.margin)}" if claim.expect in EQUIVALENCE else ""
    d, lo, hi = fmt_effect(e.diff, e.lo, e.hi)
    ci = f"(95% CI {lo} to {hi}, {e.n} seeds{margin})"
    if e.kind == "parts":
        parts = ", ".join(f"{p.label} {_part(p)}" for p in check.parts)
        text = f"{at}{claim.metric}: {parts} ({e.n} seeds)"
    elif e.kind == "diverges":
        c = check.comparison
        text = f"{at}{c.label_a} diverged in {c.diverged_a} of {c.total_a} seeds"
    elif e.kind == "trend":
        text = f"{at}the gap {e.x} changes by {d}{u} per decade of FLOPs {ci}"
    elif e.kind == "fitted":
        text = f"{at}the fitted exponent alpha minus {e.y} is {d} {ci}"
    elif e.kind == "interaction":
        text = (
            f"{at}the effect of {_effect_arms(check)} is {d}{u} larger at {e.x} than at {e.y} {ci}"
        )
    else:
        final = claim.metric == "final_val_loss"
        verb, metric = ("ends", "") if final else ("is", f" in {claim.metric}")
        x, y = _few(e.x), _few(e.y)
        text = f"{at}{x} {verb} {d}{u} {word} than {y}{metric} {ci}"
    if text.startswith("the "):  # a label keeps its case
        text = "The" + text[3:]
    return f"{text}; {tail(check)}."


# --- the registration tag --------------------------------------------------------------------


def tag(check: ClaimCheck, standing: Standing | None) -> str:
    """``registered e0792a3, order proven by git`` for a confirmatory claim; else why it is
    exploratory, or pending, in a few words (the whole proof is in ``provenance.md``)."""
    if check.pending is not None:
        return "pending: registered runs unfinished"
    pool = check.pool if check.pool is not None else pd.DataFrame()
    if standing is not None and standing.confirmatory:
        regs = sorted(set(pool.get("registration", pd.Series(dtype=str)).dropna().astype(str)))
        commit = regs[0][:7] if regs else "?"
        return f"registered {commit}, order proven by git"
    if not check.confirmation:
        seeds = seed_span(pool["seed"]) if "seed" in pool else ""
        return f"exploratory seeds {seeds}".strip()
    text = standing.text if standing is not None else "not registered"
    while re.search(r"\([^()]*\)", text):  # the reason without its parenthesised detail
        text = re.sub(r"\s*\([^()]*\)", "", text)
    clauses = [s.strip() for s in text.split(";") if s.strip()]
    said = [c.removeprefix("exploratory:").strip() for c in clauses if c.startswith("exploratory")]
    reason = (
        said[0]
        if said
        else clauses[1]
        if len(clauses) > 1 and re.fullmatch(r"registered in \w+", clauses[0])
        else (clauses[0] if clauses else "not registered")
    )
    words = reason.split()
    return "exploratory: " + " ".join(words[:9]) + ("…" if len(words) > 9 else "")


def lead(checks: list[ClaimCheck], unit: str) -> str:
    """The one line above the table."""
    k = len(checks)
    return (
        f"{k} claim(s), each on the seeds that decide it. a − b: difference of the arms' means "
        f"({unit} for a loss) with its 95% t-interval; Holm p over the {k} claim(s): t-test, "
        "then the exact test."
    )


def answer_blocks(
    checks: list[ClaimCheck], unit: str, standings: dict[str, Standing]
) -> list[Block]:
    """The report's opening: the Answer table, then one sentence per claim with its tag
    (nothing here is computed but by the claim engine)."""
    if not checks:
        return [
            Block("h2", "Answer"),
            Block(
                "p", "No claims: the study file states none, so every comparison is exploratory."
            ),
        ]
    table = pd.DataFrame([claim_row(ch, _confirmatory(ch, standings)) for ch in checks])
    items = [
        f"**{ch.claim.id}**: {sentence(ch, unit)} "
        f"*[{tag(ch, standings.get(ch.claim.id))}]({PROVENANCE}#{anchor(ch.claim.id)})*"
        for ch in checks
    ]
    return [
        Block("h2", "Answer"),
        Block("p", lead(checks, unit)),
        Block("table", table, tag="answer"),
        Block("ul", items),
    ]


def _confirmatory(check: ClaimCheck, standings: dict[str, Standing]) -> bool:
    s = standings.get(check.claim.id)
    return bool(s is not None and s.confirmatory)
