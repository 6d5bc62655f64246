"""The report as a list of blocks, in its order: title, partial-results marker, the claims
table (:mod:`ablate.report.answer`), description, against the paper, how to read, headline
verdicts, extra seeds, tables, figures with captions (each naming its seeds), reproducibility
and the list of runs. :mod:`ablate.report.render` writes the blocks out as Markdown and HTML.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pandas as pd

from ablate.claims.comparisons import Comparison
from ablate.claims.standing import confirm_mask, latest_attempt
from ablate.claims.stats import ALPHA, SEED
from ablate.claims.verdicts import Verdict, verdict
from ablate.names import display_names, format_value, loss_unit, study_key, value_order
from ablate.report.answer import answer_blocks, claims_summary, seeds_text
from ablate.report.claims_section import against_the_paper, extra_seeds_section
from ablate.report.plots import FigureFile
from ablate.report.render import Block
from ablate.report.repro import (
    chaotic_variants,
    environment_table,
    reproduced_line,
    reproduced_table,
    reproducibility_text,
)
from ablate.report.tables import (
    comparisons_table,
    length_table,
    reference_table,
    runs_table,
    variant_tables,
    where_text,
)
from ablate.results import TRAIN_TAIL, StudyData
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
        "claims, so they are not work left (see Registration and confirmation attempts)."
    )


HOW_TO_READ = (
    "**How to read this report.** Each number is the mean over seeds ± the sample standard "
    "deviation, then the 95% t-interval over seeds [lo, hi] (mean ± t·s/√n); n is the number of "
    "seeds behind it. Lower loss is better. Comparisons pair variants that differ in one axis "
    "only, everything else fixed: a paired t-test on per-seed differences when both sides have "
    "the same seeds and a seed gives both the same token stream, else Welch's t-test (the "
    "Pairing line under the comparisons says which and why); the interval is the 95% t-interval "
    "of the difference. {claims}the comparisons below are exploratory, Benjamini–Hochberg "
    "corrected (false discovery rate) within this report: they suggest, they do not confirm. "
    "Verdicts use the corrected p (α = {alpha:g}): *better*/*worse* when it "
    "is below α, *equivalent within ±m* when the two one-sided tests (TOST) against the study's "
    "equivalence margin m pass, otherwise *inconclusive*, with the seeds per variant that would "
    "decide it at 80% power. Diverged runs are counted and reported, never averaged in. Figure "
    "bands and bars are the same 95% t-intervals over seeds; the percentile bootstrap CI (seed "
    "{seed}) is a secondary column only."
)


def how_to_read(study: StudyData) -> str:
    """The reading guide; it points at the claims only when the report has some."""
    claims = (
        "The study's claims (above) are the confirmatory family, Holm–Bonferroni corrected over "
        "the claims only; "
        if study.claims
        else "This report checks no claims (the study file names none, or was not found); "
    )
    return HOW_TO_READ.format(claims=claims, alpha=ALPHA, seed=SEED)


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
    confirmatory: dict[str, bool] | None = None,
    claim_figure: FigureFile | None = None,
) -> list[Block]:
    """The whole report, section by section, in the order of this module's docstring, from the
    exploratory comparisons' :func:`verdict_list` and the decided claims (``checks``, with
    whether each is confirmatory, and their figure on their own seeds)."""
    unit = loss_unit(study).split("/")[0]
    head = header_blocks(study)
    at = len(head) - 1 if study.description else len(head)  # the answer before the question
    top = answer_blocks(study, checks or [], unit, confirmatory or {})
    top += claims_summary(study, checks or [], unit)
    if claim_figure is not None:
        top.append(Block("fig", claim_figure, f"{claim_figure.caption} Seeds: each panel's own."))
    head[at:at] = top
    return [
        *head,
        *against_the_paper(study, checks or [], unit),
        Block("p", how_to_read(study)),
        Block("p", _axes_line(study)),
        *verdict_blocks(study, verdicts),
        *extra_seeds_section(study),
        *variant_blocks(study),
        *comparison_blocks(study, verdicts),
        *figure_blocks(figures, study),
        *reproducibility_blocks(study),
        Block("h2", "Runs"),
        Block("table", runs_table(study), "Every run in the store for this study."),
    ]


def header_blocks(study: StudyData) -> list[Block]:
    """Title, the partial-results and stale-code notes, the study's description."""
    blocks = [Block("h1", f"{study.name}: ablation report")]
    partial = progress_line(study)
    if partial:
        blocks.append(Block("note", f"**{partial}**"))
    if withdrawn := withdrawn_note(study):
        blocks.append(Block("note", withdrawn))
    # runs made by other model/training code
    from ablate.store.provenance import code_fingerprint, stale_note

    if stale := stale_note(study.path):
        rows = study.reproduced
        if rows is not None:
            stale += ". " + reproduced_line(rows, code_fingerprint())
        blocks.append(Block("note", f"**{stale}**"))
    if study.description:
        blocks.append(Block("p", study.description))
    return blocks


def verdict_blocks(study: StudyData, verdicts: list[tuple[Comparison, Verdict]]) -> list[Block]:
    """The headline verdicts, strongest first, and how many of each kind."""
    names = display_names(study.axes)
    blocks = [Block("h2", "Verdicts (exploratory)")]
    if not verdicts:
        why = "no axis varies" if not study.varying_axes else "no finished runs to compare yet"
        blocks.append(Block("p", f"No comparisons: {why}."))
        return blocks
    ranked = sorted(verdicts, key=lambda cv: _ORDER[cv[1].kind])
    shown = ranked[:MAX_HEADLINES]
    items = [f"**{names.get(c.axis, c.axis)}**: {v.text}" for c, v in shown]
    if len(ranked) > len(shown):
        items.append(f"… {len(ranked) - len(shown)} more in the comparisons table below.")
    for axis in study.varying_axes:
        if not any(c.axis == axis for c, _ in verdicts):
            items.append(
                f"**{names[axis]}**: no pair of finished runs differs in this axis alone "
                "(its values never share the other axes' values), so no comparison."
            )
    blocks.append(
        Block(
            "p",
            "Every pair of values along every axis, other axes fixed: exploratory, BH-corrected "
            "within this report, never a finding by themselves"
            + (" (the claims above are)" if study.claims else "")
            + f"; on the study's own runs: {_explore_seeds(study)}.",
        )
    )
    blocks.append(Block("ul", items))
    named = {"better": "with a winner", "worse": "with a winner", "too_few": "too few seeds"}
    kinds = pd.Series([named.get(v.kind, v.kind) for _, v in verdicts]).value_counts()
    blocks.append(
        Block(
            "p",
            f"{len(verdicts)} comparison(s): "
            + ", ".join(f"{int(n)} {k.replace('_', ' ')}" for k, n in kinds.items())
            + ".",
        )
    )
    return blocks


def variant_blocks(study: StudyData) -> list[Block]:
    """Quality and cost per variant; against the reference value and over evaluation lengths
    when the study has them."""
    quality, cost = variant_tables(study)
    blocks = [
        Block("h2", "Results per variant"),
        Block(
            "table",
            quality,
            f"Validation quality per variant, {seeds_text(study.runs)}: mean ± std [95% t-CI "
            "over seeds]; n = completed seeds behind the numbers; diverged runs counted (step of "
            "divergence), not averaged. Final train loss: the mean logged training loss over "
            f"the last {TRAIN_TAIL:.0%} of steps (one batch per log step, dropout on); val − "
            "train: the final val loss minus it, the train/val gap (past the best val loss it "
            f"grows as a run overfits).{pooled_note(study)}",
        ),
        Block(
            "table",
            cost,
            f"Cost per variant, {seeds_text(study.runs)}: mean ± std [95% t-CI over seeds]; "
            "params: per run (the same for every seed).",
        ),
    ]
    if study.reference is not None:
        ref = study.reference
        blocks.append(Block("h2", f"Against the reference value ({ref.label}: {ref.value:g})"))
        blocks.append(
            Block(
                "table",
                reference_table(study),
                f"Final validation loss per variant ({seeds_text(study.runs)}) minus the "
                f"reference {ref.value:g} "
                f"({ref.label}): difference with its 95% t-interval over seeds and the "
                "two-sided one-sample t-test (scipy.stats.ttest_1samp); negative = below the "
                "reference. 'not distinguishable' when the interval includes 0.",
            )
        )
    lengths = length_table(study)
    if lengths is not None:
        blocks.append(Block("h2", "Length extrapolation"))
        blocks.append(
            Block(
                "table",
                lengths,
                "Validation loss when evaluated at multiples of the training length, "
                f"{seeds_text(study.runs)}: mean ± std [95% t-CI over seeds]. A model whose "
                "positions stop at its max_seq_len (learned absolute positions) cannot be "
                "evaluated past it (n/a).",
            )
        )
    return blocks


def comparison_blocks(study: StudyData, verdicts: list[tuple[Comparison, Verdict]]) -> list[Block]:
    """Every comparison with its numbers (none when nothing could be compared)."""
    if not verdicts:
        return []
    return [
        Block("h2", "Comparisons"),
        Block(
            "table",
            comparisons_table(verdicts, study),
            f"Each axis, every pair of its values, all other axes held fixed, "
            f"{_explore_seeds(study)}. a − b: "
            "difference of mean final validation loss (negative = a better) with its 95% "
            "t-interval (paired t on per-seed differences when both sides have the same "
            "seeds, else Welch); p raw and Benjamini–Hochberg-corrected over these exploratory "
            "comparisons (BH p; the claims are corrected separately, Holm over the claims); "
            "TOST: equivalence within the margin; the percentile bootstrap CI (9999 "
            f"resamples, seed {SEED}) is secondary and too narrow at few seeds.",
        ),
        Block("p", pairing_line([c for c, _ in verdicts])),
    ]


def pairing_line(comps: list[Comparison]) -> str:
    """Which tests are paired and why: how many comparisons for each reason."""
    counts = Counter(c.pairing or c.test for c in comps)
    parts = [f"{n} {reason}" for reason, n in counts.most_common()]
    return "**Pairing.** " + "; ".join(parts) + "."


def _explore_seeds(study: StudyData) -> str:
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
        "own seeds, named in the claims table and drawn beside it)."
    )


def figure_blocks(figures: list[FigureFile], study: StudyData) -> list[Block]:
    """The figures, each caption ending with the one seed set it draws: a claim's own, or every
    run of the study (pooled, labelled exploratory when the claims are decided on others)."""
    if not figures:
        return []
    seeds, note = seeds_text(study.runs), pooled_note(study)
    return [
        Block("h2", "Figures"),
        *(
            Block(
                "fig",
                f,
                f"{f.caption} Seeds: {f.seeds}."
                if f.seeds
                else f"{f.caption} Seeds: {seeds}.{note}",
            )
            for f in figures
        ),
    ]


def reproducibility_blocks(study: StudyData) -> list[Block]:
    """How to rebuild the runs, and where they trained."""
    blocks = [Block("h2", "Reproducibility"), Block("p", reproducibility_text(study))]
    rows = study.reproduced
    if rows is not None:
        from ablate.store.provenance import code_fingerprint

        chaotic = [v for v, _, _ in chaotic_variants(study)]
        blocks.append(
            Block(
                "table",
                reproduced_table(rows, chaotic),
                reproduced_line(rows, code_fingerprint())
                + " Each run was retrained alone from the config it recorded (same seed, data "
                "and torch thread count, W&B off) and compared on its final validation loss: "
                "identical (the same float), within tolerance (at most the tolerance: below the "
                "4 decimals the tables print) or different; 'in seed sd': the difference over "
                "its variant's seed standard deviation. A chaotic variant's runs amplify "
                "float-reduction order (threads, worker layout): its digits may not reproduce.",
            )
        )
    env = environment_table(study)
    if env is not None:
        blocks.append(
            Block(
                "table",
                env,
                "Where the runs trained: library versions, device, torch threads and how many "
                "runs trained at once (workers); float results can differ across these.",
            )
        )
    return blocks
