"""The claims in full, for ``provenance.md`` (one section per checked claim: its outcome, numbers
and tests, against the paper, registration, attempts and the seeds it was decided on, with what
every seed in the store shows where its confirmation did not decide it; how the claims are
tested; the sequential looks and seed rounds of ``run until-decided``), the LR-optimum table,
the scale line and ``claims.csv``.

The claims are decided in :mod:`ablate.claims` (:mod:`~ablate.claims.outcomes`) and a claim's
outcome is worded there (:mod:`~ablate.claims.verdicts`); this module lays them out.
"""

from __future__ import annotations

import math
from dataclasses import fields

import pandas as pd

from ablate.claims.checks import ClaimCheck, settled
from ablate.claims.fit import BATCH, LR, lr_fit
from ablate.claims.standing import Standing, claim_standings
from ablate.claims.verdicts import (
    ATTEMPT_COLUMNS,
    attempt_columns,
    numbers,
    outcome_text,
    paper_said,
    paper_text,
    seeds_used,
)
from ablate.data.reuse import DataReuse, describe
from ablate.report.answer import seeds_text
from ablate.report.ladder import rungs_text
from ablate.report.render import Block
from ablate.results import DTYPE_PREFIX, REUSE_PREFIX, StudyData


def claim_blocks(
    checks: list[ClaimCheck], unit: str, standings: dict[str, Standing]
) -> list[Block]:
    """Each claim under its own heading (the Answer's tag links it): id, the paper's
    statement, the outcome and the numbers, against the paper, what all seeds show where its
    own did not decide it, how it was registered and which seeds decided it."""
    blocks = []
    for check in checks:
        claim = check.claim
        expect = claim.expect + (f" {claim.value:g}" if claim.value is not None else "")
        tail = [seeds_used(check)]
        if claim.id in standings:
            tail.insert(0, standings[claim.id].text)
        paper = paper_text(check, unit)
        paper = f" Against the paper: {paper}." if paper else ""
        item = (
            f"**{claim.id}** ({claim.metric}, expect {expect}): {claim.text} → "
            f"{outcome_text(check)}: {numbers(check, unit)}.{paper}{pooled_text(check, unit)} "
            f"*{'; '.join(tail)}.*"
        )
        blocks += [Block("h3", f"Claim {claim.id}"), Block("ul", [item])]
    return blocks


def pooled_text(check: ClaimCheck, unit: str) -> str:
    """What every finished seed of the claim's arms shows (exploratory) where its own seeds
    did not decide it by both tests ("" otherwise)."""
    pooled = check.pooled
    if pooled is None or pooled.comparison is None or settled(check.outcome):
        return ""
    if check.pending is not None:
        return ""
    n = seeds_text(pooled.pool, per="arm") if pooled.pool is not None else "all seeds"
    return f" **Exploratory on all seeds** ({n}): {pooled.outcome}: {numbers(pooled, unit)}."


def claims_frame(study: StudyData, checks: list[ClaimCheck], unit: str) -> pd.DataFrame:
    """One row per claim as the report words it (``claims.csv``, W&B's claims table and the
    reports index read it): outcome, numbers, registration standing, seeds and scale."""
    standings = claim_standings(study, checks)
    scale = scale_text(study, lead=False)
    return pd.DataFrame(
        [
            {
                "study": study.name,
                "id": ch.claim.id,
                "claim": ch.claim.text,
                "expect": ch.claim.expect,
                "metric": ch.claim.metric,
                "outcome": ch.outcome,
                "t-test outcome": ch.t_outcome,
                "exact test outcome": ch.exact_outcome,
                "exact test": ch.comparison.exact if ch.comparison is not None else "",
                "numbers": numbers(ch, unit),
                "paper": paper_said(ch, unit),
                "against the paper": paper_text(ch, unit),
                "seeds needed": ch.seeds_needed.text() if ch.seeds_needed else "",
                "registration": standings[ch.claim.id].text,
                "confirmatory": standings[ch.claim.id].confirmatory,
                "decided on": seeds_used(ch),
                **attempt_columns(ch),
                "scale": scale,
            }
            for ch in checks
        ],
        columns=CLAIM_COLUMNS,
    )


CLAIM_COLUMNS = "study id claim expect metric outcome".split() + [
    "t-test outcome",
    "exact test outcome",
    "exact test",
    "numbers",
    "paper",
    "against the paper",
    "seeds needed",
    "registration",
    "confirmatory",
    "decided on",
    *ATTEMPT_COLUMNS,
    "scale",
]


def lr_table(study: StudyData) -> pd.DataFrame | None:
    """Per batch size: LRs swept, best LR of the mean curve, bracketed or not, fitted lr*."""
    axes = set(study.varying_axes)
    if not {BATCH, LR} <= axes:  # the axes the LR fit reads
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


def _span(values: pd.Series, fmt: str = "{:,.0f}") -> str:
    """``a`` or ``a-b`` over the finite values (``?`` when none)."""
    v = pd.to_numeric(values, errors="coerce").dropna()
    if v.empty:
        return "?"
    lo, hi = fmt.format(v.min()), fmt.format(v.max())
    return lo if lo == hi else f"{lo}-{hi}"


def _precision_text(runs: pd.DataFrame) -> str:
    """``, bf16-mixed (matmul bf16, norm fp32, ...)``: the precision the runs asked for and,
    where they recorded it, what each kind of operation computed in."""
    if "cfg.precision" not in runs:
        return ""
    names = sorted(runs["cfg.precision"].dropna().astype(str).unique())
    kinds = [c for c in runs.columns if c.startswith(DTYPE_PREFIX)]
    short = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
    parts = []
    for col in kinds:
        seen = runs[col].dropna().astype(str).unique()
        dtypes = "/".join(sorted(short.get(d, d) for d in seen))
        parts.append(f"{col.removeprefix(DTYPE_PREFIX)} {dtypes}")
    measured = f" ({', '.join(parts)}, measured)" if parts else ""
    return f", {' / '.join(names)}{measured}" if names else ""


def _reuse_text(runs: pd.DataFrame) -> str:
    """``; data: 0.32 windows drawn per distinct window (...), 81.6 passes over ...`` from the
    runs' ``reuse.*`` columns (none where the dataset was not on this machine)."""
    cols = [f"{REUSE_PREFIX}{f.name}" for f in fields(DataReuse)]
    if not all(c in runs for c in cols):
        return ""
    rows = runs[cols].dropna()
    if rows.empty:
        return ""
    reuses = [DataReuse(int(a), int(b), int(c), float(d)) for a, b, c, d in rows.to_numpy()]
    return f"; data: {describe(reuses)}"


def scale_figures(study: StudyData) -> dict[str, str] | None:
    """The scale of the completed runs as the paper tables print it: ``device`` (``CPU``,
    ``GPU`` or ""), ``params``, training ``tokens`` per run (steps x batch x sequence length)
    and ``passes`` over the training tokens ("" where the dataset was not on this machine),
    each a value or a range; None without the columns."""
    r = study.runs[study.runs["status"] == "completed"]
    cols = ("params", "steps", "cfg.batch_size", "cfg.seq_len")
    if r.empty or not all(c in r for c in cols):
        return None
    devices = r.get("env.device", pd.Series(dtype=str)).dropna().astype(str)
    # a CUDA run records its device's name, a CPU run "cpu"
    device = "" if devices.empty else "CPU" if (devices == "cpu").all() else "GPU"
    passes = f"{REUSE_PREFIX}passes"
    return {
        "device": device,
        "params": _span(r["params"]),
        "tokens": _span(r["steps"] * r["cfg.batch_size"] * r["cfg.seq_len"]),
        "passes": _span(r[passes], "{:.2g}") if passes in r and r[passes].notna().any() else "",
    }


def scale_text(study: StudyData, *, lead: bool = True) -> str:
    """The scale every verdict was measured at, computed from the runs: the device, parameters,
    training tokens per run (steps x batch x sequence length), optimizer and LR, and the data
    reuse (``lead``: as the question's scale line, else the bare figures)."""
    scale = scale_figures(study)
    if scale is None:
        return ""
    r = study.runs[study.runs["status"] == "completed"]
    lr = f", peak LR {_span(r['lr'], '{:g}')}" if "lr" in r else ""
    where = f"{scale['device']} " if scale["device"] else ""
    figures = (
        f"{where}scale: {scale['params']} parameters, {_span(r['steps'])} steps of "
        f"{_span(r['cfg.batch_size'])} x {_span(r['cfg.seq_len'])} tokens ({scale['tokens']} "
        f"training tokens per run), AdamW{lr}{_precision_text(r)}{_reuse_text(r)}"
    )
    rungs = rungs_text(r)  # a scale ladder: every rung
    figures += f"; {rungs}" if rungs else ""
    if not lead:
        return figures
    return (
        f"**Scale**: every verdict here holds at this {figures}. The papers' models, budgets "
        "and optimizers differ; no claim's text names a scale, this line is theirs."
    )


def claims_intro(study: StudyData, k: int) -> str:
    """How the claims are tested: the confirmatory family, the outcomes of an equivalence."""
    defaulted = any(c.margin is None and c.expect == "equivalent" for c in study.claims)
    margin = f"; margin ±{study.equivalence_margin:g} unless a claim sets its own" * defaulted
    return (
        "Each claim from the study YAML, checked against the runs when the report was built. "
        f"The claims are the confirmatory family: Holm-corrected over this study's {k} claim "
        "test(s) only (a claim and its reverse are one test), never over the exploratory "
        f"comparisons below, so a claim's verdict does not change when the grid grows{margin}. "
        "An `equivalent` claim "
        "reads *equivalent* (TOST passes: reproduces), *different* (significant, 95% CI wholly "
        "outside ±margin: contradicted), *different but within margin* (significant, 95% CI "
        'inside ±margin: the paper\'s "no difference" holds in practice) or *inconclusive*. '
        "A claim is confirmatory only when it is decided on the confirmation runs of this "
        "profile's registration (registrations/<study>.yaml, `<study>.<profile>.yaml` for a "
        "profile other than cpu: its registered seeds, `ablate run confirm`) and git shows "
        "that registration committed before the first of them; other seeds are exploratory, "
        "and each claim says which. Until every run of the registered design has finished a "
        "claim is *pending, k of n runs*, with no verdict (unless the design registered "
        "interim looks with alpha spending). "
        "Seeds needed are for the test that would decide the claim, at 80% power, assuming the "
        "observed difference and the SD over all the arms' seeds are the true ones."
    )


def looks_blocks(study: StudyData) -> list[Block]:
    """The sequential looks of ``run until-decided`` and the alpha each spent, when logged."""
    from ablate.store.rundir import DECISIONS_FILE, read_decisions

    path = study.path / DECISIONS_FILE
    log = read_decisions(path) if path.is_file() else {}
    looks = log.get("looks") if isinstance(log, dict) else None
    if not looks:
        return []
    d = log.get("design") or {}
    head = (
        f"**Sequential looks** (`ablate run until-decided`): at most {d.get('max_looks', '?')} "
        f"looks, overall α = {d.get('alpha', '?')}, {d.get('spending', '?')} alpha spending; "
        "a claim is decided at a look when its Holm p is below that look's nominal level:"
    )
    items = []
    for lk in looks:
        decided = ", ".join(map(str, lk.get("decided") or [])) or "none"
        items.append(
            f"look {lk.get('look', '?')}: {lk.get('seeds', '?')} seeds "
            f"(information fraction {_g(lk.get('info_fraction'))}); alpha spent so far "
            f"{_g(lk.get('alpha_spent'))}, nominal level {_g(lk.get('nominal_alpha'))}; "
            f"decided: {decided}"
        )
    return [Block("p", head), Block("ul", items)]


def _g(x) -> str:
    return f"{x:.3g}" if isinstance(x, int | float) and not isinstance(x, bool) else "?"


def extra_seeds_section(study: StudyData) -> list[Block]:
    """Which variants ``ablate run until-decided`` gave extra seeds, round by round."""
    extra = extra_seed_items(study)
    if not extra:
        return []
    return [
        Block("h2", "Extra seeds (run until-decided)"),
        Block(
            "p",
            "After the study's seeds, `ablate run until-decided` added seeds only to the "
            "variants of inconclusive comparisons or claims, re-analysing after each round:",
        ),
        Block("ul", extra),
    ]


def extra_seed_items(study: StudyData) -> list[str]:
    """``run until-decided`` rounds from the store's log: which variants got which seed, why."""
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
