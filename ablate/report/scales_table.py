"""``<reports>/table.md`` and ``table.tex``: every study's claims across scales, the paper table
of a whole reports folder. One column group per scale (the reports in the folder, then those
of each subfolder, e.g. ``gpu/``: named by the device their runs trained on, CPU or GPU), side
by side: each claim's effect a − b with its 95% t-interval, n and the verdict; above each
study's claims, its scale at each: parameters, training tokens per run and passes over the
training tokens.

Read from each ``<study>/answer.csv`` (written by :func:`ablate.report.build.build_report`
from the study's store, :mod:`ablate.report.paper_tables`), never from a store, as the claims
index (:mod:`ablate.report.index`) is: it states no number its reports did not compute. A
claim's effect is shown in the orientation of the first scale that has it (another scale's
sides swapped back, its sign with them: ``answer.csv`` records each row's orientation).
Rewritten whenever ``ablate report`` builds a report.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import pandas as pd

from ablate.report.answer import fmt_effect
from ablate.report.latex import booktabs
from ablate.report.paper_tables import ANSWER_CSV
from ablate.report.render import md_table

TABLE_MD, TABLE_TEX = "table.md", "table.tex"


def _frames(folder: Path) -> dict[str, pd.DataFrame]:
    return {
        p.parent.name: pd.read_csv(p, keep_default_na=False)
        for p in sorted(folder.glob(f"*/{ANSWER_CSV}"))
        if not p.parent.name.startswith(".")
    }


def scales(folder: Path) -> list[tuple[str, dict[str, pd.DataFrame]]]:
    """(name, {study: answer rows}) per scale: the folder's reports, then each subfolder's;
    a scale is named by its runs' device where they agree, else by its folder."""
    here = _frames(folder)
    found = [("", here)] if here else []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in here):
        if not sub.name.startswith(".") and (frames := _frames(sub)):
            found.append((sub.name, frames))
    named = []
    for sub, frames in found:
        devices = {str(d) for f in frames.values() for d in f["device"] if str(d)}
        name = devices.pop() if len(devices) == 1 else (f"{sub}/" if sub else "this folder")
        named.append((name, frames))
    if len({n for n, _ in named}) < len(named):  # two CPU folders: the folder names tell
        named = [(f"{n} ({sub or '.'}/)", f) for (n, f), (sub, _) in zip(named, found, strict=True)]
    return named


def _effect(row: dict, flip: bool) -> str:
    effect, lo, hi = (float(row[k]) if row[k] != "" else math.nan for k in ("effect", "lo", "hi"))
    if not math.isfinite(effect):
        return "—"
    if flip:
        effect, lo, hi = -effect, -hi, -lo
    d, lo_text, hi_text = fmt_effect(effect, lo, hi)
    return f"{d} [{lo_text}, {hi_text}]" if math.isfinite(lo) else d


def _flipped(row: dict, first: dict) -> bool:
    """Whether ``row`` shows its claim the other way round from ``first`` (the sign each
    applied to the claim engine's a − b: its arms' labels may differ between profiles)."""
    return float(row["sign"]) != float(first["sign"])


def table_rows(found: list[tuple[str, dict[str, pd.DataFrame]]]) -> tuple[list[str], list]:
    """(header, rows; None between studies): module doc."""
    header = ["study", "claim", "condition"]
    for name, _ in found:
        header += [f"{name}: a − b [95% CI]", f"{name}: n", f"{name}: verdict"]
    rows: list = []
    studies = sorted({s for _, frames in found for s in frames})
    for study in studies:
        per = [
            {r["id"]: r for r in f.get(study, pd.DataFrame()).to_dict("records")} for _, f in found
        ]
        ids = list(dict.fromkeys(i for p in per for i in p))
        if rows:
            rows.append(None)
        scale = [study, "scale", ""]
        for p in per:
            r = next(iter(p.values()), None)
            scale += [_scale(r), "", ""] if r else ["not run", "", ""]
        rows.append(scale)
        for cid in ids:
            first = next(p[cid] for p in per if cid in p)
            row = ["", cid, first["condition"]]
            for p in per:
                r = p.get(cid)
                row += (
                    [_effect(r, _flipped(r, first)), str(r["n"]), r["verdict"]]
                    if r
                    else ["not run", "", ""]
                )
            rows.append(row)
    return header, rows


def _scale(row: dict) -> str:
    passes = f", {row['passes']} passes" if str(row.get("passes", "")) else ""
    return f"{row['params']} params, {row['tokens']} tokens{passes}"


def scales_markdown(header: list[str], rows: list) -> str:
    body = pd.DataFrame([r for r in rows if r is not None], columns=header)
    return (
        "# Claims across studies and scales\n\n"
        "Each study's claims at each scale, side by side, read from every `<study>/answer.csv` "
        "(computed by `ablate report` from the study's store): the effect a − b with its 95% "
        "t-interval (in the first scale's orientation), n seeds, the verdict (Holm over the "
        "study's claims); each study's first row: its scale (parameters, training tokens per "
        "run, passes over the training tokens). Each report's provenance.md says how its "
        "claims were registered.\n\n" + md_table(body) + "\n"
    )


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_scales_table(out: Path) -> Path | None:
    """Write ``out/table.md`` and ``out/table.tex`` (atomically; None without any
    ``answer.csv``); a parent folder's tables that list this one are rewritten too."""
    out = Path(out)
    path = _write_tables(out)
    if (out.parent / TABLE_MD).is_file():
        _write_tables(out.parent)
    return path


def _write_tables(folder: Path) -> Path | None:
    found = scales(folder)
    if not found:
        return None
    header, rows = table_rows(found)
    _write(folder / TABLE_MD, scales_markdown(header, rows))
    align = "llp{3.4cm}" + "p{2.6cm}rp{2.4cm}" * len(found)
    caption = (
        "Claims across studies and scales: effect a - b with its 95% t-interval, n seeds and "
        "the verdict (Holm over each study's claims); each study's first row gives its scale."
    )
    _write(
        folder / TABLE_TEX,
        booktabs(header, rows, align=align, caption=caption, label="tab:claims-across-scales"),
    )
    return folder / TABLE_MD
