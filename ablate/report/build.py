"""Build a study's report folder: the stage's modules put in order, written atomically.

``build_report`` writes ``<out>/<study>/`` (``results.csv``, ``claims.csv``, ``answer.csv``,
``report.md``, ``provenance.md``, ``report.html``, ``table.md``, ``table.tex``, the PNG figures)
in a temporary directory next to it and swaps it in by rename, then logs the same tables and
figures to W&B; ``build_reports`` does it for the studies named (or all in a store), rewrites
the claims index (:mod:`ablate.report.index`) and the tables across studies and scales
(:mod:`ablate.report.scales_table`), and fills the README's example
(:mod:`ablate.report.readme`).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

from ablate.claims.checks import RUN_METRICS
from ablate.claims.outcomes import analyse
from ablate.claims.standing import claim_standings
from ablate.names import display_names, loss_unit
from ablate.report.audit import HISTORY
from ablate.report.axis_figures import axis_figures
from ablate.report.blocks import build_blocks, progress_line, verdict_list
from ablate.report.claim_figure import claim_figures
from ablate.report.claims_section import claims_frame
from ablate.report.dashboards import write_specs
from ablate.report.declared import declared_figures
from ablate.report.index import CLAIMS_CSV, write_index
from ablate.report.keep import PARTIAL_DIR, keep_reason
from ablate.report.paper_tables import write_paper_tables
from ablate.report.plots import make_figures
from ablate.report.provenance import provenance_blocks
from ablate.report.readme import fill_readme
from ablate.report.render import PROVENANCE, to_html, to_markdown
from ablate.report.repro import REPRODUCE_CSV, reproduced
from ablate.report.scales_table import write_scales_table
from ablate.report.wandb_report import comparisons_frame, log_report
from ablate.results import StudyData, read_study, resolve_studies, results_frame

KEPT_DIRS = (HISTORY, "archive", REPRODUCE_CSV[0])
"""Folders of ``reports/<study>/`` a rebuild keeps: the result tables of earlier confirmation
attempts (:mod:`ablate.report.audit`), the archived store they were built from, and what
``ablate reproduce`` found retraining some of its runs."""


def build_report(study: StudyData, out: Path, *, force: bool = False) -> Path:
    """Write ``out/<study>/`` for one loaded study; returns the path of its ``report.md``
    (under ``out/<study>/partial/`` when a committed report is kept: :mod:`.keep`)."""
    return _build(study, out, force)[0]


def _build(study: StudyData, out: Path, force: bool) -> tuple[Path, str | None]:
    """:func:`build_report`, and why the committed report was kept (None: it was replaced)."""
    out = Path(out)
    dest = out / study.name
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{study.name}.", suffix=".tmp", dir=out))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private
        for keep in KEPT_DIRS:  # earlier attempts and archives outlive a rebuild
            if (dest / keep).is_dir():
                shutil.copytree(dest / keep, tmp / keep)
        table = results_frame(study)
        for metric, compute in RUN_METRICS.items():  # claim metrics computed from the logs,
            values = compute(study.metrics)  # so that a claim on one recomputes from the csv
            if len(values):
                table[metric] = table["run_id"].map(values)
        table.to_csv(tmp / "results.csv", index=False)
        # earlier attempts, counted per claim; archived runs retrained with newer code
        study = replace(study, history_dir=tmp / HISTORY, reproduced=reproduced(tmp))
        comps, checks = analyse(study)
        verdicts = verdict_list(study, comps)
        claims = claims_frame(study, checks, loss_unit(study).split("/")[0])
        if len(claims):
            claims.to_csv(tmp / CLAIMS_CSV, index=False)
        standings = claim_standings(study, checks)
        figures = make_figures(study, tmp) + declared_figures(study, tmp)
        figures += axis_figures(study, tmp)
        by_claim = claim_figures(study, checks, tmp)  # each claim on its own seeds
        blocks = build_blocks(study, verdicts, figures, checks, standings, by_claim)
        prov = provenance_blocks(study, verdicts, checks, standings, tmp)
        (tmp / "report.md").write_text(to_markdown(blocks))
        (tmp / PROVENANCE).write_text(to_markdown(prov))
        title = f"{study.name}: ablation report"
        (tmp / "report.html").write_text(to_html(blocks, title, collapsed=prov))
        write_paper_tables(study, checks, standings, tmp)  # table.md, table.tex, answer.csv
        write_specs(study, blocks + prov, tmp)  # wandb_workspace.json, wandb_report.json
        kept = None if force else keep_reason(dest, progress_line(study), claims)
        if kept is not None:  # the committed folder stays as it is; this build goes beside it
            shutil.rmtree(tmp / "archive", ignore_errors=True)  # the committed one has it
            (tmp / ".gitignore").write_text("*\n")  # never committed by `git add reports`
            dest = dest / PARTIAL_DIR
        _swap_in(tmp, dest)
        figures = [replace(f, path=dest / f.path.name) for f in figures + by_claim]
        log_report(study, wandb_tables(study, verdicts, claims), figures)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest / "report.md", kept


def wandb_tables(study: StudyData, verdicts: list, claims: pd.DataFrame) -> dict:
    """The verdicts (:func:`ablate.report.blocks.verdict_list`) and claims as tables for W&B
    (the same rows as report.md)."""
    table = comparisons_frame(verdicts, display_names(study.axes))
    keep = ["id", "claim", "expect", "metric", "outcome", "seeds needed", "numbers"]
    return {"verdicts": table, "claims": claims[keep]}


def _swap_in(new: Path, dest: Path) -> None:
    """Replace directory ``dest`` by ``new`` with renames (the old one is removed after)."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.replace(dest, old)
    os.replace(new, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def build_reports(
    studies: list[str],
    *,
    store: Path,
    out: Path,
    quiet: bool = False,
    profile: str | None = None,
    force: bool = False,
) -> list[Path]:
    """Build the reports of ``studies`` (names in the store or study YAMLs; empty = all), from
    the runs of ``profile`` (None: the one profile each study's runs have). A partial build of
    a committed report goes to ``<out>/<study>/partial/`` and keeps the committed one (one line
    says so), unless ``force`` (:mod:`ablate.report.keep`); the other studies go on.

    Returns the ``report.md`` paths. Raises ``ConfigError`` (one line) for an empty or missing
    store, an unknown study (listing the studies present), or runs of several profiles.
    """
    store, out = Path(store), Path(out)
    paths, replaced = [], 0
    for name, yaml_path in resolve_studies(list(studies or []), store):
        study = read_study(store, name, yaml_path, profile)
        if study.spec_problem:  # one line: the report lacks claims and description
            print(f"warning: {name}: {study.spec_problem}", file=sys.stderr)
        path, kept = _build(study, out, force)
        paths.append(path)
        if kept is not None:  # said even when quiet: the committed report was not rebuilt
            print(
                f"{name}: kept the committed report {path.parent.parent}/ ({kept}); this "
                f"build is in {path.parent}/ (`--force` replaces the committed one)",
                file=sys.stderr,
            )
            continue
        replaced += 1
        if not quiet:
            partial = progress_line(study)
            note = f"  ({partial.split('.')[0]})" if partial else ""
            print(f"{name}: {path.parent}/ (report.md, provenance.md, report.html){note}")
            for reason in study.damaged.values():
                print(f"  damaged run skipped: {reason}")
    # the index is read from every <study>/claims.csv: with no report replaced it stays as it is
    index = write_index(out) if replaced else None
    table = write_scales_table(out) if replaced else None
    if not quiet:
        for what, path in (("every report's claims", index), ("claims across scales", table)):
            if path is not None:
                print(f"{what}: {path}")
    for path in paths:  # the README beside the reports folder shows an Answer, never typed
        if path.parent.parent == out and fill_readme(
            out.parent / "README.md", path.parent.name, path
        ):
            if not quiet:
                print(f"README example: {out.parent / 'README.md'} ({path.parent.name})")
    return paths
