"""Turn a study's tables, comparisons and figures into ``report.md`` and ``report.html``.

The report is built once as a list of blocks (heading, paragraph, list, table, figure) and then
written twice: as Markdown next to its PNGs, and as one self-contained HTML file with the
figures embedded as base64 PNG. Order: title, partial-results marker, description, how to read,
headline verdicts, tables, figures with captions, the list of runs.
"""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ablate.report.collect import (
    StudyData,
    display_names,
    format_value,
    length_multiple,
    loss_unit,
    value_order,
    variant_order,
)
from ablate.report.comparisons import Comparison
from ablate.report.plots import FigureFile
from ablate.report.render_claims import claim_items, extra_seed_items, lr_table
from ablate.report.repro import environment_table, reproducibility_text
from ablate.report.stats import ALPHA, SEED, one_sample, summarize
from ablate.report.verdicts import Verdict, verdict
from ablate.store import UNFINISHED_STATES

PRIMARY = "final_val_loss"
QUALITY = [  # (column, header, decimals)
    ("final_val_loss", "final val loss", 4),
    ("best_val_loss", "best val loss", 4),
    ("final_val_ppl", "final val ppl", 2),
    ("final_val_bpc", "final val bpc", 4),
]
COST = ["steps", "wall_time_s", "tokens_per_s", "params", "params_non_embedding"]


# --- blocks ------------------------------------------------------------------------------------


@dataclass
class Block:
    kind: str  # h1 h2 p note ul table fig
    content: Any
    caption: str = ""


# --- formatting --------------------------------------------------------------------------------


def _isnum(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def fmt_ci(mean: float, std: float, lo: float, hi: float, n: int, d: int = 4) -> str:
    """``'1.2345 ± 0.0100 [1.2097, 1.2593]'``; one seed: ``'1.2345 (1 seed)'``; none: ``'—'``."""
    if n == 0 or not _isnum(mean):
        return "—"
    if n == 1 or not _isnum(lo):
        return f"{mean:.{d}f} (1 seed)"
    return f"{mean:.{d}f} ± {std:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]"


def fmt_seconds(s: float) -> str:
    if not _isnum(s):
        return "—"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


def fmt_count(x: float) -> str:
    """``1234567 -> '1.23M'``."""
    if not _isnum(x):
        return "—"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.0f}"


def fmt_stat(r: pd.Series, col: str, f) -> str:
    """``'mean ± std [lo, hi]'`` of summary column ``col`` with formatter ``f``; the interval
    is left out when it is empty (one seed, or every seed the same, e.g. steps). Costs cannot
    be negative, so the t-interval's lower end is cut at 0."""
    mean, std, lo, hi, n = (r[f"{col}_{k}"] for k in ("mean", "std", "lo", "hi", "n"))
    lo = max(lo, 0.0) if _isnum(lo) else lo
    if n == 0 or not _isnum(mean):
        return "—"
    if n == 1 or not _isnum(std):
        return f(mean)
    if std == 0:
        return f"{f(mean)} ± 0"
    return f"{f(mean)} ± {f(std)} [{f(lo)}, {f(hi)}]"


def where_text(c: Comparison, study: StudyData) -> str:
    if not c.context:
        return ""
    names = display_names(study.axes)
    return "at " + ", ".join(f"{names[k]}={format_value(v)}" for k, v in c.context.items())


# --- tables ------------------------------------------------------------------------------------


def _status_cells(row: pd.Series) -> tuple[str, str]:
    """('diverged' cell, 'other' cell): '2/3 (steps 40, 55)' and '1 running, 1 failed'."""
    finished = int(row["completed"] + row["diverged"])
    div = "0" if not row["diverged"] else f"{int(row['diverged'])}/{finished}"
    steps = row.get("diverged_steps") or []
    if steps:
        div += f" (step {', '.join(str(s) for s in steps)})"
    other = ", ".join(f"{int(row[s])} {s}" for s in UNFINISHED_STATES if row.get(s, 0))
    return div, other or "—"


def variant_tables(study: StudyData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(quality table, cost table), one row per variant, formatted as strings."""
    runs = study.runs
    names = display_names(study.axes)
    axes = study.varying_axes
    quality = [(c, h, d) for c, h, d in QUALITY if c in runs and runs[c].notna().any()]
    cost = [c for c in COST if c in runs]
    summ = summarize(runs, ["variant", *axes], [c for c, _, _ in quality] + cost)
    order = {v: i for i, v in enumerate(variant_order(runs))}
    summ = summ.sort_values("variant", key=lambda s: s.map(order)).reset_index(drop=True)
    q_rows, c_rows = [], []
    for _, r in summ.iterrows():
        ident = {"variant": r["variant"], **{names[a]: format_value(r[a]) for a in axes}}
        div, other = _status_cells(r)
        n = int(r["completed"])
        q = {**ident, "seeds": int(r["total"]), "diverged": div, "not finished": other, "n": n}
        for c, h, d in quality:
            cell = fmt_ci(r[f"{c}_mean"], r[f"{c}_std"], r[f"{c}_lo"], r[f"{c}_hi"], r[f"{c}_n"], d)
            if r[f"{c}_n"] == 1 and r["diverged"]:
                cell = cell.replace("(1 seed)", "(1 finite seed only)")
            elif r[f"{c}_n"] and r["diverged"]:
                cell += f" (mean of {int(r[f'{c}_n'])} finite)"
            elif r[f"{c}_n"] and r[f"{c}_n"] != n:
                cell += f" (n={int(r[f'{c}_n'])})"
            elif not r[f"{c}_n"] and r["diverged"] and not r["completed"]:
                cell = "diverged"
            q[h] = cell
        q_rows.append(q)
        cr = {**ident, "n": n}
        if "steps" in cost:
            cr["steps"] = fmt_stat(r, "steps", lambda v: f"{v:.0f}")
        if "wall_time_s" in cost:
            cr["wall time"] = fmt_stat(r, "wall_time_s", fmt_seconds)
        if "tokens_per_s" in cost:
            cr["tokens/s"] = fmt_stat(r, "tokens_per_s", lambda v: f"{v:,.0f}")
        for c, h in (("params", "params"), ("params_non_embedding", "non-embedding params")):
            if c in cost:
                cr[h] = fmt_count(r[f"{c}_mean"]) if r[f"{c}_n"] else "—"
        c_rows.append(cr)
    return pd.DataFrame(q_rows), pd.DataFrame(c_rows)


def reference_table(study: StudyData) -> pd.DataFrame:
    """One row per variant: its completed seeds' final val loss against ``study.reference``."""
    ref = study.reference
    if ref is None:
        raise ValueError(f"study {study.name!r} has no reference value")
    runs = study.runs
    done = runs[runs["status"] == "completed"]
    rows = []
    for variant in variant_order(runs):
        vals = done.loc[done["variant"] == variant, "final_val_loss"].tolist()
        r = one_sample(vals, ref.value)
        below = sum(1 for v in vals if v <= ref.value)
        if r.n < 2:
            says = "too few seeds"
        elif r.hi < 0:
            says = "below the reference"
        elif r.lo > 0:
            says = "above the reference"
        else:
            says = "not distinguishable"
        rows.append(
            {
                "variant": variant,
                "n": r.n,
                "final val loss": f"{r.mean:.4f}" if r.n else "—",
                "reference": f"{ref.value:g}",
                "difference [95% CI]": (
                    f"{r.diff:+.4f} [{r.lo:+.4f}, {r.hi:+.4f}]" if r.n >= 2 else "—"
                ),
                "p": f"{r.p:.3g}" if _isnum(r.p) else "—",
                "seeds at or below": f"{below}/{r.n}",
                "verdict": says,
            }
        )
    return pd.DataFrame(rows)


def length_table(study: StudyData) -> pd.DataFrame | None:
    """Rows = variant, columns = evaluation length multiples: mean [95% t-CI] (n)."""
    cols = study.length_columns
    if not cols:
        return None
    runs = study.runs
    summ = summarize(runs, ["variant"], cols)
    order = {v: i for i, v in enumerate(variant_order(runs))}
    summ = summ.sort_values("variant", key=lambda s: s.map(order))
    rows = []
    for _, r in summ.iterrows():
        grp = runs[(runs["variant"] == r["variant"]) & (runs["status"] == "completed")]
        learned = (grp["cfg.pos_encoding"] == "learned").any()
        row = {"variant": r["variant"], "n": int(r["completed"])}
        for c in cols:
            label = f"{length_multiple(c):g}×"
            if r[f"{c}_n"]:
                row[label] = fmt_ci(
                    r[f"{c}_mean"], r[f"{c}_std"], r[f"{c}_lo"], r[f"{c}_hi"], r[f"{c}_n"]
                )
            elif not len(grp):
                row[label] = "—"
            elif learned:
                row[label] = "n/a (learned: no positions past max_seq_len)"
            else:
                row[label] = "n/a (not evaluated at this length)"
        rows.append(row)
    return pd.DataFrame(rows)


def comparisons_table(comps: list[tuple[Comparison, Verdict]], study: StudyData) -> pd.DataFrame:
    names = display_names(study.axes)
    rows = []
    for c, v in comps:
        rows.append(
            {
                "axis": names.get(c.axis, c.axis),
                "held fixed": ", ".join(
                    f"{names[k]}={format_value(x)}" for k, x in c.context.items()
                )
                or "—",
                "a vs b": f"{c.label_a} vs {c.label_b}",
                "n (diverged)": f"{c.n_a} ({c.diverged_a}) vs {c.n_b} ({c.diverged_b})",
                "mean a": f"{c.mean_a:.4f}" if _isnum(c.mean_a) else "—",
                "mean b": f"{c.mean_b:.4f}" if _isnum(c.mean_b) else "—",
                "a − b": f"{c.diff:+.4f}" if _isnum(c.diff) else "—",
                "95% t-CI": f"[{c.ci_lo:+.4f}, {c.ci_hi:+.4f}]" if _isnum(c.ci_lo) else "—",
                "test (df)": f"{c.test} ({c.df:.1f})" if _isnum(c.df) else c.test or "—",
                "p": f"{c.p:.3g}" if _isnum(c.p) else "—",
                "Holm p": f"{c.p_adj:.3g}" if _isnum(c.p_adj) else "—",
                f"TOST ±{c.margin:g} Holm p": (
                    f"{c.p_tost_adj:.3g}" if _isnum(c.p_tost_adj) else "—"
                ),
                "bootstrap CI (secondary)": (
                    f"[{c.boot_lo:+.4f}, {c.boot_hi:+.4f}]" if _isnum(c.boot_lo) else "—"
                ),
                "verdict": v.kind.replace("_", " ")
                + (f" (≈{v.seeds_needed} seeds)" if v.seeds_needed else ""),
            }
        )
    return pd.DataFrame(rows)


def runs_table(study: StudyData) -> pd.DataFrame:
    rows = []
    for _, r in study.runs.iterrows():
        note = ""
        if r["status"] == "diverged" and _isnum(r.get("diverged_step")):
            note = f"diverged at step {int(r['diverged_step'])}"
        elif isinstance(r.get("error"), str) and r["error"]:
            note = r["error"][:120]
        elif r.get("stopped_early") is True or r.get("stopped_early") == 1.0:
            note = "stopped early"
        rows.append(
            {
                "run": r["run_id"],
                "variant": r["variant"],
                "seed": format_value(r["seed"]),
                "status": r["status"],
                "final val loss": f"{r['final_val_loss']:.4f}"
                if _isnum(r.get("final_val_loss"))
                else "—",
                "steps": f"{r['steps']:.0f}" if _isnum(r.get("steps")) else "—",
                "wall time": fmt_seconds(r.get("wall_time_s")),
                "note": note,
            }
        )
    return pd.DataFrame(rows)


# --- the report --------------------------------------------------------------------------------


def progress_line(study: StudyData) -> str | None:
    """``'PARTIAL: 4 of 12 runs finished; 1 running, 2 pending'`` or None when all finished."""
    c = study.status_counts()
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


HOW_TO_READ = (
    "**How to read this report.** Each number is the mean over seeds ± the sample standard "
    "deviation, then the 95% t-interval over seeds [lo, hi] (mean ± t·s/√n); n is the number of "
    "seeds behind it. Lower loss is better. Comparisons pair variants that differ in one axis "
    "only, everything else fixed: a paired t-test on per-seed differences when both sides have "
    "the same seeds (same data order), else Welch's t-test; the interval is the 95% t-interval "
    "of the difference. p-values are Holm–Bonferroni corrected over every comparison and claim "
    f"of the report and verdicts use the corrected p (α = {ALPHA:g}): *better*/*worse* when it "
    "is below α, *equivalent within ±m* when the two one-sided tests (TOST) against the study's "
    "equivalence margin m pass, otherwise *inconclusive*, with the seeds per variant that would "
    "decide it at 80% power. Diverged runs are counted and reported, never averaged in. Figure "
    "bands and bars are the same 95% t-intervals over seeds; the percentile bootstrap CI (seed "
    f"{SEED}) is a secondary column only."
)


def _axes_line(study: StudyData) -> str:
    parts = []
    for a in study.axes:
        vals = ", ".join(format_value(v) for v in value_order(study.runs[a]))
        parts.append(f"`{a}` ({vals})" if a in study.varying_axes else f"`{a}` = {vals}")
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


def _against_the_paper(study: StudyData, checks: list, unit: str) -> list[Block]:
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


def build_blocks(
    study: StudyData,
    comps: list[Comparison],
    figures: list[FigureFile],
    checks: list | None = None,
) -> list[Block]:
    unit = loss_unit(study).split("/")[0]
    names = display_names(study.axes)
    verdicts = [(c, verdict(c, unit=unit, where=where_text(c, study))) for c in comps]
    blocks = [Block("h1", f"{study.name}: ablation report")]
    partial = progress_line(study)
    if partial:
        blocks.append(Block("note", f"**{partial}**"))
    from ablate.store.provenance import stale_note  # runs made by other model/training code

    if stale := stale_note(study.path):
        blocks.append(Block("note", f"**{stale}**"))
    if study.description:
        blocks.append(Block("p", study.description))
    blocks.extend(_against_the_paper(study, checks or [], unit))
    blocks.append(Block("p", HOW_TO_READ))
    blocks.append(Block("p", _axes_line(study)))

    blocks.append(Block("h2", "Verdicts"))
    if not verdicts:
        why = "no axis varies" if not study.varying_axes else "no finished runs to compare yet"
        blocks.append(Block("p", f"No comparisons: {why}."))
    else:
        ranked = sorted(verdicts, key=lambda cv: _ORDER[cv[1].kind])
        shown = ranked[:MAX_HEADLINES]
        items = [f"**{names.get(c.axis, c.axis)}**: {v.text}" for c, v in shown]
        if len(ranked) > len(shown):
            items.append(f"… {len(ranked) - len(shown)} more in the comparisons table below.")
        for axis in study.varying_axes:
            if not any(c.axis == axis for c in comps):
                items.append(
                    f"**{names[axis]}**: no pair of finished runs differs in this axis alone "
                    "(its values never share the other axes' values), so no comparison."
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

    extra = extra_seed_items(study)
    if extra:
        blocks.append(Block("h2", "Extra seeds (--until-decided)"))
        blocks.append(
            Block(
                "p",
                "After the study's seeds, `ablate run --until-decided` added seeds only to the "
                "variants of inconclusive comparisons or claims, re-analysing after each round:",
            )
        )
        blocks.append(Block("ul", extra))
    blocks.append(Block("h2", "Results per variant"))
    quality, cost = variant_tables(study)
    blocks.append(
        Block(
            "table",
            quality,
            "Validation quality per variant: mean ± std [95% t-CI over seeds]; n = completed "
            "seeds behind the numbers; diverged runs counted (step of divergence), not averaged.",
        )
    )
    blocks.append(
        Block(
            "table",
            cost,
            "Cost per variant over completed seeds: mean ± std [95% t-CI over seeds]; "
            "params: per run (the same for every seed).",
        )
    )
    if study.reference is not None:
        ref = study.reference
        blocks.append(Block("h2", f"Against the reference value ({ref.label}: {ref.value:g})"))
        blocks.append(
            Block(
                "table",
                reference_table(study),
                f"Final validation loss per variant minus the reference {ref.value:g} "
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
                "Validation loss when evaluated at multiples of the training length: mean ± std "
                "[95% t-CI over seeds]. Learned absolute positions have no embedding past "
                "max_seq_len, so they cannot be evaluated there (n/a).",
            )
        )
    if verdicts:
        blocks.append(Block("h2", "Comparisons"))
        blocks.append(
            Block(
                "table",
                comparisons_table(verdicts, study),
                "Each axis, every pair of its values, all other axes held fixed. a − b: "
                "difference of mean final validation loss (negative = a better) with its 95% "
                "t-interval (paired t on per-seed differences when both sides have the same "
                "seeds, else Welch); p raw and Holm-corrected over all comparisons and claims; "
                "TOST: equivalence within the margin; the percentile bootstrap CI (9999 "
                f"resamples, seed {SEED}) is secondary and too narrow at few seeds.",
            )
        )
    if figures:
        blocks.append(Block("h2", "Figures"))
        for f in figures:
            blocks.append(Block("fig", f, f.caption))
    blocks.append(Block("h2", "Reproducibility"))
    blocks.append(Block("p", reproducibility_text(study)))
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
    blocks.append(Block("h2", "Runs"))
    blocks.append(Block("table", runs_table(study), "Every run in the store for this study."))
    return blocks


# --- markdown ----------------------------------------------------------------------------------


def _md_cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(_md_cell(c) for c in cols) + " |"]
    lines.append("| " + " | ".join("---" for _ in cols) + " |")
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
    return "\n".join(lines)


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    n_fig = 0
    for b in blocks:
        if b.kind == "h1":
            out.append(f"# {b.content}")
        elif b.kind == "h2":
            out.append(f"## {b.content}")
        elif b.kind == "p":
            out.append(str(b.content))
        elif b.kind == "note":
            out.append(f"> {b.content}")
        elif b.kind == "ul":
            out.append("\n".join(f"- {item}" for item in b.content))
        elif b.kind == "table":
            out.append(md_table(b.content) if len(b.content) else "(no rows)")
            if b.caption:
                out.append(f"*{b.caption}*")
        elif b.kind == "fig":
            n_fig += 1
            f: FigureFile = b.content
            out.append(f"![{f.title}]({f.path.name})\n\n*Figure {n_fig}: {b.caption}*")
    return "\n\n".join(out) + "\n"


# --- html --------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1400px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
p,ul,figure{max-width:1000px}
h1{font-size:1.6em}
h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.table-wrap{overflow-x:auto;margin:.6em 0;max-width:100%}
table{border-collapse:collapse;font-size:.8em}
th,td{border:1px solid #ddd;padding:.3em .55em;text-align:left;vertical-align:top}
th{background:#f4f4f4;white-space:nowrap}tr:nth-child(even) td{background:#fafafa}
th[title]{text-decoration:underline dotted;cursor:help}
td.num{white-space:nowrap}td.text{min-width:12em;max-width:32em}
.legend{font-size:.8em;color:#555;margin:.2em 0 1em}
.caption,figcaption{font-size:.85em;color:#555;font-style:italic;margin-bottom:1em}
.note{background:#fff4d6;border-left:4px solid #e0a800;padding:.5em .8em}
figure{margin:1.2em 0}img{max-width:100%;height:auto}code{background:#f2f2f2;padding:0 .2em}
"""


def _inline(text: str) -> str:
    s = html.escape(str(text))
    s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    return s


# long column names -> what the HTML header shows; the full name is its tooltip and legend
_HTML_ABBREV = {
    "final val loss": "final loss",
    "best val loss": "best loss",
    "final val bpc": "bpc",
    "final val ppl": "ppl",
    "non-embedding params": "non-emb params",
    "95% bootstrap CI": "boot. CI",
    "Welch t (df)": "Welch t",
    "not finished": "unfinished",
    "n (diverged)": "n (div.)",
    "wall time": "wall",
    "warmup_ratio": "warmup",
    "norm_placement": "norm",
    "pos_encoding": "pos enc",
    "activation": "act",
}
# a cell that starts like a number (mean ± std [lo, hi], 1.23e-3, −0.05) never wraps
_NUMERIC_CELL = re.compile(r"^[-+−]?(\d|\.\d|nan|inf|—$|-$)")


def _html_cell(v: Any) -> str:
    text = str(v)
    cls = "num" if _NUMERIC_CELL.match(text) or len(text) <= 24 else "text"
    return f'<td class="{cls}">{html.escape(text)}</td>'


def _html_table(df: pd.DataFrame) -> str:
    """A table that fits: short headers (full names in a tooltip and a legend), numbers on one
    line, and a horizontal scroll inside its own box when the page is narrower than the table."""
    if not len(df):
        return "<p>(no rows)</p>"
    heads, legend = [], []
    for c in map(str, df.columns):
        short = _HTML_ABBREV.get(c)
        if short is None:
            heads.append(f"<th>{html.escape(c)}</th>")
        else:
            heads.append(f'<th title="{html.escape(c)}">{html.escape(short)}</th>')
            legend.append(f"{html.escape(short)} = {html.escape(c)}")
    body = "".join(
        "<tr>" + "".join(_html_cell(v) for v in row) + "</tr>" for row in df.itertuples(index=False)
    )
    table = f"<table><thead><tr>{''.join(heads)}</tr></thead><tbody>{body}</tbody></table>"
    note = f'<p class="legend">{"; ".join(legend)}</p>' if legend else ""
    return f'<div class="table-wrap">{table}</div>{note}'


def to_html(blocks: list[Block], title: str) -> str:
    parts = []
    n_fig = 0
    for b in blocks:
        if b.kind in ("h1", "h2"):
            parts.append(f"<{b.kind}>{_inline(b.content)}</{b.kind}>")
        elif b.kind == "p":
            paras = str(b.content).split("\n\n")
            parts.extend(f"<p>{_inline(p)}</p>" for p in paras)
        elif b.kind == "note":
            parts.append(f'<p class="note">{_inline(b.content)}</p>')
        elif b.kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.content) + "</ul>")
        elif b.kind == "table":
            parts.append(_html_table(b.content))
            if b.caption:
                parts.append(f'<p class="caption">{_inline(b.caption)}</p>')
        elif b.kind == "fig":
            n_fig += 1
            f: FigureFile = b.content
            data = base64.b64encode(f.path.read_bytes()).decode("ascii")
            parts.append(
                f'<figure><img alt="{html.escape(f.title)}" src="data:image/png;base64,{data}">'
                f"<figcaption>Figure {n_fig}: {_inline(b.caption)}</figcaption></figure>"
            )
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
