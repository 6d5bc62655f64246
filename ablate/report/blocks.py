"""``report.md`` as a list of blocks, in its order: title, partial-results marker, the Answer
(:mod:`ablate.report.answer`), each claim's figure on its deciding seeds, the question (the
damaged-run, withdrawn-attempt and stale-code notes, the description, scale and commentary),
then the exploratory comparisons, result tables and pooled figures under a heading naming
their seeds (each caption naming its own). :mod:`ablate.report.provenance` lays out
``provenance.md``; :mod:`ablate.report.render` writes both out as Markdown and HTML.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ablate.claims.comparisons import Comparison
from ablate.claims.standing import Standing, confirm_mask, latest_attempt
from ablate.claims.verdicts import Verdict, verdict
from ablate.names import display_names, format_value, loss_unit, study_key, value_order
from ablate.report.answer import answer_blocks, seed_span, seeds_text
from ablate.report.claims_section import lr_table, scale_text
from ablate.report.plots import FigureFile
from ablate.report.render import PROVENANCE, Block
from ablate.report.tables import comparisons_table, length_table, reference_table, where_text
from ablate.results import StudyData
from ablate.store import UNFINISHED_STATES


def progress_line(study: StudyData) -> str | None:
    """``'PARTIAL: 4 of 12 runs finished; 1 running, 2 pending'`` or None when all finished.
    Unfinished confirmation runs of an earlier attempt (a withdrawn design: the latest attempt
    decides) are nobody's work left, so they are named, not counted as unfinished."""
    kept = study.runs[~_withdrawn(study.runs)] if len(study.runs) else study.runs
    c = replace(study, runs=kept).status_counts()
    present = sum(c.values())
    total = max(present, study.expected_runs or 0)
    finished = c["completed"] + c["diverged"]
    if finished >= total:
        return None
    c["pending"] += total - present  # planned runs not in the store yet
    rest = [f"{c[s]} {s}" for s in UNFINISHED_STATES if c[s]]
    line = f"PARTIAL: {finished} of {total} runs finished; {', '.join(rest)}"
    if c["failed"]:
        line += " (re-run `ablate run` to retry failed runs)"
    return line + ". Numbers below use the finished runs only."


def _withdrawn(runs: pd.DataFrame) -> pd.Series:
    """Unfinished confirmation runs of an attempt that is not the latest."""
    unfinished = runs["status"].isin(UNFINISHED_STATES)
    return confirm_mask(runs) & ~latest_attempt(runs) & unfinished


def withdrawn_note(study: StudyData) -> str | None:
    """One line naming the unfinished runs of earlier confirmation attempts, if any."""
    runs = study.runs
    withdrawn = _withdrawn(runs) if len(runs) else None
    if withdrawn is None or not withdrawn.any():
        return None
    tags = ", ".join(sorted({str(t)[:7] for t in runs.loc[withdrawn, "registration"]}))
    return (
        f"{int(withdrawn.sum())} unfinished confirmation run(s) of an earlier attempt (under "
        f"{tags}) stay in the store as that attempt's record; the latest attempt decides the "
        "claims, so they are not work left (their record: provenance.md)."
    )


def _axes_line(study: StudyData) -> str:
    parts = []
    for a in study.axes:
        vals = ", ".join(format_value(v) for v in value_order(study.runs[a]))
        key = study_key(a)  # as the study names it (axis.variant: its `variants:`)
        parts.append(f"`{key}` ({vals})" if a in study.varying_axes else f"`{key}` = {vals}")
    n_var = study.runs["variant"].nunique()
    seeds = study.runs.groupby("variant")["seed"].nunique()
    seed_txt = (
        f"{int(seeds.iloc[0])} seeds"
        if seeds.nunique() == 1
        else f"{seeds.min()}–{seeds.max()} seeds"
    )
    axes = "; axes: " + "; ".join(parts) if parts else ""
    return (
        f"{len(study.runs)} runs: {n_var} variant(s) × {seed_txt}{axes}. "
        f"Compared metric: final validation loss ({loss_unit(study)}, from the final "
        "evaluation after training)."
    )


_ORDER = {"better": 0, "worse": 0, "diverged": 1, "equivalent": 2, "inconclusive": 3, "too_few": 4}
MAX_HEADLINES = 15


def verdict_list(study: StudyData, comps: list[Comparison]) -> list[tuple[Comparison, Verdict]]:
    """Each exploratory comparison with its verdict in words, as the report, its tables and
    W&B show it (computed once per report)."""
    unit = loss_unit(study).split("/")[0]
    return [(c, verdict(c, unit=unit, where=where_text(c, study))) for c in comps]


def build_blocks(
    study: StudyData,
    verdicts: list[tuple[Comparison, Verdict]],
    figures: list[FigureFile],
    checks: list | None = None,
    standings: dict[str, Standing] | None = None,
    claim_figures: list[FigureFile] | None = None,
) -> list[Block]:
    """``report.md``, section by section: the Answer (:mod:`ablate.report.answer`), each claim's
    figure on its deciding seeds, the question and its scale, then the exploratory
    comparisons, tables and figures under a heading naming their seeds. Registration proofs,
    attempts, the tests in full and every run are :mod:`ablate.report.provenance`'s."""
    checks, standings = checks or [], standings or {}
    unit = loss_unit(study).split("/")[0]
    blocks = [Block("h1", f"{study.name}: ablation report")]
    partial = progress_line(study)
    if partial:
        blocks.append(Block("note", f"**{partial}**"))
    blocks += answer_blocks(checks, unit, standings)
    if claim_figures:
        blocks.append(Block("h2", "Each claim on its deciding seeds"))
        blocks += [Block("fig", f, f"{f.caption} Seeds: {f.seeds}.") for f in claim_figures]
    blocks += question_blocks(study)
    blocks += exploratory_blocks(study, verdicts, figures)
    blocks.append(
        Block(
            "p",
            f"Registration proofs, attempts, every test in full, the reproducibility checks and "
            f"every run: [{PROVENANCE}]({PROVENANCE}).",
        )
    )
    return blocks


def notes_blocks(study: StudyData) -> list[Block]:
    """The damaged runs skipped, the withdrawn-attempt and stale-code notes, in a line each
    (the details are in provenance.md)."""
    blocks = []
    if study.damaged:
        blocks += [
            Block("note", f"**{len(study.damaged)} damaged run(s) skipped** (unreadable files):"),
            Block("ul", [str(reason) for reason in study.damaged.values()]),
        ]
    if withdrawn := withdrawn_note(study):
        blocks.append(Block("note", withdrawn))
    # runs made by other model/training code
    from ablate.store.provenance import stale_note

    if stale := stale_note(study.path):
        blocks.append(Block("note", f"**{stale}**."))
    return blocks


def question_blocks(study: StudyData) -> list[Block]:
    """The notes on its runs (damaged, withdrawn, stale), the study's question (its
    description), its runs and axes, the scale every verdict holds at, and the hand-written
    commentary."""
    blocks = [Block("h2", "Question"), *notes_blocks(study)]
    if study.description:
        blocks.append(Block("p", study.description))
    blocks.append(Block("p", _axes_line(study)))
    scale = scale_text(study)
    if scale:
        blocks.append(Block("p", scale))
    if study.findings:
        lead = "**Commentary** (hand-written): " if study.claims else ""
        blocks.append(Block("p", lead + study.findings))
    return blocks


def exploratory_blocks(
    study: StudyData, verdicts: list[tuple[Comparison, Verdict]], figures: list[FigureFile]
) -> list[Block]:
    """The exploratory comparisons (the strongest :data:`MAX_HEADLINES`; every one in full in
    provenance.md), the result tables and the pooled figures, each naming its seeds."""
    explore = study.runs[~confirm_mask(study.runs) & (study.runs["status"] == "completed")]
    heading = f"Exploratory comparisons (seeds {seed_span(explore['seed']) or 'none'})"
    blocks = [Block("h2", heading), Block("p", verdicts_line(study, verdicts))]
    if verdicts:
        ranked = sorted(verdicts, key=lambda cv: _ORDER[cv[1].kind])
        shown = ranked[:MAX_HEADLINES]
        more = len(ranked) - len(shown)
        rest = f"; {more} more in [{PROVENANCE}]({PROVENANCE}#comparisons)" if more else ""
        blocks.append(
            Block(
                "table",
                short_comparisons(shown, study),
                f"Strongest first{rest}. a − b: difference of mean final validation loss "
                "(negative: a lower) with its 95% t-interval; BH p: Benjamini–Hochberg over "
                "these comparisons.",
            )
        )
    blocks += result_tables(study)
    seeds = seeds_text(study.runs)
    if figures and (note := pooled_note(study)):
        blocks.append(Block("p", f"The figures below pool every seed ({seeds}).{note}"))
    for f in figures:
        blocks.append(Block("fig", f, f"{f.caption} Seeds: {f.seeds or seeds}."))
    return blocks


def verdicts_line(study: StudyData, verdicts: list[tuple[Comparison, Verdict]]) -> str:
    """What the exploratory comparisons are, and how many of each verdict."""
    if not verdicts:
        why = "no axis varies" if not study.varying_axes else "no finished runs to compare yet"
        return f"No comparisons: {why}."
    named = {"better": "with a winner", "worse": "with a winner", "too_few": "too few seeds"}
    kinds = pd.Series([named.get(v.kind, v.kind) for _, v in verdicts]).value_counts()
    tally = ", ".join(f"{int(n)} {k.replace('_', ' ')}" for k, n in kinds.items())
    names = display_names(study.axes)
    lone = [names[a] for a in study.varying_axes if not any(c.axis == a for c, _ in verdicts)]
    alone = (
        f" No pair of finished runs differs in {', '.join(lone)} alone, so none compares it."
        if lone
        else ""
    )
    claims = " (the claims above are)" if study.claims else ""
    return (
        "Every pair of values along every axis, other axes fixed, on the study's own runs "
        f"({explore_seeds(study)}): exploratory, never a finding by themselves{claims}; "
        f"Benjamini–Hochberg within this report. {len(verdicts)} comparison(s): {tally}.{alone}"
    )


def short_comparisons(verdicts: list[tuple[Comparison, Verdict]], study: StudyData) -> pd.DataFrame:
    """The exploratory comparisons' columns a reader needs (the rest: provenance.md)."""
    full = comparisons_table(verdicts, study)
    bh = next(c for c in full.columns if c.endswith(" p") and not c.startswith(("p", "TOST")))
    full["a − b [95% CI]"] = full["a − b"] + " " + full["95% t-CI"]
    keep = ["axis", "held fixed", "a vs b", "n (diverged)", "a − b [95% CI]", bh, "verdict"]
    if (full["held fixed"] == "—").all():
        keep.remove("held fixed")
    return full[keep]


def result_tables(study: StudyData) -> list[Block]:
    """The optimum LR per batch size, against the reference value, and over evaluation
    lengths, where the study has them."""
    blocks = []
    table = lr_table(study)
    if table is not None:
        blocks.append(Block("table", table, LR_CAPTION))
    if study.reference is not None:
        ref = study.reference
        blocks.append(
            Block(
                "table",
                reference_table(study),
                f"Against the reference value ({ref.label}: {ref.value:g}): final validation "
                f"loss per variant ({seeds_text(study.runs)}) minus {ref.value:g}, with its 95% "
                "t-interval over seeds and the two-sided one-sample t-test "
                "(scipy.stats.ttest_1samp); 'not distinguishable' when the interval includes 0.",
            )
        )
    lengths = length_table(study)
    if lengths is not None:
        blocks.append(
            Block(
                "table",
                lengths,
                "Validation loss at multiples of the training length, "
                f"{seeds_text(study.runs)}: mean ± std [95% t-CI over seeds]. A model whose "
                "positions stop at its max_seq_len (learned absolute positions) cannot be "
                "evaluated past it (n/a).",
            )
        )
    return blocks


LR_CAPTION = (
    "Optimum LR per batch size: the vertex of a quadratic in log10(lr) fitted per seed around "
    "the sweep's lowest loss; mean over seeds with its 95% t-interval. An optimum at the edge "
    "of the sweep is not bracketed and gives no fit; 'per seed: k/n' counts the seeds whose "
    "own sweep brackets (and fits) it."
)


def explore_seeds(study: StudyData) -> str:
    """The seeds of the exploratory comparisons: the study's runs without its confirmation
    runs (:func:`ablate.claims.outcomes.analyse`)."""
    return seeds_text(study.runs[~confirm_mask(study.runs)])


def pooled_note(study: StudyData) -> str:
    """Said of a table or figure drawn from every seed of the study when its claims are decided
    on their confirmation seeds: a pooled view is exploratory."""
    if not study.claims or not confirm_mask(study.runs).any():
        return ""
    return (
        " A pooled view of every seed in the store: exploratory (each claim is decided on its "
        "own seeds, named in the Answer and drawn on them above)."
    )
