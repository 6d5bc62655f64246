"""A study's paper table, ``table.md`` and ``table.tex`` (booktabs), and ``answer.csv``, the
Answer's rows as data (what :mod:`ablate.report.scales_table` puts side by side across studies
and scales).

The paper table has one row per arm or cell: each variant of the study and each published arm
a claim compares against; per claim metric, the mean ± the half-width of its 95% t-interval
over the row's n seeds: the seeds its claims were decided on (a row no claim decides: the
study's exploratory seeds), the lowest loss of a column in bold; and the claims the row takes
part in, each marked with what decided it: ``*`` the t-test (Holm over the claims), ``†`` the
exact test. Every number is computed here from the store's runs or is the claim engine's.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.claims.checks import ClaimCheck, metric_column, settled
from ablate.claims.spec import FITTED
from ablate.claims.standing import Standing, confirm_mask
from ablate.claims.stats import mean_ci
from ablate.names import variant_order
from ablate.report.answer import claim_row, effect_of, seed_span, tag
from ablate.report.claims_section import scale_figures
from ablate.report.latex import booktabs, marks
from ablate.report.render import md_table
from ablate.results import StudyData

TABLE_MD, TABLE_TEX, ANSWER_CSV = "table.md", "table.tex", "answer.csv"
ANSWER_COLUMNS = [
    "study", "id", "kind", "x", "y", "sign", "condition", "effect", "lo", "hi", "n",
    "Holm p", "exact Holm p", "verdict", "t-test decides", "exact test decides", "confirmatory",
    "tag", "device", "params", "tokens", "passes",
]  # fmt: skip


def _metrics(checks: list[ClaimCheck]) -> list[str]:
    """The per-run metric columns the claims compare (the fitted ones excluded); the final
    validation loss when there is none."""
    cols = [metric_column(ch.claim) for ch in checks if ch.claim.metric not in FITTED]
    return list(dict.fromkeys(cols)) or ["final_val_loss"]


def _is_loss(col: str) -> bool:
    return col in ("final_val_loss", "best_val_loss") or col.startswith("val_loss_at_")


def _deciding_runs(study: StudyData, checks: list[ClaimCheck]) -> dict[str, pd.DataFrame]:
    """Per variant, the runs its claims were decided on (a confirmation pool first); a variant
    in no claim: the study's exploratory runs of it."""
    runs = study.runs
    out: dict[str, pd.DataFrame] = {}
    for ch in sorted(checks, key=lambda c: not c.confirmation):
        if ch.pool is None or "variant" not in ch.pool:
            continue
        for variant, g in ch.pool.groupby("variant", sort=False):
            out.setdefault(str(variant), g)
    explore = runs[~confirm_mask(runs)]
    for variant in variant_order(runs):
        if variant not in out:
            out[variant] = explore[explore["variant"] == variant]
    return out


def _cell(values, loss: bool) -> tuple[str, float]:
    """``2.2651 ± 0.0046`` (mean ± the half-width of its 95% t-interval) and the mean."""
    v = pd.to_numeric(pd.Series(list(values)), errors="coerce").dropna()
    v = v[np.isfinite(v)]
    if v.empty:
        return "—", math.nan
    m, lo, _ = mean_ci(v)
    fmt = "{:.4f}" if loss else "{:.3g}"
    if not math.isfinite(lo):
        return fmt.format(m), m
    return f"{fmt.format(m)} ± {fmt.format(m - lo)}", m


def _marks(check: ClaimCheck) -> str:
    return ("*" if settled(check.t_outcome) else "") + (
        "†" if check.exact_outcome and settled(check.exact_outcome) else ""
    )


def paper_rows(study: StudyData, checks: list[ClaimCheck]) -> tuple[pd.DataFrame, set]:
    """(the paper table, its bold cells as ``(row, column)``): module doc."""
    cols, deciding = _metrics(checks), _deciding_runs(study, checks)
    rows = []
    for variant, g in deciding.items():
        done = g[g["status"] == "completed"]
        row = {"arm": variant}
        means = {}
        for col in cols:
            row[col], means[col] = _cell(done[col] if col in done else [], _is_loss(col))
        in_claims = [
            f"{k}{_marks(ch)}"
            for k, ch in enumerate(checks, 1)
            if ch.pool is not None and variant in set(ch.pool.get("variant", []))
        ]
        rows.append((row | _seeds(done) | {"claims": ", ".join(in_claims)}, means))
    for k, ch in enumerate(checks, 1):  # a published arm: its numbers, as the claim has them
        c = ch.comparison
        if c is None or not ch.claim.external or not c.b:
            continue
        col = metric_column(ch.claim)
        text, m = _cell(c.b, _is_loss(col))
        row = {"arm": f"{c.label_b} (published)"} | {x: "—" for x in cols} | {col: text}
        rows.append((row | {"n": str(len(c.b)), "seeds": "—", "claims": f"{k}"}, {col: m}))
    table = pd.DataFrame([r for r, _ in rows])
    bold = set()
    for j, col in enumerate(table.columns):
        if col in cols and _is_loss(col):
            means = pd.Series([m.get(col, math.nan) for _, m in rows], dtype=float)
            if means.notna().any():
                bold |= {(i, j) for i in np.flatnonzero(means == means.min())}
    return table, bold


def _seeds(done: pd.DataFrame) -> dict[str, str]:
    return {"n": str(done["seed"].nunique()), "seeds": seed_span(done["seed"]) or "—"}


def legend(checks: list[ClaimCheck], study: StudyData) -> str:
    """The table's caption: what the cells are and each numbered claim with its verdict."""
    claims = "; ".join(f"{k} {ch.claim.id} ({ch.outcome})" for k, ch in enumerate(checks, 1))
    claims = f" Claims: {claims}." if checks else ""
    return (
        f"{study.name}: mean ± the half-width of the 95% t-interval over the n seeds each row's "
        "claims were decided on (seeds; a row no claim decides: the exploratory seeds); bold: "
        f"the lowest loss of a column.{claims} Marks: * the t-test decides the claim, † the "
        "exact test does (each Holm over the study's claims)."
    )


def write_paper_table(study: StudyData, checks: list[ClaimCheck], folder: Path) -> None:
    """``table.md`` and ``table.tex`` in ``folder``."""
    table, bold = paper_rows(study, checks)
    caption = legend(checks, study)
    shown = table.copy()
    shown["claims"] = shown["claims"].str.replace("*", r"\*", regex=False)  # not emphasis
    for i, j in bold:
        shown.iat[i, j] = f"**{shown.iat[i, j]}**"
    md = f"# {study.name}: paper table\n\n{md_table(shown)}\n\n*{caption}*\n"
    (folder / TABLE_MD).write_text(md)
    header = list(table.columns)
    body = [[str(v) for v in r] for r in table.itertuples(index=False)]
    claims = header.index("claims")
    for r in body:
        r[claims] = marks(r[claims])
    align = "l" + "r" * (len(header) - 2) + "l"
    tex = booktabs(
        header, body, align=align, caption=caption, label=f"tab:{study.name}", bold=bold,
        raw={claims},
    )  # fmt: skip
    (folder / TABLE_TEX).write_text(tex)


def answer_frame(
    study: StudyData, checks: list[ClaimCheck], standings: dict[str, Standing]
) -> pd.DataFrame:
    """``answer.csv``: the Answer's rows as data, with the study's scale."""
    scale = scale_figures(study) or {}
    rows = []
    for ch in checks:
        s = standings.get(ch.claim.id)
        confirmatory = bool(s is not None and s.confirmatory)
        cells, e = claim_row(ch, confirmatory), effect_of(ch)
        rows.append(
            {
                "study": study.name,
                "id": ch.claim.id,
                "kind": e.kind,
                "x": e.x,
                "sign": e.sign,
                "y": e.y,
                "condition": cells["condition"],
                "effect": e.diff,
                "lo": e.lo,
                "hi": e.hi,
                "n": cells["n"],
                "Holm p": cells["Holm p"],
                "exact Holm p": cells["exact Holm p"],
                "verdict": cells["verdict"],
                "t-test decides": settled(ch.t_outcome),
                "exact test decides": bool(ch.exact_outcome) and settled(ch.exact_outcome),
                "confirmatory": confirmatory,
                "tag": tag(ch, s),
            }  # fmt: skip
            | {k: scale.get(k, "") for k in ("device", "params", "tokens", "passes")}
        )
    return pd.DataFrame(rows, columns=ANSWER_COLUMNS)


def write_paper_tables(
    study: StudyData, checks: list[ClaimCheck], standings: dict[str, Standing], folder: Path
) -> None:
    """The study's ``table.md``, ``table.tex`` and (with claims) ``answer.csv``."""
    write_paper_table(study, checks, folder)
    if checks:
        answer_frame(study, checks, standings).to_csv(folder / ANSWER_CSV, index=False)
