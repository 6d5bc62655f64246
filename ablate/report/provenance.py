"""``provenance.md``: what a reviewer audits behind a report, linked from each claim of its
Answer by a short tag and shown as a collapsed section at the end of ``report.html``. Each
claim in full (:func:`ablate.report.claims_section.claim_blocks`: its tests, registration
proof from git, attempts, clock line and input digests), how the claims are tested, the
sequential looks and seed rounds, every version of the registration and every confirmation
attempt (:mod:`ablate.report.audit`), how to read the exploratory comparisons and each of them
in full, the per-variant quality and cost tables, the reproducibility checks and every run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ablate.claims.comparisons import Comparison
from ablate.claims.standing import Standing
from ablate.claims.stats import ALPHA, SEED
from ablate.claims.verdicts import Verdict
from ablate.names import loss_unit
from ablate.report.answer import seeds_text
from ablate.report.audit import audit_blocks
from ablate.report.blocks import explore_seeds, pooled_note
from ablate.report.claims_section import (
    claim_blocks,
    claims_intro,
    extra_seeds_section,
    looks_blocks,
)
from ablate.report.render import Block
from ablate.report.repro import (
    chaotic_variants,
    environment_table,
    reproduced_line,
    reproduced_table,
    reproducibility_text,
)
from ablate.report.tables import comparisons_table, runs_table, variant_tables
from ablate.results import TRAIN_TAIL, StudyData


def provenance_blocks(
    study: StudyData,
    verdicts: list[tuple[Comparison, Verdict]],
    checks: list,
    standings: dict[str, Standing],
    folder: Path,
) -> list[Block]:
    """``provenance.md``, section by section, in the order of the module doc."""
    unit = loss_unit(study).split("/")[0]
    blocks = [
        Block("h1", f"{study.name}: provenance"),
        Block(
            "p",
            "Behind [report.md](report.md): each claim's tests, registration proof and attempts "
            "in full, the exploratory comparisons in full, the reproducibility checks and every "
            "run. Nothing here changes a verdict there.",
        ),
    ]
    if checks:
        k = max((ch.comparison.family for ch in checks if ch.comparison is not None), default=0)
        blocks += [Block("h2", "Claims in full"), Block("p", claims_intro(study, k))]
        blocks += claim_blocks(checks, unit, standings)
        blocks += looks_blocks(study)
    blocks += audit_blocks(study, folder)
    blocks += extra_seeds_section(study)
    blocks += [
        Block("h2", "How to read the exploratory comparisons"),
        Block("p", how_to_read(study)),
    ]
    blocks += comparison_blocks(study, verdicts)
    blocks += variant_blocks(study)
    blocks += reproducibility_blocks(study)
    blocks += [
        Block("h2", "Runs"),
        Block("table", runs_table(study), "Every run in the store for this study.", tag="runs"),
    ]
    return blocks


HOW_TO_READ = (
    "**How to read the comparisons.** Each number is the mean over seeds ± the sample standard "
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


def variant_blocks(study: StudyData) -> list[Block]:
    """Quality and cost per variant, on every seed of the study."""
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
            "Every exploratory comparison: each axis, every pair of its values, all other axes "
            f"held fixed, {explore_seeds(study)}. a − b: "
            "difference of mean final validation loss (negative = a better) with its 95% "
            "t-interval (paired t on per-seed differences when both sides have the same "
            "seeds, else Welch); p raw and Benjamini–Hochberg-corrected over these exploratory "
            "comparisons (BH p; the claims are corrected separately, Holm over the claims); "
            "TOST: equivalence within the margin; the percentile bootstrap CI (9999 "
            f"resamples, seed {SEED}) is secondary and too narrow at few seeds.",
            tag="verdicts",
        ),
        Block("p", pairing_line([c for c, _ in verdicts])),
    ]


def pairing_line(comps: list[Comparison]) -> str:
    """Which tests are paired and why: how many comparisons for each reason."""
    counts = Counter(c.pairing or c.test for c in comps)
    parts = [f"{n} {reason}" for reason, n in counts.most_common()]
    return "**Pairing.** " + "; ".join(parts) + "."


def reproducibility_blocks(study: StudyData) -> list[Block]:
    """How to rebuild the runs, and where they trained."""
    blocks = [Block("h2", "Reproducibility"), Block("p", reproducibility_text(study))]
    from ablate.store.provenance import code_fingerprint, stale_note

    if stale := stale_note(study.path):
        blocks.append(Block("p", f"{stale}."))
    rows = study.reproduced
    if rows is not None:
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
